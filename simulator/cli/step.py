"""``fabricsim step``: one training step from a model preset (or a custom GPT), a layout and a fabric."""

from __future__ import annotations

import os
from collections.abc import Mapping

from simulator.config import CONGESTION_NAMES, NETWORK_MODEL_NAMES, NetworkModel
from topologies import checks
from topologies.routing import ROUTING_POLICIES
from workloads.options import Dtype, Granularity, PipelineSchedule, Recompute, names
from workloads.parallelism import MCORE_BUCKETS
from workloads.presets import SC21_VOCAB

from .common import (
    DEFAULT_SYSTEM,
    FABRIC_DEFAULTS,
    bounded,
    build_topology,
    fabric_options,
    load_calibration,
    positive_int,
    progress_display,
)

# `fabricsim step` with no arguments: a Llama-3 8B-class model on 8 DGX H100 (64 GPUs), TP 2 x PP 2 x DP 16,
# 256 sequences of 8192 tokens per step (2M tokens), micro-batch 1, bf16, DDP buckets overlapped with backward.
STEP_DEFAULTS = {
    "model": "llama3-8b",
    "system": DEFAULT_SYSTEM,
    **FABRIC_DEFAULTS,
    "nodes": 8,
    "tp": 2,
    "pp": 2,
    "cp": 1,
    "ep": 1,
    "vp": 1,
    "zero": 0,
    "fsdp": False,
    "global_batch": 256,
    "micro_batch": 1,
    "seq_len": 8192,
    "bucket_mb": None,  # Megatron-Core's buckets (workloads.parallelism.MCORE_BUCKETS)
    "overlap_grad_reduce": True,
    "dtype": "bf16",
    "schedule": "1f1b",
    "sequence_parallel": False,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "recompute": "none",
    "net_model": "flow",
    "granularity": "layer",
    "fabric": None,
    "rail_optimised": True,
    "nics_per_node": None,
    "gdr": True,
    "routing": "ecmp",
    "seed": 0,
    "congestion": (),
    "layers": None,
    "hidden": None,
    "heads": None,
    "vocab": SC21_VOCAB,
    "ffn_hidden": None,
    "dp": None,
    "format": "table",
    "trace": None,
    "trace_ranks": None,
    "sharp": False,
    "calibration": None,
    "exact": False,
}

STEP_FORMATS = ("table", "json")
GPT_ONLY = ("layers", "hidden", "heads", "vocab", "ffn_hidden")  # describe --model gpt, and only it


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise checks.reject(field, value, "a string")
    return value


def _names(field: str, value: object) -> tuple[str, ...]:
    expected = f"a list of distinct names from {', '.join(CONGESTION_NAMES)}"
    if (
        not isinstance(value, (list, tuple))
        or any(not isinstance(v, str) or v not in CONGESTION_NAMES for v in value)
        or len(set(value)) != len(value)
    ):
        raise checks.reject(field, value, expected)
    return tuple(value)


def _positive(field: str, value: object) -> int:
    return checks.integer(field, value, low=1)


# the type of every setting a scenario file may give (the command line's are its options' types)
SETTING_CHECKS = {
    "model": _text,
    "system": _text,
    "topology": _text,
    "fabric": _text,
    "trace": _text,
    "trace_ranks": _text,
    "sharp": checks.flag,
    "calibration": _text,
    **dict.fromkeys(
        (
            "nodes",
            "nics_per_node",
            "planes",
            "tp",
            "pp",
            "cp",
            "ep",
            "vp",
            "dp",
            "global_batch",
            "micro_batch",
            "seq_len",
            *GPT_ONLY,
        ),
        _positive,
    ),
    "oversubscription": lambda f, v: checks.finite(f, v, low=1),
    "zero": lambda f, v: checks.integer(f, v, low=0, high=3),
    **dict.fromkeys(
        (
            "fsdp",
            "sequence_parallel",
            "rail_optimised",
            "gdr",
            "overlap_grad_reduce",
            "exact",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ),
        checks.flag,
    ),
    "bucket_mb": lambda f, v: checks.positive_finite(f, v),
    "dtype": lambda f, v: checks.option(f, v, Dtype),
    "schedule": lambda f, v: checks.option(f, v, PipelineSchedule),
    "recompute": lambda f, v: checks.option(f, v, Recompute),
    "granularity": lambda f, v: checks.option(f, v, Granularity),
    "net_model": lambda f, v: checks.option(f, v, NetworkModel),
    "routing": lambda f, v: checks.choice(f, v, ROUTING_POLICIES),
    "seed": checks.integer,
    "congestion": _names,
    "format": lambda f, v: checks.choice(f, v, STEP_FORMATS),
}


def add_parser(sub) -> None:
    step = sub.add_parser(
        "step", help="one training step: step time, throughput, time in network, breakdown", argument_default=None
    )
    step.add_argument(
        "scenario",
        nargs="?",
        default=None,
        metavar="SCENARIO.toml",
        help="a TOML file with any of the options below (names with _ for -); options given on the command line win",
    )
    step.add_argument(
        "--model",
        help="a model preset (llama3-8b, llama3-70b, gpt3-175b, mixtral-8x7b, ...) or "
        "'gpt' with --layers --hidden --heads; default llama3-8b",
    )
    for name, what in (
        ("layers", "transformer layers"),
        ("hidden", "hidden size"),
        ("heads", "attention heads"),
        ("vocab", f"vocabulary (default {SC21_VOCAB})"),
        ("ffn-hidden", "MLP size (default 4 x hidden)"),
    ):
        step.add_argument(f"--{name}", type=positive_int(name), help=f"with --model gpt: {what}")
    fabric_options(step, defaults=STEP_DEFAULTS)
    step.add_argument("--routing", choices=ROUTING_POLICIES, help="fabric routing; default ecmp")
    step.add_argument(
        "--sharp",
        action="store_const",
        const=True,
        help="allow in-network reduction on SHARP switches (as NCCL_COLLNET_ENABLE=1)",
    )
    step.add_argument(
        "--calibration",
        metavar="FILE.json",
        help="apply a calibration written by `fabricsim calibrate --out` (link scale + overhead) to the system",
    )
    step.add_argument("--seed", type=int, help="seed of ECMP hashing; default 0")
    step.add_argument("--congestion", nargs="+", choices=CONGESTION_NAMES, help="flow-model refinements")
    for name in ("tp", "pp", "dp", "cp", "ep", "vp"):
        step.add_argument(
            f"--{name}",
            type=positive_int(name),
            help={
                "dp": "data-parallel size; default GPUs / (tp pp cp)",
                "vp": "virtual stages per pipeline rank (interleaved 1F1B)",
            }.get(name, f"{name} size"),
        )
    step.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage; default 0")
    step.add_argument("--fsdp", action="store_const", const=True, help="FSDP full sharding (ZeRO-3 semantics)")
    step.add_argument("--global-batch", type=positive_int("global-batch"), help="sequences per step; default 256")
    step.add_argument("--micro-batch", type=positive_int("micro-batch"), help="sequences per micro-batch; default 1")
    step.add_argument("--seq-len", type=positive_int("seq-len"), help="tokens per sequence; default 8192")
    step.add_argument(
        "--bucket-mb",
        type=bounded("bucket-mb", float, 0, strict=True),
        help="gradient bucket in MiB (PyTorch DDP: 25); default Megatron-Core's, max(40M, 1M x DP x CP) "
        "parameters, one bucket per model chunk after the first and without overlap",
    )
    step.add_argument(
        "--no-overlap-grad-reduce",
        dest="overlap_grad_reduce",
        action="store_const",
        const=False,
        help="reduce the gradients after the backward instead of bucket by bucket during it (the default)",
    )
    step.add_argument("--dtype", choices=names(Dtype), help="training precision; default bf16")
    step.add_argument("--schedule", choices=names(PipelineSchedule), help="pipeline schedule; default 1f1b")
    step.add_argument("--sequence-parallel", action="store_const", const=True, help="Megatron sequence parallelism")
    for what in ("embedding", "loss"):
        step.add_argument(
            f"--account-for-{what}-in-pipeline-split",
            action="store_const",
            const=True,
            help=f"count the {what} as a layer when splitting layers over pipeline stages (Megatron-Core)",
        )
    step.add_argument("--recompute", choices=names(Recompute), help="activation recomputation")
    step.add_argument("--net-model", choices=NETWORK_MODEL_NAMES, help="network model; default flow")
    step.add_argument(
        "--granularity",
        choices=names(Granularity),
        help="tasks per layer (default) or per model chunk (faster; bytes and compute conserved)",
    )
    step.add_argument(
        "--exact",
        action="store_const",
        const=True,
        help="simulate every rank: no replica or tensor-rank reduction, not even the exact ones the step finds "
        "(see its notes)",
    )
    step.add_argument("--format", choices=STEP_FORMATS, help="output format; default table")
    step.add_argument(
        "--trace",
        metavar="FILE.json[.gz]",
        help="also write the step as a Chrome/Perfetto trace (gzipped when the name ends in .gz)",
    )
    step.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr (there is none when it is not a terminal)"
    )
    step.add_argument(
        "--trace-ranks",
        metavar="RANKS",
        help='the ranks in the trace: "replica" (default: data-parallel replica 0, every stage), "all", or '
        "ranks and ranges such as 0-7,64",
    )
    step.set_defaults(**dict.fromkeys(STEP_DEFAULTS))  # None: not given, so the scenario file or the default holds


def _step_settings(args) -> dict:
    """STEP_DEFAULTS, then the scenario file, then the command line; each value checked (SETTING_CHECKS) and
    ``given`` the names set by the file or the command line."""
    settings = dict(STEP_DEFAULTS)
    given = set()
    if args.scenario is not None:
        import tomllib

        text = checks.read_text("scenario", args.scenario)
        try:
            scenario = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"scenario: {args.scenario} is not valid TOML ({exc})") from None
        for key, value in scenario.items():
            name = key.replace("-", "_")
            if name not in settings:
                raise ValueError(
                    f"scenario: {args.scenario}: {key!r} is not a known field; expected one of "
                    f"{', '.join(k for k in STEP_DEFAULTS)}"
                )
            try:
                settings[name] = SETTING_CHECKS[name](name, value)
            except ValueError as exc:
                raise ValueError(f"scenario: {args.scenario}: {exc}") from None
            given.add(name)
    for name in settings:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = tuple(value) if name == "congestion" else value
            given.add(name)
    settings["given"] = frozenset(given)
    return settings


def run(args) -> str:
    import dataclasses
    import json

    from simulator.collectives.tuner import CollectivePolicy, applied_settings
    from simulator.config import SimConfig
    from simulator.studies.training import StepOptions, simulate_step
    from workloads.parallelism import ParallelismSpec
    from workloads.presets import custom_gpt, model_preset

    s = _step_settings(args)
    trace_ranks: tuple[int, ...] | str | None = "replica"
    if s["trace"] is not None:
        checks.output_file("trace", s["trace"])  # before the step runs
    if s["trace_ranks"] is not None:
        if s["trace"] is None:
            raise ValueError(f"trace_ranks: {s['trace_ranks']!r} is not allowed without --trace; expected --trace FILE")
    if str(s["model"]).lower() != "gpt":
        extra = [name for name in GPT_ONLY if name in s["given"]]
        if extra:
            options = ", ".join(f"--{name.replace('_', '-')}" for name in GPT_ONLY)
            raise ValueError(
                f"{extra[0]}: {s[extra[0]]!r} is not allowed with model {s['model']!r}, a preset; "
                f"expected --model gpt ({options} describe a custom GPT)"
            )
    if str(s["model"]).lower() == "gpt":
        missing = [f"--{k}" for k in ("layers", "hidden", "heads") if s[k] is None]
        if missing:
            raise ValueError(f"model: 'gpt' needs {', '.join(missing)}")
        model = custom_gpt(
            layers=s["layers"], hidden=s["hidden"], heads=s["heads"], vocab=s["vocab"], ffn_hidden=s["ffn_hidden"]
        )
    else:
        model = model_preset(str(s["model"]))
    calibration = None
    if s["calibration"] is not None:
        calibration = load_calibration(s["calibration"], s["system"] if "system" in s["given"] else None)
        s["system"] = calibration.system
    topology = build_topology(s)
    if s["trace_ranks"] is not None:
        from simulator.studies.trace import parse_ranks

        trace_ranks = parse_ranks(s["trace_ranks"], topology.num_gpus)
    bucket_bytes: int | str = MCORE_BUCKETS
    if s["bucket_mb"] is not None:
        if not 4 <= s["bucket_mb"] * 2**20 <= checks.MAX_BYTES:  # a float: 1e308 MiB is inf bytes, not allowed
            raise checks.reject(
                "bucket_mb",
                s["bucket_mb"],
                f"a size in MiB from {4 / 2**20:.2g} (4 bytes) to {checks.MAX_BYTES >> 20} (1 PiB)",
            )
        bucket_bytes = int(s["bucket_mb"] * 2**20)
    parallelism = ParallelismSpec(
        tp=s["tp"],
        pp=s["pp"],
        dp=s["dp"],
        cp=s["cp"],
        ep=s["ep"],
        vp=s["vp"],
        gpus=topology.num_gpus,
        zero=s["zero"],
        fsdp=s["fsdp"],
        micro_batch=s["micro_batch"],
        global_batch=s["global_batch"],
        seq_len=s["seq_len"],
        schedule=s["schedule"],
        sequence_parallel=s["sequence_parallel"],
        account_for_embedding_in_pipeline_split=s["account_for_embedding_in_pipeline_split"],
        account_for_loss_in_pipeline_split=s["account_for_loss_in_pipeline_split"],
        dtype=s["dtype"],
        bucket_bytes=bucket_bytes,
        dp_overlap=s["overlap_grad_reduce"],
    )
    # NCCL's environment variables apply to every collective of the step, as they would to the job
    collnet = True if s["sharp"] else None  # --sharp wins over NCCL_COLLNET_ENABLE, as in bench
    environment = applied_settings(os.environ, collnet=collnet)
    config = SimConfig(
        network_model=s["net_model"],
        routing=s["routing"],
        seed=s["seed"],
        congestion=tuple(s["congestion"]),
        collectives=CollectivePolicy.from_environment(os.environ, collnet=collnet),
        tier_rates=s["trace"] is not None,  # the trace's link-tier counter tracks
    )
    system = topology
    if calibration is not None:
        from simulator.validation.calibration import apply_calibration

        system, config = apply_calibration(topology, config, calibration)
    with progress_display("fabricsim step", quiet=bool(args.quiet)) as progress:
        result = simulate_step(
            model,
            parallelism,
            system=system,
            options=StepOptions(
                config=config,
                recompute=s["recompute"],
                granularity=s["granularity"],
                exact=s["exact"],
                progress=progress,
            ),
        )
    trace_note = ""
    if s["trace"] is not None:
        from simulator.studies.trace import write_trace

        try:
            written = write_trace(result, s["trace"], ranks=trace_ranks)
        except OSError as exc:
            raise ValueError(f"trace: {s['trace']!r} cannot be written ({exc.strerror})") from None
        if trace_ranks is None:
            which = "every rank"
        else:
            which = "data-parallel replica 0" if trace_ranks == "replica" else f"{len(trace_ranks)} ranks"
        trace_note = (
            f"# trace of {which} ({written} events) written to {s['trace']} "
            "(open it in https://ui.perfetto.dev or chrome://tracing)\n"
        )
        if trace_ranks != "replica" and any(note.startswith("symmetric replicas") for note in result.notes):
            trace_note += (
                "# the step simulated data-parallel replica 0 for every replica: other ranks hold only the "
                "collectives they ran (--exact traces every rank's own step)\n"
            )
    if s["format"] == "json":
        data = result.as_dict()
        data["parallelism"] = dataclasses.asdict(parallelism) | {"dp": result.parallelism.dp}
        data |= {"nccl_environment": environment} if environment else {}
        data |= {"sharp": True} if s["sharp"] else {}
        data |= {"calibration": calibration.to_dict()} if calibration is not None else {}
        return json.dumps(data, indent=1, default=str) + "\n"
    text = format_step(result, topology, nccl_environment=environment)
    if s["sharp"] or calibration is not None:
        first, rest = text.split("\n", 1)
        first += "; SHARP allowed" if s["sharp"] else ""
        first += f"; calibrated ({s['calibration']}: {calibration.describe()})" if calibration is not None else ""
        text = first + "\n" + rest
    return text + trace_note


def format_step(result, topology, *, nccl_environment: Mapping[str, str] | None = None) -> str:
    """The human-readable summary of a StepResult; ``nccl_environment``, the NCCL settings applied
    (tuner.applied_settings), ends its title as in bench's."""
    p = result.parallelism
    step = result.step_time_s

    def pct(x):
        return f"{100 * x / step:5.1f} %" if step > 0 else "    -"

    gib = 1 << 30
    title = f"# fabricsim step: {result.model} on {topology.description or topology.name} ({result.gpus} GPUs)"
    if nccl_environment:
        from simulator.collectives.tuner import describe_settings

        title += "; " + describe_settings(nccl_environment)
    lines = [
        title,
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
        "",
        f"{'group':<8}{'count':>8}{'GB moved':>12}{'time s':>10}{'exposed s':>11}",
    ]
    for name, entry in result.breakdown["group"].items():
        lines.append(
            f"{name:<8}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}{entry['time_s']:>10.4f}"
            f"{entry['exposed_s']:>11.4f}"
        )
    # what NCCL's tuner chose in each group, its biggest share of bytes first
    lines += ["", f"{'group':<8}{'algorithm':<24}{'count':>8}{'GB moved':>12}{'time s':>10}"]
    for group, choices in result.breakdown["algorithm"].items():
        for choice, entry in choices.items():
            lines.append(
                f"{group:<8}{choice:<24}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}{entry['time_s']:>10.4f}"
            )
    lines += ["", f"{'link tier':<10}{'TB moved':>10}"]
    for name, nbytes in result.breakdown["link_tier_bytes"].items():
        if nbytes > 0:
            lines.append(f"{name:<10}{nbytes / 1e12:>10.2f}")
    lines += [f"# note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"
