"""The `rnic` top through its contract ports (cocotb; Icarus, and Verilator for the build check)."""
import pytest

from sim.runner import Core, run_cocotb

# the responder scenarios' configurations, so each simulator build is made once and shared
from tb.system.test_responder import CONFIGS


def _cases():
    """Both widths on Icarus, W=64 on Verilator (the model the responder's random traffic
    shares); W=512 on Verilator under make regress-full."""
    for cfg in CONFIGS:
        for sim in ("icarus", "verilator"):
            marks = [pytest.mark.full] if (cfg, sim) == ("w512", "verilator") else []
            yield pytest.param(cfg, sim, marks=marks, id=f"{sim}-{cfg}")


@pytest.mark.parametrize("cfg, simulator", list(_cases()))
def test_top_smoke(cfg, simulator):
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_top", testcase="top_smoke", simulator=simulator,
               test_name=f"{cfg}-{simulator}", ports_only=True)
