"""RDMA READ between two `rnic` cores (tb/system/cocotb_read_pair.py; cocotb on Verilator, W=64 and
W=512, the two-core build of tb/system/test_two_rnic.py; on Icarus under make regress-full)."""
import pytest

from .test_two_rnic import _run

READ_TESTS = ["read_sizes", "read_mixed", "read_ord_one", "read_remote_errors",
              "read_without_remote_read"]


@pytest.mark.parametrize("sim", ["verilator", pytest.param("icarus", marks=pytest.mark.full)])
@pytest.mark.parametrize("cfg", ["w64", "w512"])
def test_read_pair(cfg, sim):
    _run(cfg, sim, READ_TESTS, f"read-{cfg}-{sim}", module="tb.system.cocotb_read_pair")
