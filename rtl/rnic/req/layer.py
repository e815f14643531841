"""The requester layer: the Requester, its context (ReqContext) and the READ placement
(ReadPlace), with the merge and the register between them (``docs/architecture.md``).

A composer only: it instantiates the three blocks and connects them; each port of the layer is
a port of one of its blocks, declared by that block (:data:`PORTS`) and passed through. What
the layer shares with the responder — the Key Cache, the Scatter Path, the host-memory master,
the TX side, the control plane — stays in :class:`rnic.top.RNIC`, which connects it here.

* The Requester reads and writes the QP's send state through ReqContext (``ctx_req``,
  ``ctx_resp``), which holds the shadow of the QP context written by SET_QP (``qp_set``,
  ``qp_arg``) and turns the Requester's completions into CQEs (``cqe``) and error reports
  (``qp_err``, event 4).
* The response frames PSN Check accepted for a requester QP (``hdr``) go to the READ
  placement, which asks the Requester's completer about each READ response (``read_dec``,
  ``read_rec``), writes the ones it places (``wr``) and passes the ACKs on to the Requester.
* A payload read that failed (the TX frame builder's ``tx_fault``) and a READ response's write
  that failed (the placement's) meet in one merge into ReqContext, which moves the QP to ERROR.
* The Requester's Key Cache lookups leave through a one-entry register (``lookup``).

Built without RDMA READ (``read`` False) the layer has no READ placement: the ACKNOWLEDGE
headers on ``hdr`` (the top passes no other response) go to the Requester as WIRE events through
a one-entry register, the payload-read faults straight to ReqContext, and the ports ``wr`` and
``rpl_drop`` do not exist.
"""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In

from ..ifaces import AckKind, ack_layout, resp_hdr_layout
from ..keys.key_cache import lookup_req_layout
from ..parts import pass_through
from ..stream import Queue, StreamMerge
from .read_place import ReadPlace
from .req_context import ReqContext
from .requester import Requester

__all__ = ["RequesterLayer", "PORTS"]

#: The layer's ports: ``(layer port, block, the block's port)``. A port keeps the flow and
#: the signature its block declares.
PORTS = (
    # SQ doorbells; SET_QP and QUERY_QP, from and to PSN Check
    ("sq_db", "req", "sq_db"), ("qp_set", "ctx", "qp_set"), ("qp_arg", "ctx", "qp_arg"),
    ("q_qpn", "ctx", "q_qpn"), ("q_psn", "ctx", "q_psn"), ("q_cons", "ctx", "q_cons"),
    # Key Cache port 1, send-WQE reads, packet descriptors and gather chunks to the TX side
    ("lookup", "req", "lookup"), ("wqe_rd", "req", "wqe_rd"), ("pkt", "req", "pkt"),
    ("chunk", "req", "chunk"), ("tx_fault", "ctx", "req_fault"),
    # response frames in; placed READ payload out (to the Scatter Path); READs not placed
    ("hdr", "rpl", "hdr"), ("wr", "rpl", "wr"), ("rpl_drop", "rpl", "drop"),
    # completions and error completions to the responder layer; events; timers; counters
    ("cqe", "ctx", "cqe"), ("qp_err", "ctx", "qp_err"), ("event", "ctx", "event"),
    ("us_tick", "req", "us_tick"), ("retx", "req", "retx"),
)

#: Layer ports the layer connects inside (the rest of PORTS passes through).
_INNER = {"lookup", "tx_fault"}


class RequesterLayer(wiring.Component):
    """The Requester, ReqContext and ReadPlace, connected.

    Parameters
    ----------
    width : int
        Data width W.
    num_qp : int
        QP table depth.
    read : bool
        RDMA READ (default True); False: no READ placement (see the module docstring).

    Attributes
    ----------
    The ports of :data:`PORTS`; ``requester``, ``req_context``, ``read_place``: the blocks.
    """

    def __init__(self, *, width, num_qp, read=True):
        self.read = read
        self.requester = Requester(width=width, num_qp=num_qp, read=read)
        self.req_context = ReqContext(num_qp=num_qp)
        self.read_place = ReadPlace(width=width, slots=self.requester.read_slots,
                                    num_qp=num_qp) if read else None
        members = {name: self._block(b).signature.members[port]
                   for name, b, port in PORTS if read or b != "rpl"}
        if not read:
            members["hdr"] = In(stream.Signature(resp_hdr_layout))
        super().__init__(members)

    def _block(self, key):
        return {"req": self.requester, "ctx": self.req_context, "rpl": self.read_place}[key]

    def elaborate(self, platform):
        m = Module()
        m.submodules.requester = req = self.requester
        m.submodules.req_context = rctx = self.req_context
        if self.read:
            m.submodules.read_place = rpl = self.read_place
        for name, b, port in PORTS:
            if name not in _INNER and (self.read or b != "rpl"):
                pass_through(m, self, name, self._block(b), port)

        # the Requester and its context
        wiring.connect(m, rctx.req_qp_set, req.qp_set)
        wiring.connect(m, req.ctx_req, rctx.ctx_req)
        wiring.connect(m, rctx.ctx_resp, req.ctx_resp)
        wiring.connect(m, req.cpl, rctx.cpl)
        wiring.connect(m, req.prog_psn, rctx.prog_psn)
        wiring.connect(m, req.prog_cons, rctx.prog_cons)
        if not self.read:
            self._lookup(m, req)
            self._no_read(m, req, rctx)
            return m
        # a payload read failed, or a READ response's write: the requester context moves the
        # QP to ERROR (event 4)
        m.submodules.req_fault_merge = rf_merge = StreamMerge(
            rctx.req_fault.payload.shape(), 2)
        wiring.connect(m, wiring.flipped(self.tx_fault), rf_merge.i[0])
        wiring.connect(m, rpl.fault, rf_merge.i[1])
        wiring.connect(m, rf_merge.o, rctx.req_fault)
        self._lookup(m, req)

        # the READ placement: ACKs on to the Requester, READ responses judged by its completer
        wiring.connect(m, rpl.ack, req.ack)
        wiring.connect(m, req.read_dec, rpl.dec)
        wiring.connect(m, req.read_rec, rpl.rec)
        # (any SET_QP of a QP ends ReadPlace's fast path for it)
        m.d.comb += [rpl.qp_set.valid.eq(req.qp_set.valid & req.qp_set.ready),
                     rpl.qp_set.payload.qpn.eq(req.qp_set.payload.qpn)]
        return m

    def _lookup(self, m, req):
        """The Requester's Key Cache lookups through the one-entry register ``lookup_reg``."""
        # the lookup requests through a one-entry register: the Key Cache's round-robin grant
        # (its ``ready``) must not run back into the requester's engine state across both
        # blocks. Its ``ready`` is its registered "empty": a transfer every other cycle at
        # most, which is all the requester asks (it waits for each lookup's response before
        # it makes the next request), at half a skid buffer's flip-flops.
        m.submodules.lookup_reg = lookup_reg = Queue(lookup_req_layout, 1, buffered=False,
                                                       registers=True)
        lookup = wiring.flipped(self.lookup)
        wiring.connect(m, req.lookup.req, lookup_reg.i)
        wiring.connect(m, lookup_reg.o, lookup.req)
        wiring.connect(m, lookup.resp, req.lookup.resp)

    def _no_read(self, m, req, rctx):
        """Without READ: the ACKNOWLEDGE headers to the Requester as WIRE events, through a
        one-entry register (as READ Place's ``ack`` is registered: the header's queue in PSN
        Check does not run on into the completer); the payload-read faults to ReqContext."""
        m.submodules.ack_reg = ack_reg = Queue(ack_layout, 1, buffered=False, registers=True)
        h = self.hdr.payload
        m.d.comb += [ack_reg.i.payload.qpn.eq(h.qpn), ack_reg.i.payload.psn.eq(h.psn),
                     ack_reg.i.payload.syndrome.eq(h.syndrome),
                     ack_reg.i.payload.kind.eq(AckKind.WIRE),
                     ack_reg.i.valid.eq(self.hdr.valid), self.hdr.ready.eq(ack_reg.i.ready),
                     req.read_dec.ready.eq(1)]      # (no DECIDE is ever asked)
        wiring.connect(m, ack_reg.o, req.ack)
        wiring.connect(m, wiring.flipped(self.tx_fault), rctx.req_fault)
