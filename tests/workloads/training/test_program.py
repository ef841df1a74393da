"""workloads.training.program: how the builder composes the dimensions (merging, groups, streams, partial builds),
bad input, doctests and the module's worked number."""

from __future__ import annotations

import math

import pytest

from tests.workloads.shapes import gpt, moe
from tests.workloads.training.helpers import build
from workloads.parallelism import ParallelismSpec
from workloads.tasks import CommTask, ComputeTask
from workloads.training import (
    STREAM_COMPUTE,
    STREAM_DP,
    STREAM_RECV_NEXT,
    STREAM_RECV_PREV,
    STREAM_SEND_NEXT,
    STREAM_SEND_PREV,
    StepCompute,
    training_step,
)


@pytest.mark.parametrize(
    "layout",
    [
        dict(tp=2, pp=2, dp=2, global_batch=4),
        dict(tp=2, pp=2, dp=1, vp=2, schedule="interleaved", global_batch=4),
        dict(cp=2, dp=2, zero=2, global_batch=4),
    ],
)
def test_chunk_granularity_conserves_bytes_and_compute(layout):
    model = gpt(layers=8)
    spec = ParallelismSpec(**layout)
    fine, coarse = build(model, spec), build(model, spec, granularity="chunk")
    assert len(coarse.workload.collectives) < len(fine.workload.collectives)
    for rank in range(spec.world_size):
        assert coarse.nbytes_by_kind(rank) == fine.nbytes_by_kind(rank)
        busy = [
            math.fsum(t.duration_s for t in w.workload.programs[rank] if isinstance(t, ComputeTask))
            for w in (fine, coarse)
        ]
        assert busy[0] == pytest.approx(busy[1], rel=1e-12)


@pytest.mark.parametrize(
    "layout",
    [
        dict(tp=2, pp=2, dp=2, global_batch=4),
        dict(tp=2, pp=2, dp=2, vp=2, schedule="interleaved", global_batch=4),
        dict(tp=1, cp=2, dp=2, ep=2, sequence_parallel=True),
    ],
)
def test_every_collective_runs_in_a_group_of_its_kind(layout):
    model = moe() if layout.get("ep", 1) > 1 else gpt()
    spec = ParallelismSpec(**layout)
    tw = build(model, spec)
    groups = {k: set(spec.groups(k)) for k in ("tp", "cp", "ep", "dp_cp", "edp")}
    for i, c in enumerate(tw.workload.collectives):
        tag = tw.group_kinds[i]
        if tag == "pp":
            a, b = (spec.coords(r) for r in c.group)
            assert c.nranks == 2 and (a.tp, a.cp, a.dp) == (b.tp, b.cp, b.dp)
        elif tag == "dp":
            assert c.group in groups["dp_cp"] | groups["edp"]
        else:
            assert c.group in groups[tag], (tag, c.group)


def test_streams_and_overlap_dependencies():
    model = gpt()
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=6, bucket_bytes=16 * 1024)  # m = 3
    tw = build(model, spec)
    for _rank, program in enumerate(tw.workload.programs):
        for task in program:
            if isinstance(task, CommTask):
                tag = tw.group_kinds[task.index]
                name = tw.collective_names[task.index]
                if tag == "tp":
                    assert task.stream == STREAM_COMPUTE
                elif tag == "dp":
                    assert task.stream == STREAM_DP
                    # a bucket waits for a backward task of the last micro-batch (its gradients are complete)
                    assert all(program[a].name.startswith("bwd mb2") for a in task.after)
                elif tag == "pp" and "embedding" not in name:
                    assert task.stream in (STREAM_SEND_NEXT, STREAM_RECV_PREV, STREAM_SEND_PREV, STREAM_RECV_NEXT)


def test_partial_builds():
    model = gpt()
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=4, dp_overlap=False)
    replica = tuple(r for r in range(8) if spec.coords(r).dp == 0)
    pipe = build(model, spec, part="pipeline", ranks=replica)
    assert pipe.workload.nranks == 4 and "dp" not in pipe.group_kinds
    reduction = build(model, spec, part="reduction")
    assert set(reduction.group_kinds) == {"dp", "pp"}  # buckets and the embedding all-reduce
    whole = build(model, spec)
    for rank in range(8):
        assert whole.nbytes_by_kind(rank)["dp"] == reduction.nbytes_by_kind(rank)["dp"]


def test_bad_inputs():
    model = gpt()
    spec = ParallelismSpec(dp=2)
    with pytest.raises(ValueError, match="StepCompute.layer_forward_s\\[1\\]: -1.0 is not allowed"):
        StepCompute(layer_forward_s=(1.0, -1.0), layer_backward_s=(1.0, 1.0))
    with pytest.raises(ValueError, match="layer_backward_s"):
        StepCompute(layer_forward_s=(1.0,), layer_backward_s=(1.0, 1.0))
    with pytest.raises(ValueError, match="compute.layer_forward_s: '2 entries' is not allowed"):
        training_step(model, spec, StepCompute.uniform(layers=2, forward_s=1, backward_s=1))
    with pytest.raises(ValueError, match="granularity: 'op' is not allowed"):
        build(model, spec, granularity="op")
    with pytest.raises(ValueError, match="recompute: 'some' is not allowed"):
        build(model, spec, recompute="some")
    with pytest.raises(ValueError, match="part: 'reduction' is not allowed"):
        build(model, ParallelismSpec(dp=2, zero=3), part="reduction")
    with pytest.raises(ValueError, match="ranks"):
        build(model, spec, ranks=(0, 5))
    with pytest.raises(ValueError, match="rank 1, which is not built"):
        build(model, ParallelismSpec(tp=2, dp=1), ranks=(0,))
    with pytest.raises(ValueError, match="tp"):
        build(model, ParallelismSpec(tp=8, dp=1))  # 4 heads


def test_module_doctests_pass():
    import doctest
    import importlib

    for name in (
        "common",
        "compute",
        "pipeline",
        "data_parallel",
        "tensor_parallel",
        "context_parallel",
        "expert_parallel",
        "program",
    ):
        assert doctest.testmod(importlib.import_module(f"workloads.training.{name}")).failed == 0


def test_worked_number_of_the_module_docstring():
    # GPT-1.7B, t = p = 1, d 32, b 16, B 512 -> m = 1: forward embedding + 24 layers + logits, the same backward,
    # the optimizer: 2 x 26 + 1 = 53 compute tasks
    from workloads.presets import SC21_GPTS

    model = SC21_GPTS["gpt-1.7b"]
    spec = ParallelismSpec(dp=32, micro_batch=16, global_batch=512, dtype="fp16")
    program = training_step(model, spec, ranks=tuple(range(32))).workload.programs[0]
    computes = [t for t in program if isinstance(t, ComputeTask)]
    assert len(computes) == 53 and sum("layer" in t.name for t in computes) == 48
    assert sum("embedding" in t.name for t in computes) == 2 and sum("logits" in t.name for t in computes) == 2
