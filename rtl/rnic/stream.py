"""Shared stream building blocks: the beat layout, a skid buffer and a typed queue.

All links between blocks are ``amaranth.lib.stream`` interfaces and follow its transfer rules:
``valid`` never waits for ``ready``, and the payload is stable while ``valid`` is high and
``ready`` low. Framing (``last``, ``keep``, ``user``) lives inside the payload.
"""

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["WIDTHS", "check_width", "beat_layout", "BeatStream", "SkidBuffer", "Queue",
           "ShiftQueue", "slim_queue", "RoomFIFO", "BypassFIFO"]

#: Data widths of the MAC and host-memory buses this design supports.
WIDTHS = (64, 128, 256, 512)


def check_width(width):
    if width not in WIDTHS:
        raise ValueError(f"data width must be one of {WIDTHS}, not {width!r}")
    return width


def beat_layout(width):
    """One beat of a byte stream ``width`` bits wide.

    ``data``: byte ``i`` of the beat in ``data[8*i+7:8*i]``; ``keep``: one bit per byte,
    contiguous from bit 0 (all ones except possibly on the ``last`` beat, never 0);
    ``last``: the beat ends the packet; ``user``: on the last beat, the packet is bad.
    """
    check_width(width)
    return data.StructLayout({
        "data": width,
        "keep": width // 8,
        "last": 1,
        "user": 1,
    })


def BeatStream(width):
    """``stream.Signature`` of a byte stream of :func:`beat_layout` beats."""
    return stream.Signature(beat_layout(width))


class SkidBuffer(wiring.Component):
    """A two-entry skid buffer: registers ``i.ready`` and ``o.valid``/``o.payload``.

    Cuts every combinational path between the two sides at full throughput (one transfer per
    cycle with ``o.ready`` held high).

    Parameters
    ----------
    shape : shape-castable
        Payload shape.

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        skid = Signal.like(self.i.payload, name="skid")
        skid_valid = Signal()

        m.d.comb += self.i.ready.eq(~skid_valid)
        # the skid register follows the input while it is empty (its content counts only with
        # skid_valid), so its enable is ~skid_valid alone, not the upstream valid logic (which
        # may start at a block-RAM read: design-rules.md §7)
        with m.If(~skid_valid):
            m.d.sync += skid.eq(self.i.payload)
        with m.If(self.o.ready | ~self.o.valid):
            # Output register free (or being emptied): load from skid first, else from input.
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            # Output held: park the incoming transfer.
            m.d.sync += skid_valid.eq(1)
        return m


def _incr(v, modulo):
    return v + 1 if modulo == 2 ** len(v) else Mux(v == modulo - 1, 0, v + 1)


class RoomFIFO(Elaboratable):
    """``amaranth.lib.fifo.SyncFIFO`` (``buffered=False``) or ``SyncFIFOBuffered``, cycle for
    cycle at its ports, except that the storage is written in every cycle it has room.

    Amaranth's FIFOs write the storage when ``w_en & w_rdy``. The slot written is free whenever
    ``w_rdy``, so writing it without ``w_en`` changes nothing a reader can see (``r_data`` is
    only meaningful with ``r_rdy``), and it takes the producer's ``valid`` — often deep logic,
    sometimes from another block — off the write enable of the whole storage (hundreds of
    flip-flops or LUT-RAM cells), which then depends on the level register alone (a wide
    enable driven by a late decision from another block is a long path after placement).
    ``w_rdy`` and ``r_rdy`` are registers (Amaranth's compare the level register with a
    constant), so that a queue's room, ANDed into a stage's ``can_go`` and from there into the
    enables of its registers, starts that path at a flip-flop. ``produce``, ``consume`` and
    ``level`` move exactly as in Amaranth's (checked against it cycle by cycle in
    ``tb/blocks/test_stream_blocks.py``).
    """

    def __init__(self, *, width, depth, buffered, registers=False):
        if depth < 1:
            raise ValueError(f"FIFO depth must be at least 1, not {depth}")
        self.width, self.depth, self.buffered = width, depth, buffered
        self.registers = registers
        self.w_data = Signal(width)
        self.w_en = Signal()
        self.w_rdy = Signal()
        self.r_data = Signal(width)
        self.r_en = Signal()
        self.r_rdy = Signal()
        self.level = Signal(range(depth + 1))
        self.w_rdy_next = Signal()      # what ``w_rdy`` will be in the next cycle

    @staticmethod
    def _ready_flags(m, level, depth, do_write, do_read, not_full, not_empty, not_full_next):
        """``not_full``/``not_empty`` registered: ``level`` of the next cycle compared."""
        m.d.comb += not_full_next.eq(~(((level == depth) & ~do_read)
                                       | ((level == depth - 1) & do_write & ~do_read)))
        m.d.sync += [
            not_full.eq(not_full_next),
            not_empty.eq(~(((level == 0) & ~do_write)
                           | ((level == 1) & do_read & ~do_write))),
        ]

    def _ring(self, m, depth, level, do_write, do_read, read_domain):
        """The storage ring: written at ``produce`` whenever ``w_rdy`` (see above), read at
        ``consume``; ``level`` counts its entries. Returns the read port."""
        # ``registers``: flip-flops, not LUT RAM (yosys's ``ram_style = "logic"``). Otherwise
        # ``no_rw_check``: an enabled read and an enabled write never meet at one address (a
        # write needs a free entry, a read a held one; ``produce`` = ``consume`` only when the
        # ring is empty or full), so a block RAM needs no read-during-write logic (yosys would
        # emulate it with a register on every data bit).
        attrs = {"ram_style": "logic"} if self.registers else {"no_rw_check": 1}
        m.submodules.storage = storage = Memory(shape=self.width, depth=depth, init=[],
                                                attrs=attrs)
        w_port = storage.write_port()
        r_port = storage.read_port(domain=read_domain)
        produce = Signal(range(depth))
        consume = Signal(range(depth))
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data),
                     w_port.en.eq(self.w_rdy), r_port.addr.eq(consume),
                     self.r_data.eq(r_port.data)]
        with m.If(do_write):
            m.d.sync += produce.eq(_incr(produce, depth))
        with m.If(do_read):
            m.d.sync += consume.eq(_incr(consume, depth))
        with m.If(do_write & ~do_read):
            m.d.sync += level.eq(level + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += level.eq(level - 1)
        return r_port

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        if not self.buffered:
            # w_rdy and r_rdy are registers (level != depth / != 0 of the next level): a
            # consumer's or producer's decision starts at a flop, not at a level compare
            w_rdy_r = Signal(init=1)
            r_rdy_r = Signal()
            m.d.comb += [self.w_rdy.eq(w_rdy_r), self.r_rdy.eq(r_rdy_r)]
            do_read = self.r_rdy & self.r_en
            do_write = self.w_rdy & self.w_en
            self._ready_flags(m, self.level, depth, do_write, do_read, w_rdy_r, r_rdy_r,
                              self.w_rdy_next)
            self._ring(m, depth, self.level, do_write, do_read, "comb")
            return m

        do_write = self.w_rdy & self.w_en
        do_read = self.r_rdy & self.r_en
        if depth == 1:
            # a single register, as Amaranth's (a value every other cycle)
            m.d.comb += [self.w_rdy.eq(self.level == 0), self.r_rdy.eq(self.level == 1),
                         self.w_rdy_next.eq(Mux(self.w_rdy, ~do_write, do_read))]
            with m.If(self.w_rdy):
                m.d.sync += self.r_data.eq(self.w_data)
            with m.If(do_write):
                m.d.sync += self.level.eq(1)
            with m.If(do_read):
                m.d.sync += self.level.eq(0)
            return m

        # an inner ring of depth − 1 with a synchronous read, and ``r_data`` as the last entry
        inner_depth = depth - 1
        inner_level = Signal(range(inner_depth + 1))
        inner_r_rdy = Signal()
        w_rdy_r = Signal(init=1)
        m.d.comb += self.w_rdy.eq(w_rdy_r)
        do_inner_read = inner_r_rdy & (~self.r_rdy | self.r_en)
        self._ready_flags(m, inner_level, inner_depth, do_write, do_inner_read,
                          w_rdy_r, inner_r_rdy, self.w_rdy_next)
        r_port = self._ring(m, inner_depth, inner_level, do_write, do_inner_read, "sync")
        m.d.comb += r_port.en.eq(do_inner_read)
        with m.If(do_inner_read):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.comb += self.level.eq(inner_level + self.r_rdy)
        return m


class BypassFIFO(Elaboratable):
    """A buffered :class:`RoomFIFO` (registered output) with a bypass register in front: a write
    that finds the FIFO empty and the bypass register free or being read goes into the
    register and is readable in the next cycle (through the FIFO it takes two). Entries leave
    in write order: the register, when it holds one, holds the oldest. ``r_data`` is a
    multiplexer of two registers and ``r_rdy`` an OR of two, so a consumer's decision still
    starts at flip-flops. Holds up to ``depth`` + 1 entries; ``w_rdy`` is the FIFO's (a
    producer that never overfills ``depth`` entries may ignore it).
    """

    def __init__(self, *, width, depth):
        self.width, self.depth = width, depth
        self.w_data = Signal(width)
        self.w_en = Signal()
        self.w_rdy = Signal()
        self.r_data = Signal(width)
        self.r_en = Signal()
        self.r_rdy = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = q = RoomFIFO(width=self.width, depth=self.depth, buffered=True)
        b_v = Signal()
        b_d = Signal(self.width)
        to_b = Signal()
        # the FIFO holds nothing: a register of its own (its next level compared), not a
        # compare of the FIFO's level (an adder) in front of the write enables; the next
        # level's compare with 0 from the level's compares with 0 and 1 (made from the
        # register, beside the enables): no adder after them either
        q_empty = Signal(init=1)
        wr, rd = q.w_en & q.w_rdy, q.r_en & q.r_rdy
        lv0, lv1 = Signal(), Signal()
        m.d.comb += [lv0.eq(q.level == 0), lv1.eq(q.level == 1)]
        m.d.sync += q_empty.eq(Mux(rd & ~wr, lv1, lv0 & ~(wr & ~rd)))
        m.d.comb += [
            to_b.eq(self.w_en & q_empty & (~b_v | self.r_en)),
            q.w_en.eq(self.w_en & ~to_b),
            q.w_data.eq(self.w_data),
            q.r_en.eq(self.r_en & ~b_v),
            self.w_rdy.eq(q.w_rdy),
            self.r_rdy.eq(b_v | q.r_rdy),
            self.r_data.eq(Mux(b_v, b_d, q.r_data)),
        ]
        with m.If(to_b):
            m.d.sync += [b_v.eq(1), b_d.eq(self.w_data)]
        with m.Elif(self.r_en):
            m.d.sync += b_v.eq(0)
        return m


class Queue(wiring.Component):
    """A typed FIFO: :class:`RoomFIFO` (Amaranth's ``SyncFIFOBuffered`` at its ports, its
    storage written whenever it has room) with a struct payload.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (a ``data.Layout`` is carried whole).
    depth : int
        Number of entries (≥ 1). Large depths infer block RAM.
    buffered : bool
        ``True`` (default): registered output (as ``SyncFIFOBuffered``), one extra cycle of
        latency. ``False``: as ``SyncFIFO`` (for depths that should stay in registers).
    registers : bool
        Keep the storage in flip-flops (``ram_style = "logic"``) instead of letting synthesis
        infer LUT RAM: for a short queue whose write data comes from a block RAM (LUT RAM's
        write path adds a LUT and pulls its cells together) or whose read feeds deep logic.
    registered : tuple of str, optional
        With ``buffered`` and a ``data.StructLayout`` shape: only these fields come from the
        output register; the others are read combinationally from a LUT-RAM ring at the head
        entry (design rule 4: a wide record is not copied into an output register when its
        consumer only stores it). The ports behave exactly as the buffered queue's, cycle for
        cycle. One ring and one set of pointers hold both parts, and the entry presented is
        never written while it is presented, so the stream rules hold from any state of the
        queue, reachable or not (a block that uses it can prove its own by induction).
    bypass : bool
        With ``registered`` (some fields, not all) and a depth of at least 2: an entry written
        while the queue is empty (or its one entry is being taken) is offered in the next cycle,
        its registered fields loaded straight from ``i.payload`` (one cycle of latency, as an
        unbuffered queue, from flip-flops); the ports otherwise move as the buffered queue's.
        (:class:`BypassFIFO` does the same for a plain-width FIFO whose output is all register.)

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    level : Out(range(depth + 1))
        Entries held.
    room_next : Out(1)
        What ``i.ready`` will be in the next cycle (the D input of its register): lets a
        producer that stalls on several queues register its own stall decision.
    """

    def __init__(self, shape, depth, *, buffered=True, registers=False, registered=None,
                 bypass=False):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"queue depth must be a positive integer, not {depth!r}")
        if registered is not None:
            if not buffered or registers or not isinstance(shape, data.StructLayout):
                raise ValueError("registered= needs a buffered queue of a data.StructLayout "
                                 "kept in LUT RAM")
            unknown = [f for f in registered if f not in shape.members]
            if unknown or not registered:
                raise ValueError(f"registered= names no field or unknown fields {unknown} of "
                                 f"{shape!r}")
            registered = tuple(registered)
        self._shape = shape
        if bypass and (registered is None or depth == 1
                       or set(registered) == set(shape.members)):
            raise ValueError("bypass= needs registered= naming some but not all fields, and "
                             "a depth of at least 2")
        self._bypass = bypass
        self._depth = depth
        self._buffered = buffered
        self._registers = registers
        self._registered = registered
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
            "room_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        if self._registered is not None:
            return self._elaborate_split(m)
        return self._elaborate_plain(m)

    def _elaborate_plain(self, m):
        width = Shape.cast(self._shape).width
        m.submodules.fifo = q = RoomFIFO(width=width, depth=self._depth,
                                         buffered=self._buffered, registers=self._registers)
        m.d.comb += [
            q.w_data.eq(Value.cast(self.i.payload)),
            q.w_en.eq(self.i.valid),
            self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(q.r_data),
            self.o.valid.eq(q.r_rdy),
            q.r_en.eq(self.o.ready),
            self.level.eq(q.level),
            self.room_next.eq(q.w_rdy_next),
        ]
        return m

    def _elaborate_split(self, m):
        """``registered``: one ring of ``depth`` entries, one set of pointers.

        The flags (``w_rdy``, ``r_rdy``, the inner level and its flags) are the buffered
        :class:`RoomFIFO`'s, register for register, so the ports move as the buffered queue's.
        Every entry is written at ``produce`` into two LUT-RAM memories of ``depth`` entries,
        one of the named fields and one of the rest. The named fields are read synchronously
        at ``consume`` (the next entry out) into the output register; when that load happens,
        ``head`` takes ``consume``, so ``head`` is the slot of the entry the output register
        holds, and the other fields are read combinationally there.

        The presented payload cannot change while ``o.valid`` and not ``o.ready``, from any
        state, reachable or not: the output register and ``head`` are loaded only while
        ``~o.valid | o.ready`` (``head`` by the inner read), and the rest memory is never written at
        ``head`` (its write enable is ``w_rdy`` and ``produce != head``). In a reachable state
        ``head`` is ``consume − 1`` and ``produce`` is ``consume`` plus the inner level, so
        ``produce = head`` only with the inner level at depth − 1, never while ``w_rdy``: the
        compare holds back no write there. It makes the rule a property of the queue's every
        state, which a proof by induction from an arbitrary state needs. ``head`` is a register
        of its own rather than ``consume − 1`` so that the combinational read's address comes
        straight from a flip-flop."""
        depth, shape, reg = self._depth, self._shape, self._registered
        rest = [f for f in shape.members if f not in reg]
        width = lambda names: sum(Shape.cast(shape.members[f]).width for f in names)  # noqa: E731
        if depth == 1 or not rest:
            # one entry is the output register itself: the plain buffered queue
            return self._elaborate_plain(m)
        # the buffered RoomFIFO's flags over an inner level of depth − 1 entries
        inner_depth = depth - 1
        inner_level = Signal(range(inner_depth + 1))
        inner_r_rdy = Signal()
        w_rdy = Signal(init=1)
        r_rdy = Signal()
        do_write = w_rdy & self.i.valid
        # ``bypass``: a write into an empty inner ring is read out in its own cycle when the
        # output register may be loaded (``byp``): the inner level and its flags see neither
        # (``lv_write``, ``lv_read``), the pointers and the output register see both
        byp = Signal()
        if self._bypass:
            m.d.comb += byp.eq(do_write & ~inner_r_rdy & (~r_rdy | self.o.ready))
        do_inner_read = (inner_r_rdy | byp) & (~r_rdy | self.o.ready)
        lv_write, lv_read = do_write & ~byp, do_inner_read & ~byp
        RoomFIFO._ready_flags(m, inner_level, inner_depth, lv_write, lv_read,
                              w_rdy, inner_r_rdy, self.room_next)
        with m.If(lv_write & ~lv_read):
            m.d.sync += inner_level.eq(inner_level + 1)
        with m.If(lv_read & ~lv_write):
            m.d.sync += inner_level.eq(inner_level - 1)
        with m.If(do_inner_read):
            m.d.sync += r_rdy.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += r_rdy.eq(0)

        produce = Signal(range(depth))
        consume = Signal(range(depth))
        head = Signal(range(depth), init=depth - 1)     # consume − 1, from reset on
        with m.If(do_write):
            m.d.sync += produce.eq(_incr(produce, depth))
        with m.If(do_inner_read):
            m.d.sync += [consume.eq(_incr(consume, depth)), head.eq(consume)]

        # written in every cycle with room, as RoomFIFO's storage (the slot is free then);
        # ``no_rw_check``: the synchronous read (an entry held) and a write (a free slot) never
        # meet at one address in a reachable state, and a read elsewhere only loads the output
        # register when its old value may go
        m.submodules.reg_ring = reg_ring = Memory(shape=width(reg), depth=depth, init=[],
                                                  attrs={"no_rw_check": 1})
        m.submodules.rest_ring = rest_ring = Memory(shape=width(rest), depth=depth, init=[])
        reg_w, rest_w = reg_ring.write_port(), rest_ring.write_port()
        rest_r = rest_ring.read_port(domain="comb")
        fields = lambda names: Cat(*[self.i.payload[f] for f in names])   # noqa: E731
        if self._bypass:
            # the output register of its own: the ring's entry or, on a bypass, the input's
            # (loaded whenever it may be, from the ring while it holds an entry, else from the
            # input: neither enable nor choice waits for ``i.valid``; o.valid low hides junk)
            reg_c = reg_ring.read_port(domain="comb")
            reg_d = Signal(width(reg))
            m.d.comb += reg_c.addr.eq(consume)
            with m.If(~r_rdy | self.o.ready):
                m.d.sync += reg_d.eq(Mux(inner_r_rdy, reg_c.data, fields(reg)))
        else:
            reg_r = reg_ring.read_port(domain="sync")
            reg_d = reg_r.data
            m.d.comb += [reg_r.addr.eq(consume), reg_r.en.eq(do_inner_read)]
        m.d.comb += [
            reg_w.addr.eq(produce), reg_w.data.eq(fields(reg)), reg_w.en.eq(w_rdy),
            rest_w.addr.eq(produce), rest_w.data.eq(fields(rest)),
            rest_w.en.eq(w_rdy & (produce != head)),
            rest_r.addr.eq(head),
            self.i.ready.eq(w_rdy),
            self.o.valid.eq(r_rdy),
            self.level.eq(inner_level + r_rdy),
        ]
        for names, src in ((reg, reg_d), (rest, rest_r.data)):
            pos = 0
            for f in names:
                w = Shape.cast(shape.members[f]).width
                m.d.comb += self.o.payload[f].eq(src[pos:pos + w])
                pos += w
        return m


class ShiftQueue(wiring.Component):
    """A queue of ``depth`` entries in flip-flops that shift towards the head, entry 0 the head:
    the head's payload, ``o.valid`` and ``i.ready`` are registers (entry 0, and the "held"
    bits of entries 0 and ``depth`` − 1), not a read multiplexer at a pointer, so a consumer
    that decides on the head and pops it in the same cycle starts at flip-flops.

    Its ports move as ``Queue(shape, depth, buffered=False)``'s, cycle for cycle: an entry
    pushed into an empty queue is at the head in the next cycle, and a full queue takes no
    entry, not even in a cycle with a pop. For a short, narrow queue (each entry costs its
    bits in flip-flops and a 3-input multiplexer in front of each).

    Parameters
    ----------
    shape : shape-castable
        Payload shape.
    depth : int
        Number of entries (≥ 1).

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"queue depth must be a positive integer, not {depth!r}")
        self._shape, self._depth = shape, depth
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        D = self._depth
        ent = [Signal(self._shape, name=f"entry{k}") for k in range(D)]
        held = Signal(D)            # entries 0 .. level − 1 are held (a thermometer code)
        push = self.i.valid & self.i.ready
        pop = self.o.valid & self.o.ready
        m.d.comb += [self.i.ready.eq(~held[D - 1]), self.o.valid.eq(held[0]),
                     self.o.payload.eq(ent[0])]
        # after the pop: entry k is entry k + 1; the push fills the first entry not held then
        # (written whenever it is the first free one: it counts only once held)
        kept = Mux(pop, held >> 1, held)
        for k in range(D):
            nxt = ent[k + 1] if k + 1 < D else ent[k]
            first_free = ~kept[k] & (kept[k - 1] if k else 1)
            m.d.sync += [held[k].eq(kept[k] | push & first_free),
                         ent[k].eq(Mux(first_free, self.i.payload, Mux(pop, nxt, ent[k])))]
        return m


def slim_queue(m, name, layout, depth, slim, out, rebuild=None):
    """An unbuffered queue of ``layout`` records in LUT RAM that keeps, of each field named in
    ``slim`` (``{field: (lo, width)}``), only bits ``[lo, lo + width)``: the others are 0 in
    every record this block pushes (a local QPN below ``num_qp``, a 64-byte-aligned ring base).
    The record is presented whole on ``out`` (the block's port), the dropped bits 0, or the
    field made from its kept bits by ``rebuild[field]`` (a status that is 0 or 9, kept as one
    bit; a field kept with no bits, ``(0, 0)``, that is the same in every record). Returns the
    queue and the record to push (``rec``, for ``i.payload``)."""
    rebuild = rebuild or {}
    stored = data.StructLayout({f: slim[f][1] if f in slim else v.width for f, v in layout})
    m.submodules[name] = q = Queue(stored, depth, buffered=False)
    rec = Signal(layout, name=f"{name}_rec")
    for f, v in layout:
        lo, w = slim.get(f, (0, v.width))
        kept = q.o.payload[f]
        m.d.comb += [q.i.payload[f].eq(rec[f][lo:lo + w]),
                     out.payload[f].eq(rebuild[f](kept) if f in rebuild
                                       else Cat(Const(0, lo), kept))]
    m.d.comb += [out.valid.eq(q.o.valid), q.o.ready.eq(out.ready)]
    return q, rec


class StreamMerge(wiring.Component):
    """Round-robin merge of ``n`` streams of one shape into one (whole transfers, no framing).

    Each input is granted within ``n`` transfers of the output. Use it for narrow control
    streams (events, doorbells); packet streams need a framing-aware arbiter.

    ``registered`` (a tuple of field names of a ``data.StructLayout`` shape): only those fields
    are copied into the output register; the others are muxed from the granted input, which is
    popped when the output is taken (not when it is granted), so it holds them meanwhile. For a
    wide record whose producers already hold it (a queue's head, a register): the merge then
    keeps no copy of it. One transfer every other cycle at most.

    ``grant_cycle`` (with ``registered``): the pick is registered a cycle before the output
    register is loaded, by a mux whose select is that register. Without it ABC decodes the
    round-robin pick into every bit's load mux, several times the LUTs of the mux itself from
    three inputs on. One transfer every third cycle at most.

    Attributes
    ----------
    i : In(stream.Signature(shape)).array(n)
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape, n, *, registered=None, grant_cycle=False):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"a merge needs at least one input, not {n!r}")
        if registered is not None:
            if not isinstance(shape, data.StructLayout) or not registered or any(
                    f not in shape.members for f in registered):
                raise ValueError(f"registered= must name fields of a data.StructLayout, not "
                                 f"{registered!r}")
            registered = tuple(registered)
        self._n = n
        self._shape = shape
        self._registered = registered
        if grant_cycle and registered is None:
            raise ValueError("grant_cycle= needs registered=")
        self._grant_cycle = bool(grant_cycle)
        super().__init__({
            "i": In(stream.Signature(shape)).array(n),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._n
        last = Signal(range(n), init=n - 1)     # the last input granted
        # pick the first valid input after `last`, cyclically
        sel = Signal(range(n))
        any_valid = Signal()
        for k in reversed(range(n)):
            for j in range(n):
                cand = (j + 1 + k) % n
                with m.If((last == j) & self.i[cand].valid):
                    m.d.comb += [sel.eq(cand), any_valid.eq(1)]
        if self._registered is not None:
            # the grant is held (``last``) until the output is taken; the input granted is
            # popped then, and the other fields come from it
            def granted_field(f):
                sig = self.i[0].payload[f]
                for j in range(1, n):
                    sig = Mux(last == j, self.i[j].payload[f], sig)
                return sig

            with m.If(self.o.valid):
                with m.If(self.o.ready):
                    m.d.sync += self.o.valid.eq(0)
                    for j in range(n):
                        m.d.comb += self.i[j].ready.eq(last == j)
            if self._grant_cycle:
                # the pick is registered (``last``, ``granted``) a cycle before the output is
                # loaded, so the load is a mux by a register
                granted = Signal()
                with m.Elif(granted):
                    m.d.sync += [self.o.valid.eq(1), granted.eq(0)]
                with m.Else():
                    m.d.sync += granted.eq(any_valid)
                    with m.If(any_valid):
                        m.d.sync += last.eq(sel)
                with m.If(~self.o.valid):
                    m.d.sync += [self.o.payload[f].eq(granted_field(f))
                                 for f in self._registered]
            else:
                with m.Else():
                    m.d.sync += self.o.valid.eq(any_valid)
                    with m.If(any_valid):
                        m.d.sync += last.eq(sel)
                        for j in range(n):
                            with m.If(sel == j):
                                m.d.sync += [self.o.payload[f].eq(self.i[j].payload[f])
                                             for f in self._registered]
            m.d.comb += [self.o.payload[f].eq(granted_field(f))
                         for f in self._shape.members if f not in self._registered]
            return m
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += self.o.valid.eq(any_valid)
            for j in range(n):
                with m.If(any_valid & (sel == j)):
                    m.d.comb += self.i[j].ready.eq(1)
                    m.d.sync += [self.o.payload.eq(self.i[j].payload), last.eq(j)]
        return m
