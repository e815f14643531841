"""Fuzz campaign at the `rnic` top (tb/system/cocotb_fuzz.py): hostile frames mixed with valid
traffic.

The regression runs a short campaign on Icarus (W=64, the responder tests' small configuration);
``make fuzz`` runs >= 100,000 frames on Verilator. Each run writes its figures (frames per second,
frames per mutation kind and per drop reason, writes checked, tready-low cycles) to
``build/fuzz/<name>.json``.
"""
import pytest

from sim.knobs import is_set, knob
from sim.runner import ROOT, Core, run_cocotb, run_fast_verilator
from tb.system.test_responder import CONFIGS


def _run(name, frames, simulator, seed=1, batch=40, jumbo=True, testcase="fuzz",
         keep_going=False):
    """One campaign; ``keep_going``: count every invariant violation and fail at the end
    (the long runs) instead of failing on the first (FUZZ_KEEP_GOING overrides)."""
    c = CONFIGS["w64"]
    out = ROOT / "build" / "fuzz"
    out.mkdir(parents=True, exist_ok=True)
    if is_set("FUZZ_KEEP_GOING"):
        keep_going = knob("FUZZ_KEEP_GOING")
    # the other FUZZ_* knobs reach the campaign from this process's environment (the cocotb
    # runner passes it on)
    env = {"FUZZ_FRAMES": str(frames), "FUZZ_SEED": str(seed), "FUZZ_BATCH": str(batch),
           "FUZZ_JUMBO": "1" if jumbo else "0", "FUZZ_REPORT_FILE": str(out / f"{name}.json"),
           "FUZZ_KEEP_GOING": "1" if keep_going else "0"}
    if simulator == "verilator-fast":
        return run_fast_verilator(Core(c), c.as_dict(), test_module="tb.system.cocotb_fuzz",
                                  testcase=testcase, extra_env=env, test_name=f"fuzz-{name}")
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_fuzz", testcase=testcase, simulator=simulator,
               extra_env=env, test_name=f"fuzz-{name}")


def test_fuzz_short():
    """A short campaign (Icarus, W=64): 200 hostile frames, the truncation sweep included,
    every invariant of tb/system/cocotb_fuzz.py checked after every batch of 50."""
    _run("short", knob("FUZZ_SHORT_FRAMES"), "icarus", batch=50)


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_fuzz_long(seed):
    """make fuzz: 4 x 25,000 hostile frames (>= 100,000 in all), batches of 100, on a Verilator
    model built for speed (run_fast_verilator)."""
    _run(f"long-{seed}", knob("FUZZ_LONG_FRAMES"), "verilator-fast",
         seed=seed, batch=100, keep_going=True)


def test_foreign_ip_duplicate_counts_6():
    """WRITE_ONLY from a foreign source IPv4 to connected QP 6 at PSNs behind, at and ahead of
    its ePSN: three counts of 6, no response, nothing written."""
    c = CONFIGS["w64"]
    run_cocotb("rnic", Core(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.system.cocotb_fuzz", testcase="foreign_ip_duplicate",
               test_name="fuzz-foreign-ip")
