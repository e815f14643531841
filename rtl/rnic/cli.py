"""The hardware package's commands: ``rnic generate`` (the Verilog of the core) and ``rnic regmap``,
and the configuration options every command shares. The installed ``rnic`` command
(:mod:`rnic_flow.cli`) adds the flow's commands; this package never imports the flow."""

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
    parser.add_argument("--no-read", dest="read", action="store_false",
                        help="build the core without RDMA READ (contract version 1.0: a READ "
                             "request gets NAK 0x61, a READ WQE completes with LOC_QP_OP_ERR)")


def config_from_args(args):
    """An ``RnicConfig`` from parsed options; exits 2 with a one-line reason if out of bounds."""
    from .params import ConfigError, RnicConfig
    try:
        return RnicConfig(data_width=args.data_width, num_qp=args.num_qp, num_cq=args.num_cq,
                          key_entries=args.key_entries, clock_mhz=args.clock_mhz,
                          read=getattr(args, "read", True))
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
          f"{cfg.num_cq} CQs, {cfg.key_entries} keys, {cfg.clock_mhz} MHz"
          f"{'' if cfg.read else ', no RDMA READ'})")
    return 0


def _regmap(argv):
    from .control.regmap import markdown
    print(markdown(), end="")
    return 0


COMMANDS = {
    "generate": (_generate, "write build/rnic.v-style Verilog of the core"),
    "regmap": (_regmap, "print the register map as Markdown"),
}


def main(argv=None, commands=None):
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to one of ``commands`` (default: this
    module's, the hardware package's own; the installed ``rnic`` command adds the flow's)."""
    commands = COMMANDS if commands is None else commands
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print("usage: rnic {" + ",".join(commands) + "} ...", file=sys.stderr)
        for name, (_, doc) in commands.items():
            print(f"  {name:10s} {doc}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    fn, _ = commands[argv[0]]
    return fn(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
