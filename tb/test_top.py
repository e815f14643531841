"""The `rnic` top through its contract ports (cocotb; Icarus, and Verilator for the build check)."""
import pytest

from rnic.params import RnicConfig
from rnic.top import RNIC
from sim.runner import run_cocotb

CONFIGS = {"w64": RnicConfig(), "w512": RnicConfig(data_width=512)}


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_top_smoke(cfg, simulator):
    c = CONFIGS[cfg]
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_top", testcase="top_smoke", simulator=simulator,
               test_name=f"{cfg}-{simulator}")
