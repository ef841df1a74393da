"""Several jobs on one fabric: simulate them together, split the result per job, measure interference.

Merging. Jobs ``j = 0 .. J-1``, each a (Workload, Placement) pair with ``n_j`` ranks and ``C_j``
collectives, become one workload of ``sum n_j`` ranks: job j's rank r is global rank ``R_j + r``
with ``R_j = n_0 + ... + n_{j-1}``, its collective k is global collective ``K_j + k`` with
``K_j = C_0 + ... + C_{j-1}``, and every collective's group is shifted by ``R_j`` (its ``root``,
an index into the group, is unchanged). The placements are concatenated in the same order; the
jobs must use disjoint GPUs. One ``simulate`` call then runs everything: all jobs start at t = 0
(delay one with a leading ``ComputeTask``), and their flows share every link they have in
common under the network model (max-min fair sharing in the flow model), with one router whose
load counters (``adaptive``, ``ugal``) see every job's flows, as a real fabric's switches do.

Splitting. Job j's records are global records ``K_j .. K_j + C_j - 1`` carrying the job's own
collectives (its rank numbering) and job-local indices; its rank end times are those of global
ranks ``R_j .. R_j + n_j - 1``; its makespan is the largest of them.

Interference. ``interference`` also runs every job alone on the same fabric with the same config
and placement, and reports ``slowdown_j = makespan together / makespan alone`` (1.0 for a job
whose alone makespan is 0) and the same ratio per collective. Two jobs whose flows share no link
run exactly as they do alone (their rates are set by disjoint links), so their slowdown is 1 up
to floating-point round-off of the interleaved event times.

Captures: contention on shared fabric links (uplinks, spines, global links; NVLink and NIC links
too when two jobs share a server), routing decisions that depend on the other job's load. Ignores:
jobs that start at different times (all start at 0), NCCL's tuner seeing the other job (it does
not in reality either), storage and management traffic (``SimConfig.storage`` adds storage streams).

Traffic classes: with ``names`` each job's collectives carry the job's name as their group, and
``SimConfig.traffic`` (``simulator.traffic``) maps it to the job's class, so a high-priority job keeps its
max-min share of every link it crosses and a lower one takes what is left (or weighted shares, ETS).

Worked number: a 2-leaf leaf-spine of radix-5 switches at 4:1 (4 single-GPU servers per leaf,
one uplink each, NDR links of C = 49.68 GB/s), two 4-rank jobs of one 64 MiB ring all_reduce on
2 channels each. ``strided`` puts job 0 on servers 0, 2, 4, 6 and job 1 on 1, 3, 5, 7: each ring
crosses between the leaves once per direction (2 -> 4 and 6 -> 0), so each leaf's uplink carries
2 channels x 2 jobs = 4 ring chains. Alone a chain runs at min(C / 2, 20 GB/s per NCCL
connection) = 20 GB/s; together at C / 4 = 12.42 GB/s, so the bandwidth part of the time grows
1.61x: 2.70 ms alone (2.57 ms of bandwidth, 1.5 x 32 MiB plus a 1 MiB pipeline slice at 20 GB/s,
and NCCL's latency), 4.27 ms together, slowdown 1.58. ``contiguous`` keeps each job under its own leaf: no shared link,
slowdown 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topologies.checks import integer, reject
from topologies.routing import RouteCache
from topologies.topology import Topology
from workloads.collectives import Collective
from workloads.tasks import CommTask, Task, Workload

from ..api import simulate
from ..config import SimConfig
from ..placement import Placement
from ..results import CollectiveRecord, SimResult

Job = tuple[Workload, Placement]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobResult:
    """One job's share of a simulation: its collectives (its own rank numbering) and rank end times."""

    job: int
    placement: Placement
    collectives: tuple[CollectiveRecord, ...]
    rank_end_s: tuple[float, ...]

    @property
    def makespan_s(self) -> float:
        return max(self.rank_end_s) if self.rank_end_s else 0.0

    @property
    def times_s(self) -> np.ndarray:
        """Time of every collective (end - start), in the job's order."""
        return np.array([r.time_s for r in self.collectives], dtype=np.float64)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsResult:
    """Jobs simulated together: the merged simulation and its split per job."""

    result: SimResult
    jobs: tuple[JobResult, ...]

    @property
    def makespan_s(self) -> float:
        return self.result.makespan_s


def _ratio(together: float, alone: float) -> float:
    return together / alone if alone > 0 else 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Interference:
    """Jobs together and each alone on the same fabric; slowdown = together / alone."""

    together: JobsResult
    alone: tuple[JobResult, ...]

    @property
    def slowdowns(self) -> tuple[float, ...]:
        """Per job: makespan together / makespan alone (1.0 when the alone makespan is 0)."""
        return tuple(_ratio(t.makespan_s, a.makespan_s) for t, a in zip(self.together.jobs, self.alone))

    def collective_slowdowns(self, job: int) -> np.ndarray:
        """Per collective of ``job``: time together / time alone (1.0 where the alone time is 0)."""
        job = integer("job", job, low=0, high=len(self.alone) - 1)
        together, alone = self.together.jobs[job].times_s, self.alone[job].times_s
        return np.array([_ratio(t, a) for t, a in zip(together.tolist(), alone.tolist())], dtype=np.float64)

    def format(self) -> str:
        """A text table: per job its ranks, makespan alone and together, and the slowdown."""
        lines = [f"{'job':>4}{'ranks':>8}{'alone (us)':>14}{'together (us)':>16}{'slowdown':>10}"]
        for t, a, s in zip(self.together.jobs, self.alone, self.slowdowns):
            lines.append(
                f"{t.job:>4}{t.placement.nranks:>8}{a.makespan_s * 1e6:>14.2f}{t.makespan_s * 1e6:>16.2f}{s:>10.3f}"
            )
        return "\n".join(lines)


def _check_jobs(jobs) -> list[Job]:
    if not isinstance(jobs, (list, tuple)) or not jobs:
        raise reject("jobs", jobs, "a non-empty list of (Workload, Placement) pairs")
    for j, job in enumerate(jobs):
        if (
            not isinstance(job, tuple)
            or len(job) != 2
            or not isinstance(job[0], Workload)
            or not isinstance(job[1], Placement)
        ):
            raise reject(f"jobs[{j}]", type(job).__name__, "a (Workload, Placement) pair")  # a type: reprs are long
        workload, placement = job
        if placement.nranks != workload.nranks:
            raise ValueError(
                f"jobs[{j}]: the placement places {placement.nranks} ranks but the workload has "
                f"{workload.nranks}; expected equal counts"
            )
    owner: dict[int, int] = {}
    for j, (_, placement) in enumerate(jobs):
        for gpu in placement.rank_gpu:
            if gpu in owner:
                raise ValueError(
                    f"jobs[{j}]: GPU {gpu} is also used by jobs[{owner[gpu]}]; expected jobs on disjoint GPUs"
                )
            owner[gpu] = j
    return list(jobs)


def merge_jobs(topology: Topology, jobs: Sequence[Job]) -> tuple[Workload, Placement]:
    """One workload and one placement running every job (ranks and collectives offset per job). The one place
    that checks ``jobs``: (Workload, Placement) pairs of equal rank counts on disjoint GPUs."""
    jobs = _check_jobs(jobs)
    collectives: list[Collective] = []
    programs: list[tuple[Task, ...]] = []
    rank_gpu: list[int] = []
    passive: set[int] = set()
    for workload, placement in jobs:
        rank_offset, collective_offset = len(programs), len(collectives)
        passive.update(r + rank_offset for r in workload.passive)
        collectives.extend(
            dataclasses.replace(c, group=tuple(r + rank_offset for r in c.group)) for c in workload.collectives
        )
        programs.extend(
            tuple(
                dataclasses.replace(t, index=t.index + collective_offset) if isinstance(t, CommTask) else t
                for t in program
            )
            for program in workload.programs
        )
        rank_gpu.extend(placement.rank_gpu)
    merged = Workload(
        nranks=len(programs), collectives=tuple(collectives), programs=tuple(programs), passive=frozenset(passive)
    )
    return merged, Placement.custom(topology, rank_gpu)


def _split(result: SimResult, jobs: Sequence[Job]) -> tuple[JobResult, ...]:
    out, rank_offset, collective_offset = [], 0, 0
    for j, (workload, placement) in enumerate(jobs):
        records = tuple(
            dataclasses.replace(record, index=k, collective=c)
            for k, (record, c) in enumerate(
                zip(
                    result.collectives[collective_offset : collective_offset + len(workload.collectives)],
                    workload.collectives,
                )
            )
        )
        out.append(
            JobResult(
                job=j,
                placement=placement,
                collectives=records,
                rank_end_s=result.rank_end_s[rank_offset : rank_offset + workload.nranks],
            )
        )
        rank_offset += workload.nranks
        collective_offset += len(workload.collectives)
    return tuple(out)


def _job_groups(jobs: Sequence[Job], names: Sequence[str] | None) -> list[list[str]] | None:
    """Each job's collectives' group: the job's name (``names[j]``), which ``SimConfig.traffic`` maps to a class."""
    if names is None:
        return None
    if isinstance(names, str) or len(names) != len(jobs) or not all(isinstance(n, str) and n for n in names):
        raise reject("names", names, f"None or one job name per job ({len(jobs)})")
    return [[name] * len(workload.collectives) for (workload, _), name in zip(jobs, names)]


def simulate_jobs(
    topology: Topology,
    jobs: Sequence[Job],
    config: SimConfig | None = None,
    *,
    route_cache: RouteCache | None = None,
    names: Sequence[str] | None = None,
) -> JobsResult:
    """Simulate ``jobs`` (a list of (Workload, Placement) pairs) together on ``topology``; split per job.
    ``route_cache``: as ``simulate``'s. ``names``: each job's name, which ``config.traffic`` maps to the job's
    traffic class (``simulator.traffic``: a class named after the job or listing it with ``/group:``)."""
    workload, placement = merge_jobs(topology, jobs)
    groups = _job_groups(jobs, names)
    merged = None if groups is None else [g for job in groups for g in job]
    result = simulate(topology, workload, placement, config, route_cache=route_cache, groups=merged)
    return JobsResult(result=result, jobs=_split(result, jobs))


def interference(
    topology: Topology, jobs: Sequence[Job], config: SimConfig | None = None, *, names: Sequence[str] | None = None
) -> Interference:
    """``jobs`` together and each alone (same fabric, config and placement, ``names`` as ``simulate_jobs``'s):
    per-job slowdowns."""
    cache = RouteCache()  # one fabric: its routing tables built once for every run
    together = simulate_jobs(topology, jobs, config, route_cache=cache, names=names)
    groups = _job_groups(jobs, names)
    alone = []
    for j, (workload, placement) in enumerate(jobs):
        own = None if groups is None else groups[j]
        result = simulate(topology, workload, placement, config, route_cache=cache, groups=own)
        alone.append(
            JobResult(job=j, placement=placement, collectives=result.collectives, rank_end_s=result.rank_end_s)
        )
    return Interference(together=together, alone=tuple(alone))
