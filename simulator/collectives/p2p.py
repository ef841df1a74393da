"""Point-to-point: nccl-tests' sendrecv (rank r sends S bytes to r+1 and receives from r-1).

Each rank's message is split over ``nchannels`` independent flows (NCCL spreads a peer
connection over several channels); flows are not chained: every pair progresses on its own.
Latency: NCCL's per-hop latency for the protocol, one hop (network hop when the pair spans two
servers); small messages go LL (NCCL_P2P_LL_THRESHOLD, 16 KiB by default), larger ones Simple.
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import LoweringContext, split_evenly

# NCCL's default NCCL_P2P_LL_THRESHOLD (src/init.cc / enqueue.cc): 16 KiB.
P2P_LL_THRESHOLD_BYTES = 16384


class SendRecv:
    name = "p2p"
    kinds = frozenset({CollectiveKind.SENDRECV})
    protocols = ("LL", "Simple")

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None if collective.nranks >= 2 else "sendrecv needs at least 2 ranks"

    def _pairs(self, collective: Collective) -> tuple[np.ndarray, np.ndarray]:
        group = np.asarray(collective.group, dtype=np.int64)
        return group, np.roll(group, -1)

    def _latency(self, collective: Collective, ctx: LoweringContext, protocol: str) -> float:
        layout = ctx.layout(collective.group)
        return nccl_model.ring_latency_s(kind_value="sendrecv", protocol=protocol, nranks=collective.nranks,
                                         nnodes=layout.nnodes, ppn=layout.ppn, intra=layout.intra,
                                         cpu_vendor=layout.cpu_vendor, nbytes=collective.nbytes, nchannels=1)

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        src, dst = self._pairs(collective) if collective.nranks > 1 else (np.zeros(0, np.int64),) * 2
        pieces = split_evenly(collective.nbytes, nchannels, DTYPE_BYTES[collective.dtype])
        npairs = src.shape[0]
        step = Step.of(src=np.repeat(src, nchannels), dst=np.repeat(dst, nchannels),
                       nbytes=np.tile(pieces, npairs), channel=np.tile(np.arange(nchannels), npairs),
                       latency_s=self._latency(collective, ctx, protocol), label="sendrecv")
        layout = ctx.layout(collective.group)
        return Schedule(collective=collective, algorithm=self.name, protocol=protocol, nchannels=nchannels,
                        steps=(step,), pxn=ctx.router.pxn, wire_factor=nccl_model.WIRE_FACTOR[protocol],
                        chain_rate_cap_bytes_per_s=nccl_model.protocol_cap_bytes_per_s(
                            protocol=protocol, arch=layout.arch, cpu_vendor=layout.cpu_vendor,
                            nnodes=layout.nnodes, nchannels=nchannels))

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        """Send half of rank q -> receive half of rank q+1, split over channels."""
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        if collective.nranks < 2:
            return ()
        pieces = split_evenly(elements, nchannels)
        starts = np.concatenate([[0], np.cumsum(pieces)[:-1]])
        src, dst = self._pairs(collective)
        return (DataStep.of([(int(a), int(b), int(o), int(c), elements + int(o))
                             for a, b in zip(src, dst) for o, c in zip(starts, pieces)]),)

    def estimate(self, collective: Collective, ctx: LoweringContext, *, protocol: str,
                 nchannels: int) -> tuple[float, float]:
        latency = self._latency(collective, ctx, protocol)
        if collective.nranks == 1:
            return latency, float("inf")
        if (protocol == "LL") != (collective.nbytes <= P2P_LL_THRESHOLD_BYTES):
            return latency, 0.0          # NCCL does not use this protocol for this size
        src, dst = self._pairs(collective)

        def rate():
            paths = [ctx.router.path(ctx.gpu(int(a)), ctx.gpu(int(b)), pxn=ctx.router.pxn) for a, b in zip(src, dst)]
            return float(ctx.chain_rates([p for p in paths for _ in range(nchannels)]).min())
        wire_rate = ctx.cached(("p2p-rate", collective.group, nchannels), rate)
        return latency, nchannels * wire_rate / nccl_model.WIRE_FACTOR[protocol]


SENDRECV = SendRecv()
