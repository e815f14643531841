"""CQE Generation (rnic.host.CqeGen) through HostMemory into sim/hostmem.py's hostile AxiRam."""
import gc
import warnings

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from rnic.host import AxiSignature, CqeGen, HostMemory
from sim.runner import run_cocotb
from sim.bench_tops import flat_top_axi

NUM_CQ = 4


class CqeTop(wiring.Component):
    """CqeGen with its write client on a HostMemory; every CqeGen port but ``mem`` exposed."""

    def __init__(self, width, num_cq):
        self.cqe = CqeGen(width=width, num_cq=num_cq, max_inflight=4)
        self.hm = HostMemory(width=width, read_clients=0, write_clients=1, max_writes=4)
        members = {k: v for k, v in self.cqe.signature.members.items() if k != "mem"}
        members["axi"] = Out(AxiSignature(width))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.cqe = self.cqe
        m.submodules.hm = self.hm
        wiring.connect(m, self.cqe.mem, self.hm.write_0)
        wiring.connect(m, wiring.flipped(self.axi), self.hm.axi)
        for name in ("cmd", "cq_db", "cq_arm", "reserve", "reserve_resp", "complete", "event",
                     "fault"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(self.cqe, name))
        m.d.comb += [self.stat.eq(self.cqe.stat), self.sweeping.eq(self.cqe.sweeping)]
        return m


@pytest.mark.parametrize("width", [64, 512, pytest.param(128, marks=pytest.mark.full),
                                   pytest.param(256, marks=pytest.mark.full)])
def test_cqe_gen(width):
    run_cocotb("cqe_gen", lambda: flat_top_axi(CqeTop(width, NUM_CQ)),
               params={"width": width, "num_cq": NUM_CQ}, test_module="tb.blocks.cocotb_cqe_gen",
               extra_env={"CQE_GEN_WIDTH": str(width), "CQE_GEN_NUM_CQ": str(NUM_CQ)},
               test_name=f"w{width}")


def test_parameters_refused():
    # refused components are garbage: silence amaranth's "created but never used" on collection
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError):
            CqeGen(width=64, num_cq=3)
        with pytest.raises(ValueError):
            CqeGen(width=32, num_cq=4)
        gc.collect()
