"""The ``fabricsim`` command.

    fabricsim step [scenario.toml] [--model llama3-8b --nodes 8 --tp 2 --pp 2 ...] [--trace step.json]
    fabricsim bench all_reduce --system dgx-h100 --nodes 2 -b 8 -e 8G -f 2
    fabricsim systems
    fabricsim validate [--series SUBSTRING] [--data FILE.csv --system PRESET] [--rows FILE] [--plot DIR] [--format csv]
    fabricsim calibrate LOG --system PRESET [--out cal.json]; fabricsim bench ... --calibration cal.json
    fabricsim topo --system dgx-h100 --nodes 512 --topology fat-tree [--draw FILE.png]
    fabricsim perf [--scale]
    fabricsim sweep grid.toml [--out table.parquet] [--scheduler tcp://host:8786]
    fabricsim compare [designs.toml] [--report report.png] [--out table.csv]

Bad input prints one line on stderr (``fabricsim: error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from . import bench, calibrate, compare, perf, step, sweep, systems, topo, validate
from .common import Parser, UsageError

# subcommand -> its module (add_parser(sub) declares its options, run(args) returns what it prints)
COMMANDS = {
    "step": step,
    "bench": bench,
    "systems": systems,
    "topo": topo,
    "validate": validate,
    "calibrate": calibrate,
    "perf": perf,
    "sweep": sweep,
    "compare": compare,
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fabricsim", description="Simulate GPU-cluster networks and NCCL collectives.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        out = COMMANDS[args.command].run(args)
    except (UsageError, ValueError, argparse.ArgumentTypeError) as exc:
        message = str(exc)
        if not message.startswith("fabricsim"):
            message = f"fabricsim: error: {message}"
        print(message.splitlines()[0] if message else "fabricsim: error", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fabricsim: interrupted", file=sys.stderr)
        return 130
    sys.stdout.write(out)
    return 0
