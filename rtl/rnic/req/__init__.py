"""The requester (send side): Send Queue doorbells, WQE fetch, Gather Path (packet descriptors
and gather chunks for the TX frame builder, ``rnic.tx.build``), the requester context, and the
Reliability Engine (retirement by ACK, retransmit and RNR timers, go-back-N, remote NAKs;
``docs/requester.md``)."""
from .requester import Requester, ack_layout, cpl_layout, qp_set_layout, req_ctx_layout
from ..tx.build import chunk_layout, pkt_layout

__all__ = ["Requester", "req_ctx_layout", "qp_set_layout", "ack_layout", "cpl_layout",
           "pkt_layout", "chunk_layout"]
