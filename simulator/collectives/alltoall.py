"""All-to-all: every rank sends a piece to every other rank (even pieces, or a split matrix for MoE).

Two schedules:

* ``direct`` (default, what NCCL's grouped send/recv does): every peer at once. NCCL puts the
  sends and receives to all peers of a group into one kernel, each peer on its own channels
  (src/enqueue.cc scheduleP2pTasksToPlan), so they all progress together; one step.
* ``pairwise``: n-1 rounds one after the other; in round i member q sends to q+i and receives
  from q-i (the classic pairwise exchange), so the slowest pair of a round paces it.

Pairs split their piece like sendrecv (``p2p.pair_flows``): NCCL's point-to-point channels inside
a server, each capped at one p2p channel's throughput; one network connection across servers,
leaving through the NIC on the receiver's rail (PXN). Under PXN the pieces a server sends to one
remote GPU all leave through that NIC over one connection, which NCCL shares between channels and
senders and its proxy aggregates (NCCL_NET_SHARED_COMMS, on by default), so they share one
connection's throughput (the engine's PXN connections).

Worked numbers. 2x HGX B200, 16 ranks: each NIC carries 8 GPUs' pieces to its rail peer over one
20 GB/s connection, so a GPU's 8 remote pieces (half of its buffer) move at 8 x 20 / 8 = 20 GB/s:
algbw 40 GB/s, busbw 37.5 GB/s (measured 42.4). 8x B200, one server, 64-512 MiB: 7 peers x 4
channels x 21.7 GB/s = 608 GB/s a GPU sends (measured 580 GB/s incremental); from 1 GiB the 8
channels a peer saturate NVLink.

Buffers (verification): the send half holds the pieces for members 0..n-1 in order, the receive
half the pieces from members 0..n-1 in order (``simulator.schedule.alltoall_offsets``).

Latency: NCCL's per-hop figures (NVLink/PCIe inside a server, network across, plus an NVLink hop for a
piece relayed under PXN, ``p2p.pxn_relayed``), per rank. LL (as ``p2p.uses_ll`` decides): base + the
sum over its n-1 peers, since the same threads write and poll every peer's flagged lines. Simple: base +
the slowest peer's hop, since each peer streams through its own channel's pipeline and the peers' hop
latencies overlap. Worked numbers, 8x B200 one node (+0.7 us platform hop): LL 6.6 + 7 x 0.6 + 0.7 =
11.5 us (measured 11.0 us at 128 B); Simple 8.4 + 3.4 + 0.7 = 12.5 us (measured 13.7 us at 256 KiB, where
summing the peers' hops would give 33 us). 2x HGX B200, LL: 6.6 + 7 x 0.6 + 8 x 2.7 + 7 x 0.6 (relays)
+ 0.7 = 37.3 us (measured 37.3-40.5 us at 256 B-32 KiB).
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step, alltoall_counts, alltoall_offsets
from . import nccl_model
from .base import AlgorithmDefaults, LoweringContext, protocol_schedule
from .p2p import p2p_channels, pair_flows, pxn_relayed, step_time_s, uses_ll


class Alltoall(AlgorithmDefaults):
    kinds = frozenset({CollectiveKind.ALL_TO_ALL})
    protocols = ("LL", "Simple")

    def __init__(self, name: str, *, rounds: bool, auto: bool):
        self.name = name
        self.rounds = rounds
        self.auto = auto  # considered by the automatic choice (NCCL's own: every peer at once)

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None

    channels = staticmethod(p2p_channels)

    def _rounds(self, collective: Collective) -> list[list[tuple[int, int]]]:
        """Member-index pairs (p, q) per step: one round each (pairwise) or all in one (direct)."""
        n = collective.nranks
        rounds = [[(p, (p + i) % n) for p in range(n)] for i in range(1, n)]
        return rounds if self.rounds else [[pair for r in rounds for pair in r]]

    def _latency_s(
        self, collective: Collective, ctx: LoweringContext, protocol: str, *, simulated: bool = False
    ) -> float:
        """NCCL's latency; ``simulated``: the simulated time's, with the platform's ``GroupLayout.hop_extra_us`` and
        the PXN relay hop (``p2p.pxn_relayed``), which NCCL's own estimate does not see."""
        layout = ctx.layout(collective.group)
        hop_extra_us = layout.hop_extra_us if simulated else 0.0
        group = collective.group
        intra = nccl_model.HW_LATENCY_US[layout.intra]["ring"][protocol]
        inter = nccl_model.HW_LATENCY_US["net"]["ring"][protocol]
        # the simulated time only: a send relayed under PXN also takes the NVLink hop into the relay GPU (the
        # platform's extra hop latency is paid once, below)
        relay = intra if simulated else None
        worst = 0.0
        combine = sum if protocol == "LL" else max

        def hop(p: int, q: int) -> float:
            if ctx.server(group[p]) == ctx.server(group[q]):
                return intra
            return inter + relay if relay is not None and pxn_relayed(ctx, group[p], group[q]) else inter

        for p in range(len(group)):
            hops = combine([hop(p, q) for q in range(len(group)) if q != p] or [0.0])
            worst = max(worst, hops)
        # the platform's extra hop latency is paid once: a rank's sends to its peers run concurrently
        return (nccl_model.BASE_LATENCY_US["ring"][protocol] + worst + hop_extra_us) * 1e-6

    def _steps(
        self, collective: Collective, ctx: LoweringContext, nchannels: int, protocol: str
    ) -> list[list[tuple[int, int, int, int, float]]]:
        """Per step (round), the (member p, member q, bytes, channel, payload cap) flows of its pairs under
        ``protocol``."""
        group = collective.group
        elt = DTYPE_BYTES[collective.dtype]
        counts = alltoall_counts(collective)
        out: list[list[tuple[int, int, int, int, float]]] = []
        for pairs in self._rounds(collective):
            flows: list[tuple[int, int, int, int, float]] = []
            for p, q in pairs:
                nbytes = int(counts[p, q]) * elt
                pieces, cap = pair_flows(ctx, collective, nchannels, group[p], group[q], nbytes, protocol=protocol)
                flows += [(p, q, int(b), c, cap) for c, b in enumerate(pieces)]
            out.append(flows)
        return out

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        latency = self._latency_s(collective, ctx, protocol, simulated=True)
        group = np.asarray(collective.group, dtype=np.int64)
        steps = []
        for i, flows in enumerate(self._steps(collective, ctx, nchannels, protocol)):
            p, q, nbytes, channel = (np.array([f[k] for f in flows], dtype=np.int64) for k in range(4))
            # NCCL's per-hop latencies, summed over a rank's peers, already include the wire
            label = f"alltoall round {i + 1}" if self.rounds else "alltoall"
            steps.append(
                Step.of(
                    src=group[p],
                    dst=group[q],
                    nbytes=nbytes,
                    channel=channel,
                    latency_s=latency if i == 0 else 0.0,
                    rate_cap_bytes_per_s=[f[4] for f in flows],
                    label=label,
                    path_latency=False,
                )
            )
        return protocol_schedule(
            collective,
            ctx,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            steps=tuple(steps),
            pxn=ctx.router.pxn,
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        counts = alltoall_counts(collective)
        send, recv = alltoall_offsets(counts)
        group = collective.group
        elt = DTYPE_BYTES[collective.dtype]
        steps = []
        biggest = int(counts.max()) * elt if counts.size else 0
        ll = uses_ll(biggest, ctx.layout(group), collective.nranks, nchannels, ctx.nccl_minor)
        for flows in self._steps(collective, ctx, nchannels, "LL" if ll else "Simple"):
            ops: list[tuple[int, int, int, int, int]] = []
            offset: dict[tuple[int, int], int] = {}
            for p, q, nbytes, _, _ in flows:  # a pair's pieces in channel order
                at = offset.get((p, q), 0)
                ops.append((group[p], group[q], int(send[p, q]) + at, nbytes // elt, int(recv[q, p]) + at))
                offset[(p, q)] = at + nbytes // elt
            steps.append(DataStep.of(ops))
        local = DataStep.of(
            [(group[p], group[p], int(send[p, p]), int(counts[p, p]), int(recv[p, p])) for p in range(len(group))]
        )
        return (local, *steps)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        counts = alltoall_counts(collective)
        biggest = int(counts.max()) * DTYPE_BYTES[collective.dtype] if counts.size else 0
        latency = self._latency_s(collective, ctx, protocol)
        if collective.nranks == 1:
            return latency, float("inf")
        layout = ctx.layout(collective.group)
        if (protocol == "LL") != uses_ll(biggest, layout, collective.nranks, nchannels, ctx.nccl_minor):
            return latency, 0.0
        group = collective.group
        time_s = sum(
            step_time_s(
                ctx,
                collective,
                [(group[p], group[q], c, b, cap) for p, q, b, c, cap in flows],
                protocol=protocol,
                nchannels=nchannels,
            )
            for flows in self._steps(collective, ctx, nchannels, protocol)
        )
        return latency, (collective.nbytes / time_s if time_s > 0 else float("inf"))


PAIRWISE = Alltoall("pairwise", rounds=True, auto=False)
DIRECT = Alltoall("direct", rounds=False, auto=True)
