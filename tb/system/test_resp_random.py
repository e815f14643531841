"""Random responder traffic at the `rnic` top against the Python model (cocotb): see
tb/system/cocotb_resp_random.py. The regression runs 40 messages on Icarus and 150 on
Verilator at W=64; `make regress-full` adds a shorter run on Verilator at W=512 (the build of
tb/system/test_responder.py, shared); `make soak` runs 10,000+ messages on Verilator."""

import pytest

from rnic.params import RnicConfig
from sim.knobs import knob
from sim.runner import Core, run_cocotb, run_fast_verilator

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}


def _run(cfg, simulator, name, **env):
    c = CONFIGS[cfg]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_resp_random", testcase="random_traffic",
               simulator=simulator, extra_env={k: str(v) for k, v in env.items()},
               test_name=name, ports_only=True)


@pytest.mark.full
def test_resp_random_w64_icarus():
    """Icarus: an X reaching a port in random traffic fails the run (make regress-full; the
    regression's random traffic on Icarus is test_pair_random_icarus_hostile's)."""
    _run("w64", "icarus", "resp-random-w64-icarus", RESP_RANDOM_SEED=1,
         RESP_RANDOM_MESSAGES=20)


def test_resp_random_w64_verilator():
    """More messages on Verilator (the build of test_responder_rate, shared)."""
    _run("w64", "verilator", "resp-random-w64-verilator", RESP_RANDOM_SEED=3,
         RESP_RANDOM_MESSAGES=80)


@pytest.mark.full
def test_resp_random_w512_verilator():
    _run("w512", "verilator", "resp-random-w512-verilator", RESP_RANDOM_SEED=2,
         RESP_RANDOM_MESSAGES=40, RESP_RANDOM_HOST_HOSTILITY=0.3)


@pytest.mark.soak
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_resp_random_soak(cfg):
    """10,000 messages per width on Verilator, hostile host memory; on the model built for
    speed (only the top level public, -O2: the bench uses the top's ports only)."""
    c = CONFIGS[cfg]
    env = dict(RESP_RANDOM_SEED=100 + len(cfg),
               RESP_RANDOM_MESSAGES=knob("RESP_RANDOM_SOAK_MESSAGES"),
               RESP_RANDOM_ROUND_MESSAGES=60, RESP_RANDOM_HOST_HOSTILITY=0.2)
    run_fast_verilator(Core(c), c.as_dict(), test_module="tb.system.cocotb_resp_random",
                       testcase="random_traffic", extra_env={k: str(v) for k, v in env.items()},
                       test_name=f"resp-random-soak-{cfg}")


def test_resp_classj_without_ackreq():
    """A refused invalidate (fatal 0x1F) with AckReq = 0 draws no ACK (normative choice 3).
    Found by the random soak; PSN Check once ACKed it regardless of AckReq."""
    c = CONFIGS["w64"]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_resp_random", testcase="classj_without_ackreq",
               test_name="resp-classj-icarus")
