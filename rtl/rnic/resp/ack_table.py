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
long after ``rst``). ACK {PSN, MSN} and NAK {PSN, MSN, syndrome} share one block-RAM row per
QP, in separate 9-bit lanes (``_row_layout``), written by every response of their kind (its
lanes only) and read, both at once and non-transparently, by the take stage. A frame names
its QP by local QPN; the TX frame builder adds the QP's addresses from its path table.
Throughput: one frame per cycle on ``o`` (one take per cycle when each QP holds one frame and no
response for the head's QP arrives). Latency: the input is registered, the QP FIFO has two
cycles and a two-entry ring after it one (the FIFO's block-RAM output goes into the ring's
flip-flops with no logic between, and the FIFO is read whenever the ring has room, so its read
enable and level depend on registers, not on the take), the take pipeline four (the popped QPN
registered; its flags read; the take clears them and issues the table reads; the block RAM
outputs are registered before any logic) and a 4-entry output queue in LUT RAM (which keeps
``o.ready`` out of the take logic) one: about 9 cycles from ``i`` to ``o``. A response that
finds nothing held, in its cycle and the one before (no flag pending, no QPN queued or being
taken; room in the output queue) skips the table:
from the input register it goes
straight into the output queue, 2 cycles from ``i`` to ``o``, and sets no flag. Being the only
response held, it is served first come, first served like any other.

**Block-RAM flags** (above ``FLAGS_LUTRAM_MAX`` QPs): each read of the flag tables goes into
a register with nothing in between (the RAM's output register), so it is seen two cycles after
its address, and no read enable depends on the take. The insert: the response waits a cycle in
a stage I0 ahead of I, where the read made at its announcement is seen (the read latch holds
it until the next announcement, which comes with the response at the earliest), with the
writes to its QP since. The take: the head's tables are read at ``t_q`` every cycle; a QPN
moves to U after a cycle in T and only into an empty U, so U sees in its first cycle the read
of its QPN made in T, with the writes since; the move depends on registers only. Costs: one
cycle more from ``i`` to ``o`` (3 with the bypass), and one take every two cycles at most.

Python twin: :func:`sim.models.psn.pending_reduce` / :func:`sim.models.psn.table_match`.
"""

import types

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..parts import add as _add
from ..stream import Queue, slim_queue
from ..tx.build import tx_hdr_layout

__all__ = ["AckTable", "ack_item_layout", "flag_ram_style", "held_read", "FLAGS_LUTRAM_MAX"]


def ack_item_layout(abits):
    """One decided response: the local QP index and its AETH (syndrome 0x1F: a positive ACK)."""
    return data.StructLayout({"qpn": abits, "psn": 24, "msn": 24, "syndrome": 8})


_ack_layout = data.StructLayout({"psn": 24, "msn": 24})
_nak_layout = data.StructLayout({"psn": 24, "msn": 24, "syndrome": 8})

#: A QP's row of the frame table: its newest ACK in lanes 0–5 and its newest NAK in lanes 6–11
#: (9-bit lanes, the block RAM's byte enables), so that an insert writes one of the two and the
#: take reads both in one read. A NAK's syndrome is 0x20–0x3F (RNR) or 0x60–0x63: bit 5 is 1
#: and bit 7 is 0, so the row keeps bits 6 and 4..0 (``syn6``).
_LANE = 9
_ACK_LANES = 6
_row_layout = data.StructLayout({
    "ack": _ack_layout, "ack_pad": _ACK_LANES * _LANE - _ack_layout.size,
    "nak": data.StructLayout({"psn": 24, "msn": 24, "syn6": 6}),
})


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
    i_drop : In(1)
        Block-RAM flags only: drops the response accepted on ``i`` in the cycle before (its
        QP found in error a cycle late, PSN Check's error bits being block RAM too).
    """

    def __init__(self, *, num_qp):
        if not isinstance(num_qp, int) or num_qp < 2 or num_qp & (num_qp - 1):
            raise ValueError(f"num_qp must be a power of two of at least 2, not {num_qp!r}")
        self.num_qp = num_qp
        self.abits = max(1, (num_qp - 1).bit_length())
        #: the flag tables are block RAM (above ``FLAGS_LUTRAM_MAX`` QPs): every read of them
        #: is registered at the RAM (see "Block-RAM flags" in the module docstring)
        self.late = num_qp > FLAGS_LUTRAM_MAX
        ports = {
            "i": In(stream.Signature(ack_item_layout(self.abits))),
            "o": Out(stream.Signature(tx_hdr_layout)),
            "next_qpn": In(self.abits),
            "next_load": In(1),
            "pending": Out(1),
        }
        if self.late:
            ports["i_drop"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        # The parts below share their signals through ``t``: each takes from it what it reads
        # and adds what it makes (_add). They are called in the order their statements had in
        # one method, which the generated Verilog follows.
        t = types.SimpleNamespace(n=self.num_qp, ab=self.abits, late=self.late)
        _add(t, self._flag_tables(m, t))
        _add(t, self._frame_tables(m, t))
        _add(t, self._queues(m, t))
        # ---- take: T (the popped QPN, registered) → U (the head: its flags read; the take
        # clears them and issues the table reads) → S (the block RAMs' outputs) → R
        # (registered; emit 1–2 frames)
        _add(t, self._sweep(m, t))
        _add(t, self._emit_control(m, t))
        _add(t, self._head_select(m, t))
        _add(t, self._head_flags(m, t))
        _add(t, self._take_write(m, t))
        self._take_stages(m, t)
        _add(t, self._output(m, t))
        # ---- insert: the input registered (I) and inserted
        _add(t, self._insert_read(m, t))
        self._insert_write(m, t)
        return m

    def _flag_tables(self, m, t):
        """The pending flags, insert side (``insm``) and take side (``tkm``), one write port
        each, read at the announced QP (``*_at_in``) and at the head (``*_at_head``). Adds the
        ports ``ins_w``, ``tk_w``, ``ins_at_in``, ``tk_at_in``, ``ins_at_head``,
        ``tk_at_head``."""
        n = t.n
        # the pending flags: insert side and take side (see the module docstring); synchronous
        # reads whose collisions with a write are resolved here (``no_rw_check``)
        attrs = {"no_rw_check": 1, "ram_style": flag_ram_style(n)}
        m.submodules.insm = insm = memory.Memory(shape=_ins_layout, depth=n, init=[], attrs=attrs)
        m.submodules.tkm = tkm = memory.Memory(shape=_take_layout, depth=n, init=[], attrs=attrs)
        ins_w, tk_w = insm.write_port(), tkm.write_port()
        ins_at_in, tk_at_in = insm.read_port(), tkm.read_port()
        ins_at_head, tk_at_head = insm.read_port(), tkm.read_port()
        # block RAM: each read port's data goes into a register with nothing in between (the
        # RAM's output register, folded by the flow), loaded every cycle: it shows the read
        # latch of the cycle before, so a read is seen two cycles after its address
        regs = {}
        for name, rp in (("ins_in_r", ins_at_in), ("tk_in_r", tk_at_in),
                         ("ins_hd_r", ins_at_head), ("tk_hd_r", tk_at_head)):
            if t.late:
                r = Signal.like(rp.data, name=name, reset_less=True)
                m.d.sync += r.eq(rp.data)
                regs[name] = r
            else:
                regs[name] = None
        return types.SimpleNamespace(ins_w=ins_w, tk_w=tk_w, ins_at_in=ins_at_in,
                                     tk_at_in=tk_at_in, ins_at_head=ins_at_head,
                                     tk_at_head=tk_at_head, **regs)

    def _frame_tables(self, m, t):
        """The frame table in block RAM (``_row_layout``): per QP the newest ACK {PSN, MSN} and
        the newest NAK {PSN, MSN, syndrome}, each written by every response of its kind (its
        lanes only) and both read by the take. Adds ``row_w``, ``row_r``, ``ack_rd`` and
        ``nak_rd`` (the read row's ACK and NAK)."""
        n = t.n
        # (no_rw_check: the take never reads the row of a QP an insert writes in that cycle)
        m.submodules.rowm = rowm = memory.Memory(shape=_row_layout.size, depth=n, init=[],
                                                 attrs={"no_rw_check": 1})
        row_w = rowm.write_port(granularity=_LANE)
        row_r = rowm.read_port()
        rd = _row_layout(row_r.data)
        ack_rd = Signal(_ack_layout)
        nak_rd = Signal(_nak_layout)
        m.d.comb += [ack_rd.eq(rd.ack), nak_rd.psn.eq(rd.nak.psn), nak_rd.msn.eq(rd.nak.msn),
                     nak_rd.syndrome.eq(Cat(rd.nak.syn6[:5], 1, rd.nak.syn6[5], 0))]
        return types.SimpleNamespace(row_w=row_w, row_r=row_r, ack_rd=ack_rd, nak_rd=nak_rd)

    def _queues(self, m, t):
        """The QP FIFO (``qf``, the QPs with something pending, each at most once) and the
        output queue (``oq``) in front of ``o``. Adds ``qf`` and ``oq``."""
        m.submodules.qf = qf = Queue(t.ab, t.n)
        # the frames leave through a short queue, so that the TX arbiter's ready does not
        # reach the take logic (timing); it keeps what differs from frame to frame (every
        # frame is an ACKNOWLEDGE with an AETH: the opcode and ``aeth`` are made at its output)
        oq, oq_rec = slim_queue(m, "oq", tx_hdr_layout, 4,
                                {"qpn": (0, t.ab), "opcode": (0, 0), "se": (0, 0),
                                 "ackreq": (0, 0), "aeth": (0, 0)}, self.o,
                                rebuild={"opcode": lambda v: 0x11, "aeth": lambda v: 1})
        return types.SimpleNamespace(qf=qf, oq=oq, oq_rec=oq_rec)

    def _sweep(self, m, t):
        """The reset sweep, which clears every QP's flags after ``rst`` (RAMs are not reset).
        Adds ``sweeping``, ``sw_valid``, ``sw_n``, ``sw_q`` and ``sw_busy``."""
        n, ab = t.n, t.ab
        # Reset sweep: the take side copies the insert side for every QP: the insert side is
        # read at ``sw_n`` (which counts the QPs) and the take side written two cycles later
        # (through ``d_*``, below); ``sw_busy`` lasts until the last write. (A counter of its
        # own: ``t_q``'s input is then one 2:1 select of the ring ``k``.)
        sweeping = Signal(init=1)
        sw_valid = Signal()
        sw_last = Signal()
        sw_n = Signal(ab)
        sw_q = Signal(ab)
        sw_busy = Signal(init=1)    # sweeping | sw_valid | sw_last, as a register of its own
        if t.late:
            # (the read is seen two cycles after its address: one more stage)
            sw_v1 = Signal()
            sw_q1 = Signal(ab)
            m.d.sync += [sw_v1.eq(sweeping), sw_q1.eq(sw_n), sw_valid.eq(sw_v1), sw_q.eq(sw_q1),
                         sw_last.eq(sw_valid), sw_busy.eq(sweeping | sw_v1 | sw_valid)]
        else:
            m.d.sync += [sw_last.eq(sw_valid), sw_busy.eq(sweeping | sw_valid)]
            m.d.sync += [sw_valid.eq(sweeping), sw_q.eq(sw_n)]
        with m.If(sweeping):
            m.d.sync += sw_n.eq(sw_n + 1)
            with m.If(sw_n == n - 1):
                m.d.sync += sweeping.eq(0)
        return types.SimpleNamespace(sweeping=sweeping, sw_valid=sw_valid, sw_n=sw_n,
                                     sw_q=sw_q, sw_busy=sw_busy)

    def _emit_control(self, m, t):
        """The registers of S (the taken flags) and R (the frames being emitted), and R's
        handshake: R emits one frame, or the ACK and the NAK in their order (``nak_now``), and
        takes S's when its last is accepted (``s_adv``). Adds these."""
        ab, oq = t.ab, t.oq
        s_valid = Signal()
        s_ack = Signal()
        s_nak = Signal()
        s_nf = Signal()
        r_valid = Signal()
        r_ack = Signal()
        r_nak = Signal()
        r_nf = Signal()
        # reset-less (read only under r_valid): the block RAM's output register
        r_a = Signal(_ack_layout, reset_less=True)
        r_n = Signal(_nak_layout, reset_less=True)
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
        return types.SimpleNamespace(
            s_valid=s_valid, s_ack=s_ack, s_nak=s_nak, s_nf=s_nf, r_valid=r_valid, r_ack=r_ack,
            r_nak=r_nak, r_nf=r_nf, r_a=r_a, r_n=r_n, r_q=r_q, r_second=r_second, r_one=r_one,
            nak_now=nak_now, r_done=r_done, s_adv=s_adv)

    def _head_select(self, m, t):
        """T and U: the QPN popped from the QP FIFO (through the ring ``k``) is registered at
        T and moves to U, the head, which the take (``take``) hands to S; the take issues the
        ACK and NAK table reads at the head. Makes ``clash``, which the insert drives. Adds
        ``t_valid``, ``t_q``, ``u_valid``, ``u_q``, ``head``, ``take``, ``t_adv``, ``clash``
        and ``k_valid``."""
        ab, qf, sw_busy = t.ab, t.qf, t.sw_busy
        t_valid = Signal()
        t_q = Signal(ab)
        u_valid = Signal()          # the head: its flags read, waiting for its take
        u_q = Signal(ab)
        head = u_q
        take = Signal()
        t_adv = Signal()            # the popped QPN moves to the head, its flags read
        clash = Signal()            # an insert for the head's QP this cycle: the take waits
        # Block-RAM flags: the head's flags are read at ``t_q`` every cycle and seen two cycles
        # later, so a QPN moves from T to U only after a cycle in T (``t_old``) and only into
        # an empty U: the move then depends on registers only, never on the take, and U's
        # flags are there in its first cycle. One take every two cycles at most.
        if t.late:
            t_old = Signal()
            m.d.sync += t_old.eq(t_valid & ~t_adv)
        # The QP FIFO's output goes through a two-entry ring ``k`` (slots ``k0``, ``k1``; write
        # pointer ``k_wp``, read pointer ``k_rp``, ``k_n`` entries) and T takes from ``k`` only:
        # the FIFO's block-RAM output ends at flip-flops (its clock-to-out leaves no room for a
        # LUT, timing), the FIFO is read whenever ``k`` has room (registers: the take decision
        # never reaches the FIFO's read enable and level), and two slots keep one QPN a cycle
        # moving into T.
        k0 = Signal(ab, reset_less=True)
        k1 = Signal(ab, reset_less=True)
        k_wp = Signal()
        k_rp = Signal()
        k_n = Signal(range(3))
        k_valid = Signal()          # k holds a QPN (a register of its own)
        k_room = Signal(init=1)     # k has a free slot (a register of its own)
        src_q = Signal(ab)
        src_ready = Signal()
        pop = Signal()
        fill = Signal()
        m.d.comb += [
            # (block-RAM flags: a take every two cycles at most, so it waits for an empty S
            # and depends on four registers only)
            take.eq(u_valid & (~t.s_valid if t.late else ~t.s_valid | t.s_adv) & ~sw_busy
                    & ~clash),
            t_adv.eq(t_valid & (t_old & ~u_valid if t.late else ~u_valid | take)),
            src_q.eq(Mux(k_rp, k1, k0)),
            src_ready.eq((~t_valid | t_adv) & ~sw_busy),
            pop.eq(k_valid & src_ready),
            qf.o.ready.eq(k_room & ~sw_busy),
            fill.eq(qf.o.valid & k_room & ~sw_busy),
        ]
        with m.If(fill & ~k_wp):
            m.d.sync += k0.eq(qf.o.payload)
        with m.If(fill & k_wp):
            m.d.sync += k1.eq(qf.o.payload)
        k_next = Signal(range(4))
        m.d.comb += k_next.eq(k_n + fill - pop)
        m.d.sync += [k_wp.eq(k_wp ^ fill), k_rp.eq(k_rp ^ pop), k_n.eq(k_next),
                     k_valid.eq(k_next != 0), k_room.eq(k_next != 2)]
        with m.If(pop):
            m.d.sync += [t_valid.eq(1), t_q.eq(src_q)]
        with m.Elif(t_adv):
            m.d.sync += t_valid.eq(0)
        with m.If(t_adv):
            m.d.sync += [u_valid.eq(1), u_q.eq(t_q)]
        with m.Elif(take):
            m.d.sync += u_valid.eq(0)
        m.d.comb += [t.row_r.addr.eq(head), t.row_r.en.eq(take)]
        return types.SimpleNamespace(t_valid=t_valid, t_q=t_q, u_valid=u_valid, u_q=u_q,
                                     head=head, take=take, t_adv=t_adv, clash=clash,
                                     k_valid=k_valid)

    def _head_flags(self, m, t):
        """The head's flags, read as its QPN moves from T to U (each QP's insert-side bits
        during the sweep) and held as they stand. Adds ``h_ins`` and ``h_tk``."""
        ins_w, tk_w, t_q, u_q, t_adv = t.ins_w, t.tk_w, t.t_q, t.u_q, t.t_adv
        ins_at_head, tk_at_head = t.ins_at_head, t.tk_at_head
        if t.late:
            return self._head_flags_late(m, t)
        # The popped QPN is registered (``t_q``: the QP FIFO's block-RAM output does not run
        # into a read address), its flags read at that register (at ``sw_n`` during the sweep)
        # as it moves to the head, and held while it waits; a write to the head's QP since that
        # read (in the read's cycle included) replaces the bits read (``held_read``), so the take
        # sees them as they stand.
        for rp in (ins_at_head, tk_at_head):
            m.d.comb += [rp.addr.eq(Mux(t.sweeping, t.sw_n, t_q)), rp.en.eq(t_adv | t.sweeping)]
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
        return types.SimpleNamespace(h_ins=h_ins, h_tk=h_tk)

    def _head_flags_late(self, m, t):
        """The head's flags with the flag tables in block RAM: read at ``t_q`` (``sw_n``
        during the sweep) every cycle and seen two cycles later in the registers ``*_hd_r``.
        A QPN moves to U after a cycle in T, so the register shows in U's first cycle the read
        of the cycle before the move; the writes to the QP in that cycle and the next replace
        it, and from then on U holds its flags in a register with each write to its QP since.
        Adds ``h_ins`` and ``h_tk``."""
        t_q, u_q, t_adv, u_valid = t.t_q, t.u_q, t.t_adv, t.u_valid
        for rp in (t.ins_at_head, t.tk_at_head):
            m.d.comb += [rp.addr.eq(Mux(t.sweeping, t.sw_n, t_q)), rp.en.eq(1)]

        def head(reg, w, name):
            hit_t = Signal(name=f"{name}_hit_t")
            hit_u = Signal(name=f"{name}_hit_u")
            m.d.comb += [hit_t.eq(w.en & (w.addr == t_q)), hit_u.eq(w.en & (w.addr == u_q))]
            # a write to T's QP in the cycle before (the cycle of the read U will see)
            p_v = Signal(name=f"{name}_p_v")
            p_d = Signal.like(w.data, name=f"{name}_p_d")
            m.d.sync += [p_v.eq(hit_t), p_d.eq(w.data)]
            # U's writes since the read, then (v = 1) U's flags as they stand
            v = Signal(name=f"{name}_v")
            d = Signal.like(w.data, name=f"{name}_d")
            h = Signal.like(w.data, name=name)
            m.d.comb += h.eq(Mux(v, d, reg))
            with m.If(t_adv):
                m.d.sync += [v.eq(hit_t | p_v), d.eq(Mux(hit_t, w.data, p_d))]
            with m.Elif(u_valid):
                m.d.sync += [v.eq(1), d.eq(Mux(hit_u, w.data, h))]
            return h

        return types.SimpleNamespace(h_ins=head(t.ins_hd_r, t.ins_w, "hf_ins"),
                                     h_tk=head(t.tk_hd_r, t.tk_w, "hf_tk"))

    def _take_write(self, m, t):
        """The take side's one write, a cycle after the take or the sweep's read: it copies the
        insert-side flags, so the QP has nothing pending. Adds ``d_v``."""
        ab = t.ab
        # The take side is written from a register, a cycle after the take (or the sweep's
        # read): the flag tables' outputs never run to the other table's write port. An insert
        # in that cycle sees the write (below); the head's read and the insert's read catch it
        # like any other write.
        d_v = Signal()
        d_q = Signal(ab)
        d_tk = Signal(_take_layout)
        m.d.sync += d_v.eq(t.sw_valid | t.take)
        sw_ins = t.ins_hd_r if t.late else t.ins_at_head.data
        with m.If(t.sw_valid):
            m.d.sync += [d_q.eq(t.sw_q), d_tk.ack.eq(sw_ins.ack), d_tk.nak.eq(sw_ins.nak)]
        with m.Else():
            m.d.sync += [d_q.eq(t.head), d_tk.ack.eq(t.h_ins.ack), d_tk.nak.eq(t.h_ins.nak)]
        m.d.comb += [t.tk_w.addr.eq(d_q), t.tk_w.data.eq(d_tk), t.tk_w.en.eq(d_v)]
        return types.SimpleNamespace(d_v=d_v)

    def _take_stages(self, m, t):
        """S and R: the take registers the head's pending flags at S while the ACK and NAK
        tables are read; R registers the tables' outputs and emits the frames."""
        take, s_adv, r_valid, h_ins, h_tk = t.take, t.s_adv, t.r_valid, t.h_ins, t.h_tk
        s_q = Signal(t.ab)
        with m.If(take):
            m.d.sync += [t.s_valid.eq(1), s_q.eq(t.head),
                         t.s_ack.eq(h_ins.ack ^ h_tk.ack),
                         t.s_nak.eq(h_ins.nak ^ h_tk.nak),
                         t.s_nf.eq(h_ins.nak_first)]
        with m.Elif(s_adv):
            m.d.sync += t.s_valid.eq(0)
        with m.If(s_adv):
            m.d.sync += [r_valid.eq(1), t.r_second.eq(0), t.r_ack.eq(t.s_ack),
                         t.r_nak.eq(t.s_nak), t.r_one.eq(~(t.s_ack & t.s_nak)),
                         t.r_nf.eq(t.s_nf), t.r_a.eq(t.ack_rd), t.r_n.eq(t.nak_rd),
                         t.r_q.eq(s_q)]
        with m.Elif(t.r_done):
            m.d.sync += r_valid.eq(0)
        with m.Elif(r_valid & t.oq.i.ready):
            m.d.sync += [t.r_second.eq(1), t.r_one.eq(1)]

    def _output(self, m, t):
        """The output queue's input: R's frame, or the input register's response when it
        bypasses the table (``byp``). Makes the input register, which the insert drives. Adds
        ``byp``, ``i_valid`` and ``i``."""
        oq, r_valid, nak_now, r_a, r_n = t.oq, t.r_valid, t.nak_now, t.r_a, t.r_n
        # ``byp``: a response registered at I while nothing is held (no flag pending, no QPN
        # queued or being taken) goes straight into the output queue, not into the table: it is
        # the only response held, so serving it now is first come, first served
        byp = Signal()
        i_valid = Signal()
        i = Signal(ack_item_layout(t.ab))
        o = t.oq_rec
        m.d.comb += oq.i.valid.eq(r_valid | byp)
        with m.If(r_valid):
            m.d.comb += [
                o.qpn.eq(t.r_q),
                o.psn.eq(Mux(nak_now, r_n.psn, r_a.psn)),
                o.msn.eq(Mux(nak_now, r_n.msn, r_a.msn)),
                o.syndrome.eq(Mux(nak_now, r_n.syndrome, 0x1F)),
            ]
        with m.Else():
            m.d.comb += [o.qpn.eq(i.qpn), o.psn.eq(i.psn), o.msn.eq(i.msn),
                         o.syndrome.eq(i.syndrome)]
        return types.SimpleNamespace(byp=byp, i_valid=i_valid, i=i)

    def _insert_read(self, m, t):
        """The insert's side of the flags: the input registered at I, the bypass decision, and
        the flags of the response's QP as they stand (read when the QP is announced, each
        replaced by the writes since); ``clash`` holds the take of that QP. Adds ``is_ack``,
        ``tk_now``, ``q_ins``, ``ack_k`` and ``nak_k``."""
        ab, i, i_valid, ins_w, tk_w = t.ab, t.i, t.i_valid, t.ins_w, t.tk_w
        ins_at_in, tk_at_in = t.ins_at_in, t.tk_at_in
        # The announced QP's flags are read when it is announced (``next_load``), so they are
        # ready when its response comes; until then a write to that QP since the read (in the
        # read's cycle included) replaces the bits read (``held_read``). They are registered with
        # the input, each replaced by what the insert or the take of that cycle writes to the
        # same QP.
        if t.late:
            # block RAM: the response waits a cycle in I0, where its flags are seen
            i0_valid = Signal()
            i0 = Signal.like(i)
            i0_ok = Signal()        # not dropped
            m.d.comb += i0_ok.eq(i0_valid & ~self.i_drop)
            m.d.sync += [i0_valid.eq(self.i.valid), i0.eq(self.i.payload),
                         i_valid.eq(i0_ok), i.eq(i0)]
            src = i0
        else:
            i0_valid = 0
            m.d.sync += [i_valid.eq(self.i.valid), i.eq(self.i.payload)]
            src = self.i.payload
        # nothing held (every term a register): the table's flags all clear, no take pending
        idle = Signal()
        m.d.comb += idle.eq(~(t.sw_busy | t.t_valid | t.u_valid | t.d_v | t.s_valid | t.r_valid
                              | t.k_valid | t.qf.o.valid | (t.qf.level != 0)))
        # The bypass reads ``idle`` a cycle late, from a register, so that the insert's write
        # enables start at flip-flops (timing): nothing was held then and nothing has been
        # inserted since, so nothing is held now. In the cycle after the table drains it says
        # "held", and a response takes the table's path, where it is the only one held.
        idle_r = Signal()
        m.d.sync += idle_r.eq(idle & ~ins_w.en)
        m.d.comb += t.byp.eq(i_valid & idle_r & t.oq.i.ready)
        for rp in (ins_at_in, tk_at_in):
            m.d.comb += [rp.addr.eq(self.next_qpn), rp.en.eq(self.next_load)]
        n_q = Signal(ab)            # the announced QP
        with m.If(self.next_load):
            m.d.sync += n_q.eq(self.next_qpn)
        # (the writes are compared with the announced QPN and with ``n_q`` at once, so that
        # ``next_load``, late in the cycle, only selects which compare counts)
        def hit(w):
            return Mux(self.next_load, w.en & (w.addr == self.next_qpn), w.en & (w.addr == n_q))
        # q's bits as they stand at I (before I's own writes)
        q_ins = Signal(_ins_layout)
        q_tk = Signal(_take_layout)
        if t.late:
            m.d.sync += [q_ins.eq(self._late_flags(m, t.ins_in_r, ins_w, n_q, i0, "nf_ins")),
                         q_tk.eq(self._late_flags(m, t.tk_in_r, tk_w, n_q, i0, "nf_tk"))]
        else:
            n_ins = held_read(m, ins_at_in.data, ins_w, hit(ins_w), self.next_load, "nf_ins")
            n_tk = held_read(m, tk_at_in.data, tk_w, hit(tk_w), self.next_load, "nf_tk")
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
        q_is_d = Signal()
        if t.late:
            # (``clash`` itself registered: the take depends on registers only)
            m.d.sync += [q_is_d.eq(src.qpn == Mux(t.sw_valid, t.sw_q, t.head)),
                         t.clash.eq(i0_ok & Mux(t.t_adv, src.qpn == t.t_q, src.qpn == t.u_q))]
        else:
            q_is_t = Signal()
            q_is_u = Signal()
            q_to_u = Signal()       # t_adv of the cycle before: head is that cycle's t_q
            m.d.sync += [q_is_t.eq(src.qpn == t.t_q),
                         q_is_u.eq(src.qpn == t.u_q),
                         q_to_u.eq(t.t_adv),
                         q_is_d.eq(src.qpn == Mux(t.sw_valid, t.sw_q, t.head))]
            m.d.comb += t.clash.eq(i_valid & Mux(q_to_u, q_is_t, q_is_u))
        # (no take of q in this cycle: ``clash``; a take of q in the cycle before writes the
        # take side now)
        tk_now = Signal(_take_layout)
        m.d.comb += tk_now.eq(Mux(tk_w.en & q_is_d, tk_w.data, q_tk))
        ack_k = Signal()            # q's ACK (NAK) is pending
        nak_k = Signal()
        m.d.comb += [ack_k.eq(q_ins.ack ^ tk_now.ack), nak_k.eq(q_ins.nak ^ tk_now.nak)]
        return types.SimpleNamespace(is_ack=is_ack, tk_now=tk_now, q_ins=q_ins, ack_k=ack_k,
                                     nak_k=nak_k, i0_valid=i0_valid,
                                     i0=i0 if t.late else None, i0_ok=i0_ok if t.late else None)

    def _late_flags(self, m, reg, w, n_q, i0, name):
        """Block-RAM flags: a flag table's bits of the response in I0 as they stand (before I's
        writes). The read is seen in ``reg`` two cycles after the announcement, when the
        response is in I0 at the earliest; the read latch holds it until the next announcement,
        which comes with the response at the earliest, so the register shows it while the
        response is in I0. The writes ``w`` to the announced QP ``n_q`` since the read are
        tracked (``v``, ``d``) and taken along with the response into I0 (``p_*``)."""
        hit_n = Signal(name=f"{name}_hit_n")
        m.d.comb += hit_n.eq(w.en & (w.addr == n_q))
        v = Signal(name=f"{name}_v")
        d = Signal.like(w.data, name=name)
        with m.If(self.next_load):
            m.d.sync += [v.eq(w.en & (w.addr == self.next_qpn)), d.eq(w.data)]
        with m.Else():
            m.d.sync += [v.eq(v | hit_n), d.eq(Mux(hit_n, w.data, d))]
        p_v = Signal(name=f"{name}_p_v")
        p_d = Signal.like(w.data, name=f"{name}_p_d")
        m.d.sync += [p_v.eq(v | hit_n), p_d.eq(Mux(hit_n, w.data, d))]
        return Mux(w.en & (w.addr == i0.qpn), w.data, Mux(p_v, p_d, reg))

    def _insert_write(self, m, t):
        """The insert's writes: the response's QP into the QP FIFO when it had nothing pending,
        its flags (unless it bypasses the table) and its ACK or NAK row; and ``pending``."""
        i, i_valid, byp, is_ack, tk_now, q_ins = t.i, t.i_valid, t.byp, t.is_ack, t.tk_now, t.q_ins
        ins_w, row_w, qf, oq = t.ins_w, t.row_w, t.qf, t.oq
        q = i.qpn
        wrow = _row_layout(row_w.data)
        m.d.comb += [
            self.i.ready.eq(1),
            qf.i.valid.eq(i_valid & ~(t.ack_k | t.nak_k) & ~byp),
            qf.i.payload.eq(q),
        ]
        # an ACK sets the ACK flag and keeps a NAK still pending (which then came first), a NAK
        # sets the NAK flag and keeps a pending ACK
        m.d.comb += [
            ins_w.addr.eq(q), ins_w.en.eq(i_valid & ~byp),
            ins_w.data.ack.eq(Mux(is_ack, ~tk_now.ack, q_ins.ack)),
            ins_w.data.nak.eq(Mux(is_ack, q_ins.nak, ~tk_now.nak)),
            ins_w.data.nak_first.eq(is_ack & t.nak_k),
        ]
        if t.late:
            # (the lanes' write enables from registers: the table spans many block RAMs)
            w_ack = Signal()
            w_nak = Signal()
            m.d.sync += [w_ack.eq(t.i0_ok & (t.i0.syndrome == 0x1F)),
                         w_nak.eq(t.i0_ok & (t.i0.syndrome != 0x1F))]
        else:
            w_ack, w_nak = i_valid & is_ack, i_valid & ~is_ack
        m.d.comb += [
            row_w.addr.eq(q),
            row_w.en.eq(Cat(w_ack.replicate(_ACK_LANES),
                            w_nak.replicate(len(row_w.en) - _ACK_LANES))),
            wrow.ack.psn.eq(i.psn), wrow.ack.msn.eq(i.msn),
            wrow.nak.psn.eq(i.psn), wrow.nak.msn.eq(i.msn),
            wrow.nak.syn6.eq(Cat(i.syndrome[:5], i.syndrome[6])),
            self.pending.eq((i_valid | t.i0_valid if t.late else i_valid) | t.t_valid
                            | t.u_valid | t.d_v | t.s_valid | t.r_valid
                            | t.k_valid | qf.o.valid | (qf.level != 0) | oq.o.valid
                            | (oq.level != 0)),
        ]
