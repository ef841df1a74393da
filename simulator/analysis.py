"""Where a step's time goes: critical path, exposed communication, per-label breakdowns, link classes.

Timelines come from ``simulator.engine.timeline`` (``task_times``).

Definitions used by ``StepResult`` (simulator.studies.training):

* ``critical_path_s``: the step with all collectives taking 0 s.
* ``exposed_comm_s = step_time_s - critical_path_s``: the time the network adds to the step (its
  share of the critical path). Overlapped communication that never delays a dependent task counts 0.
* ``compute_s``: the largest per-rank sum of compute-task durations (the busiest GPU's busy time).
* ``bubble_s = critical_path_s - compute_s``: idle time of the busiest GPU that dependencies (the
  pipeline) cause even on an infinitely fast network. So step = compute + bubble + exposed.
* ``comm_s``: the largest per-rank measure of the union of its collectives' [start, end] intervals
  (time during which at least one of its collectives is in the network).
* per group / per collective kind: count, summed ``Collective.nbytes``, and the same union time on
  the busiest rank; ``exposed_s`` is, on the rank that finishes last, the time a collective of that
  group is in flight while its compute stream is idle.

Worked number: 1F1B with p = 4 stages, m = 8 micro-batches, 1 ms forward and 2 ms backward per stage,
free network: critical path (m + p - 1)(f + b) = 11 x 3 = 33 ms, compute 8 x 3 = 24 ms, bubble 9 ms.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from topologies.links import LinkKind
from topologies.topology import LinkTier, Topology
from workloads.tasks import CommTask, ComputeTask, Task, Workload

from .engine.timeline import Timeline

__all__ = ("union_length_s", "interval_breakdown", "interval_breakdowns", "link_class_bytes")


def union_length_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Measure of a union of [start, end] intervals."""
    spans = sorted((float(a), float(b)) for a, b in intervals if b > a)
    total, lo = 0.0, 0.0  # lo: start of the open block, read only once hi is set
    hi: float | None = None
    for a, b in spans:
        if hi is None or a > hi:
            if hi is not None:
                total += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    if hi is not None:
        total += hi - lo
    return total


def interval_breakdown(
    workload: Workload,
    timeline: Timeline,
    labels: Iterable[Hashable],
    *,
    focus_rank: int | None = None,
    weights: Iterable[int] | None = None,
) -> dict:
    """Per label (one per collective, e.g. its group kind): count, summed nbytes, time on the busiest rank
    (union of in-flight intervals) and time exposed on ``focus_rank`` (in flight while its compute is idle).
    ``weights[i]``: how many identical collectives collective i stands for in the count and bytes."""
    labels = _per_collective("labels", labels, len(workload.collectives))
    return interval_breakdowns(workload, timeline, {"": labels}, focus_rank=focus_rank, weights=weights)[""]


def interval_breakdowns(
    workload: Workload,
    timeline: Timeline,
    labelings: Mapping[str, Iterable[Hashable]],
    *,
    focus_rank: int | None = None,
    weights: Iterable[int] | None = None,
) -> dict[str, dict]:
    """:func:`interval_breakdown` for each labelling of the collectives in ``labelings`` (name -> labels), in one
    pass over the ranks. Ranks sharing one program object share its comm positions and labels; the union of
    each (rank, label)'s intervals is computed for all the ranks of a program at once (_row_unions_s)."""
    ncoll = len(workload.collectives)
    per_label = {name: _per_collective(f"labelings[{name!r}]", labels, ncoll) for name, labels in labelings.items()}
    counts = [1] * ncoll if weights is None else _per_collective("weights", weights, ncoll)
    nbytes = [int(c.nbytes) * w for c, w in zip(workload.collectives, counts)]
    out: dict[str, dict] = {}
    for name, labels in per_label.items():
        table: dict[Hashable, dict] = {}
        out[name] = table
        for label, count, size in zip(labels, counts, nbytes):
            entry = table.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
            entry["count"] += count
            entry["nbytes"] += size
    starts, ends, bases = timeline.flat()
    for program, ranks in workload.shared_programs:
        comms = [(p, t.index) for p, t in enumerate(program) if isinstance(t, CommTask)]
        if not comms:
            continue
        positions = [p for p, _ in comms]
        # one row of intervals per (rank, labelling, label), padded to equal length with copies of the row's
        # first interval (a copy joins its original's block: the union does not change)
        entries: list[dict] = []
        columns: list[list[int]] = []
        for name, labels in per_label.items():
            by_label: dict[Hashable, list[int]] = {}
            for j, (_, index) in enumerate(comms):
                by_label.setdefault(labels[index], []).append(j)
            entries += [out[name][label] for label in by_label]
            columns += by_label.values()
        width = max(map(len, columns))
        take = np.array(positions)[[cols + cols[:1] * (width - len(cols)) for cols in columns]]
        flat = (bases[ranks][:, None, None] + take).reshape(-1, width)
        unions = _row_unions_s(starts[flat], ends[flat]).reshape(len(ranks), len(entries)).max(axis=0)
        for entry, union in zip(entries, unions.tolist()):
            entry["time_s"] = max(entry["time_s"], union)
    if focus_rank is not None:
        program, start, end = workload.programs[focus_rank], timeline.start_s[focus_rank], timeline.end_s[focus_rank]
        compute = [(start[p], end[p]) for p, t in enumerate(program) if isinstance(t, ComputeTask)]
        busy = union_length_s(compute)
        for name, labels in per_label.items():
            spans = _comm_spans_by_label(program, start, end, labels)
            for label, entry in out[name].items():  # in flight while the compute stream is idle
                entry["exposed_s"] = union_length_s(spans.get(label, []) + compute) - busy
    return out


_Value = TypeVar("_Value")


def _per_collective(name: str, values: Iterable[_Value], ncoll: int) -> list[_Value]:
    """``values`` as a list, checked to hold one value per collective."""
    listed = list(values)
    if len(listed) != ncoll:
        raise ValueError(f"{name}: {len(listed)} values are not allowed; expected one per collective ({ncoll})")
    return listed


def _row_unions_s(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`union_length_s` of each row's intervals [start[r, j], end[r, j]], bit for bit when the times are
    finite: intervals sorted by start; a new block where a start exceeds the running maximum of the ends before
    it; the blocks' lengths (hi - lo) summed in order (a running sum with zeros between block ends adds
    nothing). An interval with end <= start is dropped by union_length_s and kept here as [start, start],
    which can only join a block or add a block of length 0."""
    if start.shape[1] == 1:
        return np.where(end[:, 0] > start[:, 0], end[:, 0] - start[:, 0], 0.0)
    order = np.argsort(start, axis=1, kind="stable")
    lo = np.take_along_axis(start, order, axis=1)
    hi = np.maximum.accumulate(np.maximum(np.take_along_axis(end, order, axis=1), lo), axis=1)
    opens = np.ones(lo.shape, dtype=bool)
    opens[:, 1:] = lo[:, 1:] > hi[:, :-1]
    closes = np.ones(lo.shape, dtype=bool)
    closes[:, :-1] = opens[:, 1:]
    # each block's lo, carried to its last interval: the start at the latest opening at or before it
    at = np.maximum.accumulate(np.where(opens, np.arange(lo.shape[1]), 0), axis=1)
    lengths = np.where(closes, hi - np.take_along_axis(lo, at, axis=1), 0.0)
    return np.cumsum(lengths, axis=1)[:, -1]


def _comm_spans_by_label(
    program: Sequence[Task], start: np.ndarray, end: np.ndarray, labels: Sequence[Hashable]
) -> dict[Hashable, list[tuple[float, float]]]:
    """[start, end] of every collective task of one program, grouped by its collective's label, in program order."""
    out: dict[Hashable, list[tuple[float, float]]] = {}
    for p, t in enumerate(program):
        if isinstance(t, CommTask):
            out.setdefault(labels[t.index], []).append((start[p], end[p]))
    return out


def link_class_bytes(topology: Topology, link_bytes: np.ndarray) -> dict[str, dict[str, float]]:
    """Bytes moved per link tier (LinkTier) and per link technology (LinkKind), summed over links."""
    link_bytes = np.asarray(link_bytes, dtype=np.float64)
    tiers = {
        LinkTier(int(t)).name.lower(): float(link_bytes[topology.link_tier == t].sum())
        for t in np.unique(topology.link_tier)
    }
    kinds = {
        LinkKind(int(k)).name.lower(): float(link_bytes[topology.link_kind == k].sum())
        for k in np.unique(topology.link_kind)
    }
    return {"tier": tiers, "kind": kinds}
