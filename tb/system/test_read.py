"""RDMA READ as responder at the `rnic` top (interface.md §7): every size class, requests behind
a long READ at one beat a cycle, the errors, duplicates within and beyond IRD, a host read fault
(cocotb, `tb/system/cocotb_read.py`)."""
import pytest

from rnic.params import RnicConfig
from sim.runner import Core, run_cocotb

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
TESTS = ["read_sizes", "read_requests_behind", "read_errors", "read_duplicates",
         "read_host_fault"]
#: at W=512 the regression runs the tests whose data path depends on the width (every size
#: class, requests behind a long READ at one beat a cycle); every test under make regress-full
TESTS_W512 = ["read_sizes", "read_requests_behind"]


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_read_responder(cfg):
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_read",
               testcase=TESTS if cfg == "w64" else TESTS_W512, test_name=f"read-{cfg}",
               ports_only=True)


@pytest.mark.full
def test_read_responder_w512_all():
    c = CONFIGS["w512"]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_read", testcase=TESTS, test_name="read-w512-all",
               ports_only=True)
