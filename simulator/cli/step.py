"""``fabricsim step``: one training step from a model preset (or a custom GPT), a layout and a fabric."""

from __future__ import annotations

import os
from collections.abc import Mapping

from simulator.compute.gpu import ATTENTION_KERNELS
from simulator.config import CONGESTION_NAMES, NETWORK_MODEL_NAMES
from simulator.studies.scenario import (
    STEP_DEFAULTS,
    STEP_FORMATS,
    prepare_step,
    run_step,
    step_settings,
)
from topologies import checks
from topologies.routing import ROUTING_POLICIES
from workloads.options import CpCommType, Dtype, Granularity, PipelineSchedule, Recompute, names
from workloads.presets import SC21_VOCAB

from .common import (
    bounded,
    fabric_options,
    load_calibration,
    nccl_version_option,
    positive_int,
    progress_display,
)


def figures_help() -> str:
    """``training.FIGURES`` as the epilog of ``fabricsim step --help``: each output figure and what it means."""
    import textwrap

    from simulator.studies.training import FIGURES

    lines = ["what the output's figures mean:"]
    for name, definition in FIGURES:
        lines += textwrap.wrap(f"{name}: {definition}", width=100, initial_indent="  ", subsequent_indent="      ")
    lines += textwrap.wrap(
        "warnings (out of memory, an under-filled pipeline, an approximation used, options or NCCL variables "
        "ignored) and notes are in every format: '# WARNING:' and '# note:' lines, JSON 'warnings' and 'notes', "
        "CSV rows of sections 'warning' and 'note'.",
        width=100,
    )
    return "\n".join(lines)


def add_parser(sub) -> None:
    import argparse

    step = sub.add_parser(
        "step",
        help="one training step: step time, throughput, time in network, breakdown",
        argument_default=None,
        epilog=figures_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    step.add_argument(
        "--seed", type=int, help="seed of ECMP hashing, of --straggler lognormal and of --jitter-us; default 0"
    )
    nccl_version_option(step)
    step.add_argument("--congestion", nargs="+", choices=CONGESTION_NAMES, help="flow-model refinements")
    step.add_argument(
        "--traffic-classes",
        metavar="SPEC",
        help="how switches schedule traffic classes, e.g. tp=prio:0,pp=prio:0,dp=ets:60,ckpt=ets:40 (schedulers "
        "prio:N, ets:W, vl-high:W, vl-low:W; a class catches the group it is named after, /group:G more, "
        "/dscp:N or /sl:N the NCCL_IB_TC or NCCL_IB_SL of the environment); default: one class, max-min",
    )
    step.add_argument(
        "--checkpoint-gb",
        type=float,
        metavar="GB",
        help="a checkpoint write of GB (1e9 bytes) per server across the fabric, in the class of group ckpt",
    )
    step.add_argument("--checkpoint-at-s", type=float, metavar="S", help="when the checkpoint starts; default 0")
    for name in ("tp", "pp", "dp", "cp", "ep", "etp", "vp"):
        step.add_argument(
            f"--{name}",
            type=positive_int(name),
            help={
                "dp": "data-parallel size; default GPUs / (tp pp cp)",
                "vp": "virtual stages per pipeline rank (interleaved 1F1B)",
                # Megatron-Core --expert-tensor-parallel-size (MoE parallel folding)
                "etp": "expert tensor-parallel size (Megatron-Core --expert-tensor-parallel-size): each expert's "
                "weights split over etp GPUs, the MoE layers regrouping each stage's tp x cp x dp GPUs as "
                "etp x ep x edp; default tp",
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
    step.add_argument(
        "--overlap-param-gather",
        action="store_const",
        const=True,
        help="with the distributed optimizer (--zero 1 or 2): all-gather the updated parameters bucket by bucket "
        "before the forward that uses them instead of after the optimizer (Megatron-Core; default off)",
    )
    step.add_argument(
        "--align-param-gather",
        action="store_const",
        const=True,
        help="with --overlap-param-gather and the interleaved schedule: the schedule dispatches each model chunk's "
        "parameter all-gathers before its first forward (Megatron-Core; default off, NeMo's recipes on)",
    )
    step.add_argument(
        "--defer-embedding-wgrad-compute",
        action="store_const",
        const=True,
        help="pp > 1: the last stage runs the output layer's weight gradients in the pipeline flush (Megatron-Core; "
        "default off, NeMo's large-model recipes on)",
    )
    step.add_argument(
        "--wgrad-deferral-limit",
        type=bounded("wgrad-deferral-limit", int, 0),
        help="with --defer-embedding-wgrad-compute: defer only the first N micro-batches' (default 0: all)",
    )
    step.add_argument(
        "--grad-reduce-in-bf16",
        action="store_const",
        const=True,
        help="keep and reduce gradients in bf16 instead of fp32 main gradients (Megatron-Core; default off)",
    )
    step.add_argument(
        "--tp-comm-overlap",
        action="store_const",
        const=True,
        help="overlap the sequence-parallel all-gathers and reduce-scatters with their GEMMs, as Transformer "
        "Engine's userbuffers (Megatron-Core; needs --sequence-parallel; default off)",
    )
    step.add_argument(
        "--overlap-p2p-communication",
        action="store_const",
        const=True,
        help="interleaved schedule: stage-to-stage sends and receives run beside the next pass instead of blocking "
        "it (Megatron's overlap_p2p_comm; off in Megatron-Core's config, on in Megatron-LM's and NeMo's interleaved "
        "runs; default off)",
    )
    step.add_argument(
        "--cp-comm-type",
        choices=names(CpCommType),
        help="context-parallel exchange: ring p2p overlapped with attention (default), all-to-all (Ulysses) or "
        "K/V all-gather (Megatron-Core --cp-comm-type)",
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
    step.add_argument(
        "--attention-kernel",
        choices=ATTENTION_KERNELS,
        help="the fused attention kernel: cudnn (Transformer Engine's cuDNN attention, its choice on Hopper and the "
        "default there; NVTE_FUSED_ATTN=1), fa2 (the flash-attn package's FlashAttention-2: NVTE_FUSED_ATTN=0), "
        "fa3 (FlashAttention-3); H100 measurements of each, simulator.compute.gpu",
    )
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
    step.add_argument(
        "--steps",
        type=positive_int("steps"),
        help="simulate N steps and report the step-time distribution (p50, p99, mean, min, max) and the ranks and "
        "links on the critical path most often; default 1 (the single step's output)",
    )
    step.add_argument(
        "--straggler",
        action="append",
        metavar="SPEC",
        help="slow the GPUs' compute: rank=R:S (GPU R's compute S times longer; repeat for more GPUs) or "
        "lognormal:SIGMA (each GPU's factor drawn per step, median 1, from --seed); every rank is then simulated",
    )
    step.add_argument(
        "--jitter-us",
        type=bounded("jitter-us", float, 0),
        help="host jitter: each compute task starts an exponentially distributed delay of this mean later (drawn "
        "from --seed); default 0, no measured default exists",
    )
    step.set_defaults(**dict.fromkeys(STEP_DEFAULTS))  # None: not given, so the scenario file or the default holds


def _step_settings(args) -> dict:
    """STEP_DEFAULTS, then the scenario file, then the command line; each value checked (SETTING_CHECKS) and
    ``given`` the names set by the file or the command line."""
    scenario: dict = {}
    if args.scenario is not None:
        import tomllib

        text = checks.read_text("scenario", args.scenario)
        try:
            scenario = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"scenario: {args.scenario} is not valid TOML ({exc})") from None
    settings = step_settings(scenario, source=args.scenario)
    given = set(settings["given"])
    for name in STEP_DEFAULTS:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = tuple(value) if name == "congestion" else value
            given.add(name)
    settings["given"] = frozenset(given)
    return settings


def _etp(p) -> str:
    """ ", etp N" in the layout line of a folded layout (expert tensor parallelism other than tp), else nothing."""
    return f", etp {p.expert_tp}" if p.folded else ""


def run(args) -> str:
    import dataclasses
    import json

    s = _step_settings(args)
    trace_ranks: tuple[int, ...] | str | None = "replica"
    if s["trace"] is not None:
        checks.output_file("trace", s["trace"])  # before the step runs
    if s["trace_ranks"] is not None:
        if s["trace"] is None:
            raise ValueError(f"trace_ranks: {s['trace_ranks']!r} is not allowed without --trace; expected --trace FILE")
    calibration = None
    if s["calibration"] is not None:
        calibration = load_calibration(s["calibration"], s["system"] if "system" in s["given"] else None)
        s["system"] = calibration.system
    stragglers = None
    if args.steps not in (None, 1) or args.straggler or args.jitter_us:
        from simulator.studies.stragglers import Stragglers

        stragglers = Stragglers.parse(args.straggler or (), jitter_us=args.jitter_us or 0.0)
        if s["trace"] is not None:
            raise checks.reject(
                "trace", s["trace"], "no --trace with --steps, --straggler or --jitter-us (a trace is one step's)"
            )
    from simulator.studies.training import collector_paused

    with collector_paused():  # building a fabric of a million links: as the step, whose garbage is acyclic
        setup = prepare_step(s, environ=os.environ)
    topology, parallelism, environment = setup.topology, setup.parallelism, setup.environment
    if s["trace_ranks"] is not None:
        from simulator.studies.trace import parse_ranks

        trace_ranks = parse_ranks(s["trace_ranks"], topology.num_gpus)
    system, config = topology, setup.config
    if calibration is not None:
        from simulator.validation.calibration import apply_calibration

        system, config = apply_calibration(topology, config, calibration)
    if stragglers is not None:
        return _run_steps(args, s, setup, stragglers, system, config, calibration)
    with progress_display("fabricsim step", quiet=bool(args.quiet)) as progress:
        result = run_step(setup, system=system, config=config, progress=progress)
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
        if s["net_model"] != "flow":
            trace_note += (
                f"# no link-tier counters in the trace: the {s['net_model']} network model keeps no timeline of "
                "link rates (--net-model flow does)\n"
            )
        if trace_ranks != "replica" and any(note.startswith("symmetric replicas") for note in result.notes):
            trace_note += (
                "# the step simulated data-parallel replica 0 for every replica: other ranks hold only the "
                "collectives they ran (--exact traces every rank's own step)\n"
            )
    if s["format"] == "csv":
        return format_step_csv(result) + "".join(f"note,,text,{line[2:].strip()}\n" for line in trace_note.splitlines())
    if s["format"] == "json":
        data = result.as_dict()
        data["parallelism"] = dataclasses.asdict(parallelism) | {"dp": result.parallelism.dp}
        data |= {"nccl_environment": environment} if environment else {}
        data |= {"sharp": True} if s["sharp"] else {}
        if config.traffic is not None:
            classes = {group: config.traffic.class_of(group) for group in result.breakdown["group"]}
            data |= {"traffic_classes": s["traffic_classes"], "group_classes": classes}
        data |= {"checkpoint_gb": s["checkpoint_gb"], "checkpoint_at_s": s["checkpoint_at_s"]} if config.storage else {}
        data |= {"calibration": calibration.to_dict()} if calibration is not None else {}
        return json.dumps(data, indent=1, default=str) + "\n"
    text = format_step(result, topology, nccl_environment=environment, traffic=config.traffic)
    if s["sharp"] or calibration is not None or config.traffic is not None or config.storage:
        first, rest = text.split("\n", 1)
        first += "; SHARP allowed" if s["sharp"] else ""
        first += f"; traffic classes {s['traffic_classes']}" if config.traffic is not None else ""
        first += (
            f"; checkpoint {s['checkpoint_gb']:g} GB per server at {s['checkpoint_at_s']:g} s" if config.storage else ""
        )
        first += f"; calibrated ({s['calibration']}: {calibration.describe()})" if calibration is not None else ""
        text = first + "\n" + rest
    return text + trace_note


def format_step(result, topology, *, nccl_environment: Mapping[str, str] | None = None, traffic=None) -> str:
    """The human-readable summary of a StepResult; ``nccl_environment``, the NCCL settings applied
    (tuner.applied_settings), ends its title as in bench's; with ``traffic`` (a TrafficPolicy) each group's row
    names its traffic class. Each figure is defined in ``training.FIGURES``
    (``fabricsim step --help``)."""
    from simulator.studies.training import OVERLAP_OF_GROUPS, VIA_OTHER_RANKS

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
        f"# tp {p.tp} x pp {p.pp} x dp {p.dp} x cp {p.cp} (ep {p.ep}{_etp(p)}, vp {p.vp}), {p.schedule}, "
        f"{p.global_batch} x {p.seq_len} tokens, micro-batch {p.micro_batch}, {p.dtype}, ZeRO {p.zero_stage}",
        *(f"# WARNING: {text}" for text in result.warnings),
        f"step time            {step:12.4f} s",
        f"tokens/s             {result.tokens_per_s:12.0f}",
        f"TFLOP/s/GPU model    {result.tflops_per_gpu:12.1f}  (Megatron-LM's formula: causal attention halved, "
        "no recomputation)",
        f"TFLOP/s/GPU executed {result.executed_tflops_per_gpu:12.1f}  (the kernels' FLOPs: masked blocks skipped, "
        "recomputation counted)",
        f"MFU model            {result.mfu:12.3f}",
        f"MFU executed         {result.executed_mfu:12.3f}",
        f"compute              {result.compute_s:12.4f} s  {pct(result.compute_s)}  (busiest GPU's kernels)",
        f"pipeline bubble      {result.bubble_s:12.4f} s  {pct(result.bubble_s)}  (idle on an infinitely fast network)",
        f"time in network      {result.exposed_comm_s:12.4f} s  {pct(result.exposed_comm_s)}  "
        "(step less the step on an infinitely fast network)",
        f"communication        {result.comm_s:12.4f} s           (busiest GPU's time with a collective in flight, "
        "hidden or not"
        + (
            "; less than time in network: several ranks' delays add up along the pipeline)"
            if result.exposed_comm_s > result.comm_s * (1 + 1e-9)  # beyond round-off
            else ")"
        ),
        *(
            [
                f"bound (approximate)  step time in [{result.step_time_low_s:.4f}, {result.step_time_high_s:.4f}] s, "
                f"time in network in [{result.exposed_comm_low_s:.4f}, {result.exposed_comm_high_s:.4f}] s"
            ]
            if result.step_time_low_s is not None
            else []
        ),
        f"memory per GPU       {result.memory_bytes_per_gpu / gib:12.1f} GiB of "
        f"{result.memory_capacity_bytes / gib:.0f} GiB" + ("  OUT OF MEMORY" if result.out_of_memory else ""),
        "",
        "# count and GB moved: all ranks; in flight s: the busiest rank's; exposed s: the rank that ends last's",
        f"{'group':<20}{'count':>8}{'GB moved':>12}{'in flight s':>13}{'exposed s':>11}",
    ]
    split = result.breakdown["exposed"]
    for name, entry in result.breakdown["group"].items():
        label = name if traffic is None else f"{name} [{traffic.class_of(name)}]"
        lines.append(
            f"{label:<20}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}{entry['time_s']:>13.4f}"
            f"{split[name]:>11.4f}"
        )
    for name in (OVERLAP_OF_GROUPS, VIA_OTHER_RANKS):
        lines.append(f"{name:<20}{'':>33}{split[name]:>11.4f}")
    lines.append(f"{'time in network':<20}{'':>33}{result.exposed_comm_s:>11.4f}")
    # what NCCL's tuner chose in each group, its biggest share of bytes first
    lines += ["", f"{'group':<8}{'algorithm':<24}{'count':>8}{'GB moved':>12}{'in flight s':>13}"]
    for group, choices in result.breakdown["algorithm"].items():
        for choice, entry in choices.items():
            lines.append(
                f"{group:<8}{choice:<24}{entry['count']:>8.0f}{entry['nbytes'] / 1e9:>12.1f}{entry['time_s']:>13.4f}"
            )
    lines += [
        "",
        "# TB moved: all links of the tier; busy s: TB moved / the tier's capacity; utilisation: busy s / step time",
        f"{'link tier':<10}{'TB moved':>10}{'busy s':>10}{'utilisation':>13}",
    ]
    busy, used = result.breakdown["link_tier_busy_s"], result.breakdown["link_tier_utilisation"]
    for name, nbytes in result.breakdown["link_tier_bytes"].items():
        if nbytes > 0:
            lines.append(f"{name:<10}{nbytes / 1e12:>10.2f}{busy[name]:>10.4f}{used[name]:>12.1%}")
    lines += [f"# note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def format_step_csv(result) -> str:
    """The step as one long CSV table, ``section,name,field,value``: the headline figures (section "summary"), the
    layout ("parallelism"), each group, the time-in-network split, each tier, memory, then every warning and note
    (field "text")."""
    import csv
    import io

    rows: list[tuple] = [("section", "name", "field", "value")]
    data = result.as_dict()
    rows += [("summary", "", k, v) for k, v in data.items() if not isinstance(v, (dict, list))]
    rows += [("parallelism", "", k, v) for k, v in data["parallelism"].items()]
    for name, entry in result.breakdown["group"].items():
        rows += [("group", name, field, entry[field]) for field in ("count", "nbytes", "time_s")]
    rows += [("exposed", name, "exposed_s", value) for name, value in result.breakdown["exposed"].items()]
    for view in ("bytes", "busy_s", "utilisation"):
        rows += [("link_tier", name, view, v) for name, v in result.breakdown[f"link_tier_{view}"].items()]
    rows += [("memory", part, "bytes", value) for part, value in result.memory.items()]
    rows += [("warning", "", "text", text) for text in result.warnings]
    rows += [("note", "", "text", text) for text in result.notes]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def _run_steps(args, s, setup, stragglers, system, config, calibration) -> str:
    """``fabricsim step --steps N --straggler SPEC --jitter-us X``: N steps, their distribution and critical path."""
    import dataclasses
    import json

    from simulator.studies.stragglers import run_steps

    with progress_display("fabricsim step", quiet=bool(args.quiet)) as progress:
        result = run_steps(
            setup,
            steps=args.steps or 1,
            stragglers=stragglers,
            system=system,
            config=config,
            progress=progress,
        )
    if s["format"] == "csv":
        return format_steps_csv(result)
    if s["format"] == "json":
        data = result.as_dict()
        data["parallelism"] = dataclasses.asdict(setup.parallelism) | {"dp": result.first.parallelism.dp}
        data |= {"nccl_environment": setup.environment} if setup.environment else {}
        data |= {"calibration": calibration.to_dict()} if calibration is not None else {}
        return json.dumps(data, indent=1, default=str) + "\n"
    return format_steps(result, setup.topology, top=STEPS_TOP)


# the ranks and links the table lists (the JSON and CSV list all)
STEPS_TOP = 10


def format_steps(result, topology, *, top: int = STEPS_TOP) -> str:
    """The human-readable summary of a StepsResult: the step-time distribution, then the ranks and links on the
    critical path, the most seconds first (``simulator.studies.stragglers``)."""
    p = result.first.parallelism
    lines = [
        f"# fabricsim step: {result.model} on {topology.description or topology.name} ({result.gpus} GPUs), "
        f"{result.steps} step{'s' if result.steps > 1 else ''}, seed {result.seed}",
        f"# tp {p.tp} x pp {p.pp} x dp {p.dp} x cp {p.cp} (ep {p.ep}{_etp(p)}, vp {p.vp}), {p.schedule}, "
        f"{p.global_batch} x {p.seq_len} tokens, micro-batch {p.micro_batch}, {p.dtype}, ZeRO {p.zero_stage}",
        f"# stragglers: {result.stragglers.describe()}",
        *(f"# WARNING: {text}" for text in result.warnings),
        f"step time p50        {result.p50_s:12.4f} s",
        f"step time p99        {result.p99_s:12.4f} s",
        f"step time mean       {result.mean_s:12.4f} s",
        f"step time min        {result.min_s:12.4f} s",
        f"step time max        {result.max_s:12.4f} s",
        "",
        f"# critical path, ranks: steps on it, its compute on it per step (s, share of the mean step), collectives "
        f"on it it released (arrived last); top {top}",
        f"{'rank':>6}{'steps':>7}{'compute s':>12}{'share':>8}{'released':>10}",
    ]
    for row in result.ranks[:top]:
        lines.append(
            f"{row['rank']:>6}{row['steps']:>7}{row['critical_s']:>12.4f}{row['share']:>8.1%}{row['released']:>10}"
        )
    lines += [
        "",
        f"# critical path, links: the bottleneck of its collectives (most bytes per capacity): steps, their time per "
        f"step (s, share), count; top {top}",
        f"{'link':>7}  {'name':<40}{'steps':>7}{'comm s':>10}{'share':>8}{'count':>8}",
    ]
    for row in result.links[:top]:
        lines.append(
            f"{row['link']:>7}  {row['name']:<40}{row['steps']:>7}{row['critical_s']:>10.4f}{row['share']:>8.1%}"
            f"{row['collectives']:>8}"
        )
    lines += [f"# note: {note}" for note in result.notes]
    return "\n".join(lines) + "\n"


def format_steps_csv(result) -> str:
    """A StepsResult as one long CSV table, ``section,name,field,value``: the distribution ("summary"), each
    step ("step", name its index), each rank and link on the critical path ("rank", "link"), warnings, notes."""
    import csv
    import io

    from simulator.studies.stragglers import LINK_COLUMNS, RANK_COLUMNS

    rows: list[tuple] = [("section", "name", "field", "value")]
    rows += [("summary", "", k, v) for k, v in result.summary().items()]
    for k, values in enumerate(zip(result.step_time_s, result.compute_s, result.exposed_comm_s)):
        rows += [("step", k, name, v) for name, v in zip(("step_time_s", "compute_s", "exposed_comm_s"), values)]
    rows += [("rank", row["rank"], c, row[c]) for row in result.ranks for c in RANK_COLUMNS[1:]]
    rows += [("link", row["link"], c, row[c]) for row in result.links for c in LINK_COLUMNS[1:]]
    rows += [("warning", "", "text", text) for text in result.warnings]
    rows += [("note", "", "text", text) for text in result.notes]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
