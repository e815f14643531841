"""The requester context (rnic.req.req_context): its bypassed read port (_BypassedReadPort)
against a Python model of a transparent synchronous read port (a read returns the data written
to its address in the same cycle, and holds while its enable is low), and the send CQN its
completions carry while SET_QP writes the same rows."""

import random

import pytest
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


@pytest.mark.parametrize("ctx_load", [0.0, 0.7])
def test_completion_send_cqn_meets_table_writes(ctx_load):
    """A completion's CQE carries its QP's send CQN as the table stands in the cycle it is first
    offered (a SET_QP write of that cycle included) or in a later cycle before the CQE is
    offered, with SET_QP's ARG5 writes to the same QP in most cycles; the CQE holds while it
    waits, and the completion is taken once its CQE is. With ``ctx_load``, ``ctx_req`` is
    offered that often (and ``ctx_resp`` taken as often): the completions' reads wait for the
    cycles the table's port reads no request."""
    from rnic.opcodes import WcStatus
    from rnic.req.req_context import ReqContext

    dut = ReqContext(num_qp=2)
    rng = random.Random(11)
    stats = {"cqes": 0, "raced": 0}

    async def tb(ctx):
        row = [0, 0]                # the send CQNs with every ARG write up to the cycle before
        hist = []                   # hist[n]: the table as a read in cycle n sees it
        pending = []                # (QPN, take cycle) of completions whose CQE has not come
        offered = None              # (cycle first offered, payload) of the CQE on offer
        offer = None                # (QPN, cycle first offered) of the completion on offer
        ctx.set(dut.qp_err.ready, 1)
        ctx.set(dut.event.ready, 1)
        for n in range(4000):
            hist.append(list(row))
            av = rng.random() < 0.6
            aq, cq = rng.randrange(2), rng.randrange(1 << 16)
            ctx.set(dut.qp_arg.valid, av)
            ctx.set(dut.qp_arg.payload, {"qpn": aq, "arg": 5, "data": cq << 16,
                                         "all": rng.random() < 0.05})
            # a completion offered holds until taken (stream rules: ReqContext reads it
            # where it waits, and takes it once its CQE is taken)
            if offer is None and rng.random() < 0.5:
                offer = (rng.randrange(2), n)
            cv = offer is not None
            ctx.set(dut.cpl.valid, cv)
            if cv:
                ctx.set(dut.cpl.payload, {"qpn": offer[0], "wr_id": offer[1],
                                          "status": WcStatus.SUCCESS})
            ctx.set(dut.cqe.ready, rng.random() < 0.7)
            ctx.set(dut.ctx_req.valid, rng.random() < ctx_load)
            ctx.set(dut.ctx_req.payload.qpn, rng.randrange(2))
            ctx.set(dut.ctx_resp.ready, rng.random() < ctx_load)
            if cv and offer[1] == n:
                pending.append((offer[0], n))   # (its QPN, the cycle it was first offered)
            if cv and ctx.get(dut.cpl.ready):
                offer = None
            if ctx.get(dut.cqe.valid):
                p = ctx.get(dut.cqe.payload)
                if offered is None:
                    offered = (n, p)
                assert p == offered[1]                  # held while it waits
                if ctx.get(dut.cqe.ready):
                    q, t = pending.pop(0)
                    assert p.qpn == q
                    seen = {hist[k][q] for k in range(t, offered[0])}
                    assert p.cqn in seen, (n, t, p.cqn, seen)
                    stats["cqes"] += 1
                    stats["raced"] += len(seen) > 1
                    offered = None
            if av:
                row[aq] = 0 if ctx.get(dut.qp_arg.payload.all) else cq
            await ctx.tick()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert stats["cqes"] > 500 and stats["raced"] > 50      # writes met the reads
