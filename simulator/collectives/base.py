"""The algorithm interface and what an algorithm may know about the system.

An algorithm is a small object with

* ``name``, ``kinds`` (the collective kinds it implements) and ``protocols`` (those it runs with),
* ``auto``: whether NCCL's automatic choice considers it (False: only when forced with ``--algo``),
* ``channels(collective, ctx) -> int | None``: its own channel count (NVLS's nvlsChannels, the
  point-to-point p2pnChannels), or None to run on the communicator's ring channels,
* ``supported(collective, ctx) -> None | reason``: whether it can run here (NVLS needs NVSwitch
  SHARP, ...),
* ``program(collective, ctx, *, nchannels)``: its logical data steps, for verification,
* ``lower(collective, ctx, *, protocol, nchannels) -> Schedule``: the flows and latencies,
* ``estimate(collective, ctx, *, protocol, nchannels) -> (latency_s, algbw_bytes_per_s)``:
  NCCL-style cost used by the tuner to choose, as NCCL does, before anything is simulated.

Algorithms are registered in ``simulator.collectives.ALGORITHMS``. They see the system through a
:class:`LoweringContext`: the topology, the router (paths) and the rank -> GPU placement; they
never touch a network model or the engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, cast, runtime_checkable

import numpy as np

from topologies.devices import GPU_PRESETS
from topologies.links import NCCL_NVLINK_BYTES_PER_S, LinkKind
from topologies.routing import Router
from topologies.topology import LinkTier, NodeKind, ServerInfo, Topology
from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..flows import connection_caps, edge_path
from ..rates import equal_share_rates
from ..schedule import DataStep, Schedule, Step
from . import nccl_model

_T = TypeVar("_T")
NIC_PATH_ORDER = {name: i for i, name in enumerate(nccl_model.NIC_PATHS)}

#: an edge of an in-network schedule: (src, dst, elements, chain); a negative src/dst is a switch buffer
InnetEdge = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupLayout:
    """How a group's ranks sit on servers: servers in order of first rank, local GPUs sorted."""

    servers: tuple[int, ...]
    ranks_by_server: tuple[tuple[int, ...], ...]  # ranks of each server, by local GPU index
    nnodes: int
    ppn: int  # most ranks on one server
    intra: str  # "nvlink" | "pcie"
    arch: str
    cpu_vendor: str
    nics_per_server: int
    hop_extra_us: float = 0.0  # platform latency per intra-server hop over NCCL's table
    sm_version: int = 0  # the GPUs' compute capability x 10 (the lowest of the group's servers)
    nic_path: str = "pix"  # farthest GPU-to-NIC path (nccl_model.NIC_PATHS) of the group's GPUs, as NCCL types it
    # NICs closest to the group's GPUs on a server (the fewest over its servers) and the slowest one's network
    # port in GB/s, for NCCL's channel search (ring_channels); 0: not given, two channels a NIC of the server
    nics_used: int = 0
    nic_gbps: float = 0.0


MAX_CHANNELS = 64  # NCCL MAXCHANNELS (src/include/device.h, 2.2x+)


# NCCL's ring-search speeds across servers, GB/s a channel, by GPU generation (src/graph/search.cc
# speedArrayInter, sm90SpeedArrayInter, sm100SpeedArrayInter): the search's first is the largest a NIC carries
SEARCH_SPEEDS_INTER_GBPS = {
    80: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    100: (
        96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0,
        20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12,
    ),
}  # fmt: skip
# ncclTopoDupChannels doubles the searched channels when a channel moves at least this (GB/s), except on sm > 80
# with more than DUP_MAX_CHANNELS channels below DUP_FAST_GBPS; ncclTopoPostset doubles them again, and on sm >= 90
# once more while under POSTSET_CHANNELS_CAP channels of more than POSTSET_FAST_GBPS ("4 compute channels per
# search channel ... on <8 PPN"); src/graph/search.cc and src/graph/connect.cc
DUP_MIN_GBPS = 25.0
DUP_FAST_GBPS = 50.0
DUP_MAX_CHANNELS = 4
POSTSET_FAST_GBPS = 45.0
POSTSET_CHANNELS_CAP = 16


def search_ring_channels(nics: int, nic_gbps: float, sm_version: int, *, tree_set: bool = False) -> int:
    """NCCL's channels for a communicator across servers whose GPUs use ``nics`` NICs on a server, each a
    ``nic_gbps`` GB/s port, on sm ``sm_version`` GPUs: the ring search finds one channel a NIC at the fastest
    search speed the NIC carries, ncclTopoDupChannels and ncclTopoPostset then duplicate them. ``tree_set``: the
    set ncclTopoPostset's duplication makes (tree 0 on its first half, tree 1 on the rest, connectTrees), before
    the sm >= 90 copies past it, which keep their original's tree.

    >>> [search_ring_channels(n, 50.0, 90) for n in (1, 2, 4, 8)]   # DGX H100, NDR: 1 GPU a server -> 4
    [4, 8, 16, 16]
    >>> [search_ring_channels(n, 25.0, 80) for n in (1, 8)]         # DGX A100, HDR
    [2, 16]
    """
    generation = 100 if sm_version >= 100 else 90 if sm_version >= 90 else 80
    speeds = SEARCH_SPEEDS_INTER_GBPS[generation]
    speed = next((v for v in speeds if v <= nic_gbps), speeds[-1])
    channels = max(1, nics)
    if speed >= DUP_MIN_GBPS and not (
        sm_version > 80 and speed < DUP_FAST_GBPS and channels > DUP_MAX_CHANNELS
    ):  # ncclTopoDupChannels (ccMin > 80: Ada's sm89 too)
        channels, speed = 2 * channels, speed / 2
    channels *= 2  # ncclTopoPostset: "Duplication should be complete now"
    if tree_set:
        return min(MAX_CHANNELS, channels)
    if generation >= 90 and speed > POSTSET_FAST_GBPS and channels < POSTSET_CHANNELS_CAP:
        channels *= 2
    return min(MAX_CHANNELS, channels)


def ring_channels(layout: GroupLayout) -> int:
    """The communicator's channel count (rings, trees). Across NVLink servers with ``layout.nics_used`` given,
    NCCL's search over the NICs the group's GPUs use (:func:`search_ring_channels`: 16 for 8 GPUs on 8 NDR NICs,
    4 for one GPU a server); otherwise about two per NIC of the server on NVLink servers (16 with 8 NICs), 2 on
    PCIe-only boxes (an approximation of NCCL's topology search)."""
    if layout.intra != "nvlink":
        return 2
    if layout.nnodes > 1 and layout.nics_used > 0:
        return search_ring_channels(layout.nics_used, layout.nic_gbps, layout.sm_version)
    return min(MAX_CHANNELS, max(2, 2 * layout.nics_per_server))


def tree_set_channels(layout: GroupLayout) -> int:
    """The channels connectTrees splits over the two trees: :func:`ring_channels` without the sm >= 90 copies past
    ncclTopoPostset's duplication (:func:`search_ring_channels` ``tree_set``)."""
    if layout.intra == "nvlink" and layout.nnodes > 1 and layout.nics_used > 0:
        return search_ring_channels(layout.nics_used, layout.nic_gbps, layout.sm_version, tree_set=True)
    return ring_channels(layout)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoweringContext:
    topology: Topology
    router: Router
    rank_gpu: tuple[int, ...]
    qps_per_connection: int = 1  # NCCL_IB_QPS_PER_CONNECTION
    # network proxy model (nccl_model.proxy_step_s): off, or on with a per-step cost (None: the default)
    net_proxy: bool = True
    proxy_step_us: float | None = None
    # floor of a multi-server ring: each network connection's steps at nccl_model.ring_net_step_s, the first
    # loop's transfer after its round trips ("connection"); the round trips alone ("round_trip"), or the busiest
    # GPU's serial proxy work as trees ("proxy"): both earlier models, for ablation
    ring_net_floor: Literal["connection", "round_trip", "proxy"] = "connection"
    # a tree all_reduce's chains: one a channel, the first half of the channels on one tree and the second half on
    # the other, the search's channels (half the communicator's) capping NCCL's estimate ("channel", NCCL's); two a
    # channel, one a tree, capped by all the channels ("pair"): the earlier model, for ablation
    tree_chains: Literal["channel", "pair"] = "channel"
    # channels past the search's doubled set (NCCL_MIN_CTAS) are copies of the first ones (connect.cc copyChannels):
    # their tree and NIC, the search's tree bandwidth shared (tree.TreeAlgorithm); False: the communicator's
    # channels split in halves over the two trees, a quarter of a channel's ceiling each (the earlier model)
    tree_copies: bool = True
    # a multi-server tree's chunks cross the network store and forward, each crossing a round trip
    # (nccl_model.tree_net_floor_s); False: the busiest proxy's serial work alone (the earlier model, ablation)
    tree_net_floor: bool = True
    # a point-to-point send relayed under PXN pays the NVLink hop into the relay GPU (p2p.pxn_relayed); False: not
    pxn_hop: bool = True
    # a point-to-point LL send's parts sized on LL's step, each at an LL p2p channel's throughput (p2p.pair_flows,
    # nccl_model.P2P_LL_CHANNEL_GBPS_BLACKWELL); False: Simple's chunk, capped at llMaxBw / channels
    p2p_ll: bool = True
    # Simple rings between sm80 GPUs over NVLink read each slice (nccl_model.ring_read_slices_s); False: not
    p2p_read: bool = True
    # LL rings between Ampere GPUs on one NVLink server at a channel's own rate (trees keep NCCL's;
    # nccl_model.simulated_cap_bytes_per_s)
    ll_channel: bool = True
    # LL128 likewise (nccl_model.LL128_CHANNEL_GBPS_AMPERE); False: NCCL's perChMaxRingLL128Bw
    ll128_channel: bool = True
    # LL rings across servers (not trees): llMaxBw (the host's row) shared by the launched channels, each at most
    # NCCL's one-server LL rate (nccl_model.ll_net_share_cap_bytes_per_s); False: llMaxBw / the communicator's
    # channels (NCCL's figure)
    ll_net_share: bool = True
    # a multi-server ring's latency pays the network on every crossing of its dependency chain
    # (nccl_model.ring_chain_crossings); False: on NCCL's N - 1 (2 (N - 1) for all_reduce)
    ring_crossings: bool = True
    # a communicator across servers gets the channels NCCL's search finds over the NICs its GPUs use (ring_channels,
    # search_ring_channels: 4 for one GPU a DGX H100); False: two per NIC of the server, whatever it uses (ablation)
    search_channels: bool = True
    # the NCCL release's minor number (CollectivePolicy.nccl_minor) where a mechanism differs between releases
    nccl_minor: int = nccl_model.nccl_minor(nccl_model.DEFAULT_NCCL_VERSION)
    _cache: dict[Hashable, object] = field(default_factory=dict, repr=False, compare=False)

    def gpu(self, rank: int) -> int:
        return self.rank_gpu[rank]

    def server(self, rank: int) -> int:
        return int(self.topology.gpu_server[self.rank_gpu[rank]])

    def local(self, rank: int) -> int:
        return int(self.topology.gpu_local[self.rank_gpu[rank]])

    def cached(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """Per-simulation memo for size-independent results (ring orders, chain paths)."""
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = build()
        return cast(_T, value)  # the cache holds what ``build`` of this key returned

    def layout(self, group: tuple[int, ...]) -> GroupLayout:
        return self.cached(("layout", group, self.search_channels), lambda: self._layout(group))

    def _layout(self, group: tuple[int, ...]) -> GroupLayout:
        for rank in group:
            if not 0 <= rank < len(self.rank_gpu):
                raise ValueError(f"collective group: rank {rank} is not placed; {len(self.rank_gpu)} ranks exist")
        order: dict[int, list[int]] = {}
        for rank in group:
            order.setdefault(self.server(rank), []).append(rank)
        servers = tuple(order)
        ranks_by_server = tuple(tuple(sorted(order[s], key=self.local)) for s in servers)
        infos = [self.topology.servers[s] for s in servers]
        return GroupLayout(
            servers=servers,
            ranks_by_server=ranks_by_server,
            nnodes=len(servers),
            ppn=max(len(r) for r in ranks_by_server),
            intra="nvlink" if all(i.nvswitch >= 0 for i in infos) else "pcie",
            arch=infos[0].gpu_arch,
            cpu_vendor="amd" if any(i.cpu_vendor == "amd" for i in infos) else "intel",
            nics_per_server=min(len(i.nics) for i in infos),
            hop_extra_us=(
                nccl_model.NVLINK_HOP_EXTRA_US.get(infos[0].gpu_arch, 0.0)
                if all(i.nvswitch >= 0 for i in infos)
                else 0.0
            ),
            sm_version=min(i.gpu_sm_version for i in infos),
            nic_path=max(
                (self._nic_path(info, self.local(r)) for info, ranks in zip(infos, ranks_by_server) for r in ranks),
                key=nccl_model.NIC_PATHS.index,
            ),
            **(self._nics_used(infos, ranks_by_server) if self.search_channels else {}),
        )

    def _nics_used(self, infos: list[ServerInfo], ranks_by_server: tuple[tuple[int, ...], ...]) -> dict[str, Any]:
        """``nics_used``: the fewest distinct closest NICs of the group's GPUs on one of its servers (NCCL takes the
        smallest channel count over its ranks); ``nic_gbps``: the slowest bandwidth, GB/s, from one of its GPUs
        through its NIC's network port (NCCL's search speed is bounded by the path's slowest link, ncclTopoCompute's
        maxBw / totalBw: the port, or a PCIe or CPU link on the way to it)."""
        topo = self.topology
        used, gbps = [], []
        for info, ranks in zip(infos, ranks_by_server):
            nics = {info.nic_of_gpu[self.local(r)]: self.local(r) for r in ranks}
            nics.pop(-1, None)
            used.append(len(nics))
            for nic, local in nics.items():
                out = np.nonzero(topo.link_src == info.nics[nic])[0]
                route = info.gpu_to_nic_routes[(local, nic)]
                port = max(
                    (topo.link_capacity_bytes_per_s[k] for k in out if topo.link_tier[k] == LinkTier.NIC), default=0.0
                )
                path = min((float(topo.link_capacity_bytes_per_s[k]) for k in route), default=np.inf)
                gbps.append(min(port, path) / 1e9)
        if not gbps or min(used) == 0:
            return {}
        return {"nics_used": min(used), "nic_gbps": min(gbps)}

    def _nic_path(self, info: ServerInfo, local: int) -> str:
        """NCCL's path type from local GPU ``local`` to its closest NIC (nccl_model.NIC_PATHS): PIX through one
        PCIe switch, PXB through several, PHB through the CPU, SYS across sockets; PXN when that is farther than
        PXB but the server has NVLink and the NIC a GPU under its own switch (NCCL then goes through that GPU)."""
        if not info.nics:
            return "pix"  # no NIC: nothing crosses servers from here

        def path(route: tuple[int, ...]) -> str:
            kinds = [self.topology.node_kind(int(self.topology.link_dst[link])) for link in route[:-1]]
            cpus = kinds.count(NodeKind.CPU)
            if cpus:
                return "sys" if cpus > 1 else "phb"
            return "pix" if kinds.count(NodeKind.PCIE_SWITCH) <= 1 else "pxb"

        own = path(info.nic_to_gpu_routes[(info.nic_of_gpu[local], local)])
        if NIC_PATH_ORDER[own] > NIC_PATH_ORDER["pxb"] and info.nvswitch >= 0:
            near = [path(info.nic_to_gpu_routes[(j, g)]) for j, g in enumerate(info.gpu_of_nic)]
            if any(NIC_PATH_ORDER[p] <= NIC_PATH_ORDER["pxb"] for p in near):
                return "pxn"
        return own

    def nccl_capacity(self) -> np.ndarray:
        """Link capacities as NCCL's tuner sees them: an NVLink link between a GPU and its switch
        at NCCL's per-link figure for the GPU's generation (``topologies.links.NCCL_NVLINK_BYTES_PER_S``)
        times its link count (only B200's NVLink5 departs: modelled 37.9 GB/s per link, NCCL's 40.1); the
        links between fabric switches unlimited, since NCCL's topology ends at the NIC (its inter-node
        bandwidth is the NIC's: it knows neither oversubscription, nor a dragonfly's global links, nor which
        spine ECMP picks); every other link as modelled."""

        def build() -> np.ndarray:
            topo = self.topology
            capacity = topo.link_capacity_bytes_per_s.copy()
            capacity[topo.link_tier >= int(LinkTier.FABRIC_1)] = np.inf
            nvlink = np.flatnonzero(topo.link_kind == int(LinkKind.NVLINK))
            src, dst = topo.link_src[nvlink], topo.link_dst[nvlink]
            gpu_end = np.where(np.isin(src, topo.gpu_nodes), src, dst)  # the GPU end of each NVLink link
            gpus_by_name: dict[str | None, list[int]] = {}
            for node in topo.gpu_nodes.tolist():
                gpus_by_name.setdefault(topo.graph.nodes[node].get("gpu"), []).append(node)
            for name, gpus in gpus_by_name.items():
                capacity[nvlink[np.isin(gpu_end, gpus)]] *= _nccl_nvlink_scale(name)
            return capacity

        return self.cached(("nccl-capacity",), build)

    def chain_rates(self, chains: list[np.ndarray], weights: list[np.ndarray] | None = None) -> np.ndarray:
        """Equal-share rate of each chain's link list (the tuner's static bandwidth estimate) on the
        modelled capacities, bounded by what the chain's network connections can stream."""
        rates = equal_share_rates(chains, self.topology.link_capacity_bytes_per_s, weights)
        caps = connection_caps(self.topology, chains, self.qps_per_connection, weights)
        bounded: np.ndarray = np.minimum(rates, caps)
        return bounded


def _nccl_nvlink_scale(gpu_name: str | None) -> float:
    """NCCL's per-link NVLink figure over the modelled one for a GPU preset (1 when either is unknown)."""
    spec = None if gpu_name is None else GPU_PRESETS.get(gpu_name)
    if spec is None or spec.nvlink is None:
        return 1.0
    nccl_bytes_per_s = NCCL_NVLINK_BYTES_PER_S.get(spec.arch)
    if not nccl_bytes_per_s:
        return 1.0
    return nccl_bytes_per_s / spec.nvlink.bandwidth_bytes_per_s


@runtime_checkable
class Algorithm(Protocol):
    """Every attribute and method the tuner, ``simulate`` and the verifier call (module docstring)."""

    name: str
    kinds: frozenset[CollectiveKind]
    protocols: tuple[str, ...]
    auto: bool

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None: ...

    def channels(self, collective: Collective, ctx: LoweringContext) -> int | None: ...

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]: ...

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule: ...

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]: ...


class LaunchedAlgorithm(Protocol):
    """An algorithm that lowers onto a chosen number of its communicator's channels (ring, tree)."""

    name: str

    def lower_on(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int, comm_channels: int
    ) -> Schedule: ...


class AlgorithmDefaults:
    """What an algorithm has unless it says otherwise: NCCL's automatic choice considers it, and it runs
    on the communicator's ring channels."""

    auto: bool = True

    def channels(self, collective: Collective, ctx: LoweringContext) -> int | None:
        return None


def piece_layout(collective: Collective, nchannels: int) -> tuple[np.ndarray, np.ndarray]:
    """Where channel c's part of piece q lives in the working buffer: (offset[c, q], count[c, q]),
    in elements.

    all_gather / reduce_scatter / alltoall: the buffer holds n pieces of C/n elements, piece q
    belonging to group member q; each piece is split over the channels. Others: the buffer is
    split over channels first, then each channel's range into n pieces (q is just an index).
    """
    n = collective.nranks
    elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
    if collective.kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        piece = elements // n
        sub = split_evenly(piece, nchannels)
        sub_offset = np.concatenate([[0], np.cumsum(sub)[:-1]])
        offset = sub_offset[:, None] + piece * np.arange(n)[None, :]
        count = np.repeat(sub[:, None], n, axis=1)
    else:
        per_channel = split_evenly(elements, nchannels)
        channel_offset = np.concatenate([[0], np.cumsum(per_channel)[:-1]])
        count = np.stack([split_evenly(int(e), n) for e in per_channel]) if nchannels else np.zeros((0, n), np.int64)
        offset = channel_offset[:, None] + np.concatenate(
            [np.zeros((nchannels, 1), np.int64), np.cumsum(count, axis=1)[:, :-1]], axis=1
        )
    return offset.astype(np.int64), count.astype(np.int64)


def protocol_schedule(
    collective: Collective,
    ctx: LoweringContext,
    *,
    algorithm: str,
    protocol: str,
    nchannels: int,
    steps: Iterable[Step],
    comm_channels: int | None = None,
    **fields: Any,
) -> Schedule:
    """A Schedule whose flows carry the protocol's wire factor and per-channel payload cap: the cap
    of one of ``nchannels`` launched channels of a communicator of ``comm_channels`` (default ``nchannels``)
    channels, as simulated (``nccl_model.simulated_cap_bytes_per_s``)."""
    layout = ctx.layout(collective.group)
    return Schedule(
        collective=collective,
        algorithm=algorithm,
        protocol=protocol,
        nchannels=nchannels,
        steps=tuple(steps),
        wire_factor=nccl_model.WIRE_FACTOR[protocol],
        chain_rate_cap_bytes_per_s=nccl_model.simulated_cap_bytes_per_s(
            protocol=protocol,
            arch=layout.arch,
            cpu_vendor=layout.cpu_vendor,
            nnodes=layout.nnodes,
            nchannels=nchannels if comm_channels is None else comm_channels,
            intra=layout.intra,
            ll_channel=ctx.ll_channel,
            ll128_channel=ctx.ll128_channel,
            launched=nchannels,
            ll_net_share=ctx.ll_net_share,
        ),
        **fields,
    )


def rank_servers(ctx: LoweringContext) -> np.ndarray:
    """The server of every rank (memoised per simulation)."""
    server: np.ndarray = ctx.cached(
        "rank-server", lambda: np.asarray(ctx.topology.gpu_server, dtype=np.int64)[np.asarray(ctx.rank_gpu)]
    )
    return server


def proxy_busy_s(
    ctx: LoweringContext,
    src: np.ndarray,
    dst: np.ndarray,
    steps: np.ndarray,
    *,
    protocol: str,
    cpu_vendor: str,
    latency_covers: Literal["connection", "step"],
) -> float:
    """Work of the busiest network proxy thread for flows ``src -> dst`` (ranks), flow i being one
    network connection posting ``steps[i]`` steps (nccl_model: one proxy thread per GPU serves every
    connection of that GPU, send and receive, one step at a time), beyond what NCCL's latency already
    charges: every step of one connection (``latency_covers="connection"``: a ring's latency pays
    netOverhead on each of its steps) or the first step of each connection (``"step"``: a tree's latency
    pays each network hop once, for one chunk). Flows inside a server, in-network buffers and
    ``ctx.net_proxy`` off give 0.

    Worked number: a 2-server ring of 16 channels has, on each server, 16 channels entering and 16
    leaving over 8 GPUs: 4 connections a GPU; an all_gather of 16 ranks posts 15 steps on each, so
    the busiest proxy serves 60 steps, 45 beyond the latency's: 45 us at 1 us a step.
    """
    if not ctx.net_proxy or src.size == 0:
        return 0.0
    keep = (src >= 0) & (dst >= 0)
    src, dst, steps = src[keep], dst[keep], np.asarray(steps, dtype=np.float64)[keep]
    server = rank_servers(ctx)
    net = server[src] != server[dst]
    if not net.any():
        return 0.0
    nranks = len(ctx.rank_gpu)
    load: np.ndarray = np.bincount(src[net], weights=steps[net], minlength=nranks).astype(np.float64)
    load += np.bincount(dst[net], weights=steps[net], minlength=nranks)
    covered = np.zeros(nranks, dtype=np.float64)
    if latency_covers == "connection":
        np.maximum.at(covered, src[net], steps[net])
        np.maximum.at(covered, dst[net], steps[net])
    else:
        covered += np.bincount(src[net], minlength=nranks) + np.bincount(dst[net], minlength=nranks)
    load -= covered
    step_s = nccl_model.proxy_step_s(protocol=protocol, cpu_vendor=cpu_vendor, step_us=ctx.proxy_step_us)
    return float(load.max()) * step_s


def lower_launched(
    algorithm: LaunchedAlgorithm, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
) -> Schedule:
    """``algorithm.lower_on`` (ring, tree) on the channels NCCL launches for the collective's size
    (``nccl_model.launched_channels``) out of the communicator's ``nchannels``."""
    launched = nccl_model.launched_channels(
        algorithm=algorithm.name,
        protocol=protocol,
        nbytes=collective.nbytes,
        nchannels=nchannels,
        nranks=collective.nranks,
    )
    return algorithm.lower_on(collective, ctx, protocol=protocol, nchannels=launched, comm_channels=nchannels)


def check_runnable(algorithm: str, reason: str | None, protocol: str, protocols: tuple[str, ...]) -> None:
    """Raise a clear error when ``algorithm`` cannot run here (``reason``) or with ``protocol``."""
    if reason:
        raise ValueError(f"algorithm {algorithm}: {reason}")
    if protocol not in protocols:
        raise ValueError(f"protocol: {algorithm} runs with {', '.join(protocols)}, not {protocol!r}")


def innet_schedule(
    collective: Collective,
    *,
    algorithm: str,
    protocol: str,
    nchannels: int,
    edges: Sequence[InnetEdge],
    efficiency: float,
    innet_nodes: dict[int, int],
    latency_s: float,
    chain_rate_cap_bytes_per_s: float = math.inf,
    fill_bytes: float = 0.0,
) -> Schedule:
    """One step of chains through in-network reduction buffers (NVLS, NVLSTree, CollNet).

    ``edges`` are (src, dst, elements, chain); legs into or out of a switch buffer (negative id)
    run at the switch's reduction ``efficiency`` (wire scale 1/efficiency), other legs do not.
    ``chain_rate_cap_bytes_per_s`` is the Schedule's per-chain cap (CollNet: the SHARP aggregation rate);
    ``fill_bytes`` each chain's pipeline start-up (payload bytes, ``Step.fill_bytes``).
    """
    src, dst, count, chain = (np.array([e[i] for e in edges], dtype=np.int64) for i in range(4))
    scale = np.where((src < 0) | (dst < 0), 1.0 / efficiency, 1.0)
    step = Step.of(
        src=src,
        dst=dst,
        nbytes=count * DTYPE_BYTES[collective.dtype],
        chain=chain,
        channel=chain,
        latency_s=latency_s,
        label=f"{algorithm} {collective.kind.value}",
        wire_scale=scale,
        fill_bytes=np.full(src.shape[0], float(fill_bytes)) if fill_bytes else None,
    )
    return Schedule(
        collective=collective,
        algorithm=algorithm,
        protocol=protocol,
        nchannels=nchannels,
        steps=(step,),
        innet_nodes=innet_nodes,
        chain_rate_cap_bytes_per_s=chain_rate_cap_bytes_per_s,
    )


def innet_chain_rate(
    ctx: LoweringContext, edges: Iterable[InnetEdge], innet_nodes: dict[int, int], efficiency: float
) -> tuple[float, int]:
    """(slowest chain's equal-share rate, number of chains) of ``innet_schedule``'s chains, with
    the switch legs weighted by 1/efficiency as in the schedule."""
    paths: dict[int, list[np.ndarray]] = {}
    weights: dict[int, list[np.ndarray]] = {}
    for s, d, _, chain in edges:
        path = edge_path(ctx.router, ctx.rank_gpu, innet_nodes, s, d, flow_key=chain)
        paths.setdefault(chain, []).append(path)
        weights.setdefault(chain, []).append(np.full(path.shape[0], 1.0 / efficiency if min(s, d) < 0 else 1.0))
    chains = list(paths)
    rates = ctx.chain_rates([np.concatenate(paths[c]) for c in chains], [np.concatenate(weights[c]) for c in chains])
    return float(rates.min()), len(chains)


def split_evenly(total: int, parts: int, unit: int = 1) -> np.ndarray:
    """Split ``total`` bytes into ``parts`` pieces that are multiples of ``unit`` (the element
    size), as equal as possible, the larger pieces first. Sums exactly to ``total``."""
    units, rest = divmod(total, unit)
    base, extra = divmod(units, parts)
    pieces = np.full(parts, base, dtype=np.int64)
    pieces[:extra] += 1
    pieces *= unit
    pieces[0] += rest
    return pieces
