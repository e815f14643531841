"""SkidBuffer, Queue and StreamMerge: order kept, nothing lost or duplicated, under random
valid/ready patterns (Amaranth-style testbenches on the generated Verilog: :mod:`sim.vsim`)."""
import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import fifo

from rnic.stream import BypassFIFO, Queue, RoomFIFO, ShiftQueue, SkidBuffer, StreamMerge
from sim.vsim import Simulator


def _run_pipe(dut, items, seed, stall_in=0.3, stall_out=0.3):
    rng = random.Random(seed)
    got = []

    async def producer(ctx):
        for x in items:
            ctx.set(dut.i.payload, x)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            while rng.random() < stall_in:
                await ctx.tick()

    async def consumer(ctx):
        while len(got) < len(items):
            ready = rng.random() >= stall_out
            ctx.set(dut.o.ready, ready)
            await ctx.tick()
            # sample the transfer that happened at this edge
        ctx.set(dut.o.ready, 0)

    async def monitor(ctx):
        async for clk, rst, valid, ready, payload in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload):
            if valid and ready:
                got.append(payload)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.add_process(monitor)
    sim.run_until(1e-8 * (len(items) * 8 + 100))
    return got


@pytest.mark.parametrize("seed", [1, 2])
def test_skid_buffer(seed):
    items = list(range(1, 200))
    assert _run_pipe(SkidBuffer(16), items, seed) == items


def test_skid_buffer_full_rate():
    items = list(range(1, 100))
    assert _run_pipe(SkidBuffer(16), items, 3, stall_in=0, stall_out=0) == items


@pytest.mark.parametrize("depth,buffered", [(1, False), (4, True), (16, False)])
def test_queue(depth, buffered):
    items = [random.Random(depth).getrandbits(24) for _ in range(150)]
    assert _run_pipe(Queue(24, depth, buffered=buffered), items, depth) == items


def _simulate(top, bench, **ports):
    sim = Simulator(top, **ports)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


class _Pair(Elaboratable):
    """Amaranth's FIFO and RoomFIFO side by side, driven by the same inputs."""

    def __init__(self, depth, buffered):
        cls = fifo.SyncFIFOBuffered if buffered else fifo.SyncFIFO
        self.ref = cls(width=8, depth=depth)
        self.dut = RoomFIFO(width=8, depth=depth, buffered=buffered)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ref, m.submodules.dut = self.ref, self.dut
        m.d.comb += [self.dut.w_data.eq(self.ref.w_data), self.dut.w_en.eq(self.ref.w_en),
                     self.dut.r_en.eq(self.ref.r_en)]
        return m


@pytest.mark.parametrize("buffered", [False, True])
@pytest.mark.parametrize("depth", [1, 2, 3, 4, 5, 8])
def test_room_fifo_matches_amaranth(depth, buffered):
    """RoomFIFO writes its storage whenever it has room; at its ports it must be Amaranth's
    FIFO cycle for cycle: w_rdy, r_rdy, level every cycle, r_data whenever r_rdy; and its
    ``w_rdy_next`` (``Queue.room_next``) is the next cycle's ``w_rdy`` of Amaranth's FIFO."""
    pair = _Pair(depth, buffered)
    ref, dut = pair.ref, pair.dut
    rng = random.Random(depth * 2 + buffered)
    checked = []
    full_next = []

    async def bench(ctx):
        predicted = None
        for _ in range(1500):
            ctx.set(ref.w_data, rng.getrandbits(8))
            ctx.set(ref.w_en, rng.random() < 0.6)
            ctx.set(ref.r_en, rng.random() < 0.5)
            r = [ctx.get(x) for x in (ref.w_rdy, ref.r_rdy, ref.level)]
            d = [ctx.get(x) for x in (dut.w_rdy, dut.r_rdy, dut.level)]
            assert d == r
            if predicted is not None:
                assert predicted == r[0]
            if r[1]:
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data)
                checked.append(1)
            predicted = ctx.get(dut.w_rdy_next)
            full_next.append(not predicted)
            await ctx.tick()

    _simulate(pair, bench, inputs=[ref.w_data, ref.w_en, ref.r_en],
              outputs=[ref.w_rdy, ref.r_rdy, ref.level, ref.r_data,
                       dut.w_rdy, dut.r_rdy, dut.level, dut.r_data, dut.w_rdy_next])
    assert len(checked) > 500
    assert any(full_next) and not all(full_next)    # both values were predicted


class _OldSkid(Elaboratable):
    """The skid buffer as it was before its skid register followed the input (the reference)."""

    def __init__(self):
        from amaranth.hdl import Signal
        self.i_payload, self.i_valid, self.i_ready = Signal(8), Signal(), Signal()
        self.o_payload, self.o_valid, self.o_ready = Signal(8), Signal(), Signal()

    def elaborate(self, platform):
        from amaranth.hdl import Signal
        m = Module()
        skid, skid_valid = Signal(8), Signal()
        m.d.comb += self.i_ready.eq(~skid_valid)
        with m.If(self.o_ready | ~self.o_valid):
            with m.If(skid_valid):
                m.d.sync += [self.o_payload.eq(skid), self.o_valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o_payload.eq(self.i_payload), self.o_valid.eq(self.i_valid)]
        with m.Elif(self.i_valid & self.i_ready):
            m.d.sync += [skid.eq(self.i_payload), skid_valid.eq(1)]
        return m


def test_skid_buffer_matches_reference():
    """Cycle for cycle against the previous skid buffer: i.ready, o.valid every cycle and
    o.payload whenever o.valid, under random valid/ready/payload."""
    ref, dut = _OldSkid(), SkidBuffer(8)
    top = Module()
    top.submodules.ref, top.submodules.dut = ref, dut
    top.d.comb += [dut.i.payload.eq(ref.i_payload), dut.i.valid.eq(ref.i_valid),
                   dut.o.ready.eq(ref.o_ready)]
    rng = random.Random(5)
    seen = []

    async def bench(ctx):
        for _ in range(3000):
            ctx.set(ref.i_payload, rng.getrandbits(8))
            ctx.set(ref.i_valid, rng.random() < 0.7)
            ctx.set(ref.o_ready, rng.random() < 0.5)
            assert ctx.get(dut.i.ready) == ctx.get(ref.i_ready)
            assert ctx.get(dut.o.valid) == ctx.get(ref.o_valid)
            if ctx.get(ref.o_valid):
                assert ctx.get(dut.o.payload) == ctx.get(ref.o_payload)
                seen.append(1)
            await ctx.tick()

    _simulate(top, bench, inputs=[ref.i_payload, ref.i_valid, ref.o_ready],
              outputs=[dut.i.ready, ref.i_ready, dut.o.valid, ref.o_valid, dut.o.payload,
                       ref.o_payload])
    assert len(seen) > 1000


def test_room_fifo_writes_without_w_en():
    """The point of RoomFIFO: a free slot is written with w_en low (so a mutant that keeps
    Amaranth's enable fails here): the unbuffered FIFO's head shows the last input while
    empty, and still nothing is readable."""
    dut = RoomFIFO(width=8, depth=4, buffered=False)

    async def bench(ctx):
        ctx.set(dut.w_data, 0x5A)
        await ctx.tick()
        assert ctx.get(dut.r_data) == 0x5A and not ctx.get(dut.r_rdy)
        assert ctx.get(dut.level) == 0

    _simulate(dut, bench, inputs=[dut.w_data, dut.w_en, dut.r_en],
              outputs=[dut.r_data, dut.r_rdy, dut.level])


@pytest.mark.parametrize("depth", [2, 4, 7])
def test_bypass_fifo(depth):
    """BypassFIFO against a Python FIFO under random writes (with ``w_rdy``, never more than
    ``depth`` held) and reads: entries leave in order, none lost or made up; one written into an
    empty FIFO is readable in the next cycle, and ``r_rdy`` is high whenever one has been held for
    two cycles (the registered FIFO's latency)."""
    dut = BypassFIFO(width=8, depth=depth)
    rng = random.Random(depth)
    model = []          # [value, cycles held]
    stats = {"fast": 0, "out": 0}

    async def bench(ctx):
        for _ in range(4000):
            w = ctx.get(dut.w_rdy) and len(model) < depth and rng.random() < 0.5
            r = rng.random() < 0.5
            v = rng.getrandbits(8)
            ctx.set(dut.w_en, w)
            ctx.set(dut.w_data, v)
            ctx.set(dut.r_en, r)
            rdy = ctx.get(dut.r_rdy)
            assert rdy == 0 or model, "r_rdy with nothing held"
            if model and model[0][1] >= 2:
                assert rdy
            if model and model[0][1] == 1 and rdy:
                stats["fast"] += 1
            if rdy:
                assert ctx.get(dut.r_data) == model[0][0]
            if r and rdy:
                model.pop(0)
                stats["out"] += 1
            for e in model:
                e[1] += 1
            if w:
                model.append([v, 0])
            await ctx.tick()

    _simulate(dut, bench, inputs=[dut.w_en, dut.w_data, dut.r_en],
              outputs=[dut.w_rdy, dut.r_rdy, dut.r_data])
    assert stats["out"] > 1000 and stats["fast"] > 100


def test_queue_refuses_bad_depth():
    with pytest.raises(ValueError):
        Queue(8, 0)


def test_merge_refuses_bad_options():
    from amaranth.lib import data
    layout = data.StructLayout({"a": 5, "b": 11})
    for args, kw in (((layout, 0), {}), ((layout, 2), {"registered": ("x",)}),
                     ((layout, 2), {"grant_cycle": True}), ((16, 2), {"registered": ("a",)})):
        with pytest.raises(ValueError):
            StreamMerge(*args, **kw)


def _merge_producer(dut, k, items, rng, stall):
    """A testbench that offers ``items`` on the merge's input ``k``, pausing at random."""
    async def run(ctx):
        for x in items:
            ctx.set(dut.i[k].payload, x)
            ctx.set(dut.i[k].valid, 1)
            await ctx.tick().until(dut.i[k].ready)
            ctx.set(dut.i[k].valid, 0)
            while rng.random() < stall:
                await ctx.tick()
    return run


def _run_merge(dut, producers, consumer, cycles, process=False):
    """Simulate the merge with its producer testbenches and a consumer (a testbench, or a
    sampling process) for ``cycles`` clock periods."""
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for p in producers:
        sim.add_testbench(p)
    (sim.add_process if process else sim.add_testbench)(consumer)
    sim.run_until(1e-8 * cycles)


def test_merge_round_robin():
    n = 3
    dut = StreamMerge(16, n)
    rng = random.Random(4)
    sent = {k: [(k << 8) | i for i in range(40)] for k in range(n)}
    got = []

    def producer(k):
        return _merge_producer(dut, k, sent[k], rng, 0.2)

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        async for clk, rst, valid, payload in ctx.tick().sample(dut.o.valid, dut.o.payload):
            if valid:
                got.append(payload)

    _run_merge(dut, [producer(k) for k in range(n)], consumer, 600, process=True)
    for k in range(n):
        assert [x for x in got if x >> 8 == k] == sent[k]     # per-input order, nothing lost
    assert len(got) == sum(len(v) for v in sent.values())
    # fairness: while all three are busy, no input waits more than n grants
    first = got[:30]
    for k in range(n):
        idx = [i for i, x in enumerate(first) if x >> 8 == k]
        assert max(b - a for a, b in zip(idx, idx[1:])) <= 2 * n


@pytest.mark.parametrize("registers", [False, True])
def test_queue_registers_reach_the_netlist(registers):
    """``Queue(registers=True)`` must reach yosys as ``ram_style = "logic"`` on the storage
    memory (and only then): without it yosys maps a small queue to LUT RAM, which puts a LUT
    on the path from a block RAM into the queue (docs/synthesis.md)."""
    from amaranth.back import rtlil
    q = Queue(8, 2, buffered=False, registers=registers)
    text = rtlil.convert(q, ports=[q.i.valid, q.i.ready, q.i.payload,
                                   q.o.valid, q.o.ready, q.o.payload])
    assert "memwr" in text or "$mem" in text          # the storage is a memory
    assert ('attribute \\ram_style "logic"' in text) == registers


@pytest.mark.parametrize("depth", [1, 2, 5, 8])
def test_queue_registered_fields_match_buffered(depth):
    """``Queue(registered=...)`` (only some fields in the output register, the rest read from a
    ring at the head) against the plain buffered queue, cycle for cycle: ``i.ready``,
    ``o.valid``, ``level``, ``room_next`` every cycle and the whole payload whenever
    ``o.valid``, under random valid/ready/payload."""
    from amaranth.lib import data
    layout = data.StructLayout({"a": 5, "b": 11, "c": 3, "d": 7})
    ref = Queue(layout, depth)
    dut = Queue(layout, depth, registered=("b", "d"))
    top = Module()
    top.submodules.ref, top.submodules.dut = ref, dut
    top.d.comb += [dut.i.payload.eq(ref.i.payload), dut.i.valid.eq(ref.i.valid),
                   dut.o.ready.eq(ref.o.ready)]
    rng = random.Random(depth)
    seen = []

    async def bench(ctx):
        for _ in range(3000):
            ctx.set(ref.i.payload.as_value(), rng.getrandbits(26))
            ctx.set(ref.i.valid, rng.random() < 0.6)
            ctx.set(ref.o.ready, rng.random() < 0.5)
            for a, b in ((dut.i.ready, ref.i.ready), (dut.o.valid, ref.o.valid),
                         (dut.level, ref.level), (dut.room_next, ref.room_next)):
                assert ctx.get(a) == ctx.get(b)
            if ctx.get(ref.o.valid):
                assert ctx.get(dut.o.payload.as_value()) == ctx.get(ref.o.payload.as_value())
                seen.append(1)
            await ctx.tick()

    _simulate(top, bench, inputs=[ref.i.payload, ref.i.valid, ref.o.ready],
              outputs=[x for q in (ref, dut) for x in (q.i.ready, q.o.valid, q.level,
                                                       q.room_next, q.o.payload)])
    assert len(seen) > 800


@pytest.mark.parametrize("depth", [1, 2, 4, 5])
def test_shift_queue_matches_unbuffered(depth):
    """``ShiftQueue`` (entries in flip-flops shifting towards the head) against
    ``Queue(..., buffered=False)``, cycle for cycle under the same random valid, ready and
    payload: ``i.ready`` and ``o.valid`` every cycle, the payload whenever ``o.valid``; the
    queue is full (a push refused, also with a pop) and empty many times."""
    from amaranth.lib import data
    layout = data.StructLayout({"req": 1, "paylen": 13, "zero": 1})
    ref = Queue(layout, depth, buffered=False)
    dut = ShiftQueue(layout, depth)
    top = Module()
    top.submodules.ref, top.submodules.dut = ref, dut
    top.d.comb += [dut.i.payload.eq(ref.i.payload), dut.i.valid.eq(ref.i.valid),
                   dut.o.ready.eq(ref.o.ready)]
    rng = random.Random(depth + 60)
    stats = {"out": 0, "full_pop": 0, "empty": 0}

    async def bench(ctx):
        for k in range(4000):
            # phases of mostly pushing and mostly popping, so the queue fills and drains
            fill = (k // 200) % 2 == 0
            ctx.set(ref.i.payload.as_value(), rng.getrandbits(15))
            ctx.set(ref.i.valid, rng.random() < (0.8 if fill else 0.3))
            ctx.set(ref.o.ready, rng.random() < (0.3 if fill else 0.8))
            for a, b in ((dut.i.ready, ref.i.ready), (dut.o.valid, ref.o.valid)):
                assert ctx.get(a) == ctx.get(b), k
            if ctx.get(ref.o.valid):
                assert ctx.get(dut.o.payload.as_value()) == ctx.get(ref.o.payload.as_value()), k
                stats["out"] += ctx.get(ref.o.ready)
                if not ctx.get(ref.i.ready) and ctx.get(ref.o.ready) and ctx.get(ref.i.valid):
                    stats["full_pop"] += 1
            else:
                stats["empty"] += 1
            await ctx.tick()

    _simulate(top, bench, inputs=[ref.i.payload, ref.i.valid, ref.o.ready],
              outputs=[x for q in (ref, dut) for x in (q.i.ready, q.o.valid, q.o.payload)])
    assert stats["out"] > 800 and stats["full_pop"] > 20 and stats["empty"] > 100, stats


def test_shift_queue_refuses_bad_depth():
    for depth in (0, -1, 2.0):
        with pytest.raises(ValueError):
            ShiftQueue(8, depth)


@pytest.mark.parametrize("depth", [2, 5, 8])
def test_queue_registered_bypass(depth):
    """``Queue(registered=..., bypass=True)`` against a Python FIFO under random valid, ready and
    payload: entries leave in order, whole, none lost or made up; ``level`` counts them and
    ``i.ready`` never offers room beyond ``depth``; an entry written into an empty queue (or behind
    one being taken) is offered in the next cycle,
    and ``o.valid`` is high whenever one has been held for two cycles."""
    from amaranth.lib import data
    layout = data.StructLayout({"a": 5, "b": 11, "c": 3, "d": 7})
    dut = Queue(layout, depth, registered=("b", "d"), bypass=True)
    rng = random.Random(depth + 40)
    model = []          # [payload, cycles held]
    stats = {"fast": 0, "out": 0}

    async def bench(ctx):
        for _ in range(4000):
            v = rng.getrandbits(26)
            w = rng.random() < 0.6
            r = rng.random() < 0.5
            ctx.set(dut.i.payload.as_value(), v)
            ctx.set(dut.i.valid, w)
            ctx.set(dut.o.ready, r)
            assert ctx.get(dut.level) == len(model)
            ready = ctx.get(dut.i.ready)
            assert not ready or len(model) < depth, len(model)
            valid = ctx.get(dut.o.valid)
            assert valid == 0 or model, "o.valid with nothing held"
            if model and model[0][1] >= 2:
                assert valid
            if valid:
                assert ctx.get(dut.o.payload.as_value()) == model[0][0]
                if model[0][1] == 0:        # written in the cycle before
                    stats["fast"] += 1
            if r and valid:
                model.pop(0)
                stats["out"] += 1
            for e in model:
                e[1] += 1
            if w and ready:
                model.append([v, 0])
            await ctx.tick()

    _simulate(dut, bench)
    assert stats["out"] > 1000 and stats["fast"] > 50, stats


def test_queue_registered_refuses_bad_use():
    from amaranth.lib import data
    layout = data.StructLayout({"a": 5, "b": 11})
    for kw in ({"registered": ("x",)}, {"registered": ()},
               {"registered": ("a",), "buffered": False}, {"bypass": True},
               {"registered": ("a", "b"), "bypass": True}):
        with pytest.raises(ValueError):
            Queue(layout, 4, **kw)
    with pytest.raises(ValueError):
        Queue(layout, 1, registered=("a",), bypass=True)
    with pytest.raises(ValueError):
        Queue(16, 4, registered=("a",))


@pytest.mark.parametrize("n,grant_cycle", [(2, False), (3, False), (4, True)])
def test_merge_registered_fields(n, grant_cycle):
    """``StreamMerge(registered=...)``: per-input order kept, nothing lost or duplicated, every
    field of every transfer intact, an input popped only when the output is taken, and the
    payload stable while ``o.valid`` waits for ``ready`` (random valid/ready); with
    ``grant_cycle`` too."""
    from amaranth.lib import data
    layout = data.StructLayout({"k": 2, "x": 14, "y": 16})
    dut = StreamMerge(layout, n, registered=("x",), grant_cycle=grant_cycle)
    rng = random.Random(7)
    sent = {k: [{"k": k, "x": rng.getrandbits(14), "y": rng.getrandbits(16)} for _ in range(60)]
            for k in range(n)}
    got = []

    def producer(k):
        return _merge_producer(dut, k, sent[k], rng, 0.3)

    async def consumer(ctx):
        held = None
        for _ in range(600 * n):
            ctx.set(dut.o.ready, rng.random() < 0.5)
            await ctx.delay(1e-9)
            if ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload.as_value())
                if held is not None:
                    assert p == held                  # stable until taken
                if ctx.get(dut.o.ready):
                    got.append(p)
                    held = None
                else:
                    held = p
            await ctx.tick()

    _run_merge(dut, [producer(k) for k in range(n)], consumer, 600 * n + 100)
    as_int = lambda d: d["k"] | d["x"] << 2 | d["y"] << 16      # noqa: E731
    for k in range(n):
        assert [x for x in got if x & 3 == k] == [as_int(d) for d in sent[k]]
    assert len(got) == sum(len(v) for v in sent.values())
