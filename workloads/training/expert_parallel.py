"""Expert parallelism: the dispatch and combine all-to-alls of each MoE layer, and the expert tensor-parallel
all-gather and reduce-scatter between them. Pure data.

Per MoE layer and micro-batch a dispatch and a combine all-to-all forward (and again backward; twice more
under full recomputation), on the compute stream, of T k h D bytes sent per rank (T = b s / (c t) local
tokens, k experts per token; ``ModelSpec.ep_alltoall_bytes``). Even routing is nccl-tests' plain all-to-all
(every member sends 1/e of its buffer to each member). ``ep_imbalance`` x: the busiest member (member
``layer % e`` of the group) receives round((1 + x) E / e) elements of the E a sender sends, and the others
share the rest equally in whole elements; the combine sends that much back (the transposed matrix). The
extra expert compute of the busiest rank is not modelled (its compute time is the average's). Task merging
makes one all-to-all per chunk pass whose split matrix is the element-wise sum of the layers' matrices.

Expert tensor parallelism etp > 1 (``ParallelismSpec.etp``, t unless set): Megatron-Core's alltoall dispatcher
(moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess) all-gathers the
tokens a rank received over its expert tensor-parallel group after the dispatch and reduce-scatters the experts'
output before the combine: per pass a dispatch all-to-all, an all-gather and a reduce-scatter of etp T k h D
(the whole buffer, even: the imbalance is applied to the all-to-alls only) and a combine all-to-all, on the
compute stream, tagged "ep" (the expert layers' traffic); merged per chunk pass, one of each kind. With etp < t
each tensor rank dispatches its own sequence-parallel shard of T tokens (the dispatcher's input is the
sequence-parallel hidden state; no gather over the dense tensor group), and the all-to-all group crosses tensor
ranks (``ParallelismSpec.groups("ep")``).

Worked number: T k h D = 32 x 2 x 64 x 2 = 8,192 B per rank (b 1, s 32, k 2, h 64, bf16), e = 4, x = 0.5:
E = 4,096 elements; the busiest member gets round(1.5 x 4,096 / 4) = 1,536 elements (3,072 B) from every
sender, the other three (4,096 - 1,536) / 3 = 853 1/3: 854, 853, 853 elements (1,708, 1,706, 1,706 B).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ..collectives import Collective, CollectiveKind
from ..model import CommSize
from .common import elt

if TYPE_CHECKING:
    from .program import _Builder, _RankProgram

__all__ = ("ExpertParallel",)


def _matrix_collective(group: tuple[int, ...], matrix: Sequence[Sequence[int]], dtype: str) -> Collective:
    n = len(group)
    if len({b for row in matrix for b in row}) == 1:  # even: the plain all-to-all of nccl-tests
        return Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=matrix[0][0] * n, group=group, dtype=dtype)
    splits = tuple(tuple(int(b) for b in row) for row in matrix)
    return Collective(
        kind=CollectiveKind.ALL_TO_ALL, nbytes=max(sum(r) for r in splits), group=group, dtype=dtype, splits=splits
    )


class ExpertParallel:
    """The expert-parallel all-to-alls of a build (sizes computed once per layer and phase)."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self._sizes: dict[tuple[int, str], tuple[CommSize, ...]] = {}

    def sizes(self, layer: int, phase: str) -> tuple[CommSize, ...]:
        """Layer ``layer``'s all-to-alls in ``phase`` (``ModelSpec.ep_collectives_per_layer``; empty for e = 1)."""
        b = self.b
        if b.spec.ep == 1 and b.spec.expert_tp == 1:
            return ()
        key = (layer, phase)
        if key not in self._sizes:
            self._sizes[key] = b.model.ep_collectives_per_layer(
                layer,
                micro_batch=b.spec.micro_batch,
                seq_len=b.seq,
                tp=b.spec.tp,
                cp=b.spec.cp,
                ep=b.spec.ep,
                etp=b.spec.expert_tp,
                phase=phase,
                recompute=b.recompute,
            )
        return self._sizes[key]

    def matrix(self, nbytes: int, layer: int, combine: bool) -> tuple[tuple[int, ...], ...]:
        """Bytes member p sends member q in one dispatch (transposed for a combine). Every member sends the
        same row: the busiest member gets its share, the others the rest in whole elements."""
        spec = self.b.spec
        n, size = spec.ep, elt(self.b.act_dtype)
        elements = nbytes // size
        busiest = layer % n
        heavy = min(elements, int(round((1.0 + spec.ep_imbalance) * elements / n)))
        light, extra = divmod(elements - heavy, n - 1)
        others = [q for q in range(n) if q != busiest]
        row = [0] * n
        row[busiest] = heavy * size
        for j, q in enumerate(others):
            row[q] = (light + (1 if j < extra else 0)) * size
        if combine:
            return tuple((b,) * n for b in row)
        return (tuple(row),) * n

    def matrix_sum(self, sends: Sequence[tuple[int, int, bool]]) -> list[list[int]]:
        """Element-wise sum of :meth:`matrix` over ``sends``, a list of (nbytes, layer, combine)."""
        matrices = [self.matrix(*one) for one in sends]
        n = self.b.spec.ep
        return [[sum(mx[p][q] for mx in matrices) for q in range(n)] for p in range(n)]

    def emit(self, rp: _RankProgram, layers: list[int], phase: str, key: Hashable, label: str, merge: bool) -> None:
        """Per layer and (dispatch, combine) pair: the dispatch all-to-all, the expert-TP all-gather and
        reduce-scatter, the combine all-to-all (or, merged, one of each kind per chunk pass), on ``rp``'s compute
        stream; the send matrices are built only when the group's first member builds the collective."""
        b = self.b
        if b.spec.ep == 1 and b.spec.expert_tp == 1:
            return
        ep_group = rp.group("ep") if b.spec.ep > 1 else ()
        etp_group = rp.group("etp") if b.spec.expert_tp > 1 else ()
        # in execution order: (what, kind, nbytes, layer, combine); per layer and (dispatch, combine) pair the
        # dispatch all-to-all, the expert-TP all-gather and reduce-scatter, the combine all-to-all
        order: list[tuple[str, CollectiveKind, int, int, bool]] = []
        for layer in layers:
            sizes = self.sizes(layer, phase)
            a2a = [size for size in sizes if size.group == "ep"]
            etp = [size for size in sizes if size.group == "etp"]
            pairs = a2a[0].count // 2 if a2a else etp[0].count if etp else 0
            for _ in range(pairs):
                order += [("a2a", size.kind, size.nbytes, layer, False) for size in a2a]
                order += [(size.name, size.kind, size.nbytes, layer, False) for size in etp]
                order += [("a2a", size.kind, size.nbytes, layer, True) for size in a2a]
        if merge:  # one collective of each kind per chunk pass
            kinds = ("a2a", "etp_allgather", "etp_reducescatter")
            batches = [batch for what in kinds if (batch := [one for one in order if one[0] == what])]
        else:
            batches = [[one] for one in order]
        j = k = 0
        for batch in batches:
            what, kind = batch[0][:2]
            if what == "a2a":
                sends = [(nbytes, layer, combine) for _, _, nbytes, layer, combine in batch]

                def make(sends: list[tuple[int, int, bool]] = sends) -> Collective:
                    return _matrix_collective(ep_group, self.matrix_sum(sends), b.act_dtype)

                ei = b.collective(("ep", key, j, ep_group), make, "ep", f"ep alltoall {label}")
                rp.prog.add_comm(ei, "ep alltoall")
                j += 1
            else:
                nbytes = sum(one[2] for one in batch)
                ti = b.simple(("etp", key, k, etp_group), kind, nbytes, etp_group, b.act_dtype, "ep", f"{what} {label}")
                rp.prog.add_comm(ti, what.replace("_", " "))
                k += 1
