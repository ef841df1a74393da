"""Per-rank programs: what each rank computes and communicates, in order. Pure data.

A :class:`Workload` has ``nranks`` ranks, a table of collectives, and one program per rank: a
sequence of :class:`ComputeTask` (busy for a duration) and :class:`CommTask` (take part in
collective ``index`` of the table). A collective starts when every rank of its group has
reached it (NCCL kernels wait for their peers; passive ranks, below, take part without arriving) and ends
for all of them together.

Streams and dependencies (CUDA streams): every task runs on a ``stream`` of its rank (0 by default,
e.g. 0 = compute, 1 = data-parallel communication). Tasks of one stream run in program order; a
task also waits for the tasks of its own rank listed in ``after`` (indices into the rank's
program, all earlier than the task itself), which is how a gradient bucket's all-reduce on stream
1 waits for the backward pass that produced it while the next backward layer keeps stream 0 busy.
With one stream and no ``after`` a program is a plain sequence.

Work, not seconds: a compute task either has a fixed ``duration_s`` (hand-built workloads) or carries
``work``, a frozen, hashable record of what it computes (for a training step,
``workloads.training.compute.PassWork``: the passes of one micro-batch), which keeps the Workload
independent of the hardware. :meth:`Workload.with_durations` gives each such task the seconds a duration
lookup (a GPU's compute model, e.g. ``workloads.training.StepCompute.duration_s``) returns for its work;
the engine runs resolved workloads only (``unresolved`` lists what is missing).

Passive ranks (``passive``): ranks whose part is played by symmetry. Their programs are empty; they take part in
every collective of their groups without arriving, so such a collective starts when its other members have
arrived and moves the bytes of every member (a training step simulating one data-parallel replica lists the
other replicas' members of its data-parallel groups so: ``simulator.studies.reductions``). Every collective
needs a member that is not passive.

Ranks may share one program object (workloads.training builds equal programs once). ``shared_programs`` lists
each distinct program object (by identity) with the ranks that run it, in increasing order, in order of
their first rank, so that consumers work once per distinct program; it is derived from ``programs`` and
takes no part in equality, hashing or repr.

>>> from workloads.collectives import Collective, CollectiveKind
>>> c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0, 1))
>>> w = Workload.sequence([c, c], nranks=2)
>>> [len(p) for p in w.programs]
[2, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from topologies.checks import finite_nonnegative, integer, is_int, reject

from .collectives import Collective


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeTask:
    """Busy for ``duration_s`` seconds, or, while None, for the time of ``work`` once resolved (module docstring)."""

    duration_s: float | None = None
    name: str = "compute"
    stream: int = 0
    after: tuple[int, ...] = ()
    work: Hashable | None = None

    def __post_init__(self) -> None:
        if self.duration_s is None:
            if self.work is None:
                raise reject("ComputeTask.duration_s", None, "a finite number >= 0, or work= to resolve it from")
        else:
            finite_nonnegative("ComputeTask.duration_s", self.duration_s, "a finite number >= 0")
        _check_stream("ComputeTask", self.stream, self.after)


@dataclass(frozen=True, slots=True, kw_only=True)
class CommTask:
    index: int
    name: str = "comm"
    stream: int = 0
    after: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_stream("CommTask", self.stream, self.after)


def _check_stream(owner: str, stream: object, after: object) -> None:
    if not is_int(stream) or stream < 0:
        raise reject(f"{owner}.stream", stream, "an integer >= 0")
    if not isinstance(after, tuple) or any(not is_int(a) or a < 0 for a in after):
        raise reject(f"{owner}.after", after, "a tuple of task indices >= 0")


Task = ComputeTask | CommTask


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    nranks: int
    collectives: tuple[Collective, ...]
    programs: tuple[tuple[Task, ...], ...]
    passive: frozenset[int] = frozenset()  # ranks whose part is played by symmetry (module docstring)
    # (program, read-only int64 array of its ranks) per distinct program object: see the module docstring
    shared_programs: tuple[tuple[tuple[Task, ...], np.ndarray], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nranks", integer("Workload.nranks", self.nranks, low=1))
        if not isinstance(self.collectives, tuple) or not all(isinstance(c, Collective) for c in self.collectives):
            raise reject("Workload.collectives", self.collectives, "a tuple of Collective")
        if not isinstance(self.programs, tuple) or not all(isinstance(p, tuple) for p in self.programs):
            raise reject("Workload.programs", self.programs, "a tuple of programs (tuples of tasks), one per rank")
        if len(self.programs) != self.nranks:
            raise ValueError(f"Workload.programs: {len(self.programs)} programs for {self.nranks} ranks")
        for i, coll in enumerate(self.collectives):
            if max(coll.group) >= self.nranks:
                raise ValueError(f"Workload.collectives[{i}]: group rank {max(coll.group)} >= nranks {self.nranks}")
        if not isinstance(self.passive, frozenset) or any(
            not is_int(r) or not 0 <= r < self.nranks for r in self.passive
        ):
            raise reject("Workload.passive", self.passive, f"a frozenset of ranks in 0..{self.nranks - 1}")
        if self.passive:
            busy = [r for r in self.passive if self.programs[r]]
            if busy:
                raise ValueError(
                    f"Workload.programs[{min(busy)}]: rank {min(busy)} is passive; expected an empty program"
                )
            idle = [i for i, c in enumerate(self.collectives) if self.passive.issuperset(c.group)]
            if idle:
                raise ValueError(
                    f"Workload.collectives[{idle[0]}]: every member is passive, so it never starts; expected a member "
                    "that is not passive"
                )
        # ranks often share one program object (workloads.training builds equal programs once): its tasks are checked
        # once, then every rank's membership of the program's collectives; its ranks are kept (shared_programs)
        shared: dict[int, tuple[tuple[Task, ...], tuple[int, ...], list[int]]] = {}  # id -> program, indices, ranks
        members: dict[int, frozenset[int]] = {}
        for rank, program in enumerate(self.programs):
            entry = shared.get(id(program))
            if entry is None:
                entry = shared[id(program)] = (program, self._check_program(rank, program), [])
            entry[2].append(rank)
            for i in entry[1]:
                group = members.get(i)
                if group is None:
                    group = members[i] = frozenset(self.collectives[i].group)
                if rank not in group:
                    raise ValueError(f"Workload.programs[{rank}]: rank {rank} is not in the group of collective {i}")
        object.__setattr__(
            self, "shared_programs", tuple((program, _read_only(ranks)) for program, _, ranks in shared.values())
        )

    def _check_program(self, rank: int, program: tuple[Task, ...]) -> tuple[int, ...]:
        """Check the tasks of program ``rank``; returns the indices of its collectives, in program order."""
        joined: dict[int, None] = {}
        for position, task in enumerate(program):
            if task.after and max(task.after) >= position:
                raise ValueError(
                    f"Workload.programs[{rank}][{position}].after: {task.after} names a task that is "
                    f"not earlier in the program; expected indices < {position}"
                )
            if isinstance(task, CommTask):
                if not 0 <= task.index < len(self.collectives):
                    raise ValueError(f"Workload.programs[{rank}]: collective index {task.index} does not exist")
                if task.index in joined:
                    raise ValueError(
                        f"Workload.programs[{rank}]: collective {task.index} appears twice; expected "
                        "each rank to take part in a collective once"
                    )
                joined[task.index] = None
        return tuple(joined)

    @property
    def unresolved(self) -> int:
        """How many distinct compute tasks still have no duration (their work is not timed yet)."""
        return len(
            {
                id(t)
                for program, _ in self.shared_programs
                for t in program
                if isinstance(t, ComputeTask) and t.duration_s is None
            }
        )

    def with_durations(self, duration_of: Callable[[Any], float]) -> Workload:
        """This workload with every compute task that carries ``work`` lasting ``duration_of(work)`` seconds
        (the work is kept). Shared program objects stay shared and shared tasks are resolved once."""
        tasks: dict[int, ComputeTask] = {}
        programs: dict[int, tuple] = {}
        out = []
        for program in self.programs:
            new = programs.get(id(program))
            if new is None:
                resolved = []
                for task in program:
                    if isinstance(task, ComputeTask) and task.work is not None:
                        done = tasks.get(id(task))
                        if done is None:
                            done = tasks[id(task)] = replace(task, duration_s=duration_of(task.work))
                        task = done
                    resolved.append(task)
                new = programs[id(program)] = tuple(resolved)
            out.append(new)
        return Workload(nranks=self.nranks, collectives=self.collectives, programs=tuple(out), passive=self.passive)

    def arrivals(self, index: int) -> int:
        """How many members of collective ``index`` arrive at it: its group less the passive ranks."""
        group = self.collectives[index].group
        return len(group) - (len(self.passive.intersection(group)) if self.passive else 0)

    @classmethod
    def sequence(cls, collectives: list[Collective] | tuple[Collective, ...], *, nranks: int) -> Workload:
        """Every rank runs, in order, each collective whose group contains it (nccl-tests style)."""
        if not isinstance(collectives, (list, tuple)) or not all(isinstance(c, Collective) for c in collectives):
            raise reject("Workload.sequence.collectives", collectives, "a list of Collective")
        nranks = integer("Workload.sequence.nranks", nranks, low=1)
        collectives = tuple(collectives)
        programs = tuple(
            tuple(CommTask(index=i, name=c.kind.value) for i, c in enumerate(collectives) if rank in c.group)
            for rank in range(nranks)
        )
        return cls(nranks=nranks, collectives=collectives, programs=programs)


def _read_only(values: list[int]) -> np.ndarray:
    array = np.array(values, dtype=np.int64)
    array.setflags(write=False)
    return array
