"""``fabricsim bench``: an nccl-tests table for one collective on a system."""

from __future__ import annotations

import os

from simulator.config import CONGESTION_NAMES, NETWORK_MODEL_NAMES
from simulator.studies.nccl_tests import BENCH_COLLECTIVES
from simulator.studies.scenario import FABRIC_DEFAULTS, build_topology, network_config
from topologies.routing import ROUTING_POLICIES
from workloads.collectives import CollectiveKind

from .common import (
    fabric_options,
    load_calibration,
    nccl_version_option,
    positive_int,
    progress_display,
    protocol_name,
    stepfactor,
    system_name,
)


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="nccl-tests-style table for one collective on a system")
    bench.add_argument("collective", help=f"one of {', '.join(BENCH_COLLECTIVES)}")
    bench.add_argument("-b", "--minbytes", default="32M", help="smallest size (8, 1K, 64M, 8G); default 32M")
    bench.add_argument("-e", "--maxbytes", default="32M", help="largest size; default 32M")
    bench.add_argument("-f", "--stepfactor", type=stepfactor, default=2.0, help="multiply size by this; default 2")
    bench.add_argument("-i", "--stepbytes", default=None, help="add this many bytes per step instead of -f")
    bench.add_argument("-d", "--datatype", default="float", help="element type; default float")
    bench.add_argument("-o", "--op", default="sum", help="reduction: sum, prod, max, min, avg; default sum")
    bench.add_argument("-r", "--root", type=int, default=0, help="root rank of broadcast/reduce; default 0")
    bench.add_argument(
        "-g",
        "--ngpus",
        type=positive_int("ngpus"),
        default=1,
        help="GPUs driven by one process (nccl-tests -g): adds their kernel launches; default 1",
    )
    # nccl-tests options that change how a real run is measured, not what it measures: accepted so that a
    # pasted nccl-tests command line runs, with no effect on a deterministic simulation
    for short, dest, what in (
        ("-n", "iters", "timed iterations"),
        ("-w", "warmup_iters", "warm-up iterations"),
        ("-c", "check", "result checking"),
        ("-a", "average", "how ranks' times combine"),
    ):
        bench.add_argument(
            short,
            dest=dest,
            type=int,
            default=None,
            metavar="N",
            help=f"nccl-tests {what}: accepted, no effect (the simulation is deterministic)",
        )
    fabric_options(bench, defaults=FABRIC_DEFAULTS)
    bench.add_argument(
        "--routing",
        choices=ROUTING_POLICIES,
        default="ecmp",
        help="fabric routing: ecmp (seeded hash), adaptive, spray, minimal, valiant, ugal; default ecmp",
    )
    bench.add_argument(
        "--qps-per-connection",
        type=positive_int("qps-per-connection"),
        default=None,
        help="QPs per NCCL network connection (as NCCL_IB_QPS_PER_CONNECTION), each hashed separately",
    )
    bench.add_argument(
        "--congestion",
        nargs="+",
        default=(),
        choices=CONGESTION_NAMES,
        help="refine the flow model: DCQCN rate control, PFC pause spreading (RoCE), InfiniBand credit back-pressure",
    )
    bench.add_argument(
        "--sharp", action="store_true", help="allow in-network reduction on SHARP switches (as NCCL_COLLNET_ENABLE=1)"
    )
    bench.add_argument(
        "--traffic-classes",
        default=None,
        metavar="SPEC",
        help="how switches schedule traffic classes (as step's); the benchmarked communicator is in the class "
        "NCCL_IB_TC or NCCL_IB_SL marks, else 'default' (one class: the times do not change)",
    )
    bench.add_argument(
        "--gpus-per-node",
        type=positive_int("gpus-per-node"),
        default=None,
        help="use this many of each server's GPUs; default all",
    )
    bench.add_argument(
        "--net-model",
        choices=NETWORK_MODEL_NAMES,
        default="flow",
        help="network model: flow (max-min sharing, default) or analytical (alpha-beta)",
    )
    bench.add_argument(
        "--algo",
        default=None,
        help="force the algorithm: ring, tree, nvls, nvlstree, pat, ... "
        "(NCCL_ALGO in the environment restricts NCCL's choice instead)",
    )
    bench.add_argument("--proto", default=None, help="force the protocol: LL, LL128, Simple (wins over NCCL_PROTO)")
    bench.add_argument("--channels", type=positive_int("channels"), default=None, help="force the channel count")
    nccl_version_option(bench)
    bench.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing and Valiant choices; default 0")
    bench.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    bench.add_argument(
        "--explain",
        action="store_true",
        help="also print the tuner's estimate for every algorithm and protocol at each size, and why "
        "any is left out (what NCCL_DEBUG_SUBSYS=TUNING shows)",
    )
    bench.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr (there is none when it is not a terminal)"
    )
    bench.add_argument(
        "--calibration",
        default=None,
        metavar="FILE.json",
        help="apply a calibration written by `fabricsim calibrate --out` (link scale + overhead)",
    )


def run(args) -> str:
    from simulator.collectives.nccl_model import DEFAULT_NCCL_VERSION
    from simulator.collectives.tuner import applied_settings, describe_settings
    from simulator.studies.nccl_tests import format_csv, format_json, format_table, run_bench

    try:
        kind = CollectiveKind.parse(args.collective)
    except ValueError:
        kind = None
    if kind is None or kind.value not in BENCH_COLLECTIVES:
        raise ValueError(
            f"collective: {args.collective!r} is not known; expected one of {', '.join(BENCH_COLLECTIVES)}"
        )
    calibration = None
    if args.calibration is not None:
        calibration = load_calibration(args.calibration, args.system)
        args.system = calibration.system
    args.system = system_name(args.system)
    # NCCL's environment variables (tuner.NCCL_ENVIRONMENT) apply as they would to nccl-tests; options win
    if args.explain and args.format == "csv":
        raise ValueError(
            "explain: not available with --format csv (its columns are nccl-tests'); expected --format table or json"
        )
    policy = dict(
        algorithm=args.algo,
        protocol=protocol_name(args.proto),
        nchannels=args.channels,
        qps_per_connection=args.qps_per_connection,
    )
    config = network_config(vars(args), os.environ, **policy)
    traffic_class = None
    if args.traffic_classes is not None:
        import dataclasses

        from simulator.traffic import TrafficPolicy

        traffic = TrafficPolicy.parse(args.traffic_classes, environ=os.environ)
        traffic_class = traffic.class_of(None)  # the communicator's class, checked before anything runs
        config = dataclasses.replace(config, traffic=traffic)
    system = build_topology(vars(args))
    if calibration is not None:
        from simulator.validation.calibration import apply_calibration

        system, config = apply_calibration(system, config, calibration)
    with progress_display("fabricsim bench", quiet=bool(args.quiet)) as progress:
        rows = run_bench(
            kind,
            system=system,
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            minbytes=args.minbytes,
            maxbytes=args.maxbytes,
            stepfactor=args.stepfactor,
            stepbytes=args.stepbytes,
            dtype=args.datatype,
            op=args.op,
            root=args.root,
            gpus_per_process=args.ngpus,
            config=config,
            explain=args.explain,
            progress=progress,
        )
    gpn = args.gpus_per_node or len(system.servers[0].gpus)
    title = (
        f"fabricsim bench {kind.value}: {args.system}, {args.nodes} node(s) x {gpn} GPUs, "
        f"network model {args.net_model}"
    )
    if args.nodes > 1:
        title += f"; {system.description}; routing {args.routing}"
    if calibration is not None:
        title += f"; calibrated ({args.calibration}: {calibration.describe()})"
    if args.nccl_version is not None:
        title += f"; NCCL {config.collectives.nccl_version}'s enablement (constants of {DEFAULT_NCCL_VERSION}.7)"
    environment = applied_settings(os.environ, **policy, collnet=True if args.sharp else None)
    if environment:
        title += "; " + describe_settings(environment)
    if traffic_class is not None:
        title += f"; traffic class {traffic_class}"
    if args.format == "csv":
        return format_csv(rows)
    if args.format == "json":
        extra = {"calibration": calibration.to_dict()} if calibration is not None else {}
        extra |= {"nccl_environment": environment} if environment else {}
        return format_json(
            rows,
            collective=kind.value,
            system=args.system,
            nodes=args.nodes,
            gpus_per_node=gpn,
            net_model=args.net_model,
            **extra,
        )
    return format_table(rows, title=title)
