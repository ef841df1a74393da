r"""Rates under traffic classes: strict priority between levels, weighted sharing between the classes of a level,
max-min within a class (``simulator.traffic`` describes the policies).

The maths
---------
Each flow ``f`` has a class ``k(f)``; class ``k`` has a strict level ``p_k`` (0 first) and a weight
:math:`\phi_k > 0`. Links keep the capacities ``c_l`` of the max-min kernel (``kernels.maxmin``).

**Strict priority.** Levels are served in order: level ``p`` is rated on the residual capacities
:math:`c^{(p)}_l = \max(0, c_l - \sum_{f: p_{k(f)} < p} w_{fl} r_f)` left by the levels before it, and its rates
are then charged to the links. So the highest level gets its max-min share of every whole link and a lower level
what is left: a lower level's flow on a link the levels above fill gets nothing while they run.

**Weighted sharing within a level** (ETS, DWRR, VL arbitration). The allocation is the fixed point of every link
running a work-conserving weighted scheduler between classes and max-min within each: each flow is at its cap or
has a *fair bottleneck*, a full link where its class has the largest use per unit of weight (the scheduler gives
it no more) and the flow the largest rate of its class (max-min within the class gives it no more). On one link
the classes then get :math:`\min(D_k, \theta \phi_k)` with :math:`\sum_k \min(D_k, \theta \phi_k) = c` (``D_k``
what class ``k`` can use), its flows max-min of that.

It is found in three stages. (1) A start: each link's capacity is split between its classes by weight into
virtual links ``(l, k)`` of capacity :math:`C_{lk}`; each class is rated by max-min on its own virtual links (one
max-min over all of them); a class using less than its share of a shared link is marked there (its demand its use)
and the link split again (weighted water-filling, ``_split``), until no new mark; the leftover goes by max-min
to the flows that can still grow. (2) Explicit-rate rounds, as ATM ABR switches compute max-min rates (A. Charny,
D. Clark, R. Jain, "Congestion control with explicit rate indication", ICC 1995): every
(link, class) pair advertises the rate an unbounded flow of its class would get there given the others' current
rates (the class's water-filled share with its own demand unbounded, then that share's max-min level among the
class's flows), and each flow moves half way to the smallest advertised rate on its path or its cap (undamped
rounds can cycle between two allocations); the rounds stop when no rate moves by more than 1e-12 of itself
(``EXPLICIT_ROUNDS`` at most). (3) Each class is rated by max-min on its settled use of each shared link (plus
the link's spare capacity by weight), which gives the fixed point's rates exactly and feasibly, and the leftover
of every link goes by max-min to the flows that can still grow (work-conserving whatever the rounds reached).

On 200 dense random instances (30 flows on 10 links, 4 classes, caps on 30 %) the rounds settle in a median of 53
(at most 197), and every flow ends with a fair bottleneck (the tests check it on random instances). Cost: about
100 max-min ratings (5,000 flows on 2,000 links in 3 weighted classes: 0.42 s against 3.5 ms); strict levels
alone cost one max-min rating per level.

What it captures: strict-priority starvation of lower classes, weighted shares between classes whatever their
flow counts (a class's share does not grow with its number of flows, unlike per-flow weights), redistribution
of a share a class cannot use, max-min inside each class.

What it ignores: packets and scheduling granularity (DWRR quanta, the VL arbitration table's entry order and
its high-priority limit), per-class buffers and PFC per priority, the rate limiters (``ets`` max bandwidth) and
shapers some switches add, and the transient of the schedulers: the allocation is the fluid fixed point.

Worked numbers (one 400 Gb/s = 50 GB/s link): flows ``h`` (level 0) and ``l`` (level 1) share it: ``h`` gets
50 GB/s and ``l`` 0; if ``h`` is held to 12.5 GB/s elsewhere, ``l`` gets 37.5. Two classes of one level,
weights 3 and 1, one flow each: 37.5 and 12.5 GB/s; if the weight-3 flow is held to 12.5 elsewhere, the other
gets 37.5.

>>> import numpy as np
>>> ptr, links, w = build_csr([np.array([0]), np.array([0])])
>>> class_rates(ptr, links, w, np.ones(2, np.bool_), np.array([50e9]), np.full(2, np.inf),
...             np.array([0, 1]), np.array([0, 0]), np.array([3.0, 1.0])) / 1e9
array([37.5, 12.5])

One class, or every active flow in one class, is the max-min kernel's result itself (bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from .maxmin import build_csr, entries_of, flow_csr, maxmin_rates

__all__ = ["class_rates", "build_csr", "MAX_ROUNDS", "EXPLICIT_ROUNDS"]

EXPLICIT_ROUNDS = 500  # damped explicit-rate rounds of one level at most (see the module docstring)
_SETTLED = 1e-12  # relative: explicit-rate rounds stop when no rate moves more than this
MAX_ROUNDS = 64  # rating rounds of one level (each marks a pair, or it is the last); past it the top-up finishes
_TOL = 1e-9  # relative: a class using less than this below its share of a link is held back elsewhere


@njit(cache=True)
def _fill(
    capacity: float, lo: int, hi: int, weight: np.ndarray, demand: np.ndarray, skip: int
) -> tuple[float, np.ndarray]:
    """Weighted water level of ``capacity`` between the pairs ``lo:hi``: a pair (other than ``skip``; -1: none)
    whose demand is below its weighted level is held at its demand. Returns (level per unit weight, held)."""
    fixed = np.zeros(hi - lo, dtype=np.bool_)
    left = capacity
    while True:
        wsum = 0.0
        for i in range(lo, hi):
            if not fixed[i - lo]:
                wsum += weight[i]
        theta = left / wsum
        changed = False
        for i in range(lo, hi):
            if i != skip and not fixed[i - lo] and demand[i] < theta * weight[i]:
                fixed[i - lo] = True
                left -= demand[i]
                changed = True
        if not changed:
            return theta, fixed


@njit(cache=True)
def _split(
    capacity: np.ndarray, seg_ptr: np.ndarray, weight: np.ndarray, demand: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted water-filling of ``capacity[s]`` between the pairs ``seg_ptr[s]:seg_ptr[s+1]`` (the classes on
    link ``s``) with ``weight`` and ``demand`` (inf: unbounded). Returns (share, limited: the share is the demand,
    below the class's weighted level). A link with one class gives it the whole capacity (a hard limit)."""
    n = weight.shape[0]
    share = np.empty(n, dtype=np.float64)
    limited = np.zeros(n, dtype=np.bool_)
    for s in range(seg_ptr.shape[0] - 1):
        lo, hi = seg_ptr[s], seg_ptr[s + 1]
        c = capacity[s]
        if hi - lo == 1:
            share[lo] = c
            continue
        total = 0.0
        bounded = True
        for i in range(lo, hi):
            if demand[i] == np.inf:
                bounded = False
            else:
                total += demand[i]
        if bounded and total <= c:  # every class fits: each gets its demand and the rest by weight
            wsum = 0.0
            for i in range(lo, hi):
                wsum += weight[i]
            for i in range(lo, hi):
                share[i] = demand[i] + (c - total) * weight[i] / wsum
                limited[i] = True
            continue
        theta, fixed = _fill(c, lo, hi, weight, demand, -1)
        for i in range(lo, hi):
            if fixed[i - lo]:
                share[i] = demand[i]
                limited[i] = True
            else:
                share[i] = theta * weight[i]
    return share, limited


@njit(cache=True)
def _explicit_rates(
    rates: np.ndarray,
    cap: np.ndarray,
    entry_flow: np.ndarray,
    entry_weight: np.ndarray,
    pair_ptr: np.ndarray,
    pair_entries: np.ndarray,
    seg_ptr: np.ndarray,
    seg_capacity: np.ndarray,
    phi: np.ndarray,
) -> np.ndarray:
    """One explicit-rate round: every (link, class) pair advertises the rate an unbounded flow of its class would
    get there given the others' current rates (the class's share with its demand unbounded, the others' their
    use; then that share's max-min level among the class's flows), and each flow takes the smallest advertised
    rate on its path and its cap."""
    n = rates.shape[0]
    npairs = phi.shape[0]
    demand = np.zeros(npairs)
    for p in range(npairs):
        for i in range(pair_ptr[p], pair_ptr[p + 1]):
            e = pair_entries[i]
            demand[p] += entry_weight[e] * rates[entry_flow[e]]
    new = cap.copy()
    for s in range(seg_ptr.shape[0] - 1):
        lo, hi = seg_ptr[s], seg_ptr[s + 1]
        for p in range(lo, hi):
            # the share of pair p's class with its demand unbounded (weighted water-filling of the link)
            if hi - lo == 1:
                share = seg_capacity[s]
            else:
                theta, _ = _fill(seg_capacity[s], lo, hi, phi, demand, p)
                share = theta * phi[p]
            # the max-min level of that share among the class's flows on the link, at their current rates
            m = pair_ptr[p + 1] - pair_ptr[p]
            r = np.empty(m)
            w = np.empty(m)
            for j in range(m):
                e = pair_entries[pair_ptr[p] + j]
                r[j] = rates[entry_flow[e]]
                w[j] = entry_weight[e]
            order = np.argsort(r, kind="mergesort")
            below = 0.0  # sum of w r of the flows held below the level
            above = 0.0  # weight of the flows at or above it
            for j in range(m):
                above += w[j]
            level = share / above
            for j in range(m):
                k = order[j]
                level = (share - below) / above
                if r[k] >= level or j == m - 1:
                    break
                below += w[k] * r[k]
                above -= w[k]
            level = max(level, 0.0)
            for j in range(m):
                f = entry_flow[pair_entries[pair_ptr[p] + j]]
                if level < new[f]:
                    new[f] = level
    for f in range(n):
        if new[f] < 0.0:
            new[f] = 0.0
    return new


def _weighted_level(
    ptr: np.ndarray,
    links: np.ndarray,
    weights: np.ndarray,
    capacity: np.ndarray,
    cap: np.ndarray,
    klass: np.ndarray,
    class_weight: np.ndarray,
    maxmin: Callable[..., np.ndarray],
) -> np.ndarray:
    """Rates of the flows of one level (CSR ``ptr``, ``links``, ``weights``, all active; classes ``klass``)
    sharing ``capacity`` by weighted classes (module docstring)."""
    n = ptr.shape[0] - 1
    every = np.ones(n, dtype=np.bool_)
    entry_flow = np.repeat(np.arange(n), np.diff(ptr))
    nclasses = int(klass.max()) + 1
    key = links * nclasses + klass[entry_flow]
    pairs, vlink = np.unique(key, return_inverse=True)
    vlink = vlink.reshape(-1).astype(np.int64)
    npairs = pairs.shape[0]
    pair_link = pairs // nclasses
    phi = class_weight[pairs % nclasses]
    # pairs are sorted by link: one segment of classes per link present
    seg_starts = np.flatnonzero(np.r_[True, pair_link[1:] != pair_link[:-1]])
    seg_ptr = np.r_[seg_starts, npairs].astype(np.int64)
    shared = np.repeat(np.diff(seg_ptr) > 1, np.diff(seg_ptr))  # the pair's link carries several classes
    seg_capacity = capacity[pair_link[seg_starts]]
    demand = np.full(npairs, np.inf)
    share, _ = _split(seg_capacity, seg_ptr, phi, demand)
    limited = np.zeros(npairs, dtype=np.bool_)
    for _ in range(MAX_ROUNDS):
        rates = maxmin(ptr, vlink, weights, every, share, cap)
        used = np.bincount(vlink, weights=weights * rates[entry_flow], minlength=npairs)
        newly = shared & ~limited & (used < share * (1 - _TOL))
        limited |= newly
        demand = np.where(limited, used, np.inf)
        if not newly.any():
            break
        share, _ = _split(seg_capacity, seg_ptr, phi, demand)
    rates = _top_up(ptr, links, weights, capacity, cap, rates, entry_flow, maxmin)
    # explicit-rate rounds from there to the fixed point of the links' schedulers, then its class shares rated
    pair_order = np.argsort(vlink, kind="mergesort")
    pair_ptr = np.r_[0, np.cumsum(np.bincount(vlink, minlength=npairs))].astype(np.int64)
    for _ in range(EXPLICIT_ROUNDS):
        advertised = _explicit_rates(rates, cap, entry_flow, weights, pair_ptr, pair_order, seg_ptr, seg_capacity, phi)
        fresh = 0.5 * (rates + advertised)  # damped: undamped rounds can cycle between two allocations
        settled = np.allclose(fresh, rates, rtol=_SETTLED, atol=0.0)
        rates = fresh
        if settled:
            break
    used = np.bincount(vlink, weights=weights * rates[entry_flow], minlength=npairs)
    seg_of = np.repeat(np.arange(seg_starts.shape[0]), np.diff(seg_ptr))
    total = np.bincount(seg_of, weights=used, minlength=seg_starts.shape[0])
    # round-off or an unsettled round: scaled back to fit (a link left with nothing carries nothing)
    over = np.maximum(np.divide(total, seg_capacity, out=np.ones_like(total), where=seg_capacity > 0), 1.0)[seg_of]
    spare = np.maximum(seg_capacity - total, 0.0)[seg_of] * phi / np.bincount(seg_of, weights=phi)[seg_of]
    share = np.where(shared, used / over + spare, seg_capacity[seg_of])
    rates = maxmin(ptr, vlink, weights, every, share, cap)
    return _top_up(ptr, links, weights, capacity, cap, rates, entry_flow, maxmin)


def _top_up(
    ptr: np.ndarray,
    links: np.ndarray,
    weights: np.ndarray,
    capacity: np.ndarray,
    cap: np.ndarray,
    rates: np.ndarray,
    entry_flow: np.ndarray,
    maxmin: Callable[..., np.ndarray],
) -> np.ndarray:
    """``rates`` plus what they leave on each link, by max-min between the flows that can still grow."""
    load = np.bincount(links, weights=weights * rates[entry_flow], minlength=capacity.shape[0])
    left = np.maximum(capacity - load, 0.0)
    more = maxmin(ptr, links, weights, np.ones(rates.shape[0], dtype=np.bool_), left, np.maximum(cap - rates, 0.0))
    topped: np.ndarray = rates + more
    return topped


def class_rates(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    active: np.ndarray,
    link_capacity: np.ndarray,
    flow_cap: np.ndarray,
    flow_class: np.ndarray,
    class_level: np.ndarray,
    class_weight: np.ndarray,
    *,
    maxmin: Callable[..., np.ndarray] = maxmin_rates,
) -> np.ndarray:
    """Rates (bytes/s) of flows in traffic classes (module docstring); arguments as ``maxmin_rates``'s, plus each
    flow's class ``flow_class`` (int64, index into ``class_level`` and ``class_weight``). ``maxmin`` is the
    max-min kernel used within classes (the tests pass its naive twin). Inputs are never modified."""
    flow_ptr, flow_links, flow_weights = flow_csr(flow_ptr, flow_links, flow_weights)
    active = np.ascontiguousarray(active, dtype=np.bool_)
    link_capacity = np.ascontiguousarray(link_capacity, dtype=np.float64)
    flow_cap = np.ascontiguousarray(flow_cap, dtype=np.float64)
    flow_class = np.asarray(flow_class, dtype=np.int64)
    present = np.unique(flow_class[active])
    if present.shape[0] <= 1:  # one class: plain max-min
        return maxmin(flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap)
    level_of = np.asarray(class_level, dtype=np.int64)[flow_class]
    n = active.shape[0]
    rates = np.zeros(n)
    residual = link_capacity.copy()
    counts = np.diff(flow_ptr)
    for level in np.unique(level_of[active]).tolist():
        chosen = np.flatnonzero(active & (level_of == level))
        entries = entries_of(flow_ptr, chosen)
        sub_ptr = np.r_[0, np.cumsum(counts[chosen])].astype(np.int64)
        sub_links, sub_weights = flow_links[entries], flow_weights[entries]
        sub_class = flow_class[chosen]
        if np.unique(sub_class).shape[0] == 1:
            every = np.ones(chosen.shape[0], np.bool_)
            sub = maxmin(sub_ptr, sub_links, sub_weights, every, residual, flow_cap[chosen])
        else:
            sub = _weighted_level(
                sub_ptr, sub_links, sub_weights, residual, flow_cap[chosen], sub_class,
                np.asarray(class_weight, dtype=np.float64), maxmin,
            )  # fmt: skip
        rates[chosen] = sub
        charged = np.bincount(sub_links, weights=sub_weights * np.repeat(sub, counts[chosen]), minlength=residual.size)
        residual = np.maximum(residual - charged, 0.0)
    return rates
