"""READ responses (rnic.tx.read_resp) through the TX arbiter and the TX frame builder, with
host memory (cocotb on Icarus, the generated Verilog, W=64 and W=512).

The bench (``tb/blocks/cocotb_read_resp.py``) queues READ jobs, ACK/NAK descriptors and request
frames (on the arbiter's requester side), reads the payload from the hostile host memory of
sim/hostmem.py, and checks every frame sent with scapy (Ethernet/IPv4/UDP/BTH; the AETH read
from the bytes after the BTH) against a Python model of the responses (opcode, PSN, AETH, MSN,
payload bytes from the host-memory model), the ICRC of sim/packets.py and scapy's own.
"""
import gc
import random
import warnings

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rnic.control.qp_args import qp_arg_layout
from rnic.host import HostMemory
from rnic.host.axi_master import AxiSignature
from rnic.ifaces import NUM_COUNTERS, read_job_layout
from rnic.stream import BeatStream
from rnic.tx.arbiter import TxArbiter
from rnic.tx.build import TxBuild, chunk_layout, pkt_layout, tx_hdr_layout
from rnic.tx.read_resp import ReadResp
from sim.bench_tops import flat_top_axi
from sim.runner import run_cocotb
from sim.vsim import Simulator, ports_of

NUM_QP = 16


class ReadRespHarness(wiring.Component):
    """ReadResp + TxArbiter (its requester side driven by the bench) + TxBuild + HostMemory (one
    read client, the builder's gather reads); the builder's faults go to ReadResp and are shown
    on ``fault_valid``/``fault_qpn``, ReadResp's descriptors taken on ``rr_taken``/``rr_pkt``."""

    def __init__(self, width):
        self.width = width
        super().__init__({
            "axi": Out(AxiSignature(width)),
            "tx": Out(BeatStream(width)),
            "job": In(stream.Signature(read_job_layout)),
            "ack": In(stream.Signature(tx_hdr_layout)),
            "req": In(stream.Signature(pkt_layout)),
            "req_chunk": In(stream.Signature(chunk_layout)),
            "qp_arg": In(stream.Signature(qp_arg_layout)),
            "local_mac": In(48),
            "local_ip": In(32),
            "fault_valid": Out(1),
            "fault_qpn": Out(24),
            "rr_taken": Out(1),
            "rr_pkt": Out(pkt_layout),
            "stat": Out(NUM_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rr = rr = ReadResp(num_qp=NUM_QP)
        m.submodules.arb = arb = TxArbiter()
        m.submodules.build = build = TxBuild(self.width, num_qp=NUM_QP)
        m.submodules.hm = hm = HostMemory(width=self.width, read_clients=1, write_clients=0,
                                          max_reads=4, read_buffer=64)
        wiring.connect(m, wiring.flipped(self.axi), hm.axi)
        wiring.connect(m, build.rd, hm.read_0)
        wiring.connect(m, wiring.flipped(self.job), rr.job)
        wiring.connect(m, wiring.flipped(self.ack), rr.ack)
        wiring.connect(m, rr.pkt, arb.resp)
        wiring.connect(m, rr.chunk, arb.resp_chunk)
        wiring.connect(m, wiring.flipped(self.req), arb.req)
        wiring.connect(m, wiring.flipped(self.req_chunk), arb.req_chunk)
        wiring.connect(m, arb.o, build.pkt)
        wiring.connect(m, arb.chunk, build.chunk)
        wiring.connect(m, build.fault, rr.fault)
        wiring.connect(m, build.tx, wiring.flipped(self.tx))
        m.d.comb += [
            build.qp_arg.valid.eq(self.qp_arg.valid),
            build.qp_arg.payload.eq(self.qp_arg.payload), self.qp_arg.ready.eq(1),
            build.local_mac.eq(self.local_mac), build.local_ip.eq(self.local_ip),
            self.fault_valid.eq(build.fault.valid), self.fault_qpn.eq(build.fault.payload.qpn),
            self.rr_taken.eq(rr.pkt.valid & rr.pkt.ready), self.rr_pkt.eq(rr.pkt.payload),
            self.stat.eq(build.stat),
        ]
        return m


def _run(width, test):
    run_cocotb("read_resp", lambda: flat_top_axi(ReadRespHarness(width)),
               params={"width": width}, test_module="tb.blocks.cocotb_read_resp", testcase=test,
               extra_env={"READ_RESP_WIDTH": str(width)}, test_name=f"w{width}-{test}")


@pytest.mark.parametrize("width", [64, 512])
def test_read_lengths(width):
    """READs of 0, 1, 3, PMTU−1, PMTU, PMTU+1, 3·PMTU, 3·PMTU+5 bytes at unaligned addresses,
    PMTU 256 and 1024 (and one at 4096), on four QPs, the PSN wrapping through 0; ACK/NAK
    descriptors offered before, between and behind the jobs; frame and ACK counters."""
    _run(width, "read_lengths")


@pytest.mark.parametrize("width", [64, 512])
def test_read_with_requests(width):
    """READ jobs and request frames with payload (one or two chunks each) offered together:
    both kinds interleave on the wire, every frame whole and right."""
    _run(width, "read_with_requests")


@pytest.mark.parametrize("width", [64, 512])
def test_read_rate(width):
    """A READ of 16 × 256 bytes leaves at the rate the builder takes the same frames offered
    as requests (within a cycle per frame: the AETH's 4 bytes)."""
    _run(width, "read_rate")


def test_read_fault():
    """A READ whose host range answers SLVERR: its frames are dropped, the fault reported, the
    job aborted (ReadResp stops offering its frames); the next job and a later ACK go on."""
    _run(64, "read_fault")


# ---- ReadResp alone (Amaranth-style testbench on the Verilog): stream rules, sequence, faults ---

def _frames(job):
    """Frames of ``job``: max(1, ⌈len/PMTU⌉)."""
    pm = 256 << (job["pmtu"] - 1)
    return max(1, -(-job["len"] // pm))


def _frame(job, i):
    """(opcode, psn, aeth, paylen, chunk address) of frame ``i`` of ``job`` (interface.md §7)."""
    pm = 256 << (job["pmtu"] - 1)
    n = _frames(job)
    op = 0x10 if n == 1 else 0x0D if i == 0 else 0x0F if i == n - 1 else 0x0E
    return (op, (job["psn"] + i) & 0xFFFFFF, int(op != 0x0E),
            pm if i < n - 1 else job["len"] - (n - 1) * pm, (job["addr"] + i * pm) % 2**64)


def _alone_inputs(rng):
    """150 random READ jobs, then the longest READ (it runs to the end: 2^31 bytes at PMTU
    4096), and 150 random ACK/NAK descriptors."""
    jobs = []
    for _ in range(150):
        code = rng.choice((1, 1, 2, 3, 4, 5))
        pm = 256 << (code - 1)
        jobs.append(dict(qpn=rng.choice((1, 2, 3)),
                         psn=rng.choice((0xFFFFFE, rng.getrandbits(24))),
                         msn=rng.getrandbits(24), addr=rng.getrandbits(64), pmtu=code,
                         len=rng.choice((0, 1, 3, pm - 1, pm, pm + 1, 2 * pm - 1, 2 * pm,
                                         2 * pm + 1, 3 * pm + 5))))
    jobs.append(dict(qpn=3, psn=5, msn=6, addr=2**64 - 4096 * 3 - 1, pmtu=5, len=2**31))
    acks = [dict(qpn=rng.getrandbits(24), opcode=0x11, se=0, ackreq=0, psn=rng.getrandbits(24),
                 aeth=1, syndrome=rng.getrandbits(8), msn=rng.getrandbits(24))
            for _ in range(150)]
    return jobs, acks


class _Alone:
    """The state of :func:`test_read_resp_alone`'s bench, per cycle: what is offered, the jobs
    taken (``[job, frames seen, chunk pending, cycle of its fault]``) and the last cycle's
    transfers; every random choice from ``rng`` in a fixed order."""

    def __init__(self, rng, dut, jobs, acks):
        self.rng, self.dut, self.jobs, self.acks = rng, dut, jobs, acks
        self.stats = {"faulted": 0, "withdrawn": 0, "acks": 0}
        self.nj = self.na = 0
        self.job_on = self.ack_on = False
        self.taken_jobs = []
        self.prev = None            # last cycle's (pkt valid, ready, payload), (chunk ...)
        self.fault_seen = set()     # QPNs a fault named (this job or earlier)
        self.ack_first = None       # jobs taken when the ACK offered was first seen

    def drive(self, ctx):
        """Offer a job, an ACK/NAK, both readies and perhaps a fault; returns (the job
        running, whether a fault is offered)."""
        rng, dut = self.rng, self.dut
        if not self.job_on and self.nj < len(self.jobs) and rng.random() < 0.08:
            self.job_on = True
            for k, v in self.jobs[self.nj].items():
                ctx.set(dut.job.payload[k], v)
        if not self.ack_on and self.na < len(self.acks) and rng.random() < 0.15:
            self.ack_on = True
            for k, v in self.acks[self.na].items():
                ctx.set(dut.ack.payload[k], v)
        ctx.set(dut.job.valid, self.job_on)
        ctx.set(dut.ack.valid, self.ack_on)
        ctx.set(dut.pkt.ready, rng.random() < 0.45)
        ctx.set(dut.chunk.ready, rng.random() < 0.6)
        cur = self.taken_jobs[-1] if self.taken_jobs else None
        # (more often while a READ descriptor waits: it is then withdrawn)
        prev = self.prev
        waits = (prev is not None and prev[0][0] and not prev[0][1]
                 and prev[0][2]["opcode"] != 0x11)
        fault = (cur is not None and cur[0]["len"] < 2**31
                 and rng.random() < (0.1 if waits else 0.002))
        ctx.set(dut.fault.valid, fault)
        ctx.set(dut.fault.payload.qpn, cur[0]["qpn"] if fault else rng.getrandbits(24))
        return cur, fault

    def check_held(self, pv, pay, cv, cpay):
        """``pkt`` and ``chunk`` held while not taken (a descriptor withdrawn after a fault)."""
        if self.prev is not None:
            (ppv, ppr, ppay), (pcv, pcr, pcpay) = self.prev
            if ppv and not ppr:
                if pv:
                    assert pay == ppay, "descriptor changed while offered"
                else:
                    assert self.fault_seen, "descriptor withdrawn without a fault"
                    self.stats["withdrawn"] += 1
            if pcv and not pcr:
                assert cv and cpay == pcpay, "chunk changed or withdrawn while offered"

    def check_ack_offered(self, jt):
        """An ACK/NAK offered: nothing running or left unfinished, no job taken now."""
        if self.ack_first is None:
            self.ack_first = len(self.taken_jobs)
            assert not jt
        for j in self.taken_jobs:
            assert j[1] == _frames(j[0]) or j[3] is not None, "ACK inside a READ"
            assert not j[2]
        assert not jt, "a job taken while an ACK/NAK is offered"

    def pkt_taken(self, pay, cyc):
        """A descriptor taken: the ACK/NAK offered, or the job's next frame."""
        if pay["opcode"] == 0x11:
            assert self.ack_on and pay == {**{k: 0 for k, _ in pkt_layout}, **self.acks[self.na]}
            self.stats["acks"] += 1
            self.ack_on, self.na, self.ack_first = False, self.na + 1, None
            return
        j = self.taken_jobs[-1]
        assert not j[2], "a descriptor before the previous frame's chunk"
        # (the fault is registered: a descriptor may still be taken a cycle later)
        assert j[3] is None or cyc <= j[3] + 1, "a descriptor after the job's fault"
        op, psn, aeth, plen, addr = _frame(j[0], j[1])
        exp = {k: 0 for k, _ in pkt_layout}
        exp.update(opcode=op, psn=psn, aeth=aeth, paylen=plen, qpn=j[0]["qpn"],
                   syndrome=0x1F, msn=j[0]["msn"])
        assert pay == exp, (j[0], j[1])
        j[1] += 1
        j[2] = (addr, plen) if plen else None

    def sample(self, ctx, cyc, cur, fault):
        """Check this cycle's outputs and transfers."""
        dut = self.dut
        assert ctx.get(dut.fault.ready)
        pv, pr = ctx.get(dut.pkt.valid), ctx.get(dut.pkt.ready)
        pay = {k: ctx.get(dut.pkt.payload[k]) for k, _ in pkt_layout}
        cv, cr = ctx.get(dut.chunk.valid), ctx.get(dut.chunk.ready)
        cpay = (ctx.get(dut.chunk.payload.addr), ctx.get(dut.chunk.payload.len))
        self.check_held(pv, pay, cv, cpay)
        self.prev = ((pv, pr, pay), (cv, cr, cpay))
        jt = self.job_on and ctx.get(dut.job.ready)
        if pv and pay["opcode"] == 0x11:
            self.check_ack_offered(jt)
        if pv and pr:
            self.pkt_taken(pay, cyc)
        if cv and cr:
            j = self.taken_jobs[-1]
            assert j[2] is not None and cpay == j[2], "chunk not after its descriptor"
            j[2] = None
        if fault:
            self.fault_seen.add(cur[0]["qpn"])
            if cur[3] is None:
                cur[3] = cyc
            self.stats["faulted"] += 1
        if jt:
            self.taken_jobs.append([self.jobs[self.nj], 0, None, None])
            self.job_on, self.nj = False, self.nj + 1
            self.fault_seen = set()

    def check_end(self):
        """Every job taken: whole, or a prefix when faulted; at most the last one unfinished."""
        taken_jobs, stats = self.taken_jobs, self.stats
        for j in taken_jobs[:-1]:
            assert j[1] == _frames(j[0]) or j[3] is not None, j
        assert taken_jobs[-1][0]["len"] == 2**31 and taken_jobs[-1][1] > 3
        assert len(taken_jobs) > 100 and stats["acks"] > 60 and stats["faulted"] > 3, stats
        assert stats["withdrawn"] > 0, stats


@pytest.mark.parametrize("seed", [1, 2])
def test_read_resp_alone(seed, cycles=9000):
    """Random jobs, ACK/NAKs, back-pressure on both outputs and faults: the descriptors and
    chunks of each job as the model says (a prefix once a fault named its QPN), a chunk after
    each descriptor with payload and before the next descriptor; ``pkt`` and ``chunk`` held
    while not taken (a descriptor withdrawn only after a fault); an ACK/NAK offered only with
    no job running or waiting, held until taken (no job taken meanwhile), and after every
    frame of the jobs taken before it."""
    rng = random.Random(seed)
    dut = ReadResp()
    jobs, acks = _alone_inputs(rng)
    b = _Alone(rng, dut, jobs, acks)

    async def bench(ctx):
        for cyc in range(cycles):
            cur, fault = b.drive(ctx)
            await ctx.delay(1e-10)
            b.sample(ctx, cyc, cur, fault)
            await ctx.tick()
        b.check_end()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_ports():
    for rr in (ReadResp(), ReadResp(num_qp=4096)):
        assert set(rr.signature.members) == {"job", "ack", "pkt", "chunk", "fault"}
        Fragment.get(rr, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # the refused instances are never elaborated
        for n in (0, 6, 2**17, 256.0):
            with pytest.raises(ValueError):
                ReadResp(num_qp=n)
        gc.collect()


# ---- the tail on an idle core (Amaranth-style testbench on the Verilog) -------------------------
# ReadResp, the arbiter and the builder with host memory as in the core (three readers, the
# gather reads on the third), an AXI slave that answers 3 cycles after AR with bytes equal to
# their address's low byte, SLVERR on the beats asked for; QP 2's path set before the first job.

_PATH = {1: 0x000123, 11: 0x22334455, 12: 0x1111, 13: 0x0A000002, 14: 0xC000}


def _axi_slave(ax, err_beats):
    """An AXI4 read slave for an Amaranth-style testbench: ``R`` 3 cycles after ``AR``, each byte
    its address's low byte, SLVERR on the beats (counted from the first) in ``err_beats``."""
    async def slave(ctx):
        pending, cyc, beat = [], 0, 0
        ctx.set(ax.ar_ready, 1)
        while True:
            await ctx.delay(1e-10)
            if ctx.get(ax.ar_valid):
                pending.append([cyc + 3, ctx.get(ax.ar_addr) >> 3, ctx.get(ax.ar_len) + 1,
                                ctx.get(ax.ar_id)])
            if pending and pending[0][0] <= cyc:
                p = pending[0]
                ctx.set(ax.r_valid, 1)
                ctx.set(ax.r_id, p[3])
                ctx.set(ax.r_data, int.from_bytes(bytes((8 * p[1] + i) & 0xFF
                                                        for i in range(8)), "little"))
                ctx.set(ax.r_resp, 2 if beat in err_beats else 0)
                ctx.set(ax.r_last, p[2] == 1)
                beat += 1
                p[1] += 1
                p[2] -= 1
                if not p[2]:
                    pending.pop(0)
            else:
                ctx.set(ax.r_valid, 0)
            await ctx.tick()
            cyc += 1
    return slave


def _tail(jobs, *, err_beats=(), race_mac=None, cycles=220):
    """Run ``jobs`` (each {addr, len}, QP 2, PMTU 1024) one after the other, each once the
    previous one's frame is out or dropped. ``err_beats``: the R beats (counted from the first)
    that answer SLVERR. ``race_mac``: ARG12 written again in the cycle the first descriptor
    reaches the builder's empty queue. Returns the frames (first-beat cycle, bytes), the faults'
    QPNs and the cycles each job was taken."""
    m = Module()
    m.submodules.rr = rr = ReadResp(num_qp=16)
    m.submodules.arb = arb = TxArbiter()
    m.submodules.build = build = TxBuild(64, num_qp=16)
    m.submodules.hm = hm = HostMemory(width=64, read_clients=3, write_clients=2,
                                      read_buffer=(64, 64, 256), max_burst=64)
    wiring.connect(m, build.rd, hm.read_2)
    wiring.connect(m, rr.pkt, arb.resp)
    wiring.connect(m, rr.chunk, arb.resp_chunk)
    wiring.connect(m, arb.o, build.pkt)
    wiring.connect(m, arb.chunk, build.chunk)
    m.d.comb += [rr.fault.valid.eq(build.fault.valid), rr.fault.payload.eq(build.fault.payload),
                 build.fault.ready.eq(1)]
    ax = hm.axi
    frames, faults, taken = [], [], []

    async def bench(ctx):
        ctx.set(build.tx.ready, 1)
        for _ in range(300):                    # the reset sweep
            await ctx.tick()
        for arg, word in _PATH.items():
            ctx.set(build.qp_arg.valid, 1)
            ctx.set(build.qp_arg.payload.qpn, 2)
            ctx.set(build.qp_arg.payload.arg, arg)
            ctx.set(build.qp_arg.payload.data, word)
            await ctx.tick()
        ctx.set(build.qp_arg.valid, 0)
        for _ in range(10):
            await ctx.tick()
        todo, cur, raced, busy = list(jobs), None, False, False
        psn = 100
        for cyc in range(cycles):
            if not busy and todo:
                j = todo.pop(0)
                for k, v in dict(qpn=2, psn=psn, msn=1, addr=j["addr"], len=j["len"],
                                 pmtu=3).items():
                    ctx.set(rr.job.payload[k], v)
                ctx.set(rr.job.valid, 1)
                psn += 1
                busy = True
            await ctx.delay(1e-10)
            race = (race_mac is not None and not raced and ctx.get(build.pkt.valid)
                    and ctx.get(build.pkt.ready))
            ctx.set(build.qp_arg.valid, race)
            if race:
                raced = True
                ctx.set(build.qp_arg.payload.arg, 12)
                ctx.set(build.qp_arg.payload.data, race_mac)
            await ctx.delay(1e-10)
            job_taken = ctx.get(rr.job.valid) and ctx.get(rr.job.ready)
            if job_taken:
                taken.append(cyc)
            if ctx.get(build.fault.valid):
                faults.append(ctx.get(build.fault.payload.qpn))
                busy = False
            if ctx.get(build.tx.valid):
                if cur is None:
                    cur = (cyc, bytearray())
                keep, data = ctx.get(build.tx.payload.keep), ctx.get(build.tx.payload.data)
                cur[1].extend(data.to_bytes(8, "little")[:bin(keep).count("1")])
                if ctx.get(build.tx.payload.last):
                    frames.append(cur)
                    cur, busy = None, False
            await ctx.tick()
            ctx.set(build.qp_arg.valid, 0)
            if job_taken:
                ctx.set(rr.job.valid, 0)

    ins, outs = ports_of(rr.job, build.tx, build.qp_arg, ax)
    outs += [build.pkt.valid, build.pkt.ready, build.fault.valid, build.fault.payload]
    sim = Simulator(m, inputs=ins, outputs=outs)
    sim.add_clock(1e-8)
    sim.add_testbench(_axi_slave(ax, err_beats), background=True)
    sim.add_testbench(bench)
    sim.run()
    return frames, faults, taken


def _payload(addr, n):
    return bytes((addr + i) & 0xFF for i in range(n))


def test_tail_latency_idle():
    """A 64-byte READ on an idle tail: its response (ONLY: 58-byte header, 64 bytes, ICRC)
    carries the host's bytes, and its first beat leaves at most 24 cycles after the job is
    taken, with host memory answering 3 cycles after AR (the job's descriptor passes the
    parked arbiter in the cycle after; the header values start as it reaches the empty queue;
    the record is queued as the last payload beat is taken)."""
    frames, faults, taken = _tail([{"addr": 0x1008, "len": 64}, {"addr": 0x2003, "len": 200}])
    assert not faults and len(frames) == 2
    (c0, f0), (_, f1) = frames
    assert len(f0) == 58 + 64 + 4 and f0[58:122] == _payload(0x1008, 64)
    assert len(f1) == 58 + 200 + 4 and f1[58:258] == _payload(0x2003, 200)
    assert f0[:2] == bytes([0x11, 0x11])
    assert c0 - taken[0] <= 24, c0 - taken[0]


def test_tail_fault_on_last_beat():
    """A READ whose last payload beat alone answers SLVERR (its record queued with that beat,
    the drop mark with it): no frame, one fault naming its QP; the next READ's response is
    sent whole."""
    frames, faults, _ = _tail([{"addr": 0x1000, "len": 64}, {"addr": 0x3000, "len": 64}],
                              err_beats=(7,))
    assert faults == [2]
    assert len(frames) == 1
    f = frames[0][1]
    assert len(f) == 58 + 64 + 4 and f[58:122] == _payload(0x3000, 64)


def test_tail_path_write_as_descriptor_arrives():
    """A path-table write (ARG12, the remote MAC's first bytes) in the cycle a descriptor
    reaches the builder's empty queue, whose header values start in that cycle: the frame goes
    to the MAC as written (the values start again)."""
    frames, faults, _ = _tail([{"addr": 0x1000, "len": 16}], race_mac=0xAAAA)
    assert not faults and len(frames) == 1
    assert frames[0][1][:2] == bytes([0xAA, 0xAA])
