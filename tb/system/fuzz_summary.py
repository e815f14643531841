"""Summary of fuzz campaign reports (``build/fuzz/<name>.json``, written by
tb/system/cocotb_fuzz.py).

    python -m tb.system.fuzz_summary [build/fuzz/long-*.json ...]   (default:
    build/fuzz/long-*.json)

Prints (and writes to ``build/fuzz/summary.md``) frames, wall time, frames per second, simulated
cycles, the drop reasons and every invariant with its number of checks and of violations.
"""
import json
import sys
from pathlib import Path

from sim.runner import ROOT   # the repository root (python -m tb.system.fuzz_summary)


def summarize(paths):
    runs = [(Path(p).stem, json.loads(Path(p).read_text())) for p in paths]
    lines = ["| run | frames | hostile | wall s | frames/s | sim cycles | cycles/s | "
             "invariant checks | violations |", "|---|---|---|---|---|---|---|---|---|"]
    tot = {"frames": 0, "hostile": 0, "wall_seconds": 0.0, "sim_cycles": 0,
           "invariant_checks": 0, "invariant_violations": 0}
    inv, reasons, kinds = {}, {}, {}
    for name, d in runs:
        lines.append(f"| {name} | {d['frames']:,} | {d['hostile']:,} | {d['wall_seconds']:,.0f} | "
                     f"{d['frames_per_second']:.1f} | {d['sim_cycles']:,} | "
                     f"{d['sim_cycles'] / max(d['wall_seconds'], 1e-9):,.0f} | "
                     f"{d.get('invariant_checks', 0):,} | {d.get('invariant_violations', 0)} |")
        for k in tot:
            tot[k] += d.get(k, 0)
        for k, v in d.get("invariants", {}).items():
            r = inv.setdefault(k, [0, 0])
            r[0] += v["checked"]
            r[1] += v["violated"]
        for k, v in d["by_reason"].items():
            reasons[k] = reasons.get(k, 0) + v
        for k, v in d["by_kind"].items():
            kinds[k] = kinds.get(k, 0) + v
    if len(runs) > 1:
        lines.append(f"| all | {tot['frames']:,} | {tot['hostile']:,} | "
                     f"{tot['wall_seconds']:,.0f} | "
                     f"{tot['frames'] / max(tot['wall_seconds'], 1e-9):.1f} | "
                     f"{tot['sim_cycles']:,} | "
                     f"{tot['sim_cycles'] / max(tot['wall_seconds'], 1e-9):,.0f} | "
                     f"{tot['invariant_checks']:,} | {tot['invariant_violations']} |")
    lines += ["", "| invariant | checks | violations |", "|---|---|---|"]
    lines += [f"| {k} | {c:,} | {v} |" for k, (c, v) in sorted(inv.items())]
    lines += ["", "frames by reference reason (0 = accepted or clean): " +
              ", ".join(f"{k}: {v:,}" for k, v in sorted(reasons.items())),
              "", "hostile frames by mutation: " +
              ", ".join(f"{k} {v:,}" for k, v in sorted(kinds.items()))]
    return "\n".join(lines) + "\n"


def main(argv):
    paths = argv or sorted(str(p) for p in (ROOT / "build" / "fuzz").glob("long-*.json"))
    if not paths:
        print("no fuzz reports found")
        return 0
    text = summarize(paths)
    print(text)
    (ROOT / "build" / "fuzz" / "summary.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
