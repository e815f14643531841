"""TX arbiter: frames from the responder and the requester onto the one MAC transmit stream.

Round-robin at frame granularity: once a frame's first beat is granted, its source keeps the
output until its ``last`` beat; the next frame goes to the other source if it has one waiting, so
no source waits more than one frame of the other. Sources must keep ``valid`` high within a frame
(the MAC takes no gaps); both builders of this design do.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..ifaces import NUM_COUNTERS, Counter
from ..stream import BeatStream, check_width

__all__ = ["TxArbiter"]


class TxArbiter(wiring.Component):
    """Two-input frame round-robin arbiter.

    Parameters
    ----------
    width : int
        Data width W.

    Attributes
    ----------
    i0 : In(BeatStream(W))
        Responder ACK/NAK frames.
    i1 : In(BeatStream(W))
        Requester data frames (tie ``valid`` low until the requester exists).
    o : Out(BeatStream(W))
        MAC transmit stream (``user`` forced to 0).
    stat : Out(NUM_COUNTERS)
        Counter 12 (frames sent) on every last beat taken by the MAC.
    """

    def __init__(self, width):
        self.width = check_width(width)
        super().__init__({
            "i0": In(BeatStream(width)),
            "i1": In(BeatStream(width)),
            "o": Out(BeatStream(width)),
            "stat": Out(NUM_COUNTERS),
        })

    def elaborate(self, platform):
        m = Module()
        busy = Signal()         # a frame is in progress from `sel`
        sel = Signal()
        prio = Signal()         # source preferred at the next frame start
        pick = Signal()
        m.d.comb += pick.eq(Mux(busy, sel,
                                Mux(prio, Mux(self.i1.valid, 1, 0), Mux(self.i0.valid, 0, 1))))
        src_valid = Mux(pick, self.i1.valid, self.i0.valid)
        m.d.comb += [
            self.o.valid.eq(src_valid),
            self.o.payload.data.eq(Mux(pick, self.i1.payload.data, self.i0.payload.data)),
            self.o.payload.keep.eq(Mux(pick, self.i1.payload.keep, self.i0.payload.keep)),
            self.o.payload.last.eq(Mux(pick, self.i1.payload.last, self.i0.payload.last)),
            self.o.payload.user.eq(0),
            self.i0.ready.eq(self.o.ready & (pick == 0)),
            self.i1.ready.eq(self.o.ready & (pick == 1)),
        ]
        with m.If(self.o.valid & self.o.ready):
            with m.If(self.o.payload.last):
                m.d.sync += [busy.eq(0), prio.eq(~pick)]
                m.d.comb += self.stat[Counter.TX_FRAMES].eq(1)
            with m.Else():
                m.d.sync += [busy.eq(1), sel.eq(pick)]
        return m
