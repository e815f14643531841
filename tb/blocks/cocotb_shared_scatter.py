"""cocotb bench for the shared Scatter Path (rnic.resp.scatter.SharedScatter) with HostMemory and
the hostile AxiRam of sim/hostmem.py (tb/blocks/test_execute.py builds the harness).

The bench plays PSN Check's payload router (whole packets, one at a time, on ``pay0`` or
``pay1`` by owner, with gaps: cocotbext-axi sources) and both clients (each sends its packets'
pieces and write requests in its own order, at its own pace). A Python model cuts every packet and
gives the bytes each write must leave in host memory; every write region has guards around it, one
region answers SLVERR. Checked: host memory byte for byte, no write outside the regions, each
client's ``done`` in its request order with its tag (bit 7 = the client) and ``err`` where the
fault is, each client's ``pkt_done`` count, the AXI rules.
"""
import random

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rnic.host import done_layout, req_layout
from rnic.resp.scatter import CLIENT_TAG_BIT, piece_layout
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from tb.blocks.cocotb_axi_master import Sink, Source, reset

W = knob("EXECUTE_WIDTH")
B = W // 8
BUS = 0x0020_0000
REGION = 0x2000                               # one write region per piece, guards between
FAULT = 7                                     # the region index that answers SLVERR


async def route(sources, packets):
    """PSN Check's payload router: ``packets`` {owner, payload} one at a time, each on the
    source of its owner (``pay0``/``pay1``), the next only once the previous one's beats are
    all taken."""
    for owner, payload in packets:
        await sources[owner].send(AxiStreamFrame(payload))
        await sources[owner].wait()


class PktCounter:
    """Counts the ``pkt_done`` pulses of each client."""

    def __init__(self, dut):
        self.dut = dut
        self.n = [0, 0]
        cocotb.start_soon(self._run())

    async def _run(self):
        while True:
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            for i in (0, 1):
                if int(getattr(self.dut, f"client{i}__pkt_done").value):
                    self.n[i] += 1


def _cut(rng, plen):
    """Pieces (src, len) of a packet of ``plen`` bytes, in order, and whether the tail after the
    last one is dropped (then a closing piece of length 0 follows; else the last piece ends
    the packet)."""
    cuts = sorted(rng.sample(range(1, plen), min(plen - 1, rng.randint(0, 2))))
    bounds = [0] + cuts + [plen]
    parts = [(a, b - a) for a, b in zip(bounds, bounds[1:])]
    drop = False
    if rng.random() < 0.25:
        parts = parts[:-1]                    # the tail (or the whole payload) is dropped
        drop = True
    elif rng.random() < 0.3:
        drop = True                           # a separate closing piece, nothing dropped
    return parts, drop


@cocotb.test()
async def shared(dut):
    """Random packets of both clients, interleaved in arrival order, under a hostile memory."""
    rng = random.Random(knob("EXECUTE_SEED"))
    await reset(dut)
    mem = HostMem(dut, "m_axi", dut.clk, dut.rst, seed=5, max_latency=20, backpressure=True,
                  interleave=True)
    mem.add_fault(BUS + FAULT * REGION, REGION, "w", AxiResp.SLVERR)
    pay = []
    for i in (0, 1):
        src = AxiStreamSource(AxiStreamBus.from_prefix(dut, f"pay{i}"), dut.clk, dut.rst)
        prng = random.Random(rng.random())
        src.set_pause_generator(iter(lambda prng=prng: prng.random() < 0.15, None))
        pay.append(src)
    packets = []
    piece = [Source(dut, f"client{i}__piece", piece_layout, dut.clk,
                    rng=random.Random(rng.random()), idle=0.3) for i in (0, 1)]
    req = [Source(dut, f"client{i}__req", req_layout, dut.clk,
                  rng=random.Random(rng.random()), idle=0.3) for i in (0, 1)]
    done = [Sink(dut, f"client{i}__done", done_layout, dut.clk,
                 rng=random.Random(rng.random()), stall=0.3) for i in (0, 1)]
    pkts = PktCounter(dut)

    expect = []                               # (addr, bytes) each write must leave
    exp_done = [[], []]                       # per client: (tag, err) in request order
    exp_pkts = [0, 0]
    region = 0
    for k in range(90):
        owner = rng.randrange(2)
        plen = rng.choice([1, B - 1, B, B + 1, 2 * B + 3, rng.randrange(1, 600)])
        payload = rng.randbytes(plen)
        parts, closing = _cut(rng, plen)
        packets.append((owner, payload))
        exp_pkts[owner] += 1
        pieces = []
        for j, (src, n) in enumerate(parts):
            lane = rng.randrange(B)
            addr = BUS + region * REGION + 0x100 + lane
            mem.add_guard(addr - 0x100, 0x100)
            mem.add_guard(addr + n, 0x100)
            tag = rng.randrange(256)              # bit 7 is the shared path's
            req[owner].put(dict(addr=addr, len_bytes=n, tag=tag))
            err = int(region == FAULT)
            exp_done[owner].append((tag & ~(1 << CLIENT_TAG_BIT) | owner << CLIENT_TAG_BIT, err))
            if not err:
                expect.append((addr, payload[src:src + n]))
            end = int(j == len(parts) - 1 and not closing)
            pieces.append(dict(src=src, len=n, lane=lane, end=end))
            region += 1
        if closing or not parts:
            pieces.append(dict(src=0, len=0, lane=0, end=1))
        for p in pieces:
            piece[owner].put(p)

    router = cocotb.start_soon(route(pay, packets))
    total = sum(len(e) for e in exp_done)
    for _ in range(200000):
        if (sum(len(d.items) for d in done) >= total and sum(pkts.n) >= sum(exp_pkts)
                and router.done()):
            break
        await RisingEdge(dut.clk)
    else:
        raise AssertionError(f"timeout: {[len(d.items) for d in done]} done of "
                             f"{[len(e) for e in exp_done]}, packets {pkts.n} of {exp_pkts}")
    await ClockCycles(dut.clk, 100)
    mem.check()
    for i in (0, 1):
        got = [(d["tag"], d["err"]) for d in done[i].items]
        assert got == exp_done[i], f"client {i}: done {got[:8]} expected {exp_done[i][:8]}"
    assert pkts.n == exp_pkts, (pkts.n, exp_pkts)
    for addr, data in expect:
        assert mem.read(addr, len(data)) == data, f"{addr:#x}: placed bytes differ"
    ids = {awid for _, _, awid in mem.writes}
    assert ids == {0}, ids
    dut._log.info("W=%d: %d packets (%d, %d), %d writes", W, sum(exp_pkts), *exp_pkts, total)
