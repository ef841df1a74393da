"""Per-rank replay: one SimPy process per rank walks its program.

* one process per (rank, stream) runs that stream's tasks in program order; a task first waits
  for the tasks of its rank named in its ``after`` (cross-stream dependencies);
* ComputeTask -> ``timeout(duration)``;
* a LinkEvent (``SimConfig.link_events``) at its time scales the link's capacity; a failure also
  calls ``on_link_failed`` (later routes avoid the link), and the Fabric moves running flows that
  cross it onto their transfer's fresh paths (the same flows, routed again) with the bytes they have left.
* CommTask -> arrive at the collective's rendezvous; when the group's last rank arrives (passive ranks,
  ``Workload.passive``, take part without arriving) the
  collective's schedule runs (the launch overhead, then each step: ``Fabric.transfer`` of its flows,
  which waits the step's latency, below, and then moves them) and every member resumes when it ends.

The engine never routes: ``route(step, schedule)`` (``simulator.flows.Routes``, wired by
``simulator.api``) gives each step's flows as flat routed arrays (``simulator.flows.NetworkFlows``:
links, weights, wire bytes, caps, the step's latency), and ``on_link_failed(link)`` makes later
``route`` calls avoid a failed link.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, cast

import numpy as np
import simpy
from simpy.events import URGENT

from workloads.tasks import CommTask, ComputeTask, Workload

from ..flows import NetworkFlows
from ..network.base import FluidNetwork
from ..schedule import Schedule, Step
from .fabric import Fabric

if TYPE_CHECKING:
    from ..config import LinkEvent

#: ``route(step, schedule)``: the step's flows routed into flat arrays (memoised by its owner)
Route = Callable[[Step, Schedule], NetworkFlows]


@dataclass(frozen=True, slots=True)
class Background:
    """Routed flows that are no collective (a checkpoint or storage stream): at ``time_s`` flow i starts over the
    ``counts[i]`` consecutive entries of ``links`` (weights 1) with its wire bytes and cap, in ``traffic_class``."""

    time_s: float
    links: np.ndarray
    counts: np.ndarray
    wire_bytes: np.ndarray
    caps_bytes_per_s: np.ndarray
    traffic_class: int = 0


#: a SimPy process: yields the events it waits for
_Process = Generator[simpy.Event, object, None]


@dataclass(slots=True)
class _Rendezvous:
    waiting: int
    done: simpy.Event
    start_s: float = 0.0
    end_s: float = 0.0


class _Collectives:
    """Runs each collective once its group has arrived: the launch overhead, then each step's transfer, each step
    started by the end of the one before. Callbacks on the events it waits for, not a SimPy process: they run when
    a process would resume, without the process's start-up and its end event, which nobody awaits."""

    def __init__(
        self,
        env: simpy.Environment,
        fabric: Fabric,
        meetings: list[_Rendezvous],
        schedules: list[Schedule],
        route: Route,
        launch_overhead_s: float,
        rerouted: Callable[[Step, Schedule], tuple[np.ndarray, np.ndarray, np.ndarray]] | None,
        classes: Sequence[int],
    ):
        self.env, self.fabric, self.meetings, self.schedules = env, fabric, meetings, schedules
        self.route, self.launch_overhead_s, self.rerouted = route, launch_overhead_s, rerouted
        self.classes = classes

    def start(self, index: int) -> None:
        """Collective ``index`` starts once the events already due now have run, as a new SimPy process would:
        an urgent event at the current time."""
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(partial(self._execute, index))
        self.env.schedule(event, priority=URGENT)

    def _execute(self, index: int, _started: simpy.Event) -> None:
        self.meetings[index].start_s = self.env.now
        if self.launch_overhead_s > 0:
            self.env.timeout(self.launch_overhead_s).callbacks.append(partial(self._step, index, 0))
        else:
            self._step(index, 0)

    def _step(self, index: int, k: int, _previous: simpy.Event | None = None) -> None:
        """Step ``k`` of collective ``index``'s schedule transfers its flows; its end runs step ``k + 1``."""
        schedule = self.schedules[index]
        if k == len(schedule.steps):
            meeting = self.meetings[index]
            meeting.end_s = self.env.now
            meeting.done.succeed()
            return
        step = schedule.steps[k]
        flows = self.route(step, schedule)
        self.fabric.transfer(
            flows.links,
            flows.link_weights,
            flows.counts,
            flows.wire_bytes,
            flows.caps_bytes_per_s,
            flows.latency_s,
            fill_bytes=flows.fill_bytes,
            rebuild=None if self.rerouted is None else partial(self.rerouted, step, schedule),
            traffic_class=self.classes[index] if self.classes else 0,
        ).callbacks.append(partial(self._transferred, index, k, self.env.now, flows.latency_s))

    def _transferred(self, index: int, k: int, begin_s: float, latency_s: float, _transfer: simpy.Event) -> None:
        """Step ``k``'s flows have arrived; the busiest network proxy thread may still be serving its last chunks
        (Step.proxy_s): step ``k + 1`` runs when it is done."""
        proxy_s = self.schedules[index].steps[k].proxy_s
        wait_s = begin_s + latency_s + proxy_s - self.env.now
        if proxy_s > 0 and wait_s > 0:
            self.env.timeout(wait_s).callbacks.append(partial(self._step, index, k + 1))
        else:
            self._step(index, k + 1)


def run(
    *,
    network: FluidNetwork,
    workload: Workload,
    schedules: list[Schedule],
    route: Route,
    on_link_failed: Callable[[int], None] | None = None,
    launch_overhead_s: float = 0.0,
    task_ranks: tuple[int, ...] | None = (),
    link_events: Sequence[LinkEvent] = (),
    link_groups: np.ndarray | None = None,
    classes: Sequence[int] = (),
    background: Sequence[Background] = (),
) -> tuple[list[tuple[float, float]], list[float], dict[int, np.ndarray], list[tuple[float, np.ndarray]]]:
    """Replay ``workload`` on a fresh SimPy environment whose fabric drives ``network``.

    ``schedules[i]`` is collective i's; ``route(step, schedule)`` gives a step's routed flows when the
    step runs (and again, for a transfer caught by a link failure, after ``on_link_failed(link)``,
    which every failure in ``link_events`` needs).

    Returns per-collective (start_s, end_s), per-rank end times, and for the ranks in
    ``task_ranks`` (None: every rank) an array (tasks x 2) of each task's start and end time
    (start = when its stream and dependencies let it begin; a collective task then waits for its
    group, which is part of its time), and with ``link_groups`` (a group index per link) each group's
    throughput over time: (time_s, bytes/s per group from then on), ending with zeros when the last flow ends.
    ``classes[i]`` (empty: all 0) is the traffic class of collective i's flows (the network model was given the
    classes' policy); each ``background`` stream's flows join the network at its time, in its class, and the
    replay ends when they have drained too.
    """
    env = simpy.Environment()
    fabric = Fabric(env, network, link_groups=link_groups)
    # a collective starts when its members that arrive have (passive ranks take part without arriving)
    meetings = [_Rendezvous(waiting=workload.arrivals(i), done=env.event()) for i in range(len(workload.collectives))]
    rank_end = [0.0] * workload.nranks
    recorded = range(workload.nranks) if task_ranks is None else task_ranks
    task_times = {rank: np.full((len(workload.programs[rank]), 2), np.nan) for rank in recorded}

    if on_link_failed is None and any(event.scale <= 0 for event in link_events):
        raise ValueError("link_events: a link failure needs on_link_failed, the reroute callback")

    def rerouted(step: Step, schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh paths of a step's flows (links, weights, counts), for a transfer caught by a link failure."""
        fresh = route(step, schedule)
        return fresh.links, fresh.link_weights, fresh.counts

    def link_event(event: LinkEvent) -> _Process:
        yield env.timeout(event.time_s)
        if event.scale > 0:
            fabric.scale_link(event.link, event.scale)
            return
        assert on_link_failed is not None  # checked above: a failure needs it
        on_link_failed(event.link)
        fabric.fail_link(event.link)

    for event in sorted(link_events, key=lambda e: (e.time_s, e.link)):
        env.process(link_event(event))

    def storage_stream(flows: Background) -> _Process:
        yield env.timeout(flows.time_s)
        yield fabric.transfer(
            flows.links,
            np.ones(flows.links.shape[0]),
            flows.counts,
            flows.wire_bytes,
            flows.caps_bytes_per_s,
            0.0,
            fill_bytes=np.zeros(flows.counts.shape[0]),
            rebuild=None,
            traffic_class=flows.traffic_class,
        )

    for flows in background:
        env.process(storage_stream(flows))
    collectives = _Collectives(
        env, fabric, meetings, schedules, route, launch_overhead_s, rerouted if link_events else None, classes
    )

    def stream_process(
        rank: int, positions: list[int], finished: list[bool], awaited: dict[int, simpy.Event]
    ) -> _Process:
        program = workload.programs[rank]
        times = task_times.get(rank)
        for position in positions:
            task = program[position]
            if task.after:
                waits = []
                for a in task.after:
                    if not finished[a]:
                        event = awaited.get(a)
                        if event is None:
                            event = awaited[a] = env.event()
                        waits.append(event)
                if waits:
                    yield waits[0] if len(waits) == 1 else env.all_of(waits)
            if times is not None:
                times[position, 0] = env.now
            if isinstance(task, ComputeTask):
                # simulate() refuses a workload with unresolved tasks before the replay starts
                yield env.timeout(cast(float, task.duration_s))
            elif isinstance(task, CommTask):
                meeting = meetings[task.index]
                meeting.waiting -= 1
                if meeting.waiting == 0:
                    collectives.start(task.index)
                yield meeting.done
            finished[position] = True
            waited = awaited.pop(position, None)
            if waited is not None:
                waited.succeed()
            if times is not None:
                times[position, 1] = env.now
            rank_end[rank] = max(rank_end[rank], env.now)

    for rank in range(workload.nranks):
        program = workload.programs[rank]
        # a task's end is an event only once another stream waits for it: one that nobody awaits would be
        # scheduled and processed for nothing (events are ordered by (time, priority, id), so leaving them out
        # keeps the order of every other)
        finished = [False] * len(program)
        awaited: dict[int, simpy.Event] = {}
        streams: dict[int, list[int]] = {}
        for position, task in enumerate(program):
            streams.setdefault(task.stream, []).append(position)
        for stream in sorted(streams):
            env.process(stream_process(rank, streams[stream], finished, awaited))
    env.run()
    unfinished = [i for i, m in enumerate(meetings) if not m.done.triggered]
    if unfinished:
        i = unfinished[0]
        raise RuntimeError(
            f"collective {i} ({workload.collectives[i].kind.value}) never started: "
            f"{meetings[i].waiting} rank(s) of its group never reached it (deadlock in the programs)"
        )
    for times in task_times.values():
        times.setflags(write=False)
    series = fabric.group_series
    if series and series[-1][1].any():
        series.append((fabric.last_s, np.zeros_like(series[-1][1])))
    return [(m.start_s, m.end_s) for m in meetings], rank_end, task_times, series
