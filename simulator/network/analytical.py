"""The ``analytical`` model: congestion-unaware alpha-beta, for huge sweeps.

Each batch of flows that start together (one step of one collective) shares links equally
among *its own* flows, once, at its start: ``r_i = min(cap_i, min_l c_l / sum_j w_jl)`` over
the batch (``topologies.routing.equal_share_rates``). Rates never change afterwards: flows of
other collectives running at the same time are ignored, and bandwidth freed by a flow that
finishes early is not handed to the others. Time of a flow = latency + bytes / rate: the
alpha-beta model with beta from the topology.

A link whose capacity changes while flows run (``set_link_scale``, 0 < scale) re-rates every batch
with a running flow across it: the same rule over the batch's running flows on the new capacities,
and their remaining bytes drain at the new rates. A failed link's flows are moved by ``repath``
and start as a new batch instead.

It agrees exactly with the ``flow`` model when flows do not contend (each link used by one
flow, or a batch whose flows are symmetric and run alone) - a standing test.

Because a batch's rates depend on nothing but the batch, a collective's time under this model
does not depend on what else runs (``context_free``): the engine can then time every distinct
collective once and lay the step out in closed form (``engine.closed_form``) instead of
replaying it event by event.
"""

from __future__ import annotations

import numpy as np

from topologies.routing import equal_share_rates_csr

from .base import FluidNetwork, entries_of


class AnalyticalNetwork(FluidNetwork):
    name = "analytical"
    context_free = True

    def batch_rates(self, links: np.ndarray, weights: np.ndarray, counts: np.ndarray,
                    caps_bytes_per_s: np.ndarray) -> np.ndarray:
        """Rates of one batch of flows that start together: flow i has the ``counts[i]`` consecutive
        (link, weight) entries of ``links``/``weights``; ``r_i = min(cap_i, min_l c_l / sum_j w_jl)``
        (vectorised ``topologies.routing.equal_share_rates``)."""
        return np.minimum(equal_share_rates_csr(links, weights, counts, self.capacity_bytes_per_s), caps_bytes_per_s)

    def set_link_scale(self, link: int, scale: float) -> None:
        super().set_link_scale(link, scale)
        if scale > 0:
            entry_flow = np.repeat(np.arange(self.active.shape[0]), np.diff(self.flow_ptr))
            crossing = entry_flow[self.flow_links == link]
            batches = np.unique(self.batch[crossing[self.active[crossing]]])
            self.rate[self.active & np.isin(self.batch, batches)] = 0.0     # rated afresh at the next change

    def _rerate(self) -> None:
        fresh = np.flatnonzero(self.active & (self.rate == 0) & (self.remaining > 0))
        for batch in np.unique(self.batch[fresh]):
            members = fresh[self.batch[fresh] == batch]
            entries = entries_of(self.flow_ptr, members)
            self.rate[members] = self.batch_rates(self.flow_links[entries], self.flow_weights[entries],
                                                  self.flow_ptr[members + 1] - self.flow_ptr[members],
                                                  self.cap[members])
