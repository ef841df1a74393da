"""workloads.training.data_parallel: gradient buckets, ZeRO 1/2/3 and FSDP, the reduction part, padding, and the
module's worked number."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.workloads.shapes import gpt
from tests.workloads.training.helpers import build, colls, times
from workloads.collectives import CollectiveKind
from workloads.parallelism import DDP_BUCKET_BYTES, ParallelismSpec
from workloads.tasks import CommTask, ComputeTask
from workloads.training import STREAM_PARAM, training_step
from workloads.training.common import padded


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
    spec = ParallelismSpec(dp=2, fsdp=True, global_batch=4)  # m = 2
    tw = build(model, spec)
    ag = [c for _, c in colls(tw, 0, "dp", CollectiveKind.ALL_GATHER)]
    rs = [c for _, c in colls(tw, 0, "dp", CollectiveKind.REDUCE_SCATTER)]
    units = model.layers + 2  # layers, embedding, output + norm
    assert len(ag) == 2 * units * 2  # forward and backward, m = 2
    assert len(rs) == units
    assert sum(c.nbytes for c in rs) == model.stage_parameters(0) * 4
    gathers = [t for t in tw.workload.programs[0] if isinstance(t, CommTask) and t.stream == STREAM_PARAM]
    assert len(gathers) == len(ag)


def test_worked_number_of_the_module_docstring():
    # GPT-1.7B, d = 32, b 16, B 512 -> m = 1; fp16 gradients 1,652,230,656 x 2 B in Megatron-Core's buckets of
    # max(40e6, 1e6 x 32) = 40e6 parameters, or in PyTorch DDP's 25 MiB ones
    from workloads.presets import SC21_GPTS

    model = SC21_GPTS["gpt-1.7b"]
    spec = ParallelismSpec(dp=32, micro_batch=16, global_batch=512, dtype="fp16")
    tw = build(model, spec)
    buckets = [c for _, c in colls(tw, 0, "dp")]
    assert sum(c.nbytes for c in buckets) == model.stage_parameters(0) * 2 == 3_304_461_312
    assert len(buckets) == math.ceil(1_652_230_656 / 40_000_000) == 42
    assert buckets[0].nbytes == 40_000_000 * 2
    tw = build(model, dataclasses.replace(spec, bucket_bytes=DDP_BUCKET_BYTES))
    buckets = [c for _, c in colls(tw, 0, "dp")]
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
        assert (c.kind, c.nbytes, c.group) == (CollectiveKind.ALL_REDUCE, expected[stage], spec.group_of("dp_cp", rank))
        e = tw.workload.collectives[embedding.index]
        assert (e.kind, e.nbytes, tw.group_kinds[embedding.index]) == (CollectiveKind.ALL_REDUCE, 32_768, "pp")
        assert e.group == spec.group_of("pp", rank)
        assert optimizer.after == (0, 1) and optimizer.duration_s == 1e-4 * (stage + 1)


def test_worked_number_of_the_padding():
    # a reduce-scatter of 1,000,002 B of fp32 over 4 ranks: ceil(1,000,002 / 16) x 16 = 62,501 x 16 = 1,000,016 B
    assert padded(CollectiveKind.REDUCE_SCATTER, 1_000_002, 4, 4) == 1_000_016
    assert padded(CollectiveKind.ALL_REDUCE, 1_000_002, 4, 4) == 1_000_002  # all-reduces are not padded


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_reductions_after_the_pipeline_wait_for_the_last_compute_and_the_optimizer_for_them(zero):
    # without overlap every bucket is issued after the pipeline's last compute task; the optimizer waits for
    # all of them; ZeRO 1/2 gathers the updated parameters after the optimizer
    model = gpt()
    spec = ParallelismSpec(dp=2, zero=zero, dp_overlap=False, bucket_bytes=64 * 1024)
    program = build(model, spec).workload.programs[0]
    last = max(i for i, t in enumerate(program) if isinstance(t, ComputeTask) and not t.name.startswith("optimizer"))
    optimizer = next(i for i, t in enumerate(program) if t.name.startswith("optimizer"))
    buckets = [i for i, t in enumerate(program) if t.name.startswith("dp bucket")]
    assert buckets and all(program[i].after == (last,) for i in buckets)
    assert set(program[optimizer].after) == set(buckets)
    gathers = [t for t in program if t.name.startswith("zero allgather")]
    assert (len(gathers) == len(buckets)) if zero else not gathers
    assert all(t.after == (optimizer,) for t in gathers)


def test_megatron_core_buckets_per_chunk_overlap_and_context():
    """Megatron-Core's default buckets: d x c = 32 x 2 = 64, so max(40e6, 1e6 x 64) = 64e6 parameters per bucket
    (fp16: 128e6 bytes), for the first model chunk only; a later chunk (interleaved v 2) is one bucket, and
    without overlap every chunk is one bucket. GPT-1.7B's first chunk (6 of its 24 layers and the embedding,
    pp 2 x vp 2) holds more than 64e6 weights, so it is cut in several."""
    from workloads.presets import SC21_GPTS

    model = SC21_GPTS["gpt-1.7b"]
    spec = ParallelismSpec(dp=32, cp=2, pp=2, vp=2, schedule="interleaved", global_batch=128, dtype="fp16")
    assert spec.bucket_elements(0, 2) == 64_000_000 and spec.bucket_elements(1, 2) is None
    tw = build(model, spec)
    buckets = [(tw.collective_names[i], c) for i, c in colls(tw, 0, "dp")]
    chunk0 = [c for name, c in buckets if "chunk0" in name]
    chunk1 = [c for name, c in buckets if "chunk1" in name]
    assert len(chunk0) >= 2 and len(chunk1) == 1
    assert all(c.nbytes == 64_000_000 * 2 for c in chunk0[:-1]) and chunk0[-1].nbytes <= 64_000_000 * 2
    assert all(len(c.group) == 64 for c in chunk0 + chunk1)  # data x context parallel ranks
    flat = build(model, dataclasses.replace(spec, dp_overlap=False))
    assert len(colls(flat, 0, "dp")) == 2  # one bucket per model chunk
