"""One training step as per-rank programs: model x parallelism -> Workload. Pure data, hardware-independent.

The program builder walks each rank's pipeline schedule (``pipeline``) and, around every pass, asks each
dimension for its tasks: the pipeline for the receive before the pass and the send after it, data parallelism
for ZeRO-3 parameter gathers before each compute task and gradient buckets after the last micro-batch's
backward tasks (``data_parallel``), and, after each layer's compute, context parallelism for the ring-attention
exchange (``context_parallel``), tensor parallelism for the f/g collectives (``tensor_parallel``) and expert
parallelism for the all-to-alls (``expert_parallel``), in that order. After the pipeline, data parallelism adds
the reduction part (buckets reduced after the pipeline, embedding sync, optimizer, ZeRO-1/2 gathers). Compute
tasks carry their work (``compute.PassWork``), not seconds: give ``training_step`` a ``StepCompute`` (the
compute model's times on one GPU) to get durations, or resolve later (``compute.resolve``).

Task merging (``granularity="chunk"``): a pass of one model chunk becomes one compute task (the sum of its
layers' work, embedding and logits included) and one collective per (group, kind) whose nbytes is the sum of
the per-layer collectives: bytes and compute time are conserved, per-collective latencies are paid once
instead of once per layer. The backward of the last micro-batch of each chunk keeps per-layer tasks when
gradients are reduced during the backward, so buckets still overlap it.

Building cost: what depends only on the stage (its schedule, weight units, gradient buckets, per-layer
communication sizes, transfer sizes) is computed once per call and shared by the ranks of that stage; a
collective is built once per group (looked up by key by its other members); equal tasks are one shared
frozen object. A rank's program depends on the rank only through what it asks about it (its stage, the
groups it uses, whether it is tensor rank 0), so ranks giving the same answers share one program object,
built once: the other ranks cost one look-up per question. Example, Llama-3 405B on 16,384 GPUs (t 8,
p 16, d 128, one gradient buffer reduced after the pipeline): the "reduction" part is 16,384 programs of
2 tasks over 128 all-reduces (one per data-parallel group) and 16 distinct optimizer tasks; the members
of a data-parallel group ask only their stage and that group, so 128 programs are built. In one replica's
pipeline with representative transfers (e = 1), tensor ranks 1..t-1 of a tensor group share one program.

Worked number: GPT-1.7B (24 layers), t = p = 1, d = 32, b = 16, B = 512 -> m = 1; each rank runs 24
forward and 24 backward layer tasks, 2 embedding and 2 logits tasks and the optimizer: 53 compute tasks,
then its 127 gradient buckets (``data_parallel``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np

from topologies.checks import flag, reject

from ..collectives import Collective, CollectiveKind
from ..model import RECOMPUTE, ModelSpec
from ..parallelism import ParallelismSpec
from ..tasks import Workload
from .common import ACT_DTYPE, GRANULARITIES, PARTS, Program, TrainingWorkload
from .compute import PassWork, StepCompute, resolve
from .context_parallel import ContextParallel
from .data_parallel import DataParallel, Unit
from .expert_parallel import ExpertParallel
from .pipeline import Pipeline, stage_of_chunk
from .tensor_parallel import TensorParallel

__all__ = ("training_step",)


@dataclass(slots=True)
class _Node:
    """A node of the tree of kept programs (_Builder.program): the next question and a child per answer to
    it, or at a leaf (no question) the program of the ranks whose answers lead there."""

    question: tuple[str, str] | None = None
    children: dict[object, _Node] = field(default_factory=dict)
    program: tuple | None = None


class _Builder:
    def __init__(
        self,
        model: ModelSpec,
        spec: ParallelismSpec,
        *,
        recompute: str,
        granularity: str,
        part: str,
        ranks: tuple[int, ...],
        tensor_rank0_p2p: bool,
        passive: bool = False,
    ):
        self.model, self.spec = model, spec
        # members of collectives outside ``ranks`` join as passive ranks, numbered after them, when ``passive``
        self.allow_passive = passive
        self.passive: list[int] = []
        self.tensor_rank0_p2p = tensor_rank0_p2p and spec.tp > 1
        self.recompute, self.granularity, self.part = recompute, granularity, part
        self.local = {r: i for i, r in enumerate(ranks)}
        self.collectives: list[Collective] = []
        self.kinds: list[str] = []
        self.names: list[str] = []
        self.weights: list[int] = []
        self.keys: dict[Hashable, int] = {}
        self._simple: dict[tuple, Collective] = {}  # see _simple_collective
        self.seq = spec.seq(model)
        # activations and weights (parameter all-gathers) share the model's element type
        self.act_dtype = {1: "fp8", 2: ACT_DTYPE[spec.dtype], 4: "float32"}[model.dtype_bytes]
        self.grad_bytes = spec.grad_bytes
        self.grad_dtype = "float32" if self.grad_bytes == 4 else "float16" if spec.dtype == "fp16" else "bfloat16"
        self.V = spec.virtual_stages
        self.chunks = spec.chunk_layers(model)  # layers of each model chunk (the first ones longer)
        self.m = spec.microbatches
        # groups per kind and every rank's answers per question (see answers), built on first use
        self.groups: dict[str, list[tuple[int, ...]]] = {}
        self._answers: dict[tuple[str, str], list[int | bool]] = {}
        self.shared_tasks: dict = {}
        self._programs = _Node()  # programs built so far, by their ranks' answers (see program)
        # per-stage compute tasks, shared by every rank of the stage
        self._unit_tasks: dict[tuple[int, str], tuple[tuple[Unit, object, PassWork, str, int | None], ...]] = {}
        self._flops: dict[tuple[str, int | str], float] = {}  # matrix FLOPs per (phase, layer or "logits")
        # the dimensions
        self.pipeline = Pipeline(self)
        self.dp = DataParallel(self)
        self.tp = TensorParallel(self)
        self.cp = ContextParallel(self)
        self.ep = ExpertParallel(self)

    # ---- groups -----------------------------------------------------------------------------------
    def answers(self, question: tuple[str, str]) -> list[int | bool]:
        """Every rank's answer (a list indexed by rank) to a question a program may ask about its rank
        (_RankProgram.ask): ("group", kind) -> the index of its group in ``groups[kind]``; ("position", kind)
        -> its index in that group, i.e. its coordinate along a tensor, context, data or pipeline group, whose
        members are listed in increasing coordinate (ParallelismSpec.groups); ("first", kind) -> whether that
        position is 0."""
        table = self._answers.get(question)
        if table is None:
            what, kind = question
            if kind not in self.groups:
                self.groups[kind] = self.spec.groups(kind)
                members = np.array(self.groups[kind], dtype=np.int64)  # the groups of a kind have one size
                index, position = np.empty((2, self.spec.world_size), dtype=np.int64)
                index[members] = np.arange(len(members))[:, None]
                position[members] = np.arange(members.shape[1])
                self._answers["group", kind], self._answers["position", kind] = index.tolist(), position.tolist()
            if what == "first":
                self._answers[question] = [j == 0 for j in self._answers["position", kind]]
            table = self._answers[question]
        return table

    def program(self, rank: int) -> tuple:
        """Rank ``rank``'s program. A program depends on its rank only through the answers it got about it
        (:meth:`answers`), and which question it asks next only on the answers before: so the programs built
        so far are kept in a tree of questions and answers, and a rank whose answers lead to a kept program
        gets that one without a build (the reduction part of Llama-3 405B on 16,384 GPUs builds one program
        per data-parallel group, 128). Collectives are still created in rank order: a rank that would create
        one answers differently from every rank before it, so it is built."""
        node = self._programs
        while node.question is not None:
            child = node.children.get(self._answers[node.question][rank])
            if child is None:
                break
            node = child
        else:
            if node.program is not None:
                return node.program
        built = _RankProgram(self, rank)
        program = built.build()
        node = self._programs
        for question, answer in built.asked.items():  # in the order asked
            if node.question not in (None, question):
                raise RuntimeError(
                    f"training_step: rank {rank} asked {question} where an earlier rank with the "
                    f"same answers asked {node.question}; a program must depend on its rank only "
                    "through its answers"
                )
            node.question = question
            node = node.children.setdefault(answer, _Node())
        if node.question is not None or node.program is not None:
            held = "a program" if node.program is not None else f"the question {node.question}"
            raise RuntimeError(
                f"training_step: rank {rank}'s answers lead to {held} of an earlier rank with the same "
                "answers; a program must depend on its rank only through its answers"
            )
        node.program = program
        return program

    # ---- collectives --------------------------------------------------------------------------------
    def collective(self, key: Hashable, make: Callable[[], Collective], kind: str, name: str, weight: int = 1) -> int:
        """The index of the collective of ``key``, made by ``make()`` (in global ranks) the first time."""
        index = self.keys.get(key)
        if index is None:
            coll = make()
            missing = [r for r in coll.group if r not in self.local]
            if missing and self.allow_passive:
                for r in missing:
                    self.local[r] = len(self.local)
                    self.passive.append(r)
            elif missing:
                raise ValueError(
                    f"training_step.part: {self.part!r} builds a collective ({name}) with rank "
                    f"{missing[0]}, which is not built; expected part='all'"
                )
            group = tuple(self.local[r] for r in coll.group)
            if group != coll.group:  # in the workload's ranks (the same when every rank is built)
                coll = Collective(kind=coll.kind, nbytes=coll.nbytes, group=group, dtype=coll.dtype, splits=coll.splits)
            index = len(self.collectives)
            self.collectives.append(coll)
            self.kinds.append(kind)
            self.names.append(name)
            self.weights.append(weight)
            self.keys[key] = index
        return index

    def simple(
        self,
        key: Hashable,
        kind: CollectiveKind,
        nbytes: int,
        group: tuple[int, ...],
        dtype: str,
        tag: str,
        name: str,
        weight: int = 1,
    ) -> int:
        return self.collective(key, lambda: self._simple_collective(kind, nbytes, group, dtype), tag, name, weight)

    def _simple_collective(self, kind: CollectiveKind, nbytes: int, group: tuple[int, ...], dtype: str) -> Collective:
        """One Collective object per distinct (kind, bytes, group, dtype), built and checked once: a tensor-parallel
        all-reduce repeats per layer and micro-batch, each time under a key of its own."""
        spec = (kind, nbytes, group, dtype)
        coll = self._simple.get(spec)
        if coll is None:
            coll = self._simple[spec] = Collective(kind=kind, nbytes=nbytes, group=group, dtype=dtype)
        return coll

    # ---- compute tasks ------------------------------------------------------------------------------
    def chunk_layers(self, v: int) -> range:
        return self.chunks[v]

    def flops(self, phase: str, layers: Iterable[int], logits: bool) -> float:
        """Matrix FLOPs of one micro-batch's ``phase`` pass of ``layers`` (and the logits), on one GPU
        (compute.PassWork.flops), summed in execution order."""
        parts = [self._part_flops(phase, layer) for layer in layers]
        if logits:
            parts.insert(0 if phase == "backward" else len(parts), self._part_flops(phase, "logits"))
        return float(sum(parts))

    def logits_wgrad_flops(self) -> float:
        """Matrix FLOPs of one micro-batch's output-layer weight-gradient GEMM on one GPU: those of the logits
        forward GEMM (same shapes), the part of the logits backward that defer_embedding_wgrad_compute defers."""
        return self.flops("forward", (), True)

    def _part_flops(self, phase: str, part: int | str) -> float:
        key = (phase, part)
        flops = self._flops.get(key)
        if flops is None:
            model, spec = self.model, self.spec
            kw = dict(micro_batch=spec.micro_batch, seq_len=self.seq, tp=spec.tp, cp=spec.cp)
            if part == "logits":
                forward, extra = model.logits_flops(**kw), 0.0
            else:
                assert isinstance(part, int)  # a layer
                forward = model.layer_forward_flops(part, ep=spec.ep, etp=spec.expert_tp, **kw).total
                extra = model.layer_recompute_flops(
                    part, recompute=self.recompute, ep=spec.ep, etp=spec.expert_tp, **kw
                )
            flops = self._flops[key] = forward if phase == "forward" else 2.0 * forward + extra
        return flops

    def unit_tasks(self, v: int, phase: str) -> tuple[tuple[Unit, object, PassWork, str, int | None], ...]:
        """The per-layer compute tasks of one pass of virtual stage v, one per weight unit, in execution order
        (forward: embedding, layers, logits; backward the reverse): (unit, key, work, name, layer or None)."""
        tasks = self._unit_tasks.get((v, phase))
        if tasks is not None:
            return tasks
        dp = self.dp
        built: list[tuple[Unit, object, PassWork, str, int | None]] = [
            (
                dp.layer_unit(l),
                l,
                PassWork(phase=phase, layers=(l,), flops=self.flops(phase, (l,), False)),
                f"layer{l}",
                l,
            )
            for l in self.chunk_layers(v)
        ]
        if v == 0:
            built.insert(0, (dp.embedding_unit(), "emb", PassWork(phase=phase, embedding=True), "embedding", None))
        if v == self.V - 1:
            logits = PassWork(phase=phase, logits=True, flops=self.flops(phase, (), True))
            built.append((dp.output_unit(), "out", logits, "logits", None))
        tasks = self._unit_tasks[v, phase] = tuple(built if phase == "forward" else built[::-1])
        return tasks


# --------------------------------------------------------------------------------------------------
# one rank's program
# --------------------------------------------------------------------------------------------------


class _RankProgram:
    """One rank's program. Its rank number serves only to answer ``ask``: everything the program knows of
    its rank (its stage, its groups, whether it is tensor rank 0) comes from there, and ``asked`` keeps
    the answers in the order first asked; ranks that give the same answers get the same program
    (_Builder.program)."""

    def __init__(self, b: _Builder, rank: int):
        self.b, self._rank = b, rank
        spec = b.spec
        self.asked: dict[tuple[str, str], int | bool] = {}
        self.prog = Program(shared=b.shared_tasks)
        # pipeline groups list their members stage 0 first (ParallelismSpec.groups): position = stage
        self.stage = self.ask("position", "pp")
        self.ops, self.last_backward = b.pipeline.schedule(self.stage)
        self.pipeline = b.part in ("all", "pipeline")
        # data-parallel state (data_parallel.DataParallel)
        self.reduce = b.part in ("all", "reduction")
        # buckets are reduced during the backward (DDP overlap, or ZeRO-3's per-unit reduce-scatters), not after it
        self.reduce_in_backward = b.part == "all" and (spec.dp_overlap or b.dp.zero >= 3)
        # DDP overlap proper: part "all", dp_overlap and ZeRO < 3
        self.overlap = self.reduce_in_backward and b.dp.zero < 3
        self.dp_started = False
        self.dp_tasks: list[int] = []
        # ZeRO-1/2 parameter all-gathers before the step's first forwards (overlap_param_gather), not after the
        # optimizer; the buckets waited for so far
        self.gather_in_forward = (
            b.part == "all" and spec.overlap_param_gather and b.dp.zero in (1, 2) and b.dp.reduces_dense
        )
        self.gathered: set = set()  # (chunk, bucket) whose all-gather a forward waited for
        self.gather_tasks: dict = {}  # (chunk, bucket) -> its all-gather task, once issued
        # align_param_gather: the schedule dispatches chunk c's all-gathers before forward ``align_at[k]`` (k-th)
        self.align_at: dict[int, list[int]] = {}
        # defer_embedding_wgrad_compute: the micro-batches whose output-layer weight gradient waits for the flush
        self.deferred_wgrads: list[int] = []
        if self.gather_in_forward and spec.aligned_param_gather:
            for c in range(2, spec.vp):
                self.align_at.setdefault((c - 1) * spec.pp - self.stage, []).append(c)
        self.buckets: dict[int, tuple] = {}

    def ask(self, what: str, kind: str) -> int | bool:
        """The answer to a question about this rank (_Builder.answers), kept with the others."""
        question = (what, kind)
        answer = self.asked.get(question)
        if answer is None:
            answer = self.asked[question] = self.b.answers(question)[self._rank]
        return answer

    def group(self, kind: str) -> tuple[int, ...]:
        """This rank's group of ``kind``, looked up when used: a reduction-only build never needs most kinds."""
        index = self.ask("group", kind)  # builds the tables of ``kind`` on first use
        return self.b.groups[kind][index]

    @property
    def pp_group(self) -> tuple[int, ...]:
        return self.group("pp")

    @property
    def dp_group(self) -> tuple[int, ...]:
        return self.group("dp_cp")

    def grad_group(self, part: str) -> tuple[int, ...]:
        """The group that averages this rank's ``part`` ("dense" or "expert") gradients and gathers those weights."""
        return self.dp_group if part == "dense" else self.group("edp")

    def compute(self, work: PassWork, name: str, *, backward_last: bool = False) -> int:
        """A compute task doing ``work``; beside communication (compute.PassWork.beside_comm) with ZeRO-3, or in the
        last micro-batch's backward once a gradient bucket is being reduced."""
        if self.b.dp.stretched_all or (backward_last and self.dp_started):
            work = dataclasses.replace(work, beside_comm=True)
        return self.prog.add_compute(work, name)

    # ---- the program ------------------------------------------------------------------------------
    def build(self) -> tuple:
        b, spec = self.b, self.b.spec
        self.buckets = {v: b.dp.plan_buckets(self, v) for v in range(spec.vp)}
        if self.pipeline:
            op_end: list[tuple[int, ...]] = []
            deferred: list[int] = []
            # overlap_p2p_comm: the sends of a pass are waited for by the next pass of the same phase
            waiting: dict[str, list[int]] = {"F": [], "B": []}
            overlap = spec.overlap_p2p_comm and spec.schedule == "interleaved"
            if self.align_at:  # align_param_gather: chunks 0 and 1 at the step's start
                for c in (0, 1):
                    b.dp.dispatch_params(self, c, ())
            forwards = 0
            for i, (phase, mb, chunk) in enumerate(self.ops):
                v = chunk * spec.pp + self.stage
                # Receives are posted when the pass before the consumer ends; in the interleaved schedule
                # Megatron posts a backward's receive one pass earlier, with the previous (F, B) pair's, and with
                # overlap_p2p_comm a steady-state forward's too (posted with the previous forward's send, before
                # the backward between them runs).
                early = (
                    spec.schedule == "interleaved"
                    and i >= 1
                    and self.ops[i - 1][0] != phase
                    and (phase == "B" or overlap)
                )
                j = i - 2 if early else i - 1
                post = op_end[j] if j >= 0 else ()
                if overlap:
                    self.prog.pending.extend(waiting[phase])
                    waiting[phase] = []
                if phase == "F":
                    for c in self.align_at.get(forwards, ()):
                        b.dp.dispatch_params(self, c, op_end[i - 1] if i else ())
                    forwards += 1
                    sends = self.forward(mb, v, post)
                else:
                    sends = self.backward(mb, v, post, last=self.last_backward[chunk] == i)
                op_end.append(self.prog.last0)
                if overlap:
                    waiting[phase] += sends
                    continue
                # Blocking sends: the next pass waits for them. Interleaved steady state runs a (F, B) pair
                # back to back and exchanges after it (Megatron), so F's sends block the pass after B.
                pair = (
                    spec.schedule == "interleaved"
                    and phase == "F"
                    and i + 1 < len(self.ops)
                    and self.ops[i + 1][0] == "B"
                )
                if pair:
                    deferred = sends
                else:
                    self.prog.pending.extend(sends + deferred)
                    deferred = []
            self.prog.pending.extend(waiting["F"] + waiting["B"])  # every send done before the step ends
            # defer_embedding_wgrad_compute: the deferred output-layer weight gradients after the schedule
            # (Megatron-Core finish_embedding_wgrad_compute, before the gradients are finalised)
            for mb in self.deferred_wgrads:
                work = PassWork(phase="wgrad", flops=b.logits_wgrad_flops())
                self.compute(work, f"logits wgrad mb{mb} stage{self.stage}")
        if self.reduce:
            b.dp.finish(self)
        return tuple(self.prog.tasks)

    def label(self, phase: str, mb: int, v: int) -> str:
        _, chunk = stage_of_chunk(v, self.b.spec.pp)
        return f"{phase} mb{mb} stage{self.stage}" + (f" chunk{chunk}" if self.b.spec.vp > 1 else "")

    # ---- passes ----------------------------------------------------------------------------------
    def forward(self, mb: int, v: int, post: tuple[int, ...]) -> list[int]:
        b = self.b
        label = self.label("fwd", mb, v)
        if v > 0:
            b.pipeline.recv(self, mb, v - 1, "act", label, post)
        layers = b.chunk_layers(v)
        first, last = v == 0, v == b.V - 1
        tasks = b.unit_tasks(v, "forward")
        if b.granularity == "chunk":
            b.dp.gather_params(self, [unit for unit, *_ in tasks], ("F", mb, v), label)
            b.dp.await_params(self, v, range(len(tasks)))
            self.compute(
                PassWork(
                    phase="forward",
                    layers=tuple(layers),
                    embedding=first,
                    logits=last,
                    flops=b.flops("forward", layers, last),
                ),
                label,
            )
            self.layer_comm(list(layers), "forward", ("F", mb, v), label)
        else:
            for i, (unit, part, work, name, layer) in enumerate(tasks):
                b.dp.gather_params(self, [unit], ("F", mb, v, part), label)
                b.dp.await_params(self, v, range(i, i + 1))
                self.compute(work, f"{label} {name}")
                if layer is not None:
                    self.layer_comm([layer], "forward", ("F", mb, v, layer), label)
        return b.pipeline.send(self, mb, v, "act", label) if v < b.V - 1 else []

    def backward(self, mb: int, v: int, post: tuple[int, ...], *, last: bool) -> list[int]:
        b = self.b
        label = self.label("bwd", mb, v)
        if v < b.V - 1:
            b.pipeline.recv(self, mb, v + 1, "grad", label, post)
        layers = list(reversed(b.chunk_layers(v)))
        first_chunk, last_chunk = v == 0, v == b.V - 1
        _, chunk = stage_of_chunk(v, b.spec.pp)
        overlapped = last and self.overlap and (b.dp.reduces_dense or b.dp.reduces_expert)
        per_layer = b.granularity == "layer" or overlapped or (last and b.dp.zero >= 3)
        tasks = b.unit_tasks(v, "backward")
        limit = b.spec.wgrad_deferral_limit
        defer = (
            last_chunk and b.spec.defer_embedding_wgrad_compute and (limit == 0 or len(self.deferred_wgrads) < limit)
        )
        if defer:  # the output layer's weight gradient of this micro-batch waits for the flush
            self.deferred_wgrads.append(mb)
            tasks = tuple(
                (unit, part, _deferred(work, b), name, layer) if work.logits else (unit, part, work, name, layer)
                for unit, part, work, name, layer in tasks
            )
        if not per_layer:  # one merged task: no bucket is reduced during it (that takes per-layer tasks)
            b.dp.gather_params(self, [unit for unit, *_ in tasks], ("B", mb, v), label)
            work = PassWork(
                phase="backward",
                layers=tuple(layers),
                embedding=first_chunk,
                logits=last_chunk,
                flops=b.flops("backward", layers, last_chunk),
            )
            self.compute(_deferred(work, b) if defer else work, label, backward_last=last)
            self.layer_comm(layers, "backward", ("B", mb, v), label)
        else:
            for done, (unit, part, work, name, layer) in enumerate(tasks, start=1):
                b.dp.gather_params(self, [unit], ("B", mb, v, part), label)
                task = self.compute(work, f"{label} {name}", backward_last=last)
                if layer is not None:
                    self.layer_comm([layer], "backward", ("B", mb, v, layer), label)
                if last:
                    b.dp.grads_ready(self, chunk, done, task)
        return b.pipeline.send(self, mb, v, "grad", label) if v > 0 else []

    def layer_comm(self, layers: list[int], phase: str, key: Hashable, label: str) -> None:
        """The collectives of one pass of ``layers`` after its compute: the context-parallel exchange overlapping
        it (stream 3, issued when the compute began), then tensor parallel ones (stream 0; with tp_comm_overlap
        their overlapped parts on stream 8, issued when the compute began) and expert parallel ones (stream 0)."""
        b = self.b
        start_after = tuple(self.prog.computes[-2:-1])
        merge = b.granularity == "chunk" and len(layers) > 1
        b.cp.emit(self, layers, phase, key, label, merge, start_after)
        b.tp.emit(self, layers, phase, key, label, merge, start_after)
        b.ep.emit(self, layers, phase, key, label, merge)


def _deferred(work: PassWork, b: _Builder) -> PassWork:
    """``work`` (a backward with the logits) without the output layer's weight-gradient GEMM and its FLOPs."""
    return dataclasses.replace(work, defer_logits_wgrad=True, flops=work.flops - b.logits_wgrad_flops())


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def training_step(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    compute: StepCompute | None = None,
    *,
    recompute: str = "none",
    granularity: str = "layer",
    part: str = "all",
    ranks: Iterable[int] | None = None,
    tensor_rank0_p2p: bool = False,
    passive: bool = False,
) -> TrainingWorkload:
    """The programs of every rank for one training step (see the module docstring).

    ``compute``: the seconds of every compute task's work on one GPU (durations resolved, ready to simulate);
    None keeps the workload hardware-independent (its compute tasks carry only their ``PassWork``). ``part``:
    "all" (the step), "pipeline" (forward/backward passes only, no data-parallel reduction or optimizer) or
    "reduction" (only the data-parallel reduction, embedding sync and optimizer: what follows the pipeline
    when ``dp_overlap`` is False). ``ranks``: build only these global ranks (their collectives must stay among
    them, unless ``passive``), renumbered 0..len-1 in the Workload. ``passive``: the other members of their
    collectives join as passive ranks (``Workload.passive``: no program, they take part without arriving),
    numbered after ``ranks`` and listed after them in ``TrainingWorkload.ranks``. ``tensor_rank0_p2p``: only
    tensor rank 0 of each stage moves the pipeline tensors and runs the context-parallel ring (``pipeline``,
    ``context_parallel``: representative transfers).
    """
    if not isinstance(model, ModelSpec):
        raise reject("model", model, "a workloads.model.ModelSpec")
    if not isinstance(parallelism, ParallelismSpec):
        raise reject("parallelism", parallelism, "a workloads.parallelism.ParallelismSpec")
    if compute is not None and not isinstance(compute, StepCompute):
        raise reject("compute", compute, "a StepCompute or None")
    if recompute not in RECOMPUTE:
        raise reject("recompute", recompute, f"one of {', '.join(map(repr, RECOMPUTE))}")
    if granularity not in GRANULARITIES:
        raise reject("granularity", granularity, f"one of {', '.join(map(repr, GRANULARITIES))}")
    if part not in PARTS:
        raise reject("part", part, f"one of {', '.join(map(repr, PARTS))}")
    tensor_rank0_p2p = flag("tensor_rank0_p2p", tensor_rank0_p2p)
    parallelism.check(model)
    if compute is not None:
        compute.check(layers=model.layers, pp=parallelism.pp, model_name=model.name)
    if part == "reduction" and parallelism.zero_stage >= 3:
        raise reject("part", part, "'all' with ZeRO-3/FSDP, whose parameter gathers sit inside the pipeline")
    world = parallelism.world_size
    if ranks is None:
        ranks = tuple(range(world))
    else:
        ranks = tuple(int(r) for r in ranks)
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < world for r in ranks):
            raise reject("ranks", ranks, f"distinct ranks in 0..{world - 1}, at least one")
    builder = _Builder(
        model,
        parallelism,
        recompute=recompute,
        granularity=granularity,
        part=part,
        ranks=ranks,
        tensor_rank0_p2p=tensor_rank0_p2p,
        passive=flag("passive", passive),
    )
    programs = tuple(map(builder.program, ranks)) + ((),) * len(builder.passive)
    workload = Workload(
        nranks=len(programs),
        collectives=tuple(builder.collectives),
        programs=programs,
        passive=frozenset(range(len(ranks), len(programs))),
    )
    training = TrainingWorkload(
        workload=workload,
        group_kinds=tuple(builder.kinds),
        collective_names=tuple(builder.names),
        collective_weights=tuple(builder.weights),
        parallelism=parallelism,
        model_name=model.name,
        recompute=recompute,
        granularity=granularity,
        part=part,
        ranks=ranks + tuple(builder.passive),
    )
    return training if compute is None else resolve(training, compute)
