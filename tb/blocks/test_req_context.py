"""The requester context (rnic.req.req_context): its ``ctx_req``/``ctx_resp`` reads, each the
QP's row (static fields and state) as of one cycle from the request to the response, with
SET_QP's ARG writes and state events to the same QPs in most cycles, and the send CQN its
completions carry while SET_QP writes the same rows."""

import random

import pytest

from sim.vsim import Simulator


def _fields(row, args, state):
    """The ``req_ctx_layout`` fields ``row`` (an ArgRow) keeps of the ARG words ``args``."""
    out = {f: 0 for f in row.layout.members}
    for a, (_, _, bits) in row.plan.items():
        for lo, w, field, flo, _ in bits:
            out[field] |= ((args.get(a, 0) >> lo) & ((1 << w) - 1)) << flo
    out.pop("scqn")
    out["state"] = state
    return out


def test_ctx_read_is_one_cycles_row():
    """Each ``ctx_resp`` is the QP's row, every field as of one cycle from the cycle its request
    was taken to the cycle before the response, while ARG writes and state events meet the
    reads; the response holds while it waits; one request at a time."""
    from rnic.req.req_context import ReqContext

    dut = ReqContext(num_qp=2)
    rng = random.Random(5)
    args = sorted(dut.row.plan)
    stats = {"resps": 0, "raced": 0}

    async def tb(ctx):
        tab = [({}, 0), ({}, 0)]        # per QP: ARG words, state (writes up to the cycle before)
        hist = []                       # hist[n]: both QPs' fields as a read in cycle n sees them
        req = None                      # (QPN, cycle taken) of the request under way
        want = None                     # QPN of the request offered
        held = None
        ctx.set(dut.cqe.ready, 1)
        for n in range(5000):
            hist.append([_fields(dut.row, a, st) for a, st in tab])
            av, ev = rng.random() < 0.5, rng.random() < 0.2
            aq, eq = rng.randrange(2), rng.randrange(2)
            arg, word, al = rng.choice(args), rng.randrange(1 << 32), rng.random() < 0.03
            state = rng.randrange(8)
            ctx.set(dut.qp_arg.valid, av)
            ctx.set(dut.qp_arg.payload, {"qpn": aq, "arg": arg, "data": word, "all": al})
            ctx.set(dut.qp_set.valid, ev)
            ctx.set(dut.qp_set.payload, {"qpn": eq, "state": state, "sq_psn": 0})
            if want is None and req is None and rng.random() < 0.5:
                want = rng.randrange(2)
            ctx.set(dut.ctx_req.valid, want is not None)
            ctx.set(dut.ctx_req.payload.qpn, want or 0)
            rdy = rng.random() < 0.6
            ctx.set(dut.ctx_resp.ready, rdy)
            if want is not None and ctx.get(dut.ctx_req.ready):
                assert req is None                      # one request at a time
                req, want = (want, n), None
            if ctx.get(dut.ctx_resp.valid):
                assert req is not None
                p = ctx.get(dut.ctx_resp.payload)
                got = {f: int(getattr(p, f)) if f != "state" else int(p.state)
                       for f in hist[0][0]}
                if held is None:
                    seen = [hist[k][req[0]] for k in range(req[1], n)]
                    assert got in seen, (n, req, got)
                    stats["raced"] += any(h != seen[0] for h in seen)
                    held = got
                assert got == held                      # held while it waits
                if rdy:
                    req, held = None, None
                    stats["resps"] += 1
            # ARG and state writes are made one cycle after their transfer
            if av:
                a, st = tab[aq]
                tab[aq] = ({} if al else {**a, arg: word}), st
            if ev:
                tab[eq] = tab[eq][0], state
            await ctx.tick()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert stats["resps"] > 500 and stats["raced"] > 50     # writes met the reads


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
        for n in range(5000):
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
