"""Recorded measurements and the README tables made from them.

The measurements the README shows are recorded in ``docs/figures/``, one JSON file per kind,
by the command that measures them:

* ``area.json``: ``rnic area --record`` (``make area``), the default configuration's area per
  block against its budget;
* ``synth.json``: ``rnic synth --record`` (``make synth``), one row per block, configuration,
  target and nextpnr seed, merged over runs;
* ``bench.json``: ``rnic bench --record`` (``make bench``), the cycle figures, merged over runs;
* ``board.json``: ``python -m rnic_flow.board --record`` (``make bitstream``), the last board
  build's cells and routed clock.

The tables of the README and the docs pages are rendered from those files between
``<!-- figures:NAME begin -->`` and ``<!-- figures:NAME end -->``; ``python -m rnic_flow.figures
readme`` rewrites them (``make docs``), and ``tb/flow/test_docs.py`` fails when a table differs
from its rendering, so a figure a page shows is always the last recorded measurement. NAME is a
whole table (``blocks``, ``fmax``, ``bench``, ``goodput``, ``responder``, ``board``) or one block's part of
one, for a block's own page:

* ``area:ROW``: the ``make area`` row ROW (a key of ``rnic_flow.budgets``) beside its budget,
  with the routed Fmax of its block on seeds 1 / 2 / 3;
* ``fmax:BLOCK[,BLOCK...]``: the ``rnic synth --block`` rows of those blocks, every
  configuration;
* ``bench:BLOCK[,BLOCK...]``: the benchmark figures of those blocks beside their limits.

Measured figures live only in such sections: :func:`hand_figures` finds a number with a unit of
area or clock written anywhere else on a page, and ``tb/flow/test_docs.py`` fails on one.
"""

import argparse
import json
import re
import sys
from pathlib import Path

from .sections import replace_section

__all__ = ["FIGURES", "record_area", "record_synth", "record_bench", "record_board", "SECTIONS",
           "render",
           "pages", "update_readme", "section_names", "hand_figures", "main"]

#: The recorded measurements, relative to the repository root.
FIGURES = Path("docs/figures")

_CONFIG_TAGS = (("data_width", "W"), ("num_qp", "N"), ("num_cq", "C"), ("key_entries", "K"))


def _load(path, default):
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else default


def _write(path, value):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")


# ---- recording -----------------------------------------------------------------------------

def record_area(report, dst=FIGURES / "area.json"):
    """Keep from an ``rnic area`` report (its JSON as a dict) what the README shows."""
    rows = [{k: r[k] for k in ("block", "title", "lut4_eq", "ff", "dp16kd", "budget")}
            for r in report["rows"]]
    _write(dst, {"config": report["config"], "rows": rows, "seconds": report.get("seconds")})


def _synth_key(row):
    return (row["block"], row["target"], json.dumps(row.get("config"), sort_keys=True),
            row.get("seed", 1), row.get("stage", "routed"))


def record_synth(rows, dst=FIGURES / "synth.json"):
    """Merge ``rnic synth`` result rows into the record, one per block, target, configuration,
    seed and stage (placed or routed); a failed run replaces nothing. A run whose router was
    stopped (``status`` "not routed") is recorded as placed, with its status."""
    keep = ("block", "target", "config", "part", "lut", "ff", "bram", "fmax_mhz", "target_mhz",
            "seed", "stage", "status", "date")
    old = {_synth_key(r): r for r in _load(dst, [])}
    for r in rows:
        if r.get("status", "ok") not in ("ok", "not routed") or r.get("fmax_mhz") is None:
            continue
        r = {k: r[k] for k in keep if k in r}
        r.setdefault("seed", 1)
        r.setdefault("stage", "routed")
        old[_synth_key(r)] = r
    _write(dst, sorted(old.values(), key=_synth_key))


def merge_bench(rows, new):
    """Benchmark figures ``rows`` updated by ``new``, one per block, figure and configuration
    (``build/bench.json`` and the record are both kept so)."""
    def key(r):
        return (r["block"], r["figure"], json.dumps(r["config"], sort_keys=True))
    out = {key(r): r for r in rows}
    for r in new:
        out[key(r)] = r
    return sorted(out.values(), key=key)


def record_bench(rows, dst=FIGURES / "bench.json"):
    """Merge benchmark figures (``sim.bench`` rows) into the record."""
    _write(dst, merge_bench(_load(dst, []), rows))


# ---- rendering -----------------------------------------------------------------------------

def record_board(summary, dst=FIGURES / "board.json"):
    """Keep the last board build (``rnic_flow.board``'s summary, a dict): it replaces the one
    before."""
    _write(dst, summary)


def _natural(text):
    """Sort key: digit runs compared as numbers (W=64 before W=128)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def _n(x):
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _config_tag(cfg):
    return " ".join(f"{t}={cfg[k]}" for k, t in _CONFIG_TAGS if k in (cfg or {}))


#: ``make area`` row → the ``rnic synth --block`` block whose routed Fmax the README shows
#: beside it (at the area report's configuration).
AREA_FMAX = {"rx_parse": "rx_parse", "receive": "psn_check", "rq_scatter": "execute",
             "key_cache": "key_cache", "cqe": "cqe_gen", "requester": "requester",
             "tx": "tx_build", "axi": "host_memory", "control": "control_plane",
             "total": "rnic"}


def _fmax_by_block(synth, config, stage="routed"):
    """``{block: {seed: MHz}}`` of the ECP5 rows of ``stage`` (routed, or placed: the placement
    estimate) whose configuration agrees with ``config``."""
    out = {}
    for r in synth:
        cfg = r.get("config") or {}
        if r["target"] != "ecp5" or r.get("stage", "routed") != stage:
            continue
        if all(config.get(k, v) == v for k, v in cfg.items()):
            out.setdefault(r["block"], {})[r.get("seed", 1)] = r["fmax_mhz"]
    return out


def _fmax_cell(routed, placed):
    """Seeds 1 / 2 / 3 of a block's routed Fmax; a block with none routed shows its placement
    estimates, so marked."""
    g, note = (routed, "") if routed else (placed, " (not routed: placement estimate)")
    if not g:
        return "not measured on the current code"
    return " / ".join(f"{g[s]:.1f}" if s in g else "–" for s in (1, 2, 3)) + note


def render_area(area, synth=None):
    """The area table, each figure beside its budget; with ``synth``, each block's routed Fmax
    on seeds 1 / 2 / 3 in a last column."""
    cfg = _config_tag(area["config"])
    fm = None if synth is None else _fmax_by_block(synth, area["config"])
    est = None if synth is None else _fmax_by_block(synth, area["config"], "placed")
    head = (f"`make area`, {cfg}, yosys `synth_ecp5` with the block hierarchy kept; each figure "
            "beside its budget ([docs/area.md](docs/area.md))")
    cols = "| block | LUT4-eq | FF | DP16KD | within budget |"
    rule = "|---|--:|--:|--:|:-:|"
    if fm is not None:
        head += ("; Fmax routed, each block out of context (`rnic synth --block`), the whole "
                 "core as `make` builds it (`rnic synth`), target 156.25 MHz")
        cols += " Fmax MHz, seeds 1 / 2 / 3 |"
        rule += "--:|"
    lines = [head + ":", "", cols, rule]
    lines += [_area_row(r, fm, est) for r in area["rows"]]
    return "\n".join(lines)


def _area_row(r, fm, est):
    """One row of the area table: each figure beside its budget, whether all are within it,
    and with ``fm``/``est`` (routed / placed Fmax by block) the Fmax cell."""
    b = r.get("budget") or {}
    cells = []
    ok = True
    for k, kb in (("lut4_eq", "lut4"), ("ff", "ff"), ("dp16kd", "dp16kd")):
        if kb in b:
            cells.append(f"{_n(r[k])} of {_n(b[kb])}")
            ok &= r[k] <= b[kb]
        else:
            cells.append(_n(r[k]))
    name = r["title"].split(":")[0]
    if r["block"] == "total":
        name, cells = f"**{name}**", [f"**{c}**" for c in cells]
    cells.append(("yes" if ok else "no") if b else "")
    if fm is not None:
        blk = AREA_FMAX.get(r["block"])     # (none for the glue: no block of its own)
        cells.append(_fmax_cell(fm.get(blk, {}), est.get(blk, {})) if blk else "")
    return f"| {name} | {' | '.join(cells)} |"


def render_block_area(area, synth, row):
    """One block's row of the area table (``row``: its key in ``rnic_flow.budgets``), for the
    block's own page: its figures beside its budget and its routed Fmax on seeds 1 / 2 / 3."""
    rows = [r for r in area["rows"] if r["block"] == row]
    if not rows:
        raise ValueError(f"no area row {row!r} (rows: {[r['block'] for r in area['rows']]})")
    blk = AREA_FMAX.get(row)
    how = f"`rnic synth --block {blk}`" if blk != "rnic" else "`rnic synth`"
    target = {f"{r['target_mhz']:g}" for r in synth if r["block"] == blk} or {"156.25"}
    head = (f"{_config_tag(area['config'])}: `make area` inside the core ([area.md](area.md)); "
            f"Fmax {how}, routed, target {' / '.join(sorted(target))} MHz:")
    fm = _fmax_by_block(synth, area["config"])
    est = _fmax_by_block(synth, area["config"], "placed")
    return "\n".join([head, "", "| block | LUT4-eq | FF | DP16KD | within budget | "
                       "Fmax MHz, seeds 1 / 2 / 3 |", "|---|--:|--:|--:|:-:|--:|",
                       _area_row(rows[0], fm, est)])


def _blocks(arg, have):
    """The blocks a section names (``a,b``), each checked to have a recorded row in ``have``
    (a section naming a block with none is a typo, not an empty table)."""
    names = arg.split(",")
    missing = [b for b in names if b not in have]
    if missing:
        raise ValueError(f"no recorded figure of {', '.join(missing)}")
    return names


def render_fmax(synth, blocks=None):
    """One row per block and configuration: cells on seed 1, Fmax on every recorded seed;
    with ``blocks`` (``a,b``) only those blocks' rows."""
    unmeasured = []
    if blocks is not None:
        from .synth import BLOCKS
        recorded = {r["block"] for r in synth if r["target"] == "ecp5"}
        keep = _blocks(blocks, recorded | set(BLOCKS) | {"rnic"})
        # a block whose Verilog changed since its last run has no row until it is measured again
        unmeasured = [b for b in keep if b not in recorded]
        synth = [r for r in synth if r["block"] in keep]
    groups = {}
    for r in synth:
        if r["target"] != "ecp5":
            continue
        g = groups.setdefault((r["block"], _config_tag(r.get("config")), r["stage"]), {})
        g[r.get("seed", 1)] = r
    lines = ["| block | config | LUT4 | FF | DP16KD | Fmax MHz, seeds 1 / 2 / 3 | target |",
             "|---|---|--:|--:|--:|--:|--:|"]
    order = sorted(groups, key=lambda k: (k[0] != "rnic", k[0], _natural(k[1]), k[2]))
    for blk, cfg, stage in order:
        g = groups[(blk, cfg, stage)]
        first = g[min(g)]
        fm = " / ".join(f"{g[s]['fmax_mhz']:.1f}" if s in g else "–" for s in (1, 2, 3))
        if stage == "placed":
            fm += (" (not routed: router stopped; placement estimate)"
                   if first.get("status") == "not routed" else " (placed, estimate)")
        lines.append(f"| {blk} | {cfg} | {_n(first['lut'])} | {_n(first['ff'])} | "
                     f"{first['bram']} | {fm} | {first['target_mhz']:g} |")
    if unmeasured:
        lines += ["", "Not measured on the current code: " + ", ".join(
            f"{b} (`rnic synth --block {b}`)" for b in unmeasured) + "."]
    return "\n".join(lines)


def _find(bench, block, figure, **config):
    """The recorded figure of ``block`` named ``figure`` whose configuration has ``config``'s
    values (an absent ``rd_latency`` is 0: zero-wait host memory), or None."""
    for r in bench:
        c = r["config"]
        if r["block"] == block and r["figure"] == figure and all(
                c.get(k, 0 if k == "rd_latency" else None) == v for k, v in config.items()):
            return r
    return None


def _widths(bench, block):
    return sorted({r["config"]["W"] for r in bench if r["block"] == block})


def _size(b):
    return f"{b // 1024} KiB" if b >= 1024 and b % 1024 == 0 else f"{b} B"


#: The (message size, host read latency) rows and the payloads the README's tables show
#: (docs/bench.md has every figure).
GOODPUT_ROWS = ((64, 0), (4096, 0), (4096, 100), (65536, 100))
RESPONDER_PAYLOADS = (0, 256)

#: The responder's latency limits, shown beside its figures: cycles from a SEND_ONLY's last
#: beat to the first beat of its ACK on an idle core, by payload bytes.
ACK_LATENCY_LIMITS = {0: 16, 256: 24}


def _table(head, rule, widths, rows):
    """Columns ``head`` (aligned by ``rule``) then one per width; rows ``(lead cells, {W:
    cell})``, a row with no figure left out."""
    lines = [f"| {head} | " + " | ".join(f"W={w}" for w in widths) + " |",
             rule + "--:|" * len(widths)]
    for lead, cells in rows:
        if any(v is not None for v in cells.values()):
            lines.append(f"| {lead} | " + " | ".join(cells.get(w) or "–" for w in widths) + " |")
    return "\n".join(lines)


def render_goodput(bench):
    block = "requester+responder"
    widths = _widths([r for r in bench if r["figure"].startswith("goodput A->B")], block)
    if not widths:
        return "(no recorded figure: `make bench` runs `pair-w*`)"

    def cell(size, lat, w):
        r = _find(bench, block, f"goodput A->B, SEND {size} B", W=w, rd_latency=lat)
        return f"{r['value']:.2f} of {r['limit']:.2f}" if r else None
    return _table("message | host reads", "|--:|--:|", widths,
                  [(f"{_size(size)} | {lat} cycles", {w: cell(size, lat, w) for w in widths})
                   for size, lat in GOODPUT_ROWS])


def render_responder(bench):
    """Zero-wait host memory: rx beats per cycle (one QP / 8 QPs) and the idle-core latency
    (first ACK beat / CQE written) of back-to-back SEND_ONLY."""
    block = "resp_top"
    widths = _widths(bench, block)
    if not widths:
        return "(no recorded figure: `make bench` runs `resp_top-w*`)"

    def pair(w, size, names, fmt):
        rs = [_find(bench, block, n, W=w, payload=size, rd_latency=0) for n in names]
        return None if not any(rs) else " / ".join(fmt(r["value"]) if r else "–" for r in rs)
    rate = ("rx beats/cycle, back-to-back SEND_ONLY, one QP",
            "rx beats/cycle, back-to-back SEND_ONLY, 8 QPs")
    lat = ("cycles, request last beat to first ACK beat",
           "cycles, request last beat to CQE last write beat")
    rows = []
    for size in RESPONDER_PAYLOADS:
        rows.append((f"{_size(size)} | rx beats/cycle, 1 QP / 8 QPs (limit 1)",
                     {w: pair(w, size, rate, lambda v: f"{v:.3f}") for w in widths}))
        limit = ACK_LATENCY_LIMITS.get(size)
        within = "" if limit is None else f" (limit {limit})"
        rows.append((f"{_size(size)} | cycles, last beat → first ACK beat{within} / CQE written",
                     {w: pair(w, size, lat, lambda v: f"{v:g}") for w in widths}))
    return _table("payload | figure", "|--:|---|", widths, rows)


def render_bench(bench, blocks=None):
    """Every recorded figure, one row each, beside its limit; with ``blocks`` (``a,b``) only
    those blocks' figures."""
    if blocks is not None:
        keep = _blocks(blocks, {r["block"] for r in bench})
        bench = [r for r in bench if r["block"] in keep]
    def cfg_of(r):
        return ", ".join(f"{k}={v}" for k, v in sorted(r["config"].items()))
    lines = ["| block | figure | config | value | limit |", "|---|---|---|--:|--:|"]
    for r in sorted(bench, key=lambda r: (r["block"], r["figure"], _natural(cfg_of(r)))):
        cfg = cfg_of(r)
        lim = "" if r["limit"] is None else f"{r['limit']:g}"
        lines.append(f"| {r['block']} | {r['figure']} | {cfg} | {r['value']:g} {r['unit']} | "
                     f"{lim} |".replace("  |", " |"))
    return "\n".join(lines)


def render_board(board):
    """The board build: its configuration, the cells used of each kind beside the part's, and
    each clock's routed figure beside its constraint."""
    lines = [f"{board['part']}, core {board['config']}, nextpnr seed {board['seed']} "
             f"({board['router']}), {board['date']}:", "",
             "| resource (nextpnr cell) | used | available |", "|---|--:|--:|"]
    order = ("LUT4", "FF", "EBR", "LUTRAM", "PLL")
    for k in sorted(board["cells"], key=lambda k: (order + (k,)).index(k)):
        used, avail = board["cells"][k]
        lines.append(f"| {k} | {used:,} | {avail:,} |")
    lines += ["", "| clock | routed MHz | constraint MHz |", "|---|--:|--:|"]
    for k, (achieved, constraint) in sorted(board["fmax"].items()):
        lines.append(f"| `{k}` | {achieved:g} | {constraint:g} |")
    return "\n".join(lines)


#: section kind → (recorded file, renderer, what records it, argument: None never, False
#: optional, True required)
SECTIONS = {
    "area": (("area.json", "synth.json"), render_block_area, "make area and make synth", True),
    "bench": ("bench.json", render_bench, "make bench", False),
    "blocks": (("area.json", "synth.json"), render_area, "make area and make synth", None),
    "board": ("board.json", render_board, "make bitstream", None),
    "fmax": ("synth.json", render_fmax, "make synth", False),
    "goodput": ("bench.json", render_goodput, "make bench", None),
    "responder": ("bench.json", render_responder, "make bench", None),
}


def render(name, figures=FIGURES):
    """The section ``name`` (``KIND`` or ``KIND:ARG``) rendered from the records."""
    kind, _, arg = name.partition(":")
    if kind not in SECTIONS:
        raise ValueError(f"unknown figures section {name!r} (kinds: {', '.join(SECTIONS)})")
    fnames, fn, how, takes = SECTIONS[kind]
    if (takes is None and arg) or (takes is True and not arg):
        raise ValueError(f"figures section {name!r}: {kind} takes "
                         f"{'no argument' if takes is None else 'an argument'}")
    fnames = (fnames,) if isinstance(fnames, str) else fnames
    paths = [Path(figures) / f for f in fnames]
    missing = [f for f, p in zip(fnames, paths) if not p.exists()]
    if missing:
        return f"(no recorded measurement: `{how}` records {FIGURES / missing[0]})"
    return fn(*[json.loads(p.read_text()) for p in paths], *([arg] if arg else []))


#: Pages generated whole by a command of their own (no hand-written text to check).
GENERATED_PAGES = ("docs/registers.md", "docs/trace.md", "docs/host_memory_formats.md")


def pages(root="."):
    """The hand-written pages under ``root`` (the README and every page of docs/ not generated
    whole): those that may have figure sections (`make docs` renders them) and must have no
    measured figure outside them (tb/flow/test_docs.py)."""
    root = Path(root)
    docs = sorted(p.relative_to(root).as_posix() for p in (root / "docs").glob("*.md"))
    return ["README.md", *(p for p in docs if p not in GENERATED_PAGES)]


_SECTION_RE = re.compile(r"<!-- figures:(\S+) begin -->")

#: What a page may not write by hand: a number with a unit of area or clock (a measured figure
#: belongs in a rendered section). A number after an operator is a term of a formula
#: (``W + 2 flip-flops``); "LUT RAM" is a kind of memory, not a count of LUTs.
FIGURE_RE = re.compile(r"(?<![\w./])(?<![-+−×·*/] )\d[\d,]*(?:\.\d+)?\s*"
                       r"(?:MHz|GHz|LUT4-eqs?|LUT4s?|LUTs?|FFs?|flip-flops|DP16KDs?|DPR16X4s?"
                       r"|CCU2Cs?)(?![\w-])(?!\s+RAM)")

#: Generated text inside a hand-written page: the figure sections, the sections of the other
#: generators (``<!-- generated by ...: begin -->`` to ``<!-- generated: end -->``) and code.
_GENERATED_RE = re.compile(r"<!-- figures:(\S+) begin -->.*?<!-- figures:\1 end -->"
                           r"|<!-- generated by [^>]*: begin -->.*?<!-- generated: end -->"
                           r"|^```.*?^```", re.S | re.M)

#: A figure the design fixes shows its arithmetic in its own clause: the text from the clause's
#: start (after ``.``, ``;``, ``|`` or a blank line) to the figure has a ``×`` or a width in bits.
_CLAUSE_START = re.compile(r"\.\s|;|\||\n\s*\n")
_DERIVED_RE = re.compile(r"×|\b\d+ bits\b|\d+-bit\b")


def hand_figures(text, allow=()):
    """The measured figures written by hand in a page's ``text``: ``[(line number, figure)]``
    for each number with a unit of area or clock outside the generated sections and code blocks,
    unless its clause shows the arithmetic that fixes it (``8 × 27 bits = 216 flip-flops``) or
    it lies inside one of the phrases ``allow`` (a requirement, quoted; whitespace in a phrase
    matches any line break)."""
    blank = _GENERATED_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    spans = [m.span() for a in allow
             for m in re.finditer(r"\s+".join(map(re.escape, a.split())), blank)]
    out = []
    for m in FIGURE_RE.finditer(blank):
        a, b = m.span()
        if any(i <= a and b <= j for i, j in spans):
            continue
        starts = [c.end() for c in _CLAUSE_START.finditer(blank, 0, a)]
        if _DERIVED_RE.search(blank, starts[-1] if starts else 0, a):
            continue
        out.append((blank.count("\n", 0, a) + 1, " ".join(m.group(0).split())))
    return out


def _marks(name):
    return f"<!-- figures:{name} begin -->", f"<!-- figures:{name} end -->"


def section_names(text):
    """The names of the figure sections of a page, in order."""
    return _SECTION_RE.findall(text)


def update_readme(path, figures=FIGURES, check=False):
    """Re-render the figure sections of a page (the README, a docs page); return the names of
    those that differed (rewriting the file unless ``check``)."""
    path = Path(path)
    text = path.read_text()
    stale = []
    for name in dict.fromkeys(section_names(text)):
        begin, end = _marks(name)
        text, changed = replace_section(text, begin, end, "\n" + render(name, figures) + "\n",
                                        where=str(path))
        if changed:
            stale.append(name)
    if stale and not check:
        path.write_text(text)
    return stale


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rnic_flow.figures", description=__doc__.split(
        "\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for kind in ("area", "synth", "bench"):
        s = sub.add_parser(f"record-{kind}", help=f"record {kind} results into {FIGURES}")
        s.add_argument("src", nargs="+", help="JSON written by the measuring command")
    s = sub.add_parser("readme", help="re-render the figure sections of pages")
    s.add_argument("path", nargs="*", help="pages (default: every hand-written page)")
    s.add_argument("--check", action="store_true", help="only report stale sections (exit 1)")
    args = p.parse_args(argv)
    if args.cmd == "readme":
        any_stale = False
        for path in args.path or pages():
            stale = update_readme(path, check=args.check)
            any_stale |= bool(stale)
            verb = "stale" if args.check else "rewritten"
            print(f"{path}: {verb}: {', '.join(stale)}" if stale else f"{path}: current")
        return 1 if any_stale and args.check else 0
    loaded = [json.loads(Path(s).read_text()) for s in args.src]
    if args.cmd == "record-area":
        record_area(loaded[-1])
    elif args.cmd == "record-synth":
        record_synth([r for x in loaded for r in (x if isinstance(x, list) else [x])])
    else:
        record_bench([r for x in loaded for r in x])
    return 0


if __name__ == "__main__":
    sys.exit(main())
