"""Tree all_reduce (NCCL's Tree): chains inside servers, a double binary tree across them.

Data is split over the channels, each channel one chain on one tree of the double binary tree over
servers (a server inner in one tree is a leaf in the other): NCCL duplicates the search's channels,
the first half on tree 0 and the second half on tree 1 (connect.cc connectTrees). On a channel the
data is reduced up the chain of GPUs inside every server to its head GPU (the GPU of the channel's
NIC), up the tree of servers to the root, then broadcast back down the tree and down the chains.
NCCL pipelines this in chunks, so each channel is one chain over all its edges, every edge carrying
the same bytes (S / channels). Every byte goes up and down the tree once, so the network carries S
per server each way (a ring carries 2(n-1)/n S), in about log2(servers) steps instead of 2(n-1).
Across servers the chunks cross the network store and forward, a step round trip each
(``nccl_model.tree_net_floor_s``), a floor next to the busiest proxy's work.

Latency (tuning.cc): L = baseLat[Tree][p] + 2 ((ppn-1) intraLat + log2i(nNodes) interLat), with
NCCL's Tree per-hop figures and log2i NCCL's log2 rounded down (:func:`nccl_model.log2i`: 1 on 3
servers). Worked number, 2 servers of 8 H100, LL:
6.8 + 2 (7 x 0.6 + 1 x 5.0) = 25.2 us (measured 25.0 us, nccl-tests issue 309).

Throughput limits taken from NCCL's model as per-channel caps (the tree kernels' own speed, not
the wire): Simple perChMaxTreeBw, LL128 perChMaxTreeLL128Bw, LL llMaxBw shared by the channels.
For the *choice* the tuner also applies NCCL's tree correction factors (tuning.cc: trees do worse
than predicted at medium sizes), so Tree is chosen where NCCL would.
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import (
    AlgorithmDefaults,
    GroupLayout,
    LoweringContext,
    lower_launched,
    proxy_busy_s,
    split_evenly,
    tree_set_channels,
)
from .nvls_tree import double_binary_tree, levels


class TreeAlgorithm(AlgorithmDefaults):
    name = "tree"
    kinds = frozenset({CollectiveKind.ALL_REDUCE})
    protocols = nccl_model.PROTOCOLS

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None if collective.nranks >= 2 else "a tree needs at least 2 ranks"

    # ---- structure ---------------------------------------------------------------------------
    def _nchains(self, ctx: LoweringContext, nchannels: int) -> int:
        """(Tree, channel) chains of ``nchannels`` launched channels: one a channel (``ctx.tree_chains="channel"``,
        NCCL's), or two, one on each tree (``"pair"``, the earlier model)."""
        return nchannels if ctx.tree_chains == "channel" else 2 * nchannels

    def _tree_rail(self, ctx: LoweringContext, layout: GroupLayout, k: int, comm_channels: int) -> tuple[int, int]:
        """(tree, channel) of chain ``k``; the channel sets the NIC (rail channel mod NICs). NCCL (connect.cc
        connectTrees) gives each of the topology search's channels g two communicator channels, g on tree 0 and
        g + half on tree 1 (``half``: half the communicator's channels, its count before the duplication), so a
        launch of the first n channels runs tree 0 alone while n <= half; channel g + half keeps g's NIC, which
        is also rail (g + half) mod NICs when the NICs divide ``half``.

        NCCL_MIN_CTAS past that doubled set (``ctx.tree_copies``; connect.cc ncclTopoPostset, copyChannels)
        makes channel c a copy of channel c - set: its tree and its NIC. Worked number: 8 NICs, a doubled set
        of 16 (``base.tree_set_channels``), 24 channels: 0-7 and 16-23 on tree 0, 8-15 on tree 1 (16 and 8)."""
        if ctx.tree_chains == "pair":
            return k % 2, k // 2
        if ctx.tree_copies:
            doubled = tree_set_channels(layout)
            g = k % doubled
            return (g // max(1, doubled // 2)) % 2, g
        return (k // max(1, comm_channels // 2)) % 2, k

    def _chains(
        self, collective: Collective, ctx: LoweringContext, nchannels: int, comm_channels: int
    ) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """Per chain index k: the ordered GPU chain of every server (head first)."""

        def build() -> tuple[tuple[tuple[int, ...], ...], ...]:
            layout = ctx.layout(collective.group)
            out = []
            for k in range(self._nchains(ctx, nchannels)):
                c = self._tree_rail(ctx, layout, k, comm_channels)[1]
                servers = []
                for server, ranks in zip(layout.servers, layout.ranks_by_server):
                    info = ctx.topology.servers[server]
                    head = 0
                    if info.nics:
                        rail = c % len(info.nics)
                        on_rail = [i for i, r in enumerate(ranks) if info.nic_of_gpu[ctx.local(r)] == rail]
                        head = on_rail[0] if on_rail else c % len(ranks)
                    servers.append(tuple(ranks[head:] + ranks[:head]))
                out.append(tuple(servers))
            return tuple(out)

        chains: tuple[tuple[tuple[int, ...], ...], ...] = ctx.cached(
            ("tree-chains", collective.group, nchannels, comm_channels, ctx.tree_chains, ctx.tree_copies), build
        )
        return chains

    def _parts(self, collective: Collective, nchains: int) -> tuple[np.ndarray, np.ndarray]:
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        count = split_evenly(elements, nchains)
        offset = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        return offset, count

    def _edges(
        self, collective: Collective, ctx: LoweringContext, nchannels: int, comm_channels: int
    ) -> list[tuple[int, int, int, int]]:
        """(src, dst, elements, chain k) of every edge, up then down."""
        layout = ctx.layout(collective.group)
        trees = double_binary_tree(layout.nnodes)
        _, count = self._parts(collective, self._nchains(ctx, nchannels))
        edges: list[tuple[int, int, int, int]] = []
        for k, chains in enumerate(self._chains(collective, ctx, nchannels, comm_channels)):
            parent = trees[self._tree_rail(ctx, layout, k, comm_channels)[0]]
            for chain in chains:
                edges += [(chain[i], chain[i - 1], count[k], k) for i in range(len(chain) - 1, 0, -1)]
                edges += [(chain[i - 1], chain[i], count[k], k) for i in range(1, len(chain))]
            for child, par in parent.items():
                edges.append((chains[child][0], chains[par][0], count[k], k))
                edges.append((chains[par][0], chains[child][0], count[k], k))
        return edges

    def _latency_s(
        self, collective: Collective, ctx: LoweringContext, protocol: str, *, hop_extra_us: float = 0.0
    ) -> float:
        """Latency; ``hop_extra_us`` is added to every intra-server hop (the platform's
        ``GroupLayout.hop_extra_us``; 0 for NCCL's own estimate)."""
        layout = ctx.layout(collective.group)
        intra = nccl_model.HW_LATENCY_US[layout.intra]["tree"][protocol] + hop_extra_us
        inter = nccl_model.HW_LATENCY_US["net"]["tree"][protocol]
        hops = (layout.ppn - 1) * intra + nccl_model.log2i(layout.nnodes) * inter
        return (nccl_model.BASE_LATENCY_US["tree"][protocol] + 2 * hops) * 1e-6

    def _proxy_s(
        self,
        collective: Collective,
        ctx: LoweringContext,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        protocol: str,
        nchannels: int,
        chain_bytes_per_s: float,
    ) -> float:
        """Floor of the tree's network work: the busiest network proxy (``base.proxy_busy_s``: every
        inter-server tree edge is a connection posting one step per chunk of its chain,
        ``nccl_model.tree_chunk_bytes``, NCCL's channels being the chains) or, with ``ctx.tree_net_floor``,
        the chunks' pipeline through the network crossings (:meth:`_net_floor_s`), the longer."""
        layout = ctx.layout(collective.group)
        if not ctx.net_proxy or layout.nnodes < 2:
            return 0.0
        chunk = nccl_model.tree_chunk_bytes(
            protocol=protocol,
            nbytes=collective.nbytes,
            nchannels=self._nchains(ctx, nchannels),
            nnodes=layout.nnodes,
            ppn=layout.ppn,
        )
        steps = np.maximum(1, -(-nbytes // max(chunk, 1)))
        busy = proxy_busy_s(
            ctx, src, dst, steps, protocol=protocol, cpu_vendor=layout.cpu_vendor, latency_covers="step"
        )
        if not ctx.tree_net_floor:
            return busy
        trees = double_binary_tree(layout.nnodes)
        depth = max(len(levels(trees[0], 0)), len(levels(trees[1], layout.nnodes - 1))) - 1
        floor = nccl_model.tree_net_floor_s(
            protocol=protocol,
            cpu_vendor=layout.cpu_vendor,
            chain_bytes=int(nbytes.max()) if nbytes.size else 0,
            chunk_bytes=chunk,
            crossings=2 * depth,
            chain_bytes_per_s=chain_bytes_per_s,
        )
        return max(busy, floor)

    def _chain_cap(self, ctx: LoweringContext, collective: Collective, protocol: str, nchannels: int) -> float:
        """Payload-rate ceiling of one (tree, channel) chain from NCCL's per-channel tree limits.

        NCCL: tree algbw = 0.5 x the search's channels x per-channel bus ceiling (LL: llMaxBw / 2 in all), the
        search's channels being half the communicator's ``nchannels`` (connect.cc doubles them, one copy a tree):
        a chain, one a communicator channel, gets a quarter of the per-channel ceiling. With two chains a
        channel (``ctx.tree_chains="pair"``, the earlier model) a chain also gets a quarter: for Simple and LL128 twice
        NCCL's sum (LL's llMaxBw is divided by the chains either way).

        Channels NCCL_MIN_CTAS copies past the doubled set (``ctx.tree_copies``, connect.cc copyChannels) leave
        the search's channels, and so NCCL's ceiling (tuning.cc: graphs[TREE]->nChannels), as they were: the
        ``nchannels`` chains share it, each getting a quarter x doubled set / ``nchannels``; fewer channels than
        the set (NCCL_MAX_CTAS) keep a quarter each. Worked number: 24 channels on 8 NICs (a doubled set of 16)
        get a sixth of a channel's ceiling each, their sum four channels' as with 16.
        """
        layout = ctx.layout(collective.group)
        if protocol in ("Simple", "LL128"):
            per_channel = nccl_model.tree_channel_max_bytes_per_s(
                protocol=protocol, arch=layout.arch, nnodes=layout.nnodes
            )
        else:
            per_channel = (
                nccl_model.ll_max_bw_bytes_per_s(arch=layout.arch, cpu_vendor=layout.cpu_vendor, nnodes=layout.nnodes)
                / nchannels
                * (2 if ctx.tree_chains == "channel" else 1)
            )
        if ctx.tree_copies and ctx.tree_chains == "channel" and protocol in ("Simple", "LL128"):
            tree_set = tree_set_channels(layout)
            return per_channel / 4 * tree_set / max(nchannels, tree_set)
        return per_channel / 4

    # ---- interface ---------------------------------------------------------------------------
    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        """The trees on the channels NCCL launches for this size of a communicator of ``nchannels``."""
        return lower_launched(self, collective, ctx, protocol=protocol, nchannels=nchannels)

    def lower_on(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int, comm_channels: int
    ) -> Schedule:
        """The trees on exactly ``nchannels`` channels of a communicator of ``comm_channels``."""
        elt = DTYPE_BYTES[collective.dtype]
        edges = self._edges(collective, ctx, nchannels, comm_channels)
        src, dst, count, chain = (np.array([e[i] for e in edges], dtype=np.int64) for i in range(4))
        chain_bytes_per_s = self._chain_cap(ctx, collective, protocol, comm_channels)
        step = Step.of(
            src=src,
            dst=dst,
            nbytes=count * elt,
            chain=chain,
            channel=chain if ctx.tree_chains == "channel" else chain // 2,
            latency_s=self._latency_s(
                collective, ctx, protocol, hop_extra_us=ctx.layout(collective.group).hop_extra_us
            ),
            label="tree all_reduce",
            proxy_s=self._proxy_s(collective, ctx, src, dst, count * elt, protocol, nchannels, chain_bytes_per_s),
        )
        return Schedule(
            collective=collective,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            steps=(step,),
            wire_factor=nccl_model.WIRE_FACTOR[protocol],
            chain_rate_cap_bytes_per_s=chain_bytes_per_s,
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        layout = ctx.layout(collective.group)
        trees = double_binary_tree(layout.nnodes)
        depth_of = [levels(trees[t], 0 if t == 0 else layout.nnodes - 1) for t in (0, 1)]
        offset, count = self._parts(collective, self._nchains(ctx, nchannels))
        all_chains = self._chains(collective, ctx, nchannels, nchannels)
        tree_of = [self._tree_rail(ctx, layout, k, nchannels)[0] for k in range(len(all_chains))]
        steps = []
        longest = max(len(c) for chains in all_chains for c in chains)
        for i in range(longest - 1, 0, -1):  # up each server's chain
            steps.append(
                DataStep.of(
                    [
                        (chain[i], chain[i - 1], offset[k], count[k])
                        for k, chains in enumerate(all_chains)
                        for chain in chains
                        if i < len(chain)
                    ],
                    reduce=True,
                )
            )
        depth = max(len(d) for d in depth_of)

        def at(level: int, k: int) -> list[int]:
            d = depth_of[tree_of[k]]
            return d[level] if level < len(d) else []

        for level in range(depth - 1, 0, -1):  # up the tree of servers
            steps.append(
                DataStep.of(
                    [
                        (chains[s][0], chains[trees[tree_of[k]][s]][0], offset[k], count[k])
                        for k, chains in enumerate(all_chains)
                        for s in at(level, k)
                    ],
                    reduce=True,
                )
            )
        for level in range(1, depth):  # down the tree
            steps.append(
                DataStep.of(
                    [
                        (chains[trees[tree_of[k]][s]][0], chains[s][0], offset[k], count[k])
                        for k, chains in enumerate(all_chains)
                        for s in at(level, k)
                    ]
                )
            )
        for i in range(1, longest):  # down each chain
            steps.append(
                DataStep.of(
                    [
                        (chain[i - 1], chain[i], offset[k], count[k])
                        for k, chains in enumerate(all_chains)
                        for chain in chains
                        if i < len(chain)
                    ]
                )
            )
        return tuple(s for s in steps if s.src.size)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        """NCCL's tree model on this topology's ring bandwidth (tuning.cc): bus bandwidth
        min(0.92 x ring busbw, channels x per-channel tree ceiling) (LL: / 3.8, capped by llMaxBw;
        LL128: x 7/9 on one node, x 120/128 across nodes), halved into algbw, times NCCL's
        tree correction for the size."""
        from .ring import RING

        latency = self._latency_s(collective, ctx, protocol)
        layout = ctx.layout(collective.group)
        _, ring_algbw = RING.estimate(collective, ctx, protocol="Simple", nchannels=nchannels)
        bus = 0.92 * ring_algbw * collective.busbw_factor
        if protocol == "LL":
            bus = min(
                bus / 3.8,
                nccl_model.ll_max_bw_bytes_per_s(arch=layout.arch, cpu_vendor=layout.cpu_vendor, nnodes=layout.nnodes),
            )
        else:
            if protocol == "LL128":
                bus *= 7 / 9 if layout.nnodes == 1 else 120 / 128
            # NCCL caps at graphs[TREE]->nChannels, the search's channels (half the communicator's, ``_chain_cap``);
            # the estimate keeps the communicator's: halved, it moves the 2- to 8-server H100 and B200 tables'
            # choice to NVLSTree or Ring, whose rows then come out 20-70 % slow (a departure from NCCL, kept)
            bus = min(
                bus,
                nchannels
                * nccl_model.tree_channel_max_bytes_per_s(protocol=protocol, arch=layout.arch, nnodes=layout.nnodes),
            )
        return latency, 0.5 * bus * nccl_model.tree_correction(protocol, collective.nbytes)


TREE = TreeAlgorithm()
