"""TX arbiter: picks the next frame for the one TX frame builder, by whole frames.

Two sources of frame descriptors: the responder's ACK/NAK frames (PSN Check's ``ack_tx``,
:data:`~rnic.tx.build.tx_hdr_layout`) and the requester's request packets (its ``pkt``,
:data:`~rnic.tx.build.pkt_layout`). A descriptor is a whole frame, so the arbiter needs no
frame state; a request's gather chunks go straight to the builder, which takes them for the
request descriptors in the order the arbiter passed them.

The grant is a register: a source is picked from the ``valid`` inputs into it in one cycle and
its descriptor passes in a later one, so neither source's ``ready`` depends on a ``valid`` and
the payload multiplexer's select is a register. ``o.valid`` is the granted source's ``valid``
(the requester may withdraw a descriptor when it rewinds; the grant is then dropped). After a
transfer the other source, if it waits, is granted in the same cycle; a source alone is granted
again a cycle later, so it passes one descriptor every other cycle (a frame takes the builder
more cycles than that).

Priority: round-robin by frame. When both sources wait, the one not served last goes first, so
an ACK/NAK waits behind at most one request frame and a request behind at most one ACK/NAK
(plus the frames already in the builder). ACK/NAKs cannot starve requests in any case: PSN
Check's pending table keeps at most an ACK and a NAK per QP.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .build import pkt_layout, tx_hdr_layout

__all__ = ["TxArbiter"]


class TxArbiter(wiring.Component):
    """Two-input frame round-robin arbiter ahead of :class:`~rnic.tx.build.TxBuild`.

    Attributes
    ----------
    ack : In(stream.Signature(tx_hdr_layout))
        Responder ACK/NAK frames.
    req : In(stream.Signature(pkt_layout))
        Requester request frames (their ``aeth`` fields are ignored and sent as 0).
    o : Out(stream.Signature(pkt_layout))
        To the builder's ``pkt``. ``o.ready`` must not depend on ``o.valid`` (the builder's
        input queue: its room).
    """

    def __init__(self):
        super().__init__({
            "ack": In(stream.Signature(tx_hdr_layout)),
            "req": In(stream.Signature(pkt_layout)),
            "o": Out(stream.Signature(pkt_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        prio = Signal()         # 1: the request source goes first at the next pick
        pick = Signal()         # 1: request, 0: ACK/NAK (from the inputs' valid)
        m.d.comb += pick.eq(Mux(prio, self.req.valid, ~self.ack.valid))
        g_valid = Signal()      # a source is granted
        g_req = Signal()        # the source granted: 1 request, 0 ACK/NAK
        a, r, o = self.ack.payload, self.req.payload, self.o.payload
        with m.If(g_req):
            m.d.comb += o.eq(r)
            m.d.comb += [o.aeth.eq(0), o.syndrome.eq(0), o.msn.eq(0)]
        with m.Else():
            m.d.comb += [getattr(o, f).eq(getattr(a, f)) for f in
                         ("qpn", "opcode", "se", "ackreq", "psn", "aeth", "syndrome", "msn")]
        g_in = Signal()         # the granted source's valid
        m.d.comb += [
            g_in.eq(Mux(g_req, self.req.valid, self.ack.valid)),
            self.o.valid.eq(g_valid & g_in),
            self.ack.ready.eq(self.o.ready & g_valid & ~g_req),
            self.req.ready.eq(self.o.ready & g_valid & g_req),
        ]
        with m.If(g_valid):
            with m.If(~g_in):
                # the requester withdraws a descriptor when it rewinds: pick again
                m.d.sync += g_valid.eq(0)
            with m.Elif(self.o.ready):
                # the other source next, if it waits
                m.d.sync += [prio.eq(~g_req), g_req.eq(~g_req),
                             g_valid.eq(Mux(g_req, self.ack.valid, self.req.valid))]
        with m.Else():
            m.d.sync += [g_valid.eq(self.ack.valid | self.req.valid), g_req.eq(pick)]
        return m
