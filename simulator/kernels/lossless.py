r"""Lossless back-pressure (PFC pauses, InfiniBand credits) as progressive filling with congestion trees.

The maths
---------
Every participating flow ``f`` offers a demand :math:`d_f` (bytes/s: the rate its sender pushes)
and gets a throughput :math:`x_f = m_f d_f` with a throttle :math:`m_f \in (0, 1]`. Link ``l``
(capacity :math:`c_l`) carries :math:`\sum_f w_{fl} d_f m_f`. The throttles rise together from 0
(progressive filling, as in ``maxmin``, but on :math:`m` with per-link consumption
:math:`w_{fl} d_f`); link ``e`` fills at the common level

.. math::  \lambda_e = \frac{c_e - \sum_{f\ \mathrm{frozen}} w_{fe} d_f m_f}{\sum_{f\ \mathrm{unfrozen}} w_{fe} d_f}.

The first link to fill (smallest :math:`\lambda_e`, ties by link id) is a congested egress. What
freezes at that level is its **congestion tree**: the egress ``e``, every lossless link ``i``
that feeds it (some flow crosses ``i`` and then ``e``: ``link_dst[i] == link_src[e]``), every
lossless link feeding those, and so on upstream. Every flow crossing a link of the tree freezes
at :math:`m_f = \lambda_e`; each fed link ``i`` is paused a fraction :math:`1 - \lambda_e` of the
time. Flows that reach :math:`m = 1` (their full demand) freeze there. Repeat until every flow is
frozen.

Assumptions: (1) a congested egress is a FIFO queue, so the flows through it share it in
proportion to what they offer (equal throttle); (2) a pause stops a whole ingress port (one
priority / one virtual lane carries all the RDMA traffic), so every flow on a paused link is
slowed by the same factor, also flows bound elsewhere (head-of-line blocking: the *victims*);
(3) a paused link's transmitter fills its own buffer and pauses its ingress links in turn, up to
the senders (congestion spreading), time-averaged (no pause quanta, headroom or Xon/Xoff
hysteresis); (4) the successor of a flow's entry ``j`` is the first run of later entries that
leave the node entry ``j`` enters (one entry per hop, or several for a split flow).

Feasible by construction (no link is ever filled past capacity) and it reduces to the offered
demands when no link is over-subscribed at full demand (every :math:`m_f = 1`).

Worked number (the classic victim): hosts A, B, C, D on one switch, links of capacity c. A sends
to C and to D (its NIC shares its uplink: demand c/2 each), B sends to C (demand c). The egress to
C is offered 1.5c, so it fills at :math:`\lambda = c / 1.5c = 2/3`; its tree is the egress and the
uplinks of A and B. A->C gets c/3, B->C 2c/3, and the victim A->D, which shares A's paused uplink,
c/3 instead of the c/2 max-min gives it: A's uplink is paused 1/3 of the time (excess 0.5c over
arrival 1.5c).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from .maxmin import _freeze, _rekey_dirty, _sift_down, flow_csr

__all__ = ["lossless_throttle", "successor_pairs"]


@njit(cache=True)
def _pairs(
    flow_ptr: np.ndarray, flow_links: np.ndarray, participant: np.ndarray, link_src: np.ndarray, link_dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(upstream link, downstream link) for every hop of every participating flow (see assumption 4)."""
    n_flows = participant.shape[0]
    count = 0
    for phase in range(2):
        if phase == 1:
            ups = np.empty(count, dtype=np.int64)
            downs = np.empty(count, dtype=np.int64)
            count = 0
        for f in range(n_flows):
            if not participant[f]:
                continue
            end = flow_ptr[f + 1]
            for j in range(flow_ptr[f], end):
                node = link_dst[flow_links[j]]
                k = j + 1
                while k < end and link_src[flow_links[k]] != node:
                    k += 1
                while k < end and link_src[flow_links[k]] == node:
                    if phase == 1:
                        ups[count] = flow_links[j]
                        downs[count] = flow_links[k]
                    count += 1
                    k += 1
    return ups, downs


@njit(cache=True)
def _throttle_kernel(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    participant: np.ndarray,
    link_capacity: np.ndarray,
    demand: np.ndarray,
    lossless: np.ndarray,
    ups: np.ndarray,
    downs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_flows = participant.shape[0]
    n_links = link_capacity.shape[0]
    m = np.ones(n_flows)
    frozen = np.zeros(n_flows, dtype=np.bool_)
    pause = np.zeros(n_links)
    tree_level = np.full(n_links, np.inf)
    in_tree = np.zeros(n_links, dtype=np.bool_)

    # each entry's use per unit throttle (weight x demand), link -> participating flows, per-link sums
    use_w = np.empty(flow_links.shape[0])
    for f in range(n_flows):
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            use_w[j] = flow_weights[j] * demand[f]
    count = np.zeros(n_links, dtype=np.int64)
    weight_sum = np.zeros(n_links)
    residual = link_capacity.copy()
    n_unfrozen = 0
    for f in range(n_flows):
        if participant[f]:
            n_unfrozen += 1
            for j in range(flow_ptr[f], flow_ptr[f + 1]):
                count[flow_links[j]] += 1
                weight_sum[flow_links[j]] += use_w[j]
    link_ptr = np.zeros(n_links + 1, dtype=np.int64)
    for l in range(n_links):
        link_ptr[l + 1] = link_ptr[l] + count[l]
    cursor = link_ptr[:-1].copy()
    link_flows = np.empty(link_ptr[n_links], dtype=np.int64)
    for f in range(n_flows):
        if participant[f]:
            for j in range(flow_ptr[f], flow_ptr[f + 1]):
                link_flows[cursor[flow_links[j]]] = f
                cursor[flow_links[j]] += 1
    # downstream link -> lossless upstream links
    up_count = np.zeros(n_links + 1, dtype=np.int64)
    for k in range(ups.shape[0]):
        if lossless[ups[k]]:
            up_count[downs[k] + 1] += 1
    for l in range(n_links):
        up_count[l + 1] += up_count[l]
    up_cursor = up_count[:-1].copy()
    upstream = np.empty(up_count[n_links], dtype=np.int64)
    for k in range(ups.shape[0]):
        if lossless[ups[k]]:
            upstream[up_cursor[downs[k]]] = ups[k]
            up_cursor[downs[k]] += 1

    heap = np.empty(n_links, dtype=np.int64)
    hkey = np.empty(n_links)
    pos = np.full(n_links, -1, dtype=np.int64)
    size = 0
    for l in range(n_links):
        if count[l] > 0:
            heap[size] = l
            hkey[size] = residual[l] / weight_sum[l] if weight_sum[l] > 0.0 else np.inf
            pos[l] = size
            size += 1
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(heap, hkey, pos, i, size)

    stack = np.empty(n_links, dtype=np.int64)
    dirty = np.empty(n_links, dtype=np.int64)
    dirty_stamp = np.full(n_links, -1, dtype=np.int64)
    level = 0.0
    event = 0
    while n_unfrozen > 0 and size > 0 and hkey[0] < 1.0:
        e = heap[0]
        level = max(level, hkey[0])
        n_dirty = 0
        in_tree[e] = True
        tree_level[e] = level
        top = 0
        stack[top] = e
        top += 1
        while top > 0:
            top -= 1
            x = stack[top]
            for j in range(link_ptr[x], link_ptr[x + 1]):
                f = link_flows[j]
                if frozen[f]:
                    continue
                n_dirty = _freeze(
                    f,
                    level,
                    m,
                    frozen,
                    flow_ptr,
                    flow_links,
                    use_w,
                    residual,
                    weight_sum,
                    count,
                    dirty_stamp,
                    dirty,
                    n_dirty,
                    event,
                )
                n_unfrozen -= 1
            for k in range(up_count[x], up_count[x + 1]):
                i = upstream[k]
                if not in_tree[i]:
                    in_tree[i] = True
                    tree_level[i] = level
                    pause[i] = 1.0 - level
                    stack[top] = i
                    top += 1
        size = _rekey_dirty(heap, hkey, pos, size, dirty, n_dirty, count, residual, weight_sum, np.inf)
        event += 1
    return m, pause, tree_level


def successor_pairs(
    flow_ptr: npt.ArrayLike,
    flow_links: npt.ArrayLike,
    participant: npt.ArrayLike,
    link_src: npt.ArrayLike,
    link_dst: npt.ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """``(upstream links, downstream links)``: one pair per hop of each participating flow."""
    pairs: tuple[np.ndarray, np.ndarray] = _pairs(
        np.ascontiguousarray(flow_ptr, dtype=np.int64),
        np.ascontiguousarray(flow_links, dtype=np.int64),
        np.ascontiguousarray(participant, dtype=np.bool_),
        np.ascontiguousarray(link_src, dtype=np.int64),
        np.ascontiguousarray(link_dst, dtype=np.int64),
    )
    return pairs


def lossless_throttle(
    flow_ptr: npt.ArrayLike,
    flow_links: npt.ArrayLike,
    flow_weights: npt.ArrayLike,
    participant: npt.ArrayLike,
    link_capacity: npt.ArrayLike,
    demand: npt.ArrayLike,
    lossless: npt.ArrayLike,
    ups: npt.ArrayLike,
    downs: npt.ArrayLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Throttles of lossless back-pressure; see the module docstring.

    Parameters
    ----------
    flow_ptr, flow_links, flow_weights : CSR of the flows' links (as ``maxmin_rates``).
    participant : bool[F]
        Flows taking part (active flows crossing a lossless link); the others get throttle 1.
    link_capacity : float64[L]
        Bytes/s, > 0.
    demand : float64[F]
        Offered rate of each participating flow, bytes/s, finite and >= 0.
    lossless : bool[L]
        Links whose receiver can pause them (PFC priority or InfiniBand credits).
    ups, downs : int64[P]
        The participating flows' successor pairs, as ``successor_pairs`` gives them: link ``ups[k]``
        feeds link ``downs[k]``.

    Returns
    -------
    throttle : float64[F]
        :math:`m_f`: throughput = throttle x demand (1 for flows never slowed, or not taking part).
    pause : float64[L]
        Fraction of time each link is paused by its receiver (0 if never).
    tree_level : float64[L]
        Level of the congestion tree the link belongs to (``inf`` if none): the saturated egress
        and every paused link of its tree.
    """
    flow_ptr, flow_links, flow_weights = flow_csr(flow_ptr, flow_links, flow_weights)
    participant = np.ascontiguousarray(participant, dtype=np.bool_)
    link_capacity = np.ascontiguousarray(link_capacity, dtype=np.float64)
    demand = np.ascontiguousarray(demand, dtype=np.float64)
    lossless = np.ascontiguousarray(lossless, dtype=np.bool_)
    ups = np.ascontiguousarray(ups, dtype=np.int64)
    downs = np.ascontiguousarray(downs, dtype=np.int64)
    n_flows, n_links = participant.shape[0], link_capacity.shape[0]
    if flow_ptr.shape[0] != n_flows + 1 or demand.shape[0] != n_flows:
        raise ValueError(
            f"shape mismatch: flow_ptr {flow_ptr.shape[0]} (want F+1), participant {n_flows}, demand {demand.shape[0]}"
        )
    if lossless.shape[0] != n_links or ups.shape[0] != downs.shape[0]:
        raise ValueError(
            f"shape mismatch: link_capacity {n_links}, lossless {lossless.shape[0]}, ups "
            f"{ups.shape[0]}, downs {downs.shape[0]}"
        )
    d = demand[participant]
    if not np.all(np.isfinite(d) & (d >= 0)):
        raise ValueError("demand: every participating flow needs a finite demand >= 0")
    out: tuple[np.ndarray, np.ndarray, np.ndarray] = _throttle_kernel(
        flow_ptr, flow_links, flow_weights, participant, link_capacity, demand, lossless, ups, downs
    )
    return out
