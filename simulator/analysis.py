"""Where a step's time goes: per-task timelines, critical path, exposed communication, trace export.

Task times without the engine (``task_times``). The replay semantics are a max-plus recurrence, so
given each collective's duration (end - start from a SimResult) every task's times follow exactly::

    ready(task)   = max(end of the previous task of its stream, end of every task in ``after``)
    compute       start = ready, end = start + duration
    collective i  start = max over its members of ready (the last rank arrives), end = start + T_i

A collective task's ``arrival`` is its rank's ready time (its start is the group's); a compute task's
arrival is its start. (arrival, end) is what the event replay records per task (``SimConfig.task_ranks``).

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

from dataclasses import dataclass, field

import numpy as np

from topologies.links import LinkKind
from topologies.topology import LinkTier
from workloads.tasks import CommTask, ComputeTask, Workload
from workloads.training_step import STREAM_NAMES

__all__ = ("Timeline", "task_times", "union_length_s", "interval_breakdown", "interval_breakdowns", "link_class_bytes",
           "chrome_trace")


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """Start/end of every task (``start_s[rank][position]``) and of every collective; ``arrival_s``: when the
    rank was ready to run each task (the start of a compute task, the rank's arrival at a collective task)."""

    start_s: tuple[np.ndarray, ...]
    end_s: tuple[np.ndarray, ...]
    arrival_s: tuple[np.ndarray, ...]
    collective_start_s: np.ndarray
    collective_end_s: np.ndarray
    _flat: dict = field(default_factory=dict, init=False, repr=False, compare=False)   # see flat()

    @classmethod
    def _from_flat(cls, start_s: np.ndarray, end_s: np.ndarray, arrival_s: np.ndarray, base: np.ndarray,
                   collective_start_s: np.ndarray, collective_end_s: np.ndarray) -> "Timeline":
        """A Timeline whose rows are read-only views of ``start_s``, ``end_s`` and ``arrival_s`` (every task's
        times, rank after rank; ``base[r]``: rank r's first task in them), which seed the cache of :meth:`flat`."""
        for array in (start_s, end_s, arrival_s, base):
            array.setflags(write=False)                 # before taking the rows: views inherit the flag
        sizes = np.diff(base, append=start_s.size)
        if sizes.size and (sizes == sizes[0]).all():                            # equal program lengths
            rows = [tuple(a.reshape(sizes.size, int(sizes[0]))) for a in (start_s, end_s, arrival_s)]
        else:
            spans = list(map(slice, base.tolist(), (base + sizes).tolist()))
            rows = [tuple(map(a.__getitem__, spans)) for a in (start_s, end_s, arrival_s)]
        timeline = cls(start_s=rows[0], end_s=rows[1], arrival_s=rows[2], collective_start_s=collective_start_s,
                       collective_end_s=collective_end_s)
        timeline._flat.update(start_s=start_s, end_s=end_s, base=base)
        return timeline

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, base): every task's start and end in one array each, rank after rank, and the index
        of each rank's first task in them (read-only). The rows are concatenated on first use and kept
        (task_times hands over the arrays its rows are views of); the cache assumes the rows are not modified
        after construction."""
        if not self._flat:
            sizes = np.fromiter(map(len, self.end_s), dtype=np.int64, count=len(self.end_s))
            flat = {"start_s": _concatenate(self.start_s), "end_s": _concatenate(self.end_s),
                    "base": np.cumsum(sizes) - sizes}
            for array in flat.values():
                array.setflags(write=False)
            self._flat.update(flat)
        return self._flat["start_s"], self._flat["end_s"], self._flat["base"]

    @property
    def makespan_s(self) -> float:
        _, end, _ = self.flat()
        return float(end.max()) if end.size else 0.0

    @property
    def rank_end_s(self) -> np.ndarray:
        """When each rank's last task ends (0.0 for a rank without tasks)."""
        _, end, base = self.flat()
        out = np.zeros(len(self.end_s))
        busy = np.diff(base, append=end.size) > 0
        if end.size:               # rows without tasks hold no element: the busy rows' segments tile ``end``
            out[busy] = np.maximum.reduceat(end, base[busy])
        return out


def _concatenate(rows) -> np.ndarray:
    return np.concatenate(rows) if rows else np.zeros(0)


def task_times(workload: Workload, collective_time_s=None) -> Timeline:
    """Every task's start and end (see the module docstring). ``collective_time_s``: one duration per
    collective (None = all 0 s, the compute critical path). Raises RuntimeError on a deadlock.

    One pass over the task graph: each stream is walked in program order until a task must wait (an
    ``after`` task not finished yet, or a collective whose group has not all arrived) and is resumed by the
    event it waits for. The times are independent of the walking order because every value is a max of
    earlier ends plus one duration. Ranks sharing one program object have the same times, so one of them
    is walked: work is about 1 us per task of the distinct programs, plus O(ranks + group members) to count
    arrivals and copy rows (Llama-3 405B's reduction phase, 16,384 ranks over 128 programs: ~7 ms). Each
    rank's arrays are read-only rows (views) of one array per quantity."""
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: {workload!r} is not allowed; expected a workloads.tasks.Workload")
    ncoll = len(workload.collectives)
    durations = np.zeros(ncoll) if collective_time_s is None else np.asarray(collective_time_s, dtype=np.float64)
    if durations.shape != (ncoll,) or not np.all(np.isfinite(durations)) or np.any(durations < 0):
        raise ValueError(f"collective_time_s: expected {ncoll} finite durations >= 0")
    return _walk_streams(workload, durations.tolist())


def _stream_links(programs) -> tuple[list, list[int], list[int], list[int], list[int]]:
    """Flatten the programs (global task id = program's base + position) and chain each stream's tasks:
    ``(tasks, next_in_stream, stream_heads, stream_program, bases)``; ``next_in_stream[g] = -1`` at a
    stream's end, streams are numbered program by program in order of first appearance (the order
    deadlocks are reported in), ``stream_program[s]`` is stream s's program's index, ``bases[k]`` is
    program k's first global id and ``bases[len(programs)]`` the task count."""
    nxt = [-1] * sum(map(len, programs))
    tasks: list = []
    heads: list[int] = []
    stream_program: list[int] = []
    bases = [0]
    g = 0
    for k, program in enumerate(programs):
        tasks.extend(program)
        last: dict[int, int] = {}
        for task in program:
            stream = task.stream
            previous = last.get(stream)
            if previous is None:
                heads.append(g)
                stream_program.append(k)
            else:
                nxt[previous] = g
            last[stream] = g
            g += 1
        bases.append(g)
    return tasks, nxt, heads, stream_program, bases


def _walk_streams(workload: Workload, durations: list[float]) -> Timeline:
    """``task_times`` by walking streams (flat lists, no numpy in the loop); a Workload lets each rank take
    part in a collective once, so a collective gets at most its group's arrivals.

    Ranks running one program object get the same times: their tasks follow one recurrence over the same
    collectives' times. So only the first rank of each distinct program is walked, a collective waits for
    one arrival per distinct program among its members, and the walked rank's times are copied to the
    others (a deadlock is reported on the first rank, as every rank of its program is stuck)."""
    shared = workload.shared_programs
    program_of = np.empty(workload.nranks, dtype=np.int64)
    for k, (_, ranks) in enumerate(shared):
        program_of[ranks] = k
    programs = [program for program, _ in shared]
    ncoll = len(durations)
    tasks, nxt, heads, stream_program, bases = _stream_links(programs)
    total, nstreams = bases[-1], len(heads)
    start: list = [None] * total
    end: list = [None] * total
    arrival: list = [None] * total
    current = heads[:]                     # per stream: the first unfinished task, -1 when done
    previous_end = [0.0] * nstreams        # per stream: end of its last finished task
    distinct = program_of.tolist()
    need = [len({distinct[r] for r in c.group}) for c in workload.collectives]
    arrived = [0] * ncoll
    latest = [0.0] * ncoll
    member_stream: list[list[int]] = [[] for _ in range(ncoll)]
    member_task: list[list[int]] = [[] for _ in range(ncoll)]
    c_start, c_end = [np.nan] * ncoll, [np.nan] * ncoll
    waiters: dict[int, list[int]] = {}           # unfinished task -> streams blocked on it by ``after``
    stack = list(range(nstreams - 1, -1, -1))    # each stream is on the stack at most once
    push, pop, compute = stack.append, stack.pop, ComputeTask
    while stack:
        sid = pop()
        g, base, ready_prev = current[sid], bases[stream_program[sid]], previous_end[sid]
        while g >= 0:
            task = tasks[g]
            after = task.after
            ready = ready_prev
            if after:
                blocked = False
                for a in after:
                    e = end[base + a]
                    if e is None:
                        blocked = True
                        break
                    if e > ready:              # the same value as max(): no NaN, no -0.0 can occur
                        ready = e
                if blocked:
                    waiters.setdefault(base + a, []).append(sid)
                    break
            if isinstance(task, compute):
                start[g] = arrival[g] = ready
                ready_prev = end[g] = ready + task.duration_s
                if waiters and g in waiters:
                    stack.extend(waiters.pop(g))
                g = nxt[g]
                continue
            i = task.index
            count = arrived[i] = arrived[i] + 1
            arrival[g] = ready                 # the task starts with the collective, below
            if ready > latest[i]:
                latest[i] = ready
            streams_i, tasks_i = member_stream[i], member_task[i]
            streams_i.append(sid)
            tasks_i.append(g)
            if count < need[i]:
                break                          # resumed by the last member's arrival
            t0 = latest[i]
            t1 = t0 + durations[i]
            c_start[i], c_end[i] = t0, t1
            for msid, mg in zip(streams_i, tasks_i):
                start[mg] = t0
                end[mg] = t1
                if msid != sid:
                    following = current[msid] = nxt[mg]
                    if following >= 0:
                        previous_end[msid] = t1
                        push(msid)
                if waiters and mg in waiters:
                    stack.extend(waiters.pop(mg))
            ready_prev = t1
            g = nxt[g]
        current[sid] = g
        previous_end[sid] = ready_prev
    stuck = [sid for sid in range(nstreams) if current[sid] >= 0]
    if stuck:
        task = tasks[current[stuck[0]]]
        holder = [stream_program[sid] for sid in stuck]
        raise RuntimeError(f"task_times: rank {shared[holder[0]][1][0]} stream {task.stream} never finishes task "
                           f"{task.name!r} (deadlock in the programs; {sum(len(shared[k][1]) for k in holder)} "
                           "stream(s) stuck)")
    times = [np.array(values, dtype=np.float64) for values in (start, end, arrival)]
    sizes = np.fromiter(map(len, workload.programs), dtype=np.int64, count=workload.nranks)
    rank_base = np.cumsum(sizes) - sizes
    if len(shared) < workload.nranks:           # copy each walked program's times to the ranks sharing it
        source = np.arange(int(sizes.sum())) + np.repeat(np.array(bases[:-1])[program_of] - rank_base, sizes)
        times = [a[source] for a in times]
    return Timeline._from_flat(*times, rank_base, np.array(c_start, dtype=np.float64),
                               np.array(c_end, dtype=np.float64))


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


def interval_breakdown(workload: Workload, timeline: Timeline, labels, *, focus_rank: int | None = None,
                       weights=None) -> dict:
    """Per label (one per collective, e.g. its group kind): count, summed nbytes, time on the busiest rank
    (union of in-flight intervals) and time exposed on ``focus_rank`` (in flight while its compute is idle).
    ``weights[i]``: how many identical collectives collective i stands for in the count and bytes."""
    labels = _per_collective("labels", labels, len(workload.collectives))
    return interval_breakdowns(workload, timeline, {"": labels}, focus_rank=focus_rank, weights=weights)[""]


def interval_breakdowns(workload: Workload, timeline: Timeline, labelings, *, focus_rank: int | None = None,
                        weights=None) -> dict[str, dict]:
    """:func:`interval_breakdown` for each labelling of the collectives in ``labelings`` (name -> labels), in one
    pass over the ranks. Ranks sharing one program object share its comm positions and labels; the union of
    each (rank, label)'s intervals is computed for all the ranks of a program at once (_row_unions_s)."""
    ncoll = len(workload.collectives)
    labelings = {name: _per_collective(f"labelings[{name!r}]", labels, ncoll) for name, labels in labelings.items()}
    weights = [1] * ncoll if weights is None else _per_collective("weights", weights, ncoll)
    nbytes = [int(c.nbytes) * w for c, w in zip(workload.collectives, weights)]
    out: dict[str, dict] = {}
    for name, labels in labelings.items():
        entries = out[name] = {}
        for label, count, size in zip(labels, weights, nbytes):
            entry = entries.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
            entry["count"] += count
            entry["nbytes"] += size
    starts, ends, bases = timeline.flat()
    for program, ranks in workload.shared_programs:
        positions = [p for p, t in enumerate(program) if isinstance(t, CommTask)]
        if not positions:
            continue
        # one row of intervals per (rank, labelling, label), padded to equal length with copies of the row's
        # first interval (a copy joins its original's block: the union does not change)
        entries, columns = [], []
        for name, labels in labelings.items():
            by_label: dict[str, list[int]] = {}
            for j, p in enumerate(positions):
                by_label.setdefault(labels[program[p].index], []).append(j)
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
        for name, labels in labelings.items():
            spans = _comm_spans_by_label(program, start, end, labels)
            for label, entry in out[name].items():        # in flight while the compute stream is idle
                entry["exposed_s"] = union_length_s(spans.get(label, []) + compute) - busy
    return out


def _per_collective(name: str, values, ncoll: int) -> list:
    """``values`` as a list, checked to hold one value per collective."""
    values = list(values)
    if len(values) != ncoll:
        raise ValueError(f"{name}: {len(values)} values are not allowed; expected one per collective ({ncoll})")
    return values


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


def _comm_spans_by_label(program, start, end, labels) -> dict[str, list[tuple[float, float]]]:
    """[start, end] of every collective task of one program, grouped by its collective's label, in program order."""
    out: dict[str, list] = {}
    for p, t in enumerate(program):
        if isinstance(t, CommTask):
            out.setdefault(labels[t.index], []).append((start[p], end[p]))
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
    stream, one "X" event per task; collectives carry their group kind, bytes, group size and the algorithm,
    protocol and channels NCCL's tuner chose (as NCCL_DEBUG=INFO prints per collective)."""
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
                    record = phase.sim.collectives[task.index]
                    event["args"] = {"collective": task.index, "kind": coll.kind.value, "nbytes": coll.nbytes,
                                     "group_size": coll.nranks, "algorithm": record.algorithm,
                                     "protocol": record.protocol, "channels": record.nchannels}
                else:
                    event["cat"] = "compute"
                events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}
