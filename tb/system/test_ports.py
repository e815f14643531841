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

from sim.runner import BUILD, ROOT, _check_results, verilator_env

CONFIGS = {
    "default": [],
    "w128-small": ["--data-width", "128", "--num-qp", "16", "--num-cq", "4",
                   "--key-entries", "16", "--clock-mhz", "100"],
}


def _generate(cfg, simulator):
    """Run the installed `rnic generate` command; its output file, untouched."""
    out = BUILD / "ports" / f"{cfg}-{simulator}"
    out.mkdir(parents=True, exist_ok=True)
    vpath = out / "rnic.v"
    rnic = Path(sys.executable).with_name("rnic")
    cmd = [str(rnic)] if rnic.exists() else [sys.executable, "-m", "rnic.cli"]
    subprocess.run([*cmd, "generate", "-o", str(vpath), *CONFIGS[cfg]], check=True, cwd=ROOT,
                   capture_output=True)
    return out, vpath


def _cases():
    """Every configuration on both simulators; the second configuration's Verilator build
    (~90 s) runs under make regress-full."""
    for i, cfg in enumerate(CONFIGS):
        for sim in ("icarus", "verilator"):
            marks = [pytest.mark.full] if i and sim == "verilator" else []
            yield pytest.param(cfg, sim, marks=marks, id=f"{cfg}-{sim}")


@pytest.mark.parametrize("cfg, simulator", list(_cases()))
def test_generated_file_ports_defined(cfg, simulator):
    from cocotb_tools.runner import get_runner
    out, vpath = _generate(cfg, simulator)
    if simulator == "verilator":
        verilator_env()     # toolchain set-up only: the build gets no Verilator flags
    runner = get_runner(simulator)
    build_dir = out / "build"
    # the file has no `timescale (none is needed); the bench's clock needs a unit of time
    runner.build(sources=[vpath], hdl_toplevel="rnic", build_dir=build_dir, always=True,
                 timescale=("1ns", "1ps"))
    results = out / "results.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                          os.environ.get("PYTHONPATH", "")]),
           "COCOTB_LOG_LEVEL": "WARNING"}
    try:
        runner.test(test_module="tb.system.cocotb_ports", hdl_toplevel="rnic", build_dir=build_dir,
                    test_dir=out, results_xml=str(results), extra_env=env,
                    timescale=("1ns", "1ps") if simulator == "icarus" else None)
    except SystemExit:
        pass
    _check_results(results)
