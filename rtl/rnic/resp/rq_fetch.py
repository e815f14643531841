"""Receive Queue fetch: read one 64-byte receive WQE from host memory (interface.md §5.1).

One fetch at a time: a request ``{addr}`` becomes one :class:`~rnic.host.HostMemory` read of
64 bytes; the raw aligned beats are collected into a ``64 + W/8``-byte buffer and shifted by
``addr % (W/8)`` (any byte alignment of the ring base works), then one response leaves with the
WQE as :data:`wqe_layout` (little-endian: the layout's field order is the byte order) and
``err`` = some beat came back non-OKAY. Latency: the host read plus 2 cycles.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..host.axi_master import ReadClientSignature
from ..stream import check_width

__all__ = ["RqFetch", "sge_layout", "wqe_layout", "WQE_BYTES", "MAX_SGE"]

WQE_BYTES = 64
MAX_SGE = 3

#: One scatter/gather element, 16 bytes: addr (8), length (4), lkey (4).
sge_layout = data.StructLayout({"addr": 64, "length": 32, "lkey": 32})

#: A receive WQE exactly as it lies in host memory (bit 8·i = byte i).
wqe_layout = data.StructLayout({
    "wr_id": 64,
    "num_sge": 32,
    "rsvd": 32,
    "sge": data.ArrayLayout(sge_layout, MAX_SGE),
})

fetch_req_layout = data.StructLayout({"addr": 64})
fetch_resp_layout = data.StructLayout({"wqe": wqe_layout, "err": 1})


class RqFetch(wiring.Component):
    """Fetch one receive WQE.

    Parameters
    ----------
    width : int
        Host-memory data width W (64, 128, 256, 512).

    Attributes
    ----------
    req : In(stream.Signature({addr 64}))
        Bus address of the WQE (``rq_base + 64·(index mod 2^rq_log)``).
    resp : Out(stream.Signature({wqe: wqe_layout, err 1}))
        The WQE; ``err`` = the read got a non-OKAY response (``wqe`` is then meaningless).
    mem : Out(ReadClientSignature(width))
        A read client of :class:`rnic.host.HostMemory`.
    """

    def __init__(self, *, width):
        self.width = check_width(width)
        super().__init__({
            "req": In(stream.Signature(fetch_req_layout)),
            "resp": Out(stream.Signature(fetch_resp_layout)),
            "mem": Out(ReadClientSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        lb = B.bit_length() - 1
        nbuf = (WQE_BYTES + B + B - 1) // B          # beats the buffer can hold
        buf = Signal(nbuf * W)
        lane = Signal(lb if lb else 1)
        k = Signal(range(nbuf + 1))
        err = Signal()
        shifted = Signal(nbuf * W)
        m.d.comb += shifted.eq(buf >> (lane * 8))
        m.d.comb += [self.resp.payload.wqe.eq(shifted[:WQE_BYTES * 8]),
                     self.resp.payload.err.eq(err)]

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.req.ready.eq(1)
                with m.If(self.req.valid):
                    m.d.sync += [lane.eq(self.req.payload.addr[:lb]), k.eq(0), err.eq(0),
                                 self.mem.req.payload.addr.eq(self.req.payload.addr)]
                    m.next = "REQ"
            with m.State("REQ"):
                m.d.comb += [self.mem.req.valid.eq(1),
                             self.mem.req.payload.len_bytes.eq(WQE_BYTES),
                             self.mem.req.payload.tag.eq(0)]
                with m.If(self.mem.req.ready):
                    m.next = "DATA"
            with m.State("DATA"):
                r = self.mem.resp
                m.d.comb += r.ready.eq(1)
                with m.If(r.valid):
                    for i in range(nbuf):
                        with m.If(k == i):
                            m.d.sync += buf[i * W:(i + 1) * W].eq(r.payload.data)
                    m.d.sync += [k.eq(k + 1), err.eq(err | r.payload.err)]
                    with m.If(r.payload.last):
                        m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += self.resp.valid.eq(1)
                with m.If(self.resp.ready):
                    m.next = "IDLE"
        return m
