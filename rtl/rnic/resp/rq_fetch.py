"""Receive Queue fetch: read 64-byte receive WQEs from host memory (interface.md §5.1).

Each request ``{addr, tag}`` becomes one :class:`~rnic.host.HostMemory` read of 64 bytes; up to
``depth`` reads are outstanding at once (one read client, one ARID: the data comes back in
request order). A WQE is 64-byte aligned (every ring base is, interface.md §4.2: SET_QP refuses
another), so it fills whole beats at every W: the beats of the oldest read are collected into a
64-byte buffer, with no byte shift, and the response is that buffer: the WQE as
:data:`wqe_layout` (little-endian: the layout's field order is the byte order), the request's
``tag`` and ``err`` = some beat came back non-OKAY. Responses leave in request order, from
registers. Latency: one cycle in the request queue, the host read, then 1 cycle; a WQE every
``ceil(64/(W/8))`` cycles at most while the responses are taken at once (the next read's beats
wait while a response waits).
"""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect

# the receive WQE exactly as it lies in host memory (bit 8·i = byte i) and its scatter/gather
# element: the layouts of the host-memory format table (interface.md §5.1)
from ..formats import RECV_MAX_SGE as MAX_SGE, RECV_WQE_BYTES as WQE_BYTES
from ..formats import RecvWqe as wqe_layout, Sge as sge_layout
from ..host.axi_master import ReadClientSignature
from ..stream import Queue, check_width

__all__ = ["RqFetch", "sge_layout", "wqe_layout", "WQE_BYTES", "MAX_SGE",
           "fetch_req_layout", "fetch_resp_layout"]

fetch_req_layout = data.StructLayout({"addr": 64, "tag": 8})
fetch_resp_layout = data.StructLayout({"wqe": wqe_layout, "err": 1, "tag": 8})


class RqFetch(wiring.Component):
    """Fetch receive WQEs, several in flight, answered in request order.

    Parameters
    ----------
    width : int
        Host-memory data width W (64, 128, 256, 512).
    depth : int
        Reads outstanding at most (requests accepted whose response has not left).

    Attributes
    ----------
    req : In(stream.Signature({addr 64, tag 8}))
        Bus address of the WQE (``rq_base + 64·(index mod 2^rq_log)``, 64-byte aligned: its low
        6 bits are not used) and the caller's tag.
    resp : Out(stream.Signature({wqe: wqe_layout, err 1, tag 8}))
        The WQE and the request's tag; ``err`` = the read got a non-OKAY response (``wqe`` is
        then meaningless).
    mem : Out(ReadClientSignature(width))
        A read client of :class:`rnic.host.HostMemory`.
    """

    def __init__(self, *, width, depth=4):
        self.width = check_width(width)
        self.depth = depth
        super().__init__({
            "req": In(stream.Signature(fetch_req_layout)),
            "resp": Out(stream.Signature(fetch_resp_layout)),
            "mem": Out(ReadClientSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        nbuf = WQE_BYTES // B                       # beats of one WQE (W ≤ 512: whole beats)
        fl_layout = data.StructLayout({"tag": 8})

        # request side: a registered queue, then one read per request while room in flight
        m.submodules.req_q = req_q = Queue(fetch_req_layout, 2)
        connect(m, wiring.flipped(self.req), req_q.i)
        m.submodules.inflight = inflight = Queue(fl_layout, self.depth, buffered=False)
        rq = req_q.o
        mr = self.mem.req
        m.d.comb += [
            mr.valid.eq(rq.valid & inflight.i.ready),
            mr.payload.addr.eq(Cat(Const(0, 6), rq.payload.addr[6:])),
            mr.payload.len_bytes.eq(WQE_BYTES),
            mr.payload.tag.eq(rq.payload.tag),
            rq.ready.eq(mr.ready & inflight.i.ready),
            inflight.i.valid.eq(rq.valid & mr.ready),
            inflight.i.payload.tag.eq(rq.payload.tag),
        ]

        # response side: collect the oldest read's beats; on its last beat the buffer and its
        # tag are complete (the in-flight entry is popped) and are the response until taken
        buf = Signal(nbuf * W)
        k = Signal(range(nbuf + 1))
        err = Signal()
        full = Signal()
        f_tag = Signal(8)
        f_err = Signal()
        m.d.comb += [self.resp.valid.eq(full), self.resp.payload.wqe.eq(buf),
                     self.resp.payload.err.eq(f_err), self.resp.payload.tag.eq(f_tag)]
        r = self.mem.resp
        m.d.comb += r.ready.eq(~full)
        with m.If(r.valid & ~full):
            for i in range(nbuf):
                with m.If(k == i):
                    m.d.sync += buf[i * W:(i + 1) * W].eq(r.payload.data)
            m.d.sync += [k.eq(k + 1), err.eq(err | r.payload.err)]
            with m.If(r.payload.last):
                m.d.comb += inflight.o.ready.eq(1)
                m.d.sync += [full.eq(1), k.eq(0), err.eq(0), f_err.eq(err | r.payload.err),
                             f_tag.eq(inflight.o.payload.tag)]
        with m.If(self.resp.ready):
            m.d.sync += full.eq(0)
        return m
