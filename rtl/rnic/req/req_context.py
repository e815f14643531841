"""The requester's view of the QP context, and its completions turned into CQEs.

The responder's :class:`~rnic.resp.qp_context.QpContext` (inside PSN Check) runs the SET_QP and
QUERY_QP commands. The requester needs a few static fields of a QP each time it starts serving it,
on its own schedule: this block keeps them, and only them (path MTU, timeout, PD, SQ ring, retry
counts; the send CQN for its completions), in a table of 9-bit lanes written from the QP
context's ``qp_arg`` ARG writes (:mod:`rnic.control.qp_args`), and the QP's state in a
small table written from PSN Check's ``qp_set`` events (every SET_QP and every move to ERROR the
responder makes on its own), and serves the requester's ``ctx_req``/``ctx_resp`` from them.

It also stands between the requester's completions (``cpl``) and CQE Generation: it adds the
QP's send CQN, marks WR_FLUSH_ERR completions as flush (never reserved, dropped when the CQ is
full, interface.md §5.4), and turns what the requester reports into the QP-level consequences
the top must enforce:

* an error completion (status not SUCCESS, not WR_FLUSH_ERR) → its CQE, and the QPN on
  ``qp_err`` (PSN Check moves the QP to ERROR: event 3, flush of the receive queue);
* a WQE-fetch fault (``cpl.fault``; no CQE, the WQE could not be read) and a gather read fault
  (``req_fault``) → event 4 (host-memory fault, number = QPN) and the QPN on ``qp_err``.

Ports
-----
qp_set : In(stream.Signature(qp_set_event_layout, always_ready=True))
    From PSN Check. Registered, then written into the state table and forwarded to the
    requester (both one cycle after the transfer).
qp_arg : In(stream.Signature(qp_arg_layout, always_ready=True))
    From PSN Check (the QP context's ARG writes). Registered, then written into the QP's row
    (one cycle after the transfer; every ARG write of a SET_QP comes before its ``qp_set``).
req_qp_set : Out(stream.Signature(qp_set_layout))
    To the requester's ``qp_set`` through an 8-entry queue (SET_QP is a slow-path command that
    takes tens of cycles; responder-made ERROR moves are one per fatal event; the requester
    takes one per cycle).
ctx_req : In(QpnStream()) / ctx_resp : Out(stream.Signature(req_ctx_layout))
    One request at a time (``ready`` while none is under way); its response two cycles later
    at the earliest (later when the read meets a write to the QP's row, and is made again),
    the QP's row as of one cycle. Every field of ``req_ctx_layout`` except ``state`` is the
    static field of the same name.
cpl : In(stream.Signature(cpl_layout)) → cqe : Out(stream.Signature(cqe_layout)),
qp_err : Out(QpnStream()), event : Out(stream.Signature(event_layout))
    A completion is read where it waits (the requester's register) and taken when every
    output it needs was taken: its payload must hold while it waits (stream rules).
req_fault : In(QpnStream())
    A gather fault's or a READ response write's QPN (a QP of the core: below N).
prog_psn : In(stream.Signature({qpn, psn}, always_ready=True)),
prog_cons : In(stream.Signature({qpn, cons}, always_ready=True))
    Every write of the requester's next send PSN and SQ consumer index (retired WQEs), kept
    in two small tables for QUERY_QP (written one cycle after the transfer).
q_qpn : In(range(num_qp)) → q_psn : Out(24), q_cons : Out(16)
    QUERY_QP's read of those tables, one cycle after the address (registered).
"""

import types

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..host.cqe_gen import cqe_layout
from ..ifaces import EventType, QpnStream, event_layout
from ..opcodes import WcStatus
from ..control.qp_args import ArgRow, qp_arg_layout
from ..parts import add as _add
from ..resp.qp_context import qp_set_event_layout
from ..stream import Queue
from .requester import cpl_layout, qp_set_layout, req_ctx_layout

__all__ = ["ReqContext"]

prog_psn_layout = data.StructLayout({"qpn": 24, "psn": 24})
prog_cons_layout = data.StructLayout({"qpn": 24, "cons": 16})


class ReqContext(wiring.Component):
    """Shadow QP context for the requester and its completion adapter (see module docstring).

    Parameters
    ----------
    num_qp : int
        Number of QPs (power of two).
    """

    def __init__(self, *, num_qp):
        self.num_qp = num_qp
        self.abits = (num_qp - 1).bit_length()
        self.fields = [n for n, _ in req_ctx_layout if n != "state"]
        # (every field but the state is a SET_QP field: ArgRow refuses any other; the send CQN
        # in lanes of the same row)
        self.row = ArgRow(self.fields + ["scqn"])
        super().__init__({
            "qp_set": In(stream.Signature(qp_set_event_layout, always_ready=True)),
            "qp_arg": In(stream.Signature(qp_arg_layout, always_ready=True)),
            "req_qp_set": Out(stream.Signature(qp_set_layout)),
            "ctx_req": In(QpnStream()),
            "ctx_resp": Out(stream.Signature(req_ctx_layout)),
            "cpl": In(stream.Signature(cpl_layout)),
            "req_fault": In(QpnStream()),
            "cqe": Out(stream.Signature(cqe_layout)),
            "qp_err": Out(QpnStream()),
            "event": Out(stream.Signature(event_layout)),
            "prog_psn": In(stream.Signature(prog_psn_layout, always_ready=True)),
            "prog_cons": In(stream.Signature(prog_cons_layout, always_ready=True)),
            "q_qpn": In(self.abits),
            "q_psn": Out(24),
            "q_cons": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(ab=self.abits, R=self.row)
        _add(t, self._tables(m, t))
        self._table_writes(m, t)
        _add(t, self._ctx_read(m, t))
        self._progress(m, t)
        _add(t, self._completion_take(m, t))
        self._completion_outputs(m, t)
        return m

    def _tables(self, m, t):
        """The two tables: the QP's static fields and its send CQN (``table``, 9-bit lanes) and
        its state (``states``), each with its write port and one read port, both read at one
        address (``rd_addr``, ``rd_en``); ``table``'s port serves ``ctx_req`` and, when no
        request is read, the completions (:meth:`_completion_take`). Its word goes into a
        reset-less register loaded under ``rd_en`` (``row_q``: the block RAM's output register),
        two cycles from the address; ``states`` (LUT RAM) is read in the second cycle, at the
        registered address, into ``state_q``. Adds the ports, the registers and ``spoil``: the
        read now in the latch met a write to its row in its cycle, or a write to the state
        since (so ``row_q`` and ``state_q`` would not be one cycle's row)."""
        R = t.R
        # A read that meets a write to its row is not used (``spoil``: a ctx_req read is made
        # again, a completion's is not counted), so the table needs no read-during-write logic,
        # and its read port drives nothing but ``row_q``, which synthesis folds into the block
        # RAM as its output register.
        m.submodules.table = table = Memory(shape=R.width, depth=self.num_qp, init=[],
                                            attrs={"no_rw_check": 1})
        wp = table.write_port(granularity=R.LANE)
        rp = table.read_port()
        m.submodules.states = states = Memory(shape=req_ctx_layout["state"].shape,
                                              depth=self.num_qp, init=[])
        st_wp = states.write_port()
        st_rp = states.read_port(domain="comb")
        rd_addr, rd_en = Signal(t.ab), Signal()
        a1 = Signal(t.ab)               # the address of the read in the latch
        m.d.comb += [rp.addr.eq(rd_addr), rp.en.eq(rd_en), st_rp.addr.eq(a1)]
        row_q = Signal(R.width, reset_less=True)
        state_q = Signal(req_ctx_layout["state"].shape, reset_less=True)
        with m.If(rd_en):
            m.d.sync += [row_q.eq(rp.data), state_q.eq(st_rp.data)]
        # each table's write of the read's cycle (enable and address registered, compared in
        # the next cycle), and the state's writes to a1 since, while the latch holds
        w_r, w_a = Signal(), Signal(t.ab)
        s_r, s_a = Signal(), Signal(t.ab)
        fresh = Signal()                # the latch was loaded in the last cycle
        held = Signal()
        spoil = Signal()
        m.d.sync += [fresh.eq(rd_en), held.eq(spoil | (st_wp.en & (st_wp.addr == a1)))]
        with m.If(rd_en):
            m.d.sync += [a1.eq(rd_addr), w_r.eq(wp.en.any()), w_a.eq(wp.addr),
                         s_r.eq(st_wp.en), s_a.eq(st_wp.addr)]
        m.d.comb += spoil.eq(Mux(fresh, (w_r & (w_a == a1)) | (s_r & (s_a == a1)), held))
        return types.SimpleNamespace(wp=wp, st_wp=st_wp, rd_addr=rd_addr, rd_en=rd_en,
                                     row_q=row_q, state_q=state_q, a1=a1, spoil=spoil)

    def _table_writes(self, m, t):
        """The table writes and the requester's ``qp_set``: PSN Check's ``qp_set`` events into
        the state table and through an 8-entry queue to the requester, and SET_QP's ARG words
        (``qp_arg``) into their lanes of the QP's rows. Both are registered first, so PSN
        Check's decisions end at flip-flops."""
        ab, R, wp, st_wp = t.ab, t.R, t.wp, t.st_wp
        # ---- table writes, and the requester's qp_set -------------------------------------------
        # The event is registered first: PSN Check's pipeline decides its moves to ERROR in the
        # cycle it emits them, and without this register that decision ran on through the
        # table's write port and the read ports' forwarding into the requester. The state
        # table and the requester learn of a change one cycle later.
        ev = Signal(qp_set_event_layout)
        ev_valid = Signal()
        m.d.sync += [ev_valid.eq(self.qp_set.valid), ev.eq(self.qp_set.payload)]
        m.d.comb += [st_wp.addr.eq(ev.qpn[:ab]), st_wp.data.eq(ev.state),
                     st_wp.en.eq(ev_valid & (ev.qpn < self.num_qp))]
        # SET_QP's ARG words, registered the same way, each written into its lanes of the row
        # (the QPN kept as its row index, with its range check)
        arg = Signal(data.StructLayout({f: (ab if f == "qpn" else w)
                                        for f, w in qp_arg_layout.members.items()}))
        arg_valid, arg_ok = Signal(), Signal()
        ap = self.qp_arg.payload
        m.d.sync += [arg_valid.eq(self.qp_arg.valid), arg_ok.eq(ap.qpn < self.num_qp)]
        m.d.sync += [arg[f].eq(ap[f][:len(arg[f])]) for f in qp_arg_layout.members]
        R.write(m, wp, arg, arg_valid & arg_ok)

        m.submodules.set_q = set_q = Queue(qp_set_layout, 8)
        m.d.comb += [set_q.i.valid.eq(ev_valid),
                     set_q.i.payload.qpn.eq(ev.qpn), set_q.i.payload.state.eq(ev.state),
                     set_q.i.payload.sq_psn.eq(ev.sq_psn)]
        wiring.connect(m, set_q.o, wiring.flipped(self.req_qp_set))

    def _ctx_read(self, m, t):
        """``ctx_req`` -> ``ctx_resp``: one request at a time (``ready`` while none is under
        way), read into the latches (``v1``) and on into the output registers (``ctx_resp``
        valid), which hold it until taken; a read that met a write to its row is made again
        at the same address. The ports read at the completion's QPN when they read no request.
        Adds ``adv`` (the ports read, the output registers load) and ``v1``."""
        ab, R = t.ab, t.R
        # ---- ctx_req -> ctx_resp (two registered reads) -----------------------------------------
        rv, v1 = Signal(), Signal()
        adv = Signal()
        take = Signal()
        m.d.comb += [
            adv.eq(~rv | self.ctx_resp.ready),
            self.ctx_req.ready.eq(~rv & ~v1),
            take.eq(self.ctx_req.valid & ~rv & ~v1),
            t.rd_en.eq(adv),
            t.rd_addr.eq(Mux(v1, t.a1, Mux(take, self.ctx_req.payload.qpn[:ab],
                                           self.cpl.payload.qpn[:ab]))),
            self.ctx_resp.valid.eq(rv),
            self.ctx_resp.payload.state.eq(t.state_q),
        ]
        ctx_f = R.decode(m, t.row_q, "ctx_fields")
        for name in self.fields:
            m.d.comb += getattr(self.ctx_resp.payload, name).eq(getattr(ctx_f, name))
        with m.If(adv):
            # (v1 & ~spoil: the latches' read moves on, and the ports read again at a1 unused)
            m.d.sync += [rv.eq(v1 & ~t.spoil), v1.eq((v1 & t.spoil) | take)]
        return types.SimpleNamespace(adv=adv, v1=v1, take_req=take)

    def _progress(self, m, t):
        """The requester's progress for QUERY_QP: two small tables of its next send PSN and SQ
        consumer index per QP, written from ``prog_psn``/``prog_cons`` through a register
        (so the completer's logic that makes them ends at flip-flops) and read at ``q_qpn``."""
        ab = t.ab
        # ---- the requester's progress, for QUERY_QP ----------------------------------------------
        # Each write is registered before the table: the requester's completer logic that makes
        # it then ends at these flip-flops instead of running on through the table's write
        # address and the read port's forwarding compare. QUERY_QP (a slow-path command) sees a
        # write one cycle later; nothing else reads these tables.
        for name, width in (("psn", 24), ("cons", 16)):
            mem = Memory(shape=width, depth=self.num_qp, init=[])
            m.submodules[f"prog_{name}"] = mem
            pw = mem.write_port()
            pr = mem.read_port(transparent_for=(pw,))
            src = getattr(self, f"prog_{name}")
            w_en, w_addr, w_data = Signal(name=f"{name}_w_en"), Signal(ab), Signal(width)
            m.d.sync += [w_en.eq(src.valid), w_addr.eq(src.payload.qpn[:ab]),
                         w_data.eq(getattr(src.payload, name))]
            m.d.comb += [pw.addr.eq(w_addr), pw.data.eq(w_data), pw.en.eq(w_en),
                         pr.addr.eq(self.q_qpn), getattr(self, f"q_{name}").eq(pr.data)]

    def _completion_take(self, m, t):
        """Take one completion (``cpl``) or gather fault (``req_fault``) at a time, the
        completion first, and read its QP's send CQN into ``scqn`` through ``table``'s port,
        in a cycle it reads no ``ctx_req``. A completion is not copied: it stays in the requester's ``cpl``
        register (a stream's payload holds while it waits), which is taken (``ready``) when
        every output it needs was taken; a fault, taken at once, leaves its QPN in ``fq``.
        Adds ``busy``, ``rd_wait`` (the CQN is not read yet), ``flt`` (the held one is a
        fault), ``fq``, what it still needs to offer (``need_cqe``, ``need_err``,
        ``need_ev``), and ``scqn``."""
        ab, R = t.ab, t.R
        # ---- completions ------------------------------------------------------------------------
        # one completion (or gather fault) at a time: read its QP's send CQN, then offer the CQE,
        # the QP-to-ERROR report and the event independently; the slot frees when all are taken.
        # The ports read at the completion's QPN, which holds while it waits, in every cycle
        # they read no ``ctx_req``; a read made in the cycle it is taken or later that met no
        # write to its row gives the CQN (c1, c2: such a read is in the latches, in row_q), so
        # the CQE carries the row as of a cycle from the one the completion was first seen to
        # the one before the CQE. (A fault reads the row too, and does not use it.)
        busy = Signal()
        rd_wait = Signal()
        flt = Signal()                  # the held one is a gather fault (its QPN in fq)
        fq = Signal(ab)                 # (a QPN of the core: below N)
        need_cqe, need_err, need_ev = Signal(), Signal(), Signal()
        take_cpl = Signal()
        take_flt = Signal()
        m.d.comb += [
            take_cpl.eq(~busy & self.cpl.valid),
            take_flt.eq(~busy & ~self.cpl.valid & self.req_fault.valid),
            self.req_fault.ready.eq(~busy & ~self.cpl.valid),
        ]
        cp = self.cpl.payload
        err_status = (cp.status != WcStatus.SUCCESS) & (cp.status != WcStatus.WR_FLUSH_ERR)
        with m.If(take_cpl):
            m.d.sync += [busy.eq(1), rd_wait.eq(1), flt.eq(0),
                         need_cqe.eq(~cp.fault),
                         need_err.eq(cp.fault | err_status),
                         need_ev.eq(cp.fault)]
        with m.If(take_flt):
            m.d.sync += [busy.eq(1), rd_wait.eq(1), flt.eq(1),
                         fq.eq(self.req_fault.payload.qpn[:ab]),
                         need_cqe.eq(0), need_err.eq(1), need_ev.eq(1)]
        c1, c2 = Signal(), Signal()
        at_cpl = ~t.v1 & ~t.take_req    # the ports read at the completion's QPN (with adv)
        with m.If(take_cpl | take_flt):
            m.d.sync += [c1.eq(t.adv & at_cpl), c2.eq(0)]
        with m.Elif(t.adv):
            m.d.sync += [c1.eq(at_cpl & busy & rd_wait), c2.eq(c1 & ~t.spoil)]
        scqn = Signal(16)
        with m.If(rd_wait & c2):
            m.d.sync += [rd_wait.eq(0), scqn.eq(R.decode(m, t.row_q, "cpl_fields").scqn)]
        return types.SimpleNamespace(busy=busy, rd_wait=rd_wait, flt=flt, fq=fq,
                                     need_cqe=need_cqe, need_err=need_err, need_ev=need_ev,
                                     scqn=scqn)

    def _completion_outputs(self, m, t):
        """The held completion's three outputs, offered independently once its CQN is read:
        the CQE (with the send CQN; WR_FLUSH_ERR marked ``flush``), the QPN on ``qp_err`` (an
        error completion or a fault) and event 4 (a fault); the slot frees when every one it
        needs is taken."""
        busy, rd_wait, flt, fq, scqn = t.busy, t.rd_wait, t.flt, t.fq, t.scqn
        need_cqe, need_err, need_ev = t.need_cqe, t.need_err, t.need_ev
        c = self.cpl.payload            # the held completion (a fault needs only fq)
        qpn = Mux(flt, fq, c.qpn)
        live = Signal()
        m.d.comb += live.eq(busy & ~rd_wait)
        q = self.cqe.payload
        m.d.comb += [
            self.cqe.valid.eq(live & need_cqe),
            q.cqn.eq(scqn), q.wr_id.eq(c.wr_id), q.byte_len.eq(c.byte_len), q.imm_or_rkey.eq(0),
            q.qpn.eq(c.qpn), q.status.eq(c.status), q.opcode.eq(c.opcode), q.flags.eq(c.flags),
            q.se.eq(0), q.flush.eq(c.status == WcStatus.WR_FLUSH_ERR),
            self.qp_err.valid.eq(live & need_err), self.qp_err.payload.qpn.eq(qpn),
            self.event.valid.eq(live & need_ev),
            self.event.payload.type.eq(EventType.HOST_FAULT),
            self.event.payload.number.eq(qpn),
        ]
        nc, ne, nv = Signal(), Signal(), Signal()
        m.d.comb += [nc.eq(need_cqe & ~self.cqe.ready), ne.eq(need_err & ~self.qp_err.ready),
                     nv.eq(need_ev & ~self.event.ready)]
        with m.If(live):
            m.d.sync += [need_cqe.eq(nc), need_err.eq(ne), need_ev.eq(nv)]
            with m.If(~nc & ~ne & ~nv):
                m.d.sync += busy.eq(0)
                # (the completion leaves the requester's register as its last output is taken)
                m.d.comb += self.cpl.ready.eq(~flt)
