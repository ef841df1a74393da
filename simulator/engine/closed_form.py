"""Replay without events, for a context-free network model (``network.context_free``).

Under the ``analytical`` model a batch of flows is rated once, at its start, from its own flows
alone, and keeps those rates: a collective's time does not depend on when it runs or on what
else is in flight. The per-rank replay (``replay.run``) then reduces to two closed forms:

* each distinct schedule's time, once::

      T = launch_overhead + sum over steps of (latency_k + max_i (wire_i + fill_i) / r_i)

  with ``r_i`` the batch's equal-share rates (``network.batch_rates``), ``fill_i`` the flow's
  pipeline start-up bytes and the step's latency as in the replay (protocol latency + the largest
  path latency of its flows); a step whose flows carry no bytes costs its latency;
* the task timeline from those times: the max-plus recurrence of ``simulator.analysis.task_times``
  (a collective starts when the last member arrives and ends T later).

Link bytes are each transfer's wire bytes times its link weights, times the number of
collectives that share the schedule. Same results as the event replay up to float round-off
(the replay drains bytes in increments; a standing test compares both), at a fraction of the
cost: a 16,384-rank step has ~10^5 events but a few hundred distinct schedules.

Worked number: a ring all_reduce on 2 ranks over one 50 GB/s link each way, 100 MB, Simple, one
channel, latency 10 us: each edge carries 100 MB (two phases of 50 MB), one chain at 50 GB/s, and
the chain starts with one 1 MiB slice of pipeline fill (``ring.RingAlgorithm._fill``: min(1 MiB,
100 MB / 2 phases)), so T = 10 us + (100 MB + 1 MiB) / 50 GB/s = 10 us + 2 ms + 21 us = 2.031 ms.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..network.analytical import AnalyticalNetwork
from ..network.base import FluidNetwork
from ..schedule import Schedule
from .replay import Route


def collective_times(
    *, network: FluidNetwork, schedules: list[Schedule], route: Route, launch_overhead_s: float = 0.0
) -> tuple[np.ndarray, np.ndarray, int]:
    """(time of every collective, bytes moved per link by all of them, batches rated).

    ``schedules[i]`` is collective i's schedule; equal schedules (the same object) are timed once, each
    step routed once by ``route(step, schedule)`` (``simulator.flows.Routes``: flat routed arrays)."""
    if not (network.context_free and isinstance(network, AnalyticalNetwork)):
        raise ValueError(
            f"network: {type(network).__name__} is not context-free; closed-form replay needs a "
            "model whose rates ignore other flows (the analytical model)"
        )
    moved_links: list[np.ndarray] = []
    moved_bytes: list[np.ndarray] = []
    uses = Counter(id(schedule) for schedule in schedules)
    timed: dict[int, float] = {}
    rated = 0
    for schedule in schedules:
        key = id(schedule)
        if key in timed:
            continue
        total = launch_overhead_s
        for step in schedule.steps:
            flows = route(step, schedule)
            total += flows.latency_s
            if flows.counts.size == 0:  # no flow carries bytes
                total += step.proxy_s
                continue
            links, weights, counts, wire = flows.links, flows.link_weights, flows.counts, flows.wire_bytes
            rates = network.batch_rates(links, weights, counts, flows.caps_bytes_per_s)
            rated += 1
            if not np.all(rates > 0):
                raise RuntimeError(
                    f"closed-form replay: a flow of {schedule.algorithm} has zero rate; the network cannot finish it"
                )
            total += max(float(np.max((wire + flows.fill_bytes) / rates)), step.proxy_s)
            moved_links.append(links)
            moved_bytes.append(np.repeat(wire * uses[key], counts) * weights)
        timed[key] = total
    times = np.array([timed[id(s)] for s in schedules], dtype=np.float64)
    nlinks = network.capacity_bytes_per_s.shape[0]
    link_bytes = (
        np.bincount(np.concatenate(moved_links), weights=np.concatenate(moved_bytes), minlength=nlinks)
        if moved_links
        else np.zeros(nlinks)
    )
    return times, link_bytes, rated
