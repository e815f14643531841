"""The file `rnic generate` writes, simulated as written (interface.md §1).

Each case runs the `rnic generate` command itself, builds its output with cocotb's runner and
that runner's own flags (Icarus ``-g2012``; Verilator with none added) and runs
``tb/system/cocotb_ports.py`` with X left as X: every handshake output, ``irq`` and AXI-Lite
response is 0 or 1 from the first rising edge with ``rst`` high, and payloads are defined whenever
their valid is high, through reset and a short SEND exchange in both directions.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.runner import ROOT, _check_results, _config_dir, _Lock, verilator_env

CONFIGS = {
    "default": [],
    "w128-small": ["--data-width", "128", "--num-qp", "16", "--num-cq", "4",
                   "--key-entries", "16", "--clock-mhz", "100"],
}


def _generate(cfg):
    """Run the installed `rnic generate` command (once per configuration and RTL state, shared
    by the simulators' cases); its output file, untouched."""
    out = _config_dir("ports", {"cfg": cfg, "args": CONFIGS[cfg]})
    vpath = out / "rnic.v"
    with _Lock(out / ".lock"):
        if not vpath.exists():
            rnic = Path(sys.executable).with_name("rnic")
            cmd = [str(rnic)] if rnic.exists() else [sys.executable, "-m", "rnic.cli"]
            tmp = out / "rnic.tmp.v"
            subprocess.run([*cmd, "generate", "-o", str(tmp), *CONFIGS[cfg]], check=True,
                           cwd=ROOT, capture_output=True)
            tmp.rename(vpath)
    return out, vpath


def _cases():
    """Every configuration on Icarus; the Verilator builds (~80 s each) run under make
    regress-full, and :func:`test_generated_file_verilates` lints the default file with
    Verilator's default flags in the regression (both files under make regress-full)."""
    for cfg in CONFIGS:
        for sim in ("icarus", "verilator"):
            marks = [pytest.mark.full] if sim == "verilator" else []
            yield pytest.param(cfg, sim, marks=marks, id=f"{cfg}-{sim}")


@pytest.mark.parametrize("cfg", [c if c == "default" else pytest.param(c, marks=pytest.mark.full)
                                 for c in CONFIGS])
def test_generated_file_verilates(cfg):
    """Verilator reads the file with its default flags (every lint warning fatal but those the
    file's own ``lint_off`` lines name) and the runner's timescale."""
    verilator_env()
    _, vpath = _generate(cfg)
    r = subprocess.run(["verilator", "--lint-only", "--top-module", "rnic", "--timescale",
                        "1ns/1ps", str(vpath)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("cfg, simulator", list(_cases()))
def test_generated_file_ports_defined(cfg, simulator):
    from cocotb_tools.runner import get_runner
    out, vpath = _generate(cfg)
    if simulator == "verilator":
        verilator_env()     # toolchain set-up only: the build gets no Verilator flags
    runner = get_runner(simulator)
    build_dir = out / simulator
    # the file has no `timescale (none is needed); the bench's clock needs a unit of time
    runner.build(sources=[vpath], hdl_toplevel="rnic", build_dir=build_dir, always=True,
                 timescale=("1ns", "1ps"))
    results = build_dir / "results.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                          os.environ.get("PYTHONPATH", "")]),
           "COCOTB_LOG_LEVEL": "WARNING"}
    try:
        runner.test(test_module="tb.system.cocotb_ports", hdl_toplevel="rnic", build_dir=build_dir,
                    test_dir=build_dir, results_xml=str(results), extra_env=env,
                    timescale=("1ns", "1ps") if simulator == "icarus" else None)
    except SystemExit:
        pass
    _check_results(results)
