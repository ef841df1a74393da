"""The ``fabricsim`` command.

    fabricsim step [scenario.toml] [--model llama3-8b --nodes 8 --tp 2 --pp 2 ...] [--trace step.json]
    fabricsim bench all_reduce --system dgx-h100 --nodes 2 -b 8 -e 8G -f 2
    fabricsim systems
    fabricsim validate [--series SUBSTRING] [--data FILE.csv --system PRESET] [--plot DIR] [--format csv]
    fabricsim calibrate LOG --system PRESET [--out cal.json]; fabricsim bench ... --calibration cal.json
    fabricsim topo --system dgx-h100 --nodes 512 --topology fat-tree [--draw FILE.png]
    fabricsim perf [--scale]

Bad input prints one line on stderr (``fabricsim: error: ...``) and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from simulator.config import CONGESTION_NAMES, NETWORK_MODEL_NAMES
from topologies.presets import FABRICS, SYSTEMS, TOPOLOGIES
from topologies.routing import ROUTING_POLICIES
from workloads.collectives import CollectiveKind
from workloads.parallelism import DDP_BUCKET_BYTES
from workloads.presets import SC21_VOCAB

BENCH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall")
DEFAULT_SYSTEM = "dgx-h100"          # the system preset when none is given
STEP_FORMATS = ("table", "json")


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr, not a usage dump."""

    def error(self, message: str):  # noqa: D401
        raise _UsageError(f"fabricsim: error: {message}")


def _bounded(name: str, cast=int, low: float = 1, *, strict: bool = False):
    """argparse type: ``cast`` of the text, at least ``low`` (more than it when ``strict``)."""
    kind = "an integer" if cast is int else "a number"

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not {kind}") from None
        if not (value > low if strict else value >= low):
            raise argparse.ArgumentTypeError(f"{name}: {text!r} is not allowed; expected {kind} "
                                             f"{'>' if strict else '>='} {low:g}")
        return value
    return parse


_positive_int = _bounded      # _positive_int(name): an integer >= 1
_factor = _bounded("stepfactor", float, 1, strict=True)


# the fabric options' defaults in bench and topo (step's, in STEP_DEFAULTS, differ in nodes); the others default
# to None or, for the --no-... switches, True
FABRIC_DEFAULTS = {"nodes": 1, "topology": "leaf-spine", "oversubscription": 1.0, "planes": 1}


def _fabric_options(p: argparse.ArgumentParser, *, defaults: Mapping) -> None:
    """The options that choose and wire the fabric (bench, topo and step), with the values of ``defaults`` for
    the FABRIC_DEFAULTS keys as their defaults, which their help texts name (step then makes every default
    None, 'not given', so that its scenario file can set them)."""
    p.add_argument("--system", help=f"system preset (see `fabricsim systems`); default {DEFAULT_SYSTEM}")
    p.add_argument("--nodes", type=_positive_int("nodes"), help=f"servers; default {defaults['nodes']}")
    p.add_argument("--topology", help=f"wiring: {', '.join(TOPOLOGIES)}; default {defaults['topology']}")
    p.add_argument("--fabric", help=f"fabric technology: {', '.join(FABRICS)}; default the preset's own")
    p.add_argument("--oversubscription", type=_bounded("oversubscription", float),
                   help=f"leaf down:up ratio R (R:1), 1 non-blocking; default {defaults['oversubscription']:g}")
    p.add_argument("--no-rail-optimised", dest="rail_optimised", action="store_false",
                   help="cable every NIC of a server to the same top-of-rack leaf")
    p.add_argument("--nics-per-node", type=_positive_int("nics-per-node"), help="NICs per server; default the preset's")
    p.add_argument("--planes", type=_positive_int("planes"),
                   help=f"independent fabric planes, NIC j on plane j %% P; default {defaults['planes']}")
    p.add_argument("--no-gdr", dest="gdr", action="store_false",
                   help="GPUDirect RDMA off: network traffic staged through host memory (NCCL 'GDR 0')")
    p.set_defaults(**{name: defaults[name] for name in FABRIC_DEFAULTS})


def _topology(settings: Mapping):
    """The system the fabric options in ``settings`` (parsed arguments as a dict, or step settings) describe."""
    from topologies.presets import build_system
    return build_system(settings["system"], nodes=settings["nodes"], topology=settings["topology"],
                        fabric=settings["fabric"], oversubscription=settings["oversubscription"],
                        rail_optimised=settings["rail_optimised"], nics_per_node=settings["nics_per_node"],
                        planes=settings["planes"], gdr=settings["gdr"])


# `fabricsim step` with no arguments: a Llama-3 8B-class model on 8 DGX H100 (64 GPUs), TP 2 x PP 2 x DP 16,
# 256 sequences of 8192 tokens per step (2M tokens), micro-batch 1, bf16, DDP buckets overlapped with backward.
STEP_DEFAULTS = {"model": "llama3-8b", "system": DEFAULT_SYSTEM, **FABRIC_DEFAULTS, "nodes": 8, "tp": 2, "pp": 2,
                 "cp": 1, "ep": 1, "vp": 1, "zero": 0, "fsdp": False, "global_batch": 256, "micro_batch": 1,
                 "seq_len": 8192, "bucket_mb": DDP_BUCKET_BYTES / 2**20, "dtype": "bf16", "schedule": "1f1b",
                 "sequence_parallel": False, "recompute": "none", "net_model": "flow", "granularity": "layer",
                 "fabric": None, "rail_optimised": True, "nics_per_node": None, "gdr": True, "routing": "ecmp",
                 "seed": 0, "congestion": (), "layers": None, "hidden": None, "heads": None, "vocab": SC21_VOCAB,
                 "ffn_hidden": None, "dp": None, "format": "table", "trace": None}


def _step_parser(sub) -> None:
    step = sub.add_parser("step", help="one training step: step time, throughput, time in network, breakdown",
                          argument_default=None)
    step.add_argument("scenario", nargs="?", default=None, metavar="SCENARIO.toml",
                      help="a TOML file with any of the options below (names with _ for -); options given "
                           "on the command line win")
    step.add_argument("--model", help="a model preset (llama3-8b, llama3-70b, gpt3-175b, mixtral-8x7b, ...) or "
                                      "'gpt' with --layers --hidden --heads; default llama3-8b")
    for name, what in (("layers", "transformer layers"), ("hidden", "hidden size"), ("heads", "attention heads"),
                       ("vocab", f"vocabulary (default {SC21_VOCAB})"),
                       ("ffn-hidden", "MLP size (default 4 x hidden)")):
        step.add_argument(f"--{name}", type=_positive_int(name), help=f"with --model gpt: {what}")
    _fabric_options(step, defaults=STEP_DEFAULTS)
    step.add_argument("--routing", choices=ROUTING_POLICIES, help="fabric routing; default ecmp")
    step.add_argument("--seed", type=int, help="seed of ECMP hashing; default 0")
    step.add_argument("--congestion", nargs="+", choices=CONGESTION_NAMES, help="flow-model refinements")
    for name in ("tp", "pp", "dp", "cp", "ep", "vp"):
        step.add_argument(f"--{name}", type=_positive_int(name),
                          help={"dp": "data-parallel size; default GPUs / (tp pp cp)",
                                "vp": "virtual stages per pipeline rank (interleaved 1F1B)"}.get(name, f"{name} size"))
    step.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage; default 0")
    step.add_argument("--fsdp", action="store_const", const=True, help="FSDP full sharding (ZeRO-3 semantics)")
    step.add_argument("--global-batch", type=_positive_int("global-batch"), help="sequences per step; default 256")
    step.add_argument("--micro-batch", type=_positive_int("micro-batch"), help="sequences per micro-batch; default 1")
    step.add_argument("--seq-len", type=_positive_int("seq-len"), help="tokens per sequence; default 8192")
    step.add_argument("--bucket-mb", type=float,
                      help=f"DDP gradient bucket in MiB; default {STEP_DEFAULTS['bucket_mb']:g}")
    step.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), help="training precision; default bf16")
    step.add_argument("--schedule", choices=("1f1b", "gpipe", "interleaved"), help="pipeline schedule; default 1f1b")
    step.add_argument("--sequence-parallel", action="store_const", const=True, help="Megatron sequence parallelism")
    step.add_argument("--recompute", choices=("none", "selective", "full"), help="activation recomputation")
    step.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, help="network model; default flow")
    step.add_argument("--granularity", choices=("layer", "chunk"),
                      help="tasks per layer (default) or per model chunk (faster; bytes and compute conserved)")
    step.add_argument("--format", choices=STEP_FORMATS, help="output format; default table")
    step.add_argument("--trace", metavar="FILE.json", help="also write the step as a Chrome/Perfetto trace")
    step.set_defaults(**dict.fromkeys(STEP_DEFAULTS))     # None: not given, so the scenario file or the default holds


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fabricsim", description="Simulate GPU-cluster networks and NCCL collectives.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    _step_parser(sub)

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
    # nccl-tests options that change how a real run is measured, not what it measures: accepted so that a
    # pasted nccl-tests command line runs, with no effect on a deterministic simulation
    for short, dest, what in (("-n", "iters", "timed iterations"), ("-w", "warmup_iters", "warm-up iterations"),
                              ("-c", "check", "result checking"), ("-a", "average", "how ranks' times combine")):
        bench.add_argument(short, dest=dest, type=int, default=None, metavar="N",
                           help=f"nccl-tests {what}: accepted, no effect (the simulation is deterministic)")
    _fabric_options(bench, defaults=FABRIC_DEFAULTS)
    bench.add_argument("--routing", choices=ROUTING_POLICIES, default="ecmp",
                       help="fabric routing: ecmp (seeded hash), adaptive, spray, minimal, valiant, ugal; default ecmp")
    bench.add_argument("--qps-per-connection", type=_positive_int("qps-per-connection"), default=None,
                       help="QPs per NCCL network connection (as NCCL_IB_QPS_PER_CONNECTION), each hashed separately")
    bench.add_argument("--congestion", nargs="+", default=(), choices=CONGESTION_NAMES,
                       help="refine the flow model: DCQCN rate control, PFC pause spreading (RoCE), "
                            "InfiniBand credit back-pressure")
    bench.add_argument("--sharp", action="store_true",
                       help="allow in-network reduction on SHARP switches (as NCCL_COLLNET_ENABLE=1)")
    bench.add_argument("--gpus-per-node", type=_positive_int("gpus-per-node"), default=None,
                       help="use this many of each server's GPUs; default all")
    bench.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, default="flow",
                       help="network model: flow (max-min sharing, default) or analytical (alpha-beta)")
    bench.add_argument("--algo", default=None, help="force the algorithm: ring, tree, nvls, nvlstree, pat, ... "
                       "(NCCL_ALGO in the environment restricts NCCL's choice instead)")
    bench.add_argument("--proto", default=None, help="force the protocol: LL, LL128, Simple (wins over NCCL_PROTO)")
    bench.add_argument("--channels", type=_positive_int("channels"), default=None, help="force the channel count")
    bench.add_argument("--seed", type=int, default=0, help="seed of ECMP hashing and Valiant choices; default 0")
    bench.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    bench.add_argument("--explain", action="store_true",
                       help="also print the tuner's estimate for every algorithm and protocol at each size, and why "
                            "any is left out (what NCCL_DEBUG_SUBSYS=TUNING shows)")
    bench.add_argument("--calibration", default=None, metavar="FILE.json",
                       help="apply a calibration written by `fabricsim calibrate --out` (link scale + overhead)")

    sub.add_parser("systems", help="list system presets, one line each")

    topo = sub.add_parser("topo", help="a fabric design's summary and cost (switches, ports, cables, optics per tier)")
    _fabric_options(topo, defaults=FABRIC_DEFAULTS)
    topo.add_argument("--nic-cables", choices=("optical", "copper"), default="optical",
                      help="NIC-to-leaf cables: optical (transceivers) or copper DAC; default optical")
    topo.add_argument("--draw", default=None, metavar="FILE.png", help="also draw the switch graph into this file")

    validate = sub.add_parser("validate", help="compare predictions with the shipped measured nccl-tests tables "
                                               "(or your own): |t_pred/t_meas - 1| per table and regime")
    validate.add_argument("--series", default=None, metavar="SUBSTRING",
                          help="only the shipped series whose name contains this (case-insensitive)")
    validate.add_argument("--data", default=None, metavar="FILE.csv",
                          help="validate your own table instead (columns as the shipped ones: collective,nranks,"
                               "nnodes,gpu,interconnect,size_bytes,time_us,algbw_GBps,busbw_GBps,source,notes)")
    validate.add_argument("--system", default=None,
                          help="with --data: the system preset (default: from the gpu column)")
    validate.add_argument("--algo", default=None, help="with --data: the algorithm the measurement forced (NCCL_ALGO)")
    validate.add_argument("--proto", default=None, help="with --data: the protocol it forced (NCCL_PROTO)")
    validate.add_argument("--channels", type=_positive_int("channels"), default=None,
                          help="with --data: the channel count it forced")
    validate.add_argument("-g", "--ngpus", type=_positive_int("ngpus"), default=None,
                          help="with --data: GPUs per nccl-tests process (-g); default 1")
    validate.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, default="flow", help="network model")
    validate.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    validate.add_argument("--plot", default=None, metavar="DIR",
                          help="also write one PNG per series (predicted vs measured busbw against size) into DIR")

    calibrate = sub.add_parser("calibrate", help="fit a preset's link bandwidth scale and per-collective overhead "
                                                 "to your nccl-tests output")
    calibrate.add_argument("log", help="saved stdout of one nccl-tests run (e.g. all_reduce_perf -b 8 -e 8G -f 2); "
                                       "- reads it from standard input")
    calibrate.add_argument("--system", default=None,
                           help="system preset measured (default: from the log's device names)")
    calibrate.add_argument("--nodes", type=_positive_int("nodes"), default=None,
                           help="servers (default: the log's distinct hosts, else 1)")
    calibrate.add_argument("--gpus-per-node", type=_positive_int("gpus-per-node"), default=None,
                           help="GPUs used per server (default: ranks / nodes)")
    calibrate.add_argument("--nranks", type=_positive_int("nranks"), default=None,
                           help="ranks (default: the log's '#  Rank N' lines)")
    calibrate.add_argument("-g", "--ngpus", type=_positive_int("ngpus"), default=None,
                           help="GPUs per nccl-tests process, -g (default: the log's nGpus, else 1)")
    calibrate.add_argument("--collective", default=None,
                           help="the test run (default: from the log, e.g. "
                                "'Collective test starting: all_reduce_perf')")
    calibrate.add_argument("--algo", default=None, help="the algorithm the measurement forced (default: the "
                           "log's NCCL settings, from 'NCCL INFO ... set by environment' lines)")
    calibrate.add_argument("--proto", default=None, help="the protocol it forced")
    calibrate.add_argument("--channels", type=_positive_int("channels"), default=None,
                           help="the channel count it forced")
    calibrate.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, default="flow", help="network model")
    calibrate.add_argument("--out", default=None, metavar="FILE.json",
                           help="write the calibration here, for `fabricsim bench --calibration FILE.json`")

    perf = sub.add_parser("perf", help="benchmarks: max-min kernel and a 16-node bench sweep (prints figures)")
    perf.add_argument("--quick", action="store_true", help="smaller instances")
    perf.add_argument("--scale", action="store_true",
                      help="also: 1 GiB ring all_reduce on 4,096 and 16,384 GPUs (DGX H100, 3-tier fat-tree)")
    perf.add_argument("--step", action="store_true",
                      help="also: one Llama-3 405B step on 16,384 H100 (TP 8, PP 16, DP 128, 8192 tokens) on a "
                           "RoCE 400G fat-tree, flow and analytical network models")
    return parser


def _bench(args) -> str:
    from simulator.collectives.tuner import CollectivePolicy, applied_settings, describe_settings
    from simulator.config import SimConfig
    from simulator.nccl_tests import format_csv, format_json, format_table, run_bench

    try:
        kind = CollectiveKind.parse(args.collective)
    except ValueError:
        kind = None
    if kind is None or kind.value not in BENCH_COLLECTIVES:
        raise ValueError(f"collective: {args.collective!r} is not known; expected one of "
                         f"{', '.join(BENCH_COLLECTIVES)}")
    calibration = None
    if args.calibration is not None:
        from simulator.calibration import Calibration
        calibration = Calibration.load(args.calibration)
        if args.system is not None and args.system != calibration.system:
            raise ValueError(f"calibration: {args.calibration} was fitted on system {calibration.system!r}, not "
                             f"{args.system!r}; expected --system {calibration.system} (or no --system)")
        args.system = calibration.system
    args.system = args.system or DEFAULT_SYSTEM
    if args.system not in SYSTEMS:
        raise ValueError(f"system: {args.system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    # NCCL's environment variables (tuner.NCCL_ENVIRONMENT) apply as they would to nccl-tests; options win
    if args.explain and args.format == "csv":
        raise ValueError("explain: not available with --format csv (its columns are nccl-tests'); expected "
                         "--format table or json")
    overrides = dict(algorithm=args.algo, protocol=_protocol(args.proto), nchannels=args.channels,
                     qps_per_connection=args.qps_per_connection, collnet=True if args.sharp else None)
    policy = CollectivePolicy.from_environment(os.environ, **overrides)
    config = SimConfig(network_model=args.net_model, seed=args.seed, routing=args.routing, collectives=policy,
                       congestion=tuple(args.congestion))
    system = _topology(vars(args))
    if calibration is not None:
        from simulator.calibration import apply_calibration
        system, config = apply_calibration(system, config, calibration)
    rows = run_bench(kind, system=system, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                     minbytes=args.minbytes, maxbytes=args.maxbytes, stepfactor=args.stepfactor,
                     stepbytes=args.stepbytes, dtype=args.datatype, op=args.op, root=args.root,
                     gpus_per_process=args.ngpus, config=config, explain=args.explain)
    gpn = args.gpus_per_node or SYSTEMS[args.system].server().gpus
    title = (f"fabricsim bench {kind.value}: {args.system}, {args.nodes} node(s) x {gpn} GPUs, "
             f"network model {args.net_model}")
    if args.nodes > 1:
        title += f"; {system.description}; routing {args.routing}"
    if calibration is not None:
        title += f"; calibrated ({args.calibration}: {calibration.describe()})"
    environment = applied_settings(os.environ, **overrides)
    if environment:
        title += "; " + describe_settings(environment)
    if args.format == "csv":
        return format_csv(rows)
    if args.format == "json":
        extra = {"calibration": calibration.to_dict()} if calibration is not None else {}
        extra |= {"nccl_environment": environment} if environment else {}
        return format_json(rows, collective=kind.value, system=args.system, nodes=args.nodes, gpus_per_node=gpn,
                           net_model=args.net_model, **extra)
    return format_table(rows, title=title)


def _step_settings(args) -> dict:
    """STEP_DEFAULTS, then the scenario file, then the command line."""
    settings = dict(STEP_DEFAULTS)
    if args.scenario is not None:
        import tomllib
        try:
            with open(args.scenario, "rb") as handle:
                scenario = tomllib.load(handle)
        except OSError as exc:
            raise ValueError(f"scenario: {args.scenario!r} cannot be read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"scenario: {args.scenario} is not valid TOML ({exc})") from None
        for key, value in scenario.items():
            name = key.replace("-", "_")
            if name not in settings:
                raise ValueError(f"scenario: {args.scenario}: {key!r} is not a known field; expected one of "
                                 f"{', '.join(k for k in STEP_DEFAULTS)}")
            if name == "format" and value not in STEP_FORMATS:
                raise ValueError(f"scenario: {args.scenario}: format: {value!r} is not allowed; expected one of "
                                 f"{', '.join(STEP_FORMATS)}")
            if name == "trace" and not isinstance(value, str):
                raise ValueError(f"scenario: {args.scenario}: trace: {value!r} is not allowed; expected a file name")
            settings[name] = tuple(value) if name == "congestion" else value
    for name in settings:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = tuple(value) if name == "congestion" else value
    return settings


def _step(args) -> str:
    import dataclasses
    import json

    from simulator.collectives.tuner import CollectivePolicy, applied_settings
    from simulator.config import SimConfig
    from simulator.training import simulate_step
    from workloads.parallelism import ParallelismSpec
    from workloads.presets import custom_gpt, model_preset

    s = _step_settings(args)
    if str(s["model"]).lower() == "gpt":
        missing = [f"--{k}" for k in ("layers", "hidden", "heads") if s[k] is None]
        if missing:
            raise ValueError(f"model: 'gpt' needs {', '.join(missing)}")
        model = custom_gpt(layers=s["layers"], hidden=s["hidden"], heads=s["heads"], vocab=s["vocab"],
                           ffn_hidden=s["ffn_hidden"])
    else:
        model = model_preset(str(s["model"]))
    topology = _topology(s)
    if not (isinstance(s["bucket_mb"], (int, float)) and s["bucket_mb"] > 0):
        raise ValueError(f"bucket_mb: {s['bucket_mb']!r} is not allowed; expected a number > 0")
    parallelism = ParallelismSpec(tp=s["tp"], pp=s["pp"], dp=s["dp"], cp=s["cp"], ep=s["ep"], vp=s["vp"],
                                  gpus=topology.num_gpus, zero=s["zero"],
                                  fsdp=s["fsdp"], micro_batch=s["micro_batch"], global_batch=s["global_batch"],
                                  seq_len=s["seq_len"], schedule=s["schedule"],
                                  sequence_parallel=s["sequence_parallel"], dtype=s["dtype"],
                                  bucket_bytes=int(s["bucket_mb"] * 1024 * 1024))
    # NCCL's environment variables apply to every collective of the step, as they would to the job
    environment = applied_settings(os.environ)
    config = SimConfig(network_model=s["net_model"], routing=s["routing"], seed=s["seed"],
                       congestion=tuple(s["congestion"]), collectives=CollectivePolicy.from_environment(os.environ))
    result = simulate_step(model, parallelism, topology=topology, config=config, recompute=s["recompute"],
                           granularity=s["granularity"])
    trace_note = ""
    if s["trace"] is not None:
        from simulator.analysis import chrome_trace
        try:
            Path(s["trace"]).write_text(json.dumps(chrome_trace(result)))
        except OSError as exc:
            raise ValueError(f"trace: {s['trace']!r} cannot be written ({exc.strerror})") from None
        trace_note = f"# trace written to {s['trace']} (open it in https://ui.perfetto.dev or chrome://tracing)\n"
    if s["format"] == "json":
        data = result.as_dict()
        data["parallelism"] = dataclasses.asdict(parallelism) | {"dp": result.parallelism.dp}
        data |= {"nccl_environment": environment} if environment else {}
        return json.dumps(data, indent=1, default=str) + "\n"
    return format_step(result, topology, nccl_environment=environment) + trace_note


def format_step(result, topology, *, nccl_environment: Mapping[str, str] | None = None) -> str:
    """The human-readable summary of a StepResult; ``nccl_environment``, the NCCL settings applied
    (tuner.applied_settings), ends its title as in bench's."""
    p = result.parallelism
    step = result.step_time_s
    pct = (lambda x: f"{100 * x / step:5.1f} %" if step > 0 else "    -")
    gib = 1 << 30
    title = f"# fabricsim step: {result.model} on {topology.description or topology.name} ({result.gpus} GPUs)"
    if nccl_environment:
        from simulator.collectives.tuner import describe_settings
        title += "; " + describe_settings(nccl_environment)
    lines = [title,
             f"# tp {p.tp} x pp {p.pp} x dp {p.dp} x cp {p.cp} (ep {p.ep}, vp {p.vp}), {p.schedule}, "
             f"{p.global_batch} x {p.seq_len} tokens, micro-batch {p.micro_batch}, {p.dtype}, ZeRO {p.zero_stage}",
             f"step time            {step:12.4f} s",
             f"tokens/s             {result.tokens_per_s:12.0f}",
             f"TFLOP/s per GPU      {result.tflops_per_gpu:12.1f}",
             f"MFU                  {result.mfu:12.3f}",
             f"compute              {result.compute_s:12.4f} s  {pct(result.compute_s)}",
             f"pipeline bubble      {result.bubble_s:12.4f} s  {pct(result.bubble_s)}",
             f"time in network      {result.exposed_comm_s:12.4f} s  {pct(result.exposed_comm_s)}  "
             "(exposed communication on the critical path)",
             f"communication        {result.comm_s:12.4f} s  (all collectives, overlapped or not)",
             f"memory per GPU       {result.memory_bytes_per_gpu / gib:12.1f} GiB of "
             f"{result.memory_capacity_bytes / gib:.0f} GiB" + ("  OUT OF MEMORY" if result.out_of_memory else ""),
             "", f"{'group':<8}{'count':>8}{'GB moved':>12}{'time s':>10}{'exposed s':>11}"]
    for name, entry in result.breakdown["group"].items():
        lines.append(f"{name:<8}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}{entry['time_s']:>10.4f}"
                     f"{entry['exposed_s']:>11.4f}")
    # what NCCL's tuner chose in each group, its biggest share of bytes first
    lines += ["", f"{'group':<8}{'algorithm':<24}{'count':>8}{'GB moved':>12}{'time s':>10}"]
    for group, choices in result.breakdown["algorithm"].items():
        for choice, entry in choices.items():
            lines.append(f"{group:<8}{choice:<24}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}"
                         f"{entry['time_s']:>10.4f}")
    lines += ["", f"{'link tier':<10}{'TB moved':>10}"]
    for name, nbytes in result.breakdown["link_tier_bytes"].items():
        if nbytes > 0:
            lines.append(f"{name:<10}{nbytes / 1e12:>10.2f}")
    lines += [f"# note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def _topo(args) -> str:
    from topologies.cost import cost_summary

    args.system = args.system or DEFAULT_SYSTEM
    topology = _topology(vars(args))
    out = f"{topology.name}: {topology.description}\n{topology.num_gpus} GPUs, {topology.num_servers} servers\n"
    out += cost_summary(topology, nic_cables=args.nic_cables).format().rstrip("\n") + "\n"
    if args.draw is not None:
        from simulator.plotting import draw_fabric
        draw_fabric(topology, args.draw)
        out += f"# wrote {args.draw}\n"
    return out


def _protocol(proto: str | None) -> str | None:
    if proto is None:
        return None
    return {"ll": "LL", "ll128": "LL128", "simple": "Simple"}.get(proto.lower(), proto)


def _validate(args) -> str:
    from simulator.validation import data_series, format_report, run_validation, select_series

    described = [flag for flag, value in (("--system", args.system), ("--algo", args.algo), ("--proto", args.proto),
                                          ("--channels", args.channels), ("-g", args.ngpus)) if value is not None]
    if args.data is None and described:
        raise ValueError(f"{described[0]}: describes a --data table; the shipped series carry their own settings "
                         "(expected --data FILE.csv with it)")
    if args.data is not None:
        if args.series is not None:
            raise ValueError("--series: selects shipped series; expected either --series or --data, not both")
        series = (data_series(Path(args.data), system=args.system, algorithm=args.algo,
                              protocol=_protocol(args.proto), nchannels=args.channels,
                              gpus_per_process=args.ngpus or 1),)
    else:
        series = select_series(args.series)
    reports = run_validation(series, net_model=args.net_model)
    out = format_report(reports, format=args.format, net_model=args.net_model)
    if args.plot is not None:
        from simulator.plotting import write_busbw_plots
        paths = write_busbw_plots([(r.series.name, r.comparisons) for r in reports], args.plot)
        if args.format == "table":
            out += f"# wrote {len(paths)} plot(s) to {args.plot}: {', '.join(p.name for p in paths)}\n"
    return out


def _calibrate(args) -> str:
    import json

    from simulator.calibration import calibrate, format_result, parse_nccl_tests_log, read_nccl_tests_log

    if args.log == "-":
        log = parse_nccl_tests_log(sys.stdin.read(), name="<stdin>")
    else:
        log = read_nccl_tests_log(args.log)
    result = calibrate(log, system=args.system, collective=args.collective, nodes=args.nodes,
                       gpus_per_node=args.gpus_per_node, nranks=args.nranks, gpus_per_process=args.ngpus,
                       algorithm=args.algo, protocol=_protocol(args.proto), nchannels=args.channels,
                       net_model=args.net_model)
    if args.out is not None:
        try:
            Path(args.out).write_text(json.dumps(result.to_dict(), indent=1) + "\n")
        except OSError as exc:
            raise ValueError(f"out: {args.out!r} cannot be written ({exc.strerror})") from None
    return format_result(result, out=args.out)


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
    if args.scale:
        from simulator.collectives.tuner import CollectivePolicy
        from simulator.config import SimConfig
        from topologies.presets import build_system
        for servers in (512, 2048):
            start = time.perf_counter()
            topology = build_system("dgx-h100", nodes=servers, topology="fat-tree")
            built = time.perf_counter()
            row, = run_bench("all_reduce", system=topology, minbytes="1G", maxbytes="1G",
                             config=SimConfig(collectives=CollectivePolicy(algorithm="ring")))
            done = time.perf_counter()
            lines.append(f"ring all_reduce 1 GiB on {topology.num_gpus} GPUs (dgx-h100 x {servers}, 3-tier fat-tree, "
                         f"flow model): {done - start:.1f} s wall (build {built - start:.1f} s, simulate "
                         f"{done - built:.1f} s); {row.time_us / 1e3:.1f} ms, busbw {row.busbw_GBps:.1f} GB/s "
                         f"({row.protocol}, {row.channels} channels)")
    if args.step:
        lines += _perf_step()
    return "\n".join(lines) + "\n"


def _perf_step() -> list[str]:
    """The scale scenario: Llama-3 405B on 16,384 H100, 2,048 sequences of 8,192 tokens, micro-batch 1
    (16 micro-batches per replica), gradients reduced after the pipeline in one buffer, with
    simulate_step's reductions for symmetric layouts (one replica's pipeline, tensor rank 0's
    transfers, steady state extrapolated from 4 and 8 micro-batches). The analytical model runs
    first on the freshly built fabric (its routing tables are built during the run: "cold"), then
    the flow model, then the analytical model again with the routing tables the first runs built
    ("warm", what each further run of a sweep on the same fabric costs). Each run starts after a
    full garbage collection, so that none pays for collecting what the runs before it left (as
    ``timeit`` keeps the collector out of its timings)."""
    import gc
    import resource

    from simulator.config import SimConfig
    from simulator.training import simulate_step
    from topologies.presets import build_system
    from workloads.parallelism import ParallelismSpec
    from workloads.presets import model_preset

    lines = []
    start = time.perf_counter()
    topology = build_system("dgx-h100", nodes=2048, fabric="roce-400g", topology="fat-tree")
    built = time.perf_counter()
    layout = ParallelismSpec(tp=8, pp=16, dp=128, gpus=16384, micro_batch=1, global_batch=2048, seq_len=8192,
                             dp_overlap=False, bucket_bytes=None)
    for net, label in (("analytical", "analytical, cold"), ("flow", "flow"), ("analytical", "analytical, warm")):
        gc.collect()
        t0 = time.perf_counter()
        result = simulate_step(model_preset("llama3-405b"), layout, topology=topology,
                               config=SimConfig(network_model=net), granularity="chunk", symmetric_replicas=True,
                               tensor_rank0_p2p=True, steady_state_microbatches=4)
        wall = time.perf_counter() - t0
        rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20     # Linux: KiB
        lines.append(f"llama3-405b step on 16384 H100 (roce-400g fat-tree, {label}): {wall:.2f} s wall "
                     f"(+ {built - start:.1f} s building the fabric), peak RSS {rss_gib:.2f} GiB; step "
                     f"{result.step_time_s:.2f} s, {result.tflops_per_gpu:.0f} TFLOP/s per GPU, time in network "
                     f"{result.exposed_comm_s:.2f} s")
    return lines


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
        elif args.command == "validate":
            out = _validate(args)
        elif args.command == "calibrate":
            out = _calibrate(args)
        elif args.command == "topo":
            out = _topo(args)
        elif args.command == "step":
            out = _step(args)
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
