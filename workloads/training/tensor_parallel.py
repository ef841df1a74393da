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

TP communication overlap (``ParallelismSpec.tp_comm_overlap``, Megatron-Core ``--tp-comm-overlap``, Transformer
Engine's userbuffers; sequence parallelism required). Each sequence-parallel collective is paired with the GEMM
it feeds or drains and split into chunks that run while the GEMM runs (TE ``initialize_ub`` default methods,
``TP_OVERLAP``):

* ``ring_exchange`` (the all-gathers before the QKV and FC1 GEMMs, and of the output gradient before the proj
  and FC2 data-gradient GEMMs): t steps; step k multiplies the chunk that arrived in step k - 1 while the next
  one travels, the local chunk first, so no chunk waits when a transfer is shorter than a GEMM chunk: nothing
  exposed;
* ``pipeline`` (the reduce-scatters after the proj and FC2 GEMMs): the GEMM in ``num_splits`` = 4 chunks, the
  reduce-scatter of chunk k beside GEMM chunk k + 1: the last chunk's reduce-scatter, 1/4 of the bytes, is
  exposed after the GEMM;
* ``bulk`` (backward of QKV and FC1): the all-gather of the layer input for the weight gradient beside the
  data-gradient GEMM, the reduce-scatter of the data gradient beside the weight-gradient GEMM: nothing exposed.

In the program the overlapped part of every collective of a pass runs on stream 8, issued when the pass's compute
starts, and the next compute-stream task waits for it; the exposed chunks run on the compute stream after the
compute. Bytes are conserved (overlapped + exposed = the collective's bytes, the exposed chunk rounded up to whole
elements). Ignored: that a collective can hide only behind its own GEMM, not the whole pass (the pass costs
max(compute, overlapped communication) + exposed chunks: optimistic when a collective outlasts its GEMM; on
NVLink it does not: Llama 3.1 70B, t 4, c 2, an all-gather of 4096 x 8192 x 2 B = 64 MiB moves 48 MiB per rank,
~0.14 ms at ~350 GB/s, against 0.26 ms for the QKV GEMM of 2 x 4096 x 8192 x 2560 FLOP at ~650 TFLOP/s); the
latency of TE's p2p steps (modelled as one collective per part); copy-engine transfers modelled as NCCL's. The SMs
the communication kernels hold stretch the paired GEMMs (``num_sm`` of ``TP_OVERLAP``; applied by the compute
model, ``simulator.studies.training.step_compute``).

Worked number (overlap): forward of one layer with the all-gathers of A and the reduce-scatters of A: each
all-gather wholly on stream 8, each reduce-scatter as 3A/4 on stream 8 and A/4 on the compute stream after the
pass: 2A + 2 x 3A/4 = 3.5A overlapped, A/2 exposed, 4A in all.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..collectives import CollectiveKind
from ..model import CommSize, ceil_div
from .common import STREAM_TP, elt

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("TensorParallel", "TpOverlap", "TP_OVERLAP", "TP_OVERLAP_FORWARD", "TP_OVERLAP_BACKWARD")


@dataclass(frozen=True, slots=True)
class TpOverlap:
    """How Transformer Engine overlaps one sequence-parallel collective with one GEMM: ``method``
    ("ring_exchange", "pipeline" or "bulk"), the collective ``kind``, the ``gemm`` it runs beside (a
    ``ModelSpec.layer_gemms`` name, ``.dgrad``/``.wgrad`` for the backward GEMMs), the SMs its kernels hold
    (``num_sm``) and, for "pipeline", the GEMM chunks (``num_splits``; the last chunk's collective is exposed)."""

    method: str
    kind: CollectiveKind
    gemm: str
    num_sm: int
    num_splits: int = 1

    @property
    def exposed_share(self) -> float:
        """The share of the collective's bytes left after its GEMM: 1/num_splits for "pipeline", else 0."""
        return 1.0 / self.num_splits if self.method == "pipeline" else 0.0


_AG, _RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
# Transformer Engine's defaults for Megatron-Core --tp-comm-overlap without a config file: ``initialize_ub`` in
# transformer_engine/pytorch/module/base.py: methods {"ring_exchange": [qkv_fprop, fc1_fprop, proj_dgrad,
# fc2_dgrad], "pipeline": [proj_fprop, fc2_fprop], "bulk": [qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad]};
# get_default_config: num_sm 1 for ring_exchange (its transfers use the copy engines, use_ce=True), 16 otherwise;
# num_splits 4 for pipeline; the all-gather overlaps are qkv/fc1 fprop, proj/fc2 dgrad, qkv/fc1 dgrad (the layer
# input gathered again for the weight gradient), the reduce-scatters proj/fc2 fprop and qkv/fc1 wgrad (beside
# which the data gradient is reduce-scattered). NeMo's H100 recipes tune num_sm per model (e.g.
# userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192: proj_fprop 24 SMs, fc2_fprop 16, bulk 2-24,
# nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py); the defaults serve every model here.
TP_OVERLAP = {
    "qkv_fprop": TpOverlap("ring_exchange", _AG, "qkv", 1),
    "proj_fprop": TpOverlap("pipeline", _RS, "attn_proj", 16, 4),
    "fc1_fprop": TpOverlap("ring_exchange", _AG, "mlp_up", 1),
    "fc2_fprop": TpOverlap("pipeline", _RS, "mlp_down", 16, 4),
    "fc2_dgrad": TpOverlap("ring_exchange", _AG, "mlp_down.dgrad", 1),
    "fc1_dgrad": TpOverlap("bulk", _AG, "mlp_up.dgrad", 16),
    "fc1_wgrad": TpOverlap("bulk", _RS, "mlp_up.wgrad", 16),
    "proj_dgrad": TpOverlap("ring_exchange", _AG, "attn_proj.dgrad", 1),
    "qkv_dgrad": TpOverlap("bulk", _AG, "qkv.dgrad", 16),
    "qkv_wgrad": TpOverlap("bulk", _RS, "qkv.wgrad", 16),
}
"""TE's overlap of each sequence-parallel collective of a layer, by TE's name for it."""
# the collectives of one layer pass in execution order: forward (also recomputed in the backward under full
# recomputation), and backward, FC2 first (its data gradient needs the gathered output gradient; FC1's weight
# gradient the gathered input, beside FC1's data gradient, whose output is reduce-scattered beside the weight
# gradient), then the attention block alike
TP_OVERLAP_FORWARD = ("qkv_fprop", "proj_fprop", "fc1_fprop", "fc2_fprop")
TP_OVERLAP_BACKWARD = ("fc2_dgrad", "fc1_dgrad", "fc1_wgrad", "proj_dgrad", "qkv_dgrad", "qkv_wgrad")


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
        self._overlap: dict[str, tuple[tuple[str, CommSize, int], ...]] = {}  # see overlapped

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

    def overlapped(self, phase: str) -> tuple[tuple[str, CommSize, int], ...]:
        """With ``tp_comm_overlap``: one layer's collectives in ``phase`` in execution order, each as (TE's name for
        it, its size, its exposed bytes: ``TpOverlap.exposed_share`` of it rounded up to whole elements)."""
        if phase in self._overlap:
            return self._overlap[phase]
        sizes = self.sizes(phase)
        # forward collectives (those of a forward pass, and those a full recomputation re-runs in the backward)
        # first, then the backward's, each list in the order TE runs them
        again = [c for c in sizes if phase == "forward" or c.name.startswith("recompute_")]
        rest = [c for c in sizes if c not in again]
        unit = elt(self.b.act_dtype)
        out = []
        for found, names in ((again, TP_OVERLAP_FORWARD), (rest, TP_OVERLAP_BACKWARD)):
            if not found:
                continue
            by_kind = {c.kind: c for c in found}
            for kind, size in by_kind.items():
                if sum(TP_OVERLAP[n].kind is kind for n in names) != size.count:
                    raise RuntimeError(f"tp_comm_overlap: {size.count} {size.name} per layer where TE overlaps {names}")
            for name in names:
                how = TP_OVERLAP[name]
                size = by_kind[how.kind]
                exposed = ceil_div(size.nbytes, how.num_splits * unit) * unit if how.exposed_share else 0
                out.append((name, size, exposed))
        self._overlap[phase] = tuple(out)
        return self._overlap[phase]

    def emit(
        self,
        rp: _RankProgram,
        layers: list[int],
        phase: str,
        key: Hashable,
        label: str,
        merge: bool,
        start_after: tuple[int, ...] = (),
    ) -> None:
        """The collectives after the compute of ``layers`` (one pass), on ``rp``'s compute stream; with
        ``tp_comm_overlap`` their overlapped parts on stream 8 after ``start_after`` (the task before the pass's
        compute), the exposed chunks on the compute stream."""
        b = self.b
        n = len(layers)
        sizes = self.sizes(phase)
        tp_group = rp.group("tp") if sizes else ()
        if sizes and b.spec.tp_comm_overlap:
            self._emit_overlapped(rp, layers, phase, key, label, merge, start_after, tp_group)
            return
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

    def _emit_overlapped(
        self,
        rp: _RankProgram,
        layers: list[int],
        phase: str,
        key: Hashable,
        label: str,
        merge: bool,
        start_after: tuple[int, ...],
        tp_group: tuple[int, ...],
    ) -> None:
        """``emit`` with TE's overlap: every collective's overlapped part on stream 8 (the next compute-stream task
        waits for them), then its exposed chunk, if any, on the compute stream; merged per kind and part over the
        pass with ``merge``."""
        b = self.b
        parts: list[tuple[Hashable, CollectiveKind, int, str, bool]] = []  # (key, kind, bytes, name, exposed)
        if merge:
            totals: dict[tuple[bool, CollectiveKind], int] = {}
            for _, size, exposed in self.overlapped(phase):
                for tail, nbytes in ((False, size.nbytes - exposed), (True, exposed)):
                    totals[tail, size.kind] = totals.get((tail, size.kind), 0) + nbytes * len(layers)
            for (tail, kind), nbytes in sorted(totals.items(), key=lambda e: (e[0][0], e[0][1].value)):
                what = "exposed chunk" if tail else "overlapped"
                parts.append((("tp", key, kind.value, tail, tp_group), kind, nbytes, f"tp {kind.value} {what}", tail))
        else:
            for layer in layers:
                for j, (name, size, exposed) in enumerate(self.overlapped(phase)):
                    for tail, nbytes in ((False, size.nbytes - exposed), (True, exposed)):
                        what = "exposed chunk" if tail else "overlapped"
                        parts.append(
                            (
                                ("tp", key, layer, j, tail, tp_group),
                                size.kind,
                                nbytes,
                                f"tp {name} layer{layer} {what}",
                                tail,
                            )
                        )
        for part_key, kind, nbytes, name, tail in sorted(parts, key=lambda p: p[4]):  # overlapped parts first
            if nbytes == 0:
                continue
            ti = b.simple(part_key, kind, nbytes, tp_group, b.act_dtype, "tp", f"{name} {label}")
            task_name = f"tp {kind.value.replace('_', '')}" + (" exposed" if tail else " overlapped")
            if tail:
                rp.prog.add_comm(ti, task_name)
            else:
                rp.prog.pending.append(rp.prog.side(ti, task_name, STREAM_TP, start_after))
