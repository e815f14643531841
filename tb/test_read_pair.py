"""RDMA READ between two `rnic` cores (tb/cocotb_read_pair.py; cocotb, Icarus, W=64 and W=512)."""
import pytest

from .test_two_rnic import _run

READ_TESTS = ["read_sizes", "read_mixed", "read_ord_one", "read_remote_errors",
              "read_without_remote_read"]


@pytest.mark.parametrize("cfg", ["w64", "w512"])
def test_read_pair(cfg):
    _run(cfg, "icarus", READ_TESTS, f"read-{cfg}", module="tb.cocotb_read_pair")
