"""Where a step's time goes: per-task timelines, critical path, exposed communication, trace export.

Task times without the engine (``task_times``). The replay semantics are a max-plus recurrence, so
given each collective's duration (end - start from a SimResult) every task's times follow exactly::

    ready(task)   = max(end of the previous task of its stream, end of every task in ``after``)
    compute       start = ready, end = start + duration
    collective i  start = max over its members of ready (the last rank arrives), end = start + T_i

With T_i from the simulation this rebuilds the engine's timeline (the step ends at the SimResult's
makespan, a checked invariant); with every T_i = 0 it gives the *compute critical path*: the step as
it would run on an infinitely fast network, pipeline bubbles and dependencies included.

Definitions used by ``StepResult`` (simulator.training):

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

``chrome_trace`` writes the Chrome trace-event format (``chrome://tracing``, Perfetto): one process per
rank, one thread per stream, a complete ("X") event per task, times in microseconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from topologies.links import LinkKind
from topologies.topology import LinkTier
from workloads.tasks import CommTask, ComputeTask, Workload

__all__ = ("Timeline", "task_times", "arrival_times", "union_length_s", "interval_breakdown", "link_class_bytes", "chrome_trace")


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """Start/end of every task (``start_s[rank][position]``) and of every collective."""

    start_s: tuple[np.ndarray, ...]
    end_s: tuple[np.ndarray, ...]
    collective_start_s: np.ndarray
    collective_end_s: np.ndarray

    @property
    def makespan_s(self) -> float:
        return max((float(e.max()) for e in self.end_s if e.size), default=0.0)


def task_times(workload: Workload, collective_time_s=None) -> Timeline:
    """Every task's start and end (see the module docstring). ``collective_time_s``: one duration per
    collective (None = all 0 s, the compute critical path). Raises RuntimeError on a deadlock."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: {workload!r} is not allowed; expected a workloads.tasks.Workload")
    ncoll = len(workload.collectives)
    durations = np.zeros(ncoll) if collective_time_s is None else np.asarray(collective_time_s, dtype=np.float64)
    if durations.shape != (ncoll,) or not np.all(np.isfinite(durations)) or np.any(durations < 0):
        raise ValueError(f"collective_time_s: expected {ncoll} finite durations >= 0")
    programs = workload.programs
    start: list[list] = [[None] * len(p) for p in programs]
    end: list[list] = [[None] * len(p) for p in programs]
    streams: list[dict[int, list[int]]] = []
    for program in programs:
        table: dict[int, list[int]] = {}
        for position, task in enumerate(program):
            table.setdefault(task.stream, []).append(position)
        streams.append(table)
    pointer = {(r, s): 0 for r, table in enumerate(streams) for s in table}
    members: list[list[tuple[int, int, int]]] = [[] for _ in range(ncoll)]   # (rank, stream, position)
    arrived = np.zeros(ncoll, dtype=np.int64)
    latest = [0.0] * ncoll
    durations_list = durations.tolist()
    c_start, c_end = np.full(ncoll, np.nan), np.full(ncoll, np.nan)
    waiters: dict[tuple[int, int], list[tuple[int, int]]] = {}
    queue = deque(pointer)
    queued = set(pointer)

    def finish(rank: int, position: int) -> None:
        for key in waiters.pop((rank, position), ()):
            if key not in queued:
                queued.add(key)
                queue.append(key)

    while queue:
        key = queue.popleft()
        queued.discard(key)
        rank, stream = key
        order = streams[rank][stream]
        program, s_rank, e_rank = programs[rank], start[rank], end[rank]
        while pointer[key] < len(order):
            k = pointer[key]
            position = order[k]
            task = program[position]
            if s_rank[position] is not None and isinstance(task, CommTask):
                break                                   # arrived, waiting for the rest of its group
            blocked = next((a for a in task.after if e_rank[a] is None), None)
            if blocked is not None:
                waiters.setdefault((rank, blocked), []).append(key)
                break
            ready = e_rank[order[k - 1]] if k else 0.0
            for a in task.after:
                ready = max(ready, e_rank[a])
            if isinstance(task, ComputeTask):
                s_rank[position] = ready
                e_rank[position] = ready + task.duration_s
                pointer[key] = k + 1
                finish(rank, position)
                continue
            i = task.index
            s_rank[position] = ready                    # arrival; replaced by the collective's start below
            members[i].append((rank, stream, position))
            arrived[i] += 1
            latest[i] = max(latest[i], ready)
            if arrived[i] < workload.collectives[i].nranks:
                break
            t0, t1 = latest[i], latest[i] + durations_list[i]
            c_start[i], c_end[i] = t0, t1
            for r, st, pos in members[i]:
                start[r][pos], end[r][pos] = t0, t1
                pointer[(r, st)] += 1
                finish(r, pos)
                if (r, st) != key and (r, st) not in queued:
                    queued.add((r, st))
                    queue.append((r, st))
    stuck = [(r, s) for (r, s), k in pointer.items() if k < len(streams[r][s])]
    if stuck:
        r, s = stuck[0]
        task = programs[r][streams[r][s][pointer[(r, s)]]]
        raise RuntimeError(f"task_times: rank {r} stream {s} never finishes task {task.name!r} (deadlock in the "
                           f"programs; {len(stuck)} stream(s) stuck)")
    return Timeline(start_s=tuple(np.asarray(s, dtype=np.float64) for s in start),
                    end_s=tuple(np.asarray(e, dtype=np.float64) for e in end),
                    collective_start_s=c_start, collective_end_s=c_end)


def arrival_times(workload: Workload, timeline: Timeline, ranks) -> dict[int, np.ndarray]:
    """For each rank in ``ranks``: an array (tasks x 2) of every task's (start, end) as the event replay
    records them, where a collective task starts when *its rank* is ready (its stream and ``after``
    allow it) rather than when the last member arrives; its time includes the wait for its group."""
    out = {}
    for rank in ranks:
        program, start, end = workload.programs[rank], timeline.start_s[rank], timeline.end_s[rank]
        times = np.empty((len(program), 2))
        previous: dict[int, int] = {}
        for position, task in enumerate(program):
            ready = end[previous[task.stream]] if task.stream in previous else 0.0
            for a in task.after:
                ready = max(ready, end[a])
            times[position] = (ready if isinstance(task, CommTask) else start[position], end[position])
            previous[task.stream] = position
        times.setflags(write=False)
        out[rank] = times
    return out


def union_length_s(intervals) -> float:
    """Measure of a union of [start, end] intervals."""
    spans = sorted((float(a), float(b)) for a, b in intervals if b > a)
    total, lo, hi = 0.0, None, None
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


def _subtract_length_s(intervals, cover) -> float:
    """Measure of union(intervals) minus union(cover)."""
    both = union_length_s(list(intervals) + list(cover))
    return both - union_length_s(cover)


def interval_breakdown(workload: Workload, timeline: Timeline, labels, *, focus_rank: int | None = None,
                       weights=None) -> dict:
    """Per label (one per collective, e.g. its group kind): count, summed nbytes, time on the busiest rank
    (union of in-flight intervals) and time exposed on ``focus_rank`` (in flight while its compute is idle).
    ``weights[i]``: how many identical collectives collective i stands for in the count and bytes."""
    labels = list(labels)
    weights = [1] * len(labels) if weights is None else list(weights)
    out: dict[str, dict] = {}
    for i, label in enumerate(labels):
        entry = out.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
        entry["count"] += weights[i]
        entry["nbytes"] += int(workload.collectives[i].nbytes) * weights[i]
    for label in out:
        worst = 0.0
        for rank, program in enumerate(workload.programs):
            spans = [(timeline.start_s[rank][p], timeline.end_s[rank][p]) for p, t in enumerate(program)
                     if isinstance(t, CommTask) and labels[t.index] == label]
            if spans:
                worst = max(worst, union_length_s(spans))
        out[label]["time_s"] = worst
        if focus_rank is not None:
            program = workload.programs[focus_rank]
            spans = [(timeline.start_s[focus_rank][p], timeline.end_s[focus_rank][p]) for p, t in enumerate(program)
                     if isinstance(t, CommTask) and labels[t.index] == label]
            compute = [(timeline.start_s[focus_rank][p], timeline.end_s[focus_rank][p]) for p, t in enumerate(program)
                       if isinstance(t, ComputeTask)]
            out[label]["exposed_s"] = _subtract_length_s(spans, compute)
    return out


def link_class_bytes(topology, link_bytes: np.ndarray) -> dict[str, dict[str, float]]:
    """Bytes moved per link tier (LinkTier) and per link technology (LinkKind), summed over links."""
    link_bytes = np.asarray(link_bytes, dtype=np.float64)
    tiers = {LinkTier(int(t)).name.lower(): float(link_bytes[topology.link_tier == t].sum())
             for t in np.unique(topology.link_tier)}
    kinds = {LinkKind(int(k)).name.lower(): float(link_bytes[topology.link_kind == k].sum())
             for k in np.unique(topology.link_kind)}
    return {"tier": tiers, "kind": kinds}


def chrome_trace(step_result) -> dict:
    """Chrome trace-event JSON (a dict; ``json.dump`` it) of a ``StepResult``: process = rank, thread =
    stream, one "X" event per task; collectives carry their group kind, bytes and the rank's arrival."""
    from workloads.training_step import STREAM_NAMES

    events: list[dict] = []
    named: set[tuple[int, int]] = set()
    for phase in step_result.phases:
        training, timeline, offset = phase.training, phase.timeline, phase.offset_s
        workload = training.workload
        for local, program in enumerate(workload.programs):
            pid = training.ranks[local]
            if (pid, -1) not in named:
                named.add((pid, -1))
                stage = training.parallelism.coords(pid).pp
                events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                               "args": {"name": f"rank {pid} (stage {stage})"}})
            for position, task in enumerate(program):
                if (pid, task.stream) not in named:
                    named.add((pid, task.stream))
                    events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": task.stream,
                                   "args": {"name": STREAM_NAMES.get(task.stream, f"stream {task.stream}")}})
                t0 = float(timeline.start_s[local][position]) + offset
                t1 = float(timeline.end_s[local][position]) + offset
                event = {"ph": "X", "name": task.name, "pid": pid, "tid": task.stream, "ts": t0 * 1e6,
                         "dur": max(t1 - t0, 0.0) * 1e6}
                if isinstance(task, CommTask):
                    coll = workload.collectives[task.index]
                    event["cat"] = training.group_kinds[task.index]
                    event["args"] = {"collective": task.index, "kind": coll.kind.value, "nbytes": coll.nbytes,
                                     "group_size": coll.nranks}
                else:
                    event["cat"] = "compute"
                events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}
