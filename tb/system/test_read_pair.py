"""RDMA READ between two `rnic` cores (tb/system/cocotb_read_pair.py; cocotb on Verilator at W=64,
the two-core build of tb/system/test_two_rnic.py; W=512 and Icarus under make regress-full)."""
import pytest

from .test_two_rnic import _run

READ_TESTS = ["read_sizes", "read_mixed", "read_ord_one", "read_remote_errors",
              "read_without_remote_read"]


def _cases():
    """W=64 on Verilator; W=512 (its own two-core Verilator build) and Icarus under make
    regress-full (the regression reads at W=512 through tb/system/test_read.py)."""
    for cfg in ("w64", "w512"):
        for sim in ("verilator", "icarus"):
            marks = [] if (cfg, sim) == ("w64", "verilator") else [pytest.mark.full]
            yield pytest.param(cfg, sim, marks=marks, id=f"{cfg}-{sim}")


@pytest.mark.parametrize("cfg, sim", list(_cases()))
def test_read_pair(cfg, sim):
    _run(cfg, sim, READ_TESTS, f"read-{cfg}-{sim}", module="tb.system.cocotb_read_pair")


def test_read_pair_pmtu():
    """READs at PMTU 512 and 2048 (the codes the other READ tests leave out) of lengths 0, 1,
    P − 1, P, P + 1 and 3P + 5, each followed by a SEND or a WRITE: request PSNs and the next
    PSN against the requester model (W=64, the shared Verilator build)."""
    _run("w64", "verilator", ["read_pmtu_512", "read_pmtu_2048"], "read-pmtu-w64-verilator",
         module="tb.system.cocotb_read_pair")
