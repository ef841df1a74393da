"""Simulate one training step: model x parallelism x system -> StepResult (time, throughput, breakdown).

``simulate_step`` wires the pieces: it builds the system (``topologies.presets.build_system``) or takes
a Topology, turns model x layout into per-rank programs (``workloads.training``), times every kernel with
``simulator.compute.gpu`` (per layer and micro-batch, forward and backward with recomputation, embedding,
logits, the optimizer over the rank's shard) and gives each compute task its seconds, places ranks in
Megatron order (``Placement.block``: consecutive ranks fill a server, so a tensor-parallel group of t <= 8
shares NVLink), runs ``simulate()`` (its SimResult holds every task's times, ``simulator.analysis.task_times``) and
computes the compute critical path (the same recurrence with every collective taking 0 s).

Throughput, under two named FLOP counts (F / (step_time x GPUs) per GPU; MFU = that / the GPU's dense bf16
peak, fp8 peak with dtype fp8):

* model FLOPs, ``tflops_per_gpu`` and ``mfu``: F = ``ModelSpec.megatron_flops``, Megatron-LM's
  ``num_floating_point_operations``, the count Megatron-LM logs and NeMo / DGX Cloud report MFU with:
  GEMMs only, causal attention at half its scores, no recomputation (``workloads.model`` states each term);
* executed FLOPs, ``executed_tflops_per_gpu`` and ``executed_mfu``: F = :func:`executed_flops`, the FLOPs of
  the kernels the compute model times: causal attention's skipped blocks not counted, recomputation and flash
  attention's backward recomputation counted. A kernel never runs above peak and the step lasts at least the
  busiest GPU's kernels, so ``executed_mfu <= 1`` (a property test); with ``StepOptions(compute=...)``
  replacing the kernel times that holds only if those times do.

SC21 Table 1's TFLOP/s (eq. 3: full attention, x 4 with full recomputation) is ``ModelSpec.step_flops``;
``simulator.validation.sc21`` computes it from the step time.

Reading the result: ``FIGURES`` defines every figure of the output in one sentence (``fabricsim step --help``
and the README print them). Time in network split by group (``breakdown["exposed"]``, ``frame("exposed")``):
each group's ``exposed_s`` on the rank that ends last, then "overlap of groups" (U - sum of the groups, U the
time any collective is in flight there while its compute is idle) and "via other ranks" (exposed_comm_s - U:
other ranks' delays that reach it through the pipeline, less its communication inside its bubble), so the parts
add up to ``exposed_comm_s``. Per link tier: bytes, ``busy_s`` = bytes / the tier's summed link capacity (the
mean link's time at line rate) and ``utilisation`` = busy_s / step time. ``warnings``: out of memory, a pipeline
with fewer micro-batches than stages or a bubble of at least ``BUBBLE_WARNING_SHARE`` of the step (with the
1F1B share (p - 1) / (v m + p - 1) beside the measured one), an approximate reduction used, and (from
``scenario.run_step``) options or NCCL variables given that change nothing; every output format carries them.

Time breakdown: ``critical_path_s`` (the step on an infinitely fast network), ``exposed_comm_s =
step_time_s - critical_path_s``, ``compute_s``, ``bubble_s``, ``comm_s`` and per group / collective
kind / algorithm and protocol NCCL's tuner chose in each group (``breakdown["algorithm"]["tp"]["nvls
Simple"]``, the most bytes first) / link class: definitions in ``simulator.analysis``. Memory per GPU:
weights, gradients and Adam state under ZeRO (ModelSpec.training_state_bytes over the d x c sharding
group; gradients kept in fp32 for bf16/fp8 training, bf16 with ``grad_reduce_in_bf16``, fp16 for fp16) plus
the activations of the micro-batches in flight on the most loaded stage (1F1B: p - s micro-batches on stage s;
GPipe: all m; interleaved: warm-up + 1 chunk passes), ``ModelSpec.activation_bytes_per_layer`` each (of the
larger of a dense and a MoE layer), the last stage's with the inputs of the output-layer weight gradients it
defers (``ModelSpec.deferred_wgrad_bytes`` per deferred micro-batch); ``out_of_memory`` when that exceeds the GPU.

Run settings are one :class:`StepOptions` (network config, GPU and compute model, recomputation, flash
attention, placement, the system's size and wiring when ``system`` is a preset name, and the five
reductions for huge layouts: task merging and the steady-state extrapolation on request, representative
pipeline transfers, symmetric replicas and context ranks chosen by the step where exact,
``simulator.studies.reductions``). Where one in use is not exact, the result also bounds the step time and the
time in network (``step_time_low_s`` ... ``exposed_comm_high_s``, and a note): the reduced run and one more on a
fabric where it is no faster than any rank it stands for (``reductions.bounding_fabric``).

Durations: the step's programs are built without hardware (``workloads.training``: each compute task carries
its work, a ``PassWork``); ``step_compute`` times that work on the GPU with ``simulator.compute.gpu`` (per
layer and micro-batch, embedding, logits, each stage's optimizer: a ``StepCompute``) and every program's
durations are resolved from it (``workloads.training.resolve``) just before ``simulate()``, whose engine reads
plain ``duration_s``.

The Megatron SC21 check of this module (every Table 1 row predicted against its measured TFLOP/s per GPU)
is ``simulator.validation.sc21``.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypedDict

import numpy as np

from topologies import checks
from topologies.checks import finite, flag, instance, integer, option, reject
from topologies.devices import GPU_PRESETS, GpuSpec
from topologies.presets import SYSTEMS, TOPOLOGIES, build_system
from topologies.routing import RouteCache
from topologies.topology import Topology
from workloads.model import ModelSpec, ceil_div
from workloads.options import Granularity, Recompute
from workloads.parallelism import ParallelismSpec
from workloads.tasks import ComputeTask, Task
from workloads.training import (
    TP_OVERLAP,
    TP_OVERLAP_BACKWARD,
    TP_OVERLAP_FORWARD,
    StepCompute,
    TrainingWorkload,
    pipeline_schedule,
    resolve,
    training_step,
)

from ..analysis import interval_breakdowns, link_class_bytes
from ..api import collective_link_bytes, simulate
from ..compute import gpu as cmp
from ..config import SimConfig
from ..engine.timeline import Timeline, task_times
from ..placement import Placement
from ..results import SimResult
from . import reductions

__all__ = (
    "StepOptions",
    "StepPhase",
    "StepResult",
    "step_compute",
    "executed_flops",
    "tp_overlap_stretch_s",
    "memory_per_gpu",
    "simulate_step",
    "collector_paused",
)


# the pipeline warning's threshold: a bubble of a quarter of the step or more (a reporting choice, not a model
# parameter)
BUBBLE_WARNING_SHARE = 0.25
# the named remainders of the time-in-network split by group (breakdown["exposed"])
OVERLAP_OF_GROUPS = "overlap of groups"
VIA_OTHER_RANKS = "via other ranks"
# what each figure of a step's output means, defined once: `fabricsim step --help` and the README print these
FIGURES = (
    ("step time", "the simulated step, from the first task to the end of the rank that ends last"),
    ("compute", "the busiest GPU's kernel time: the sum of its compute tasks"),
    (
        "pipeline bubble",
        "the critical path less compute: the time the pipeline's dependencies leave the busiest GPU idle even on "
        "an infinitely fast network",
    ),
    (
        "time in network",
        "step time less the step on an infinitely fast network (every collective taking 0 s), so step time = "
        "compute + pipeline bubble + time in network; it counts every rank's network delays that reach the "
        "critical path, so it can exceed communication",
    ),
    (
        "communication",
        "the busiest GPU's time with at least one collective in flight, hidden behind compute or not",
    ),
    (
        "TFLOP/s/GPU and MFU, model",
        "Megatron-LM's num_floating_point_operations per GPU and second (MFU: over the GPU's dense peak): "
        "GEMMs only, causal attention at half its scores, no recomputation; the count published throughputs use",
    ),
    (
        "TFLOP/s/GPU and MFU, executed",
        "the FLOPs the timed kernels execute: causal attention's skipped blocks not counted, recomputation "
        "counted; its MFU never exceeds 1",
    ),
    ("count, GB moved", "collectives and their buffers (nccl-tests size), all ranks together"),
    ("in flight s", "the busiest rank's time with a collective of the group (or algorithm) in flight"),
    (
        "exposed s",
        "on the rank that ends last, the time a collective of the group is in flight while its compute is idle; "
        "with the two rows below the groups add up to time in network",
    ),
    (OVERLAP_OF_GROUPS, "less the time counted under several groups at once"),
    (
        VIA_OTHER_RANKS,
        "the rest of time in network: other ranks' delays reaching the last rank through the pipeline, less the "
        "last rank's communication that fell in its pipeline bubble (negative when that is larger)",
    ),
    ("TB moved", "bytes over all links of the tier"),
    (
        "busy s",
        "the tier's bytes over its links' summed capacity: the time its mean link carries data at line rate",
    ),
    ("utilisation", "busy s over step time: the mean share of the tier's capacity in use"),
)
# StepResult.frame's views
STEP_VIEWS = ("summary", "group", "collective", "algorithm", "exposed", "link_tier", "link_kind", "memory", "notes")


class _TokenArgs(TypedDict):
    """The keyword arguments the embedding and logits compute times share (``simulator.compute.gpu``)."""

    micro_batch: int
    seq_len: int
    tp: int
    cp: int
    compute_model: cmp.GpuComputeModel | None


class _StepArgs(TypedDict):
    """The keyword arguments of ``training_step`` every phase of one step is built with."""

    recompute: str
    granularity: str
    tensor_rank0_p2p: bool


# --------------------------------------------------------------------------------------------------
# compute times
# --------------------------------------------------------------------------------------------------


def _compute_dtype(parallelism: ParallelismSpec) -> str:
    # fp16 and bf16 run at the same tensor-core rate (A100/H100 datasheets); compute.py models "bf16"
    return "fp8" if parallelism.dtype == "fp8" else "bf16"


def _token_args(p: ParallelismSpec, model: ModelSpec, compute_model: cmp.GpuComputeModel | None) -> _TokenArgs:
    """The keyword arguments the embedding and the logits are timed with (``simulator.compute.gpu``)."""
    return _TokenArgs(micro_batch=p.micro_batch, seq_len=p.seq(model), tp=p.tp, cp=p.cp, compute_model=compute_model)


def _layer_args(
    p: ParallelismSpec, model: ModelSpec, flash_attention: bool, compute_model: cmp.GpuComputeModel | None
) -> dict[str, Any]:
    """The keyword arguments every layer of the step is timed with (``simulator.compute.gpu``), but recompute."""
    return dict(
        micro_batch=p.micro_batch,
        seq_len=p.seq(model),
        tp=p.tp,
        sp=p.sp,
        cp=p.cp,
        ep=p.ep,
        etp=p.expert_tp,
        dtype=_compute_dtype(p),
        flash_attention=flash_attention,
        compute_model=compute_model,
    )


def step_compute(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    gpu: GpuSpec,
    *,
    recompute: str = "none",
    flash_attention: bool = True,
    overlap_slowdown: float | None = None,
    compute_model: cmp.GpuComputeModel | None = None,
) -> StepCompute:
    """Per-micro-batch compute seconds of every layer, the embedding, the logits and each stage's optimizer."""
    p = parallelism
    p.check(model)
    forward, backward = cmp.layer_times(
        model, gpu, recompute=recompute, **_layer_args(p, model, flash_attention, compute_model)
    )
    tkw = _token_args(p, model, compute_model)
    shard = p.dp * p.cp if p.zero_stage >= 1 else 1
    stage_layers = model.stage_layers(pp=p.pp, split_slots=p.split_slots)
    optimizer = []
    for j in range(p.pp):
        local = model.stage_parameters(j, tp=p.tp, pp=p.pp, ep=p.ep, etp=p.expert_tp, split_slots=p.split_slots)
        # FP8: the GEMM weights of the stage's layers are cast once per step (not the embedding or output layer)
        fp8_weights = (
            sum(model.layer_parameters(layer, tp=p.tp, ep=p.ep, etp=p.expert_tp) for layer in stage_layers[j])
            if _compute_dtype(p) == "fp8"
            else 0
        )
        # the distributed optimizer shards the routed experts' state over their expert-data-parallel group
        # (Megatron-Core: expert gradient buffers live on get_expert_data_parallel_group, distributed_data_parallel.py)
        expert = sum(model.routed_expert_parameters(i, ep=p.ep, etp=p.expert_tp) for i in stage_layers[j])
        expert_shard = p.edp if p.zero_stage >= 1 else 1
        step = cmp.optimizer_step(
            gpu,
            parameters=(local - expert) / shard + expert / expert_shard,
            param_bytes=model.dtype_bytes,
            buffer_parameters=local,
            fp8_weights=fp8_weights,
            compute_model=compute_model,
        )
        optimizer.append(step.time_s)
    slowdown = (
        cmp.default_overlap_slowdown(gpu, compute_model=compute_model) if overlap_slowdown is None else overlap_slowdown
    )
    if p.tp_comm_overlap and p.sp:
        stretch = tp_overlap_stretch_s(
            model, p, gpu, recompute=recompute, flash_attention=flash_attention, compute_model=compute_model
        )
        forward = tuple(t + extra for t, extra in zip(forward, stretch[0]))
        backward = tuple(t + extra for t, extra in zip(backward, stretch[1]))
    logits_backward = cmp.logits_backward(model, gpu, sp=p.sp, dtype=_compute_dtype(p), **tkw)
    return StepCompute(
        layer_forward_s=forward,
        layer_backward_s=backward,
        embedding_forward_s=cmp.embedding_forward(model, gpu, **tkw).time_s,
        embedding_backward_s=cmp.embedding_backward(model, gpu, **tkw).time_s,
        logits_forward_s=cmp.logits_forward(model, gpu, sp=p.sp, dtype=_compute_dtype(p), **tkw).time_s,
        logits_backward_s=logits_backward.time_s,
        optimizer_s=tuple(optimizer),
        overlap_slowdown=slowdown,
        logits_wgrad_s=math.fsum(op.time_s for op in logits_backward.ops if op.name == "logits.wgrad"),
    )


def executed_flops(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    gpu: GpuSpec,
    *,
    recompute: str = "none",
    flash_attention: bool = True,
    compute_model: cmp.GpuComputeModel | None = None,
) -> float:
    """FLOPs the step's kernels execute, all GPUs together: the FLOPs of the kernels ``step_compute`` times
    (``ComputeBreakdown.flops`` of every layer's forward and backward with its recomputation, the embedding and
    the logits), per micro-batch on one GPU, x m micro-batches x the t c d GPUs of each stage. Flash attention's
    causal mask skips all but (n+1)/(2n) of the score blocks, its backward executes 2.5 x its forward; the
    optimizer executes none (memory-bound)."""
    p = parallelism
    p.check(model)
    kw = _layer_args(p, model, flash_attention, compute_model)
    dtype = kw["dtype"]
    per_kind: dict[bool, float] = {}  # all dense (all MoE) layers run the same kernels
    layers = 0.0
    for layer in range(model.layers):
        kind = model.is_moe_layer(layer)
        if kind not in per_kind:
            forward = cmp.layer_forward(model, gpu, layer=layer, **kw).flops
            per_kind[kind] = forward + cmp.layer_backward(model, gpu, layer=layer, recompute=recompute, **kw).flops
        layers += per_kind[kind]
    tkw = _token_args(p, model, compute_model)
    ends = (
        cmp.embedding_forward(model, gpu, **tkw).flops
        + cmp.embedding_backward(model, gpu, **tkw).flops
        + cmp.logits_forward(model, gpu, sp=p.sp, dtype=dtype, **tkw).flops
        + cmp.logits_backward(model, gpu, sp=p.sp, dtype=dtype, **tkw).flops
    )
    return (layers + ends) * p.microbatches * (p.world_size // p.pp)


def tp_overlap_stretch_s(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    gpu: GpuSpec,
    *,
    recompute: str = "none",
    flash_attention: bool = True,
    compute_model: cmp.GpuComputeModel | None = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Seconds each layer's forward and backward (recomputation included) gain from the SMs Transformer Engine's
    overlapped tensor-parallel kernels hold (``tp_comm_overlap``): every GEMM paired with a collective
    (``workloads.training.tensor_parallel.TP_OVERLAP``) runs on S - k of the S SMs while the k of its collective's
    kernels run, g k / (S - k) more (``default_overlap_slowdown`` with k), over the whole GEMM: an upper bound, as
    the pipelined GEMMs run on S - k SMs throughout (TE's set_sm_margin) but a bulk collective may end before its
    GEMM. Zeros without sequence-parallel overlap and for MoE layers' expert GEMMs (not paired)."""
    p = parallelism
    zeros = (0.0,) * model.layers
    if not (p.tp_comm_overlap and p.sp):
        return zeros, zeros
    kw = _layer_args(p, model, flash_attention, compute_model)

    def extra(times: dict[str, float], names: tuple[str, ...], prefix: str = "") -> float:
        return math.fsum(
            times.get(prefix + TP_OVERLAP[n].gemm, 0.0)
            * cmp.default_overlap_slowdown(gpu, comm_ctas=TP_OVERLAP[n].num_sm, compute_model=compute_model)
            for n in names
        )

    by_kind: dict[bool, tuple[float, float]] = {}
    forward, backward = [], []
    for layer in range(model.layers):
        kind = model.is_moe_layer(layer)
        if kind not in by_kind:
            fwd = cmp.layer_forward(model, gpu, layer=layer, **kw).by_name()
            bwd = cmp.layer_backward(model, gpu, layer=layer, recompute=recompute, **kw).by_name()
            again = extra(bwd, TP_OVERLAP_FORWARD, "recompute.") if recompute == "full" else 0.0
            by_kind[kind] = (extra(fwd, TP_OVERLAP_FORWARD), again + extra(bwd, TP_OVERLAP_BACKWARD))
        forward.append(by_kind[kind][0])
        backward.append(by_kind[kind][1])
    return tuple(forward), tuple(backward)


def overlap_notes(parallelism: ParallelismSpec) -> list[str]:
    """What the result's notes say about the communication overlaps in use that are approximations."""
    p, out = parallelism, []
    if p.tp_comm_overlap and p.sp:
        out.append(
            "tp comm overlap (APPROXIMATE: optimistic where a collective outlasts its GEMM): Transformer Engine's "
            "default userbuffers methods; each layer pass's overlapped tensor-parallel communication hides behind "
            "the pass's whole compute, not only its own GEMM; the pipelined reduce-scatters' last chunks (1/4) exposed"
        )
    if p.overlap_param_gather and p.zero_stage in (1, 2) and p.dp * p.cp > 1:
        aligned = p.aligned_param_gather
        out.append(
            (
                "overlap param gather, aligned: each model chunk's all-gathers dispatched by the interleaved schedule "
                "(chunks 0 and 1 at the step's start, chunk c before the forward k with k + stage = the first of "
                "chunk c - 1), each waited for by the first forward that needs it"
            )
            if aligned
            else (
                "overlap param gather: the parameter all-gathers run back to back from the step's start, each waited "
                "for by the first forward that needs it (Megatron-Core dispatches one bucket ahead)"
            )
        )
    if p.defer_embedding_wgrad_compute:
        first = f"the first {p.wgrad_deferral_limit}" if p.wgrad_deferral_limit else "all"
        out.append(
            f"defer embedding wgrad compute: the last stage runs the output-layer weight gradients of {first} "
            "micro-batches in the pipeline flush, after its last backward (finish_embedding_wgrad_compute)"
        )
    return out


def memory_per_gpu(
    model: ModelSpec, parallelism: ParallelismSpec, *, recompute: str = "none", flash_attention: bool = True
) -> dict[str, float]:
    """Bytes on the most loaded GPU: parameters, gradients, optimizer state, activations (module docstring)."""
    p = parallelism
    p.check(model)
    grad_bytes = p.grad_bytes
    state = model.training_state_bytes(
        tp=p.tp,
        pp=p.pp,
        ep=p.ep,
        etp=p.expert_tp,
        dp=p.dp * p.cp,
        edp=p.edp,
        zero_stage=p.zero_stage,
        grad_bytes=grad_bytes,
        split_slots=p.split_slots,
    )
    chunk_layers = max(map(len, p.chunk_layers(model)))  # the longest model chunk
    # the larger of a dense and a MoE layer (all layers of one kind keep the same activations)
    kinds = {model.is_moe_layer(layer): layer for layer in range(model.layers)}
    per_layer = max(
        model.activation_bytes_per_layer(
            layer,
            micro_batch=p.micro_batch,
            seq_len=p.seq(model),
            tp=p.tp,
            sp=p.sp,
            cp=p.cp,
            recompute=recompute,
            flash_attention=flash_attention,
            etp=p.expert_tp,
        )
        for layer in kinds.values()
    )
    # the last stage also keeps the deferred output-layer weight gradients' inputs until the flush
    deferred = 0.0
    if p.defer_embedding_wgrad_compute:
        kept = min(p.wgrad_deferral_limit or p.microbatches, p.microbatches)
        deferred = kept * model.deferred_wgrad_bytes(
            micro_batch=p.micro_batch, seq_len=p.seq(model), tp=p.tp, sp=p.sp, cp=p.cp
        )
    activations = 0.0
    for stage in range(p.pp):
        ops = pipeline_schedule(p.schedule, pp=p.pp, stage=stage, microbatches=p.microbatches, vp=p.vp)
        live = peak = 0
        for phase, _, _ in ops:
            live += 1 if phase == "F" else -1
            peak = max(peak, live)
        activations = max(activations, per_layer * chunk_layers * peak + (deferred if stage == p.pp - 1 else 0.0))
    return {
        "parameters": state.parameters,
        "gradients": state.gradients,
        "optimizer": state.optimizer,
        "activations": float(activations),
        "total": state.parameters + state.gradients + state.optimizer + float(activations),
    }


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPhase:
    """One simulated part of the step: its programs, the simulation, the rebuilt task times (offset by
    ``offset_s`` in the step) and the compute critical path; ``replicas`` = how many identical copies
    of it the step runs (1: a step is one phase). A symmetric-replica step is one phase of one replica with the
    other replicas' group members passive (``Workload.passive``): what each collective stands for folded into
    ``training.collective_weights``, and ``sim.link_bytes`` the simulated collectives' bytes only."""

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
    tflops_per_gpu: float  # model FLOPs (Megatron-LM's formula) per GPU and second, / 1e12
    mfu: float  # model FLOPs / (step time x GPUs x peak)
    executed_tflops_per_gpu: float  # the kernels' executed FLOPs per GPU and second, / 1e12
    executed_mfu: float  # executed FLOPs / (step time x GPUs x peak), <= 1
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
    warnings: tuple[str, ...] = ()  # out of memory, an under-filled pipeline, an approximation used, options ignored
    approximate: bool = False  # a reduction that is not exact for this step was used (the notes say which)
    # the bound of an approximate replica, context-rank or tensor-rank reduction (None: exact, or no bound; the
    # notes say why): step time and time in network low (the reduced run) and high (reductions.bounding_fabric)
    step_time_low_s: float | None = None
    step_time_high_s: float | None = None
    exposed_comm_low_s: float | None = None
    exposed_comm_high_s: float | None = None

    @property
    def memory_bytes_per_gpu(self) -> float:
        return self.memory["total"]

    def frame(self, view: str = "group") -> Any:
        """One breakdown as a flat pandas DataFrame, one row per entry, unit-suffixed columns: ``"summary"``
        (the headline figures, one row), ``"group"`` and ``"collective"`` (count, nbytes, time_s, exposed_s per
        parallelism group or collective kind), ``"algorithm"`` (the same per group, algorithm and protocol NCCL's
        tuner chose), ``"exposed"`` (time in network split by group, with the overlap of groups and the part via
        other ranks: it adds up to ``exposed_comm_s``), ``"link_tier"`` (bytes moved, busy_s, utilisation) and
        ``"link_kind"`` (bytes moved), ``"memory"`` (bytes per GPU by part), ``"notes"`` (kind "warning" or
        "note", text)."""
        import pandas as pd

        b = self.breakdown
        if view == "summary":
            rows = [{k: v for k, v in self.as_dict().items() if not isinstance(v, (dict, list))}]
        elif view in ("group", "collective"):
            rows = [{view: name, **entry} for name, entry in b[view].items()]
        elif view == "algorithm":
            rows = [
                {"group": group, **dict(zip(("algorithm", "protocol"), choice.split())), **entry}
                for group, choices in b["algorithm"].items()
                for choice, entry in choices.items()
            ]
        elif view == "exposed":
            rows = [{"part": name, "exposed_s": value} for name, value in b["exposed"].items()]
        elif view == "link_tier":
            rows = [
                {
                    "tier": name,
                    "bytes": value,
                    "busy_s": b["link_tier_busy_s"][name],
                    "utilisation": b["link_tier_utilisation"][name],
                }
                for name, value in b["link_tier_bytes"].items()
            ]
        elif view == "link_kind":
            rows = [{"kind": name, "bytes": value} for name, value in b["link_kind_bytes"].items()]
        elif view == "memory":
            rows = [{"part": part, "bytes": value} for part, value in self.memory.items()]
        elif view == "notes":
            rows = [{"kind": "warning", "text": text} for text in self.warnings]
            rows += [{"kind": "note", "text": text} for text in self.notes]
            return pd.DataFrame(rows, columns=["kind", "text"])  # the columns even without a row
        else:
            raise reject("view", view, f"one of {', '.join(map(repr, STEP_VIEWS))}")
        return pd.DataFrame(rows)

    def as_dict(self) -> dict:
        def plain(value):
            if isinstance(value, Mapping):
                return {str(k): plain(v) for k, v in value.items()}
            return value

        return {
            "model": self.model,
            "topology": self.topology_name,
            "gpus": self.gpus,
            "parallelism": {k: getattr(self.parallelism, k) for k in ParallelismSpec.__dataclass_fields__},
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "executed_tflops_per_gpu": self.executed_tflops_per_gpu,
            "executed_mfu": self.executed_mfu,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_comm_s,
            "bubble_s": self.bubble_s,
            "critical_path_s": self.critical_path_s,
            "breakdown": plain(self.breakdown),
            "memory_bytes_per_gpu": self.memory_bytes_per_gpu,
            "memory": plain(self.memory),
            "memory_capacity_bytes": self.memory_capacity_bytes,
            "out_of_memory": self.out_of_memory,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
            "approximate": self.approximate,
            "step_time_low_s": self.step_time_low_s,
            "step_time_high_s": self.step_time_high_s,
            "exposed_comm_low_s": self.exposed_comm_low_s,
            "exposed_comm_high_s": self.exposed_comm_high_s,
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


def _compute_busy_s(program: tuple[Task, ...]) -> float:
    """Seconds the compute tasks of ``program`` keep its rank busy (exactly summed)."""
    durations: list[float] = []
    for task in program:
        if isinstance(task, ComputeTask):
            assert task.duration_s is not None  # a simulated workload is resolved (simulate checks)
            durations.append(task.duration_s)
    return math.fsum(durations)


def _run_phase(
    topology: Topology,
    training: TrainingWorkload,
    placement: Placement,
    config: SimConfig,
    offset_s: float,
    replicas: int,
    route_cache: RouteCache,
    progress: Callable[[str], None] | None = None,
    what: str = "the step",
) -> StepPhase:
    if progress is not None:
        tasks = sum(len(program) for program in training.workload.programs)
        progress(f"simulating {what}: {training.workload.nranks} ranks, {tasks} tasks")
    sim = _simulate(topology, training, placement, config, route_cache)
    # after an event replay the timeline is rebuilt from the collectives' times: it must end with the replay
    if not math.isclose(sim.timeline.makespan_s, sim.makespan_s, rel_tol=1e-9, abs_tol=1e-12):
        raise RuntimeError(
            f"task times: rebuilt makespan {sim.timeline.makespan_s!r} s differs from the engine's {sim.makespan_s!r} s"
        )
    critical = task_times(training.workload).makespan_s
    return StepPhase(training=training, sim=sim, critical_path_s=critical, offset_s=offset_s, replicas=replicas)


def _phase_metrics(phase: StepPhase) -> tuple[float, int]:
    """(largest per-rank compute busy time, rank that ends last). Ranks share program objects
    (workloads.training builds equal programs once): each distinct program's busy time is summed once."""
    compute = max((_compute_busy_s(program) for program, _ in phase.training.workload.shared_programs), default=0.0)
    return compute, int(np.argmax(phase.timeline.rank_end_s))  # the first of the ranks ending last


@dataclass(slots=True, kw_only=True)
class _Raw:
    """Additive measurements of one simulated step (combined linearly by the steady-state extrapolation)."""

    step_s: float
    critical_s: float
    compute_s: float
    comm_s: float
    exposed_union_s: float  # on each phase's last rank: any collective in flight while its compute is idle
    breakdowns: dict  # labelling ("group", "collective", "algorithm") -> label -> entry (_merge)
    links: dict  # "tier" / "kind" -> name -> bytes (analysis.link_class_bytes)
    phases: tuple[StepPhase, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class _PhaseParts:
    """What one phase adds to a step's measurements (before replicas scale counts and bytes)."""

    compute_s: float
    comm_s: float
    exposed_union_s: float
    breakdowns: dict
    links: dict


def _phase_parts(
    phase: StepPhase,
    topology: Topology,
    *,
    link_bytes: np.ndarray | None = None,
) -> _PhaseParts:
    """What ``phase`` adds to the step; ``link_bytes`` replaces the phase's own."""
    busy, last = _phase_metrics(phase)
    training = phase.training
    workload = training.workload
    # per group kind, per collective kind, per (group kind, the algorithm and protocol NCCL's tuner chose),
    # and all collectives as one label: comm_s, the largest per-rank union
    labelings = {
        "group": training.group_kinds,
        "collective": [c.kind.value for c in workload.collectives],
        "algorithm": [
            (group, f"{record.algorithm} {record.protocol}")
            for group, record in zip(training.group_kinds, phase.sim.collectives, strict=True)
        ],
        "all": ("comm",) * len(workload.collectives),
    }
    parts = interval_breakdowns(
        workload, phase.timeline, labelings, focus_rank=last, weights=training.collective_weights
    )
    comm = parts.pop("all")
    if link_bytes is None:
        link_bytes = phase.sim.link_bytes
    return _PhaseParts(
        compute_s=busy,
        comm_s=comm["comm"]["time_s"] if workload.collectives else 0.0,
        exposed_union_s=comm["comm"]["exposed_s"] if workload.collectives else 0.0,
        breakdowns=parts,
        links=link_class_bytes(topology, link_bytes),
    )


def _merge(total: dict, part: dict, scale: int) -> None:
    for label, entry in part.items():
        into = total.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
        into["count"] += entry["count"] * scale
        into["nbytes"] += entry["nbytes"] * scale
        into["time_s"] += entry["time_s"]
        into["exposed_s"] += entry["exposed_s"]


def _simulate(
    topology: Topology, training: TrainingWorkload, placement: Placement, config: SimConfig, route_cache: RouteCache
) -> SimResult:
    """``simulate()`` of the step's programs; with traffic classes each collective's class follows its group (tp,
    pp, dp, cp, ep: ``SimConfig.traffic``)."""
    groups = training.group_kinds if config.traffic is not None else None
    return simulate(topology, training.workload, placement, config, route_cache=route_cache, groups=groups)


def _programs(
    model: ModelSpec,
    p: ParallelismSpec,
    topology: Topology,
    compute: StepCompute,
    placement: Placement,
    kw: _StepArgs,
    *,
    passive: bool = False,
    symmetric: bool = False,
    context: bool = False,
) -> tuple[TrainingWorkload, Placement]:
    """The step's programs with their durations resolved from ``compute``, and their ranks' placement. With
    ``passive``: only the ranks the reductions in use simulate (``reductions.simulated_ranks``), the other members
    of their groups passive."""
    if not passive:
        return resolve(training_step(model, p, **kw), compute), placement
    ranks = reductions.simulated_ranks(p, symmetric=symmetric, context=context)
    training = resolve(training_step(model, p, ranks=ranks, passive=True, **kw), compute)
    return training, Placement.custom(topology, [placement.rank_gpu[r] for r in training.ranks])


def _measure(
    model: ModelSpec,
    p: ParallelismSpec,
    topology: Topology,
    compute: StepCompute,
    config: SimConfig,
    *,
    placement: Placement,
    recompute: str,
    granularity: str,
    tensor_rank0_p2p: bool,
    route_cache: RouteCache,
    passive: bool = False,
    symmetric: bool = False,
    context: bool = False,
    scales_transfers: bool = False,
    progress: Callable[[str], None] | None = None,
    perturb: Callable[[TrainingWorkload], TrainingWorkload] | None = None,
) -> _Raw:
    """One step's additive measurements. With ``passive``, the ranks the reductions in use simulate
    (``reductions.simulated_ranks``), the other members of their groups passive. The programs are built without
    hardware, then their durations resolved from ``compute``."""
    kw = _StepArgs(recompute=recompute, granularity=granularity, tensor_rank0_p2p=tensor_rank0_p2p)
    phases: tuple[StepPhase, ...]
    parts: tuple[_PhaseParts, ...]
    if passive:
        # one replica's whole step (or every replica's, or their context rank 0 only), the other members of its
        # data-parallel, expert-parallel and context-parallel groups passive
        training, phase_placement = _programs(
            model, p, topology, compute, placement, kw, passive=True, symmetric=symmetric, context=context
        )
        what = "one data-parallel replica's step" if symmetric else "the step"
        what = f"context rank 0 of {what}" if context else what
        phase = _run_phase(
            topology,
            training,
            phase_placement,
            config,
            0.0,
            1,
            route_cache,
            progress,
            f"{what}, {p.microbatches} micro-batches",
        )
        # each collective stands for those of every unit (data-parallel replica, context rank) its group does not
        # reach: units / (units it spans)
        units = (p.dp if symmetric else 1) * (p.cp if context else 1)
        spans: dict[tuple[int, ...], int] = {}
        stands = []
        for c in training.workload.collectives:
            span = spans.get(c.group)
            if span is None:
                coords = [p.coords(training.ranks[r]) for r in c.group]
                span = spans[c.group] = len({(x.dp if symmetric else 0, x.cp if context else 0) for x in coords})
            stands.append(units // span)
        weights = tuple(w * n for w, n in zip(training.collective_weights, stands))
        phase = dataclasses.replace(phase, training=dataclasses.replace(training, collective_weights=weights))
        # the bytes the collectives stood for move on their own links (link bytes do not depend on timing); those
        # of tensor rank 0's transfers and rings count for every tensor rank where they stand exactly for them
        counts = (
            [w * n - 1 for w, n in zip(training.collective_weights, stands)]
            if scales_transfers
            else [n - 1 for n in stands]
        )
        link_bytes = phase.sim.link_bytes + collective_link_bytes(
            topology, training.workload, counts, phase_placement, config, route_cache=route_cache
        )
        phases = (phase,)
        parts = (_phase_parts(phase, topology, link_bytes=link_bytes),)
    else:
        built, _ = _programs(model, p, topology, compute, placement, kw)
        phases = (
            _run_phase(
                topology,
                built if perturb is None else perturb(built),
                placement,
                config,
                0.0,
                1,
                route_cache,
                progress,
                f"the step, {p.microbatches} micro-batches",
            ),
        )
        parts = (_phase_parts(phases[0], topology),)
    raw = _Raw(
        step_s=math.fsum(ph.sim.makespan_s for ph in phases),
        critical_s=math.fsum(ph.critical_path_s for ph in phases),
        compute_s=0.0,
        comm_s=0.0,
        exposed_union_s=0.0,
        breakdowns={},
        links={},
        phases=phases,
    )
    for ph, part in zip(phases, parts):
        raw.compute_s += part.compute_s
        raw.comm_s += part.comm_s
        raw.exposed_union_s += part.exposed_union_s
        for name, entries in part.breakdowns.items():
            _merge(raw.breakdowns.setdefault(name, {}), entries, ph.replicas)
        for name, values in part.links.items():
            into = raw.links.setdefault(name, {})
            for label, value in values.items():
                into[label] = into.get(label, 0.0) + value * ph.replicas
    return raw


def _makespan(
    model: ModelSpec,
    p: ParallelismSpec,
    topology: Topology,
    compute: StepCompute,
    config: SimConfig,
    *,
    placement: Placement,
    recompute: str,
    granularity: str,
    tensor_rank0_p2p: bool,
    route_cache: RouteCache,
    passive: bool = False,
    symmetric: bool = False,
    context: bool = False,
) -> float:
    """The step time of :func:`_measure` (its ``step_s``, the same number) without the rest of its measurements:
    no critical path, breakdowns or link bytes (what the high side of a bound needs)."""
    kw = _StepArgs(recompute=recompute, granularity=granularity, tensor_rank0_p2p=tensor_rank0_p2p)
    training, placement = _programs(
        model, p, topology, compute, placement, kw, passive=passive, symmetric=symmetric, context=context
    )
    return math.fsum([_simulate(topology, training, placement, config, route_cache).makespan_s])  # as _measure's


def _frozen(value):
    """(Nested) dicts as read-only mappings."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOptions:
    """How ``simulate_step`` runs a step (every field checked on construction).

    ``config``: the simulation settings (network model, collectives, routing; ``SimConfig()`` when None).
    ``gpu``: the GPU to time compute on (the topology's GPU when None). ``compute_model``: the GPU compute model's
    parameters (``simulator.compute.gpu``; its defaults for the GPU when None). ``compute``: a StepCompute
    replacing the compute model's times (``attention_kernel`` and ``overlap_slowdown``, which only time kernels, must
    then be None). ``overlap_slowdown``: the stretch of compute running beside
    communication (the compute model's default when None). ``flash_attention``, ``recompute`` ("none",
    "selective", "full"): what the kernels do. ``attention_kernel``: the fused attention kernel ("cudnn":
    Transformer Engine's cuDNN fused attention, "fa2": the flash-attn package's FlashAttention-2, "fa3":
    FlashAttention-3; ``simulator.compute.gpu.ATTENTION_KERNELS``), replacing the compute model's
    ``flash_kernel`` (None: the compute model's, cuDNN on Hopper). ``placement``: ranks on GPUs
    (``Placement.block``, Megatron order on consecutive GPUs, when None). ``nodes``, ``wiring``: the size and
    wiring of the system when it is given as a preset name (enough servers for the layout; a leaf-spine, or a fat
    tree past its size, when None).
    The reductions (``simulator.studies.reductions``): ``granularity`` ("layer" or "chunk"),
    ``tensor_rank0_p2p``, ``symmetric_replicas`` and ``symmetric_context`` (context rank 0 standing for the c
    context ranks; None, the default: used where they are exact for this step,
    ``reductions.plan``; True: used, an approximation where they are not exact, said in the notes; False: not
    used), ``steady_state_microbatches`` (None or k >= 1; an approximation unless the schedule is periodic by k).
    ``exact``: every rank simulated: no replica or tensor-rank reduction, no steady-state extrapolation (not with
    one forced on); ``granularity`` stays a separate choice.
    ``route_cache`` (``topologies.routing.RouteCache``) holds the routing tables of the topology for every
    ``simulate`` call of the step (default: a fresh one); a sweep on one fabric can pass one to all its steps.
    ``progress``: called with a short description of each stage as the step reaches it (timing the kernels,
    simulating a phase with its ranks and tasks), for a progress display; None, silent.
    ``bound_process``: the high side of an approximation's bound (``reductions.bounding_fabric``) runs in a forked
    child process beside the reduced run where the platform forks, this process may use a second CPU, may have
    children and runs no other threads (``_beside``; False, or otherwise: one after the other); the numbers are the
    same either way, and the child is stopped if the step fails or is interrupted. ``bound``: False skips that
    bound (the step time is the reduced run's either way; a check that compares only it, such as the training
    validation, saves the second run), and the notes say it was not computed.
    ``perturb``: a function applied to the step's programs once their durations are resolved, before they run
    (per-GPU compute slowdowns and kernel-launch jitter: ``simulator.studies.stragglers.ComputeNoise``); it makes
    ranks unalike, so it needs ``exact=True``. None: the programs run as built.
    """

    config: SimConfig | None = None
    gpu: GpuSpec | None = None
    compute_model: cmp.GpuComputeModel | None = None
    compute: StepCompute | None = None
    overlap_slowdown: float | None = None
    flash_attention: bool = True
    attention_kernel: str | None = None
    recompute: str = "none"
    placement: Placement | None = None
    nodes: int | None = None
    wiring: str | None = None
    granularity: str = "layer"
    tensor_rank0_p2p: bool | None = None
    symmetric_replicas: bool | None = None
    symmetric_context: bool | None = None
    steady_state_microbatches: int | None = None
    exact: bool = False
    route_cache: RouteCache | None = None
    progress: Callable[[str], None] | None = None
    bound_process: bool = True
    bound: bool = True
    perturb: Callable[[TrainingWorkload], TrainingWorkload] | None = None

    def __post_init__(self) -> None:
        for name, kind, what in (
            ("config", SimConfig, "a SimConfig"),
            ("gpu", GpuSpec, "a GpuSpec"),
            ("compute_model", cmp.GpuComputeModel, "a GpuComputeModel"),
            ("compute", StepCompute, "a workloads.training.StepCompute"),
            ("placement", Placement, "a Placement"),
            ("route_cache", RouteCache, "a topologies.routing.RouteCache"),
        ):
            instance(f"StepOptions.{name}", getattr(self, name), (kind, type(None)), f"{what} or None")
        if self.overlap_slowdown is not None:
            finite(
                "StepOptions.overlap_slowdown", self.overlap_slowdown, low=0, expected="None or a finite number >= 0"
            )
        for name in ("flash_attention", "exact", "bound_process", "bound"):
            flag(f"StepOptions.{name}", getattr(self, name))
        for name in ("tensor_rank0_p2p", "symmetric_replicas", "symmetric_context"):
            if getattr(self, name) is not None:
                flag(f"StepOptions.{name}", getattr(self, name))
                if self.exact and getattr(self, name):
                    raise reject(f"StepOptions.{name}", True, "None or False with exact=True (no reduction)")
        if self.exact and self.steady_state_microbatches is not None:
            raise reject(
                "StepOptions.steady_state_microbatches", self.steady_state_microbatches, "None with exact=True"
            )
        # the names become their enum members (equal to the names as strings)
        object.__setattr__(self, "recompute", option("StepOptions.recompute", self.recompute, Recompute))
        object.__setattr__(self, "granularity", option("StepOptions.granularity", self.granularity, Granularity))
        for name in ("nodes", "steady_state_microbatches"):
            if getattr(self, name) is not None:
                integer(f"StepOptions.{name}", getattr(self, name), low=1, expected="None or an integer >= 1")
        if self.progress is not None and not callable(self.progress):
            raise reject("StepOptions.progress", self.progress, "None or a function of one string")
        if self.wiring is not None:
            instance("StepOptions.wiring", self.wiring, str, "None or a wiring name")
        if self.perturb is not None and not callable(self.perturb):
            raise reject("StepOptions.perturb", self.perturb, "None or a function of a TrainingWorkload")
        if self.attention_kernel is not None:
            checks.choice("StepOptions.attention_kernel", self.attention_kernel, cmp.ATTENTION_KERNELS)
            if not self.flash_attention:
                raise reject("StepOptions.attention_kernel", self.attention_kernel, "None without flash_attention")
        if self.compute is not None:
            # given step times replace the compute model's: an option that only times kernels would be ignored
            for name in ("attention_kernel", "overlap_slowdown"):
                if getattr(self, name) is not None:
                    raise reject(
                        f"StepOptions.{name}", getattr(self, name), "None with compute (its times replace the kernels')"
                    )
        if self.perturb is not None and not self.exact:
            raise reject("StepOptions.exact", False, "True with perturb (perturbed ranks are not alike)")


def _compute_model_of(o: StepOptions, gpu: GpuSpec) -> cmp.GpuComputeModel | None:
    """The compute model a step times its kernels with: ``o.compute_model`` (None: the GPU's), its attention kernel
    replaced by ``o.attention_kernel`` when one is given."""
    if o.attention_kernel is None:
        return o.compute_model
    base = cmp.compute_model_for(gpu, o.compute_model)
    return cmp.with_attention_kernel(base, o.attention_kernel, field="StepOptions.attention_kernel")


def _timed(
    model: ModelSpec, p: ParallelismSpec, o: StepOptions, gpu: GpuSpec, compute_model: cmp.GpuComputeModel | None
) -> StepCompute:
    """The step's kernel times from the compute model (``o.compute`` not given), said to ``o.progress``."""
    if o.progress is not None:
        o.progress("timing the kernels")
    return step_compute(
        model,
        p,
        gpu,
        recompute=o.recompute,
        flash_attention=o.flash_attention,
        overlap_slowdown=o.overlap_slowdown,
        compute_model=compute_model,
    )


class _Beside:
    """A value computed in a forked child process (:func:`_beside`): ``result()`` waits for it, ``cancel()`` stops
    the child (on the parent's error or interrupt, so no process outlives the step)."""

    def __init__(self, work: Callable[[], Any]) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self._receive, send = ctx.Pipe(duplex=False)

        def child() -> None:
            try:
                send.send(("ok", work()))
            except BaseException as exc:  # the parent raises it
                send.send(("error", f"{type(exc).__name__}: {exc}"))
            finally:
                send.close()

        self._process = ctx.Process(target=child, daemon=True)
        self._process.start()
        send.close()

    def cancel(self) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receive.close()

    def result(self) -> Any:
        try:
            kind, value = self._receive.recv()
        except EOFError:
            self.cancel()
            raise RuntimeError("the bound's run ended without a result (its process was killed)") from None
        except BaseException:
            self.cancel()
            raise
        self._process.join()
        self._receive.close()
        if kind != "ok":
            raise RuntimeError(f"the bound's run failed: {value}")
        return value


def _beside(work: Callable[[], Any]) -> _Beside | None:
    """``work`` started in a forked child process; None where that is not safe or not faster: the platform cannot
    fork, this process has one CPU (its affinity), may not have children (a daemon, e.g. a Dask nanny's worker),
    or runs other threads (a thread pool's worker: a lock one of them holds would stay held in the child;
    tqdm's display monitor, which the child never touches, excepted)."""
    import multiprocessing
    import os
    import threading

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cpus < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    if multiprocessing.current_process().daemon:
        return None
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if any(type(t).__name__ != "TMonitor" for t in others):
        return None
    return _Beside(work)


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off inside (back on after, if it was on). A step holds millions of
    long-lived objects (its tasks, collectives, routes) that every full collection traverses again, and frees
    its own garbage by reference counting: the 16,384-GPU CP 16 step of ``fabricsim perf --commands`` spent
    16 % of its CPU time in the collector (53.3 s against 44.9 s of CPU, same numbers), and its peak RSS did
    not grow (1.29 GiB against 1.45 GiB with the collector on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate_step(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    *,
    system: str | Topology = "dgx-h100",
    options: StepOptions | None = None,
) -> StepResult:
    """Simulate one training step of ``model`` laid out as ``parallelism`` on ``system`` (a preset name, built
    with ``options.nodes``/``options.wiring``, or a built Topology), run as ``options`` say (:class:`StepOptions`;
    the defaults when None). See the module docstring. The garbage collector is paused meanwhile
    (:func:`collector_paused`).
    """
    with collector_paused():
        return _simulate_step(model, parallelism, system=system, options=options)


def _simulate_step(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    *,
    system: str | Topology,
    options: StepOptions | None,
) -> StepResult:
    o = StepOptions() if options is None else options
    if not isinstance(o, StepOptions):
        raise reject("options", o, "a StepOptions or None")
    if not isinstance(model, ModelSpec):
        raise reject("model", model, "a workloads.model.ModelSpec")
    if not isinstance(parallelism, ParallelismSpec):
        raise reject("parallelism", parallelism, "a workloads.parallelism.ParallelismSpec")
    p = parallelism.check(model)
    world = p.world_size
    config = o.config or SimConfig()
    if isinstance(system, Topology):
        topology = system
    elif isinstance(system, str):
        topology = _build_topology(system, o.nodes, world, o.wiring)
    else:
        raise reject("system", system, "a system preset name or a topologies.topology.Topology")
    if topology.num_gpus < world:
        raise ValueError(
            f"parallelism: needs {world} GPUs (tp x cp x dp x pp = {p.tp} x {p.cp} x {p.dp} x {p.pp}) "
            f"but topology {topology.name!r} has {topology.num_gpus}"
        )
    gpu = o.gpu or _gpu_of(topology)
    compute_model = _compute_model_of(o, gpu)
    compute = o.compute if o.compute is not None else _timed(model, p, o, gpu, compute_model)
    placement = o.placement
    if placement is None:
        placement = Placement.block(topology, nranks=world)
    elif placement.nranks != world:
        raise reject("placement", placement, f"a Placement of {world} ranks or None")
    route_cache = RouteCache() if o.route_cache is None else o.route_cache
    recompute = o.recompute
    if o.progress is not None and not o.exact:
        o.progress("choosing the exact reductions")
    used = reductions.plan(
        p,
        topology,
        placement,
        config,
        route_cache,
        symmetric_replicas=o.symmetric_replicas,
        tensor_rank0_p2p=o.tensor_rank0_p2p,
        exact=o.exact or bool(config.storage),  # storage streams start on every server: every rank simulated
        symmetric_context=o.symmetric_context,
        tied_embeddings=model.tied_embeddings,
    )
    kw = _StepArgs(recompute=recompute, granularity=o.granularity, tensor_rank0_p2p=used.tensor_rank0_p2p)

    def measure(layout: ParallelismSpec, fabric: Topology, progress: Callable[[str], None] | None) -> _Raw:
        return _measure(
            model,
            layout,
            fabric,
            compute,
            config,
            placement=placement,
            route_cache=route_cache,
            passive=used.passive,
            symmetric=used.symmetric,
            context=used.context,
            scales_transfers=used.scales_transfer_links,
            progress=progress,
            perturb=o.perturb,
            **kw,
        )

    m = p.microbatches
    steady = reductions.steady_state_runs(p, o.steady_state_microbatches)

    def run(fabric: Topology, progress: Callable[[str], None] | None = o.progress) -> _Raw:
        if steady is None:
            return measure(p, fabric, progress)
        k, few, more = steady
        a, b = measure(few, fabric, progress), measure(more, fabric, progress)
        return _Raw(
            **{
                f.name: reductions.extrapolate(getattr(a, f.name), getattr(b, f.name), m=m, k=k)
                for f in dataclasses.fields(_Raw)
                if f.name != "phases"
            },
            phases=b.phases,
        )

    # the bound of an approximation (reductions.bounding_fabric): low, the reduced run; high, the same run's step
    # time (_makespan: the number _measure gives, without its other measurements) on a fabric where it is no faster
    # than any unit of the full step; the fabric built and run in a child process beside the reduced run where that
    # is safe and there is a second CPU (``StepOptions.bound_process``, _beside; the same numbers either way)
    def makespan(layout: ParallelismSpec, fabric: Topology, progress: Callable[[str], None] | None) -> float:
        if progress is not None:
            progress(f"simulating the bound's run, {layout.microbatches} micro-batches")
        return _makespan(
            model,
            layout,
            fabric,
            compute,
            config,
            placement=placement,
            route_cache=route_cache,
            passive=used.passive,
            symmetric=used.symmetric,
            context=used.context,
            **kw,
        )

    def bound(progress: Callable[[str], None] | None) -> tuple[float | None, str]:
        fabric, why = reductions.bounding_fabric(
            p, topology, placement, config, route_cache, used, tied_embeddings=model.tied_embeddings
        )
        if fabric is None:
            return None, why
        if steady is None:
            return makespan(p, fabric, progress), why
        k, few, more = steady
        return reductions.extrapolate(makespan(few, fabric, progress), makespan(more, fabric, progress), m=m, k=k), why

    bounded: Callable[[], tuple[float | None, str]] | None = None
    child: _Beside | None = None
    if used.approximate and o.bound:
        if o.progress is not None:
            o.progress("bounding the approximation: the reduced run on links shared by the missing traffic")
        child = _beside(lambda: bound(None)) if o.bound_process else None
        if child is None:
            serial = bound(o.progress)
            bounded = lambda: serial  # noqa: E731
        else:
            bounded = child.result
    try:
        raw = run(topology)
    except BaseException:
        if child is not None:
            child.cancel()
        raise
    reduced = reductions.notes(p, used, steady=steady)
    notes = reduced + overlap_notes(p)
    step, critical = raw.step_s, raw.critical_s
    low = high = None
    if bounded is not None:
        high_s, why = bounded()
        if high_s is not None:
            high = max(step, high_s)
            low = step
        notes.append(reductions.bound_note(low, high, critical, why))
    elif used.approximate:
        notes.append(reductions.bound_note(None, None, critical, "not computed (StepOptions.bound False)"))
    seq = p.seq(model)
    model_flops = model.megatron_flops(batch=p.global_batch, seq_len=seq, tp=p.tp)
    executed = executed_flops(
        model, p, gpu, recompute=recompute, flash_attention=o.flash_attention, compute_model=compute_model
    )
    peak = gpu.dense_fp8_flop_per_s if p.dtype == "fp8" and gpu.dense_fp8_flop_per_s else gpu.dense_bf16_flop_per_s
    memory = memory_per_gpu(model, p, recompute=recompute, flash_attention=o.flash_attention)
    exposed = max(step - critical, 0.0)
    bubble = max(critical - raw.compute_s, 0.0)
    # time in network split by group on the last rank, with the two named remainders that make it add up
    groups = {group: entry["exposed_s"] for group, entry in raw.breakdowns["group"].items()}
    exposed_split = groups | {
        OVERLAP_OF_GROUPS: raw.exposed_union_s - math.fsum(groups.values()),
        VIA_OTHER_RANKS: exposed - raw.exposed_union_s,
    }
    # each tier's links' summed capacity: the same per-tier sum as the bytes, of the capacities
    capacity = link_class_bytes(topology, topology.link_capacity_bytes_per_s)["tier"]
    busy = {tier: nbytes / capacity[tier] for tier, nbytes in raw.links["tier"].items()}
    # algorithm: group -> "algorithm protocol" -> entry, groups in the order of "group", the most bytes first
    algorithm: dict = {group: {} for group in raw.breakdowns["group"]}
    for (group, choice), entry in sorted(raw.breakdowns["algorithm"].items(), key=lambda e: (-e[1]["nbytes"], e[0][1])):
        algorithm[group][choice] = entry
    breakdown = _frozen(
        raw.breakdowns
        | {
            "algorithm": algorithm,
            "exposed": exposed_split,
            "link_tier_bytes": raw.links["tier"],
            "link_tier_busy_s": busy,
            "link_tier_utilisation": {tier: b / step if step > 0 else 0.0 for tier, b in busy.items()},
            "link_kind_bytes": raw.links["kind"],
        }
    )
    warnings = _warnings(p, memory, float(gpu.memory_bytes), step_s=step, bubble_s=bubble)
    if used.approximate or steady is not None:
        warnings.append(
            "approximate result: "
            + "; ".join(note.split(" (")[0] for note in reduced if "APPROXIMATE" in note or note.startswith("steady"))
            + (f"; step time bounded in [{low:.4g}, {high:.4g}] s" if low is not None and high is not None else "")
            + " (the notes say why; --exact / StepOptions(exact=True) simulates every rank)"
        )
    return StepResult(
        model=model.name,
        parallelism=p,
        topology_name=topology.name,
        gpus=world,
        step_time_s=step,
        tokens_per_s=p.global_batch * seq / step if step > 0 else 0.0,
        tflops_per_gpu=model_flops / (step * world) / 1e12 if step > 0 else 0.0,
        mfu=model_flops / (step * world * peak) if step > 0 else 0.0,
        executed_tflops_per_gpu=executed / (step * world) / 1e12 if step > 0 else 0.0,
        executed_mfu=executed / (step * world * peak) if step > 0 else 0.0,
        compute_s=raw.compute_s,
        comm_s=raw.comm_s,
        exposed_comm_s=exposed,
        bubble_s=bubble,
        critical_path_s=critical,
        breakdown=breakdown,
        memory=MappingProxyType(memory),
        memory_capacity_bytes=float(gpu.memory_bytes),
        out_of_memory=memory["total"] > gpu.memory_bytes,
        phases=raw.phases,
        notes=tuple(notes),
        warnings=tuple(warnings),
        approximate=used.approximate or steady is not None,
        step_time_low_s=low,
        step_time_high_s=high,
        exposed_comm_low_s=None if low is None else max(low - critical, 0.0),
        exposed_comm_high_s=None if high is None else max(high - critical, 0.0),
    )


def _warnings(
    p: ParallelismSpec, memory: Mapping[str, float], capacity_bytes: float, *, step_s: float, bubble_s: float
) -> list[str]:
    """What a user must not miss: out of memory; a pipeline under-filled (fewer micro-batches than stages, or a
    bubble of at least ``BUBBLE_WARNING_SHARE`` of the step)."""
    out = []
    gib = float(1 << 30)
    if memory["total"] > capacity_bytes:
        parts = ", ".join(
            f"{name} {memory[name] / gib:.1f}" for name in ("parameters", "gradients", "optimizer", "activations")
        )
        out.append(
            f"out of memory: {memory['total'] / gib:.1f} GiB per GPU ({parts}) of {capacity_bytes / gib:.0f} GiB; "
            "more tp, pp or ZeRO, recomputation or a smaller micro-batch would fit it"
        )
    share = bubble_s / step_s if step_s > 0 else 0.0
    m = p.microbatches
    if p.pp > 1 and (m < p.pp or share >= BUBBLE_WARNING_SHARE):
        ideal = (p.pp - 1) / (p.vp * m + p.pp - 1)
        out.append(
            f"under-filled pipeline: {m} micro-batch{'es' if m > 1 else ''} for {p.pp} stages, the bubble is "
            f"{share:.0%} of the step ((p - 1) / (v m + p - 1) = {ideal:.0%} with equal stages); a larger global "
            "batch, a smaller micro-batch or fewer data-parallel replicas give more micro-batches"
        )
    return out
