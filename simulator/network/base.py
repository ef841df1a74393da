"""The network-model interface and the fluid bookkeeping both models share.

A network model holds the flows currently moving bytes. The engine (``engine/fabric.py``) uses
exactly three calls:

* ``add(paths, weights, wire_bytes, caps_bytes_per_s) -> ids``: flows start now;
* ``next_completion_s()``: time from now until the next flow finishes (``inf`` if none);
* ``advance(dt_s) -> ids``: move time forward by ``dt_s``, draining bytes at the current
  rates, and return the flows that finished.

Rates are piecewise constant between events; a model recomputes them (``_rerate``) lazily, once
per batch of changes, so a thousand flows starting at the same instant cost one re-rating.

A flow is a list of link ids with weights (a chain of ring edges is one flow whose links carry
weight = edge bytes / chain bytes) and a rate cap; it consumes ``weight x rate`` on each link.
Per-link bytes moved are accumulated for utilisation and conservation checks.
"""

from __future__ import annotations

import numpy as np


def entries_of(flow_ptr: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Positions in the CSR entry arrays of every (flow, link) entry of flows ``idx``, in order."""
    starts, ends = flow_ptr[idx], flow_ptr[idx + 1]
    counts = ends - starts
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return offsets + np.arange(int(counts.sum()), dtype=np.int64)


class FluidNetwork:
    """Flows, remaining bytes and rates as flat arrays; subclasses decide the rates.

    Flows are addressed by stable ids (returned by ``add``); storage slots are compacted when
    finished flows dominate, so a long simulation does not grow without bound.
    """

    name = "fluid"
    COMPACT_MIN_SLOTS = 4096

    def __init__(self, capacity_bytes_per_s: np.ndarray):
        self.capacity_bytes_per_s = np.asarray(capacity_bytes_per_s, dtype=np.float64)
        self.link_bytes = np.zeros(self.capacity_bytes_per_s.shape[0], dtype=np.float64)
        self.flow_ptr = np.zeros(1, dtype=np.int64)
        self.flow_links = np.zeros(0, dtype=np.int64)
        self.flow_weights = np.zeros(0, dtype=np.float64)
        self.remaining = np.zeros(0, dtype=np.float64)
        self.fill = np.zeros(0, dtype=np.float64)       # start-up bytes still to drain (not data)
        self.rate = np.zeros(0, dtype=np.float64)
        self.cap = np.zeros(0, dtype=np.float64)
        self.active = np.zeros(0, dtype=np.bool_)
        self.batch = np.zeros(0, dtype=np.int64)
        self.ids = np.zeros(0, dtype=np.int64)
        self._next_id = 0
        self._nbatches = 0
        self._dirty = False
        self.rerates = 0

    def add(self, paths: list[np.ndarray], weights: list[np.ndarray], wire_bytes: np.ndarray,
            caps_bytes_per_s: np.ndarray, fill_bytes: np.ndarray | None = None) -> np.ndarray:
        """Flows start now. ``fill_bytes`` (optional, per flow) is pipeline start-up: drained at the
        flow's rate before its data, but not data (not counted in ``link_bytes``)."""
        self._compact()
        n = len(paths)
        lengths = np.fromiter((p.shape[0] for p in paths), dtype=np.int64, count=n)
        self.flow_ptr = np.concatenate([self.flow_ptr, self.flow_ptr[-1] + np.cumsum(lengths)])
        if n:
            self.flow_links = np.concatenate([self.flow_links, *paths]).astype(np.int64, copy=False)
            self.flow_weights = np.concatenate([self.flow_weights, *weights]).astype(np.float64, copy=False)
        fill = np.zeros(n) if fill_bytes is None else np.asarray(fill_bytes, dtype=np.float64)
        self.remaining = np.concatenate([self.remaining, np.asarray(wire_bytes, dtype=np.float64) + fill])
        self.fill = np.concatenate([self.fill, fill])
        self.rate = np.concatenate([self.rate, np.zeros(n)])
        self.cap = np.concatenate([self.cap, np.asarray(caps_bytes_per_s, dtype=np.float64)])
        self.active = np.concatenate([self.active, np.ones(n, dtype=np.bool_)])
        self.batch = np.concatenate([self.batch, np.full(n, self._nbatches, dtype=np.int64)])
        new_ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self.ids = np.concatenate([self.ids, new_ids])
        self._next_id += n
        self._nbatches += 1
        self._dirty = True
        return new_ids

    def next_completion_s(self) -> float:
        if self._dirty:
            self._rerate()
            self.rerates += 1
            self._dirty = False
        moving = self.active & (self.rate > 0)
        if not moving.any():
            return np.inf
        return float(np.min(self.remaining[moving] / self.rate[moving]))

    def advance(self, dt_s: float) -> np.ndarray:
        """Drain ``dt_s`` seconds at current rates; return the ids of flows that finished."""
        if self._dirty:
            self.next_completion_s()
        idx = np.flatnonzero(self.active)
        if idx.size == 0:
            return idx
        if dt_s > 0:
            moved = np.minimum(self.rate[idx] * dt_s, self.remaining[idx])
            filled = np.minimum(moved, self.fill[idx])          # start-up first: no data on the links
            self.fill[idx] -= filled
            entries = entries_of(self.flow_ptr, idx)
            counts = self.flow_ptr[idx + 1] - self.flow_ptr[idx]
            self.link_bytes += np.bincount(self.flow_links[entries],
                                           weights=np.repeat(moved - filled, counts) * self.flow_weights[entries],
                                           minlength=self.link_bytes.shape[0])
            self.remaining[idx] -= moved
        # finished: at most a nanosecond of transfer left (float round-off on the drain)
        done = idx[self.remaining[idx] <= self.rate[idx] * 1e-9 + 1e-9]
        if done.size:
            self.remaining[done] = 0.0
            self.active[done] = False
            self.rate[done] = 0.0
            self._dirty = True
        return self.ids[done]

    def _rerate(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _compact(self) -> None:
        """Drop finished flows' slots once they are most of the storage."""
        if self.active.shape[0] < self.COMPACT_MIN_SLOTS or self.active.sum() * 2 > self.active.shape[0]:
            return
        keep = np.flatnonzero(self.active)
        entries = entries_of(self.flow_ptr, keep)
        counts = self.flow_ptr[keep + 1] - self.flow_ptr[keep]
        self.flow_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.flow_links = self.flow_links[entries]
        self.flow_weights = self.flow_weights[entries]
        for name in ("remaining", "fill", "rate", "cap", "active", "batch", "ids"):
            setattr(self, name, getattr(self, name)[keep])
