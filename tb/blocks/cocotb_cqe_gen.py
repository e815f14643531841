"""cocotb bench for CQE Generation: rings, phase, overflow, arming, faults (interface.md §5.4).

The reference is a Python model of each CQ (producer, consumer, reservations, arm) and a
``struct``-built 32-byte CQE; host memory is sim/hostmem.py's HostMem (latency, back-pressure).
"""
import random
import struct

import cocotb
from amaranth.lib import data
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

from rnic.host.cqe_gen import cqe_layout
from rnic.ifaces import event_layout, qpn_layout
from sim.hostmem import AxiResp, HostMem
from sim.knobs import knob
from tb.blocks.cocotb_axi_master import Sink, Source, reset, wait_until
from tb.blocks.cocotb_mailbox import ArgRegs, CommandSink, CommandSource

W = knob("CQE_GEN_WIDTH")
NUM_CQ = knob("CQE_GEN_NUM_CQ")
SUCCESS, LOC_QP_OP_ERR, WR_FLUSH_ERR, REM_ACCESS_ERR = 0, 2, 5, 10
RECV, RECV_RDMA_WITH_IMM, SEND = 128, 129, 0
WITH_IMM, WITH_INV = 0x02, 0x04


def cqe_ref(c, phase):
    """The 32 bytes of §5.4, built independently of the RTL."""
    status = c.get("status", 0)
    flags = c.get("flags", 0)
    if status:
        byte_len, field, flags = 0, bytes(4), 0
    else:
        byte_len = c.get("byte_len", 0)
        v = c.get("imm_or_rkey", 0)
        field = v.to_bytes(4, "big") if flags & WITH_IMM else v.to_bytes(4, "little")
    return (struct.pack("<QI", c["wr_id"], byte_len) + field
            + struct.pack("<I", c["qpn"]) + bytes([status, c["opcode"], flags])
            + bytes(8) + bytes([phase]))


class Tb:
    def __init__(self, dut, seed):
        self.dut = dut
        clk = dut.clk
        self.rng = random.Random(seed)
        r = lambda k: random.Random(seed * 10 + k)
        self.mem = HostMem(dut, "m_axi", clk, dut.rst, seed=seed, backpressure=0.3)
        self.args = ArgRegs(dut, "cmd__", clk)
        self.cmd = CommandSource(dut, "cmd__", clk, self.args, rng=r(1), idle=0.2)
        self.resp = CommandSink(dut, "cmd__", clk, self.args, rng=r(2), stall=0.3)
        self.db = Source(dut, "cq_db", data.StructLayout({"cqn": 16, "index": 16}), clk, rng=r(3))
        self.arm = Source(dut, "cq_arm", data.StructLayout({"cqn": 16, "mode": 2}), clk, rng=r(4))
        self.rsv = Source(dut, "reserve", data.StructLayout({"cqn": 16}), clk, rng=r(5), idle=0.2)
        self.rsv_resp = Sink(dut, "reserve_resp", data.StructLayout({"ok": 1}), clk, rng=r(6),
                             stall=0.3)
        self.comp = Source(dut, "complete", cqe_layout, clk, rng=r(7), idle=0.2)
        self.events = Sink(dut, "event", event_layout, clk, rng=r(8), stall=0.3)
        self.faults = Sink(dut, "fault", qpn_layout, clk, rng=r(9), stall=0.3)
        self.count = 0
        cocotb.start_soon(self._stat())
        self.cq = {}

    async def _stat(self):
        while True:
            await FallingEdge(self.dut.clk)
            await ReadOnly()
            if int(self.dut.stat.value) >> 14 & 1:
                self.count += 1

    async def settle(self, cycles=2000):
        """Wait until every source is empty, nothing is in flight, then some quiet cycles."""
        srcs = [self.cmd, self.db, self.arm, self.rsv, self.comp]
        await wait_until(self.dut, lambda: not any(s.busy for s in srcs), 20000, "sources")
        for _ in range(cycles // 10):
            await RisingEdge(self.dut.clk)
        await wait_until(self.dut, lambda: not int(self.dut.m_axi_awvalid.value)
                         and not self.mem.write_if.aw_channel.count(), 20000, "writes")
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    async def command(self, opcode, index, args):
        n = len(self.resp.items)
        self.cmd.put({"opcode": opcode, "index": index, "args": args + [0] * (16 - len(args))})
        await wait_until(self.dut, lambda: len(self.resp.items) > n, 5000, "command response")
        return self.resp.items[-1]["result"]

    async def set_cq(self, cqn, base, log2):
        res = await self.command(0x03, cqn, [base & 0xFFFFFFFF, base >> 32, log2])
        assert res == 0
        self.mem.write(base, bytes(32 << log2))
        self.cq[cqn] = {"base": base, "log2": log2, "prod": 0, "cons": 0}

    async def reserve(self, cqn):
        n = len(self.rsv_resp.items)
        self.rsv.put({"cqn": cqn})
        await wait_until(self.dut, lambda: len(self.rsv_resp.items) > n, 5000, "reserve resp")
        return self.rsv_resp.items[-1]["ok"]

    def complete(self, **c):
        c.setdefault("qpn", 0x12345)
        c.setdefault("opcode", RECV)
        self.comp.put(c)

    def slot(self, cqn, i):
        q = self.cq[cqn]
        return q["base"] + 32 * (i % (1 << q["log2"]))

    def entry(self, cqn, i):
        return self.mem.read(self.slot(cqn, i), 32)


async def start(dut, seed):
    await reset(dut)
    tb = Tb(dut, seed)
    await wait_until(dut, lambda: not int(dut.sweeping.value), 3000, "sweep")
    return tb


@cocotb.test()
async def wrap_and_fields(dut):
    """Ring wraps three times with the phase flipping; every field of §5.4 (immediate in wire
    order, invalidated rkey little-endian, error CQEs with only wr_id/QPN/status/opcode);
    nothing written outside the ring; counter 14 once per CQE."""
    tb = await start(dut, 1)
    base = 0x10000
    await tb.set_cq(1, base, 2)                        # 4 entries
    tb.mem.add_guard(base - 0x100, 0x100)
    tb.mem.add_guard(base + 4 * 32, 0x100)
    kinds = [
        dict(opcode=RECV, byte_len=1000),
        dict(opcode=RECV, byte_len=24, flags=WITH_IMM, imm_or_rkey=0x11223344),
        dict(opcode=RECV_RDMA_WITH_IMM, byte_len=0, flags=WITH_IMM, imm_or_rkey=0xA1B2C3D4),
        dict(opcode=RECV, byte_len=4096, flags=WITH_INV, imm_or_rkey=0x2A04BEEF),
        dict(opcode=RECV, status=LOC_QP_OP_ERR, byte_len=77, flags=WITH_IMM, imm_or_rkey=5),
        dict(opcode=SEND, byte_len=64),
        dict(opcode=RECV, status=WR_FLUSH_ERR, flush=1, byte_len=9),
    ]
    expected = []
    for i in range(11):
        c = dict(kinds[i % len(kinds)], wr_id=0x0102030405060700 + i, qpn=0x100 + i, cqn=1)
        if not c.get("flush"):
            assert await tb.reserve(1) == 1
        tb.complete(**c)
        await tb.settle(200)
        phase = 1 if (i // 4) % 2 == 0 else 0
        got = tb.entry(1, i)
        assert got == cqe_ref(c, phase), f"CQE {i}: {got.hex()} != {cqe_ref(c, phase).hex()}"
        expected.append(got)
        tb.db.put({"cqn": 1, "index": i + 1})          # software consumed it
    await tb.settle(100)
    assert tb.count == 11, f"counter 14 counted {tb.count}"
    assert not tb.events.items and not tb.faults.items
    tb.mem.check()


@cocotb.test()
async def burst_of_completions(dut):
    """Many completions back to back on two CQs (several CQE writes in flight through latency
    and back-pressure): ring order per CQ, contents, phase across a wrap."""
    tb = await start(dut, 2)
    await tb.set_cq(0, 0x20000, 3)                     # 8 entries
    await tb.set_cq(3, 0x30F80, 4)                      # 16 entries, straddles a 4 KiB page
    tb.mem.add_guard(0x20000 + 8 * 32, 0x40)
    refs = {0: [], 3: []}
    for i in range(20):
        cqn = 0 if i % 2 else 3
        if cqn == 0 and len(refs[0]) == 8:
            continue
        c = dict(wr_id=tb.rng.getrandbits(64), byte_len=tb.rng.getrandbits(32),
                 imm_or_rkey=tb.rng.getrandbits(32), qpn=tb.rng.getrandbits(24),
                 flags=tb.rng.choice([0, WITH_IMM, WITH_INV]), se=tb.rng.getrandbits(1),
                 opcode=tb.rng.choice([RECV, RECV_RDMA_WITH_IMM]), cqn=cqn)
        tb.rsv.put({"cqn": cqn})
        tb.complete(**c)
        refs[cqn].append(c)
    await tb.settle(500)
    assert all(r["ok"] for r in tb.rsv_resp.items)
    for cqn, cs in refs.items():
        for i, c in enumerate(cs):
            assert tb.entry(cqn, i) == cqe_ref(c, 1), f"CQ {cqn} entry {i}"
    # CQ 3 wraps: entries 16..19 go to slots 0..3 with phase 0
    tb.db.put({"cqn": 3, "index": 10})
    for i in range(10):
        c = dict(wr_id=i, byte_len=i, qpn=7, cqn=3, se=1, opcode=RECV)
        tb.rsv.put({"cqn": 3})
        tb.complete(**c)
        refs[3].append(c)
    await tb.settle(300)
    assert all(r["ok"] for r in tb.rsv_resp.items)
    for i in range(10, 20):
        assert tb.entry(3, i) == cqe_ref(refs[3][i], 0 if i >= 16 else 1), f"entry {i}"
    assert tb.count == len(refs[0]) + len(refs[3])
    tb.mem.check()


@cocotb.test()
async def overflow(dut):
    """Full CQ: the reservation is refused with event 2; pre-reserved CQEs still land; flush
    CQEs that find it full are discarded; CQ_DB makes room again; unset CQ refuses."""
    tb = await start(dut, 3)
    base = 0x40000
    await tb.set_cq(2, base, 2)
    for _ in range(4):
        assert await tb.reserve(2) == 1
    assert await tb.reserve(2) == 0
    await tb.settle(50)
    assert [(e["type"], e["number"]) for e in tb.events.items] == [(2, 2)]
    tb.complete(cqn=2, wr_id=0xF1, flush=1, status=WR_FLUSH_ERR)   # full: dropped
    for i in range(4):
        tb.complete(cqn=2, wr_id=i, byte_len=i)
    await tb.settle(300)
    for i in range(4):
        assert tb.entry(2, i) == cqe_ref(dict(wr_id=i, byte_len=i, qpn=0x12345, opcode=RECV), 1)
    assert tb.count == 4
    tb.complete(cqn=2, wr_id=0xF2, flush=1, status=WR_FLUSH_ERR)   # still full: dropped
    tb.complete(cqn=2, wr_id=0xF3)                                 # no reservation, full
    await tb.settle(200)
    assert tb.count == 4
    assert [(e["type"], e["number"]) for e in tb.events.items] == [(2, 2), (2, 2)]
    tb.db.put({"cqn": 2, "index": 2})                              # two consumed
    tb.complete(cqn=2, wr_id=0xF4, flush=1, status=WR_FLUSH_ERR, opcode=RECV)
    await tb.settle(200)
    assert tb.entry(2, 4) == cqe_ref(dict(wr_id=0xF4, qpn=0x12345, status=WR_FLUSH_ERR,
                                         opcode=RECV), 0)
    assert await tb.reserve(2) == 1
    assert await tb.reserve(2) == 0                                # 3 used + 1 reserved
    assert await tb.reserve(1) == 0                                # CQ 1 never set
    await tb.settle(50)
    assert [(e["type"], e["number"]) for e in tb.events.items][2:] == [(2, 2), (2, 1)]
    assert tb.count == 5
    # SET_CQ argument checks
    assert await tb.command(0x03, NUM_CQ, [0x1000, 0, 2]) == 2
    assert await tb.command(0x03, 0, [0x1010, 0, 2]) == 3          # not 64-byte aligned
    assert await tb.command(0x03, 0, [0x1000, 0, 16]) == 3         # log2 > 15
    assert await tb.command(0x09, 0, []) == 1
    tb.mem.check()


@cocotb.test()
async def arming(dut):
    """CQ_ARM mode 1 fires on the next completion, mode 2 only on SE or an error; one-shot;
    the event follows the CQE's write (the entry is in memory when the event is seen)."""
    tb = await start(dut, 4)
    base = 0x50000
    await tb.set_cq(1, base, 3)
    seen = []

    async def watch():
        while True:
            await RisingEdge(dut.clk)
            if len(tb.events.items) > len(seen):
                e = tb.events.items[len(seen)]
                seen.append((e["type"], e["number"], tb.mem.read(base, 32 * 8)))
    cocotb.start_soon(watch())
    n = 0

    async def comp(**c):
        nonlocal n
        assert await tb.reserve(1) == 1
        tb.complete(cqn=1, wr_id=0x700 + n, **c)
        n += 1
        await tb.settle(150)

    await comp()                                     # not armed: no event
    assert not tb.events.items
    tb.arm.put({"cqn": 1, "mode": 1})
    await comp()                                     # fires
    assert [(t, k) for t, k, _ in seen] == [(1, 1)]
    assert seen[0][2][32:40] == (0x701).to_bytes(8, "little"), "event before the CQE"
    await comp()                                     # disarmed: nothing
    tb.arm.put({"cqn": 1, "mode": 2})
    await comp(se=0)                                 # no SE, success: stays armed
    assert len(seen) == 1
    await comp(se=1)                                 # SE: fires
    assert [(t, k) for t, k, _ in seen] == [(1, 1), (1, 1)]
    tb.arm.put({"cqn": 1, "mode": 2})
    await comp(status=REM_ACCESS_ERR)                # error: fires
    assert len(seen) == 3
    await comp(se=1)                                 # disarmed
    tb.arm.put({"cqn": 1, "mode": 0})                # mode 0: ignored
    await comp(se=1)
    assert len(seen) == 3
    assert tb.count == n


@cocotb.test()
async def write_fault(dut):
    """A CQE write answered SLVERR/DECERR: event 4 naming the QP, a fault for that QP, no
    count, and no event 1 even when armed; the next CQE on a good ring is fine."""
    tb = await start(dut, 5)
    await tb.set_cq(0, 0x60000, 2)
    await tb.set_cq(1, 0x61000, 2)
    tb.mem.add_fault(0x60000, 0x80, "w", AxiResp.SLVERR)
    tb.mem.add_fault(0x61020, 0x20, "w", AxiResp.DECERR)
    tb.arm.put({"cqn": 0, "mode": 1})
    assert await tb.reserve(0) == 1
    tb.complete(cqn=0, wr_id=1, qpn=0xABCDE)
    await tb.settle(200)
    assert [(e["type"], e["number"]) for e in tb.events.items] == [(4, 0xABCDE)]
    assert [f["qpn"] for f in tb.faults.items] == [0xABCDE]
    assert tb.count == 0
    for i in range(2):
        assert await tb.reserve(1) == 1
        tb.complete(cqn=1, wr_id=10 + i, qpn=0x222 + i)
    await tb.settle(300)
    assert tb.entry(1, 0) == cqe_ref(dict(wr_id=10, qpn=0x222, opcode=RECV), 1)
    assert [(e["type"], e["number"]) for e in tb.events.items][1:] == [(4, 0x223)]
    assert [f["qpn"] for f in tb.faults.items] == [0xABCDE, 0x223]
    assert tb.count == 1


@cocotb.test()
async def set_cq_unaligned_base(dut):
    """Ring bases are 64-byte aligned (interface.md §4.2): SET_CQ with a base that is not a
    multiple of 64 (32-byte aligned ones included) returns 3 and changes nothing: a set CQ
    keeps its ring, producer, consumer and phase; an unset CQ stays unset. A base that is a
    multiple of 64 and of nothing larger is taken."""
    tb = await start(dut, 6)
    base = 0x70000
    await tb.set_cq(1, base, 2)                        # 4 entries
    tb.mem.add_guard(base + 4 * 32, 0x400)
    cs = []
    for i in range(3):
        c = dict(cqn=1, wr_id=0x900 + i, byte_len=i, qpn=0x31)
        assert await tb.reserve(1) == 1
        tb.complete(**c)
        cs.append(c)
    await tb.settle(200)
    bad = [base + 0x20, base + 0x1, base + 0x3F, base + 0x10, (5 << 32) | 0x71020,
           0xFFFFFFE0]
    for b in bad:
        for cqn in (1, 2):                             # set, and never set
            assert await tb.command(0x03, cqn, [b & 0xFFFFFFFF, b >> 32, 3]) == 3, (cqn, hex(b))
    # CQ 1 unchanged: CQEs 3 and 4 go to slot 3 and, wrapped, slot 0 with phase 0
    tb.db.put({"cqn": 1, "index": 3})
    for i in (3, 4):
        c = dict(cqn=1, wr_id=0x900 + i, byte_len=i, qpn=0x31)
        assert await tb.reserve(1) == 1
        tb.complete(**c)
        cs.append(c)
    await tb.settle(200)
    for i, c in enumerate(cs):
        want = cqe_ref(dict(c, opcode=RECV), 0 if i >= 4 else 1)
        if i == 0:
            continue                                   # slot 0 now holds CQE 4
        assert tb.entry(1, i) == want, f"CQE {i}: {tb.entry(1, i).hex()}"
    assert tb.count == 5
    assert await tb.reserve(2) == 0                    # CQ 2 is still unset
    await tb.settle(50)
    assert [(e["type"], e["number"]) for e in tb.events.items] == [(2, 2)]
    await tb.set_cq(2, 0x71040, 1)                     # 64-byte aligned: taken
    assert await tb.reserve(2) == 1
    tb.complete(cqn=2, wr_id=0xA00, qpn=0x32)
    await tb.settle(200)
    assert tb.entry(2, 0) == cqe_ref(dict(wr_id=0xA00, qpn=0x32, opcode=RECV), 1)
    assert tb.count == 6
    tb.mem.check()


@cocotb.test()
async def first_cycles_after_sweep(dut):
    """A reset clears every word of the CQ table, the sweep's last write landing as the first
    inputs are taken: with CQ 0 set and holding room before the reset, a reservation on each CQ
    and a completion on CQ 0, offered during the reset and the sweep, are refused or discarded
    with event 2; SET_CQ then makes CQ 0 usable."""
    tb = await start(dut, 7)
    await tb.set_cq(0, 0x80000, 3)
    assert await tb.reserve(0) == 1
    await tb.settle(50)
    n_rsv, n_ev, n_count = len(tb.rsv_resp.items), len(tb.events.items), tb.count
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    for cqn in range(NUM_CQ):
        tb.rsv.put({"cqn": cqn})
    tb.complete(cqn=0, wr_id=0xB0)
    for _ in range(3):
        await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await wait_until(dut, lambda: not int(dut.sweeping.value), 3000, "sweep")
    await tb.settle(100)
    assert [r["ok"] for r in tb.rsv_resp.items[n_rsv:]] == [0] * NUM_CQ
    assert sorted((e["type"], e["number"]) for e in tb.events.items[n_ev:]) == \
        sorted([(2, n) for n in range(NUM_CQ)] + [(2, 0)])
    assert tb.count == n_count
    await tb.set_cq(0, 0x81000, 1)
    assert await tb.reserve(0) == 1
    tb.complete(cqn=0, wr_id=0xB1, qpn=0x33)
    await tb.settle(200)
    assert tb.entry(0, 0) == cqe_ref(dict(wr_id=0xB1, qpn=0x33, opcode=RECV), 1)
    assert tb.count == n_count + 1
    tb.mem.check()
