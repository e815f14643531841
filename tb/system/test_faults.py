"""Host-memory faults at the `rnic` top (tb/system/cocotb_faults.py): SLVERR and DECERR on a
receive-WQE fetch, a scatter write, a CQE write and a gather read put the affected QP in ERROR with
event 4, and another QP keeps working (Icarus, W=64)."""
import pytest

from sim.runner import Core, run_cocotb
from tb.system.test_responder import CONFIGS

CASES = ["wqe_fetch_fault", "scatter_write_fault", "cqe_write_fault", "gather_read_fault"]


@pytest.mark.parametrize("case", CASES)
def test_host_fault(case):
    c = CONFIGS["w64"]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_faults", testcase=case, test_name=f"faults-{case}")
