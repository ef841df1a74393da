"""Context parallelism: ring attention's exchange of K and V between the c ranks of a context group. Pure data.

Each ring step passes the local K and V block to the next rank: 2 b (s/c) g d D / t bytes (g KV heads of
d dims, ``ModelSpec.cp_kv_bytes``), a ``sendrecv`` of the cp group. A layer runs c - 1 steps forward and
2(c - 1) backward (KV again, then dK and dV), plus c - 1 more under full recomputation
(``ModelSpec.cp_collectives_per_layer``). The steps run on stream 3, issued when the layer's compute starts;
the layer's next compute-stream task waits for them: the exchange overlaps the layer's compute (a layer
costs max(compute, exchange)), an optimistic bound of ring attention, which overlaps step i+1's transfer with
step i's attention only. Task merging makes one sendrecv per chunk pass carrying all its steps' bytes.

Worked number: s 8192, b 1, c 4, t 1, g d = 8 x 128 = 1024, bf16: one step moves 2 x 2048 x 1024 x 2 =
8,388,608 B (8 MiB); a layer runs 3 steps forward (24 MiB) and 6 backward (48 MiB) per micro-batch.

Other exchanges (``ParallelismSpec.cp_comm_type``, Megatron-Core --cp-comm-type, Transformer Engine's
implementations; ``ModelSpec.cp_collectives_per_layer`` gives the sizes): "a2a" (DeepSpeed-Ulysses: all-to-alls of
Q, K, V before attention and of the output after it, heads split over the context ranks instead of the sequence)
and "allgather" (TE's AttnFuncWithCPAndKVAllGather: "KV all-gather between CP ranks is exposed"; the backward
gathers K and V again and reduce-scatters dK, dV). Both block the attention: every tensor rank runs its own on
the compute stream after the pass's compute (bytes and time additive; where inside the pass they fall is
ignored, as the overlap TE gets between the Q, K and V all-to-alls on two streams). Worked number, same layer,
"allgather": 4 x 8 MiB = 32 MiB gathered forward; "a2a" with a d = 4096: Q = 2048 x 4096 x 2 = 16 MiB, so
all-to-alls of 16 + 8 = 24 MiB and 16 MiB forward.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from ..model import CommSize
from .common import STREAM_CP

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("ContextParallel",)


class ContextParallel:
    """The context-parallel ring of a build (sizes computed once per phase)."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self._sizes: dict[str, tuple[CommSize, ...]] = {}

    def sizes(self, phase: str) -> tuple[CommSize, ...]:
        """One layer's ring steps in ``phase`` (``ModelSpec.cp_collectives_per_layer``; empty for c = 1)."""
        b = self.b
        if b.spec.cp == 1:
            return ()
        if phase not in self._sizes:
            self._sizes[phase] = b.model.cp_collectives_per_layer(
                micro_batch=b.spec.micro_batch,
                seq_len=b.seq,
                tp=b.spec.tp,
                cp=b.spec.cp,
                phase=phase,
                recompute=b.recompute,
                comm_type=str(b.spec.cp_comm_type),
            )
        return self._sizes[phase]

    def emit(
        self,
        rp: _RankProgram,
        layers: list[int],
        phase: str,
        key: Hashable,
        label: str,
        merge: bool,
        start_after: tuple[int, ...],
    ) -> None:
        """The ring steps of ``layers`` (one pass) on stream 3, after ``start_after`` (the task before the pass's
        compute); the next compute-stream task waits for them."""
        b = self.b
        n = len(layers)
        cp_sizes = self.sizes(phase)
        # ring steps run beside the compute (tensor rank 0's may stand for the others'); the other exchanges block
        # it, every tensor rank its own, as Transformer Engine runs them
        ring = b.spec.cp_comm_type == "p2p"
        if not cp_sizes or (ring and b.tensor_rank0_p2p and not rp.ask("first", "tp")):
            return  # no exchange, or tensor rank 0's ring stands for this one
        cp_group = rp.group("cp")
        weight = b.spec.tp if ring and b.tensor_rank0_p2p else 1
        for size in cp_sizes:
            counts = [size.count * n] if merge else [1] * (size.count * n)
            for j, count in enumerate(counts):
                name = f"cp kv {label}" if ring else f"cp {size.name} {label}"
                ci = b.simple(
                    ("cp", key, size.name, j, cp_group),
                    size.kind,
                    size.nbytes * count,
                    cp_group,
                    b.act_dtype,
                    "cp",
                    name,
                    weight,
                )
                if ring:
                    rp.prog.pending.append(rp.prog.side(ci, name, STREAM_CP, start_after))
                else:
                    rp.prog.add_comm(ci, f"cp {size.name}")
