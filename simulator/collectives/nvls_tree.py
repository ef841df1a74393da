"""NVLSTree: NVLS inside each server, a reduce/broadcast pipeline of servers across the network.

all_reduce only (multi-node, Hopper and later). Per shard q of the buffer (n_local shards, shard
q owned by local GPU q of every server):

1. NVLS reduce inside each server: every local GPU sends its copy of shard q to the NVSwitch,
   which sends the server's sum to GPU q;
2. the GPUs q of all servers all-reduce the shard along a chain of servers (reduce towards the
   chain's root, broadcast back), through their own NICs, so each shard stays on one rail;
   shards alternate between two opposite chains, so every NIC carries one unit up and one down
   per shard whatever the server count (NCCL's double binary tree loads a NIC as much in total,
   inner in one tree and leaf in the other, but unevenly per tree);
3. NVLS multicast inside each server: GPU q sends the total once, the switch copies it to all.

NCCL pipelines the three stages, so each shard is one chain over all its links. Per GPU the
NVLinks carry what single-server NVLS carries ((n+1)/n S each way, at the switch's reduction
efficiency); the NIC of rail q carries shard q once per tree edge, each tree edge over its own
connection (one per peer). On top, the collective runs at most at NCCL's NVLSTree ceiling:
perChMaxNVLSTreeBw per NVLS head (a GPU with its own NIC; tuning.cc), NVIDIA's figure for what
the kernel sustains, shared evenly by the sub-shard chains (as the tree's per-channel limits).
Worked numbers, 8 H100 with 8x NDR per server: 2 servers, NVLink bound 0.85 x 370.8 / 9 = 35.0
GB/s per shard (busbw 525 GB/s) above the ceiling 8 x 57.7 = 462 GB/s (measured: 467-469 GB/s);
4 servers, NICs bound 4 units per NIC per direction, 49.7 / 4 = 12.4 GB/s per sub-shard chain
(busbw 385 GB/s) above the ceiling 8 x 45.5 = 364 GB/s (measured: 366 GB/s on one cluster; NCCL
ran Ring on another, 325 GB/s). NCCL's own estimate (:meth:`NvlsTreeAlgorithm.estimate`) rates
NVLSTree from 3 servers below the ring's 8 x 49.7 = 398 GB/s, so the tuner picks Ring there.

Latency (tuning.cc): NVLS intra latency 25 us + 2 log2i(nNodes) x 20.9 us (NET, NVLSTree, Simple),
log2i being log2 rounded down (:func:`nccl_model.log2i`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from topologies.units import gbyte_per_s
from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule
from . import nccl_model
from .base import AlgorithmDefaults, GroupLayout, LoweringContext, check_runnable, innet_schedule, split_evenly
from .nvls import (
    NVLS_LATENCY_US,
    NVLS_MAX_CHUNK_BYTES,
    nvls_channels,
    nvls_chunk_efficiency,
    nvswitch_links,
    switch_efficiency,
)

# hwLatencies[NET][NVLSTree][Simple] (tuning.cc, NCCL 2.30.7)
NVLSTREE_NET_LATENCY_US = 20.9


# NCCL_NVLSTREE_MAX_CHUNKSIZE default (src/transport/nvls.cc, NCCL 2.30.7): the NVLS chunk on fewer
# than 4 servers, 64 KiB from 4 up; Blackwell 2-server tuning with NICs below 96 GB/s behind a PCIe
# switch (HGX/DGX B200) also picks 64 KiB (ncclNvlsTreeSm100Tuning).
NVLSTREE_SMALL_MAX_CHUNK_BYTES = 64 * 1024


def nvlstree_chunk_bytes(nbytes: int, *, nchannels: int, nheads: int, nnodes: int, arch: str) -> int:
    """NCCL's NVLSTree chunk (calcCollChunking, enqueue.cc): the largest chunk, capped by the tree
    maximum, halved below 32, 16, 4 and 1 concurrent loops of (channels x heads) chunks."""
    chunk = NVLS_MAX_CHUNK_BYTES
    if nnodes >= 4 or arch == "blackwell":
        chunk = min(chunk, NVLSTREE_SMALL_MAX_CHUNK_BYTES)
    concurrent = nchannels * nheads
    for loops, smaller in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < loops * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def tree_network_hops(nnodes: int) -> int:
    """Network hops of a reduce up and a broadcast down NCCL's tree of ``nnodes`` servers, as NCCL's
    NVLSTree latency counts them (tuning.cc: 2 log2i(nNodes), log2 rounded down, the depth of a
    balanced binary tree of nNodes)."""
    return 2 * nccl_model.log2i(nnodes)


def _heads(layout: GroupLayout) -> int:
    """NVLS heads per server (NVLS graph channels): local GPUs with their own NIC (tuning.cc)."""
    return min(layout.ppn, layout.nics_per_server)


def binary_tree(order: list[int]) -> dict[int, int]:
    """parent of each element of ``order`` in a complete binary tree laid out in that order."""
    return {order[i]: order[(i - 1) // 2] for i in range(1, len(order))}


def double_binary_tree(nnodes: int) -> tuple[dict[int, int], dict[int, int]]:
    """Two complementary trees over 0..nnodes-1: the second is the first on the reversed order,
    so the first tree's leaves (its second half) are mostly inner nodes of the second."""
    order = list(range(nnodes))
    return binary_tree(order), binary_tree(order[::-1])


def double_chain(nnodes: int) -> tuple[dict[int, int], dict[int, int]]:
    """Two opposite chains over 0..nnodes-1 (roots 0 and nnodes-1): each server forwards up and
    down once per chain, so every NIC carries the same load whatever the server count."""
    return {i: i - 1 for i in range(1, nnodes)}, {i: i + 1 for i in range(nnodes - 1)}


def levels(parent: dict[int, int], root: int) -> list[list[int]]:
    """Nodes by depth (root first)."""
    children: dict[int, list[int]] = {}
    for child, p in parent.items():
        children.setdefault(p, []).append(child)
    out, frontier = [], [root]
    while frontier:
        out.append(frontier)
        frontier = [c for node in frontier for c in sorted(children.get(node, []))]
    return out


class _Parts(NamedTuple):
    """Sub-shards of :meth:`NvlsTreeAlgorithm._parts`."""

    layout: GroupLayout
    offset: np.ndarray  # elements
    counts: np.ndarray  # elements
    owner: list[int]  # local GPU owning each sub-shard
    tree_of: list[int]  # the tree (0 or 1) each sub-shard uses
    trees: tuple[dict[int, int], dict[int, int]]  # parent of each server in the two trees


class NvlsTreeAlgorithm(AlgorithmDefaults):
    name = "nvlstree"
    kinds = frozenset({CollectiveKind.ALL_REDUCE})
    protocols = ("Simple",)

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        layout = ctx.layout(collective.group)
        if layout.nnodes < 2:
            return "NVLSTree needs at least 2 servers (one server: nvls)"
        infos = [ctx.topology.servers[s] for s in layout.servers]
        if any(i.nvls_efficiency <= 0 for i in infos):
            return "NVLSTree needs NVLink SHARP in every server (Hopper or later NVSwitch)"
        if len({len(r) for r in layout.ranks_by_server}) != 1 or layout.ppn < 2:
            return "NVLSTree needs the same number (>= 2) of GPUs on every server"
        if _heads(layout) < 2:
            return (
                f"NVLSTree needs two NVLS heads (GPUs with their own NIC) per server; these servers have "
                f"{layout.nics_per_server} NIC(s)"
            )
        return None

    def channels(self, collective: Collective, ctx: LoweringContext) -> int:
        """NCCL's nvlsChannels for this GPU generation and node count."""
        layout = ctx.layout(collective.group)
        return nvls_channels(layout.arch, layout.nnodes)

    # ---- structure ---------------------------------------------------------------------------
    def _parts(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> _Parts:
        """Sub-shards j = q + ppn*c (owner: local GPU q, channel c), their (offset, count), the
        tree each uses ((q + c) mod 2, so each NIC serves both trees) and the two trees."""
        layout = ctx.layout(collective.group)
        per_gpu = max(1, nchannels // layout.ppn)
        nshards = layout.ppn * per_gpu
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        count = split_evenly(elements, nshards)
        offset = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        owner = [j % layout.ppn for j in range(nshards)]
        tree_of = [(j % layout.ppn + j // layout.ppn) % 2 for j in range(nshards)]
        return _Parts(
            layout=layout, offset=offset, counts=count, owner=owner, tree_of=tree_of, trees=double_chain(layout.nnodes)
        )

    @staticmethod
    def _buffers(m: int) -> tuple[int, int]:
        return -(2 * m + 1), -(2 * m + 2)  # reduce, multicast buffer of server m

    def _edges(self, parts: _Parts) -> list[tuple[int, int, int, int]]:
        """(src, dst, elements, chain) of every edge of :meth:`_parts`' sub-shards; chain = sub-shard."""
        layout, _, count, owner, tree_of, trees = parts
        edges: list[tuple[int, int, int, int]] = []
        for j, q in enumerate(owner):
            parent = trees[tree_of[j]]
            owners = [ranks[q] for ranks in layout.ranks_by_server]
            for m, ranks in enumerate(layout.ranks_by_server):
                red, mc = self._buffers(m)
                edges += [(p, red, count[j], j) for p in ranks]
                edges.append((red, owners[m], count[j], j))
                edges.append((owners[m], mc, count[j], j))
                edges += [(mc, p, count[j], j) for p in ranks]
            for child, par in parent.items():
                edges.append((owners[child], owners[par], count[j], j))  # reduce up
                edges.append((owners[par], owners[child], count[j], j))  # broadcast down
        return edges

    def _innet(self, collective: Collective, ctx: LoweringContext) -> dict[int, int]:
        layout = ctx.layout(collective.group)
        out = {}
        for m, server in enumerate(layout.servers):
            for buf in self._buffers(m):
                out[buf] = ctx.topology.servers[server].nvswitch
        return out

    def _nvls_efficiency(self, collective: Collective, ctx: LoweringContext) -> float:
        """NCCL's nvlsEfficiency (of NCCL's NVLink figure), the lowest of the group's servers."""
        layout = ctx.layout(collective.group)
        return min(ctx.topology.servers[s].nvls_efficiency for s in layout.servers)

    @staticmethod
    def _nvlink_bytes_per_s(collective: Collective, ctx: LoweringContext, capacity: np.ndarray) -> float:
        """The first rank's GPU-to-NVSwitch bandwidth in ``capacity`` (modelled, or as NCCL sees it)."""
        return float(capacity[nvswitch_links(ctx, collective.group[0])].min())

    @staticmethod
    def _chunk_bytes(collective: Collective, ctx: LoweringContext, nchannels: int) -> int:
        """NCCL's NVLSTree chunk for this collective (:func:`nvlstree_chunk_bytes`)."""
        layout = ctx.layout(collective.group)
        return nvlstree_chunk_bytes(
            collective.nbytes, nchannels=nchannels, nheads=_heads(layout), nnodes=layout.nnodes, arch=layout.arch
        )

    def _chunk_efficiency(
        self, collective: Collective, ctx: LoweringContext, nchannels: int, chunk_bytes: int
    ) -> float:
        """The switch legs' efficiency (nvlsEfficiency on the modelled links, ``nvls.switch_efficiency``)
        at NCCL's NVLSTree chunk (see nvls.nvls_chunk_efficiency); a channel's NVLS rate is the
        single-server one, NVLink x efficiency x ppn / (ppn + 1) / channels."""
        layout = ctx.layout(collective.group)
        nvlink = self._nvlink_bytes_per_s(collective, ctx, ctx.topology.link_capacity_bytes_per_s)
        efficiency = switch_efficiency(ctx, collective.group[0], self._nvls_efficiency(collective, ctx))
        channel_rate = nvlink * efficiency * layout.ppn / (layout.ppn + 1) / nchannels
        return efficiency * nvls_chunk_efficiency(chunk_bytes, channel_rate)

    @staticmethod
    def _ceiling_bytes_per_s(collective: Collective, ctx: LoweringContext) -> float:
        """NCCL's NVLSTree bus-bandwidth ceiling for the whole collective: heads (NVLS graph
        channels) x perChMaxNVLSTreeBw (tuning.cc), ``inf`` where NCCL has none."""
        layout = ctx.layout(collective.group)
        per_channel_gbps = nccl_model.PER_CHANNEL_MAX_NVLSTREE_GBPS.get(layout.arch)
        if per_channel_gbps is None:
            return math.inf
        per_channel_bytes_per_s = gbyte_per_s(per_channel_gbps[nccl_model.node_column(layout.nnodes)])
        return _heads(layout) * per_channel_bytes_per_s

    def _chain_cap(self, collective: Collective, ctx: LoweringContext, nchains: int, efficiency: float) -> float:
        """Each sub-shard chain's share of :meth:`_ceiling_bytes_per_s` as a payload rate (algbw =
        busbw / (2(n-1)/n), split over the chains), stated on the chain's switch legs, whose wire
        bytes are payload / ``efficiency``. Worked number, 2x 8 H100: 8 x 57.7 GB/s = 462 GB/s
        busbw, 16 chains: 462 / 1.875 / 16 = 15.4 GB/s of payload per chain."""
        return self._ceiling_bytes_per_s(collective, ctx) / collective.busbw_factor / nchains / efficiency

    @staticmethod
    def _fill_bytes(
        collective: Collective, ctx: LoweringContext, nchannels: int, nchains: int, chunk_bytes: int
    ) -> float:
        """Pipeline start-up of each sub-shard chain (payload bytes): the last chunk still climbs and
        descends NCCL's tree of servers (:func:`tree_network_hops`, as NCCL's latency counts them; not the
        chain of servers the flows are laid on), each hop one chunk of each of the channels x heads
        concurrent pipelines (calcCollChunking's concurrentOps), so one loop of channels x heads x chunk
        at the collective's rate, which a chain moves at 1/nchains of it. Worked number, 2x 8 H100 (16
        channels, 8 heads, 128 KiB chunks from 64 MiB): 2 hops x 16 MiB at algbw 246 GB/s = 136 us."""
        layout = ctx.layout(collective.group)
        return tree_network_hops(layout.nnodes) * chunk_bytes * nchannels * _heads(layout) / nchains

    def _latency_s(self, collective: Collective, ctx: LoweringContext) -> float:
        nnodes = ctx.layout(collective.group).nnodes
        return (NVLS_LATENCY_US + tree_network_hops(nnodes) * NVLSTREE_NET_LATENCY_US) * 1e-6

    # ---- interface ---------------------------------------------------------------------------
    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        check_runnable(self.name, self.supported(collective, ctx), protocol, self.protocols)
        chunk = self._chunk_bytes(collective, ctx, nchannels)
        efficiency = self._chunk_efficiency(collective, ctx, nchannels, chunk)
        parts = self._parts(collective, ctx, nchannels)
        return innet_schedule(
            collective,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            edges=self._edges(parts),
            efficiency=efficiency,
            innet_nodes=self._innet(collective, ctx),
            latency_s=self._latency_s(collective, ctx),
            chain_rate_cap_bytes_per_s=self._chain_cap(collective, ctx, len(parts.counts), efficiency),
            fill_bytes=self._fill_bytes(collective, ctx, nchannels, len(parts.counts), chunk),
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        layout, offset, count, owner, tree_of, trees = self._parts(collective, ctx, nchannels)
        servers = layout.ranks_by_server
        shards = list(enumerate(owner))
        steps = [
            DataStep.of(
                [
                    (p, self._buffers(m)[0], offset[j], count[j])
                    for m, ranks in enumerate(servers)
                    for p in ranks
                    for j, _ in shards
                ],
                reduce=True,
            ),
            DataStep.of(
                [
                    (self._buffers(m)[0], ranks[q], offset[j], count[j])
                    for m, ranks in enumerate(servers)
                    for j, q in shards
                ]
            ),
        ]
        depth_of = [levels(trees[t], 0 if t == 0 else layout.nnodes - 1) for t in (0, 1)]
        depth = max(len(d) for d in depth_of)

        def at(level: int, j: int) -> list[int]:
            d = depth_of[tree_of[j]]
            return d[level] if level < len(d) else []

        for level in range(depth - 1, 0, -1):  # reduce up, deepest level first
            steps.append(
                DataStep.of(
                    [
                        (servers[child][q], servers[trees[tree_of[j]][child]][q], offset[j], count[j])
                        for j, q in shards
                        for child in at(level, j)
                    ],
                    reduce=True,
                )
            )
        for level in range(1, depth):  # broadcast down
            steps.append(
                DataStep.of(
                    [
                        (servers[trees[tree_of[j]][child]][q], servers[child][q], offset[j], count[j])
                        for j, q in shards
                        for child in at(level, j)
                    ]
                )
            )
        steps.append(
            DataStep.of(
                [
                    (ranks[q], self._buffers(m)[1], offset[j], count[j])
                    for m, ranks in enumerate(servers)
                    for j, q in shards
                ]
            )
        )
        steps.append(
            DataStep.of(
                [
                    (self._buffers(m)[1], p, offset[j], count[j])
                    for m, ranks in enumerate(servers)
                    for p in ranks
                    for j, _ in shards
                ]
            )
        )
        return tuple(steps)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        """NCCL's NVLSTree model (tuning.cc, NCCL 2.30) on this topology, on the NVLS graph's channels:
        one per head (a local GPU with its own NIC, at most the GPUs per server), each moving
        min(bwIntra x efficiency x (h-1)/h x 2, bwInter (x2 on <= 2 servers), per-channel ceiling);
        bus bandwidth = heads x that, algbw = busbw / (2(n-1)/n). bwIntra is a GPU's NVLink as NCCL
        sees it shared by the heads, bwInter the head's NIC port (NCCL's graph knows no per-connection
        limit). ``nchannels`` (the kernel's channels) does not enter NCCL's estimate. Worked number,
        8x H100 with 8x NDR: bwIntra 370.8 / 8 = 46.4 GB/s, intra 46.4 x 0.85 x 7/8 x 2 = 69.0; on 2
        servers min(69.0, 2 x 49.7, 57.7) = 57.7, busbw 8 x 57.7 = 462 GB/s (ring: 8 NICs x 49.7 =
        398); from 3 servers min(69.0, 49.7, 45.5) = 45.5, busbw 364 GB/s, below the ring's 398, so
        NCCL runs Ring there."""
        latency = self._latency_s(collective, ctx)
        if self.supported(collective, ctx) or protocol != "Simple":
            return latency, 0.0
        layout = ctx.layout(collective.group)
        heads = _heads(layout)
        topo, capacity = ctx.topology, ctx.nccl_capacity()
        info = topo.servers[ctx.server(collective.group[0])]
        nvlink = self._nvlink_bytes_per_s(collective, ctx, capacity)
        nic = min(float(capacity[topo.nic_leaf_link[n]]) for n in info.nics)
        intra = nvlink / heads * self._nvls_efficiency(collective, ctx) * (heads - 1) / heads * 2
        inter = nic * (2 if layout.nnodes <= 2 else 1)
        bus = min(heads * min(intra, inter), self._ceiling_bytes_per_s(collective, ctx))
        return latency, bus / collective.busbw_factor


NVLS_TREE = NvlsTreeAlgorithm()
