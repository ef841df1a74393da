"""Tensor (and sequence) parallelism: the collectives of each layer's Megatron f/g operators. Pure data.

Per layer and micro-batch, with A = s b h D / c bytes (the layer's activation on one context rank):

* without sequence parallelism: 2 all-reduces of A in the forward and 2 in the backward (4 per layer and
  micro-batch), plus the 2 forward ones re-run by full recomputation;
* with sequence parallelism: forward 2 all-gathers + 2 reduce-scatters of A; backward 4 all-gathers (2 of
  gradients, 2 re-gathering the input for the weight gradient) + 2 reduce-scatters, run interleaved (AG,
  RS, AG, RS, AG, AG); full recomputation repeats the forward ones first
  (``ModelSpec.tp_collectives_per_layer``).

They sit on the compute stream after the layer's compute task: the next compute waits for them. Task
merging (``granularity="chunk"``) makes one collective per kind and chunk pass, of the summed bytes: bytes
are conserved and the per-collective latency is paid once instead of once per layer.

Worked number: s 2048, b 1, h 4096, bf16, t = 8 without SP: A = 2048 x 4096 x 2 = 16,777,216 B, so each layer
all-reduces 4 x 16 MiB = 64 MiB per micro-batch in its tensor group; a merged pass of a 4-layer chunk runs one
forward all-reduce of 4 x 2 x 16 MiB = 128 MiB.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from ..model import CommSize

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("TensorParallel",)


def _interleave(sizes: tuple[CommSize, ...]) -> list[CommSize]:
    """Per-layer collectives in execution order: one of each kind in turn (AG, RS, AG, RS, ...)."""
    out: list[CommSize] = []
    j = 0
    while any(j < s.count for s in sizes):
        out += [s for s in sizes if j < s.count]
        j += 1
    return out


class TensorParallel:
    """The tensor-parallel collectives of a build (sizes computed once per phase)."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self._sizes: dict[str, tuple[CommSize, ...]] = {}
        self._layer: dict[str, tuple[tuple[CommSize, str], ...]] = {}  # see layer_collectives

    def sizes(self, phase: str) -> tuple[CommSize, ...]:
        """One layer's collectives in ``phase`` (``ModelSpec.tp_collectives_per_layer``; empty for t = 1)."""
        b = self.b
        if b.spec.tp == 1:
            return ()
        if phase not in self._sizes:
            self._sizes[phase] = b.model.tp_collectives_per_layer(
                micro_batch=b.spec.micro_batch,
                seq_len=b.seq,
                tp=b.spec.tp,
                sp=b.spec.sp,
                cp=b.spec.cp,
                phase=phase,
                recompute=b.recompute,
            )
        return self._sizes[phase]

    def layer_collectives(self, phase: str) -> tuple[tuple[CommSize, str], ...]:
        """One layer's collectives in ``phase`` in execution order (:func:`_interleave`), each with the name of its
        task (computed once per phase)."""
        if phase not in self._layer:
            self._layer[phase] = tuple(
                (size, f"tp {size.kind.value.replace('_', '')}") for size in _interleave(self.sizes(phase))
            )
        return self._layer[phase]

    def emit(self, rp: _RankProgram, layers: list[int], phase: str, key: Hashable, label: str, merge: bool) -> None:
        """The collectives after the compute of ``layers`` (one pass), on ``rp``'s compute stream."""
        b = self.b
        n = len(layers)
        sizes = self.sizes(phase)
        tp_group = rp.group("tp") if sizes else ()
        if merge:
            merged: dict = {}
            for size in sizes:
                merged[size.kind] = merged.get(size.kind, 0) + size.nbytes * size.count * n
            for kind, nbytes in merged.items():
                ti = b.simple(
                    ("tp", key, kind.value, tp_group),
                    kind,
                    nbytes,
                    tp_group,
                    b.act_dtype,
                    "tp",
                    f"tp {kind.value} {label}",
                )
                rp.prog.add_comm(ti, f"tp {kind.value.replace('_', '')}")
        else:
            for layer in layers:
                for j, (size, task_name) in enumerate(self.layer_collectives(phase)):
                    ti = b.simple(
                        ("tp", key, layer, j, tp_group),
                        size.kind,
                        size.nbytes,
                        tp_group,
                        b.act_dtype,
                        "tp",
                        f"tp {size.name} layer{layer} {label}",
                    )
                    rp.prog.add_comm(ti, task_name)
