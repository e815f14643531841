"""The requester: Send Queue doorbells, WQE fetch, Gather Path, ACKs, and the
Reliability Engine (retransmit and RNR timers, go-back-N, NAKs).

Data path, top to bottom (see ``docs/requester.md``):

1. **Send Queue ring / doorbells**: SQ_DB ``{number = QPN, value = producer}`` writes the QP's SQ
   producer index into an on-chip table (``num_qp`` × 16 bits) and queues the QPN for service;
   a doorbell for a QP in RESET (its last ``qp_set``) is dropped, so it has no effect later.
   A QP entering RTS (``qp_set``) is queued too, so doorbells recorded in INIT/RTR run in RTS.
   The completer queues a QPN as well when it must act again (retry, error, window reopened).
2. **WQE fetch**: the engine takes a QPN and reads its context (``ctx_req``/``ctx_resp``, served
   by the QP context). While the QP is in RTS and ``cons != prod``, it reads the 64-byte send WQE
   at ``sq_base + 64·(cons mod 2^log2)`` through its own host read client (``wqe_rd``). The read
   of WQE ``cons + 1`` is issued while WQE ``cons``'s packets are handed over (prefetch); its
   beats wait in the read client's buffer, and are drained unused if the engine goes elsewhere
   (another QP, a rewind) before it wants that WQE.
3. **Checks / Gather Path**: opcode > 4 or num_sge > 2 → LOC_QP_OP_ERR. Each SGE of non-zero
   length is looked up in the Key Cache (lkey, the QP's PD, access 0, [addr, addr+len)); a
   failure → LOC_PROT_ERR. Either error emits a ``cpl``; the QP must then go to ERROR, and the
   engine marks it and sends nothing more for it.
4. **Segmentation**: by path MTU into FIRST/MIDDLE/LAST/ONLY (roce-reference.md §5):
   - RETH on the first packet of a WRITE, IMMDT/IETH on the last;
   - SE on the last packet of a solicited SEND*/WRITE_WITH_IMM;
   - AckReq on LAST/ONLY and on the 66th consecutive packet without it;
   - PSNs from ``qp_set.sq_psn``, at most 128 outstanding (unacknowledged) per QP.

   A WQE can start mid-message: at packet ``psn − first_psn`` (go-back-N, or a QP that had to
   leave the engine when its window was full), with MIDDLE/LAST opcodes and no RETH.
   Each packet leaves as a descriptor (``pkt``) plus its gather chunks (``chunk``, at most one
   per SGE), for the TX frame builder.
5. **TX frame builder** (:mod:`rnic.tx.build`, outside this block): frame buffer, gather
   reads and realignment, ICRC, the MAC transmit stream.
6. **Completer** (ACK processing and the Reliability Engine): it owns each QP's oldest
   unacknowledged PSN ``una``, the SQ index of the oldest unretired WQE and the retry state. It
   takes, one at a time: ACK/NAK packets, kill requests from the engine, and the scan, which
   judges one QP per cycle and visits only those it can act on (a waiting ACK is taken after 8
   QPs judged; docs/requester.md states the scan round and the timer bound). It
   retires sent WQEs by PSN (SUCCESS ``cpl`` for the signaled ones), runs the per-QP retransmit
   and RNR timers against a microsecond clock (``us_tick``), and on a timeout or a NAK 0x60
   asks the engine to go back to ``una`` (a generation count ``rgen`` in its table, which the
   engine compares with its own). Remote NAKs and exhausted retries end the QP: the engine
   writes the error ``cpl`` for the oldest unretired WQE and flushes the rest. It never waits
   for room in the work queue: a wake-up that finds none is kept as owed in its table and
   made by the QP's next event or scan visit (doorbells never take the queue's last entry).

Replay Buffer: there is none on chip. Retransmission re-reads the WQE from the SQ ring and the
payload from host memory (the ring slot and buffers stay owned by the hardware until the WQE's
completion); the in-flight ring, shared by every QP (one list per QP from ``rh`` to ``rn``),
keeps only what retirement needs.

The engine serves one QP until its SQ is empty, its window is full, or it has to wait for the
completer; it then writes the QP back ("parked") and takes the next QPN. Round-robin: when other
QPNs wait in the work queue, the engine re-queues its QP after each WQE sent (one WQE per turn)
and takes the next one.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..formats import SEND_MAX_SGE, SendWqe
from ..host.axi_master import ReadClientSignature
from ..ifaces import (READ_SLOT_BITS, AckKind, QpnStream, ack_layout, read_dec_layout,
                      read_rec_layout)
from ..keys.key_cache import LookupSignature
from ..opcodes import WcStatus
from ..resp.qp_context import QpState
from ..stream import BeatStream, Queue, check_width
from .retry import RNR_US, TIMEOUT_US, TIMER_BITS, rom
from ..tx.build import chunk_layout, pkt_layout
from ..parts import add as _add, one_hot

__all__ = ["Requester", "req_ctx_layout", "qp_set_layout", "ack_layout", "cpl_layout",
           "doorbell_layout", "MAX_NOACK", "INFLIGHT", "MAX_OUTSTANDING"]

MAX_NOACK = 64      # rxe RXE_MAX_PKT_PER_ACK

#: SQ_DB as the control plane emits it (rnic.control.control_plane.doorbell_layout).
doorbell_layout = data.StructLayout({"value": 16, "number": 16})

#: A SET_QP that was written: the QPN, its new state (QpContext set_valid/set_qpn/set_state)
#: and ARG3's send PSN (used on entry to RTS).
qp_set_layout = data.StructLayout({"qpn": 24, "state": 3, "sq_psn": 24})


#: What the requester needs of a QP's context (static fields, by their ``qp_static_layout``
#: names and widths, and the state).
req_ctx_layout = data.StructLayout({
    "state": 3,
    "pmtu": 3,          # 1=256 … 5=4096
    "pd": 16,
    "sq_base": 64,      # 64-byte aligned
    "sq_log": 5,
    "timeout": 5,       # retransmit timer 4.096 µs · 2^timeout, 0 = none
    "retry_cnt": 3,     # retries after a timeout or NAK 0x60 (7 = seven)
    "rnr_retry": 3,     # retries after an RNR NAK (7 = forever)
    "ord": 4,           # RDMA READs outstanding at most (0 means 1, above 8 means 8)
})

#: A send completion (interface.md §5.4): SUCCESS for a signaled WQE retired by an ACK, or an
#: error (only wr_id, QPN, status and opcode valid). ``fault`` = a host read of the WQE failed
#: (event 4; status then 0).
cpl_layout = data.StructLayout({
    "qpn": 24,
    "wr_id": 64,
    "status": 8,
    "opcode": 8,        # 0 SEND, 1 RDMA_WRITE, 2 RDMA_READ
    "flags": 8,         # 0x02 WITH_IMM
    "byte_len": 32,
    "fault": 1,
})

#: Per QP, owned by the engine.
_dyn_layout = data.StructLayout({
    "cons": 16,         # SQ index of the next WQE to send
    "hcons": 16,        # one past the newest WQE ever recorded in the in-flight ring
    "psn": 24,          # next PSN to send
    "hpsn": 24,         # one past the newest PSN ever sent (older ones are retransmissions)
    "fpsn": 24,         # first PSN of the WQE at ``cons`` when ``part``
    "part": 1,          # the WQE at ``cons`` starts at packet psn − fpsn
    "noack": 7,         # consecutive packets sent without AckReq
    "err": 1,           # the QP is in error here: flush everything
    "parked": 1,        # the engine left the QP waiting (window, ACKs): wake it on progress
    "rgen": 4,          # the completer's rewind generation last acted on
    "rds": 4,           # READ WQEs recorded in the ring (mod 16): rds − crds are outstanding
})

#: Per QP, owned by the completer: the oldest unacknowledged PSN, the oldest unretired WQE (SQ
#: index and first PSN), and the Reliability Engine's state.
_comp_layout = data.StructLayout({
    "una": 24,
    "ccons": 16,
    "cfpsn": 24,        # first PSN of the WQE at ``ccons``
    "rgen": 4,          # bumped to make the engine go back to (ccons, una)
    "rerr": 3,          # 0: the QP is live; else it ended (remote NAK, retries exhausted,
                        # killed: no more ACKs), with the status for the WQE at ``ccons``
                        # in ``_rcode``'s code
    "hold": 1,          # waiting for the RNR timer: the engine sends nothing
    "armed": 1,         # the timer runs (deadline ``dl``)
    "dl": TIMER_BITS,
    "rused": 3,         # retries used since the last progress (timeout, NAK 0x60)
    "nused": 3,         # RNR retries used since the last progress
    "rnrw": 1,          # an RNR NAK with PSNs sent behind it: its NAK 0x60 may follow
    "crds": 4,          # READ WQEs retired (mod 16)
    "gapr": 1,          # a READ response gap at una already made the engine go back
    "wk": 1,            # a wake-up owed: the work queue had no room for it (a visit queues it)
})


def _rcode(status):
    """``rerr``'s 3-bit code of a status that ends a QP: status − 8 for 9..13 (the remote NAKs,
    RETRY_EXC_ERR, RNR_RETRY_EXC_ERR), 7 for WR_FLUSH_ERR; 0 is a live QP."""
    status = WcStatus(status)
    if status == WcStatus.WR_FLUSH_ERR:
        return 7
    if not 9 <= status <= 13:
        raise ValueError(f"no code for {status!r}")
    return status - 8


def _rstatus(code):
    """The status of a non-zero ``rerr`` code (the inverse of ``_rcode``)."""
    return Mux(code == 7, int(WcStatus.WR_FLUSH_ERR), Cat(code, Const(1, 1)))


def _sub_layout(layout, names):
    """The fields ``names`` of the struct ``layout``, in that order."""
    return data.StructLayout({n: layout[n].shape for n in names})


def _pick(layout, row):
    """The fields of ``layout`` taken by name from ``row`` (a view of a wider struct), as a
    value of ``layout``."""
    return Cat(*(row[name] for name, _ in layout))


# ``dyn`` (with ``cfg`` and ``rn`` beside it, in lanes of their own: see Requester._copy) and
# ``comp`` (with ``rh``) are each held once, in one block RAM table whose read port the
# completer uses, but while the engine loads a QP (CTX, CTX_WAIT), when it is the engine's.
# The engine takes ``_dyn_engine_layout`` (not ``parked``, which it clears when it takes the
# QP) into its own registers and writes it back; of ``comp`` it keeps what it rewinds to and
# waits on (``_comp_engine_layout``), following the table's writes to its QP
# (Requester._engine_comp_view). The completer judges and retires by ``_dyn_comp_layout``.
_dyn_engine_layout = _sub_layout(_dyn_layout, ["cons", "hcons", "psn", "hpsn", "fpsn", "part",
                                               "noack", "err", "rgen", "rds"])
_dyn_comp_layout = _sub_layout(_dyn_layout, ["psn", "hcons", "err", "parked"])
_comp_engine_layout = _sub_layout(_comp_layout, ["una", "ccons", "cfpsn", "rgen", "rerr",
                                                 "hold", "crds"])

#: Per QP, written by the engine from the context, read by the completer (which looks the
#: timeout up in µs; a timeout of 0, as in the entry of a QP the engine never served, is no
#: timer).
_cfg_layout = data.StructLayout({"timeout": 5, "retry_cnt": 3, "rnr_retry": 3})

#: The lane of the per-QP tables' write enables: a DP16KD's byte (9 bits at 512×36), so that
#: parts of a row written apart share one block RAM row.
_LANE = 9


class _TableWrite:
    """The write of a per-QP table held in several copies: ``addr``, ``en`` and the whole row
    ``data`` (a view of the table's layout). A value kept in lanes of another table's rows has
    one too, whose ``addr`` is unused (the rows are written at that table's address)."""

    def __init__(self, layout, abits, name):
        self.addr = Signal(abits, name=f"{name}_addr")
        self.en = Signal(name=f"{name}_en")
        self.data = Signal(layout, name=f"{name}_data")



def _inflight_layout(rb, sb):
    """One sent WQE waiting for its ACK: a ring entry, linked to the QP's next one by ``next``
    (``rb`` = ring index bits); a READ's holds its READ slot (``sb`` bits)."""
    return data.StructLayout({
        "wr_id": 64,
        "end_psn": 24,      # one past its last PSN
        "signaled": 1,
        "write": 1,
        "imm": 1,
        "read": 1,
        "ridx": sb,
        "byte_len": 32,
        "next": rb,
    })

#: WQEs sent and not yet retired, per QP; PSNs outstanding per QP.
INFLIGHT = 16
MAX_OUTSTANDING = 128


_RTS = QpState.RTS
_RESET = QpState.RESET
_ERROR = QpState.ERROR

# (first, middle, last, only) RC opcodes per WQE opcode 0..5 (a READ is one request packet)
_OPS = [(0x00, 0x01, 0x02, 0x04), (0x00, 0x01, 0x03, 0x05), (0x00, 0x01, 0x16, 0x17),
        (0x06, 0x07, 0x08, 0x0A), (0x06, 0x07, 0x09, 0x0B), (0x0C, 0x0C, 0x0C, 0x0C)]
_WOP_READ = 5

# completer events and NAK actions
_EV_ACK, _EV_SCAN, _EV_KILL = 0, 1, 2
_ACT_NONE, _ACT_SEQ, _ACT_RNR, _ACT_ERR, _ACT_SCAN, _ACT_KILL, _ACT_DROP, _ACT_DEC = range(8)
#: QPs the scan judges per turn when an ACK or a kill waits: a turn (4 cycles to fill the read
#: pipeline, then one QP per cycle) costs what one ACK's processing does, so a stream of ACKs
#: still leaves the scan half of the completer.
SCAN_QUOTA = 8


class Requester(wiring.Component):
    """Send Queue doorbells, WQE fetch, gather chunks, request descriptors, ACK retirement, retry.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    num_qp : int
        Number of QPs (power of two, 4..4096).
    work_depth : int
        Entries of the queue of QPNs waiting for service (doorbells are back-pressured when it
        is full).
    ring_depth : int or None
        Entries of the in-flight ring shared by every QP (power of two, > ``num_qp``): each QP
        holds one entry for its next WQE, the other ``ring_depth − num_qp`` are the WQEs sent
        and not yet retired, over all QPs. Default: the power of two ≥ ``num_qp + 256``.
    read_slots : int
        READ slots shared by every QP (a power of two, 2..64): each READ sent and not yet
        retired holds one (its destination, for :class:`~rnic.req.read_place.ReadPlace`); a
        new READ waits for a free one, as for ORD.
    read : bool
        RDMA READ (default True). False: a WQE of opcode 5 is a bad opcode (LOC_QP_OP_ERR,
        completion opcode 0 as for any bad opcode), and every ``ack`` event is taken as WIRE.

    Attributes
    ----------
    sq_db : In(stream.Signature(doorbell_layout))
        SQ_DB writes: ``number`` = QPN, ``value`` = SQ producer index; a QPN ≥ ``num_qp``, or
        a QP in RESET (interface.md §4.3), is taken and ignored.
    qp_set : In(stream.Signature(qp_set_layout))
        Every SET_QP that was written. RESET clears the QP's SQ indices; RTS loads the send PSN
        (``sq_psn``) and queues the QP (doorbells recorded in INIT/RTR then run).
    ctx_req : Out(QpnStream())
        QPN whose context the engine needs; exactly one ``ctx_resp`` answers each, in order.
    ctx_resp : In(stream.Signature(req_ctx_layout))
    lookup : In(LookupSignature())
        Key Cache lookup client (``req`` out, ``resp`` in).
    wqe_rd : Out(ReadClientSignature(W))
        Host read client for WQEs (64 bytes, tag 0).
    pkt : Out(stream.Signature(pkt_layout))
        Request packet descriptors (to the TX arbiter; ``aeth``, ``syndrome`` and ``msn`` 0).
    chunk : Out(stream.Signature(chunk_layout))
        Each packet's gather chunks, in payload order, after its descriptor (to the TX frame
        builder, which reads them from host memory).
    ack : In(stream.Signature(ack_layout))
        Events of our QPs, in order (``kind``, :class:`~rnic.ifaces.AckKind`): received
        ACKNOWLEDGE packets (WIRE), READ responses placed (PLACED: a positive ACK of its PSN)
        and READ responses to judge (DECIDE, answered on ``read_dec``). A positive ACK (syndrome
        bits 6:5 = 0) acknowledges every PSN up to its own and retires the WQEs whose last PSN it
        covers (coalesced ACKs retire several). A NAK at PSN p acknowledges every PSN before p; then
        0x60 goes back to p, an RNR NAK (0x20–0x3F) waits its timer and goes back to p, any other
        NAK ends the QP (0x61 REM_INV_REQ_ERR, 0x62 REM_ACCESS_ERR, else REM_OP_ERR). A NAK for a
        PSN before ``una`` is stale and ignored. Neither moves ``una`` past the first READ response
        not yet placed (interface.md §7): an ACK or NAK beyond it stops there and, once per ``una``,
        makes the engine go back (a gap, counted as a retry).
        DECIDE at PSN p acknowledges every PSN before p likewise (IBA implicit ACK) and is
        answered ``ok`` when the oldest unretired WQE is then a READ whose first response not
        yet placed is p.
    read_dec : Out(stream.Signature(read_dec_layout))
        One answer per DECIDE, in order: ``ok`` and the READ's slot, and the QP's ``una`` as
        the answer leaves it (``una_v`` 0 when a SET_QP met it) with ``gap`` (refused after a
        gap at ``una``): READ Place refuses the responses before ``una`` (and, after a gap,
        those after it until the one at ``una`` is placed) without asking again.
    read_rec : Out(stream.Signature(read_rec_layout, always_ready=True))
        A READ's slot, written when the READ is first sent (its QPN, PSNs, PMTU, length and the
        bus addresses its SGEs translate to).
    cpl : Out(stream.Signature(cpl_layout))
        Send completions in SQ order: SUCCESS for each retired signaled WQE; an error
        (LOC_QP_OP_ERR, LOC_PROT_ERR, a WQE-fetch host fault with ``fault``, REM_INV_REQ_ERR,
        REM_ACCESS_ERR, REM_OP_ERR, RETRY_EXC_ERR, RNR_RETRY_EXC_ERR) once every earlier WQE is
        retired, after which the QP must be moved to ERROR (event 3, or 4 with ``fault``); then
        WR_FLUSH_ERR for every later posted WQE, sent or not. A QP that SET_QP moved to ERROR
        gets WR_FLUSH_ERR for every unretired WQE.
    us_tick : In(1)
        One-cycle strobe every microsecond (from US_CYCLES): the timers' time base.
    retx : Out(1)
        One-cycle strobe per retransmitted packet (a PSN sent before; counter 13).
    busy : Out(1)
        The engine is serving a QP.
    prog_psn : Out(stream.Signature({qpn 24, psn 24}, always_ready=True))
        Every write of a QP's next send PSN (for QUERY_QP).
    prog_cons : Out(stream.Signature({qpn 24, cons 16}, always_ready=True))
        Every write of a QP's SQ consumer index: the oldest WQE not yet retired (QUERY_QP).
    """

    def __init__(self, *, width=64, num_qp=256, work_depth=16, ring_depth=None, read_slots=16,
                 read=True):
        self.read = read
        check_width(width)
        if num_qp & (num_qp - 1) or not 4 <= num_qp <= 4096:
            raise ValueError(f"num_qp must be a power of two in 4..4096, not {num_qp!r}")
        if work_depth < 2:
            raise ValueError(f"work_depth must be at least 2, not {work_depth!r}")
        if ring_depth is None:
            ring_depth = 1 << (num_qp + 256 - 1).bit_length()
        if ring_depth & (ring_depth - 1) or ring_depth <= num_qp:
            # one entry per QP is its next WQE's; at least one more to send anything
            raise ValueError(f"ring_depth must be a power of two above num_qp, "
                             f"not {ring_depth!r}")
        if read_slots & (read_slots - 1) or not 2 <= read_slots <= 1 << READ_SLOT_BITS:
            raise ValueError(f"read_slots must be a power of two in 2..{1 << READ_SLOT_BITS}, "
                             f"not {read_slots!r}")
        self.read_slots = read_slots
        self.width, self.num_qp, self.work_depth = width, num_qp, work_depth
        self.ring_depth = ring_depth
        self.abits = (num_qp - 1).bit_length()
        super().__init__({
            "sq_db": In(stream.Signature(doorbell_layout)),
            "qp_set": In(stream.Signature(qp_set_layout)),
            "ctx_req": Out(QpnStream()),
            "ctx_resp": In(stream.Signature(req_ctx_layout)),
            "lookup": In(LookupSignature()),
            "wqe_rd": Out(ReadClientSignature(width)),
            "pkt": Out(stream.Signature(pkt_layout)),
            "chunk": Out(stream.Signature(chunk_layout)),
            "ack": In(stream.Signature(ack_layout)),
            "read_dec": Out(stream.Signature(read_dec_layout)),
            "read_rec": Out(stream.Signature(read_rec_layout, always_ready=True)),
            "cpl": Out(stream.Signature(cpl_layout)),
            "us_tick": In(1),
            "retx": Out(1),
            "busy": Out(1),
            "prog_psn": Out(stream.Signature(data.StructLayout({"qpn": 24, "psn": 24}),
                                             always_ready=True)),
            "prog_cons": Out(stream.Signature(data.StructLayout({"qpn": 24, "cons": 16}),
                                              always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        W, nb, ab = self.width, self.width // 8, self.abits
        D = self.ring_depth
        rb = (D - 1).bit_length()
        TB = TIMER_BITS
        R = self.read_slots
        sb = (R - 1).bit_length()
        ring_layout = _inflight_layout(rb, sb)
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(W=W, nb=nb, ab=ab, D=D, rb=rb, TB=TB, ring_layout=ring_layout,
                                  R=R, sb=sb)
        _add(t, self._cpl_merge(m, t))

        # the microsecond clock
        now = Signal(TB)
        with m.If(self.us_tick):
            m.d.sync += now.eq(now + 1)
        t.now = now

        _add(t, self._tables(m, t))
        _add(t, self._table_copies(m, t))
        _add(t, self._ring_ports(m, t))
        _add(t, self._read_slots(m, t))
        _add(t, self._scheduler(m, t))
        _add(t, self._work_push(m, t))
        self._set_writes(m, t)
        _add(t, self._engine_reads(m, t))
        _add(t, self._engine_state(m, t))
        _add(t, self._engine_wqe_store(m, t))
        _add(t, self._engine_flags(m, t))
        _add(t, self._engine_packet(m, t))
        _add(t, self._engine_inflight(m, t))
        _add(t, self._engine_requests(m, t))
        _add(t, self._engine(m, t))
        _add(t, self._completer(m, t))
        _add(t, self._completer_judge(m, t))
        _add(t, self._completer_fsm(m, t))
        self._engine_comp_view(m, t)
        eng_fsm, cmp_fsm, dyn_wp, comp_wp = t.eng_fsm, t.cmp_fsm, t.dyn_wp, t.comp_wp
        one_hot(eng_fsm, cmp_fsm)
        # progress for QUERY_QP: every write of the next send PSN and of the SQ index of the
        # oldest WQE not yet retired (the SQ consumer index software may reuse up to)
        m.d.comb += [
            self.prog_psn.valid.eq(dyn_wp.en), self.prog_psn.payload.qpn.eq(dyn_wp.addr),
            self.prog_psn.payload.psn.eq(dyn_wp.data.psn),
            self.prog_cons.valid.eq(comp_wp.en), self.prog_cons.payload.qpn.eq(comp_wp.addr),
            self.prog_cons.payload.cons.eq(comp_wp.data.ccons),
        ]
        return m

    def _cpl_merge(self, m, t):
        """The ``cpl`` register and its two sources, the engine's completions (``ecpl``) and the
        completer's (``ccpl``): the completer's first, while it is in TEST (``c_test``, which it
        drives). Adds ``ecpl``, ``ccpl`` and ``c_test``."""
        # The completions of the engine and of the completer go straight into ``cpl``'s
        # register, which takes one only when empty (the FSMs offer one every four cycles at
        # most), so neither ready depends on ``cpl.ready`` or on the other FSM's valid: only on
        # cpl's register and the completer's state. The register loads exactly on a transfer.
        # The completer offers one only in TEST and is served first (the engine's ready is
        # cleared while the completer is in TEST). Its SUCCESS completions always precede, for
        # the same QP, any error or flush completion of the engine: it hands them over in TEST,
        # before its table write, which the engine waits for.
        ecpl = stream.Signature(cpl_layout).create(path=("ecpl",))
        ccpl = stream.Signature(cpl_layout).create(path=("ccpl",))
        c_test = Signal()               # the completer is in TEST (may offer a completion)
        m.d.comb += [ccpl.ready.eq(~self.cpl.valid), ecpl.ready.eq(~self.cpl.valid & ~c_test)]
        with m.If(self.cpl.ready):
            m.d.sync += self.cpl.valid.eq(0)
        with m.If(~self.cpl.valid):
            m.d.sync += [self.cpl.valid.eq(ccpl.valid | (ecpl.valid & ~c_test)),
                         self.cpl.payload.eq(Mux(c_test, ccpl.payload, ecpl.payload))]
        return types.SimpleNamespace(ecpl=ecpl, ccpl=ccpl, c_test=c_test)

    def _tables(self, m, t):
        """The per-QP tables and the in-flight ring: the SQ producer index (``prod_mem``), the
        ring (``ring_mem``), the ring's free list (``free``), and the one write of each of
        ``dyn``, ``comp`` and the lanes beside their rows (``rn``, ``cfg``, ``rh``) that every
        copy of them takes (:meth:`_table_copies`).
        Adds the memories, the free list, ``prod``'s ports and the writes (``*_wp``); the other
        parts drive the addresses, enables and rows."""
        D, ab, rb, ring_layout = t.D, t.ab, t.rb, t.ring_layout
        # ---- per-QP tables ----------------------------------------------------------------
        # (no_rw_check: prod does not take a read that met a write to its row, see p_hit)
        m.submodules.prod_mem = prod_mem = Memory(shape=16, depth=self.num_qp, init=[],
                                                  attrs={"no_rw_check": 1})
        # The in-flight ring (docs/requester.md, "In-flight ring"): entries shared by every QP,
        # each QP's unretired WQEs a list in SQ order from ``rh`` (the completer's table) to
        # ``rn`` (the engine's), ``rn`` being the entry the QP's next new WQE is written to and
        # each entry holding the index of the one after it. The engine takes a free entry for
        # ``rn`` whenever it fills the old one; the completer frees an entry when it retires
        # its WQE, or drops it when the QP has ended or was reset (the list is then longer than
        # ``hcons − ccons``). Free entries: never used ones from ``fresh`` up, then ``free``.
        m.submodules.ring_mem = ring_mem = Memory(shape=ring_layout, depth=D, init=[],
                                                  attrs={"no_rw_check": 1})
        m.submodules.free = free = Queue(rb, D - self.num_qp)
        prod_wp = prod_mem.write_port()
        prod_rp = prod_mem.read_port()
        # dyn and comp: one write (address, enable, row) each, into one copy per reader. Beside
        # dyn's row, in lanes of their own with their own enables and dyn's address: the
        # engine's ``rn`` (in both copies) and the completer's timer settings ``cfg`` (in the
        # completer's copy); beside comp's row, in the completer's copy, ``rh``.
        dyn_wp = _TableWrite(_dyn_layout, ab, "dyn_w")
        comp_wp = _TableWrite(_comp_layout, ab, "comp_w")
        rn_wp = _TableWrite(rb, ab, "rn_w")         # (addr: dyn_wp.addr)
        cfg_wp = _TableWrite(_cfg_layout, ab, "cfg_w")   # (addr: dyn_wp.addr)
        rh_wp = _TableWrite(rb, ab, "rh_w")         # (the completer's copy: comp_wp.addr)
        return types.SimpleNamespace(
            ring_mem=ring_mem, free=free, prod_wp=prod_wp, prod_rp=prod_rp,
            dyn_wp=dyn_wp, comp_wp=comp_wp, rn_wp=rn_wp, cfg_wp=cfg_wp, rh_wp=rh_wp)

    def _copy(self, m, name, table, parts, attrs=None):
        """A block RAM copy of ``table``'s family, written at ``table.addr``: ``parts``
        [(layout, write)] each in whole 9-bit lanes (``_LANE``) with the write's enable,
        the fields of ``layout`` taken from the write's row. Returns the read port and each
        part's fields in its data. One copy per reader keeps every block RAM at one read
        port."""
        widths = [data.Layout.cast(lay).size if isinstance(lay, data.Layout) else lay
                  for lay, _ in parts]
        nl = [-(-w // _LANE) for w in widths]
        m.submodules[name] = mem = Memory(shape=_LANE * sum(nl), depth=self.num_qp,
                                          init=[], attrs=attrs or {})
        wp = mem.write_port(granularity=_LANE)
        m.d.comb += wp.addr.eq(table.addr)
        rp = mem.read_port(transparent_for=())
        lane, outs = 0, []
        for (lay, w_), w, n in zip(parts, widths, nl):
            val = (_pick(lay, w_.data) if isinstance(lay, data.Layout)
                   else w_.data)
            m.d.comb += [wp.data[_LANE * lane:_LANE * lane + w].eq(val),
                         wp.en[lane:lane + n].eq(w_.en.replicate(n))]
            rd = rp.data[_LANE * lane:_LANE * lane + w]
            outs.append(data.View(lay, rd) if isinstance(lay, data.Layout) else rd)
            lane += n
        return rp, outs

    def _table_copies(self, m, t):
        """The block RAM tables of ``dyn`` and ``comp`` (:meth:`_copy`): ``dyn_mem`` (with
        ``cfg`` and ``rn``) and ``comp_mem`` (with ``rh``), one read port each, which the
        completer shares with the engine (``e_steal``, :meth:`_engine_comp_view`). Adds the
        read ports and the fields in their data."""
        rb, dyn_wp, comp_wp, rn_wp, cfg_wp, rh_wp = (t.rb, t.dyn_wp, t.comp_wp, t.rn_wp,
                                                     t.cfg_wp, t.rh_wp)
        # Every copy is read without transparency: a write shows in the read a cycle later
        # (the engine's uses are a cycle older than the reads anyway, see dyn_rd and cs; the
        # completer's scan and visits drop a write-back after a SET_QP in the read's cycle, see
        # s1st and stale), and the register after the read port stays a flip-flop in the
        # fabric (synthesis folds it into the block RAM behind a transparent port, whose
        # clock-to-out then leads the logic it feeds).
        # (no_rw_check: the word of a read that meets a write to its row is not used. The
        # engine's CTX_WAIT waits for a read of dyn_mem after any such write (e_hit1), and cs
        # does not take a read of comp_mem that met one (ce_hit); the completer reads its
        # copies again after one (c_hit1: its scan re-reads the QP, LOAD and WALK their read).)
        nrw = {"no_rw_check": 1}
        dyn_rp, (dyn_rd_w, cfg_rd_w, rn_rd_w) = self._copy(
            m, "dyn_mem", dyn_wp, [(_dyn_layout, dyn_wp), (_cfg_layout, cfg_wp), (rb, rn_wp)],
            nrw)
        comp_rp2, (comp_rd2_w, rh_rd_w) = self._copy(
            m, "comp_mem", comp_wp, [(_comp_layout, comp_wp), (rb, rh_wp)], nrw)
        return types.SimpleNamespace(
            dyn_rp=dyn_rp, dyn_rd_w=dyn_rd_w, rn_rd_w=rn_rd_w,
            dyn_rd2_w=dyn_rd_w, cfg_rd_w=cfg_rd_w, rn_rd2_w=rn_rd_w, comp_rp2=comp_rp2,
            comp_rd2_w=comp_rd2_w, rh_rd_w=rh_rd_w)

    def _ring_ports(self, m, t):
        """The in-flight ring's ports, the ring's never-used entries from ``fresh`` up, and the
        sweep after reset that makes each QP's list empty (``rn`` = ``rh`` = entry q, one QP
        per cycle, the engine and the completer waiting for it: ``sweeping``). Adds the ports,
        ``fresh`` and the sweep's ``sweeping``, ``sw_i``, ``sw_en``."""
        D, ab, ring_mem, rn_wp, rh_wp = t.D, t.ab, t.ring_mem, t.rn_wp, t.rh_wp
        # (no_rw_check: the completer reads an entry a cycle after it read the engine's rn and
        # hcons, so an entry written in the cycle of its read is one those did not yet show as
        # filled, and its word is not used)
        infl_wp = ring_mem.write_port()
        infl_rp = ring_mem.read_port()
        fresh = Signal(range(D + 1), init=self.num_qp)
        # after rst, each QP q's rn = rh = entry q (an empty list), one QP per cycle; the engine
        # and the completer start after it
        # (rn and rh share their rows with dyn and comp: a SET_QP's write, at its own address,
        # pauses the sweep for that cycle)
        sweeping = Signal(init=1)
        sw_i = Signal(ab)
        sw_en = Signal()
        with m.If(sw_en):
            m.d.comb += [rn_wp.data.eq(sw_i), rn_wp.en.eq(1), rh_wp.data.eq(sw_i),
                         rh_wp.en.eq(1)]
            m.d.sync += sw_i.eq(sw_i + 1)
            with m.If(sw_i == self.num_qp - 1):
                m.d.sync += sweeping.eq(0)
        return types.SimpleNamespace(infl_wp=infl_wp, infl_rp=infl_rp,
                                     fresh=fresh, sweeping=sweeping, sw_i=sw_i, sw_en=sw_en)

    def _read_slots(self, m, t):
        """The READ slots' free list (never used ones from ``rfresh`` up, then ``rfree``: the
        engine takes one when it first sends a READ, the completer gives it back when it retires
        or drops the READ's ring entry), and the engine's READ registers: ``is_rd`` (the WQE is a
        READ), the request's VA and PSN count less one (``rd_va``, ``rd_l``, set in
        RD_PREP/RD_PREP2),
        the slot it takes (``new_ri``, registered off the free list, and ``e_ri`` as taken)."""
        R, sb = t.R, t.sb
        m.submodules.rfree = rfree = Queue(sb, R)
        rfresh = Signal(range(R + 1))
        new_ri = Signal(sb)
        m.d.sync += new_ri.eq(Mux(rfresh != R, rfresh, rfree.o.payload))
        rslot_ok = Signal()             # a slot is free (registered)
        m.d.sync += rslot_ok.eq((rfresh != R) | rfree.o.valid)
        # the slot a READ took off the free list leaves it a cycle after the request's
        # transfer (``rf_pop``, registered), so the free list's pointers and level are not at
        # the end of the TX handshake's cone (the rewind, the window, the arbiter's ready).
        # Nothing reads the list in between: ``new_ri`` and ``rslot_ok`` are next read in
        # VALIDATE, at least five cycles after the transfer (CHUNK, WB_NEXT, CHECK_WAIT, CHECK
        # come first), and see the next slot from three cycles after it.
        rf_pop = Signal()
        m.d.sync += rf_pop.eq(0)
        m.d.comb += rfree.o.ready.eq(rf_pop)
        return types.SimpleNamespace(
            rfree=rfree, rfresh=rfresh, new_ri=new_ri, rslot_ok=rslot_ok, rf_pop=rf_pop,
            is_rd=Signal(name="is_rd"), op_rd_r=Signal(name="op_rd_r"),
            lk_out=Signal(name="lk_out"), lk_drop=Signal(name="lk_drop"),
            rd_va=Signal(64, name="rd_va"),
            rd_l=Signal(24, name="rd_l"),
            e_ri=Signal(sb, name="e_ri"))

    def _scheduler(self, m, t):
        """The work queue of QPNs for the engine and the readies of what feeds it, in this
        order: SET_QP (which also rewrites ``dyn`` and ``comp``, and clears ``prod`` on RESET),
        the completer's wake-ups, the engine's yields, SQ doorbells (``prod``; dropped for a QP
        in RESET, see ``live_mem``). The readies depend on registers only: the state flags the
        FSMs set (``e_*_st``, ``c_*_st``). What enters the queue is :meth:`_work_push`, the
        table writes :meth:`_set_writes`. Adds the work queue, ``live_mem``'s ports, the
        engine's and the completer's QP (``qpn``, ``aq``), the write-backs' strobes and rows,
        the SET_QP's QPN and state compares, and the state flags."""
        ab = t.ab
        m.submodules.work = work = Queue(ab, self.work_depth, buffered=False)

        # SQ_DB of a QP in RESET is ignored (interface.md §4.3): one bit per QP, "not in
        # RESET", written by every qp_set (the reset sweep after rst included). The doorbell
        # offered on ``sq_db`` is read here first and taken a cycle later at the earliest;
        # ``db_rd`` says the read data belong to it (its payload stays while it waits, and no
        # qp_set wrote the table in the read's cycle).
        m.submodules.live_mem = live_mem = Memory(shape=1, depth=self.num_qp, init=[])
        live_wp = live_mem.write_port()
        live_rp = live_mem.read_port()
        db_rd = Signal()
        m.d.comb += live_rp.addr.eq(self.sq_db.payload.number[:ab])
        m.d.sync += db_rd.eq(self.sq_db.valid & ~self.sq_db.ready & ~live_wp.en)

        # qp_set first, then the completer's wake-ups, then doorbells; the engine's and the
        # completer's write-backs win.
        eng_wb = Signal()
        eng_dyn = Signal(_dyn_layout)
        cmp_wb = Signal()
        cmp_new = Signal(_comp_layout)
        wake_v = Signal()
        yield_v = Signal()              # the engine re-queues its QP (round-robin)
        qpn = Signal(ab)                # the engine's QP
        aq = Signal(ab)                 # the completer's QP
        sp = self.qp_set.payload
        set_q = sp.qpn[:ab]
        set_rts = sp.state == _RTS
        set_reset = sp.state == _RESET
        set_hit = Signal()              # a SET_QP rewrites a QP's tables this cycle
        # The readies depend on registers only (and sq_db's on qp_set.valid): e_wb_st and
        # c_wb_st say the engine or the completer is in a state that may write its table back
        # (YIELD included: its write-back depends on the work queue), e_yield_st and c_wake_st
        # that it is in YIELD or WAKE, each set with the transition into the state.
        e_wb_st = Signal()
        e_yield_st = Signal()
        e_park_st = Signal()            # (the engine is in PARK, in WB_NEXT: set likewise)
        e_wbn_st = Signal()
        e_cw_st = Signal()              # (the engine is in CHECK_WAIT, writing cfg: likewise)
        c_wb_st = Signal()
        c_wb_st_r = Signal()            # (c_wb_st a cycle later)
        c_wake_st = Signal()
        m.d.comb += [yield_v.eq(e_yield_st), wake_v.eq(c_wake_st & ~self.qp_set.valid),
                     eng_wb.eq(e_wb_st & (~e_yield_st | (work.i.ready & ~wake_v)))]
        m.d.comb += self.qp_set.ready.eq(~e_wb_st & ~e_cw_st & ~c_wb_st & work.i.ready)
        # (a doorbell never takes the queue's last entry: it is left to the completer's
        # wake-ups, which would otherwise wait behind a stream of doorbells, see WAKE)
        m.d.comb += self.sq_db.ready.eq(db_rd & ~self.qp_set.valid & ~c_wake_st & ~e_yield_st
                                        & self._db_room(m, work))
        return types.SimpleNamespace(
            work=work, eng_wb=eng_wb, eng_dyn=eng_dyn, cmp_wb=cmp_wb, cmp_new=cmp_new,
            wake_v=wake_v, qpn=qpn, aq=aq, set_q=set_q, set_hit=set_hit, e_wb_st=e_wb_st,
            e_yield_st=e_yield_st, e_park_st=e_park_st, e_wbn_st=e_wbn_st, e_cw_st=e_cw_st,
            c_wb_st=c_wb_st, c_wb_st_r=c_wb_st_r, c_wake_st=c_wake_st, live_wp=live_wp,
            live_rp=live_rp, yield_v=yield_v, set_rts=set_rts, set_reset=set_reset)

    def _db_room(self, m, work):
        """``work.level < work_depth − 1``, as a register: the compare made on the next level
        (the level plus the entry pushed, minus the one popped), so that a doorbell's ready
        starts at a flip-flop."""
        D = self.work_depth
        if D < 3:
            return work.level < D - 1
        room = Signal(init=1)
        lv = work.level
        w = work.i.valid & work.i.ready
        r = work.o.valid & work.o.ready
        m.d.sync += room.eq((lv < D - 2) | ((lv == D - 2) & ~(w & ~r))
                            | ((lv == D - 1) & r & ~w))
        return room

    def _work_push(self, m, t):
        """What enters the work queue and ``prod``: the SET_QP's QPN when one may be taken
        (``qs_sel``, which also pauses the reset sweep), else the completer's wake-up, the
        engine's yield, the doorbell's, in that order. The entry, address and row are chosen
        without the handshakes, which only enable them, so the data paths do not wait for
        ``ready``. Adds ``qs_sel``."""
        (ab, aq, c_wake_st, c_wb_st, e_cw_st, e_wb_st, e_yield_st, live_rp, live_wp, prod_wp,
         qpn, set_hit, set_q, set_reset, set_rts, sw_en, sweeping, wake_v, work, yield_v) = (
            t.ab, t.aq, t.c_wake_st, t.c_wb_st, t.e_cw_st, t.e_wb_st, t.e_yield_st, t.live_rp,
            t.live_wp, t.prod_wp, t.qpn, t.set_hit, t.set_q, t.set_reset, t.set_rts, t.sw_en,
            t.sweeping, t.wake_v, t.work, t.yield_v)
        sp = self.qp_set.payload
        # The work queue's entry and prod's address and row are chosen without the handshakes
        # (which only enable them): the SET_QP's when one may be taken (qs_sel), else the
        # wake-up's, the yield's, the doorbell's, in the order below.
        dq = self.sq_db.payload.number[:ab]
        qs_sel = Signal()
        m.d.comb += [qs_sel.eq(self.qp_set.valid & ~e_wb_st & ~e_cw_st & ~c_wb_st),
                     sw_en.eq(sweeping & ~qs_sel)]
        m.d.comb += [
            work.i.payload.eq(Mux(qs_sel, set_q, Mux(c_wake_st & ~self.qp_set.valid, aq,
                                                     Mux(e_yield_st, qpn, dq)))),
            prod_wp.addr.eq(Mux(qs_sel, set_q, dq)),
            prod_wp.data.eq(Mux(qs_sel, 0, self.sq_db.payload.value)),
            live_wp.addr.eq(set_q), live_wp.data.eq(~set_reset),
        ]
        with m.If(self.qp_set.valid & self.qp_set.ready):
            m.d.comb += live_wp.en.eq(1)
            with m.If(set_rts | set_reset):
                m.d.comb += set_hit.eq(1)
            with m.If(set_reset):
                m.d.comb += prod_wp.en.eq(1)
            with m.If(set_rts | (sp.state == _ERROR)):
                # (ERROR: the engine flushes what is posted and kills what is in flight)
                m.d.comb += work.i.valid.eq(1)
        with m.Elif(wake_v | yield_v):
            m.d.comb += work.i.valid.eq(1)
        with m.Elif(self.sq_db.valid & self.sq_db.ready & live_rp.data
                    & (self.sq_db.payload.number < self.num_qp)):     # others are ignored
            m.d.comb += [prod_wp.en.eq(1), work.i.valid.eq(1)]
        return types.SimpleNamespace(qs_sel=qs_sel)

    def _set_writes(self, m, t):
        """The address, enable and row of ``dyn``'s and ``comp``'s writes, which every copy of
        the tables takes: a SET_QP's (its start PSN on RTS, else 0) or a write-back's (the
        engine's ``eng_dyn``, the completer's ``cmp_new``), the address the SET_QP's, the reset
        sweep's or the FSM's QP. Only the enables wait for the SET_QP's handshake."""
        (aq, c_wb_st, cmp_new, cmp_wb, comp_wp, dyn_wp, e_wb_st, eng_dyn, eng_wb, qpn, qs_sel,
         set_hit, set_q, set_rts, sw_i, sweeping) = (
            t.aq, t.c_wb_st, t.cmp_new, t.cmp_wb, t.comp_wp, t.dyn_wp, t.e_wb_st, t.eng_dyn,
            t.eng_wb, t.qpn, t.qs_sel, t.set_hit, t.set_q, t.set_rts, t.sw_i, t.sweeping)
        sp = self.qp_set.payload
        # dyn's and comp's writes: a SET_QP's (set_hit), the write-back's (with rn, or rh),
        # CHECK_WAIT's cfg or the reset sweep's rn and rh, never two in one cycle. The address
        # is the SET_QP's while one is offered and may be taken (qs_sel: it pauses the sweep),
        # else the sweep's, else the engine's or the completer's QP; the row is chosen by the
        # write-back's state flag alone (a register; qp_set.ready is low in those states), so
        # that only the enables wait for the SET_QP's handshake.
        psn0 = Mux(set_rts, sp.sq_psn, 0)
        m.d.comb += [dyn_wp.en.eq(eng_wb | set_hit), comp_wp.en.eq(cmp_wb | set_hit),
                     dyn_wp.addr.eq(Mux(qs_sel, set_q, Mux(sweeping, sw_i, qpn))),
                     comp_wp.addr.eq(Mux(qs_sel, set_q, Mux(sweeping, sw_i, aq)))]
        with m.If(e_wb_st):
            m.d.comb += dyn_wp.data.eq(eng_dyn)
        with m.Else():
            m.d.comb += [dyn_wp.data.psn.eq(psn0),
                         dyn_wp.data.hpsn.eq(psn0), dyn_wp.data.fpsn.eq(psn0)]
        with m.If(c_wb_st):
            m.d.comb += comp_wp.data.eq(cmp_new)
        with m.Else():
            m.d.comb += [comp_wp.data.una.eq(psn0), comp_wp.data.cfpsn.eq(psn0)]

    def _engine_reads(self, m, t):
        """The engine's registered reads of its QP's entries: ``prod``, kept over a read that met
        a write to its row, and dyn_mem's read as is (``dyn_rd``, ``rn_rd``) with ``e_hit1``
        saying it met one; the registers of its view of ``comp`` (``cs``, ``rh_e``, driven by
        :meth:`_engine_comp_view`) and ``ce_hit``. Adds these, and the registered compares the
        completer shares (``set_r``, ``aq_qpn_r``)."""
        (aq, c_wb_st_r, dyn_rd_w, dyn_wp, prod_rp, prod_wp, qpn, rb,
         rn_rd_w, rn_wp, set_hit, set_q) = (
            t.aq, t.c_wb_st_r, t.dyn_rd_w, t.dyn_wp, t.prod_rp,
            t.prod_wp, t.qpn, t.rb, t.rn_rd_w, t.rn_wp, t.set_hit, t.set_q)
        # the engine reads prod continuously, at the work queue's head while the engine is in
        # IDLE (e_idle), so that its two registers hold the new QP's row by CHECK_WAIT, three
        # cycles after IDLE took it; dyn_mem and comp_mem in CTX and CTX_WAIT (e_steal, through
        # the completer's ports), dyn_rd holding the QP's row three cycles after IDLE took it
        # (steal_rr)
        e_idle = Signal()
        rq = Signal.like(qpn)           # the QP of prod's read
        m.d.comb += [rq.eq(Mux(e_idle, t.work.o.payload, qpn)), prod_rp.addr.eq(rq)]
        e_steal = Signal()
        steal_r, steal_rr = Signal(), Signal()  # the read on the ports is the engine's; in dyn_rd
        m.d.sync += [steal_r.eq(e_steal), steal_rr.eq(steal_r)]
        # c_again: the completer's LOAD found its reads spoiled and reads again; until its
        # LOAD takes two clean reads the engine starts no load (IDLE takes no QPN), so once
        # the load under way has left the port the next try is clean (the liveness bound,
        # docs/requester.md)
        c_again = Signal()
        # registered copies of the table reads (one cycle older: every use is conservative)
        # (prod two cycles after its read: the port feeds prod_r alone, so no logic follows the
        # block RAM's clock to out, and prod takes it or the write it met; a doorbell seen a
        # cycle late is still queued for service)
        prod_r = Signal(16)
        prod = Signal(16)
        cs = Signal(_comp_engine_layout)    # one consistent snapshot of the completer's entry
        cs_ld, cs_src = Signal(), Signal(_comp_engine_layout)   # cs's enable and next row
        # dyn_mem's read, rn with it, registered before CTX_WAIT takes it into dyn (the block
        # RAM's clock-to-out leads no logic)
        dyn_rd, rn_rd = Signal(_dyn_engine_layout), Signal(rb)
        m.d.sync += [dyn_rd.eq(_pick(_dyn_engine_layout, dyn_rd_w)), rn_rd.eq(rn_rd_w)]
        # (a read that met a doorbell's or a RESET's write to its row is not taken: prod
        # keeps the value before the write when it holds that row, and takes the new one a
        # cycle later; when it holds another QP's row (the engine has just changed QP), it
        # takes the value written, as it must never show another QP's producer index)
        # (its enable and its address compare registered apart: the enable waits for the
        # handshakes; p_*_r: the same of the read in prod_r)
        p_hit, p_en, p_match, p_hit_r = Signal(), Signal(), Signal(), Signal()
        p_data, p_data_r = Signal(16), Signal(16)   # the value that write wrote
        p_row, p_row_r = Signal.like(qpn), Signal.like(qpn)     # the QP of the read
        pq_row = Signal.like(qpn)       # the QP whose row prod holds
        m.d.sync += [p_en.eq(prod_wp.en), p_match.eq(prod_wp.addr == rq),
                     p_data.eq(prod_wp.data), p_row.eq(rq)]
        m.d.comb += p_hit.eq(p_en & p_match)
        m.d.sync += [prod_r.eq(prod_rp.data), p_hit_r.eq(p_hit), p_data_r.eq(p_data),
                     p_row_r.eq(p_row)]
        with m.If(~p_hit_r):
            m.d.sync += [prod.eq(prod_r), pq_row.eq(p_row_r)]
        with m.Elif(pq_row != p_row_r):
            m.d.sync += [prod.eq(p_data_r), pq_row.eq(p_row_r)]
        # ce_hit: the read of comp_mem on its port met a write to the engine's QP's row (the
        # writes taken from the completer's write-back state flag, a superset), so cs does not
        # take it (the SET_QP's handshake and the address compares registered apart, as for
        # p_hit)
        ce_hit, set_r, set_qpn_r, aq_qpn_r = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [set_r.eq(set_hit), set_qpn_r.eq(set_q == qpn), aq_qpn_r.eq(aq == qpn)]
        m.d.comb += ce_hit.eq((set_r & set_qpn_r) | (c_wb_st_r & aq_qpn_r))
        ce_hit_r = Signal()             # the same of the read in comp_rd (what cs takes)
        m.d.sync += ce_hit_r.eq(ce_hit)
        with m.If(cs_ld):
            m.d.sync += cs.eq(cs_src)
        # dyn_rd is from a read that met a write to its row, or that a write to its row
        # followed before it reached dyn_rd (e_hit1: this cycle's e_hit0 or the last one's;
        # enable and address compare registered apart)
        e_hit1, e_hit0, e_hit0_r, dyn_en_r, dyn_qpn_r = (Signal(), Signal(), Signal(),
                                                         Signal(), Signal())
        # (dyn_wp.addr == qpn, the compares made beside the address's choice: the SET_QP's,
        # the sweep's, or the engine's own QP)
        m.d.sync += [dyn_en_r.eq(dyn_wp.en | rn_wp.en),
                     dyn_qpn_r.eq(Mux(t.qs_sel, set_q == qpn,
                                      Mux(t.sweeping, t.sw_i == qpn, 1))),
                     e_hit0_r.eq(e_hit0)]
        m.d.comb += [e_hit0.eq(dyn_en_r & dyn_qpn_r), e_hit1.eq(e_hit0 | e_hit0_r)]
        rh_e = Signal(rb)               # rh, kept as cs is
        return types.SimpleNamespace(
            prod=prod, cs=cs, cs_ld=cs_ld, cs_src=cs_src, dyn_rd=dyn_rd,
            rn_rd=rn_rd, ce_hit=ce_hit, ce_hit_r=ce_hit_r,
            set_r=set_r, set_qpn_r=set_qpn_r, e_idle=e_idle, e_steal=e_steal, steal_r=steal_r,
            c_again=c_again,
            steal_rr=steal_rr,
            aq_qpn_r=aq_qpn_r, e_hit1=e_hit1, rh_e=rh_e)

    def _engine_state(self, m, t):
        """The engine's registers (the QP's context and ``dyn``, the send WQE and its fields, the
        gather and segmentation state, the prefetch, the error and kill hand-offs); what its
        states decide from are :meth:`_engine_flags`'s. Adds them all."""
        (ab, cs, eng_wb, nb, qpn, rb, rn_wp, sweeping) = (
            t.ab, t.cs, t.eng_wb, t.nb, t.qpn, t.rb, t.rn_wp, t.sweeping)
        # ---- engine state -------------------------------------------------------------------
        ctx = Signal(req_ctx_layout)
        dyn = Signal(_dyn_layout)
        ern = Signal(rb)                # the QP's rn (the entry its next new WQE goes to)
        eng_rn = Signal(rb)             # rn as written back
        m.d.comb += eng_rn.eq(ern)
        with m.If(~sweeping):
            m.d.comb += [rn_wp.data.eq(eng_rn), rn_wp.en.eq(eng_wb)]
        # cs.rgen != dyn.rgen for ERR, registered from cs and dyn as rewind and
        # none_unretired are (ERR is never the cycle after a change of dyn.rgen: REWIND and
        # CTX_WAIT set it), bit by bit (rgen_x): the block RAM's output feeds cs alone
        rgen_x = Signal(4)
        rgen_ne = Signal()
        m.d.sync += rgen_x.eq(cs.rgen ^ dyn.rgen)
        m.d.comb += rgen_ne.eq(rgen_x != 0)
        len0 = Signal(32)
        total = Signal(32)              # message length (registered in VALIDATE)
        k = Signal(2)
        beat = Signal(range(max(2, 64 // nb)))
        status = Signal(8)
        hfault = Signal()
        sent = Signal(32)               # message bytes handed to the TX frame builder
        resid = Signal(32)              # message bytes not yet handed over
        cur_addr = Signal(64)           # bus address of the next byte to gather
        # cur_addr + an offset of at most 32 bits (clen in CHUNK, skoff in SKIP4): the low half's
        # sum picks the high half or its increment, made beside it from the register, so no
        # carry chain is longer than 32 bits
        ca_hi1 = Signal(32)
        m.d.comb += ca_hi1.eq(cur_addr[32:] + 1)

        def cur_plus(off, name):
            lo = Signal(33, name=f"cur_plus_{name}")
            m.d.comb += lo.eq(cur_addr[:32] + off)
            return Cat(lo[:32], Mux(lo[32], ca_hi1, cur_addr[32:]))
        seg_left = Signal(32)           # bytes left in the current SGE
        len1 = Signal(32)
        left = Signal(13)               # bytes of the current packet still to gather
        left_z = Signal()               # left = 0, set with left
        was_last = Signal()
        flush = Signal()                # the WQE is being flushed (QP in ERROR)
        fpsn_r = Signal(24)             # first PSN of the current WQE
        skipn = Signal(24)              # packets of it already sent (resume point)
        skip0 = Signal()                # skipn = 0 (set with it)
        # skipn · PMTU, from SKIP to SKIP2, where the gather set-up does not use cur_addr yet
        soff = cur_addr[:40]
        sk_lt = Signal()
        skoff = Signal(32)              # the resume offset in the SGE sk_lt names (SKIP2..SKIP4)
        pend_err = Signal()             # the completer ended the QP: error for the WQE at cons
        eoff = Signal()                 # ERR offers its completion on ecpl until it is taken
        pstat = Signal(4)
        kill_v = Signal()               # engine → completer: end QP kill_q (SET_QP to ERROR)
        kill_q = Signal(ab)
        served = Signal()               # a WQE of this QP was sent during this visit
        # WQE prefetch: while a WQE's packets are handed over, the next WQE of the QP is read;
        # its beats wait in the read client's buffer until WQE_REQ finds the match (QP, index)
        # or drains them (the engine went elsewhere meanwhile)
        pf_v = Signal()                 # a prefetched WQE's beats are due or waiting
        pf_q = Signal(ab)
        pf_c = Signal(16)
        pf_go = Signal()                # issue the prefetch this cycle
        pf_cw = Signal()                # the read of (qpn, cons) was issued in the last cycle
        cw_new = Signal()               # CHECK_WAIT follows CTX_WAIT (a new visit)
        # cons + 1 and cons = hcons, registered: used in PKT, CHUNK and WB_NEXT only, which
        # never follow a change of cons or hcons by one cycle
        cons1 = Signal(16)
        alloc_r = Signal()
        m.d.sync += [cons1.eq(dyn.cons + 1), alloc_r.eq(dyn.cons == dyn.hcons)]
        pf_bad = Signal()               # a SET_QP rewrote the prefetched QP: drain it
        # the SQ's index mask (bit i: i < sq_log), of the context on ctx_resp and of ctx's
        sq_mask, cr_mask = Signal(16), Signal(16)
        m.d.comb += cr_mask.eq(Cat(*(self.ctx_resp.payload.sq_log > i for i in range(16))))
        rd_dr = Signal()                # an unusable prefetch is drained while idle
        pf_hit = Signal()
        # (the match registered: WQE_REQ, where it is used, never follows a change of pf_q,
        # pf_c, qpn or cons by one cycle)
        pf_match = Signal()
        m.d.sync += pf_match.eq((pf_q == qpn) & (pf_c == dyn.cons))
        # (pf_cw: CHECK_WAIT issued the read of this WQE a cycle ago, before pf_match saw it)
        m.d.comb += pf_hit.eq(pf_v & ~pf_bad & (pf_match | pf_cw))
        return types.SimpleNamespace(
            ctx=ctx, dyn=dyn, ern=ern, eng_rn=eng_rn, rgen_ne=rgen_ne, k=k, len0=len0,
            total=total, beat=beat, status=status, hfault=hfault, sent=sent, resid=resid,
            cur_addr=cur_addr, cur_plus=cur_plus, seg_left=seg_left, len1=len1, left=left, left_z=left_z, was_last=was_last,
            flush=flush, fpsn_r=fpsn_r, skipn=skipn, skip0=skip0, soff=soff, sk_lt=sk_lt, skoff=skoff,
            pend_err=pend_err, eoff=eoff, pstat=pstat, kill_v=kill_v, kill_q=kill_q, served=served,
            pf_v=pf_v, pf_q=pf_q, pf_c=pf_c, pf_go=pf_go, pf_cw=pf_cw, cw_new=cw_new,
            cons1=cons1, alloc_r=alloc_r, pf_bad=pf_bad, pf_hit=pf_hit, rd_dr=rd_dr,
            sq_mask=sq_mask, cr_mask=cr_mask)

    def _engine_wqe_store(self, m, t):
        """The send WQE (interface.md §5.2) as WQE_DATA takes its beats (``wqe_take``), each field
        from its fixed lane (ring bases are 64-byte aligned: word i of the WQE is lane i mod W/64
        of beat i·64/W). What the engine decides and builds headers from is kept in flip-flops
        (opcode, flags, num_sge, the immediate, rkey, the SGE lengths; the remote address in
        ``rd_va``); wr_id, the SGE addresses and the lkeys stay in a LUT RAM of the WQE's 64-bit
        words, read through two ports at the word each state names (``wqe_a``, ``wqe_b``, driven
        by :meth:`_engine_wqe_words`), and LK_WAIT writes the Key Cache's bus address over SGE
        k's (``wqe_bus``). Adds the fields and the ports."""
        W, k, beat = t.W, t.k, t.beat
        nw = W // 64                    # WQE words per beat
        lw = (nw - 1).bit_length()      # bits of a word's lane
        d = self.wqe_rd.resp.payload.data
        take = Signal(name="wqe_take")
        put_bus = Signal(name="wqe_bus")

        def capture(reg, lo):
            # the field at WQE bit ``lo`` (within one word), from its beat's lane
            word, off = divmod(lo, 64)
            with m.If(take & (beat == word // nw)):
                m.d.sync += reg.eq(d[64 * (word % nw) + off:][:len(reg)])

        wop, flags, num_sge = Signal(8, name="wop"), Signal(2, name="wflags"), Signal(8, name="nsge")
        immf, rkey = Signal(32, name="immf"), Signal(32, name="rkey")
        sge_len = [Signal(32, name=f"sge_len{i}") for i in range(SEND_MAX_SGE)]
        sge = SendWqe["sge"].offset
        for reg, name in [(wop, "opcode"), (flags, "flags"), (num_sge, "num_sge"),
                          (immf, "imm_or_inv_rkey"), (t.rd_va, "remote_addr"), (rkey, "rkey")]:
            capture(reg, SendWqe[name].offset)
        for i, reg in enumerate(sge_len):
            capture(reg, sge + 128 * i + 64)
        # VALIDATE's opcode and SGE-count tests, registered as the fields are taken
        op_bad, op_rdc = Signal(name="op_bad"), Signal(name="op_rdc")
        ow, oo = divmod(SendWqe["opcode"].offset, 64)
        nw_, no = divmod(SendWqe["num_sge"].offset, 64)
        assert ow == nw_                # (one word holds both)
        with m.If(take & (beat == ow // nw)):
            lane = d[64 * (ow % nw):][:64]
            d_op, d_ns = lane[oo:oo + 8], lane[no:no + 8]
            top_op = _WOP_READ if self.read else _WOP_READ - 1   # (no READ: opcode 5 is bad)
            m.d.sync += [op_bad.eq((d_op > top_op) | (d_ns > 2)),
                         op_rdc.eq((d_op == _WOP_READ) if self.read else 0)]
        # (no_rw_check is moot: the reads are asynchronous)
        m.submodules.wqe_mem = mem = Memory(shape=W, depth=max(1, 8 // nw), init=[])
        wp = mem.write_port(granularity=64)
        sge_w = Cat(Const(0, 1), k[0], Const(1, 1))      # the word of SGE k's address
        with m.If(put_bus):
            m.d.comb += [wp.addr.eq(sge_w >> lw),
                         wp.data.eq(self.lookup.resp.payload.bus_addr.replicate(nw)),
                         wp.en.eq(Const(1, nw) << sge_w[:lw] if lw else 1)]
        with m.Elif(take):
            m.d.comb += [wp.addr.eq(beat), wp.data.eq(d), wp.en.eq((1 << nw) - 1)]
        ports = []
        for nm in "ab":
            rp = mem.read_port(domain="comb")
            wa, wd = Signal(3, name=f"wqe_{nm}"), Signal(64, name=f"wqe_{nm}_data")
            m.d.comb += [rp.addr.eq(wa >> lw),
                         wd.eq(rp.data.word_select(wa[:lw], 64) if lw else rp.data)]
            ports += [wa, wd]
        wqe_a, wqe_ad, wqe_b, wqe_bd = ports
        return types.SimpleNamespace(
            wqe_take=take, wqe_bus=put_bus, op_bad=op_bad, op_rdc=op_rdc, wop=wop, flags=flags, num_sge=num_sge, immf=immf,
            rkey=rkey, sge_len=sge_len, wqe_a=wqe_a, wqe_ad=wqe_ad, wqe_b=wqe_b, wqe_bd=wqe_bd)

    def _engine_flags(self, m, t):
        """What the engine's states decide from, registered: the SGE lengths, the PMTU in bytes, the
        PSN and WQE windows, room in the in-flight ring, an empty SQ, a rewind to do. Adds them."""
        (D, cs, ctx, dyn, ern, free, fresh, len0, len1, num_sge, prod, rh_e, sge_len) = (
            t.D, t.cs, t.ctx, t.dyn, t.ern, t.free, t.fresh, t.len0, t.len1, t.num_sge, t.prod,
            t.rh_e, t.sge_len)
        # len0 and len1 (from LOOKUP on) select by num_sge's decode registered: the WQE does
        # not change after WQE_DATA but for the SGE addresses, so from LOOKUP on sge1_r and
        # sge2_r are those of the WQE, and no decode of num_sge leads the gather set-up.
        # VALIDATE, the cycle after the last beat, sums the lengths by num_sge itself, with the
        # adder ahead of the choice.
        sge1_r = Signal()               # num_sge ≥ 1
        sge2_r = Signal()               # num_sge = 2
        len0_nz = Signal()              # len0 ≠ 0
        m.d.sync += [sge1_r.eq(num_sge != 0), sge2_r.eq(num_sge == 2),
                     len0_nz.eq((num_sge != 0) & (sge_len[0] != 0))]
        # k = num_sge, from LOOKUP on (num_sge ≤ 2 there: VALIDATE refuses more), one LUT of
        # k and the decode's registers instead of a compare with the 8-bit field
        k_end = Signal()
        k = t.k
        m.d.comb += k_end.eq(Mux(k[1], sge2_r, Mux(k[0], sge1_r & ~sge2_r, ~sge1_r)))
        m.d.comb += [
            len0.eq(Mux(sge1_r, sge_len[0], 0)),
            len1.eq(Mux(sge2_r, sge_len[1], 0)),
            self.busy.eq(0),
        ]
        len_sum = Signal(32)            # len0 + len1, in VALIDATE
        m.d.comb += len_sum.eq(Mux(num_sge == 2, sge_len[0] + sge_len[1],
                                   Mux(num_sge != 0, sge_len[0], 0)))
        pmtu_b = Signal(13)
        with m.Switch(ctx.pmtu):
            for code in range(1, 6):
                with m.Case(code):
                    m.d.sync += pmtu_b.eq(128 << code)
            with m.Default():
                m.d.sync += pmtu_b.eq(256)

        # windows: PSNs outstanding, WQEs not yet retired
        # registered: one cycle older than psn/cons, never used the cycle after they change
        outstanding = Signal(24)
        m.d.comb += outstanding.eq(dyn.psn - cs.una)
        psn_room = Signal()
        unretired = Signal(16)
        m.d.comb += unretired.eq(dyn.cons - cs.ccons)
        slot_room = Signal()
        none_unretired = Signal()
        m.d.sync += [psn_room.eq(outstanding < MAX_OUTSTANDING), slot_room.eq(unretired < INFLIGHT),
                     none_unretired.eq(unretired == 0)]
        # a new WQE (one not yet in the ring, cons = hcons) needs a free entry for the QP's next
        # rn, and the QP's list must be empty of dropped entries (after a RESET: while
        # ccons = hcons and rh ≠ rn the completer has yet to drop them). Only the engine takes
        # free entries, so room seen here is still there when the WQE is recorded.
        # (registered like the window flags: CHECK is never the cycle after a change)
        ring_ok = Signal()
        # the SQ is empty (registered like the window flags: CHECK follows CHECK_WAIT or YIELD;
        # prod a cycle older is a doorbell seen late, which queued the QP again)
        cons_eq_prod = Signal()
        m.d.sync += cons_eq_prod.eq(dyn.cons == prod)
        m.d.sync += ring_ok.eq((dyn.cons != dyn.hcons)
                               | (((fresh != D) | free.o.valid)
                                  & ~((cs.ccons == dyn.hcons) & (rh_e != ern))))
        # the completer wants a rewind, or ACKs of an earlier transmission overtook us
        # (registered like the window flags: CHECK and PKT are never the cycle after a change)
        rewind = Signal()
        m.d.sync += rewind.eq((cs.rgen != dyn.rgen)
                              | (~dyn.err & (unretired[15] | outstanding[23])))
        # the SGE lengths' zero tests registered (LOOKUP is at least a cycle after the WQE's
        # last beat; LK_WAIT rewrites only the addresses)
        len_z = Signal(2)
        m.d.sync += len_z.eq(Cat(sge_len[0] == 0, sge_len[1] == 0))
        # CHECK's tests of the context and of the completer's entry (registered with rewind:
        # the completer changes rerr and hold with rgen; ctx changes in CTX_WAIT only)
        # (and a QPN waits in the work queue: only the engine takes entries, so one seen a
        # cycle late is only a WQE more before the yield)
        c_err, c_end, c_off, wq_v = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [wq_v.eq(t.work.o.valid), c_err.eq(ctx.state == _ERROR), c_end.eq(cs.rerr != 0),
                     c_off.eq((ctx.state != _RTS) | cs.hold | (cs.rerr != 0))]
        return types.SimpleNamespace(
            c_err=c_err, c_end=c_end, c_off=c_off, wq_v=wq_v, len_z=len_z, sge2_r=sge2_r, k_end=k_end, len0_nz=len0_nz, len_sum=len_sum, pmtu_b=pmtu_b, psn_room=psn_room,
            slot_room=slot_room,
            none_unretired=none_unretired, ring_ok=ring_ok, cons_eq_prod=cons_eq_prod,
            rewind=rewind)

    def _engine_packet(self, m, t):
        """The packet the engine sends next, from its registers: the segmentation (``fits``: the
        rest of the message fits in the packet; ``pay``: its payload; both registered), the
        packet descriptor (``pkt``: opcode by segment, SE, AckReq), the READ slot record
        written as a READ is first sent (``read_rec``), and the room for one more READ of the
        QP under its ORD (``ord_ok``, registered). Adds ``fits``, ``pay``, ``ackreq`` and
        ``ord_ok``."""
        (ctx, dyn, flags, immf, pmtu_b, qpn, resid, rkey, sent, total, wop) = (
            t.ctx, t.dyn, t.flags, t.immf, t.pmtu_b, t.qpn, t.resid, t.rkey, t.sent, t.total,
            t.wop)
        # segmentation of the next packet
        # (registered: PKT is never the cycle after resid, ctx or pmtu_b changes; LOOKUP's
        # resid = total is the value VALIDATE wrote)
        fits = Signal()
        pay = Signal(13)
        fits_n = resid <= pmtu_b
        # (a READ request carries no payload: its ``pay`` is 0, which nothing after its
        # packet reads: it ends the WQE's packets, and the next WQE sets ``sent`` and
        # ``resid`` anew)
        m.d.sync += [fits.eq(fits_n), pay.eq(Mux(t.is_rd, 0, Mux(fits_n, resid, pmtu_b)))]
        # the packet's opcode, registered from the values ``fits`` is (PKT is never the cycle
        # after ``sent`` changes either: each state that writes it writes ``resid`` too), so
        # the descriptor's opcode leaves the engine from a flip-flop, not through the 32-bit
        # ``sent == 0`` compare, on its way to the TX builder's header decodes
        opcode = Signal(8)
        with m.Switch(wop):
            for o, (f, mid, la, on) in enumerate(_OPS):
                with m.Case(o):
                    m.d.sync += opcode.eq(Mux(sent == 0, Mux(fits_n, on, f),
                                              Mux(fits_n, la, mid)))
        ackreq = Signal()
        is_rd = t.is_rd
        m.d.comb += ackreq.eq(fits | is_rd | (dyn.noack > MAX_NOACK))
        imm_word = Mux(wop == 2, immf, Cat(immf[24:32], immf[16:24], immf[8:16], immf[0:8]))
        pk = self.pkt.payload
        m.d.comb += [
            pk.opcode.eq(opcode),
            pk.se.eq(fits & flags[1] & (wop != 3) & ~is_rd), pk.ackreq.eq(ackreq),
            pk.psn.eq(dyn.psn),
            # (the WQE's remote address; a READ's advanced past the responses placed)
            pk.va.eq(t.rd_va), pk.rkey.eq(rkey),
            # (the RETH's length: a READ's bytes still to come; a WRITE's RETH is in its FIRST
            # or ONLY packet, sent with nothing before it, where resid = total)
            pk.dmalen.eq(resid), pk.imm.eq(imm_word),
            pk.paylen.eq(pay), pk.qpn.eq(qpn),
        ]
        # a READ's slot, written as the READ is first sent
        rr = self.read_rec.payload
        m.d.comb += [
            rr.idx.eq(t.new_ri), rr.qpn.eq(qpn), rr.fpsn.eq(t.fpsn_r),
            rr.span.eq(t.rd_l),
            rr.pmtu.eq(ctx.pmtu), rr.total.eq(total), rr.addr0.eq(t.wqe_ad),
            rr.len0.eq(t.len0), rr.addr1.eq(t.wqe_bd),     # (PKT reads SGE 0's and 1's)
        ]
        # room for one more READ of this QP (ORD: 0 means 1, at most 8; registered: VALIDATE
        # is never the cycle after a change of rds, crds or ctx)
        ord_ok = Signal()
        ordn = Mux(ctx.ord == 0, 1, Mux(ctx.ord > 8, 8, ctx.ord))
        m.d.sync += ord_ok.eq((dyn.rds - t.cs.crds)[:4] < ordn)
        return types.SimpleNamespace(fits=fits, pay=pay, ackreq=ackreq, ord_ok=ord_ok)

    def _engine_inflight(self, m, t):
        """The gather chunk the engine hands to the TX frame builder (``chunk``, from the
        registers ``clen``, ``pkt_end``, ``seg_end`` that CHUNK and PKT set) and the in-flight
        record of the WQE just sent, written at ``rn`` with the write-back and linked to the
        entry taken for the next ``rn`` (``new_rn``, registered off the free list). Adds
        ``clen``, ``pkt_end``, ``seg_end`` and ``new_rn``."""
        (D, cur_addr, dyn, ern, flags, free, fresh, infl_wp, rb, total, wop) = (
            t.D, t.cur_addr, t.dyn, t.ern, t.flags, t.free, t.fresh, t.infl_wp, t.rb, t.total,
            t.wop)
        is_rd = t.is_rd
        # gather chunk of the current packet: clen = min(seg_left, left), kept in a register
        # set with ``left`` (in PKT, and in CHUNK when the packet continues in SGE 1), so the
        # chunk handed to the TX frame builder comes from registers only
        clen = Signal(13)
        # set with clen: the chunk is the packet's last (left = clen), it ends the SGE
        # (seg_left = clen)
        pkt_end = Signal()
        seg_end = Signal()
        m.d.comb += [
            self.chunk.payload.addr.eq(cur_addr),
            self.chunk.payload.len.eq(clen),
        ]

        # the in-flight record of the WQE just sent (written with the write-back), at rn, linked
        # to the entry taken for the next rn. That entry is registered (from the free list's
        # block RAM output): it is used in WB_NEXT only, never the cycle after another WB_NEXT,
        # and only WB_NEXT takes entries, so fresh and the free list's head are as a cycle
        # before (the room CHECK saw is still there)
        new_rn = Signal(rb)
        # (the free list's head registered first: its block RAM's clock-to-out leads no logic;
        # WB_NEXT is at least three cycles after the CHECK that saw the head valid)
        f_head = Signal(rb)
        m.d.sync += [f_head.eq(free.o.payload), new_rn.eq(Mux(fresh != D, fresh, f_head))]
        m.d.comb += [
            infl_wp.addr.eq(ern),
            infl_wp.data.next.eq(new_rn),
            infl_wp.data.wr_id.eq(t.wqe_bd),      # (WB_NEXT reads word 0)
            infl_wp.data.end_psn.eq(dyn.psn),     # (WB_NEXT: psn is one past the WQE's last)
            infl_wp.data.signaled.eq(flags[0]),
            infl_wp.data.write.eq((wop == 3) | (wop == 4)),
            infl_wp.data.imm.eq((wop == 1) | (wop == 4)),
            infl_wp.data.read.eq(is_rd), infl_wp.data.ridx.eq(t.e_ri),
            infl_wp.data.byte_len.eq(total),
        ]
        return types.SimpleNamespace(clen=clen, pkt_end=pkt_end, seg_end=seg_end, new_rn=new_rn)

    def _engine_requests(self, m, t):
        """The engine's requests and rows, driven from its registers: the context, WQE and Key
        Cache requests, its completion (``ecpl``), its write-back row (``eng_dyn``; WB_NEXT's
        retires the WQE at ``cons``) and the completer's ``cfg``, and ``pf_more`` (another WQE
        is posted after ``cons``, registered). Adds ``pf_more``."""
        (alloc_r, cfg_wp, cons1, ctx, dyn, e_park_st, e_wbn_st, ecpl, eng_dyn, hfault, k, prod,
         qpn, sge_len, status, wop) = (
            t.alloc_r, t.cfg_wp, t.cons1, t.ctx, t.dyn, t.e_park_st, t.e_wbn_st, t.ecpl,
            t.eng_dyn, t.hfault, t.k, t.prod, t.qpn, t.sge_len, t.status, t.wop)
        is_rd = t.is_rd
        # ports driven from registers
        m.d.comb += [
            self.ctx_req.payload.qpn.eq(qpn),
            self.wqe_rd.req.payload.len_bytes.eq(64),
            self.wqe_rd.req.payload.tag.eq(0),
            # (SGE k's address and lkey: the WQE RAM's words by default)
            self.lookup.req.payload.key.eq(t.wqe_bd[32:]),
            self.lookup.req.payload.pd.eq(ctx.pd),
            # a READ's SGEs: LOCAL_WRITE (0x01); (wop == 5 registered: the early lookup in
            # WQE_DATA is made before VALIDATE sets is_rd)
            self.lookup.req.payload.access.eq(t.op_rd_r),
            self.lookup.req.payload.va.eq(t.wqe_ad),
            self.lookup.req.payload.len.eq(Mux(k[0], sge_len[1], sge_len[0])),
            self.lookup.req.payload.tag.eq(k),
            ecpl.payload.qpn.eq(qpn), ecpl.payload.wr_id.eq(t.wqe_bd),   # (ERR reads word 0)
            ecpl.payload.status.eq(status),
            ecpl.payload.opcode.eq(Mux((wop == _WOP_READ) if self.read else 0, 2,
                                       (wop == 3) | (wop == 4))),
            ecpl.payload.fault.eq(hfault),
            eng_dyn.eq(dyn),
            eng_dyn.parked.eq(e_park_st),
            cfg_wp.data.timeout.eq(ctx.timeout),
            cfg_wp.data.retry_cnt.eq(ctx.retry_cnt),
            cfg_wp.data.rnr_retry.eq(ctx.rnr_retry),
        ]
        with m.If(e_wbn_st):                # WB_NEXT's row: the WQE at cons is done
            m.d.comb += [eng_dyn.cons.eq(cons1), eng_dyn.part.eq(0),
                         eng_dyn.hcons.eq(Mux(alloc_r, cons1, dyn.hcons)),
                         eng_dyn.rds.eq(dyn.rds + (alloc_r & is_rd))]

        # another WQE posted after cons (registered: PKT and CHUNK, where it is used, are never
        # within two cycles of a change of cons; prod a cycle older is a doorbell seen late)
        pf_more = Signal()
        m.d.sync += pf_more.eq(cons1 != prod)
        return types.SimpleNamespace(pf_more=pf_more)

    def _engine(self, m, t):
        """The engine FSM: it takes a QPN from the work queue, loads its context and ``dyn``,
        decides in CHECK (rewind, error and flush, window, round-robin, the next WQE) and writes the
        QP back. Its states are in the parts below, in this order: :meth:`_engine_load_states`,
        :meth:`_engine_check_states`, :meth:`_engine_wqe` (the states of one WQE) and
        :meth:`_engine_end_states`. A SET_QP of the engine's QP or of the prefetched one makes the
        prefetch unusable (``pf_bad``). Adds ``eng_fsm``."""
        (cons1, dyn, e_cw_st, e_park_st, e_wb_st, e_wbn_st, e_yield_st, flush, pf_bad, pf_c, pf_go,
         pf_more, pf_q, pf_v, qpn, set_hit, set_q) = (
            t.cons1, t.dyn, t.e_cw_st, t.e_park_st, t.e_wb_st, t.e_wbn_st, t.e_yield_st, t.flush,
            t.pf_bad, t.pf_c, t.pf_go, t.pf_more, t.pf_q, t.pf_v, t.qpn, t.set_hit, t.set_q)

        def prefetch():
            with m.If(~pf_v & ~flush & ~dyn.err & pf_more):
                m.d.comb += [pf_go.eq(1), self.wqe_rd.req.valid.eq(1)]
                with m.If(self.wqe_rd.req.ready):
                    m.d.sync += [pf_v.eq(1), pf_q.eq(qpn), pf_c.eq(cons1), pf_bad.eq(0)]

        def go(state):
            # into a state that writes the QP back: e_wb_st, and the state's own flag
            m.next = state
            m.d.sync += e_wb_st.eq(1)
            flag = {"YIELD": e_yield_st, "PARK": e_park_st, "WB_NEXT": e_wbn_st}.get(state)
            if flag is not None:
                m.d.sync += flag.eq(1)

        m.d.sync += [e_wb_st.eq(0), e_yield_st.eq(0), e_park_st.eq(0), e_wbn_st.eq(0),
                     e_cw_st.eq(0), t.pf_cw.eq(0), t.cw_new.eq(0)]
        with m.FSM(name="engine") as eng_fsm:
            self._engine_load_states(m, t)
            self._engine_check_states(m, t, go)
            # WQE_REQ … WB_NEXT: one WQE fetched, checked and sent
            self._engine_wqe(m, t, go, prefetch)
            self._engine_end_states(m, t, go)
        self._engine_wqe_words(m, t, eng_fsm)
        self._engine_wqe_addr(m, t, eng_fsm)
        # the resume point, loaded in every CHECK (the enable is the state, not the decision):
        # only the WQE that CHECK starts uses it (LOOKUP, SKIP, PKT), and every way to those
        # states passes a CHECK that starts a WQE last
        with m.If(eng_fsm.ongoing("CHECK")):
            m.d.sync += [t.fpsn_r.eq(Mux(dyn.part, dyn.fpsn, dyn.psn)),
                         t.skipn.eq(Mux(dyn.part, dyn.psn - dyn.fpsn, 0)),
                         t.skip0.eq(~dyn.part | (dyn.psn == dyn.fpsn))]

        # the answer to an early lookup, taken in any state once VALIDATE has run (LOOKUP makes
        # no lookup while one is outstanding, so it is the next answer): dropped, or used by
        # LK_WAIT, which takes it in the same cycle
        with m.If(t.lk_drop):
            m.d.comb += self.lookup.resp.ready.eq(1)
            with m.If(self.lookup.resp.valid):
                m.d.sync += [t.lk_drop.eq(0), t.lk_out.eq(0)]
        m.d.sync += t.op_rd_r.eq(t.wop == _WOP_READ)
        # a prefetch made unusable (CHECK_WAIT's read of a WQE not posted, a SET_QP) is drained
        # while the engine is idle, not only by the next WQE_REQ: from the cycle after an IDLE
        # cycle that found it so to the cycle after the last IDLE one (``rd_dr``; only this
        # prefetch's beats can come meanwhile: no read is issued before CHECK_WAIT)
        rsp = self.wqe_rd.resp
        dr_last = t.rd_dr & rsp.valid & rsp.payload.last
        m.d.sync += t.rd_dr.eq(pf_v & pf_bad & t.e_idle & ~dr_last)
        with m.If(dr_last):
            m.d.sync += pf_v.eq(0)
        # the responses are taken in WQE_DATA and PF_DRAIN and by the drain above: ``ready``
        # is one LUT of flip-flops (the FSM is one-hot)
        m.d.comb += rsp.ready.eq(eng_fsm.ongoing("WQE_DATA") | eng_fsm.ongoing("PF_DRAIN")
                                 | t.rd_dr)
        # (the engine's QP or the prefetched one: a prefetch being issued is for qpn)
        with m.If(set_hit & ((set_q == qpn) | (set_q == pf_q))):
            m.d.sync += pf_bad.eq(1)
        return types.SimpleNamespace(eng_fsm=eng_fsm)

    def _engine_wqe_words(self, m, t, eng_fsm):
        """The words the WQE RAM's ports read (:meth:`_engine_wqe_store`). Port A: SGE k's address
        for a lookup (WQE_DATA, LOOKUP), the gather set-up's SGE address (LOOKUP once k =
        num_sge: SGE 0's, or SGE 1's when SGE 0 is empty; SKIP3, a READ's remote address there;
        SGE 1's in CHUNK), SGE 0's for the READ slot (PKT). Port B: SGE k's length/lkey word,
        SGE 1's address in PKT, wr_id (WB_NEXT, ERR). Which word port A reads (``a6``: SGE 1's,
        ``a7`` clear: the remote address's) is registers set the cycle before, from the state
        and ``k`` the next cycle will have: port A's address is flip-flops, port B's one LUT
        from them."""
        k, num_sge, sge_len, len_z = t.k, t.num_sge, t.sge_len, t.len_z
        on = eng_fsm.ongoing
        # SGE 1's address is the one port A reads in LOOKUP, by k (registered: LOOKUP is two
        # cycles after the WQE's last beat at the earliest): k = 0 the set-up when num_sge = 0;
        # k = 1 SGE 1's lookup, or the set-up when num_sge = 1; k = 2 the set-up; the set-up
        # from SGE 1 when SGE 0 is empty
        lk6 = Signal(3)
        z0 = sge_len[0] == 0
        m.d.sync += lk6.eq(Cat(num_sge == 0, Mux(num_sge == 1, z0, 1), z0))
        a6 = Signal()
        a7 = Signal(init=1)             # 0: the remote address's word (a READ's SKIP3)
        sel0 = Mux(k[1], lk6[2], Mux(k[0], lk6[1], lk6[0]))      # LOOKUP at k
        sel1 = Mux(k[0], lk6[2], lk6[1])                          # LOOKUP at k + 1 (k < 2)
        m.d.sync += a7.eq(~(on("SKIP2") & t.is_rd))
        with m.If(on("SKIP2")):
            # SKIP3: SGE 1 unless sk_lt (SKIP follows num_sge ≠ 0, so len0 is SGE 0's); a
            # READ's remote address (word 2)
            m.d.sync += a6.eq(~(t.soff[:32] < sge_len[0]) | t.is_rd)
        with m.Elif(on("VALIDATE")):
            m.d.sync += a6.eq(num_sge == 0)                       # LOOKUP at k = 0
        with m.Elif(on("LOOKUP")):
            # k steps past an empty SGE, else stays (LOOKUP's other ways out need no word)
            m.d.sync += a6.eq(Mux(Mux(k[0], len_z[1], len_z[0]), sel1, sel0))
        with m.Elif(on("LK_WAIT")):
            m.d.sync += a6.eq(sel1)                               # back to LOOKUP at k + 1
        with m.Elif(on("PKT") | on("CHUNK")):
            m.d.sync += a6.eq(~t.is_rd)                           # CHUNK: SGE 1; PKT: SGE 0
        with m.Else():
            m.d.sync += a6.eq(0)                                  # WQE_DATA: SGE 0
        wr = on("WB_NEXT") | on("ERR")                            # wr_id: word 0
        m.d.comb += [t.wqe_a.eq(Cat(Const(0, 1), a6, a7)),
                     t.wqe_b.eq(Cat(~on("PKT") & ~wr, (on("PKT") | k[0]) & ~wr, ~wr))]

    def _engine_wqe_addr(self, m, t, eng_fsm):
        """The WQE read's address, sq_base + (index mod 2^sq_log) · 64, driven from registers
        (the AXI master's page arithmetic follows it): the offset's bits 12..21 and address bits
        6..11 with their carry are registered from what the next cycle's read uses, so address
        bits 0..11 are flip-flops and bits 12..63 one adder of flip-flops. The index is cons
        (CHECK_WAIT, CHECK, WQE_REQ: cons does not change in the cycle before them, and
        CHECK_WAIT's read after a load takes the loaded context and cons from CTX_WAIT), or
        cons + 1 from WQE_DATA to CHUNK (the prefetch in PKT and CHUNK)."""
        on = eng_fsm.ongoing
        ctx, dyn, cr = t.ctx, t.dyn, self.ctx_resp.payload
        load = on("CTX_WAIT")
        nxt = Cat(*(on(s) for s in ("WQE_DATA", "VALIDATE", "LOOKUP", "LK_WAIT", "SKIP",
                                    "SKIP2", "SKIP3", "SKIP4", "RD_PREP", "RD_PREP2", "PKT",
                                    "CHUNK"))).any()
        # each index's offset and low sum made beside the others, the state's choice last
        offs = [Signal(16, name=f"wqe_off_{n}") for n in ("ld", "c", "c1")]
        m.d.comb += [offs[0].eq(t.dyn_rd.cons & t.cr_mask), offs[1].eq(dyn.cons & t.sq_mask),
                     offs[2].eq(t.cons1 & t.sq_mask)]
        los = [b[6:12] + o[:6] for b, o in zip((cr.sq_base, ctx.sq_base, ctx.sq_base), offs)]
        wa_lo = Signal(7, name="wqe_a_lo")         # address bits 6..11, the carry into 12
        wa_hi = Signal(10, name="wqe_a_hi")        # the offset's bits 12..21
        m.d.sync += [wa_lo.eq(Mux(load, los[0], Mux(nxt, los[2], los[1]))),
                     wa_hi.eq(Mux(load, offs[0][6:], Mux(nxt, offs[2][6:], offs[1][6:])))]
        m.d.comb += self.wqe_rd.req.payload.addr.eq(
            Cat(ctx.sq_base[:6], wa_lo[:6], ctx.sq_base[12:] + wa_hi + wa_lo[6]))

    def _engine_load_states(self, m, t):
        """IDLE … CTX_WAIT, in the engine's FSM: take a QPN from the work queue, ask for its context
        and load it with ``dyn`` and ``rn``."""
        (ctx, dyn, dyn_rd, e_cw_st, e_hit1, ern, pend_err, qpn, rn_rd, served, sweeping, work) = (
            t.ctx, t.dyn, t.dyn_rd, t.e_cw_st, t.e_hit1, t.ern, t.pend_err, t.qpn, t.rn_rd,
            t.served, t.sweeping, t.work)
        with m.State("IDLE"):
            # (prod is read at the queue's head here: see e_idle)
            # (no load while the completer reads again: see c_again)
            m.d.comb += [work.o.ready.eq(~sweeping & ~t.c_again), t.e_idle.eq(1)]
            m.d.sync += pend_err.eq(0)
            with m.If(work.o.valid & ~sweeping & ~t.c_again):
                m.d.sync += [qpn.eq(work.o.payload), served.eq(0), t.e_steal.eq(1)]
                m.next = "CTX"
        with m.State("CTX"):
            # the table reads of the new QPN are on the read ports from the next cycle on,
            # when the context's answer comes at the earliest
            m.d.comb += [self.ctx_req.valid.eq(1), self.busy.eq(1)]
            with m.If(self.ctx_req.ready):
                m.next = "CTX_WAIT"
        with m.State("CTX_WAIT"):
            # (dyn_rd from a read that met a write to the QP's row: wait for the next; cs
            # likewise, which does not take the read of comp_mem that met one, and holds
            # another QP's row until the first read of this one)
            # (ctx, dyn and ern load in every cycle of CTX_WAIT, so that their enables are the
            # state alone; the last load is the one taken: nothing reads them before CHECK_WAIT)
            m.d.comb += [self.ctx_resp.ready.eq(~e_hit1 & ~t.ce_hit_r & t.steal_rr),
                         self.busy.eq(1)]
            m.d.sync += [ctx.eq(self.ctx_resp.payload), dyn.parked.eq(0), ern.eq(rn_rd),
                         t.sq_mask.eq(t.cr_mask)]
            m.d.sync += [dyn[name].eq(dyn_rd[name]) for name, _ in _dyn_engine_layout]
            with m.If(self.ctx_resp.valid & ~e_hit1 & ~t.ce_hit_r & t.steal_rr):
                m.d.sync += [e_cw_st.eq(1), t.cw_new.eq(1), t.e_steal.eq(0)]
                m.next = "CHECK_WAIT"

    def _engine_check_states(self, m, t, go):
        """CHECK and the states it leaves the QP by, in the engine's FSM: CHECK decides (rewind,
        error and flush, window, round-robin, the next WQE), REWIND goes back to the oldest
        unacknowledged PSN, KILL hands an ERROR QP's unacknowledged WQEs to the completer, YIELD
        and PARK leave the QP."""
        (beat, cons_eq_prod, cs, ctx, dyn, flush, fpsn_r, hfault, kill_q, kill_v, none_unretired,
         pend_err, pstat, qpn, rewind, ring_ok, served, skip0, skipn, slot_room, wake_v, work) = (
            t.beat, t.cons_eq_prod, t.cs, t.ctx, t.dyn, t.flush, t.fpsn_r, t.hfault, t.kill_q,
            t.kill_v, t.none_unretired, t.pend_err, t.pstat, t.qpn, t.rewind, t.ring_ok, t.served,
            t.skip0, t.skipn, t.slot_room, t.wake_v, t.work)
        with m.State("CHECK"):
            m.d.comb += self.busy.eq(1)
            with m.If(t.pf_cw & cons_eq_prod):
                m.d.sync += t.pf_bad.eq(1)        # (CHECK_WAIT's read of a WQE not posted)
            with m.If(rewind):
                m.next = "REWIND"
            with m.Elif(pend_err):
                # the completer ended the QP at WQE cons: its error, then the flush
                with m.If(cons_eq_prod):
                    m.d.sync += [dyn.err.eq(1), pend_err.eq(0)]
                    go("WB_LOOP")
                with m.Else():
                    m.d.sync += [flush.eq(0), beat.eq(0), hfault.eq(0)]
                    m.next = "WQE_REQ"
            with m.Elif(dyn.err):
                # flush posted WQEs with WR_FLUSH_ERR
                with m.If(cons_eq_prod):
                    go("WB")
                with m.Else():
                    m.d.sync += [flush.eq(1), beat.eq(0), hfault.eq(0)]
                    m.next = "WQE_REQ"
            with m.Elif(t.c_err):
                with m.If(none_unretired):
                    with m.If(cons_eq_prod):
                        go("WB")
                    with m.Else():
                        m.d.sync += [flush.eq(1), dyn.err.eq(1), beat.eq(0), hfault.eq(0)]
                        m.next = "WQE_REQ"
                with m.Elif(t.c_end):
                    go("WB")             # the completer has ended it: wait its rewind
                with m.Else():
                    m.next = "KILL"           # WQEs sent and unacknowledged: flush them too
            with m.Elif(cons_eq_prod):
                go("WB")
            with m.Elif(t.c_off):
                go("WB")                 # (the completer wakes the QP after RNR)
            with m.Elif(served & t.wq_v):
                go("YIELD")              # other QPs wait: round-robin, one WQE each
            with m.Elif(slot_room & ring_ok):
                m.d.sync += [flush.eq(0), beat.eq(0), hfault.eq(0)]
                # WQE_REQ's work done here for the usual cases: the WQE already asked for,
                # or its read issued now (a prefetch of another WQE: WQE_REQ drains it)
                with m.If(t.pf_hit):
                    m.d.sync += t.pf_v.eq(0)
                    m.next = "WQE_DATA"
                with m.Elif(~t.pf_v):
                    m.d.comb += self.wqe_rd.req.valid.eq(1)
                    with m.If(self.wqe_rd.req.ready):
                        m.next = "WQE_DATA"
                    with m.Else():
                        m.next = "WQE_REQ"
                with m.Else():
                    m.next = "WQE_REQ"
            with m.Else():
                # 16 WQEs unretired, or the ring full: wait for ACKs elsewhere (the scan
                # wakes parked QPs when the work queue is empty)
                go("PARK")
        with m.State("REWIND"):
            # go back to the oldest unacknowledged PSN (go-back-N)
            m.d.comb += self.busy.eq(1)
            m.d.sync += dyn.rgen.eq(cs.rgen)
            with m.If(~dyn.err):
                m.d.sync += [dyn.cons.eq(cs.ccons), dyn.psn.eq(cs.una),
                             dyn.part.eq(cs.una != cs.cfpsn), dyn.fpsn.eq(cs.cfpsn),
                             dyn.noack.eq(0)]
                with m.If(cs.rerr != 0):
                    m.d.sync += [pend_err.eq(1), pstat.eq(_rstatus(cs.rerr))]
            go("WB_LOOP")
        with m.State("KILL"):
            # never waits for the completer: with a kill already pending, the scan wakes
            # this parked QP again later
            m.d.comb += self.busy.eq(1)
            with m.If(~kill_v):
                m.d.sync += [kill_v.eq(1), kill_q.eq(qpn)]
            go("PARK")
        with m.State("YIELD"):
            # write the QP back (not parked) and queue it again behind the others; when the
            # queue cannot take it this cycle, serve one more WQE of it instead
            m.d.comb += self.busy.eq(1)
            with m.If(work.i.ready & ~wake_v):
                m.next = "IDLE"
            with m.Else():
                m.d.sync += served.eq(0)
                m.next = "CHECK"
        with m.State("PARK"):
            m.d.comb += self.busy.eq(1)
            m.next = "IDLE"

    def _engine_wqe(self, m, t, go, prefetch):
        """The engine's states for one WQE, in its FSM (between PARK and CHECK_WAIT): fetch it (or
        take the prefetched one), validate it, look its SGEs up in the Key Cache, find the packet to
        resume at, hand its packets and their chunks over, and record it for the completer
        (WB_NEXT), in the parts :meth:`_engine_fetch_states`, :meth:`_engine_start_states` and
        :meth:`_engine_send_states`. ``go`` enters a state that writes the QP back, ``prefetch``
        issues the read of the next WQE (both :meth:`_engine`'s)."""
        self._engine_fetch_states(m, t, go)
        self._engine_start_states(m, t, go)
        self._engine_send_states(m, t, go, prefetch)

    def _engine_fetch_states(self, m, t, go):
        """WQE_REQ … VALIDATE, in the engine's FSM: fetch the WQE (or take the prefetched one, or
        drain one it cannot use) and validate it."""
        (alloc_r, beat, flush, hfault, k, len_sum, nb, num_sge, pend_err, pf_hit, pf_v, pstat,
         resid, sent, status, total, wop) = (
            t.alloc_r, t.beat, t.flush, t.hfault, t.k, t.len_sum, t.nb, t.num_sge, t.pend_err,
            t.pf_hit, t.pf_v, t.pstat, t.resid, t.sent, t.status, t.total, t.wop)
        with m.State("WQE_REQ"):
            m.d.comb += self.busy.eq(1)
            with m.If(pf_hit):
                m.d.sync += pf_v.eq(0)
                m.next = "WQE_DATA"           # already asked for
            with m.Elif(pf_v):
                m.next = "PF_DRAIN"           # a prefetch this WQE cannot use
            with m.Else():
                m.d.comb += self.wqe_rd.req.valid.eq(1)
                with m.If(self.wqe_rd.req.ready):
                    m.next = "WQE_DATA"
        with m.State("PF_DRAIN"):
            m.d.comb += self.busy.eq(1)
            with m.If(self.wqe_rd.resp.valid & self.wqe_rd.resp.payload.last):
                m.d.sync += pf_v.eq(0)
                m.next = "WQE_REQ"
        with m.State("WQE_DATA"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += k.eq(0)
            self._early_lookup(m, t)
            with m.If(self.wqe_rd.resp.valid):
                m.d.comb += t.wqe_take.eq(1)
                if nb != 64:
                    m.d.sync += beat.eq(beat + 1)
                with m.If(self.wqe_rd.resp.payload.err):
                    m.d.sync += hfault.eq(1)
                with m.If(self.wqe_rd.resp.payload.last):
                    m.next = "VALIDATE"
        with m.State("VALIDATE"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += [k.eq(0), sent.eq(0), total.eq(len_sum), resid.eq(len_sum),
                         t.is_rd.eq(t.op_rdc)]
            if self.read:
                # (a READ sets it in RD_PREP: every other WQE's packets take one PSN each)
                m.d.sync += t.rd_l.eq(0)
            # (the early lookup's answer is taken by the drop below from now on, by LK_WAIT
            # too when the WQE goes on there: every other branch leaves the WQE)
            m.d.sync += t.lk_drop.eq(t.lk_out)
            with m.If(flush):
                m.d.sync += status.eq(int(WcStatus.WR_FLUSH_ERR))
                m.next = "ERR"
            with m.Elif(pend_err):
                m.d.sync += status.eq(pstat)
                m.next = "ERR"
            with m.Elif(hfault):
                m.d.sync += status.eq(0)
                m.next = "ERR"
            with m.Elif(t.op_bad):
                m.d.sync += status.eq(int(WcStatus.LOC_QP_OP_ERR))
                m.next = "ERR"
            with m.Elif(t.op_rdc & alloc_r & ~(t.rslot_ok & t.ord_ok)):
                # a new READ beyond ORD, or no READ slot free: wait (the completer wakes the QP
                # when it retires a READ, the scan otherwise); the WQE is fetched again
                go("PARK")
            with m.Else():
                with m.If(t.lk_out & ~t.lk_drop):
                    m.next = "LK_WAIT"            # SGE 0's lookup was made in WQE_DATA
                with m.Else():
                    m.next = "LOOKUP"

    def _early_lookup(self, m, t):
        """In WQE_DATA, at W = 64: SGE 0's Key Cache lookup made as soon as its beat and the
        opcode's are in (bytes 8..47, a cycle later through the registered checks), before the
        WQE's last beat, when nothing known yet stops the WQE (``lk_out``; VALIDATE then goes to
        LK_WAIT, or drops the answer when the WQE goes no further: ``lk_drop``)."""
        idx = 47 // t.nb                # the beat that holds byte 47 (SGE 0's lkey)
        if idx + 2 >= 64 // t.nb:
            return                      # (it would come with VALIDATE: nothing to gain)
        beat = t.beat
        b_ok = Signal()                 # SGE 0's beat was in a cycle ago (registered)
        pre_ok = Signal()               # the WQE would look SGE 0 up (registered)
        m.d.sync += [b_ok.eq(beat > idx),
                     pre_ok.eq((t.wop <= _WOP_READ) & (t.num_sge != 0)
                               & (t.num_sge <= 2) & (t.sge_len[0] != 0))]
        with m.If(b_ok & (beat > idx) & pre_ok & ~t.lk_out & ~t.flush & ~t.pend_err
                  & ~t.hfault):
            m.d.comb += self.lookup.req.valid.eq(1)
            with m.If(self.lookup.req.ready):
                m.d.sync += t.lk_out.eq(1)

    def _engine_start_states(self, m, t, go):
        """LOOKUP … RD_PREP2, in the engine's FSM: look the WQE's SGEs up in the Key Cache, find the
        packet to resume at (SKIP … SKIP4) and, for a READ, the request's VA and PSNs."""
        (ctx, cur_addr, k, len0, len0_nz, num_sge, resid, seg_left, sent, sge_len, sk_lt,
         skip0, skipn, soff, status, total, wqe_ad) = (
            t.ctx, t.cur_addr, t.k, t.len0, t.len0_nz, t.num_sge, t.resid, t.seg_left,
            t.sent, t.sge_len, t.sk_lt, t.skip0, t.skipn, t.soff, t.status, t.total, t.wqe_ad)
        len_z = t.len_z
        with m.State("LOOKUP"):
            m.d.comb += self.busy.eq(1)
            with m.If(t.k_end & skip0):
                # from the first packet (the usual case): gather from the first non-empty SGE
                m.d.sync += [sent.eq(0), resid.eq(total)]
                m.d.sync += cur_addr.eq(wqe_ad)
                with m.If(len0_nz):
                    m.d.sync += seg_left.eq(len0)
                with m.Else():
                    m.d.sync += seg_left.eq(total)
                m.next = "PKT"
                with m.If(t.is_rd):
                    m.next = "RD_PREP"
            with m.Elif(t.k_end):
                m.next = "SKIP"
            with m.Elif(Mux(k[0], len_z[1], len_z[0])):
                m.d.sync += k.eq(k + 1)
            with m.Elif(~t.lk_out):              # (an answer to drop comes first)
                m.d.comb += self.lookup.req.valid.eq(1)
                with m.If(self.lookup.req.ready):
                    m.next = "LK_WAIT"
        with m.State("LK_WAIT"):
            # SGE k's word takes the answer's bus address in every cycle here (nothing reads it
            # here): its write enable is the state, not the Key Cache's valid and ok
            m.d.comb += [self.lookup.resp.ready.eq(1), self.busy.eq(1), t.wqe_bus.eq(1)]
            with m.If(self.lookup.resp.valid):
                m.d.sync += t.lk_out.eq(0)
                with m.If(self.lookup.resp.payload.ok):
                    m.d.sync += k.eq(k + 1)
                    m.next = "LOOKUP"
                    with m.If((k == 0) & ~t.sge2_r & skip0 & ~t.is_rd):
                        # the one SGE of a message sent from its first packet: LOOKUP's
                        # gather set-up here (sent and resid are VALIDATE's)
                        m.d.sync += [cur_addr.eq(self.lookup.resp.payload.bus_addr),
                                     seg_left.eq(len0)]
                        m.next = "PKT"
                with m.Else():
                    m.d.sync += status.eq(int(WcStatus.LOC_PROT_ERR))
                    m.next = "ERR"
        with m.State("SKIP"):
            # byte offset of the first packet to send: skipn whole PMTUs
            m.d.comb += self.busy.eq(1)
            m.d.sync += cur_addr.eq(skipn << (ctx.pmtu + 7))        # (soff)
            m.next = "SKIP2"
        with m.State("SKIP2"):
            # gather from SGE 0 at soff, or from SGE 1 at soff − len0: that offset in skoff,
            # the SGE's address read into cur_addr next cycle and the offset added after it (so
            # the WQE RAM's read and the 64-bit add are in cycles of their own)
            # (the choices by sk_lt in SKIP3; num_sge = 0 makes total = 0 ≤ soff: l0 unused).
            # A READ gathers nothing: its request's VA, the remote address + soff, is made
            # here instead (port A reads the remote address in SKIP3, sk_lt set: skoff = soff)
            m.d.comb += self.busy.eq(1)
            lt = soff[:32] < (l0 := sge_len[0])
            m.d.sync += [sent.eq(soff[:32]), resid.eq(total - soff[:32]),
                         sk_lt.eq(lt | t.is_rd),
                         t.skoff.eq(soff[:32] - l0)]
            with m.If(~skip0 & (soff >= total)):
                go("WB_NEXT")            # every packet of it was already sent
            with m.Else():
                m.next = "SKIP3"
        with m.State("SKIP3"):
            m.d.comb += self.busy.eq(1)
            with m.If(sk_lt):                           # (cur_addr before this cycle's write)
                m.d.sync += [t.skoff.eq(soff[:32]), seg_left.eq(-t.skoff)]     # len0 − soff
            with m.Else():
                m.d.sync += seg_left.eq(resid)          # total − soff
            m.d.sync += cur_addr.eq(wqe_ad)
            m.next = "SKIP4"
        with m.State("SKIP4"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += cur_addr.eq(t.cur_plus(t.skoff, "skoff"))
            m.next = "PKT"
            with m.If(t.is_rd):
                m.next = "RD_PREP"
        self._engine_read_states(m, t)

    def _engine_read_states(self, m, t):
        """RD_PREP and RD_PREP2, in the engine's FSM: a READ request's VA and PSN count."""
        ctx, cur_addr, resid = t.ctx, t.cur_addr, t.resid
        rd_sh = Signal(3)               # shifts of rd_l still to make (RD_PREP2)
        with m.State("RD_PREP"):
            # a READ request for the bytes from ``sent`` on (all of them, or the rest after the
            # responses already placed): its VA, and the PSNs it takes, max(1, ⌈resid/PMTU⌉)
            m.d.comb += self.busy.eq(1)
            # (the VA: rd_va holds the WQE's remote address, WQE_DATA took it, which is the VA
            # from the first packet (skip0: LOOKUP came here, sent = 0); from SKIP4, cur_addr
            # holds the remote address + sent)
            with m.If(~t.skip0):
                m.d.sync += t.rd_va.eq(cur_addr)
            # (the PSNs less one, max(1, ⌈resid/PMTU⌉) − 1: (max(resid, 1) − 1) / 256 here,
            # which is resid / 256 less one when resid is a non-zero multiple of 256, then
            # shifted right one bit a cycle in RD_PREP2, code − 1 times for PMTU 128 << code,
            # rather than through a barrel shifter: a READ request is one packet)
            # (resid − 1 made beside resid = 0, not after a decode of it)
            rd_m1 = Signal(32)
            m.d.comb += rd_m1.eq(resid - 1)
            m.d.sync += [t.rd_l.eq(Mux(resid == 0, 0, rd_m1[8:32])),
                         rd_sh.eq(Mux((ctx.pmtu >= 2) & (ctx.pmtu <= 5), ctx.pmtu - 1, 0))]
            m.next = "RD_PREP2"
        with m.State("RD_PREP2"):
            m.d.comb += self.busy.eq(1)
            with m.If(rd_sh != 0):
                m.d.sync += [t.rd_l.eq(t.rd_l >> 1), rd_sh.eq(rd_sh - 1)]
            with m.Else():
                m.next = "PKT"

    def _engine_send_states(self, m, t, go, prefetch):
        """PKT, CHUNK and WB_NEXT, in the engine's FSM: hand each packet of the WQE and its gather
        chunks over (prefetching the next WQE meanwhile), then record the WQE in the in-flight
        ring and write the QP back."""
        (D, ackreq, alloc_r, clen, cons1, cs, cur_addr, dyn, e_cw_st, eng_rn, ern, fits,
         fpsn_r, free, fresh, infl_wp, left, len1, new_rn, pay, pkt_end, pmtu_b, psn_room, resid,
         rewind, seg_end, seg_left, sent, served, was_last) = (
            t.D, t.ackreq, t.alloc_r, t.clen, t.cons1, t.cs, t.cur_addr, t.dyn, t.e_cw_st,
            t.eng_rn, t.ern, t.fits, t.fpsn_r, t.free, t.fresh, t.infl_wp, t.left, t.len1, t.new_rn,
            t.pay, t.pkt_end, t.pmtu_b, t.psn_room, t.resid, t.rewind, t.seg_end, t.seg_left,
            t.sent, t.served, t.was_last)
        with m.State("PKT"):
            m.d.comb += self.busy.eq(1)
            prefetch()
            with m.If(rewind):
                m.next = "REWIND"             # abandon this WQE
            with m.Elif(cs.hold | ~psn_room):
                # leave the QP; it resumes at this packet of this WQE
                m.d.sync += [dyn.part.eq(dyn.psn != fpsn_r), dyn.fpsn.eq(fpsn_r)]
                go("PARK")
            with m.Else():
                m.d.comb += self.pkt.valid.eq(1)
                with m.If(self.pkt.ready):
                    retx = (dyn.psn - dyn.hpsn)[23]
                    m.d.comb += self.retx.eq(retx)
                    # the next PSN: + 1, + rd_l + 1 for a READ request (rd_l is 0 for every
                    # other WQE, from VALIDATE on; one adder, the + 1 as both operands'
                    # carry-in bit)
                    psn_n = ((Cat(Const(1, 1), dyn.psn) + Cat(Const(1, 1), t.rd_l))[1:25]
                             if self.read else dyn.psn + 1)
                    with m.If(~retx):
                        m.d.sync += dyn.hpsn.eq(psn_n)
                    # seg_left < pay and seg_left ≤ pay: both compares beside ``fits``
                    c_lt = Mux(fits, seg_left < resid, seg_left < pmtu_b)
                    c_le = Mux(fits, seg_left <= resid, seg_left <= pmtu_b)
                    m.d.sync += [
                        left.eq(pay), t.left_z.eq(pay == 0), sent.eq(sent + pay),
                        resid.eq(resid - pay),
                        clen.eq(Mux(c_lt, seg_left, pay)),      # min(seg_left, pay)
                        pkt_end.eq(~c_lt), seg_end.eq(c_le),
                        was_last.eq(fits),
                        dyn.psn.eq(psn_n),
                        dyn.noack.eq(Mux(ackreq, 0, dyn.noack + 1)),
                    ]
                    m.next = "CHUNK"
                    with m.If(t.is_rd):
                        self._engine_read_request(m, t)
        with m.State("CHUNK"):
            m.d.comb += self.busy.eq(1)
            prefetch()
            with m.If(t.left_z):
                with m.If(was_last):
                    go("WB_NEXT")
                with m.Else():
                    m.next = "PKT"
            with m.Else():
                m.d.comb += self.chunk.valid.eq(1)
                with m.If(self.chunk.ready):
                    left_n = Signal(13)
                    m.d.comb += left_n.eq(left - clen)
                    # the next chunk when the packet goes on (then clen was seg_left, SGE 0
                    # ends inside the packet, and the rest of the packet is in SGE 1, whose
                    # len1 = total − len0 bytes all follow: min(len1, left_n) = left_n)
                    # (its pkt_end, and its seg_end 0: SGE 1 ends with the message, so if
                    # it ends in this chunk, the WQE does, and cur_addr and seg_left are
                    # not used after it; left_n = 0 exactly when pkt_end)
                    m.d.sync += [left.eq(left_n), t.left_z.eq(pkt_end), clen.eq(left_n),
                                 pkt_end.eq(1), seg_end.eq(0)]
                    with m.If(pkt_end):                     # the packet's last chunk
                        with m.If(was_last):
                            go("WB_NEXT")
                        with m.Else():
                            m.next = "PKT"
                    with m.If(seg_end):                    # SGE 0 done: on to SGE 1
                        m.d.sync += [cur_addr.eq(t.wqe_ad), seg_left.eq(len1)]
                    with m.Else():
                        m.d.sync += [cur_addr.eq(t.cur_plus(clen, "clen")),
                                     seg_left.eq(seg_left - clen)]
        with m.State("WB_NEXT"):
            # record the WQE for the ACK processor, write back, look at the producer again
            # (a WQE sent again is in the ring already: cons < hcons)
            alloc = alloc_r
            hnext = Mux(alloc, cons1, dyn.hcons)
            m.d.comb += self.busy.eq(1)
            with m.If(alloc):
                m.d.comb += [infl_wp.en.eq(1), eng_rn.eq(new_rn)]
                m.d.sync += ern.eq(new_rn)
                with m.If(fresh != D):
                    m.d.sync += fresh.eq(fresh + 1)
                with m.Else():
                    m.d.comb += free.o.ready.eq(1)
            m.d.sync += [dyn.cons.eq(cons1), dyn.part.eq(0), dyn.hcons.eq(hnext),
                         dyn.rds.eq(dyn.rds + (alloc & t.is_rd)), served.eq(1), e_cw_st.eq(1)]
            m.next = "CHECK_WAIT"

    def _engine_read_request(self, m, t):
        """PKT's transfer of a READ request: one request, no payload (its rd_l + 1 PSNs are
        PKT's next PSN); a new READ takes a slot."""
        m.d.sync += [t.left.eq(0), t.left_z.eq(1), t.was_last.eq(1)]
        with m.If(t.alloc_r):
            m.d.comb += self.read_rec.valid.eq(1)
            m.d.sync += t.e_ri.eq(t.new_ri)
            with m.If(t.rfresh != t.R):
                m.d.sync += t.rfresh.eq(t.rfresh + 1)
            with m.Else():
                m.d.sync += t.rf_pop.eq(1)

    def _engine_end_states(self, m, t, go):
        """The engine's states after a WQE or a decision, in its FSM: CHECK_WAIT (the reads see the
        new ``dyn``), ERR (a WQE's error or flush completion, in SQ order), WB_LOOP and WB (the
        write-back, on to CHECK again or to IDLE)."""
        (cfg_wp, dyn, e_cw_st, ecpl, eoff, none_unretired, pend_err, rgen_ne) = (
            t.cfg_wp, t.dyn, t.e_cw_st, t.ecpl, t.eoff, t.none_unretired, t.pend_err, t.rgen_ne)
        with m.State("CHECK_WAIT"):
            # one cycle for the registered reads and window flags to see the new dyn; the
            # completer's copy of the QP's timer settings (from ctx). On a new visit the read
            # of the WQE at cons is issued here, ahead of CHECK's decision (and of the
            # registered cons == prod): a read CHECK does not use waits as a prefetch of (qpn,
            # cons), used on a later visit or drained by WQE_REQ, as any other; CHECK marks it
            # unusable (pf_bad) when the SQ was empty, as its WQE may not be posted yet.
            m.d.comb += [self.busy.eq(1), cfg_wp.en.eq(1)]
            with m.If(t.cw_new & ~t.pf_v):
                m.d.comb += self.wqe_rd.req.valid.eq(1)
                with m.If(self.wqe_rd.req.ready):
                    m.d.sync += [t.pf_v.eq(1), t.pf_q.eq(t.qpn), t.pf_c.eq(dyn.cons),
                                 t.pf_bad.eq(0), t.pf_cw.eq(1)]
            m.next = "CHECK"
        with m.State("ERR"):
            # completions stay in SQ order: wait until every earlier WQE is retired. Once
            # offered, the completion stays offered until taken (``eoff``), whatever
            # rgen_ne or none_unretired do meanwhile: it is handed over exactly once.
            m.d.comb += self.busy.eq(1)
            with m.If(eoff | (~(rgen_ne & ~pend_err)
                              & (pend_err | dyn.err | none_unretired))):
                m.d.comb += ecpl.valid.eq(1)
                with m.If(ecpl.ready):
                    m.d.sync += [dyn.err.eq(1), dyn.cons.eq(dyn.cons + 1), pend_err.eq(0),
                                 eoff.eq(0)]
                    go("WB_LOOP")
                with m.Else():
                    m.d.sync += eoff.eq(1)
            with m.Elif(rgen_ne & ~pend_err):
                m.next = "REWIND"
            with m.Else():
                go("PARK")               # the WQE is fetched again on the wake-up
        with m.State("WB_LOOP"):
            m.d.comb += self.busy.eq(1)
            m.d.sync += e_cw_st.eq(1)
            m.next = "CHECK_WAIT"
        with m.State("WB"):
            m.d.comb += self.busy.eq(1)
            m.next = "IDLE"

    def _completer(self, m, t):
        """The completer (the Reliability Engine: ACKs, NAKs, timers, completions; see the module
        docstring), its registers: the scan's read pipeline, its table reads registered
        (``c_hit*``: a read met a write), the timeouts looked up; what it judges from them is
        :meth:`_completer_judge`'s. Adds what :meth:`_completer_fsm` and its parts use."""
        (TB, ab, aq, aq_qpn_r, c_wb_st, c_wb_st_r, cfg_rd_w, cmp_new, comp_rd2_w, comp_rp2,
         dyn_rd2_w, dyn_rp, e_cw_st, e_wb_st, infl_rp, rb, rh_rd_w, rn_rd2_w, set_hit, set_q,
         set_r, sweeping) = (
            t.TB, t.ab, t.aq, t.aq_qpn_r, t.c_wb_st, t.c_wb_st_r, t.cfg_rd_w, t.cmp_new,
            t.comp_rd2_w, t.comp_rp2, t.dyn_rd2_w, t.dyn_rp, t.e_cw_st, t.e_wb_st, t.infl_rp, t.rb,
            t.rh_rd_w, t.rn_rd2_w, t.set_hit, t.set_q, t.set_r, t.sweeping)
        # ---- completer: ACKs, NAKs, timers (the Reliability Engine) -----------------------------
        a = Signal(ack_layout)
        # a's syndrome decoded as it is taken (EVAL's choices from registers): the sequence
        # error NAK (0x60), an ACK (type 0), an RNR NAK (type 1), a READ's DECIDE record
        a_seq, a_ack, a_rnr, a_dec = Signal(), Signal(), Signal(), Signal()
        ev = Signal(2)
        act = Signal(3)
        ast = Signal(3)                 # status of an ending NAK (``_rcode``)
        sidx = Signal(ab)               # the scan's next QP
        scan_turn = Signal()
        # the scan's read pipeline (state SCAN): QP s1q's table reads are on the read ports'
        # outputs, s2q's in comp_rd/d_rd/cfg_rd (judged), s3q's in cmp/d/cfg: s3n it needs a
        # visit, s3w only a wake-up, s3g its reads met a write (read it again); s1st..s3st a
        # SET_QP wrote its entry in the read's cycle or after it (the reads are not
        # transparent)
        s1v, s2v, s3v, s3n, s3w, s3g = (Signal(name=f"s_{n}")
                                        for n in ("1v", "2v", "3v", "3n", "3w", "3g"))
        s1q, s2q, s3q = Signal(ab), Signal(ab), Signal(ab)
        s1st, s2st, s3st = Signal(), Signal(), Signal()
        sn = Signal(range(SCAN_QUOTA))  # QPs judged in this turn (saturating)
        stale = Signal()                # a SET_QP rewrote aq meanwhile: drop the write-back
        wake = Signal()
        wbw = Signal()                  # WAKE follows a write-back (cmp holds aq's row)
        cmp = Signal(_comp_layout)
        comp_rd = Signal(_comp_layout)
        d = Signal(_dyn_comp_layout)    # the engine's entry, as of LOAD
        d_rd = Signal(_dyn_comp_layout)
        cfg = Signal(_cfg_layout)
        cfg_rd = Signal(_cfg_layout)
        # the QP's timeout in µs + 1, looked up from cfg (each use is at least two cycles after
        # cfg is loaded: ACT, or EVAL after LOAD, see tsrc), and whether it has one (the + 1
        # of a deadline in the table, so that the deadline is one addition)
        tval = Signal(34)
        ton = cfg.timeout != 0
        rval = Signal(TB)               # the RNR NAK's wait in µs + 1
        crh = Signal(rb)                # the QP's rh: the entry of its WQE at ccons
        rh_rd, rn_rd2 = Signal(rb), Signal(rb)
        m.d.sync += [comp_rd.eq(comp_rd2_w), d_rd.eq(_pick(_dyn_comp_layout, dyn_rd2_w)),
                     cfg_rd.eq(cfg_rd_w),
                     rh_rd.eq(rh_rd_w), rn_rd2.eq(rn_rd2_w)]
        # The completer's copies are not read before write (no_rw_check): c_hit1 says the read
        # whose word is on their ports met a write to its row (a SET_QP's, the engine's
        # write-back or cfg write, the completer's own write-back, the sweep), c_hit2 the same
        # of the read in comp_rd, c_hit3 of the one before it. The engine's and the
        # completer's writes are taken from their state flags (a superset of the cycles they
        # write). The scan and the ACK judge from these first registers of the reads: the
        # block RAMs' outputs go straight into them.
        # (the SET_QP's handshake and the address compares registered apart, as for p_hit)
        c_hit1, c_hit2, c_hit3 = Signal(), Signal(), Signal()
        set_aq_r, e_st_r, sweep_r = Signal(), Signal(), Signal()
        m.d.sync += [set_aq_r.eq(set_q == aq), e_st_r.eq(e_wb_st | e_cw_st),
                     c_wb_st_r.eq(c_wb_st), sweep_r.eq(sweeping), c_hit2.eq(c_hit1),
                     c_hit3.eq(c_hit2)]
        # (steal_r: the engine's reads are on the ports, see _engine_comp_view; of another
        # QP's row only: a read of the engine's own QP is the completer's as well. Otherwise a
        # completer on the engine's QP, which the engine visits again and again (doorbells
        # keeping the work queue full of it), would meet a steal or an engine write in every
        # pair of cycles, and read again forever.)
        m.d.comb += c_hit1.eq((set_r & set_aq_r) | (e_st_r & aq_qpn_r) | c_wb_st_r | sweep_r
                              | (t.steal_r & ~aq_qpn_r))
        # tval two cycles after cfg (through tsrc), or in READ3 from cfg_rd (the value LOAD
        # gives cfg next), so EVAL, which follows LOAD, may use it
        t_rd3 = Signal()                # the completer is in READ3 (a register: set in READ2)
        tsrc = Signal(5)
        m.d.sync += [t_rd3.eq(0), tsrc.eq(Mux(t_rd3, cfg_rd.timeout, cfg.timeout)),
                     tval.eq(rom(m, tsrc, [v + 1 for v in TIMEOUT_US], 34, "timeout_us1"))]
        m.d.comb += [dyn_rp.addr.eq(Mux(t.e_steal, t.qpn, aq)),
                     comp_rp2.addr.eq(Mux(t.e_steal, t.qpn, aq)),
                     infl_rp.addr.eq(crh),
                     cmp_new.eq(cmp)]
        r_rom = rom(m, a.syndrome[:5], [v + 1 for v in RNR_US], TB, "rnr_us1")
        with m.If(set_hit & (set_q == aq)):
            m.d.sync += stale.eq(1)
        return types.SimpleNamespace(
            a=a, a_seq=a_seq, a_ack=a_ack, a_rnr=a_rnr, a_dec=a_dec, ev=ev, act=act, ast=ast, sidx=sidx, scan_turn=scan_turn, s1v=s1v, s2v=s2v, s3v=s3v,
            s3n=s3n, s3w=s3w, s3g=s3g, s1q=s1q, s2q=s2q, s3q=s3q, s1st=s1st, s2st=s2st, s3st=s3st,
            sn=sn, stale=stale, wake=wake, wbw=wbw, cmp=cmp, comp_rd=comp_rd, d=d, d_rd=d_rd,
            cfg=cfg, cfg_rd=cfg_rd, tval=tval, ton=ton, rval=rval, crh=crh, rh_rd=rh_rd,
            rn_rd2=rn_rd2, c_hit1=c_hit1, c_hit2=c_hit2, c_hit3=c_hit3, t_rd3=t_rd3, r_rom=r_rom)

    def _engine_comp_view(self, m, t):
        """The engine's view of its QP's ``comp`` and ``rh`` (``cs``, ``rh_e``), with no table of
        its own: read from comp_mem through the completer's port while the engine loads the QP
        (CTX and CTX_WAIT, ``e_steal``; the completer reads again after, see ``c_hit1``), then
        kept by taking every write to the QP's row, a cycle after it. Drives ``cs_ld`` and
        ``cs_src``."""
        cs, rh_e, cmp, crh = t.cs, t.rh_e, t.cmp, t.crh
        # The writes of the cycle before to the engine's QP, exactly: the completer's
        # write-back (its row still in cmp and crh, which WB's successors, IDLE and WAKE, do
        # not change in their first cycle; rh written even when comp is not, see WB), a
        # SET_QP's (una = cfpsn = its start PSN, the rest 0). A write is newer than the read
        # on the port, which did not see it (no transparency).
        cwb_r, psn0_r = Signal(), Signal(24)
        sp = self.qp_set.payload
        m.d.sync += [cwb_r.eq(t.cmp_wb), psn0_r.eq(Mux(t.set_rts, sp.sq_psn, 0))]
        wr_c = cwb_r & t.aq_qpn_r
        wr_s = t.set_r & t.set_qpn_r
        wr_h = t.c_wb_st_r & t.aq_qpn_r
        set_row = Signal(_comp_engine_layout)
        m.d.comb += [set_row.una.eq(psn0_r), set_row.cfpsn.eq(psn0_r)]
        # the engine's read, a cycle after the port (in the completer's registers comp_rd and
        # rh_rd, which the port then feeds alone: no logic after the RAM's clock to out), not
        # met by a write to its row (sel_p: and taken); every write after it is one of wr_c, wr_s,
        # wr_h, which win. The register's word passes one LUT (a choice made from registers)
        # to cs and rh_e.
        pv = t.steal_rr & ~t.ce_hit_r
        sel_p, selh_p = Signal(), Signal()
        oth = Signal(_comp_engine_layout)       # cs's next value when it is not the port's
        m.d.comb += [sel_p.eq(pv & ~wr_c & ~wr_s), selh_p.eq(pv & ~wr_h),
                     oth.eq(Mux(wr_c, _pick(_comp_engine_layout, cmp),
                                Mux(wr_s, set_row, cs)))]
        src = t.cs_src
        m.d.comb += [t.cs_ld.eq(wr_c | wr_s | pv),
                     src.eq(Mux(sel_p, _pick(_comp_engine_layout, t.comp_rd), oth))]
        m.d.sync += rh_e.eq(Mux(selh_p, t.rh_rd, Mux(wr_h, crh, rh_e)))

    def _completer_judge(self, m, t):
        """The completer's judgements, from its registers: the walk's entry (``ent``, its last PSN
        before ``una``: ``covered``), an ACK's PSN against ``una`` (READs' clamp included), the
        timer's expiry, room for wake-ups, the scan's judgement of a QP (``p_need``, ``p_wake``)
        and the SUCCESS completion (``ccpl``'s payload). Adds these."""
        (TB, a, aq, ccpl, cfg_rd, cmp, comp_rd, crh, d, d_rd, free, infl_rp, now, rb, rh_rd, rn_rd2,
         work) = (
            t.TB, t.a, t.aq, t.ccpl, t.cfg_rd, t.cmp, t.comp_rd, t.crh, t.d, t.d_rd, t.free,
            t.infl_rp, t.now, t.rb, t.rh_rd, t.rn_rd2, t.work)
        ent = infl_rp.data
        m.d.comb += free.i.payload.eq(crh)
        thcons = Signal(16)
        terr = Signal()
        trn = Signal(rb)
        retire = Signal()
        drop = Signal()
        # the entry's end PSN (one past its last) and signaled flag, registered off the block
        # RAM's output in HOLD (its clock-to-out does not lead the compare below or TEST's
        # choice)
        ent_end = Signal(24)
        ent_sig = Signal()
        # the entry's last PSN is before una: end ≤ una (24-bit serial arithmetic, the sign of
        # covered clear)
        covered = Signal(24)
        m.d.comb += covered.eq(cmp.una - ent_end)
        # an ACK's PSN against una (24-bit serial arithmetic) and the next PSN, judged in LOAD
        # from the read registers (EVAL decides from these flip-flops): a_new = a newer ACK
        # (0 < psn + 1 − una < 2^23), b_neg = a NAK for a PSN before una, b_zero = at una,
        # d_more = PSNs sent after it (``ap1`` = psn + 1 is registered with the ACK)
        ap1 = Signal(24)
        adv = Signal(24)
        behind = Signal(24)
        a_new, b_neg, b_zero, d_more = Signal(), Signal(), Signal(), Signal()
        # READs (interface.md §7): a_sent = the event's PSN was sent (DECIDE), clampable = the
        # event may not move una past a READ's first response not yet placed (WIRE, DECIDE),
        # clamp = it tried, gap = una stopped there, acc/acc_r = a DECIDE's answer, ri_r its
        # slot, dec_wb = write back after answering. During the walk, ur = max(una before the
        # event, cfpsn) (where una stops), kept as the walk retires (una before the event is at
        # least cfpsn: una moves forward only, and cfpsn to a retired WQE's end, at most una),
        # ov = una is beyond ur, ur_lt = ur is before the entry's end PSN.
        a_sent, clampable, clamp, gap, acc, acc_r, dec_wb, ov, ur_lt = (
            Signal(name=f"c_{n}") for n in ("a_sent", "clampable", "clamp", "gap", "acc",
                                            "acc_r", "dec_wb", "ov", "ur_lt"))
        ur = Signal(24)
        ent_rd = Signal()
        ri_r = Signal(t.sb)
        m.d.comb += [adv.eq(ap1 - comp_rd.una), behind.eq(a.psn - comp_rd.una)]
        expired = Signal()
        # wake-ups of parked QPs are hints (a later scan repeats them): only with room to spare
        wake_room = Signal()
        scan_room = Signal()
        m.d.comb += [wake_room.eq(work.level < self.work_depth // 2), scan_room.eq(work.level == 0)]
        # (registered: ACT, where it is used, is at least three cycles after LOAD or SCAN,
        # which load dl; now a cycle older only delays a timer by a cycle)
        m.d.sync += expired.eq(~(now - cmp.dl)[TB - 1])
        # nothing sent unacknowledged (registered: ACT, where it is used, is at least three
        # cycles after EVAL, which last changes una, and after LOAD or SCAN, which load d)
        ps_done = Signal()
        m.d.sync += ps_done.eq(d.psn == cmp.una)
        # The scan judges a QP from its table reads (comp_rd, d_rd, cfg_rd): it is visited (EVAL
        # … WB) when that can act on it: an RNR wait over, a timer to arm, to disarm or expired,
        # or WQEs unretired with nothing sent unacknowledged (records written after their ACK:
        # otherwise the next ACK's walk retires them), or a wake-up owed (wk). A parked QP
        # outside an RNR wait is only woken (a hint, as in ACT). A write after the read only
        # delays a visit by a round.
        pc, pdy, pcf = comp_rd, d_rd, cfg_rd
        p_exp = ~(now - pc.dl)[TB - 1]
        p_done = pdy.psn == pc.una
        p_live = (pc.rerr == 0) & ~pdy.err
        p_need, p_wake = Signal(), Signal()
        # ... or ring entries to drop: the QP has ended, or its list holds more than its
        # unretired WQEs (a RESET)
        p_drop = (rh_rd != rn_rd2) & (~p_live | (pc.ccons == pdy.hcons))
        m.d.comb += [
            p_need.eq((p_live & (((pc.ccons != pdy.hcons) & p_done)
                                 | Mux(pc.hold, p_exp, Mux((pcf.timeout == 0) | p_done,
                                                           pc.armed, ~pc.armed | p_exp))))
                      | p_drop | pc.wk),
            p_wake.eq(p_live & ~pc.hold & pdy.parked & scan_room),
        ]
        m.d.comb += [
            ccpl.payload.qpn.eq(aq), ccpl.payload.wr_id.eq(ent.wr_id),
            ccpl.payload.status.eq(int(WcStatus.SUCCESS)),
            ccpl.payload.opcode.eq(Mux(ent.read, 2, ent.write)),
            ccpl.payload.flags.eq(Mux(ent.imm, 0x02, 0)), ccpl.payload.byte_len.eq(ent.byte_len),
        ]
        return types.SimpleNamespace(
            ent=ent, thcons=thcons, terr=terr, trn=trn, retire=retire, drop=drop, ent_end=ent_end,
            ent_sig=ent_sig, covered=covered, ap1=ap1, adv=adv, behind=behind, a_new=a_new,
            b_neg=b_neg, b_zero=b_zero, d_more=d_more, a_sent=a_sent, clampable=clampable,
            clamp=clamp, gap=gap, acc=acc, acc_r=acc_r, dec_wb=dec_wb, ov=ov, ur_lt=ur_lt, ur=ur,
            ent_rd=ent_rd, ri_r=ri_r, expired=expired, wake_room=wake_room, scan_room=scan_room,
            ps_done=ps_done, p_need=p_need, p_wake=p_wake)

    def _completer_fsm(self, m, t):
        """The completer FSM (the Reliability Engine, see the module docstring): it takes a kill, an
        ACK or a scan turn, judges it (EVAL), walks the QP's in-flight list, retiring and dropping
        entries (WALK … TEST, :meth:`_completer_walk`), acts (retry, RNR wait, end of the QP,
        timer) and writes the QP back (WB), waking the engine when it must act. Its states are in
        the parts below, in this order. Adds ``cmp_fsm``."""
        c_wb_st = t.c_wb_st
        m.d.sync += c_wb_st.eq(0)
        with m.FSM(name="completer") as cmp_fsm:
            self._completer_intake_states(m, t)
            self._completer_eval_states(m, t)
            # WALK … TEST: the QP's in-flight list
            self._completer_walk(m, t)
            self._completer_act_state(m, t)
            self._completer_answer_states(m, t)
        return types.SimpleNamespace(cmp_fsm=cmp_fsm)

    def _completer_intake_states(self, m, t):
        """IDLE and SCAN, in the completer's FSM: take a kill, an ACK or a scan turn; SCAN steps the
        table reads through the QPs, visiting those that need it (EVAL) and waking those that
        only need a wake-up."""
        (a, ab, ap1, aq, c_hit2, c_wake_st, cfg, cfg_rd, cmp, comp_rd, crh, d, d_rd, ev, kill_q,
         kill_v, p_need, p_wake, rh_rd, s1q, s1st, s1v, s2q, s2st, s2v, s3g, s3n, s3q, s3st, s3v,
         s3w, scan_turn, set_hit, set_q, sidx, sn, stale, sweeping, wake, wbw) = (
            t.a, t.ab, t.ap1, t.aq, t.c_hit2, t.c_wake_st, t.cfg, t.cfg_rd, t.cmp, t.comp_rd, t.crh,
            t.d, t.d_rd, t.ev, t.kill_q, t.kill_v, t.p_need, t.p_wake, t.rh_rd, t.s1q, t.s1st,
            t.s1v, t.s2q, t.s2st, t.s2v, t.s3g, t.s3n, t.s3q, t.s3st, t.s3v, t.s3w, t.scan_turn,
            t.set_hit, t.set_q, t.sidx, t.sn, t.stale, t.sweeping, t.wake, t.wbw)

        def take_kill():
            m.d.sync += [kill_v.eq(0), ev.eq(_EV_KILL), aq.eq(kill_q)]
            m.next = "READ"

        def take_ack():
            m.d.comb += self.ack.ready.eq(1)
            ap = self.ack.payload
            m.d.sync += [t.a_seq.eq(ap.syndrome[:7] == 0x60), t.a_ack.eq(ap.syndrome[5:7] == 0),
                         t.a_rnr.eq(ap.syndrome[5:7] == 1),
                         t.a_dec.eq((ap.kind == AckKind.DECIDE) if self.read else 0)]
            m.d.sync += [a.eq(self.ack.payload), aq.eq(self.ack.payload.qpn[:ab]),
                         ap1.eq(self.ack.payload.psn + 1), ev.eq(_EV_ACK), scan_turn.eq(1)]
            m.next = "READ"

        def hit(q):
            return set_hit & (set_q == q)

        with m.State("IDLE"):
            m.d.sync += [stale.eq(0), wake.eq(0), s1v.eq(0), s2v.eq(0), s3v.eq(0),
                         sn.eq(0)]
            with m.If(sweeping):
                pass
            with m.Elif(kill_v):
                take_kill()
            with m.Elif(self.ack.valid & ~scan_turn):
                take_ack()
            with m.Else():
                m.d.sync += [aq.eq(sidx), sidx.eq(sidx + 1), scan_turn.eq(0)]
                m.next = "SCAN"
        with m.State("SCAN"):
            # A scan turn: the completer's table reads step through the QPs, one per cycle
            # (aq → s1 → s2, judged → s3, whose entries LOAD's registers then hold). A QP
            # judged to need it is visited from EVAL, or woken; the others are passed. The
            # turn ends there, or after SCAN_QUOTA QPs when an ACK or a kill waits.
            m.d.sync += [aq.eq(sidx), sidx.eq(sidx + 1), stale.eq(0),
                         s1v.eq(1), s1q.eq(aq), s2v.eq(s1v), s2q.eq(s1q),
                         s3v.eq(s2v), s3q.eq(s2q),
                         s3n.eq(p_need & ~c_hit2), s3w.eq(p_wake & ~c_hit2),
                         s3g.eq(c_hit2),
                         s1st.eq(hit(aq)), s2st.eq(s1st | hit(s1q)),
                         s3st.eq(s2st | hit(s2q))]
            with m.If(~(s3v & s3n)):
                m.d.sync += [cmp.eq(comp_rd), d.eq(d_rd), cfg.eq(cfg_rd), crh.eq(rh_rd)]
            with m.If(s3v):
                with m.If(s3g):
                    # its reads met a write: read it again (the pipeline refills)
                    m.d.sync += [aq.eq(s3q), sidx.eq(s3q + 1), s1v.eq(0), s2v.eq(0),
                                 s3v.eq(0)]
                with m.Elif(s3n):
                    # (a SET_QP write since the read drops the write-back, as in a visit)
                    m.d.sync += [aq.eq(s3q), sidx.eq(s3q + 1), ev.eq(_EV_SCAN),
                                 stale.eq(s3st | hit(s3q))]
                    m.next = "EVAL"
                with m.Elif(s3w):
                    m.d.sync += [aq.eq(s3q), sidx.eq(s3q + 1), wbw.eq(0)]
                    m.next = "WAKE"
                    m.d.sync += c_wake_st.eq(1)
                with m.Elif((kill_v | self.ack.valid) & (sn == SCAN_QUOTA - 1)):
                    m.d.sync += sidx.eq(s3q + 1)
                    with m.If(kill_v):
                        take_kill()
                    with m.Else():
                        take_ack()
                with m.Elif(sn != SCAN_QUOTA - 1):
                    m.d.sync += sn.eq(sn + 1)

    def _completer_eval_states(self, m, t):
        """READ … EVAL, in the completer's FSM: the QP's entries read into the registers (LOAD,
        again when a read met a write), and the event judged (EVAL): the action to take and
        whether to walk the in-flight list."""
        (a, a_new, act, adv, ap1, ast, b_neg, b_zero, behind, c_hit2, c_hit3, c_wb_st, cfg, cfg_rd,
         cmp, comp_rd, crh, d, d_more, d_rd, ev, now, r_rom, rh_rd, rval, t_rd3, ton, tval) = (
            t.a, t.a_new, t.act, t.adv, t.ap1, t.ast, t.b_neg, t.b_zero, t.behind, t.c_hit2,
            t.c_hit3, t.c_wb_st, t.cfg, t.cfg_rd, t.cmp, t.comp_rd, t.crh, t.d, t.d_more, t.d_rd,
            t.ev, t.now, t.r_rom, t.rh_rd, t.rval, t.t_rd3, t.ton, t.tval)
        with m.State("READ"):
            m.next = "READ2"           # comp/dyn/cfg reads of the new QPN
        with m.State("READ2"):
            m.d.sync += t_rd3.eq(1)
            m.next = "READ3"           # ... their first registers
        with m.State("READ3"):
            m.next = "LOAD"            # ... READ2's (the same row) in them
        with m.State("LOAD"):
            # from READ2's reads in the registers, as the scan, and the ACK judged from the
            # same registers (or the reads again, when READ's, from which READ3 took the
            # timeout, or READ2's met a write)
            m.d.sync += [cmp.eq(comp_rd), d.eq(d_rd), cfg.eq(cfg_rd),
                         rval.eq(r_rom), crh.eq(rh_rd),
                         a_new.eq((adv != 0) & ~adv[23]), b_neg.eq(behind[23]),
                         b_zero.eq(behind == 0), d_more.eq(d_rd.psn != ap1),
                         # (p before the next PSN to send, p not before una as b_neg
                         # refuses: p in [una, psn); fewer than 2^23 PSNs outstanding)
                         t.a_sent.eq((a.psn - d_rd.psn)[23])]
            m.d.sync += t.c_again.eq(c_hit2 | c_hit3)
            with m.If(c_hit2 | c_hit3):
                m.next = "READ"
            with m.Else():
                m.next = "EVAL"
        with m.State("EVAL"):
            kind = a.kind if self.read else Const(AckKind.WIRE, 2)    # (no READ: all WIRE)
            is_dec = (ev == _EV_ACK) & t.a_dec
            # (ur from una before the event; ov set where the event moves una forward)
            m.d.sync += [t.ur.eq(cmp.una), t.ov.eq(0), t.gap.eq(0), t.acc_r.eq(0),
                         t.dec_wb.eq(0),
                         t.clampable.eq((ev == _EV_ACK) & (kind != AckKind.PLACED))]
            with m.If(((cmp.rerr != 0) | d.err) & (ev == _EV_SCAN)):
                m.d.sync += act.eq(_ACT_DROP)
                m.next = "WALK"        # the QP has ended: drop its ring entries
            with m.Elif(is_dec & ((cmp.rerr != 0) | d.err | b_neg | ~t.a_sent)):
                m.next = "DECO"        # refused: the QP has ended, stale, or never sent
            with m.Elif((cmp.rerr != 0) | d.err):
                m.next = "IDLE"        # the QP has ended: nothing to do
            with m.Elif(ev == _EV_KILL):
                m.d.sync += act.eq(_ACT_KILL)
                m.next = "ACT"
            with m.Elif(ev == _EV_SCAN):
                m.d.sync += act.eq(_ACT_SCAN)
                m.next = "WALK"        # also retires WQEs recorded after their ACK
            with m.Elif(is_dec):
                # a READ response at p acknowledges every PSN before p (the walk stops at a
                # READ whose responses before p are missing: a gap)
                m.d.sync += [cmp.una.eq(a.psn), act.eq(_ACT_DEC), t.ov.eq(~b_zero)]
                m.next = "WALK"
            with m.Elif(t.a_ack):
                # a newer ACK (0 < a.psn + 1 − una < 2^23) moves una and restarts the timer
                with m.If(a_new):
                    m.d.sync += [cmp.una.eq(ap1), cmp.rused.eq(0), cmp.nused.eq(0),
                                 cmp.armed.eq(0), cmp.rnrw.eq(0), cmp.gapr.eq(0),
                                 act.eq(_ACT_NONE), t.ov.eq(1)]
                    # PSNs still outstanding: the timer restarts now (outside an RNR wait,
                    # whose deadline dl holds)
                    with m.If(~cmp.hold & ton & d_more):
                        m.d.sync += [cmp.armed.eq(1), cmp.dl.eq(now + tval)]
                    m.next = "WALK"
                with m.Else():
                    m.next = "IDLE"
            with m.Elif(b_neg):
                m.next = "IDLE"        # a NAK for a PSN already acknowledged: stale
            with m.Elif((cmp.hold | (cmp.rnrw & b_zero)) & t.a_seq):
                # the sequence error that follows an RNR NAK (the responder's answer to the
                # packets sent behind the refused one), during the wait or after it (a
                # short wait may end before it arrives): the RNR wait goes back anyway
                m.d.sync += cmp.rnrw.eq(0)
                m.next = "WB"
                m.d.sync += c_wb_st.eq(1)
            with m.Else():
                # a NAK at p acknowledges every PSN before p
                with m.If(~b_zero):
                    m.d.sync += [cmp.una.eq(a.psn), cmp.rused.eq(0), cmp.nused.eq(0),
                                 cmp.rnrw.eq(0), t.ov.eq(1)]
                with m.If(t.a_seq):
                    m.d.sync += act.eq(_ACT_SEQ)
                with m.Elif(t.a_rnr):
                    m.d.sync += act.eq(_ACT_RNR)
                with m.Else():
                    m.d.sync += act.eq(_ACT_ERR)
                    with m.Switch(a.syndrome[:7]):
                        with m.Case(0x61):
                            m.d.sync += ast.eq(_rcode(WcStatus.REM_INV_REQ_ERR))
                        with m.Case(0x62):
                            m.d.sync += ast.eq(_rcode(WcStatus.REM_ACCESS_ERR))
                        with m.Default():
                            m.d.sync += ast.eq(_rcode(WcStatus.REM_OP_ERR))
                m.next = "WALK"

    def _completer_walk(self, m, t):
        """The completer's states WALK … TEST, in its FSM (from EVAL, on to ACT): the walk of the
        QP's in-flight list from ``rh`` (``crh``), one entry per round, retiring the WQEs whose
        last PSN is before ``una`` (a SUCCESS completion for the signaled ones) and dropping the
        entries of an ended or reset QP, each entry freed."""
        (act, c_hit1, c_test, ccpl, cmp, covered, crh, drop, dyn_rd2_w, ent, ent_end, ent_sig, free,
         retire, rn_rd2_w, terr, thcons, trn) = (
            t.act, t.c_hit1, t.c_test, t.ccpl, t.cmp, t.covered, t.crh, t.drop, t.dyn_rd2_w, t.ent,
            t.ent_end, t.ent_sig, t.free, t.retire, t.rn_rd2_w, t.terr, t.thcons, t.trn)
        c_hd, c_rne = Signal(), Signal()    # ccons != hcons, rh != rn: registered in HOLD
        with m.State("WALK"):
            # the engine's hcons, err and rn as of two cycles before (the reads are not
            # transparent); infl_rp reads entry rh now, so it holds whatever rn and hcons
            # show as written
            m.d.sync += [thcons.eq(dyn_rd2_w.hcons), terr.eq(dyn_rd2_w.err),
                         trn.eq(rn_rd2_w)]
            with m.If(~c_hit1):        # (else read them again)
                m.next = "HOLD"
        with m.State("HOLD"):
            # (the entry stays on the read port until TEST: rh does not change, and a
            # write to it meanwhile means it was not yet filled, and is not used)
            m.d.sync += [ent_end.eq(ent.end_psn), ent_sig.eq(ent.signaled),
                         t.ent_rd.eq(ent.read if self.read else 0),
                         t.ri_r.eq(ent.ridx),
                         # (DECIDE's compares of WALK's reads: ccons and crh change in TEST)
                         c_hd.eq(cmp.ccons != thcons), c_rne.eq(crh != trn)]
            m.next = "DECIDE"
        with m.State("DECIDE"):
            # A READ at the head not yet placed up to una before the event (interface.md §7):
            # una stops at its first response not yet placed, ur = max(una before the event,
            # its first PSN); an event that moved una beyond (ov; not PLACED, which moves it by
            # one) is a gap (clamp). A DECIDE at ur is accepted (acc).
            head = c_hd & ~terr & (act != _ACT_DROP)
            over = t.ov
            # (its last PSN at or after ur: ur − end negative; the same as after una before
            # the event, as the entry's first PSN, cfpsn, is before its end)
            lt = (t.ur - ent_end)[23]
            m.d.sync += t.ur_lt.eq(lt)
            open_rd = head & t.ent_rd & lt
            clamp_v = open_rd & t.clampable & over
            m.d.sync += [
                retire.eq(head & ~covered[23] & ~clamp_v),
                drop.eq(c_rne & ((act == _ACT_DROP) | terr | ~c_hd)),
                t.clamp.eq(clamp_v),
                t.acc.eq(head & t.ent_rd & covered[23] & ~over),
            ]
            m.next = "TEST"
        with m.State("TEST"):
            m.d.comb += c_test.eq(1)
            # (an entry freed gives back its READ slot; a READ retired counts for ORD)
            m.d.comb += [t.rfree.i.valid.eq(free.i.valid & t.ent_rd),
                         t.rfree.i.payload.eq(t.ri_r)]
            with m.If(retire):
                with m.If(ent_sig):
                    m.d.comb += ccpl.valid.eq(1)
                    with m.If(ccpl.ready):
                        m.d.comb += free.i.valid.eq(1)
                        m.d.sync += [cmp.ccons.eq(cmp.ccons + 1),
                                     cmp.cfpsn.eq(ent_end), crh.eq(ent.next),
                                     cmp.crds.eq(cmp.crds + t.ent_rd)]
                        self._walk_retired(m, t)
                        m.next = "WALK"
                with m.Else():
                    m.d.comb += free.i.valid.eq(1)
                    m.d.sync += [cmp.ccons.eq(cmp.ccons + 1), cmp.cfpsn.eq(ent_end),
                                 crh.eq(ent.next), cmp.crds.eq(cmp.crds + t.ent_rd)]
                    self._walk_retired(m, t)
                    m.next = "WALK"
            with m.Elif(drop):
                m.d.comb += free.i.valid.eq(1)
                m.d.sync += crh.eq(ent.next)
                m.next = "WALK"
            with m.Else():
                m.d.sync += t.acc_r.eq(t.acc)
                with m.If(t.clamp):
                    m.d.sync += [cmp.una.eq(t.ur), t.gap.eq(1)]
                m.next = "ACT"

    def _walk_retired(self, m, t):
        """TEST retires the entry: cfpsn becomes its end PSN, so ur = max(ur, end), and una is
        beyond the new ur only if it was beyond the old one and is not the end (una is at
        least the end of an entry retired)."""
        m.d.sync += [t.ur.eq(Mux(t.ur_lt, t.ent_end, t.ur)), t.ov.eq(t.ov & (t.covered != 0))]

    def _completer_act_state(self, m, t):
        """ACT, in the completer's FSM: the action EVAL chose (retry, RNR wait, end of the QP,
        timer, a wake-up), on to WB (or DECO for a DECIDE)."""
        (act, ast, c_wb_st, cfg, cmp, d, d_more, expired, now, ps_done, rval, scan_room, ton, tval,
         wake, wake_room) = (
            t.act, t.ast, t.c_wb_st, t.cfg, t.cmp, t.d, t.d_more, t.expired, t.now, t.ps_done,
            t.rval, t.scan_room, t.ton, t.tval, t.wake, t.wake_room)

        def end_qp(code):
            m.d.sync += [cmp.rerr.eq(code), cmp.rgen.eq(cmp.rgen + 1),
                         cmp.armed.eq(0), cmp.hold.eq(0), wake.eq(1)]

        def retry():
            """Timeout or NAK 0x60: go back to una, or end the QP when the retries are used."""
            with m.If(cmp.rused == cfg.retry_cnt):
                end_qp(_rcode(WcStatus.RETRY_EXC_ERR))
            with m.Else():
                m.d.sync += [cmp.rused.eq(cmp.rused + 1), cmp.rgen.eq(cmp.rgen + 1),
                             cmp.armed.eq(0), cmp.rnrw.eq(0), wake.eq(1)]

        with m.State("ACT"):
            m.next = "WB"
            m.d.sync += c_wb_st.eq(1)
            with m.Switch(act):
                with m.Case(_ACT_NONE):
                    m.d.sync += wake.eq(d.parked & wake_room)
                    with m.If(t.gap & ~cmp.gapr):
                        retry()                 # an ACK beyond a READ's missing responses
                        m.d.sync += cmp.gapr.eq(1)
                with m.Case(_ACT_DEC):
                    m.d.sync += [c_wb_st.eq(0), t.dec_wb.eq(1)]
                    m.next = "DECO"
                    with m.If(t.gap & ~cmp.gapr):
                        retry()                 # a response after a gap
                        m.d.sync += cmp.gapr.eq(1)
                with m.Case(_ACT_KILL):
                    end_qp(_rcode(WcStatus.WR_FLUSH_ERR))
                with m.Case(_ACT_DROP):
                    pass
                with m.Case(_ACT_SEQ):
                    retry()
                with m.Case(_ACT_ERR):
                    end_qp(ast)
                with m.Case(_ACT_RNR):
                    with m.If((cfg.rnr_retry != 7) & (cmp.nused == cfg.rnr_retry)):
                        end_qp(_rcode(WcStatus.RNR_RETRY_EXC_ERR))
                    with m.Else():
                        with m.If(cfg.rnr_retry != 7):
                            m.d.sync += cmp.nused.eq(cmp.nused + 1)
                        m.d.sync += [cmp.hold.eq(1), cmp.armed.eq(1),
                                     cmp.rnrw.eq(d_more),
                                     cmp.dl.eq(now + rval),
                                     cmp.rgen.eq(cmp.rgen + 1), wake.eq(1)]
                with m.Case(_ACT_SCAN):
                    with m.If(cmp.hold):
                        with m.If(expired):
                            m.d.sync += [cmp.hold.eq(0), cmp.armed.eq(0), wake.eq(1)]
                    with m.Elif(~ton | ps_done):
                        m.d.sync += [cmp.armed.eq(0), wake.eq(d.parked & scan_room)]
                    with m.Elif(~cmp.armed):
                        m.d.sync += [cmp.armed.eq(1), cmp.dl.eq(now + tval),
                                     wake.eq(d.parked & scan_room)]
                    with m.Elif(expired):
                        retry()
                    with m.Else():
                        m.d.sync += wake.eq(d.parked & scan_room)
            # a wake-up owed is made now (written back as done; WAKE owes it again when
            # the queue still has no room)
            with m.If(cmp.wk):
                m.d.sync += [wake.eq(1), cmp.wk.eq(0)]

    def _completer_answer_states(self, m, t):
        """DECO, WB and WAKE, in the completer's FSM: a READ DECIDE's answer, the QP's write-back,
        and the wake-up queued for the engine."""
        (c_wake_st, c_wb_st, cmp, cmp_wb, crh, rh_wp, stale, wake, wbw, work) = (
            t.c_wake_st, t.c_wb_st, t.cmp, t.cmp_wb, t.crh, t.rh_wp, t.stale, t.wake, t.wbw, t.work)
        with m.State("DECO"):
            # a DECIDE's answer (ReadPlace waits for it), then the write-back if the walk
            # ran (a SET_QP meanwhile refuses it)
            m.d.comb += [self.read_dec.valid.eq(1),
                         self.read_dec.payload.ok.eq(t.acc_r & ~stale),
                         self.read_dec.payload.idx.eq(t.ri_r),
                         # (una only grows while the QP lives: a response before it stays
                         # stale until a SET_QP, which READ Place sees too; after a gap
                         # (clamp) una is the head READ's first response not placed, and a
                         # response after it is refused, with no effect, until it is)
                         self.read_dec.payload.una.eq(cmp.una),
                         self.read_dec.payload.una_v.eq(~stale),
                         self.read_dec.payload.gap.eq(t.gap & ~stale)]
            with m.If(self.read_dec.ready):
                with m.If(t.dec_wb):
                    m.next = "WB"
                    m.d.sync += c_wb_st.eq(1)
                with m.Else():
                    m.next = "IDLE"
        with m.State("WB"):
            # (rh always: the entries freed are freed whatever SET_QP rewrote meanwhile)
            m.d.comb += [cmp_wb.eq(~stale), rh_wp.en.eq(1), rh_wp.data.eq(crh)]
            with m.If(wake & ~stale):
                m.next = "WAKE"
                m.d.sync += [c_wake_st.eq(1), wbw.eq(1)]
            with m.Else():
                m.next = "IDLE"
        with m.State("WAKE"):
            # queue the QPN for the engine (after the qp_set that may be waiting), in this
            # one cycle: the completer never waits for the work queue, which only the
            # engine drains (a READ DECIDE or an ACK waiting behind it would stall receive
            # for as long as the engine serves one QP). Without room, a write-back's
            # wake-up is written back as owed (wk) and made by the QP's next visit or
            # event; the scan's (a hint) is dropped, the next round repeats it.
            m.d.sync += c_wake_st.eq(0)
            with m.If(~self.qp_set.valid & work.i.ready):
                m.next = "IDLE"
            with m.Elif(wbw):
                m.d.sync += [cmp.wk.eq(1), wake.eq(0), c_wb_st.eq(1)]
                m.next = "WB"
            with m.Else():
                m.next = "IDLE"
