"""sim.vsim: Amaranth-style testbenches on the generated Verilog keep Amaranth's timing (a set
settles at once, a tick is one rising edge, ``sample`` reads before the edge), fail on X where
an X is used, and refuse what they cannot simulate."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from sim.vsim import Simulator, Undefined


class _Probe(wiring.Component):
    """``sum`` = a + b (combinational); ``count`` counts the cycles ``en`` is high; ``rdata`` is
    a block-RAM-style read (its register has no initial value: X until the first read)."""

    def __init__(self):
        super().__init__({"a": In(8), "b": In(8), "sum": Out(9), "en": In(1), "count": Out(8),
                          "raddr": In(2), "ren": In(1), "rdata": Out(8)})
        self.hidden = Signal(4)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.sum.eq(self.a + self.b)
        with m.If(self.en):
            m.d.sync += self.count.eq(self.count + 1)
        m.d.sync += self.hidden.eq(self.hidden + 1)
        m.submodules.mem = mem = Memory(shape=8, depth=4, init=[11, 22, 33, 44])
        rp = mem.read_port()
        m.d.comb += [rp.addr.eq(self.raddr), rp.en.eq(self.ren), self.rdata.eq(rp.data)]
        return m


def _run(bench, *others):
    dut = _Probe()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench(dut))
    for o in others:
        sim.add_process(o(dut))
    sim.run()


def test_set_settles_and_tick_is_one_edge():
    seen = {}

    def bench(dut):
        async def run(ctx):
            ctx.set(dut.a, 200)
            ctx.set(dut.b, 100)
            seen["sum"] = ctx.get(dut.sum)                       # no tick needed
            ctx.set(dut.en, 1)
            for _ in range(5):
                await ctx.tick()
            seen["count"] = ctx.get(dut.count)
            _, _, before = await ctx.tick().sample(dut.count)   # read before the edge
            seen["sampled"] = (before, ctx.get(dut.count))
            ctx.set(dut.en, 0)
            await ctx.tick().repeat(3)
            seen["held"] = ctx.get(dut.count)
        return run

    _run(bench)
    assert seen == {"sum": 300, "count": 5, "sampled": (5, 6), "held": 6}


def test_process_samples_every_edge():
    counts = []

    def bench(dut):
        async def run(ctx):
            ctx.set(dut.en, 1)
            await ctx.tick().repeat(4)
        return run

    def watch(dut):
        async def run(ctx):
            async for _, _, c in ctx.tick().sample(dut.count):
                counts.append(c)
        return run

    _run(bench, watch)
    assert counts[:4] == [0, 1, 2, 3]


def test_x_fails_where_it_is_used():
    got = {}

    def bench(dut):
        async def run(ctx):
            x = ctx.get(dut.rdata)                  # the read register before any read
            got["x"] = isinstance(x, Undefined)
            with pytest.raises(AssertionError, match="X on a port"):
                bool(x == 0)
            ctx.set(dut.raddr, 2)
            ctx.set(dut.ren, 1)
            await ctx.tick()
            got["read"] = ctx.get(dut.rdata)
        return run

    _run(bench)
    assert got == {"x": True, "read": 33}


@pytest.mark.parametrize("case", ["set an output", "read an inner signal"])
def test_refuses_what_it_cannot_simulate(case):
    def bench(dut):
        async def run(ctx):
            if case == "set an output":
                ctx.set(dut.sum, 1)
            else:
                ctx.get(dut.hidden)
            await ctx.tick()
        return run

    with pytest.raises((ValueError, KeyError)):
        _run(bench)
