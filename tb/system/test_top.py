"""The `rnic` top through its contract ports (cocotb; Icarus, and Verilator for the build check)."""
import pytest

from sim.runner import Core, run_cocotb

# the responder scenarios' configurations, so each simulator build is made once and shared
from tb.system.test_responder import CONFIGS


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_top_smoke(cfg, simulator):
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_top", testcase="top_smoke", simulator=simulator,
               test_name=f"{cfg}-{simulator}", ports_only=True)
