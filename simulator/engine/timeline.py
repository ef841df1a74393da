"""Every task's start and end, rebuilt from the collectives' durations (the replay's max-plus recurrence).

Task times without the engine (``task_times``). The replay semantics are a max-plus recurrence, so
given each collective's duration (end - start from a SimResult) every task's times follow exactly::

    ready(task)   = max(end of the previous task of its stream, end of every task in ``after``)
    compute       start = ready, end = start + duration
    collective i  start = max over its members of ready (the last rank arrives; passive ranks,
                  ``Workload.passive``, take part without arriving), end = start + T_i

A collective task's ``arrival`` is its rank's ready time (its start is the group's); a compute task's
arrival is its start. (arrival, end) is what the event replay records per task (``SimConfig.task_ranks``).

With T_i from the simulation this rebuilds the engine's timeline (the step ends at the SimResult's
makespan, a checked invariant); with every T_i = 0 it gives the *compute critical path*: the step as
it would run on an infinitely fast network, pipeline bubbles and dependencies included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from topologies.checks import instance
from workloads.tasks import ComputeTask, Task, Workload

__all__ = ("Timeline", "task_times")


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """Start/end of every task (``start_s[rank][position]``) and of every collective; ``arrival_s``: when the
    rank was ready to run each task (the start of a compute task, the rank's arrival at a collective task)."""

    start_s: tuple[np.ndarray, ...]
    end_s: tuple[np.ndarray, ...]
    arrival_s: tuple[np.ndarray, ...]
    collective_start_s: np.ndarray
    collective_end_s: np.ndarray
    _flat: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False, compare=False)  # see flat()

    @classmethod
    def _from_flat(
        cls,
        start_s: np.ndarray,
        end_s: np.ndarray,
        arrival_s: np.ndarray,
        base: np.ndarray,
        collective_start_s: np.ndarray,
        collective_end_s: np.ndarray,
    ) -> Timeline:
        """A Timeline whose rows are read-only views of ``start_s``, ``end_s`` and ``arrival_s`` (every task's
        times, rank after rank; ``base[r]``: rank r's first task in them), which seed the cache of :meth:`flat`."""
        for array in (start_s, end_s, arrival_s, base):
            array.setflags(write=False)  # before taking the rows: views inherit the flag
        sizes = np.diff(base, append=start_s.size)
        if sizes.size and (sizes == sizes[0]).all():  # equal program lengths
            rows = [tuple(a.reshape(sizes.size, int(sizes[0]))) for a in (start_s, end_s, arrival_s)]
        else:
            spans = list(map(slice, base.tolist(), (base + sizes).tolist()))
            rows = [tuple(map(a.__getitem__, spans)) for a in (start_s, end_s, arrival_s)]
        timeline = cls(
            start_s=rows[0],
            end_s=rows[1],
            arrival_s=rows[2],
            collective_start_s=collective_start_s,
            collective_end_s=collective_end_s,
        )
        timeline._flat.update(start_s=start_s, end_s=end_s, base=base)
        return timeline

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start, end, base): every task's start and end in one array each, rank after rank, and the index
        of each rank's first task in them (read-only). The rows are concatenated on first use and kept
        (task_times hands over the arrays its rows are views of); the cache assumes the rows are not modified
        after construction."""
        if not self._flat:
            sizes = np.fromiter(map(len, self.end_s), dtype=np.int64, count=len(self.end_s))
            flat = {
                "start_s": _concatenate(self.start_s),
                "end_s": _concatenate(self.end_s),
                "base": np.cumsum(sizes) - sizes,
            }
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
        if end.size:  # rows without tasks hold no element: the busy rows' segments tile ``end``
            out[busy] = np.maximum.reduceat(end, base[busy])
        return out


def _concatenate(rows: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate(rows) if rows else np.zeros(0)


def task_times(workload: Workload, collective_time_s: ArrayLike | None = None) -> Timeline:
    """Every task's start and end (see the module docstring). ``collective_time_s``: one duration per
    collective (None = all 0 s, the compute critical path). Raises RuntimeError on a deadlock.

    One pass over the task graph: each stream is walked in program order until a task must wait (an
    ``after`` task not finished yet, or a collective whose group has not all arrived) and is resumed by the
    event it waits for. The times are independent of the walking order because every value is a max of
    earlier ends plus one duration. Ranks sharing one program object have the same times, so one of them
    is walked: work is about 1 us per task of the distinct programs, plus O(ranks + group members) to count
    arrivals and copy rows (Llama-3 405B's reduction phase, 16,384 ranks over 128 programs: ~7 ms). Each
    rank's arrays are read-only rows (views) of one array per quantity."""
    instance("workload", workload, Workload, "a workloads.tasks.Workload")
    ncoll = len(workload.collectives)
    durations = np.zeros(ncoll) if collective_time_s is None else np.asarray(collective_time_s, dtype=np.float64)
    if durations.shape != (ncoll,) or not np.all(np.isfinite(durations)) or np.any(durations < 0):
        raise ValueError(f"collective_time_s: expected {ncoll} finite durations >= 0")
    return _walk_streams(workload, durations.tolist())


def _stream_links(programs: Sequence[Sequence[Task]]) -> tuple[list[Task], list[int], list[int], list[int], list[int]]:
    """Flatten the programs (global task id = program's base + position) and chain each stream's tasks:
    ``(tasks, next_in_stream, stream_heads, stream_program, bases)``; ``next_in_stream[g] = -1`` at a
    stream's end, streams are numbered program by program in order of first appearance (the order
    deadlocks are reported in), ``stream_program[s]`` is stream s's program's index, ``bases[k]`` is
    program k's first global id and ``bases[len(programs)]`` the task count."""
    nxt = [-1] * sum(map(len, programs))
    tasks: list[Task] = []
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
    start: list[float | None] = [None] * total
    end: list[float | None] = [None] * total
    arrival: list[float | None] = [None] * total
    current = heads[:]  # per stream: the first unfinished task, -1 when done
    previous_end = [0.0] * nstreams  # per stream: end of its last finished task
    distinct = program_of.tolist()
    passive = workload.passive  # they take part without arriving
    need = [len({distinct[r] for r in c.group if r not in passive}) for c in workload.collectives]
    arrived = [0] * ncoll
    latest = [0.0] * ncoll
    member_stream: list[list[int]] = [[] for _ in range(ncoll)]
    member_task: list[list[int]] = [[] for _ in range(ncoll)]
    c_start, c_end = [np.nan] * ncoll, [np.nan] * ncoll
    waiters: dict[int, list[int]] = {}  # unfinished task -> streams blocked on it by ``after``
    stack = list(range(nstreams - 1, -1, -1))  # each stream is on the stack at most once
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
                    if e > ready:  # the same value as max(): no NaN, no -0.0 can occur
                        ready = e
                if blocked:
                    waiters.setdefault(base + a, []).append(sid)
                    break
            if isinstance(task, compute):
                duration = task.duration_s
                assert duration is not None  # the engine runs resolved workloads (Workload.unresolved)
                start[g] = arrival[g] = ready
                ready_prev = end[g] = ready + duration
                if waiters and g in waiters:
                    stack.extend(waiters.pop(g))
                g = nxt[g]
                continue
            i = task.index
            count = arrived[i] = arrived[i] + 1
            arrival[g] = ready  # the task starts with the collective, below
            if ready > latest[i]:
                latest[i] = ready
            streams_i, tasks_i = member_stream[i], member_task[i]
            streams_i.append(sid)
            tasks_i.append(g)
            if count < need[i]:
                break  # resumed by the last member's arrival
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
        raise RuntimeError(
            f"task_times: rank {shared[holder[0]][1][0]} stream {task.stream} never finishes task "
            f"{task.name!r} (deadlock in the programs; {sum(len(shared[k][1]) for k in holder)} "
            "stream(s) stuck)"
        )
    times = [np.array(values, dtype=np.float64) for values in (start, end, arrival)]
    sizes = np.fromiter(map(len, workload.programs), dtype=np.int64, count=workload.nranks)
    rank_base = np.cumsum(sizes) - sizes
    if len(shared) < workload.nranks:  # copy each walked program's times to the ranks sharing it
        source = np.arange(int(sizes.sum())) + np.repeat(np.array(bases[:-1])[program_of] - rank_base, sizes)
        times = [a[source] for a in times]
    start_s, end_s, arrival_s = times
    return Timeline._from_flat(
        start_s, end_s, arrival_s, rank_base, np.array(c_start, dtype=np.float64), np.array(c_end, dtype=np.float64)
    )
