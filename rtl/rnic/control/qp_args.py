"""SET_QP's ARG words (interface.md §4.2) and the per-QP tables that keep their bits.

A QP's static fields are kept by the blocks that use them, each in a block-RAM table of its own,
and nowhere else:

* the receive engine's QP context (:class:`~rnic.resp.qp_context.QpContext`): path MTU,
  min_rnr_timer, PD, access flags, receive CQ, RQ ring, remote IPv4 (the source check);
* the requester's context (:class:`~rnic.req.req_context.ReqContext`): path MTU, timeout, PD,
  send CQ, SQ ring, retry counts;
* the TX frame builder's path table (:class:`~rnic.tx.build.TxBuild`): remote MAC and IPv4, UDP
  source port, destination QPN.

The QP context's command handler reads an accepted SET_QP's ARG0..15 a second time and sends
each word, in the cycle it reads it, on its ``qp_arg`` stream (:data:`qp_arg_layout`: QPN,
ARG number, the word). Each table keeps, per ARG, only the bits of its own fields, packed into
whole 9-bit lanes (the block RAM's byte enables, :class:`ArgRow`), and writes that ARG's lanes
as the word passes: no ARG is held in flip-flops and no row is copied from block to block. The
reset sweep after ``rst`` sends one write per QP with ``all`` set: every lane 0. All ARG writes
of a SET_QP come before its ``qp_set`` event.
"""

from amaranth.hdl import Mux, Signal, Value
from amaranth.lib import data

__all__ = ["ARG_BITS", "qp_arg_layout", "ArgRow"]

#: Where SET_QP's ARG bits go: (ARG, first bit, width, field, first bit in the field). The low
#: 6 bits of the ring bases are 0 in every row written (64-byte alignment is checked before
#: any write) and are not stored.
ARG_BITS = (
    (0, 8, 3, "pmtu", 0), (0, 16, 5, "min_rnr", 0), (0, 24, 5, "timeout", 0),
    (1, 0, 24, "dest_qpn", 0),
    (4, 0, 16, "pd", 0), (4, 16, 8, "access", 0),
    (5, 0, 16, "rcqn", 0), (5, 16, 16, "scqn", 0),
    (6, 6, 26, "rq_base", 6), (7, 0, 32, "rq_base", 32),
    (8, 0, 5, "rq_log", 0), (8, 8, 5, "sq_log", 0), (8, 16, 3, "retry_cnt", 0),
    (8, 20, 3, "rnr_retry", 0),
    (9, 6, 26, "sq_base", 6), (10, 0, 32, "sq_base", 32),
    (11, 0, 32, "rmac", 0), (12, 0, 16, "rmac", 32),      # rmac[47:40]: the first wire byte
    (13, 0, 32, "rip", 0),                                  # rip[31:24]: the first octet
    (14, 0, 16, "sport", 0),
    (15, 0, 4, "ord", 0), (15, 4, 4, "ird", 0),           # version 2: READs (0 means 1)
)

#: One write of SET_QP's ARG ``arg`` (``data``) for QP ``qpn``; ``all``: the reset sweep (every
#: lane of the QP's row 0, ``arg`` and ``data`` ignored).
qp_arg_layout = data.StructLayout({"qpn": 24, "arg": 4, "data": 32, "all": 1})


class ArgRow:
    """The row of a table that keeps ``fields`` (names in :data:`ARG_BITS`), in 9-bit lanes.

    ``lanes`` lanes (``width`` bits); ``layout`` has the fields at their full widths (the
    unstored low bits of a ring base read as 0).
    """

    LANE = 9

    def __init__(self, fields):
        fields = tuple(fields)
        unknown = [f for f in fields if f not in {b[3] for b in ARG_BITS}]
        if unknown:
            raise ValueError(f"not SET_QP fields: {unknown}")
        self.plan = {}                  # arg -> (first lane, lanes, [(lo, w, field, flo, pos)])
        lane = 0
        widths = {}
        for arg in sorted({b[0] for b in ARG_BITS if b[3] in fields}):
            bits, pos = [], lane * self.LANE
            for a, lo, w, field, flo in ARG_BITS:
                if a == arg and field in fields:
                    bits.append((lo, w, field, flo, pos))
                    widths[field] = max(widths.get(field, 0), flo + w)
                    pos += w
            n = -(-(pos - lane * self.LANE) // self.LANE)
            self.plan[arg] = (lane, n, bits)
            lane += n
        self.lanes = lane
        self.width = self.lanes * self.LANE
        self.layout = data.StructLayout({f: widths[f] for f in fields})

    def write(self, m, wp, arg, valid):
        """Drive ``wp`` (a write port with ``granularity`` 9, ``width`` bits) from a
        :data:`qp_arg_layout` value ``arg`` with ``valid``: the ARG's lanes, or every lane with
        ``all``."""
        d = Signal(32, name="arg_wdata")
        m.d.comb += [d.eq(Mux(arg.all, 0, arg.data)), wp.addr.eq(arg.qpn)]
        for a, (lane, n, bits) in self.plan.items():
            for lo, w, field, flo, pos in bits:
                m.d.comb += wp.data[pos:pos + w].eq(d[lo:lo + w])
            for k in range(lane, lane + n):
                m.d.comb += wp.en[k].eq(valid & (arg.all | (arg.arg == a)))

    def decode(self, m, row, name="row_fields"):
        """The fields of ``row`` (``width`` bits) as a :attr:`layout` signal."""
        out = Signal(self.layout, name=name)
        for a, (lane, n, bits) in self.plan.items():
            for lo, w, field, flo, pos in bits:
                m.d.comb += Value.cast(out[field])[flo:flo + w].eq(row[pos:pos + w])
        return out
