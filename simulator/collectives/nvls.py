"""NVLS: NVLink SHARP, reduction and multicast inside the NVSwitch (Hopper and later, one node).

The buffer is cut into n shards, shard q owned by group member q.

* **Reduce** (multimem.ld_reduce): for shard q every GPU sends its copy of the shard up to the
  switch, which adds them and sends the sum down to the owner of q.
* **Multicast** (multimem.st): the owner of shard q sends it up once; the switch copies it down
  to every GPU of the group (the owner included).

all_reduce = reduce + multicast (NCCL pipelines the two, so they run as one step);
reduce_scatter = reduce only; all_gather = multicast only.

Per GPU, all_reduce moves S (n+1)/n up and S (n+1)/n down its NVLinks, against 2 S (n-1)/n each
way for a ring, so busbw = B_eff x 2(n-1)/(n+1) where B_eff = NVLink bandwidth as NCCL counts it
(``LoweringContext.nccl_capacity``) x the switch's reduction efficiency (NCCL's nvlsEfficiency:
0.85 on Hopper, 0.74 on Blackwell), as NCCL's tuner applies it. Where the modelled NVLink departs
from NCCL's figure (B200: 37.9 GB/s a link measured, NCCL's 40.1) the switch legs run at
nvlsEfficiency x NCCL's / the modelled capacity (:func:`switch_efficiency`: 0.74 x 40.1 / 37.9 =
0.783 on B200), so NVLS keeps NCCL's throughput. Worked number,
8x H100: 370.8 GB/s x 0.85 x 14/9 = 490 GB/s busbw (measured: 480 GB/s). For reduce_scatter and
all_gather NVLS moves S up / S (n-1)/n down (or the reverse) at the reduced efficiency, so on one
node a ring is faster, as NCCL's tuner also concludes.

Each shard's reduce and multicast is one chain (a flow over all its links): the switch can only
forward what it receives. Latency: NCCL's NVLS latency, 25 us over NVLink (base 0, tuning.cc).
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule
from .base import AlgorithmDefaults, LoweringContext, check_runnable, innet_chain_rate, innet_schedule, split_evenly

REDUCE_BUFFER = -1  # in-network buffer ids of the switch's reduce and multicast stages
MULTICAST_BUFFER = -2

# hwLatencies[NVLINK][NVLS][Simple] (tuning.cc, NCCL 2.30.7); NVLS base latency is 0.
NVLS_LATENCY_US = 25.0

# NVLS channels (src/transport/nvls.cc, NCCL 2.30.7: NVLS_NCHANNELS_SM90 16, SM100 32 across nodes,
# SM100_NVL 24 inside one NVLink domain) and the largest chunk (NCCL_NVLS_CHUNKSIZE default 128 KiB).
NVLS_CHANNELS = {"hopper": (16, 16), "blackwell": (24, 32)}  # (one node, several nodes)
NVLS_MAX_CHUNK_BYTES = 128 * 1024
# Fixed cost of one NVLS chunk on one channel (synchronisation of the reduce and multicast stages
# through the switch), fitted on the busbw steps of the measured 8x H100 and 8x B200 tables where NCCL
# halves the chunk; NCCL's nvlsEfficiency already holds it at 128 KiB chunks.
NVLS_CHUNK_SYNC_S = 1.5e-6


def nvls_channels(arch: str, nnodes: int) -> int:
    one, several = NVLS_CHANNELS.get(arch, NVLS_CHANNELS["hopper"])
    return one if nnodes == 1 else several


def nvls_chunk_bytes(nbytes: int, *, nchannels: int, nheads: int) -> int:
    """NCCL's NVLS chunk size for an ``nbytes`` operation (calcCollChunking, enqueue.cc): 128 KiB,
    halved below 64, 8 and 2 concurrent loops of (channels x heads) chunks, down to 16 KiB."""
    concurrent = nchannels * nheads
    chunk = NVLS_MAX_CHUNK_BYTES
    for loops, smaller in ((64, 65536), (8, 32768), (2, 16384)):
        if nbytes < loops * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def nvls_chunk_efficiency(chunk_bytes: int, channel_bytes_per_s: float) -> float:
    """Bandwidth with ``chunk_bytes`` chunks relative to 128 KiB ones, for a channel moving data at
    ``channel_bytes_per_s``: a chunk costs the sync time t plus its transfer, so with x = t x rate /
    128 KiB the ratio is (1 + x) / (1 + x 128 KiB / chunk). Worked number, 8x H100 (16 channels,
    algbw 280 GB/s: 17.5 GB/s a channel): x = 1.5 us x 17.5 GB/s / 128 KiB = 0.20, so 32 KiB chunks
    (8-64 MiB all_reduce) run at 1.20 / 1.80 = 67% of the large-message busbw."""
    x = NVLS_CHUNK_SYNC_S * channel_bytes_per_s / NVLS_MAX_CHUNK_BYTES
    return (1.0 + x) / (1.0 + x * NVLS_MAX_CHUNK_BYTES / chunk_bytes)


def nvswitch_links(ctx: LoweringContext, rank: int) -> np.ndarray:
    """Links from ``rank``'s GPU up to its server's NVSwitch."""
    return ctx.router.gpu_to_node(ctx.gpu(rank), ctx.topology.servers[ctx.server(rank)].nvswitch)


def switch_efficiency(ctx: LoweringContext, rank: int, nvls_efficiency: float) -> float:
    """NCCL's ``nvls_efficiency`` as the switch legs of ``rank``'s GPU run on the modelled links.
    NCCL applies nvlsEfficiency to its own NVLink figure (:meth:`LoweringContext.nccl_capacity`), so
    the legs run at nvlsEfficiency x NCCL's / the modelled capacity of the GPU's switch links:
    0.74 x 40.1 / 37.9 = 0.783 on B200, nvlsEfficiency itself where the two agree."""
    links = nvswitch_links(ctx, rank)
    nccl = float(ctx.nccl_capacity()[links].min())
    return nvls_efficiency * (nccl / float(ctx.topology.link_capacity_bytes_per_s[links].min()))


class NvlsAlgorithm(AlgorithmDefaults):
    name = "nvls"
    kinds = frozenset({CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_GATHER})
    protocols = ("Simple",)

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        """None when NVLS can run this collective here, else the reason it cannot."""
        layout = ctx.layout(collective.group)
        if layout.nnodes != 1:
            return "NVLS runs inside one NVSwitch domain (multi-node NVLS needs SHARP; use nvlstree)"
        info = ctx.topology.servers[layout.servers[0]]
        if info.nvls_efficiency <= 0:
            return f"{info.name} has no NVLink SHARP (needs Hopper or later NVSwitch)"
        if collective.nranks < 2:
            return "NVLS needs at least 2 GPUs"
        return None

    def channels(self, collective: Collective, ctx: LoweringContext) -> int:
        """NCCL's nvlsChannels for this GPU generation and node count."""
        layout = ctx.layout(collective.group)
        return nvls_channels(layout.arch, layout.nnodes)

    def _shards(self, collective: Collective) -> tuple[np.ndarray, np.ndarray]:
        """(offset, count) in elements of the n shards."""
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        count = split_evenly(elements, collective.nranks)
        return np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64), count

    def _edges(self, collective: Collective) -> list[tuple[int, int, int, int]]:
        """(src, dst, elements, chain) of every edge: chains 0..n-1 reduce, n..2n-1 multicast."""
        group = collective.group
        n = len(group)
        _, count = self._shards(collective)
        edges: list[tuple[int, int, int, int]] = []
        reduce_phase = collective.kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER)
        multicast_phase = collective.kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER)
        for q, owner in enumerate(group):
            if reduce_phase:
                edges += [(p, REDUCE_BUFFER, count[q], q) for p in group]
                edges.append((REDUCE_BUFFER, owner, count[q], q))
            if multicast_phase:
                edges.append((owner, MULTICAST_BUFFER, count[q], n + q))
                edges += [(MULTICAST_BUFFER, p, count[q], n + q) for p in group]
        return edges

    def _innet(self, collective: Collective, ctx: LoweringContext) -> dict[int, int]:
        switch = ctx.topology.servers[ctx.layout(collective.group).servers[0]].nvswitch
        return {REDUCE_BUFFER: switch, MULTICAST_BUFFER: switch}

    def _switch_efficiency(self, collective: Collective, ctx: LoweringContext) -> float:
        """NCCL's nvlsEfficiency on the modelled links (:func:`switch_efficiency`)."""
        info = ctx.topology.servers[ctx.layout(collective.group).servers[0]]
        return switch_efficiency(ctx, collective.group[0], info.nvls_efficiency)

    def _rate(self, collective: Collective, ctx: LoweringContext) -> float:
        """Equal-share rate of the slowest shard chain at NCCL's nvlsEfficiency of NCCL's NVLink
        figure (no chunk penalty)."""
        rate: float
        rate, _ = ctx.cached(
            ("nvls-rate", collective.group, collective.kind),
            lambda: innet_chain_rate(
                ctx, self._edges(collective), self._innet(collective, ctx), self._switch_efficiency(collective, ctx)
            ),
        )
        return rate

    def _efficiency(self, collective: Collective, ctx: LoweringContext) -> float:
        """The switch legs' efficiency at the chunk size NCCL uses for this operation."""
        layout = ctx.layout(collective.group)
        nchannels = nvls_channels(layout.arch, 1)
        chunk = nvls_chunk_bytes(collective.nbytes, nchannels=nchannels, nheads=collective.nranks)
        channel_rate = self._rate(collective, ctx) * collective.nranks / nchannels
        return self._switch_efficiency(collective, ctx) * nvls_chunk_efficiency(chunk, channel_rate)

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        check_runnable(self.name, self.supported(collective, ctx), protocol, self.protocols)
        return innet_schedule(
            collective,
            algorithm=self.name,
            protocol=protocol,
            nchannels=nchannels,
            edges=self._edges(collective),
            efficiency=self._efficiency(collective, ctx),
            innet_nodes=self._innet(collective, ctx),
            latency_s=NVLS_LATENCY_US * 1e-6,
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        offset, count = self._shards(collective)
        group, kind = collective.group, collective.kind
        steps = []
        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER):
            steps.append(
                DataStep.of([(p, REDUCE_BUFFER, o, c) for o, c in zip(offset, count) for p in group], reduce=True)
            )
            steps.append(DataStep.of([(REDUCE_BUFFER, owner, o, c) for owner, o, c in zip(group, offset, count)]))
        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER):
            steps.append(DataStep.of([(owner, MULTICAST_BUFFER, o, c) for owner, o, c in zip(group, offset, count)]))
            steps.append(DataStep.of([(MULTICAST_BUFFER, p, o, c) for o, c in zip(offset, count) for p in group]))
        return tuple(steps)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        if self.supported(collective, ctx) or protocol != "Simple":
            return NVLS_LATENCY_US * 1e-6, 0.0

        # every chain moves one shard: time = shard / slowest chain's rate
        # NCCL's choice knows only nvlsEfficiency, not the chunk-size penalty: the estimate neither
        rate = self._rate(collective, ctx)
        if collective.nbytes == 0:  # a 0-byte piece moves nothing: the latency, at the chains' rate
            return NVLS_LATENCY_US * 1e-6, rate * collective.nranks
        time_s = collective.nbytes / collective.nranks / rate
        return NVLS_LATENCY_US * 1e-6, collective.nbytes / time_s


NVLS = NvlsAlgorithm()
