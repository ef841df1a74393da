"""One training step as per-rank programs: model x parallelism x compute times -> Workload. Pure data.

Every rank runs its pipeline stage's schedule of forward (F) and backward (B) passes over the
micro-batches, with the communication of each kind of parallelism where Megatron-LM / PyTorch put it.
Compute durations are inputs (:class:`StepCompute`, filled in by ``simulator.studies.training``), so this
module only decides *what* runs *where* and *in which order*.

Streams (CUDA streams of one rank; tasks of a stream run in program order)::

    0 compute, with the collectives that block it: tensor parallel, expert parallel (and the
      all-gather that rebuilds a scattered pipeline activation)
    1 data-parallel gradient reduction (and the ZeRO-1/2 parameter all-gather after the optimizer)
    2 ZeRO-3 / FSDP parameter all-gathers (prefetched one compute task ahead)
    3 context-parallel ring-attention KV exchange
    4, 5, 6, 7 pipeline sends to the next stage, receives from the previous stage, sends to the
      previous stage, receives from the next stage

Pipeline schedules (``pipeline_schedule``), for p stages, m micro-batches, stage s:

* GPipe: F0 .. F(m-1), then B(m-1) .. B0 (backward in reverse order, as torchgpipe).
* 1F1B (PipeDream-Flush, Narayanan et al. SC21 sec. 2.2.1): warm-up min(p - s - 1, m) forwards, then
  m - warm-up pairs (F, B), then the remaining backwards. Balanced stages of forward f and backward b
  per micro-batch take (m + p - 1)(f + b): the bubble is (p - 1)(f + b).
* Interleaved 1F1B (SC21 sec. 2.2.2, Megatron's forward_backward_pipelining_with_interleaving): v
  model chunks per stage, virtual stage c p + s; forward step k runs micro-batch (k // pv) p + k % p
  of chunk (k % pv) // p (chunks reversed for backward); warm-up (p - s - 1) 2 + (v - 1) p steps (all
  m v when m = p); the bubble shrinks to (p - 1)(f + b) / v.

Pipeline transfers: the activation of a micro-batch leaving virtual stage j and its gradient coming
back, s b h D / c bytes each, divided by t with sequence parallelism or SC21's scatter/gather (then
the receiver all-gathers the t slices over NVLink: an all_gather of s b h D / c in its tensor group).
Each transfer is ONE-DIRECTIONAL: an ``alltoall`` over the 2-rank group (sender, receiver) whose split
matrix is [[0, S], [0, 0]], so ``Collective.nbytes`` = S, exactly the bytes that cross. Sends and
receives are blocking as in Megatron: a send is issued when its producing pass ends and the next
pass waits for it; a receive is posted when the pass before its consumer ends, and the consumer
waits for it. The interleaved schedule runs its steady-state (F, B) pairs back to back and exchanges
after the pair (Megatron's send_forward_backward_recv_forward_backward): there F's sends block the
pass after B, and a backward's receive is posted with the pair before. Sends and receives towards
the two neighbours run on separate streams, so Megatron's batched send/recv calls progress together;
these rules reproduce its ordering and never deadlock (checked for every schedule in the tests).

Tensor parallelism (Megatron f/g operators): per layer and micro-batch 2 all-reduces of s b h D / c in
the forward and 2 in the backward (4 per layer and micro-batch; plus 2 re-run by full
recomputation); with sequence parallelism the all-gathers and reduce-scatters of
``ModelSpec.tp_collectives_per_layer``. They sit on the compute stream after the layer's compute.

Data parallelism: the gradients of a rank's weights (ModelSpec.stage_parameters x gradient bytes;
fp16 training reduces fp16 gradients, bf16 and fp8 training fp32 ones, Megatron's
accumulate_allreduce_grads_in_fp32) are cut, in the order the backward produces them, into buckets
of ``bucket_bytes`` (one bucket per model chunk when None, Megatron's contiguous gradient buffer).
With ``dp_overlap`` a bucket is reduced on stream 1 as soon as the backward of the last micro-batch
has produced all of it (PyTorch DDP), overlapping the rest of the backward; otherwise all buckets are
reduced after the pipeline (Megatron-LM 2021, ``allreduce_gradients`` after the schedule). ZeRO 0:
all-reduce; ZeRO 1/2: reduce-scatter, optimizer on the 1/(d c) shard, all-gather of the updated
parameters; ZeRO 3 / FSDP: every layer's parameters all-gathered before its forward and again before
its backward for every micro-batch (reshard after forward), gradients reduce-scattered per layer once
the last micro-batch's backward produced them. Dense weights reduce over the d x c ranks that share
them, expert weights over the expert-data-parallel group. Tied embeddings with p > 1: the first and
last stage all-reduce the embedding gradient (V/t x h) after the data-parallel reduction.
Reduce-scatter and all-gather sizes are rounded up to whole elements per rank (padding < n elements).

Context parallelism: ring attention passes K and V around the c ranks, c - 1 steps per layer forward
(2(c-1) backward; ModelSpec.cp_collectives_per_layer), each step a ``sendrecv`` of the cp group. They
run on stream 3, issued when the layer starts; the layer's next compute-stream task waits for them:
the exchange overlaps the layer's compute (a layer costs max(compute, exchange)), an optimistic
bound of ring attention, which overlaps step i+1's transfer with step i's attention only.

Expert parallelism: per MoE layer a dispatch and a combine all-to-all (T k h D per rank) forward and
backward, on the compute stream. ``ep_imbalance`` x: the busiest member (member ``layer % e`` of the
group) receives (1 + x) times the average from every sender in the dispatch and sends that much back in
the combine; the others share the rest equally. The extra expert compute of the busiest rank is not
modelled (its compute time is the average's).

Task merging (``granularity="chunk"``): a pass of one model chunk becomes one compute task (the sum of
its layers' times, embedding and logits included) and one collective per (group, kind) whose nbytes is
the sum of the per-layer collectives: bytes and compute time are conserved, per-collective latencies
are paid once instead of once per layer. The backward of the last micro-batch of each chunk keeps
per-layer tasks when gradients are reduced during the backward, so buckets still overlap it.

Representative pipeline transfers (``tensor_rank0_p2p=True``, tp > 1): only tensor rank 0 of a
stage boundary sends and receives; its collective stands for the t identical transfers
(``collective_weights``). Exact by symmetry when the t pairs use disjoint paths (tensor ranks inside a
server, rail-optimised fabric: rank i's transfer uses rail i) and tensor-parallel collectives in every
pass re-synchronise the tensor group (they do for t > 1); the other t - 1 transfers' link bytes are
then not counted by the network model.

Compute while communication runs beside it (``StepCompute.overlap_slowdown``): backward tasks of the
last micro-batch issued after the rank's first overlapped bucket, and with ZeRO-3 every forward and
backward task, take (1 + slowdown) x their time (an upper bound: the kernels are assumed to overlap a
communication kernel for their whole duration).

Worked number: GPT-1.7B (24 layers), t = p = 1, d = 32, b = 16, B = 512 -> m = 1; each rank runs 24
forward and 24 backward layer tasks and 2 embedding, 2 logits tasks; its fp16 gradients, 1.652e9 x 2 B
= 3.305e9 B, are 127 buckets of 25 MiB = 26,214,400 B (126.06 of them: the last one holds 0.06).

Building cost: what depends only on the stage (its schedule, weight units, gradient buckets, per-layer
communication sizes, transfer sizes) is computed once per call and shared by the ranks of that stage; a
collective is built once per group (looked up by key by its other members); equal tasks are one shared
frozen object. A rank's program depends on the rank only through what it asks about it (its stage, the
groups it uses, whether it is tensor rank 0), so ranks giving the same answers share one program object,
built once: the other ranks cost one look-up per question. Example, Llama-3 405B on 16,384 GPUs (t 8,
p 16, d 128, one gradient buffer reduced after the pipeline): the "reduction" part is 16,384 programs of
2 tasks over 128 all-reduces (one per data-parallel group) and 16 distinct optimizer tasks; the members
of a data-parallel group ask only their stage and that group, so 128 programs are built. In one replica's
pipeline with representative transfers (c = e = 1), tensor ranks 1..t-1 of a stage share one program.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

import numpy as np

from ._validate import finite_nonnegative, reject
from .collectives import DTYPE_BYTES, Collective, CollectiveKind
from .model import RECOMPUTE, ModelSpec, ceil_div
from .parallelism import ParallelismSpec
from .tasks import CommTask, ComputeTask, Workload

__all__ = (
    "STREAM_COMPUTE", "STREAM_DP", "STREAM_PARAM", "STREAM_CP", "STREAM_SEND_NEXT", "STREAM_RECV_PREV",
    "STREAM_SEND_PREV", "STREAM_RECV_NEXT", "STREAM_NAMES", "GRANULARITIES", "GROUP_TAGS",
    "StepCompute", "TrainingWorkload", "pipeline_schedule", "training_step", "gradient_bytes_per_param",
    "stage_of_chunk",
)

STREAM_COMPUTE, STREAM_DP, STREAM_PARAM, STREAM_CP = 0, 1, 2, 3
STREAM_SEND_NEXT, STREAM_RECV_PREV, STREAM_SEND_PREV, STREAM_RECV_NEXT = 4, 5, 6, 7
STREAM_NAMES = {STREAM_COMPUTE: "compute", STREAM_DP: "dp", STREAM_PARAM: "zero params", STREAM_CP: "cp ring",
                STREAM_SEND_NEXT: "pp send next", STREAM_RECV_PREV: "pp recv prev",
                STREAM_SEND_PREV: "pp send prev", STREAM_RECV_NEXT: "pp recv next"}
GRANULARITIES = ("layer", "chunk")
GROUP_TAGS = ("tp", "pp", "dp", "cp", "ep")
PARTS = ("all", "pipeline", "reduction")

# Collective dtype names (workloads.collectives.DTYPE_BYTES) for activations and gradients.
_ACT_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp8": "bfloat16"}


def gradient_bytes_per_param(dtype: str) -> int:
    """Bytes per gradient element the data-parallel reduction moves: 2 for fp16 training, 4 (fp32) for bf16
    and fp8 (Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16; fp8 training keeps bf16/fp32
    master weights and reduces fp32 gradients the same way)."""
    return 2 if dtype == "fp16" else 4


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCompute:
    """Compute seconds on one GPU for one micro-batch (computed by ``simulator.studies.training``).

    ``layer_backward_s`` includes recomputation. ``logits_*`` is final norm + output layer + loss.
    ``optimizer_s`` has one entry per pipeline stage (its shard of the weights), or is empty (0 s).
    """

    layer_forward_s: tuple[float, ...]
    layer_backward_s: tuple[float, ...]
    embedding_forward_s: float = 0.0
    embedding_backward_s: float = 0.0
    logits_forward_s: float = 0.0
    logits_backward_s: float = 0.0
    optimizer_s: tuple[float, ...] = ()
    overlap_slowdown: float = 0.0

    def __post_init__(self) -> None:
        for name in ("layer_forward_s", "layer_backward_s", "optimizer_s"):
            value = tuple(getattr(self, name))
            object.__setattr__(self, name, tuple(finite_nonnegative(f"StepCompute.{name}[{i}]", v)
                                                 for i, v in enumerate(value)))
        if len(self.layer_forward_s) != len(self.layer_backward_s) or not self.layer_forward_s:
            raise reject("StepCompute.layer_backward_s", f"{len(self.layer_backward_s)} entries",
                         f"one per layer, as many as layer_forward_s ({len(self.layer_forward_s)}), at least one")
        for name in ("embedding_forward_s", "embedding_backward_s", "logits_forward_s", "logits_backward_s"):
            object.__setattr__(self, name, finite_nonnegative(f"StepCompute.{name}", getattr(self, name)))
        object.__setattr__(self, "overlap_slowdown", finite_nonnegative("StepCompute.overlap_slowdown",
                                                                        self.overlap_slowdown, "a finite number >= 0"))

    @classmethod
    def uniform(cls, *, layers: int, forward_s: float, backward_s: float, **kw) -> "StepCompute":
        """Every layer takes ``forward_s`` / ``backward_s`` (handy for hand-derived schedules)."""
        if not isinstance(layers, int) or layers < 1:
            raise reject("StepCompute.uniform.layers", layers, "an integer >= 1")
        return cls(layer_forward_s=(forward_s,) * layers, layer_backward_s=(backward_s,) * layers, **kw)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingWorkload:
    """The step's Workload with what each collective is for.

    ``group_kinds[i]`` is the parallelism ("tp", "pp", "dp", "cp", "ep") whose group runs collective i;
    ``collective_names[i]`` a readable name; ``collective_weights[i]`` how many identical transfers it
    stands for (t for a pipeline transfer made by tensor rank 0 alone, else 1). ``ranks[r]`` is the
    global rank program r belongs to (the identity unless only part of the world was built).
    """

    workload: Workload
    group_kinds: tuple[str, ...]
    collective_names: tuple[str, ...]
    collective_weights: tuple[int, ...]
    parallelism: ParallelismSpec
    model_name: str
    recompute: str
    granularity: str
    part: str
    ranks: tuple[int, ...]

    def rank_collectives(self, rank: int) -> tuple[int, ...]:
        """Indices of the collectives program ``rank`` takes part in, in program order."""
        return tuple(t.index for t in self.workload.programs[rank] if isinstance(t, CommTask))

    def nbytes_by_kind(self, rank: int) -> dict[str, int]:
        """Sum of Collective.nbytes per group kind over the collectives of program ``rank``."""
        out = {k: 0 for k in GROUP_TAGS}
        for i in self.rank_collectives(rank):
            out[self.group_kinds[i]] += self.workload.collectives[i].nbytes
        return out


# --------------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------------


def pipeline_schedule(schedule: str, *, pp: int, stage: int, microbatches: int,
                      vp: int = 1) -> tuple[tuple[str, int, int], ...]:
    """The passes stage ``stage`` runs, in order: ("F" or "B", micro-batch, model chunk).

    >>> [f"{p}{m}" for p, m, _ in pipeline_schedule("1f1b", pp=4, stage=1, microbatches=4)]
    ['F0', 'F1', 'F2', 'B0', 'F3', 'B1', 'B2', 'B3']
    """
    for name, value in (("pp", pp), ("microbatches", microbatches), ("vp", vp)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise reject(name, value, "an integer >= 1")
    if not isinstance(stage, int) or not 0 <= stage < pp:
        raise reject("stage", stage, f"an integer in 0..{pp - 1}")
    m = microbatches
    if schedule == "gpipe" or (schedule == "1f1b" and vp == 1):
        if vp != 1:
            raise reject("vp", vp, "1 with the gpipe schedule")
        if schedule == "gpipe":
            return tuple(("F", i, 0) for i in range(m)) + tuple(("B", i, 0) for i in reversed(range(m)))
        warmup = min(pp - stage - 1, m)
        order = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i, 0), ("B", i, 0)]
        order += [("B", i, 0) for i in range(m - warmup, m)]
        return tuple(order)
    if schedule != "interleaved":
        raise reject("schedule", schedule, "one of 'gpipe', '1f1b', 'interleaved'")
    if m % pp:
        raise reject("microbatches", m, f"a multiple of pp ({pp}) for the interleaved schedule")
    total = m * vp
    warmup = total if m == pp else min((pp - stage - 1) * 2 + (vp - 1) * pp, total)

    def chunk(k: int, forward: bool) -> int:
        c = (k % (pp * vp)) // pp
        return c if forward else vp - 1 - c

    def micro(k: int) -> int:
        return (k // (pp * vp)) * pp + k % pp

    order = [("F", micro(k), chunk(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        k = warmup + i
        order += [("F", micro(k), chunk(k, True)), ("B", micro(i), chunk(i, False))]
    order += [("B", micro(k), chunk(k, False)) for k in range(total - warmup, total)]
    return tuple(order)


def stage_of_chunk(virtual_stage: int, pp: int) -> tuple[int, int]:
    """(pipeline rank, model chunk) of virtual stage j: chunk j // p on rank j % p (Megatron interleaving)."""
    return virtual_stage % pp, virtual_stage // pp


# --------------------------------------------------------------------------------------------------
# builder
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Program:
    shared: dict                                       # task fields -> the one (frozen) task of those values
    tasks: list = field(default_factory=list)
    pending: list = field(default_factory=list)        # tasks the next compute-stream task waits for
    computes: list = field(default_factory=list)       # indices of compute tasks, in order

    def _take_pending(self) -> tuple[int, ...]:
        after = tuple(sorted(set(self.pending)))
        self.pending.clear()
        return after

    def add_compute(self, duration_s: float, name: str) -> int:
        """A compute task on the compute stream, after the pending tasks; returns its position."""
        self.tasks.append(self._compute_task(duration_s, name, self._take_pending()))
        self.computes.append(len(self.tasks) - 1)
        return len(self.tasks) - 1

    def add_comm(self, index: int, name: str) -> int:
        """Collective ``index`` on the compute stream (it blocks compute), after the pending tasks."""
        self.tasks.append(self._comm_task(index, name, STREAM_COMPUTE, self._take_pending()))
        return len(self.tasks) - 1

    def side(self, index: int, name: str, stream: int, after: tuple[int, ...] = ()) -> int:
        self.tasks.append(self._comm_task(index, name, stream, tuple(sorted(set(after)))))
        return len(self.tasks) - 1

    # Ranks of one stage repeat the same tasks: equal frozen tasks are built once and shared (tasks compare
    # by value and nothing mutates them). Durations are floats without -0.0 (StepCompute converts its seconds
    # to float and -0.0 to 0.0; sums and products of those stay so), so equal keys mean bit-identical tasks.
    def _compute_task(self, duration_s: float, name: str, after: tuple[int, ...]) -> ComputeTask:
        key = (ComputeTask, duration_s, name, after)
        task = self.shared.get(key)
        if task is None:
            task = self.shared[key] = ComputeTask(duration_s=duration_s, name=name, stream=STREAM_COMPUTE,
                                                  after=after)
        return task

    def _comm_task(self, index: int, name: str, stream: int, after: tuple[int, ...]) -> CommTask:
        key = (CommTask, index, name, stream, after)
        task = self.shared.get(key)
        if task is None:
            task = self.shared[key] = CommTask(index=index, name=name, stream=stream, after=after)
        return task

    @property
    def last0(self) -> tuple[int, ...]:
        for i in range(len(self.tasks) - 1, -1, -1):
            if self.tasks[i].stream == STREAM_COMPUTE:
                return (i,)
        return ()


@dataclass(frozen=True, slots=True)
class _Unit:
    """Weights whose gradients one backward task produces: ``dense``/``expert`` parameter counts."""

    dense: int
    expert: int


@dataclass(slots=True)
class _Node:
    """A node of the tree of kept programs (_Builder.program): the next question and a child per answer to
    it, or at a leaf (no question) the program of the ranks whose answers lead there."""

    question: tuple[str, str] | None = None
    children: dict = field(default_factory=dict)
    program: tuple | None = None


class _Builder:
    def __init__(self, model: ModelSpec, spec: ParallelismSpec, compute: StepCompute, *, recompute: str,
                 granularity: str, part: str, ranks: tuple[int, ...], tensor_rank0_p2p: bool):
        self.model, self.spec, self.compute = model, spec, compute
        self.tensor_rank0_p2p = tensor_rank0_p2p and spec.tp > 1
        self.recompute, self.granularity, self.part = recompute, granularity, part
        self.local = {r: i for i, r in enumerate(ranks)}
        self.collectives: list[Collective] = []
        self.kinds: list[str] = []
        self.names: list[str] = []
        self.weights: list[int] = []
        self.keys: dict = {}
        self._size_cache: dict = {}          # per-layer communication sizes, which depend only on the layout
        self.seq = spec.seq(model)
        # pipeline transfers: s b h D / c, split over t by sequence parallelism or SC21's scatter/gather (then the
        # receiver all-gathers the full tensor in its tensor group)
        self.scatter_gather = spec.tp > 1 and spec.scatter_gather and not spec.sp
        self.pp_bytes = model.pp_activation_bytes(micro_batch=spec.micro_batch, seq_len=self.seq, tp=spec.tp,
                                                  sp=spec.sp, cp=spec.cp, scatter_gather=self.scatter_gather)
        self.pp_full_bytes = model.pp_activation_bytes(micro_batch=spec.micro_batch, seq_len=self.seq, tp=spec.tp,
                                                       cp=spec.cp) if self.scatter_gather else None
        # activations and weights (parameter all-gathers) share the model's element type
        self.act_dtype = {1: "fp8", 2: _ACT_DTYPE[spec.dtype], 4: "float32"}[model.dtype_bytes]
        self.grad_bytes = gradient_bytes_per_param(spec.dtype)
        self.grad_dtype = "float16" if self.grad_bytes == 2 else "float32"
        self.V = spec.virtual_stages
        self.chunks = model.stage_layers(pp=self.V)      # layers of each model chunk (the first ones longer)
        self.m = spec.microbatches
        self.zero = spec.zero_stage
        # whether the ranks reduce dense gradients (over their d x c data x context group) and expert gradients
        # (over their expert-data-parallel group of d c / e): the same for every rank, the groups of a kind having
        # one size
        self.reduces_dense = spec.dp * spec.cp > 1
        self.reduces_expert = model.is_moe and spec.dp * spec.cp // spec.ep > 1
        # ZeRO-3 ranks that reduce dense gradients overlap every forward and backward task with communication
        # (StepCompute.overlap_slowdown)
        self.stretched_all = self.zero >= 3 and self.reduces_dense
        # groups per kind and every rank's answers per question (see answers), built on first use
        self.groups: dict[str, list[tuple[int, ...]]] = {}
        self._answers: dict[tuple[str, str], list[int | bool]] = {}
        self.shared_tasks: dict = {}
        self._programs = _Node()             # programs built so far, by their ranks' answers (see program)
        # per-stage structures shared by every rank of the stage (immutable once built)
        self._units: dict = {}
        self._unit_tasks: dict = {}
        self._buckets: dict = {}
        self._schedules: dict[int, tuple] = {}

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
                members = np.array(self.groups[kind], dtype=np.int64)      # the groups of a kind have one size
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
            node = node.children.get(self._answers[node.question][rank])
            if node is None:
                break
        else:
            if node.program is not None:
                return node.program
        built = _RankProgram(self, rank)
        program = built.build()
        node = self._programs
        for question, answer in built.asked.items():          # in the order asked
            if node.question not in (None, question):
                raise RuntimeError(f"training_step: rank {rank} asked {question} where an earlier rank with the "
                                   f"same answers asked {node.question}; a program must depend on its rank only "
                                   "through its answers")
            node.question = question
            node = node.children.setdefault(answer, _Node())
        if node.question is not None or node.program is not None:
            held = "a program" if node.program is not None else f"the question {node.question}"
            raise RuntimeError(f"training_step: rank {rank}'s answers lead to {held} of an earlier rank with the same "
                               "answers; a program must depend on its rank only through its answers")
        node.program = program
        return program

    def collective(self, key, make, kind: str, name: str, weight: int = 1) -> int:
        index = self.keys.get(key)
        if index is None:
            coll = make()
            missing = [r for r in coll.group if r not in self.local]
            if missing:
                raise ValueError(f"training_step.part: {self.part!r} builds a collective ({name}) with rank "
                                 f"{missing[0]}, which is not built; expected part='all'")
            coll = Collective(kind=coll.kind, nbytes=coll.nbytes, group=tuple(self.local[r] for r in coll.group),
                              dtype=coll.dtype, splits=coll.splits)
            index = len(self.collectives)
            self.collectives.append(coll)
            self.kinds.append(kind)
            self.names.append(name)
            self.weights.append(weight)
            self.keys[key] = index
        return index

    # ---- weights ----------------------------------------------------------------------------------
    def layer_unit(self, layer: int) -> _Unit:
        unit = self._units.get(layer)
        if unit is None:
            total = self.model.layer_parameters(layer, tp=self.spec.tp, ep=self.spec.ep)
            # a single expert's gradients are reduced with the dense ones: its expert-data-parallel group is the
            # dense gradient group (ep divides the experts, so ep = 1)
            expert = self.model.routed_expert_parameters(layer, ep=self.spec.ep) if self.model.experts > 1 else 0
            unit = self._units[layer] = _Unit(dense=total - expert, expert=expert)
        return unit

    def embedding_unit(self) -> _Unit:
        unit = self._units.get("embedding")
        if unit is None:
            unit = self._units["embedding"] = _Unit(dense=self.model.embedding_parameters(tp=self.spec.tp), expert=0)
        return unit

    def output_unit(self) -> _Unit:
        unit = self._units.get("output")
        if unit is None:
            model = self.model
            out = model.last_stage_output_parameters(tp=self.spec.tp, pp=self.spec.pp)
            unit = self._units["output"] = _Unit(dense=out + model.final_norm_parameters(), expert=0)
        return unit

    def chunk_layers(self, v: int) -> range:
        return self.chunks[v]

    def unit_tasks(self, v: int, phase: str) -> tuple[tuple[_Unit, object, float, str, int | None], ...]:
        """The per-layer compute tasks of one pass of virtual stage v, one per weight unit, in execution order
        (forward: embedding, layers, logits; backward the reverse): (unit, key, seconds, name, layer or None)."""
        tasks = self._unit_tasks.get((v, phase))
        if tasks is not None:
            return tasks
        c, forward = self.compute, phase == "forward"
        layer_s = c.layer_forward_s if forward else c.layer_backward_s
        built = [(self.layer_unit(l), l, layer_s[l], f"layer{l}", l) for l in self.chunk_layers(v)]
        if v == 0:
            seconds = c.embedding_forward_s if forward else c.embedding_backward_s
            built.insert(0, (self.embedding_unit(), "emb", seconds, "embedding", None))
        if v == self.V - 1:
            seconds = c.logits_forward_s if forward else c.logits_backward_s
            built.append((self.output_unit(), "out", seconds, "logits", None))
        tasks = self._unit_tasks[v, phase] = tuple(built if forward else built[::-1])
        return tasks

    def schedule(self, stage: int) -> tuple[tuple[tuple[str, int, int], ...], dict[int, int]]:
        """The passes of ``stage`` (:func:`pipeline_schedule`) and the index of each chunk's last backward."""
        entry = self._schedules.get(stage)
        if entry is None:
            spec = self.spec
            ops = pipeline_schedule(spec.schedule, pp=spec.pp, stage=stage, microbatches=self.m, vp=spec.vp)
            last_b: dict[int, int] = {}
            for i, (phase, _, chunk) in enumerate(ops):
                if phase == "B":
                    last_b[chunk] = i
            entry = self._schedules[stage] = (ops, last_b)
        return entry

    def buckets(self, v: int, dense: bool, expert: bool) -> tuple[tuple[str, int, int, int], ...]:
        """Gradient buckets of virtual stage v: (dense|expert, params, ready after unit count k, bucket id).

        ``dense``/``expert``: whether the rank reduces that kind of gradient (its group has > 1 member)."""
        key = (v, dense, expert)
        plan = self._buckets.get(key)
        if plan is not None:
            return plan
        units = [unit for unit, *_ in self.unit_tasks(v, "backward")]      # in the order their gradients complete
        out = []
        for part, active in (("dense", dense), ("expert", expert)):
            if not active:
                continue
            sizes = [getattr(u, part) for u in units]
            total = sum(sizes)
            if total == 0:
                continue
            if self.zero >= 3:          # one reduce-scatter per unit, when its gradients are complete
                out += [(part, s, k + 1, k) for k, s in enumerate(sizes) if s > 0]
                continue
            cap = total if self.spec.bucket_bytes is None else max(1, self.spec.bucket_bytes // self.grad_bytes)
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

    def bucket_reduction(self, chunk: int, bucket: tuple[str, int, int, int],
                         group: tuple[int, ...]) -> tuple[int, str]:
        """(collective index, name) of the reduction of ``bucket`` of ``chunk`` in ``group``: built once per
        group (:meth:`collective` finds it by key for the other members)."""
        part, params, _, bid = bucket
        kind = CollectiveKind.ALL_REDUCE if self.zero == 0 else CollectiveKind.REDUCE_SCATTER
        nbytes = self.padded(kind, params * self.grad_bytes, len(group), self.grad_bytes)
        label = f"dp bucket {bid}" + (f" chunk{chunk}" if self.spec.vp > 1 else "") \
            + (" experts" if part == "expert" else "")
        return self.simple(("dp", chunk, part, bid, group), kind, nbytes, group, self.grad_dtype, "dp", label), label

    # ---- collective factories -------------------------------------------------------------------
    def p2p(self, key, src: int, dst: int, nbytes: int, name: str) -> int:
        def make():
            return Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=nbytes, group=(src, dst), dtype=self.act_dtype,
                              splits=((0, nbytes), (0, 0)))
        return self.collective(key, make, "pp", name, weight=self.spec.tp if self.tensor_rank0_p2p else 1)

    def simple(self, key, kind: CollectiveKind, nbytes: int, group: tuple[int, ...], dtype: str, tag: str,
               name: str) -> int:
        return self.collective(key, lambda: Collective(kind=kind, nbytes=nbytes, group=group, dtype=dtype), tag, name)

    @staticmethod
    def padded(kind: CollectiveKind, nbytes: int, n: int, elt: int) -> int:
        if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
            return ceil_div(nbytes, n * elt) * n * elt
        return nbytes

    # ---- per-layer communication sizes ----------------------------------------------------------
    def _sizes_cached(self, key, build):
        if key not in self._size_cache:
            self._size_cache[key] = build()
        return self._size_cache[key]

    def tp_sizes(self, phase: str):
        if self.spec.tp == 1:
            return ()
        return self._sizes_cached(("tp", phase), lambda: self.model.tp_collectives_per_layer(
            micro_batch=self.spec.micro_batch, seq_len=self.seq, tp=self.spec.tp, sp=self.spec.sp, cp=self.spec.cp,
            phase=phase, recompute=self.recompute))

    def cp_sizes(self, phase: str):
        if self.spec.cp == 1:
            return ()
        return self._sizes_cached(("cp", phase), lambda: self.model.cp_collectives_per_layer(
            micro_batch=self.spec.micro_batch, seq_len=self.seq, tp=self.spec.tp, cp=self.spec.cp, phase=phase,
            recompute=self.recompute))

    def ep_sizes(self, layer: int, phase: str):
        if self.spec.ep == 1:
            return ()
        return self._sizes_cached(("ep", layer, phase), lambda: self.model.ep_collectives_per_layer(
            layer, micro_batch=self.spec.micro_batch, seq_len=self.seq, tp=self.spec.tp, cp=self.spec.cp,
            ep=self.spec.ep, phase=phase, recompute=self.recompute))

    def ep_matrix(self, nbytes: int, layer: int, combine: bool) -> tuple[tuple[int, ...], ...]:
        """Bytes member p sends member q in one dispatch (transposed for a combine). Every member sends the
        same row: the busiest member gets its share, the others the rest in whole elements."""
        n, elt = self.spec.ep, _elt(self.act_dtype)
        elements = nbytes // elt
        busiest = layer % n
        heavy = min(elements, int(round((1.0 + self.spec.ep_imbalance) * elements / n)))
        light, extra = divmod(elements - heavy, n - 1)
        others = [q for q in range(n) if q != busiest]
        row = [0] * n
        row[busiest] = heavy * elt
        for j, q in enumerate(others):
            row[q] = (light + (1 if j < extra else 0)) * elt
        if combine:
            return tuple((b,) * n for b in row)
        return (tuple(row),) * n

    def ep_matrix_sum(self, sends) -> list[list[int]]:
        """Element-wise sum of :meth:`ep_matrix` over ``sends``, a list of (nbytes, layer, combine)."""
        matrices = [self.ep_matrix(*one) for one in sends]
        n = self.spec.ep
        return [[sum(mx[p][q] for mx in matrices) for q in range(n)] for p in range(n)]


def _elt(dtype: str) -> int:
    return DTYPE_BYTES[dtype]


def _matrix_collective(group: tuple[int, ...], matrix, dtype: str) -> Collective:
    n = len(group)
    if len({b for row in matrix for b in row}) == 1:         # even: the plain all-to-all of nccl-tests
        return Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=matrix[0][0] * n, group=group, dtype=dtype)
    splits = tuple(tuple(int(b) for b in row) for row in matrix)
    return Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=max(sum(r) for r in splits), group=group, dtype=dtype,
                      splits=splits)


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
        self.prog = _Program(shared=b.shared_tasks)
        # pipeline groups list their members stage 0 first (ParallelismSpec.groups): position = stage
        self.stage = self.ask("position", "pp")
        self.ops, self.last_backward = b.schedule(self.stage)
        self.pipeline = b.part in ("all", "pipeline")
        self.reduce = b.part in ("all", "reduction")
        # buckets are reduced during the backward (DDP overlap, or ZeRO-3's per-unit reduce-scatters), not after it
        self.reduce_in_backward = b.part == "all" and (spec.dp_overlap or b.zero >= 3)
        # DDP overlap proper: part "all", dp_overlap and ZeRO < 3
        self.overlap = self.reduce_in_backward and b.zero < 3
        self.dp_started = False
        self.dp_tasks: list[int] = []

    def ask(self, what: str, kind: str) -> int | bool:
        """The answer to a question about this rank (_Builder.answers), kept with the others."""
        question = (what, kind)
        answer = self.asked.get(question)
        if answer is None:
            answer = self.asked[question] = self.b.answers(question)[self._rank]
        return answer

    def group(self, kind: str) -> tuple[int, ...]:
        """This rank's group of ``kind``, looked up when used: a reduction-only build never needs most kinds."""
        index = self.ask("group", kind)          # builds the tables of ``kind`` on first use
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

    # ---- helpers ---------------------------------------------------------------------------------
    def peer(self, virtual_stage: int) -> int:
        """The rank holding ``virtual_stage`` in this rank's pipeline (this rank for its own virtual stages)."""
        stage, _ = stage_of_chunk(virtual_stage, self.b.spec.pp)
        return self.pp_group[stage]          # pipeline groups list their members stage 0 first

    def duration(self, seconds: float, *, backward_last: bool) -> float:
        slow = self.b.stretched_all or (backward_last and self.dp_started)
        return seconds * (1.0 + self.b.compute.overlap_slowdown) if slow else seconds

    def compute(self, seconds: float, name: str, *, backward_last: bool = False) -> int:
        return self.prog.add_compute(self.duration(seconds, backward_last=backward_last), name)

    # ---- the program ------------------------------------------------------------------------------
    def build(self) -> tuple:
        spec = self.b.spec
        self.buckets = {v: self.plan_buckets(v) for v in range(spec.vp)}
        if self.pipeline:
            op_end: list[tuple[int, ...]] = []
            deferred: list[int] = []
            for i, (phase, mb, chunk) in enumerate(self.ops):
                v = chunk * spec.pp + self.stage
                # Receives are posted when the pass before the consumer ends; in the interleaved schedule
                # Megatron posts a backward's receive one pass earlier, with the previous (F, B) pair's.
                early = spec.schedule == "interleaved" and phase == "B" and i >= 1 and self.ops[i - 1][0] == "F"
                j = i - 2 if early else i - 1
                post = op_end[j] if j >= 0 else ()
                if phase == "F":
                    sends = self.forward(mb, v, post)
                else:
                    sends = self.backward(mb, v, post, last=self.last_backward[chunk] == i)
                op_end.append(self.prog.last0)
                # Blocking sends: the next pass waits for them. Interleaved steady state runs a (F, B) pair
                # back to back and exchanges after it (Megatron), so F's sends block the pass after B.
                pair = spec.schedule == "interleaved" and phase == "F" and i + 1 < len(self.ops) \
                    and self.ops[i + 1][0] == "B"
                if pair:
                    deferred = sends
                else:
                    self.prog.pending.extend(sends + deferred)
                    deferred = []
        if self.reduce:
            self.finish()
        return tuple(self.prog.tasks)

    def label(self, phase: str, mb: int, v: int) -> str:
        _, chunk = stage_of_chunk(v, self.b.spec.pp)
        return f"{phase} mb{mb} stage{self.stage}" + (f" chunk{chunk}" if self.b.spec.vp > 1 else "")

    def recv(self, mb: int, v_from: int, direction: str, label: str, post: tuple[int, ...]) -> None:
        """Receive the activation (forward) or gradient (backward) of ``mb`` from virtual stage v_from."""
        b = self.b
        if self.transfers():
            key = ("pp", direction, mb, v_from, self.pp_group)
            v_to = v_from + 1 if direction == "act" else v_from - 1
            index = b.p2p(key, self.peer(v_from), self.peer(v_to), b.pp_bytes,
                          f"pp {direction} mb{mb} v{v_from}->v{v_to}")
            stream = STREAM_RECV_PREV if direction == "act" else STREAM_RECV_NEXT
            task = self.prog.side(index, f"pp recv {direction} {label}", stream, post)
            self.prog.pending.append(task)
        if b.scatter_gather:
            tp_group = self.group("tp")
            gi = b.simple(("pp-gather", direction, mb, v_from, tp_group), CollectiveKind.ALL_GATHER, b.pp_full_bytes,
                          tp_group, b.act_dtype, "tp", f"pp allgather {direction} mb{mb}")
            self.prog.add_comm(gi, f"pp allgather {direction} {label}")

    def send(self, mb: int, v: int, direction: str, label: str) -> list[int]:
        b = self.b
        if not self.transfers():
            return []
        v_to = v + 1 if direction == "act" else v - 1
        dst = self.peer(v_to)
        key = ("pp", direction, mb, v, self.pp_group)
        index = b.p2p(key, self.peer(v), dst, b.pp_bytes, f"pp {direction} mb{mb} v{v}->v{v_to}")
        stream = STREAM_SEND_NEXT if direction == "act" else STREAM_SEND_PREV
        return [self.prog.side(index, f"pp send {direction} {label}", stream, self.prog.last0)]

    def transfers(self) -> bool:
        """Whether this rank moves its pipeline tensors itself (False: tensor rank 0 stands for it)."""
        return not self.b.tensor_rank0_p2p or self.ask("first", "tp")

    # ---- ZeRO-3 parameter gathers -------------------------------------------------------------------
    def gather_params(self, units: list[_Unit], key, label: str) -> None:
        b = self.b
        if b.zero < 3:
            return
        # the gather for the next compute task may start once the task before it has ended (depth 1)
        prefetch_after = tuple(self.prog.computes[-2:-1])
        for part in ("dense", "expert"):
            group = self.grad_group(part)
            params = sum(getattr(u, part) for u in units)
            if params == 0 or len(group) == 1:
                continue
            elt = _elt(b.act_dtype)
            nbytes = b.padded(CollectiveKind.ALL_GATHER, params * b.model.dtype_bytes, len(group), elt)
            gi = b.simple(("zero-ag", key, part, group), CollectiveKind.ALL_GATHER, nbytes, group, b.act_dtype, "dp",
                          f"zero allgather {part} {label}")
            task = self.prog.side(gi, f"zero allgather {label}", STREAM_PARAM, prefetch_after)
            self.prog.pending.append(task)

    # ---- passes ----------------------------------------------------------------------------------
    def forward(self, mb: int, v: int, post: tuple[int, ...]) -> list[int]:
        b = self.b
        label = self.label("fwd", mb, v)
        if v > 0:
            self.recv(mb, v - 1, "act", label, post)
        layers = b.chunk_layers(v)
        first, last = v == 0, v == b.V - 1
        tasks = b.unit_tasks(v, "forward")
        if b.granularity == "chunk":
            self.gather_params([unit for unit, *_ in tasks], ("F", mb, v), label)
            seconds = sum(b.compute.layer_forward_s[l] for l in layers)
            seconds += (b.compute.embedding_forward_s if first else 0.0) + (b.compute.logits_forward_s if last else 0.0)
            self.compute(seconds, label)
            self.layer_comm(list(layers), "forward", ("F", mb, v), label)
        else:
            for unit, part, seconds, name, layer in tasks:
                self.gather_params([unit], ("F", mb, v, part), label)
                self.compute(seconds, f"{label} {name}")
                if layer is not None:
                    self.layer_comm([layer], "forward", ("F", mb, v, layer), label)
        return self.send(mb, v, "act", label) if v < b.V - 1 else []

    def backward(self, mb: int, v: int, post: tuple[int, ...], *, last: bool) -> list[int]:
        b = self.b
        label = self.label("bwd", mb, v)
        if v < b.V - 1:
            self.recv(mb, v + 1, "grad", label, post)
        layers = list(reversed(b.chunk_layers(v)))
        first_chunk, last_chunk = v == 0, v == b.V - 1
        _, chunk = stage_of_chunk(v, b.spec.pp)
        overlapped = last and self.overlap and (self.b.reduces_dense or self.b.reduces_expert)
        per_layer = b.granularity == "layer" or overlapped or (last and b.zero >= 3)
        tasks = b.unit_tasks(v, "backward")
        if not per_layer:      # one merged task: no bucket is reduced during it (that takes per-layer tasks)
            self.gather_params([unit for unit, *_ in tasks], ("B", mb, v), label)
            seconds = sum(b.compute.layer_backward_s[l] for l in layers)
            seconds += (b.compute.logits_backward_s if last_chunk else 0.0)
            seconds += (b.compute.embedding_backward_s if first_chunk else 0.0)
            self.compute(seconds, label, backward_last=last)
            self.layer_comm(layers, "backward", ("B", mb, v), label)
        else:
            for done, (unit, part, seconds, name, layer) in enumerate(tasks, start=1):
                self.gather_params([unit], ("B", mb, v, part), label)
                task = self.compute(seconds, f"{label} {name}", backward_last=last)
                if layer is not None:
                    self.layer_comm([layer], "backward", ("B", mb, v, layer), label)
                if last:
                    self.grads_ready(chunk, done, task)
        return self.send(mb, v, "grad", label) if v > 0 else []

    def layer_comm(self, layers: list[int], phase: str, key, label: str) -> None:
        """TP and EP collectives after the layers' compute (stream 0), CP exchange overlapping it (stream 3)."""
        b, spec = self.b, self.b.spec
        n = len(layers)
        # context parallelism: issued when the compute began, the next compute-stream task waits for it
        start_after = tuple(self.prog.computes[-2:-1])
        merge = b.granularity == "chunk" and n > 1
        cp_sizes = b.cp_sizes(phase)
        cp_group = self.group("cp") if cp_sizes else ()
        for size in cp_sizes:
            counts = [size.count * n] if merge else [1] * (size.count * n)
            for j, count in enumerate(counts):
                ci = b.simple(("cp", key, size.name, j, cp_group), CollectiveKind.SENDRECV, size.nbytes * count,
                              cp_group, b.act_dtype, "cp", f"cp kv {label}")
                self.prog.pending.append(self.prog.side(ci, f"cp kv {label}", STREAM_CP, start_after))
        # tensor parallelism
        sizes = b.tp_sizes(phase)
        tp_group = self.group("tp") if sizes else ()
        if merge:
            merged: dict[CollectiveKind, int] = {}
            for size in sizes:
                merged[size.kind] = merged.get(size.kind, 0) + size.nbytes * size.count * n
            for kind, nbytes in merged.items():
                ti = b.simple(("tp", key, kind.value, tp_group), kind, nbytes, tp_group, b.act_dtype, "tp",
                              f"tp {kind.value} {label}")
                self.prog.add_comm(ti, f"tp {kind.value.replace('_', '')}")
        else:
            for l in layers:
                for j, size in enumerate(_interleave(sizes)):
                    ti = b.simple(("tp", key, l, j, tp_group), size.kind, size.nbytes, tp_group, b.act_dtype,
                                  "tp", f"tp {size.name} layer{l} {label}")
                    self.prog.add_comm(ti, f"tp {size.kind.value.replace('_', '')}")
        # expert parallelism: one all-to-all per (layer, dispatch or combine), or their sum per chunk pass; the
        # send matrices are built only when the group's first member builds the collective
        if spec.ep > 1:
            ep_group = self.group("ep")
            sends = [(size.nbytes, l, j % 2 == 1) for l in layers for size in b.ep_sizes(l, phase)
                     for j in range(size.count)]
            batches = ([sends] if sends else []) if merge else [[one] for one in sends]
            for j, batch in enumerate(batches):
                ei = b.collective(("ep", key, j, ep_group),
                                  lambda batch=batch: _matrix_collective(ep_group, b.ep_matrix_sum(batch), b.act_dtype),
                                  "ep", f"ep alltoall {label}")
                self.prog.add_comm(ei, "ep alltoall")

    # ---- data parallelism ------------------------------------------------------------------------
    def plan_buckets(self, chunk: int) -> tuple[tuple[str, int, int, int], ...]:
        """Buckets of this rank's chunk: (dense|expert, params, ready after unit count k, bucket id)."""
        if not self.reduce:
            return ()
        return self.b.buckets(chunk * self.b.spec.pp + self.stage, self.b.reduces_dense, self.b.reduces_expert)

    def grads_ready(self, chunk: int, units_done: int, task: int) -> None:
        if not self.reduce_in_backward:
            return
        for bucket in self.buckets[chunk]:
            if bucket[2] == units_done:
                self.reduce_bucket(chunk, bucket, (task,))

    def reduce_bucket(self, chunk: int, bucket, after: tuple[int, ...]) -> None:
        index, label = self.b.bucket_reduction(chunk, bucket, self.grad_group(bucket[0]))
        self.dp_tasks.append(self.prog.side(index, label, STREAM_DP, after))
        self.dp_started = True

    def finish(self) -> None:
        b, spec = self.b, self.b.spec
        end = self.prog.last0
        if not self.reduce_in_backward:
            for chunk in reversed(range(spec.vp)):
                for bucket in self.buckets[chunk]:
                    self.reduce_bucket(chunk, bucket, end)
        if b.model.tied_embeddings and spec.pp > 1 and self.stage in (0, spec.pp - 1):
            group = (self.pp_group[0], self.pp_group[-1])
            nbytes = b.model.last_stage_output_parameters(tp=spec.tp, pp=spec.pp) * b.grad_bytes
            index = b.simple(("emb", group), CollectiveKind.ALL_REDUCE, nbytes, group, b.grad_dtype, "pp",
                             "embedding allreduce")
            self.dp_tasks.append(self.prog.side(index, "embedding allreduce", STREAM_DP, end))
        self.prog.pending.extend(self.dp_tasks)
        optimizer = b.compute.optimizer_s[self.stage] if b.compute.optimizer_s else 0.0
        opt = self.prog.add_compute(optimizer, f"optimizer stage{self.stage}")
        if b.zero in (1, 2) and b.reduces_dense:
            for chunk in range(spec.vp):
                for part, params, _, bid in self.buckets[chunk]:
                    group = self.grad_group(part)
                    nbytes = b.padded(CollectiveKind.ALL_GATHER, params * b.model.dtype_bytes, len(group),
                                      _elt(b.act_dtype))
                    label = f"zero allgather bucket {bid}" + (f" chunk{chunk}" if spec.vp > 1 else "")
                    index = b.simple(("zero-post", chunk, part, bid, group), CollectiveKind.ALL_GATHER, nbytes, group,
                                     b.act_dtype, "dp", label)
                    self.prog.side(index, label, STREAM_DP, (opt,))


def _interleave(sizes) -> list:
    """Per-layer collectives in execution order: one of each kind in turn (AG, RS, AG, RS, ...)."""
    out, j = [], 0
    while any(j < s.count for s in sizes):
        out += [s for s in sizes if j < s.count]
        j += 1
    return out


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def training_step(model: ModelSpec, parallelism: ParallelismSpec, compute: StepCompute, *, recompute: str = "none",
                  granularity: str = "layer", part: str = "all", ranks=None,
                  tensor_rank0_p2p: bool = False) -> TrainingWorkload:
    """The programs of every rank for one training step (see the module docstring).

    ``part``: "all" (the step), "pipeline" (forward/backward passes only, no data-parallel reduction or
    optimizer) or "reduction" (only the data-parallel reduction, embedding sync and optimizer: what
    follows the pipeline when ``dp_overlap`` is False). ``ranks``: build only these global ranks (their
    collectives must stay among them), renumbered 0..len-1 in the Workload. ``tensor_rank0_p2p``: only
    tensor rank 0 of each stage moves the pipeline tensors (see the module docstring, task merging).
    """
    if not isinstance(model, ModelSpec):
        raise reject("model", model, "a workloads.model.ModelSpec")
    if not isinstance(parallelism, ParallelismSpec):
        raise reject("parallelism", parallelism, "a workloads.parallelism.ParallelismSpec")
    if not isinstance(compute, StepCompute):
        raise reject("compute", compute, "a StepCompute")
    if recompute not in RECOMPUTE:
        raise reject("recompute", recompute, f"one of {', '.join(map(repr, RECOMPUTE))}")
    if granularity not in GRANULARITIES:
        raise reject("granularity", granularity, f"one of {', '.join(map(repr, GRANULARITIES))}")
    if part not in PARTS:
        raise reject("part", part, f"one of {', '.join(map(repr, PARTS))}")
    if not isinstance(tensor_rank0_p2p, bool):
        raise reject("tensor_rank0_p2p", tensor_rank0_p2p, "True or False")
    parallelism.check(model)
    if len(compute.layer_forward_s) != model.layers:
        raise reject("compute.layer_forward_s", f"{len(compute.layer_forward_s)} entries",
                     f"one per layer of {model.name} ({model.layers})")
    if compute.optimizer_s and len(compute.optimizer_s) != parallelism.pp:
        raise reject("compute.optimizer_s", f"{len(compute.optimizer_s)} entries",
                     f"one per pipeline stage ({parallelism.pp}) or none")
    if part == "reduction" and parallelism.zero_stage >= 3:
        raise reject("part", part, "'all' with ZeRO-3/FSDP, whose parameter gathers sit inside the pipeline")
    world = parallelism.world_size
    if ranks is None:
        ranks = tuple(range(world))
    else:
        ranks = tuple(int(r) for r in ranks)
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < world for r in ranks):
            raise reject("ranks", ranks, f"distinct ranks in 0..{world - 1}, at least one")
    builder = _Builder(model, parallelism, compute, recompute=recompute, granularity=granularity, part=part,
                       ranks=ranks, tensor_rank0_p2p=tensor_rank0_p2p)
    programs = tuple(map(builder.program, ranks))
    workload = Workload(nranks=len(ranks), collectives=tuple(builder.collectives), programs=programs)
    return TrainingWorkload(workload=workload, group_kinds=tuple(builder.kinds),
                            collective_names=tuple(builder.names), collective_weights=tuple(builder.weights),
                            parallelism=parallelism, model_name=model.name,
                            recompute=recompute, granularity=granularity, part=part, ranks=ranks)
