"""``workloads.tasks.Workload`` validation. Ranks may share one program object (workloads.training builds equal
programs once); a shared program's tasks are checked once, its collectives' membership for every rank. Ranks
are checked in order, each rank's task errors (the first in program order) before its membership: an error
names the first rank holding a faulty program, or the rank outside a collective's group."""

from __future__ import annotations

import pytest

from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import CommTask, ComputeTask, Workload


def ar(*group: int) -> Collective:
    return Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8, group=tuple(group))


def test_a_shared_program_is_accepted_for_every_member():
    program = (ComputeTask(duration_s=1.0), CommTask(index=0, after=(0,)))
    w = Workload(nranks=3, collectives=(ar(0, 1, 2),), programs=(program,) * 3)
    assert [len(p) for p in w.programs] == [2, 2, 2]


def test_a_shared_program_checks_membership_rank_by_rank():
    # ranks 0 and 1 belong to collective 0, rank 2 runs the same program object but is not in its group
    program = (CommTask(index=0),)
    with pytest.raises(ValueError, match=r"Workload.programs\[2\]: rank 2 is not in the group of collective 0"):
        Workload(nranks=3, collectives=(ar(0, 1),), programs=(program,) * 3)


@pytest.mark.parametrize(
    "program, message",
    [
        (
            (ComputeTask(duration_s=1.0, after=(0,)),),
            r"Workload.programs\[1\]\[0\].after: \(0,\) names a task that is not earlier in the program; expected "
            r"indices < 0",
        ),
        ((CommTask(index=3),), r"Workload.programs\[1\]: collective index 3 does not exist"),
        (
            (CommTask(index=0), CommTask(index=0, stream=1)),
            r"Workload.programs\[1\]: collective 0 appears twice; expected each rank to take part in a collective once",
        ),
    ],
)
def test_task_errors_name_the_first_rank_holding_the_program(program, message):
    # rank 0 runs a valid program; ranks 1 and 2 share the faulty one: rank 1 is reported
    good = (CommTask(index=0),)
    with pytest.raises(ValueError, match=message):
        Workload(nranks=3, collectives=(ar(0, 1, 2),), programs=(good, program, program))


def test_equal_but_distinct_program_objects_are_each_checked():
    # the second program equals the first but is another object: its rank's membership is still checked
    with pytest.raises(ValueError, match=r"Workload.programs\[1\]: rank 1 is not in the group of collective 0"):
        Workload(nranks=2, collectives=(ar(0),), programs=((CommTask(index=0),), (CommTask(index=0),)))


def test_shared_programs_list_each_program_object_with_its_ranks():
    # ranks 0 and 2 run object a, rank 1 runs b, rank 3 runs c (equal to a, another object): three entries in
    # order of first rank, each with its ranks in increasing order
    a, b = (CommTask(index=0),), (ComputeTask(duration_s=1.0),)
    c = (CommTask(index=0),)
    w = Workload(nranks=4, collectives=(ar(0, 2, 3),), programs=(a, b, a, c))
    assert [program for program, _ in w.shared_programs] == [a, b, c]
    assert [program is expected for (program, _), expected in zip(w.shared_programs, (a, b, c))] == [True] * 3
    assert [ranks.tolist() for _, ranks in w.shared_programs] == [[0, 2], [1], [3]]
    assert not any(ranks.flags.writeable for _, ranks in w.shared_programs)
    # derived data: equality, hash and repr are those of the fields given
    same = Workload(nranks=4, collectives=(ar(0, 2, 3),), programs=(c, b, c, c))
    assert [ranks.tolist() for _, ranks in same.shared_programs] == [[0, 2, 3], [1]]
    assert same == w and hash(same) == hash(w)
    assert "shared_programs" not in repr(w)
