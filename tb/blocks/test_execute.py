"""Execute stage (rnic.resp.execute.Execute) with HostMemory, KeyCache and CqeGen around it,
against the hostile AxiRam of sim/hostmem.py and a Python model of placement and completion."""
import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rnic.host.axi_master import AxiSignature, HostMemory
from rnic.resp.execute import Execute, _BitTable, _LateWrite
from rnic.resp.scatter import PlaceSignature, ScatterPath, SharedScatter
from rnic.stream import BeatStream
from sim.bench_tops import ExecuteBench, flat_top_axi
from sim.runner import run_cocotb
from sim.wrap import flat_top

NUM_QP = 8


def _run(width, testcase, label, seed=11, prefetch=4, env=None):
    run_cocotb("execute", lambda: flat_top_axi(ExecuteBench(width, prefetch, NUM_QP)),
               params={"width": width, "num_qp": NUM_QP, "prefetch": prefetch},
               test_module="tb.blocks.cocotb_execute", testcase=testcase,
               extra_env={"EXECUTE_WIDTH": str(width), "EXECUTE_SEED": str(seed),
                          "EXECUTE_PREFETCH": str(prefetch), **(env or {})},
               test_name=f"w{width}-p{prefetch}-{label}-s{seed}")


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_execute_messages(width):
    _run(width, ["messages"], "messages")


@pytest.mark.parametrize("prefetch", [1, pytest.param(0, marks=pytest.mark.full)])
def test_execute_messages_pool(prefetch):
    """One pool slot for four QPs (every prefetch evicts another QP's), and no prefetch."""
    _run(64, ["messages", "errors"], "messages", prefetch=prefetch)


@pytest.mark.full
@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("seed", [21, 22, 23, 24])
def test_execute_messages_seeds(width, seed):
    _run(width, ["messages"], "messages", seed)


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_execute_errors(width):
    _run(width, ["errors"], "errors")


@pytest.mark.parametrize("width", [64, 512])
def test_execute_prefetch(width):
    _run(width, ["prefetch"], "prefetch")


@pytest.mark.parametrize("width,prefetch", [(64, 4), (512, 4), (64, 0)])
def test_execute_evict(width, prefetch):
    """More messages open than the WQE store holds: evicted WQEs are read again (with no
    pool, the planner's one row: every QP's later packet reads its WQE again)."""
    _run(width, ["evict"], "evict", prefetch=prefetch)


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("rdlat", [pytest.param(0, marks=pytest.mark.full), 100])
def test_execute_bench(width, rdlat):
    _run(width, ["bench"], f"bench-rd{rdlat}", env={"EXECUTE_READ_LATENCY": str(rdlat)})


class SharedScatterBench(wiring.Component):
    """SharedScatter with HostMemory behind it (one write client)."""

    def __init__(self, width):
        self.width = width
        super().__init__({
            "pay0": In(BeatStream(width)), "pay1": In(BeatStream(width)),
            "client0": In(PlaceSignature()), "client1": In(PlaceSignature()),
            "axi": Out(AxiSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sc = sc = SharedScatter(width=self.width)
        m.submodules.hm = hm = HostMemory(width=self.width, read_clients=0, write_clients=1,
                                          max_writes=4)
        for name in ("pay0", "pay1", "client0", "client1"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(sc, name))
        wiring.connect(m, sc.wr, hm.write_0)
        wiring.connect(m, hm.axi, wiring.flipped(self.axi))
        return m


@pytest.mark.parametrize("width", [64, 512])
def test_shared_scatter(width):
    """Two clients' packets through one Scatter Path: tb/blocks/cocotb_shared_scatter.py."""
    run_cocotb("shared_scatter", lambda: flat_top_axi(SharedScatterBench(width)),
               params={"width": width}, test_module="tb.blocks.cocotb_shared_scatter",
               testcase=["shared"],
               extra_env={"EXECUTE_WIDTH": str(width), "EXECUTE_SEED": "3"},
               test_name=f"w{width}")


@pytest.mark.parametrize("width", [64, 512])
def test_scatter(width):
    run_cocotb("scatter", lambda: flat_top(ScatterPath(width=width)), params={"width": width},
               test_module="tb.blocks.cocotb_execute", testcase=["scatter", "scatter_sweep"],
               extra_env={"EXECUTE_WIDTH": str(width), "EXECUTE_DUT": "scatter"},
               test_name=f"w{width}")


def test_parameters_refused():
    with pytest.raises(ValueError):
        Execute(width=48)
    with pytest.raises(ValueError):
        Execute(width=64, num_qp=6)
    for depth in (0, 4):
        with pytest.raises(ValueError):
            Execute(width=64, prefetch_depth=depth)


def _simulate(dut, bench):
    """Run testbench ``bench`` on the Verilog of ``dut`` (one clock; :mod:`sim.vsim`)."""
    from sim.vsim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


class _LateWritePair(wiring.Component):
    """Two tables written alike: one through its own write port, one through ``_LateWrite``;
    two synchronous read ports on each."""

    def __init__(self):
        super().__init__({
            "waddr": In(3), "wdata": In(4), "wen": In(1),
            "raddr": In(3).array(2), "ren": In(1).array(2),
            "ref": Out(4).array(2), "dut": Out(4).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.a = a = Memory(shape=4, depth=8, init=[])
        m.submodules.b = b = Memory(shape=4, depth=8, init=[])
        wa = a.write_port()
        m.d.comb += [wa.addr.eq(self.waddr), wa.data.eq(self.wdata), wa.en.eq(self.wen)]
        wb = _LateWrite(m, b, "b")
        m.d.comb += [wb.addr.eq(self.waddr), wb.data.eq(self.wdata), wb.en.eq(self.wen)]
        for k in range(2):
            ra, rb = a.read_port(), b.read_port()
            for rp in (ra, rb):
                m.d.comb += [rp.addr.eq(self.raddr[k]), rp.en.eq(self.ren[k])]
            m.d.comb += [self.ref[k].eq(ra.data), self.dut[k].eq(wb.read(rb, f"b{k}"))]
        return m


def test_late_write_reads_as_a_direct_write():
    """Execute's ``dead`` and ``cnext`` tables are written a cycle late with their reads
    bypassed: every read port must return what it would with the write applied at once,
    every cycle (reads of the address written the cycle before included)."""
    import random
    dut = _LateWritePair()
    rng = random.Random(7)
    hits = []

    async def bench(ctx):
        last = (0, 0)                   # the write of the cycle before
        read = [False, False]           # a port's data is defined once it has read
        for _ in range(4000):
            ctx.set(dut.waddr, rng.randrange(8))
            ctx.set(dut.wdata, rng.randrange(16))
            ctx.set(dut.wen, rng.random() < 0.5)
            for k in range(2):
                ctx.set(dut.raddr[k], rng.randrange(8))
                ctx.set(dut.ren[k], rng.random() < 0.8)
            for k in range(2):
                if read[k]:
                    assert ctx.get(dut.dut[k]) == ctx.get(dut.ref[k])
                read[k] |= bool(ctx.get(dut.ren[k]))
            # a read of the address written the cycle before: the bypassed case
            hits.append(last[1] and any(ctx.get(dut.ren[k]) and ctx.get(dut.raddr[k]) == last[0]
                                        for k in range(2)))
            last = (ctx.get(dut.waddr), ctx.get(dut.wen))
            await ctx.tick()

    _simulate(dut, bench)
    assert sum(hits) > 300


class _BitTablePair(wiring.Component):
    """A one-bit table as a plain ``Memory(shape=1)`` and as a ``_BitTable`` (rows packed four
    to a word, written from registers, reads bypassed), written alike; a synchronous and an
    asynchronous read port on each."""

    DEPTH = 16

    def __init__(self):
        super().__init__({
            "waddr": In(4), "wdata": In(1), "wen": In(1),
            "raddr": In(4).array(2), "ren": In(1),
            "ref": Out(1).array(2), "dut": Out(1).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.a = a = Memory(shape=1, depth=self.DEPTH, init=[])
        b = _BitTable(m, self.DEPTH, "b")
        for wp in (a.write_port(), b.write_port()):
            m.d.comb += [wp.addr.eq(self.waddr), wp.data.eq(self.wdata), wp.en.eq(self.wen)]
        ra, rb = a.read_port(), b.read_port()
        for rp in (ra, rb):
            m.d.comb += [rp.addr.eq(self.raddr[0]), rp.en.eq(self.ren)]
        ca, cb = a.read_port(domain="comb"), b.read_port(domain="comb")
        m.d.comb += [ca.addr.eq(self.raddr[1]), cb.addr.eq(self.raddr[1])]
        m.d.comb += [self.ref[0].eq(ra.data), self.dut[0].eq(rb.data),
                     self.ref[1].eq(ca.data), self.dut[1].eq(cb.data)]
        return m


def test_bit_table_reads_as_a_one_bit_memory():
    """Execute's ``dead`` and ``wflt`` marks are one-bit tables packed four rows to a LUT-RAM
    word and written two cycles late: every read (synchronous and asynchronous) returns what a
    one-bit memory written alike returns, every cycle, with writes to the other rows of the
    word just written (the read-modify-write and its forwarding) and reads of the row or the
    word just written among them."""
    import random
    dut = _BitTablePair()
    rng = random.Random(11)
    seen = {"row": 0, "word": 0, "fwd": 0}

    async def bench(ctx):
        last, read = None, False
        for _ in range(4000):
            # mostly the word written last cycle: the forwarding and the bypasses
            near = last[0] if last and rng.random() < 0.6 else rng.randrange(16)
            ctx.set(dut.waddr, (near & ~3) | rng.randrange(4))
            ctx.set(dut.wdata, rng.randrange(2))
            ctx.set(dut.wen, rng.random() < 0.6)
            for k in range(2):
                near = last[0] if last and rng.random() < 0.5 else rng.randrange(16)
                ctx.set(dut.raddr[k], (near & ~3) | rng.randrange(4))
            ctx.set(dut.ren, rng.random() < 0.8)
            for k in range(2):
                if k or read:           # the synchronous port's data is defined once it has read
                    assert ctx.get(dut.dut[k]) == ctx.get(dut.ref[k])
            read |= bool(ctx.get(dut.ren))
            if last and last[1]:
                r, w = ctx.get(dut.raddr[0]), ctx.get(dut.waddr)
                seen["row"] += r == last[0]
                seen["word"] += (r >> 2) == (last[0] >> 2) and r != last[0]
                seen["fwd"] += ctx.get(dut.wen) and (w >> 2) == (last[0] >> 2) and w != last[0]
            last = (ctx.get(dut.waddr), ctx.get(dut.wen))
            await ctx.tick()

    _simulate(dut, bench)
    assert min(seen.values()) > 200, seen


def _key_cache_side(dut, delay, answer, *, hold=lambda n: 0, log=None, must_take=False,
                    cycles=4000):
    """Execute's Key Cache on its ``lookup`` port, for a background testbench: request ``n`` is
    held ``hold(n)`` cycles (``ready`` low; its payload must stay put and the request must not
    be withdrawn), then taken and answered ``delay(n, request)`` cycles later with the response
    fields ``answer(request)`` gives, in request order. ``log`` collects ``(cycle, request)`` of
    every take; ``must_take``: Execute must take every answer at once."""
    fields = ("key", "pd", "access", "va", "len", "tag")

    async def side(ctx):
        pending, offered, held, n = [], None, 0, 0
        for cyc in range(cycles):
            wait = held < hold(n)
            ctx.set(dut.lookup.req.ready, int(not wait))
            if ctx.get(dut.lookup.req.valid):
                p = {k: ctx.get(getattr(dut.lookup.req.payload, k)) for k in fields}
                assert offered is None or p == offered, "lookup payload changed while waiting"
                if wait:
                    offered, held = p, held + 1
                else:
                    if log is not None:
                        log.append((cyc, p))
                    pending.append((cyc + delay(n, p), p))
                    n, offered, held = n + 1, None, 0
            else:
                assert offered is None, "lookup request withdrawn before it was taken"
            on = bool(pending) and pending[0][0] <= cyc
            ctx.set(dut.lookup.resp.valid, int(on))
            if on:
                for k, v in answer(pending[0][1]).items():
                    ctx.set(getattr(dut.lookup.resp.payload, k), v)
            took = on and ctx.get(dut.lookup.resp.ready)
            assert took or not (on and must_take), "an answer was not taken at once"
            await ctx.tick()
            if took:
                pending.pop(0)
    return side


def _record_outputs(ctx, dut, log):
    """Log this cycle's READ job (its fields) and ``done`` (fatal, syndrome) transfers."""
    if ctx.get(dut.read.valid):
        log["jobs"].append({k: ctx.get(getattr(dut.read.payload, k))
                            for k in ("qpn", "psn", "msn", "addr", "len", "pmtu")})
    if ctx.get(dut.done.valid):
        log["done"].append((ctx.get(dut.done.payload.fatal),
                            ctx.get(dut.done.payload.syndrome)))


def test_read_lookup_from_dec():
    """A new RDMA READ's Key Cache lookup is offered in the cycle after its take (from the
    planner's registers, while the key checks are idle), and when the Key Cache does not take
    it at once the request stays valid with the same payload until it does (stream rules);
    the READ job and its ``done`` follow the answer. Also a READ the Key Cache takes at once,
    and two READs back to back (the second through ``key_q``), each answered in order."""
    dut = Execute(width=64, num_qp=4, prefetch=0)
    reads = [  # (qpn, psn, va, rkey, len, pd, cycles the Key Cache holds ``ready`` low)
        (1, 5, 0x1000, 0x1234, 64, 3, 3),
        (2, 9, 0x2040, 0x5678, 4096, 4, 0),
        (3, 17, 0x3000, 0x9ABC, 200, 5, 0),
        (1, 6, 0x1100, 0x1234, 32, 3, 1),
    ]
    log = {"take": [], "req": [], "jobs": [], "done": []}

    def bus(rkey):
        return 0xAB_0000_0000 | rkey << 8

    lookup_side = _key_cache_side(
        dut, lambda n, p: 6, lambda p: {"ok": 1, "bus_addr": bus(p["key"]), "tag": p["tag"]},
        hold=lambda n: reads[n][6] if n < len(reads) else 0, log=log["req"], cycles=400)

    async def bench(ctx):
        ctx.set(dut.read.ready, 1)
        ctx.set(dut.done.ready, 1)
        i = 0
        for cyc in range(400):
            if i < len(reads) and (i != 1 or cyc > 60):
                q, psn, va, rkey, ln, pd, _ = reads[i]
                fields = {"qpn": q, "psn": psn, "va": va, "rkey": rkey, "dma_len": ln, "pd": pd,
                          "read": 1, "imm_or_rkey": (2 << 24) | (psn + 100)}
                for k, v in fields.items():
                    ctx.set(getattr(dut.exe.payload, k), v)
                ctx.set(dut.exe.valid, 1)
            else:
                ctx.set(dut.exe.valid, 0)
            _record_outputs(ctx, dut, log)
            took = ctx.get(dut.exe.valid) and ctx.get(dut.exe.ready)
            if took:
                log["take"].append(cyc)
                i += 1
            await ctx.tick()

    from sim.vsim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(lookup_side)
    sim.run()
    assert len(log["req"]) == len(reads), log["req"]
    for (q, psn, va, rkey, ln, pd, _), (_, p) in zip(reads, log["req"]):
        assert p == {"key": rkey, "pd": pd, "access": 4, "va": va, "len": ln, "tag": 0}, p
    # the lone READ that the Key Cache takes at once: its lookup in the cycle after its take
    assert log["req"][1][0] == log["take"][1] + 1, (log["take"], log["req"])
    # the first: offered from the cycle after its take, taken when ``ready`` came
    assert log["req"][0][0] == log["take"][0] + 1 + reads[0][6], (log["take"], log["req"])
    assert log["done"] == [(0, 0)] * len(reads), log["done"]
    assert log["jobs"] == [{"qpn": q, "psn": psn, "msn": psn + 100, "addr": bus(rkey),
                            "len": ln, "pmtu": 2}
                           for (q, psn, va, rkey, ln, pd, _) in reads], log["jobs"]


def test_read_shortcut_after_a_fatal_command():
    """A READ's job and ``done`` may leave from the key checks when stages 3 and 4 are empty;
    a READ behind a command of its QP that turns fatal (a WRITE whose rkey fails: its payload
    dropped by a closing piece) is still
    skipped (``done`` (0, 0), no job), wherever the READ's lookup answer lands against the
    WRITE's way through stages 3 and 4 (its answer delayed 1..13 cycles, a round each, a QP
    each); a READ of a live QP right behind is answered, in command order."""
    rounds = list(range(1, 14))
    dut = Execute(width=64, num_qp=32, prefetch=0)
    bad = 0xBAD
    cmds, delays = [], []
    for r, d in enumerate(rounds):
        q = r + 1
        cmds.append([
            {"qpn": q, "psn": 5, "write": 1, "va": 0x1000, "rkey": bad, "dma_len": 64,
             "payload_len": 64},
            {"qpn": q, "psn": 6, "read": 1, "va": 0x2000, "rkey": 0x1234, "dma_len": 64,
             "imm_or_rkey": (2 << 24) | 7},
            {"qpn": 0, "psn": 100 + r, "read": 1, "va": 0x3000, "rkey": 0x5678,
             "dma_len": 128, "imm_or_rkey": (3 << 24) | (50 + r)},
        ])
        delays += [6, d, 6]
    log = {"jobs": [], "done": []}

    def bus(rkey):
        return 0xAB_0000_0000 | rkey << 8

    lookup_side = _key_cache_side(
        dut, lambda n, p: delays[n],
        lambda p: {"ok": int(p["key"] != bad), "bus_addr": bus(p["key"]), "tag": 0})

    async def bench(ctx):
        ctx.set(dut.read.ready, 1)
        ctx.set(dut.done.ready, 1)
        for r, round_cmds in enumerate(cmds):
            for c in round_cmds:
                for k in ("write", "read", "payload_len"):
                    ctx.set(getattr(dut.exe.payload, k), 0)
                for k, v in c.items():
                    ctx.set(getattr(dut.exe.payload, k), v)
                ctx.set(dut.exe.valid, 1)
                while True:
                    took = ctx.get(dut.exe.ready)
                    await _record(ctx)
                    if took:
                        break
                ctx.set(dut.exe.valid, 0)
            while len(log["done"]) < 3 * (r + 1):
                await _record(ctx)
        for _ in range(20):
            await _record(ctx)

    async def _record(ctx):
        # the Scatter Path: takes every piece, and finishes a packet at its closing piece
        ctx.set(dut.wr.piece.ready, 1)
        ctx.set(dut.wr.pkt_done, int(ctx.get(dut.wr.piece.valid)
                                     and ctx.get(dut.wr.piece.payload.end)))
        _record_outputs(ctx, dut, log)
        await ctx.tick()

    from sim.vsim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(lookup_side, background=True)
    sim.run()
    assert log["done"] == [(1, 0x62), (0, 0), (0, 0)] * len(rounds), log["done"]
    assert log["jobs"] == [{"qpn": 0, "psn": 100 + r, "msn": 50 + r, "addr": bus(0x5678),
                            "len": 128, "pmtu": 3} for r in range(len(rounds))], log["jobs"]


def _read_after_write_fault(offset, shortcut):
    """One round of :func:`test_read_shortcut_sees_a_write_fault`: a WRITE of QP 1 whose
    payload write is answered non-OKAY ``offset`` cycles after the Key Cache answers the READ
    of QP 1 behind it. Returns the ``done`` transfers, the READ jobs and the cycle of the
    last ``done``."""
    class NoShortcut(Execute):
        def _read_shortcut(self, m, t):
            pass
    dut = (Execute if shortcut else NoShortcut)(width=64, num_qp=4, prefetch=0)
    cmds = [{"qpn": 1, "psn": 5, "write": 1, "va": 0x1000, "rkey": 0x11, "dma_len": 64,
             "payload_len": 64},
            {"qpn": 1, "psn": 6, "read": 1, "va": 0x2000, "rkey": 0x22, "dma_len": 64,
             "imm_or_rkey": (2 << 24) | 7}]
    log = {"jobs": [], "done": [], "answer": None, "tag": None}

    takes = []

    def delay(n, p):
        # (the READ's answer after the WRITE has left stage 4)
        if p["key"] == 0x22:
            log["answer"] = takes[-1][0] + 16
        return 16 if p["key"] == 0x22 else 6

    lookup_side = _key_cache_side(
        dut, delay, lambda p: {"ok": 1, "bus_addr": p["key"] << 12}, log=takes,
        must_take=True, cycles=400)

    async def bench(ctx):
        for p in (dut.read, dut.done, dut.event, dut.fault, dut.wr.req, dut.wr.piece):
            ctx.set(p.ready, 1)
        i = 0
        for cyc in range(400):
            if i < len(cmds):
                for k in ("write", "read", "payload_len"):
                    ctx.set(getattr(dut.exe.payload, k), 0)
                for k, v in cmds[i].items():
                    ctx.set(getattr(dut.exe.payload, k), v)
            ctx.set(dut.exe.valid, int(i < len(cmds)))
            ctx.set(dut.wr.pkt_done, int(ctx.get(dut.wr.piece.valid)
                                         and ctx.get(dut.wr.piece.payload.end)))
            if ctx.get(dut.wr.req.valid):
                log["tag"] = ctx.get(dut.wr.req.payload.tag)
            fault = log["answer"] is not None and cyc == log["answer"] + offset
            ctx.set(dut.wr.done.valid, int(fault))
            ctx.set(dut.wr.done.payload.tag, log["tag"] or 0)
            ctx.set(dut.wr.done.payload.err, 1)
            if ctx.get(dut.read.valid):
                log["jobs"].append(ctx.get(dut.read.payload.psn))
            if ctx.get(dut.done.valid):
                log["done"].append((ctx.get(dut.done.payload.fatal),
                                    ctx.get(dut.done.payload.syndrome)))
                log["last"] = cyc
            if ctx.get(dut.exe.valid) and ctx.get(dut.exe.ready):
                i += 1
            await ctx.tick()
            if fault:
                assert ctx.get(dut.wr.done.ready)
            if len(log["done"]) == 2 and cyc >= log["last"] + 40:
                break       # both commands done, and 40 quiet cycles for anything extra

    from sim.vsim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_testbench(lookup_side, background=True)
    sim.run()
    assert log["answer"] is not None and len(log["done"]) == 2, log
    return log["done"], log["jobs"], log["last"]


def test_read_shortcut_sees_a_write_fault():
    """A READ whose job leaves from the key checks sees its QP's dead mark as stage 3 would
    have seen it: a payload write fault of the WRITE ahead of it, answered a few cycles
    before to a few cycles after the READ's lookup answer, skips the READ (``done`` (0, 0),
    no job) exactly when it skips it without the shortcut (the READ's way through stages 3
    and 4); both outcomes occur over the sweep."""
    seen = set()
    for offset in range(-5, 3):
        *got, t_sc = _read_after_write_fault(offset, True)
        *ref, t_ref = _read_after_write_fault(offset, False)
        assert got == ref, (offset, got, ref)
        assert t_sc + 3 <= t_ref, (offset, t_sc, t_ref)      # the shortcut was taken
        seen.add(bool(got[1]))
    assert seen == {True, False}, seen
