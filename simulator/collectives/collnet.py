"""CollNet / SHARP: all_reduce aggregated inside the InfiniBand fabric (NCCL's CollNetDirect).

The buffer is cut into sub-shards, one per local GPU q and NIC channel (like NVLSTree). For a
sub-shard owned by local GPU q:

1. every GPU of a server sends its copy to GPU q over NVLink, which adds them up (CollNetDirect:
   every GPU talks directly to the "NIC GPUs");
2. GPU q of every server sends the server's sum through its own NIC to its leaf switch, which
   aggregates all the servers it connects (SHARP); with more than one leaf on the rail, each
   leaf forwards its partial sum to one spine (the rail's aggregation root), which adds them;
3. the root sends the total back down the same tree to every server's GPU q;
4. GPU q copies it to the other GPUs of its server.

Every server's NIC carries each byte once up and once down (a ring carries 2(N-1)/N of it each
way), and the latency stays flat as servers are added (one switch tree, not N hops): the reason
SHARP exists. Aggregation runs at the switch's reduction efficiency (``SwitchSpec``).
Only enabled when asked for (NCCL_COLLNET_ENABLE=1) and when the fabric's switches are SHARP
capable. Resource limits of real SHARP (concurrent trees, jobs per switch) are not modelled.

Latency (tuning.cc, CollNetDirect, Simple): 2 (min(1, ppn-1) x 3.7 us + (ppn-1) x 0.4 us) + 31 us.
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule
from .base import LoweringContext, check_runnable, innet_chain_rate, innet_schedule, split_evenly

# hwLatencies[NVLINK][CollNetDirect][Simple], [NET][CollNetDirect][Simple], arity serialisation
# per local rank (tuning.cc, NCCL 2.30.7)
COLLNET_NVLINK_LATENCY_US = 3.7
COLLNET_NET_LATENCY_US = 31.0
COLLNET_ARITY_LATENCY_US = 0.4


class CollNetAlgorithm:
    name = "collnet"
    kinds = frozenset({CollectiveKind.ALL_REDUCE})
    protocols = ("Simple",)

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        layout = ctx.layout(collective.group)
        if layout.nnodes < 2:
            return "CollNet aggregates across servers (one server: nvls or ring)"
        if len({len(r) for r in layout.ranks_by_server}) != 1:
            return "CollNet needs the same number of GPUs on every server"
        graph = ctx.topology.graph
        for ranks in layout.ranks_by_server:
            for rank in ranks:
                info = ctx.topology.servers[ctx.server(rank)]
                if info.nic_of_gpu[ctx.local(rank)] < 0:
                    return f"GPU {ctx.gpu(rank)} has no NIC"
                if not graph.nodes[ctx.router.leaf_of(ctx.gpu(rank))].get("sharp", False):
                    return "the fabric's switches do not support SHARP in-network reduction"
        return None

    # ---- structure ---------------------------------------------------------------------------
    def _plan(self, collective: Collective, ctx: LoweringContext, nchannels: int):
        """Sub-shards: (owner local index, offset, count, leaves of the rail (per server), root)."""
        layout = ctx.layout(collective.group)
        nshards = layout.ppn * max(1, nchannels // layout.ppn)
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        count = split_evenly(elements, nshards)
        offset = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return [(q, int(offset[j]), int(count[j]), leaves, distinct, root)
                for j, (q, leaves, distinct, root) in enumerate(self._trees(collective, ctx, nshards))]

    def _trees(self, collective: Collective, ctx: LoweringContext, nshards: int):
        """Per sub-shard (size-independent): owner, each server's leaf, the distinct leaves, root."""
        def build():
            layout = ctx.layout(collective.group)
            shards = []
            for j in range(nshards):
                q = j % layout.ppn
                leaves = [ctx.router.leaf_of(ctx.gpu(ranks[q])) for ranks in layout.ranks_by_server]
                distinct = sorted(set(leaves))
                if len(distinct) == 1:
                    root = distinct[0]
                else:
                    spines = ctx.router.spines_above(distinct[0])
                    common = [s for s in spines if all(s in ctx.router.spines_above(l) for l in distinct)]
                    if not common:
                        raise ValueError("CollNet: the rail's leaves share no spine to aggregate at")
                    root = common[j % len(common)]
                shards.append((q, leaves, distinct, root))
            return shards
        return ctx.cached(("collnet-trees", collective.group, nshards), build)

    def _buffers(self, collective: Collective, ctx: LoweringContext, nchannels: int):
        """In-network buffer ids: up and down stage of every switch used, -> topology node."""
        switches = sorted({s for *_, distinct, root in self._plan(collective, ctx, nchannels) for s in (*distinct, root)})
        up = {s: -(2 * i + 1) for i, s in enumerate(switches)}
        down = {s: -(2 * i + 2) for i, s in enumerate(switches)}
        nodes = {**{b: s for s, b in up.items()}, **{b: s for s, b in down.items()}}
        return up, down, nodes

    def _stages(self, collective: Collective, ctx: LoweringContext, nchannels: int):
        """Logical steps: lists of (src, dst, offset, count, reduce, chain)."""
        layout = ctx.layout(collective.group)
        up, down, _ = self._buffers(collective, ctx, nchannels)
        stages = [[], [], [], [], [], []]
        for j, (q, off, cnt, leaves, distinct, root) in enumerate(self._plan(collective, ctx, nchannels)):
            for m, ranks in enumerate(layout.ranks_by_server):
                owner = ranks[q]
                stages[0] += [(p, owner, off, cnt, True, j) for p in ranks if p != owner]
                stages[1].append((owner, up[leaves[m]], off, cnt, True, j))
                stages[4].append((down[leaves[m]] if len(distinct) > 1 else up[root], owner, off, cnt, False, j))
                stages[5] += [(owner, p, off, cnt, False, j) for p in ranks if p != owner]
            if len(distinct) > 1:
                stages[2] += [(up[leaf], up[root], off, cnt, True, j) for leaf in distinct]
                stages[3] += [(up[root], down[leaf], off, cnt, False, j) for leaf in distinct]
        return [s for s in stages if s]

    def _latency_s(self, collective: Collective, ctx: LoweringContext) -> float:
        ppn = ctx.layout(collective.group).ppn
        return (2 * (min(1, ppn - 1) * COLLNET_NVLINK_LATENCY_US + (ppn - 1) * COLLNET_ARITY_LATENCY_US)
                + COLLNET_NET_LATENCY_US) * 1e-6

    def _efficiency(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> float:
        _, _, nodes = self._buffers(collective, ctx, nchannels)
        return min(ctx.topology.graph.nodes[n].get("reduction_efficiency", 1.0) for n in nodes.values())

    # ---- interface ---------------------------------------------------------------------------
    def _edges(self, collective: Collective, ctx: LoweringContext, nchannels: int):
        """(src, dst, elements, chain) of every edge of every stage."""
        return [(s, d, cnt, chain) for stage in self._stages(collective, ctx, nchannels)
                for s, d, _, cnt, _, chain in stage]

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        check_runnable(self.name, self.supported(collective, ctx), protocol, self.protocols)
        return innet_schedule(collective, algorithm=self.name, protocol=protocol, nchannels=nchannels,
                              edges=self._edges(collective, ctx, nchannels),
                              efficiency=self._efficiency(collective, ctx, nchannels),
                              innet_nodes=self._buffers(collective, ctx, nchannels)[2],
                              latency_s=self._latency_s(collective, ctx))

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        return tuple(DataStep.of([(s, d, off, cnt, off, red) for s, d, off, cnt, red, _ in stage])
                     for stage in self._stages(collective, ctx, nchannels))

    def estimate(self, collective: Collective, ctx: LoweringContext, *, protocol: str,
                 nchannels: int) -> tuple[float, float]:
        latency = self._latency_s(collective, ctx)
        if self.supported(collective, ctx) or protocol != "Simple":
            return latency, 0.0

        chain_rate, nshards = ctx.cached(("collnet-rate", collective.group, nchannels), lambda: innet_chain_rate(
            ctx, self._edges(collective, ctx, nchannels), self._buffers(collective, ctx, nchannels)[2],
            self._efficiency(collective, ctx, nchannels)))
        return latency, chain_rate * nshards


COLLNET = CollNetAlgorithm()
