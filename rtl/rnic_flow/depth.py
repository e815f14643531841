"""Register-to-register logic depth of a ``synth_ecp5`` netlist: timing before placement.

``rnic depth NETLIST.json [--top rnic] [--paths N] [--area] [--json]`` (also run by ``rnic synth
--target ecp5`` on every netlist it makes, written to ``depth.txt`` beside the logs, with the
area report). ``--area`` adds the cells per block and the memories in LUT RAM and block RAM
(:func:`area_by_block`): it is how the shadow table of the requester context was found in
LUT RAM, 43 % of the core's, spread over nearly every RAM-capable slice of the chip.

Place and route of the whole core takes hours with the WebAssembly nextpnr; this reads the
yosys netlist in seconds and tells which register-to-register paths are long, and between
which blocks, so a change can be judged before it is placed. It is a model, not a timing
analysis: every path is measured in *LUT levels*, one per ``LUT4`` (the cell and the net
after it), with these weights for the other ECP5 cells:

=====================  ======================================  ======
cell                   arc                                     levels
=====================  ======================================  ======
``TRELLIS_FF``         clock to ``Q`` (a path's start)           0.5
``DP16KD``             clock to ``DO`` (no output register)      3.5
``DP16KD``             clock to ``DO`` (``OUTREG``)              0.5
``LUT4``               any input to ``Z``                        1.0
``PFUMX``              ``ALUT``/``BLUT`` / ``C0`` to ``Z``       0.3 / 0.6
``L6MUX21``            ``D0``/``D1`` / ``SD`` to ``Z``           0.3 / 0.6
``CCU2C``              ``A``..``D`` to ``S``/``COUT``            1.0
``CCU2C``              ``CIN`` to ``COUT`` / ``S0`` / ``S1``     0.06 / 0.3 / 0.35
``TRELLIS_DPR16X4``    read address ``RAD`` to ``DO``            1.0
=====================  ======================================  ======

A path ends at a flip-flop's ``DI``/``CE``/``LSR``, a block RAM's inputs or a LUT RAM's write
inputs; a module input starts one at 0. Calibration on this design (ECP5-85 speed 8, router1):
the requester alone, deepest path 10.9 levels, routes at 102 MHz (≈ 0.9 ns a level); the
whole core, deepest 12.9, was placed at an estimated 48.95 MHz (≈ 1.6 ns a level: the same
logic spread over 72 % of the device). 156.25 MHz (6.4 ns) needs ≈ 6 levels in a block alone.

The *block* of a cell is the first component of its hierarchical name, the first two in a layer
of the top (:data:`rnic_flow.budgets.LAYER_PATHS`; yosys names a flattened cell after the net it
drives, ``resp.execute.pool_rd__addr_TRELLIS_FF_Q``: block ``resp.execute``); a path whose start and
end are in different blocks is *cross-block*. yosys names the LUTs of a path after one of the
nets they feed, so the blocks named along a path are a guide, its two ends exact.
"""

import argparse
import collections
import json
import sys
from pathlib import Path

from .budgets import LAYER_PATHS

__all__ = ["logic_depth", "area_by_block", "format_depth", "format_area", "main_depth",
           "DEEP_LEVELS"]

#: Endpoints at this many levels or more are counted as ``deep`` in the summary.
DEEP_LEVELS = 8

_SRC = {"TRELLIS_FF": 0.5, "DP16KD": 3.5}
_CLOCKS = {"CLK", "CLKA", "CLKB", "WCK"}
_CCU_IN = ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1")
_ARCS = {
    "LUT4": {"Z": [(p, 1.0) for p in "ABCD"]},
    "PFUMX": {"Z": [("ALUT", 0.3), ("BLUT", 0.3), ("C0", 0.6)]},
    "L6MUX21": {"Z": [("D0", 0.3), ("D1", 0.3), ("SD", 0.6)]},
    "CCU2C": {"S0": [(p, 1.0) for p in _CCU_IN[:4]] + [("CIN", 0.3)],
              "S1": [(p, 1.0) for p in _CCU_IN] + [("CIN", 0.35)],
              "COUT": [(p, 1.0) for p in _CCU_IN] + [("CIN", 0.06)]},
    "TRELLIS_DPR16X4": {"DO": [("RAD", 1.0)]},
}


def _source_levels(cell, cell_type, port):
    """The levels at a source cell's output: a DP16KD data-out pin of a port with its output
    register on (``REGMODE_x`` ``OUTREG``, :mod:`rnic_flow.outreg`) starts like a flip-flop."""
    if (cell_type == "DP16KD" and port[:2] == "DO"
            and str(cell.get("parameters", {}).get(f"REGMODE_{port[2]}", "")).strip() == "OUTREG"):
        return _SRC["TRELLIS_FF"]
    return _SRC[cell_type]


def _base(cell_type):
    # yosys names parameterised copies "$paramod$<hash>\TRELLIS_FF"
    return cell_type.rsplit("\\", 1)[-1]


def block_of(name):
    """The block a cell or net belongs to: the first component of its hierarchical name, the
    first two when the first is a layer (``resp.psn_check``; a layer's own nets: the layer)."""
    name = name.lstrip("\\")
    if "." not in name:
        return "(top)"
    first, rest = name.split(".", 1)
    if first in LAYER_PATHS and "." in rest:
        return f"{first}.{rest.split('.', 1)[0]}"
    return first


def logic_depth(netlist, top, *, paths=10, deep=DEEP_LEVELS):
    """Longest register-to-register paths of ``top`` in a ``synth_ecp5`` JSON netlist.

    ``netlist`` is the parsed JSON or the path of the file. Returns a dict:

    ``max_levels``
        the deepest endpoint, in LUT levels (see the module docstring for the weights);
    ``endpoints``, ``deep``
        how many endpoints there are, and how many are at ``deep`` levels or more;
    ``histogram``
        ``{levels rounded down: endpoints}``;
    ``blocks``
        ``{sink block: (endpoints at deep levels or more, deepest)}``, most deep ones first;
    ``pairs``
        ``[(levels, source block, sink block)]``, the deepest path between each pair of
        different blocks, deepest first (a path from a module input has the source block
        ``(input)``);
    ``paths``
        the ``paths`` deepest endpoints (one per source and sink register), each
        ``{"levels", "source", "sink", "nets"}`` with the named nets along the way.

    A combinational loop (none in this design) is cut where the search meets it again.
    """
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    mod = netlist["modules"][top]
    cells = mod.get("cells", {})
    names = _bit_names(mod)
    arrival = _Arrivals(cells)
    ends = []
    for cn, c in cells.items():
        t = _base(c["type"])
        if t not in _SRC and t != "TRELLIS_DPR16X4":
            continue
        dirs = c.get("port_directions", {})
        for p, bits in c["connections"].items():
            if dirs.get(p) != "input" or p in _CLOCKS or (t == "TRELLIS_DPR16X4" and p == "RAD"):
                continue
            for b in bits:
                if isinstance(b, int):
                    arrival.solve(b, names)
                    a = arrival[b]
                    if a is not None:
                        ends.append((a[0], cn, p, b))
    ends.sort(key=lambda e: -e[0])
    hist = collections.Counter(int(a) for a, *_ in ends)
    pairs, by_block = _by_blocks(ends, arrival, deep)
    return {
        "max_levels": round(ends[0][0], 2) if ends else 0.0,
        "endpoints": len(ends),
        "deep": sum(1 for a, *_ in ends if a >= deep),
        "deep_levels": deep,
        "histogram": dict(sorted(hist.items())),
        "blocks": dict(sorted(by_block.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))),
        "pairs": sorted(((round(v, 2), s, d) for (s, d), v in pairs.items()),
                        key=lambda x: (-x[0], x[1], x[2])),
        "paths": _deepest_paths(ends, arrival, names, paths),
    }


def _bit_names(mod):
    """``{bit: net name}`` of a netlist module: per bit the shortest visible name."""
    names = {}
    for n, v in mod.get("netnames", {}).items():
        for i, b in enumerate(v["bits"]):
            if not isinstance(b, int):
                continue
            label = f"{n}[{i}]" if len(v["bits"]) > 1 else n
            old = names.get(b)
            if old is None or (not v.get("hide_name") and len(label) < len(old)):
                names[b] = label
    return names


class _Arrivals(dict):
    """``{bit: (levels, previous bit on the path or None, source name)}``, filled by
    :meth:`solve` (None for a bit on the search's stack: a loop stops there)."""

    def __init__(self, cells):
        super().__init__()
        self.cells = cells
        self.driver = {}
        for cn, c in cells.items():
            dirs = c.get("port_directions", {})
            for p, bits in c["connections"].items():
                if dirs.get(p) == "output":
                    for b in bits:
                        if isinstance(b, int):
                            self.driver[b] = (cn, p)

    def inputs_of(self, b):
        cn, p = self.driver[b]
        c = self.cells[cn]
        for ip, dl in _ARCS[_base(c["type"])][p]:
            for ib in c["connections"].get(ip, []):
                if isinstance(ib, int):
                    yield ib, dl

    def solve(self, bit, names):
        """The arrival at ``bit`` and every bit behind it (``names``: for a module input)."""
        # iterative depth-first search (carry chains are thousands deep)
        arrival, driver, cells = self, self.driver, self.cells
        stack = [(bit, False)]
        while stack:
            b, expanded = stack.pop()
            if b in arrival and not expanded:
                continue
            if b not in driver:
                arrival[b] = (0.0, None, "input " + names.get(b, str(b)))
                continue
            cn, p = driver[b]
            t = _base(cells[cn]["type"])
            if t in _SRC:
                arrival[b] = (_source_levels(cells[cn], t, p), None, cn)
                continue
            if t not in _ARCS or p not in _ARCS[t]:
                arrival[b] = (0.0, None, cn)      # an unknown cell starts a path
                continue
            if not expanded:
                arrival[b] = None                 # on the stack: a loop stops here
                stack.append((b, True))
                for ib, _ in self.inputs_of(b):
                    if ib not in arrival:
                        stack.append((ib, False))
                continue
            best = (0.0, None, cn)
            for ib, dl in self.inputs_of(b):
                a = arrival.get(ib)
                if a is not None and a[0] + dl > best[0]:
                    best = (a[0] + dl, ib, a[2])
            arrival[b] = best


def _by_blocks(ends, arrival, deep):
    """The deepest path between each pair of different blocks, and per sink block the
    endpoints at ``deep`` levels or more with the deepest."""
    pairs = {}
    for a, cn, p, b in ends:
        src = arrival[b][2]
        key = ("(input)" if src.startswith("input ") else block_of(src), block_of(cn))
        if key[0] != key[1] and key not in pairs:
            pairs[key] = a
    by_block = {}
    for a, cn, p, b in ends:
        n, worst = by_block.get(block_of(cn), (0, 0.0))
        by_block[block_of(cn)] = (n + (a >= deep), max(worst, round(a, 2)))
    return pairs, by_block


def _deepest_paths(ends, arrival, names, paths):
    """The ``paths`` deepest endpoints, one per source and sink, with the nets along each."""
    out_paths, seen = [], set()
    for a, cn, p, b in ends:
        if len(out_paths) >= paths:
            break
        src = arrival[b][2]
        if (src, cn) in seen:
            continue
        seen.add((src, cn))
        nets, x = [], b
        while x is not None:
            nets.append(names.get(x, str(x)))
            x = arrival[x][1]
        out_paths.append({"levels": round(a, 2), "source": src, "sink": f"{cn}.{p}",
                          "nets": nets[::-1]})
    return out_paths


def _memory_of(cell_name):
    """The memory a mapped RAM cell belongs to: ``req.req_context.table.0.222`` ->
    ``req.req_context.table``
    (yosys names each piece ``<memory>.<row>.<column>``)."""
    parts = cell_name.lstrip("\\").split(".")
    while len(parts) > 1 and parts[-1].isdigit():
        parts.pop()
    return ".".join(parts)


def area_by_block(netlist, top):
    """Cells of ``top`` counted per block, and the memories in LUT RAM and block RAM.

    Returns ``{"blocks": {block: {"lut4", "lut_ram", "carry", "ff", "ebr", "lut4_eq"}},
    "lut_ram": {memory: TRELLIS_DPR16X4 count}, "ebr": {memory: DP16KD count}}``, blocks
    largest first. ``lut_ram`` counts ``TRELLIS_DPR16X4`` cells (16 words x 4 bits: four
    LUTs of a RAM-capable slice pair each); ``lut4_eq`` = LUT4 + 4 per LUT RAM + 2 per
    ``CCU2C``, the figure ``rnic synth`` reports. LUT RAM can sit only in the A/B slices of
    a logic block, so a large one is spread over the chip and pulls its address, data and
    read multiplexers with it: a list of where it goes is the first thing to read when a
    placement is congested.
    """
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    cells = netlist["modules"][top].get("cells", {})
    from .synth import area_from_cells      # the LUT4-eq formula of `rnic synth`, not a copy
    blocks = collections.defaultdict(collections.Counter)
    lut_ram, ebr = collections.Counter(), collections.Counter()
    for cn, c in cells.items():
        t = _base(c["type"])
        blocks[block_of(cn)][t] += 1
        if t == "TRELLIS_DPR16X4":
            lut_ram[_memory_of(cn)] += 1
        elif t == "DP16KD":
            ebr[_memory_of(cn)] += 1
    out = {}
    for name, b in blocks.items():
        lut4_eq, ff, bram, _dsp = area_from_cells("ecp5", b)
        out[name] = {"lut4": b["LUT4"], "lut_ram": b["TRELLIS_DPR16X4"], "carry": b["CCU2C"],
                     "ff": ff, "ebr": bram, "lut4_eq": lut4_eq}
    order = sorted(out, key=lambda k: (-out[k]["lut4_eq"], -out[k]["ff"], k))
    return {"blocks": {k: out[k] for k in order},
            "lut_ram": dict(sorted(lut_ram.items(), key=lambda kv: (-kv[1], kv[0]))),
            "ebr": dict(sorted(ebr.items(), key=lambda kv: (-kv[1], kv[0])))}


def format_area(a, *, rows=20):
    """The text report of :func:`area_by_block`."""
    out = ["cells by block (LUT4-eq = LUT4 + 4 per LUT RAM + 2 per carry):",
           f"  {'block':24s} {'LUT4-eq':>8s} {'LUT4':>7s} {'LUT RAM':>7s} {'carry':>6s} "
           f"{'FF':>7s} {'EBR':>4s}"]
    tot = collections.Counter()
    for name, r in a["blocks"].items():
        tot.update(r)
    for name, r in list(a["blocks"].items())[:rows] + [("total", tot)]:
        out.append(f"  {name:24s} {r['lut4_eq']:8d} {r['lut4']:7d} {r['lut_ram']:7d} "
                   f"{r['carry']:6d} {r['ff']:7d} {r['ebr']:4d}")
    n = sum(a["lut_ram"].values())
    out += ["", f"memories in LUT RAM (TRELLIS_DPR16X4 cells, {n} in all, largest first):"]
    out += [f"  {v:6d}  {k}" for k, v in list(a["lut_ram"].items())[:rows]]
    out += ["", f"memories in block RAM (DP16KD, {sum(a['ebr'].values())} in all):"]
    out += [f"  {v:6d}  {k}" for k, v in list(a["ebr"].items())[:rows]]
    return "\n".join(out) + "\n"


def format_depth(d, *, pairs=25):
    """The text report of :func:`logic_depth`."""
    out = [f"deepest endpoint: {d['max_levels']:.1f} LUT levels; {d['deep']} of "
           f"{d['endpoints']} endpoints at >= {d['deep_levels']} levels", "",
           "endpoints by depth (levels: count):"]
    out += [f"  {k:3d}: {v}" for k, v in d["histogram"].items()]
    out += ["", f"by block of the endpoint (endpoints at >= {d['deep_levels']} levels, deepest):"]
    out += [f"  {b:24s} {n:6d}  {top:5.1f}" for b, (n, top) in d["blocks"].items() if n][:pairs]
    out += ["", "deepest path between two blocks (levels, source -> sink):"]
    out += [f"  {a:5.1f}  {s} -> {t}" for a, s, t in d["pairs"][:pairs]]
    out += ["", "deepest paths:"]
    for p in d["paths"]:
        out.append(f"  {p['levels']:5.1f}  {p['source']} -> {p['sink']}")
        out += [f"           {n[:120]}" for n in p["nets"]]
    return "\n".join(out) + "\n"


def main_depth(argv=None):
    """``rnic depth`` (argv without the ``depth`` word). Returns the exit status."""
    p = argparse.ArgumentParser(
        prog="rnic depth",
        description="Register-to-register logic depth (LUT levels) of a synth_ecp5 JSON "
                    "netlist, and the deepest paths between blocks.")
    p.add_argument("netlist", help="yosys write_json netlist (rnic synth leaves one in "
                                   "build/synth/<run>/<top>.json)")
    p.add_argument("--top", default=None, help="top module (default: the netlist's top)")
    p.add_argument("--paths", type=int, default=10, help="deepest paths to show (default 10)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--area", action="store_true",
                   help="also count the cells per block and list the memories in LUT RAM and "
                        "block RAM")
    args = p.parse_args(argv)
    data = json.loads(Path(args.netlist).read_text())
    top = args.top
    if top is None:
        # yosys writes attributes as binary strings ("000...01")
        tops = [m for m, v in data["modules"].items()
                if "1" in str(v.get("attributes", {}).get("top", ""))]
        if len(tops) != 1:
            print(f"rnic depth: error: name the top module with --top (found {tops or 'none'})",
                  file=sys.stderr)
            return 2
        top = tops[0]
    if top not in data["modules"]:
        print(f"rnic depth: error: no module {top!r} in {args.netlist}", file=sys.stderr)
        return 2
    d = logic_depth(data, top, paths=args.paths)
    if args.area:
        a = area_by_block(data, top)
        if args.json:
            d = dict(d, area=a)
    print(json.dumps(d, indent=1) if args.json else format_depth(d).rstrip("\n"))
    if args.area and not args.json:
        print()
        print(format_area(a).rstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main_depth())
