"""Simulate one training step: model x parallelism x system -> StepResult (time, throughput, breakdown).

``simulate_step`` wires the pieces: it builds the system (``topologies.presets.build_system``) or takes
a Topology, times every kernel with ``simulator.compute.gpu`` (per layer and micro-batch, forward and
backward with recomputation, embedding, logits, the optimizer over the rank's shard), turns model x
layout x times into per-rank programs (``workloads.training_step``), places ranks in Megatron order
(``Placement.block``: consecutive ranks fill a server, so a tensor-parallel group of t <= 8 shares
NVLink), runs ``simulate()`` (its SimResult holds every task's times, ``simulator.analysis.task_times``) and
computes the compute critical path (the same recurrence with every collective taking 0 s).

Throughput (SC21 conventions):

* ``tokens_per_s = B s / step_time``;
* ``tflops_per_gpu = F / (step_time x GPUs)`` with F = ``ModelSpec.step_flops(recompute=...)``, the
  FLOPs the GPUs execute including recomputation; for a GPT with full recomputation this is SC21's
  eq. 3, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), the number behind Table 1's TFLOP/s column;
* ``mfu = F_model / (step_time x GPUs x peak)`` with F_model without recomputation (6 N tokens
  for a dense model plus attention) and the GPU's dense bf16 (fp8 with dtype fp8) peak.

Time breakdown: ``critical_path_s`` (the step on an infinitely fast network), ``exposed_comm_s =
step_time_s - critical_path_s``, ``compute_s``, ``bubble_s``, ``comm_s`` and per group / collective
kind / algorithm and protocol NCCL's tuner chose in each group (``breakdown["algorithm"]["tp"]["nvls
Simple"]``, the most bytes first) / link class: definitions in ``simulator.analysis``. Memory per GPU:
weights, gradients and Adam state under ZeRO (ModelSpec.training_state_bytes over the d x c sharding
group; gradients kept in fp32 for bf16/fp8 training, fp16 for fp16) plus the activations of the
micro-batches in flight on the most loaded stage (1F1B: p - s micro-batches on stage s; GPipe: all
m; interleaved: warm-up + 1 chunk passes), ``ModelSpec.activation_bytes_per_layer`` each (of the
larger of a dense and a MoE layer); ``out_of_memory`` when that exceeds the GPU.

Four reductions keep huge layouts tractable (all off by default):

* ``granularity="chunk"``: one compute task and one collective per kind per model-chunk pass (bytes
  and compute time conserved; see workloads.training_step).
* ``tensor_rank0_p2p=True``: tensor rank 0 alone makes each pipeline transfer, standing for the t
  identical ones (exact by symmetry on rail-optimised fabrics; see workloads.training_step).
* ``symmetric_replicas=True`` (requires ``dp_overlap=False`` and ZeRO < 3): data-parallel replicas run
  the same pipeline independently until the gradient reduction, so the step is simulated as two
  phases: the pipeline of ONE replica (its t c p ranks on the GPUs they occupy), then the reduction,
  embedding sync and optimizer of ALL ranks. Exact when replicas do not share network links during
  the pipeline (rail-optimised non-blocking fabrics with tensor groups inside servers: each GPU's
  pipeline traffic leaves through its own NIC); counts, bytes and link bytes of the pipeline phase are
  multiplied by d in the breakdown.
* ``steady_state_microbatches=k``: a pipeline step is affine in the number of micro-batches once the
  schedule is in steady state (1F1B: (m + p - 1)(f + b)), so the step is simulated with k and 2k
  micro-batches (k rounded up to a multiple of p for the interleaved schedule) and every additive
  measurement extrapolated linearly to m: T(m) = T(k) + (m - k)(T(2k) - T(k))/k. Exact for the compute
  critical path; with communication, GPT-145.6B of SC21 Table 1 (m = 48) gives the same step time to
  1e-14 with k = 16 and to 0.09 % with k = 8.

The Megatron SC21 check of this module (every Table 1 row predicted against its measured TFLOP/s per GPU)
is ``simulator.validation.sc21``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from topologies.checks import flag, instance, option
from topologies.devices import GPU_PRESETS, GpuSpec
from topologies.presets import SYSTEMS, TOPOLOGIES, build_system
from topologies.topology import Topology
from workloads.model import ModelSpec, ceil_div
from workloads.options import Granularity, Recompute
from workloads.parallelism import ParallelismSpec
from workloads.tasks import ComputeTask
from workloads.training_step import (GRANULARITIES, StepCompute, TrainingWorkload, gradient_bytes_per_param,
                                     pipeline_schedule, training_step)

from ..analysis import interval_breakdowns, link_class_bytes
from ..api import simulate
from ..compute import gpu as cmp
from ..config import SimConfig
from ..engine.timeline import Timeline, task_times
from ..placement import Placement
from ..results import SimResult

__all__ = ("StepPhase", "StepResult", "step_compute", "memory_per_gpu", "simulate_step")

# --------------------------------------------------------------------------------------------------
# compute times
# --------------------------------------------------------------------------------------------------


def _compute_dtype(parallelism: ParallelismSpec) -> str:
    # fp16 and bf16 run at the same tensor-core rate (A100/H100 datasheets); compute.py models "bf16"
    return "fp8" if parallelism.dtype == "fp8" else "bf16"


def step_compute(model: ModelSpec, parallelism: ParallelismSpec, gpu: GpuSpec, *, recompute: str = "none",
                 flash_attention: bool = True, overlap_slowdown: float | None = None,
                 compute_model: cmp.GpuComputeModel | None = None) -> StepCompute:
    """Per-micro-batch compute seconds of every layer, the embedding, the logits and each stage's optimizer."""
    p = parallelism
    p.check(model)
    forward, backward = cmp.layer_times(model, gpu, micro_batch=p.micro_batch, seq_len=p.seq(model), tp=p.tp, sp=p.sp,
                                        cp=p.cp, ep=p.ep, dtype=_compute_dtype(p), flash_attention=flash_attention,
                                        recompute=recompute, compute_model=compute_model)
    tkw = dict(micro_batch=p.micro_batch, seq_len=p.seq(model), tp=p.tp, cp=p.cp, compute_model=compute_model)
    shard = p.dp * p.cp if p.zero_stage >= 1 else 1
    optimizer = tuple(cmp.optimizer_step(gpu, parameters=model.stage_parameters(j, tp=p.tp, pp=p.pp, ep=p.ep) / shard,
                                         param_bytes=model.dtype_bytes, compute_model=compute_model).time_s
                      for j in range(p.pp))
    slowdown = cmp.default_overlap_slowdown(gpu, compute_model=compute_model) if overlap_slowdown is None \
        else overlap_slowdown
    return StepCompute(
        layer_forward_s=forward, layer_backward_s=backward,
        embedding_forward_s=cmp.embedding_forward(model, gpu, **tkw).time_s,
        embedding_backward_s=cmp.embedding_backward(model, gpu, **tkw).time_s,
        logits_forward_s=cmp.logits_forward(model, gpu, sp=p.sp, dtype=_compute_dtype(p), **tkw).time_s,
        logits_backward_s=cmp.logits_backward(model, gpu, sp=p.sp, dtype=_compute_dtype(p), **tkw).time_s,
        optimizer_s=optimizer, overlap_slowdown=slowdown,
    )


def memory_per_gpu(model: ModelSpec, parallelism: ParallelismSpec, *, recompute: str = "none",
                   flash_attention: bool = True) -> dict[str, float]:
    """Bytes on the most loaded GPU: parameters, gradients, optimizer state, activations (module docstring)."""
    p = parallelism
    p.check(model)
    grad_bytes = gradient_bytes_per_param(p.dtype)
    state = model.training_state_bytes(tp=p.tp, pp=p.pp, ep=p.ep, dp=p.dp * p.cp, zero_stage=p.zero_stage,
                                       grad_bytes=grad_bytes)
    chunk_layers = max(map(len, model.stage_layers(pp=p.pp * p.vp)))       # the longest model chunk
    # the larger of a dense and a MoE layer (all layers of one kind keep the same activations)
    kinds = {model.is_moe_layer(layer): layer for layer in range(model.layers)}
    per_layer = max(model.activation_bytes_per_layer(layer, micro_batch=p.micro_batch, seq_len=p.seq(model),
                                                     tp=p.tp, sp=p.sp, cp=p.cp, recompute=recompute,
                                                     flash_attention=flash_attention)
                    for layer in kinds.values())
    worst = 0
    for stage in range(p.pp):
        ops = pipeline_schedule(p.schedule, pp=p.pp, stage=stage, microbatches=p.microbatches, vp=p.vp)
        live = peak = 0
        for phase, _, _ in ops:
            live += 1 if phase == "F" else -1
            peak = max(peak, live)
        worst = max(worst, peak)
    activations = per_layer * chunk_layers * worst
    return {"parameters": state.parameters, "gradients": state.gradients, "optimizer": state.optimizer,
            "activations": float(activations),
            "total": state.parameters + state.gradients + state.optimizer + float(activations)}


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPhase:
    """One simulated part of the step: its programs, the simulation, the rebuilt task times (offset by
    ``offset_s`` in the step) and the compute critical path; ``replicas`` = how many identical copies
    of it the step runs (d for the pipeline phase with symmetric replicas, else 1)."""

    training: TrainingWorkload
    sim: SimResult
    critical_path_s: float
    offset_s: float
    replicas: int = 1

    @property
    def timeline(self) -> Timeline:
        """Every task's times in the phase (``sim.timeline``)."""
        return self.sim.timeline


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    model: str
    parallelism: ParallelismSpec
    topology_name: str
    gpus: int
    step_time_s: float
    tokens_per_s: float
    tflops_per_gpu: float
    mfu: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    bubble_s: float
    critical_path_s: float
    breakdown: Mapping[str, Mapping]
    memory: Mapping[str, float]
    memory_capacity_bytes: float
    out_of_memory: bool
    phases: tuple[StepPhase, ...] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def memory_bytes_per_gpu(self) -> float:
        return self.memory["total"]

    def as_dict(self) -> dict:
        def plain(value):
            if isinstance(value, Mapping):
                return {str(k): plain(v) for k, v in value.items()}
            return value
        return {
            "model": self.model, "topology": self.topology_name, "gpus": self.gpus,
            "parallelism": {k: getattr(self.parallelism, k) for k in ParallelismSpec.__dataclass_fields__},
            "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu, "compute_s": self.compute_s, "comm_s": self.comm_s, "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s, "critical_path_s": self.critical_path_s, "breakdown": plain(self.breakdown),
            "memory_bytes_per_gpu": self.memory_bytes_per_gpu, "memory": plain(self.memory),
            "memory_capacity_bytes": self.memory_capacity_bytes, "out_of_memory": self.out_of_memory,
            "notes": list(self.notes),
        }

    def to_json(self, **kw) -> str:
        """The result as JSON text (keys of :meth:`as_dict`)."""
        return json.dumps(self.as_dict(), **kw)


# --------------------------------------------------------------------------------------------------
# simulate_step
# --------------------------------------------------------------------------------------------------


def _gpu_of(topology: Topology) -> GpuSpec:
    name = topology.graph.nodes[int(topology.gpu_nodes[0])].get("gpu")
    if name not in GPU_PRESETS:
        raise ValueError(f"topology: its GPUs ({name!r}) are not a known GpuSpec; pass gpu=")
    return GPU_PRESETS[name]


def _build_topology(system: str, nodes: int | None, world: int, wiring: str | None) -> Topology:
    if system not in SYSTEMS:
        raise ValueError(f"system: {system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    per_node = SYSTEMS[system].server().gpus
    if nodes is None:
        nodes = ceil_div(world, per_node)
    if wiring is None:
        wiring = "leaf-spine"
        if nodes > 1 and nodes > SYSTEMS[system].max_nodes_for("leaf-spine"):
            wiring = "fat-tree"
    if wiring not in TOPOLOGIES:
        raise ValueError(f"wiring: {wiring!r} is not known; expected one of {', '.join(TOPOLOGIES)}")
    return build_system(system, nodes=nodes, topology=wiring)


def _run_phase(topology: Topology, training: TrainingWorkload, placement: Placement, config: SimConfig,
               offset_s: float, replicas: int) -> StepPhase:
    sim = simulate(topology, training.workload, placement, config)
    # after an event replay the timeline is rebuilt from the collectives' times: it must end with the replay
    if not math.isclose(sim.timeline.makespan_s, sim.makespan_s, rel_tol=1e-9, abs_tol=1e-12):
        raise RuntimeError(f"task times: rebuilt makespan {sim.timeline.makespan_s!r} s differs from the engine's "
                           f"{sim.makespan_s!r} s")
    critical = task_times(training.workload).makespan_s
    return StepPhase(training=training, sim=sim, critical_path_s=critical, offset_s=offset_s, replicas=replicas)


def _phase_metrics(phase: StepPhase) -> tuple[float, int]:
    """(largest per-rank compute busy time, rank that ends last). Ranks share program objects
    (training_step builds equal programs once): each distinct program's busy time is summed once."""
    compute = max((math.fsum(t.duration_s for t in program if isinstance(t, ComputeTask))
                   for program, _ in phase.training.workload.shared_programs), default=0.0)
    return compute, int(np.argmax(phase.timeline.rank_end_s))        # the first of the ranks ending last


@dataclass(slots=True, kw_only=True)
class _Raw:
    """Additive measurements of one simulated step (combined linearly by the steady-state extrapolation)."""

    step_s: float
    critical_s: float
    compute_s: float
    comm_s: float
    breakdowns: dict        # labelling ("group", "collective", "algorithm") -> label -> entry (_merge)
    links: dict             # "tier" / "kind" -> name -> bytes (analysis.link_class_bytes)
    phases: tuple


@dataclass(frozen=True, slots=True, kw_only=True)
class _PhaseParts:
    """What one phase adds to a step's measurements (before replicas scale counts and bytes)."""

    compute_s: float
    comm_s: float
    breakdowns: dict
    links: dict


def _phase_parts(phase: StepPhase, topology: Topology) -> _PhaseParts:
    busy, last = _phase_metrics(phase)
    training = phase.training
    workload = training.workload
    # per group kind, per collective kind, per (group kind, the algorithm and protocol NCCL's tuner chose),
    # and all collectives as one label: comm_s, the largest per-rank union
    labelings = {"group": training.group_kinds, "collective": [c.kind.value for c in workload.collectives],
                 "algorithm": [(group, f"{record.algorithm} {record.protocol}")
                               for group, record in zip(training.group_kinds, phase.sim.collectives, strict=True)],
                 "all": ("comm",) * len(workload.collectives)}
    parts = interval_breakdowns(workload, phase.timeline, labelings, focus_rank=last,
                                weights=training.collective_weights)
    comm = parts.pop("all")
    return _PhaseParts(compute_s=busy, comm_s=comm["comm"]["time_s"] if workload.collectives else 0.0,
                       breakdowns=parts, links=link_class_bytes(topology, phase.sim.link_bytes))


def _merge(total: dict, part: dict, scale: int) -> None:
    for label, entry in part.items():
        into = total.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
        into["count"] += entry["count"] * scale
        into["nbytes"] += entry["nbytes"] * scale
        into["time_s"] += entry["time_s"]
        into["exposed_s"] += entry["exposed_s"]


def _measure(model: ModelSpec, p: ParallelismSpec, topology: Topology, compute: StepCompute, config: SimConfig, *,
             placement: Placement, reduction: tuple[StepPhase, _PhaseParts] | None, recompute: str, granularity: str,
             tensor_rank0_p2p: bool) -> _Raw:
    """One step's additive measurements. With ``reduction`` (a symmetric-replica step: the reduction phase and
    what it adds to the measurements), one replica's pipeline is simulated and the reduction follows it."""
    kw = dict(recompute=recompute, granularity=granularity, tensor_rank0_p2p=tensor_rank0_p2p)
    if reduction is not None:
        replica = tuple(sorted(group[0] for group in p.groups("dp")))     # the ranks with dp coordinate 0
        pipe = training_step(model, p, compute, part="pipeline", ranks=replica, **kw)
        first = _run_phase(topology, pipe, Placement.custom(topology, [placement.rank_gpu[r] for r in replica]),
                           config, 0.0, p.dp)
        second, second_parts = reduction
        phases = (first, dataclasses.replace(second, offset_s=first.sim.makespan_s))
        parts = (_phase_parts(first, topology), second_parts)
    else:
        phases = (_run_phase(topology, training_step(model, p, compute, **kw), placement, config, 0.0, 1),)
        parts = (_phase_parts(phases[0], topology),)
    raw = _Raw(step_s=math.fsum(ph.sim.makespan_s for ph in phases),
               critical_s=math.fsum(ph.critical_path_s for ph in phases), compute_s=0.0, comm_s=0.0, breakdowns={},
               links={}, phases=phases)
    for ph, part in zip(phases, parts):
        raw.compute_s += part.compute_s
        raw.comm_s += part.comm_s
        for name, entries in part.breakdowns.items():
            _merge(raw.breakdowns.setdefault(name, {}), entries, ph.replicas)
        for name, values in part.links.items():
            into = raw.links.setdefault(name, {})
            for label, value in values.items():
                into[label] = into.get(label, 0.0) + value * ph.replicas
    return raw


def _frozen(value):
    """(Nested) dicts as read-only mappings."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


def _lerp(a, b, x: float):
    """a + x (b - a) for numbers and (nested) dicts of numbers; a key missing on one side counts 0."""
    if isinstance(a, dict):
        return {k: _lerp(a.get(k, 0 if not isinstance(b.get(k), dict) else {}),
                         b.get(k, 0 if not isinstance(a.get(k), dict) else {}), x) for k in {**a, **b}}
    return a + x * (b - a)


def simulate_step(model: ModelSpec, parallelism: ParallelismSpec, *, system: str = "dgx-h100",
                  nodes: int | None = None, topology: Topology | None = None, config: SimConfig | None = None,
                  gpu: GpuSpec | None = None, overlap_slowdown: float | None = None, flash_attention: bool = True,
                  recompute: str = "none", granularity: str = "layer", symmetric_replicas: bool = False,
                  tensor_rank0_p2p: bool = False, steady_state_microbatches: int | None = None,
                  wiring: str | None = None, compute_model: cmp.GpuComputeModel | None = None,
                  compute: StepCompute | None = None, placement: Placement | None = None) -> StepResult:
    """Simulate one training step of ``model`` laid out as ``parallelism`` (see the module docstring).

    ``topology`` (a built Topology) wins over ``system``/``nodes``/``wiring``; ``compute`` (a StepCompute)
    replaces the compute model's times; ``gpu`` defaults to the topology's GPU; ``placement`` defaults to
    ``Placement.block`` (Megatron rank order on consecutive GPUs). Reductions for huge
    layouts: ``granularity="chunk"``, ``symmetric_replicas``, ``tensor_rank0_p2p`` and
    ``steady_state_microbatches`` k (simulate k and 2k micro-batches, extrapolate linearly to m).
    """
    if not isinstance(model, ModelSpec):
        raise ValueError(f"model: {model!r} is not allowed; expected a workloads.model.ModelSpec")
    if not isinstance(parallelism, ParallelismSpec):
        raise ValueError(f"parallelism: {parallelism!r} is not allowed; expected a workloads.parallelism."
                         "ParallelismSpec")
    granularity = option("granularity", granularity, Granularity)
    recompute = option("recompute", recompute, Recompute)
    for name, value in (("symmetric_replicas", symmetric_replicas), ("tensor_rank0_p2p", tensor_rank0_p2p),
                        ("flash_attention", flash_attention)):
        flag(name, value)
    instance("config", config, (SimConfig, type(None)), "a SimConfig or None")
    instance("topology", topology, (Topology, type(None)), "a Topology or None")
    if steady_state_microbatches is not None and (not isinstance(steady_state_microbatches, int)
                                                  or isinstance(steady_state_microbatches, bool)
                                                  or steady_state_microbatches < 1):
        raise ValueError(f"steady_state_microbatches: {steady_state_microbatches!r} is not allowed; expected None "
                         "or an integer >= 1")
    p = parallelism.check(model)
    world = p.world_size
    if symmetric_replicas and p.dp > 1 and (p.dp_overlap or p.zero_stage >= 3):
        raise ValueError("symmetric_replicas: True is not allowed with dp_overlap=True or ZeRO-3/FSDP, whose "
                         "gradient or parameter traffic runs inside the pipeline; expected False")
    config = config or SimConfig()
    if topology is None:
        topology = _build_topology(system, nodes, world, wiring)
    elif not isinstance(topology, Topology):
        raise ValueError(f"topology: {topology!r} is not allowed; expected a topologies.topology.Topology or None")
    if topology.num_gpus < world:
        raise ValueError(f"parallelism: needs {world} GPUs (tp x cp x dp x pp = {p.tp} x {p.cp} x {p.dp} x {p.pp}) "
                         f"but topology {topology.name!r} has {topology.num_gpus}")
    gpu = gpu or _gpu_of(topology)
    if compute is None:
        compute = step_compute(model, p, gpu, recompute=recompute, flash_attention=flash_attention,
                               overlap_slowdown=overlap_slowdown, compute_model=compute_model)
    if placement is None:
        placement = Placement.block(topology, nranks=world)
    elif not isinstance(placement, Placement) or placement.nranks != world:
        raise ValueError(f"placement: {placement!r} is not allowed; expected a Placement of {world} ranks or None")
    kw = dict(recompute=recompute, granularity=granularity, tensor_rank0_p2p=tensor_rank0_p2p)
    notes = []
    reduction = None
    if symmetric_replicas and p.dp > 1:
        notes.append(f"symmetric replicas: pipeline of 1 of {p.dp} data-parallel replicas, then the reduction")
        # the reduction phase reduces every gradient once, syncs the embedding and runs the optimizer: it does
        # not depend on the batch, so it is simulated once, with this layout, for both runs of the steady-state
        # extrapolation (their layouts differ from this one in the global batch only); the step's phases are
        # then the 2k run's pipeline and this reduction, whose StepPhase carries this layout
        phase = _run_phase(topology, training_step(model, p, compute, part="reduction", **kw), placement, config,
                           0.0, 1)
        reduction = (phase, _phase_parts(phase, topology))
    kw.update(placement=placement, reduction=reduction)
    if tensor_rank0_p2p and p.tp > 1 and p.pp > 1:
        notes.append(f"pipeline transfers simulated for tensor rank 0, standing for all {p.tp} (link bytes of the "
                     "other tensor ranks' transfers not counted)")
    m = p.microbatches
    k = steady_state_microbatches
    if k is not None and p.schedule == "interleaved":
        k = ceil_div(k, p.pp) * p.pp
    if k is not None and m > 2 * k:
        few = dataclasses.replace(p, global_batch=k * p.dp * p.micro_batch)
        more = dataclasses.replace(p, global_batch=2 * k * p.dp * p.micro_batch)
        a = _measure(model, few, topology, compute, config, **kw)
        b = _measure(model, more, topology, compute, config, **kw)
        x = (m - k) / k
        raw = _Raw(**{f.name: _lerp(getattr(a, f.name), getattr(b, f.name), x)
                      for f in dataclasses.fields(_Raw) if f.name != "phases"}, phases=b.phases)
        notes.append(f"steady state: simulated {k} and {2 * k} micro-batches, extrapolated linearly to {m}; phases "
                     f"(traces) are those of the {2 * k}-micro-batch run")
    else:
        raw = _measure(model, p, topology, compute, config, **kw)
    step, critical = raw.step_s, raw.critical_s
    seq = p.seq(model)
    flops = model.step_flops(batch=p.global_batch, seq_len=seq, recompute=recompute)
    model_flops = model.step_flops(batch=p.global_batch, seq_len=seq, recompute="none")
    peak = gpu.dense_fp8_flop_per_s if p.dtype == "fp8" and gpu.dense_fp8_flop_per_s else gpu.dense_bf16_flop_per_s
    memory = memory_per_gpu(model, p, recompute=recompute, flash_attention=flash_attention)
    # algorithm: group -> "algorithm protocol" -> entry, groups in the order of "group", the most bytes first
    algorithm: dict = {group: {} for group in raw.breakdowns["group"]}
    for (group, choice), entry in sorted(raw.breakdowns["algorithm"].items(), key=lambda e: (-e[1]["nbytes"], e[0][1])):
        algorithm[group][choice] = entry
    breakdown = _frozen(raw.breakdowns | {"algorithm": algorithm, "link_tier_bytes": raw.links["tier"],
                                          "link_kind_bytes": raw.links["kind"]})
    return StepResult(
        model=model.name, parallelism=p, topology_name=topology.name, gpus=world, step_time_s=step,
        tokens_per_s=p.global_batch * seq / step if step > 0 else 0.0,
        tflops_per_gpu=flops / (step * world) / 1e12 if step > 0 else 0.0,
        mfu=model_flops / (step * world * peak) if step > 0 else 0.0,
        compute_s=raw.compute_s, comm_s=raw.comm_s, exposed_comm_s=max(step - critical, 0.0),
        bubble_s=max(critical - raw.compute_s, 0.0), critical_path_s=critical, breakdown=breakdown,
        memory=MappingProxyType(memory), memory_capacity_bytes=float(gpu.memory_bytes),
        out_of_memory=memory["total"] > gpu.memory_bytes, phases=raw.phases, notes=tuple(notes),
    )

