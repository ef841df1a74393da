"""``simulator.analysis``: task times, interval unions and the per-label breakdown.

``task_times`` walks each stream until a task must wait; ``task_times_naive`` (tests/naive.py) computes
the same max-plus recurrence with a plain work queue over (rank, stream) keys. Invariants of the recurrence
come first, then numbers derived by hand and the error messages, then bit-identical equality with the reference
(every start/end/arrival float, the collective times, NaN for a collective nobody runs, the deadlock message) on
seeded random workloads (several streams, ``after`` dependencies, collectives over random subsets, zero
durations, deadlocks) and on pipeline workloads built by ``workloads.training``. The per-label breakdown
and the per-rank ends, computed over all ranks at once, are compared bit for bit with their rank-by-rank
definitions (``interval_breakdown_naive``) on random timelines where ranks share program objects.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.analysis import interval_breakdown, interval_breakdowns, union_length_s
from simulator.engine.timeline import Timeline, task_times
from tests.naive import interval_breakdown_naive, task_times_naive
from workloads.collectives import Collective, CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.tasks import CommTask, ComputeTask, Workload
from workloads.training import StepCompute, training_step

# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def outcome(function, workload, durations):
    """The Timeline, or (exception type, message) for the errors task_times documents (the reference raises
    only the deadlock RuntimeError)."""
    try:
        return function(workload, durations)
    except (RuntimeError, ValueError) as error:
        return type(error), str(error)


def assert_bit_identical(got, want) -> None:
    if isinstance(want, tuple) and not isinstance(want, Timeline):
        assert got == want
        return
    assert isinstance(got, Timeline)
    assert len(got.start_s) == len(want.start_s) and len(got.end_s) == len(want.end_s)
    assert len(got.arrival_s) == len(want.arrival_s)
    for a, b in zip(
        got.start_s + got.end_s + got.arrival_s + (got.collective_start_s, got.collective_end_s),
        want.start_s + want.end_s + want.arrival_s + (want.collective_start_s, want.collective_end_s),
    ):
        assert a.dtype == b.dtype == np.float64 and a.shape == b.shape
        assert a.tobytes() == b.tobytes()  # bit-identical, NaN payloads included


def same_as_reference(workload, durations):
    want = outcome(task_times_naive, workload, durations)
    assert_bit_identical(outcome(task_times, workload, durations), want)
    return want


DURATIONS_S = (0.0, 0, 0.25, 0.5, 1.0, 0.1, 1e-9, 3e-3)  # zeros (float and int), dyadic ties, inexact sums


def random_duration(rng) -> float:
    if rng.random() < 0.3:
        return float(rng.random() * 1e-2)
    return DURATIONS_S[int(rng.integers(len(DURATIONS_S)))]


def random_workload(rng, *, nranks: int, steps: int, nstreams: int, unused: int = 0, swaps: int = 0) -> Workload:
    """Tasks appended in one global order (a compute on one rank, or a collective on all of a random subset),
    each on a random stream with random ``after`` among its rank's earlier tasks: that order is a schedule,
    so no deadlock. ``swaps`` exchanges the collectives of two CommTasks of a random rank (may deadlock);
    ``unused`` collectives are in the table but in no program (their times stay NaN)."""
    programs: list[list] = [[] for _ in range(nranks)]
    collectives: list[Collective] = []

    def options(rank):
        n = len(programs[rank])
        count = int(rng.integers(0, min(n, 3) + 1))
        after = tuple(sorted(rng.choice(n, size=count, replace=False).tolist())) if count else ()
        return {"stream": int(rng.integers(nstreams)), "after": after}

    for _ in range(steps):
        if rng.random() < 0.5:
            rank = int(rng.integers(nranks))
            programs[rank].append(ComputeTask(duration_s=random_duration(rng), **options(rank)))
        else:
            size = int(rng.integers(1, nranks + 1))
            group = tuple(rng.permutation(nranks)[:size].tolist())
            index = len(collectives)
            collectives.append(Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=group))
            for rank in group:
                programs[rank].append(CommTask(index=index, **options(rank)))
    for _ in range(unused):
        collectives.append(Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8, group=(0,)))
    for _ in range(swaps):
        rank = int(rng.integers(nranks))
        comms = [p for p, t in enumerate(programs[rank]) if isinstance(t, CommTask)]
        if len(comms) >= 2:
            p, q = rng.choice(comms, size=2, replace=False).tolist()
            a, b = programs[rank][p], programs[rank][q]
            programs[rank][p] = dataclasses.replace(a, index=b.index)
            programs[rank][q] = dataclasses.replace(b, index=a.index)
    return Workload(nranks=nranks, collectives=tuple(collectives), programs=tuple(tuple(p) for p in programs))


def shared_copies(base: Workload, copies: int) -> Workload:
    """``copies`` ranks per rank of ``base`` running the very same program object, each collective's group
    widened to every copy of its members (so the shared programs stay valid)."""
    n = base.nranks
    collectives = tuple(
        dataclasses.replace(c, group=tuple(r + n * j for j in range(copies) for r in c.group)) for c in base.collectives
    )
    return Workload(
        nranks=n * copies, collectives=collectives, programs=tuple(base.programs[r % n] for r in range(n * copies))
    )


def random_timeline(rng, workload: Workload) -> Timeline:
    """Any [start, end] per task, rank by rank (ranks sharing a program get different times): starts on a
    coarse grid (ties), ends equal, after or before the start (empty and reversed intervals)."""
    rows = []
    for program in workload.programs:
        start = rng.integers(0, 6, len(program)) * 0.25 + (rng.random(len(program)) < 0.3) * rng.random(len(program))
        rows.append((start, start + rng.choice([0.0, 0.25, 0.5, 1.5, -0.25], len(program))))
    return Timeline(
        start_s=tuple(r[0] for r in rows),
        end_s=tuple(r[1] for r in rows),
        arrival_s=tuple(r[0] for r in rows),
        collective_start_s=np.zeros(len(workload.collectives)),
        collective_end_s=np.zeros(len(workload.collectives)),
    )


def random_collective_times(rng, workload):
    return [random_duration(rng) for _ in workload.collectives]


def ar(*group):
    return Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8, group=tuple(group))


# --------------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_max_plus_invariants_on_random_workloads(seed):
    rng = np.random.default_rng(seed)
    w = random_workload(rng, nranks=int(rng.integers(1, 7)), steps=40, nstreams=3, unused=1)
    times = random_collective_times(rng, w)
    t = task_times(w, times)
    used = {task.index for program in w.programs for task in program if isinstance(task, CommTask)}
    arrival = {i: [] for i in used}
    for rank, program in enumerate(w.programs):
        start, end = t.start_s[rank], t.end_s[rank]
        assert start.shape == end.shape == (len(program),)
        previous: dict[int, int] = {}
        for position, task in enumerate(program):
            # ready = max(end of the stream's previous task, ends of ``after``), 0 s for a stream's first task
            ready = max(
                [0.0] + [end[previous[s]] for s in (task.stream,) if s in previous] + [end[a] for a in task.after]
            )
            assert t.arrival_s[rank][position] == ready
            if isinstance(task, ComputeTask):
                assert start[position] == ready and end[position] == ready + task.duration_s
            else:
                arrival[task.index].append(ready)
                assert start[position] == t.collective_start_s[task.index] >= ready
                assert end[position] == t.collective_end_s[task.index]
            previous[task.stream] = position
    for i, ready in arrival.items():
        # a collective starts when its last member arrives and lasts its given duration
        assert len(ready) == w.collectives[i].nranks
        assert t.collective_start_s[i] == max(ready)
        assert t.collective_end_s[i] == t.collective_start_s[i] + times[i]
    unused = [i for i in range(len(w.collectives)) if i not in used]
    assert unused and np.isnan(t.collective_start_s[unused]).all() and np.isnan(t.collective_end_s[unused]).all()


def test_free_network_never_slower_and_durations_only_add():
    # max-plus is monotone: 0 s collectives give a makespan no larger than any other durations
    rng = np.random.default_rng(7)
    for _ in range(10):
        w = random_workload(rng, nranks=4, steps=30, nstreams=2)
        assert task_times(w).makespan_s <= task_times(w, random_collective_times(rng, w)).makespan_s


# --------------------------------------------------------------------------------------------------
# numbers by hand
# --------------------------------------------------------------------------------------------------


def test_task_times_by_hand():
    w = Workload(
        nranks=2,
        collectives=(ar(0, 1),),
        programs=(
            (ComputeTask(duration_s=1.0), CommTask(index=0), ComputeTask(duration_s=0.5)),
            (ComputeTask(duration_s=2.0), CommTask(index=0, stream=1, after=(0,)), ComputeTask(duration_s=0.1)),
        ),
    )
    t = task_times(w, [0.25])
    # rank 1 arrives at 2.0 (after its compute), rank 0 at 1.0: the collective runs 2.0 .. 2.25
    assert t.collective_start_s[0] == 2.0 and t.collective_end_s[0] == 2.25
    assert list(t.start_s[0]) == [0.0, 2.0, 2.25] and t.end_s[0][2] == 2.75
    # rank 1's last compute is on stream 0 after its first compute: it overlaps the collective (stream 1)
    assert list(t.start_s[1]) == [0.0, 2.0, 2.0] and t.end_s[1][2] == pytest.approx(2.1)
    assert t.makespan_s == 2.75
    assert task_times(w).makespan_s == 2.5  # free network: 2.0 + 0.5


def test_two_streams_by_hand():
    # rank 0: compute 1 s on stream 0 (0 .. 1), its collective on stream 1 after it (arrives at 1), compute
    # 0.5 s on stream 0 (1 .. 1.5, overlapping). rank 1 (second rank of a 3-task program, stream 0): compute
    # 2 s (0 .. 2), arrives at 2. The collective runs max(1, 2) = 2 .. 2 + 0.25 = 2.25; collective 1 is in
    # no program: NaN. Rank 2 has an empty program.
    w = Workload(
        nranks=3,
        collectives=(ar(0, 1), ar(0, 2)),
        programs=(
            (ComputeTask(duration_s=1.0), CommTask(index=0, stream=1, after=(0,)), ComputeTask(duration_s=0.5)),
            (ComputeTask(duration_s=2.0), CommTask(index=0)),
            (),
        ),
    )
    t = task_times(w, [0.25, 1.0])
    assert t.start_s[0].tolist() == [0.0, 2.0, 1.0] and t.end_s[0].tolist() == [1.0, 2.25, 1.5]
    assert t.start_s[1].tolist() == [0.0, 2.0] and t.end_s[1].tolist() == [2.0, 2.25]
    assert t.start_s[2].shape == t.end_s[2].shape == (0,)
    assert t.collective_start_s[0] == 2.0 and t.collective_end_s[0] == 2.25
    assert np.isnan(t.collective_start_s[1]) and np.isnan(t.collective_end_s[1])
    assert t.makespan_s == 2.25
    same_as_reference(w, [0.25, 1.0])


def test_pipeline_by_hand():
    # two stages, 3 micro-batches, forward 1 s then send (p2p pair collective, 0.5 s) on stage 0; stage 1
    # receives then computes 2 s. Stage 0's forwards and sends share its stream 0 (forward j + 1 starts when
    # send j ends); a send starts when the later stage arrives, stage 1 (after its compute) from send 1 on:
    #   send 0: stage 0 ready at 1, stage 1 at 0 -> 1 .. 1.5; forward 1 1.5 .. 2.5; compute 1.5 .. 3.5
    #   send 1: stage 0 ready at 2.5, stage 1 at 3.5 -> 3.5 .. 4; forward 2 4 .. 5; compute 4 .. 6
    #   send 2: stage 0 ready at 5, stage 1 at 6 -> 6 .. 6.5; compute 6.5 .. 8.5
    sends = tuple(ar(0, 1) for _ in range(3))
    stage0 = tuple(task for j in range(3) for task in (ComputeTask(duration_s=1.0), CommTask(index=j)))
    stage1 = tuple(task for j in range(3) for task in (CommTask(index=j), ComputeTask(duration_s=2.0)))
    w = Workload(nranks=2, collectives=sends, programs=(stage0, stage1))
    t = task_times(w, [0.5] * 3)
    assert t.collective_start_s.tolist() == [1.0, 3.5, 6.0]
    assert t.start_s[0].tolist() == [0.0, 1.0, 1.5, 3.5, 4.0, 6.0]
    assert t.arrival_s[0].tolist() == [0.0, 1.0, 1.5, 2.5, 4.0, 5.0]
    assert t.end_s[1].tolist() == [1.5, 3.5, 4.0, 6.0, 6.5, 8.5]
    assert t.makespan_s == 8.5
    same_as_reference(w, [0.5] * 3)


def test_union_length():
    # [0, 2] and [3, 4]: 3 s
    assert union_length_s([(0, 1), (0.5, 2), (3, 4), (3.5, 3.5)]) == 3.0
    assert union_length_s([]) == 0.0


def test_interval_breakdown_by_hand():
    # rank 0: compute 0 .. 1, collective 0 ("a", 8 B) 1 .. 3 on stream 1 beside compute 1 .. 2, then collective
    # 1 ("b", 16 B) 3 .. 4 blocking stream 0. rank 1: collective 0 (arrives at 0), then collective 2 ("a",
    # 32 B, its own) 3 .. 3.5. Time per label = the largest per-rank union: "a" rank 0 [1, 3] = 2 s, rank 1
    # [1, 3] + [3, 3.5] = 2.5 s -> 2.5 s; "b" 1 s. Exposed on rank 0 (compute [0, 2]): "a" [2, 3] = 1 s, "b" 1 s.
    w = Workload(
        nranks=2,
        collectives=(
            ar(0, 1),
            Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=16, group=(0,)),
            Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=32, group=(1,)),
        ),
        programs=(
            (
                ComputeTask(duration_s=1.0),
                CommTask(index=0, stream=1, after=(0,)),
                ComputeTask(duration_s=1.0),
                CommTask(index=1, after=(1,)),
            ),
            (CommTask(index=0), CommTask(index=2)),
        ),
    )
    t = task_times(w, [2.0, 1.0, 0.5])
    assert t.makespan_s == 4.0
    out = interval_breakdown(w, t, ["a", "b", "a"], focus_rank=0, weights=[1, 1, 3])
    assert out == {
        "a": {"count": 4, "nbytes": 8 + 3 * 32, "time_s": 2.5, "exposed_s": 1.0},
        "b": {"count": 1, "nbytes": 16, "time_s": 1.0, "exposed_s": 1.0},
    }
    assert interval_breakdown(w, t, ["a", "b", "a"])["a"]["exposed_s"] == 0.0  # no focus rank


def test_interval_breakdowns_is_one_breakdown_per_labelling():
    # the hand-derived workload above, labelled twice: each labelling's breakdown is interval_breakdown's
    w = Workload(
        nranks=2,
        collectives=(ar(0, 1), ar(0), ar(1)),
        programs=(
            (
                ComputeTask(duration_s=1.0),
                CommTask(index=0, stream=1, after=(0,)),
                ComputeTask(duration_s=1.0),
                CommTask(index=1, after=(1,)),
            ),
            (CommTask(index=0), CommTask(index=2)),
        ),
    )
    t = task_times(w, [2.0, 1.0, 0.5])
    labelings = {"x": ["a", "b", "a"], "all": ["comm"] * 3}
    out = interval_breakdowns(w, t, labelings, focus_rank=0)
    assert out == {name: interval_breakdown(w, t, labels, focus_rank=0) for name, labels in labelings.items()}
    # one label for all: rank 0's collectives cover [1, 4] (3 s), rank 1's [1, 3] + [3, 3.5]: 3 s on the busiest;
    # exposed on rank 0 beside compute [0, 2]: [2, 4] = 2 s
    assert out["all"] == {"comm": {"count": 3, "nbytes": 24, "time_s": 3.0, "exposed_s": 2.0}}


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------


def test_crossed_collectives_deadlock_message():
    # rank 0 waits in collective 0, rank 1 in collective 1: both streams stuck, rank 0's reported first
    w = Workload(
        nranks=2,
        collectives=(ar(0, 1), ar(0, 1)),
        programs=((CommTask(index=0), CommTask(index=1)), (CommTask(index=1), CommTask(index=0))),
    )
    message = "task_times: rank 0 stream 0 never finishes task 'comm' (deadlock in the programs; 2 stream(s) stuck)"
    assert outcome(task_times, w, None) == (RuntimeError, message)
    same_as_reference(w, None)


def test_deadlock_reported_on_first_stuck_stream_after_empty_rank():
    # rank 0 is empty; rank 1 finishes stream 2 but waits on stream 3 in collective 0 (group 1, 2); rank 2
    # waits in collective 1 whose other member, rank 3, has no program: streams (1, 3) and (2, 0) are stuck
    w = Workload(
        nranks=4,
        collectives=(ar(1, 2), ar(2, 3)),
        programs=(
            (),
            (ComputeTask(duration_s=1.0, stream=2), CommTask(index=0, stream=3, after=(0,), name="grad")),
            (CommTask(index=1), CommTask(index=0)),
            (),
        ),
    )
    message = "task_times: rank 1 stream 3 never finishes task 'grad' (deadlock in the programs; 2 stream(s) stuck)"
    assert outcome(task_times, w, [1.0, 1.0]) == (RuntimeError, message)
    same_as_reference(w, [1.0, 1.0])


@pytest.mark.parametrize("durations", [[1.0], [1.0, -1.0], [1.0, np.nan], [np.inf, 0.0], [[1.0, 2.0]]])
def test_bad_durations_message(durations):
    w = Workload(nranks=2, collectives=(ar(0, 1), ar(0, 1)), programs=((CommTask(index=0), CommTask(index=1)),) * 2)
    assert outcome(task_times, w, durations) == (ValueError, "collective_time_s: expected 2 finite durations >= 0")


@pytest.mark.parametrize("labels", [["a", "b"], ["a", "b", "a", "b"]])
def test_labels_of_the_wrong_length_are_refused(labels):
    # three collectives need three labels, in either entry point; too few or too many is an error, not a zip
    w = Workload(nranks=2, collectives=(ar(0, 1),) * 3, programs=(tuple(CommTask(index=i) for i in range(3)),) * 2)
    t = task_times(w)
    with pytest.raises(
        ValueError,
        match=rf"^labels: {len(labels)} values are not allowed; expected one per "
        r"collective \(3\)$",
    ):
        interval_breakdown(w, t, labels)
    with pytest.raises(
        ValueError,
        match=rf"^labelings\['kind'\]: {len(labels)} values are not allowed; expected "
        r"one per collective \(3\)$",
    ):
        interval_breakdowns(w, t, {"all": ["comm"] * 3, "kind": labels})


@pytest.mark.parametrize("weights", [[1, 1], [1, 1, 1, 1]])
def test_weights_of_the_wrong_length_are_refused(weights):
    w = Workload(nranks=2, collectives=(ar(0, 1),) * 3, programs=(tuple(CommTask(index=i) for i in range(3)),) * 2)
    with pytest.raises(
        ValueError,
        match=rf"^weights: {len(weights)} values are not allowed; expected one per "
        r"collective \(3\)$",
    ):
        interval_breakdowns(w, task_times(w), {"all": ["comm"] * 3}, weights=weights)


def test_not_a_workload():
    with pytest.raises(ValueError, match="workload: .* expected a workloads.tasks.Workload"):
        task_times("w")


# --------------------------------------------------------------------------------------------------
# bit-identical to the reference
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_random_workloads_match_reference(seed):
    rng = np.random.default_rng(1000 + seed)
    w = random_workload(
        rng,
        nranks=int(rng.integers(1, 9)),
        steps=int(rng.integers(1, 80)),
        nstreams=int(rng.integers(1, 4)),
        unused=int(rng.integers(0, 2)),
    )
    assert isinstance(same_as_reference(w, None), Timeline)  # built from a schedule: never deadlocks
    same_as_reference(w, random_collective_times(rng, w))


def test_random_deadlocks_match_reference():
    rng = np.random.default_rng(2024)
    kinds = {"timeline": 0, "deadlock": 0}
    for _ in range(60):
        w = random_workload(
            rng,
            nranks=int(rng.integers(2, 6)),
            steps=int(rng.integers(5, 30)),
            nstreams=int(rng.integers(1, 3)),
            swaps=1,
        )
        want = same_as_reference(w, random_collective_times(rng, w))
        kinds["deadlock" if isinstance(want, tuple) and want[0] is RuntimeError else "timeline"] += 1
    assert kinds["deadlock"] >= 5 and kinds["timeline"] >= 5  # both outcomes were compared


@pytest.mark.parametrize("seed", range(24))
def test_ranks_sharing_program_objects_match_reference(seed):
    # task_times walks one rank per distinct program object and copies its times: the reference walks every
    # rank. Deadlocks (swapped collectives) must name the same first rank and count every stuck stream.
    rng = np.random.default_rng(5000 + seed)
    base = random_workload(
        rng,
        nranks=int(rng.integers(1, 6)),
        steps=int(rng.integers(1, 50)),
        nstreams=int(rng.integers(1, 3)),
        unused=int(rng.integers(0, 2)),
        swaps=seed % 2,
    )
    w = shared_copies(base, int(rng.integers(2, 4)))
    same_as_reference(w, None)
    same_as_reference(w, random_collective_times(rng, w))


def test_shared_deadlock_message_counts_every_rank():
    # ranks 0 and 1 share a program waiting in collective 0 then 1; rank 2 waits in 1 then 0: all stuck, and
    # the message counts 3 streams (two of them walked once) and names rank 0
    crossed = (CommTask(index=0), CommTask(index=1))
    w = Workload(
        nranks=3,
        collectives=(ar(0, 1, 2), ar(0, 1, 2)),
        programs=(crossed, crossed, (CommTask(index=1), CommTask(index=0))),
    )
    with pytest.raises(
        RuntimeError,
        match=r"rank 0 stream 0 never finishes task 'comm' \(deadlock in the programs; "
        r"3 stream\(s\) stuck\)",
    ):
        task_times(w)
    same_as_reference(w, None)


def test_a_rank_cannot_take_part_twice_in_one_collective():
    # the stream walk counts one arrival per member: Workload rejects a program that joins twice
    with pytest.raises(ValueError, match=r"programs\[0\]: collective 0 appears twice"):
        Workload(
            nranks=2,
            collectives=(ar(0, 1),),
            programs=((CommTask(index=0), CommTask(index=0, stream=1)), (CommTask(index=0),)),
        )


def test_symmetric_data_parallel_workload_matches_reference():
    # the shape of a large data-parallel phase: every rank all-reduces on stream 1 then computes after it,
    # groups of 8 ranks; equal program lengths
    nranks, size = 256, 8
    collectives = tuple(ar(*range(g, g + size)) for g in range(0, nranks, size))
    programs = tuple(
        (CommTask(index=r // size, stream=1), ComputeTask(duration_s=1e-3 * (r % 5), after=(0,))) for r in range(nranks)
    )
    w = Workload(nranks=nranks, collectives=collectives, programs=programs)
    t = same_as_reference(w, [1e-4 * (i + 1) for i in range(len(collectives))])
    # group g's collective: all arrive at 0, so it runs 0 .. 1e-4 (g + 1); the compute follows it
    assert t.end_s[nranks - 1][1] == 1e-4 * (nranks // size) + 1e-3 * ((nranks - 1) % 5)


def test_no_tasks_at_all():
    w = Workload(nranks=3, collectives=(ar(0, 1),), programs=((), (), ()))
    t = same_as_reference(w, None)
    assert [s.shape for s in t.start_s] == [(0,)] * 3 and t.makespan_s == 0.0
    assert np.isnan(t.collective_start_s).all()


def tiny(layers: int):
    return custom_gpt(layers=layers, hidden=64, heads=4, vocab=128, seq_len=32)


@pytest.mark.parametrize(
    "schedule, pp, vp, m, granularity",
    [
        ("1f1b", 4, 1, 8, "chunk"),
        ("1f1b", 3, 1, 5, "layer"),
        ("gpipe", 2, 1, 3, "chunk"),
        ("interleaved", 2, 2, 4, "chunk"),
        ("interleaved", 3, 2, 6, "layer"),
    ],
)
def test_pipeline_workloads_match_reference(schedule, pp, vp, m, granularity):
    layers = 2 * pp * vp
    model = tiny(layers)
    spec = ParallelismSpec(tp=2, pp=pp, dp=2, vp=vp, schedule=schedule, global_batch=2 * m)
    compute = StepCompute.uniform(layers=layers, forward_s=1e-3, backward_s=2.1e-3)
    w = training_step(model, spec, compute, granularity=granularity).workload
    rng = np.random.default_rng(pp * 100 + m)
    assert isinstance(same_as_reference(w, None), Timeline)
    same_as_reference(w, rng.random(len(w.collectives)) * 1e-3)
    same_as_reference(w, np.zeros(len(w.collectives)))


@pytest.mark.parametrize("seed", range(16))
def test_breakdown_and_rank_ends_match_their_rank_by_rank_definitions(seed):
    rng = np.random.default_rng(3000 + seed)
    base = random_workload(
        rng,
        nranks=int(rng.integers(1, 6)),
        steps=int(rng.integers(1, 60)),
        nstreams=int(rng.integers(1, 3)),
        unused=int(rng.integers(0, 2)),
    )
    w = shared_copies(base, int(rng.integers(1, 4)))
    alphabet = ["a", "b", "c"][: int(rng.integers(1, 4))]
    labelings = {name: [alphabet[int(rng.integers(len(alphabet)))] for _ in w.collectives] for name in ("x", "y")}
    labelings["all"] = ["comm"] * len(w.collectives)
    weights = rng.integers(1, 4, len(w.collectives)).tolist()
    for t in (task_times(w, random_collective_times(rng, w)), random_timeline(rng, w)):
        focus = int(rng.integers(w.nranks))
        got = interval_breakdowns(w, t, labelings, focus_rank=focus, weights=weights)
        want = {
            name: interval_breakdown_naive(w, t, labels, focus_rank=focus, weights=weights)
            for name, labels in labelings.items()
        }
        assert repr(got) == repr(want)  # the same floats, bit for bit
        ends = [float(e.max()) if e.size else 0.0 for e in t.end_s]
        assert t.rank_end_s.tolist() == ends
        assert t.makespan_s == max((e for e, row in zip(ends, t.end_s) if row.size), default=0.0)


@pytest.mark.parametrize("lengths", [(2, 2, 2), (2, 1, 1)])
def test_timeline_arrays_are_read_only(lengths):
    # rows of equal and of unequal lengths; task_times hands its flat arrays over (the rows are views of them),
    # flat() of a Timeline built from rows keeps concatenated copies: none of them can be written
    tail = (ComputeTask(duration_s=1.0),)
    w = Workload(
        nranks=3, collectives=(ar(0, 1, 2),), programs=tuple((CommTask(index=0),) + tail[: n - 1] for n in lengths)
    )
    t = task_times(w, [0.5])
    rows_only = Timeline(
        start_s=tuple(map(np.copy, t.start_s)),
        end_s=tuple(map(np.copy, t.end_s)),
        arrival_s=t.arrival_s,
        collective_start_s=t.collective_start_s,
        collective_end_s=t.collective_end_s,
    )
    for array in t.start_s + t.end_s + t.arrival_s + t.flat() + rows_only.flat():
        assert not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        t.end_s[0][0] = 5.0
    assert rows_only.start_s[0].flags.writeable  # the caller's rows are left as they are


def test_rank_ends_with_empty_programs_first_and_last():
    # ranks 0 and 3 run nothing; ranks 1 and 2 end at 1.5 and 2.0
    w = Workload(
        nranks=4,
        collectives=(),
        programs=((), (ComputeTask(duration_s=1.5),), (ComputeTask(duration_s=0.5), ComputeTask(duration_s=1.5)), ()),
    )
    t = task_times(w)
    assert t.rank_end_s.tolist() == [0.0, 1.5, 2.0, 0.0] and t.makespan_s == 2.0
    rebuilt = Timeline(
        start_s=t.start_s,
        end_s=t.end_s,
        arrival_s=t.arrival_s,  # rows only, nothing
        collective_start_s=t.collective_start_s,
        collective_end_s=t.collective_end_s,
    )  # handed over
    assert rebuilt.rank_end_s.tolist() == [0.0, 1.5, 2.0, 0.0] and rebuilt.makespan_s == 2.0
