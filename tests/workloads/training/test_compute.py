"""workloads.training.compute: the work a compute task carries, its seconds on a StepCompute, resolution."""

from __future__ import annotations

import math

import pytest

from tests.workloads.shapes import gpt, moe
from tests.workloads.training.helpers import times
from workloads.parallelism import ParallelismSpec
from workloads.tasks import ComputeTask, Workload
from workloads.training import STREAM_DP, PassWork, StepCompute, resolve, training_step


def test_overlap_slowdown_stretches_the_overlapped_backward():
    model = gpt()
    spec = ParallelismSpec(dp=2, bucket_bytes=16 * 1024)
    tw = training_step(model, spec, times(model, overlap_slowdown=0.25))
    program = tw.workload.programs[0]
    first_bucket = min(i for i, t in enumerate(program) if t.stream == STREAM_DP)
    for i, task in enumerate(program):
        if isinstance(task, ComputeTask) and "layer" in task.name:
            base = 1e-3 if task.name.startswith("fwd") else 2e-3
            # compute issued after the first bucket runs beside it: 1.25 x its time
            assert task.duration_s == pytest.approx(base * (1.25 if i > first_bucket else 1.0))


def test_step_compute_seconds_are_floats_and_zero_has_one_sign():
    # equal durations must be bit-identical (programs share equal tasks): ints become floats, -0.0 becomes 0.0
    compute = StepCompute(layer_forward_s=(-0.0, 1), layer_backward_s=(0, 2.5), embedding_forward_s=-0.0)
    for seconds in compute.layer_forward_s + compute.layer_backward_s + (compute.embedding_forward_s,):
        assert type(seconds) is float and math.copysign(1.0, seconds) == 1.0
    assert compute.layer_forward_s == (0.0, 1.0) and compute.layer_backward_s == (0.0, 2.5)


def test_worked_number_of_a_merged_forward():
    # layers 0-1 with the embedding: 1 + 1 + (0.3 + 0) = 2.3 ms; beside communication x 1.25 = 2.875 ms
    c = StepCompute(
        layer_forward_s=(1e-3, 1e-3), layer_backward_s=(2e-3, 2e-3), embedding_forward_s=3e-4, overlap_slowdown=0.25
    )
    work = PassWork(phase="forward", layers=(0, 1), embedding=True)
    assert c.duration_s(work) == 1e-3 + 1e-3 + (3e-4 + 0.0) == pytest.approx(2.3e-3, rel=1e-15)
    assert c.duration_s(PassWork(phase="forward", layers=(0, 1), embedding=True, beside_comm=True)) == (
        (1e-3 + 1e-3 + 3e-4) * 1.25
    )
    # the backward adds the logits before the embedding: (sum + logits) + embedding
    c = StepCompute(layer_forward_s=(1.0,), layer_backward_s=(0.1,), logits_backward_s=0.2, embedding_backward_s=0.3)
    assert c.duration_s(PassWork(phase="backward", layers=(0,), logits=True, embedding=True)) == (0.1 + 0.2) + 0.3
    assert c.duration_s(PassWork(phase="optimizer", stage=0)) == 0.0  # no optimizer_s: 0 s


def test_a_logits_weight_gradient_longer_than_the_logits_backward_is_refused():
    # logits_wgrad_s is part of logits_backward_s: 3 ms of a 2 ms backward would leave a deferred backward -1 ms
    with pytest.raises(ValueError, match="StepCompute.logits_wgrad_s"):
        StepCompute(layer_forward_s=(1e-3,), layer_backward_s=(2e-3,), logits_backward_s=2e-3, logits_wgrad_s=3e-3)
    # equal is accepted: the deferred backward of the logits alone takes 2 - 2 = 0 ms
    c = StepCompute(layer_forward_s=(1e-3,), layer_backward_s=(2e-3,), logits_backward_s=2e-3, logits_wgrad_s=2e-3)
    assert c.duration_s(PassWork(phase="backward", logits=True, defer_logits_wgrad=True)) == 0.0


def test_a_workload_is_built_without_hardware_and_resolved_keeping_shared_programs():
    model = gpt(4)
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=4)
    bare = training_step(model, spec)
    computes = [t for p in bare.workload.programs for t in p if isinstance(t, ComputeTask)]
    assert computes and all(t.duration_s is None and isinstance(t.work, PassWork) for t in computes)
    assert bare.workload.unresolved > 0
    compute = times(model, optimizer_s=(1e-4, 2e-4))
    resolved = resolve(bare, compute)
    assert resolved == training_step(model, spec, compute) and resolved.workload.unresolved == 0
    # ranks that shared a program object still share one (the 4 members of the data-parallel group in the reduction)
    reduction = training_step(model, ParallelismSpec(dp=4, global_batch=4), part="reduction")
    shared = resolve(reduction, compute).workload.shared_programs
    before = [ranks.tolist() for _, ranks in reduction.workload.shared_programs]
    assert [ranks.tolist() for _, ranks in shared] == before == [[0, 1, 2, 3]]
    for before, after in zip(bare.workload.programs, resolved.workload.programs):
        for a, b in zip(before, after):
            if isinstance(a, ComputeTask):
                assert b.work == a.work and b.duration_s == compute.duration_s(a.work)
            else:
                assert b is a


def test_fixed_duration_tasks_stay_and_unresolved_work_is_refused_by_simulate():
    from simulator.api import simulate
    from topologies.presets import build_system

    with pytest.raises(ValueError, match="ComputeTask.duration_s: None is not allowed"):
        ComputeTask()
    fixed = Workload(nranks=1, collectives=(), programs=((ComputeTask(duration_s=1.5),),))
    assert fixed.with_durations(lambda work: 2.0) == fixed and fixed.unresolved == 0
    work = Workload(nranks=1, collectives=(), programs=((ComputeTask(work=PassWork(phase="optimizer")),),))
    with pytest.raises(ValueError, match="1 compute tasks carry work but no duration"):
        simulate(build_system("dgx-h100", nodes=1), work)
    assert simulate(build_system("dgx-h100", nodes=1), work.with_durations(lambda w: 2.0)).makespan_s == 2.0


@pytest.mark.parametrize(
    "model, layout, recompute",
    [
        (gpt(4), dict(tp=2, pp=2, dp=1, global_batch=4), "none"),
        (gpt(4), dict(pp=2, dp=1, vp=2, schedule="interleaved", global_batch=4), "full"),
        (moe(4), dict(tp=2, dp=2, ep=2, global_batch=4, sequence_parallel=True), "selective"),
    ],
)
@pytest.mark.parametrize("granularity", ["layer", "chunk"])
def test_the_work_adds_up_to_the_step_flops(model, layout, recompute, granularity):
    # every rank's matrix FLOPs, summed over the ranks of one data-parallel replica (each runs 1/d of the batch),
    # are the step's: per layer 3 x forward + recomputation, logits 3 x forward (ModelSpec.step_flops); the
    # vocabulary (128) and every width divide t, so no padding adds work
    spec = ParallelismSpec(**layout)
    tw = training_step(model, spec, recompute=recompute, granularity=granularity)
    total = math.fsum(
        t.work.flops
        for r, program in enumerate(tw.workload.programs)
        if spec.coords(r).dp == 0
        for t in program
        if isinstance(t, ComputeTask)
    )
    expected = model.step_flops(batch=spec.global_batch // spec.dp, recompute=recompute)
    assert total == pytest.approx(expected, rel=1e-12)
