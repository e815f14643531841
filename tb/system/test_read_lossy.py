"""RDMA READ between two `rnic` cores on a lossy wire (tb/system/cocotb_read_lossy.py; cocotb on
Verilator, the two-core build of tb/system/test_two_rnic.py)."""
import pytest

from .test_two_rnic import _run

DIRECTED = ["read_lost_response", "read_lost_request", "read_lost_last", "read_then_send_ack",
            "read_stale_replays", "read_wake_queue_full"]
RANDOM = ["read_lossy_random", "read_lossy_random_1024"]


@pytest.mark.parametrize("cfg", ["w64", pytest.param("w512", marks=pytest.mark.full)])
def test_read_lossy_directed(cfg):
    """A lost MIDDLE response, a lost request, a lost LAST response, a READ whose responses are
    all lost while the SEND behind it is ACKed, a READ request repeated by the wire (its
    answers dropped at the wire's rate), a lost MIDDLE response while doorbells keep the work
    queue full (W=512 under ``make regress-full``)."""
    _run(cfg, "verilator", DIRECTED, f"read-lossy-{cfg}", module="tb.system.cocotb_read_lossy")


@pytest.mark.parametrize("cfg", ["w64", pytest.param("w512", marks=pytest.mark.full)])
def test_read_lossy_random(cfg):
    """READs mixed with SENDs and WRITEs on two QPs over a lossy wire (3 % of frames each
    dropped, duplicated, corrupted, reordered), 16 WQEs at PMTU 256 and 16 at PMTU 1024 (W=512
    and 80 WQEs under ``make regress-full``)."""
    _run(cfg, "verilator", RANDOM, f"read-lossy-random-{cfg}", module="tb.system.cocotb_read_lossy",
         env={"READ_LOSSY_WQES": "16", "READ_LOSSY_SEED": "21" if cfg == "w64" else "31"})


@pytest.mark.full
def test_read_lossy_random_long():
    """80 WQEs per PMTU at W=64 (make regress-full), retransmit timeout code 10 (~8,400
    cycles): at code 8 (~2,100 cycles) a READ of ~30 responses on B's shared link (~1,230
    cycles a run, behind the other QP's) outlasts the timeout, so its request is sent again
    before its answer is in, and B's answers to those copies were still on the wire when the
    run ended."""
    _run("w64", "verilator", RANDOM, "read-lossy-random-long", module="tb.system.cocotb_read_lossy",
         env={"READ_LOSSY_WQES": "80", "READ_LOSSY_SEED": "41", "LOSSY_TIMEOUT_CODE": "10"})


def test_read_hostile_responder():
    """READs on two QPs while the wire adds forged READ responses (wrong length, wrong opcode
    for the position, an idle QP, PSNs ahead): all dropped and counted, no byte
    written, every READ complete (W=64)."""
    _run("w64", "verilator", ["read_hostile_responder"], "read-hostile-w64",
         module="tb.system.cocotb_read_lossy")


