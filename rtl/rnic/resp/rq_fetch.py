"""Receive Queue fetch: read 64-byte receive WQEs from host memory (interface.md §5.1).

Each request ``{addr, tag}`` becomes one :class:`~rnic.host.HostMemory` read of 64 bytes; up to
``depth`` reads are outstanding at once (one read client, one ARID: the data comes back in
request order). A WQE is 64-byte aligned (every ring base is, interface.md §4.2: SET_QP refuses
another), so it fills whole beats at every W, at fixed lanes: RqFetch keeps no copy of it. Each
beat leaves on ``beat`` {data, index, tag} as it arrives (``index`` = its place in the WQE,
bytes ``index·W/8`` on; the caller writes it into the RAM that keeps the WQE, in the layout
:data:`wqe_layout`: the layout's field order is the byte order), and after the last beat
``resp`` {tag, err} says the WQE is complete (``err`` = some beat came back non-OKAY). Responses
leave in request order, from registers, one cycle after the WQE's last beat; the next read's
beats wait while a response waits. A WQE every ``ceil(64/(W/8))`` cycles at most while the
responses are taken at once.
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
           "fetch_req_layout", "fetch_resp_layout", "fetch_beat_layout"]

fetch_req_layout = data.StructLayout({"addr": 64, "tag": 8})
fetch_resp_layout = data.StructLayout({"err": 1, "tag": 8})


def fetch_beat_layout(width):
    """One beat of a WQE: ``data`` = bytes ``index·width/8`` on of the WQE, the request's tag."""
    return data.StructLayout({"data": width, "index": 3, "tag": 8})


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
    beat : Out(stream.Signature({data W, index 3, tag 8}, always_ready=True))
        The WQE's beats as they arrive (the caller takes every one): ``data`` is bytes
        ``index·W/8`` to ``(index+1)·W/8 − 1`` of the WQE of the request tagged ``tag``.
    resp : Out(stream.Signature({err 1, tag 8}))
        The WQE of the request tagged ``tag`` has been delivered on ``beat`` (in the cycles
        before); ``err`` = the read got a non-OKAY response (the beats are then meaningless).
    mem : Out(ReadClientSignature(width))
        A read client of :class:`rnic.host.HostMemory`.
    """

    def __init__(self, *, width, depth=4):
        self.width = check_width(width)
        self.depth = depth
        super().__init__({
            "req": In(stream.Signature(fetch_req_layout)),
            "beat": Out(stream.Signature(fetch_beat_layout(self.width), always_ready=True)),
            "resp": Out(stream.Signature(fetch_resp_layout)),
            "mem": Out(ReadClientSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
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

        # response side: pass the oldest read's beats on with their index; on its last beat the
        # WQE is complete (the in-flight entry is popped) and its {tag, err} is the response
        # until taken (the next read's beats wait meanwhile)
        k = Signal(3)
        err = Signal()
        full = Signal()
        f_tag = Signal(8)
        f_err = Signal()
        m.d.comb += [self.resp.valid.eq(full), self.resp.payload.err.eq(f_err),
                     self.resp.payload.tag.eq(f_tag)]
        r = self.mem.resp
        m.d.comb += [r.ready.eq(~full), self.beat.valid.eq(r.valid & ~full),
                     self.beat.payload.data.eq(r.payload.data), self.beat.payload.index.eq(k),
                     self.beat.payload.tag.eq(inflight.o.payload.tag)]
        with m.If(r.valid & ~full):
            m.d.sync += [k.eq(k + 1), err.eq(err | r.payload.err)]
            with m.If(r.payload.last):
                m.d.comb += inflight.o.ready.eq(1)
                m.d.sync += [full.eq(1), k.eq(0), err.eq(0), f_err.eq(err | r.payload.err),
                             f_tag.eq(inflight.o.payload.tag)]
        with m.If(self.resp.ready):
            m.d.sync += full.eq(0)
        return m
