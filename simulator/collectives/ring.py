"""Ring algorithms (NCCL's Ring) for all_reduce, all_gather, reduce_scatter, broadcast, reduce.

**Rings.** Each NCCL channel c is one ring through all ranks. Inside a server the ring visits the
group's GPUs in local order, rotated to *enter* at a GPU and *leave* from the GPU just before it;
the next server's ring enters at the GPU on the same rail as that exit GPU. So on server m the
entry rail is ``(c - m) mod nics``: every inter-server edge except the ring's wrap-around stays
on one rail (one leaf of a rail-optimised fabric), each GPU sends through its own NIC, and the
channels spread evenly over the NICs (16 channels on 8 NICs: 2 per NIC and direction).

**Data.** The buffer of S bytes is split over channels (S_c) and, within a channel, into n
chunks c_0..c_{n-1} (element-aligned, as equal as possible). Over a whole collective the edge
leaving ring position p carries (closed forms):

* all_reduce: reduce-scatter then all-gather phases, every chunk twice except two:
  ``2 S_c - c[p+1] - c[p+2]``, i.e. 2(n-1)/n S per rank when chunks are equal;
* reduce_scatter and all_gather: every chunk except one: ``S_c - c[p+1]``, (n-1)/n S per rank;
* broadcast (root first) and reduce (root last): a pipeline of n-1 edges carrying S_c each.

**Time.** NCCL pipelines a ring in slices, so a channel streams: the schedule is one step whose
flows for channel c form chain c (one rate for the whole ring, set by its most loaded link) plus
NCCL's ring latency for the protocol (``nccl_model.ring_latency_s``). Slice-level start-up
(pipeline fill) is inside NCCL's latency constants, not modelled separately. Across servers each network
connection moves its steps one round trip apart (``nccl_model.ring_net_step_s``), and within the first loop each
step's transfer follows its round trip: a floor on the step (``Step.proxy_s``) of the longer of ``ring_proxy_steps x``
that round trip and the first loop's round trips plus the connection's transfer at its own limit. Worked number:
a one-loop LL128 all_gather of 2 MiB on 2x HGX B200 (16 ranks, 16 channels) has 15 steps a connection and sends
122,880 B (131,072 on the wire) a connection at 20 GB/s: 15 x 3.5 + 6.55 = 59.05 us.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..rates import equal_share_rates
from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import (
    AlgorithmDefaults,
    LoweringContext,
    lower_launched,
    piece_layout,
    protocol_schedule,
    proxy_busy_s,
    rank_servers,
)


class RingAlgorithm(AlgorithmDefaults):
    name = "ring"
    kinds = frozenset(
        {
            CollectiveKind.ALL_REDUCE,
            CollectiveKind.ALL_GATHER,
            CollectiveKind.REDUCE_SCATTER,
            CollectiveKind.BROADCAST,
            CollectiveKind.REDUCE,
        }
    )
    protocols = nccl_model.PROTOCOLS

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None

    # ---- structure (size-independent, memoised per simulation) -------------------------------
    def orders(self, group: tuple[int, ...], ctx: LoweringContext, nchannels: int) -> tuple[tuple[int, ...], ...]:
        """Ring order (ranks) of every channel."""

        def build() -> tuple[tuple[int, ...], ...]:
            layout = ctx.layout(group)
            if layout.ppn == 1:
                # one rank per server: every channel's ring is the servers' order, as the loop below builds
                # it in channels x servers steps (~8% of a 16,384-GPU step's simulation, in its DP groups)
                return (tuple(ranks[0] for ranks in layout.ranks_by_server),) * nchannels
            servers = []  # per server: its ranks, NIC count, first position of a rank on each rail
            for server, ranks in zip(layout.servers, layout.ranks_by_server):
                info = ctx.topology.servers[server]
                first: dict[int, int] = {}
                for i, r in enumerate(ranks):
                    first.setdefault(info.nic_of_gpu[ctx.local(r)], i)
                servers.append((list(ranks), len(info.nics) if layout.nnodes > 1 else 0, first))
            rings = []
            for c in range(nchannels):
                ring: list[int] = []
                for m, (members, nics, first) in enumerate(servers):
                    entry = first.get((c - m) % nics, (c - m) % len(members)) if nics else 0
                    ring.extend(members[entry:] + members[:entry])
                rings.append(tuple(ring))
            return tuple(rings)

        orders: tuple[tuple[int, ...], ...] = ctx.cached(("ring-orders", group, nchannels), build)
        return orders

    def chain_paths(self, group: tuple[int, ...], ctx: LoweringContext, nchannels: int) -> list[np.ndarray]:
        """Links of every channel's full ring (edge p: position p -> p+1, wrapping)."""

        def build() -> list[np.ndarray]:
            orders = self.orders(group, ctx, nchannels)
            gpu = ctx.rank_gpu
            src = [gpu[a] for ring in orders for a in ring]
            dst = [gpu[b] for ring in orders for b in ring[1:] + ring[:1]]
            keys = [c for c, ring in enumerate(orders) for _ in ring]
            edges = ctx.router.paths(src, dst, flow_keys=keys, pxn=False)
            n = len(group)
            return [
                np.concatenate(edges[c * n : (c + 1) * n]) if n else np.zeros(0, dtype=np.int64)
                for c in range(len(orders))
            ]

        paths: list[np.ndarray] = ctx.cached(("ring-paths", group, nchannels), build)
        return paths

    # ---- data --------------------------------------------------------------------------------
    def chunk_counts(
        self, collective: Collective, orders: tuple[tuple[int, ...], ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(offset, count) in elements of chunk k of channel c, shape (nchannels, n).

        Chunk k of a ring is the piece of the rank at ring position k-1: after the reduce-scatter
        phase position p holds chunk p+1 fully reduced, i.e. its own piece (NCCL's output order).
        """
        group_index = {rank: q for q, rank in enumerate(collective.group)}
        offset, count = piece_layout(collective, len(orders))
        n = collective.nranks
        owner = np.array([[group_index[ring[(k - 1) % n]] for k in range(n)] for ring in orders], dtype=np.int64)
        rows = np.arange(len(orders))[:, None]
        return offset[rows, owner], count[rows, owner]

    def edge_bytes(self, collective: Collective, orders: tuple[tuple[int, ...], ...]) -> tuple[np.ndarray, int]:
        """Payload bytes on each ring edge (position p -> p+1), shape (nchannels, n); edges used."""
        n = collective.nranks
        _, count = self.chunk_counts(collective, orders)
        nbytes = count * DTYPE_BYTES[collective.dtype]
        per_channel = nbytes.sum(axis=1, keepdims=True)
        kind = collective.kind
        if kind is CollectiveKind.ALL_REDUCE:  # all chunks but p+1 (RS phase) and but p+2 (AG phase)
            return 2 * per_channel - np.roll(nbytes, -1, axis=1) - np.roll(nbytes, -2, axis=1), n
        if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):  # all chunks but p+1
            return per_channel - np.roll(nbytes, -1, axis=1), n
        out = np.repeat(per_channel, n, axis=1)  # rooted: whole channel range along n-1 edges
        out[:, n - 1] = 0
        return out, n - 1

    @staticmethod
    def _fill(collective: Collective, nbytes: np.ndarray, nedges: int, protocol: str) -> np.ndarray:
        """Pipeline start-up of each channel (payload bytes). With Simple a ring streams in slices
        (``nccl_model.SIMPLE_SLICE_BYTES``, or the whole per-rank chunk when smaller): a ring that
        every rank feeds from the start (all_reduce, all_gather, reduce_scatter) finishes one slice
        hop after its data; a broadcast/reduce pipeline needs n-2 slice hops before the last rank
        starts. LL and LL128 move lines of 8 and 128 bytes: no start-up worth modelling."""
        if protocol != "Simple":
            return np.zeros(nbytes.shape[0])
        n = collective.nranks
        per_channel = nbytes.max(axis=1)
        fill: np.ndarray
        if collective.kind.rooted:
            fill = np.minimum(nccl_model.SIMPLE_SLICE_BYTES, per_channel) * max(n - 2, 0)
            return fill
        steps = 2 * (n - 1) if collective.kind is CollectiveKind.ALL_REDUCE else n - 1
        fill = np.minimum(nccl_model.SIMPLE_SLICE_BYTES, per_channel / steps)
        return fill

    @staticmethod
    def _proxy_s(
        collective: Collective,
        ctx: LoweringContext,
        src: np.ndarray,
        dst: np.ndarray,
        nbytes: np.ndarray,
        protocol: str,
        nchannels: int,
    ) -> float:
        """Floor of the ring's network connections: every inter-server ring edge is a connection posting
        ``nccl_model.ring_proxy_steps`` steps, one at a time, each a round trip of at least
        ``nccl_model.ring_net_step_s`` followed by (``ctx.ring_net_floor="connection"``) or overlapping
        (``"round_trip"``) the step's transfer on the connection; with ``"proxy"``, the busiest GPU's serial
        proxy work (``base.proxy_busy_s``)."""
        layout = ctx.layout(collective.group)
        if not ctx.net_proxy or layout.nnodes < 2:
            return 0.0
        steps = nccl_model.ring_proxy_steps(
            kind_value=collective.kind.value,
            protocol=protocol,
            nbytes=collective.nbytes,
            nchannels=nchannels,
            nranks=collective.nranks,
        )
        if ctx.ring_net_floor != "proxy":
            server = rank_servers(ctx)
            crossing = server[src] != server[dst]
            if not np.any(crossing):
                return 0.0
            round_trip_s = nccl_model.ring_net_step_s(protocol=protocol, cpu_vendor=layout.cpu_vendor)
            floor = steps * round_trip_s
            if ctx.ring_net_floor == "connection" and floor > 0:
                first_loop = nccl_model.ring_proxy_steps(
                    kind_value=collective.kind.value,
                    protocol=protocol,
                    nbytes=1,
                    nchannels=nchannels,
                    nranks=collective.nranks,
                )
                transfer_s = RingAlgorithm._connection_transfer_s(
                    ctx, src[crossing], dst[crossing], nbytes[crossing], protocol
                )
                floor = max(floor, first_loop * round_trip_s + transfer_s)
            return floor
        return proxy_busy_s(
            ctx,
            src,
            dst,
            np.full(src.shape[0], steps),
            protocol=protocol,
            cpu_vendor=layout.cpu_vendor,
            latency_covers="connection",
        )

    @staticmethod
    def _connection_transfer_s(
        ctx: LoweringContext, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, protocol: str
    ) -> float:
        """Longest time an inter-server edge's wire bytes take at its connection's own limit: the smallest
        per-connection limit (NicSpec.connection_bytes_per_s) from the sending GPU through its NIC to the
        NIC's switch, x QPs per connection (the ring's edges stay on the sender's rail)."""
        topo = ctx.topology
        caps = topo.link_flow_cap_bytes_per_s
        longest = 0.0
        for r, nb in zip(src.tolist(), np.asarray(nbytes, dtype=np.float64).tolist(), strict=True):
            gpu = ctx.gpu(int(r))
            info = topo.servers[int(topo.gpu_server[gpu])]
            local = int(topo.gpu_local[gpu])
            nic = info.nic_of_gpu[local]
            if nic < 0:
                continue
            links = list(info.gpu_to_nic_routes.get((local, nic), ()))
            leaf = topo.nic_leaf_link.get(info.nics[nic])
            if leaf is not None:
                links.append(leaf)
            limit = float(np.min(caps[links])) * max(ctx.qps_per_connection, 1) if links else np.inf
            if np.isfinite(limit):
                longest = max(longest, nb * nccl_model.WIRE_FACTOR[protocol] / limit)
        return longest

    def _rooted_order(self, collective: Collective, ring: tuple[int, ...]) -> tuple[int, ...]:
        root = collective.group[collective.root]
        i = ring.index(root)
        if collective.kind is CollectiveKind.BROADCAST:  # root first
            return ring[i:] + ring[:i]
        return ring[i + 1 :] + ring[: i + 1]  # reduce: root last

    def _orders_for(self, collective: Collective, ctx: LoweringContext, nchannels: int) -> tuple[tuple[int, ...], ...]:
        orders = self.orders(collective.group, ctx, nchannels)
        if collective.kind.rooted:
            orders = tuple(self._rooted_order(collective, ring) for ring in orders)
        return orders

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        """The logical data movement, step by step, for verification on real buffers."""
        n = collective.nranks
        orders = self._orders_for(collective, ctx, nchannels)
        offset, count = self.chunk_counts(collective, orders)
        kind = collective.kind
        steps: list[DataStep] = []

        def phase(chunk_of: Callable[[int, int], int], reduce: bool) -> None:
            for s in range(n - 1):
                ops = [
                    (ring[p], ring[(p + 1) % n], offset[c, chunk_of(p, s)], count[c, chunk_of(p, s)])
                    for c, ring in enumerate(orders)
                    for p in range(n)
                ]
                steps.append(DataStep.of(ops, reduce=reduce))

        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER):
            phase(lambda p, s: (p - s) % n, True)
        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER):
            phase(lambda p, s: (p + 1 - s) % n, False)
        if kind.rooted:
            for s in range(n - 1):  # the whole channel range moves one hop per step
                ops = [(ring[s], ring[s + 1], offset[c].min(), count[c].sum()) for c, ring in enumerate(orders)]
                steps.append(DataStep.of(ops, reduce=kind is CollectiveKind.REDUCE))
        return tuple(steps)

    # ---- interface ---------------------------------------------------------------------------
    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        """The ring on the channels NCCL launches for this size of a communicator of ``nchannels``."""
        return lower_launched(self, collective, ctx, protocol=protocol, nchannels=nchannels)

    def lower_on(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int, comm_channels: int
    ) -> Schedule:
        """The ring on exactly ``nchannels`` channels of a communicator of ``comm_channels``."""
        group = collective.group
        layout = ctx.layout(group)
        n = len(group)
        orders = self._orders_for(collective, ctx, nchannels)
        nbytes, nedges = self.edge_bytes(collective, orders)
        src, dst, size, chan = [], [], [], []
        if n > 1:
            for c, ring in enumerate(orders):
                ring_arr = np.asarray(ring, dtype=np.int64)
                src.append(ring_arr[:nedges])
                dst.append(np.roll(ring_arr, -1)[:nedges])
                size.append(nbytes[c, :nedges])
                chan.append(np.full(nedges, c, dtype=np.int64))

        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        channel = cat(chan)
        latency = nccl_model.ring_latency_s(
            kind_value=collective.kind.value,
            protocol=protocol,
            nranks=n,
            nnodes=layout.nnodes,
            ppn=layout.ppn,
            intra=layout.intra,
            cpu_vendor=layout.cpu_vendor,
            nbytes=collective.nbytes,
            nchannels=comm_channels,
            hop_extra_us=layout.hop_extra_us,
            chain_crossings=ctx.ring_crossings,
        )
        if (
            protocol == "Simple"
            and ctx.p2p_read
            and layout.ppn > 1
            and nccl_model.p2p_read(sm_version=layout.sm_version, intra=layout.intra)
        ):
            latency += nccl_model.ring_read_slices_s(
                kind_value=collective.kind.value, nbytes=collective.nbytes, nchannels=nchannels, nranks=n
            )
        step = Step.of(
            src=cat(src),
            dst=cat(dst),
            nbytes=cat(size),
            channel=channel,
            chain=channel,
            latency_s=latency,
            label=f"ring {collective.kind.value}",
            fill_bytes=self._fill(collective, nbytes, nedges, protocol)[channel] if n > 1 else None,
            proxy_s=self._proxy_s(collective, ctx, cat(src), cat(dst), cat(size), protocol, nchannels),
        )
        return protocol_schedule(
            collective,
            ctx,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            steps=(step,),
            comm_channels=comm_channels,
        )

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        layout = ctx.layout(collective.group)
        n = collective.nranks
        latency = nccl_model.ring_latency_s(
            kind_value=collective.kind.value,
            protocol=protocol,
            nranks=n,
            nnodes=layout.nnodes,
            ppn=layout.ppn,
            intra=layout.intra,
            cpu_vendor=layout.cpu_vendor,
            nbytes=collective.nbytes,
            nchannels=nchannels,
        )
        if n == 1:
            return latency, float("inf")
        # the links as NCCL's topology sees them: port speeds, no per-connection limit
        wire_rate = ctx.cached(
            ("ring-rate", collective.group, nchannels),
            lambda: float(
                equal_share_rates(self.chain_paths(collective.group, ctx, nchannels), ctx.nccl_capacity()).min()
            ),
        )
        cap = nccl_model.protocol_cap_bytes_per_s(
            protocol=protocol, arch=layout.arch, cpu_vendor=layout.cpu_vendor, nnodes=layout.nnodes, nchannels=nchannels
        )
        busbw = nchannels * min(cap, wire_rate / nccl_model.WIRE_FACTOR[protocol])
        return latency, busbw / collective.busbw_factor


RING = RingAlgorithm()
