"""The ``analytical`` model: congestion-unaware alpha-beta, for huge sweeps.

Each batch of flows that start together (one step of one collective) shares links equally
among *its own* flows, once, at its start: ``r_i = min(cap_i, min_l c_l / sum_j w_jl)`` over
the batch (``simulator.rates.equal_share_rates``). Rates never change afterwards: flows of
other collectives running at the same time are ignored, and bandwidth freed by a flow that
finishes early is not handed to the others. Time of a flow = latency + bytes / rate: the
alpha-beta model with beta from the topology.

A link whose capacity changes while flows run (``set_link_scale``, 0 < scale) re-rates every batch
with a running flow across it against the per-link load the batch had at its first rating (kept
while the batch has a running flow): ``r_i = min(cap_i, min_l c'_l / sum_j w_jl)`` with ``c'`` the new
capacities and the sum over all the batch's flows, finished ones included, so bandwidth freed by a
finished flow is still not handed on and a degradation never speeds a flow up; the remaining bytes
drain at the new rates. Example: flow A on links 0 and 1, flow B on link 0, capacities 10 and 100:
both run at 10 / 2 = 5; after B ends, link 1 degraded to 50 leaves A at min(10 / 2, 50 / 1) = 5.
A failed link's flows are moved by ``repath`` and start as a new batch instead.

It agrees exactly with the ``flow`` model when flows do not contend (each link used by one
flow, or a batch whose flows are symmetric and run alone) - a standing test.

Because a batch's rates depend on nothing but the batch, a collective's time under this model
does not depend on what else runs (``context_free``): the engine can then time every distinct
collective once and lay the step out in closed form (``engine.closed_form``) instead of
replaying it event by event.
"""

from __future__ import annotations

import numpy as np

from ..kernels import entries_of
from ..rates import equal_share_rates_csr
from .base import FluidNetwork


class AnalyticalNetwork(FluidNetwork):
    name = "analytical"
    context_free = True

    def __init__(self, capacity_bytes_per_s: np.ndarray):
        super().__init__(capacity_bytes_per_s)
        # batch -> its flows at their first rating: (ids, links, weights, counts, caps), as ``batch_rates`` takes them
        self._first: dict[int, tuple[np.ndarray, ...]] = {}

    def batch_rates(
        self, links: np.ndarray, weights: np.ndarray, counts: np.ndarray, caps_bytes_per_s: np.ndarray
    ) -> np.ndarray:
        """Rates of one batch of flows that start together: flow i has the ``counts[i]`` consecutive
        (link, weight) entries of ``links``/``weights``; ``r_i = min(cap_i, min_l c_l / sum_j w_jl)``
        (vectorised ``simulator.rates.equal_share_rates``)."""
        rates: np.ndarray = np.minimum(
            equal_share_rates_csr(links, weights, counts, self.capacity_bytes_per_s), caps_bytes_per_s
        )
        return rates

    def set_link_scale(self, link: int, scale: float) -> None:
        super().set_link_scale(link, scale)
        if scale > 0:
            entry_flow = np.repeat(np.arange(self.active.shape[0]), np.diff(self.flow_ptr))
            crossing = entry_flow[self.flow_links == link]
            batches = np.unique(self.batch[crossing[self.active[crossing]]])
            self.rate[self.active & np.isin(self.batch, batches)] = 0.0  # re-rated at the next change

    def _rerate(self) -> None:
        live = np.unique(self.batch[self.active])
        if len(self._first) > 2 * live.shape[0]:  # forget the batches whose last flow has ended (amortised)
            alive = set(live.tolist())
            self._first = {batch: flows for batch, flows in self._first.items() if batch in alive}
        fresh = np.flatnonzero(self.active & (self.rate == 0) & (self.remaining > 0))
        for batch in np.unique(self.batch[fresh]).tolist():
            members = fresh[self.batch[fresh] == batch]
            if batch not in self._first:  # first rating: keep the batch's flows
                entries = entries_of(self.flow_ptr, members)
                self._first[batch] = (
                    self.ids[members],
                    self.flow_links[entries],
                    self.flow_weights[entries],
                    self.flow_ptr[members + 1] - self.flow_ptr[members],
                    self.cap[members],
                )
            # rated with every flow the batch started with (after a capacity change, finished ones too)
            ids, *flows = self._first[batch]
            self.rate[members] = self.batch_rates(*flows)[np.searchsorted(ids, self.ids[members])]
