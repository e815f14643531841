"""The responder end to end at the `rnic` top: the book's walk-throughs (cocotb)."""
import pytest

from rnic.params import RnicConfig
from rnic.top import RNIC
from sim.runner import run_cocotb

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
TESTS = ["send_9_steps", "send_with_immediate", "send_with_invalidate_then_stale_write",
         "rnr_then_success", "s2_multi_packet_send", "s5_s6_sequence_nak_and_duplicate",
         "s8a_middle_without_first", "s9_buffer_too_small", "s10_refused_invalidate",
         "s11b_s11c_writes", "s8bcd_sequence_and_length_errors"]


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_responder_scenarios(cfg, simulator):
    c = CONFIGS[cfg]
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_responder", testcase=TESTS, simulator=simulator,
               test_name=f"resp-{cfg}-{simulator}")


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_responder_backpressure(cfg):
    """The same walk-throughs with a hostile host memory: random latency, reordering and
    back-pressure on every AXI channel."""
    c = CONFIGS[cfg]
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_responder", testcase=TESTS,
               extra_env={"RESP_BACKPRESSURE": "1"}, test_name=f"resp-bp-{cfg}")
