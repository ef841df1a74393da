"""Fabric: the SimPy side of a network model.

``Fabric.transfer(...)`` returns a SimPy event that fires when all the transfer's flows have
arrived. Timeline of one transfer: it waits its whole ``latency_s`` (the replay passes the step's
``NetworkFlows.latency_s``: its protocol latency plus, unless ``Step.path_latency`` is off, its
flows' largest path latency), then its flows join the network model and share bandwidth until
each has drained.

Batching: every change (flows joining, flows finishing) only marks the fabric dirty and, if not
already done, schedules one *settle* event at the current time with a priority below SimPy's
normal events. SimPy orders events by (time, priority, id), so the settle runs after every
other event of this timestamp: all flows that start or end together are re-rated once. The
settle advances the model to now, completes finished transfers, asks the model for the next
completion and arms a single timer for it (older timers are ignored by generation number).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy
from simpy.events import EventPriority

from topologies.checks import Unreachable

from ..network.base import FluidNetwork, entries_of

# Below simpy.events.NORMAL (1): runs after all ordinary events of the same timestamp.
_SETTLE_PRIORITY = EventPriority(2)

#: ``rebuild()``: fresh (links, weights, counts) of a transfer's flows, in the same order
Rebuild = Callable[[], tuple[np.ndarray, np.ndarray, np.ndarray]]


class Fabric:
    def __init__(self, env: simpy.Environment, network: FluidNetwork, *, link_groups: np.ndarray | None = None):
        """``link_groups`` (a group index per link, e.g. its tier): record each group's throughput whenever
        the rates change (``group_series``: (time_s, bytes/s per group) from that time on)."""
        self.env = env
        self.network = network
        self._recording = link_groups is not None
        if link_groups is not None:
            network.record_groups(link_groups)
        self.group_series: list[tuple[float, np.ndarray]] = []
        self._last_s = 0.0
        self._settle_pending = False
        self._timer_generation = 0
        self._flow_transfer: dict[int, int] = {}
        self._outstanding: dict[int, int] = {}
        self._done_events: dict[int, simpy.Event] = {}
        self._next_transfer = 0
        self._rebuild: dict[int, Rebuild] = {}  # transfer -> its rebuild callable
        self._flows_of: dict[int, list[int]] = {}  # transfer -> its current flow ids, in order

    # ---- public ------------------------------------------------------------------------------
    def transfer(
        self,
        links: np.ndarray,
        weights: np.ndarray,
        counts: np.ndarray,
        wire_bytes: np.ndarray,
        caps_bytes_per_s: np.ndarray,
        latency_s: float,
        *,
        fill_bytes: np.ndarray,
        rebuild: Rebuild | None,
        traffic_class: int = 0,
    ) -> simpy.Event:
        """Flows as in ``network.add`` (flow i: the ``counts[i]`` consecutive entries of ``links``; all in
        ``traffic_class``); ``rebuild()`` (None: none) returns fresh (links, weights, counts) for the same flows,
        in the same order: used to move them off a link that fails while they run (``fail_link``)."""
        done = self.env.event()
        if len(counts) == 0:

            def finish(_event: simpy.Event) -> None:
                done.succeed()

            self.env.timeout(latency_s).callbacks.append(finish)
            return done
        tid = self._next_transfer
        self._next_transfer += 1
        self._done_events[tid] = done
        if rebuild is not None:
            self._rebuild[tid] = rebuild
        payload = (links, weights, counts, wire_bytes, caps_bytes_per_s, fill_bytes, traffic_class)
        self.env.timeout(latency_s).callbacks.append(lambda _ev: self._start(tid, *payload))
        return done

    @property
    def last_s(self) -> float:
        """The time the network was last advanced to (the last flow's end, once the run is over)."""
        return self._last_s

    # ---- internals ---------------------------------------------------------------------------
    def _advance_to_now(self) -> None:
        now = self.env.now
        if now > self._last_s:
            finished = self.network.advance(now - self._last_s)
            if self._recording:
                self._record_groups(now - self._last_s)
            self._last_s = now
            self._finish(finished)

    def _start(
        self,
        tid: int,
        links: np.ndarray,
        weights: np.ndarray,
        counts: np.ndarray,
        wire_bytes: np.ndarray,
        caps: np.ndarray,
        fill: np.ndarray,
        traffic_class: int,
    ) -> None:
        self._advance_to_now()
        if tid in self._rebuild and not self.network.capacity_bytes_per_s[links].all():
            links, weights, counts = self._rebuild[tid]()  # a link failed while this transfer waited its latency
        ids = self.network.add(links, weights, counts, wire_bytes, caps, fill, traffic_class).tolist()
        self._outstanding[tid] = len(ids)
        self._flows_of[tid] = ids
        self._flow_transfer.update(dict.fromkeys(ids, tid))
        self._request_settle()

    # ---- link events -------------------------------------------------------------------------
    def scale_link(self, link: int, scale: float) -> None:
        """Link ``link`` runs at ``scale`` x its capacity from now on (degraded; 0 is ``fail_link``)."""
        self._advance_to_now()
        self.network.set_link_scale(link, scale)
        self._request_settle()

    def fail_link(self, link: int) -> None:
        """Link ``link`` fails now: running flows that cross it move to the paths their transfer's
        ``rebuild`` gives (the caller has rerouted by then); they keep the bytes left to send."""
        self._advance_to_now()
        self.network.set_link_scale(link, 0.0)
        for tid in [t for t in self._outstanding if t in self._flows_of]:
            ids = np.asarray(self._flows_of[tid], dtype=np.int64)
            slots = np.searchsorted(self.network.ids, ids)
            alive = self.network.active[slots]
            ptr, links = self.network.flow_ptr, self.network.flow_links
            crossing = [
                i
                for i, slot in enumerate(slots.tolist())
                if alive[i] and (links[ptr[slot] : ptr[slot + 1]] == link).any()
            ]
            if not crossing:
                continue
            if tid not in self._rebuild:
                raise Unreachable(f"fabric: link {link} failed under transfer {tid}, which cannot be rerouted")
            links, weights, counts = self._rebuild[tid]()
            moved = np.asarray(crossing, dtype=np.int64)
            entries = entries_of(np.concatenate(([0], np.cumsum(counts))), moved)
            new = self.network.repath(ids[moved], links[entries], weights[entries], counts[moved])
            for i, fid in zip(crossing, new.tolist()):
                del self._flow_transfer[int(ids[i])]
                self._flow_transfer[fid] = tid
                self._flows_of[tid][i] = fid
        self._request_settle()

    def _finish(self, finished: np.ndarray) -> None:
        flow_transfer, outstanding = self._flow_transfer, self._outstanding
        for fid in finished.tolist():
            tid = flow_transfer.pop(fid)
            left = outstanding[tid] - 1
            if left:
                outstanding[tid] = left
            else:
                del outstanding[tid]
                self._flows_of.pop(tid, None)
                self._rebuild.pop(tid, None)
                self._done_events.pop(tid).succeed()

    def _record_groups(self, dt_s: float) -> None:
        """Each link group's mean throughput over the ``dt_s`` from ``_last_s`` on (kept when it differs
        from the last recorded)."""
        rates = self.network.group_bytes / dt_s
        series = self.group_series
        if not series or not np.array_equal(series[-1][1], rates):
            series.append((self._last_s, rates))

    def _request_settle(self) -> None:
        if self._settle_pending:
            return
        self._settle_pending = True
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(self._settle)
        self.env.schedule(event, priority=_SETTLE_PRIORITY)

    def _settle(self, _event: simpy.Event) -> None:
        self._settle_pending = False
        self._advance_to_now()
        # flows that finish within round-off of now complete now (avoid zero-length timers)
        self._finish(self.network.advance(0.0))
        dt = self.network.next_completion_s()
        if np.isfinite(dt):
            self._timer_generation += 1
            generation = self._timer_generation
            self.env.timeout(max(dt, 0.0)).callbacks.append(lambda _ev: self._on_timer(generation))
        elif self._outstanding:
            stuck = next(iter(self._outstanding))
            raise RuntimeError(f"fabric: transfer {stuck} has flows with zero rate; the network cannot finish it")

    def _on_timer(self, generation: int) -> None:
        if generation == self._timer_generation:
            self._request_settle()
