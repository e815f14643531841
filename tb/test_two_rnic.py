"""Two `rnic` cores on a clean wire: the requester end to end (cocotb, Icarus and Verilator)."""
import pytest

from rnic.params import RnicConfig
from sim.pair import RnicPair
from sim.runner import run_cocotb

CONFIGS = {"w64": RnicConfig(num_qp=16, num_cq=4, key_entries=16),
           "w512": RnicConfig(data_width=512, num_qp=16, num_cq=4, key_entries=16)}
DIRECTED = ["send_13_steps", "send_with_immediate", "send_with_invalidate", "rdma_write",
            "rdma_write_with_imm", "zero_length_send"]


def _run(cfg, simulator, tests, name, env=None, module="tb.cocotb_two_rnic"):
    """Run cocotb ``tests`` of ``module`` on the two-core build of ``cfg`` (shared)."""
    c = CONFIGS[cfg]
    run_cocotb("pair", lambda: RnicPair(c), toplevel="rnic_pair", params=c.as_dict(),
               test_module=module, testcase=tests, simulator=simulator,
               test_name=name, extra_env=env)


@pytest.mark.parametrize("cfg", list(CONFIGS))
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_pair_directed(cfg, simulator):
    _run(cfg, simulator, DIRECTED, f"pair-{cfg}-{simulator}")


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_pair_random(cfg):
    """A few hundred random messages both ways (Verilator; the same build as above)."""
    _run(cfg, "verilator", ["random_messages"], f"pair-random-{cfg}",
         {"PAIR_MESSAGES": "150", "PAIR_SEED": "7" if cfg == "w64" else "8"})


def test_pair_random_icarus_hostile():
    """Random messages with random latency and back-pressure on both host memories (Icarus)."""
    _run("w64", "icarus", ["random_messages"], "pair-random-hostile",
         {"PAIR_MESSAGES": "30", "PAIR_HOSTILE": "1", "PAIR_SEED": "3"})


@pytest.mark.soak
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_pair_soak(cfg):
    """10,000 random messages both ways (make soak)."""
    _run(cfg, "verilator", ["random_messages"], f"pair-soak-{cfg}",
         {"PAIR_MESSAGES": "10000", "PAIR_SEED": "11", "PAIR_MAX_LEN": "2000"})
