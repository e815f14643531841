"""The requester's send half: Send Queue doorbells, WQE fetch, Gather Path, TX Packet Build, ACKs.

Data path, top to bottom (see ``docs/requester.md``):

1. **Send Queue ring / doorbells**: SQ_DB ``{number = QPN, value = producer}`` writes the QP's SQ
   producer index into an on-chip table (``num_qp`` × 16 bits) and queues the QPN for service.
   A QP entering RTS (``qp_set``) is queued too, so doorbells recorded in INIT/RTR run in RTS.
2. **WQE fetch**: the engine takes a QPN and reads its context (``ctx_req``/``ctx_resp``, served
   by the QP context). While the QP is in RTS and ``cons != prod``, it reads the 64-byte send WQE
   at ``sq_base + 64·(cons mod 2^log2)`` through its own host read client (``wqe_rd``).
3. **Checks / Gather Path**: opcode > 4 or num_sge > 2 → LOC_QP_OP_ERR. Each SGE of non-zero
   length is looked up in the Key Cache (lkey, the QP's PD, access 0, [addr, addr+len)); a
   failure → LOC_PROT_ERR. Either error emits a ``cpl``; the QP must then go to ERROR, and the
   engine marks it and sends nothing more for it.
4. **Segmentation**: by path MTU into FIRST/MIDDLE/LAST/ONLY (roce-reference.md §5):
   - RETH on the first packet of a WRITE, IMMDT/IETH on the last;
   - SE on the last packet of a solicited SEND*/WRITE_WITH_IMM;
   - AckReq on LAST/ONLY and on the 66th consecutive packet without it;
   - PSNs from ``qp_set.sq_psn``, at most 128 outstanding (unacknowledged) per QP.

   Each packet goes to :class:`TxBuild` as a descriptor plus its gather chunks (at most one per
   SGE).
5. **TX Packet Build** (:mod:`.tx_build`): frame buffer, realigned gather, ICRC, ``tx``.
6. **ACK processing**: a positive ACK advances the QP's oldest unacknowledged PSN and retires the
   sent WQEs it covers, in order. Each signaled one gives a SUCCESS ``cpl``.

The engine serves one QP until its SQ is empty (no fairness between QPs in version 1).

Not in this block yet (see docs/requester.md): retry and timers, NAK handling, flushing WQEs that
were sent but never acknowledged when SET_QP moves the QP to ERROR.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..host.axi_master import ReadClientSignature
from ..keys.key_cache import LookupSignature
from ..opcodes import WcStatus
from ..resp.qp_context import QpState
from ..stream import BeatStream, Queue, SkidBuffer, StreamMerge, check_width
from .tx_build import TxBuild

__all__ = ["Requester", "req_ctx_layout", "qp_set_layout", "ack_layout", "cpl_layout",
           "doorbell_layout", "MAX_NOACK", "INFLIGHT", "MAX_OUTSTANDING"]

MAX_NOACK = 64      # rxe RXE_MAX_PKT_PER_ACK

#: SQ_DB as the control plane emits it (rnic.control.control_plane.doorbell_layout).
doorbell_layout = data.StructLayout({"value": 16, "number": 16})

#: A SET_QP that was written: the QPN, its new state (QpContext set_valid/set_qpn/set_state)
#: and ARG3's send PSN (used on entry to RTS).
qp_set_layout = data.StructLayout({"qpn": 24, "state": 3, "sq_psn": 24})

#: A received ACKNOWLEDGE (opcode 0x11) for one of our QPs: its BTH PSN and AETH syndrome.
ack_layout = data.StructLayout({"qpn": 24, "psn": 24, "syndrome": 8})

#: What the requester needs of a QP's context (static fields and state).
req_ctx_layout = data.StructLayout({
    "state": 3,
    "pmtu": 3,          # 1=256 … 5=4096
    "dest_qpn": 24,
    "pd": 16,
    "sq_base": 64,      # 64-byte aligned
    "sq_log": 5,
    "rmac": 48,
    "rip": 32,
    "sport": 16,
})

#: A send completion (interface.md §5.4): SUCCESS for a signaled WQE retired by an ACK, or an
#: error (only wr_id, QPN, status and opcode valid). ``fault`` = a host read of the WQE failed
#: (event 4; status then 0).
cpl_layout = data.StructLayout({
    "qpn": 24,
    "wr_id": 64,
    "status": 8,
    "opcode": 8,        # 0 SEND, 1 RDMA_WRITE
    "flags": 8,         # 0x02 WITH_IMM
    "byte_len": 32,
    "fault": 1,
})

_dyn_layout = data.StructLayout({
    "cons": 16,         # SQ index of the next WQE to send
    "psn": 24,          # next PSN to send
    "noack": 7,         # consecutive packets sent without AckReq
    "err": 1,           # the requester found an error: send nothing more
})

#: Per QP, owned by the ACK processor: the oldest unacknowledged PSN and the SQ index of the
#: oldest WQE not yet retired.
_comp_layout = data.StructLayout({"una": 24, "ccons": 16})

#: One sent WQE waiting for its ACK (slot ``cons mod INFLIGHT`` of its QP).
_inflight_layout = data.StructLayout({
    "wr_id": 64,
    "last_psn": 24,
    "signaled": 1,
    "write": 1,
    "imm": 1,
    "byte_len": 32,
})

#: WQEs sent and not yet retired, per QP; PSNs outstanding per QP.
INFLIGHT = 16
MAX_OUTSTANDING = 128


_RTS = QpState.RTS
_RESET = QpState.RESET
_ERROR = QpState.ERROR

# (first, middle, last, only) RC opcodes per WQE opcode 0..4
_OPS = [(0x00, 0x01, 0x02, 0x04), (0x00, 0x01, 0x03, 0x05), (0x00, 0x01, 0x16, 0x17),
        (0x06, 0x07, 0x08, 0x0A), (0x06, 0x07, 0x09, 0x0B)]


class Requester(wiring.Component):
    """Send Queue doorbells, WQE fetch, gather, request-frame build, ACK retirement.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    num_qp : int
        Number of QPs (power of two, 4..4096).
    work_depth : int
        Entries of the queue of QPNs waiting for service (doorbells are back-pressured when it
        is full).

    Attributes
    ----------
    sq_db : In(stream.Signature(doorbell_layout))
        SQ_DB writes: ``number`` = QPN, ``value`` = SQ producer index; a QPN ≥ ``num_qp`` is
        taken and ignored.
    qp_set : In(stream.Signature(qp_set_layout))
        Every SET_QP that was written. RESET clears the QP's SQ indices; RTS loads the send PSN
        (``sq_psn``) and queues the QP (doorbells recorded in INIT/RTR then run).
    ctx_req : Out(stream.Signature(24))
        QPN whose context the engine needs; exactly one ``ctx_resp`` answers each, in order.
    ctx_resp : In(stream.Signature(req_ctx_layout))
    lookup : In(LookupSignature())
        Key Cache lookup client (``req`` out, ``resp`` in).
    wqe_rd : Out(ReadClientSignature(W))
        Host read client for WQEs (64 bytes, tag 0).
    data_rd : Out(ReadClientSignature(W))
        Host read client for payload (gather chunks, tag 0).
    tx : Out(BeatStream(W))
        Request frames (to the TX arbiter's second input); no gap within a frame.
    ack : In(stream.Signature(ack_layout))
        Received ACKNOWLEDGE packets of RTS QPs. A positive ACK (syndrome bits 6:5 = 0)
        acknowledges every PSN up to its own and retires the WQEs whose last PSN it covers
        (coalesced ACKs retire several); NAKs are taken and ignored (no retry yet).
    cpl : Out(stream.Signature(cpl_layout))
        Send completions in SQ order: SUCCESS for each retired signaled WQE; an error
        (LOC_QP_OP_ERR, LOC_PROT_ERR, or a WQE-fetch host fault with ``fault``) once every
        earlier WQE is retired, after which the QP must be moved to ERROR (event 3, or 4 with
        ``fault``); then WR_FLUSH_ERR for every later posted WQE. A QP that SET_QP moved to
        ERROR is flushed likewise once its sent WQEs are retired.
    fault : Out(stream.Signature(24))
        QPN of a packet dropped because a payload read failed (event 4).
    local_mac : In(48)
    local_ip : In(32)
    busy : Out(1)
        The engine is serving a QP.
    """

    def __init__(self, *, width=64, num_qp=256, work_depth=16):
        check_width(width)
        if num_qp & (num_qp - 1) or not 4 <= num_qp <= 4096:
            raise ValueError(f"num_qp must be a power of two in 4..4096, not {num_qp!r}")
        if work_depth < 2:
            raise ValueError(f"work_depth must be at least 2, not {work_depth!r}")
        self.width, self.num_qp, self.work_depth = width, num_qp, work_depth
        self.abits = (num_qp - 1).bit_length()
        super().__init__({
            "sq_db": In(stream.Signature(doorbell_layout)),
            "qp_set": In(stream.Signature(qp_set_layout)),
            "ctx_req": Out(stream.Signature(24)),
            "ctx_resp": In(stream.Signature(req_ctx_layout)),
            "lookup": In(LookupSignature()),
            "wqe_rd": Out(ReadClientSignature(width)),
            "data_rd": Out(ReadClientSignature(width)),
            "tx": Out(BeatStream(width)),
            "ack": In(stream.Signature(ack_layout)),
            "cpl": Out(stream.Signature(cpl_layout)),
            "fault": Out(stream.Signature(24)),
            "local_mac": In(48),
            "local_ip": In(32),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, nb, ab = self.width, self.width // 8, self.abits
        ib = (INFLIGHT - 1).bit_length()

        m.submodules.build = build = TxBuild(W)
        wiring.connect(m, build.rd, wiring.flipped(self.data_rd))
        wiring.connect(m, build.tx, wiring.flipped(self.tx))
        wiring.connect(m, build.fault, wiring.flipped(self.fault))
        m.d.comb += [build.local_mac.eq(self.local_mac), build.local_ip.eq(self.local_ip)]
        m.submodules.cmerge = cmerge = StreamMerge(cpl_layout, 2)     # 0 engine, 1 completer
        wiring.connect(m, cmerge.o, wiring.flipped(self.cpl))
        # skid buffers cut the merge's ready path back into the two FSMs
        m.submodules.eskid = eskid = SkidBuffer(cpl_layout)
        m.submodules.cskid = cskid = SkidBuffer(cpl_layout)
        wiring.connect(m, eskid.o, cmerge.i[0])
        wiring.connect(m, cskid.o, cmerge.i[1])
        ecpl, ccpl = eskid.i, cskid.i

        # ---- per-QP tables ----------------------------------------------------------------
        m.submodules.prod_mem = prod_mem = Memory(shape=16, depth=self.num_qp, init=[])
        m.submodules.dyn_mem = dyn_mem = Memory(shape=_dyn_layout, depth=self.num_qp, init=[])
        m.submodules.comp_mem = comp_mem = Memory(shape=_comp_layout, depth=self.num_qp,
                                                  init=[])
        m.submodules.infl_mem = infl_mem = Memory(shape=_inflight_layout,
                                                  depth=self.num_qp * INFLIGHT, init=[])
        prod_wp = prod_mem.write_port()
        prod_rp = prod_mem.read_port(transparent_for=(prod_wp,))
        dyn_wp = dyn_mem.write_port()
        dyn_rp = dyn_mem.read_port(transparent_for=(dyn_wp,))
        dyn_rp2 = dyn_mem.read_port(transparent_for=(dyn_wp,))        # the completer's
        comp_wp = comp_mem.write_port()
        comp_rp = comp_mem.read_port(transparent_for=(comp_wp,))      # the engine's
        comp_rp2 = comp_mem.read_port(transparent_for=(comp_wp,))     # the completer's
        infl_wp = infl_mem.write_port()
        infl_rp = infl_mem.read_port(transparent_for=(infl_wp,))

        m.submodules.work = work = Queue(ab, self.work_depth, buffered=False)

        # qp_set first, then doorbells; the engine's and the completer's write-backs win.
        eng_wb = Signal()
        eng_dyn = Signal(_dyn_layout)
        cmp_wb = Signal()
        cmp_new = Signal(_comp_layout)
        qpn = Signal(ab)                # the engine's QP
        aq = Signal(ab)                 # the completer's QP
        sp = self.qp_set.payload
        set_q = sp.qpn[:ab]
        set_rts = sp.state == _RTS
        set_reset = sp.state == _RESET
        m.d.comb += self.qp_set.ready.eq(~eng_wb & ~cmp_wb & work.i.ready)
        m.d.comb += self.sq_db.ready.eq(~self.qp_set.valid & work.i.ready)
        with m.If(self.qp_set.valid & self.qp_set.ready):
            with m.If(set_rts | set_reset):
                m.d.comb += [dyn_wp.addr.eq(set_q), dyn_wp.en.eq(1),
                             dyn_wp.data.psn.eq(Mux(set_rts, sp.sq_psn, 0)),
                             comp_wp.addr.eq(set_q), comp_wp.en.eq(1),
                             comp_wp.data.una.eq(Mux(set_rts, sp.sq_psn, 0))]
            with m.If(set_reset):
                m.d.comb += [prod_wp.addr.eq(set_q), prod_wp.data.eq(0), prod_wp.en.eq(1)]
            with m.If(set_rts):
                m.d.comb += [work.i.valid.eq(1), work.i.payload.eq(set_q)]
        with m.Elif(self.sq_db.valid & self.sq_db.ready
                    & (self.sq_db.payload.number < self.num_qp)):     # others are ignored
            dq = self.sq_db.payload.number[:ab]
            m.d.comb += [prod_wp.addr.eq(dq), prod_wp.data.eq(self.sq_db.payload.value),
                         prod_wp.en.eq(1), work.i.valid.eq(1), work.i.payload.eq(dq)]
        with m.If(eng_wb):
            m.d.comb += [dyn_wp.addr.eq(qpn), dyn_wp.data.eq(eng_dyn), dyn_wp.en.eq(1)]
        with m.If(cmp_wb):
            m.d.comb += [comp_wp.addr.eq(aq), comp_wp.data.eq(cmp_new), comp_wp.en.eq(1)]

        # the engine reads its QP's entries continuously
        m.d.comb += [prod_rp.addr.eq(qpn), dyn_rp.addr.eq(qpn), comp_rp.addr.eq(qpn)]
        # registered copies of the table reads (one cycle older: every use is conservative)
        prod = Signal(16)
        una = Signal(24)
        ccons = Signal(16)
        dyn_rd = Signal(_dyn_layout)
        m.d.sync += [prod.eq(prod_rp.data), una.eq(comp_rp.data.una),
                     ccons.eq(comp_rp.data.ccons), dyn_rd.eq(dyn_rp.data)]

        # ---- engine state -------------------------------------------------------------------
        ctx = Signal(req_ctx_layout)
        dyn = Signal(_dyn_layout)
        wqe = Signal(512)
        wr_id = wqe[0:64]
        wop = wqe[64:72]
        flags = wqe[72:80]
        num_sge = wqe[80:88]
        immf = wqe[96:128]
        raddr = wqe[128:192]
        rkey = wqe[192:224]
        sge_addr = [wqe[256:320], wqe[384:448]]
        sge_len = [wqe[320:352], wqe[448:480]]
        sge_key = [wqe[352:384], wqe[480:512]]
        len0 = Signal(32)
        total = Signal(32)              # message length (registered in VALIDATE)
        bus = [Signal(64, name="bus0"), Signal(64, name="bus1")]
        k = Signal(2)
        beat = Signal(range(max(2, 64 // nb)))
        status = Signal(8)
        hfault = Signal()
        sent = Signal(32)               # message bytes handed to TX Packet Build
        resid = Signal(32)              # message bytes not yet handed over
        cur_addr = Signal(64)           # bus address of the next byte to gather
        seg_left = Signal(32)           # bytes left in the current SGE
        len1 = Signal(32)
        left = Signal(13)               # bytes of the current packet still to gather
        was_last = Signal()
        flush = Signal()                # the WQE is being flushed (QP in ERROR)

        m.d.comb += [
            len0.eq(Mux(num_sge >= 1, sge_len[0], 0)),
            len1.eq(Mux(num_sge == 2, sge_len[1], 0)),
            self.busy.eq(0),
        ]
        pmtu_b = Signal(13)
        with m.Switch(ctx.pmtu):
            for code in range(1, 6):
                with m.Case(code):
                    m.d.comb += pmtu_b.eq(128 << code)
            with m.Default():
                m.d.comb += pmtu_b.eq(256)

        # windows: PSNs outstanding, WQEs not yet retired
        # registered: one cycle older than psn/cons, never used the cycle after they change
        outstanding = Signal(24)
        m.d.comb += outstanding.eq(dyn.psn - una)
        psn_room = Signal()
        unretired = Signal(16)
        m.d.comb += unretired.eq(dyn.cons - ccons)
        slot_room = Signal()
        none_unretired = Signal()
        m.d.sync += [psn_room.eq(outstanding < MAX_OUTSTANDING), slot_room.eq(unretired < INFLIGHT),
                     none_unretired.eq(unretired == 0)]

        # segmentation of the next packet
        fits = resid <= pmtu_b
        pay = Signal(13)
        m.d.comb += pay.eq(Mux(fits, resid, pmtu_b))
        is_first = sent == 0
        opcode = Signal(8)
        with m.Switch(wop):
            for o, (f, mid, la, on) in enumerate(_OPS):
                with m.Case(o):
                    m.d.comb += opcode.eq(Mux(is_first, Mux(fits, on, f), Mux(fits, la, mid)))
        ackreq = Signal()
        m.d.comb += ackreq.eq(fits | (dyn.noack > MAX_NOACK))
        imm_word = Mux(wop == 2, immf, Cat(immf[24:32], immf[16:24], immf[8:16], immf[0:8]))
        pk = build.pkt.payload
        m.d.comb += [
            pk.dmac.eq(ctx.rmac), pk.dip.eq(ctx.rip), pk.sport.eq(ctx.sport),
            pk.dqpn.eq(ctx.dest_qpn), pk.opcode.eq(opcode),
            pk.se.eq(fits & flags[1] & (wop != 3)), pk.ackreq.eq(ackreq), pk.psn.eq(dyn.psn),
            pk.va.eq(raddr), pk.rkey.eq(rkey), pk.dmalen.eq(total), pk.imm.eq(imm_word),
            pk.paylen.eq(pay), pk.qpn.eq(qpn),
        ]

        # gather chunk of the current packet
        clen = Signal(13)
        m.d.comb += [
            clen.eq(Mux(seg_left < left, seg_left, left)),
            build.chunk.payload.addr.eq(cur_addr),
            build.chunk.payload.len.eq(clen),
        ]

        # the in-flight record of the WQE just sent (written with the write-back)
        m.d.comb += [
            infl_wp.addr.eq(Cat(dyn.cons[:ib], qpn)),
            infl_wp.data.wr_id.eq(wr_id),
            infl_wp.data.last_psn.eq(dyn.psn - 1),
            infl_wp.data.signaled.eq(flags[0]),
            infl_wp.data.write.eq((wop == 3) | (wop == 4)),
            infl_wp.data.imm.eq((wop == 1) | (wop == 4)),
            infl_wp.data.byte_len.eq(total),
        ]

        # ports driven from registers
        m.d.comb += [
            self.ctx_req.payload.eq(qpn),
            self.wqe_rd.req.payload.addr.eq(
                ctx.sq_base + ((dyn.cons & ((Const(1, 17) << ctx.sq_log) - 1)) << 6)),
            self.wqe_rd.req.payload.len_bytes.eq(64),
            self.wqe_rd.req.payload.tag.eq(0),
            self.lookup.req.payload.key.eq(Mux(k[0], sge_key[1], sge_key[0])),
            self.lookup.req.payload.pd.eq(ctx.pd),
            self.lookup.req.payload.access.eq(0),
            self.lookup.req.payload.va.eq(Mux(k[0], sge_addr[1], sge_addr[0])),
            self.lookup.req.payload.len.eq(Mux(k[0], sge_len[1], sge_len[0])),
            self.lookup.req.payload.tag.eq(k),
            ecpl.payload.qpn.eq(qpn), ecpl.payload.wr_id.eq(wr_id),
            ecpl.payload.status.eq(status),
            ecpl.payload.opcode.eq((wop == 3) | (wop == 4)),
            ecpl.payload.fault.eq(hfault),
            eng_dyn.eq(dyn),
        ]

        with m.FSM(name="engine"):
            with m.State("IDLE"):
                m.d.comb += work.o.ready.eq(1)
                with m.If(work.o.valid):
                    m.d.sync += qpn.eq(work.o.payload)
                    m.next = "PRE"
            with m.State("PRE"):
                # the table reads of the new QPN reach their registers (dyn_rd) by CTX_WAIT
                m.d.comb += self.busy.eq(1)
                m.next = "CTX"
            with m.State("CTX"):
                m.d.comb += [self.ctx_req.valid.eq(1), self.busy.eq(1)]
                with m.If(self.ctx_req.ready):
                    m.next = "CTX_WAIT"
            with m.State("CTX_WAIT"):
                m.d.comb += [self.ctx_resp.ready.eq(1), self.busy.eq(1)]
                with m.If(self.ctx_resp.valid):
                    m.d.sync += [ctx.eq(self.ctx_resp.payload), dyn.eq(dyn_rd)]
                    m.next = "CHECK_WAIT"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                with m.If(dyn.cons == prod):
                    m.next = "WB"
                with m.Elif((ctx.state == _ERROR) | dyn.err):
                    # ERROR: flush posted WQEs with WR_FLUSH_ERR, once every sent one is retired
                    with m.If(dyn.err | none_unretired):
                        m.d.sync += [flush.eq(1), dyn.err.eq(1), beat.eq(0), hfault.eq(0)]
                        m.next = "WQE_REQ"
                    with m.Else():
                        m.next = "WB"
                with m.Elif(ctx.state != _RTS):
                    m.next = "WB"
                with m.Elif(slot_room):
                    # (without room: wait for the ACKs that retire the oldest WQEs)
                    m.d.sync += [flush.eq(0), beat.eq(0), hfault.eq(0)]
                    m.next = "WQE_REQ"
            with m.State("WQE_REQ"):
                m.d.comb += [self.wqe_rd.req.valid.eq(1), self.busy.eq(1)]
                with m.If(self.wqe_rd.req.ready):
                    m.next = "WQE_DATA"
            with m.State("WQE_DATA"):
                m.d.comb += [self.wqe_rd.resp.ready.eq(1), self.busy.eq(1)]
                with m.If(self.wqe_rd.resp.valid):
                    if nb == 64:
                        m.d.sync += wqe.eq(self.wqe_rd.resp.payload.data)
                    else:
                        m.d.sync += [wqe.word_select(beat, W).eq(self.wqe_rd.resp.payload.data),
                                     beat.eq(beat + 1)]
                    with m.If(self.wqe_rd.resp.payload.err):
                        m.d.sync += hfault.eq(1)
                    with m.If(self.wqe_rd.resp.payload.last):
                        m.next = "VALIDATE"
            with m.State("VALIDATE"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [k.eq(0), sent.eq(0), total.eq(len0 + len1), resid.eq(len0 + len1)]
                with m.If(flush):
                    m.d.sync += status.eq(int(WcStatus.WR_FLUSH_ERR))
                    m.next = "ERR"
                with m.Elif(hfault):
                    m.d.sync += status.eq(0)
                    m.next = "ERR"
                with m.Elif((wop > 4) | (num_sge > 2)):
                    m.d.sync += status.eq(int(WcStatus.LOC_QP_OP_ERR))
                    m.next = "ERR"
                with m.Else():
                    m.next = "LOOKUP"
            with m.State("LOOKUP"):
                m.d.comb += self.busy.eq(1)
                cur_len = Mux(k[0], sge_len[1], sge_len[0])
                with m.If(k == num_sge):
                    # gather from SGE 0, or from SGE 1 when SGE 0 is empty
                    m.d.sync += [cur_addr.eq(Mux(len0 != 0, bus[0], bus[1])),
                                 seg_left.eq(Mux(len0 != 0, len0, len1))]
                    m.next = "PKT"
                with m.Elif(cur_len == 0):
                    m.d.sync += k.eq(k + 1)
                with m.Else():
                    m.d.comb += self.lookup.req.valid.eq(1)
                    with m.If(self.lookup.req.ready):
                        m.next = "LK_WAIT"
            with m.State("LK_WAIT"):
                m.d.comb += [self.lookup.resp.ready.eq(1), self.busy.eq(1)]
                with m.If(self.lookup.resp.valid):
                    with m.If(self.lookup.resp.payload.ok):
                        for i in range(2):
                            with m.If(k == i):
                                m.d.sync += bus[i].eq(self.lookup.resp.payload.bus_addr)
                        m.d.sync += k.eq(k + 1)
                        m.next = "LOOKUP"
                    with m.Else():
                        m.d.sync += status.eq(int(WcStatus.LOC_PROT_ERR))
                        m.next = "ERR"
            with m.State("PKT"):
                m.d.comb += [build.pkt.valid.eq(psn_room), self.busy.eq(1)]
                with m.If(psn_room & build.pkt.ready):
                    m.d.sync += [
                        left.eq(pay), sent.eq(sent + pay), resid.eq(resid - pay), was_last.eq(fits),
                        dyn.psn.eq(dyn.psn + 1),
                        dyn.noack.eq(Mux(ackreq, 0, dyn.noack + 1)),
                    ]
                    m.next = "CHUNK"
            with m.State("CHUNK"):
                m.d.comb += self.busy.eq(1)
                with m.If(left == 0):
                    with m.If(was_last):
                        m.next = "WB_NEXT"
                    with m.Else():
                        m.next = "PKT"
                with m.Else():
                    m.d.comb += build.chunk.valid.eq(1)
                    with m.If(build.chunk.ready):
                        m.d.sync += left.eq(left - clen)
                        with m.If(seg_left == clen):           # SGE 0 done: on to SGE 1
                            m.d.sync += [cur_addr.eq(bus[1]), seg_left.eq(len1)]
                        with m.Else():
                            m.d.sync += [cur_addr.eq(cur_addr + clen),
                                         seg_left.eq(seg_left - clen)]
            with m.State("WB_NEXT"):
                # record the WQE for the ACK processor, write back, look at the producer again
                m.d.comb += [eng_wb.eq(1), eng_dyn.cons.eq(dyn.cons + 1), infl_wp.en.eq(1),
                             self.busy.eq(1)]
                m.d.sync += dyn.cons.eq(dyn.cons + 1)
                m.next = "CHECK_WAIT"
            with m.State("CHECK_WAIT"):
                # one cycle for the registered reads and window flags to see the new dyn
                m.d.comb += self.busy.eq(1)
                m.next = "CHECK"
            with m.State("ERR"):
                # completions stay in SQ order: wait until every earlier WQE is retired
                m.d.comb += self.busy.eq(1)
                with m.If(dyn.err | none_unretired):
                    m.d.comb += ecpl.valid.eq(1)
                    with m.If(ecpl.ready):
                        m.d.sync += [dyn.err.eq(1), dyn.cons.eq(dyn.cons + 1)]
                        m.next = "WB_LOOP"
            with m.State("WB_LOOP"):
                m.d.comb += [eng_wb.eq(1), self.busy.eq(1)]
                m.next = "CHECK_WAIT"
            with m.State("WB"):
                m.d.comb += [eng_wb.eq(1), self.busy.eq(1)]
                m.next = "IDLE"

        # ---- ACK processor: advance ``una``, retire WQEs by acknowledged PSN --------------------
        a = Signal(ack_layout)
        cmp = Signal(_comp_layout)
        comp_rd = Signal(_comp_layout)
        m.d.sync += comp_rd.eq(comp_rp2.data)
        m.d.comb += [dyn_rp2.addr.eq(aq), comp_rp2.addr.eq(aq),
                     infl_rp.addr.eq(Cat(cmp.ccons[:ib], aq)),
                     cmp_new.eq(cmp)]
        ent = Signal(_inflight_layout)
        tcons = Signal(16)
        terr = Signal()
        retire = Signal()
        # PSN a is at or before PSN b (24-bit serial arithmetic)
        covered = Signal(24)
        m.d.comb += covered.eq(a.psn - ent.last_psn)
        adv = Signal(24)
        m.d.comb += adv.eq(a.psn + 1 - cmp.una)
        m.d.comb += [
            ccpl.payload.qpn.eq(aq), ccpl.payload.wr_id.eq(ent.wr_id),
            ccpl.payload.status.eq(int(WcStatus.SUCCESS)), ccpl.payload.opcode.eq(ent.write),
            ccpl.payload.flags.eq(Mux(ent.imm, 0x02, 0)), ccpl.payload.byte_len.eq(ent.byte_len),
        ]
        with m.FSM(name="completer"):
            with m.State("IDLE"):
                m.d.comb += self.ack.ready.eq(1)
                with m.If(self.ack.valid):
                    m.d.sync += [a.eq(self.ack.payload), aq.eq(self.ack.payload.qpn[:ab])]
                    m.next = "READ"
            with m.State("READ"):
                m.next = "READ2"           # comp/dyn reads of the new QPN
            with m.State("READ2"):
                m.next = "LOAD"            # ... and their registers
            with m.State("LOAD"):
                m.d.sync += cmp.eq(comp_rd)
                with m.If(a.syndrome[5:7] == 0):
                    m.next = "ADV"
                with m.Else():
                    m.next = "IDLE"        # NAKs: retry is not implemented
            with m.State("ADV"):
                # a newer ACK (0 < a.psn + 1 − una < 2^23) moves una
                with m.If((adv != 0) & ~adv[23]):
                    m.d.sync += cmp.una.eq(a.psn + 1)
                m.next = "WALK"
            with m.State("WALK"):
                # infl_rp reads slot ccons (address set from cmp last cycle)
                m.next = "HOLD"
            with m.State("HOLD"):
                m.d.sync += [ent.eq(infl_rp.data), tcons.eq(dyn_rp2.data.cons),
                             terr.eq(dyn_rp2.data.err)]
                m.next = "DECIDE"
            with m.State("DECIDE"):
                m.d.sync += retire.eq((cmp.ccons != tcons) & ~covered[23] & ~terr)
                m.next = "TEST"
            with m.State("TEST"):
                with m.If(retire):
                    with m.If(ent.signaled):
                        m.d.comb += ccpl.valid.eq(1)
                        with m.If(ccpl.ready):
                            m.d.sync += cmp.ccons.eq(cmp.ccons + 1)
                            m.next = "WALK"
                    with m.Else():
                        m.d.sync += cmp.ccons.eq(cmp.ccons + 1)
                        m.next = "WALK"
                with m.Else():
                    m.next = "WB"
            with m.State("WB"):
                with m.If(~eng_wb):
                    m.d.comb += cmp_wb.eq(1)
                    m.next = "IDLE"
        return m
