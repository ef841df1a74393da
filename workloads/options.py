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

__all__ = ("Dtype", "PipelineSchedule", "Recompute", "Granularity", "CpCommType", "names")


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


class CpCommType(Option):
    """How context parallelism exchanges keys and values (Megatron-Core --cp-comm-type, Transformer Engine's
    attention with context parallelism): ring p2p (the default), all-to-all (Ulysses) or a K/V all-gather."""

    P2P = "p2p"  # ring attention: c - 1 K/V send/receives overlapped with the attention steps
    A2A = "a2a"  # all-to-all of Q, K, V to split heads instead of the sequence, and of the output back
    ALLGATHER = "allgather"  # K and V all-gathered before attention (exposed), dK and dV reduce-scattered


def names(kind: type[enum.StrEnum]) -> tuple[str, ...]:
    """The members' names as plain strings, in order (for argparse choices and tables of names)."""
    return tuple(m.value for m in kind)
