"""Which flows a change reaches: the active (flow, link) entries of every link as linked lists, kept as flows
start and end, and a breadth-first walk from the changed links over the flows they carry.

Max-min rates (``kernels.maxmin``) of one connected component of the flow-link graph (flows joined by the links
they share) depend on its flows and links alone, so when flows start or end only the components they touch
need new rates. Finding them needs each link's active flows: ``link_head[l]`` is the first active entry on link
l and ``entry_next`` / ``entry_prev`` chain the others (-1 ends a chain), so inserting a started flow's entries
and unlinking a finished flow's cost what they hold, not the network's size; ``entry_flow[j]`` is entry j's
flow slot. The walk marks links and flows with a stamp (``link_stamp``, ``flow_stamp``: equal to ``stamp`` once
seen) instead of clearing arrays, and collects the reached flows into ``out``: its cost is the component's
size. ``component`` then packs the reached flows into CSR arrays of their own (flows in slot order, links
renumbered in id order), the problem the max-min kernel rates them from.

Worked number: flows 0 (links 0, 1), 1 (link 1) and 2 (link 2). A change on link 0 reaches flow 0, then over
link 1 flow 1; flow 2 shares no link with them and keeps its rate.

>>> import numpy as np
>>> ptr, links = np.array([0, 2, 3, 4]), np.array([0, 1, 1, 2])
>>> head, nxt, prv = np.full(3, -1), np.full(4, -1), np.full(4, -1)
>>> link_insert(head, nxt, prv, links, 0, 4)
>>> out, queue, seen_l, seen_f = (np.zeros(3, np.int64) for _ in range(4))
>>> n, k = reach(head, nxt, np.array([0, 0, 1, 2]), ptr, links, np.array([0]), seen_l, seen_f, 1, queue, out, 9)
>>> sorted(out[:n].tolist()), sorted(queue[:k].tolist())
([0, 1], [0, 1])
>>> flows, used, sub_ptr, sub_links, _ = component(ptr, links, np.ones(4), out[:n], queue[:k], np.zeros(3, np.int64))
>>> flows.tolist(), used.tolist(), sub_ptr.tolist(), sub_links.tolist()
([0, 1], [0, 1], [0, 2, 3], [0, 1, 1])
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["link_insert", "link_remove", "link_rebuild", "reach", "component"]


@njit(cache=True)
def link_insert(
    link_head: np.ndarray, entry_next: np.ndarray, entry_prev: np.ndarray, flow_links: np.ndarray, start: int, stop: int
) -> None:
    """Chain entries ``start`` .. ``stop - 1`` onto their links' lists (at the front)."""
    for j in range(start, stop):
        link = flow_links[j]
        first = link_head[link]
        entry_next[j] = first
        entry_prev[j] = -1
        if first >= 0:
            entry_prev[first] = j
        link_head[link] = j


@njit(cache=True)
def link_remove(
    link_head: np.ndarray, entry_next: np.ndarray, entry_prev: np.ndarray, flow_links: np.ndarray, entries: np.ndarray
) -> None:
    """Unlink ``entries`` (of flows that end) from their links' lists."""
    for j in entries:
        before, after = entry_prev[j], entry_next[j]
        if before >= 0:
            entry_next[before] = after
        else:
            link_head[flow_links[j]] = after
        if after >= 0:
            entry_prev[after] = before
        entry_next[j] = -1
        entry_prev[j] = -1


@njit(cache=True)
def link_rebuild(
    link_head: np.ndarray,
    entry_next: np.ndarray,
    entry_prev: np.ndarray,
    entry_flow: np.ndarray,
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    active: np.ndarray,
) -> None:
    """Every list from scratch: the active flows' entries (after the storage is compacted)."""
    link_head[:] = -1
    for f in range(active.shape[0]):
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            entry_flow[j] = f
        if active[f]:
            link_insert(link_head, entry_next, entry_prev, flow_links, flow_ptr[f], flow_ptr[f + 1])


@njit(cache=True)
def reach(
    link_head: np.ndarray,
    entry_next: np.ndarray,
    entry_flow: np.ndarray,
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    seeds: np.ndarray,
    link_stamp: np.ndarray,
    flow_stamp: np.ndarray,
    stamp: int,
    queue: np.ndarray,
    out: np.ndarray,
    limit: int,
) -> tuple[int, int]:
    """The active flows connected to a link of ``seeds`` through shared links, written to ``out[:n]`` (in the
    order reached), and their links (with the seeds), written to ``queue[:k]``; returns (n, k). ``queue`` holds
    at least as many entries as there are links. Once more than ``limit`` (flow, link) entries are walked it
    stops and returns (-1, -1): the caller re-rates every flow instead, which costs little more."""
    head = tail = 0
    for link in seeds:
        if link_stamp[link] != stamp:
            link_stamp[link] = stamp
            queue[tail] = link
            tail += 1
    n = 0
    walked = 0
    while head < tail:
        link = queue[head]
        head += 1
        j = link_head[link]
        while j >= 0:
            f = entry_flow[j]
            if flow_stamp[f] != stamp:
                flow_stamp[f] = stamp
                out[n] = f
                n += 1
                walked += flow_ptr[f + 1] - flow_ptr[f]
                if walked > limit:
                    return -1, -1
                for k in range(flow_ptr[f], flow_ptr[f + 1]):
                    other = flow_links[k]
                    if link_stamp[other] != stamp:
                        link_stamp[other] = stamp
                        queue[tail] = other
                        tail += 1
            j = entry_next[j]
    return n, tail


@njit(cache=True)
def component(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    reached: np.ndarray,
    reached_links: np.ndarray,
    link_local: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The flows ``reached`` (a walk's ``out[:n]``) on their own: (their slots in increasing order, their links
    ``reached_links`` in increasing id order, and the CSR offsets, links and weights of those flows in that order,
    each link renumbered as its index among the reached links); ``link_local`` (one entry per link) is scratch
    space for the renumbering."""
    flows = np.sort(reached)
    links = np.sort(reached_links)
    for i in range(links.shape[0]):
        link_local[links[i]] = i
    n = flows.shape[0]
    sub_ptr = np.empty(n + 1, dtype=np.int64)
    sub_ptr[0] = 0
    for i in range(n):
        f = flows[i]
        sub_ptr[i + 1] = sub_ptr[i] + flow_ptr[f + 1] - flow_ptr[f]
    sub_links = np.empty(sub_ptr[n], dtype=np.int64)
    sub_weights = np.empty(sub_ptr[n], dtype=np.float64)
    for i in range(n):
        start = flow_ptr[flows[i]]
        at = sub_ptr[i]
        for j in range(sub_ptr[i + 1] - at):
            sub_links[at + j] = link_local[flow_links[start + j]]
            sub_weights[at + j] = flow_weights[start + j]
    return flows, links, sub_ptr, sub_links, sub_weights
