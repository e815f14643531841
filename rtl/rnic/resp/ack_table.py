"""Per-QP pending-response table: ACK/NAK frames waiting for the transmit stream.

PSN Check decides one response per cycle at most, whatever the MAC transmit stream does; this
table takes every decided response at once (``i.ready`` is always 1) and holds, per QP, at most
**one positive ACK and one NAK**, so that back-pressure on ``tx`` never reaches the receive
pipeline: the table has room for every QP by construction.

Rule (per QP, for responses decided while earlier ones of the same QP still wait here):

* a positive ACK (syndrome 0x1F) replaces a pending ACK of the QP: ACKs coalesce into the
  newest (the newest carries the highest PSN and MSN; the requester retires WQEs by the PSN
  acknowledged, interface.md §6, and an ACK at PSN P acknowledges every PSN before it,
  ``roce-reference.md`` §5 "coalesced ACKs");
* a NAK (anything else: 0x20–0x3F RNR, 0x60–0x63) is never merged into an ACK nor dropped for
  one; a NAK replaces an older NAK of the same QP only while both are still pending here (the
  requester acts on the newest: an older NAK 0x60/RNR asks for a retry from a PSN that the newer
  NAK or ACK already covers; a NAK 0x61–0x63 moves the QP to ERROR and is therefore the QP's last
  response);
* the kept ACK and NAK leave in the order they were decided (``nak_first``), so the frames of a
  QP are always a subsequence of the responses decided for it, in order.

QPs with something pending are served first come, first served: a FIFO of QPNs (each QP at most
once in it, so ``num_qp`` entries never overflow) feeds a take stage that snapshots the QP's
entry (flags, ACK, NAK, addresses) and emits its one or two frames on ``o``. A response that
arrives for the QP in the same cycle as its take starts a fresh entry (queued again).

Storage: the flags are registers (3 bits per QP), each updated from itself and the insert and
take strobes of its QP, which come from the QPNs decoded into two one-hot halves (16 + 16 lines
at 256 QPs; the head's registered with it) rather than from 8-bit compares in every bit. ACK
{PSN, MSN}, NAK {PSN, MSN, syndrome} and the QP's addresses {dmac, dip, sport, dqpn} (the
newest response's) are three block-RAM tables written by every response and read,
non-transparently, by the take stage. Throughput: one frame per cycle on ``o`` (one take per
cycle when each QP holds one frame). Latency: the input is registered, the QP FIFO has two
cycles, the take pipeline three (the popped QPN registered; the take reads and clears the
flags and issues the table reads; the block RAM outputs are registered before any logic) and a
4-entry output queue (which keeps ``o.ready`` out of the take logic) one: about 7 cycles from
``i`` to ``o``.

Python twin: :func:`sim.models.psn.pending_reduce` / :func:`sim.models.psn.table_match`.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import Queue
from ..tx.header_builder import tx_hdr_layout

__all__ = ["AckTable", "ack_item_layout"]


def ack_item_layout(abits):
    """One decided response: the local QP index and the frame to build."""
    return data.StructLayout({"qpn": abits, "hdr": tx_hdr_layout})


_ack_layout = data.StructLayout({"psn": 24, "msn": 24})
_nak_layout = data.StructLayout({"psn": 24, "msn": 24, "syndrome": 8})
_addr_layout = data.StructLayout({"dmac": 48, "dip": 32, "sport": 16, "dqpn": 24})


def _lo_bits(ab):
    """QPN bits decoded into the low one-hot half (and selecting a bit in the pending word)."""
    return min(4, ab)


def _halves(ab):
    """Widths of the two one-hot halves of an ``ab``-bit number: (2^high bits, 2^low bits)."""
    return 1 << (ab - _lo_bits(ab)), 1 << _lo_bits(ab)


def _onehot(value, ab, hot_hi, hot_lo, gate=1):
    """Statements: ``hot_hi``/``hot_lo`` := the one-hot halves of ``value`` (``hot_hi`` & gate)."""
    lo = _lo_bits(ab)
    v_hi = value[lo:ab] if ab > lo else 0
    return [hot_lo.eq(1 << value[:lo]), hot_hi.eq(Mux(gate, 1 << v_hi, 0))]


class AckTable(wiring.Component):
    """Per-QP pending ACK/NAK table (see the module docstring).

    Parameters
    ----------
    num_qp : int
        Number of QPs (power of two).

    Attributes
    ----------
    i : In(stream.Signature(ack_item_layout(abits)))
        Decided responses (``hdr.aeth`` = 1, ``hdr.opcode`` = 0x11); ``ready`` is always 1.
    o : Out(stream.Signature(tx_hdr_layout))
        Frames to build (to :class:`~rnic.tx.header_builder.HeaderBuilder`).
    pending : Out(1)
        Some response is held.
    """

    def __init__(self, *, num_qp):
        self.num_qp = num_qp
        self.abits = max(1, (num_qp - 1).bit_length())
        super().__init__({
            "i": In(stream.Signature(ack_item_layout(self.abits))),
            "o": Out(stream.Signature(tx_hdr_layout)),
            "pending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, ab = self.num_qp, self.abits
        ack_v = Signal(n)
        nak_v = Signal(n)
        nak_first = Signal(n)       # the pending NAK was decided before the pending ACK

        m.submodules.ackm = ackm = memory.Memory(shape=_ack_layout, depth=n, init=[])
        m.submodules.nakm = nakm = memory.Memory(shape=_nak_layout, depth=n, init=[])
        m.submodules.adrm = adrm = memory.Memory(shape=_addr_layout, depth=n, init=[])
        ack_w, nak_w, adr_w = ackm.write_port(), nakm.write_port(), adrm.write_port()
        ack_r, nak_r, adr_r = ackm.read_port(), nakm.read_port(), adrm.read_port()

        m.submodules.qf = qf = Queue(ab, n)
        # the frames leave through a short queue, so that the header builder's ready does not
        # reach the take logic (timing)
        m.submodules.oq = oq = Queue(tx_hdr_layout, 4)
        m.d.comb += [self.o.valid.eq(oq.o.valid), self.o.payload.eq(oq.o.payload),
                     oq.o.ready.eq(self.o.ready)]
        # the input is registered first (the insert logic then starts from registers)
        i_valid = Signal()
        i_reg = Signal(ack_item_layout(ab))
        m.d.sync += [i_valid.eq(self.i.valid), i_reg.eq(self.i.payload)]
        # i_reg.qpn decoded the same way, from the register (decoding the input instead would
        # share logic with the pending lookup below, which starts from the input, and lengthen it)
        i_hi, i_lo = _halves(ab)
        i_hot_hi = Signal(i_hi)     # the high half gated by i_valid
        i_hot_lo = Signal(i_lo)
        m.d.comb += _onehot(i_reg.qpn, ab, i_hot_hi, i_hot_lo, gate=i_valid)

        # ---- take: T0 (the popped QPN, registered) → T1 (take: read the flags and clear them,
        # issue the table reads) → S (the block RAMs' outputs) → R (registered; emit 1–2 frames)
        t_valid = Signal()
        t_q = Signal(ab)
        head = t_q
        s_valid = Signal()
        s_ack = Signal()
        s_nak = Signal()
        s_nf = Signal()
        r_valid = Signal()
        r_ack = Signal()
        r_nak = Signal()
        r_nf = Signal()
        r_a = Signal(_ack_layout)
        r_n = Signal(_nak_layout)
        r_d = Signal(_addr_layout)
        r_second = Signal()         # emitting the second of two frames
        two = Signal()
        m.d.comb += two.eq(r_ack & r_nak)
        nak_now = Signal()          # the frame being emitted is the NAK
        m.d.comb += nak_now.eq(Mux(two, r_nf ^ r_second, r_nak))
        r_done = Signal()
        m.d.comb += r_done.eq(r_valid & oq.i.ready & (~two | r_second))
        s_adv = Signal()
        m.d.comb += s_adv.eq(s_valid & (~r_valid | r_done))
        take = Signal()
        m.d.comb += [
            take.eq(t_valid & (~s_valid | s_adv)),
            qf.o.ready.eq(~t_valid | take),
        ]
        # head and the inserted QPN are also decoded into two one-hot halves each (the per-QP
        # flag updates below then take 2–3 inputs from them instead of decoding 8-bit numbers in
        # 256 places: far fewer high-fanout nets to route, docs/synthesis.md); head's halves are
        # registered with it
        t_hi, t_lo = i_hi, i_lo
        t_hot_hi = Signal(t_hi)
        t_hot_lo = Signal(t_lo)
        with m.If(qf.o.valid & qf.o.ready):
            m.d.sync += [t_valid.eq(1), t_q.eq(qf.o.payload)]
            m.d.sync += _onehot(qf.o.payload, ab, t_hot_hi, t_hot_lo)
        with m.Elif(take):
            m.d.sync += t_valid.eq(0)
        for rp in (ack_r, nak_r, adr_r):
            m.d.comb += [rp.addr.eq(head), rp.en.eq(take)]
        with m.If(take):
            m.d.sync += [s_valid.eq(1),
                         s_ack.eq(ack_v.bit_select(head, 1)),
                         s_nak.eq(nak_v.bit_select(head, 1)),
                         s_nf.eq(nak_first.bit_select(head, 1))]
        with m.Elif(s_adv):
            m.d.sync += s_valid.eq(0)
        with m.If(s_adv):
            m.d.sync += [r_valid.eq(1), r_second.eq(0), r_ack.eq(s_ack), r_nak.eq(s_nak),
                         r_nf.eq(s_nf), r_a.eq(ack_r.data), r_n.eq(nak_r.data),
                         r_d.eq(adr_r.data)]
        with m.Elif(r_done):
            m.d.sync += r_valid.eq(0)
        with m.Elif(r_valid & oq.i.ready):
            m.d.sync += r_second.eq(1)

        o = oq.i.payload
        m.d.comb += [
            oq.i.valid.eq(r_valid),
            o.dmac.eq(r_d.dmac), o.dip.eq(r_d.dip), o.sport.eq(r_d.sport), o.dqpn.eq(r_d.dqpn),
            o.opcode.eq(0x11), o.aeth.eq(1),
            o.psn.eq(Mux(nak_now, r_n.psn, r_a.psn)),
            o.msn.eq(Mux(nak_now, r_n.msn, r_a.msn)),
            o.syndrome.eq(Mux(nak_now, r_n.syndrome, 0x1F)),
        ]

        # ---- insert ----------------------------------------------------------------------------
        # Whether the inserted QP already has something pending is looked up in two halves: on
        # the input, the 16-bit word of the flags holding its QP (a 16:1 mux of words) and the
        # corrections for the insert and the take of that cycle are registered; the next cycle
        # picks the QP's bit out of the word (a 16:1 mux) and applies them. The flag vectors
        # below are updated bit by bit (each bit from itself, its decoded insert and take
        # strobes and the ACK/NAK bit), with no mux of the vector.
        i = i_reg
        q = i.qpn
        is_ack = Signal()
        m.d.comb += is_ack.eq(i.hdr.syndrome == 0x1F)
        conflict = Signal()
        m.d.comb += conflict.eq(take & (head == q))
        pend = Signal(n)
        m.d.comb += pend.eq(ack_v | nak_v)
        i_pend = Signal()           # i_reg's QP has a pending ACK or NAK (before this take)
        nq = self.i.payload.qpn
        lo = _lo_bits(ab)
        p_word = Signal(1 << lo)    # the word of `pend` holding nq's bit, as it was
        p_took = Signal()           # ... minus a take of that QP in the same cycle
        p_ins = Signal()            # ... plus an insert of that QP in the same cycle
        m.d.sync += [p_word.eq(pend.word_select(nq[lo:ab], 1 << lo) if ab > lo else pend),
                     p_took.eq(take & (head == nq)), p_ins.eq(i_valid & (q == nq))]
        m.d.comb += i_pend.eq((p_word.bit_select(q[:lo], 1) & ~p_took) | p_ins)
        m.d.comb += [
            self.i.ready.eq(1),
            qf.i.valid.eq(i_valid & ~(i_pend & ~conflict)),
            qf.i.payload.eq(q),
        ]
        # the take clears the head's flags; an insert in the same cycle rewrites its QP's:
        # an ACK sets the ACK flag and keeps a NAK still pending (which then came first), a NAK
        # sets the NAK flag and keeps a pending ACK
        take_hot = Signal(n)        # = take ? 1 << head : 0
        ins_hot = Signal(n)         # = i_valid ? 1 << q : 0
        t_hot_hi_g = Signal(t_hi)   # take folded into the 16 high lines, not into n bits
        m.d.comb += t_hot_hi_g.eq(t_hot_hi & take.replicate(t_hi))
        for k in range(n):
            m.d.comb += [take_hot[k].eq(t_hot_hi_g[k // t_lo] & t_hot_lo[k % t_lo]),
                         ins_hot[k].eq(i_hot_hi[k // i_lo] & i_hot_lo[k % i_lo])]
        ack_k = Signal(n)
        nak_k = Signal(n)
        m.d.comb += [ack_k.eq(ack_v & ~take_hot), nak_k.eq(nak_v & ~take_hot)]
        m.d.sync += [
            ack_v.eq(ack_k | Mux(is_ack, ins_hot, 0)),
            nak_v.eq(nak_k | Mux(is_ack, 0, ins_hot)),
            nak_first.eq((nak_first & ~ins_hot) | Mux(is_ack, ins_hot & nak_k, 0)),
        ]
        m.d.comb += [
            ack_w.addr.eq(q), ack_w.en.eq(i_valid & is_ack),
            ack_w.data.psn.eq(i.hdr.psn), ack_w.data.msn.eq(i.hdr.msn),
            nak_w.addr.eq(q), nak_w.en.eq(i_valid & ~is_ack),
            nak_w.data.psn.eq(i.hdr.psn), nak_w.data.msn.eq(i.hdr.msn),
            nak_w.data.syndrome.eq(i.hdr.syndrome),
            adr_w.addr.eq(q), adr_w.en.eq(i_valid),
            adr_w.data.dmac.eq(i.hdr.dmac), adr_w.data.dip.eq(i.hdr.dip),
            adr_w.data.sport.eq(i.hdr.sport), adr_w.data.dqpn.eq(i.hdr.dqpn),
            self.pending.eq(i_valid | t_valid | s_valid | r_valid | qf.o.valid | (qf.level != 0) | oq.o.valid
                            | (oq.level != 0)),
        ]
        return m
