"""Recursive halving-doubling (Rabenseifner): all_reduce, reduce_scatter, all_gather in log2 steps.

With p = 2^k <= n members (the largest power of two) and r = n - p extra members:

* **fold** (r > 0): extra member p+i hands its data to member i (all_reduce / reduce_scatter:
  its whole buffer, reduced in; all_gather: its piece);
* **reduce-scatter by recursive halving** among the p core members: at step s the partner is
  v xor p/2^(s+1); each keeps the half of its current blocks that contains its own block and
  sends the other half, which the partner adds in. After k steps core member v holds block v
  reduced (block v = piece v, plus piece p+v of its folded partner for reduce_scatter);
* **all-gather by recursive doubling**: the reverse, each step sending everything it holds;
* **unfold**: member i returns the result (or piece p+i) to extra member p+i.

Bytes each core member sends: all_reduce 2 (p-1)/p S (+ S for fold/unfold pairs), the same as a
ring, in 2 log2 p steps instead of 2 (n-1): a latency win, with every step's pairs farther apart
(the step with partner distance >= GPUs per server crosses the network).

Not an NCCL algorithm: it is the MPI classic, here to compare. Latency per step: NCCL's ring
per-hop figure for the protocol (network hop when any pair of the step crosses servers), plus
the ring base latency once.
"""

from __future__ import annotations

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from ..schedule import DataStep, Schedule, Step
from . import nccl_model
from .base import AlgorithmDefaults, LoweringContext, protocol_schedule, split_evenly


class HalvingDoubling(AlgorithmDefaults):
    name = "halving_doubling"
    kinds = frozenset({CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_GATHER})
    protocols: tuple[str, ...] = nccl_model.PROTOCOLS
    auto = False  # not an NCCL algorithm: only when asked for

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        return None if collective.nranks >= 2 else "needs at least 2 ranks"

    # ---- logical steps -----------------------------------------------------------------------
    def _blocks(self, collective: Collective, p: int) -> list[list[tuple[int, int]]]:
        """Segments (offset, count) in elements of each core block."""
        n = collective.nranks
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        if collective.kind is CollectiveKind.ALL_REDUCE:
            count = split_evenly(elements, p)
            offset = np.concatenate([[0], np.cumsum(count)[:-1]])
            return [[(int(offset[v]), int(count[v]))] for v in range(p)]
        piece = elements // n
        return [[(v * piece, piece)] + ([((p + v) * piece, piece)] if p + v < n else []) for v in range(p)]

    def steps(self, collective: Collective) -> list[list[tuple[int, int, int, int, bool]]]:
        """Logical steps: lists of (src member, dst member, offset, elements, reduce)."""
        n, kind = collective.nranks, collective.kind
        p = 1 << (n.bit_length() - 1)
        k = p.bit_length() - 1
        r = n - p
        elements = collective.nbytes // DTYPE_BYTES[collective.dtype]
        piece = elements // n
        blocks = self._blocks(collective, p)
        out = []
        if r and kind is not CollectiveKind.ALL_GATHER:
            out.append([(p + i, i, 0, elements, True) for i in range(r)])
        if r and kind is CollectiveKind.ALL_GATHER:
            out.append([(p + i, i, (p + i) * piece, piece, False) for i in range(r)])
        held = {v: list(range(p)) for v in range(p)}  # blocks each core member covers
        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER):
            for s in range(k):
                d = p >> (s + 1)
                ops = []
                for v in range(p):
                    partner = v ^ d
                    give = [b for b in held[v] if (b & d) != (v & d)]
                    ops += [(v, partner, o, c, True) for b in give for o, c in blocks[b]]
                for v in range(p):
                    held[v] = [b for b in held[v] if (b & d) == (v & d)]
                out.append(ops)
        else:
            held = {v: [v] for v in range(p)}
        if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER):
            for s in range(k - 1, -1, -1):
                d = p >> (s + 1)
                out.append([(v, v ^ d, o, c, False) for v in range(p) for b in held[v] for o, c in blocks[b]])
                held = {v: sorted(set(held[v]) | set(held[v ^ d])) for v in range(p)}
        if r:
            if kind is CollectiveKind.REDUCE_SCATTER:
                out.append([(i, p + i, (p + i) * piece, piece, False) for i in range(r)])
            else:
                out.append([(i, p + i, 0, elements, False) for i in range(r)])
        return out

    # ---- interface ---------------------------------------------------------------------------
    def _latencies(
        self, collective: Collective, ctx: LoweringContext, protocol: str, *, hop_extra_us: float = 0.0
    ) -> list[float]:
        """Latency of each step; ``hop_extra_us`` is added to every intra-server hop (the
        platform's ``GroupLayout.hop_extra_us``; 0 for NCCL's own estimate)."""
        layout = ctx.layout(collective.group)
        group = collective.group
        out = []
        for i, ops in enumerate(self.steps(collective)):
            crosses = any(ctx.server(group[a]) != ctx.server(group[b]) for a, b, *_ in ops)
            hop = (
                nccl_model.HW_LATENCY_US["net"]["ring"][protocol]
                if crosses
                else nccl_model.HW_LATENCY_US[layout.intra]["ring"][protocol] + hop_extra_us
            )
            out.append((hop + (nccl_model.BASE_LATENCY_US["ring"][protocol] if i == 0 else 0.0)) * 1e-6)
        return out

    def lower(self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int) -> Schedule:
        group, elt = collective.group, DTYPE_BYTES[collective.dtype]
        latencies = self._latencies(collective, ctx, protocol, hop_extra_us=ctx.layout(group).hop_extra_us)
        steps = []
        for ops, latency in zip(self.steps(collective), latencies):
            flows = [
                (group[a], group[b], int(bytes_), ch)
                for a, b, _, c, _ in ops
                for ch, bytes_ in enumerate(split_evenly(c * elt, nchannels, elt))
            ]
            steps.append(
                Step.of(
                    src=[f[0] for f in flows],
                    dst=[f[1] for f in flows],
                    nbytes=[f[2] for f in flows],
                    channel=[f[3] for f in flows],
                    latency_s=latency,
                    path_latency=False,
                    label="halving-doubling",
                )
            )
        return protocol_schedule(
            collective, ctx, algorithm=self.name, protocol=protocol, nchannels=nchannels, steps=tuple(steps)
        )

    def program(self, collective: Collective, ctx: LoweringContext, *, nchannels: int) -> tuple[DataStep, ...]:
        group = collective.group
        return tuple(
            DataStep.of([(group[a], group[b], o, c, o, red) for a, b, o, c, red in ops])
            for ops in self.steps(collective)
        )

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        latency = sum(self._latencies(collective, ctx, protocol))
        group, elt = collective.group, DTYPE_BYTES[collective.dtype]
        time_s = 0.0
        for ops in self.steps(collective):
            paths = [ctx.router.path(ctx.gpu(group[a]), ctx.gpu(group[b])) for a, b, *_ in ops]
            rates = ctx.chain_rates(paths)
            time_s += max(
                (c * elt * nccl_model.WIRE_FACTOR[protocol] / r for (_, _, _, c, _), r in zip(ops, rates) if c > 0),
                default=0.0,
            )
        return latency, (collective.nbytes / time_s if time_s > 0 else float("inf"))


HALVING_DOUBLING = HalvingDoubling()


class Pat(HalvingDoubling):
    """PAT (NCCL 2.23+ "Parallel Aggregated Trees") for all_gather / reduce_scatter with one GPU per
    server: a logarithmic exchange, modelled with the halving/doubling data movement above and
    NCCL's PAT cost model (tuning.cc): L = 8.0 + log2i(nNodes) x NET/PAT latency / 3.5 + 2.8 us x
    nRanks (log2i: log2 rounded down), and 0.75 of the ring bandwidth for the choice. NCCL enables
    it only with Simple and one GPU per node."""

    name = "pat"
    kinds = frozenset({CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_GATHER})
    protocols = ("Simple",)
    auto = True

    def supported(self, collective: Collective, ctx: LoweringContext) -> str | None:
        layout = ctx.layout(collective.group)
        if layout.ppn != 1 or layout.nnodes < 2:
            return "PAT runs with one GPU per server, on 2 or more servers"
        return None

    def _latencies(
        self, collective: Collective, ctx: LoweringContext, protocol: str, *, hop_extra_us: float = 0.0
    ) -> list[float]:
        """PAT's latency, network hops only: with one GPU per server there is no intra-server hop,
        so ``hop_extra_us`` does not apply and NCCL's and the simulated latency agree."""
        nnodes = ctx.layout(collective.group).nnodes
        net_us = nccl_model.HW_LATENCY_US["net"]["tree"]["Simple"]
        total = (
            PAT_BASE_LATENCY_US + nccl_model.log2i(nnodes) * net_us / 3.5 + PAT_PER_RANK_LATENCY_US * collective.nranks
        )
        steps = len(self.steps(collective))
        return [total * 1e-6] + [0.0] * (steps - 1)

    def estimate(
        self, collective: Collective, ctx: LoweringContext, *, protocol: str, nchannels: int
    ) -> tuple[float, float]:
        from .ring import RING

        latency = sum(self._latencies(collective, ctx, protocol))
        if self.supported(collective, ctx) or protocol != "Simple":
            return latency, 0.0
        return latency, 0.75 * RING.estimate(collective, ctx, protocol="Simple", nchannels=nchannels)[1]


# baseLat[PAT] = 8.0 us; PAT adds 2.8 us per rank (tuning.cc, NCCL 2.30.7)
PAT_BASE_LATENCY_US = 8.0
PAT_PER_RANK_LATENCY_US = 2.8
PAT = Pat()
