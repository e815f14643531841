"""READ Place (rnic.req.read_place) with host memory (cocotb on Icarus, the generated Verilog,
W=64 and W=512).

The bench (``tb/blocks/cocotb_read_place.py``) plays PSN Check (response headers on ``hdr``, payload
beats on ``pay``), the requester's engine (slot writes on ``rec``) and the completer (answers to
DECIDE on ``dec``), writes through the hostile host memory of sim/hostmem.py, and checks the
events on ``ack``, ``fault`` and ``drop`` and host memory byte for byte against a Python model.
"""
import gc
import warnings

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rnic.host import HostMemory
from rnic.host.axi_master import AxiSignature
from rnic.ifaces import (QpnStream, ack_layout, qpn_layout, read_dec_layout, read_rec_layout,
                         resp_hdr_layout)
from rnic.req.read_place import ReadPlace
from rnic.resp.scatter import SharedScatter
from rnic.stream import BeatStream
from sim.bench_tops import flat_top_axi
from sim.runner import run_cocotb


class ReadPlaceHarness(wiring.Component):
    """ReadPlace + HostMemory (one write client, ReadPlace's ``wr``)."""

    def __init__(self, width):
        self.width = width
        super().__init__({
            "axi": Out(AxiSignature(width)),
            "hdr": In(stream.Signature(resp_hdr_layout)),
            "pay": In(BeatStream(width)),
            "rec": In(stream.Signature(read_rec_layout, always_ready=True)),
            "ack": Out(stream.Signature(ack_layout)),
            "dec": In(stream.Signature(read_dec_layout)),
            "fault": Out(QpnStream()),
            "qp_set": In(stream.Signature(qpn_layout, always_ready=True)),
            "drop": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rp = rp = ReadPlace(width=self.width, num_qp=256)
        m.submodules.hm = hm = HostMemory(width=self.width, read_clients=0, write_clients=1,
                                          max_writes=4)
        # (the shared Scatter Path with READ placement as client 1, as at the top)
        m.submodules.sc = sc = SharedScatter(width=self.width)
        wiring.connect(m, wiring.flipped(self.axi), hm.axi)
        wiring.connect(m, wiring.flipped(self.pay), sc.pay1)
        wiring.connect(m, rp.wr, sc.client1)
        wiring.connect(m, sc.wr, hm.write_0)
        for name in ("hdr", "rec", "dec", "qp_set"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(rp, name))
        for name in ("ack", "fault"):
            wiring.connect(m, getattr(rp, name), wiring.flipped(getattr(self, name)))
        m.d.comb += self.drop.eq(rp.drop)
        return m


TESTS = ["place_all", "place_drops", "place_cache", "place_fault", "place_links", "place_rate",
         "place_stale", "place_held", "place_pmtu"]


@pytest.mark.parametrize("width", [64, 512])
def test_read_place(width):
    """Every case of tb/blocks/cocotb_read_place.py (one simulator run per width): placement of
    READs of many lengths, PMTU 256 and 4096 (and every PMTU), odd addresses, two SGEs, zero length, ACKs between
    responses; drops; cache invalidation; links; write faults; the placement rate; the stale
    mark; two pieces per response under host memory back-pressure."""
    run_cocotb("read_place", lambda: flat_top_axi(ReadPlaceHarness(width)),
               params={"width": width}, test_module="tb.blocks.cocotb_read_place", testcase=TESTS,
               extra_env={"READ_PLACE_WIDTH": str(width)}, test_name=f"w{width}")


def test_params():
    for w in (64, 128, 256, 512):
        for r in (2, 16, 64):
            rp = ReadPlace(width=w, slots=r)
            assert set(rp.signature.members) == {"hdr", "rec", "ack", "dec", "wr",
                                                 "fault", "qp_set", "drop"}
    Fragment.get(ReadPlace(width=64), None)
    Fragment.get(ReadPlace(width=64, num_qp=256), None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # the refused instances are never elaborated
        for kw in (dict(width=32), dict(width=64, slots=3), dict(width=64, slots=1),
                   dict(width=64, slots=128), dict(width=64, slots=16.0),
                   dict(width=64, num_qp=6), dict(width=64, num_qp=1 << 25)):
            with pytest.raises(ValueError):
                ReadPlace(**kw)
        gc.collect()
