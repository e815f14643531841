"""Control plane: registers, mailbox, doorbells, events, irq, counters, AXI4-Lite (cocotb)."""
import pytest

from rnic.control.control_plane import ControlPlane
from rnic.params import RnicConfig
from sim.runner import run_cocotb
from sim.wrap import flat_top

TESTS = ["identity_and_rw_registers", "partial_writes_ignored", "mailbox_results_and_dispatch",
         "mailbox_busy_ignores_cmd", "reset_sweep_busy", "doorbells_decoded", "events_and_irq",
         "counters_saturate", "axil_backpressure", "counters_exact_under_load",
         "reset_clears_args_and_counters", "arg_read_behind_write"]

CONFIGS = {
    "default": RnicConfig(),
    "small": RnicConfig(data_width=512, num_qp=4, num_cq=1, key_entries=4, clock_mhz=250.4),
}


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_control(cfg):
    c = CONFIGS[cfg]
    run_cocotb("control", lambda: flat_top(ControlPlane(c)), params=c.as_dict(),
               test_module="tb.blocks.cocotb_control", testcase=TESTS, test_name=cfg,
               extra_env={"CONTROL_WIDTH": str(c.data_width),
                          "CONTROL_NUM_QP": str(c.num_qp), "CONTROL_NUM_CQ": str(c.num_cq),
                          "CONTROL_KEY_ENTRIES": str(c.key_entries),
                          "CONTROL_US_CYCLES": str(c.us_cycles)})
