r"""Weighted max-min fair rates by progressive filling (water-filling), as a numba kernel.

The maths
---------
Flow ``f`` crosses links ``l`` with weights ``w_fl > 0`` (a link listed twice on a path counts
twice: the weights add) and may carry a rate cap ``cap_f`` (``inf`` = none). Link ``l`` has
capacity ``c_l`` bytes/s. Feasible rates satisfy, for every link,

.. math::  \sum_f w_{fl}\, r_f \le c_l, \qquad 0 \le r_f \le cap_f .

Progressive filling raises one common level :math:`\lambda` for every active, unfrozen flow.
With :math:`F_l` the flows already frozen on link ``l`` and :math:`U_l` the unfrozen ones,
link ``l`` saturates when

.. math::  \lambda_l = \frac{R_l}{W_l}, \qquad
           R_l = c_l - \sum_{f \in F_l} w_{fl} r_f, \qquad W_l = \sum_{f \in U_l} w_{fl}.

The next event is the smallest of the link levels :math:`\lambda_l` and the caps of unfrozen
flows. A saturated link freezes every unfrozen flow on it at :math:`\lambda`; a flow reaching its
cap freezes at its cap. Repeat until every active flow is frozen. The result is the unique
weighted max-min fair allocation: no flow can gain rate without taking it from a flow whose
rate is no larger. Every flow ends either at its cap or on a saturated link where its rate is
the largest among the flows on that link (its bottleneck).

What it captures: the steady-state bandwidth share of long-lived flows on shared links
(fabric links, NICs, NVLinks), path multiplicity (a flow crossing a link twice costs twice),
per-flow ceilings (an injection limit, an application pacing rate).

What it ignores: packets, queues and latency; congestion control dynamics (DCQCN, TCP
slow start, incast collapse); head-of-line blocking; PFC pauses; transient convergence. The
allocation is the fixed point a perfectly fair fluid network would reach instantly. Those
effects are the refinements' job, layered on top of these rates.

Complexity
----------
With ``F`` flows, ``L`` links and ``nnz`` (flow, link) entries: the link -> flows transpose is
a counting sort, O(F + L + nnz). Link levels live in an indexed binary min-heap keyed on
``(R_l / W_l, l)``; capped flows are pre-sorted by ``(cap_f, f)``. Freezing a flow updates
``R`` and ``W`` of each link on its path; the links touched by one event are re-keyed once.
Each entry is touched O(1) times, so the total is O(nnz log L + C log C) for ``C`` capped
flows, in O(F + L + nnz) memory.

Worked number
-------------
Three flows on one 100 GB/s link, flow 0 capped at 10 GB/s. The link alone would saturate at
:math:`\lambda = 100/3 \approx 33.3` GB/s, but the cap comes first: at :math:`\lambda = 10` flow
0 freezes. Then :math:`R = 100 - 10 = 90`, :math:`W = 2`, so the link saturates at
:math:`\lambda = 45`: rates are 10, 45, 45 GB/s.

>>> import numpy as np
>>> ptr, links, w = build_csr([np.array([0]), np.array([0]), np.array([0])])
>>> maxmin_rates(ptr, links, w, np.ones(3, np.bool_), np.array([100e9]),
...              np.array([10e9, np.inf, np.inf])) / 1e9
array([10., 45., 45.])

Numerical guards: levels never decrease (each event uses ``max(key, previous level)``), a link
leaves the heap when its count of unfrozen entries reaches zero (an integer, so round-off in
``W`` cannot keep it alive), and ties are broken by id (links by link id, caps by flow id; a cap
and a link at the same level: the cap goes first). An active flow with no links and no cap is
unbounded and gets ``inf``; the kernel stops as soon as no finite event remains.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["maxmin_rates", "build_csr", "flow_csr"]


# --------------------------------------------------------------------------------------------
# Indexed binary min-heap of link ids ordered by (key, link id). heap[i] is a link id, hkey[i]
# its key (stored alongside to avoid an indirection), pos[link] its index in heap or -1.
# --------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _sift_up(heap: np.ndarray, hkey: np.ndarray, pos: np.ndarray, i: int) -> None:
    item = heap[i]
    k = hkey[i]
    while i > 0:
        parent = (i - 1) >> 1
        pk = hkey[parent]
        if k < pk or (k == pk and item < heap[parent]):
            p = heap[parent]
            heap[i] = p
            hkey[i] = pk
            pos[p] = i
            i = parent
        else:
            break
    heap[i] = item
    hkey[i] = k
    pos[item] = i


@njit(cache=True, inline="always")
def _sift_down(heap: np.ndarray, hkey: np.ndarray, pos: np.ndarray, i: int, size: int) -> None:
    item = heap[i]
    k = hkey[i]
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        ck = hkey[child]
        right = child + 1
        if right < size:
            rk = hkey[right]
            if rk < ck or (rk == ck and heap[right] < heap[child]):
                child = right
                ck = rk
        if ck < k or (ck == k and heap[child] < item):
            c = heap[child]
            heap[i] = c
            hkey[i] = ck
            pos[c] = i
            i = child
        else:
            break
    heap[i] = item
    hkey[i] = k
    pos[item] = i


@njit(cache=True, inline="always")
def _heap_remove(heap: np.ndarray, hkey: np.ndarray, pos: np.ndarray, link: int, size: int) -> int:
    """Remove ``link`` from the heap; return the new size."""
    i = pos[link]
    pos[link] = -1
    size -= 1
    if i == size:
        return size
    last = heap[size]
    heap[i] = last
    hkey[i] = hkey[size]
    pos[last] = i
    _sift_up(heap, hkey, pos, i)
    _sift_down(heap, hkey, pos, pos[last], size)
    return size


@njit(cache=True, inline="always")
def _rekey_dirty(
    heap: np.ndarray,
    hkey: np.ndarray,
    pos: np.ndarray,
    size: int,
    dirty: np.ndarray,
    n_dirty: int,
    count: np.ndarray,
    residual: np.ndarray,
    weight_sum: np.ndarray,
    empty_key: float,
) -> int:
    """Re-key each of the ``n_dirty`` links in ``dirty`` still in the heap at ``residual / weight_sum``
    (``empty_key`` when no weight is left); drop those whose ``count`` of unfrozen entries is 0.
    Returns the new heap size."""
    for i in range(n_dirty):
        link = dirty[i]
        if pos[link] < 0:
            continue
        if count[link] == 0:
            size = _heap_remove(heap, hkey, pos, link, size)
            continue
        w = weight_sum[link]
        new_key = residual[link] / w if w > 0.0 else empty_key
        slot = pos[link]
        old_key = hkey[slot]
        hkey[slot] = new_key
        if new_key < old_key:
            _sift_up(heap, hkey, pos, slot)
        elif new_key > old_key:
            _sift_down(heap, hkey, pos, slot, size)
    return size


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _freeze(
    f: int,
    rate: float,
    rates: np.ndarray,
    frozen: np.ndarray,
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    residual: np.ndarray,
    weight_sum: np.ndarray,
    unfrozen_count: np.ndarray,
    dirty_stamp: np.ndarray,
    dirty: np.ndarray,
    n_dirty: int,
    stamp: int,
) -> int:
    """Freeze flow ``f`` at ``rate``; charge its links; append them to the dirty list."""
    rates[f] = rate
    frozen[f] = True
    for j in range(flow_ptr[f], flow_ptr[f + 1]):
        link = flow_links[j]
        w = flow_weights[j]
        residual[link] -= w * rate
        weight_sum[link] -= w
        unfrozen_count[link] -= 1
        if dirty_stamp[link] != stamp:
            dirty_stamp[link] = stamp
            dirty[n_dirty] = link
            n_dirty += 1
    return n_dirty


@njit(cache=True)
def _maxmin_kernel(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    active: np.ndarray,
    link_capacity: np.ndarray,
    flow_cap: np.ndarray,
) -> np.ndarray:
    """Progressive filling; see the module docstring. Inputs are read, never written."""
    n_flows = active.shape[0]
    n_links = link_capacity.shape[0]
    rates = np.zeros(n_flows, dtype=np.float64)
    frozen = np.zeros(n_flows, dtype=np.bool_)

    # Per-link unfrozen entry count and unfrozen weight; remaining capacity.
    unfrozen_count = np.zeros(n_links, dtype=np.int64)
    weight_sum = np.zeros(n_links, dtype=np.float64)
    residual = np.empty(n_links, dtype=np.float64)
    for link in range(n_links):
        residual[link] = link_capacity[link]
    n_active = 0
    n_capped = 0
    for f in range(n_flows):
        if not active[f]:
            continue
        n_active += 1
        if flow_cap[f] < np.inf:
            n_capped += 1
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            link = flow_links[j]
            unfrozen_count[link] += 1
            weight_sum[link] += flow_weights[j]

    # Transpose link -> active flows by counting sort (flows appear once per entry).
    link_ptr = np.zeros(n_links + 1, dtype=np.int64)
    for link in range(n_links):
        link_ptr[link + 1] = link_ptr[link] + unfrozen_count[link]
    cursor = link_ptr[:-1].copy()
    link_flows = np.empty(link_ptr[n_links], dtype=np.int64)
    for f in range(n_flows):
        if not active[f]:
            continue
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            link = flow_links[j]
            link_flows[cursor[link]] = f
            cursor[link] += 1

    # Capped active flows sorted by (cap, flow id): stable sort of ids in increasing order.
    capped = np.empty(n_capped, dtype=np.int64)
    k = 0
    for f in range(n_flows):
        if active[f] and flow_cap[f] < np.inf:
            capped[k] = f
            k += 1
    cap_values = np.empty(n_capped, dtype=np.float64)
    for i in range(n_capped):
        cap_values[i] = flow_cap[capped[i]]
    cap_order = capped[np.argsort(cap_values, kind="mergesort")]

    # Heap of links carrying unfrozen flows, keyed on their saturation level R/W.
    heap = np.empty(n_links, dtype=np.int64)
    hkey = np.empty(n_links, dtype=np.float64)
    pos = np.full(n_links, -1, dtype=np.int64)
    size = 0
    for link in range(n_links):
        if unfrozen_count[link] > 0:
            hkey[size] = residual[link] / weight_sum[link]
            heap[size] = link
            pos[link] = size
            size += 1
    for i in range(size // 2 - 1, -1, -1):
        _sift_down(heap, hkey, pos, i, size)

    dirty_stamp = np.full(n_links, -1, dtype=np.int64)
    dirty = np.empty(n_links, dtype=np.int64)
    level = 0.0
    next_cap = 0
    n_unfrozen = n_active
    event = 0
    while n_unfrozen > 0:
        while next_cap < n_capped and frozen[cap_order[next_cap]]:
            next_cap += 1
        cap_level = flow_cap[cap_order[next_cap]] if next_cap < n_capped else np.inf
        link_level = hkey[0] if size > 0 else np.inf
        if cap_level == np.inf and link_level == np.inf:
            break  # only unbounded flows remain

        n_dirty = 0
        if cap_level <= link_level:
            f = cap_order[next_cap]
            next_cap += 1
            level = max(level, cap_level)
            n_dirty = _freeze(
                f,
                flow_cap[f],
                rates,
                frozen,
                flow_ptr,
                flow_links,
                flow_weights,
                residual,
                weight_sum,
                unfrozen_count,
                dirty_stamp,
                dirty,
                n_dirty,
                event,
            )
            n_unfrozen -= 1
        else:
            link = heap[0]
            level = max(level, link_level)
            for j in range(link_ptr[link], link_ptr[link + 1]):
                f = link_flows[j]
                if not frozen[f]:
                    n_dirty = _freeze(
                        f,
                        level,
                        rates,
                        frozen,
                        flow_ptr,
                        flow_links,
                        flow_weights,
                        residual,
                        weight_sum,
                        unfrozen_count,
                        dirty_stamp,
                        dirty,
                        n_dirty,
                        event,
                    )
                    n_unfrozen -= 1

        # Re-key every link touched by this event once.
        size = _rekey_dirty(heap, hkey, pos, size, dirty, n_dirty, unfrozen_count, residual, weight_sum, level)
        event += 1

    if n_unfrozen > 0:
        for f in range(n_flows):
            if active[f] and not frozen[f]:
                rates[f] = np.inf
    return rates


# --------------------------------------------------------------------------------------------
# Python API
# --------------------------------------------------------------------------------------------


def maxmin_rates(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    active: np.ndarray,
    link_capacity: np.ndarray,
    flow_cap: np.ndarray | None = None,
) -> np.ndarray:
    """Weighted max-min fair rates (bytes/s) of flows sharing links, by progressive filling.

    Parameters
    ----------
    flow_ptr : int64[F+1]
        CSR row pointer: flow ``f`` uses entries ``flow_ptr[f]:flow_ptr[f+1]``.
    flow_links : int64[nnz]
        Link ids in ``[0, L)``. Repeated links on a path add their weights.
    flow_weights : float64[nnz]
        Weight ``w_fl > 0`` of each entry (bytes on the link per byte of flow).
    active : bool[F]
        Inactive flows get rate 0 and consume nothing.
    link_capacity : float64[L]
        Capacities ``c_l > 0`` in bytes/s.
    flow_cap : float64[F] or None
        Per-flow rate caps in bytes/s; ``np.inf`` (or ``None`` for all) means uncapped.

    Returns
    -------
    float64[F]
        Rates; 0 for inactive flows, ``inf`` for an active flow with no links and no cap.

    This is on a hot path: shapes are checked in O(1), link ids are NOT range-checked
    (an id outside ``[0, L)`` is undefined behaviour). Inputs are never modified.
    """
    flow_ptr, flow_links, flow_weights = flow_csr(flow_ptr, flow_links, flow_weights)
    active = np.ascontiguousarray(active, dtype=np.bool_)
    link_capacity = np.ascontiguousarray(link_capacity, dtype=np.float64)
    n_flows = active.shape[0]
    if flow_cap is None:
        flow_cap = np.full(n_flows, np.inf)
    else:
        flow_cap = np.ascontiguousarray(flow_cap, dtype=np.float64)
    if flow_ptr.shape[0] != n_flows + 1 or flow_cap.shape[0] != n_flows:
        raise ValueError(
            f"shape mismatch: flow_ptr {flow_ptr.shape[0]} (want F+1), active {n_flows}, flow_cap {flow_cap.shape[0]}"
        )
    if flow_links.shape[0] != flow_weights.shape[0] or (n_flows > 0 and flow_ptr[-1] > flow_links.shape[0]):
        raise ValueError(
            f"shape mismatch: flow_links {flow_links.shape[0]}, flow_weights "
            f"{flow_weights.shape[0]}, flow_ptr[-1] {flow_ptr[-1]}"
        )
    rates: np.ndarray = _maxmin_kernel(flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap)
    return rates


def flow_csr(
    flow_ptr: npt.ArrayLike, flow_links: npt.ArrayLike, flow_weights: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The flows' link lists as the kernels take them: contiguous int64 offsets and link ids,
    float64 weights (no copy when they already are)."""
    return (
        np.ascontiguousarray(flow_ptr, dtype=np.int64),
        np.ascontiguousarray(flow_links, dtype=np.int64),
        np.ascontiguousarray(flow_weights, dtype=np.float64),
    )


def entries_of(flow_ptr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Positions in the CSR entry arrays of every (flow, link) entry of flows ``idx``, in order."""
    starts, ends = flow_ptr[idx], flow_ptr[idx + 1]
    counts = ends - starts
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(int(counts.sum()), dtype=np.int64)


def build_csr(
    paths: list[np.ndarray], weights: list[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack per-flow link paths (and optional per-entry weights) into CSR arrays.

    ``paths[f]`` is a 1-D integer array of link ids for flow ``f`` (may be empty, may repeat
    links); ``weights[f]`` matches it in length (default: all 1.0).

    Returns ``(flow_ptr int64[F+1], flow_links int64[nnz], flow_weights float64[nnz])``.
    """
    lengths = np.fromiter((len(p) for p in paths), dtype=np.int64, count=len(paths))
    flow_ptr = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=flow_ptr[1:])
    nnz = int(flow_ptr[-1])
    if nnz == 0:
        flow_links = np.zeros(0, dtype=np.int64)
    else:
        flow_links = np.concatenate([np.asarray(p, dtype=np.int64).ravel() for p in paths])
    if weights is None:
        flow_weights = np.ones(nnz, dtype=np.float64)
    else:
        if len(weights) != len(paths):
            raise ValueError(f"{len(weights)} weight arrays for {len(paths)} paths")
        for f, (p, w) in enumerate(zip(paths, weights)):
            if len(p) != len(w):
                raise ValueError(f"flow {f}: {len(p)} links but {len(w)} weights")
        if nnz == 0:
            flow_weights = np.zeros(0, dtype=np.float64)
        else:
            flow_weights = np.concatenate([np.asarray(w, dtype=np.float64).ravel() for w in weights])
    return flow_ptr, flow_links, flow_weights
