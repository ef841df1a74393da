"""What a compute task of the step computes (:class:`PassWork`) and the table that times it on one GPU
(:class:`StepCompute`). Pure data.

A training program is built without hardware: each compute task carries a :class:`PassWork`, the passes of
one micro-batch it runs (a forward or backward of some transformer layers, the embedding, the logits, in
execution order), or one stage's optimizer step, and whether it runs beside communication. A GPU's compute
model (``simulator.compute.gpu``, called by ``simulator.studies.training.step_compute``) times every layer,
the embedding, the logits and each stage's optimizer once per micro-batch: that is a :class:`StepCompute`,
a per-program duration lookup. :func:`resolve` gives every compute task the seconds of its work, so the
engine reads plain durations. The sums follow the order in which the passes run::

    forward   sum(layer_forward_s[l] for l in layers) + (embedding_forward_s [if embedding] + logits_forward_s [if
              logits])
    backward  (sum(layer_backward_s[l] for l in layers) + logits_backward_s [if logits]) + embedding_backward_s
              [if embedding]
    optimizer optimizer_s[stage] (0 s when optimizer_s is empty)
    wgrad     logits_wgrad_s (a deferred output-layer weight gradient; a backward with defer_logits_wgrad leaves it
              out of its logits_backward_s)

and a task beside communication takes (1 + overlap_slowdown) x that (``StepCompute.overlap_slowdown``;
an upper bound: the kernels are assumed to overlap a communication kernel for their whole duration). Which
tasks run beside communication is decided by the program: backward tasks of the last micro-batch issued after
the rank's first overlapped gradient bucket, and with ZeRO-3 every forward and backward task.

Worked number: a merged forward of layers 0-1 of chunk 0 (embedding included) with layer_forward_s = (1 ms,
1 ms), embedding_forward_s = 0.3 ms takes 1 + 1 + (0.3 + 0) = 2.3 ms; beside communication with
overlap_slowdown 0.25 it takes 2.3 x 1.25 = 2.875 ms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from topologies.checks import finite_nonnegative, integer, reject

from ..tasks import Workload

if TYPE_CHECKING:
    from .common import TrainingWorkload

__all__ = ("PassWork", "StepCompute", "resolve")

PHASES = ("forward", "backward", "optimizer", "wgrad")


@dataclass(frozen=True, slots=True, kw_only=True)
class PassWork:
    """What one compute task of a training step runs, for one micro-batch, hardware-independent.

    ``phase`` "forward" or "backward": the passes of ``layers`` (transformer layers, in execution order), with
    the ``embedding`` and the ``logits`` (final norm + output layer + loss) when set; "optimizer": the
    optimizer step of pipeline ``stage``'s weights (its shard of them under ZeRO). ``beside_comm``: the task
    runs beside communication kernels (StepCompute.overlap_slowdown stretches it). ``flops``: the matrix
    FLOPs of the work on one GPU (forward: ``ModelSpec.layer_forward_flops`` of each layer plus
    ``logits_flops``; backward: twice that plus the recomputed forward work, ``layer_recompute_flops``; 0 for
    the embedding look-up and the optimizer), a description: the duration comes from the compute model,
    which also counts memory-bound kernels. "wgrad": one micro-batch's output-layer weight-gradient GEMM, deferred
    from its backward (``defer_logits_wgrad``; ParallelismSpec.defer_embedding_wgrad_compute).
    """

    phase: str
    layers: tuple[int, ...] = ()
    embedding: bool = False
    logits: bool = False
    stage: int = 0
    beside_comm: bool = False
    flops: float = 0.0
    # backward with ``logits``: the output layer's weight-gradient GEMM left out (run later by a "wgrad" task)
    defer_logits_wgrad: bool = False

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise reject("PassWork.phase", self.phase, f"one of {', '.join(map(repr, PHASES))}")

    @property
    def kind(self) -> str:
        """The compute model's kernel kind of the work when it is one kind (``simulator.compute.gpu.OP_KINDS``):
        "optimizer" for an optimizer step, "mixed" for passes (GEMMs, attention and element-wise kernels)."""
        return "optimizer" if self.phase == "optimizer" else "mixed"


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
    logits_wgrad_s: float = 0.0  # the output layer's weight-gradient GEMM, part of logits_backward_s

    def __post_init__(self) -> None:
        for name in ("layer_forward_s", "layer_backward_s", "optimizer_s"):
            value = tuple(getattr(self, name))
            object.__setattr__(
                self, name, tuple(finite_nonnegative(f"StepCompute.{name}[{i}]", v) for i, v in enumerate(value))
            )
        if len(self.layer_forward_s) != len(self.layer_backward_s) or not self.layer_forward_s:
            raise reject(
                "StepCompute.layer_backward_s",
                f"{len(self.layer_backward_s)} entries",
                f"one per layer, as many as layer_forward_s ({len(self.layer_forward_s)}), at least one",
            )
        for name in (
            "embedding_forward_s",
            "embedding_backward_s",
            "logits_forward_s",
            "logits_backward_s",
            "logits_wgrad_s",
        ):
            object.__setattr__(self, name, finite_nonnegative(f"StepCompute.{name}", getattr(self, name)))
        if self.logits_wgrad_s > self.logits_backward_s:
            raise reject(
                "StepCompute.logits_wgrad_s",
                self.logits_wgrad_s,
                f"at most logits_backward_s ({self.logits_backward_s}): the weight-gradient GEMM is part of it",
            )
        object.__setattr__(
            self,
            "overlap_slowdown",
            finite_nonnegative("StepCompute.overlap_slowdown", self.overlap_slowdown, "a finite number >= 0"),
        )

    @classmethod
    def uniform(
        cls,
        *,
        layers: int,
        forward_s: float,
        backward_s: float,
        embedding_forward_s: float = 0.0,
        embedding_backward_s: float = 0.0,
        logits_forward_s: float = 0.0,
        logits_backward_s: float = 0.0,
        optimizer_s: tuple[float, ...] = (),
        overlap_slowdown: float = 0.0,
    ) -> StepCompute:
        """Every layer takes ``forward_s`` / ``backward_s`` (handy for hand-derived schedules); the other fields
        as given."""
        layers = integer("StepCompute.uniform.layers", layers, low=1)
        return cls(
            layer_forward_s=(forward_s,) * layers,
            layer_backward_s=(backward_s,) * layers,
            embedding_forward_s=embedding_forward_s,
            embedding_backward_s=embedding_backward_s,
            logits_forward_s=logits_forward_s,
            logits_backward_s=logits_backward_s,
            optimizer_s=optimizer_s,
            overlap_slowdown=overlap_slowdown,
        )

    def duration_s(self, work: PassWork) -> float:
        """Seconds of ``work`` (the sums of the module docstring, in that order).

        >>> c = StepCompute(layer_forward_s=(1e-3, 1e-3), layer_backward_s=(2e-3, 2e-3), embedding_forward_s=3e-4,
        ...                 overlap_slowdown=0.25)
        >>> round(c.duration_s(PassWork(phase="forward", layers=(0, 1), embedding=True, beside_comm=True)), 12)
        0.002875
        """
        if work.phase == "optimizer":
            seconds = self.optimizer_s[work.stage] if self.optimizer_s else 0.0
        elif work.phase == "wgrad":
            seconds = self.logits_wgrad_s
        elif work.phase == "forward":
            seconds = sum(self.layer_forward_s[layer] for layer in work.layers)
            seconds += (self.embedding_forward_s if work.embedding else 0.0) + (
                self.logits_forward_s if work.logits else 0.0
            )
        else:
            seconds = sum(self.layer_backward_s[layer] for layer in work.layers)
            if work.logits:
                seconds += self.logits_backward_s - (self.logits_wgrad_s if work.defer_logits_wgrad else 0.0)
            seconds += self.embedding_backward_s if work.embedding else 0.0
        return seconds * (1.0 + self.overlap_slowdown) if work.beside_comm else seconds

    def check(self, *, layers: int, pp: int, model_name: str = "the model") -> StepCompute:
        """This table if it times a model of ``layers`` layers on ``pp`` stages, else the error naming the field."""
        if len(self.layer_forward_s) != layers:
            raise reject(
                "compute.layer_forward_s",
                f"{len(self.layer_forward_s)} entries",
                f"one per layer of {model_name} ({layers})",
            )
        if self.optimizer_s and len(self.optimizer_s) != pp:
            raise reject(
                "compute.optimizer_s", f"{len(self.optimizer_s)} entries", f"one per pipeline stage ({pp}) or none"
            )
        return self


@overload
def resolve(training: Workload, compute: StepCompute) -> Workload: ...
@overload
def resolve(training: TrainingWorkload, compute: StepCompute) -> TrainingWorkload: ...
def resolve(training: Workload | TrainingWorkload, compute: StepCompute) -> Workload | TrainingWorkload:
    """``training`` (a TrainingWorkload or a Workload) with every compute task carrying a PassWork given its
    seconds on ``compute``; ranks that shared a program object still share one."""
    if isinstance(training, Workload):
        return training.with_durations(compute.duration_s)
    return dataclasses.replace(training, workload=training.workload.with_durations(compute.duration_s))
