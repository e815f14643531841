"""RDMA READ between two `rnic` cores on a lossy wire (tb/cocotb_read_lossy.py; cocotb, Icarus)."""
import pytest

from .test_two_rnic import _run

DIRECTED = ["read_lost_response", "read_lost_request", "read_lost_last", "read_then_send_ack"]


@pytest.mark.parametrize("cfg", ["w64", pytest.param("w512", marks=pytest.mark.full)])
def test_read_lossy_directed(cfg):
    """A lost MIDDLE response, a lost request, a lost LAST response, a READ whose responses are
    all lost while the SEND behind it is ACKed (W=512 under ``make regress-full``)."""
    _run(cfg, "icarus", DIRECTED, f"read-lossy-{cfg}", module="tb.cocotb_read_lossy")


@pytest.mark.parametrize("cfg", ["w64", pytest.param("w512", marks=pytest.mark.full)])
def test_read_lossy_random(cfg):
    """READs mixed with SENDs and WRITEs on two QPs over a lossy wire (3 % of frames each
    dropped, duplicated, corrupted, reordered), PMTU 256 and 1024 (W=512 under
    ``make regress-full``)."""
    _run(cfg, "icarus", ["read_lossy_random", "read_lossy_random_1024"],
         f"read-lossy-random-{cfg}", module="tb.cocotb_read_lossy",
         env={"READ_LOSSY_SEED": "21" if cfg == "w64" else "31"})
