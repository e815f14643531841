"""Execute stage of the responder: Receive Queue fetch, Key checks, Scatter Path, invalidate and
the hand-off to CQE Generation (roce-reference.md §3.7–3.9, §3.11; interface.md §5.1, §5.4, §6).

It implements the execute-outcome interface of :class:`~rnic.resp.psn_check.PsnCheck`
(``exe`` commands, ``pay`` beats, one ``done`` per command, in order). See ``docs/execute.md``.

Structure
---------
A *planner* FSM takes one ``exe`` command at a time:

1. reads the per-QP tables (block RAM, ``num_qp`` rows): ``dead`` (the QP had a fatal outcome
   here or was flushed; its younger commands are skipped until ``qp_reset``), ``wflt`` (a
   payload write of the QP faulted), ``wqe`` (the receive WQE the QP's message in progress
   holds, with its ring index: one per QP, so every QP may have a message open) and ``cnext``
   (the flush's start);
2. ``wqe`` = 1: fetches the WQE at ``rq_base + 64·(rq_index mod 2^rq_log)`` through
   :class:`~rnic.resp.rq_fetch.RqFetch` (on demand, no prefetch) and stores it in the table;
3. cuts the packet into at most three pieces: SEND → the overlap of ``[offset, offset +
   payload_len)`` with each SGE (zero-length SGEs skipped), each checked by a Key Cache lookup
   (LOCAL_WRITE, the QP's PD, the piece's range); RDMA WRITE → one piece at ``va + offset``
   checked with the rkey (REMOTE_WRITE) unless ``dma_len`` = 0;
4. reserves a CQE slot when a CQE will be written;
5. issues one host-memory write request per piece and the piece to
   :class:`~rnic.resp.scatter.ScatterPath`, then a closing piece that drops the packet's
   remaining beats (also when nothing is written);
6. SEND_*_WITH_INVALIDATE: once the packet's last write beat is taken, the Key Cache ``inval``;
7. pushes the ``done`` entry (released when the Scatter Path has finished the packet) and the
   CQE (released when every write issued so far has its OKAY-or-not ``done``).

The planner works on the next command while the Scatter Path streams the previous packet.

Outcomes (``done`` = {fatal, syndrome}; CQE status)
---------------------------------------------------
* success: fatal 0; CQE (``comp``) SUCCESS, byte_len = offset + payload_len (SEND) or dma_len
  (WRITE_WITH_IMM), imm (wire order, as ``exe.imm``) or the invalidated rkey, flags.
* num_sge > 3, message longer than the buffer, failed lkey/range: fatal 0x63, CQE LOC_QP_OP_ERR,
  nothing of the packet written.
* failed rkey: fatal 0x62, CQE REM_ACCESS_ERR only when the command takes a WQE (``wqe`` = 1,
  WRITE_*_WITH_IMMEDIATE), nothing written.
* refused invalidate: fatal 0x1F, CQE REM_INV_REQ_ERR (the data was placed).
* CQ full at reservation: fatal 0 syndrome 0, no CQE, nothing written.
* ``status`` ≠ 0 (decided by PSN Check): CQE with that status for the held (or fetched) WQE.
* WQE read non-OKAY: event 4, fatal with syndrome 0 (the QP goes to ERROR, nothing is sent),
  no CQE (wr_id unknown); the WQE counts as completed.
* data write non-OKAY (known only after its ``done`` left): event 4, one ``fault`` {qpn}
  transfer (the QP's owner must move it to ERROR), the QP is marked: its CQEs still waiting and
  later ones are written with LOC_QP_OP_ERR, its younger commands are skipped.
* a QP marked dead (fatal here, flushed, or write fault): no fetch, no lookup, no write, no
  CQE; ``done`` fatal 0 (PSN Check suppresses the QP's responses anyway).

Flush
-----
A third per-QP table holds the index of the QP's next receive WQE without a completion (set
past every WQE this stage completes, or loses to a full CQ or a read fault). A ``flush``
request ``{qpn, index, rcqn, rq_base, rq_log}`` (taken only while no ``exe`` waits, so the
commands PSN Check decided before it are planned first) fetches each WQE from there up to
``index`` and submits a WR_FLUSH_ERR CQE (``flush`` = 1, no reservation: CqeGen drops it if
the CQ is full), then marks the QP dead. PSN Check's ``rq_flush`` covers RQ doorbells in ERROR
but lacks ``rcqn``/``rq_base``/``rq_log`` and is not sent when a QP *enters* ERROR
(``docs/execute.md``).
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect

from ..host.axi_master import ReadClientSignature, WriteClientSignature
from ..host.cqe_gen import WITH_IMM, WITH_INVALIDATE, cqe_layout
from ..ifaces import EventType, event_layout
from ..keys.key_cache import Access, InvalSignature, LookupSignature
from ..opcodes import WcStatus
from ..stream import BeatStream, Queue, check_width
from .psn_check import done_layout, exe_layout
from .rq_fetch import MAX_SGE, RqFetch, wqe_layout
from .scatter import ScatterPath, piece_layout

__all__ = ["Execute", "RECV", "RECV_RDMA_WITH_IMM", "flush_layout"]

RECV = 128
RECV_RDMA_WITH_IMM = 129

_post_layout = data.StructLayout({"fatal": 1, "syndrome": 8, "beats": 1})
_cqe_entry_layout = data.StructLayout({"cqe": cqe_layout, "need": 16})
_row_layout = data.StructLayout({"wqe": wqe_layout, "index": 16})

#: Flush request: complete the QP's receive WQEs from the first one without a completion
#: up to ``index`` (exclusive, the RQ producer index) with WR_FLUSH_ERR. ``rq_flush_layout``
#: of PSN Check plus the QP's recv CQN and RQ ring.
flush_layout = data.StructLayout({
    "qpn": 24, "index": 16, "rcqn": 16, "rq_base": 64, "rq_log": 5,
})

#: Write requests issued whose ``done`` is not back, at most (the tag is 8 bits).
MAX_WRITES = 64


class Execute(wiring.Component):
    """The responder's execute stage (see the module docstring).

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    num_qp : int
        Number of QPs (power of two): rows of the per-QP tables.

    Attributes
    ----------
    exe : In(stream.Signature(exe_layout))
        Execute commands from PSN Check.
    pay : In(BeatStream(W))
        Their payload beats (lane 0 aligned; none when ``payload_len`` = 0).
    done : Out(stream.Signature(done_layout))
        One outcome per command, in order.
    qp_reset : In(stream.Signature({qpn 24}))
        SET_QP of a QP to RESET: clears its ``dead`` and write-fault marks and its completion
        index. Always ready.
    flush : In(stream.Signature(flush_layout))
        The QP is in ERROR: flush its receive WQEs up to ``index`` (see ``docs/execute.md``).
        Taken only while no ``exe`` command is waiting.
    rd : Out(ReadClientSignature(W))
        HostMemory read client (WQE fetch).
    wr : Out(WriteClientSignature(W))
        HostMemory write client (payload).
    lookup : In(LookupSignature())
        A Key Cache lookup port (``lookup.req`` out, ``lookup.resp`` in).
    inval : In(InvalSignature())
        The Key Cache remote-invalidate port.
    reserve : Out(stream.Signature({cqn 16}))
    reserve_resp : In(stream.Signature({ok 1}))
    complete : Out(stream.Signature(cqe_layout))
        The CqeGen ports of the same names.
    event : Out(stream.Signature(event_layout))
        Event 4 (host-memory fault) with the QPN.
    fault : Out(stream.Signature({qpn 24}))
        A payload write came back non-OKAY after its ``done`` left: move this QP to ERROR.
    """

    def __init__(self, *, width, num_qp=64):
        self.width = check_width(width)
        if not isinstance(num_qp, int) or num_qp < 4 or num_qp & (num_qp - 1):
            raise ValueError(f"num_qp must be a power of two ≥ 4, not {num_qp!r}")
        self.num_qp = num_qp
        super().__init__({
            "exe": In(stream.Signature(exe_layout)),
            "pay": In(BeatStream(width)),
            "done": Out(stream.Signature(done_layout)),
            "qp_reset": In(stream.Signature(data.StructLayout({"qpn": 24}))),
            "flush": In(stream.Signature(flush_layout)),
            "rd": Out(ReadClientSignature(width)),
            "wr": Out(WriteClientSignature(width)),
            "lookup": In(LookupSignature()),
            "inval": In(InvalSignature()),
            "reserve": Out(stream.Signature(data.StructLayout({"cqn": 16}))),
            "reserve_resp": In(stream.Signature(data.StructLayout({"ok": 1}))),
            "complete": Out(stream.Signature(cqe_layout)),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(stream.Signature(data.StructLayout({"qpn": 24}))),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        lb = B.bit_length() - 1
        ab = (self.num_qp - 1).bit_length()

        m.submodules.fetch = fetch = RqFetch(width=W)
        m.submodules.scatter = sc = ScatterPath(width=W)
        connect(m, fetch.mem, wiring.flipped(self.rd))
        connect(m, wiring.flipped(self.pay), sc.pay)
        connect(m, sc.data, wiring.flipped(self.wr.data))
        m.submodules.piece_q = piece_q = Queue(piece_layout, 4)
        connect(m, piece_q.o, sc.piece)
        pq = piece_q.i

        m.submodules.post_q = post_q = Queue(_post_layout, 8)
        m.submodules.cqe_q = cqe_q = Queue(_cqe_entry_layout, 8)
        m.submodules.ev_q = ev_q = Queue(event_layout, 4)
        m.submodules.fault_q = fault_q = Queue(data.StructLayout({"qpn": 24}), 4)
        connect(m, ev_q.o, wiring.flipped(self.event))
        connect(m, fault_q.o, wiring.flipped(self.fault))

        # ---- per-QP tables ----------------------------------------------------------------
        m.submodules.dead = dead = Memory(shape=1, depth=self.num_qp, init=[])
        dead_rd = dead.read_port()
        dead_wr = dead.write_port()
        m.submodules.wqet = wqet = Memory(shape=_row_layout, depth=self.num_qp, init=[])
        wqe_rd = wqet.read_port()
        wqe_wr = wqet.write_port()
        # write faults: set by a non-OKAY write done, read by the CQE release and the planner
        m.submodules.wflt = wflt = Memory(shape=1, depth=self.num_qp, init=[])
        wflt_rd = wflt.read_port()
        wflt_rel = wflt.read_port(domain="comb")
        wflt_wr = wflt.write_port()
        # index of the next receive WQE of the QP without a completion
        m.submodules.cnext = cnext = Memory(shape=16, depth=self.num_qp, init=[])
        cnext_rd = cnext.read_port()
        cnext_wr = cnext.write_port()
        m.submodules.wqpn = wqpn = Memory(shape=24, depth=256, init=[])
        wqpn_rd = wqpn.read_port(domain="comb")
        wqpn_wr = wqpn.write_port()

        c = Signal(exe_layout)                 # the command being planned
        wqe = Signal(wqe_layout)
        in_qpn = Signal(ab)
        take_flush = Signal()
        m.d.comb += [take_flush.eq(~self.exe.valid & self.flush.valid),
                     in_qpn.eq(Mux(take_flush, self.flush.payload.qpn[:ab],
                                   self.exe.payload.qpn[:ab]))]
        m.d.comb += [dead_rd.addr.eq(in_qpn), wqe_rd.addr.eq(in_qpn), wflt_rd.addr.eq(in_qpn),
                     cnext_rd.addr.eq(in_qpn),
                     wqe_wr.addr.eq(c.qpn[:ab]), wqe_wr.data.wqe.eq(fetch.resp.payload.wqe),
                     wqe_wr.data.index.eq(c.rq_index)]

        # ---- counters ---------------------------------------------------------------------
        wr_cnt = Signal(16)                    # write requests issued
        wr_done = Signal(16)                   # their done transfers back
        sc_out = Signal(range(16))             # closing pieces pushed, packet not finished
        tok = Signal(range(16))                # packets finished, done not yet returned
        push_close = Signal()
        pop_tok = Signal()
        m.d.sync += [sc_out.eq(sc_out + push_close - sc.pkt_done),
                     tok.eq(tok + sc.pkt_done - pop_tok)]

        # ---- write completions: count, fault report ---------------------------------------
        wd = self.wr.done
        m.d.comb += [wqpn_rd.addr.eq(wd.payload.tag)]
        wd_err = Signal()
        m.d.comb += [wd_err.eq(wd.valid & wd.payload.err),
                     wd.ready.eq(~wd.payload.err | (ev_q.i.ready & fault_q.i.ready))]
        with m.If(wd.valid & wd.ready):
            m.d.sync += wr_done.eq(wr_done + 1)
        with m.If(wd_err & wd.ready):
            m.d.comb += [wflt_wr.addr.eq(wqpn_rd.data[:ab]), wflt_wr.data.eq(1),
                         wflt_wr.en.eq(1)]
        with m.Elif(self.qp_reset.valid):
            m.d.comb += [wflt_wr.addr.eq(self.qp_reset.payload.qpn[:ab]), wflt_wr.data.eq(0),
                         wflt_wr.en.eq(1)]
        plan_ev = Signal()
        plan_ev_qpn = Signal(24)
        m.d.comb += [
            ev_q.i.valid.eq(Mux(wd_err, wd.ready, plan_ev)),
            ev_q.i.payload.type.eq(EventType.HOST_FAULT),
            ev_q.i.payload.number.eq(Mux(wd_err, wqpn_rd.data, plan_ev_qpn)),
            fault_q.i.valid.eq(wd_err & wd.ready),
            fault_q.i.payload.qpn.eq(wqpn_rd.data),
        ]

        # ---- done and CQE release -----------------------------------------------------------
        ph = post_q.o.payload
        can_done = Signal()
        m.d.comb += [
            can_done.eq(post_q.o.valid & (~ph.beats | (tok != 0))),
            self.done.valid.eq(can_done),
            self.done.payload.fatal.eq(ph.fatal),
            self.done.payload.syndrome.eq(ph.syndrome),
            post_q.o.ready.eq(can_done & self.done.ready),
            pop_tok.eq(can_done & self.done.ready & ph.beats),
        ]
        ch = cqe_q.o.payload
        gap = Signal(16)
        m.d.comb += gap.eq(wr_done - ch.need)
        m.d.comb += [
            wflt_rel.addr.eq(ch.cqe.qpn[:ab]),
            self.complete.valid.eq(cqe_q.o.valid & ~gap[15]),
            self.complete.payload.eq(ch.cqe),
            cqe_q.o.ready.eq(self.complete.valid & self.complete.ready),
        ]
        with m.If(wflt_rel.data & ~ch.cqe.flush & (ch.cqe.status == 0)):
            m.d.comb += self.complete.payload.status.eq(WcStatus.LOC_QP_OP_ERR)

        # ---- piece calculation: SUMS (prefix sums), CUT (overlaps), CUT2 (lengths), CALC -------
        off = c.offset
        plen = c.payload_len
        has_beats = Signal()            # payload beats come on ``pay`` (none for status ≠ 0)
        m.d.comb += has_beats.eq((plen != 0) & (c.status == 0))
        mend = Signal(34)
        cum = [Const(0, 35)]
        cum_c = [Const(0, 35)]          # next prefix sum (comb), registered in SUMS<i>
        pv_c, pkey_c, pva_c, plen_c, psrc_c = [], [], [], [], []
        cut, cut2 = [], []                     # register assignments of states CUT and CUT2
        for i in range(MAX_SGE):
            sge = wqe.sge[i]
            li = Signal(32, name=f"sge_len{i}")
            m.d.comb += li.eq(Mux(wqe.num_sge > i, sge.length, 0))
            lo = cum[i]
            hi_c = Signal(35, name=f"sge_end_c{i}")
            m.d.comb += hi_c.eq(cum[i] + li)
            cum_c.append(hi_c)
            hi = Signal(35, name=f"sge_end{i}")
            st = Signal(35, name=f"p_start{i}")
            en = Signal(35, name=f"p_end{i}")
            cut += [st.eq(Mux(off > lo, off, lo)), en.eq(Mux(mend < hi, mend, hi))]
            v_r = Signal(name=f"p_valid_r{i}")
            dl_r = Signal(35, name=f"p_delta_r{i}")
            ln_r = Signal(13, name=f"p_len_r{i}")
            src_r = Signal(13, name=f"p_src_r{i}")
            cut2 += [v_r.eq(st < en), dl_r.eq(st - lo), ln_r.eq(en - st), src_r.eq(st - off)]
            v = Signal(name=f"p_valid{i}")
            va = Signal(64, name=f"p_va{i}")
            ln = Signal(13, name=f"p_len{i}")
            src = Signal(13, name=f"p_src{i}")
            m.d.comb += [v.eq(v_r), va.eq(sge.addr + dl_r), ln.eq(ln_r), src.eq(src_r)]
            if i == 0:
                # RDMA WRITE: one piece
                with m.If(c.write):
                    m.d.comb += [v.eq((c.dma_len != 0) & (plen != 0)),
                                 va.eq(c.va + c.offset), ln.eq(plen), src.eq(0)]
            else:
                with m.If(c.write):
                    m.d.comb += v.eq(0)
            pv_c.append(v)
            pkey_c.append(Mux(c.write, c.rkey, sge.lkey))
            pva_c.append(va)
            plen_c.append(ln)
            psrc_c.append(src)
            cum.append(hi)
        overflow = Signal()
        m.d.comb += overflow.eq(mend > cum[MAX_SGE])
        bad_nsge = Signal()
        m.d.comb += bad_nsge.eq(wqe.num_sge > MAX_SGE)

        pv = Signal(MAX_SGE)
        pkey = [Signal(32, name=f"pkey{i}") for i in range(MAX_SGE)]
        pva = [Signal(64, name=f"pva{i}") for i in range(MAX_SGE)]
        pln = [Signal(13, name=f"pln{i}") for i in range(MAX_SGE)]
        psrc = [Signal(13, name=f"psrc{i}") for i in range(MAX_SGE)]
        pbus = [Signal(64, name=f"pbus{i}") for i in range(MAX_SGE)]
        j = Signal(range(MAX_SGE + 1))
        jv = Signal()
        j_key, j_va, j_len, j_src, j_bus = (Signal(32), Signal(64), Signal(13), Signal(13),
                                            Signal(64))
        with m.Switch(j):
            for i in range(MAX_SGE):
                with m.Case(i):
                    m.d.comb += [jv.eq(pv[i]), j_key.eq(pkey[i]), j_va.eq(pva[i]),
                                 j_len.eq(pln[i]), j_src.eq(psrc[i]), j_bus.eq(pbus[i])]

        # outcome
        fatal = Signal()
        syn = Signal(8)
        cqe_on = Signal()
        cstat = Signal(8)
        nowrite = Signal()
        skip = Signal()
        cdone = Signal()                       # the command completes WQE widx
        widx = Signal(16)
        flushing = Signal()
        fl_end = Signal(16)
        sent_w = Signal()
        sent_p = Signal()

        mask = Signal(16)
        m.d.comb += mask.eq((Const(1, 17) << c.rq_log) - 1)
        m.d.comb += fetch.req.payload.addr.eq(c.rq_base + ((c.rq_index & mask) << 6))

        m.d.comb += [
            self.lookup.req.payload.key.eq(j_key),
            self.lookup.req.payload.pd.eq(c.pd),
            self.lookup.req.payload.access.eq(Mux(c.write, Access.REMOTE_WRITE,
                                                  Access.LOCAL_WRITE)),
            self.lookup.req.payload.va.eq(j_va),
            self.lookup.req.payload.len.eq(j_len),
            self.lookup.req.payload.tag.eq(j),
            self.reserve.payload.cqn.eq(c.rcqn),
            self.wr.req.payload.addr.eq(j_bus),
            self.wr.req.payload.len_bytes.eq(j_len),
            self.wr.req.payload.tag.eq(wr_cnt[:8]),
            pq.payload.src.eq(j_src),
            pq.payload.len.eq(j_len),
            pq.payload.lane.eq(j_bus[:lb]),
            pq.payload.end.eq(0),
            wqpn_wr.addr.eq(wr_cnt[:8]),
            wqpn_wr.data.eq(c.qpn),
            self.inval.req.payload.key.eq(c.ieth_rkey),
            self.inval.req.payload.tag.eq(0),
            plan_ev_qpn.eq(c.qpn),
        ]

        # CQE and post entries
        cq = cqe_q.i.payload.cqe
        m.d.comb += [
            cq.cqn.eq(c.rcqn), cq.wr_id.eq(wqe.wr_id),
            cq.byte_len.eq(Mux(c.write, c.dma_len, mend)),
            cq.imm_or_rkey.eq(Mux(c.imm_valid, c.imm, c.ieth_rkey)),
            cq.qpn.eq(c.qpn), cq.status.eq(cstat),
            cq.opcode.eq(Mux(c.write & c.imm_valid, RECV_RDMA_WITH_IMM, RECV)),
            cq.flags.eq(Mux(c.imm_valid, WITH_IMM, 0) | Mux(c.inv, WITH_INVALIDATE, 0)),
            cq.se.eq(c.se), cq.flush.eq(flushing),
            cqe_q.i.payload.need.eq(wr_cnt),
            post_q.i.payload.fatal.eq(fatal),
            post_q.i.payload.syndrome.eq(syn),
            post_q.i.payload.beats.eq(has_beats),
        ]

        # qp_reset clears the dead mark (priority over the planner's write)
        m.d.comb += self.qp_reset.ready.eq(1)
        with m.If(self.qp_reset.valid):
            m.d.comb += [dead_wr.addr.eq(self.qp_reset.payload.qpn[:ab]), dead_wr.data.eq(0),
                         dead_wr.en.eq(1),
                         cnext_wr.addr.eq(self.qp_reset.payload.qpn[:ab]), cnext_wr.data.eq(0),
                         cnext_wr.en.eq(1)]

        def fail(syndrome, status, with_cqe):
            m.d.sync += [fatal.eq(1), syn.eq(syndrome), cstat.eq(status), cqe_on.eq(with_cqe),
                         nowrite.eq(1)]
            if not isinstance(with_cqe, int) or with_cqe:
                m.d.sync += cdone.eq(with_cqe)

        with m.FSM(name="plan"):
            with m.State("IDLE"):
                m.d.comb += [self.exe.ready.eq(1), dead_rd.en.eq(1), wqe_rd.en.eq(1),
                             wflt_rd.en.eq(1), cnext_rd.en.eq(1)]
                m.d.sync += [fatal.eq(0), syn.eq(0), cqe_on.eq(0), cstat.eq(0), nowrite.eq(0),
                             skip.eq(0), cdone.eq(0), flushing.eq(0)]
                with m.If(self.exe.valid):
                    m.d.sync += c.eq(self.exe.payload)
                    m.next = "DEC"
                with m.Elif(self.flush.valid):
                    f = self.flush.payload
                    m.d.comb += self.flush.ready.eq(1)
                    m.d.sync += [c.eq(0), c.qpn.eq(f.qpn), c.rcqn.eq(f.rcqn),
                                 c.rq_base.eq(f.rq_base), c.rq_log.eq(f.rq_log),
                                 fl_end.eq(f.index), flushing.eq(1),
                                 cstat.eq(WcStatus.WR_FLUSH_ERR)]
                    m.next = "FL_DEC"
            with m.State("FL_DEC"):
                m.d.sync += c.rq_index.eq(cnext_rd.data)
                m.next = "FL_NEXT"
            with m.State("FL_NEXT"):
                fl_left = Signal(16)
                m.d.comb += fl_left.eq(fl_end - c.rq_index)
                with m.If((fl_left == 0) | fl_left[15]):
                    with m.If(~self.qp_reset.valid):
                        m.d.comb += [cnext_wr.addr.eq(c.qpn[:ab]), cnext_wr.data.eq(c.rq_index),
                                     cnext_wr.en.eq(1),
                                     dead_wr.addr.eq(c.qpn[:ab]), dead_wr.data.eq(1),
                                     dead_wr.en.eq(1)]
                        m.next = "IDLE"
                with m.Else():
                    m.next = "FETCH"
            with m.State("FL_CQE"):
                m.d.comb += cqe_q.i.valid.eq(1)
                with m.If(cqe_q.i.ready):
                    m.d.sync += c.rq_index.eq(c.rq_index + 1)
                    m.next = "FL_NEXT"
            with m.State("DEC"):
                m.d.sync += [wqe.eq(wqe_rd.data.wqe),
                             widx.eq(Mux(c.wqe, c.rq_index, wqe_rd.data.index))]
                with m.If(dead_rd.data | wflt_rd.data):
                    m.d.sync += [skip.eq(1), nowrite.eq(1)]
                    m.next = "ISSUE"
                with m.Elif(c.wqe):
                    m.next = "FETCH"
                with m.Else():
                    m.next = "SUMS"
            with m.State("FETCH"):
                m.d.comb += fetch.req.valid.eq(1)
                with m.If(fetch.req.ready):
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):
                r = fetch.resp
                with m.If(r.valid):
                    with m.If(r.payload.err):
                        m.d.comb += plan_ev.eq(~wd_err)
                        with m.If(~wd_err & ev_q.i.ready):
                            m.d.comb += r.ready.eq(1)
                            with m.If(flushing):
                                m.d.sync += c.rq_index.eq(c.rq_index + 1)
                                m.next = "FL_NEXT"
                            with m.Else():
                                fail(0, 0, 0)
                                m.d.sync += cdone.eq(1)
                                m.next = "RESV"
                    with m.Else():
                        m.d.comb += r.ready.eq(1)
                        m.d.sync += wqe.eq(r.payload.wqe)
                        with m.If(flushing):
                            m.next = "FL_CQE"
                        with m.Else():
                            m.d.comb += wqe_wr.en.eq(1)
                            m.next = "SUMS"
            for i in range(MAX_SGE):
                # the SGE prefix sums (one add per cycle) and the message end
                with m.State("SUMS" if i == 0 else f"SUMS{i}"):
                    m.d.sync += cum[i + 1].eq(cum_c[i + 1])
                    if i == 0:
                        m.d.sync += mend.eq(off + plen)
                    m.next = f"SUMS{i + 1}" if i + 1 < MAX_SGE else "CUT"
            with m.State("CUT"):
                m.d.sync += cut
                m.next = "CUT2"
            with m.State("CUT2"):
                m.d.sync += cut2
                m.next = "CALC"
            with m.State("CALC"):
                for i in range(MAX_SGE):
                    m.d.sync += [pv[i].eq(pv_c[i]), pkey[i].eq(pkey_c[i]), pva[i].eq(pva_c[i]),
                                 pln[i].eq(plen_c[i]), psrc[i].eq(psrc_c[i])]
                m.d.sync += j.eq(0)
                with m.If(c.status != 0):
                    fail(0, c.status, 1)
                    m.next = "RESV"
                with m.Elif((c.send | c.wqe) & bad_nsge):
                    fail(0x63, WcStatus.LOC_QP_OP_ERR, 1)
                    m.next = "RESV"
                with m.Elif(c.send & overflow):
                    fail(0x63, WcStatus.LOC_QP_OP_ERR, 1)
                    m.next = "RESV"
                with m.Else():
                    m.d.sync += [cqe_on.eq(c.comp), cdone.eq(c.comp)]
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                with m.If(j == MAX_SGE):
                    m.next = "RESV"
                with m.Elif(~jv):
                    m.d.sync += j.eq(j + 1)
                with m.Else():
                    m.d.comb += self.lookup.req.valid.eq(1)
                    with m.If(self.lookup.req.ready):
                        m.next = "LOOKUP_WAIT"
            with m.State("LOOKUP_WAIT"):
                rr = self.lookup.resp
                m.d.comb += rr.ready.eq(1)
                with m.If(rr.valid):
                    for i in range(MAX_SGE):
                        with m.If(j == i):
                            m.d.sync += pbus[i].eq(rr.payload.bus_addr)
                    m.d.sync += j.eq(j + 1)
                    with m.If(~rr.payload.ok):
                        with m.If(c.write):
                            fail(0x62, WcStatus.REM_ACCESS_ERR, c.wqe)
                        with m.Else():
                            fail(0x63, WcStatus.LOC_QP_OP_ERR, 1)
                        m.next = "RESV"
                    with m.Else():
                        m.next = "LOOKUP"
            with m.State("RESV"):
                with m.If(~cqe_on):
                    m.d.sync += j.eq(0)
                    m.next = "ISSUE"
                with m.Else():
                    m.d.comb += self.reserve.valid.eq(1)
                    with m.If(self.reserve.ready):
                        m.next = "RESV_WAIT"
            with m.State("RESV_WAIT"):
                m.d.comb += self.reserve_resp.ready.eq(1)
                with m.If(self.reserve_resp.valid):
                    m.d.sync += j.eq(0)
                    with m.If(~self.reserve_resp.payload.ok):
                        fail(0, 0, 0)
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                room = Signal()
                m.d.comb += room.eq((wr_cnt - wr_done) < MAX_WRITES)
                with m.If(nowrite | (j == MAX_SGE)):
                    m.next = "CLOSE"
                with m.Elif(~jv):
                    m.d.sync += j.eq(j + 1)
                with m.Elif(room):
                    m.d.comb += [self.wr.req.valid.eq(~sent_w), pq.valid.eq(~sent_p)]
                    w_ok = Signal()
                    p_ok = Signal()
                    m.d.comb += [w_ok.eq(sent_w | self.wr.req.ready),
                                 p_ok.eq(sent_p | pq.ready)]
                    with m.If(w_ok & p_ok):
                        m.d.comb += wqpn_wr.en.eq(1)
                        m.d.sync += [sent_w.eq(0), sent_p.eq(0), j.eq(j + 1),
                                     wr_cnt.eq(wr_cnt + 1)]
                    with m.Else():
                        m.d.sync += [sent_w.eq(w_ok), sent_p.eq(p_ok)]
            with m.State("CLOSE"):
                with m.If(~has_beats):
                    m.next = "INV"
                with m.Else():
                    m.d.comb += [pq.valid.eq(1), pq.payload.len.eq(0),
                                 pq.payload.end.eq(1)]
                    with m.If(pq.ready):
                        m.d.comb += push_close.eq(1)
                        m.next = "INV"
            with m.State("INV"):
                with m.If(~c.inv | nowrite):
                    m.next = "POST"
                with m.Elif((sc_out == 0) & ~push_close):
                    m.next = "INV_REQ"
            with m.State("INV_REQ"):
                m.d.comb += self.inval.req.valid.eq(1)
                with m.If(self.inval.req.ready):
                    m.next = "INV_WAIT"
            with m.State("INV_WAIT"):
                m.d.comb += self.inval.resp.ready.eq(1)
                with m.If(self.inval.resp.valid):
                    with m.If(~self.inval.resp.payload.ok):
                        m.d.sync += [fatal.eq(1), syn.eq(0x1F),
                                     cstat.eq(WcStatus.REM_INV_REQ_ERR)]
                    m.next = "POST"
            with m.State("POST"):
                go = Signal()
                m.d.comb += go.eq(post_q.i.ready & (~cqe_on | cqe_q.i.ready)
                                  & ~self.qp_reset.valid)
                with m.If(go):
                    m.d.comb += [post_q.i.valid.eq(1), cqe_q.i.valid.eq(cqe_on & ~skip)]
                    with m.If(fatal):
                        m.d.comb += [dead_wr.addr.eq(c.qpn[:ab]), dead_wr.data.eq(1),
                                     dead_wr.en.eq(1)]
                    with m.If(cdone & ~skip):
                        m.d.comb += [cnext_wr.addr.eq(c.qpn[:ab]), cnext_wr.data.eq(widx + 1),
                                     cnext_wr.en.eq(1)]
                    m.next = "IDLE"
        return m
