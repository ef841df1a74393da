"""The training step's options as string enums: a member equals its name as a string
(``PipelineSchedule.ONE_F_ONE_B == "1f1b"``), so code comparing with the plain names keeps working; the edges
(ParallelismSpec, simulate_step, the CLI) turn a name into its member with ``topologies.checks.option``, which
rejects anything else with one message naming the field and the allowed names.

>>> from topologies.checks import option
>>> option("recompute", "selective", Recompute) is Recompute.SELECTIVE
True
>>> [str(d) for d in Dtype]
['bf16', 'fp16', 'fp8']
"""

from __future__ import annotations

import enum

from topologies.checks import Option

__all__ = ("Dtype", "PipelineSchedule", "Recompute", "Granularity", "names")


class Dtype(Option):
    """Training precision of weights and activations."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class PipelineSchedule(Option):
    ONE_F_ONE_B = "1f1b"  # PipeDream-Flush / Megatron 1F1B
    GPIPE = "gpipe"  # all forwards, then all backwards
    INTERLEAVED = "interleaved"  # Megatron interleaved 1F1B (vp model chunks per stage)


class Recompute(Option):
    """Activation recomputation (model.py: what each recomputes and keeps)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class Granularity(Option):
    """Tasks of a training step: one per layer, or one per model-chunk pass (bytes and compute conserved)."""

    LAYER = "layer"
    CHUNK = "chunk"


def names(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """The members' names as plain strings, in order (for argparse choices and tables of names)."""
    return tuple(m.value for m in kind)
