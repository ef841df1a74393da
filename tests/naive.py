"""Slow reference twins of the numba kernels.

Each function here has the same signature and semantics as one kernel in
``simulator/kernels/``, written to be obviously correct rather than fast: small dense
matrices, one full recomputation per step, no incremental bookkeeping. Tests compare the
kernels against these twins on random instances. One section per kernel, after the dense
flow-by-link matrix they share.
"""

from __future__ import annotations

import numpy as np


def _dense(flow_ptr, flow_links, flow_weights, n_links):
    """A[l, f] = total weight of flow f on link l (repeated entries add up); shared by the twins."""
    n_flows = len(flow_ptr) - 1
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            A[flow_links[j], f] += flow_weights[j]
    return A


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
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)

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


# ============================================================================================
# dcqcn: DCQCN fluid model (twin of simulator.kernels.dcqcn.dcqcn_rates)
# ============================================================================================


def _water_level(rates, weights, capacity):
    """Level lam with sum_f w_f min(r_f, lam) = capacity, by repeated freezing (inf if not full)."""
    if np.sum(weights * rates) <= capacity:
        return np.inf
    below = np.zeros(len(rates), dtype=bool)
    while True:
        lam = (capacity - np.sum(weights[below] * rates[below])) / np.sum(weights[~below])
        newly = ~below & (rates < lam)
        if not newly.any():
            return lam
        below |= newly


def dcqcn_rates_naive(flow_ptr, flow_links, flow_weights, controlled, link_capacity, marking, is_port, rate_max,
                      rate_init, params, *, dt_s, warmup_s, block_s, horizon_s, settle_tol):
    """The DCQCN fluid model stepped with whole-array numpy operations.

    Every step: port levels (water-filling each port among its flows' R_C), sending rates, link
    loads A @ s, queues, RED marking, per-flow ln(1-p) as a weighted sum over its marking links,
    then the reaction-point update of every flow at once. Same block/settle rule as the kernel.
    """
    controlled = np.asarray(controlled, dtype=bool)
    cap = np.asarray(link_capacity, dtype=float)
    n_links = len(cap)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)[:, controlled]
    port = np.asarray(is_port, dtype=bool)
    mark = np.asarray(marking, dtype=bool) & ~port
    kmin, kmax, pmax, g, tau_alpha, tau_cnp, r_ai, r_hai, timer, byte_counter, threshold, r_min, mtu = params
    rmax = np.asarray(rate_max, dtype=float)[controlled]
    rc = np.clip(np.asarray(rate_init, dtype=float)[controlled], r_min, None)
    rc = np.minimum(rc, rmax)
    rt = rc.copy()
    alpha = np.zeros(len(rc))
    q = np.zeros(n_links)
    slots = int(round(dt_s / tau_cnp))
    warmup = int(round(warmup_s / dt_s))
    block = max(1, int(round(block_s / dt_s)))
    max_steps = max(warmup + block, int(round(horizon_s / dt_s)))
    ports = np.flatnonzero(port & (A > 0).any(axis=1))
    n_bytes = byte_counter / mtu
    sums, block_sum, q_sum = np.zeros(len(rc)), np.zeros(len(rc)), np.zeros(n_links)
    prev, blocks, steps = np.zeros(len(rc)), 0, 0
    while steps < max_steps:
        s = rc.copy()
        for p in ports:
            on = A[p] > 0
            s[on] = np.minimum(s[on], _water_level(rc[on], A[p, on], cap[p]))
        load = A @ s
        q = np.where(mark, np.maximum(0.0, q + (load - cap) * dt_s), 0.0)
        p_link = np.where(q <= kmin, 0.0, np.where(q <= kmax, pmax * (q - kmin) / (kmax - kmin), 1.0))
        full = mark & (p_link >= 1.0)
        keep = np.zeros(n_links)
        partial = mark & (p_link > 0.0) & (p_link < 1.0)
        keep[partial] = np.log1p(-p_link[partial])
        lf = A.T @ keep
        lf[(A[full] > 0).any(axis=0)] = -np.inf
        pkts = s / mtu
        quiet = lf == 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            pf = -np.expm1(lf)
            p_alpha = np.where(quiet, 0.0, -np.expm1(pkts * tau_alpha * lf))
            p_cnp = np.where(quiet, 0.0, -np.expm1(pkts * tau_cnp * lf))
            w_bytes = np.expm1(n_bytes * lf)
            w_timer = np.expm1(pkts * timer * lf)
            marked_events = pkts * ((1 + w_bytes) * (pf / -w_bytes) + (1 + w_timer) * (pf / -w_timer))
        events = np.where(quiet, pkts / n_bytes + 1.0 / timer, marked_events)
        hyper = np.where(quiet, 1.0, (1.0 + w_timer) ** threshold)
        recovering = np.where(quiet, 0.0, 1.0 - (1.0 + w_bytes) ** threshold)
        delta = (1.0 - recovering) * ((1.0 - hyper) * r_ai + hyper * r_hai)
        alpha = p_alpha + (alpha - p_alpha) * (1.0 - g) ** (dt_s / tau_alpha)
        for _ in range(slots):
            rt = rt - (rt - rc) * p_cnp
            rc = rc * (1.0 - 0.5 * alpha * p_cnp)
        rt = np.minimum(rmax, rt + delta * events * dt_s)
        rc = rt - (rt - rc) * np.exp(-events * dt_s * np.log(2.0))
        rc = np.minimum(np.maximum(rc, r_min), rmax)
        block_sum += s
        steps += 1
        if steps <= warmup:
            if steps == warmup:
                block_sum[:] = 0.0
            continue
        q_sum += q
        if (steps - warmup) % block == 0:
            blocks += 1
            sums += block_sum
            block_sum[:] = 0.0
            running = sums / (blocks * block)
            moved = np.max(np.abs(running - prev) / rmax, initial=0.0)
            prev = running
            if blocks >= 2 and moved <= settle_tol:
                break
    averaged = max(1, steps - warmup)
    out = np.zeros(len(controlled))
    out[controlled] = (sums + block_sum) / averaged
    return out, q_sum / averaged, steps * dt_s


# ============================================================================================
# lossless: PFC / credit back-pressure (twin of simulator.kernels.lossless.lossless_throttle)
# ============================================================================================


def lossless_throttle_naive(flow_ptr, flow_links, flow_weights, participant, link_capacity, demand, lossless,
                            link_src, link_dst):
    """Congestion-tree progressive filling, recomputed from scratch at every event.

    Loop: for every link still carrying an unfrozen participating flow, the throttle level at
    which it fills is (capacity - traffic of frozen flows) / (offered traffic of unfrozen flows);
    take the smallest (ties: lowest link id). At or above 1, every unfrozen flow keeps its full
    demand. Otherwise the link's tree is itself plus, repeatedly, every lossless link some flow
    crosses right before a tree link (the next hop of entry j is the first run of later entries
    leaving the node entry j enters); unfrozen flows on tree links freeze at the level, and tree
    links other than the first are paused 1 - level.
    """
    participant = np.asarray(participant, dtype=bool)
    cap = np.asarray(link_capacity, dtype=float)
    demand = np.where(participant, np.asarray(demand, dtype=float), 0.0)
    n_links, n_flows = len(cap), len(participant)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)
    A[:, ~participant] = 0.0
    on = np.zeros((n_links, n_flows), dtype=bool)
    for f in np.flatnonzero(participant):
        on[flow_links[flow_ptr[f]:flow_ptr[f + 1]], f] = True
    feeds = {}
    for f in np.flatnonzero(participant):
        path = flow_links[flow_ptr[f]:flow_ptr[f + 1]]
        for j in range(len(path)):
            k = j + 1
            while k < len(path) and link_src[path[k]] != link_dst[path[j]]:
                k += 1
            while k < len(path) and link_src[path[k]] == link_dst[path[j]]:
                if lossless[path[j]]:
                    feeds.setdefault(int(path[k]), set()).add(int(path[j]))
                k += 1
    m = np.ones(n_flows)
    unfrozen = participant.copy()
    pause = np.zeros(n_links)
    tree_level = np.full(n_links, np.inf)
    in_tree = np.zeros(n_links, dtype=bool)
    level = 0.0
    while unfrozen.any():
        used = A @ np.where(unfrozen, 0.0, demand * m)
        offered = A @ np.where(unfrozen, demand, 0.0)
        carries = (on & unfrozen).any(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(carries & (offered > 0), (cap - used) / offered, np.inf)
        e = int(np.argmin(key))
        if not key[e] < 1.0:
            break
        level = max(level, key[e])
        tree, todo = [e], [e]
        in_tree[e] = True
        tree_level[e] = level
        while todo:
            x = todo.pop()
            for i in sorted(feeds.get(x, ())):
                if not in_tree[i]:
                    in_tree[i] = True
                    tree_level[i] = level
                    pause[i] = 1.0 - level
                    tree.append(i)
                    todo.append(i)
        hit = unfrozen & on[tree].any(axis=0)
        m[hit] = level
        unfrozen &= ~hit
    return m, pause, tree_level
