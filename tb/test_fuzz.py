"""Fuzz campaign at the `rnic` top (tb/cocotb_fuzz.py): hostile frames mixed with valid traffic.

The regression runs a short campaign on Icarus (W=64, the responder tests' small configuration);
``make fuzz`` runs >= 100,000 frames on Verilator. Each run writes its figures (frames per second,
frames per mutation kind and per drop reason, writes checked, tready-low cycles) to
``build/fuzz/<name>.json``.
"""
import os
from pathlib import Path

import pytest

from rnic.top import RNIC
from sim.runner import run_cocotb
from tb.test_responder import CONFIGS

ROOT = Path(__file__).resolve().parents[1]


def _run(name, frames, simulator, seed=1, batch=40, jumbo=True, testcase="fuzz",
         keep_going=False):
    """One campaign; ``keep_going``: count every invariant violation and fail at the end
    (the long runs) instead of failing on the first (FUZZ_KEEP_GOING overrides)."""
    c = CONFIGS["w64"]
    out = ROOT / "build" / "fuzz"
    out.mkdir(parents=True, exist_ok=True)
    env = {"FUZZ_FRAMES": str(frames), "FUZZ_SEED": str(seed), "FUZZ_BATCH": str(batch),
           "FUZZ_JUMBO": "1" if jumbo else "0", "FUZZ_REPORT": str(out / f"{name}.json"),
           "FUZZ_KEEP_GOING": os.environ.get("FUZZ_KEEP_GOING", "1" if keep_going else "0")}
    env.update({k: v for k, v in os.environ.items() if k.startswith("FUZZ_") and k not in env
                and k != "FUZZ_FRAMES"})
    if simulator == "verilator-fast":
        return run_fast_verilator(lambda: RNIC(c), c.as_dict(), testcase=testcase,
                                  extra_env=env, test_name=f"fuzz-{name}")
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_fuzz", testcase=testcase, simulator=simulator,
               extra_env=env, test_name=f"fuzz-{name}")


def run_fast_verilator(factory, params, *, testcase, extra_env, test_name):
    """Run tb.cocotb_fuzz on a Verilator model built for speed, in its own build directory.

    The shared models (sim.runner) are built with ``--public-flat-rw`` (cocotb's default: every
    internal signal visible through VPI, which keeps Verilator from optimising the design) and
    C++ ``-O0``. The fuzz drives and watches only the top's ports, so its model makes only the
    top level public (``--public-depth 1``) and is compiled at ``-O2``: the campaign is bound by
    the model's speed, not the build.
    """
    import subprocess
    from cocotb_tools.runner import Verilator
    from sim import runner as R

    if os.environ.get("FUZZ_VERILOG"):
        # a pinned snapshot (a build/sim/rnic-*/rnic.v): campaigns unaffected by RTL edits
        vpath = Path(os.environ["FUZZ_VERILOG"]).resolve()
        cfg = vpath.parent
    else:
        cfg, vpath = R.generate_verilog("rnic", factory, params, toplevel="rnic")
    build_dir = cfg / "verilator-fuzz"
    opt = ["OPT_FAST=-O2", "OPT_SLOW=-O1", "OPT_GLOBAL=-O1", "CFG_CXXFLAGS_PCH_I=-include"]

    class FastVerilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            cmds[0][1:1] = ["--public-depth", "1"]
            cmds[1] += opt
            return cmds

    R._verilator_path()
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(w for w in (saved or "").split()
                                       if not w.startswith(("OPT_", "CFG_CXXFLAGS_PCH_I")))
    os.environ.setdefault("OBJCACHE", "ccache" if R.shutil.which("ccache") else "")
    try:
        runner = FastVerilator()
        with R._Lock(cfg / ".verilator-fuzz.lock"):
            runner.build(sources=[vpath], hdl_toplevel="rnic", build_dir=build_dir,
                         build_args=["--no-timing", "-Wno-fatal", "-Wno-WIDTH",
                                     "-Wno-UNOPTFLAT", "-Wno-STMTDLY", "-Wno-CASEINCOMPLETE",
                                     "--x-assign", "0", "--x-initial", "0"],
                         always=False, timescale=("1ns", "1ps"))
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
    test_dir = cfg / "runs" / test_name
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                          os.environ.get("PYTHONPATH", "")]),
           "COCOTB_RESOLVE_X": "ZEROS",
           "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"), **extra_env}
    results = test_dir / "results.xml"
    try:
        runner.test(test_module="tb.cocotb_fuzz", hdl_toplevel="rnic", testcase=testcase,
                    build_dir=build_dir, test_dir=test_dir, results_xml=str(results),
                    extra_env=env, seed=1)
    except SystemExit:
        pass
    R._check_results(results)
    return test_dir


def test_fuzz_short():
    """A short campaign (Icarus, W=64): 300 hostile frames, the truncation sweep included,
    every invariant of tb/cocotb_fuzz.py checked after every batch of 50."""
    _run("short", int(os.environ.get("FUZZ_FRAMES", "300")), "icarus", batch=50)


@pytest.mark.fuzz
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_fuzz_long(seed):
    """make fuzz: 4 x 25,000 hostile frames (>= 100,000 in all), batches of 100, on a Verilator
    model built for speed (run_fast_verilator)."""
    _run(f"long-{seed}", int(os.environ.get("FUZZ_LONG_FRAMES", "25000")), "verilator-fast",
         seed=seed, batch=100, keep_going=True)


def test_foreign_ip_duplicate_counts_6():
    """WRITE_ONLY from a foreign source IPv4 to connected QP 6 at PSNs behind, at and ahead of
    its ePSN: three counts of 6, no response, nothing written."""
    c = CONFIGS["w64"]
    run_cocotb("rnic", lambda: RNIC(c), toplevel="rnic", params=c.as_dict(),
               test_module="tb.cocotb_fuzz", testcase="foreign_ip_duplicate",
               test_name="fuzz-foreign-ip")
