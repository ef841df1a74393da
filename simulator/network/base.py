"""The network-model interface and the fluid bookkeeping both models share.

A network model holds the flows currently moving bytes. The engine (``engine/fabric.py``) uses
exactly three calls:

* ``add(links, weights, counts, wire_bytes, caps_bytes_per_s) -> ids``: flows start now (flow i
  crosses the ``counts[i]`` consecutive entries of ``links``, with ``weights``);
* ``next_completion_s()``: time from now until the next flow finishes (``inf`` if none);
* ``advance(dt_s) -> ids``: move time forward by ``dt_s``, draining bytes at the current
  rates, and return the flows that finished.

Rates are piecewise constant between events; a model recomputes them (``_rerate``) lazily, once
per batch of changes, so a thousand flows starting at the same instant cost one re-rating.

A flow is a list of link ids with weights (a chain of ring edges is one flow whose links carry
weight = edge bytes / chain bytes) and a rate cap; it consumes ``weight x rate`` on each link.
Draining the flows between changes and finding the soonest end are one pass each over the flow slots
(``kernels.drain``: the same IEEE operations as the whole-array numpy expressions, without their temporaries).
Per-link bytes moved (``link_bytes``, for utilisation and conservation checks) are counted when a flow
ends: its data bytes (or, moved to new paths, those it has sent) times its weights, once per flow rather
than at every event, which would cost every active flow's links per event.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from ..kernels import count_link_bytes, drain, soonest_end
from ..kernels import entries_of as entries_of  # re-exported: the engine may not import the kernels


class _SlotView(Protocol):
    """How a ``_slot_view`` reads and writes on a network instance (the property's signature)."""

    def __get__(self, instance: FluidNetwork, owner: type | None = None, /) -> np.ndarray: ...

    def __set__(self, instance: FluidNetwork, value: npt.ArrayLike, /) -> None: ...


def _slot_view(name: str) -> _SlotView:
    """A per-flow array: the used part of a growable buffer; assigning copies into it."""

    def get(self: FluidNetwork) -> np.ndarray:
        return self._slots[name][: self._n]

    def put(self: FluidNetwork, value: npt.ArrayLike) -> None:
        self._slots[name][: self._n] = value

    return property(get, put)


class FluidNetwork:
    """Flows, remaining bytes and rates as flat arrays; subclasses decide the rates.

    Flows are addressed by stable ids (returned by ``add``); storage slots are compacted when
    finished flows dominate, so a long simulation does not grow without bound. Per-flow arrays
    (``remaining``, ``fill``, ``rate``, ``cap``, ``active``, ``batch``, ``ids``, ``data``) and the CSR entry
    arrays (``flow_ptr``, ``flow_links``, ``flow_weights``) are views of buffers that grow by
    doubling, so adding flows costs what is added, not what is stored. ``link_bytes`` holds the bytes of
    the flows that have ended (or moved): complete once every flow has finished.
    """

    name = "fluid"
    context_free = False  # True: a batch's rates ignore every other flow (see ``analytical``)
    COMPACT_MIN_SLOTS = 4096
    _SLOT_DTYPES = {
        "remaining": np.float64,
        "fill": np.float64,
        "rate": np.float64,
        "cap": np.float64,
        "active": np.bool_,
        "batch": np.int64,
        "ids": np.int64,
        "data": np.float64,
        "tclass": np.int64,
    }

    remaining = _slot_view("remaining")
    fill = _slot_view("fill")  # start-up bytes still to drain (not data)
    rate = _slot_view("rate")
    cap = _slot_view("cap")
    active = _slot_view("active")
    batch = _slot_view("batch")
    ids = _slot_view("ids")
    data = _slot_view("data")  # the flow's data bytes (wire bytes, start-up not included)
    tclass = _slot_view("tclass")  # the flow's traffic class (an index into the policy's classes; 0 without one)

    def __init__(self, capacity_bytes_per_s: np.ndarray):
        self._base_capacity = np.asarray(capacity_bytes_per_s, dtype=np.float64)
        self.capacity_bytes_per_s = self._base_capacity.copy()  # changes with set_link_scale
        self.link_bytes = np.zeros(self.capacity_bytes_per_s.shape[0], dtype=np.float64)
        self._link_sums = np.zeros_like(self.link_bytes)  # count_link_bytes' scratch, zeros between calls
        self._link_seen = np.zeros(self.link_bytes.shape[0], dtype=np.bool_)
        self._done = np.empty(16, dtype=np.int64)  # advance's buffer of the slots that finish
        self._nothing = np.zeros(0)  # advance's data_moved when no group is recorded (drain writes none)
        self._n = 0  # flow slots in use
        self._m = 0  # (flow, link) entries in use
        self._slots: dict[str, np.ndarray] = {
            name: np.zeros(16, dtype=dtype) for name, dtype in self._SLOT_DTYPES.items()
        }
        self._ptr = np.zeros(17, dtype=np.int64)
        self._links = np.zeros(64, dtype=np.int64)
        self._weights = np.zeros(64, dtype=np.float64)
        self._next_id = 0
        self._nbatches = 0
        self._dirty = False
        self.rerates = 0
        self._group_of_link: np.ndarray | None = None  # see record_groups
        self.group_bytes: np.ndarray = np.zeros(0)

    @property
    def flow_ptr(self) -> np.ndarray:
        return self._ptr[: self._n + 1]

    @property
    def flow_links(self) -> np.ndarray:
        return self._links[: self._m]

    @property
    def flow_weights(self) -> np.ndarray:
        return self._weights[: self._m]

    def _reserve(self, nslots: int, nentries: int) -> None:
        """Grow the buffers (doubling) to hold ``nslots`` flows and ``nentries`` entries."""
        size = self._slots["rate"].shape[0]
        if nslots > size:
            new = max(nslots, 2 * size)
            for name, buf in self._slots.items():
                grown = np.zeros(new, dtype=buf.dtype)
                grown[: self._n] = buf[: self._n]
                self._slots[name] = grown
            ptr = np.zeros(new + 1, dtype=np.int64)
            ptr[: self._n + 1] = self._ptr[: self._n + 1]
            self._ptr = ptr
        if nentries > self._links.shape[0]:
            new = max(nentries, 2 * self._links.shape[0])
            links, weights = np.zeros(new, dtype=np.int64), np.zeros(new, dtype=np.float64)
            links[: self._m], weights[: self._m] = self._links[: self._m], self._weights[: self._m]
            self._links, self._weights = links, weights

    def add(
        self,
        links: np.ndarray,
        weights: np.ndarray,
        counts: np.ndarray,
        wire_bytes: np.ndarray,
        caps_bytes_per_s: np.ndarray,
        fill_bytes: np.ndarray | None = None,
        traffic_class: int | np.ndarray = 0,
    ) -> np.ndarray:
        """Flows start now: flow i crosses the ``counts[i]`` consecutive entries of ``links`` with the
        ``weights`` of those entries. ``fill_bytes`` (optional, per flow) is pipeline start-up: drained at
        the flow's rate before its data, but not data (not counted in ``link_bytes``). ``traffic_class``: the
        flows' class (one for all, or one per flow), read by a model given classes (``set_traffic_classes``)."""
        # (a few thousand flows at most per call, a call per transfer: array methods and slices, which cost
        # less per call than numpy's module functions)
        self._compact()
        counts = np.asarray(counts)
        n = counts.shape[0]
        total = len(links)
        n0, m0 = self._n, self._m
        self._reserve(n0 + n, m0 + total)
        ends = self._ptr[n0 + 1 : n0 + n + 1]
        counts.cumsum(out=ends)
        ends += m0
        self._links[m0 : m0 + total] = links
        self._weights[m0 : m0 + total] = weights
        new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        slots = self._slots
        slots["data"][n0 : n0 + n] = wire_bytes
        remaining, fill = slots["remaining"][n0 : n0 + n], slots["fill"][n0 : n0 + n]
        if fill_bytes is None:
            remaining[:] = wire_bytes
            fill[:] = 0.0
        else:
            fill[:] = fill_bytes
            np.add(np.asarray(wire_bytes, dtype=np.float64), fill, out=remaining)
        slots["rate"][n0 : n0 + n] = 0.0
        slots["cap"][n0 : n0 + n] = caps_bytes_per_s
        slots["active"][n0 : n0 + n] = True
        slots["batch"][n0 : n0 + n] = self._nbatches
        slots["ids"][n0 : n0 + n] = new_ids
        slots["tclass"][n0 : n0 + n] = traffic_class
        self._n, self._m = n0 + n, m0 + total
        self._next_id += n
        self._nbatches += 1
        self._dirty = True
        self._added(n0, counts, m0, total)
        return new_ids

    def set_link_scale(self, link: int, scale: float) -> None:
        """From now on link ``link`` carries ``scale`` x its rated capacity (0: failed). Flows are
        re-rated at the next change (the caller re-paths flows off a failed link first)."""
        self.capacity_bytes_per_s[link] = self._base_capacity[link] * scale
        self._dirty = True
        self._rescaled(link)

    def repath(self, ids: np.ndarray, links: np.ndarray, weights: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Move active flows ``ids`` onto new paths (as in ``add``), keeping their remaining bytes, start-up,
        cap and class; returns their new ids (the old ones end without completing)."""
        slots = np.searchsorted(self.ids, ids)  # ids grow with slot order (compaction keeps it)
        present = (slots < self.ids.shape[0]).all() and (self.ids[slots] == ids).all()
        if not (present and self.active[slots].all() and np.unique(slots).shape[0] == slots.shape[0]):
            raise ValueError(f"repath: ids {ids.tolist()} are not distinct ids of running flows")
        remaining, fill, cap = self.remaining[slots].copy(), self.fill[slots].copy(), self.cap[slots].copy()
        tclass = self.tclass[slots].copy()
        self._count_bytes(slots, self.data[slots] - (remaining - fill))  # what the old paths carried
        self.active[slots] = False
        self.rate[slots] = 0.0
        return self.add(links, weights, counts, remaining - fill, cap, fill, tclass)

    def _link_shares(self, slots: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(entries, links, bytes on each) when the flow in slot ``slots[i]`` moves ``nbytes[i]``: its bytes
        times each entry's weight."""
        ptr = self.flow_ptr
        entries = entries_of(ptr, slots)
        values = np.repeat(nbytes, ptr[slots + 1] - ptr[slots]) * self.flow_weights[entries]
        return entries, self.flow_links[entries], values

    def _count_bytes(self, slots: np.ndarray, nbytes: np.ndarray) -> None:
        """Add ``nbytes[i]`` x its weights to the links of the flow in slot ``slots[i]``, which ends: each link's
        sum over these flows, then added to its bytes (``kernels.count_link_bytes``)."""
        entries, links = count_link_bytes(
            self.flow_ptr,
            self.flow_links,
            self.flow_weights,
            np.asarray(slots, dtype=np.int64),
            np.asarray(nbytes, dtype=np.float64),
            self.link_bytes,
            self._link_sums,
            self._link_seen,
        )
        self._ended(entries, links)

    def next_completion_s(self) -> float:
        if self._dirty:
            self._rerate()
            self.rerates += 1
            self._dirty = False
        return float(soonest_end(self.rate, self.remaining, self.active))

    def advance(self, dt_s: float) -> np.ndarray:
        """Drain ``dt_s`` seconds at current rates; return the ids of flows that finished."""
        if self._dirty:
            self.next_completion_s()
        rate, remaining, active = self.rate, self.remaining, self.active
        n = active.shape[0]
        recording = self._group_of_link is not None
        if recording:
            self.group_bytes = np.zeros_like(self.group_bytes)
        idx = np.flatnonzero(active) if recording and dt_s > 0 else None  # the flows whose moves are recorded
        data_moved = np.zeros(n) if idx is not None else self._nothing
        # start-up first (no data on the links); finished: at most a nanosecond of transfer left (float round-off
        # on the drain); the slots that finish written to a buffer kept for it (a slot per flow)
        if self._done.shape[0] < n:
            self._done = np.empty(self._slots["rate"].shape[0], dtype=np.int64)
        done = self._done[: drain(rate, remaining, self.fill, active, dt_s, self._done, data_moved)]
        if idx is not None and idx.size:
            self._moved_by_group(idx, data_moved[idx])
        if done.size:
            self._count_bytes(done, self.data[done])
            remaining[done] = 0.0
            active[done] = False
            rate[done] = 0.0
            self._dirty = True
        return self.ids[done]

    def record_groups(self, group_of_link: np.ndarray) -> None:
        """From now on, each ``advance`` leaves in ``group_bytes`` the data bytes the links of each group
        (``group_of_link[l]`` in 0..max) carried during it (start-up fill excluded, as in ``link_bytes``)."""
        self._group_of_link = group_of_link
        self.group_bytes = np.zeros(int(group_of_link.max()) + 1 if group_of_link.size else 0)

    def _moved_by_group(self, idx: np.ndarray, data: np.ndarray) -> None:
        """``group_bytes`` of the data bytes ``data[i]`` that flow ``idx[i]`` moved in one advance."""
        assert self._group_of_link is not None  # record_groups was called
        _, links, values = self._link_shares(idx, data)
        groups = self.group_bytes.shape[0]
        self.group_bytes = np.bincount(self._group_of_link[links], weights=values, minlength=groups)

    def set_traffic_classes(self, levels: np.ndarray, weights: np.ndarray) -> None:
        """From now on flows share links by their classes (``simulator.traffic``): class i (a flow's ``tclass``)
        has strict level ``levels[i]`` and weight ``weights[i]``. Only the ``flow`` model schedules classes."""
        raise ValueError(f"traffic classes: the {self.name!r} network model does not schedule them; expected 'flow'")

    def _rerate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # what a model that re-rates only what a change reaches (``flow``) keeps track of; nothing by default
    def _added(self, n0: int, counts: np.ndarray, m0: int, total: int) -> None:
        """Flows in slots ``n0`` .. ``n0 + len(counts) - 1`` (entries ``m0`` .. ``m0 + total - 1``, ``counts[i]``
        of them flow ``n0 + i``'s) have started."""

    def _ended(self, entries: np.ndarray, links: np.ndarray) -> None:
        """The flows owning ``entries`` (on ``links``) have ended or moved to new paths."""

    def _rescaled(self, link: int) -> None:
        """Link ``link``'s capacity has changed."""

    def _compacted(self) -> None:
        """Slots and entries have moved (``_compact``)."""

    def _compact(self) -> None:
        """Drop finished flows' slots once they are most of the storage."""
        if self._n < self.COMPACT_MIN_SLOTS or self.active.sum() * 2 > self._n:
            return
        keep = np.flatnonzero(self.active)
        entries = entries_of(self.flow_ptr, keep)
        counts = self.flow_ptr[keep + 1] - self.flow_ptr[keep]
        k, m = keep.shape[0], entries.shape[0]
        self._ptr[1 : k + 1] = np.cumsum(counts)
        self._links[:m] = self._links[entries]
        self._weights[:m] = self._weights[entries]
        for buf in self._slots.values():
            buf[:k] = buf[keep]
        self._n, self._m = k, m
        self._compacted()
