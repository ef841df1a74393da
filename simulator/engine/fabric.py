"""Fabric: the SimPy side of a network model.

``Fabric.transfer(...)`` returns a SimPy event that fires when all the transfer's flows have
arrived. Timeline of one transfer: it waits its latency (path latency of its flows; the step's
protocol latency is paid by the caller), then its flows join the network model and share
bandwidth until each has drained.

Batching: every change (flows joining, flows finishing) only marks the fabric dirty and, if not
already done, schedules one *settle* event at the current time with a priority below SimPy's
normal events. SimPy orders events by (time, priority, id), so the settle runs after every
other event of this timestamp: all flows that start or end together are re-rated once. The
settle advances the model to now, completes finished transfers, asks the model for the next
completion and arms a single timer for it (older timers are ignored by generation number).
"""

from __future__ import annotations

import numpy as np
import simpy

# Below simpy.events.NORMAL (1): runs after all ordinary events of the same timestamp.
_SETTLE_PRIORITY = 2


class Fabric:
    def __init__(self, env: simpy.Environment, network):
        self.env = env
        self.network = network
        self._last_s = 0.0
        self._settle_pending = False
        self._timer_generation = 0
        self._flow_transfer: dict[int, int] = {}
        self._outstanding: dict[int, int] = {}
        self._done_events: dict[int, simpy.Event] = {}
        self._next_transfer = 0

    # ---- public ------------------------------------------------------------------------------
    def transfer(self, paths: list[np.ndarray], weights: list[np.ndarray], wire_bytes: np.ndarray,
                 caps_bytes_per_s: np.ndarray, latency_s: float, fill_bytes: np.ndarray | None = None) -> simpy.Event:
        done = self.env.event()
        keep = np.flatnonzero(np.asarray(wire_bytes) > 0)
        if keep.size == 0:
            self.env.timeout(latency_s).callbacks.append(lambda _ev: done.succeed())
            return done
        tid = self._next_transfer
        self._next_transfer += 1
        self._done_events[tid] = done
        fill = np.zeros(len(paths)) if fill_bytes is None else np.asarray(fill_bytes, dtype=np.float64)
        payload = ([paths[i] for i in keep], [weights[i] for i in keep], np.asarray(wire_bytes)[keep],
                   np.asarray(caps_bytes_per_s)[keep], fill[keep])
        self.env.timeout(latency_s).callbacks.append(lambda _ev: self._start(tid, *payload))
        return done

    # ---- internals ---------------------------------------------------------------------------
    def _advance_to_now(self) -> None:
        now = self.env.now
        if now > self._last_s:
            finished = self.network.advance(now - self._last_s)
            self._last_s = now
            self._finish(finished)

    def _start(self, tid: int, paths, weights, wire_bytes, caps, fill) -> None:
        self._advance_to_now()
        ids = self.network.add(paths, weights, wire_bytes, caps, fill)
        self._outstanding[tid] = len(ids)
        for fid in ids.tolist():
            self._flow_transfer[fid] = tid
        self._request_settle()

    def _finish(self, finished: np.ndarray) -> None:
        for fid in finished.tolist():
            tid = self._flow_transfer.pop(fid)
            self._outstanding[tid] -= 1
            if self._outstanding[tid] == 0:
                del self._outstanding[tid]
                self._done_events.pop(tid).succeed()

    def _request_settle(self) -> None:
        if self._settle_pending:
            return
        self._settle_pending = True
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(self._settle)
        self.env.schedule(event, priority=_SETTLE_PRIORITY)

    def _settle(self, _event) -> None:
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
