"""The installed ``rnic`` command: the hardware's ``generate`` and ``regmap``
(:mod:`rnic.cli`) and the flow's ``synth``, ``depth``, ``paths``, ``area`` and ``bench``."""

import argparse
import sys

from rnic import cli as hw_cli

__all__ = ["main", "COMMANDS"]


def _synth(argv):
    try:
        from .synth import main_synth
    except ImportError as e:
        print(f"rnic: error: the synthesis flow is not available ({e})", file=sys.stderr)
        return 2
    return main_synth(argv)


def _bench(argv):
    p = argparse.ArgumentParser(prog="rnic bench",
                                description="Cycle-accurate benchmarks from simulation; figures "
                                            "to build/bench.json and build/bench.md.")
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument("--sim", default="verilator", choices=("verilator", "icarus"))
    p.add_argument("--list", action="store_true", help="list the benchmarks")
    p.add_argument("--record", action="store_true",
                   help="also merge the figures into docs/figures/bench.json, the record the "
                        "README's throughput and latency tables are rendered from")
    args = p.parse_args(argv)
    import os
    sys.path.insert(0, os.getcwd())
    try:
        from sim.bench import BENCHES, run_benches
        import sim.benches  # noqa: F401
    except ImportError as e:
        print(f"rnic: error: run `rnic bench` from the repository root ({e})", file=sys.stderr)
        return 2
    if args.list:
        print("\n".join(BENCHES))
        return 0
    from .figures import record_bench
    run_benches(args.names or None, simulator=args.sim,
                on_figures=record_bench if args.record else None)
    return 0


def _depth(argv):
    from .depth import main_depth
    return main_depth(argv)


def _paths(argv):
    from .placed import main_paths
    return main_paths(argv)


def _area(argv):
    from .area import main_area
    return main_area(argv)


COMMANDS = {
    **hw_cli.COMMANDS,
    "synth": (_synth, "synthesize on ECP5 / iCE40 / xc7 and report area and Fmax"),
    "depth": (_depth, "logic depth (LUT levels) of a synth_ecp5 netlist, deepest paths"),
    "paths": (_paths, "worst paths of a placed design from nextpnr's SDF (its placement estimate)"),
    "area": (_area, "ECP5 area per block (hierarchy kept) against rtl/rnic_flow/budgets.py"),
    "bench": (_bench, "run the cycle-accurate benchmarks (from the repository root)"),
}


def main(argv=None):
    return hw_cli.main(argv, COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
