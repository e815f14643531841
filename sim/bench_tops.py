"""Bench tops: a block with the neighbours its bench needs, as one Component to simulate.

Used by the block tests in ``tb/blocks/`` and by ``rnic bench`` (:mod:`sim.benches`) alike, so the
benchmarks run exactly the tops the tests check.
"""
from amaranth.hdl import Module
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from rnic.control.qp_args import qp_arg_layout
from rnic.host.axi_master import AxiSignature, HostMemory
from rnic.host.cqe_gen import CqeGen
from rnic.ifaces import (NUM_COUNTERS, CommandSignature, QpnStream, event_layout,
                         rx_meta_layout)
from rnic.keys.key_cache import KeyCache
from rnic.resp.execute import Execute, flush_layout
from rnic.resp.psn_check import (PsnCheck, ack_out_layout, done_layout, exe_layout,
                                  rq_db_layout, rq_flush_layout)
from rnic.resp.qp_context import qp_set_event_layout
from rnic.resp.scatter import SharedScatter
from rnic.stream import BeatStream
from rnic.tx.arbiter import TxArbiter
from rnic.tx.build import TxBuild, pkt_layout, tx_hdr_layout

from .wrap import flat_top

__all__ = ["PsnBench", "ExecuteBench", "flat_top_axi"]


def flat_top_axi(component, member="axi", prefix="m_axi"):
    """:func:`sim.wrap.flat_top`, with the AXI member ``<member>__aw_id`` renamed
    ``<prefix>_awid`` (the names cocotbext-axi's ``AxiBus.from_prefix`` looks for)."""
    m, ports = flat_top(component)
    for s in ports:
        if s.name.startswith(member + "__"):
            s.name = prefix + "_" + s.name[len(member) + 2:].replace("_", "")
    return m, ports


class PsnBench(wiring.Component):
    """PsnCheck + TxArbiter + TxBuild + a stub of the later stages (exe → done).

    ``tx1`` feeds request descriptors to the arbiter's other input (payload-free frames: the
    builder's host read client is tied off)."""

    #: bumped when the bench changes: the simulation cache key covers rtl/ only
    REV = 6

    def __init__(self, width, num_qp=16):
        self.width = width
        self.num_qp = num_qp
        super().__init__({
            "meta": In(stream.Signature(rx_meta_layout)),
            "payload": In(BeatStream(width)),
            "rq_db": In(stream.Signature(rq_db_layout)),
            "cmd": Out(CommandSignature()),
            "local_mac": In(48),
            "local_ip": In(32),
            "pay_out": Out(BeatStream(width)),
            "rr_pay": Out(BeatStream(width)),
            "ack_out": Out(stream.Signature(ack_out_layout)),
            "rq_flush": Out(stream.Signature(rq_flush_layout)),
            "event": Out(stream.Signature(event_layout)),
            "qp_reset": Out(QpnStream()),
            "qp_set": Out(stream.Signature(qp_set_event_layout, always_ready=True)),
            "qp_arg": Out(stream.Signature(qp_arg_layout, always_ready=True)),
            "fault": In(QpnStream()),
            "tx": Out(BeatStream(width)),
            "tx1": In(stream.Signature(pkt_layout)),
            "stat": Out(NUM_COUNTERS),
            "exe_mon_valid": Out(1),
            "exe_mon": Out(exe_layout),
            "fail_en": In(1),
            "fail_qpn": In(24),
            "fail_psn": In(24),
            "fail_syn": In(8),
            "exe_hold": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.psn = psn = PsnCheck(width=self.width, num_qp=self.num_qp)
        m.submodules.arb = arb = TxArbiter()
        m.submodules.build = build = TxBuild(self.width, num_qp=self.num_qp)
        m.d.comb += [build.qp_arg.valid.eq(psn.qp_arg.valid),
                     build.qp_arg.payload.eq(psn.qp_arg.payload),
                     self.qp_arg.valid.eq(psn.qp_arg.valid),
                     self.qp_arg.payload.eq(psn.qp_arg.payload)]
        for name in ("meta", "payload", "rq_db", "cmd", "fault"):
            connect(m, wiring.flipped(getattr(self, name)), getattr(psn, name))
        for name in ("pay_out", "rr_pay", "ack_out", "rq_flush", "event", "qp_reset", "qp_set"):
            connect(m, getattr(psn, name), wiring.flipped(getattr(self, name)))
        at, ar = psn.ack_tx, arb.resp
        m.d.comb += [ar.valid.eq(at.valid), at.ready.eq(ar.ready)]
        m.d.comb += [getattr(ar.payload, f).eq(getattr(at.payload, f)) for f, _ in tx_hdr_layout]
        connect(m, wiring.flipped(self.tx1), arb.req)
        connect(m, arb.o, build.pkt)
        connect(m, arb.chunk, build.chunk)
        connect(m, build.tx, wiring.flipped(self.tx))
        m.d.comb += [arb.resp_chunk.valid.eq(0), arb.req_chunk.valid.eq(0),
                     build.rd.req.ready.eq(0),
                     build.rd.resp.valid.eq(0), build.fault.ready.eq(1)]
        # the requester's send PSN as QUERY_QP sees it: loaded as the requester loads it, from
        # the qp_set events that move a QP to RTS (the SET_QP's send PSN) or RESET (0)
        sqm = memory.Memory(shape=24, depth=self.num_qp, init=[])
        m.submodules.sqm = sqm
        sw, sr = sqm.write_port(), sqm.read_port()
        ev = psn.qp_set.payload
        m.d.comb += [sw.addr.eq(ev.qpn), sw.data.eq(ev.sq_psn),
                     sw.en.eq(psn.qp_set.valid & ((ev.state == 3) | (ev.state == 0))),
                     sr.addr.eq(psn.q_qpn),
                     psn.q_psn.eq(sr.data), psn.q_cons.eq(0)]
        e = psn.exe
        m.d.comb += [
            build.local_mac.eq(self.local_mac), build.local_ip.eq(self.local_ip),
            self.stat.eq(psn.stat | build.stat),
            # the stub: one done per exe, at once (unless held)
            psn.done.valid.eq(e.valid & ~self.exe_hold),
            e.ready.eq(psn.done.ready & ~self.exe_hold),
            psn.done.payload.fatal.eq(self.fail_en & (e.payload.psn == self.fail_psn)
                                      & (e.payload.qpn == self.fail_qpn)),
            psn.done.payload.syndrome.eq(self.fail_syn),
            self.exe_mon_valid.eq(e.valid & e.ready),
            self.exe_mon.eq(e.payload),
        ]
        return m


class ExecuteBench(wiring.Component):
    """Execute + HostMemory (1 read, 2 write clients) + KeyCache (1 port) + CqeGen (4 CQs)."""

    def __init__(self, width, prefetch=4, num_qp=8):
        self.num_qp = num_qp
        self.width = width
        self.prefetch = prefetch
        super().__init__({
            "exe": In(stream.Signature(exe_layout)),
            "pay": In(BeatStream(width)),
            "done": Out(stream.Signature(done_layout)),
            "qp_reset": In(QpnStream()),
            "flush": In(stream.Signature(flush_layout)),
            "rq_post": In(stream.Signature(flush_layout)),
            "key_cmd": Out(CommandSignature()),
            "cq_cmd": Out(CommandSignature()),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(QpnStream()),
            "cq_event": Out(stream.Signature(event_layout)),
            "cq_sweeping": Out(1),
            "axi": Out(AxiSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.ex = ex = Execute(width=W, num_qp=self.num_qp, prefetch=self.prefetch)
        m.submodules.hm = hm = HostMemory(width=W, read_clients=1, write_clients=2,
                                          max_reads=2, max_writes=4, read_buffer=16,
                                          done_depth=4)
        m.submodules.kc = kc = KeyCache(16, 1)
        m.submodules.cq = cq = CqeGen(width=W, num_cq=4)
        connect(m, wiring.flipped(self.exe), ex.exe)
        # (the shared Scatter Path with client 0 only: the top's READ placement is client 1)
        m.submodules.sc = sc = SharedScatter(width=W)
        connect(m, wiring.flipped(self.pay), sc.pay0)
        connect(m, ex.wr, sc.client0)
        connect(m, ex.done, wiring.flipped(self.done))
        connect(m, wiring.flipped(self.qp_reset), ex.qp_reset)
        connect(m, wiring.flipped(self.flush), ex.flush)
        m.d.comb += [ex.rq_post.valid.eq(self.rq_post.valid),
                     ex.rq_post.payload.eq(self.rq_post.payload), self.rq_post.ready.eq(1)]
        connect(m, ex.rd, hm.read_0)
        connect(m, sc.wr, hm.write_0)
        connect(m, cq.mem, hm.write_1)
        connect(m, kc.lookup0, ex.lookup)
        connect(m, kc.inval, ex.inval)
        connect(m, ex.reserve, cq.reserve)
        connect(m, cq.reserve_resp, ex.reserve_resp)
        connect(m, ex.complete, cq.complete)
        connect(m, wiring.flipped(self.key_cmd), kc.cmd)
        connect(m, wiring.flipped(self.cq_cmd), cq.cmd)
        connect(m, ex.event, wiring.flipped(self.event))
        connect(m, ex.fault, wiring.flipped(self.fault))
        connect(m, cq.event, wiring.flipped(self.cq_event))
        m.d.comb += [self.cq_sweeping.eq(cq.sweeping), cq.fault.ready.eq(1)]
        connect(m, hm.axi, wiring.flipped(self.axi))
        return m
