"""Two `rnic` cores on a lossy wire: the Reliability Engine end to end
(tb/system/cocotb_lossy.py)."""

import pytest

from sim.knobs import knob
from tb.system.test_two_rnic import CONFIGS, _run as _run_pair, _run_fast

DIRECTED = ["lost_request_default_us", "lost_ack", "go_back_n_mid_message",
            "rnr_then_late_recv", "rnr_exhausted", "retry_exhausted_cut", "remote_naks"]


def _run(cfg, simulator, tests, name, env=None):
    """The lossy-wire tests on the two-core build of tb/system/test_two_rnic.py (shared)."""
    _run_pair(cfg, simulator, tests, name, env, module="tb.system.cocotb_lossy")


@pytest.mark.full
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_lossy_directed(simulator):
    """Lost request (default US_CYCLES), lost ACK, go-back-N mid-message, RNR then a late
    post_recv, RNR exhaustion, retry exhaustion on a cut link, NAK 0x61/0x62/0x63 (both
    simulators, under ``make regress-full``; the regression keeps the lossy random run)."""
    _run("w64", simulator, DIRECTED, f"lossy-w64-{simulator}")


@pytest.mark.parametrize("cfg", [c if c == "w64" else pytest.param(c, marks=pytest.mark.full)
                                 for c in CONFIGS])
def test_lossy_random(cfg):
    """30 random messages both ways per width, 3 % of frames each dropped, duplicated,
    reordered and corrupted (Verilator; the same build as test_two_rnic; W=512 under
    ``make regress-full``, 10,000 under ``make soak``)."""
    _run(cfg, "verilator", ["lossy_random"], f"lossy-random-{cfg}",
         {"LOSSY_MESSAGES": "30",
          "LOSSY_SEED": "5" if cfg == "w64" else "6"})


@pytest.mark.full
def test_lossy_random_icarus():
    """30 messages at 5 % of each fault on Icarus (~90 s of simulation)."""
    _run("w64", "icarus", ["lossy_random"], "lossy-random-icarus",
         {"LOSSY_MESSAGES": "30", "LOSSY_SEED": "9", "LOSSY_FAULT_RATE": "0.05"})


@pytest.mark.soak
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_lossy_soak(cfg):
    """10,000 random messages on a lossy wire (make soak; ``LOSSY_SOAK_MESSAGES`` sets the number),
    on the two-core model built for speed."""
    _run_fast(cfg, ["lossy_random"], f"lossy-soak-{cfg}",
              {"LOSSY_MESSAGES": str(knob("LOSSY_SOAK_MESSAGES")), "LOSSY_SEED": "13",
               "LOSSY_MAX_LENGTH": "2000"}, module="tb.system.cocotb_lossy")
