"""A training step as a flat mapping of settings: what ``fabricsim step`` takes from its scenario TOML and its
options, and what a sweep (``studies.sweep``) varies. ``step_settings`` checks a mapping against
``STEP_DEFAULTS`` (one clear line per bad field), ``prepare_step`` turns the settings into the model, layout,
system and simulation config, and ``run_step`` simulates it.

The fabric settings (``FABRIC_DEFAULTS``, ``build_topology``) are the ones ``bench`` and ``topo`` share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.compute.gpu import ATTENTION_KERNELS, compute_model_for, with_attention_kernel
from simulator.config import CONGESTION_NAMES, NetworkModel, SimConfig
from topologies import checks
from topologies.dragonfly import ARRANGEMENTS
from topologies.routing import ROUTING_POLICIES
from topologies.topology import Topology
from workloads.model import ModelSpec
from workloads.options import CpCommType, Dtype, Granularity, PipelineSchedule, Recompute
from workloads.parallelism import MAX_COUNT, MCORE_BUCKETS, ParallelismSpec
from workloads.presets import SC21_VOCAB

if TYPE_CHECKING:  # the training study and the tuner load on first use: a command line starts without them
    from .training import StepResult

__all__ = (
    "DEFAULT_SYSTEM",
    "FABRIC_DEFAULTS",
    "NETWORK_DEFAULTS",
    "STEP_DEFAULTS",
    "STEP_FORMATS",
    "GPT_ONLY",
    "SETTING_CHECKS",
    "StepSetup",
    "build_topology",
    "system_of",
    "fabric_of",
    "network_config",
    "step_settings",
    "prepare_step",
    "run_step",
)

DEFAULT_SYSTEM = "dgx-h100"  # the system preset when none is given
# the fabric options' defaults in bench and topo (step's, in STEP_DEFAULTS, differ in nodes); the others default
# to None or, for the --no-... switches, True
FABRIC_DEFAULTS = {
    "nodes": 1,
    "topology": "leaf-spine",
    "oversubscription": 1.0,
    "planes": 1,
    "dragonfly_p": None,
    "dragonfly_a": None,
    "dragonfly_h": None,
    "dragonfly_arrangement": "absolute",
    "gpu": None,  # the GPU preset of a --system FILE that does not name it (nvidia-smi topo -m)
}


def system_of(settings: Mapping) -> Any:
    """The system ``settings["system"]`` names, as ``build_system`` takes it: a preset name, or the server of a
    file (``nvidia-smi topo -m`` output, an NCCL topology XML) with ``settings["gpu"]`` naming its GPU
    (``topologies.io.resolve_system``)."""
    from topologies.io import resolve_system

    return resolve_system(settings["system"], gpu=settings.get("gpu"), fabric=fabric_of(settings))


def fabric_of(settings: Mapping) -> Any:
    """The fabric ``settings["fabric"]`` names, as ``build_system`` takes it: None, a FABRICS name, or a custom
    fabric from a table or a TOML/JSON file (``topologies.io.resolve_fabric``)."""
    from topologies.io import resolve_fabric

    return resolve_fabric(settings["fabric"])


def build_topology(settings: Mapping) -> Topology:
    """The system the fabric settings in ``settings`` (parsed arguments as a dict, or step settings) describe."""
    from topologies.presets import build_system

    return build_system(
        system_of(settings),
        nodes=settings["nodes"],
        topology=settings["topology"],
        fabric=fabric_of(settings),
        oversubscription=settings["oversubscription"],
        rail_optimised=settings["rail_optimised"],
        nics_per_node=settings["nics_per_node"],
        planes=settings["planes"],
        gdr=settings["gdr"],
        dragonfly_p=settings["dragonfly_p"],
        dragonfly_a=settings["dragonfly_a"],
        dragonfly_h=settings["dragonfly_h"],
        dragonfly_arrangement=settings["dragonfly_arrangement"],
    )


# the network settings a step and a single collective (studies.sweep's bench scenarios) share, beyond the fabric's
NETWORK_DEFAULTS = {
    "fabric": None,
    "rail_optimised": True,
    "nics_per_node": None,
    "gdr": True,
    "routing": "ecmp",
    "seed": 0,
    "net_model": "flow",
    "congestion": (),
    "sharp": False,
    "nccl_version": None,  # the NCCL release whose default enablement the tuner follows (None: the latest modelled)
}

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
    # Megatron-Core --expert-tensor-parallel-size; None = tp (its default), 1 folds the tensor ranks into the
    # expert-parallel groups (ParallelismSpec.etp)
    "etp": None,
    "vp": 1,
    "zero": 0,
    "fsdp": False,
    "global_batch": 256,
    "micro_batch": 1,
    "seq_len": 8192,
    "bucket_mb": None,  # Megatron-Core's buckets (workloads.parallelism.MCORE_BUCKETS)
    "overlap_grad_reduce": True,
    # Megatron-Core's defaults (off): --overlap-param-gather, --grad-reduce-in-bf16, --tp-comm-overlap,
    # --overlap-p2p-communication
    "overlap_param_gather": False,
    # Megatron-Core's defaults (off; NeMo's performance recipes turn them on, simulator.validation.dgxc):
    # --align-param-gather, --defer-embedding-wgrad-compute with --wgrad-deferral-limit (0: every micro-batch)
    "align_param_gather": False,
    "defer_embedding_wgrad_compute": False,
    "wgrad_deferral_limit": 0,
    "grad_reduce_in_bf16": False,
    "tp_comm_overlap": False,
    "overlap_p2p_communication": False,  # Megatron-Core's ModelParallelConfig.overlap_p2p_comm default
    "cp_comm_type": "p2p",  # Megatron-Core's --cp-comm-type default
    "dtype": "bf16",
    "schedule": "1f1b",
    "sequence_parallel": False,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "recompute": "none",
    "attention_kernel": None,  # the GPU compute model's (cuDNN fused attention on Hopper)
    "granularity": "layer",
    **NETWORK_DEFAULTS,
    "layers": None,
    "hidden": None,
    "heads": None,
    "vocab": SC21_VOCAB,
    "ffn_hidden": None,
    "dp": None,
    "format": "table",
    "trace": None,
    "trace_ranks": None,
    "calibration": None,
    "exact": False,
    # traffic classes (simulator.traffic): the switches' policy as a spec string ("tp=prio:0,dp=ets:60,ckpt=ets:40"),
    # and a checkpoint write of checkpoint_gb (1e9 bytes) per server starting checkpoint_at_s into the step
    "traffic_classes": None,
    "checkpoint_gb": None,
    "checkpoint_at_s": 0.0,
}

STEP_FORMATS = ("table", "json", "csv")
GPT_ONLY = ("layers", "hidden", "heads", "vocab", "ffn_hidden")  # describe --model gpt, and only it


def _text(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise checks.reject(field, value, "a string")
    return value


def _fabric_table(value: Mapping) -> dict:
    """A custom fabric table (``[fabric]`` in a scenario or design file), checked now and kept as a plain dict."""
    from topologies.io import custom_fabric

    custom_fabric(value)
    return dict(value)


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
    "gpu": _text,
    "topology": _text,
    "fabric": lambda f, v: _fabric_table(v) if isinstance(v, Mapping) else _text(f, v),
    "trace": _text,
    "trace_ranks": _text,
    "sharp": checks.flag,
    "calibration": _text,
    "nccl_version": _text,
    "traffic_classes": _text,
    "checkpoint_gb": lambda f, v: checks.finite(f, v, low=0, low_open=True, high=checks.MAX_BYTES / 1e9),
    "checkpoint_at_s": lambda f, v: checks.finite(f, v, low=0),
    **dict.fromkeys(
        (
            "nodes",
            "nics_per_node",
            "planes",
            "dragonfly_p",
            "dragonfly_a",
            "dragonfly_h",
            "tp",
            "pp",
            "cp",
            "ep",
            "etp",
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
    "dragonfly_arrangement": lambda f, v: checks.choice(f, v, ARRANGEMENTS),
    "zero": lambda f, v: checks.integer(f, v, low=0, high=3),
    **dict.fromkeys(
        (
            "fsdp",
            "sequence_parallel",
            "rail_optimised",
            "gdr",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "align_param_gather",
            "defer_embedding_wgrad_compute",
            "grad_reduce_in_bf16",
            "tp_comm_overlap",
            "overlap_p2p_communication",
            "exact",
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ),
        checks.flag,
    ),
    "bucket_mb": lambda f, v: checks.positive_finite(f, v),
    "wgrad_deferral_limit": lambda f, v: checks.integer(f, v, low=0, high=MAX_COUNT),
    "dtype": lambda f, v: checks.option(f, v, Dtype),
    "cp_comm_type": lambda f, v: checks.option(f, v, CpCommType),
    "schedule": lambda f, v: checks.option(f, v, PipelineSchedule),
    "recompute": lambda f, v: checks.option(f, v, Recompute),
    "attention_kernel": lambda f, v: None if v is None else checks.choice(f, v, ATTENTION_KERNELS),
    "granularity": lambda f, v: checks.option(f, v, Granularity),
    "net_model": lambda f, v: checks.option(f, v, NetworkModel),
    "routing": lambda f, v: checks.choice(f, v, ROUTING_POLICIES),
    "seed": checks.integer,
    "congestion": _names,
    "format": lambda f, v: checks.choice(f, v, STEP_FORMATS),
}


def step_settings(mapping: Mapping, *, source: str | None = None) -> dict:
    """STEP_DEFAULTS updated with ``mapping`` (names with - or _), each value checked (SETTING_CHECKS);
    ``given`` holds the names the mapping set. ``source`` (a file name) starts each error message."""
    settings = dict(STEP_DEFAULTS)
    given = set()
    where = f"scenario: {source}: " if source else ""
    for key, value in mapping.items():
        name = str(key).replace("-", "_")
        if name not in STEP_DEFAULTS:
            raise ValueError(
                f"{where or 'scenario: '}{key!r} is not a known field; expected one of {', '.join(STEP_DEFAULTS)}"
            )
        try:
            settings[name] = SETTING_CHECKS[name](name, value)
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
        given.add(name)
    settings["given"] = frozenset(given)
    return settings


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSetup:
    """What a step's settings describe: the model, the layout, the system (``topology``) and the simulation
    config; ``environment`` the NCCL settings applied (``tuner.applied_settings``)."""

    model: ModelSpec
    parallelism: ParallelismSpec
    topology: Topology
    config: SimConfig
    environment: dict
    recompute: str
    granularity: str
    exact: bool
    attention_kernel: str | None = None
    ignored: tuple[str, ...] = ()  # settings and NCCL variables given that change nothing here, each said why


def prepare_step(s: Mapping, *, environ: Mapping[str, str]) -> StepSetup:
    """The step that settings ``s`` (:func:`step_settings`) describe, with NCCL's environment variables from
    ``environ`` applying to every collective, as they would to the job. Raises ValueError, naming the
    field, on a setting that cannot run."""
    from simulator.collectives.tuner import applied_settings
    from workloads.presets import custom_gpt, model_preset

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
    topology = build_topology(s)
    if s["attention_kernel"] is not None:  # refused here, naming the setting, on a GPU without kernel curves
        from .training import _gpu_of

        with_attention_kernel(compute_model_for(_gpu_of(topology)), s["attention_kernel"], field="attention_kernel")
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
        etp=s["etp"],
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
        overlap_param_gather=s["overlap_param_gather"],
        align_param_gather=s["align_param_gather"],
        defer_embedding_wgrad_compute=s["defer_embedding_wgrad_compute"],
        wgrad_deferral_limit=s["wgrad_deferral_limit"],
        grad_reduce_in_bf16=s["grad_reduce_in_bf16"],
        tp_comm_overlap=s["tp_comm_overlap"],
        overlap_p2p_comm=s["overlap_p2p_communication"],
        cp_comm_type=s["cp_comm_type"],
    )
    # the trace's link-tier counter tracks need the tiers' rates recorded
    config = network_config(s, environ, tier_rates=s["trace"] is not None)
    config = _with_traffic(config, s, topology, environ)
    environment = applied_settings(environ, collnet=True if s["sharp"] else None)
    if config.traffic is not None:  # every group the layout has, and the checkpoint, must have a class: now
        sizes = {"tp": parallelism.tp, "pp": parallelism.pp, "dp": parallelism.dp, "cp": parallelism.cp}
        for group in [g for g, n in sizes.items() if n > 1] + (["ep"] if parallelism.ep > 1 else []):
            config.traffic.class_of(group)
        for stream in config.storage[:1]:
            config.traffic.class_of(stream.group)
    return StepSetup(
        model=model,
        parallelism=parallelism,
        topology=topology,
        config=config,
        environment=environment,
        recompute=s["recompute"],
        granularity=s["granularity"],
        exact=s["exact"],
        attention_kernel=s["attention_kernel"],
        ignored=_ignored(s, parallelism, environ, environment),
    )


def _ignored(s: Mapping, p: ParallelismSpec, environ: Mapping[str, str], applied: Mapping[str, str]) -> tuple[str, ...]:
    """The settings given (``s["given"]``) that this layout makes moot, and the NCCL variables set in ``environ``
    that the simulation does not read (not modelled, or replaced by an option), each with the reason."""
    moot = {
        "schedule": (p.pp == 1, "pp is 1, there is no pipeline"),
        "sequence_parallel": (p.tp == 1, "tp is 1, there is no tensor-parallel group"),
        "bucket_mb": (p.dp * p.cp == 1, "dp x cp is 1, no gradient is reduced"),
        "overlap_grad_reduce": (p.dp * p.cp == 1, "dp x cp is 1, no gradient is reduced"),
        "zero": (p.dp * p.cp == 1, "dp x cp is 1, there is nothing to shard over"),
        "tp_comm_overlap": (p.tp == 1, "tp is 1, there is no tensor-parallel communication"),
        "cp_comm_type": (p.cp == 1, "cp is 1, there is no context-parallel exchange"),
        "overlap_param_gather": (p.dp * p.cp == 1, "dp x cp is 1, no parameter is gathered"),
        "align_param_gather": (p.dp * p.cp == 1, "dp x cp is 1, no parameter is gathered"),
        "wgrad_deferral_limit": (
            p.wgrad_deferral_limit >= p.microbatches,
            f"it is not below the {p.microbatches} micro-batches: all are deferred, as with 0",
        ),
        "grad_reduce_in_bf16": (p.dp * p.cp == 1, "dp x cp is 1, no gradient is reduced"),
        "overlap_p2p_communication": (p.pp == 1 or p.vp == 1, "it applies to the interleaved schedule (pp, vp > 1)"),
    }
    out = [
        f"{name.replace('_', '-')} {s[name]!r} ignored: {why}"
        for name, (unused, why) in moot.items()
        if unused and name in s["given"]
    ]
    if "checkpoint_at_s" in s["given"] and s["checkpoint_gb"] is None:
        out.append(f"checkpoint-at-s {s['checkpoint_at_s']!r} ignored: no checkpoint-gb, there is no checkpoint")
    for name in sorted(environ):
        if name in ("NCCL_IB_TC", "NCCL_IB_SL") and s["traffic_classes"] is not None:
            continue  # marks a class of the policy (simulator.traffic)
        if name.startswith("NCCL_") and name not in applied:
            why = "replaced by --sharp" if name == "NCCL_COLLNET_ENABLE" and s["sharp"] else "not modelled"
            if name in ("NCCL_IB_TC", "NCCL_IB_SL"):
                why = "no --traffic-classes: the switches schedule one class"
            out.append(f"{name}={environ[name]} ignored ({why})")
    return tuple(out)


def network_config(
    settings: Mapping, environ: Mapping[str, str], *, tier_rates: bool = False, **policy: Any
) -> SimConfig:
    """The simulation config that the network settings (NETWORK_DEFAULTS' names) describe, with NCCL's
    environment variables from ``environ`` and the collective options ``policy`` (algorithm, protocol,
    nchannels, qps_per_connection: ``CollectivePolicy.from_environment``'s), which win over them, as
    ``sharp`` wins over NCCL_COLLNET_ENABLE; ``nccl_version`` (None: the default) the NCCL release modelled."""
    from simulator.collectives.tuner import CollectivePolicy

    collnet = True if settings["sharp"] else None
    policy = {"nccl_version": settings.get("nccl_version"), **policy}
    return SimConfig(
        network_model=settings["net_model"],
        routing=settings["routing"],
        seed=settings["seed"],
        congestion=tuple(settings["congestion"]),
        collectives=CollectivePolicy.from_environment(environ, collnet=collnet, **policy),
        tier_rates=tier_rates,
    )


def _with_traffic(config: SimConfig, s: Mapping, topology: Topology, environ: Mapping[str, str]) -> SimConfig:
    """``config`` with the step's traffic-class policy (NCCL_IB_TC / NCCL_IB_SL from ``environ`` marking it) and
    its checkpoint streams (``simulator.traffic.checkpoint_streams``)."""
    import dataclasses

    from simulator.traffic import StorageStream, TrafficPolicy, checkpoint_streams

    traffic = None if s["traffic_classes"] is None else TrafficPolicy.parse(s["traffic_classes"], environ=environ)
    storage: tuple[StorageStream, ...] = ()
    if s["checkpoint_gb"] is not None:
        nbytes = max(1, round(s["checkpoint_gb"] * 1e9))
        storage = checkpoint_streams(topology, nbytes_per_server=nbytes, time_s=s["checkpoint_at_s"])
    if traffic is None and not storage:
        return config
    return dataclasses.replace(config, traffic=traffic, storage=storage)


def run_step(
    setup: StepSetup,
    *,
    system: Topology | None = None,
    config: SimConfig | None = None,
    progress: Callable[[str], None] | None = None,
    bound: bool = True,
) -> StepResult:
    """Simulate ``setup``'s step (on ``system`` / with ``config`` instead of its own where given: a
    calibrated copy); ``bound``: ``StepOptions.bound``."""
    import dataclasses

    from .training import StepOptions, simulate_step

    result = simulate_step(
        setup.model,
        setup.parallelism,
        system=setup.topology if system is None else system,
        options=StepOptions(
            config=setup.config if config is None else config,
            recompute=setup.recompute,
            attention_kernel=setup.attention_kernel,
            granularity=setup.granularity,
            exact=setup.exact,
            progress=progress,
            bound=bound,
        ),
    )
    if setup.ignored:
        result = dataclasses.replace(result, warnings=result.warnings + setup.ignored)
    return result
