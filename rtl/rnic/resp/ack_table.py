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
entry (flags, ACK, NAK) and emits its one or two frames on ``o``. The take of a QP waits a
cycle while a response for that QP is inserted, and then takes the entry with that response in
it (so a take never reads a row being written, and an insert never meets a take of its QP).

Storage: the flags live in two tables, one written only by inserts and one only by takes, so
each has one write port: a QP's ACK (NAK) is pending when its insert-side and take-side bits
differ. An insert makes a flag pending by writing the insert-side bit to the complement of the
take-side one; a take clears both by copying the insert-side bits to the take side.
``nak_first`` is a plain bit on the insert side (only meaningful while both are pending). Both
tables are read synchronously, so they are LUT RAM up to ``FLAGS_LUTRAM_MAX`` QPs and block RAM
above (the table then grows in block RAM only): the insert reads its QP's bits when the QP is
announced (``next_qpn``, a cycle or more ahead of its response) and holds them, each replaced by
the newest write to the same QP since the read; the take reads the head's bits when it pops the
QPN and holds them in the same way. rst does not reach a RAM: for ``num_qp`` cycles
after ``rst`` the take side copies the insert side for every QP, so nothing is pending; no
response is decided meanwhile (PSN Check takes no packet while its QP context sweeps, for as
long after ``rst``). ACK {PSN, MSN} and NAK {PSN, MSN, syndrome} are two block-RAM tables written
by every response of their kind and read, non-transparently, by the take stage. A frame names
its QP by local QPN; the TX frame builder adds the QP's addresses from its path table.
Throughput: one frame per cycle on ``o`` (one take per cycle when each QP holds one frame and no
response for the head's QP arrives). Latency: the input is registered, the QP FIFO has two
cycles (its output goes on into a one-entry buffer whenever the take does not pop it, so the
FIFO's read enable and level depend on registers, not on the take; the buffer adds no cycle),
the take pipeline four (the popped QPN registered; its flags read; the take clears them
and issues the table reads; the block RAM outputs are registered before any logic) and a
4-entry output queue in LUT RAM (which keeps ``o.ready`` out of the take logic) one: about 8
cycles from ``i`` to ``o``. A response that finds nothing held (no flag pending, no QPN queued
or being taken, room in the output queue) skips the table: from the input register it goes
straight into the output queue, 2 cycles from ``i`` to ``o``, and sets no flag. Being the only
response held, it is served first come, first served like any other.

Python twin: :func:`sim.models.psn.pending_reduce` / :func:`sim.models.psn.table_match`.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import Queue
from ..tx.build import tx_hdr_layout

__all__ = ["AckTable", "ack_item_layout", "flag_ram_style", "held_read", "FLAGS_LUTRAM_MAX"]


def ack_item_layout(abits):
    """One decided response: the local QP index and its AETH (syndrome 0x1F: a positive ACK)."""
    return data.StructLayout({"qpn": abits, "psn": 24, "msn": 24, "syndrome": 8})


_ack_layout = data.StructLayout({"psn": 24, "msn": 24})
_nak_layout = data.StructLayout({"psn": 24, "msn": 24, "syndrome": 8})


_ins_layout = data.StructLayout({"ack": 1, "nak": 1, "nak_first": 1})
_take_layout = data.StructLayout({"ack": 1, "nak": 1})

#: Largest QP count whose pending flags stay in LUT RAM; above it they are in block RAM, so the
#: table grows in block RAM only.
FLAGS_LUTRAM_MAX = 256


def flag_ram_style(num_qp):
    """yosys's ``ram_style`` for a per-QP table of a few bits (see ``FLAGS_LUTRAM_MAX``)."""
    return "distributed" if num_qp <= FLAGS_LUTRAM_MAX else "block"


def held_read(m, data, write, hit, restart, name):
    """What a held synchronous read stands for now: the read port's ``data`` (held since the
    read), or the newest write to the read's address since the read, the read's own cycle
    included (a ``no_rw_check`` table returns no defined data for that one).

    ``hit``: ``write`` (a write port) writes the held address in this cycle; ``restart``: a new
    read is issued in this cycle (``hit`` then compares with its address)."""
    v = Signal(name=f"{name}_v")
    d = Signal.like(write.data, name=name)
    m.d.sync += [v.eq(hit | (v & ~restart)), d.eq(Mux(hit, write.data, d))]
    return Mux(v, d, data)


class AckTable(wiring.Component):
    """Per-QP pending ACK/NAK table (see the module docstring).

    Parameters
    ----------
    num_qp : int
        Number of QPs (power of two).

    Attributes
    ----------
    i : In(stream.Signature(ack_item_layout(abits)))
        Decided responses; ``ready`` is always 1.
    o : Out(stream.Signature(tx_hdr_layout))
        Frames to build (PSN Check's ``ack_tx``, to the TX frame builder): ACKNOWLEDGE (0x11)
        with an AETH, ``qpn`` the local QP.
    next_qpn, next_load : In(abits), In(1)
        The QP of the responses to come: ``next_qpn`` is announced with ``next_load`` at least
        one cycle before a response for it is offered on ``i``, and every response on ``i``
        is for the QP last announced (PSN Check announces its sequencer's head as it loads it).
    pending : Out(1)
        Some response is held.
    """

    def __init__(self, *, num_qp):
        if not isinstance(num_qp, int) or num_qp < 2 or num_qp & (num_qp - 1):
            raise ValueError(f"num_qp must be a power of two of at least 2, not {num_qp!r}")
        self.num_qp = num_qp
        self.abits = max(1, (num_qp - 1).bit_length())
        super().__init__({
            "i": In(stream.Signature(ack_item_layout(self.abits))),
            "o": Out(stream.Signature(tx_hdr_layout)),
            "next_qpn": In(self.abits),
            "next_load": In(1),
            "pending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, ab = self.num_qp, self.abits

        # the pending flags: insert side and take side (see the module docstring); synchronous
        # reads whose collisions with a write are resolved here (``no_rw_check``)
        attrs = {"no_rw_check": 1, "ram_style": flag_ram_style(n)}
        m.submodules.insm = insm = memory.Memory(shape=_ins_layout, depth=n, init=[], attrs=attrs)
        m.submodules.tkm = tkm = memory.Memory(shape=_take_layout, depth=n, init=[], attrs=attrs)
        ins_w, tk_w = insm.write_port(), tkm.write_port()
        ins_at_in, tk_at_in = insm.read_port(), tkm.read_port()
        ins_at_head, tk_at_head = insm.read_port(), tkm.read_port()

        # (no_rw_check: the take never reads the row of a QP an insert writes in that cycle)
        m.submodules.ackm = ackm = memory.Memory(shape=_ack_layout, depth=n, init=[],
                                                 attrs={"no_rw_check": 1})
        m.submodules.nakm = nakm = memory.Memory(shape=_nak_layout, depth=n, init=[],
                                                 attrs={"no_rw_check": 1})
        ack_w, nak_w = ackm.write_port(), nakm.write_port()
        ack_r, nak_r = ackm.read_port(), nakm.read_port()

        m.submodules.qf = qf = Queue(ab, n)
        # the frames leave through a short queue, so that the TX arbiter's ready does not
        # reach the take logic (timing)
        m.submodules.oq = oq = Queue(tx_hdr_layout, 4, buffered=False)
        m.d.comb += [self.o.valid.eq(oq.o.valid), self.o.payload.eq(oq.o.payload),
                     oq.o.ready.eq(self.o.ready)]

        # ---- take: T (the popped QPN, registered) → U (the head: its flags read; the take
        # clears them and issues the table reads) → S (the block RAMs' outputs) → R
        # (registered; emit 1–2 frames)
        # Reset sweep: the take side copies the insert side for every QP: the insert side is
        # read at ``sw_n`` (which counts the QPs) and the take side written two cycles later
        # (through ``d_*``, below); ``sw_busy`` lasts until the last write. (A counter of its
        # own: ``t_q``'s input is then the QP FIFO's block-RAM output through one LUT.)
        sweeping = Signal(init=1)
        sw_valid = Signal()
        sw_last = Signal()
        sw_n = Signal(ab)
        sw_q = Signal(ab)
        sw_busy = Signal(init=1)    # sweeping | sw_valid | sw_last, as a register of its own
        m.d.sync += [sw_last.eq(sw_valid), sw_busy.eq(sweeping | sw_valid)]
        t_valid = Signal()
        t_q = Signal(ab)
        u_valid = Signal()          # the head: its flags read, waiting for its take
        u_q = Signal(ab)
        head = u_q
        m.d.sync += [sw_valid.eq(sweeping), sw_q.eq(sw_n)]
        with m.If(sweeping):
            m.d.sync += sw_n.eq(sw_n + 1)
            with m.If(sw_n == n - 1):
                m.d.sync += sweeping.eq(0)
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
        r_q = Signal(ab)
        r_second = Signal()         # emitting the second of two frames
        two = Signal()
        m.d.comb += two.eq(r_ack & r_nak)
        r_one = Signal(init=1)      # ~two | r_second: the frame being emitted is R's last
        nak_now = Signal()          # the frame being emitted is the NAK
        m.d.comb += nak_now.eq(Mux(two, r_nf ^ r_second, r_nak))
        r_done = Signal()
        m.d.comb += r_done.eq(r_valid & oq.i.ready & r_one)
        s_adv = Signal()
        m.d.comb += s_adv.eq(s_valid & (~r_valid | r_done))
        take = Signal()
        t_adv = Signal()            # the popped QPN moves to the head, its flags read
        clash = Signal()            # an insert for the head's QP this cycle: the take waits
        # The QP FIFO's output goes through a one-entry buffer ``k``: the FIFO is read whenever
        # ``k`` is empty (a register), and T takes from ``k`` if it holds a QPN, else from the
        # FIFO, so the take decision never reaches the FIFO's read enable and level (timing).
        # T sees the same QPNs in the same cycles as it would straight from the FIFO.
        k_valid = Signal()
        k_q = Signal(ab)
        src_valid = Signal()
        src_q = Signal(ab)
        src_ready = Signal()
        pop = Signal()
        m.d.comb += [
            take.eq(u_valid & (~s_valid | s_adv) & ~sw_busy & ~clash),
            t_adv.eq(t_valid & (~u_valid | take)),
            src_valid.eq(k_valid | qf.o.valid),
            src_q.eq(Mux(k_valid, k_q, qf.o.payload)),
            src_ready.eq((~t_valid | t_adv) & ~sw_busy),
            pop.eq(src_valid & src_ready),
            qf.o.ready.eq(~k_valid & ~sw_busy),
        ]
        m.d.sync += k_valid.eq(~src_ready & (k_valid | (qf.o.valid & ~sw_busy)))
        with m.If(~k_valid):
            m.d.sync += k_q.eq(qf.o.payload)
        with m.If(pop):
            m.d.sync += [t_valid.eq(1), t_q.eq(src_q)]
        with m.Elif(t_adv):
            m.d.sync += t_valid.eq(0)
        with m.If(t_adv):
            m.d.sync += [u_valid.eq(1), u_q.eq(t_q)]
        with m.Elif(take):
            m.d.sync += u_valid.eq(0)
        for rp in (ack_r, nak_r):
            m.d.comb += [rp.addr.eq(head), rp.en.eq(take)]
        # The popped QPN is registered (``t_q``: the QP FIFO's block-RAM output does not run
        # into a read address), its flags read at that register (at ``sw_n`` during the sweep)
        # as it moves to the head, and held while it waits; a write to the head's QP since that
        # read (in the read's cycle included) replaces the bits read (``held_read``), so the take
        # sees them as they stand.
        for rp in (ins_at_head, tk_at_head):
            m.d.comb += [rp.addr.eq(Mux(sweeping, sw_n, t_q)), rp.en.eq(t_adv | sweeping)]
        # (the writes are compared with both registers at once, so that the take, late in the
        # cycle, only selects which compare counts)
        ins_hit_t = Signal()
        ins_hit_u = Signal()
        tk_hit_t = Signal()
        tk_hit_u = Signal()
        m.d.comb += [ins_hit_t.eq(ins_w.en & (ins_w.addr == t_q)),
                     ins_hit_u.eq(ins_w.en & (ins_w.addr == u_q)),
                     tk_hit_t.eq(tk_w.en & (tk_w.addr == t_q)),
                     tk_hit_u.eq(tk_w.en & (tk_w.addr == u_q))]
        ins_hit_h = Signal()
        tk_hit_h = Signal()
        m.d.comb += [ins_hit_h.eq(Mux(t_adv, ins_hit_t, ins_hit_u)),
                     tk_hit_h.eq(Mux(t_adv, tk_hit_t, tk_hit_u))]
        h_ins = Signal(_ins_layout)
        h_tk = Signal(_take_layout)
        m.d.comb += [h_ins.eq(held_read(m, ins_at_head.data, ins_w, ins_hit_h, t_adv, "hf_ins")),
                     h_tk.eq(held_read(m, tk_at_head.data, tk_w, tk_hit_h, t_adv, "hf_tk"))]
        # The take side is written from a register, a cycle after the take (or the sweep's
        # read): the flag tables' outputs never run to the other table's write port. An insert
        # in that cycle sees the write (below); the head's read and the insert's read catch it
        # like any other write.
        d_v = Signal()
        d_q = Signal(ab)
        d_tk = Signal(_take_layout)
        m.d.sync += d_v.eq(sw_valid | take)
        with m.If(sw_valid):
            m.d.sync += [d_q.eq(sw_q), d_tk.ack.eq(ins_at_head.data.ack),
                         d_tk.nak.eq(ins_at_head.data.nak)]
        with m.Else():
            m.d.sync += [d_q.eq(head), d_tk.ack.eq(h_ins.ack), d_tk.nak.eq(h_ins.nak)]
        m.d.comb += [tk_w.addr.eq(d_q), tk_w.data.eq(d_tk), tk_w.en.eq(d_v)]
        s_q = Signal(ab)
        with m.If(take):
            m.d.sync += [s_valid.eq(1), s_q.eq(head),
                         s_ack.eq(h_ins.ack ^ h_tk.ack),
                         s_nak.eq(h_ins.nak ^ h_tk.nak),
                         s_nf.eq(h_ins.nak_first)]
        with m.Elif(s_adv):
            m.d.sync += s_valid.eq(0)
        with m.If(s_adv):
            m.d.sync += [r_valid.eq(1), r_second.eq(0), r_ack.eq(s_ack), r_nak.eq(s_nak),
                         r_one.eq(~(s_ack & s_nak)),
                         r_nf.eq(s_nf), r_a.eq(ack_r.data), r_n.eq(nak_r.data), r_q.eq(s_q)]
        with m.Elif(r_done):
            m.d.sync += r_valid.eq(0)
        with m.Elif(r_valid & oq.i.ready):
            m.d.sync += [r_second.eq(1), r_one.eq(1)]

        # ``byp``: a response registered at I while nothing is held (no flag pending, no QPN
        # queued or being taken) goes straight into the output queue, not into the table: it is
        # the only response held, so serving it now is first come, first served
        byp = Signal()
        i_valid = Signal()
        i = Signal(ack_item_layout(ab))
        o = oq.i.payload
        m.d.comb += [
            oq.i.valid.eq(r_valid | byp),
            o.opcode.eq(0x11), o.aeth.eq(1),
        ]
        with m.If(r_valid):
            m.d.comb += [
                o.qpn.eq(r_q),
                o.psn.eq(Mux(nak_now, r_n.psn, r_a.psn)),
                o.msn.eq(Mux(nak_now, r_n.msn, r_a.msn)),
                o.syndrome.eq(Mux(nak_now, r_n.syndrome, 0x1F)),
            ]
        with m.Else():
            m.d.comb += [o.qpn.eq(i.qpn), o.psn.eq(i.psn), o.msn.eq(i.msn),
                         o.syndrome.eq(i.syndrome)]

        # ---- insert: the input registered (I) and inserted ---------------------------------
        # The announced QP's flags are read when it is announced (``next_load``), so they are
        # ready when its response comes; until then a write to that QP since the read (in the
        # read's cycle included) replaces the bits read (``held_read``). They are registered with
        # the input, each replaced by what the insert or the take of that cycle writes to the
        # same QP.
        m.d.sync += [i_valid.eq(self.i.valid), i.eq(self.i.payload)]
        # nothing held (every term a register): the table's flags all clear, no take pending
        idle = Signal()
        m.d.comb += idle.eq(~(sw_busy | t_valid | u_valid | d_v | s_valid | r_valid | k_valid
                              | qf.o.valid | (qf.level != 0)))
        m.d.comb += byp.eq(i_valid & idle & oq.i.ready)
        for rp in (ins_at_in, tk_at_in):
            m.d.comb += [rp.addr.eq(self.next_qpn), rp.en.eq(self.next_load)]
        n_q = Signal(ab)            # the announced QP
        with m.If(self.next_load):
            m.d.sync += n_q.eq(self.next_qpn)
        n_addr = Signal(ab)
        m.d.comb += n_addr.eq(Mux(self.next_load, self.next_qpn, n_q))
        n_ins = held_read(m, ins_at_in.data, ins_w, ins_w.en & (ins_w.addr == n_addr),
                          self.next_load, "nf_ins")
        n_tk = held_read(m, tk_at_in.data, tk_w, tk_w.en & (tk_w.addr == n_addr),
                         self.next_load, "nf_tk")
        q = i.qpn
        # q's bits as they stand at I (before I's own writes)
        q_ins = Signal(_ins_layout)
        q_tk = Signal(_take_layout)
        m.d.sync += [
            q_ins.eq(Mux(ins_w.en & (ins_w.addr == n_q), ins_w.data, n_ins)),
            q_tk.eq(Mux(tk_w.en & (tk_w.addr == n_q), tk_w.data, n_tk)),
        ]
        is_ack = Signal()
        m.d.comb += is_ack.eq(i.syndrome == 0x1F)
        # ``q == head`` and ``tk_w.addr == q`` compared a cycle ahead, from the registers they
        # are loaded from (``q`` from the input, ``head`` from ``t_q`` on ``t_adv`` and ``u_q``
        # otherwise, ``tk_w.addr`` from ``sw_q`` or ``head``), so that the take and the QP
        # FIFO's write see one register each (timing)
        q_is_t = Signal()
        q_is_u = Signal()
        q_to_u = Signal()           # t_adv of the cycle before: head is that cycle's t_q
        q_is_d = Signal()
        m.d.sync += [q_is_t.eq(self.i.payload.qpn == t_q), q_is_u.eq(self.i.payload.qpn == u_q),
                     q_to_u.eq(t_adv),
                     q_is_d.eq(self.i.payload.qpn == Mux(sw_valid, sw_q, head))]
        m.d.comb += clash.eq(i_valid & Mux(q_to_u, q_is_t, q_is_u))
        # (no take of q in this cycle: ``clash``; a take of q in the cycle before writes the
        # take side now)
        tk_now = Signal(_take_layout)
        m.d.comb += tk_now.eq(Mux(tk_w.en & q_is_d, tk_w.data, q_tk))
        ack_k = Signal()            # q's ACK (NAK) is pending
        nak_k = Signal()
        m.d.comb += [ack_k.eq(q_ins.ack ^ tk_now.ack), nak_k.eq(q_ins.nak ^ tk_now.nak)]
        m.d.comb += [
            self.i.ready.eq(1),
            qf.i.valid.eq(i_valid & ~(ack_k | nak_k) & ~byp),
            qf.i.payload.eq(q),
        ]
        # an ACK sets the ACK flag and keeps a NAK still pending (which then came first), a NAK
        # sets the NAK flag and keeps a pending ACK
        m.d.comb += [
            ins_w.addr.eq(q), ins_w.en.eq(i_valid & ~byp),
            ins_w.data.ack.eq(Mux(is_ack, ~tk_now.ack, q_ins.ack)),
            ins_w.data.nak.eq(Mux(is_ack, q_ins.nak, ~tk_now.nak)),
            ins_w.data.nak_first.eq(is_ack & nak_k),
        ]
        m.d.comb += [
            ack_w.addr.eq(q), ack_w.en.eq(i_valid & is_ack),
            ack_w.data.psn.eq(i.psn), ack_w.data.msn.eq(i.msn),
            nak_w.addr.eq(q), nak_w.en.eq(i_valid & ~is_ack),
            nak_w.data.psn.eq(i.psn), nak_w.data.msn.eq(i.msn),
            nak_w.data.syndrome.eq(i.syndrome),
            self.pending.eq(i_valid | t_valid | u_valid | d_v | s_valid | r_valid | k_valid | qf.o.valid
                            | (qf.level != 0) | oq.o.valid | (oq.level != 0)),
        ]
        return m
