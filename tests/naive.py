"""Slow reference twins of the numba kernels.

Each function here has the same signature and semantics as one kernel in
``simulator/kernels/``, written to be obviously correct rather than fast: small dense
matrices, one full recomputation per step, no incremental bookkeeping. Tests compare the
kernels against these twins on random instances. One section per kernel.
"""

from __future__ import annotations

import numpy as np

# ============================================================================================
# maxmin: weighted max-min fair rates (twin of simulator.kernels.maxmin.maxmin_rates)
# ============================================================================================


def maxmin_rates_naive(flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap):
    """Progressive filling, recomputed from scratch at every step.

    Loop: for each link still carrying an unfrozen flow, the level at which it saturates is
    (capacity - traffic of frozen flows) / (weight of unfrozen flows). The next level is the
    smallest of these and of the unfrozen flows' caps (never below the previous level).
    Flows whose cap is reached freeze at their cap; the remaining unfrozen flows on links that
    saturate freeze at the level. Active flows left with neither links nor cap get ``inf``.
    """
    flow_ptr = np.asarray(flow_ptr, dtype=np.int64)
    active = np.asarray(active, dtype=bool)
    link_capacity = np.asarray(link_capacity, dtype=np.float64)
    flow_cap = np.asarray(flow_cap, dtype=np.float64)
    n_flows = len(active)
    n_links = len(link_capacity)

    # A[l, f] = total weight of flow f on link l (repeated entries add up).
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            A[flow_links[j], f] += flow_weights[j]

    rates = np.zeros(n_flows)
    unfrozen = active.copy()
    level = 0.0
    while unfrozen.any():
        frozen_traffic = A @ np.where(unfrozen, 0.0, rates)
        unfrozen_weight = A @ unfrozen.astype(float)
        carries_unfrozen = (A[:, unfrozen] > 0).any(axis=1)
        link_level = np.full(n_links, np.inf)
        link_level[carries_unfrozen] = (
            link_capacity[carries_unfrozen] - frozen_traffic[carries_unfrozen]
        ) / unfrozen_weight[carries_unfrozen]
        cap_level = np.where(unfrozen, flow_cap, np.inf)

        next_level = min(link_level.min(initial=np.inf), cap_level.min(initial=np.inf))
        if next_level == np.inf:
            rates[unfrozen] = np.inf  # unbounded: no link and no cap
            break
        level = max(level, next_level)

        at_cap = unfrozen & (flow_cap <= level)
        rates[at_cap] = flow_cap[at_cap]
        unfrozen &= ~at_cap

        saturated = link_level <= level
        on_saturated = (A[saturated] > 0).any(axis=0)
        hit = unfrozen & on_saturated
        rates[hit] = level
        unfrozen &= ~hit
    return rates
