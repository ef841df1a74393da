"""Point-to-point: nccl-tests' sendrecv (rank r sends S bytes to r+1 and receives from r-1).

Each rank's message is split over independent flows: ``nchannels`` of them between GPUs of one
server, ``NET_CONNECTIONS_PER_PEER`` network connections between servers; flows are not chained:
every pair progresses on its own.
Latency: NCCL's per-hop latency for the protocol, one hop (network hop when the pair spans two
servers); small messages go LL (NCCL_P2P_LL_THRESHOLD, 16 KiB by default), larger ones Simple.
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import LoweringContext, protocol_schedule, split_evenly

# NCCL's default NCCL_P2P_LL_THRESHOLD (src/init.cc / enqueue.cc): 16 KiB.
P2P_LL_THRESHOLD_BYTES = 16384

# Network connections one point-to-point peer pair streams over. Measured: one sendrecv pair
# between two HGX B200 servers moves 19.6 GB/s, one NIC connection's worth (NicSpec
# connection_bytes_per_s = 20 GB/s), not the NIC's 49.7 GB/s.
NET_CONNECTIONS_PER_PEER = 1


def pair_channels(ctx: LoweringContext, src_rank: int, dst_rank: int, nchannels: int) -> int:
    """Channels (parallel flows) of one point-to-point pair: all of them inside a server, the
    peer's network connections across servers."""
    return NET_CONNECTIONS_PER_PEER if ctx.server(src_rank) != ctx.server(dst_rank) else nchannels


class SendRecv:
    name = "p2p"
    kinds = frozenset({CollectiveKind.SENDRECV})
    protocols = ("LL", "Simple")

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None if collective.nranks >= 2 else "sendrecv needs at least 2 ranks"

    def _pairs(self, collective: Collective) -> tuple[np.ndarray, np.ndarray]:
        group = np.asarray(collective.group, dtype=np.int64)
        return group, np.roll(group, -1)

    def _latency(self, collective: Collective, ctx: LoweringContext, protocol: str, *,
                 hop_extra_us: float = 0.0) -> float:
        """Latency with the platform's ``hop_extra_us`` (``GroupLayout.hop_extra_us``; 0 for NCCL's own estimate)."""
        layout = ctx.layout(collective.group)
        return nccl_model.ring_latency_s(kind_value="sendrecv", protocol=protocol, nranks=collective.nranks,
                                         nnodes=layout.nnodes, ppn=layout.ppn, intra=layout.intra,
                                         cpu_vendor=layout.cpu_vendor, nbytes=collective.nbytes, nchannels=1,
                                         hop_extra_us=hop_extra_us)

    def _flows(self, collective: Collective, ctx: LoweringContext, nchannels: int):
        """(src, dst, element offset, elements, channel) of every flow."""
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        if collective.nranks < 2:
            return []
        out = []
        for a, b in zip(*self._pairs(collective)):
            pieces = split_evenly(elements, pair_channels(ctx, int(a), int(b), nchannels))
            starts = np.concatenate([[0], np.cumsum(pieces)[:-1]])
            out += [(int(a), int(b), int(o), int(c), k) for k, (o, c) in enumerate(zip(starts, pieces))]
        return out

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        flows = self._flows(collective, ctx, nchannels)
        elt = DTYPE_BYTES[collective.dtype]
        step = Step.of(src=[f[0] for f in flows], dst=[f[1] for f in flows], nbytes=[f[3] * elt for f in flows],
                       channel=[f[4] for f in flows], label="sendrecv",
                       latency_s=self._latency(collective, ctx, protocol,
                                               hop_extra_us=ctx.layout(collective.group).hop_extra_us))
        return protocol_schedule(collective, ctx, algorithm=self.name, protocol=protocol, nchannels=nchannels,
                                 steps=(step,), pxn=ctx.router.pxn)

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        """Send half of rank q -> receive half of rank q+1, split over the pair's channels."""
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        flows = self._flows(collective, ctx, nchannels)
        return (DataStep.of([(a, b, o, c, elements + o) for a, b, o, c, _ in flows]),) if flows else ()

    def estimate(self, collective: Collective, ctx: LoweringContext, *, protocol: str,
                 nchannels: int) -> tuple[float, float]:
        latency = self._latency(collective, ctx, protocol)
        if collective.nranks == 1:
            return latency, float("inf")
        if (protocol == "LL") != (collective.nbytes <= P2P_LL_THRESHOLD_BYTES):
            return latency, 0.0          # NCCL does not use this protocol for this size
        src, dst = self._pairs(collective)

        def rate():
            flows = self._flows(collective, ctx, nchannels)
            paths = [ctx.router.path(ctx.gpu(a), ctx.gpu(b), flow_key=k, pxn=ctx.router.pxn) for a, b, _, _, k in flows]
            per_pair = {}
            for (a, b, _, _, _), r in zip(flows, ctx.chain_rates(paths)):
                per_pair[(a, b)] = per_pair.get((a, b), 0.0) + float(r)
            return min(per_pair.values())
        wire_rate = ctx.cached(("p2p-rate", collective.group, nchannels), rate)
        return latency, wire_rate / nccl_model.WIRE_FACTOR[protocol]


SENDRECV = SendRecv()
