"""Shared stream building blocks: the beat layout, a skid buffer and a typed queue.

All links between blocks are ``amaranth.lib.stream`` interfaces and follow its transfer rules:
``valid`` never waits for ``ready``, and the payload is stable while ``valid`` is high and
``ready`` low. Framing (``last``, ``keep``, ``user``) lives inside the payload.
"""

from amaranth.hdl import Module, Shape, Signal, Value
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["WIDTHS", "check_width", "beat_layout", "BeatStream", "SkidBuffer", "Queue"]

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
        with m.If(self.o.ready | ~self.o.valid):
            # Output register free (or being emptied): load from skid first, else from input.
            with m.If(skid_valid):
                m.d.sync += [self.o.payload.eq(skid), self.o.valid.eq(1), skid_valid.eq(0)]
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(self.i.valid)]
        with m.Elif(self.i.valid & self.i.ready):
            # Output held: park the incoming transfer.
            m.d.sync += [skid.eq(self.i.payload), skid_valid.eq(1)]
        return m


class Queue(wiring.Component):
    """A typed FIFO: ``amaranth.lib.fifo.SyncFIFOBuffered`` with a struct payload.

    Parameters
    ----------
    shape : shape-castable
        Payload shape (a ``data.Layout`` is carried whole).
    depth : int
        Number of entries (≥ 1). Large depths infer block RAM.
    buffered : bool
        ``True`` (default): registered output (``SyncFIFOBuffered``), one extra cycle of
        latency. ``False``: ``SyncFIFO`` (for depths that should stay in registers).

    Attributes
    ----------
    i : In(stream.Signature(shape))
    o : Out(stream.Signature(shape))
    level : Out(range(depth + 1))
        Entries held.
    """

    def __init__(self, shape, depth, *, buffered=True):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"queue depth must be a positive integer, not {depth!r}")
        self._shape = shape
        self._depth = depth
        self._buffered = buffered
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        width = Shape.cast(self._shape).width
        cls = fifo.SyncFIFOBuffered if self._buffered else fifo.SyncFIFO
        m.submodules.fifo = q = cls(width=width, depth=self._depth)
        m.d.comb += [
            q.w_data.eq(Value.cast(self.i.payload)),
            q.w_en.eq(self.i.valid),
            self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(q.r_data),
            self.o.valid.eq(q.r_rdy),
            q.r_en.eq(self.o.ready),
            self.level.eq(q.level),
        ]
        return m


class StreamMerge(wiring.Component):
    """Round-robin merge of ``n`` streams of one shape into one (whole transfers, no framing).

    Each input is granted within ``n`` transfers of the output. Use it for narrow control
    streams (events, doorbells); packet streams need a framing-aware arbiter.

    Attributes
    ----------
    i : In(stream.Signature(shape)).array(n)
    o : Out(stream.Signature(shape))
    """

    def __init__(self, shape, n):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"a merge needs at least one input, not {n!r}")
        self._n = n
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
        with m.If(~self.o.valid | self.o.ready):
            m.d.sync += self.o.valid.eq(any_valid)
            for j in range(n):
                with m.If(any_valid & (sel == j)):
                    m.d.comb += self.i[j].ready.eq(1)
                    m.d.sync += [self.o.payload.eq(self.i[j].payload), last.eq(j)]
        return m
