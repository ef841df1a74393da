r"""Draining the fluid network's flows between two changes, one pass over the flow slots.

Between changes every active flow ``f`` moves at its constant rate :math:`r_f`, start-up bytes first (its fill
:math:`s_f`, not data), so over :math:`\Delta t`

.. math::  m_f = \min(r_f \Delta t,\ b_f), \qquad s_f \leftarrow s_f - \min(m_f, s_f), \qquad
           b_f \leftarrow b_f - m_f,

with :math:`b_f` the bytes it has left (fill included); it has finished once :math:`b_f \le 10^{-9} (r_f + 1)`
(at most a nanosecond of transfer left: float round-off on the drain). The next change is the soonest end,
:math:`\min_f b_f / r_f` over the active flows with :math:`r_f > 0` (``inf`` when none moves).

What it captures and ignores is the fluid model's (``network.base``): constant rates between changes, no packets.
These loops are the numpy expressions ``FluidNetwork.advance`` and ``next_completion_s`` would evaluate, element
for element in the same IEEE operations (so the same bits), without a temporary array per expression: the
network calls them twice per change for a few hundred flows, where numpy's per-call cost dominates.

Worked number: a flow with 10 bytes of fill and 100 bytes in all at 40 bytes/s drained for 1 s moves 40 bytes,
its fill first: 0 fill and 60 bytes left, done in 60 / 40 = 1.5 s.

>>> import numpy as np
>>> rate, left, fill = np.array([40.0, 0.0]), np.array([100.0, 5.0]), np.array([10.0, 0.0])
>>> active, done = np.ones(2, np.bool_), np.zeros(2, np.int64)
>>> drain(rate, left, fill, active, 1.0, done, np.zeros(0)), left.tolist(), fill.tolist()
(0, [60.0, 5.0], [0.0, 0.0])
>>> soonest_end(rate, left, active)
1.5
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["drain", "soonest_end", "count_link_bytes"]


@njit(cache=True)
def drain(
    rate: np.ndarray,
    remaining: np.ndarray,
    fill: np.ndarray,
    active: np.ndarray,
    dt_s: float,
    done: np.ndarray,
    data_moved: np.ndarray,
) -> int:
    """Drain the active flows ``dt_s`` seconds (nothing moves when ``dt_s`` is 0) in place; write the slots of
    those that have finished to ``done`` (as many entries as flows) and return how many; with a ``data_moved``
    as long as the flows (not empty), write each active flow's data bytes moved (start-up excluded) to it."""
    n_done = 0
    record = data_moved.shape[0] > 0
    for f in range(active.shape[0]):
        if not active[f]:
            continue
        if dt_s > 0:
            moved = min(rate[f] * dt_s, remaining[f])
            filling = min(moved, fill[f])
            fill[f] -= filling
            remaining[f] -= moved
            if record:
                data_moved[f] = moved - filling
        if remaining[f] <= rate[f] * 1e-9 + 1e-9:
            done[n_done] = f
            n_done += 1
    return n_done


@njit(cache=True)
def soonest_end(rate: np.ndarray, remaining: np.ndarray, active: np.ndarray) -> float:
    """The smallest ``remaining / rate`` over the active flows with a positive rate (``inf``: none)."""
    best = np.inf
    for f in range(active.shape[0]):
        if active[f] and rate[f] > 0:
            t = remaining[f] / rate[f]
            if t < best:
                best = t
    return best


@njit(cache=True)
def count_link_bytes(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    slots: np.ndarray,
    nbytes: np.ndarray,
    link_bytes: np.ndarray,
    sums: np.ndarray,
    seen: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Add ``nbytes[i]`` x each entry's weight to the links of the flow in slot ``slots[i]`` (CSR ``flow_ptr``,
    ``flow_links``, ``flow_weights``), as ``link_bytes += np.bincount(links, weights=values)`` does: each link's
    sum over these entries in entry order from 0.0, then added to its bytes. ``sums`` (floats) and ``seen``
    (booleans), one per link, are scratch that is all zeros before and after. Returns the positions of the flows'
    entries in the CSR arrays, in order (``network.base.entries_of``), and their links."""
    total = 0
    for i in range(slots.shape[0]):
        total += flow_ptr[slots[i] + 1] - flow_ptr[slots[i]]
    entries = np.empty(total, dtype=np.int64)
    links = np.empty(total, dtype=np.int64)
    touched = np.empty(total, dtype=np.int64)
    k = 0
    t = 0
    for i in range(slots.shape[0]):
        b = nbytes[i]
        for e in range(flow_ptr[slots[i]], flow_ptr[slots[i] + 1]):
            link = flow_links[e]
            entries[k] = e
            links[k] = link
            k += 1
            if not seen[link]:
                seen[link] = True
                touched[t] = link
                t += 1
            sums[link] += b * flow_weights[e]
    for j in range(t):
        link = touched[j]
        link_bytes[link] += sums[link]
        sums[link] = 0.0
        seen[link] = False
    return entries, links
