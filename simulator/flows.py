"""Route, then replay: a lowered schedule's step becomes flat routed arrays (:class:`NetworkFlows`).

This is the one place where the flows of a :class:`~simulator.schedule.Step` meet the router and
the one owner of the connection rules. The engine never routes: it receives :class:`NetworkFlows`
from a ``route(step, schedule)`` callable (:class:`Routes`, built by ``simulator.api``) and a
``on_link_failed(link)`` callback that makes later calls avoid a failed link.

**Flows and paths.** Step flow i goes from rank ``src[i]`` to rank ``dst[i]`` (a negative id is an
in-network buffer on ``Schedule.innet_nodes``: a switch that reduces or multicasts). Its path is
the router's from the GPU of the source rank to the GPU of the destination rank, with ECMP key =
its channel (one QP per channel connection) and the schedule's ``pxn``; under packet spraying a
path is several links each carrying a fraction ``w`` of the flow's bytes (weights 1 otherwise).

**Chains.** The flows of a chain (``chain >= 0``: the edges of one pipelined ring channel) advance
at one common rate, so they become ONE network flow over the union of their links. The chain's
bytes are those of its largest edge ``B = max_e b_e``, and each link of edge e is weighted by
``w x b_e / B``: the busiest edge paces the chain and every link still carries exactly its edge's
bytes. Independent flows (``chain == -1``) come first (in edge order), then one flow per chain (by
chain id); flows and chains that carry no bytes are dropped.

**Wire bytes.** ``wire = payload x wire_scale x wire_factor``: the protocol's wire factor
(LL 2, LL128 128/120, Simple 1) times the step's per-flow wire scale (NVLS legs: 1/efficiency).
Pipeline start-up ``fill_bytes`` is scaled the same way.

**Caps.** A flow's rate is at most

* the protocol's GPU-side cap ``Schedule.chain_rate_cap_bytes_per_s x wire_factor`` (a wire rate),
* an independent flow's own ``Step.rate_cap_bytes_per_s x wire_scale x wire_factor``,
* what its network connections stream (:func:`connection_caps_flat`): on every link with a
  per-connection limit ``L`` (``Topology.link_flow_cap_bytes_per_s``: a NIC's per-QP rate), a
  connection streams at most ``QPs x L / (its load on the link)``. Each distinct (source,
  destination, channel) of a chained step is one connection, so a chain's edges to different peers
  through one NIC (a tree's parent and child) do not share one limit. Under PXN (point-to-point
  schedules) the independent flows to one destination that leave through one NIC are one
  connection (NCCL_NET_SHARED_COMMS, aggregated by that NIC's proxy) and share its limit in
  proportion to their bytes: flow i gets ``QPs x L x b_i / sum_j b_j``. Otherwise every flow is
  one connection.

**Latency.** A step's latency is its protocol latency plus, unless ``Step.path_latency`` is off,
the largest path latency of its flows (a sprayed flow's is the byte-weighted mean over its paths).

Worked number: under PXN, ranks 0 and 1 (server 0 of two DGX H100) send 64 MiB and 1 MiB to rank 8
(GPU 0 of server 1). Both leave through NIC 0 (rank 8's rail) as one connection of a ConnectX-7
(20 GB/s per connection, one QP): caps 20 x 64/65 = 19.7 GB/s and 20 x 1/65 = 0.31 GB/s, so both
finish together after 65 MiB / 20 GB/s = 3.41 ms, as one 65 MiB connection would. Without PXN
each is its own connection at 20 GB/s.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from topologies.routing import Router
from topologies.topology import LinkTier, Topology

from .schedule import Schedule, Step


@dataclass(frozen=True, slots=True)
class NetworkFlows:
    """A step's network flows, flat: flow i crosses the ``counts[i]`` consecutive entries of
    ``links`` with the fractions ``link_weights`` of its bytes."""

    links: np.ndarray
    link_weights: np.ndarray
    counts: np.ndarray
    wire_bytes: np.ndarray
    caps_bytes_per_s: np.ndarray
    latency_s: float  # the step's: its protocol latency (+ its flows' largest path latency)
    fill_bytes: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes its arrays hold."""
        arrays = (self.links, self.link_weights, self.counts, self.wire_bytes, self.caps_bytes_per_s, self.fill_bytes)
        return sum(a.nbytes for a in arrays)


def network_flows(
    step: Step, schedule: Schedule, *, router: Router, rank_gpu: tuple[int, ...], qps_per_connection: int = 1
) -> NetworkFlows:
    """``step`` of ``schedule`` routed by ``router`` (ranks on GPUs ``rank_gpu``; NCCL_IB_QPS_PER_CONNECTION
    ``qps_per_connection``) into flat network flows: paths, chains, wire bytes, caps and latency as the
    module docstring says."""
    topology = router.topology
    wire, cap = schedule.wire_factor, schedule.chain_rate_cap_bytes_per_s * schedule.wire_factor
    edge_w = None  # None: every edge unsplit (weights 1)
    if schedule.innet_nodes:
        routed = [
            edge_weighted_path(router, rank_gpu, schedule.innet_nodes, s, d, flow_key=c, pxn=schedule.pxn)
            for s, d, c in zip(step.src.tolist(), step.dst.tolist(), step.channel.tolist())
        ]
        edge_paths = [links for links, _ in routed]
        edge_w = [w for _, w in routed]
    else:  # rank -> rank only: straight to the router, in bulk
        src, dst = [rank_gpu[s] for s in step.src.tolist()], [rank_gpu[d] for d in step.dst.tolist()]
        if router.spraying:
            edge_paths, edge_w = router.weighted_paths(src, dst, flow_keys=step.channel.tolist(), pxn=schedule.pxn)
        else:
            edge_paths = router.paths(src, dst, flow_keys=step.channel.tolist(), pxn=schedule.pxn)
    n_edges = len(edge_paths)
    lengths = np.fromiter(map(len, edge_paths), dtype=np.int64, count=n_edges)
    flat_links = np.concatenate(edge_paths) if n_edges else np.zeros(0, dtype=np.int64)
    flat_w = np.ones(flat_links.shape[0]) if edge_w is None else np.concatenate(edge_w)
    edge_of = np.repeat(np.arange(n_edges), lengths)  # the edge of each (edge, link) entry
    latency_s = step.latency_s
    if step.path_latency and n_edges:
        # a sprayed edge's latency is the byte-weighted mean over its paths (= path latency when unsplit)
        latency_s += float(
            np.bincount(edge_of, weights=topology.link_latency_s[flat_links] * flat_w, minlength=n_edges).max()
        )
    scale = 1.0 if step.wire_scale is None else step.wire_scale
    wire_bytes = step.nbytes.astype(np.float64) * scale
    carries = wire_bytes > 0
    fill_wire = (
        np.zeros(step.num_flows)
        if step.fill_bytes is None
        else step.fill_bytes * wire_bytes / np.maximum(step.nbytes, 1)
    ) * wire
    # independent flows first (one per edge that carries bytes, in edge order), then one flow per chain
    # (by chain id)
    chained = step.chain >= 0
    alone = ~chained & carries
    independent = np.flatnonzero(alone)
    entries = [np.flatnonzero(alone[edge_of])]
    weights = [flat_w[entries[0]]]
    count_parts, nbytes, fills = [lengths[independent]], [wire_bytes[independent]], [fill_wire[independent]]
    members = np.flatnonzero(chained)
    if members.size:
        # a chain is one flow over its edges' links in edge order, each weighted by its edge's
        # share of the chain's largest edge; chains whose edges all carry nothing are dropped
        order = members[np.argsort(step.chain[members], kind="stable")]
        _, starts, dense = np.unique(step.chain[order], return_index=True, return_inverse=True)
        top = np.maximum.reduceat(wire_bytes[order], starts)
        fill_top = np.maximum.reduceat(np.where(carries[order], fill_wire[order], -np.inf), starts)
        kept = top > 0
        chain_index = np.zeros(step.num_flows, dtype=np.int64)  # each chained edge's chain, numbered 0, 1, ...
        chain_index[order] = dense.reshape(-1)
        entry = np.flatnonzero((chained & carries)[edge_of])  # entries of chained edges that carry bytes
        entry = entry[np.argsort(chain_index[edge_of[entry]], kind="stable")]  # chain by chain, in edge order
        entry_edge = edge_of[entry]
        entry_chain = chain_index[entry_edge]
        entries.append(entry)
        weights.append(flat_w[entry] * (wire_bytes[entry_edge] / top[entry_chain]))
        count_parts.append(np.bincount(entry_chain, minlength=starts.shape[0])[kept])
        nbytes.append(top[kept])
        fills.append(fill_top[kept])
    entry = np.concatenate(entries)
    links, link_weights, counts = flat_links[entry], np.concatenate(weights), np.concatenate(count_parts)
    if members.size:
        # each distinct (source, destination, channel) of the step is one connection (its own QPs)
        connections, shared = _connection_ids(step)[edge_of[entry]], None
    elif schedule.pxn:
        # PXN: the flows to one destination that leave through one NIC (the destination's rail) use one
        # connection, shared by channels and senders and aggregated by the proxy (NCCL_NET_SHARED_COMMS,
        # on by default); they share its limit in proportion to their bytes
        connections, shared = None, SharedConnections(destination=step.dst[independent], nbytes=nbytes[0])
    else:
        connections, shared = None, None  # every flow is one edge, so one connection
    caps = np.minimum(
        cap,
        connection_caps_flat(
            topology, links, counts, qps_per_connection, link_weights, connections=connections, shared=shared
        ),
    )
    if step.rate_cap_bytes_per_s is not None:  # per-flow payload caps (Step.check: no chains), as wire rates
        caps = np.minimum(caps, (step.rate_cap_bytes_per_s * wire * scale)[independent])
    return NetworkFlows(
        links=links,
        link_weights=link_weights,
        counts=counts,
        wire_bytes=np.concatenate(nbytes) * wire,
        caps_bytes_per_s=caps,
        latency_s=latency_s,
        fill_bytes=np.concatenate(fills),
    )


def _connection_ids(step: Step) -> np.ndarray:
    """Each flow's connection: distinct (source, destination, channel) get distinct ids 0, 1, ...
    (in that lexicographic order), from one integer key per flow (sources and destinations are
    negative for in-network buffers, so both are offset by the smallest)."""
    lo = min(int(step.src.min()), int(step.dst.min()))
    span = max(int(step.src.max()), int(step.dst.max())) - lo + 1
    channel_lo = int(step.channel.min())
    channel_span = int(step.channel.max()) - channel_lo + 1
    key = ((step.src - lo) * span + (step.dst - lo)) * channel_span + (step.channel - channel_lo)
    return np.unique(key, return_inverse=True)[1].reshape(-1)


class SharedConnections(NamedTuple):
    """Channels that share network connections (NCCL's PXN with NCCL_NET_SHARED_COMMS): the channels
    with one destination that leave through one NIC use one connection, whose limit they share in
    proportion to their bytes (so they all finish together when it binds)."""

    destination: np.ndarray  # per channel: any integer id (>= 0) that tells destinations apart
    nbytes: np.ndarray  # per channel: its bytes (wire bytes; any common unit)


def connection_caps(
    topology: Topology, paths: list[np.ndarray], qps_per_connection: int = 1, weights: list[np.ndarray] | None = None
) -> np.ndarray:
    """Most each channel (a chain or a flow) over ``paths[i]`` can stream: on every link with a
    per-connection limit, everything the channel sends over it (the sum of its weights there)
    shares that limit x QPs per connection; ``inf`` where no link of the path has one."""
    if not paths:
        return np.full(0, np.inf)
    counts = np.fromiter(map(len, paths), dtype=np.int64, count=len(paths))
    return connection_caps_flat(
        topology,
        np.concatenate(paths),
        counts,
        qps_per_connection,
        None if weights is None else np.concatenate(weights),
    )


def connection_caps_flat(
    topology: Topology,
    links: np.ndarray,
    counts: np.ndarray,
    qps_per_connection: int = 1,
    weights: np.ndarray | None = None,
    connections: np.ndarray | None = None,
    shared: SharedConnections | None = None,
) -> np.ndarray:
    """:func:`connection_caps` of channels given flat: channel i crosses the ``counts[i]``
    consecutive entries of ``links`` (with ``weights``; None: all 1).

    By default each channel is one connection. ``connections`` (an integer >= 0 per entry) tells a
    channel's connections apart: a chain of edges to different peers (a tree's link to its parent
    and to a child) opens one connection per edge, each with its own limit, so the load on a
    limited link is summed per (channel, connection) and the channel streams at most the smallest
    share. ``shared`` instead joins channels: those with one destination whose first NIC link (the
    sending NIC's) is the same are one connection, and channel i gets limit x b_i / sum of w_j b_j
    over the connection's channels on each limited link."""
    if connections is not None and shared is not None:
        raise ValueError("connection_caps_flat: pass connections or shared, not both")
    caps = np.full(counts.shape[0], np.inf)
    limits = topology.link_flow_cap_bytes_per_s[links]
    finite = np.isfinite(limits)
    if not finite.any():
        return caps
    every_channel = np.repeat(np.arange(counts.shape[0]), counts)
    channel = every_channel[finite]
    w = (np.ones(links.shape[0]) if weights is None else weights)[finite]
    if shared is not None:
        # one connection per (sending NIC's link: the channel's first NIC-tier link, destination)
        nic = np.flatnonzero(topology.link_tier[links] == int(LinkTier.NIC))
        first = nic[np.unique(every_channel[nic], return_index=True)[1]]
        sender = topology.num_links + np.arange(counts.shape[0])  # no NIC link: a connection of its own
        sender[every_channel[first]] = links[first]
    links = links[finite]
    starts = np.flatnonzero(np.r_[True, channel[1:] != channel[:-1]])  # entries are in channel order
    if shared is not None:
        dst = np.asarray(shared.destination, dtype=np.int64)[channel]
        group = np.unique(sender[channel] * (int(dst.max()) + 1) + dst, return_inverse=True)[1].reshape(-1)
        nbytes = np.asarray(shared.nbytes, dtype=np.float64)[channel]
        if not (nbytes > 0).all():
            raise ValueError("SharedConnections.nbytes: every channel that crosses a limited link must carry bytes")
        w = w * nbytes
    elif connections is None:
        group, nbytes = channel, 1.0  # one group per channel
    else:  # one group per (channel, connection)
        span = int(connections.max()) + 1
        group, nbytes = np.unique(channel * span + connections[finite], return_inverse=True)[1].reshape(-1), 1.0
    # one load per (group, link): weights summed in path order; each entry gets its (group, link)'s share
    pairs, inverse = np.unique(group * topology.num_links + links, return_inverse=True)
    load = np.bincount(inverse, weights=w, minlength=pairs.shape[0])
    share = (topology.link_flow_cap_bytes_per_s[pairs % topology.num_links] / load)[inverse.reshape(-1)] * nbytes
    caps[channel[starts]] = qps_per_connection * np.minimum.reduceat(share, starts)
    return caps


def edge_path(
    router: Router,
    rank_gpu: tuple[int, ...],
    innet_nodes: Mapping[int, int],
    src: int,
    dst: int,
    *,
    flow_key: int = 0,
    pxn: bool = False,
) -> np.ndarray:
    """Links of one schedule edge: rank -> rank, rank <-> in-network buffer, or switch -> switch."""
    if src >= 0 and dst >= 0:
        return router.path(rank_gpu[src], rank_gpu[dst], flow_key=flow_key, pxn=pxn)
    if dst < 0 and src >= 0:
        return router.gpu_to_node(rank_gpu[src], innet_nodes[dst])
    if src < 0 and dst >= 0:
        return router.node_to_gpu(innet_nodes[src], rank_gpu[dst])
    return router.switch_path(innet_nodes[src], innet_nodes[dst], flow_key=flow_key)


def edge_weighted_path(
    router: Router,
    rank_gpu: tuple[int, ...],
    innet_nodes: Mapping[int, int],
    src: int,
    dst: int,
    *,
    flow_key: int = 0,
    pxn: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(links, fraction of the edge's bytes on each link): rank -> rank edges split over equal-cost
    paths under packet spraying; every other edge is one path (weights 1)."""
    if src >= 0 and dst >= 0:
        return router.weighted_path(rank_gpu[src], rank_gpu[dst], flow_key=flow_key, pxn=pxn)
    links = edge_path(router, rank_gpu, innet_nodes, src, dst, flow_key=flow_key, pxn=pxn)
    return links, np.ones(links.shape[0])


MEMO_BYTES = 256 << 20  # routed steps a simulation keeps (Routes): the 16,384-GPU 405B step routes ~140 MB


class Routes:
    """The router of one simulation, turning lowered steps into :class:`NetworkFlows`.

    Calling it (``routes(step, schedule)``) is the engine's ``route``: memoised per (schedule, step),
    since a step's flows depend on nothing else and each flow's route is pinned at its first request. The
    memo keeps at most ``MEMO_BYTES`` of routed arrays, the least recently used going first: a step routed
    again gets the same flows from its pins (a 98,304-GPU step routes ~1 GB of distinct steps).
    :meth:`route` is the same without the memo (for callers that route each step once).
    :meth:`on_link_failed` is the engine's reroute callback: later calls route around the failed link
    (a fresh router, ``Router.failing``: no assigned load, no pins; its wiring tables shared) and
    forget the memo.
    """

    def __init__(self, router: Router, *, rank_gpu: tuple[int, ...], qps_per_connection: int = 1):
        self.router = router
        self.rank_gpu = rank_gpu
        self.qps_per_connection = qps_per_connection
        # (schedule, its routed step, the step's array bytes), least recently used first; keeps its schedules alive
        self._memo: OrderedDict[tuple[int, int], tuple[Schedule, NetworkFlows, int]] = OrderedDict()
        self._memo_bytes = 0

    def __call__(self, step: Step, schedule: Schedule) -> NetworkFlows:
        key = (id(schedule), id(step))
        hit = self._memo.get(key)
        if hit is not None:
            self._memo.move_to_end(key)
            return hit[1]
        flows = self.route(step, schedule)
        size = flows.nbytes
        self._memo[key] = (schedule, flows, size)
        self._memo_bytes += size
        while self._memo_bytes > MEMO_BYTES and len(self._memo) > 1:
            _, (_, _, dropped) = self._memo.popitem(last=False)
            self._memo_bytes -= dropped
        return flows

    def route(self, step: Step, schedule: Schedule) -> NetworkFlows:
        return network_flows(
            step, schedule, router=self.router, rank_gpu=self.rank_gpu, qps_per_connection=self.qps_per_connection
        )

    def on_link_failed(self, link: int) -> None:
        self.router = self.router.failing((link,))
        self._memo.clear()
        self._memo_bytes = 0
