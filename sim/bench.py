"""Benchmarks: cycle-accurate figures from simulation, written to build/bench.json.

A benchmark is a cocotb test that measures cycles and calls :func:`record` for each figure,
with the figure's physical limit beside it (one beat per cycle, the packet rate the wire
allows). :func:`run_benches` runs the registered benchmarks (Verilator by default), merges the
figures into ``build/bench.json`` and prints the table. A benchmark never fails because a
machine is slow: it counts clock cycles, not seconds, and a figure below its target is reported,
not raised. Only a broken benchmark (no figure, or a figure above its physical limit) fails.

    # inside a cocotb test
    from sim.bench import record
    record("rx_parse", "beats/cycle, back-to-back 60-byte frames", 0.98, limit=1.0,
           config={"W": 64})
"""

import json
from pathlib import Path

from .knobs import knob

__all__ = ["record", "BENCH_ENV", "RDLAT_ENV", "read_latency", "load", "merge", "table",
           "run_benches", "BENCHES"]

#: the knob naming the file a benchmark's figures go to
BENCH_ENV = "RNIC_BENCH_OUT"
#: the knob giving the cycles of host read latency a benchmark runs with (0 = zero-wait host
#: memory); every figure it records carries ``rd_latency`` in its config
RDLAT_ENV = "RNIC_BENCH_READ_LATENCY"


def read_latency():
    """The host read latency the running benchmark asks for ($RNIC_BENCH_READ_LATENCY)."""
    return knob(RDLAT_ENV)


ROOT = Path(__file__).resolve().parent.parent


def record(block, figure, value, *, limit=None, unit="", config=None, target=None):
    """Record one figure (called from a cocotb test). Appends a JSON line to $RNIC_BENCH_OUT;
    without that variable (a plain test run) it only logs."""
    config = dict(config or {})
    if read_latency():
        config.setdefault("rd_latency", read_latency())
    row = {"block": block, "figure": figure, "value": round(float(value), 4), "unit": unit,
           "limit": limit, "target": target, "config": config}
    path = knob(BENCH_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    try:
        import cocotb
        cocotb.log.info("bench %s: %s = %s %s (limit %s)", block, figure, row["value"], unit,
                        limit)
    except Exception:
        pass
    return row


def load(path):
    p = Path(path)
    return json.loads(p.read_text()) if p.exists() else []


def merge(rows, new):
    """``rows`` updated by ``new`` (:func:`rnic_flow.figures.merge_bench`)."""
    from rnic_flow.figures import merge_bench
    return merge_bench(rows, new)


def table(rows):
    """The figures as Markdown (:func:`rnic_flow.figures.render_bench`, as docs/bench.md)."""
    from rnic_flow.figures import render_bench
    return render_bench(rows) + "\n"


#: name -> callable(simulator, out_path) running one benchmark (registered by sim.benches)
BENCHES = {}


def run_benches(names=None, simulator="verilator", out_dir=None, on_figures=None):
    """Run benchmarks, merge their figures into build/bench.json, write build/bench.md.

    ``on_figures``, when given, is called with the figures this run measured (not those merged
    from earlier runs); ``rnic bench --record`` records them."""
    from . import benches  # noqa: F401  (registers BENCHES)
    out_dir = Path(out_dir or ROOT / "build")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = names or list(BENCHES)
    new = []
    for name in names:
        if name not in BENCHES:
            raise KeyError(f"no benchmark {name!r} (have: {', '.join(BENCHES)})")
        lines = out_dir / f"bench-{name}.jsonl"
        lines.unlink(missing_ok=True)
        print(f"bench: {name} ...", flush=True)
        BENCHES[name](simulator, lines)
        got = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
        if not got:
            raise RuntimeError(f"benchmark {name} recorded no figure")
        new += got
    if on_figures is not None:
        on_figures(new)
    rows = merge(load(out_dir / "bench.json"), new)
    (out_dir / "bench.json").write_text(json.dumps(rows, indent=1) + "\n")
    md = table(rows)
    (out_dir / "bench.md").write_text(md)
    print(md, end="")
    return rows
