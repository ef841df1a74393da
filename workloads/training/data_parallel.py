"""Data parallelism: gradient buckets, their reduction during or after the backward, ZeRO 1/2/3 and FSDP,
the tied-embedding sync and the optimizer step. Pure data.

The gradients of a rank's weights (ModelSpec.stage_parameters x gradient bytes; fp16 training reduces fp16
gradients, bf16 and fp8 training fp32 ones, Megatron's accumulate_allreduce_grads_in_fp32) are cut, in the
order the backward produces them, into buckets (``ParallelismSpec.bucket_elements``: by default Megatron-Core's
max(40e6, 1e6 x d c) parameters, one bucket per model chunk after the first and without overlap; with
``bucket_bytes`` floor(bucket_bytes / gradient bytes) elements; None: one per model chunk, Megatron's
contiguous gradient buffer); a bucket is ready after the backward task whose running total of gradients
first reaches its end. With
``dp_overlap`` a bucket is reduced on stream 1 as soon as the backward of the last micro-batch has produced
all of it (PyTorch DDP), overlapping the rest of the backward; otherwise all buckets are reduced after the
pipeline (Megatron-LM 2021, ``allreduce_gradients`` after the schedule).

* ZeRO 0: all-reduce of the bucket (N g bytes for N gradients of g bytes).
* ZeRO 1/2: reduce-scatter of the bucket, optimizer on the 1/(d c) shard, then all-gather of the updated
  parameters (N D bytes, D the model's element size) on stream 1 after the optimizer.
* ZeRO 3 / FSDP: every weight unit's parameters all-gathered (N D bytes) on stream 2 before its forward and
  again before its backward, for every micro-batch (reshard after forward), prefetched one compute task
  ahead; its gradients reduce-scattered once the last micro-batch's backward produced them.

Dense weights reduce over the d x c ranks that share them, expert weights over the expert-data-parallel
group (edp = t c d / (etp e) ranks; d c / e with etp = t; ``ParallelismSpec.groups("edp")``). Tied embeddings
with p > 1: the first and last stage all-reduce the embedding gradient (V/t x h x g bytes) after the
data-parallel reduction. Reduce-scatter and all-gather sizes are rounded up to whole elements per rank
(``common.padded``). The optimizer's compute task (``PassWork(phase="optimizer")``) waits for the reductions.

Worked number: GPT-1.7B (24 layers), t = p = 1, d = 32, fp16: one rank's gradients are 1,652,230,656 x 2 B =
3,304,461,312 B, cut into 42 of Megatron-Core's buckets of max(40e6, 32e6) = 40e6 parameters (1,652,230,656 /
40e6 = 41.3), or into 127 buckets of PyTorch DDP's 25 MiB = 26,214,400 B (3,304,461,312 / 26,214,400 = 126.06:
the last one holds 0.06 of a bucket).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..collectives import CollectiveKind
from .common import STREAM_DP, STREAM_PARAM, elt, padded
from .compute import PassWork

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("Unit", "DataParallel")


@dataclass(frozen=True, slots=True)
class Unit:
    """Weights whose gradients one backward task produces: ``dense``/``expert`` parameter counts."""

    dense: int
    expert: int


class DataParallel:
    """The data-parallel dimension of a build: weight units and gradient buckets (once per stage), and the
    reductions, parameter gathers and optimizer step a rank program (``program._RankProgram``) makes.

    Per rank it keeps on the rank program: ``reduce`` (the build includes the reduction), ``reduce_in_backward``
    (buckets are reduced during the backward: DDP overlap or ZeRO-3), ``overlap`` (DDP overlap proper),
    ``buckets`` (per chunk), ``dp_started`` (a bucket reduction was issued) and ``dp_tasks``."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        spec, model = b.spec, b.model
        self.zero = spec.zero_stage
        # whether the ranks reduce dense gradients (over their d x c data x context group) and expert gradients
        # (over their expert-data-parallel group of edp = t c d / (etp e): Megatron-Core reduces expert buffers over
        # get_expert_data_parallel_group, distributed_data_parallel.py): the same for every rank, the groups of a
        # kind having one size
        self.reduces_dense = spec.dp * spec.cp > 1
        self.reduces_expert = model.is_moe and spec.edp > 1
        # ZeRO-3 ranks that reduce dense gradients overlap every forward and backward task with communication
        # (StepCompute.overlap_slowdown)
        self.stretched_all = self.zero >= 3 and self.reduces_dense
        self._units: dict[int | str, Unit] = {}  # by layer, "embedding" or "output"
        self._buckets: dict[tuple[int, bool, bool], tuple[tuple[str, int, int, int], ...]] = {}
        self._needs: dict[tuple[int, bool, bool], tuple[tuple[tuple[str, int, int, int], ...], ...]] = {}

    # ---- weights ----------------------------------------------------------------------------------
    def layer_unit(self, layer: int) -> Unit:
        unit = self._units.get(layer)
        if unit is None:
            model, spec = self.b.model, self.b.spec
            total = model.layer_parameters(layer, tp=spec.tp, ep=spec.ep, etp=spec.expert_tp)
            # a single expert's gradients are reduced with the dense ones when its expert-data-parallel group is the
            # dense gradient group (ep divides the experts, so ep = 1; etp = t)
            single = model.experts == 1 and not spec.folded
            expert = 0 if single else model.routed_expert_parameters(layer, ep=spec.ep, etp=spec.expert_tp)
            unit = self._units[layer] = Unit(dense=total - expert, expert=expert)
        return unit

    def embedding_unit(self) -> Unit:
        unit = self._units.get("embedding")
        if unit is None:
            unit = self._units["embedding"] = Unit(dense=self.b.model.embedding_parameters(tp=self.b.spec.tp), expert=0)
        return unit

    def output_unit(self) -> Unit:
        unit = self._units.get("output")
        if unit is None:
            model, spec = self.b.model, self.b.spec
            out = model.last_stage_output_parameters(tp=spec.tp, pp=spec.pp)
            unit = self._units["output"] = Unit(dense=out + model.final_norm_parameters(), expert=0)
        return unit

    # ---- buckets ----------------------------------------------------------------------------------
    def buckets(self, v: int, dense: bool, expert: bool) -> tuple[tuple[str, int, int, int], ...]:
        """Gradient buckets of virtual stage v: (dense|expert, params, ready after unit count k, bucket id).

        ``dense``/``expert``: whether the rank reduces that kind of gradient (its group has > 1 member)."""
        key = (v, dense, expert)
        plan = self._buckets.get(key)
        if plan is not None:
            return plan
        b = self.b
        units = [unit for unit, *_ in b.unit_tasks(v, "backward")]  # in the order their gradients complete
        out = []
        for part, active in (("dense", dense), ("expert", expert)):
            if not active:
                continue
            sizes = [getattr(u, part) for u in units]
            total = sum(sizes)
            if total == 0:
                continue
            if self.zero >= 3:  # one reduce-scatter per unit, when its gradients are complete
                out += [(part, s, k + 1, k) for k, s in enumerate(sizes) if s > 0]
                continue
            cap = b.spec.bucket_elements(v // b.spec.pp, b.grad_bytes) or total
            cumulative = list(itertools.accumulate(sizes))
            start, bucket = 0, 0
            while start < total:
                end = min(total, start + cap)
                # the first unit whose running total reaches the bucket's end completes it
                ready = bisect.bisect_left(cumulative, end) + 1
                out.append((part, end - start, ready, bucket))
                start, bucket = end, bucket + 1
        plan = self._buckets[key] = tuple(out)
        return plan

    def bucket_reduction(
        self, chunk: int, bucket: tuple[str, int, int, int], group: tuple[int, ...]
    ) -> tuple[int, str]:
        """(collective index, name) of the reduction of ``bucket`` of ``chunk`` in ``group``: built once per
        group (the builder's ``collective`` finds it by key for the other members)."""
        b = self.b
        part, params, _, bid = bucket
        kind = CollectiveKind.ALL_REDUCE if self.zero == 0 else CollectiveKind.REDUCE_SCATTER
        nbytes = padded(kind, params * b.grad_bytes, len(group), b.grad_bytes)
        label = (
            f"dp bucket {bid}" + (f" chunk{chunk}" if b.spec.vp > 1 else "") + (" experts" if part == "expert" else "")
        )
        return b.simple(("dp", chunk, part, bid, group), kind, nbytes, group, b.grad_dtype, "dp", label), label

    def plan_buckets(self, rp: _RankProgram, chunk: int) -> tuple[tuple[str, int, int, int], ...]:
        """Buckets of ``rp``'s chunk: (dense|expert, params, ready after unit count k, bucket id)."""
        if not rp.reduce:
            return ()
        return self.buckets(chunk * self.b.spec.pp + rp.stage, self.reduces_dense, self.reduces_expert)

    # ---- during the pipeline ----------------------------------------------------------------------
    def gather_params(self, rp: _RankProgram, units: list[Unit], key: Hashable, label: str) -> None:
        """ZeRO-3 / FSDP: all-gather the parameters of ``units`` before the next compute task (stream 2), issued
        once the task before it has ended (prefetch depth 1)."""
        b = self.b
        if self.zero < 3:
            return
        prefetch_after = tuple(rp.prog.computes[-2:-1])
        for part in ("dense", "expert"):
            group = rp.grad_group(part)
            params = sum(getattr(u, part) for u in units)
            if params == 0 or len(group) == 1:
                continue
            nbytes = padded(CollectiveKind.ALL_GATHER, params * b.model.dtype_bytes, len(group), elt(b.act_dtype))
            gi = b.simple(
                ("zero-ag", key, part, group),
                CollectiveKind.ALL_GATHER,
                nbytes,
                group,
                b.act_dtype,
                "dp",
                f"zero allgather {part} {label}",
            )
            task = rp.prog.side(gi, f"zero allgather {label}", STREAM_PARAM, prefetch_after)
            rp.prog.pending.append(task)

    def grads_ready(self, rp: _RankProgram, chunk: int, units_done: int, task: int) -> None:
        """The last micro-batch's backward task ``task`` completed ``units_done`` units of ``chunk``: reduce the
        buckets it completes (when buckets are reduced during the backward)."""
        if not rp.reduce_in_backward:
            return
        for bucket in rp.buckets[chunk]:
            if bucket[2] == units_done:
                self.reduce_bucket(rp, chunk, bucket, (task,))

    def reduce_bucket(
        self, rp: _RankProgram, chunk: int, bucket: tuple[str, int, int, int], after: tuple[int, ...]
    ) -> None:
        index, label = self.bucket_reduction(chunk, bucket, rp.grad_group(bucket[0]))
        rp.dp_tasks.append(rp.prog.side(index, label, STREAM_DP, after))
        rp.dp_started = True

    # ---- after the pipeline -----------------------------------------------------------------------
    def param_gather(
        self, rp: _RankProgram, chunk: int, bucket: tuple[str, int, int, int], after: tuple[int, ...]
    ) -> int:
        """The ZeRO-1/2 all-gather of ``bucket``'s updated parameters (N D bytes) of ``chunk``: on stream 1 after the
        optimizer (``after``), or with ``overlap_param_gather`` on stream 2 from the step's start; its task."""
        b, spec = self.b, self.b.spec
        part, params, _, bid = bucket
        group = rp.grad_group(part)
        nbytes = padded(CollectiveKind.ALL_GATHER, params * b.model.dtype_bytes, len(group), elt(b.act_dtype))
        label = f"zero allgather bucket {bid}" + (f" chunk{chunk}" if spec.vp > 1 else "")
        index = b.simple(
            ("zero-post", chunk, part, bid, group), CollectiveKind.ALL_GATHER, nbytes, group, b.act_dtype, "dp", label
        )
        return rp.prog.side(index, label, STREAM_PARAM if spec.overlap_param_gather else STREAM_DP, after)

    def needed_buckets(self, rp: _RankProgram, v: int) -> tuple[tuple[tuple[str, int, int, int], ...], ...]:
        """Per forward position of virtual stage v's weight units, the buckets of ``rp`` holding its parameters
        (a unit's parameters may straddle buckets); computed once per stage."""
        key = (v, self.reduces_dense, self.reduces_expert)
        needs = self._needs.get(key)
        if needs is not None:
            return needs
        units = [unit for unit, *_ in self.b.unit_tasks(v, "backward")]  # backward order
        out: list[list[tuple[str, int, int, int]]] = [[] for _ in units]
        plan = self.buckets(v, self.reduces_dense, self.reduces_expert)
        for part in ("dense", "expert"):
            start, ranges = 0, []
            for bucket in plan:
                if bucket[0] == part:
                    ranges.append((start, start + bucket[1], bucket))
                    start += bucket[1]
            end = 0
            for q, unit in enumerate(units):
                size = getattr(unit, part)
                lo, end = end, end + size
                if size:
                    out[len(units) - 1 - q] += [bucket for a, z, bucket in ranges if a < end and lo < z]
        needs = self._needs[key] = tuple(map(tuple, out))
        return needs

    def await_params(self, rp: _RankProgram, v: int, positions: range) -> None:
        """``overlap_param_gather``: before the compute of virtual stage v's units at forward ``positions``, wait
        for the all-gathers of the buckets holding their updated parameters, each issued (stream 2, from the step's
        start, in the order first needed) and waited for once: the step's first forward of each unit waits."""
        if not rp.gather_in_forward:
            return
        chunk = v // self.b.spec.pp
        needs = self.needed_buckets(rp, v)
        for i in positions:
            for bucket in needs[i]:
                key = (chunk, bucket)
                if key not in rp.gathered:
                    rp.gathered.add(key)
                    task = rp.gather_tasks.get(key)
                    if task is None:
                        task = rp.gather_tasks[key] = self.param_gather(rp, chunk, bucket, ())
                    rp.prog.pending.append(task)

    def dispatch_params(self, rp: _RankProgram, chunk: int, after: tuple[int, ...]) -> None:
        """``align_param_gather``: issue the all-gathers of every bucket of model chunk ``chunk`` (stream 2, in the
        order its forward needs them) after ``after``; the forwards that need them wait (:meth:`await_params`)."""
        needs = self.needed_buckets(rp, chunk * self.b.spec.pp + rp.stage)
        for buckets in needs:
            for bucket in buckets:
                key = (chunk, bucket)
                if key not in rp.gather_tasks:
                    rp.gather_tasks[key] = self.param_gather(rp, chunk, bucket, after)

    def finish(self, rp: _RankProgram) -> None:
        """The reduction part: buckets not reduced yet, the tied-embedding sync, the optimizer step and, with ZeRO
        1/2, the all-gather of the updated parameters."""
        b, spec = self.b, self.b.spec
        end = rp.prog.last0
        if not rp.reduce_in_backward:
            for chunk in reversed(range(spec.vp)):
                for bucket in rp.buckets[chunk]:
                    self.reduce_bucket(rp, chunk, bucket, end)
        if b.model.tied_embeddings and spec.pp > 1 and rp.stage in (0, spec.pp - 1):
            group: tuple[int, ...] = (rp.pp_group[0], rp.pp_group[-1])
            nbytes = b.model.last_stage_output_parameters(tp=spec.tp, pp=spec.pp) * b.grad_bytes
            index = b.simple(
                ("emb", group), CollectiveKind.ALL_REDUCE, nbytes, group, b.grad_dtype, "pp", "embedding allreduce"
            )
            rp.dp_tasks.append(rp.prog.side(index, "embedding allreduce", STREAM_DP, end))
        rp.prog.pending.extend(rp.dp_tasks)
        opt = rp.prog.add_compute(PassWork(phase="optimizer", stage=rp.stage), f"optimizer stage{rp.stage}")
        if self.zero in (1, 2) and self.reduces_dense and not rp.gather_in_forward:
            for chunk in range(spec.vp):
                for bucket in rp.buckets[chunk]:
                    self.param_gather(rp, chunk, bucket, (opt,))
