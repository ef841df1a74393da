"""Replay without events, for a context-free network model (``network.context_free``).

Under the ``analytical`` model a batch of flows is rated once, at its start, from its own flows
alone, and keeps those rates: a collective's time does not depend on when it runs or on what
else is in flight. The per-rank replay (``replay.run``) then reduces to two closed forms:

* each distinct schedule's time, once::

      T = launch_overhead + sum over steps of (latency_k + max_i (wire_i + fill_i) / r_i)

  with ``r_i`` the batch's equal-share rates (``network.batch_rates``) and the step's
  latency as in the replay (protocol latency + the largest path latency of its flows); a step
  whose flows carry no bytes costs its latency;
* the task timeline from those times: the max-plus recurrence of ``simulator.analysis.task_times``
  (a collective starts when the last member arrives and ends T later).

Link bytes are each transfer's wire bytes times its link weights, times the number of
collectives that share the schedule. Same results as the event replay up to float round-off
(the replay drains bytes in increments; a standing test compares both), at a fraction of the
cost: a 16,384-rank step has ~10^5 events but a few hundred distinct schedules.

Worked number: a ring all_reduce on 2 ranks over one 50 GB/s link each way, 100 MB, Simple,
latency 10 us: each edge carries 100 MB (two phases of 50 MB), one chain per channel at 50 GB/s,
T = 10 us + 2 ms.
"""

from __future__ import annotations

import numpy as np

from topologies.routing import Router
from topologies.topology import Topology

from ..schedule import Schedule
from .replay import network_flows


def collective_times(*, network, schedules: list[Schedule], topology: Topology, router: Router,
                     rank_gpu: tuple[int, ...], launch_overhead_s: float = 0.0,
                     qps_per_connection: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """(time of every collective, bytes moved per link by all of them, batches rated).

    ``schedules[i]`` is collective i's schedule; equal schedules (the same object) are timed once."""
    if not getattr(network, "context_free", False):
        raise ValueError(f"network: {type(network).__name__} is not context-free; closed-form replay needs a "
                         "model whose rates ignore other flows (the analytical model)")
    moved_links, moved_bytes = [], []
    uses: dict[int, int] = {}
    for schedule in schedules:
        uses[id(schedule)] = uses.get(id(schedule), 0) + 1
    timed: dict[int, float] = {}
    rated = 0
    for schedule in schedules:
        key = id(schedule)
        if key in timed:
            continue
        total = launch_overhead_s
        for step in schedule.steps:
            flows = network_flows(step, schedule, topology=topology, router=router, rank_gpu=rank_gpu,
                                  qps_per_connection=qps_per_connection)
            total += step.latency_s + (flows.latency_s if step.path_latency else 0.0)
            keep = np.flatnonzero(flows.wire_bytes > 0)
            if keep.size == 0:
                continue
            links, weights, counts = flows.links, flows.link_weights, flows.counts
            if keep.size < counts.size:                      # drop the flows that carry nothing
                entries = np.repeat(flows.wire_bytes > 0, counts)
                links, weights, counts = links[entries], weights[entries], counts[keep]
            rates = network.batch_rates(links, weights, counts, flows.caps_bytes_per_s[keep])
            rated += 1
            if not np.all(rates > 0):
                raise RuntimeError(f"closed-form replay: a flow of {schedule.algorithm} has zero rate; the "
                                   "network cannot finish it")
            wire = flows.wire_bytes[keep]
            total += float(np.max((wire + flows.fill_bytes[keep]) / rates))
            moved_links.append(links)
            moved_bytes.append(np.repeat(wire * uses[key], counts) * weights)
        timed[key] = total
    times = np.array([timed[id(s)] for s in schedules], dtype=np.float64)
    nlinks = network.capacity_bytes_per_s.shape[0]
    link_bytes = (np.bincount(np.concatenate(moved_links), weights=np.concatenate(moved_bytes), minlength=nlinks)
                  if moved_links else np.zeros(nlinks))
    return times, link_bytes, rated
