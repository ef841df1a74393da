"""The ``fabricsim`` command.

    fabricsim bench all_reduce --system dgx-h100 --nodes 2 -b 8 -e 8G -f 2
    fabricsim systems
    fabricsim perf

Bad input prints one line on stderr (``fabricsim: error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
import time

from topologies.presets import SYSTEMS
from workloads.collectives import CollectiveKind

BENCH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr, not a usage dump."""

    def error(self, message: str):  # noqa: D401
        raise _UsageError(f"fabricsim: error: {message}")


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not an integer") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name}: {value} is not allowed; expected an integer >= 1")
        return value
    return parse


def _factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"stepfactor: {text!r} is not a number") from None
    if not value > 1:
        raise argparse.ArgumentTypeError(f"stepfactor: {text!r} is not allowed; expected a number > 1")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fabricsim", description="Simulate GPU-cluster networks and NCCL collectives.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    bench = sub.add_parser("bench", help="nccl-tests-style table for one collective on a system")
    bench.add_argument("collective", help=f"one of {', '.join(BENCH_COLLECTIVES)}")
    bench.add_argument("-b", "--minbytes", default="32M", help="smallest size (8, 1K, 64M, 8G); default 32M")
    bench.add_argument("-e", "--maxbytes", default="32M", help="largest size; default 32M")
    bench.add_argument("-f", "--stepfactor", type=_factor, default=2.0, help="multiply size by this; default 2")
    bench.add_argument("-i", "--stepbytes", default=None, help="add this many bytes per step instead of -f")
    bench.add_argument("-d", "--datatype", default="float", help="element type; default float")
    bench.add_argument("-o", "--op", default="sum", help="reduction: sum, prod, max, min, avg; default sum")
    bench.add_argument("-r", "--root", type=int, default=0, help="root rank of broadcast/reduce; default 0")
    bench.add_argument("-g", "--ngpus", type=_positive_int("ngpus"), default=1,
                       help="GPUs driven by one process (nccl-tests -g): adds their kernel launches; default 1")
    bench.add_argument("--system", default="dgx-h100", help="system preset (see `fabricsim systems`)")
    bench.add_argument("--nodes", type=_positive_int("nodes"), default=1, help="servers; default 1")
    bench.add_argument("--gpus-per-node", type=_positive_int("gpus-per-node"), default=None,
                       help="use this many of each server's GPUs; default all")
    bench.add_argument("--net-model", choices=("flow", "analytical"), default="flow",
                       help="network model: flow (max-min sharing, default) or analytical (alpha-beta)")
    bench.add_argument("--algo", default=None, help="force the algorithm (as NCCL_ALGO): ring")
    bench.add_argument("--proto", default=None, help="force the protocol (as NCCL_PROTO): LL, LL128, Simple")
    bench.add_argument("--channels", type=_positive_int("channels"), default=None, help="force the channel count")
    bench.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing; default 0")
    bench.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")

    sub.add_parser("systems", help="list system presets, one line each")

    perf = sub.add_parser("perf", help="benchmarks: max-min kernel and a 16-node bench sweep (prints figures)")
    perf.add_argument("--quick", action="store_true", help="smaller instances")
    return parser


def _bench(args) -> str:
    from simulator.collectives.tuner import CollectivePolicy
    from simulator.config import SimConfig
    from simulator.nccl_tests import format_csv, format_json, format_table, run_bench

    try:
        kind = CollectiveKind.parse(args.collective)
    except ValueError:
        kind = None
    if kind is None or kind.value not in BENCH_COLLECTIVES:
        raise ValueError(f"collective: {args.collective!r} is not known; expected one of {', '.join(BENCH_COLLECTIVES)}")
    if args.system not in SYSTEMS:
        raise ValueError(f"system: {args.system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    proto = args.proto
    if proto is not None:
        proto = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}.get(proto.lower(), proto)
    config = SimConfig(network_model=args.net_model, seed=args.seed,
                       collectives=CollectivePolicy(algorithm=args.algo, protocol=proto, nchannels=args.channels))
    rows = run_bench(kind, system=args.system, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                     minbytes=args.minbytes, maxbytes=args.maxbytes, stepfactor=args.stepfactor,
                     stepbytes=args.stepbytes, dtype=args.datatype, op=args.op, root=args.root,
                     gpus_per_process=args.ngpus, config=config)
    gpn = args.gpus_per_node or SYSTEMS[args.system].server().gpus
    title = (f"fabricsim bench {kind.value}: {args.system}, {args.nodes} node(s) x {gpn} GPUs, "
             f"network model {args.net_model}")
    if args.format == "csv":
        return format_csv(rows)
    if args.format == "json":
        return format_json(rows, collective=kind.value, system=args.system, nodes=args.nodes, gpus_per_node=gpn,
                           net_model=args.net_model)
    return format_table(rows, title=title)


def _perf(args) -> str:
    from simulator.nccl_tests import run_bench
    from simulator.network.perf import bench_maxmin, format_report

    lines = []
    flows, links = (20_000, 4_000) if args.quick else (100_000, 20_000)
    lines.append("max-min kernel: " + format_report(bench_maxmin(nflows=flows, nlinks=links)))
    nodes = 2 if args.quick else 16
    run_bench("all_reduce", system="dgx-h100", nodes=nodes, minbytes=8, maxbytes="8K")   # warm caches
    start = time.perf_counter()
    rows = run_bench("all_reduce", system="dgx-h100", nodes=nodes, minbytes=8, maxbytes="8G", stepfactor=2)
    wall = time.perf_counter() - start
    lines.append(f"bench all_reduce dgx-h100 --nodes {nodes} -b 8 -e 8G -f 2: {len(rows)} rows in {wall:.2f} s "
                 f"(in-process, numba cache warm)")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        if args.command == "systems":
            out = "".join(f"{name:<14} {preset.description}\n" for name, preset in SYSTEMS.items())
        elif args.command == "bench":
            out = _bench(args)
        else:
            out = _perf(args)
    except (_UsageError, ValueError, argparse.ArgumentTypeError) as exc:
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


if __name__ == "__main__":
    raise SystemExit(main())
