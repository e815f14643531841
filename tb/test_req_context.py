"""The requester context's bypassed read port (rnic.req.req_context._BypassedReadPort) against
a Python model of a transparent synchronous read port: a read returns the data written to its
address in the same cycle, and holds while its enable is low."""

import random

from amaranth.hdl import Module
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from rnic.req.req_context import _BypassedReadPort


def test_bypassed_read_port_is_transparent():
    m = Module()
    m.submodules.mem = mem = Memory(shape=8, depth=4, init=[])
    wp = mem.write_port()
    rp = _BypassedReadPort(m, mem, wp, "t")
    rng = random.Random(7)
    stats = {"bypass": 0, "hold": 0}

    async def tb(ctx):
        model, out = [0] * 4, 0
        for _ in range(3000):
            we, wa, wd = rng.random() < 0.6, rng.randrange(4), rng.randrange(256)
            re_, ra = rng.random() < 0.7, rng.randrange(4)
            ctx.set(wp.en, we); ctx.set(wp.addr, wa); ctx.set(wp.data, wd)
            ctx.set(rp.en, re_); ctx.set(rp.addr, ra)
            await ctx.tick()
            if we:
                model[wa] = wd
            if re_:
                out = model[ra]                 # the write of this cycle included
                stats["bypass"] += we and wa == ra
            else:
                stats["hold"] += 1
            assert ctx.get(rp.data) == out
    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert stats["bypass"] > 200 and stats["hold"] > 500     # both cases were exercised
