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
    fabricsim goodput [goodput.toml] [--format json] [--out causes.csv]

Bad input prints one line on stderr (``fabricsim: error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import sys

from . import bench, calibrate, compare, goodput, perf, step, sweep, systems, topo, validate
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
    "goodput": goodput,
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fabricsim", description="Simulate GPU-cluster networks and NCCL collectives.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


# The cyclic garbage collector's thresholds while a command runs. A step builds a few 10^5 objects that live
# until it ends (tasks, collectives, per-collective SimPy events) and allocates millions that die young; with
# Python's default thresholds (700, 10, 10) the collector walks the long-lived ones again and again, which was
# a quarter of the default step's time. Collecting after 50,000 net allocations instead of 700 keeps the few
# cycles a command makes from piling up while sparing it most of the walks.
GC_THRESHOLDS = (50_000, 20, 20)


def main(argv: list[str] | None = None) -> int:
    # As the interpreter shuts down it clears the modules and runs collections that walk every object still
    # alive (numba's type system, the routing and kernel caches): about 0.6 s after the default step, once the
    # command is done. Frozen at exit (gc.freeze: kept out of collections), they are freed with the process.
    # Registered once however often main runs in one process; a process that goes on keeps collecting.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    thresholds = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return _main(argv)
    finally:
        gc.set_threshold(*thresholds)


def _main(argv: list[str] | None) -> int:
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
