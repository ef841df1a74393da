"""Training-step programs: schedule orders, bytes per group against closed forms, structure, bad input."""

from __future__ import annotations

import itertools
import math

import pytest

from tests.workloads.shapes import gpt, moe
from workloads.collectives import CollectiveKind
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.tasks import CommTask, ComputeTask
from workloads.training import (STREAM_COMPUTE, STREAM_DP, STREAM_PARAM, STREAM_RECV_NEXT, STREAM_RECV_PREV,
                                STREAM_SEND_NEXT, STREAM_SEND_PREV, StepCompute, pipeline_schedule, training_step)


# gpt() and moe(): h 64, s 32; with b 1 and D 2 one activation is s b h D = 32 x 64 x 2 = 4096 bytes


def times(model: ModelSpec, **kw) -> StepCompute:
    return StepCompute.uniform(layers=model.layers, forward_s=1e-3, backward_s=2e-3, **kw)


def build(model, spec, **kw):
    return training_step(model, spec, times(model), **kw)


def colls(tw, rank, tag=None, kind=None):
    """Collectives of program ``rank`` (in program order), optionally of one group tag / kind."""
    out = []
    for i in tw.rank_collectives(rank):
        c = tw.workload.collectives[i]
        if (tag is None or tw.group_kinds[i] == tag) and (kind is None or c.kind is kind):
            out.append((i, c))
    return out


# --------------------------------------------------------------------------------------------------
# schedules
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pp, m", list(itertools.product((1, 2, 3, 5), (1, 2, 4, 7))))
def test_1f1b_warmup_steady_cooldown(pp, m):
    for stage in range(pp):
        ops = pipeline_schedule("1f1b", pp=pp, stage=stage, microbatches=m)
        warm = min(pp - stage - 1, m)
        phases = "".join(p for p, _, _ in ops)
        # warm-up: p - s - 1 forwards, then F/B pairs, then the remaining backwards
        assert phases == "F" * warm + "FB" * (m - warm) + "B" * warm
        assert [mb for p, mb, _ in ops if p == "F"] == list(range(m))
        assert [mb for p, mb, _ in ops if p == "B"] == list(range(m))


def test_gpipe_runs_all_forwards_then_backwards_in_reverse():
    ops = pipeline_schedule("gpipe", pp=4, stage=2, microbatches=3)
    assert [f"{p}{mb}" for p, mb, _ in ops] == ["F0", "F1", "F2", "B2", "B1", "B0"]


def test_interleaved_order_by_hand():
    # p 2, v 2, m 4 (Megatron): forward step k runs micro-batch (k // 4) 2 + k % 2 of chunk (k % 4) // 2;
    # backward step k the same micro-batch of chunk 1 - (k % 4) // 2. Warm-up (p - s - 1) 2 + (v - 1) p:
    # stage 0: 4 steps, stage 1: 2.
    s0 = pipeline_schedule("interleaved", pp=2, stage=0, microbatches=4, vp=2)
    s1 = pipeline_schedule("interleaved", pp=2, stage=1, microbatches=4, vp=2)
    fmt = [f"{p}{mb}c{c}" for p, mb, c in s0]
    assert fmt == ["F0c0", "F1c0", "F0c1", "F1c1", "F2c0", "B0c1", "F3c0", "B1c1", "F2c1", "B0c0", "F3c1", "B1c0",
                   "B2c1", "B3c1", "B2c0", "B3c0"]
    assert [f"{p}{mb}c{c}" for p, mb, c in s1][:4] == ["F0c0", "F1c0", "F0c1", "B0c1"]


@pytest.mark.parametrize("pp, vp, k", list(itertools.product((2, 3, 4), (2, 3), (1, 2, 3))))
def test_interleaved_runs_every_pass_once_forward_first(pp, vp, k):
    m = pp * k
    for stage in range(pp):
        ops = pipeline_schedule("interleaved", pp=pp, stage=stage, microbatches=m, vp=vp)
        warm = m * vp if m == pp else min((pp - stage - 1) * 2 + (vp - 1) * pp, m * vp)
        assert "".join(p for p, _, _ in ops[:warm]) == "F" * warm
        assert sorted((p, mb, c) for p, mb, c in ops) == sorted(
            (p, mb, c) for p in "FB" for mb in range(m) for c in range(vp))
        position = {op: i for i, op in enumerate(ops)}
        assert all(position[("F", mb, c)] < position[("B", mb, c)] for mb in range(m) for c in range(vp))


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="stage: 3 is not allowed"):
        pipeline_schedule("1f1b", pp=3, stage=3, microbatches=2)
    with pytest.raises(ValueError, match="microbatches: 3 is not allowed; expected a multiple of pp"):
        pipeline_schedule("interleaved", pp=2, stage=0, microbatches=3, vp=2)
    with pytest.raises(ValueError, match="schedule: 'zb'"):
        pipeline_schedule("zb", pp=2, stage=0, microbatches=2)


# --------------------------------------------------------------------------------------------------
# bytes per group against closed forms
# --------------------------------------------------------------------------------------------------


def test_tp_allreduce_four_per_layer_and_microbatch():
    model = gpt()
    spec = ParallelismSpec(tp=2, dp=1, micro_batch=1, global_batch=3)
    tw = build(model, spec)
    ars = colls(tw, 0, "tp", CollectiveKind.ALL_REDUCE)
    # 2 forward + 2 backward per layer (Megatron f/g), 4 layers, m = 3 micro-batches
    assert len(ars) == 4 * model.layers * 3
    assert {c.nbytes for _, c in ars} == {4096}                            # s b h D
    assert all(c.group == (0, 1) for _, c in ars)
    full = build(model, spec, recompute="full")
    # full recomputation repeats the 2 forward all-reduces in the backward: 6 per layer
    assert len(colls(full, 0, "tp", CollectiveKind.ALL_REDUCE)) == 6 * model.layers * 3


def test_sequence_parallel_gathers_and_scatters():
    model = gpt()
    tw = build(model, ParallelismSpec(tp=2, dp=1, sequence_parallel=True))
    ag = colls(tw, 0, "tp", CollectiveKind.ALL_GATHER)
    rs = colls(tw, 0, "tp", CollectiveKind.REDUCE_SCATTER)
    # forward 2 AG + 2 RS; backward 4 AG + 2 RS (ModelSpec.tp_collectives_per_layer), one micro-batch
    assert (len(ag), len(rs)) == (6 * model.layers, 4 * model.layers)
    assert not colls(tw, 0, "tp", CollectiveKind.ALL_REDUCE)


@pytest.mark.parametrize("dtype, grad_bytes", [("bf16", 4), ("fp16", 2)])
@pytest.mark.parametrize("bucket", [64 * 1024, None])
def test_dp_buckets_carry_every_gradient_byte(dtype, grad_bytes, bucket):
    model = gpt(layers=6)
    spec = ParallelismSpec(tp=2, pp=2, dp=2, micro_batch=1, global_batch=4, bucket_bytes=bucket, dtype=dtype)
    tw = build(model, spec)
    worst = 0
    for rank in range(spec.world_size):
        stage = spec.coords(rank).pp
        buckets = [c for i, c in colls(tw, rank, "dp")]
        total = sum(c.nbytes for c in buckets)
        # all-reduce of every weight's gradient: stage parameters x gradient bytes (fp32 for bf16, fp16 for fp16)
        expected = model.stage_parameters(stage, tp=2, pp=2) * grad_bytes
        assert total == expected
        assert all(c.kind is CollectiveKind.ALL_REDUCE and c.group == spec.group_of("dp_cp", rank) for c in buckets)
        assert len(buckets) == (1 if bucket is None else math.ceil(expected / bucket))
        worst = max(worst, total)
    assert worst == model.dp_gradient_bytes(tp=2, pp=2, grad_bytes=grad_bytes)
    # tied embeddings with p > 1: first and last stage all-reduce the V/t x h embedding gradient
    emb = [c for i, c in colls(tw, 0, "pp") if c.kind is CollectiveKind.ALL_REDUCE]
    assert len(emb) == 1 and emb[0].nbytes == 128 // 2 * 64 * grad_bytes and emb[0].group == (0, 4)


def test_zero1_reduce_scatters_then_gathers_parameters():
    model = gpt()
    spec = ParallelismSpec(dp=4, zero=1, bucket_bytes=32 * 1024)
    tw = build(model, spec)
    rs = [c for _, c in colls(tw, 0, "dp", CollectiveKind.REDUCE_SCATTER)]
    ag = [c for _, c in colls(tw, 0, "dp", CollectiveKind.ALL_GATHER)]
    grads = model.stage_parameters(0) * 4
    params = model.stage_parameters(0) * 2
    # padded to whole elements per rank: at most n - 1 elements per collective
    assert grads <= sum(c.nbytes for c in rs) < grads + len(rs) * 4 * 4
    assert params <= sum(c.nbytes for c in ag) < params + len(ag) * 4 * 2
    assert len(rs) == len(ag) == math.ceil(grads / (32 * 1024))


def test_zero3_gathers_every_layer_each_pass():
    model = gpt()
    spec = ParallelismSpec(dp=2, fsdp=True, global_batch=4)                # m = 2
    tw = build(model, spec)
    ag = [c for _, c in colls(tw, 0, "dp", CollectiveKind.ALL_GATHER)]
    rs = [c for _, c in colls(tw, 0, "dp", CollectiveKind.REDUCE_SCATTER)]
    units = model.layers + 2                                                  # layers, embedding, output + norm
    assert len(ag) == 2 * units * 2                                          # forward and backward, m = 2
    assert len(rs) == units
    assert sum(c.nbytes for c in rs) == model.stage_parameters(0) * 4
    gathers = [t for t in tw.workload.programs[0] if isinstance(t, CommTask) and t.stream == STREAM_PARAM]
    assert len(gathers) == len(ag)


@pytest.mark.parametrize("sg, sp, expected, gathers", [(True, False, 2048, True), (False, False, 4096, False),
                                                        (True, True, 2048, False)])
def test_pipeline_transfers(sg, sp, expected, gathers):
    # s b h D = 4096; SC21 scatter/gather or sequence parallelism send 1/t of it
    model = gpt()
    spec = ParallelismSpec(tp=2, pp=2, dp=1, global_batch=3, scatter_gather=sg, sequence_parallel=sp)
    tw = build(model, spec)
    p2p = [c for i, c in enumerate(tw.workload.collectives)
           if tw.group_kinds[i] == "pp" and c.kind is CollectiveKind.ALL_TO_ALL]
    # one activation and one gradient per micro-batch and stage boundary, for each of the t tensor ranks
    assert len(p2p) == 2 * 3 * 1 * 2
    for c in p2p:
        assert c.nbytes == expected and c.splits == ((0, expected), (0, 0))       # one-directional
        a, b = c.group
        assert spec.coords(a).tp == spec.coords(b).tp and abs(spec.coords(a).pp - spec.coords(b).pp) == 1
    rebuild = [c for i, c in enumerate(tw.workload.collectives)
               if "pp allgather" in tw.collective_names[i]]
    assert (len(rebuild) == 2 * 3 * 1) if gathers else not rebuild
    assert all(c.kind is CollectiveKind.ALL_GATHER and c.nbytes == 4096 for c in rebuild)


def test_context_parallel_ring_steps():
    model = gpt()
    spec = ParallelismSpec(cp=4, dp=1)
    tw = build(model, spec)
    kv = [c for _, c in colls(tw, 0, "cp")]
    # c - 1 = 3 ring steps forward and 2 (c - 1) = 6 backward per layer, 2 b (s/c) g d D = 2 x 8 x 64 x 2 bytes
    assert len(kv) == 9 * model.layers
    assert {c.nbytes for c in kv} == {2 * 8 * 64 * 2}
    assert all(c.kind is CollectiveKind.SENDRECV and c.group == (0, 1, 2, 3) for c in kv)


def test_expert_imbalance_splits():
    model = moe()
    spec = ParallelismSpec(dp=4, ep=4, ep_imbalance=0.5)
    tw = build(model, spec)
    a2a = [c for _, c in colls(tw, 0, "ep")]
    # dispatch + combine forward and backward per MoE layer
    assert len(a2a) == 4 * model.layers
    send = model.ep_alltoall_bytes(micro_batch=1)          # T k h D = 32 x 2 x 64 x 2 = 8192
    assert send == 8192
    dispatch, combine = a2a[0], a2a[1]
    # layer 0: member 0 is the busiest; it receives 1.5 x 8192 / 4 = 3072 bytes from every sender
    assert [row[0] for row in dispatch.splits] == [3072] * 4
    assert all(sum(row) == send for row in dispatch.splits) and dispatch.nbytes == send
    assert combine.splits == tuple(zip(*dispatch.splits)) and combine.nbytes == 4 * 3072
    even = build(model, ParallelismSpec(dp=4, ep=4))
    assert {c.splits for _, c in colls(even, 0, "ep")} == {None}
    assert {c.nbytes for _, c in colls(even, 0, "ep")} == {send}


@pytest.mark.parametrize("layout", [dict(tp=2, pp=2, dp=2, global_batch=4),
                                    dict(tp=2, pp=2, dp=1, vp=2, schedule="interleaved", global_batch=4),
                                    dict(cp=2, dp=2, zero=2, global_batch=4)])
def test_chunk_granularity_conserves_bytes_and_compute(layout):
    model = gpt(layers=8)
    spec = ParallelismSpec(**layout)
    fine, coarse = build(model, spec), build(model, spec, granularity="chunk")
    assert len(coarse.workload.collectives) < len(fine.workload.collectives)
    for rank in range(spec.world_size):
        assert coarse.nbytes_by_kind(rank) == fine.nbytes_by_kind(rank)
        busy = [math.fsum(t.duration_s for t in w.workload.programs[rank] if isinstance(t, ComputeTask))
                for w in (fine, coarse)]
        assert busy[0] == pytest.approx(busy[1], rel=1e-12)


# --------------------------------------------------------------------------------------------------
# structure
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", [dict(tp=2, pp=2, dp=2, global_batch=4),
                                    dict(tp=2, pp=2, dp=2, vp=2, schedule="interleaved", global_batch=4),
                                    dict(tp=1, cp=2, dp=2, ep=2, sequence_parallel=True)])
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
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=6, bucket_bytes=16 * 1024)     # m = 3
    tw = build(model, spec)
    for rank, program in enumerate(tw.workload.programs):
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


def test_partial_builds():
    model = gpt()
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=4, dp_overlap=False)
    replica = tuple(r for r in range(8) if spec.coords(r).dp == 0)
    pipe = build(model, spec, part="pipeline", ranks=replica)
    assert pipe.workload.nranks == 4 and "dp" not in pipe.group_kinds
    reduction = build(model, spec, part="reduction")
    assert set(reduction.group_kinds) == {"dp", "pp"}                  # buckets and the embedding all-reduce
    whole = build(model, spec)
    for rank in range(8):
        assert whole.nbytes_by_kind(rank)["dp"] == reduction.nbytes_by_kind(rank)["dp"]


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------


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
        build(model, ParallelismSpec(tp=8, dp=1))                         # 4 heads


def test_step_compute_seconds_are_floats_and_zero_has_one_sign():
    # equal durations must be bit-identical (programs share equal tasks): ints become floats, -0.0 becomes 0.0
    compute = StepCompute(layer_forward_s=(-0.0, 1), layer_backward_s=(0, 2.5), embedding_forward_s=-0.0)
    for seconds in compute.layer_forward_s + compute.layer_backward_s + (compute.embedding_forward_s,):
        assert type(seconds) is float and math.copysign(1.0, seconds) == 1.0
    assert compute.layer_forward_s == (0.0, 1.0) and compute.layer_backward_s == (0.0, 2.5)


def test_module_doctests_pass():
    import doctest

    import importlib
    for name in ("common", "compute", "pipeline", "data_parallel", "tensor_parallel", "context_parallel",
                 "expert_parallel", "program"):
        assert doctest.testmod(importlib.import_module(f"workloads.training.{name}")).failed == 0


def test_worked_number_of_the_module_docstring():
    # GPT-1.7B, d = 32, b 16, B 512 -> m = 1; fp16 gradients 1,652,230,656 x 2 B in 25 MiB buckets
    from workloads.presets import SC21_GPTS
    model = SC21_GPTS["gpt-1.7b"]
    spec = ParallelismSpec(dp=32, micro_batch=16, global_batch=512, dtype="fp16")
    tw = build(model, spec)
    buckets = [c for _, c in colls(tw, 0, "dp")]
    assert sum(c.nbytes for c in buckets) == model.stage_parameters(0) * 2 == 3_304_461_312
    assert len(buckets) == math.ceil(3_304_461_312 / 26_214_400) == 127
    names = [t.name for t in tw.workload.programs[0] if isinstance(t, ComputeTask)]
    assert sum("layer" in n for n in names) == 48 and sum("embedding" in n for n in names) == 2


def test_reduction_part_by_hand():
    """Tiny GPT (4 layers of 49,984 weights), p 2, d 2, one bucket, bf16 (fp32 gradients, 4 B):
    stage 0 holds layers 0-1 and the embedding (V h + s h = 8,192 + 2,048): 110,208 weights -> 440,832 B;
    stage 1 layers 2-3, the final norm (2 h = 128) and the tied output copy (V h = 8,192): 108,288 -> 433,152 B.
    Both stages also all-reduce the tied embedding gradient, V h x 4 B = 32,768 B, between stage 0 and 1."""
    model = gpt()
    spec = ParallelismSpec(pp=2, dp=2, global_batch=2, dp_overlap=False, bucket_bytes=None)
    compute = times(model, optimizer_s=tuple(1e-4 * (j + 1) for j in range(spec.pp)))
    tw = training_step(model, spec, compute, part="reduction")
    expected = {0: 440_832, 1: 433_152}
    for rank, program in enumerate(tw.workload.programs):
        stage = spec.coords(rank).pp
        bucket, embedding, optimizer = program
        c = tw.workload.collectives[bucket.index]
        assert (c.kind, c.nbytes, c.group) == (CollectiveKind.ALL_REDUCE, expected[stage],
                                               spec.group_of("dp_cp", rank))
        e = tw.workload.collectives[embedding.index]
        assert (e.kind, e.nbytes, tw.group_kinds[embedding.index]) == (CollectiveKind.ALL_REDUCE, 32_768, "pp")
        assert e.group == spec.group_of("pp", rank)
        assert optimizer.after == (0, 1) and optimizer.duration_s == 1e-4 * (stage + 1)


def test_uneven_pipeline_stages_hold_every_layer_once():
    """30 layers on pp = 4: chunks of 30 // 4 = 7 layers, the first 30 % 4 = 2 stages one more (8, 8, 7, 7),
    as ModelSpec.stage_layers; every layer's forward appears exactly once per micro-batch."""
    model = custom_gpt(layers=30, hidden=256, heads=4)
    spec = ParallelismSpec(tp=1, pp=4, dp=1, global_batch=2, micro_batch=1, seq_len=128)
    compute = StepCompute.uniform(layers=30, forward_s=1e-3, backward_s=2e-3)
    training = training_step(model, spec, compute)
    assert [len(r) for r in model.stage_layers(pp=4)] == [8, 8, 7, 7]
    fwd = sum(task.duration_s for program in training.workload.programs for task in program
              if isinstance(task, ComputeTask) and task.name.startswith("fwd"))
    # 30 layers x 2 micro-batches x 1 ms (plus no embedding/logits time in a uniform StepCompute)
    assert fwd == pytest.approx(30 * 2 * 1e-3, rel=1e-12)
