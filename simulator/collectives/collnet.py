"""CollNet / SHARP: all_reduce aggregated inside the InfiniBand fabric (NCCL's CollNetDirect).

The buffer is cut into sub-shards, one per local GPU q and NIC channel (like NVLSTree). For a
sub-shard owned by local GPU q:

1. every GPU of a server sends its copy to GPU q over NVLink, which adds them up (CollNetDirect:
   every GPU talks directly to the "NIC GPUs");
2. GPU q of every server sends the server's sum through its own NIC to its leaf switch, and the
   rail's SHARP tree (``sharp.py``) adds the partial sums level by level up to its root, a switch
   of the lowest tier above all the rail's leaves (the leaf itself, a spine, or on a fat-tree an
   aggregation switch inside one pod and a core switch, reached through one aggregation switch per
   pod, across pods);
3. the root sends the total back down the same tree to every server's GPU q;
4. GPU q copies it to the other GPUs of its server.

Every server's NIC carries each byte once up and once down (a ring carries 2(N-1)/N of it each
way), and the latency stays flat as servers are added (one switch tree, not N hops): the reason
SHARP exists. Switch legs run at the switch's reduction efficiency (``SwitchSpec``).
Only enabled when asked for (NCCL_COLLNET_ENABLE=1) and when the fabric's switches are SHARP
capable.

Resources: a communicator (a collective's group) holds one tree per rail from the simulation's
SHARP pool, taken the first time it is asked about; when a tree does not fit a switch's
``sharp_max_trees``, ``sharp_max_jobs`` or ``sharp_max_trees_per_port``, ``supported`` returns that
reason and the tuner takes NCCL's next choice (ring, tree, ...), as NCCL does when its CollNet
setup fails for lack of SHARP resources.

Aggregation throughput: one tree's reduced stream runs through each of its switches at up to
``sharp_aggregation_bytes_per_s`` (a switch holds at most ``sharp_max_trees`` trees, so its total
is at most ``sharp_max_trees x`` that). The C chains (sub-shards) of a tree share it: every chain's
switch legs are capped at ``min over the tree's switches of rate / C`` through the Schedule's
per-chain cap, which the engine applies to a chain's most loaded leg, and CollNet's most loaded
legs are its switch legs (1/efficiency wire bytes per payload byte). Trees of concurrent
communicators do not share an aggregation engine here (only links are shared).

Bandwidth, no other traffic, ppn GPUs per server, n ranks, S bytes: a rail's C chains share its
NIC link and its tree, so the rail moves S/ppn at ``min(B_nic, aggregation rate)`` and
``algbw = ppn x min(B_nic, rate)``, ``busbw = algbw x 2(n-1)/n``. Worked number: 4 servers of 2
GPUs with NDR NICs (49.7 GB/s, no per-connection limit) on switches aggregating 20 GB/s per tree:
algbw = 2 x 20 = 40 GB/s, busbw = 40 x 2 x 7/8 = 70 GB/s.

Latency (tuning.cc, CollNetDirect, Simple): 2 (min(1, ppn-1) x 3.7 us + (ppn-1) x 0.4 us) + 31 us.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule
from .base import AlgorithmDefaults, LoweringContext, check_runnable, innet_chain_rate, innet_schedule, split_evenly
from .sharp import SharpAllocation, SharpPool, SharpTree

# hwLatencies[NVLINK][CollNetDirect][Simple], [NET][CollNetDirect][Simple], arity serialisation
# per local rank (tuning.cc, NCCL 2.30.7)
COLLNET_NVLINK_LATENCY_US = 3.7
COLLNET_NET_LATENCY_US = 31.0
COLLNET_ARITY_LATENCY_US = 0.4


#: One edge of a stage: (src, dst, offset, count, reduce, chain).
_StageEdge = tuple[int, int, int, int, bool, int]


def _chains_per_gpu(ppn: int, nchannels: int) -> int:
    """Sub-shards (chains) owned by each local GPU: the channels spread over the ``ppn`` GPUs, at least one."""
    return max(1, nchannels // ppn)


class CollNetAlgorithm(AlgorithmDefaults):
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
        allocation = self._allocation(collective, ctx)
        return allocation if isinstance(allocation, str) else None

    # ---- structure ---------------------------------------------------------------------------
    def _allocation(self, collective: Collective, ctx: LoweringContext) -> SharpAllocation | str:
        """The communicator's SHARP trees (one per rail, from the simulation's pool), or why not."""
        pool = sharp_pool(ctx)
        known = pool.allocation(collective.group)
        if known is not None:
            return known
        layout = ctx.layout(collective.group)
        rails = []
        for q in range(layout.ppn):
            nics = []
            for ranks in layout.ranks_by_server:
                info = ctx.topology.servers[ctx.server(ranks[q])]
                nics.append(info.nics[info.nic_of_gpu[ctx.local(ranks[q])]])
            rails.append(tuple(nics))
        return pool.allocate(collective.group, rails)

    def _tree(self, collective: Collective, ctx: LoweringContext, q: int) -> SharpTree:
        allocation = self._allocation(collective, ctx)
        if isinstance(allocation, str):
            raise ValueError(f"algorithm {self.name}: {allocation}")
        return allocation.trees[allocation.rail_tree[q]]

    def _plan(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> list[tuple[int, int, int]]:
        """Sub-shards: (owner local index, offset, count); ``_chains_per_gpu`` per local index."""
        layout = ctx.layout(collective.group)
        nshards = layout.ppn * _chains_per_gpu(layout.ppn, nchannels)
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        count = split_evenly(elements, nshards)
        offset = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return [(j % layout.ppn, int(offset[j]), int(count[j])) for j in range(nshards)]

    def _buffers(
        self, collective: Collective, ctx: LoweringContext
    ) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        """In-network buffer ids: up and down stage of every switch used, -> topology node."""
        layout = ctx.layout(collective.group)
        switches = sorted({s for q in range(layout.ppn) for s in self._tree(collective, ctx, q).switches})
        up = {s: -(2 * i + 1) for i, s in enumerate(switches)}
        down = {s: -(2 * i + 2) for i, s in enumerate(switches)}
        nodes = {**{b: s for s, b in up.items()}, **{b: s for s, b in down.items()}}
        return up, down, nodes

    def _stages(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> list[list[_StageEdge]]:
        """Logical steps: lists of (src, dst, offset, count, reduce, chain).

        0: GPUs -> owner (NVLink); 1: owner -> its leaf; then one step per tree level up (child ->
        parent, deepest first), one per level down (parent -> child), leaf -> owner, owner -> GPUs.
        Trees of different heights share the steps: a shallower tree's levels sit next to the
        middle (its top level up is the step just before the first step down)."""
        layout = ctx.layout(collective.group)
        up, down, _ = self._buffers(collective, ctx)
        top = max(self._tree(collective, ctx, q).height for q in range(layout.ppn))
        stages: list[list[_StageEdge]] = [[] for _ in range(4 + 2 * top)]
        for j, (q, off, cnt) in enumerate(self._plan(collective, ctx, nchannels)):
            tree = self._tree(collective, ctx, q)
            leaves, root = tree.leaves, tree.root
            for m, ranks in enumerate(layout.ranks_by_server):
                owner = ranks[q]
                stages[0] += [(p, owner, off, cnt, True, j) for p in ranks if p != owner]
                stages[1].append((owner, up[leaves[m]], off, cnt, True, j))
                stages[2 + 2 * top].append(
                    (down[leaves[m]] if leaves[m] != root else up[root], owner, off, cnt, False, j)
                )
                stages[3 + 2 * top] += [(owner, p, off, cnt, False, j) for p in ranks if p != owner]
            for child, parent in sorted(tree.parent.items()):
                depth = tree.depth(child)
                stages[2 + top - depth].append((up[child], up[parent], off, cnt, True, j))
                stages[1 + top + depth].append(
                    (up[root] if parent == root else down[parent], down[child], off, cnt, False, j)
                )
        return [s for s in stages if s]

    def _latency_s(self, collective: Collective, ctx: LoweringContext) -> float:
        ppn = ctx.layout(collective.group).ppn
        return (
            2 * (min(1, ppn - 1) * COLLNET_NVLINK_LATENCY_US + (ppn - 1) * COLLNET_ARITY_LATENCY_US)
            + COLLNET_NET_LATENCY_US
        ) * 1e-6

    def _efficiency(self, collective: Collective, ctx: LoweringContext) -> float:
        _, _, nodes = self._buffers(collective, ctx)
        efficiency: float = min(ctx.topology.graph.nodes[n].get("reduction_efficiency", 1.0) for n in nodes.values())
        return efficiency

    # ---- interface ---------------------------------------------------------------------------
    def _edges(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> list[tuple[int, int, int, int]]:
        """(src, dst, elements, chain) of every edge of every stage."""
        return [
            (s, d, cnt, chain) for stage in self._stages(collective, ctx, nchannels) for s, d, _, cnt, _, chain in stage
        ]

    def _aggregation_cap_bytes_per_s(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> float:
        """Most one chain's switch legs carry: the slowest tree's ``min over its switches of
        sharp_aggregation_bytes_per_s / chains on the tree`` (inf when no switch states a rate)."""
        allocation = self._allocation(collective, ctx)
        assert not isinstance(allocation, str)  # lower and estimate get here only when supported
        per_rail = _chains_per_gpu(ctx.layout(collective.group).ppn, nchannels)  # chains per rail (``_plan``)
        nodes = ctx.topology.graph.nodes
        cap: float = min(
            min(nodes[s].get("sharp_aggregation_bytes_per_s", math.inf) for s in allocation.trees[t].switches)
            / (rails * per_rail)
            for t, rails in Counter(allocation.rail_tree).items()
        )
        return cap

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        check_runnable(self.name, self.supported(collective, ctx), protocol, self.protocols)
        return innet_schedule(
            collective,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            edges=self._edges(collective, ctx, nchannels),
            efficiency=self._efficiency(collective, ctx),
            innet_nodes=self._buffers(collective, ctx)[2],
            latency_s=self._latency_s(collective, ctx),
            chain_rate_cap_bytes_per_s=self._aggregation_cap_bytes_per_s(collective, ctx, nchannels),
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        return tuple(
            DataStep.of([(s, d, off, cnt, off, red) for s, d, off, cnt, red, _ in stage])
            for stage in self._stages(collective, ctx, nchannels)
        )

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        latency = self._latency_s(collective, ctx)
        if self.supported(collective, ctx) or protocol != "Simple":
            return latency, 0.0

        chain_rate, nshards = ctx.cached(
            ("collnet-rate", collective.group, nchannels),
            lambda: innet_chain_rate(
                ctx,
                self._edges(collective, ctx, nchannels),
                self._buffers(collective, ctx)[2],
                self._efficiency(collective, ctx),
            ),
        )
        # the cap bounds the switch legs' bytes, 1/efficiency per payload byte
        cap = self._aggregation_cap_bytes_per_s(collective, ctx, nchannels) * self._efficiency(collective, ctx)
        return latency, min(chain_rate, cap) * nshards


def sharp_pool(ctx: LoweringContext) -> SharpPool:
    """The simulation's SHARP resource pool (one per LoweringContext, kept in its cache)."""
    pool: SharpPool = ctx.cached(
        ("sharp-pool",), lambda: SharpPool(ctx.topology, failed_links=ctx.router.failed_links, seed=ctx.router.seed)
    )
    return pool


COLLNET = CollNetAlgorithm()
