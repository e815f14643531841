"""PSN Check: the responder's per-QP state machine at the wire's packet rate.

What it does (``roce-reference.md`` §3.1–3.7, §3.10–3.13 with its normative choices;
interface.md wins): for each request frame's metadata from RX Parse, in order,

1. QP lookup: QPN 0/1 or ≥ num_qp, QP below RTR or in ERROR, source IPv4 not the QP's →
   dropped, counter 6.
2. PSN (24-bit serial compare against the ePSN): ahead → NAK 0x60 with PSN = ePSN the first time
   (sets the sent-NAK latch), silent drop afterwards; behind → duplicate: ACK 0x1F at ePSN−1 (the
   last executed PSN), always (AckReq ignored), no re-execution, counter 7 — except a duplicate
   RDMA READ, which goes to the execute stage again (``dup``, its own RETH and PSN, the current
   MSN; no state change; interface.md §7), counter 7; equal → clears the latch and goes on.
3. Opcode sequence (FIRST→MIDDLE→LAST of SEND and WRITE) → NAK 0x61.
4. QP access: READ without REMOTE_READ, WRITE without REMOTE_WRITE, atomics → NAK 0x61
   (interface.md §6, §7).
5. Receive resources: an RWR packet (SEND_FIRST, SEND_ONLY*, WRITE_*_WITH_IMMEDIATE) with the
   on-chip RQ producer == consumer → RNR NAK ``0x20 | min_rnr_timer``, PSN = the packet's, no
   state change.
6. Length: ONLY ≤ PMTU, FIRST/MIDDLE == PMTU, LAST 1..PMTU, RETH DMALen ≤ 2^31, and the WRITE
   rules (resid > PMTU: payload == PMTU and PadCnt 0; else payload == resid and
   PadCnt == −resid & 3) → NAK 0x61. (rxe checks the WRITE rules after the rkey; here they come
   before it, so a packet failing both draws 0x61 where rxe would send 0x62. Both are fatal.)
7. Execute: ePSN+1 (a READ of L bytes: + max(1, ⌈L/PMTU⌉), one PSN per response), MSN+1 on
   LAST/ONLY and READ, message-in-progress updated, the RQ consumer index +1 when a message
   that holds a receive WQE ends; an *execute command* goes to the later stages with the
   frame's payload. A READ request with payload is a length error (0x61). A READ is answered
   by its responses (the READ response engine), not by an ACK.

Every NAK 0x61 moves the QP to ERROR at once (event 3); the QP's younger frames are then
dropped (counter 6).

Pipeline and forwarding
-----------------------
One read-modify-write of the QP context (:class:`~rnic.resp.qp_context.QpContext`): stage A
(input select: fatal report > RQ doorbell > frame metadata; issues the read of both context
tables; the frame's metadata goes into a 4-entry LUT-RAM ring, the fields stage B checks into
R's register), stage R (the block RAM's output; the RETH and payload lengths compared with each
path MTU), stage B (the tables' read register, which keeps the operation's rows through B and
C: every check that needs no dynamic context — opcode decode, path MTU, position length rule, RETH
length, the WRITE rules of a FIRST/ONLY, access, source IPv4 — and every check that does — PSN
classification, state, opcode sequence, RNR, the WRITE rules of a MIDDLE/LAST, the residue and
offset after the packet — all registered into C), stage C (decision, pushes the outputs; the
metadata read from the ring at the operation's slot; the new dynamic context written into the
table: stage C is its one writer, and also makes a command's row write). The PSN
classifier and the opcode sequencer are :mod:`rnic.resp.psn_rules`.

Issue and same-QP hazard: operations enter two cycles apart, whatever their QPs (A issues
nothing while R holds one; R0, below, above 256 QPs), so the one register of the QP's rows
serves B and C of one operation and is loaded again only once it has left C (up to 256 QPs
each table keeps a row in two words, read in A and in R: word 1, which only C reads, reaches
its register on the B→C edge, and C writes it a cycle after word 0; above, one word read in
R0, :attr:`QpContext.split`): a minimum frame every ``max(2, ⌈480/W⌉)`` cycles, one QP or
many (design-rules.md §1). Up to 256 QPs an
operation is not issued while an operation of its QP that writes the table is in C (its read
would meet that write). The one write a read can still miss — that of the operation in B when it
is issued — is made in C on the reader's R→B edge, and the register takes that decision instead
of the RAM data (one forward path, its select a register). Above 256 QPs, where the tables
span many block RAMs, their ports are driven from flip-flops and read into flip-flops: a stage
R0 between A and R holds the operation and the read address (the read is made a cycle after
the issue), the row goes through the block RAMs' output registers into the read register on
the R2→B edge (a stage R2 between R and B), and a stage W after C holds the dynamic table's
write (made a cycle after C's decision). Operations then enter three cycles apart (A issues
nothing while R0 or R holds one) and never wait for a same-QP write: the one write a read can
miss, that of an operation in C at its issue, in R0 or in R, is still in W's register on the
reader's R2→B edge, and the register takes it from there (the one forward path). Any
full output queue stalls all the stages together (whether the operation in C needs that queue
or not, to keep the decision out of the clock-enable path). Commands (SET_QP/QUERY_QP) wait
until the pipeline and all outstanding executes are drained, with new frames held back
meanwhile; a ``fault`` is not taken while a command runs.

Execute-outcome interface (for Key Cache, scatter, invalidate, CQE)
------------------------------------------------------------------
``exe`` (out, :data:`exe_layout`): one command per request frame that passed every check here
(``status`` = 0: execute it; its payload beats, if ``payload_len`` > 0, come on ``pay_out``
in the same order), and one per frame that failed a check here while a receive WQE is held
(``status`` = WC status 9 REM_INV_REQ_ERR: complete WQE ``rq_index`` in error, no data, no
beats; the NAK and the move to ERROR are already decided). Fields (only what Execute reads):
``qpn`` (local), ``psn``, ``payload_len``, ``se``, ``wqe`` (RWR: the message takes the
receive WQE ``rq_index`` on this packet), ``comp`` (the packet completes a receive WQE: CQE),
``send``/``write``/``imm_valid``/``inv``, ``offset`` (bytes of the message before this
packet), ``va``/``rkey`` (the WRITE's RETH, carried on every packet of the message; placement
address = ``va + offset``), ``dma_len`` (the RETH's on the start packet; on a later one
``offset + payload_len``, which is the DMA length on the LAST), ``imm_or_rkey`` (the ImmDt or
the IETH's rkey; for a READ {MSN after it, path MTU code}), ``rq_index`` (the RQ consumer
index: ring entry of the WQE), ``pd``, ``rcqn``, ``rq_base``, ``rq_log``; for RDMA READ
``read``, ``dup`` (a duplicate: answer it if the READ is still held, numbered with the current
MSN) and ``ird`` (SET_QP ARG15[7:4]).

``done`` (in, :data:`done_layout`): exactly one per ``exe`` command, in the same order.
``fatal`` = 0: success, the ACK (if AckReq) leaves. ``fatal`` = 1: the QP moves to ERROR
(event 3) and ``syndrome`` says what is sent for this packet: 0x62/0x63 → that NAK (PSN = the
packet's, MSN not incremented); 0x1F → a positive ACK if AckReq, MSN not incremented (refused
invalidate, normative choice 3); 0 → nothing (CQ overflow). Return ``done`` only once the
payload writes are issued (interface.md §6) and the CQE slot is reserved. After a fatal report
the ACKs of that QP's younger packets are suppressed here; the later stages must skip the data
placement of exe commands of a QP they have reported fatal (its younger packets) and still
return their ``done``. For an error-completion command (``status`` ≠ 0) ``done`` is ignored.

Other ports: ``ack_out`` gets {opcode, QPN, PSN, AETH syndrome, payload length} of response
opcodes (0x0D–0x12); the payload of a READ response (0x0D–0x10) comes on ``rr_pay`` in the same
order (lane-0 aligned, ``last`` on its last beat), any other response's is dropped: the top
passes ACKNOWLEDGE and READ responses to the requester's READ placement. ``rq_flush``
{qpn, index, rcqn, rq_base, rq_log} asks the flush stage to complete the QP's receive WQEs up to
``index`` (the RQ producer) with WR_FLUSH_ERR: sent when a QP enters ERROR (a NAK 0x61 here, a
fatal ``done``, a ``fault``, or SET_QP to ERROR) and for every RQ doorbell that arrives in ERROR
(doorbells in RESET or for a bad QPN are ignored). ``qp_reset`` {qpn} tells the later stages
that SET_QP (or the sweep after ``rst``) put a QP in RESET, so they may drop their per-QP marks.
``fault`` {qpn} from a later stage (a host-memory write error) moves the QP to ERROR like a fatal
``done`` and suppresses its responses still queued here.

ACK/NAK transmission
--------------------
The response sequencer pairs each executed frame with its ``done`` (in decision order) and
hands every response to the per-QP pending table :class:`~rnic.resp.ack_table.AckTable`, which
never refuses one: per QP it keeps the newest positive ACK and the newest NAK (pending ACKs
coalesce into the newest; a NAK is never merged into an ACK, and replaces only an older NAK of
the same QP still pending), sent in the order they were decided; QPs with something pending are
served first come, first served on ``ack_tx`` as frame descriptors for the TX frame builder
(:class:`~rnic.tx.build.TxBuild`, through :class:`~rnic.tx.read_resp.ReadResp` and
:class:`~rnic.tx.arbiter.TxArbiter`). TX
back-pressure therefore never stalls receive, however long it lasts (see ``ack_table.py`` for
the rule and why it is safe for the requester). Frames of different QPs may leave in another
order than decided once responses wait in the table.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, enum, memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ..ifaces import (NUM_COUNTERS, CommandSignature, Counter, EventType, QpnStream,
                      event_layout, qpn_layout, resp_hdr_layout, rx_meta_layout)
from ..opcodes import opcode_info, WcStatus
from ..stream import BeatStream, Queue, check_width, slim_queue
from ..control.qp_args import qp_arg_layout
from ..tx.build import tx_hdr_layout
from .ack_table import AckTable, ack_item_layout, flag_ram_style, held_read, FLAGS_LUTRAM_MAX
from .psn_rules import op_sequence, psn_class_layout, psn_classify
from .qp_context import (MsgClass, QpContext, QpState, qp_dyn_layout, qp_recv_layout,
                         qp_set_event_layout)
from ..parts import add as _add

__all__ = ["PsnCheck", "exe_layout", "done_layout", "rq_db_layout", "rq_flush_layout"]

#: What Execute reads of a command (and nothing more: the record is queued in LUT RAM). A READ
#: has no immediate, so its ``imm_or_rkey`` carries {MSN after the READ, path MTU code} (bits
#: 23..0, 26..24), what its responses are numbered and cut by.
exe_layout = data.StructLayout({
    "qpn": 24, "psn": 24, "status": 8,
    "payload_len": 13, "se": 1,
    "wqe": 1, "comp": 1,
    "send": 1, "write": 1, "imm_valid": 1, "inv": 1,
    "offset": 32, "va": 64, "rkey": 32, "dma_len": 32,
    "imm_or_rkey": 32, "rq_index": 16,
    "pd": 16, "rcqn": 16, "rq_base": 64, "rq_log": 5,
    "read": 1, "dup": 1, "ird": 4,
})

done_layout = data.StructLayout({"fatal": 1, "syndrome": 8})

rq_db_layout = data.StructLayout({"qpn": 24, "index": 16})
rq_flush_layout = data.StructLayout({"qpn": 24, "index": 16, "rcqn": 16, "rq_base": 64,
                                     "rq_log": 5})
#: A response frame PSN Check accepted (an RTS QP, from its remote IPv4): what the requester
#: reads of it (:data:`rnic.ifaces.resp_hdr_layout`; ``syndrome``: the AETH's, 0 without one)
ack_out_layout = resp_hdr_layout

#: the metadata fields stage C reads (they wait in a ring for it): all but the QPN (C has the
#: table index; an accepted frame's QPN is below ``num_qp``), the source IPv4 and the PadCnt
#: (checked in B)
meta_c_layout = data.StructLayout({k: v.shape for k, v in rx_meta_layout
                                   if k not in ("dqpn", "src_ip", "padcnt")})

#: the metadata fields stage B checks
meta_b_layout = data.StructLayout({"opcode": 8, "psn": 24, "payload_len": 13, "padcnt": 2,
                                   "reth_len": 32, "src_ip": 32})


def _gt_pow2(x, k):
    """x > 2^k (k None: x > 0): an OR of x's bits, no carry chain."""
    return x.any() if k is None else x[k + 1:].any() | (x[k] & x[:k].any())


class Kind(enum.IntEnum, shape=2):
    PKT = 0
    DB = 1
    FATAL = 2
    RESP = 3


class PsnCheck(wiring.Component):
    """PSN Check, QP context and ACK/NAK generation of the responder.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    num_qp : int
        Number of QPs (power of two, 4..4096).
    read : bool
        RDMA READ (default True). False: a READ request is refused as an atomic one (NAK 0x61,
        the QP to ERROR; :data:`~rnic.opcodes.OPCODES_NO_READ`) and a READ response's payload
        is dropped here (its header still goes out on ``ack_out``).

    Attributes
    ----------
    meta : In(stream.Signature(rx_meta_layout))
        One entry per frame accepted by RX Parse.
    payload : In(BeatStream(W))
        Payload beats of those frames in the same order (none when ``payload_len`` is 0).
    rq_db : In(stream.Signature(rq_db_layout))
        RQ doorbells {qpn, producer index}.
    cmd : Out(CommandSignature())
        SET_QP / QUERY_QP.
    exe : Out(stream.Signature(exe_layout))
    done : In(stream.Signature(done_layout))
    pay_out : Out(BeatStream(W))
        Payload of executed frames (beats of dropped frames are drained here).
    ack_out : Out(stream.Signature(ack_out_layout))
    rr_pay : Out(BeatStream(W))
        Response frames for the requester: opcode, QPN, PSN, AETH syndrome.
    rq_flush : Out(stream.Signature(rq_flush_layout))
    rq_post : Out(stream.Signature(rq_flush_layout, always_ready=True))
        Every RQ doorbell that took effect (QP in INIT, RTR or RTS): {qpn, index = the new
        producer, rcqn, rq_base, rq_log}, for the execute stage's WQE prefetch.
    ack_tx : Out(stream.Signature(tx_hdr_layout))
        ACK/NAK frames to send, as descriptors (to :class:`~rnic.tx.read_resp.ReadResp`'s
        ``ack``, which merges them with the READ responses; the TX frame builder counts them,
        counters 8–11, as they leave).
    stat : Out(NUM_COUNTERS)
        Counters 6 and 7.
    event : Out(stream.Signature(event_layout))
        Event 3 (QP entered ERROR).
    qp_set : Out(stream.Signature(qp_set_event_layout, always_ready=True))
        For the requester: valid for one cycle (no ``ready``) with {``qpn``, ``state``,
        ``sq_psn``} (:data:`~rnic.resp.qp_context.qp_set_event_layout`)

        * for every SET_QP that was written (a refused SET_QP gives nothing): the new state and
          the send PSN (ARG3 on entry to RTS, else 0: the requester takes it only then);
        * for every QP of the reset sweep after ``rst`` (state RESET, sq_psn 0);
        * for every move of a QP to ERROR made here (NAK 0x61, a fatal ``done``, a ``fault``):
          state ERROR, ``sq_psn`` 0 (the requester takes the send PSN only on entry to RTS) —
          the same cycle as event 3 is queued.

        The two sources never coincide: a SET_QP runs only with the pipeline drained and no
        ``fault`` is taken while a command runs, so no event is lost or merged.
    qp_arg : Out(stream.Signature(qp_arg_layout, always_ready=True))
        The QP context's ARG writes (:class:`~rnic.resp.qp_context.QpContext`): every ARG word
        of an accepted SET_QP, before its ``qp_set`` event, and the reset sweep, for the
        requester's context and the TX frame builder's path table.
    q_qpn : Out(range(num_qp)); q_psn : In(24); q_cons : In(16)
        QUERY_QP's next send PSN and SQ consumer index come from the requester's context:
        ``q_qpn`` is the queried QP, ``q_psn``/``q_cons`` its values one cycle later
        (:class:`~rnic.resp.qp_context.QpContext`).
    qp_reset : Out(QpnStream())
        One transfer when SET_QP (or the reset sweep) puts a QP in RESET. The consumer must be
        always ready (``ready`` is ignored).
    fault : In(QpnStream())
        A later stage found a fault on the QP (host-memory write error): the QP moves to ERROR
        (event 3, ``rq_flush``) and its responses still queued here are suppressed.
    """

    def __init__(self, *, width, num_qp, resp_depth=16, ack_depth=16, read=True):
        # ack_depth: unused since the per-QP pending table (kept for callers)
        self.width = check_width(width)
        self.read = read
        if not isinstance(resp_depth, int) or resp_depth < 2:
            raise ValueError(f"resp_depth must be an integer of at least 2, not {resp_depth!r}")
        self.ctx = QpContext(num_qp=num_qp)
        self.num_qp = num_qp
        self.abits = self.ctx.abits
        self.resp_depth = resp_depth
        self.ack_depth = ack_depth
        super().__init__({
            "meta": In(stream.Signature(rx_meta_layout)),
            "payload": In(BeatStream(width)),
            "rq_db": In(stream.Signature(rq_db_layout)),
            "cmd": Out(CommandSignature()),
            "exe": Out(stream.Signature(exe_layout)),
            "done": In(stream.Signature(done_layout)),
            "pay_out": Out(BeatStream(width)),
            "ack_out": Out(stream.Signature(ack_out_layout)),
            "rr_pay": Out(BeatStream(width)),
            "rq_flush": Out(stream.Signature(rq_flush_layout)),
            "rq_post": Out(stream.Signature(rq_flush_layout, always_ready=True)),
            "ack_tx": Out(stream.Signature(tx_hdr_layout)),
            "stat": Out(NUM_COUNTERS),
            "event": Out(stream.Signature(event_layout)),
            "qp_set": Out(stream.Signature(qp_set_event_layout, always_ready=True)),
            "qp_arg": Out(stream.Signature(qp_arg_layout, always_ready=True)),
            "q_qpn": Out(self.abits),
            "q_psn": In(24),
            "q_cons": In(16),
            "qp_reset": Out(QpnStream()),
            "fault": In(QpnStream()),
        })

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(ab=self.abits)
        _add(t, self._context_and_queues(m, t))
        _add(t, self._stage_a(m, t))
        _add(t, self._stage_r(m, t))
        _add(t, self._stage_b_regs(m, t))
        _add(t, self._stage_r_compares(m, t))
        self._stage_b_checks(m, t)
        _add(t, self._stage_c_outputs(m, t))
        self._stage_c_decide(m, t)
        self._next_context(m, t)
        self._payload_router(m, t)
        self._response_sequencer(m, t)
        self._pending_table(m, t)
        return m

    def _context_and_queues(self, m, t):
        """The QP context (``ctx``, its command and ARG ports, QUERY_QP's values) and the output
        queues (``exe_q``, ``resp_q``, ``dec_q``, ``ack_q``, ``ev_q``, ``fl_q``) with the layouts
        of the response and payload-decision entries. Adds these."""
        ab = t.ab
        m.submodules.ctx = ctx = self.ctx
        connect(m, wiring.flipped(self.cmd), ctx.cmd)
        connect(m, ctx.qp_arg, wiring.flipped(self.qp_arg))
        m.d.comb += [self.q_qpn.eq(ctx.q_qpn), ctx.q_psn.eq(self.q_psn),
                     ctx.q_cons.eq(self.q_cons)]

        # (``syndrome``: 0x1F, 0x60, 0x61 or an RNR NAK's 0x20–0x3F decided here, bit 7 always
        # 0; a fatal ``done``'s comes from the port)
        entry_layout = data.StructLayout({
            "qpn": ab, "wait_done": 1, "from_done": 1, "frame": 1, "kill": 1,
            "syndrome": 7, "psn": 24, "msn": 24, "inc": 1,
        })
        dec_layout = data.StructLayout({"pass_": 1, "beats": 1, "rr": 1})

        # The output queues keep their storage in LUT RAM, read combinationally (unbuffered):
        # the consumer's ``ready`` moves a read pointer, not the enable of a wide output register,
        # and no record is copied into a skid buffer (design-rules.md §4, §7).
        # Each queue keeps only the bits that can be non-zero (``slim_queue``): QPNs as local
        # indices, ring bases without their 6 zero bits, the status as one bit (0 or 9).
        # (each queue's depth, which the stall's room count reads: ``qdepth``)
        qdepth = {"exe": 8, "resp": self.resp_depth, "dec": 8, "ack": 4, "ev": 4, "fl": 4}
        exe_q, exe_rec = slim_queue(m, "exe_q", exe_layout, qdepth["exe"],
                                     {"qpn": (0, ab), "status": (0, 1), "rq_base": (6, 58)},
                                     self.exe, rebuild={"status": lambda v: Mux(
                                         v, WcStatus.REM_INV_REQ_ERR, 0)})
        m.submodules.resp_q = resp_q = Queue(entry_layout, qdepth["resp"], buffered=False)
        m.submodules.dec_q = dec_q = Queue(dec_layout, qdepth["dec"])
        ack_q, ack_rec = slim_queue(m, "ack_q", ack_out_layout, qdepth["ack"], {"qpn": (0, ab)},
                                     self.ack_out)
        # (every event here is a QP_ERROR: the queue keeps the QP)
        m.submodules.ev_q = ev_q = Queue(data.StructLayout({"number": ab}), qdepth["ev"])
        m.d.comb += [self.event.valid.eq(ev_q.o.valid), ev_q.o.ready.eq(self.event.ready),
                     self.event.payload.type.eq(EventType.QP_ERROR),
                     self.event.payload.number.eq(ev_q.o.payload.number)]
        fl_q, fl_rec = slim_queue(m, "fl_q", rq_flush_layout, qdepth["fl"],
                                   {"qpn": (0, ab), "rq_base": (6, 58)}, self.rq_flush)
        return types.SimpleNamespace(
            ack_q=ack_q, ack_rec=ack_rec, ctx=ctx, dec_layout=dec_layout, dec_q=dec_q,
            entry_layout=entry_layout, ev_q=ev_q, exe_q=exe_q, exe_rec=exe_rec, fl_q=fl_q,
            fl_rec=fl_rec, qdepth=qdepth, resp_q=resp_q)

    def _stage_a(self, m, t):
        """Stage A, the input select (fatal report > RQ doorbell > frame metadata) and the issue of
        the context read. Adds the selected operation (``a_*``), the stall ``adv``, the injection
        register (``inj_valid``, ``inj_qpn``) and the hazard strobe ``a_haz`` the issue rule
        drives."""
        ab, ctx = t.ab, t.ctx
        # ---- stage A: select ------------------------------------------------------------------
        # ``adv``, the stall of stages A to C, is a register loaded in _stage_c_outputs; its
        # fanout (every register of the stages and the tables' read registers) is split over
        # copies of it, each kept by synthesis (``keep``) and placed near its own registers:
        # ``adv`` (A, R, the tables' read), ``adv_ld`` (word 0's read registers and the
        # forward), ``adv_ld1`` (word 1's read registers and the table's write), ``adv_b`` (B's
        # and C's registers) and ``adv_c`` (C's pushes).
        adv, adv_ld, adv_ld1, adv_b, adv_c = (Signal(init=1, name=n, attrs={"keep": 1})
                                              for n in ("adv", "adv_ld", "adv_ld1", "adv_b",
                                                        "adv_c"))
        inj_valid = Signal()
        inj_qpn = Signal(ab)
        meta = self.meta.payload
        sel_fatal = Signal()
        sel_db = Signal()
        sel_meta = Signal()
        a_haz = Signal()        # the selected operation must wait (same-QP hazard, see below)
        m.d.comb += [
            sel_fatal.eq(inj_valid),
            sel_db.eq(~inj_valid & self.rq_db.valid & ~ctx.busy),
            sel_meta.eq(~inj_valid & ~self.rq_db.valid & self.meta.valid & ~ctx.busy),
        ]
        a_info = opcode_info(m, meta.opcode, name="a_info", read=self.read)

        def qpn_ok(q):
            # 1 < q < num_qp (a power of two): ORs of bits, no carry chain
            return ~q[ab:].any() & q[1:ab].any()
        a_idx = Signal(ab)
        a_qok = Signal()
        a_kind = Signal(2)
        with m.If(sel_fatal):
            m.d.comb += [a_idx.eq(inj_qpn), a_qok.eq(1), a_kind.eq(Kind.FATAL)]
        with m.Elif(sel_db):
            q = self.rq_db.payload.qpn
            m.d.comb += [a_idx.eq(q[:ab]), a_qok.eq(qpn_ok(q)),
                         a_kind.eq(Kind.DB)]
        with m.Else():
            q = meta.dqpn
            m.d.comb += [a_idx.eq(q[:ab]), a_qok.eq(qpn_ok(q)),
                         a_kind.eq(Mux(a_info.ack, Kind.RESP, Kind.PKT))]
        a_fire = Signal()
        m.d.comb += a_fire.eq(adv & (sel_fatal | sel_db | sel_meta) & ~a_haz)
        with m.If(adv & sel_fatal & ~a_haz):
            m.d.sync += inj_valid.eq(0)
        if ctx.split:
            m.d.comb += [ctx.rd_addr.eq(a_idx), ctx.rd_en.eq(adv)]
        else:
            # (one word a QP: the read address is stage R0's register, _stage_r0)
            m.d.comb += ctx.rd_en.eq(adv)
        return types.SimpleNamespace(
            a_fire=a_fire, a_haz=a_haz, a_idx=a_idx, a_info=a_info, a_kind=a_kind, a_qok=a_qok,
            adv=adv, adv_ld=adv_ld, adv_ld1=adv_ld1, adv_b=adv_b, adv_c=adv_c, inj_qpn=inj_qpn,
            inj_valid=inj_valid, meta=meta, sel_db=sel_db, sel_fatal=sel_fatal, sel_meta=sel_meta)

    def _stage_r(self, m, t):
        """Stage R, the operation while the block RAM reads (``r_*``), and the metadata ring
        (``mring``) written in A and read by stage C. Adds these."""
        (a_fire, a_idx, a_info, a_kind, a_qok, ab, adv, meta) = (
            t.a_fire, t.a_idx, t.a_info, t.a_kind, t.a_qok, t.ab, t.adv, t.meta)
        # ---- stage R: the tables' read data (EBR output, registered into B) -----------------
        r_valid = Signal()
        r_kind = Signal(2)
        r_idx = Signal(ab)
        r_qok = Signal()
        r_meta = Signal(meta_b_layout)
        r_db = Signal(16)
        r_slot = Signal(2)
        r_info = Signal.like(a_info, name="r_info")
        # a READ's response count less one is (DMA length − 1) >> log2(PMTU) (0 for length 0):
        # the decrement is made here, the shift in B
        r_rlm1 = Signal(32)
        r_rlz = Signal()
        # The frame's metadata is kept once, in a 4-entry LUT-RAM ring written in A and read
        # by stage C at the operation's slot (at most three operations are in R, B and C, so A
        # never writes the slot C reads); R and B carry only the fields B checks.
        m.submodules.mring = mring = memory.Memory(shape=meta_c_layout, depth=4, init=[])
        mr_w = mring.write_port()
        mr_r = mring.read_port(domain="comb")
        a_slot = Signal(2)
        # (written whenever A may issue, a register's enable, not the issue decision: a cycle
        # without an issue writes the free slot the next issue writes again)
        m.d.comb += [mr_w.addr.eq(a_slot), mr_w.en.eq(adv)]
        m.d.comb += [mr_w.data[f].eq(meta[f]) for f in meta_c_layout.members]
        with m.If(a_fire):
            m.d.sync += a_slot.eq(a_slot + 1)
        # What R loads: A's selection (up to 256 QPs), or stage R0's registers (above, see
        # below). Each is the operation's fields (``valid``, ``kind``, ``idx``, ``qok``,
        # ``db``, ``slot``, ``info``, ``rlm1``, ``rlz``, ``meta``) and ``free``, the load's
        # condition.
        src = types.SimpleNamespace(
            valid=a_fire, kind=Mux(a_fire, a_kind, Kind.RESP), idx=a_idx, qok=a_qok,
            db=self.rq_db.payload.index, slot=a_slot, info=a_info, rlm1=meta.reth_len - 1,
            rlz=meta.reth_len == 0, meta=meta, free=~r_valid)
        r0 = None
        if not t.ctx.split:
            r0 = self._stage_r0(m, t, src)
            src = types.SimpleNamespace(**vars(r0), free=r0.valid)
        # (a bubble carries the kind RESP, which changes nothing: while a command runs, stage
        # C's next context is its row as read, which the command's write takes)
        with m.If(adv):
            m.d.sync += [r_valid.eq(src.valid), r_kind.eq(src.kind)]
        # The operation's fields are loaded only into an empty R (from R0: only an operation)
        # and kept there through B (operations enter two cycles apart, three with R0 and R2),
        # so B reads R's registers: one copy of them.
        with m.If(adv & src.free):
            m.d.sync += [r_idx.eq(src.idx), r_qok.eq(src.qok), r_db.eq(src.db),
                         r_slot.eq(src.slot), r_info.eq(src.info), r_rlm1.eq(src.rlm1),
                         r_rlz.eq(src.rlz)]
            for f in meta_b_layout.members:
                m.d.sync += r_meta[f].eq(src.meta[f])
        return types.SimpleNamespace(
            mr_r=mr_r, r_db=r_db, r_idx=r_idx, r_info=r_info, r_kind=r_kind, r_meta=r_meta,
            r_qok=r_qok, r_rlm1=r_rlm1, r_rlz=r_rlz, r_slot=r_slot, r_valid=r_valid, r0=r0)

    def _stage_r0(self, m, t, a):
        """Stage R0 of the one-word tables (above 256 QPs, ``ctx.split`` false): the selected
        operation ``a`` registered, and its QPN the tables' read address, so the address
        reaches the block RAMs (each of its bits on every one of them) straight from a
        flip-flop. Loaded only when empty (A issues nothing while R0 or R holds an operation,
        _issue_rule); the read is made in R0 and the row is in the read register two cycles
        after R (_one_word_loads). Returns its registers (``valid``, ``kind``, ``idx``, ...:
        what R loads)."""
        ab, adv = t.ab, t.adv
        r0 = types.SimpleNamespace(
            valid=Signal(name="r0_valid"), kind=Signal(2, name="r0_kind"),
            idx=Signal(ab, name="r0_idx"), qok=Signal(name="r0_qok"),
            db=Signal(16, name="r0_db"), slot=Signal(2, name="r0_slot"),
            info=Signal.like(a.info, name="r0_info"), rlm1=Signal(32, name="r0_rlm1"),
            rlz=Signal(name="r0_rlz"), meta=Signal(meta_b_layout, name="r0_meta"))
        with m.If(adv):
            m.d.sync += [r0.valid.eq(a.valid), r0.kind.eq(a.kind)]
        with m.If(adv & ~r0.valid):
            m.d.sync += [r0.idx.eq(a.idx), r0.qok.eq(a.qok), r0.db.eq(a.db), r0.slot.eq(a.slot),
                         r0.info.eq(a.info), r0.rlm1.eq(a.rlm1), r0.rlz.eq(a.rlz)]
            m.d.sync += [r0.meta[f].eq(a.meta[f]) for f in meta_b_layout.members]
        m.d.comb += t.ctx.rd_addr.eq(r0.idx)
        return r0

    def _stage_b_regs(self, m, t):
        """The registers of stages B and C (``b_*``, ``c_*``), the dynamic table's write (C's
        decision ``new``), the issue rule (``a_haz``) and the
        QP's context ``fwd`` that B and C read. Adds these."""
        (a_haz, a_info, ab, adv, ctx, inj_qpn, meta, mr_r, r_db, r_idx, r_info, r_kind,
         r_meta, r_qok, r_rlm1, r_rlz, r_slot, r_valid, sel_db, sel_fatal, sel_meta) = (
            t.a_haz, t.a_info, t.ab, t.adv, t.ctx, t.inj_qpn, t.meta, t.mr_r, t.r_db, t.r_idx,
            t.r_info, t.r_kind, t.r_meta, t.r_qok, t.r_rlm1, t.r_rlz, t.r_slot, t.r_valid,
            t.sel_db, t.sel_fatal, t.sel_meta)
        # ---- stage B: the registers and the forward (its checks: _stage_b_checks) -----------
        b_valid = Signal()
        b_kind = Signal(2)          # (RESP for a bubble: C's kind then changes nothing)
        # the operation's fields: R's registers, which keep them through B (the opcode decoded
        # in A: B's checks start from flip-flops)
        b_idx, b_qok, b_meta, b_db, b_slot = r_idx, r_qok, r_meta, r_db, r_slot
        b_info, b_rlm1, b_rlz = r_info, r_rlm1, r_rlz
        # the QP's rows: the tables' one read register, which keeps an operation's rows from
        # its R→B edge until the next operation's (see below), so B and C read the same one
        b_ctx = ctx.rd_dyn
        b_st = ctx.rd_static

        c_valid = Signal()
        c_kind = Signal(2)
        c_wr = Signal()             # c_valid & (c_kind != RESP): C's operation writes the table
        c_idx = Signal(ab)
        c_qok = Signal()
        c_meta = Signal(meta_c_layout)
        c_db = Signal(16)
        c_slot = Signal(2)
        m.d.comb += [mr_r.addr.eq(c_slot), c_meta.eq(mr_r.data)]
        c_ctx = b_ctx
        c_st = b_st

        # One read-modify-write of the dynamic table: read in A (the block RAM's output in R),
        # its one register (``ctx.rd_dyn``) loaded on the R→B edge and read by B and C, written
        # with C's decision ``new`` in C's cycle. Operations enter two cycles apart at least,
        # whatever their QPs (A issues nothing while R holds one: max(2, ⌈480/W⌉) cycles a
        # frame, design-rules.md §1), so the register is loaded only once the operation ahead
        # has left C. An operation is not issued while an operation of its QP that writes the
        # table is in C (``a_haz``): its read would meet that write in the same cycle. The one
        # write a read can then miss is that of the operation in B when the read was issued:
        # that operation is in C on the reader's R→B edge, and the register takes its decision
        # ``new`` (the whole row, which has the earlier writes of that QP in it) instead of the
        # RAM data: the one forward path.
        #
        # Stage C is the table's one writer: a command's row write (``ctx.cw_*``, registers,
        # the pipeline drained) is made there too, cleared (the sweep, SET_QP to RESET) or from
        # ``new``, which is then the row the command read with the command's state and ePSN
        # (``_next_context``).
        wr_en = Signal()
        new = Signal(qp_dyn_layout)
        m.d.comb += [ctx.wr_en.eq(wr_en | ctx.cw_valid),
                     ctx.wr_addr.eq(Mux(ctx.cw_valid, ctx.cw_qpn, c_idx)),
                     ctx.wr_dyn.eq(new)]
        self._issue_rule(m, t, c_wr, c_idx, b_valid, b_kind)
        r2_valid = None
        if t.r0 is not None:
            r2_valid = self._one_word_loads(m, t, c_wr, c_idx, b_valid, b_kind)
        else:
            with m.If(t.adv_b):
                m.d.sync += [b_valid.eq(r_valid), b_kind.eq(r_kind)]
            # (the forward's select, a register: the operation issued finds one of its QP that
            # writes the table in B, which will be in C on its R→B edge)
            r_fwd = Signal()
            with m.If(t.adv_ld):
                m.d.sync += r_fwd.eq(b_valid & (b_kind != Kind.RESP) & (b_idx == t.a_idx))
            m.d.comb += [ctx.rd_load.eq(t.adv_ld & r_valid), ctx.fwd_dyn.eq(new),
                         ctx.fwd_en.eq(r_fwd)]
            # Up to 256 QPs (``ctx.split``; one word above, and these ports are not used) the
            # tables keep a QP's row in two words, read on two cycles: word 0 (what B checks)
            # at A's issue, word 1 (what only C reads) while R holds the operation (A issues
            # nothing then), into its register on the B→C edge. With the forward, word 1's
            # register already has the decision of the operation ahead (it takes the word 1 C
            # writes) and holds (``b_fwd``).
            b_fwd = Signal()
            with m.If(t.adv_ld1):
                m.d.sync += b_fwd.eq(r_fwd)
            m.d.comb += [ctx.rd_hi.eq(r_valid), ctx.rd_hi_addr.eq(r_idx),
                         ctx.rd_load1.eq(t.adv_ld1 & b_valid), ctx.fwd1_en.eq(b_fwd)]
        fwd = b_ctx
        return types.SimpleNamespace(
            b_db=b_db, b_idx=b_idx, b_info=b_info, b_kind=b_kind, b_meta=b_meta, b_qok=b_qok,
            b_rlm1=b_rlm1, b_rlz=b_rlz, b_slot=b_slot, b_st=b_st, b_valid=b_valid, c_ctx=c_ctx,
            c_db=c_db, c_idx=c_idx, c_kind=c_kind, c_meta=c_meta, c_qok=c_qok, c_slot=c_slot,
            c_st=c_st, c_valid=c_valid, c_wr=c_wr, fwd=fwd, new=new, wr_en=wr_en,
            r2_valid=r2_valid)

    def _one_word_loads(self, m, t, c_wr, c_idx, b_valid, b_kind):
        """One word a QP (stages R0, R2 and W): stage R2 (``r2_valid``, ``r2_kind``) between R
        and B, while the row read in R0 goes from the block RAMs' output registers (loaded on
        the R→R2 edge) into the read register (on the R2→B edge), and the read register's
        forward select. Returns ``r2_valid``.

        Operations are three cycles apart (A issues nothing while R0 or R holds one, so R's
        registers, loaded on the R0→R edge, keep an operation's fields through R, R2 and B).
        A row's read in R0 misses the write of an operation in C at its issue (written in
        R0's cycle, which the read meets), in R0 or in R (written a cycle later): one of them
        at most, three cycles apart, and W's register still holds it on the reader's R2→B
        edge, the next write being that of an operation in C at the reader's B at the
        soonest. The read register then takes W's row (``fwd_w``: the three compares made
        as the reader passes A, R0 and R, one register each); C's decision is never
        needed."""
        ctx, adv = t.ctx, t.adv
        r2_valid = Signal()
        r2_kind = Signal(2)
        with m.If(adv):
            m.d.sync += [r2_valid.eq(t.r_valid), r2_kind.eq(t.r_kind)]
        with m.If(t.adv_b):
            m.d.sync += [b_valid.eq(r2_valid), b_kind.eq(r2_kind)]
        fwd_a = Signal()
        fwd_r0 = Signal()
        fwd_w = Signal()
        with m.If(adv):
            m.d.sync += [fwd_a.eq(c_wr & (c_idx == t.a_idx)),
                         fwd_r0.eq(fwd_a | (c_wr & (c_idx == t.r0.idx)))]
        with m.If(t.adv_ld):
            m.d.sync += fwd_w.eq(fwd_r0 | (c_wr & (c_idx == t.r_idx)))
        m.d.comb += [ctx.rd_load.eq(t.adv_ld & r2_valid), ctx.fwd_w_en.eq(fwd_w)]
        return r2_valid

    def _issue_rule(self, m, t, c_wr, c_idx, b_valid, b_kind):
        """The issue rule ``a_haz`` (R holds an operation, or the selected operation's QP is
        written by C's in this cycle; with stage R0, one word a QP: R0 holds one) and the input
        ports' ``ready``."""
        (a_haz, ab, adv, ctx, inj_qpn, meta, r_idx, r_valid, sel_db, sel_fatal, sel_meta) = (
            t.a_haz, t.ab, t.adv, t.ctx, t.inj_qpn, t.meta, t.r_idx, t.r_valid, t.sel_db,
            t.sel_fatal, t.sel_meta)
        if t.r0 is not None:
            # One word a QP: no same-QP wait (the read register takes the write a read
            # misses from W's register, _one_word_loads), and operations three cycles apart
            busy = t.r0.valid | r_valid
            m.d.comb += [a_haz.eq(busy),
                         self.rq_db.ready.eq(adv & sel_db & ~busy),
                         self.meta.ready.eq(adv & ~t.inj_valid & ~self.rq_db.valid & ~ctx.busy
                                            & ~busy)]
            return

        def hazard(idx):
            return c_wr & (c_idx == idx)
        # (one compare per source, in parallel with the source select)
        haz_f = Signal()
        haz_d = Signal()
        haz_m = Signal()
        # The metadata's hazard comes from registers, so that ``meta.ready`` (RX Parse's read of
        # its queue) depends on no payload bit and on no compare (timing): ``m_hz`` compares
        # the head offered in the cycle before with the operation that is in C in this cycle
        # (B's on ``adv``, else C's). The head is the same now if it was offered then (stream
        # rules: held until taken; a head taken then put R's operation in the way now). A head
        # that was not offered then waits while C holds an operation of any QP that writes the
        # table (a cycle at most).
        m_seen = Signal()
        m_hz = Signal()
        m.d.sync += [m_seen.eq(self.meta.valid),
                     m_hz.eq(Mux(adv, b_valid & (b_kind != Kind.RESP) & (r_idx == meta.dqpn[:ab]),
                                 hazard(meta.dqpn[:ab])))]
        m.d.comb += [haz_f.eq(hazard(inj_qpn)), haz_d.eq(hazard(self.rq_db.payload.qpn[:ab])),
                     haz_m.eq(Mux(m_seen, m_hz, c_wr)),
                     a_haz.eq(r_valid | (sel_fatal & haz_f) | (sel_db & haz_d)
                              | (sel_meta & haz_m)),
                     # (each port's ready with only its own source's terms)
                     self.rq_db.ready.eq(adv & sel_db & ~r_valid & ~haz_d),
                     self.meta.ready.eq(adv & ~t.inj_valid & ~self.rq_db.valid & ~ctx.busy
                                        & ~r_valid & ~haz_m)]

    def _stage_r_compares(self, m, t):
        """The length compares stage R makes for B (``b_rl_gt``, ``b_len_gt``, ``b_len_eq``, one
        bit per path MTU, loaded on ``adv`` with B's registers). Adds these."""
        r_meta = t.r_meta
        # The compares of the RETH length and the payload length with every path MTU (bit 0:
        # MTU 0, for a code outside 1..5; bit c: ``128 << c``), made in R from its registers:
        # B only selects by the QP's code (the static row's register), so the code reaches no
        # carry chain (timing). x > 2^k is an OR of x's bits, x == 2^k an AND.
        gt = _gt_pow2

        def eq(x, k):
            return ~x.any() if k is None else x[k] & ~x[k + 1:].any() & ~x[:k].any()
        mtus = [None] + [7 + c for c in range(1, 6)]       # log2 of each MTU (None: 0)
        b_rl_gt = Signal(6)
        b_len_gt = Signal(6)
        b_len_eq = Signal(6)
        # and the RETH length's own tests: > 2^31, and the WRITE rule of a residue ≤ the path
        # MTU against it (a FIRST/ONLY's residue is its RETH length)
        b_rl_big = Signal()
        b_rl_exact_bad = Signal()
        with m.If(t.adv_b):
            m.d.sync += [b_rl_gt.eq(Cat(gt(r_meta.reth_len, k) for k in mtus)),
                         b_len_gt.eq(Cat(gt(r_meta.payload_len, k) for k in mtus)),
                         b_len_eq.eq(Cat(eq(r_meta.payload_len, k) for k in mtus)),
                         b_rl_big.eq(gt(r_meta.reth_len, 31)),
                         b_rl_exact_bad.eq(self._exact_bad(r_meta.payload_len, r_meta.padcnt,
                                                           r_meta.reth_len))]
        return types.SimpleNamespace(b_rl_gt=b_rl_gt, b_len_gt=b_len_gt, b_len_eq=b_len_eq,
                                     b_rl_big=b_rl_big, b_rl_exact_bad=b_rl_exact_bad)

    def _stage_b_checks(self, m, t):
        """Stage B's checks, registered into C: those that need no dynamic context (path MTU,
        position length rule, RETH length, the start WRITE rules, access, source IPv4) and those
        against the context ``fwd`` (``c_ck``). Its parts add C's check registers, and the
        outcome strobes and next contexts the later parts drive (``x_*``, ``nx_e``, ``nx_n``)."""
        # its parts, called in the order of their statements
        _add(t, self._stage_b_rules(m, t))
        _add(t, self._stage_b_context(m, t))
        _add(t, self._stage_b_to_c(m, t))

    @staticmethod
    def _exact_bad(length, padcnt, resid):
        """The WRITE rule of a residue ≤ the path MTU broken: payload != resid or
        PadCnt != −resid & 3."""
        return (length != resid) | (padcnt != (-resid)[0:2])

    def _w_rules_bad(self, m, resid_gt, len_ne, padcnt, exact_bad, name):
        """Whether a packet of PadCnt ``padcnt`` breaks the WRITE rules against the residue
        (a signal named ``name``; ``resid_gt``: resid > the path MTU, ``len_ne``: the payload
        length != the path MTU, ``exact_bad``: :meth:`_exact_bad`): one rule for a FIRST/ONLY
        (resid = its RETH length) and a MIDDLE/LAST (the context's residue)."""
        # the WRITE rules against the residue: resid > PMTU → payload == PMTU, PadCnt 0;
        # else payload == resid, PadCnt == −resid & 3
        bad = Signal(name=name)
        with m.If(resid_gt):
            m.d.comb += bad.eq(len_ne | (padcnt != 0))
        with m.Else():
            m.d.comb += bad.eq(exact_bad)
        return bad

    def _stage_b_rules(self, m, t):
        """Stage B's length checks that need no dynamic context: the path MTU in bytes
        (``b_pmtu``), the position length rule (``b_pos_bad``) and the WRITE rules of a
        FIRST/ONLY against its RETH length (``b_wstart_bad``). Adds these, with the payload
        and RETH lengths (``b_len``, ``rl``) the other checks read."""
        b_info, b_meta, b_st = t.b_info, t.b_meta, t.b_st
        # context-free checks, registered into C
        b_pmtu = Signal(13)
        with m.Switch(b_st.pmtu):
            for code in range(1, 6):
                with m.Case(code):
                    m.d.comb += b_pmtu.eq(128 << code)
        b_len = b_meta.payload_len
        # the compares made in R, selected by the QP's path MTU code
        rl_gt = Signal()            # RETH length > path MTU
        len_gt = Signal()           # payload length > path MTU
        len_ne = Signal()           # payload length != path MTU
        with m.Switch(b_st.pmtu):
            for code in range(1, 6):
                with m.Case(code):
                    m.d.comb += [rl_gt.eq(t.b_rl_gt[code]), len_gt.eq(t.b_len_gt[code]),
                                 len_ne.eq(~t.b_len_eq[code])]
            with m.Default():
                m.d.comb += [rl_gt.eq(t.b_rl_gt[0]), len_gt.eq(t.b_len_gt[0]),
                             len_ne.eq(~t.b_len_eq[0])]
        b_pos_bad = Signal()
        with m.If(b_info.start & b_info.end):
            m.d.comb += b_pos_bad.eq(len_gt)
        with m.Elif(~b_info.end):
            m.d.comb += b_pos_bad.eq(len_ne)
        with m.Else():
            m.d.comb += b_pos_bad.eq((b_len == 0) | len_gt)
        rl = b_meta.reth_len

        # FIRST/ONLY: resid = RETH length
        b_wstart_bad = self._w_rules_bad(m, rl_gt, len_ne, b_meta.padcnt, t.b_rl_exact_bad,
                                         "b_wstart_bad")
        return types.SimpleNamespace(b_pmtu=b_pmtu, b_len=b_len, b_pos_bad=b_pos_bad, rl=rl,
                                     b_wstart_bad=b_wstart_bad, len_ne=len_ne)

    def _stage_b_context(self, m, t):
        """Stage B's checks against the QP's current dynamic context ``fwd`` (PSN class, state,
        opcode sequence, RNR, the WRITE rules of a MIDDLE/LAST, the residue and offset after
        the packet), registered into C as ``c_ck``; and the outcome strobes and next contexts
        of stage C (``x_*``, ``nx_e``, ``nx_n``, defined there). Adds these and ``c_psn1``."""
        adv, b_info, b_len, b_meta, b_pmtu, fwd, rl = (t.adv_b, t.b_info, t.b_len, t.b_meta,
                                                       t.b_pmtu, t.fwd, t.rl)
        # The checks that need the dynamic context, against the QP's current context ``fwd``.
        chk_layout = data.StructLayout({
            "cls": psn_class_layout, "state_ok": 1, "seq_ok": 1, "rnr": 1, "w_bad": 1,
            "resid": 32, "off": 32, "next_open": 2,
        })

        def context_checks(x, state_ok, name):
            ck = Signal(chk_layout, name=name)
            resid = Signal(32, name=f"{name}_resid")
            m.d.comb += resid.eq(Mux(b_info.start, rl, x.resid))
            oseq = op_sequence(m, b_meta.opcode, x.open, name=f"{name}_op_seq")
            m.d.comb += [
                ck.cls.eq(psn_classify(m, b_meta.psn, x.epsn, name=f"{name}_psn_cls")),
                ck.state_ok.eq(state_ok),
                ck.seq_ok.eq(oseq.ok),
                ck.next_open.eq(oseq.next_open),
                ck.rnr.eq(b_info.rwr & (x.rq_prod == x.rq_cons)),
                ck.w_bad.eq(b_info.write & ~b_info.start
                            & self._w_rules_bad(m, gt_pmtu(x.resid), t.len_ne, b_meta.padcnt,
                                                self._exact_bad(b_len, b_meta.padcnt, x.resid),
                                                f"{name}_w_bad")),
                ck.resid.eq(resid - b_len),                         # residue after the packet
                ck.off.eq(Mux(b_info.start, 0, x.off) + b_len),     # offset after the packet
            ]
            return ck

        def gt_pmtu(x):
            # x > the QP's path MTU: x's compare with each MTU (ORs of bits, no carry chain),
            # selected by the code (0 outside 1..5)
            r = Signal(name="b_resid_gt")
            m.d.comb += r.eq(_gt_pow2(x, None))
            with m.Switch(t.b_st.pmtu):
                for code in range(1, 6):
                    with m.Case(code):
                        m.d.comb += r.eq(_gt_pow2(x, 7 + code))
            return r

        def state_ok_of(state):
            return (state == QpState.RTR) | (state == QpState.RTS)

        x_exec = Signal()           # stage C executes its packet (defined with stage C)
        x_fail = Signal()           # stage C's packet draws NAK 0x61 (QP → ERROR)
        x_fatal = Signal()          # stage C's fatal report moves the QP to ERROR
        nx_e = Signal(qp_dyn_layout)
        nx_n = Signal(qp_dyn_layout)
        ck = context_checks(fwd, state_ok_of(fwd.state), "b_ck")
        c_ck = Signal(chk_layout)
        c_psn1 = Signal(24)
        with m.If(adv):
            m.d.sync += c_ck.eq(ck)
        return types.SimpleNamespace(b_ck=ck, c_ck=c_ck, c_psn1=c_psn1, nx_e=nx_e, nx_n=nx_n,
                                     x_exec=x_exec, x_fail=x_fail, x_fatal=x_fatal)

    def _stage_b_to_c(self, m, t):
        """Stage B's remaining checks that need no dynamic context (the length rules together,
        access, a bad QPN or source IPv4, a READ's PSN count) and the registers of stage C they
        and B's operation are loaded into on ``adv``. Adds C's check registers."""
        (adv, b_db, b_idx, b_info, b_kind, b_len, b_meta, b_pmtu, b_pos_bad, b_qok, b_rlm1,
         b_rlz, b_slot, b_st, b_valid, b_wstart_bad, c_ctx, c_db, c_idx, c_kind, c_psn1, c_qok,
         c_slot, c_st, c_valid, fwd, rl) = (
            t.adv_b, t.b_db, t.b_idx, t.b_info, t.b_kind, t.b_len, t.b_meta, t.b_pmtu, t.b_pos_bad,
            t.b_qok, t.b_rlm1, t.b_rlz, t.b_slot, t.b_st, t.b_valid, t.b_wstart_bad, t.c_ctx,
            t.c_db, t.c_idx, t.c_kind, t.c_psn1, t.c_qok, t.c_slot, t.c_st, t.c_valid, t.fwd,
            t.rl)
        c_info = Signal.like(b_info)
        c_pre_bad = Signal()            # position rule, RETH length > 2^31, start WRITE rules
        c_acc_bad = Signal()
        c_drop = Signal()               # bad QPN or source IPv4 not the QP's
        c_len_nz = Signal()
        # a READ of L bytes takes max(1, ⌈L/PMTU⌉) PSNs (interface.md §7): that count less one
        b_rd_nm1 = Signal(24)
        with m.If(b_info.read & ~b_rlz):
            with m.Switch(b_st.pmtu):
                for code in range(1, 6):
                    with m.Case(code):
                        m.d.comb += b_rd_nm1.eq(b_rlm1 >> (7 + code))
        b_pre_bad = Signal()
        b_acc_bad = Signal()
        b_drop = Signal()
        m.d.comb += [
            b_pre_bad.eq(b_pos_bad | (b_info.reth & t.b_rl_big)
                         | (b_info.write & b_info.start & b_wstart_bad)
                         | (b_info.read & ~t.b_len_eq[0])),
            # READ needs REMOTE_READ (0x04), WRITE REMOTE_WRITE (0x02); atomics are refused
            b_acc_bad.eq((b_info.read & ~b_st.access[2]) | b_info.atomic
                         | (b_info.write & ~b_st.access[1])),
            b_drop.eq(~b_qok | (b_meta.src_ip != b_st.rip)),
        ]
        # Stage C's verdict, prepared here from everything but the PSN class, the WRITE rules
        # of a MIDDLE/LAST and the length rules (C's own check registers): C executes on
        # ``c_xe & in_order & ~w_bad & ~pre_bad`` (one LUT before the dynamic row's 2:1 select,
        # which fans out to every bit of the table's write data) and fails (NAK 0x61) on
        # ``in_order & (c_xf | c_xfw & (w_bad | pre_bad))``. ``c_held``: the failure completes
        # the QP's held WQE in error.
        ck = t.b_ck
        b_base = Signal()               # a request packet of a usable QP in RTR/RTS
        c_base = Signal()
        c_xe = Signal()
        c_xe_sw = Signal()              # c_xe of a WRITE's start (it loads the RETH's VA, rkey)
        c_xf = Signal()
        c_xfw = Signal()
        c_held = Signal()
        b_held_seq = Signal()
        b_held = Signal()
        # (the RQ consumer's increment, by outcome: one select of registers in C)
        c_cons = Signal(data.StructLayout({"f": 1, "fw": 1, "e": 1}))
        m.d.comb += [
            b_base.eq((b_kind == Kind.PKT) & ~b_drop & ck.state_ok),
            b_held_seq.eq(~ck.seq_ok | b_acc_bad),
            b_held.eq(Mux(b_held_seq, ~ck.seq_ok & (fwd.open == MsgClass.SEND),
                          (fwd.open == MsgClass.SEND) | b_info.rwr)),
        ]
        with m.If(adv):
            m.d.sync += [c_valid.eq(b_valid), c_kind.eq(b_kind), c_idx.eq(b_idx),
                         t.c_wr.eq(b_valid & (b_kind != Kind.RESP)),
                         c_qok.eq(b_qok), c_slot.eq(b_slot), c_db.eq(b_db),
                         c_info.eq(b_info),
                         c_pre_bad.eq(b_pre_bad), c_acc_bad.eq(b_acc_bad), c_drop.eq(b_drop),
                         c_base.eq(b_base),
                         c_xe.eq(b_base & ~b_acc_bad & ck.seq_ok & ~ck.rnr),
                         c_xe_sw.eq(b_base & ~b_acc_bad & ck.seq_ok & ~ck.rnr
                                    & b_info.start & b_info.write),
                         c_xf.eq(b_base & b_held_seq),
                         c_xfw.eq(b_base & ~ck.rnr),
                         c_held.eq(b_held),
                         c_cons.f.eq(b_base & b_held_seq & b_held),
                         c_cons.fw.eq(b_base & ~ck.rnr & b_held),
                         c_cons.e.eq(b_base & ~b_acc_bad & ck.seq_ok & ~ck.rnr & b_info.end
                                     & (b_info.send | b_info.rwr)),
                         c_len_nz.eq(b_len != 0), c_psn1.eq(b_meta.psn + 1 + b_rd_nm1)]
        return types.SimpleNamespace(
            c_acc_bad=c_acc_bad, c_base=c_base, c_cons=c_cons, c_drop=c_drop, c_held=c_held,
            c_info=c_info,
            c_len_nz=c_len_nz, c_pre_bad=c_pre_bad, c_xe=c_xe, c_xe_sw=c_xe_sw, c_xf=c_xf,
            c_xfw=c_xfw)

    def _stage_c_outputs(self, m, t):
        """Stage C's outputs: the queue pushes on ``fire`` (the ``want_*`` strobes and records the
        decision drives), the stall register ``adv``, ``qp_set``, the flush request, ``rq_post``,
        ``qp_reset`` and the response entry's defaults. Adds the strobes and records."""
        (ack_q, adv, b_valid, c_ctx, c_db, c_idx, c_kind, c_meta, c_qok, c_st, c_valid, ctx,
         dec_layout, dec_q, entry_layout, ev_q, exe_q, fl_q, resp_q, wr_en) = (
            t.ack_q, t.adv, t.b_valid, t.c_ctx, t.c_db, t.c_idx, t.c_kind, t.c_meta, t.c_qok,
            t.c_st, t.c_valid, t.ctx, t.dec_layout, t.dec_q, t.entry_layout, t.ev_q, t.exe_q,
            t.fl_q, t.resp_q, t.wr_en)
        ack_rec, fl_rec = t.ack_rec, t.fl_rec
        # ---- stage C: decide --------------------------------------------------------------------
        cm, cx, st = c_meta, c_ctx, c_st
        want_exe = Signal()
        want_rq = Signal()
        want_dec = Signal()
        want_ev = Signal()
        want_ack = Signal()
        want_fl = Signal()
        exe = Signal(exe_layout)
        exe_dup = Signal()          # the command is a duplicate READ
        ent = Signal(entry_layout)
        dec = Signal(dec_layout)
        stat_c = Signal(NUM_COUNTERS)
        fire = Signal()
        set_fl = Signal()
        m.d.comb += fire.eq(self._stall(m, t, set_fl))
        # The flush of a SET_QP to ERROR is pushed in the cycle after its write, from the
        # tables' read register: SET_QP runs with the pipeline drained, so it holds the QP's
        # row as the command read it (its RQ producer, which a move to ERROR keeps, and its
        # static fields). The
        # queue has room: a command starts only with room in it, and nothing else pushes to it
        # while the command runs.
        set_fl_qpn = Signal(t.ab)
        m.d.sync += [set_fl.eq(ctx.set_valid & ctx.set_to_error), set_fl_qpn.eq(ctx.set_qpn)]
        m.d.comb += [
            exe_q.i.valid.eq(fire & want_exe), t.exe_rec.eq(exe),
            resp_q.i.valid.eq(fire & want_rq), resp_q.i.payload.eq(ent),
            dec_q.i.valid.eq(fire & want_dec), dec_q.i.payload.eq(dec),
            ev_q.i.valid.eq(fire & want_ev),
            ev_q.i.payload.number.eq(c_idx),
            ack_q.i.valid.eq(fire & want_ack), ack_rec.opcode.eq(cm.opcode),
            ack_rec.qpn.eq(c_idx), ack_rec.psn.eq(cm.psn),
            ack_rec.syndrome.eq(cm.aeth_syndrome),
            ack_rec.len.eq(cm.payload_len),
            fl_q.i.valid.eq((fire & want_fl) | set_fl),
            # (with ``adv_ld1``, the copy of ``adv`` that loads word 1's register, which the
            # write loads too)
            wr_en.eq(t.c_wr & t.adv_ld1),
        ]
        # the requester's view: every SET_QP written (incl. the sweep to RESET after rst), and
        # every move to ERROR decided here (stage C never fires while a command runs: commands
        # wait for an empty pipeline, so the two never coincide)
        # (the payload is chosen by ``set_valid`` alone, so stage C's decision reaches only
        # ``valid``, not the requester context's register of the whole event)
        m.d.comb += self.qp_set.valid.eq(ctx.set_valid | (fire & want_ev))
        with m.If(ctx.set_valid):
            m.d.comb += [self.qp_set.payload.qpn.eq(ctx.set_qpn),
                         self.qp_set.payload.state.eq(ctx.set_state),
                         self.qp_set.payload.sq_psn.eq(ctx.set_sq_psn)]
        with m.Else():
            m.d.comb += [self.qp_set.payload.qpn.eq(c_idx),
                         self.qp_set.payload.state.eq(QpState.ERROR)]
        m.d.comb += self.stat.eq(Mux(fire, stat_c, 0))

        m.d.comb += [fl_rec.qpn.eq(Mux(set_fl, set_fl_qpn, c_idx)),
                     fl_rec.index.eq(Mux((c_kind == Kind.DB) & ~set_fl, c_db, cx.rq_prod)),
                     fl_rec.rcqn.eq(st.rcqn), fl_rec.rq_base.eq(st.rq_base),
                     fl_rec.rq_log.eq(st.rq_log)]
        m.d.comb += [
            self.rq_post.valid.eq(fire & (c_kind == Kind.DB) & c_qok
                                  & (cx.state != QpState.RESET) & (cx.state != QpState.ERROR)),
            self.rq_post.payload.qpn.eq(c_idx), self.rq_post.payload.index.eq(c_db),
            self.rq_post.payload.rcqn.eq(st.rcqn), self.rq_post.payload.rq_base.eq(st.rq_base),
            self.rq_post.payload.rq_log.eq(st.rq_log),
        ]
        m.d.comb += [self.qp_reset.valid.eq(ctx.set_valid & (ctx.set_state == QpState.RESET)),
                     self.qp_reset.payload.qpn.eq(ctx.set_qpn)]
        # response entry defaults (``msn``: the QP's MSN before the packet; ``inc``: the
        # response's MSN is one more, unless a fatal ``done`` says the message did not complete)
        m.d.comb += [ent.qpn.eq(c_idx), ent.msn.eq(cx.msn), ent.psn.eq(cm.psn)]
        return types.SimpleNamespace(
            dec=dec, ent=ent, exe=exe, exe_dup=exe_dup, stat_c=stat_c, want_ack=want_ack, want_dec=want_dec,
            want_ev=want_ev, want_exe=want_exe, want_fl=want_fl, want_rq=want_rq)

    def _stall(self, m, t, set_fl):
        """The stall ``adv`` and its copies, loaded with their next value; returns C's push
        strobe (``fire``). ``set_fl``: SET_QP's flush, which pushes ``fl_q`` too."""
        (ack_q, b_valid, c_valid, dec_q, ev_q, exe_q, fl_q, resp_q) = (
            t.ack_q, t.b_valid, t.c_valid, t.dec_q, t.ev_q, t.exe_q, t.fl_q, t.resp_q)
        # ``adv`` (= ~c_valid | room in every output queue, whether this operation needs it or
        # not: the decision stays out of the stall path) enables every register of stages A
        # to C and the context tables' read: registers (the copies, see _stage_a) loaded with
        # its next value, stage C's next valid (``c_valid`` follows ``b_valid`` on ``adv``)
        # and each queue's room in the next cycle as the queues' registers and C's own vouch
        # for it: two free entries, or one and no push from C now (``c_valid & adv``; for
        # ``fl_q`` also SET_QP's flush). Neither the decision (which queues C pushes) nor a
        # consumer's ``ready`` reaches it: a queue full now has no room next in this count
        # even if read now, a cycle of stall more than the exact count; with operations two
        # cycles apart C's next cycle is then a bubble's, which needs no room. So ``fire`` is
        # ``c_valid & adv``, one LUT of registers.
        push = Signal()
        m.d.comb += push.eq(c_valid & t.adv_c)

        def room(q, name, p=push):
            return (q.level <= t.qdepth[name] - 2) | (q.i.ready & ~p)
        adv_d = Signal()
        m.d.comb += adv_d.eq(~Mux(t.adv_c, b_valid, c_valid)
                             | (room(exe_q, "exe") & room(resp_q, "resp") & room(dec_q, "dec")
                                & room(ev_q, "ev") & room(ack_q, "ack")
                                & room(fl_q, "fl", push | set_fl)))
        m.d.sync += [a.eq(adv_d) for a in (t.adv, t.adv_ld, t.adv_ld1, t.adv_b, t.adv_c)]
        return push

    def _stage_c_decide(self, m, t):
        """Stage C's decision, per operation kind: the ``exe`` command, the response entry, the
        payload decision, the counters, and NAK 0x61 (``fail_61``). Its parts add the checks'
        results the next context reads."""
        # its parts, called in the order of their statements
        _add(t, self._stage_c_checks(m, t))
        self._exe_fields(m, t)
        self._stage_c_kinds(m, t)

    def _stage_c_checks(self, m, t):
        """Stage C's check results, from the registers B loaded (``c_ck`` and the context-free
        ones): the PSN class, opcode sequence, access, RNR and length rules, with the next MSN,
        offset and residue, and the NAK 0x61 strobe ``fail_61`` and its ``held`` (whether the
        QP's held WQE completes in error), which the decision drives. Adds these."""
        c_acc_bad, c_ck, c_ctx, c_info, c_meta, c_pre_bad = (
            t.c_acc_bad, t.c_ck, t.c_ctx, t.c_info, t.c_meta, t.c_pre_bad)
        cm, cx, info = c_meta, c_ctx, c_info
        op = cm.opcode
        pcls = c_ck.cls     # every context check below was made in B (see there)
        seq_ok = c_ck.seq_ok
        acc_bad = c_acc_bad
        rnr = c_ck.rnr
        # the WRITE rules of a MIDDLE/LAST against the stored residue (FIRST/ONLY: in c_pre_bad)
        len_bad = Signal()
        m.d.comb += len_bad.eq(c_pre_bad | c_ck.w_bad)

        state_ok = c_ck.state_ok
        msn_inc = Signal(24)
        off_next = c_ck.off
        resid_next = c_ck.resid
        m.d.comb += msn_inc.eq(cx.msn + info.end)
        fail_61 = Signal()
        held = Signal()
        return types.SimpleNamespace(
            acc_bad=acc_bad, fail_61=fail_61, held=held, len_bad=len_bad, msn_inc=msn_inc,
            off_next=off_next, pcls=pcls, resid_next=resid_next, rnr=rnr,
            seq_ok=seq_ok, state_ok=state_ok)

    def _exe_fields(self, m, t):
        """The fields of the ``exe`` command stage C pushes for its packet: the packet's own
        (from its meta and opcode), the message's (from its RETH at the start, else from the
        context) and the QP's (its static context); the decision sets ``exe_dup`` (which
        also picks a READ's MSN) and ``status``."""
        c_ctx, c_idx, c_info, c_meta, c_st, exe, msn_inc = (
            t.c_ctx, t.c_idx, t.c_info, t.c_meta, t.c_st, t.exe, t.msn_inc)
        cm, cx, st, info = c_meta, c_ctx, c_st, c_info
        length = cm.payload_len
        # exe command fields
        # (a READ's MSN: after it, or the current one for a duplicate, ``exe_dup``)
        rd_msn = Mux(t.exe_dup, cx.msn, msn_inc)
        m.d.comb += [
            exe.qpn.eq(c_idx), exe.psn.eq(cm.psn),
            exe.payload_len.eq(length), exe.se.eq(cm.se),
            exe.wqe.eq(info.rwr),
            exe.comp.eq(info.comp), exe.send.eq(info.send), exe.write.eq(info.write),
            exe.imm_valid.eq(info.immdt), exe.inv.eq(info.ieth),
            exe.offset.eq(Mux(info.start, 0, cx.off)),
            exe.va.eq(Mux(info.start, cm.reth_va, cx.va)),
            exe.rkey.eq(Mux(info.start, cm.reth_rkey, cx.rkey)),
            # (after the start: the bytes through this packet, which is the DMA length on the
            # LAST, where the CQE takes it, and ≠ 0 with the payload, all Execute asks before)
            exe.dma_len.eq(Mux(info.start, cm.reth_len, t.off_next)),
            exe.imm_or_rkey.eq(Mux(info.read, Cat(rd_msn, st.pmtu), cm.imm_or_rkey)),
            exe.rq_index.eq(cx.rq_cons),
            exe.pd.eq(st.pd), exe.rcqn.eq(st.rcqn), exe.rq_base.eq(st.rq_base),
            exe.rq_log.eq(st.rq_log),
            exe.read.eq(info.read), exe.dup.eq(t.exe_dup), exe.ird.eq(st.ird),
        ]

    def _stage_c_kinds(self, m, t):
        """Stage C's decision by operation kind: a response (to the requester's ACK path, or
        counted and dropped), an RQ doorbell (a flush of a QP in ERROR), a fatal report (the QP
        to ERROR) and a request packet (:meth:`_stage_c_packet`)."""
        c_ctx, c_drop, c_kind, c_len_nz, c_meta, c_qok, dec, stat_c = (
            t.c_ctx, t.c_drop, t.c_kind, t.c_len_nz, t.c_meta, t.c_qok, t.dec, t.stat_c)
        want_ack, want_dec, want_ev, want_fl = t.want_ack, t.want_dec, t.want_ev, t.want_fl
        cm, cx = c_meta, c_ctx
        with m.Switch(c_kind):
            with m.Case(Kind.RESP):
                # a response is for the requester of an RTS QP whose remote it comes from;
                # anything else is counted as 6 like a request (interface.md §4.5)
                m.d.comb += [want_dec.eq(1), dec.pass_.eq(0), dec.beats.eq(c_len_nz)]
                with m.If(c_drop | (cx.state != QpState.RTS)):
                    m.d.comb += stat_c[Counter.NO_QP].eq(1)
                with m.Else():
                    # (a READ response's payload goes to the requester's READ placement)
                    m.d.comb += [want_ack.eq(1),
                                 dec.rr.eq((cm.opcode >= 0x0D) & (cm.opcode <= 0x10)
                                           if self.read else 0)]
            with m.Case(Kind.DB):
                with m.If(c_qok & (cx.state != QpState.RESET)):
                    with m.If(cx.state == QpState.ERROR):
                        m.d.comb += want_fl.eq(1)
            with m.Case(Kind.FATAL):
                with m.If((cx.state != QpState.RESET) & (cx.state != QpState.ERROR)):
                    m.d.comb += [want_ev.eq(1), want_fl.eq(1)]
            with m.Case(Kind.PKT):
                self._stage_c_packet(m, t)

    def _stage_c_packet(self, m, t):
        """Stage C's decision for a request packet, by its checks in order of precedence:
        dropped (bad QP or state), a duplicate READ (executed again), a duplicate (ACK), ahead
        of sequence (NAK 0x60 once), then the order, access, RNR and length checks of an
        in-order packet (NAK 0x61 with the QP to ERROR, or RNR NAK), else executed."""
        (c_ctx, c_drop, c_info, c_len_nz, c_meta, c_st, dec, ent, exe, fail_61, held,
         pcls, stat_c, state_ok, want_dec, want_ev, want_exe, want_fl, want_rq) = (
            t.c_ctx, t.c_drop, t.c_info, t.c_len_nz, t.c_meta, t.c_st, t.dec, t.ent,
            t.exe, t.fail_61, t.held, t.pcls, t.stat_c,
            t.state_ok, t.want_dec, t.want_ev, t.want_exe, t.want_fl, t.want_rq)
        cm, cx, st, info = c_meta, c_ctx, c_st, c_info
        m.d.comb += [want_dec.eq(1), dec.beats.eq(c_len_nz)]
        with m.If(c_drop | ~state_ok):
            m.d.comb += stat_c[Counter.NO_QP].eq(1)
        with m.Elif(pcls.dup & info.read & ~c_len_nz):
            # a duplicate READ is executed again from its own RETH, numbered from its
            # own PSN, with the current MSN; no state changes. The execute stage answers
            # it if it still holds the READ (IRD), else it reports fatal 0x61. (One with
            # a payload, malformed, is a plain duplicate below: its beats are drained
            # here, and the execute stage must not wait for them.)
            m.d.comb += [stat_c[Counter.DUPLICATES].eq(1), want_rq.eq(1),
                         want_exe.eq(1), t.exe_dup.eq(1),
                         ent.wait_done.eq(1), ent.from_done.eq(1),
                         ent.syndrome.eq(0x1F)]
        with m.Elif(pcls.dup):
            # duplicate: ACK at the last executed PSN, always
            m.d.comb += [stat_c[Counter.DUPLICATES].eq(1), want_rq.eq(1),
                         ent.frame.eq(1), ent.syndrome.eq(0x1F),
                         ent.psn.eq(cx.epsn - 1)]
        with m.Elif(pcls.ahead):
            with m.If(~cx.nak):
                m.d.comb += [want_rq.eq(1), ent.frame.eq(1),
                             ent.syndrome.eq(0x60), ent.psn.eq(cx.epsn)]
        with m.Else():
            # in order: the order, access, RNR and length checks in that precedence, as B
            # prepared them (``x_fail``: NAK 0x61, ``x_exec``: execute, neither: RNR NAK)
            m.d.comb += [fail_61.eq(t.x_fail), held.eq(t.c_held)]
            with m.If(t.x_fail):
                pass
            with m.Elif(~t.x_exec):
                m.d.comb += [want_rq.eq(1), ent.frame.eq(1),
                             ent.syndrome.eq(0x20 | st.min_rnr)]
            with m.Else():
                # execute
                m.d.comb += [
                    want_exe.eq(1), want_rq.eq(1), dec.pass_.eq(1),
                    ent.wait_done.eq(1), ent.from_done.eq(1),
                    # (a READ is answered by its responses, not by an ACK)
                    ent.frame.eq(cm.ackreq & ~info.read),
                    ent.syndrome.eq(0x1F), ent.inc.eq(info.end),
                ]
            with m.If(fail_61):
                m.d.comb += [
                    want_ev.eq(1), want_fl.eq(1),
                    want_rq.eq(1), ent.frame.eq(1), ent.syndrome.eq(0x61),
                    ent.kill.eq(1), ent.wait_done.eq(held),
                    want_exe.eq(held), exe.status.eq(WcStatus.REM_INV_REQ_ERR),
                ]

    def _next_context(self, m, t):
        """The next dynamic context ``new``, flat: one AND per outcome, one 2:1 mux per field (the
        same decisions as :meth:`_stage_c_decide`)."""
        (c_base, c_ck, c_ctx, c_db, c_held, c_info, c_kind, c_meta, c_pre_bad, c_psn1, c_qok,
         c_xe, c_xf, c_xfw, msn_inc, new, nx_e, nx_n, off_next, pcls, resid_next,
         x_exec, x_fail, x_fatal) = (
            t.c_base, t.c_ck, t.c_ctx, t.c_db, t.c_held, t.c_info, t.c_kind, t.c_meta,
            t.c_pre_bad, t.c_psn1, t.c_qok, t.c_xe, t.c_xf, t.c_xfw, t.msn_inc, t.new, t.nx_e,
            t.nx_n, t.off_next, t.pcls, t.resid_next, t.x_exec, t.x_fail, t.x_fatal)
        cm, cx, info, ctx = c_meta, c_ctx, c_info, t.ctx
        # ---- the next dynamic context, flat (the decision → new → the table's write port) ----
        # Same decisions as the Switch of _stage_c_kinds and _stage_c_packet, written as one AND
        # per outcome and one 2:1 mux per field: ``nx_e`` if C executes, ``nx_n`` if not (both
        # from registers only), then the NAK 0x61 changes. x_exec is one LUT of registers (the
        # verdict B prepared, see _stage_b_to_c).
        ok_in = Signal()                # a request packet of a usable QP, in order
        cons_1 = Signal(16)
        m.d.comb += [
            ok_in.eq(c_base & pcls.in_order),
            x_fail.eq(pcls.in_order & (c_xf | (c_xfw & (c_pre_bad | c_ck.w_bad)))),
            x_exec.eq(c_xe & pcls.in_order & ~c_pre_bad & ~c_ck.w_bad),
            x_fatal.eq((c_kind == Kind.FATAL) & (cx.state != QpState.RESET)
                       & (cx.state != QpState.ERROR)),
            cons_1.eq(cx.rq_cons + 1),
        ]
        m.d.comb += [
            nx_e.eq(cx),
            nx_e.nak.eq(0),
            nx_e.epsn.eq(c_psn1),
            nx_e.msn.eq(msn_inc),
            nx_e.rq_cons.eq(Mux(info.end & (info.send | info.rwr), cons_1, cx.rq_cons)),
            nx_e.open.eq(c_ck.next_open),
            nx_e.off.eq(Mux(info.end, 0, off_next)),
            nx_e.resid.eq(resid_next),
            nx_n.eq(cx),
            # (a command's write: its state, and its ePSN on entry to RTR)
            nx_n.state.eq(Mux(ctx.cw_valid, ctx.cw_state,
                              Mux(x_fatal, QpState.ERROR, cx.state))),
            nx_n.epsn.eq(Mux(ctx.cw_valid & ctx.cw_rtr, ctx.cw_epsn, cx.epsn)),
            nx_n.nak.eq(Mux(ok_in, 0, Mux(c_base & pcls.ahead, 1, cx.nak))),
            nx_n.rq_prod.eq(Mux((c_kind == Kind.DB) & c_qok & (cx.state != QpState.RESET),
                                c_db, cx.rq_prod)),
        ]
        # (a command's write of 0: the sweep, SET_QP to RESET; C then executes nothing)
        # (a command's write of a row read in RESET: word 1, which the sweep leaves, cleared)
        with m.If(ctx.cw_h1clr):
            m.d.comb += [nx_n.msn.eq(0), nx_n.nak.eq(0), nx_n.va.eq(0), nx_n.rkey.eq(0)]
        with m.If(ctx.cw_clr):
            m.d.comb += nx_n.eq(0)
        m.d.comb += new.eq(Mux(x_exec, nx_e, nx_n))
        # the open WRITE's VA and rkey: its RETH's when C executes a WRITE's start (``va_ld``,
        # one LUT of registers with a select of its own), else kept (or cleared by a command)
        va_ld = Signal()
        m.d.comb += [va_ld.eq(t.c_xe_sw & pcls.in_order & ~c_pre_bad & ~c_ck.w_bad),
                     new.va.eq(Mux(va_ld, cm.reth_va, nx_n.va)),
                     new.rkey.eq(Mux(va_ld, cm.reth_rkey, nx_n.rkey))]
        with m.If(x_fail):
            m.d.comb += new.state.eq(QpState.ERROR)
        # the RQ consumer + 1: a failure that completes the held WQE (``x_fail & c_held``) or
        # an executed end of a WQE-holding message (``x_exec``, ``nx_e``); x_fail and x_exec
        # are exclusive and never meet a command's write: one select of registers (``c_cons``)
        cons_inc = Signal()
        bad = c_pre_bad | c_ck.w_bad
        m.d.comb += [cons_inc.eq(pcls.in_order & (t.c_cons.f | (bad & t.c_cons.fw)
                                                  | (~bad & t.c_cons.e))),
                     new.rq_cons.eq(Mux(cons_inc, cons_1, nx_n.rq_cons))]

    def _payload_router(self, m, t):
        """The payload router: each frame's beats to ``pay_out`` (executed), ``rr_pay`` (a READ
        response) or dropped, as its entry in ``dec_q`` says."""
        dec_q = t.dec_q
        # ---- payload router ------------------------------------------------------------------
        d = dec_q.o
        with m.If(d.valid):
            with m.If(~d.payload.beats):
                m.d.comb += d.ready.eq(1)
            with m.Else():
                m.d.comb += [
                    self.payload.ready.eq(Mux(d.payload.pass_, self.pay_out.ready,
                                              Mux(d.payload.rr, self.rr_pay.ready, 1))),
                    self.pay_out.valid.eq(self.payload.valid & d.payload.pass_),
                    self.rr_pay.valid.eq(self.payload.valid & d.payload.rr),
                    d.ready.eq(self.payload.valid & self.payload.ready
                               & self.payload.payload.last),
                ]
        m.d.comb += [self.pay_out.payload.eq(self.payload.payload),
                     self.rr_pay.payload.eq(self.payload.payload)]

    def _response_sequencer(self, m, t):
        """The response sequencer: the responses of the response queue, in order, into the pending
        table's item ``f`` (see the comments in its parts). Its parts add what the pending
        table reads."""
        # ---- response sequencer --------------------------------------------------------------
        # its parts, called in the order of their statements
        _add(t, self._seq_head(m, t))
        _add(t, self._seq_head_qpn(m, t))
        _add(t, self._seq_response(m, t))
        _add(t, self._seq_errors(m, t))

    def _seq_head(self, m, t):
        """The sequencer's head: the QPs' error bits (``errmem``, a QP's responses are
        suppressed once it is in error) and the response queue's head loaded into ``h``
        (``hv``) on ``load``, popped on ``go``. Adds the error table's ports and these."""
        entry_layout, resp_q = t.entry_layout, t.resp_q
        # The QPs' error bits (a QP's responses are suppressed once it is in error), read
        # synchronously: LUT RAM up to FLAGS_LUTRAM_MAX QPs, block RAM above.
        m.submodules.errmem = errmem = memory.Memory(
            shape=1, depth=self.num_qp, init=[],
            attrs={"no_rw_check": 1, "ram_style": flag_ram_style(self.num_qp)})
        err_rd = errmem.read_port()
        err_wr = errmem.write_port()
        # The head of the response queue is loaded into ``h``, and its QP's error bit read, in
        # the same cycle; until ``h`` leaves, a write to its QP since that read (in the read's
        # cycle included) replaces the bit read (``held_read``).
        h = Signal(entry_layout)
        hv = Signal()
        go = Signal()
        load = Signal()
        m.d.comb += [resp_q.o.ready.eq(~hv | go), load.eq(resp_q.o.valid & resp_q.o.ready)]
        with m.If(load):
            m.d.sync += [hv.eq(1), h.eq(resp_q.o.payload)]
        with m.Elif(go):
            m.d.sync += hv.eq(0)
        return types.SimpleNamespace(err_rd=err_rd, err_wr=err_wr, go=go, h=h, hv=hv, load=load)

    def _seq_head_qpn(self, m, t):
        """``hq``, the QPN of the response queue's head as it will be in the next cycle, in a
        register: from a ring of the QPNs pushed (``qring``), moved with the queue, so that
        the per-QP tables' read address does not come from the queue's LUT RAM. Adds ``hq``."""
        ab, load, resp_q = t.ab, t.load, t.resp_q
        # ``hq``: the QPN of the response queue's head, in a register (the queue's storage is
        # LUT RAM read combinationally, which must not feed the per-QP tables' read address):
        # a ring of the QPNs pushed, moved with the queue and read at the entry after its head,
        # so the register is loaded with the head as it will be in the next cycle.
        D = self.resp_depth
        m.submodules.qring = qring = memory.Memory(shape=ab, depth=D, init=[])
        qr_w = qring.write_port()
        qr_1 = qring.read_port(domain="comb")
        qr_p = Signal(range(D))
        qr_c1 = Signal(range(D), init=1 % D)     # the entry after the head
        qr_n = Signal(range(D + 1))
        hq = Signal(ab)
        q_push = Signal()
        m.d.comb += [q_push.eq(resp_q.i.valid & resp_q.i.ready),
                     qr_w.addr.eq(qr_p), qr_w.data.eq(resp_q.i.payload.qpn),
                     qr_w.en.eq(q_push), qr_1.addr.eq(qr_c1)]
        with m.If(q_push):
            m.d.sync += qr_p.eq(Mux(qr_p == D - 1, 0, qr_p + 1))
        with m.If(load):
            m.d.sync += qr_c1.eq(Mux(qr_c1 == D - 1, 0, qr_c1 + 1))
        with m.If(q_push & ~load):
            m.d.sync += qr_n.eq(qr_n + 1)
        with m.Elif(load & ~q_push):
            m.d.sync += qr_n.eq(qr_n - 1)
        # the head after this cycle: held (no load), the entry after it, or the one pushed
        # now into a queue that is (or becomes) empty
        with m.If(~load):
            with m.If(qr_n == 0):
                m.d.sync += hq.eq(resp_q.i.payload.qpn)
        with m.Elif(qr_n == 1):
            m.d.sync += hq.eq(resp_q.i.payload.qpn)
        with m.Else():
            m.d.sync += hq.eq(qr_1.data)
        return types.SimpleNamespace(hq=hq)

    def _seq_response(self, m, t):
        """The head's response: its QP's error bit (``err``, the table's read with the writes
        since forwarded), whether it is ready (``have``: its ``done`` is there if it waits for
        one), the item ``f`` for the pending table (``f_valid``: not suppressed, and a frame
        to send), the pop ``go`` and the sequencer's own write of the error bit
        (``seq_err_wr``, registered into ``sw_*``). Adds these."""
        ab, err_rd, err_wr, go, h, hq, hv, inj_valid, load = (
            t.ab, t.err_rd, t.err_wr, t.go, t.h, t.hq, t.hv, t.inj_valid, t.load)
        h_addr = Signal(ab)
        m.d.comb += [h_addr.eq(Mux(load, hq, h.qpn)),
                     err_rd.addr.eq(hq), err_rd.en.eq(load)]
        # The sequencer's own write of the error bit is registered (``sw_*``) and lands in the
        # table one cycle later; until then the read is forwarded from that register, so the
        # next entry sees the bit exactly as if it had been written at once. (The table's
        # write enable then comes from a register, not from its own read and the decision.)
        sw_valid = Signal()
        sw_addr = Signal(ab)
        err = Signal()
        late_err = None
        if self.num_qp > FLAGS_LUTRAM_MAX:
            # Block RAM: the read goes into a register with nothing in between (the RAM's
            # output register) and is seen two cycles after the head's load, a cycle after its
            # response at the earliest (the read latch holds it until the next load, which
            # comes with the response at the earliest). The response goes to the pending table
            # without the error bit, which drops it a cycle later (``late_err``, the bit as
            # ``err`` would have had it); the sequencer's write of the bit no longer waits for
            # the bit (a QP already in error is written again, with the same 1).
            er_r = Signal(reset_less=True)
            er_v = Signal()
            er_d = Signal()
            hit = Signal()
            m.d.comb += hit.eq(err_wr.en & (err_wr.addr == h_addr))
            m.d.sync += [er_r.eq(err_rd.data), er_v.eq(hit | (er_v & ~load)),
                         er_d.eq(Mux(hit, err_wr.data, er_d))]
            p_v = Signal()
            p_d = Signal()
            p_sw = Signal()
            m.d.sync += [p_v.eq(er_v), p_d.eq(er_d), p_sw.eq(sw_valid & (sw_addr == h.qpn))]
            late_err = Signal()
            m.d.comb += late_err.eq(Mux(p_v, p_d, er_r) | p_sw)
            # (``err`` stays 0 here)
        else:
            h_err = held_read(m, err_rd.data, err_wr, err_wr.en & (err_wr.addr == h_addr), load,
                              "er")
            m.d.comb += err.eq(h_err | (sw_valid & (sw_addr == h.qpn)))
        have = Signal()
        m.d.comb += have.eq(hv & (~h.wait_done | self.done.valid))
        fatal_done = Signal()
        m.d.comb += fatal_done.eq(h.from_done & self.done.payload.fatal)
        h_msn1 = Signal(24)         # the response's MSN unless a fatal ``done`` (from registers)
        m.d.comb += h_msn1.eq(h.msn + h.inc)
        f_valid = Signal()
        f = Signal(ack_item_layout(ab))         # the response, for the pending table
        m.d.comb += [
            # fatal 0x1F (refused invalidate): a positive ACK only if the packet asked for one
            f_valid.eq(~err & Mux(fatal_done,
                                  (self.done.payload.syndrome != 0)
                                  & ((self.done.payload.syndrome != 0x1F) | h.frame),
                                  h.frame)),
            f.qpn.eq(h.qpn), f.psn.eq(h.psn),
            f.syndrome.eq(Mux(fatal_done, self.done.payload.syndrome, h.syndrome)),
            f.msn.eq(Mux(fatal_done, h.msn, h_msn1)),
        ]
        # A fatal ``done`` injects its fatal operation whether or not its QP is already in
        # error (the error bit, a table read, stays off the injection's register): the QP is
        # then in ERROR, or an earlier injection that moves it there is ahead in the pipeline,
        # and the operation finds it in ERROR and does nothing.
        need_inj = Signal()
        m.d.comb += need_inj.eq(fatal_done)
        coal_ready = Signal()
        # (the error bit is kept out of ``go``, which pops the head: a fatal ``done`` waits while
        # an injection is pending whether or not its QP is already in error)
        m.d.comb += go.eq(have & (~f_valid | coal_ready) & ~(fatal_done & inj_valid))
        m.d.comb += [
            self.done.ready.eq(go & h.wait_done),
        ]
        seq_err_wr = Signal()
        m.d.comb += seq_err_wr.eq(go & ~err & (fatal_done | h.kill))
        return types.SimpleNamespace(
            coal_ready=coal_ready, f=f, f_valid=f_valid, fatal_done=fatal_done, have=have,
            need_inj=need_inj, seq_err_wr=seq_err_wr, sw_addr=sw_addr, sw_valid=sw_valid,
            late_err=late_err)

    def _seq_errors(self, m, t):
        """The faults from later stages (through ``fault_q``) and the injection of a fatal
        operation (``inj_*``: for a fatal ``done`` or a fault), and the error table's one write
        port: the sequencer's registered write first, else SET_QP's or a fault's, registered
        too (``ew_*``). Adds ``ew_valid``."""
        (ab, ctx, err_wr, fatal_done, go, h, have, inj_qpn, inj_valid, need_inj, seq_err_wr,
         sw_addr, sw_valid) = (
            t.ab, t.ctx, t.err_wr, t.fatal_done, t.go, t.h, t.have, t.inj_qpn, t.inj_valid,
            t.need_inj, t.seq_err_wr, t.sw_addr, t.sw_valid)
        # Faults enter through a two-entry queue, so the port's ``ready`` is a register: the
        # take below depends on ``go`` (the response queue's head and the coalescer), which
        # must not run through the fault merge's skid buffer into its registers as the port's
        # ready. A fault acts a cycle later than it would straight from the port; as said
        # below, that is a fault that came a cycle later.
        # (it keeps the local QPN and whether the QPN is below ``num_qp``)
        m.submodules.fault_q = fault_q = Queue(data.StructLayout({"qpn": ab, "ok": 1}), 2,
                                               buffered=False)
        m.d.comb += [fault_q.i.valid.eq(self.fault.valid), self.fault.ready.eq(fault_q.i.ready),
                     fault_q.i.payload.qpn.eq(self.fault.payload.qpn[:ab]),
                     fault_q.i.payload.ok.eq(~self.fault.payload.qpn[ab:].any())]
        flt = fault_q.o
        fq_ok = flt.payload.ok
        # The error bits written by SET_QP (and the sweep) and by a fault go through one
        # register too (the command FSM's index and strobe, and the fault handshake, stay off
        # the table's write port); the sequencer's registered write has the port first, and
        # a SET_QP/fault write waits while it writes. Neither delay is visible: SET_QP runs
        # with the pipeline drained (nothing is read for a QP for four cycles after it, and its
        # write lands after the sequencer's last one), and a fault suppresses what is still
        # queued from the moment its bit lands (as if it had come a cycle or two later; its
        # fatal operation is injected after that).
        ew_valid = Signal()
        ew_addr = Signal(ab)
        ew_data = Signal()
        fault_take = Signal()
        # A fault is not taken while the sequencer's head is a fatal ``done`` (which may inject
        # its own fatal operation this cycle): the take then depends on registers and ports
        # only, not on the error bit read and the sequencer's decision.
        m.d.comb += fault_take.eq(flt.valid & ~inj_valid & ~ew_valid & ~ctx.busy
                                  & ~(have & fatal_done))
        # (the QPN of a new injection is loaded whenever none is pending, from the source that
        # can inject: the two are exclusive, so only ``inj_valid`` waits for the decision)
        with m.If(~inj_valid):
            m.d.sync += inj_qpn.eq(Mux(fault_take, flt.payload.qpn[:ab], h.qpn))
        with m.If(go & need_inj):
            m.d.sync += inj_valid.eq(1)
        with m.If(fault_take):
            # (not while a command or the sweep owns the context: the injected operation
            # would read and write the tables through ports the command FSM holds)
            # a fault from a later stage: suppress the QP's responses, then move it to ERROR
            m.d.comb += flt.ready.eq(1)
            with m.If(fq_ok):
                m.d.sync += inj_valid.eq(1)
        m.d.sync += [sw_valid.eq(seq_err_wr), sw_addr.eq(h.qpn)]
        with m.If(sw_valid):
            m.d.comb += [err_wr.addr.eq(sw_addr), err_wr.data.eq(1), err_wr.en.eq(1)]
        with m.Else():
            m.d.comb += [err_wr.addr.eq(ew_addr), err_wr.data.eq(ew_data),
                         err_wr.en.eq(ew_valid)]
            m.d.sync += ew_valid.eq(0)
        with m.If(ctx.set_valid):
            m.d.sync += [ew_valid.eq(1), ew_addr.eq(ctx.set_qpn),
                         ew_data.eq(ctx.set_state == QpState.ERROR)]
        with m.Elif(fault_take & fq_ok):
            m.d.sync += [ew_valid.eq(1), ew_addr.eq(flt.payload.qpn[:ab]),
                         ew_data.eq(1)]
        return types.SimpleNamespace(ew_valid=ew_valid)

    def _pending_table(self, m, t):
        """The per-QP pending-response table (``acks``) fed by the sequencer, and the context's
        ``idle`` (commands run once everything is drained)."""
        (b_valid, c_valid, coal_ready, ctx, ew_valid, exe_q, f, f_valid, fl_q, go, hq, hv,
         inj_valid, load, r_valid, resp_q) = (
            t.b_valid, t.c_valid, t.coal_ready, t.ctx, t.ew_valid, t.exe_q, t.f, t.f_valid, t.fl_q,
            t.go, t.hq, t.hv, t.inj_valid, t.load, t.r_valid, t.resp_q)
        # ---- per-QP pending-response table (TX back-pressure never reaches receive) ----------
        m.submodules.acks = acks = AckTable(num_qp=self.num_qp)
        m.d.comb += [
            coal_ready.eq(1),
            acks.i.valid.eq(go & f_valid),
            acks.i.payload.eq(f),
            acks.next_qpn.eq(hq), acks.next_load.eq(load),
        ]
        if t.late_err is not None:
            m.d.comb += acks.i_drop.eq(t.late_err)

        connect(m, acks.o, wiring.flipped(self.ack_tx))

        # commands may run once everything is drained
        if t.r0 is not None:
            r_valid = t.r0.valid | r_valid | t.r2_valid | ctx.w_pend
        m.d.comb += ctx.idle.eq(~r_valid & ~b_valid & ~c_valid
                                & ~hv & ~resp_q.o.valid & (resp_q.level == 0)
                                & ~inj_valid & ~ew_valid & ~exe_q.o.valid
                                & fl_q.i.ready)
