"""The ``flow`` model: max-min fair sharing over every link, re-rated at every change.

Rates: weighted max-min fairness (progressive filling) over all active flows and all links,
computed by the numba kernel ``simulator.kernels.maxmin_rates`` whenever flows start or finish
(once per batch of simultaneous changes), for the flows those changes reach through shared links
(``kernels.components``): the rest keep their rates, which a full re-rating would give again. A walk that
reaches more than half of the active flows' (flow, link) entries stops there and every flow is re-rated, which
then costs at most twice rating what it reached; the walk is tried again at the next change, as a network
that is one component now (several buckets starting at one instant) may split up at the next.
Between changes rates are constant, so a flow's completion time is exact for the fluid model.

Captures: bandwidth sharing on every link (NVLink, PCIe, NIC, fabric), ECMP collisions (two
flows hashed onto one spine link share it), incast at a receiver's downlink, protocol caps.
Ignores: packets, queueing delay, congestion-control dynamics and lossless back-pressure (those
are refinements layered on these rates), and the start-up transient of each flow.

Traffic classes (``set_traffic_classes``, ``simulator.traffic``): rates come from ``kernels.class_rates``, strict
priority between levels, weighted shares between the classes of a level, max-min within a class; the same
numbers as max-min when the flows rated are in one class. A component is still rated alone: classes share links
only where their flows do.

Worked number: two 1 GB flows sharing one 50 GB/s NIC link get 25 GB/s each and both finish
at 40 ms; if one is only 0.5 GB it finishes at 20 ms and the other then speeds up to 50 GB/s,
finishing at 20 ms + 0.5 GB / 50 GB/s = 30 ms.
"""

from __future__ import annotations

import numpy as np

from ..kernels import class_rates, component, link_insert, link_rebuild, link_remove, maxmin_rates, reach
from .base import FluidNetwork


class FlowNetwork(FluidNetwork):
    name = "flow"
    incremental = True  # re-rate only the flows a change reaches (False: every flow, every time)
    WALK_FLOOR = 4096  # a walk stops past max(half the active flows' entries, this many): most of the network

    def __init__(self, capacity_bytes_per_s: np.ndarray):
        super().__init__(capacity_bytes_per_s)
        nlinks = self.capacity_bytes_per_s.shape[0]
        # each link's active entries as a linked list (kernels.components), and the walk's scratch arrays
        self._link_head = np.full(nlinks, -1, dtype=np.int64)
        self._entry_next = np.full(64, -1, dtype=np.int64)
        self._entry_prev = np.full(64, -1, dtype=np.int64)
        self._entry_flow = np.zeros(64, dtype=np.int64)
        self._link_stamp = np.zeros(nlinks, dtype=np.int64)
        self._flow_stamp = np.zeros(16, dtype=np.int64)
        self._queue = np.empty(nlinks, dtype=np.int64)
        self._link_local = np.zeros(nlinks, dtype=np.int64)  # a reached link's index among the reached ones
        self._reached = np.empty(16, dtype=np.int64)
        self._stamp = 0
        self._active_entries = 0  # (flow, link) entries of the active flows
        self._touched: list[np.ndarray] = []  # links changed since the last re-rating
        self._classes: tuple[np.ndarray, np.ndarray] | None = None  # (levels, weights) per class: set_traffic_classes

    def set_traffic_classes(self, levels: np.ndarray, weights: np.ndarray) -> None:
        if type(self) is not FlowNetwork:  # a refinement rates flows its own way, ignoring classes
            super().set_traffic_classes(levels, weights)
        self._classes = (np.asarray(levels, dtype=np.int64), np.asarray(weights, dtype=np.float64))
        self._dirty = True

    def _rates(
        self, ptr: np.ndarray, links: np.ndarray, weights: np.ndarray, flows: np.ndarray, capacity: np.ndarray,
        cap: np.ndarray, tclass: np.ndarray | None,
    ) -> np.ndarray:  # fmt: skip
        """Max-min rates, or with traffic classes ``class_rates`` (the same numbers when one class is present);
        ``tclass`` is read only with classes (None without: no copy on a re-rating's path)."""
        if self._classes is None:
            return maxmin_rates(ptr, links, weights, flows, capacity, cap)
        assert tclass is not None
        return class_rates(ptr, links, weights, flows, capacity, cap, tclass, *self._classes)

    def _added(self, n0: int, counts: np.ndarray, m0: int, total: int) -> None:
        if not self.incremental:
            return
        n = counts.shape[0]
        if self._entry_next.shape[0] < self._links.shape[0]:  # the entry buffers grew: so do the lists'
            size = self._links.shape[0]
            for name in ("_entry_next", "_entry_prev", "_entry_flow"):
                grown = np.full(size, -1, dtype=np.int64)
                grown[: self._m - total] = getattr(self, name)[: self._m - total]
                setattr(self, name, grown)
        if self._flow_stamp.shape[0] < self._slots["rate"].shape[0]:
            size = self._slots["rate"].shape[0]
            stamps = np.zeros(size, dtype=np.int64)
            stamps[: self._flow_stamp.shape[0]] = self._flow_stamp
            self._flow_stamp, self._reached = stamps, np.empty(size, dtype=np.int64)
        self._entry_flow[m0 : m0 + total] = np.arange(n0, n0 + n).repeat(counts)
        if np.count_nonzero(counts) < n:  # a flow on no link shares nothing and no walk reaches it: its rate is its cap
            rate, cap = self._slots["rate"][n0 : n0 + n], self._slots["cap"][n0 : n0 + n]
            rate[counts == 0] = cap[counts == 0]
        link_insert(self._link_head, self._entry_next, self._entry_prev, self._links, m0, m0 + total)
        self._active_entries += total
        self._touched.append(self._links[m0 : m0 + total].copy())

    def _ended(self, entries: np.ndarray, links: np.ndarray) -> None:
        if self.incremental:
            link_remove(self._link_head, self._entry_next, self._entry_prev, self._links, entries)
            self._active_entries -= entries.shape[0]
            self._touched.append(links)

    def _rescaled(self, link: int) -> None:
        if self.incremental:
            self._touched.append(np.array([link], dtype=np.int64))

    def _compacted(self) -> None:
        if self.incremental:
            self._active_entries = self._m  # compacted: only the active flows' entries are kept
            link_rebuild(
                self._link_head,
                self._entry_next,
                self._entry_prev,
                self._entry_flow,
                self.flow_ptr,
                self.flow_links,
                self.active,
            )

    def _rate_in_place(self, flows: np.ndarray) -> None:
        """New rates for the active flows masked by ``flows`` (the others keep theirs; inactive flows have 0)."""
        rates = self._rates(
            self.flow_ptr, self.flow_links, self.flow_weights, flows, self.capacity_bytes_per_s, self.cap, self.tclass
        )
        self.rate[flows] = rates[flows]

    def _rerate(self) -> None:
        touched, self._touched = self._touched, []
        if not (self.incremental and self.rerates and touched):
            self._rate_in_place(self.active)
            return
        # only the flows connected to a changed link through links they share can change rate: progressive
        # filling rates each connected component from its own flows and links, so the others keep theirs.
        # The reached component is rated alone, its flows in slot order and its links renumbered in id order,
        # so that every sum and every tie runs as in a re-rating of all flows.
        self._stamp += 1
        ptr = self.flow_ptr
        n, k = reach(
            self._link_head,
            self._entry_next,
            self._entry_flow,
            ptr,
            self.flow_links,
            np.concatenate(touched),
            self._link_stamp,
            self._flow_stamp,
            self._stamp,
            self._queue,
            self._reached,
            max(self._active_entries // 2, self.WALK_FLOOR),  # past that, every flow is re-rated
        )
        if n < 0:
            self._rate_in_place(self.active)
            return
        if n == 0:
            return
        if 8 * k > self._link_head.shape[0]:  # much of the network: rate it in place, the reached flows masked
            reached = np.zeros(self.active.shape[0], dtype=np.bool_)
            reached[self._reached[:n]] = True
            self._rate_in_place(reached)
            return
        flows, links, sub_ptr, sub_links, sub_weights = component(
            ptr, self.flow_links, self.flow_weights, self._reached[:n], self._queue[:k], self._link_local
        )
        self.rate[flows] = self._rates(
            sub_ptr,
            sub_links,
            sub_weights,
            np.ones(n, dtype=np.bool_),
            self.capacity_bytes_per_s[links],
            self.cap[flows],
            None if self._classes is None else self.tclass[flows],
        )
