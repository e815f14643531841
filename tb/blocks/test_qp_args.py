"""SET_QP's ARG lanes (rnic.control.qp_args.ArgRow): a table row written from ARG words, one
ARG a write, and read back decodes to the fields interface.md §4.2 puts in those ARGs (the
model below is written from the contract's table, not from ARG_BITS)."""

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib.memory import Memory

from rnic.control.qp_args import ArgRow, qp_arg_layout
from sim.vsim import Simulator


def model_fields(args):
    """interface.md §4.2, SET_QP: the static fields from ARG0..15."""
    a = args
    return {"pmtu": a[0] >> 8 & 0x7, "min_rnr": a[0] >> 16 & 0x1F, "timeout": a[0] >> 24 & 0x1F,
            "dest_qpn": a[1] & 0xFFFFFF, "pd": a[4] & 0xFFFF, "access": a[4] >> 16 & 0xFF,
            "rcqn": a[5] & 0xFFFF, "scqn": a[5] >> 16, "rq_base": (a[6] | a[7] << 32) & ~0x3F,
            "rq_log": a[8] & 0x1F, "sq_log": a[8] >> 8 & 0x1F, "retry_cnt": a[8] >> 16 & 7,
            "rnr_retry": a[8] >> 20 & 7, "sq_base": (a[9] | a[10] << 32) & ~0x3F,
            "rmac": a[11] | (a[12] & 0xFFFF) << 32, "rip": a[13], "sport": a[14] & 0xFFFF,
            "ord": a[15] & 0xF, "ird": a[15] >> 4 & 0xF}


@pytest.mark.parametrize("fields", [
    ("pmtu", "min_rnr", "pd", "access", "rcqn", "rq_base", "rq_log", "rip", "ird"),
    ("pmtu", "pd", "sq_base", "sq_log", "timeout", "retry_cnt", "rnr_retry", "scqn"),
    ("dest_qpn", "rmac", "rip", "sport"),
])
def test_arg_row_round_trip(fields):
    row = ArgRow(fields)
    m = Module()
    m.submodules.mem = mem = Memory(shape=row.width, depth=4, init=[])
    wp = mem.write_port(granularity=row.LANE)
    rp = mem.read_port(domain="comb")
    arg, valid = Signal(qp_arg_layout), Signal()
    row.write(m, wp, arg, valid)
    out = row.decode(m, rp.data)
    rng = random.Random(3)

    async def tb(ctx):
        for trial in range(6):
            q = trial % 4
            args = [rng.getrandbits(32) for _ in range(16)]
            # the sweep's clearing write first, then ARG0..15 one a cycle (the ring bases
            # arrive 64-byte aligned: SET_QP refuses any other before writing)
            args[6] &= ~0x3F
            args[9] &= ~0x3F
            ctx.set(valid, 1)
            ctx.set(arg, {"qpn": q, "arg": 0, "data": 0xFFFFFFFF, "all": 1})
            await ctx.tick()
            for k in range(16):
                ctx.set(arg, {"qpn": q, "arg": k, "data": args[k], "all": 0})
                await ctx.tick()
            ctx.set(valid, 0)
            ctx.set(rp.addr, q)
            await ctx.delay(1e-9)
            want = model_fields(args)
            got = ctx.get(out)
            for f in fields:
                assert int(getattr(got, f)) == want[f], (f, hex(int(getattr(got, f))),
                                                          hex(want[f]))
            # the sweep's write alone clears every field of its row
            ctx.set(valid, 1)
            ctx.set(arg, {"qpn": q, "arg": 3, "data": 0xFFFFFFFF, "all": 1})
            await ctx.tick()
            ctx.set(valid, 0)
            await ctx.delay(1e-9)
            assert all(int(getattr(ctx.get(out), f)) == 0 for f in fields)
    sim = Simulator(m, inputs=[valid, arg, rp.addr], outputs=[out])
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
