"""TX arbiter: picks the next frame for the one TX frame builder, by whole frames, and routes
the gather chunks of the frames it passed to the builder in the same order.

Two sources of frame descriptors (:data:`~rnic.tx.build.pkt_layout`), each with its own gather
chunks (:data:`~rnic.tx.build.chunk_layout`): the responder (``resp``/``resp_chunk``: its ACK/NAK
frames, header only, and its READ responses, one chunk per frame with payload) and the requester
(``req``/``req_chunk``: its request packets, one chunk per SGE a packet's payload touches). A
descriptor is a whole frame, so picking frames needs no frame state.

The builder takes the chunks of its frames in descriptor order, so the arbiter remembers, in
grant order, each frame with payload it passed (its source and ``paylen``) in a small queue
(``depth`` entries) and routes to ``chunk`` only the chunks of the source of the queue's head,
popping the entry when that frame's chunks have summed to its ``paylen``. While the queue is
full no descriptor with payload is granted (header-only descriptors still are). This cannot
deadlock as long as each source sends a frame's chunks after its descriptor and without waiting
for a later descriptor of its own to pass (both do: a descriptor, then its chunks): the head's
chunks then always come, since its descriptor has passed and every earlier frame's chunks have
been routed.

The grant is a register: a source is picked from the ``valid`` inputs into it in one cycle and
its descriptor passes in a later one, so neither source's ``ready`` depends on a ``valid`` or a
payload (whether the granted descriptor has payload is registered with the grant) and the
payload multiplexer's select is a register. ``o.valid`` is the granted source's ``valid`` (a
source may withdraw a descriptor not yet taken: the requester when it rewinds, the READ response
engine when a payload fault ends its READ; the grant is then dropped; ``valid`` stays low for a
cycle before another descriptor is offered). After a transfer the other source, if it waits, is
granted in the same cycle; a source alone is granted again a cycle later, so it passes one
descriptor every other cycle (a frame takes the builder more cycles than that).

Parked: with no grant, ``g_req`` still names a source (the one served last, once a cycle has
passed without a transfer; the responder after reset), and that source's descriptor passes in
the cycle it is offered while the frame queue is empty, without a pick (``ready`` is still a
function of registers). Such a frame is queued whether or not it has payload, marked ``zero``
when it has none (the mark is data, not the queue's enable), and the chunk routing pops a
``zero`` entry at the head without a chunk.

Priority: round-robin by frame. When both sources wait (with a descriptor that can pass), the
one not served last goes first (except when both offer in the same cycle with no grant: the
parked source, the one served last, then goes first), so a responder frame waits behind at
most one request frame and a request behind at most one responder frame (plus the frames
already in the builder; a frame with payload also waits while the frame queue is full, and the
other source's header-only frames may pass meanwhile).
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream import ShiftQueue
from .build import chunk_layout, pkt_layout

__all__ = ["TxArbiter"]


class TxArbiter(wiring.Component):
    """Two-input frame round-robin arbiter ahead of :class:`~rnic.tx.build.TxBuild`, with the
    chunk routing that follows its grants.

    Parameters
    ----------
    depth : int
        Frames with payload passed whose chunks have not all been routed yet, at most
        (1..16; default 4).

    Attributes
    ----------
    resp : In(stream.Signature(pkt_layout))
        Responder frames: ACK/NAKs and READ responses (:class:`~rnic.tx.read_resp.ReadResp`).
    resp_chunk : In(stream.Signature(chunk_layout))
        The responder frames' gather chunks, after their descriptors, in frame order.
    req : In(stream.Signature(pkt_layout))
        Requester request frames (their ``aeth`` fields are ignored: ``aeth`` is sent as 0).
    req_chunk : In(stream.Signature(chunk_layout))
        The request frames' gather chunks, after their descriptors, in frame order.
    o : Out(stream.Signature(pkt_layout))
        To the builder's ``pkt``. ``o.ready`` must not depend on ``o.valid`` (the builder's
        input queue: its room). ``va``, ``rkey``, ``dmalen`` and ``imm`` are always ``req``'s
        and ``syndrome`` and ``msn`` always ``resp``'s, whichever source passes: a responder
        frame carries no RETH or IMMDT/IETH and a request frame no AETH (``aeth`` 0), so the
        builder never reads the other source's.
    chunk : Out(stream.Signature(chunk_layout))
        To the builder's ``chunk``: the chunks of the frames passed on ``o``, in that order.
    """

    def __init__(self, *, depth=4):
        if not isinstance(depth, int) or not 1 <= depth <= 16:
            raise ValueError(f"depth must be an integer in 1..16, not {depth!r}")
        self.depth = depth
        super().__init__({
            "resp": In(stream.Signature(pkt_layout)),
            "resp_chunk": In(stream.Signature(chunk_layout)),
            "req": In(stream.Signature(pkt_layout)),
            "req_chunk": In(stream.Signature(chunk_layout)),
            "o": Out(stream.Signature(pkt_layout)),
            "chunk": Out(stream.Signature(chunk_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        # the frames with payload passed, in grant order: source (1 request) and payload bytes
        # (``zero``: a frame without payload passed while parked, see below: popped at the
        # head without a chunk); a frame is at the head the cycle after its descriptor passed
        fq = self._frame_queue(m)

        self._grant(m, fq)
        self._chunks(m, fq)
        return m

    def _frame_queue(self, m):
        """The frame queue: a :class:`~rnic.stream.ShiftQueue` of ``depth`` entries, so the
        head's fields and the flags (``o.valid``, ``i.ready``) are registers, not a read
        multiplexer at a pointer behind the routing's select and its pop. Its ports move as an
        unbuffered queue's (``Queue(..., buffered=False)``): an entry pushed is at the head in
        the next cycle when the queue was empty, and a full queue takes no entry (not even
        with a pop)."""
        layout = data.StructLayout({"req": 1, "paylen": 13, "zero": 1})
        m.submodules.frames = fq = ShiftQueue(layout, self.depth)
        return fq

    def _grant(self, m, fq):
        """The grant (a register), the parked pass, the descriptor multiplexer onto ``o`` and
        the frame queue's push (``fq``)."""
        # ---- the grant -------------------------------------------------------------------------
        s, r, o = self.resp.payload, self.req.payload, self.o.payload
        # a source may be granted when it offers a descriptor that can pass: no payload, or
        # room in the frame queue for its entry
        z_resp, z_req = Signal(), Signal()      # the descriptor offered has no payload
        e_resp, e_req = Signal(), Signal()
        m.d.comb += [z_resp.eq(s.paylen == 0), z_req.eq(r.paylen == 0),
                     e_resp.eq(self.resp.valid & (z_resp | fq.i.ready)),
                     e_req.eq(self.req.valid & (z_req | fq.i.ready))]
        prio = Signal(init=1)   # 1: the request source goes first at the next pick (and with
        #                         none valid, the pick parks on the responder)
        pick = Signal()         # 1: request, 0: responder
        m.d.comb += pick.eq(Mux(prio, e_req, ~e_resp))
        g_valid = Signal()      # a source is granted
        g_req = Signal()        # the source granted: 1 request, 0 responder
        # the granted descriptor has no payload: registered with the grant (a descriptor does
        # not change while offered, and one withdrawn drops the grant), so the sources' ready
        # starts at registers, not at their payload
        g_zero = Signal()
        # the fields both sources fill go through the grant's multiplexer; the RETH and
        # IMMDT/IETH fields are the requester's and the AETH's syndrome and MSN the responder's
        # whichever source is granted (the builder reads them only for a frame that carries
        # them: a RETH or IMMDT/IETH only with a requester's opcode, an AETH only with ``aeth``)
        for f in ("opcode", "se", "ackreq", "psn", "paylen", "qpn"):
            m.d.comb += getattr(o, f).eq(Mux(g_req, getattr(r, f), getattr(s, f)))
        m.d.comb += [o.va.eq(r.va), o.rkey.eq(r.rkey), o.dmalen.eq(r.dmalen), o.imm.eq(r.imm),
                     o.aeth.eq(s.aeth & ~g_req), o.syndrome.eq(s.syndrome), o.msn.eq(s.msn)]
        g_in = Signal()         # the granted (or parked) source's valid
        g_pass = Signal()       # its descriptor may pass: no payload, or room for its entry
        # Parked: with no grant, ``g_req`` names the source served last once a cycle has passed
        # without a transfer (the pick of no ``valid``), or the other source in the cycle
        # after a transfer. A descriptor of the parked source passes at once while the frame
        # queue is empty, whether or not it has payload: it is queued with ``zero`` set when
        # it has none (data only, not the queue's enable), and the chunk routing pops such an
        # entry at the head without a chunk, in the next cycle. ``ready`` still starts at
        # registers; a source alone still passes no two descriptors in consecutive cycles.
        fq_empty = ~fq.o.valid
        m.d.comb += [
            g_in.eq(Mux(g_req, self.req.valid, self.resp.valid)),
            g_pass.eq(Mux(g_valid, g_zero | fq.i.ready, fq_empty)),
            self.o.valid.eq(g_in & g_pass),
            self.resp.ready.eq(self.o.ready & ~g_req & g_pass),
            self.req.ready.eq(self.o.ready & g_req & g_pass),
            fq.i.valid.eq(self.o.valid & self.o.ready & ~(g_valid & g_zero)),
            fq.i.payload.req.eq(g_req),
            fq.i.payload.paylen.eq(o.paylen),
            fq.i.payload.zero.eq(Mux(g_req, z_req, z_resp)),
        ]
        with m.If(g_valid):
            with m.If(~g_in | ~g_pass):
                # a source withdrew its descriptor (see above), or it has payload and the frame
                # queue is full (the grant was made a cycle before a transfer took the last
                # entry): pick again
                m.d.sync += g_valid.eq(0)
            with m.Elif(self.o.ready):
                # the other source next, if it waits
                m.d.sync += [prio.eq(~g_req), g_req.eq(~g_req),
                             g_valid.eq(Mux(g_req, e_resp, e_req)),
                             g_zero.eq(Mux(g_req, z_resp, z_req))]
        with m.Elif(self.o.valid & self.o.ready):
            # the parked source passed: as after a transfer
            m.d.sync += [prio.eq(~g_req), g_req.eq(~g_req),
                         g_valid.eq(Mux(g_req, e_resp, e_req)),
                         g_zero.eq(Mux(g_req, z_resp, z_req))]
        with m.Else():
            m.d.sync += [g_valid.eq(e_resp | e_req), g_req.eq(pick),
                         g_zero.eq(Mux(pick, z_req, z_resp))]

    def _chunks(self, m, fq):
        """The chunks of the frame queue's head (``fq``) routed to ``chunk`` from its source
        until they sum to its ``paylen``; a ``zero`` entry popped without one."""
        # ---- the chunks: those of the head frame's source, until they sum to its paylen ---------
        # the head frame's bytes still to come (``cur_need``): its ``paylen`` (the queue's head
        # entry) until a chunk of it has passed, then ``need`` (``need_ok``); so the head's
        # first chunk passes in the cycle the head arrives
        head = fq.o.payload
        need = Signal(13)
        need_ok = Signal()
        cur_need = Signal(13)
        m.d.comb += cur_need.eq(Mux(need_ok, need, head.paylen))
        on = Signal()           # the head's chunks may pass
        # the pop test, "this chunk ends the head frame", for each source's chunk in parallel
        # (compared before the multiplexer, not behind it)
        end_resp, end_req = Signal(), Signal()
        m.d.comb += [end_resp.eq(self.resp_chunk.payload.len >= cur_need),
                     end_req.eq(self.req_chunk.payload.len >= cur_need)]
        m.d.comb += [
            on.eq(fq.o.valid & ~head.zero),
            self.chunk.valid.eq(on & Mux(head.req, self.req_chunk.valid,
                                         self.resp_chunk.valid)),
            self.chunk.payload.eq(Mux(head.req, self.req_chunk.payload,
                                      self.resp_chunk.payload)),
            self.req_chunk.ready.eq(self.chunk.ready & on & head.req),
            self.resp_chunk.ready.eq(self.chunk.ready & on & ~head.req),
        ]
        with m.If(fq.o.valid & head.zero):
            m.d.comb += fq.o.ready.eq(1)        # a parked frame without payload
        with m.If(self.chunk.valid & self.chunk.ready):
            # (≥: a frame's chunks sum exactly to its paylen in a well-formed stream)
            with m.If(Mux(head.req, end_req, end_resp)):
                m.d.comb += fq.o.ready.eq(1)
                m.d.sync += need_ok.eq(0)
            with m.Else():
                m.d.sync += [need.eq(cur_need - self.chunk.payload.len), need_ok.eq(1)]
