"""``workloads.tasks.Workload`` validation. Ranks may share one program object (training_step builds equal
programs once); a shared program's tasks are checked once, its collectives' membership for every rank, so
the checks must still name the first offending rank and position whichever rank first holds the object."""

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


@pytest.mark.parametrize("program, message", [
    ((ComputeTask(duration_s=1.0, after=(0,)),),
     r"Workload.programs\[1\]\[0\].after: \(0,\) names a task that is not earlier in the program; expected "
     r"indices < 0"),
    ((CommTask(index=3),), r"Workload.programs\[1\]: collective index 3 does not exist"),
    ((CommTask(index=0), CommTask(index=0, stream=1)),
     r"Workload.programs\[1\]: collective 0 appears twice; expected each rank to take part in a collective once"),
])
def test_task_errors_name_the_first_rank_holding_the_program(program, message):
    # rank 0 runs a valid program; ranks 1 and 2 share the faulty one: rank 1 is reported
    good = (CommTask(index=0),)
    with pytest.raises(ValueError, match=message):
        Workload(nranks=3, collectives=(ar(0, 1, 2),), programs=(good, program, program))


def test_equal_but_distinct_program_objects_are_each_checked():
    # the second program equals the first but is another object: its rank's membership is still checked
    with pytest.raises(ValueError, match=r"Workload.programs\[1\]: rank 1 is not in the group of collective 0"):
        Workload(nranks=2, collectives=(ar(0),), programs=((CommTask(index=0),), (CommTask(index=0),)))
