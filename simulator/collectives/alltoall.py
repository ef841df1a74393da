"""All-to-all: every rank sends a piece to every other rank (even pieces, or a split matrix for MoE).

Two schedules:

* ``pairwise`` (default, what NCCL's grouped send/recv amounts to): n-1 rounds; in round i
  member q sends to q+i and receives from q-i. ``ROUNDS_IN_FLIGHT`` rounds run together, the
  groups one after the other, so the slowest pair of a group paces it (a group that crosses the
  network runs at network speed).
* ``direct``: every pair at once, one step; each link shares bandwidth among all pairs crossing it.

Pairs split their piece like sendrecv (``p2p.pair_channels``): ``nchannels`` flows inside a
server, one network connection across servers (bounded by the NIC's per-connection throughput),
leaving through the NIC on the receiver's rail (PXN), as NCCL's point-to-point does.

Buffers (verification): the send half holds the pieces for members 0..n-1 in order, the receive
half the pieces from members 0..n-1 in order (``simulator.verify.alltoall_offsets``).

Latency: NCCL's per-hop figures (NVLink/PCIe inside a server, network across), per rank. LL
(pieces <= 16 KiB, NCCL's P2P LL threshold): base + the sum over its n-1 peers, since the same
threads write and poll every peer's flagged lines. Simple: base + the slowest peer's hop, since each
peer streams through its own channel's pipeline and the peers' hop latencies overlap. Worked
numbers, 8x B200 one node (+0.7 us platform hop): LL 6.6 + 7 x 0.6 + 0.7 = 11.5 us (measured 11.0 us
at 128 B); Simple 8.4 + 3.4 + 0.7 = 12.5 us (measured 13.7 us at 256 KiB, where summing the peers'
hops would give 33 us).
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from ..verify import alltoall_counts, alltoall_offsets
from . import nccl_model
from .base import LoweringContext, protocol_schedule, split_evenly
from .p2p import P2P_LL_THRESHOLD_BYTES, pair_channels

# Rounds in flight: NCCL's grouped send/recv progresses more than one peer of a rank at a time.
# Measured: all-to-all over 2x HGX B200 (NDR) reaches 42.4 GB/s busbw (algbw 45.2 GB/s), more than
# one network connection streams (one sendrecv pair: 19.6 GB/s). Two rounds at a time, in lock-step
# groups, give 8 groups of one connection-time for the 15 rounds of 16 ranks: algbw 16/8 x 20 = 40 GB/s,
# busbw 37.5 GB/s (12% under the measurement; NCCL overlaps the rounds more than lock-step groups).
ROUNDS_IN_FLIGHT = 2


class Alltoall:
    kinds = frozenset({CollectiveKind.ALL_TO_ALL})
    protocols = ("LL", "Simple")

    def __init__(self, name: str, *, rounds: bool, auto: bool):
        self.name = name
        self.rounds = rounds
        self.auto = auto          # considered by the automatic choice (NCCL has one alltoall: pairwise-like)

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None

    def _rounds(self, collective: Collective) -> list[list[tuple[int, int]]]:
        """Member-index pairs (p, q) per round (pairwise) or all in one round (direct)."""
        n = collective.nranks
        rounds = [[(p, (p + i) % n) for p in range(n)] for i in range(1, n)]
        if not self.rounds:
            return [[pair for r in rounds for pair in r]]
        return [[pair for r in rounds[i:i + ROUNDS_IN_FLIGHT] for pair in r]
                for i in range(0, len(rounds), ROUNDS_IN_FLIGHT)]

    def _latency_s(self, collective: Collective, ctx: LoweringContext, protocol: str, *,
                   hop_extra_us: float = 0.0) -> float:
        """Latency with the platform's ``hop_extra_us`` (``GroupLayout.hop_extra_us``; 0 for NCCL's own estimate)."""
        layout = ctx.layout(collective.group)
        group = collective.group
        intra = nccl_model.HW_LATENCY_US[layout.intra]["ring"][protocol]
        inter = nccl_model.HW_LATENCY_US["net"]["ring"][protocol]
        worst = 0.0
        combine = sum if protocol == "LL" else max
        for p in range(len(group)):
            hops = combine([inter if ctx.server(group[p]) != ctx.server(group[q]) else intra
                            for q in range(len(group)) if q != p] or [0.0])
            worst = max(worst, hops)
        # the platform's extra hop latency is paid once: a rank's sends to its peers run concurrently
        return (nccl_model.BASE_LATENCY_US["ring"][protocol] + worst + hop_extra_us) * 1e-6

    def _pair_flows(self, collective: Collective, ctx: LoweringContext, p: int, q: int, nchannels: int):
        """(src, dst, bytes, channel) flows of one pair."""
        group = collective.group
        counts = alltoall_counts(collective)
        elt = DTYPE_BYTES[collective.dtype]
        pieces = split_evenly(int(counts[p, q]) * elt, pair_channels(ctx, group[p], group[q], nchannels), elt)
        return [(group[p], group[q], int(b), c) for c, b in enumerate(pieces)]

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        latency = self._latency_s(collective, ctx, protocol, hop_extra_us=ctx.layout(collective.group).hop_extra_us)
        steps = []
        for i, pairs in enumerate(self._rounds(collective)):
            flows = [f for p, q in pairs for f in self._pair_flows(collective, ctx, p, q, nchannels)]
            src, dst, nbytes, channel = (np.array([f[k] for f in flows], dtype=np.int64) for k in range(4))
            # NCCL's per-hop latencies, summed over a rank's peers, already include the wire
            steps.append(Step.of(src=src, dst=dst, nbytes=nbytes, channel=channel, latency_s=latency if i == 0 else 0.0,
                                 label=f"alltoall round {i + 1}", path_latency=False))
        return protocol_schedule(collective, ctx, algorithm=self.name, protocol=protocol, nchannels=nchannels,
                                 steps=tuple(steps), pxn=ctx.router.pxn)

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        counts = alltoall_counts(collective)
        send, recv = alltoall_offsets(counts)
        group = collective.group
        steps = []
        for pairs in self._rounds(collective):
            ops = []
            for p, q in pairs:
                flows = self._pair_flows(collective, ctx, p, q, nchannels)
                elt = DTYPE_BYTES[collective.dtype]
                offset = 0
                for _, _, nbytes, _ in flows:
                    c = nbytes // elt
                    ops.append((group[p], group[q], int(send[p, q]) + offset, c, int(recv[q, p]) + offset))
                    offset += c
            steps.append(DataStep.of(ops))
        local = DataStep.of([(group[p], group[p], int(send[p, p]), int(counts[p, p]), int(recv[p, p]))
                             for p in range(len(group))])
        return (local, *steps)

    def estimate(self, collective: Collective, ctx: LoweringContext, *, protocol: str,
                 nchannels: int) -> tuple[float, float]:
        counts = alltoall_counts(collective)
        biggest = int(counts.max()) * DTYPE_BYTES[collective.dtype] if counts.size else 0
        latency = self._latency_s(collective, ctx, protocol)
        if collective.nranks == 1:
            return latency, float("inf")
        if (protocol == "LL") != (biggest <= P2P_LL_THRESHOLD_BYTES):
            return latency, 0.0
        time_s = 0.0
        for pairs in self._rounds(collective):
            paths, sizes = [], []
            for p, q in pairs:
                for s, d, nbytes, c in self._pair_flows(collective, ctx, p, q, nchannels):
                    paths.append(ctx.router.path(ctx.gpu(s), ctx.gpu(d), flow_key=c, pxn=ctx.router.pxn))
                    sizes.append(nbytes * nccl_model.WIRE_FACTOR[protocol])
            rates = ctx.chain_rates(paths) if paths else np.zeros(0)
            time_s += max((b / r for b, r in zip(sizes, rates) if b > 0), default=0.0)
        return latency, (collective.nbytes / time_s if time_s > 0 else float("inf"))


PAIRWISE = Alltoall("pairwise", rounds=True, auto=True)
DIRECT = Alltoall("direct", rounds=False, auto=False)
