"""The worst paths of a placed design, before routing: what nextpnr's placement estimate is made of.

``rnic paths PLACED.sdf [--freq MHz] [--paths N] [--json]`` (also run by ``rnic synth
--place-only``, which places without routing and writes ``paths.txt`` beside the logs).

After placement nextpnr prints one figure, the estimated Fmax, and names the path behind it only
after routing, which for the whole core takes longer than a session with the WebAssembly
nextpnr. With ``--no-route --sdf FILE`` nextpnr still writes an SDF, and for an unrouted net the
delay it writes is the placer's own prediction for that arc (``predictArcDelay``: the distance
between the two cells' tiles), the delay its estimate is computed from. This module reads that
SDF and does the same static timing analysis: every cell arc (``IOPATH``) and net arc
(``INTERCONNECT``) is an edge, a path starts at a clock-to-output arc (flip-flop ``Q``, block-RAM
``DO``) and ends at a port with a setup check, and the longest arrival is found by one pass in
topological order. Its worst path agrees with nextpnr's printed estimate (checked by
``tb/flow/test_placed.py`` on a placed block), and it lists the worst endpoints with every cell and
net on their paths, the logic and the route delay, the LUT levels, and how the failing endpoints
are spread over pairs of blocks.

The *block* of a cell is the first component of its hierarchical name
(:func:`rnic_flow.depth.block_of`); yosys names a LUT after a net it feeds, so the blocks along a
path are a guide and its two ends exact. One clock, ideal (no skew), as nextpnr's estimate for
an out-of-context design.
"""

import argparse
import collections
import json
import re
import sys
from pathlib import Path

from .depth import block_of

__all__ = ["parse_sdf", "placed_paths", "format_paths", "main_paths", "estimate_from_log",
           "register_of"]

_CLOCK_PORTS = {"CLK", "CLKA", "CLKB", "WCK"}
_TOKEN = re.compile(r'\(|\)|"[^"]*"|(?:\\.|[^\s()"])+')
_TRIPLE = re.compile(r"^\(?(-?[\d.]*):(-?[\d.]*):(-?[\d.]*)\)?$")
_ESC = re.compile(r"\\(.)")
_ESTIMATE = re.compile(r"Max frequency for clock\s+'([^']*)':\s+([\d.]+) MHz")


def _unescape(name):
    return _ESC.sub(r"\1", name)


def _split_pin(pin):
    """``cell/port`` with the SDF's escapes: split at the last unescaped ``/``."""
    i = len(pin) - 1
    while i >= 0:
        if pin[i] == "/" and (i == 0 or pin[i - 1] != "\\"):
            return _unescape(pin[:i]), _unescape(pin[i + 1:])
        i -= 1
    raise ValueError(f"SDF pin without a port: {pin!r}")


def _max_of(triple):
    m = _TRIPLE.match(triple)
    if not m:
        raise ValueError(f"SDF delay is not min:typ:max: {triple!r}")
    vals = [float(v) for v in m.groups() if v != ""]
    return max(vals) if vals else 0.0


def _sexpr(text):
    """The SDF as nested lists of tokens (a delay triple ``(a:b:c)`` kept as one token)."""
    stack = [[]]
    toks = _TOKEN.findall(text)
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "(":
            # "(a:b:c)" -> one token
            if i + 2 < len(toks) and toks[i + 2] == ")" and ":" in toks[i + 1]:
                stack[-1].append("(" + toks[i + 1] + ")")
                i += 3
                continue
            stack.append([])
        elif t == ")":
            done = stack.pop()
            if not stack:
                raise ValueError("SDF: unbalanced ')'")
            stack[-1].append(done)
        else:
            stack[-1].append(t)
        i += 1
    if len(stack) != 1:
        raise ValueError("SDF: unbalanced '('")
    return stack[0]


def parse_sdf(text):
    """The timing arcs of an SDF written by nextpnr (delays in ps, the max of min:typ:max).

    Returns ``{"celltype": {cell: type}, "iopath": [(cell, from, to, ps)],
    "setup": [(cell, port, ps)], "net": [(cell, port, cell, port, ps)], "timescale_ps": x}``.
    """
    tree = _sexpr(text)
    if not tree or not isinstance(tree[0], list) or tree[0][:1] != ["DELAYFILE"]:
        raise ValueError("not an SDF file (no DELAYFILE)")
    scale = 1.0
    out = {"celltype": {}, "iopath": [], "setup": [], "net": []}
    for item in tree[0][1:]:
        if not isinstance(item, list) or not item:
            continue
        if item[0] == "TIMESCALE":
            m = re.match(r"^([\d.]+)\s*(ps|ns)$", " ".join(item[1:]).replace(" ", ""))
            if not m:
                raise ValueError(f"SDF TIMESCALE not understood: {item[1:]}")
            scale = float(m.group(1)) * (1000.0 if m.group(2) == "ns" else 1.0)
        if item[0] != "CELL":
            continue
        ctype, inst, body = None, "", []
        for sub in item[1:]:
            if sub[0] == "CELLTYPE":
                ctype = sub[1].strip('"')
            elif sub[0] == "INSTANCE":
                inst = _unescape(sub[1]) if len(sub) > 1 else ""
            else:
                body.append(sub)
        if inst:
            out["celltype"][inst] = ctype
        for sec in body:
            for blk in sec[1:]:
                if not isinstance(blk, list):
                    continue
                for arc in blk[1:] if blk[0] in ("ABSOLUTE", "INCREMENT") else [blk]:
                    if not isinstance(arc, list) or not arc:
                        continue
                    if arc[0] == "IOPATH":
                        out["iopath"].append((inst, arc[1], arc[2], _max_of(arc[3]) * scale))
                    elif arc[0] == "INTERCONNECT":
                        fc, fp = _split_pin(arc[1])
                        tc, tp = _split_pin(arc[2])
                        out["net"].append((fc, fp, tc, tp, _max_of(arc[3]) * scale))
                    elif arc[0] == "SETUPHOLD" and sec[0] == "TIMINGCHECK":
                        port = arc[1][1] if isinstance(arc[1], list) else arc[1]
                        out["setup"].append((inst, port, _max_of(arc[3]) * scale))
    out["timescale_ps"] = scale
    return out


def placed_paths(sdf, *, freq_mhz=156.25, paths=10):
    """Static timing of a placed (or routed) design from its SDF.

    ``sdf`` is :func:`parse_sdf`'s result, the SDF text, or its path. Returns a dict:
    ``worst_ns`` (the longest register-to-register delay with setup), ``fmax_mhz``,
    ``endpoints``, ``failing`` (endpoints with negative slack at ``freq_mhz``), ``paths``
    (the worst path of each of the ``paths`` worst (start register, end register) pairs,
    :func:`register_of`: ``segments`` of ``(kind, cell, port, ps)``
    with kind ``clk-q``, ``cell``, ``net`` or ``setup``, and ``logic_ns``, ``route_ns``,
    ``levels``, ``start``, ``end``, ``blocks``), ``by_blocks`` (failing endpoints counted by
    (start block, end block) of their worst path), ``histogram`` (endpoints by slack, 1 ns
    bins) and ``unordered`` (pins on or behind a combinational loop, left out).
    """
    if isinstance(sdf, (str, Path)) and not str(sdf).lstrip().startswith("(DELAYFILE"):
        sdf = Path(sdf).read_text()
    if isinstance(sdf, str):
        sdf = parse_sdf(sdf)
    g = _Timing(sdf, 1e6 / float(freq_mhz))
    ends = g.endpoints()
    by_blocks, hist, regs, failing = g.tally(ends)
    worst = ends[0][0] if ends else 0.0
    # the worst endpoint of each (start register, end register) pair, so that the list is not
    # the 64 bits of one register
    listed, seen = [], set()
    for _, v, s in ends:
        if len(listed) >= paths:
            break
        key = (register_of(g.start_of(v)), register_of(g.names[v][0]))
        if key not in seen:
            seen.add(key)
            listed.append(g.trace(v, s))
    return {"freq_mhz": float(freq_mhz), "worst_ns": round(worst / 1000, 3),
            "fmax_mhz": round(1e6 / worst, 2) if worst > 0 else None,
            "endpoints": len(ends), "failing": failing,
            "paths": listed,
            "by_blocks": [(a, b, n) for (a, b), n in by_blocks.most_common()],
            "by_registers": [(a, b, round(t / 1000, 3), n) for (a, b), (t, n) in
                             sorted(regs.items(), key=lambda kv: -kv[1][0])][:max(paths, 40)],
            "histogram": sorted(hist.items()), "unordered": g.unordered}


class _Timing:
    """The timing graph of a parsed SDF (nodes: (cell, port) pins; edges: cell and net arcs)
    with the longest arrival at every pin, for a clock period of ``period`` ps."""

    def __init__(self, sdf, period):
        self.sdf, self.period = sdf, period
        self.idx, self.names = {}, []
        self.succ = collections.defaultdict(list)
        self.start = {}
        for cell, frm, to, d in sdf["iopath"]:
            v = self.node(cell, to)
            if frm in _CLOCK_PORTS:
                if d > self.start.get(v, -1.0):
                    self.start[v] = d
            else:
                u = self.node(cell, frm)
                self.succ[u].append((v, d, "cell"))
        for fc, fp, tc, tp, d in sdf["net"]:
            if tp in _CLOCK_PORTS:
                continue
            self.succ[self.node(fc, fp)].append((self.node(tc, tp), d, "net"))
        self._arrivals()

    def node(self, cell, port):
        k = (cell, port)
        n = self.idx.get(k)
        if n is None:
            n = self.idx[k] = len(self.names)
            self.names.append(k)
        return n

    def _arrivals(self):
        """The longest arrival ``arr`` and its predecessor ``pred`` at every pin, one pass in
        topological order; ``unordered``: the pins the pass never reached."""
        succ = self.succ
        n_nodes = len(self.names)
        indeg = [0] * n_nodes
        for u, outs in succ.items():
            for v, _, _ in outs:
                indeg[v] += 1
        arr = [float("-inf")] * n_nodes
        pred = [None] * n_nodes
        for v, d in self.start.items():
            arr[v] = d
        order = [u for u in range(n_nodes) if indeg[u] == 0]
        seen = 0
        while order:
            u = order.pop()
            seen += 1
            au = arr[u]
            for v, d, kind in succ.get(u, ()):
                if au != float("-inf") and au + d > arr[v]:
                    arr[v] = au + d
                    pred[v] = (u, d, kind)
                indeg[v] -= 1
                if indeg[v] == 0:
                    order.append(v)
        self.arr, self.pred, self.unordered = arr, pred, n_nodes - seen

    def endpoints(self):
        """``[(arrival + setup, pin, setup)]``, one per endpoint, the latest first."""
        ends = []
        for cell, port, setup in self.sdf["setup"]:
            v = self.idx.get((cell, port))
            if v is None or self.arr[v] == float("-inf"):
                continue
            ends.append((self.arr[v] + setup, v, setup))
        # one entry per endpoint (a port has a check per edge): keep the largest
        best = {}
        for t, v, s in ends:
            if v not in best or t > best[v][0]:
                best[v] = (t, s)
        return sorted(((t, v, s) for v, (t, s) in best.items()), reverse=True)

    def trace(self, v, setup):
        """The worst path into pin ``v``: its segments, delays, levels and blocks."""
        names, pred = self.names, self.pred
        segs = [("setup", *names[v], setup)]
        while pred[v] is not None:
            u, d, kind = pred[v]
            segs.append((kind, *names[v], d))
            v = u
        segs.append(("clk-q", *names[v], self.start.get(v, 0.0)))
        segs.reverse()
        logic = sum(s[3] for s in segs if s[0] in ("clk-q", "cell", "setup"))
        route = sum(s[3] for s in segs if s[0] == "net")
        ctypes = self.sdf["celltype"]
        levels = sum(1 for s in segs if s[0] == "cell" and ctypes.get(s[1]) == "TRELLIS_COMB"
                     and s[2] == "F")
        blocks = []
        for s in segs:
            b = block_of(s[1])
            if not blocks or blocks[-1] != b:
                blocks.append(b)
        return {"delay_ns": round((logic + route) / 1000, 3), "slack_ns":
                round((self.period - logic - route) / 1000, 3),
                "logic_ns": round(logic / 1000, 3), "route_ns": round(route / 1000, 3),
                "levels": levels, "start": segs[0][1], "end": f"{segs[-1][1]}/{segs[-1][2]}",
                "blocks": blocks,
                "segments": [(k, c, p, round(d / 1000, 3)) for k, c, p, d in segs]}

    def start_of(self, v):
        """The cell the worst path into pin ``v`` starts at."""
        while self.pred[v] is not None:
            v = self.pred[v][0]
        return self.names[v][0]

    def tally(self, ends):
        """The failing endpoints counted by (start block, end block) and by (start register,
        end register) with the worst arrival, the slack histogram, and how many fail."""
        by_blocks = collections.Counter()
        hist = collections.Counter()
        regs = {}            # (start register, end register) -> [worst ps, endpoints failing]
        failing = 0
        for t, v, _ in ends:
            slack = self.period - t
            hist[int((slack // 1000))] += 1
            if slack < 0:
                failing += 1
                src = self.start_of(v)
                by_blocks[(block_of(src), block_of(self.names[v][0]))] += 1
                key = (register_of(src), register_of(self.names[v][0]))
                if key not in regs:
                    regs[key] = [t, 0]
                regs[key][1] += 1
        return by_blocks, hist, regs, failing


_BIT = re.compile(r"(_TRELLIS_FF_Q|_TRELLIS_FF)(_\d+)?$|(\$DPRAM_COMB\d|\$RAMW)$")
_SLICE = re.compile(r"(\.\d+)+(_DO[AB]\d+)?$|\[\d+\]$")


def register_of(cell):
    """The register or memory a cell is part of: yosys names bit k of a register
    ``<reg>_TRELLIS_FF_Q_<k>`` and the pieces of a memory ``<mem>.<i>.<j>`` (nextpnr adds
    ``$DPRAM_COMB<n>`` to a LUT RAM's, and a block RAM's output flops are named after its
    ``DO`` pins); other cells as they are."""
    return _SLICE.sub("", _BIT.sub("", cell))


def estimate_from_log(text):
    """nextpnr's last printed Fmax (``Max frequency for clock 'c': X MHz``), or ``None``."""
    found = _ESTIMATE.findall(text)
    return float(found[-1][1]) if found else None


def format_paths(res, *, segments=True, pairs=15):
    """A text report of :func:`placed_paths`."""
    lines = [f"worst register-to-register delay {res['worst_ns']:.2f} ns "
             f"(Fmax {res['fmax_mhz']} MHz); {res['failing']} of {res['endpoints']} endpoints "
             f"fail {res['freq_mhz']:g} MHz"]
    if res["unordered"]:
        lines.append(f"({res['unordered']} pins on combinational loops left out)")
    lines.append("")
    lines.append("slack histogram (ns, endpoints): " + ", ".join(
        f"[{k},{k + 1}): {n}" for k, n in res["histogram"]))
    if res["by_blocks"]:
        lines.append("")
        lines.append("failing endpoints by block of start -> end (of each endpoint's worst path):")
        for a, b, n in res["by_blocks"][:pairs]:
            lines.append(f"  {n:7d}  {a} -> {b}")
    if res.get("by_registers"):
        lines.append("")
        lines.append("failing (start register, end register) pairs, worst first "
                     "(delay of the worst endpoint, failing endpoints):")
        for a, b, t, n in res["by_registers"]:
            lines.append(f"  {t:7.2f} ns {n:5d}  {a} -> {b}")
    for i, p in enumerate(res["paths"], 1):
        lines.append("")
        lines.append(f"#{i}: {p['delay_ns']:.2f} ns (slack {p['slack_ns']:+.2f}), logic "
                     f"{p['logic_ns']:.2f} + route {p['route_ns']:.2f}, {p['levels']} LUT levels, "
                     f"{' -> '.join(p['blocks'])}")
        lines.append(f"    from {p['start']}")
        lines.append(f"    to   {p['end']}")
        if segments:
            t = 0.0
            for kind, cell, port, d in p["segments"]:
                t += d
                lines.append(f"    {t:7.2f} {d:+6.2f}  {kind:5s} {cell}/{port}")
    return "\n".join(lines) + "\n"


def main_paths(argv=None):
    ap = argparse.ArgumentParser(
        prog="rnic paths",
        description="The worst register-to-register paths of a placed design, from the SDF "
                    "nextpnr writes with --no-route --sdf FILE (the delays its placement "
                    "estimate uses). rnic synth --place-only runs it.")
    ap.add_argument("sdf", type=Path)
    ap.add_argument("--freq", type=float, default=156.25, help="target clock in MHz")
    ap.add_argument("--paths", type=int, default=10, help="worst endpoints to list")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    if not a.sdf.exists():
        ap.error(f"{a.sdf}: no such file")
    res = placed_paths(a.sdf.read_text(), freq_mhz=a.freq, paths=a.paths)
    sys.stdout.write(json.dumps(res, indent=1) + "\n" if a.json else format_paths(res))
    return 0
