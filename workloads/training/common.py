"""What every dimension of the training step shares: streams, element types, padding, the task list of one
program and the step's result type. Pure data.

Streams (CUDA streams of one rank; tasks of a stream run in program order)::

    0 compute, with the collectives that block it: tensor parallel, expert parallel (and the
      all-gather that rebuilds a scattered pipeline activation)
    1 data-parallel gradient reduction (and the ZeRO-1/2 parameter all-gather after the optimizer)
    2 ZeRO-3 / FSDP parameter all-gathers (prefetched one compute task ahead)
    3 context-parallel ring-attention KV exchange
    4, 5, 6, 7 pipeline sends to the next stage, receives from the previous stage, sends to the
      previous stage, receives from the next stage
    8 tensor-parallel collectives overlapped with the layer's GEMMs (``tp_comm_overlap``, Transformer
      Engine's userbuffers: ``tensor_parallel``)

Element types: activations and gathered weights travel in the model's element type (fp16/bf16, fp8
activations as bf16, 4-byte models as float32); gradients are reduced in fp16 for fp16 training, in fp32
for bf16 and fp8 training (Megatron's accumulate_allreduce_grads_in_fp32), in bf16 with
``grad_reduce_in_bf16`` (``ParallelismSpec.grad_bytes``). Reduce-scatter and all-gather
sizes are rounded up to whole elements per rank: ``padded(nbytes, n, elt) = ceil(nbytes / (n elt)) n elt``
(padding < n elements).

Worked number: a reduce-scatter of 1,000,002 B of fp32 gradients over 4 ranks moves ceil(1,000,002 / 16) x
16 = 62,501 x 16 = 1,000,016 B (14 B of padding, 3.5 < 4 elements).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from ..collectives import DTYPE_BYTES, CollectiveKind
from ..model import ceil_div
from ..parallelism import ParallelismSpec
from ..tasks import CommTask, ComputeTask, Workload

__all__ = (
    "STREAM_COMPUTE",
    "STREAM_DP",
    "STREAM_PARAM",
    "STREAM_CP",
    "STREAM_SEND_NEXT",
    "STREAM_RECV_PREV",
    "STREAM_SEND_PREV",
    "STREAM_RECV_NEXT",
    "STREAM_TP",
    "STREAM_NAMES",
    "GRANULARITIES",
    "GROUP_TAGS",
    "PARTS",
    "TrainingWorkload",
    "gradient_bytes_per_param",
)

STREAM_COMPUTE, STREAM_DP, STREAM_PARAM, STREAM_CP = 0, 1, 2, 3
STREAM_SEND_NEXT, STREAM_RECV_PREV, STREAM_SEND_PREV, STREAM_RECV_NEXT = 4, 5, 6, 7
STREAM_TP = 8
STREAM_NAMES = {
    STREAM_COMPUTE: "compute",
    STREAM_DP: "dp",
    STREAM_PARAM: "zero params",
    STREAM_CP: "cp ring",
    STREAM_SEND_NEXT: "pp send next",
    STREAM_RECV_PREV: "pp recv prev",
    STREAM_SEND_PREV: "pp send prev",
    STREAM_RECV_NEXT: "pp recv next",
    STREAM_TP: "tp overlap",
}
GRANULARITIES = ("layer", "chunk")
GROUP_TAGS = ("tp", "pp", "dp", "cp", "ep")
PARTS = ("all", "pipeline", "reduction")

# Collective dtype names (workloads.collectives.DTYPE_BYTES) for activations and gradients.
ACT_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp8": "bfloat16"}


def gradient_bytes_per_param(dtype: str) -> int:
    """Bytes per gradient element the data-parallel reduction moves: 2 for fp16 training, 4 (fp32) for bf16
    and fp8 (Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16; fp8 training keeps bf16/fp32
    master weights and reduces fp32 gradients the same way)."""
    return 2 if dtype == "fp16" else 4


def elt(dtype: str) -> int:
    """Bytes per element of a collective dtype name."""
    return DTYPE_BYTES[dtype]


def padded(kind: CollectiveKind, nbytes: int, n: int, elt: int) -> int:
    """``nbytes`` rounded up to whole elements per rank for an all-gather or reduce-scatter of ``n`` ranks."""
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return ceil_div(nbytes, n * elt) * n * elt
    return nbytes


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


@dataclass(slots=True)
class Program:
    """The task list of one rank's program while it is built."""

    shared: dict  # task fields -> the one (frozen) task of those values
    tasks: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # tasks the next compute-stream task waits for
    computes: list = field(default_factory=list)  # indices of compute tasks, in order

    def _take_pending(self) -> tuple[int, ...]:
        after = tuple(sorted(set(self.pending)))
        self.pending.clear()
        return after

    def add_compute(self, work: Hashable, name: str) -> int:
        """A compute task doing ``work`` on the compute stream, after the pending tasks; returns its position."""
        self.tasks.append(self._compute_task(work, name, self._take_pending()))
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
    # by value and nothing mutates them). A compute task carries its work (a frozen record, compared by value),
    # not seconds, so equal keys mean equal tasks; their durations, resolved from the work, are then equal too.
    def _compute_task(self, work: Hashable, name: str, after: tuple[int, ...]) -> ComputeTask:
        key = (ComputeTask, work, name, after)
        task = self.shared.get(key)
        if task is None:
            task = self.shared[key] = ComputeTask(work=work, name=name, stream=STREAM_COMPUTE, after=after)
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
