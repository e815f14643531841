"""The ``rnic`` command: ``rnic generate``, ``rnic synth``, ``rnic depth``, ``rnic paths``,
``rnic area``, ``rnic regmap``, ``rnic bench``."""

import argparse
import sys

__all__ = ["main", "config_args", "config_from_args"]


def config_args(parser):
    """Add the configuration options of interface.md §1 to ``parser``."""
    from .params import RnicConfig
    d = RnicConfig()
    parser.add_argument("--data-width", type=int, default=d.data_width, metavar="W",
                        help="MAC and host-memory data width: 64, 128, 256 or 512 "
                             f"(default {d.data_width})")
    parser.add_argument("--num-qp", type=int, default=d.num_qp, metavar="N",
                        help=f"queue pairs, power of two, 4..4096 (default {d.num_qp})")
    parser.add_argument("--num-cq", type=int, default=d.num_cq, metavar="C",
                        help=f"completion queues, power of two, 1..1024 (default {d.num_cq})")
    parser.add_argument("--key-entries", type=int, default=d.key_entries, metavar="K",
                        help=f"key-table slots, power of two, 4..1024 (default {d.key_entries})")
    parser.add_argument("--clock-mhz", type=float, default=d.clock_mhz, metavar="F",
                        help=f"core clock in MHz, > 0 (default {d.clock_mhz})")


def config_from_args(args):
    """An ``RnicConfig`` from parsed options; exits 2 with a one-line reason if out of bounds."""
    from .params import ConfigError, RnicConfig
    try:
        return RnicConfig(data_width=args.data_width, num_qp=args.num_qp, num_cq=args.num_cq,
                          key_entries=args.key_entries, clock_mhz=args.clock_mhz)
    except ConfigError as e:
        print(f"rnic: error: {e}", file=sys.stderr)
        sys.exit(2)


def _generate(argv):
    p = argparse.ArgumentParser(prog="rnic generate",
                                description="Write the Verilog of the rnic core (module rnic).")
    p.add_argument("-o", "--output", required=True, metavar="OUT.v", help="Verilog file to write")
    config_args(p)
    args = p.parse_args(argv)
    cfg = config_from_args(args)
    from .top import build_verilog
    build_verilog(cfg, args.output)
    print(f"rnic: wrote {args.output} (module rnic, W={cfg.data_width}, {cfg.num_qp} QPs, "
          f"{cfg.num_cq} CQs, {cfg.key_entries} keys, {cfg.clock_mhz} MHz)")
    return 0


def _regmap(argv):
    from .control.regmap import markdown
    print(markdown(), end="")
    return 0


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
    run_benches(args.names or None, simulator=args.sim)
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
    "generate": (_generate, "write build/rnic.v-style Verilog of the core"),
    "synth": (_synth, "synthesize on ECP5 / iCE40 / xc7 and report area and Fmax"),
    "depth": (_depth, "logic depth (LUT levels) of a synth_ecp5 netlist, deepest paths"),
    "paths": (_paths, "worst paths of a placed design from nextpnr's SDF (its placement estimate)"),
    "area": (_area, "ECP5 area per block (hierarchy kept) against rtl/rnic/budgets.py"),
    "regmap": (_regmap, "print the register map as Markdown"),
    "bench": (_bench, "run the cycle-accurate benchmarks (from the repository root)"),
}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: rnic {" + ",".join(COMMANDS) + "} ...", file=sys.stderr)
        for name, (_, doc) in COMMANDS.items():
            print(f"  {name:10s} {doc}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    fn, _ = COMMANDS[argv[0]]
    return fn(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
