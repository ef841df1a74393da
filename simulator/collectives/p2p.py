"""Point-to-point: nccl-tests' sendrecv (rank r sends S bytes to r+1 and receives from r-1).

Channels, as NCCL splits a send (src/graph/paths.cc ncclTopoComputeP2pChannels, src/enqueue.cc
addP2pToPlan):

* the communicator has ``p2pnChannels`` point-to-point channels: its channel count
  (:func:`comm_p2p_channels`) rounded up to a power of two (:func:`op_channels` rounds it); each
  peer may use up to ``p2pnChannelsPerPeer`` of them (all of them on one NVSwitch server; 2 a peer
  once a peer is across the network, NCCL_NCHANNELS_PER_NET_PEER, fewer on very large
  communicators; 2 over PCIe). This network rule is that of ncclTopoGetNchannels before NCCL sized
  a network peer's channels by NIC bandwidth (NCCL_P2P_PER_CHANNEL_NET_BW: 4 for a 400G NIC); it
  sets only how many channels sends inside a server get in a multi-server communicator, which no
  shipped table is bound by;
* one send starts on ``nChannelsMin`` channels (the per-peer maximum, halved until every rank's
  peers fit the channels once: 4 a peer for 8 ranks on 32 channels) and doubles them while a
  channel's part exceeds the largest part: 32 chunks (16 MiB with NVLink's 512 KiB chunk) on one
  server, one chunk (128 KiB) across servers (:func:`op_channels`).

Inside a server each channel is one flow, capped at what one p2p channel moves
(``nccl_model.p2p_channel_bytes_per_s``: a CTA whose warps are split between sends and receives); an LL send
is split on LL's 64 KiB step instead of Simple's chunk, each channel at ``nccl_model.p2p_ll_channel_bytes_per_s``
(``LoweringContext.p2p_ll``).
Across servers a pair streams over ``NET_CONNECTIONS_PER_PEER`` network connection(s), whatever its
channel count (NCCL shares one connection between a peer's channels, NCCL_NET_SHARED_COMMS), capped
by the NIC's per-connection throughput, leaving through the NIC on the receiver's rail (PXN).
Worked numbers, HGX B200 sendrecv on 8 ranks (measured 792 / 799 / 808 us at 64 / 128 / 256 MiB):
4, 8 and 16 channels of 21.7 GB/s carry 64, 128 and 256 MiB in the same 773 us.

Latency: NCCL's per-hop latency for the protocol, one hop (network hop when the pair spans two
servers); small messages go LL, larger ones Simple, as the NCCL release decides (:func:`uses_ll`). A send
relayed under PXN (:func:`pxn_relayed`) takes the NVLink hop into the relay GPU's buffer before the network:
in the simulated time, NCCL's NVLink hop latency for the protocol plus the platform's (2x HGX B200 LL:
6.6 + 2.7 + 0.6 + 0.7 us, and the path; measured 14.4-15.3 us at 8 B-1 KiB).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..flows import SharedConnections, connection_caps_flat
from ..rates import equal_share_rates_csr
from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import AlgorithmDefaults, GroupLayout, LoweringContext, protocol_schedule, ring_channels, split_evenly

# NCCL's default NCCL_P2P_LL_THRESHOLD (src/init.cc / enqueue.cc): 16 KiB.
P2P_LL_THRESHOLD_BYTES = 16384

# The releases whose p2p LL/Simple rule changed (enqueue.cc addP2pToPlan, read at the tags v2.21.5, v2.22.3,
# v2.28.9, v2.29.2): from 2.22 the threshold scales with the per-peer channel maximum, from 2.29 with the
# channels the send runs on (uses_ll)
P2P_LL_PER_PEER_MAX_MINOR = 22
P2P_LL_PER_OP_CHANNELS_MINOR = 29

# Network connections one point-to-point peer pair streams over. Measured: one sendrecv pair
# between two HGX B200 servers moves 19.6 GB/s, one NIC connection's worth (NicSpec
# connection_bytes_per_s = 20 GB/s), not the NIC's 49.7 GB/s.
NET_CONNECTIONS_PER_PEER = 1

# NCCL's point-to-point chunk (NCCL_P2P_NET_CHUNKSIZE / NCCL_P2P_NVL_CHUNKSIZE / NCCL_P2P_PCI_CHUNKSIZE
# defaults, src/init.cc): the network's as soon as the communicator spans servers.
P2P_CHUNK_BYTES = MappingProxyType({"net": 128 << 10, "nvlink": 512 << 10, "pcie": 128 << 10})

# LL's step, the unit addP2pToPlan sizes an LL send's parts on (stepSize = buffSizes[LL] / NCCL_STEPS: 64 KiB of
# flagged lines, 32 KiB of payload): parts from 8 KiB (one server, a step / 8) or 32 KiB (network, a step / 2)
P2P_LL_STEP_BYTES = nccl_model.BUFFER_BYTES["LL"] // nccl_model.NCCL_STEPS

# p2pnChannels on one NVSwitch server: NCCL_DEBUG prints "24 coll channels ... 32 p2p channels, 32 p2p
# channels per peer" on HGX A100 and HGX H100 (24 rounded up to a power of two); the HGX B200 sendrecv
# table's 4 channels a peer at 8 ranks (module docstring) means 32 there too.
ONE_SERVER_NVLINK_P2P_CHANNELS = 32

# NCCL_NCHANNELS_PER_NET_PEER default (src/graph/paths.cc): 2 channels to a peer across the network.
NCHANNELS_PER_NET_PEER = 2


def _pow2_up(value: int) -> int:
    return 1 << max(0, int(value) - 1).bit_length()


def comm_p2p_channels(layout: GroupLayout) -> int:
    """NCCL's ``p2pnChannels`` for a communicator laid out as ``layout``, before NCCL rounds it up to
    a power of two (:func:`op_channels` does, after the network-peer rule that reads it unrounded)."""
    if layout.nnodes == 1 and layout.intra == "nvlink":
        return ONE_SERVER_NVLINK_P2P_CHANNELS
    return ring_channels(layout)


def p2p_channels(collective: Collective, ctx: LoweringContext) -> int:
    """The point-to-point channels (NCCL's p2pnChannels) of ``collective``'s communicator."""
    return comm_p2p_channels(ctx.layout(collective.group))


def peer_channels(layout: GroupLayout, nranks: int, nchannels: int) -> int:
    """NCCL's ``p2pnChannelsPerPeer``: the most channels one send to a peer may use, in a communicator of
    ``nranks`` ranks laid out as ``layout`` with ``nchannels`` channels (paths.cc ncclTopoComputeP2pChannels:
    the smallest over peers, a power of two)."""
    per_peer = _pow2_up(nchannels)
    if layout.nnodes > 1:  # the smallest peer count sets every peer's: the network's
        net = NCHANNELS_PER_NET_PEER
        while net * nranks > nchannels * 4 and net > 1:  # against the count before rounding, as NCCL does
            net //= 2
        per_peer = min(per_peer, net)
    if layout.intra == "pcie":
        per_peer = min(per_peer, 2)  # a PCIe peer: 2 channels
    return per_peer


def uses_ll(nbytes: int, layout: GroupLayout, nranks: int, nchannels: int, minor: int) -> bool:
    """Whether NCCL sends ``nbytes`` to one peer with LL rather than Simple (enqueue.cc, NCCL_P2P_LL_THRESHOLD
    of 16 KiB), as the release 2.``minor`` decides it: up to 2.21 a channel's part of at most the threshold;
    2.22 to 2.28 (addP2pToPlan's thresholdLL) the threshold x the per-peer channel maximum, so up to 512 KiB
    on one NVSwitch server (32 channels a peer) and 32 KiB across servers (2); from 2.29 the threshold x the
    channels this send runs on.

    >>> from simulator.collectives.base import GroupLayout
    >>> one = GroupLayout(servers=(0,), ranks_by_server=(tuple(range(8)),), nnodes=1, ppn=8, intra="nvlink",
    ...     arch="blackwell", cpu_vendor="intel", nics_per_server=8)
    >>> [uses_ll(256 << 10, one, 8, 32, minor) for minor in (21, 28, 30)]
    [False, True, False]
    """
    if nbytes <= 0:
        return True
    if minor >= P2P_LL_PER_OP_CHANNELS_MINOR:
        return nbytes <= op_channels(nbytes, layout, nranks, nchannels) * P2P_LL_THRESHOLD_BYTES
    if minor >= P2P_LL_PER_PEER_MAX_MINOR:
        return nbytes <= peer_channels(layout, nranks, nchannels) * P2P_LL_THRESHOLD_BYTES
    return -(-nbytes // op_channels(nbytes, layout, nranks, nchannels)) <= P2P_LL_THRESHOLD_BYTES


def op_channels(nbytes: int, layout: GroupLayout, nranks: int, nchannels: int, *, protocol: str = "Simple") -> int:
    """Channels NCCL runs one send of ``nbytes`` to a peer on, in a communicator of ``nranks`` ranks
    laid out as ``layout`` with ``nchannels`` channels (rounded up to a power of two, as NCCL does).
    The parts are sized on the protocol's step (addP2pToPlan's stepSize): Simple's p2p chunk, LL's FIFO step
    (``P2P_LL_STEP_BYTES``). For a send across servers the count only matters through the per-peer maximum it
    sets for the others: :func:`pair_flows` streams it over ``NET_CONNECTIONS_PER_PEER`` connection(s).

    >>> from simulator.collectives.base import GroupLayout
    >>> one = GroupLayout(servers=(0,), ranks_by_server=(tuple(range(8)),), nnodes=1, ppn=8, intra="nvlink",
    ...     arch="blackwell", cpu_vendor="intel", nics_per_server=8)
    >>> [op_channels(n << 10, one, 8, 32, protocol=p) for n in (8, 16, 32) for p in ("LL", "Simple")]
    [1, 1, 2, 1, 4, 1]
    """
    if nbytes <= 0:
        return 1
    total = _pow2_up(nchannels)  # nchannels <= MAX_CHANNELS (64), a power of two
    per_peer = peer_channels(layout, nranks, nchannels)
    lowest = per_peer
    while lowest * nranks > total and lowest > 1:
        lowest //= 2
    chunk = P2P_LL_STEP_BYTES if protocol == "LL" else P2P_CHUNK_BYTES["net" if layout.nnodes > 1 else layout.intra]
    min_part, max_part = (chunk // 2, chunk) if layout.nnodes > 1 else (chunk // 8, chunk * 32)
    n = min(lowest, -(-nbytes // min_part))
    part = max(min_part, -(-nbytes // n))
    while part > max_part and n <= per_peer // 2:
        n *= 2
        part = -(-nbytes // n)
    return n


def pxn_relayed(ctx: LoweringContext, src_rank: int, dst_rank: int) -> bool:
    """Whether a send from ``src_rank`` to ``dst_rank`` in another server goes out through the NIC of another
    GPU of its server under PXN (src/graph/paths.cc: the NIC on the destination's rail, reached over NVLink):
    the data then takes one NVLink hop into that GPU's buffer before the network."""
    if not ctx.pxn_hop or not ctx.router.pxn or ctx.server(src_rank) == ctx.server(dst_rank):
        return False
    topo = ctx.topology
    server, local = ctx.server(src_rank), ctx.local(src_rank)
    nic = ctx.router.nic_for(server, local, ctx.server(dst_rank), ctx.local(dst_rank), pxn=True)
    return nic != topo.servers[server].nic_of_gpu[local]


def pair_flows(
    ctx: LoweringContext,
    collective: Collective,
    nchannels: int,
    src_rank: int,
    dst_rank: int,
    nbytes: int,
    *,
    protocol: str = "Simple",
) -> tuple[np.ndarray, float]:
    """(byte pieces, per-piece payload cap) of one point-to-point send of ``collective`` under ``protocol``:
    NCCL's channels inside a server, each capped at one p2p channel's throughput (with ``ctx.p2p_ll``, an LL
    send's parts sized on LL's step and capped at an LL channel's throughput); the pair's network
    connection(s) across servers, capped by the network only."""
    elt = DTYPE_BYTES[collective.dtype]
    if ctx.server(src_rank) != ctx.server(dst_rank):
        return split_evenly(nbytes, NET_CONNECTIONS_PER_PEER, elt), np.inf
    layout = ctx.layout(collective.group)
    if protocol == "LL" and ctx.p2p_ll:
        parts = op_channels(nbytes, layout, collective.nranks, nchannels, protocol="LL")
        return split_evenly(nbytes, parts, elt), nccl_model.p2p_ll_channel_bytes_per_s(layout.arch)
    return (
        split_evenly(nbytes, op_channels(nbytes, layout, collective.nranks, nchannels), elt),
        nccl_model.p2p_channel_bytes_per_s(layout.arch),
    )


def step_time_s(ctx: LoweringContext, collective: Collective, flows, *, protocol: str, nchannels: int) -> float:
    """The tuner's time for one step of point-to-point ``flows`` ((src rank, dst rank, channel, payload
    bytes, payload cap) each), as the engine runs them: links and shared PXN connections split in
    proportion to bytes (every flow through a bottleneck ends with it, as max-min sharing has them),
    each flow within its own cap and the protocol's per-channel cap; the step ends with its slowest flow."""
    flows = [f for f in flows if f[3] > 0]
    if not flows:
        return 0.0
    layout = ctx.layout(collective.group)
    wire = nccl_model.WIRE_FACTOR[protocol]
    src, dst, channel = (np.array([f[k] for f in flows], dtype=np.int64) for k in range(3))
    wire_bytes = np.array([f[3] for f in flows], dtype=np.float64) * wire
    paths = ctx.router.paths(
        [ctx.gpu(int(r)) for r in src], [ctx.gpu(int(r)) for r in dst], flow_keys=channel.tolist(), pxn=ctx.router.pxn
    )
    counts = np.fromiter(map(len, paths), dtype=np.int64, count=len(paths))
    links = np.concatenate(paths)
    topo = ctx.topology
    by_bytes = wire_bytes * equal_share_rates_csr(
        links, np.repeat(wire_bytes, counts), counts, topo.link_capacity_bytes_per_s
    )
    # under PXN, flows to one destination through one NIC share a connection (as in the engine)
    shared = SharedConnections(destination=dst, nbytes=wire_bytes) if ctx.router.pxn else None
    connection = connection_caps_flat(topo, links, counts, ctx.qps_per_connection, shared=shared)
    protocol_cap = nccl_model.protocol_cap_bytes_per_s(
        protocol=protocol, arch=layout.arch, cpu_vendor=layout.cpu_vendor, nnodes=layout.nnodes, nchannels=nchannels
    )
    caps = np.minimum(np.array([f[4] for f in flows], dtype=np.float64), protocol_cap) * wire
    return float(np.max(wire_bytes / np.minimum(np.minimum(by_bytes, connection), caps)))


class SendRecv(AlgorithmDefaults):
    name = "p2p"
    kinds = frozenset({CollectiveKind.SENDRECV})
    protocols = ("LL", "Simple")

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None if collective.nranks >= 2 else "sendrecv needs at least 2 ranks"

    channels = staticmethod(p2p_channels)

    def _pairs(self, collective: Collective) -> tuple[np.ndarray, np.ndarray]:
        group = np.asarray(collective.group, dtype=np.int64)
        return group, np.roll(group, -1)

    def _latency(
        self, collective: Collective, ctx: LoweringContext, protocol: str, *, simulated: bool = False
    ) -> float:
        """NCCL's latency; ``simulated``: the simulated time's, with the platform's ``GroupLayout.hop_extra_us`` and
        the PXN relay hop (:func:`pxn_relayed`), which NCCL's own estimate does not see."""
        layout = ctx.layout(collective.group)
        hop_extra_us = layout.hop_extra_us if simulated else 0.0
        latency = nccl_model.ring_latency_s(
            kind_value="sendrecv",
            protocol=protocol,
            nranks=collective.nranks,
            nnodes=layout.nnodes,
            ppn=layout.ppn,
            intra=layout.intra,
            cpu_vendor=layout.cpu_vendor,
            nbytes=collective.nbytes,
            nchannels=1,
            hop_extra_us=hop_extra_us,
        )
        if simulated and any(pxn_relayed(ctx, int(a), int(b)) for a, b in zip(*self._pairs(collective))):
            # the simulated time only (NCCL's estimate has no PXN hop): the NVLink hop into the relay GPU
            latency += (nccl_model.HW_LATENCY_US[layout.intra]["ring"][protocol] + hop_extra_us) * 1e-6
        return latency

    def _flows(self, collective: Collective, ctx: LoweringContext, nchannels: int, protocol: str):
        """(src, dst, element offset, elements, channel, payload cap) of every flow under ``protocol``."""
        if collective.nranks < 2:
            return []
        elt = DTYPE_BYTES[collective.dtype]
        out = []
        for a, b in zip(*self._pairs(collective)):
            pieces, cap = pair_flows(ctx, collective, nchannels, int(a), int(b), collective.nbytes, protocol=protocol)
            counts = pieces // elt
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            out += [(int(a), int(b), int(o), int(c), k, cap) for k, (o, c) in enumerate(zip(starts, counts))]
        return out

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        flows = self._flows(collective, ctx, nchannels, protocol)
        elt = DTYPE_BYTES[collective.dtype]
        step = Step.of(
            src=[f[0] for f in flows],
            dst=[f[1] for f in flows],
            nbytes=[f[3] * elt for f in flows],
            channel=[f[4] for f in flows],
            rate_cap_bytes_per_s=[f[5] for f in flows],
            label="sendrecv",
            latency_s=self._latency(collective, ctx, protocol, simulated=True),
        )
        return protocol_schedule(
            collective,
            ctx,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            steps=(step,),
            pxn=ctx.router.pxn,
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        """Send half of rank q -> receive half of rank q+1, split over the pair's channels (as the protocol NCCL
        takes for the size splits it)."""
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        layout = ctx.layout(collective.group)
        ll = uses_ll(collective.nbytes, layout, collective.nranks, nchannels, ctx.nccl_minor)
        flows = self._flows(collective, ctx, nchannels, "LL" if ll else "Simple")
        return (DataStep.of([(a, b, o, c, elements + o) for a, b, o, c, _, _ in flows]),) if flows else ()

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        latency = self._latency(collective, ctx, protocol)
        if collective.nranks == 1:
            return latency, float("inf")
        layout = ctx.layout(collective.group)
        if (protocol == "LL") != uses_ll(collective.nbytes, layout, collective.nranks, nchannels, ctx.nccl_minor):
            return latency, 0.0  # NCCL does not use this protocol for this size
        elt = DTYPE_BYTES[collective.dtype]

        def algbw():
            flows = [
                (a, b, k, c * elt, cap) for a, b, _, c, k, cap in self._flows(collective, ctx, nchannels, protocol)
            ]
            time_s = step_time_s(ctx, collective, flows, protocol=protocol, nchannels=nchannels)
            return collective.nbytes / time_s if time_s > 0 else float("inf")

        parts = "LL" if protocol == "LL" and ctx.p2p_ll else "Simple"
        op_nchannels = op_channels(collective.nbytes, layout, collective.nranks, nchannels, protocol=parts)
        key = ("p2p-algbw", collective.group, nchannels, op_nchannels, protocol, ctx.p2p_ll)
        return latency, ctx.cached(key, algbw)


SENDRECV = SendRecv()
