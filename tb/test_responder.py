"""The responder end to end at the `rnic` top: the book's walk-throughs (cocotb)."""
import pytest

from rnic.params import RnicConfig
from rnic.top import RNIC
from sim.runner import run_cocotb

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
TESTS = ["send_9_steps", "send_with_immediate", "send_with_invalidate_then_stale_write",
         "rnr_then_success"]


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_responder_scenarios(cfg):
    c = CONFIGS[cfg]
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_responder", testcase=TESTS, test_name=f"resp-{cfg}")
