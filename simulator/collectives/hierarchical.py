"""Hierarchical two-level all_reduce: reduce-scatter inside servers, all-reduce across, all-gather inside.

1. every server runs a ring reduce_scatter over its GPUs: local GPU q ends with piece q (S/ppn)
   summed over the server;
2. for every q, the GPUs q of all servers run a ring all_reduce of piece q (one rail each, so the
   network carries 2 (N-1)/N x S/ppn per GPU: the whole network sees each byte twice, not
   2(n-1)/n times as in a flat ring over n = N ppn ranks);
3. every server runs a ring all_gather, so each GPU ends with the whole sum.

The three stages run one after the other (no overlap), each a step of the sub-rings' chains.
Latencies: the sub-rings' NCCL ring latencies, per stage the largest. Not an NCCL algorithm
(NCCL's NVLSTree/CollNet are its hierarchical forms); here to compare designs. The buffer must
split into ppn equal pieces of whole elements.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import AlgorithmDefaults, LoweringContext, check_runnable, protocol_schedule
from .ring import RING


class Hierarchical(AlgorithmDefaults):
    name = "hierarchical"
    kinds = frozenset({CollectiveKind.ALL_REDUCE})
    protocols = nccl_model.PROTOCOLS
    auto = False

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        layout = ctx.layout(collective.group)
        if len({len(r) for r in layout.ranks_by_server}) != 1:
            return "hierarchical needs the same number of GPUs on every server"
        if collective.nbytes % (layout.ppn * DTYPE_BYTES[collective.dtype]):
            return (
                f"hierarchical needs the buffer ({collective.nbytes} B) to split into {layout.ppn} pieces of whole "
                f"{collective.dtype} elements"
            )
        return None

    def _stages(self, collective: Collective, ctx: LoweringContext) -> list[list[tuple[Collective, int]]]:
        """Per stage: list of (sub-collective, element offset of its buffer)."""
        layout = ctx.layout(collective.group)
        piece = collective.nbytes // layout.ppn
        elt = DTYPE_BYTES[collective.dtype]

        def sub(kind: CollectiveKind, group: Sequence[int], nbytes: int) -> Collective:
            return Collective(kind=kind, nbytes=nbytes, group=tuple(group), dtype=collective.dtype, op=collective.op)

        stage_a = [
            (sub(CollectiveKind.REDUCE_SCATTER, ranks, collective.nbytes), 0) for ranks in layout.ranks_by_server
        ]
        stage_b = (
            [
                (
                    sub(CollectiveKind.ALL_REDUCE, [ranks[q] for ranks in layout.ranks_by_server], piece),
                    q * piece // elt,
                )
                for q in range(layout.ppn)
            ]
            if layout.nnodes > 1
            else []
        )
        stage_c = [(sub(CollectiveKind.ALL_GATHER, ranks, collective.nbytes), 0) for ranks in layout.ranks_by_server]
        return [s for s in (stage_a, stage_b, stage_c) if s and all(c.nranks > 1 for c, _ in s)]

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        check_runnable(self.name, self.supported(collective, ctx), protocol, self.protocols)
        steps = []
        for stage in self._stages(collective, ctx):
            # sub-rings on the collective's own channels (as in program), not NCCL's launch for their size
            parts = [
                RING.lower_on(c, ctx, protocol=protocol, nchannels=nchannels, comm_channels=nchannels).steps[0]
                for c, _ in stage
            ]
            offsets = np.cumsum([0] + [int(p.chain.max()) + 1 if p.num_flows else 0 for p in parts])[:-1]
            steps.append(
                Step.of(
                    src=np.concatenate([p.src for p in parts]),
                    dst=np.concatenate([p.dst for p in parts]),
                    nbytes=np.concatenate([p.nbytes for p in parts]),
                    channel=np.concatenate([p.channel for p in parts]),
                    chain=np.concatenate([p.chain + o for p, o in zip(parts, offsets)]),
                    latency_s=max(p.latency_s for p in parts),
                    proxy_s=max(p.proxy_s for p in parts),
                    label="hierarchical",
                    fill_bytes=np.concatenate(
                        [np.zeros(p.num_flows) if p.fill_bytes is None else p.fill_bytes for p in parts]
                    ),
                )
            )
        return protocol_schedule(
            collective, ctx, algorithm=self.name, protocol=protocol, nchannels=nchannels, steps=tuple(steps)
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        out = []
        for stage in self._stages(collective, ctx):
            programs = [(RING.program(c, ctx, nchannels=nchannels), offset) for c, offset in stage]
            for i in range(max(len(p) for p, _ in programs)):  # sub-rings of a stage advance together
                parts = [(p[i], offset) for p, offset in programs if i < len(p)]
                out.append(
                    DataStep(
                        src=np.concatenate([s.src for s, _ in parts]),
                        dst=np.concatenate([s.dst for s, _ in parts]),
                        src_offset=np.concatenate([s.src_offset + o for s, o in parts]),
                        dst_offset=np.concatenate([s.dst_offset + o for s, o in parts]),
                        count=np.concatenate([s.count for s, _ in parts]),
                        reduce=np.concatenate([s.reduce for s, _ in parts]),
                    )
                )
        return tuple(out)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        if self.supported(collective, ctx):
            return 0.0, 0.0
        latency, time_s = 0.0, 0.0
        for stage in self._stages(collective, ctx):
            results = [RING.estimate(c, ctx, protocol=protocol, nchannels=nchannels) for c, _ in stage]
            latency += max(r[0] for r in results)
            time_s += max(c.nbytes / r[1] for (c, _), r in zip(stage, results) if r[1] > 0)
        return latency, (collective.nbytes / time_s if time_s > 0 else float("inf"))


HIERARCHICAL = Hierarchical()
