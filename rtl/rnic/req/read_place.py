"""READ Place: the requester's READ response placement (interface.md §7, requester side).

PSN Check hands every response header it accepted for the requester (ACKNOWLEDGE 0x11 and READ
responses 0x0D–0x10, :data:`~rnic.ifaces.resp_hdr_layout`) to this block on ``hdr`` in arrival
order, and the payload beats of each READ response with ``len`` > 0 to the shared Scatter Path
(:class:`~rnic.resp.scatter.SharedScatter`, lane-0 aligned, ``last`` on its last beat; bytes
beyond ``len`` in the last beat are ignored), which this block drives through its client port
``wr``. Headers are
handled strictly one at a time, in order:

* **ACKNOWLEDGE**: forwarded on ``ack`` as kind WIRE {qpn, psn, syndrome}, once every earlier
  placement's event is out (the pending queue below is empty), so an ACK never reaches the
  completer before the PLACED events of the READ responses that arrived before it.
* **READ response** at QP q, PSN p: accepted through READ slot s, found either by the *fast
  path*, a one-entry cache {valid, qpn, idx, next} of the READ last accepted (q = qpn and
  p = next: slot idx, nothing asked), or by the *slow path*: once nothing is pending, a DECIDE
  {q, p, 0} goes out on ``ack`` and the completer's one answer comes on ``dec`` (``ok`` 0: the
  response is dropped; ``ok`` 1: slot ``dec.idx``). With record r = slot s,
  PMTU = 128 << r.pmtu and lpsn = r.fpsn + r.span, off = (p − r.fpsn mod 2^24) · PMTU; the
  response must be in the READ ((p − fpsn) ≤ span, 24-bit serial), a FIRST/MIDDLE of PMTU
  bytes when p ≠ lpsn, a LAST/ONLY of total − off bytes when p = lpsn, and a FIRST/ONLY when
  p = fpsn (a READ's responses never start with MIDDLE or LAST; a FIRST after fpsn, or an ONLY
  at lpsn, answers a READ sent again from that response); one that is not is dropped. An accepted one
  writes bytes [off, off + len) of the READ's destination (``len0`` bytes at ``addr0``, then
  the rest at ``addr1``): at most two host write requests, each with a Scatter Path
  piece that realigns its bytes; the cache becomes
  {q, s, p + 1}. After the READ's last response it becomes {q, t, p + 1} when slot t holds the
  READ *linked* to s, else invalid.
* **Links**: a slot record written on ``rec`` right after the record of slot s (no record
  between them), of the same QPN and with ``fpsn`` = s's lpsn + 1, is linked to s: it is
  the next WQE of that QP, so the first response after s's last one is its first response, and
  every PSN before it is acknowledged by s's responses. A stream of READs on one QP is thus
  placed without asking the completer between them. A record written to a slot unlinks it from
  both sides (links to it and from it).
* **Stale responses**: each answer on ``dec`` also carries the QP's ``una`` (every PSN before
  it is acknowledged; it only grows while the QP lives) and ``gap`` (refused after a gap: the
  oldest WQE is a READ whose response at ``una`` is missing). The last one (``una_v`` set, and
  no ``qp_set`` of its QPN since the block started on the header) is kept as the *stale mark* {qpn, una,
  gap}; a response of that QP that the cache does not take is refused at once, without a
  DECIDE, when it is before ``una`` (24-bit serial) or, with ``gap``, after it: the completer
  would refuse it, and it changes nothing there. Accepting a response of the mark's QP (the
  one at ``una`` first) clears ``gap``; a ``qp_set`` of its QPN clears the mark. A run of
  responses that cannot be placed (a duplicate READ answered again, a run after a lost
  response) is thus dropped at the rate its beats arrive: through DECIDE each would cost the
  completer's round trip on top of its beats, and the next header only comes after its beats
  (RX Parse), so receive would fall behind the wire.
* A dropped response strobes ``drop`` and invalidates the cache; its beats (if ``len`` > 0) are
  drained by a closing piece of length 0, with no write.

Every accepted response enters a pending queue {qpn, psn, writes} (8 deep) in acceptance order.
The write completions (``wr.done``, one per request, in request order) are counted against its
head; when all of the head's writes are back, the head leaves as PLACED {q, p, 0} on ``ack``,
or, if a completion had ``err``, as ``fault`` {q} (no PLACED; the cache is invalidated). A
placement without writes (``len`` 0) leaves as soon as it is the head. The fast path goes on
with the next header while earlier responses stream and their writes are outstanding; only
the slow path and WIRE wait for the queue to drain.

A header is read on ``hdr`` while the block works on it (a stream's payload holds until its
transfer) and taken (``ready``, a register) in the cycle after the block is done with its
fields: after the checks (C4) for a placed response, after WIRE for an ACKNOWLEDGE, after
the refusal for a dropped response. The checks' part lengths are what the output registers
read: the checks of the next response wait, before they set them (C3), until both output
registers are taken.

Timing (cycles from the start on a header, the first cycle it is offered with the block
idle; c is the READ's PMTU code, PMTU = 128 << c, 1..5): the fast path hands the first piece
and write request to their output registers after 6 + c cycles (one more for a second part)
and starts on the next header 7 + c cycles after the first, 8 + c with two pieces (the offset,
(p − fpsn) · PMTU, is shifted left one bit a cycle, c times: a barrel shifter would cost more
than the cycles, which even a PMTU response's beats cover at W=512); the slow path offers DECIDE on ``ack`` 3 cycles after the start when
nothing is pending (the event register loaded in the cycle after the check), and continues in
the cycle after the answer (``dec`` is the completer's registers, used as it comes); a
response refused by the stale mark hands its closing piece to its output register 2 cycles
after the start, and the next header is started 3 cycles after the first.

``qp_set`` naming the cached QPN, or a ``rec`` write of the cached slot, invalidates the cache
(also when it meets the cache's update in the same cycle). A link is made with the later
record's write (``rec`` compared with the QPN and lpsn + 1 of the record before, kept in
registers; the result registered and entered into the links
a cycle later, read through that register meanwhile; not when the record before was written
in the cycle just before: the requester's are further apart). The cache follows a link only
if it is there when the last response's checks begin. The slot table is LUT RAM of R rows
(written by ``rec``, read asynchronously at the slot being worked on); a slot must not be
rewritten while responses of its READ are being accepted. A record's ``span`` is
max(1, ⌈``total``/PMTU⌉) − 1, as the requester writes it: the last response's length is then
checked against ``total`` − off on 13 bits, and the row keeps ``total`` mod 2^13.
"""

import types

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..ifaces import (READ_SLOT_BITS, AckKind, QpnStream, ack_layout, qpn_layout,
                      read_dec_layout, read_rec_layout, resp_hdr_layout)
from ..resp.scatter import PlaceSignature, piece_layout
from ..stream import Queue, check_width
from ..parts import add as _add

__all__ = ["ReadPlace"]

ACKNOWLEDGE = 0x11
FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10

#: The slot table's row: a READ record without its index and QPN, its byte count cut to the 13
#: bits the last response's length is checked with (``total`` mod 2^13: with span =
#: max(1, ⌈total/PMTU⌉) − 1, the last response's length, total − off, is at most PMTU, so it is
#: that value mod 2^13).
_row_layout = data.StructLayout({f: (13 if f == "total" else s)
                                 for f, s in read_rec_layout.members.items()
                                 if f not in ("idx", "qpn")})

def _pend_layout(qb):
    """A pending placement: its event fields (the QPN in ``qb`` bits) and its number of write
    requests (0..2)."""
    return data.StructLayout({"qpn": qb, "psn": 24, "n": 2})



class ReadPlace(wiring.Component):
    """READ responses → host writes and PLACED events; ACKNOWLEDGEs forwarded behind them.

    Parameters
    ----------
    width : int
        Data width W (64, 128, 256, 512).
    slots : int
        READ slots R (a power of two, 2..64; default 16): rows of the slot table.
    num_qp : int
        QPs N (a power of two; default 2^24): every QPN on ``hdr``, ``rec`` and ``qp_set`` is
        below N (PSN Check passes only QPs of the core), so QPNs are kept in log2(N) bits.

    Attributes
    ----------
    hdr : In(stream.Signature(resp_hdr_layout))
        Response headers from PSN Check, in arrival order, each read while the block works on
        it; ``ready`` is a register.
    rec : In(stream.Signature(read_rec_layout, always_ready=True))
        Slot table writes (``idx`` < R), in the order the READs are first sent.
    ack : Out(stream.Signature(ack_layout))
        Events to the completer, in order: WIRE, DECIDE, PLACED. Registered.
    dec : In(stream.Signature(read_dec_layout))
        One answer per DECIDE, in order, with the QP's ``una``; ``ready`` is constant 1 (the
        answer is used as it comes: the completer drives it from registers).
    wr : Out(PlaceSignature())
        A client port of :class:`~rnic.resp.scatter.SharedScatter` (``req`` and ``piece``
        from registers, ``done.ready`` from registers; tag 0).
    fault : Out(QpnStream())
        A placed response's write came back with ``err``: its QPN. Registered.
    qp_set : In(stream.Signature(qpn_layout, always_ready=True))
        A SET_QP of this QPN was written: invalidates the cache if it names the cached QPN.
    drop : Out(1)
        One-cycle strobe per READ response dropped here (refused or inconsistent). Registered.
    """

    def __init__(self, *, width, slots=16, num_qp=1 << 24):
        self.width = check_width(width)
        if (not isinstance(num_qp, int) or isinstance(num_qp, bool) or num_qp & (num_qp - 1)
                or not 2 <= num_qp <= 1 << 24):
            raise ValueError(f"num_qp must be a power of two in 2..2^24, not {num_qp!r}")
        self.qb = (num_qp - 1).bit_length()
        if (not isinstance(slots, int) or isinstance(slots, bool) or slots & (slots - 1)
                or not 2 <= slots <= 1 << READ_SLOT_BITS):
            raise ValueError(f"slots must be a power of two in 2..64, not {slots!r}")
        self.slots = slots
        super().__init__({
            "hdr": In(stream.Signature(resp_hdr_layout)),
            "rec": In(stream.Signature(read_rec_layout, always_ready=True)),
            "ack": Out(stream.Signature(ack_layout)),
            "dec": In(stream.Signature(read_dec_layout)),
            "wr": Out(PlaceSignature()),
            "fault": Out(QpnStream()),
            "qp_set": In(stream.Signature(qpn_layout, always_ready=True)),
            "drop": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, R = self.width, self.slots
        B = W // 8
        lb = B.bit_length() - 1
        sb = (R - 1).bit_length()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(W=W, R=R, lb=lb, sb=sb, qb=self.qb)
        _add(t, self._slot_table(m, t))
        _add(t, self._outputs(m, t))
        _add(t, self._pending(m, t))
        _add(t, self._header(m, t))
        _add(t, self._links(m, t))
        _add(t, self._cache(m, t))
        _add(t, self._stale_mark(m, t))
        _add(t, self._checks(m, t))
        self._header_fsm(m, t)
        return m

    def _slot_table(self, m, t):
        """The slot table (LUT RAM of R rows, written by ``rec``), read asynchronously at ``slot``,
        the slot being worked on. Adds ``rp`` (``rec``'s payload), ``slot`` and its row ``r``."""
        R, sb = t.R, t.sb
        # ---- the slot table: LUT RAM, written by ``rec``, read asynchronously at ``slot`` ----
        m.submodules.table = table = Memory(shape=_row_layout, depth=R, init=[])
        tw = table.write_port()
        tr = table.read_port(domain="comb")
        rp = self.rec.payload
        m.d.comb += [tw.addr.eq(rp.idx[:sb]), tw.en.eq(self.rec.valid)]
        m.d.comb += [getattr(tw.data, f).eq(getattr(rp, f)[:len(getattr(tw.data, f))])
                     for f in _row_layout.members]
        slot = Signal(sb)
        m.d.comb += tr.addr.eq(slot)
        r = tr.data
        return types.SimpleNamespace(rp=rp, slot=slot, r=r)

    def _outputs(self, m, t):
        """What leaves the block, from registers: the piece register (``pc``) and the
        write-request register (``rq_*``; both empty: ``out_free``), the
        event register on ``ack`` (``a``, ``a_valid``; empty: ``a_free``) and the fault register
        (``f_*``). Adds them."""
        # ---- the output registers of ``wr.piece`` and ``wr.req`` ----
        # (both are loaded together: a piece's ``len`` and ``lane`` are its write request's
        # length and address bits, a closing piece with 0 in both; the lengths and ``src`` are
        # the parts' lengths kept by the checks (``a0``, ``a1``), as ``o_k`` says, until both
        # registers are taken)
        pc_valid = Signal()
        pc = types.SimpleNamespace(src=Signal(13), end=Signal())
        o_k = Signal(2)                 # the registers hold: 0 a closing piece, 1 part 0, 2 part 1
        rq_valid = Signal()
        rq_addr = Signal(64)
        rq_len = Signal(13)
        m.d.comb += [self.wr.piece.valid.eq(pc_valid), self.wr.piece.payload.src.eq(pc.src),
                     self.wr.piece.payload.len.eq(rq_len),
                     self.wr.piece.payload.lane.eq(rq_addr[:t.lb]),
                     self.wr.piece.payload.end.eq(pc.end),
                     self.wr.req.valid.eq(rq_valid), self.wr.req.payload.addr.eq(rq_addr),
                     self.wr.req.payload.len_bytes.eq(rq_len),
                     self.wr.req.payload.tag.eq(0)]
        with m.If(self.wr.piece.ready):
            m.d.sync += pc_valid.eq(0)
        with m.If(self.wr.req.ready):
            m.d.sync += rq_valid.eq(0)
        out_free = Signal()             # both output registers empty (a piece may be loaded)
        m.d.comb += out_free.eq(~pc_valid & ~rq_valid)

        # ---- the event register (``ack``) and the fault register ----
        a_valid = Signal()
        a = Signal(data.StructLayout({f: (t.qb if f == "qpn" else s)
                                      for f, s in ack_layout.members.items()}))
        m.d.comb += [self.ack.valid.eq(a_valid)]
        m.d.comb += [self.ack.payload[f].eq(a[f]) for f in ack_layout.members]
        with m.If(self.ack.ready):
            m.d.sync += a_valid.eq(0)
        a_free = Signal()
        m.d.comb += a_free.eq(~a_valid)
        f_valid = Signal()
        f_qpn = Signal(t.qb)
        m.d.comb += [self.fault.valid.eq(f_valid), self.fault.payload.qpn.eq(f_qpn)]
        with m.If(self.fault.ready):
            m.d.sync += f_valid.eq(0)
        return types.SimpleNamespace(
            pc_valid=pc_valid, pc=pc, o_k=o_k, rq_valid=rq_valid, rq_addr=rq_addr, rq_len=rq_len,
            out_free=out_free, a_valid=a_valid, a=a, a_free=a_free, f_valid=f_valid, f_qpn=f_qpn)

    def _pending(self, m, t):
        """The pending queue of accepted placements and its head: the head's write completions are
        counted (``got``, ``herr``), and it leaves as PLACED on ``ack`` or, after a failed write, as
        ``fault`` (``inval_err``: the cache is invalidated). Adds the queue, ``inval_err`` and
        ``idle_q`` (nothing pending)."""
        a, a_free, a_valid, f_qpn, f_valid = t.a, t.a_free, t.a_valid, t.f_qpn, t.f_valid
        # ---- the pending queue and its head ----
        m.submodules.pend = pend = Queue(_pend_layout(t.qb), 8, registered=("n",))
        po = pend.o
        got = Signal(2)                 # completions of the head counted
        herr = Signal()                 # ... one of them had ``err``
        inval_err = Signal()
        m.d.comb += self.wr.done.ready.eq(po.valid & (got != po.payload.n))
        with m.If(self.wr.done.valid & self.wr.done.ready):
            m.d.sync += [got.eq(got + 1), herr.eq(herr | self.wr.done.payload.err)]
        with m.If(po.valid & (got == po.payload.n)):
            with m.If(herr):
                with m.If(~f_valid):
                    m.d.comb += [po.ready.eq(1), inval_err.eq(1)]
                    m.d.sync += [f_valid.eq(1), f_qpn.eq(po.payload.qpn), got.eq(0),
                                 herr.eq(0)]
            with m.Elif(a_free):
                m.d.comb += po.ready.eq(1)
                m.d.sync += [a_valid.eq(1), a.qpn.eq(po.payload.qpn), a.psn.eq(po.payload.psn),
                             a.syndrome.eq(0), a.kind.eq(AckKind.PLACED), got.eq(0)]
        idle_q = Signal()               # nothing pending (the head's event, if any, is out)
        m.d.comb += idle_q.eq(pend.level == 0)
        return types.SimpleNamespace(pend=pend, inval_err=inval_err, idle_q=idle_q)

    def _header(self, m, t):
        """The header being worked on, read on ``hdr`` until it is taken (a stream's payload
        holds until its transfer): ``h`` (its fields, the QPN in log2(N) bits). ``start``: the
        FSM begins with it (IDLE); ``rel``: the FSM is done with its fields, and ``hdr.ready``
        (a register) takes it in the next cycle. Adds them."""
        hp = self.hdr.payload
        h = types.SimpleNamespace(opcode=hp.opcode, qpn=hp.qpn[:t.qb], psn=hp.psn,
                                  syndrome=hp.syndrome, len=hp.len)
        start = Signal()
        rel = Signal()
        take = Signal()
        m.d.sync += take.eq(rel)
        m.d.comb += self.hdr.ready.eq(take)
        # (the completer's answer is taken as it comes, in WAIT: ``dec`` is its registers)
        m.d.comb += self.dec.ready.eq(1)
        return types.SimpleNamespace(h=h, start=start, rel=rel, take=take)

    def _links(self, m, t):
        """The links between READs recorded one after the other on one QP, made and unmade by
        ``rec`` writes, and the link of the slot being worked on (``lnk_to``, read in C1; the
        link there, ``lnk_here``, registered in C1 and confirmed in C2; ``tgt_new``: a record is
        written to ``lnk_to`` now). Adds them.

        Every ``rec`` write of slot x writes ``nx[p] = x`` for the slot p written before it and
        ``bp[x] = p`` (two LUT RAMs of R × log2(R) bits). ``lnk_v[p]`` is set when the write
        makes a link (registered: a cycle later) and ``lnk_v[x]`` cleared. A link from s holds,
        to t = nx[s], while ``lnk_v[s]`` and ``bp[t] = s``: nx[s] is the record written right
        after s's, and a rewrite of t gives bp[t] the slot written before that rewrite, which is
        s only if s was rewritten in between (clearing lnk_v[s] or making the link anew). So a
        rewrite unlinks from both sides without comparing every slot's link."""
        R, rp, sb, slot = t.R, t.rp, t.sb, t.slot
        ri = rp.idx[:sb]
        lnk_v = Signal(R)               # slot s has a link (to nx[s], while bp[nx[s]] = s)
        p_v = Signal()                  # the record written last: QPN, slot, lpsn + 1
        p_qpn = Signal(t.qb)
        p_idx = Signal(sb)
        p_np = Signal(24)
        p_new = Signal()                # a record last cycle: no link
        m.d.sync += p_new.eq(self.rec.valid)
        with m.If(self.rec.valid):
            # (fpsn + span + 1: the + 1 as both operands' carry-in bit)
            m.d.sync += [p_v.eq(1), p_qpn.eq(rp.qpn[:t.qb]), p_idx.eq(ri),
                         p_np.eq((Cat(Const(1, 1), rp.fpsn) + Cat(Const(1, 1), rp.span))[1:25])]
        # (both read asynchronously, a write seen from the next cycle on: the FSM follows
        # nx[slot] only when there is a link at C1, after which nx[slot] is not written, and a
        # write of bp at lnk_to from C2 on is met by tgt_new)
        m.submodules.nx = nx = Memory(shape=sb, depth=R, init=[])
        m.submodules.bp = bp = Memory(shape=sb, depth=R, init=[])
        nx_w, nx_r = nx.write_port(), nx.read_port(domain="comb")
        bp_w, bp_r = bp.write_port(), bp.read_port(domain="comb")
        m.d.comb += [nx_w.en.eq(self.rec.valid), nx_w.addr.eq(p_idx), nx_w.data.eq(ri),
                     bp_w.en.eq(self.rec.valid), bp_w.addr.eq(ri), bp_w.data.eq(p_idx),
                     nx_r.addr.eq(slot)]
        # a link made by this record: its valid bit a cycle later (``mk_v``, ``mk_from``), so
        # the record's QPN and PSN compares reach one register, not the R bits; meanwhile the
        # link reads through mk_v (``lnk_hv``)
        mk_v = Signal()
        mk_from = Signal(sb)
        m.d.sync += [mk_v.eq(self.rec.valid & p_v & ~p_new & (rp.qpn[:t.qb] == p_qpn)
                             & (rp.fpsn == p_np) & (ri != p_idx)),
                     mk_from.eq(p_idx)]
        lnk_hv = Signal(R)
        m.d.comb += lnk_hv.eq(lnk_v | Mux(mk_v, Const(1, R) << mk_from, 0))
        # the slot rewritten: no link from it (at once: the FSM may be about to follow one)
        m.d.sync += lnk_v.eq(lnk_hv & ~Mux(self.rec.valid, Const(1, R) << ri, 0))
        # the slot being worked on has a link (registered in C1: a link made later is not
        # followed) to lnk_to = nx[slot] (the same from C1 on when there is one: nx[s] is
        # written only while s is the record written last), which bp confirms in C2; a rewrite
        # of lnk_to from C2 on drops it (in C2–C4 against lnk_to, and in the cycle the cache
        # takes it by the kill in _cache)
        lnk_here = Signal()
        lnk_to = Signal(sb)
        m.d.comb += [lnk_to.eq(nx_r.data), bp_r.addr.eq(lnk_to)]
        lnk_back = Signal()             # bp[lnk_to] is the slot being worked on
        m.d.comb += lnk_back.eq(bp_r.data == slot)
        tgt_new = Signal()              # a record is written to lnk_to now
        m.d.comb += tgt_new.eq(self.rec.valid & (ri == lnk_to))
        return types.SimpleNamespace(
            lnk_v=lnk_hv, lnk_here=lnk_here, lnk_to=lnk_to, tgt_new=tgt_new,
            lnk_back=lnk_back)

    def _cache(self, m, t):
        """The fast path's cache {``c_valid``, ``c_qpn``, ``c_idx``, ``c_next``}, updated by the
        FSM (``set_c``, ``set_l``, ``clr_c``) and invalidated by ``qp_set`` and ``rec``
        (``kill``) or a fault. Adds them."""
        h, inval_err, lnk_to, rp, sb, slot = t.h, t.inval_err, t.lnk_to, t.rp, t.sb, t.slot
        # ---- the cache ----
        qb = t.qb
        c_valid = Signal()
        c_qpn = Signal(qb)
        c_idx = Signal(sb)
        c_next = Signal(24)
        # this cycle's update of the cache (by the FSM or a fault); invalidations by ``qp_set``
        # and ``rec`` are compared with the value the cache would take
        set_c = Signal()                # the FSM accepted a response that is not the last
        set_l = Signal()                # ... that is the last, of a READ with a link
        clr_c = Signal()                # the FSM (or a fault) invalidates it
        n_qpn = Signal(qb)
        n_idx = Signal(sb)
        m.d.comb += [n_qpn.eq(Mux(set_c | set_l, h.qpn, c_qpn)),
                     n_idx.eq(Mux(set_l, lnk_to, Mux(set_c, slot, c_idx)))]
        # the fast path's compare, registered as the FSM starts on the header (c_qpn and
        # c_next change only in C4, never between a start and HEAD; c_valid is used as it
        # stands)
        c_eq = Signal()
        with m.If(t.start):
            m.d.sync += c_eq.eq((h.qpn == c_qpn) & (h.psn == c_next))
        kill = Signal()
        # (each compare made with a register, the FSM's choice after them)
        sq, ri = self.qp_set.payload.qpn[:qb], rp.idx[:sb]
        m.d.comb += kill.eq((self.qp_set.valid & Mux(set_c | set_l, sq == h.qpn, sq == c_qpn))
                            | (self.rec.valid & Mux(set_l, ri == lnk_to,
                                                    Mux(set_c, ri == slot, ri == c_idx)))
                            | inval_err)
        with m.If(set_c | set_l):
            m.d.sync += [c_qpn.eq(n_qpn), c_idx.eq(n_idx), c_next.eq(h.psn + 1)]
        with m.If(kill | clr_c):
            m.d.sync += c_valid.eq(0)
        with m.Elif(set_c | set_l):
            m.d.sync += c_valid.eq(1)
        return types.SimpleNamespace(
            c_valid=c_valid, c_eq=c_eq, c_qpn=c_qpn, c_idx=c_idx, c_next=c_next, set_c=set_c,
            set_l=set_l, clr_c=clr_c)

    def _stale_mark(self, m, t):
        """The stale mark {``s_qpn``, ``s_una``, ``s_gap``} kept from the completer's last answer
        (``s_set``) unless a SET_QP of its QPN came since the FSM started on the header
        (``qs_seen``, ``qs_now``). Adds ``s_hit`` (the header's response is refused by the mark at once), the
        FSM's strobes ``s_set`` and ``s_acc`` (it accepts a response), ``qs_seen`` and
        ``qs_now``."""
        d, h = self.dec.payload, t.h
        # ---- the stale mark: the ``una`` of QP s_qpn with the completer's last answer (every
        # PSN before it is acknowledged, and una only grows while the QP lives), so a response
        # before it is refused at once; a SET_QP of s_qpn clears it, and an answer that a SET_QP
        # of its QPN met after the FSM started on the header (``qs_seen``) is not kept
        s_valid = Signal()
        s_qpn = Signal(t.qb)
        s_una = Signal(24)
        s_gap = Signal()                # ... refused after a gap: responses after s_una too,
        #                                 until one of s_qpn is accepted (the one at s_una)
        qs_seen = Signal()
        s_set = Signal()                # the FSM keeps the answer's una
        qs_now = Signal()               # a SET_QP of the header's QPN this cycle
        m.d.comb += qs_now.eq(self.qp_set.valid & (self.qp_set.payload.qpn[:t.qb] == h.qpn))
        with m.If(t.start):
            m.d.sync += qs_seen.eq(0)
        with m.Elif(qs_now):
            m.d.sync += qs_seen.eq(1)
        s_acc = Signal()                # the FSM accepts a response
        with m.If(s_set):
            m.d.sync += [s_valid.eq(1), s_qpn.eq(h.qpn), s_una.eq(d.una), s_gap.eq(d.gap)]
        with m.Elif(self.qp_set.valid & (self.qp_set.payload.qpn[:t.qb] == s_qpn)):
            m.d.sync += s_valid.eq(0)
        with m.Elif(s_acc & (h.qpn == s_qpn)):
            m.d.sync += s_gap.eq(0)
        s_hit = Signal()                # the header's response is stale by the mark
        # (its compares are registered as the FSM starts on the header: s_qpn, s_una and s_gap
        # change only in WAIT and C4, never between a start and HEAD; s_valid is used as it
        # stands)
        s_dp = Signal(24)
        s_eq = Signal()                 # the header's QPN is the mark's
        s_before = Signal()             # its PSN is before s_una
        s_after = Signal()              # ... after it
        m.d.comb += s_dp.eq(h.psn - s_una)
        with m.If(t.start):
            m.d.sync += [s_eq.eq(h.qpn == s_qpn), s_before.eq(s_dp[23]),
                         s_after.eq(~s_dp[23] & (s_dp != 0))]
        m.d.comb += s_hit.eq(s_valid & s_eq & (s_before | (s_gap & s_after)))
        return types.SimpleNamespace(
            qs_seen=qs_seen, s_set=s_set, qs_now=qs_now, s_acc=s_acc, s_hit=s_hit)

    def _checks(self, m, t):
        """The registers of the checks C1–C4 (the response's PSN against the READ's, its offset and
        length, ``ok``), the split of its bytes into the two parts (``a0``, ``a1``) and their
        offsets (``off``; ``d0`` = len0 − off), the host address of the part to write next
        (``ad``, as ``p_sel`` chooses), and the ``drop`` strobe. Adds them."""
        h, r = t.h, t.r
        # ---- the checks, in registered steps ----
        # (``off`` holds a value in turn: (p − fpsn) · 128 from C1, shifted left one bit a
        # cycle from C2 on, ``sh`` times (the PMTU code: PMTU = 128 << code), so that it is
        # the offset from SH on; ``tot_r`` is the slot's total (mod 2^13) from C2. C2 compares
        # with the slot's span as the LUT RAM reads it at ``slot``, unchanged since C1, as C1
        # subtracts its fpsn)
        off = Signal(32)                # byte offset of the response in the READ
        tot_r = Signal(13)
        dpsn = off[7:31]                # p − fpsn (C1 to C2)
        sh = Signal(3)                  # shifts of off still to make
        span = r.span                   # the slot's span, lpsn − fpsn
        is_last = Signal()              # p = lpsn
        is_first = Signal()             # p = fpsn
        pmc = Signal(3)
        in_range = Signal()
        ok = Signal()                   # the response is consistent
        # (the lengths of the two parts, which the output registers read until they are taken)
        a0 = Signal(13)                 # bytes of the first part (below len0)
        a1 = Signal(13)                 # bytes of the second part
        m.d.comb += [t.rq_len.eq(Mux(t.o_k == 1, a0, Mux(t.o_k == 2, a1, 0))),
                     t.pc.src.eq(Mux(t.o_k == 2, a0, 0))]
        drop = Signal()
        m.d.sync += drop.eq(0)
        m.d.comb += self.drop.eq(drop)

        op = h.opcode
        fm = (op == FIRST) | (op == MIDDLE)
        lo = (op == LAST) | (op == ONLY)
        # (the slot's total registered in C2: the LUT RAM's output does not lead C3's
        # subtraction and compares; len0 − off made in SH's last cycle from the row's len0,
        # and registered: it does not lead the choices of C3)
        rem = Signal(13)                # total − off (mod 2^13: at lpsn, at most PMTU)
        m.d.comb += rem.eq(tot_r - off[:13])
        pm_eq = Signal()                # len = PMTU (128 << pmc, on 14 bits)
        m.d.comb += pm_eq.eq(Cat(h.len, Const(0, 1)) == (Const(128, 14) << pmc)[:14])
        d0 = Signal(33)                 # len0 − off (negative: the response is all in part 1)
        below = d0[32] | (d0 == 0)      # off ≥ len0
        # part 0 = min(len, len0 − off) when off < len0
        short = Signal()                # off < len0 and len0 − off < len
        # (len − (len0 − off) on 13 bits and its borrow: the compare and the second part's
        # length from one subtraction)
        xl = Signal(14)
        m.d.comb += [xl.eq(Cat(h.len, Const(0, 1)) - Cat(d0[:13], Const(0, 1))),
                     short.eq(~below & (d0[13:32] == 0) & ~xl[13] & (xl[:13] != 0))]

        # the host address of the part P0 or P1 hands over: addr0 + off, or addr1 + the
        # second part's offset (off − len0 = −d0 when off ≥ len0, else 0: added as d0's
        # complement, all ones when off < len0, with a carry in), with p_sel (a register: the
        # first part is out, or there is none), added into the request register. The base
        # address is read from the slot table (at ``slot``, the same since C1).
        p_sel = Signal()
        below_r = Signal()              # below, registered in C3
        a_base = Signal(64)
        m.d.comb += a_base.eq(Mux(p_sel, r.addr1, r.addr0))
        ad = Signal(64)
        nd = Signal(64)                 # part 1's offset − 1
        m.d.comb += nd.eq(Mux(below_r, Cat(~d0[:32], (~d0[32]).replicate(32)), -1))
        m.d.comb += ad.eq(a_base + Mux(p_sel, nd, off) + p_sel)
        return types.SimpleNamespace(
            dpsn=dpsn, span=span, is_last=is_last, is_first=is_first, pmc=pmc, off=off,
            in_range=in_range, pm_eq=pm_eq, ok=ok, a0=a0, a1=a1, drop=drop, op=op, fm=fm,
            lo=lo, tot_r=tot_r, rem=rem, sh=sh, d0=d0, below=below, below_r=below_r,
            short=short, xl=xl, p_sel=p_sel, a_base=a_base, ad=ad)

    def _header_fsm(self, m, t):
        """The FSM that works on the headers one at a time: an ACKNOWLEDGE goes out as WIRE; a
        READ response is found by the cache, refused by the stale mark, or asked for (ASK,
        WAIT), then checked (C1–C4) and placed (P0, P1) or refused (its payload drained,
        DRAIN). Its states are those of :meth:`_find_states`, :meth:`_check_states` and
        :meth:`_place_states`."""
        with m.FSM():
            self._find_states(m, t)
            self._check_states(m, t)
            self._place_states(m, t)

    def _refuse(self, m, t):
        """The response is not placed: dropped, its payload drained; its header is released."""
        m.d.comb += [t.clr_c.eq(1), t.rel.eq(1)]
        m.d.sync += t.drop.eq(1)
        with m.If(t.h.len == 0):
            m.next = "IDLE"
        with m.Else():
            m.next = "DRAIN"

    def _find_states(self, m, t):
        """IDLE to WAIT (inside the header FSM): start on a header and find its READ's slot. An
        ACKNOWLEDGE is forwarded (WIRE); a READ response the cache takes goes straight to the
        checks, one the stale mark refuses (before the QP's ``una``, or after it after a gap) is
        dropped at once, and any other is asked of the completer (ASK: a DECIDE on ``ack``),
        whose answer on ``dec`` gives the slot or drops it (WAIT). The cache and the mark spare
        the completer's round trip, which would let receive fall behind the wire."""
        (a, a_free, a_valid, c_eq, c_idx, c_valid, h, idle_q, op, qs_now, qs_seen,
         s_hit, s_set, sb, slot) = (
            t.a, t.a_free, t.a_valid, t.c_eq, t.c_idx, t.c_valid, t.h, t.idle_q,
            t.op, t.qs_now, t.qs_seen, t.s_hit, t.s_set, t.sb, t.slot)
        d = self.dec.payload
        with m.State("IDLE"):
            # (not while the header before is being taken)
            with m.If(self.hdr.valid & ~t.take):
                m.d.comb += t.start.eq(1)
                m.next = "HEAD"
        with m.State("HEAD"):
            with m.If(op == ACKNOWLEDGE):
                m.next = "WIRE"
            with m.Elif(c_valid & c_eq):
                m.d.sync += slot.eq(c_idx)
                m.next = "C1"
            with m.Elif(s_hit):
                # before the QP's una (or after it, after a gap): refused at once, nothing
                # asked
                self._refuse(m, t)
            with m.Else():
                m.next = "ASK"
        with m.State("WIRE"):
            with m.If(idle_q & a_free):
                m.d.sync += [a_valid.eq(1), a.qpn.eq(h.qpn), a.psn.eq(h.psn),
                             a.syndrome.eq(h.syndrome), a.kind.eq(AckKind.WIRE)]
                m.d.comb += t.rel.eq(1)
                m.next = "IDLE"
        with m.State("ASK"):
            with m.If(idle_q & a_free):
                m.d.sync += [a_valid.eq(1), a.qpn.eq(h.qpn), a.psn.eq(h.psn),
                             a.syndrome.eq(0), a.kind.eq(AckKind.DECIDE)]
                m.next = "WAIT"
        with m.State("WAIT"):
            # (the answer taken as it comes: ``dec`` is the completer's registers)
            with m.If(self.dec.valid):
                with m.If(d.una_v & ~qs_seen & ~qs_now):
                    m.d.comb += s_set.eq(1)
                with m.If(d.ok):
                    m.d.sync += slot.eq(d.idx[:sb])
                    m.next = "C1"
                with m.Else():
                    m.next = "REFUSE"

    def _check_states(self, m, t):
        """C1 to C4 (inside the header FSM): check the response against its slot's row (in the
        READ's PSN range, the opcode and length its position requires) over cycles of
        registers (C1, C2, SH while the offset is shifted, C3, C4), and cut its payload into at most two pieces (``a0`` bytes into the READ's
        first buffer, ``a1`` into its second). One that passes is pushed on the pending queue
        (its PLACED waits for its writes), updates the cache and releases its header, then goes
        to P0/P1; one that fails is refused like a response the completer dropped."""
        (a0, a1, below, clr_c, d0, dpsn, fm, h, in_range, is_first, is_last, lnk_here,
         lnk_to, lnk_v, lo, off, sh, ok, op, pend, pmc, r, rem,
         s_acc, set_c, set_l, short, slot, span, tgt_new, tot_r) = (
            t.a0, t.a1, t.below, t.clr_c, t.d0, t.dpsn, t.fm, t.h, t.in_range, t.is_first,
            t.is_last, t.lnk_here, t.lnk_to, t.lnk_v, t.lo, t.off, t.sh,
            t.ok, t.op, t.pend, t.pmc, t.r, t.rem, t.s_acc, t.set_c,
            t.set_l, t.short, t.slot, t.span, t.tgt_new, t.tot_r)
        with m.State("C1"):
            m.d.sync += [off.eq(Cat(Const(0, 7), h.psn - r.fpsn)),
                         pmc.eq(r.pmtu), sh.eq(r.pmtu),
                         lnk_here.eq(lnk_v.bit_select(slot, 1))]
            m.next = "C2"
        with m.State("C2"):
            with m.If(tgt_new | ~t.lnk_back):
                m.d.sync += lnk_here.eq(0)
            m.d.sync += [tot_r.eq(r.total),
                         in_range.eq(dpsn <= span), is_last.eq(dpsn == span),
                         is_first.eq(dpsn == 0)]
            m.next = "SH"
            self._shift(m, t)
        with m.State("SH"):
            # (the offset: off shifted left once a cycle from C2 on, until sh is 0; then
            # len0 − off, registered)
            with m.If(tgt_new):
                m.d.sync += lnk_here.eq(0)
            with m.If(sh != 0):
                self._shift(m, t)
            with m.Else():
                m.d.sync += d0.eq(Cat(r.len0, Const(0, 1)) - Cat(off, Const(0, 1)))
                m.next = "C3"
        with m.State("C3"):
            with m.If(tgt_new):
                m.d.sync += lnk_here.eq(0)
            # (once the output registers are taken: a0 and a1 are their parts' lengths)
            with m.If(t.out_free):
                m.d.sync += [
                    ok.eq(in_range & (~is_first | (op == FIRST) | (op == ONLY))
                          & Mux(is_last, lo & (rem == h.len),
                                fm & t.pm_eq)),
                    a0.eq(Mux(below, 0, Mux(short, d0[:13], h.len))),
                    a1.eq(Mux(below, h.len, Mux(short, t.xl[:13], 0))),
                    t.below_r.eq(below),
                ]
                m.next = "C4"
        with m.State("C4"):
            with m.If(tgt_new):
                m.d.sync += lnk_here.eq(0)
            m.d.sync += t.p_sel.eq(a0 == 0)     # (no first part: P1 next)
            with m.If(ok):
                m.d.comb += [pend.i.valid.eq(1), pend.i.payload.qpn.eq(h.qpn),
                             pend.i.payload.psn.eq(h.psn),
                             pend.i.payload.n.eq((a0 != 0).as_unsigned()
                                                 + (a1 != 0).as_unsigned())]
                with m.If(pend.i.ready):
                    m.d.comb += [set_c.eq(~is_last), set_l.eq(is_last & lnk_here),
                                 clr_c.eq(is_last & ~lnk_here), s_acc.eq(1), t.rel.eq(1)]
                    with m.If(a0 != 0):
                        m.next = "P0"
                    with m.Elif(a1 != 0):
                        m.next = "P1"
                    with m.Else():
                        m.next = "IDLE"
            with m.Else():
                m.next = "REFUSE"           # inconsistent: dropped like a refusal

    def _shift(self, m, t):
        """One step of the offset's shift (C2, SH): off · 2, one shift less to make."""
        with m.If(t.sh != 0):
            m.d.sync += [t.off.eq(t.off << 1), t.sh.eq(t.sh - 1)]

    def _place_states(self, m, t):
        """REFUSE, P0, P1 and DRAIN (inside the header FSM): a refused response is dropped and
        its payload drained by a closing piece; a placed one issues one host-memory write and
        one Scatter Path piece per buffer piece (``a0`` bytes at addr0 + off, then ``a1`` at
        addr1 + the second part's offset: ``ad``), each when the output registers are free.
        None of them reads the header (released)."""
        a0, a1, ad, lb, out_free, pc, pc_valid, rq_addr, rq_len, rq_valid = (
            t.a0, t.a1, t.ad, t.lb, t.out_free, t.pc, t.pc_valid, t.rq_addr,
            t.rq_len, t.rq_valid)
        with m.State("REFUSE"):
            self._refuse(m, t)
        with m.State("P0"):
            with m.If(out_free):
                m.d.sync += [rq_valid.eq(1), rq_addr.eq(ad), t.o_k.eq(1),
                             pc_valid.eq(1), pc.end.eq(a1 == 0), t.p_sel.eq(1)]
                with m.If(a1 != 0):
                    m.next = "P1"
                with m.Else():
                    m.next = "IDLE"
        with m.State("P1"):
            with m.If(out_free):
                m.d.sync += [rq_valid.eq(1), rq_addr.eq(ad), t.o_k.eq(2),
                             pc_valid.eq(1), pc.end.eq(1)]
                m.next = "IDLE"
        with m.State("DRAIN"):
            with m.If(out_free):
                # (a closing piece: length 0, lane 0)
                m.d.sync += [pc_valid.eq(1), t.o_k.eq(0), rq_addr[:lb].eq(0), pc.end.eq(1)]
                m.next = "IDLE"
