"""The ``analytical`` model: congestion-unaware alpha-beta, for huge sweeps.

Each batch of flows that start together (one step of one collective) shares links equally
among *its own* flows, once, at its start: ``r_i = min(cap_i, min_l c_l / sum_j w_jl)`` over
the batch (``topologies.routing.equal_share_rates``). Rates never change afterwards: flows of
other collectives running at the same time are ignored, and bandwidth freed by a flow that
finishes early is not handed to the others. Time of a flow = latency + bytes / rate: the
alpha-beta model with beta from the topology.

It agrees exactly with the ``flow`` model when flows do not contend (each link used by one
flow, or a batch whose flows are symmetric and run alone) - a standing test.
"""

from __future__ import annotations

import numpy as np

from .base import FluidNetwork, entries_of


class AnalyticalNetwork(FluidNetwork):
    name = "analytical"

    def _rerate(self) -> None:
        """Vectorised ``topologies.routing.equal_share_rates`` of each fresh batch."""
        fresh = np.flatnonzero(self.active & (self.rate == 0) & (self.remaining > 0))
        capacity = self.capacity_bytes_per_s
        for batch in np.unique(self.batch[fresh]):
            members = fresh[self.batch[fresh] == batch]
            entries = entries_of(self.flow_ptr, members)
            links, weights = self.flow_links[entries], self.flow_weights[entries]
            load = np.bincount(links, weights=weights, minlength=capacity.shape[0])
            share = capacity[links] / load[links]          # each link's equal share, per unit of weight
            counts = self.flow_ptr[members + 1] - self.flow_ptr[members]
            rates = np.full(members.shape[0], np.inf)
            has = counts > 0
            if has.any():
                starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[has]
                rates[has] = np.minimum.reduceat(share, starts)
            self.rate[members] = np.minimum(rates, self.cap[members])
