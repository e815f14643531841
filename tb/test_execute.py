"""Execute stage (rnic.resp.execute.Execute) with HostMemory, KeyCache and CqeGen around it,
against the hostile AxiRam of sim/hostmem.py and a Python model of placement and completion."""
import pytest
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from rnic.host.axi_master import AxiSignature, HostMemory
from rnic.host.cqe_gen import CqeGen
from rnic.ifaces import CommandSignature, event_layout
from rnic.keys.key_cache import KeyCache
from rnic.resp.execute import Execute, flush_layout
from rnic.resp.psn_check import done_layout, exe_layout
from rnic.resp.scatter import ScatterPath
from rnic.stream import BeatStream
from sim.runner import run_cocotb
from sim.wrap import flat_top
from tb.test_axi_master import flat_top_axi

NUM_QP = 8


class ExecuteBench(wiring.Component):
    """Execute + HostMemory (1 read, 2 write clients) + KeyCache (1 port) + CqeGen (4 CQs)."""

    def __init__(self, width, prefetch=4):
        self.width = width
        self.prefetch = prefetch
        super().__init__({
            "exe": In(stream.Signature(exe_layout)),
            "pay": In(BeatStream(width)),
            "done": Out(stream.Signature(done_layout)),
            "qp_reset": In(stream.Signature(data.StructLayout({"qpn": 24}))),
            "flush": In(stream.Signature(flush_layout)),
            "rq_post": In(stream.Signature(flush_layout)),
            "key_cmd": Out(CommandSignature()),
            "cq_cmd": Out(CommandSignature()),
            "event": Out(stream.Signature(event_layout)),
            "fault": Out(stream.Signature(data.StructLayout({"qpn": 24}))),
            "cq_event": Out(stream.Signature(event_layout)),
            "cq_sweeping": Out(1),
            "axi": Out(AxiSignature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        m.submodules.ex = ex = Execute(width=W, num_qp=NUM_QP, prefetch=self.prefetch)
        m.submodules.hm = hm = HostMemory(width=W, read_clients=1, write_clients=2,
                                          max_reads=2, max_writes=4, read_buffer=16,
                                          done_depth=4)
        m.submodules.kc = kc = KeyCache(16, 1)
        m.submodules.cq = cq = CqeGen(width=W, num_cq=4)
        connect(m, wiring.flipped(self.exe), ex.exe)
        connect(m, wiring.flipped(self.pay), ex.pay)
        connect(m, ex.done, wiring.flipped(self.done))
        connect(m, wiring.flipped(self.qp_reset), ex.qp_reset)
        connect(m, wiring.flipped(self.flush), ex.flush)
        m.d.comb += [ex.rq_post.valid.eq(self.rq_post.valid),
                     ex.rq_post.payload.eq(self.rq_post.payload), self.rq_post.ready.eq(1)]
        connect(m, ex.rd, hm.read_0)
        connect(m, ex.wr, hm.write_0)
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


def _run(width, testcase, label, seed=11, prefetch=4, env=None):
    run_cocotb("execute", lambda: flat_top_axi(ExecuteBench(width, prefetch)),
               params={"width": width, "num_qp": NUM_QP, "prefetch": prefetch},
               test_module="tb.cocotb_execute", testcase=testcase,
               extra_env={"EX_WIDTH": str(width), "EX_SEED": str(seed),
                          "EX_PREFETCH": str(prefetch), **(env or {})},
               test_name=f"w{width}-p{prefetch}-{label}-s{seed}")


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_execute_messages(width):
    _run(width, ["messages"], "messages")


@pytest.mark.parametrize("prefetch", [1, pytest.param(0, marks=pytest.mark.full)])
def test_execute_messages_pool(prefetch):
    """One pool slot for four QPs (every prefetch evicts another QP's), and no prefetch."""
    _run(64, ["messages", "errors"], "messages", prefetch=prefetch)


@pytest.mark.full
@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("seed", [21, 22, 23, 24])
def test_execute_messages_seeds(width, seed):
    _run(width, ["messages"], "messages", seed)


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_execute_errors(width):
    _run(width, ["errors"], "errors")


@pytest.mark.parametrize("width", [64, 512])
def test_execute_prefetch(width):
    _run(width, ["prefetch"], "prefetch")


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("rdlat", [pytest.param(0, marks=pytest.mark.full), 100])
def test_execute_bench(width, rdlat):
    _run(width, ["bench"], f"bench-rd{rdlat}", env={"EX_RDLAT": str(rdlat)})


@pytest.mark.parametrize("width", [64, 512])
def test_scatter(width):
    run_cocotb("scatter", lambda: flat_top(ScatterPath(width=width)), params={"width": width},
               test_module="tb.cocotb_execute", testcase=["scatter"],
               extra_env={"EX_WIDTH": str(width), "EX_TOP": "scatter"}, test_name=f"w{width}")


def test_parameters_refused():
    with pytest.raises(ValueError):
        Execute(width=48)
    with pytest.raises(ValueError):
        Execute(width=64, num_qp=6)
    for depth in (0, 3):
        with pytest.raises(ValueError):
            Execute(width=64, prefetch_depth=depth)
