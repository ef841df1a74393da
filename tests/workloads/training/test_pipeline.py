"""workloads.training.pipeline: schedule orders (1F1B, GPipe, interleaved), stage-to-stage transfers, and the
module's worked numbers."""

from __future__ import annotations

import itertools

import pytest

from simulator.engine.timeline import task_times
from tests.workloads.shapes import gpt
from tests.workloads.training.helpers import build
from workloads.collectives import CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.tasks import ComputeTask
from workloads.training import StepCompute, pipeline_schedule, training_step


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
    assert fmt == [
        "F0c0",
        "F1c0",
        "F0c1",
        "F1c1",
        "F2c0",
        "B0c1",
        "F3c0",
        "B1c1",
        "F2c1",
        "B0c0",
        "F3c1",
        "B1c0",
        "B2c1",
        "B3c1",
        "B2c0",
        "B3c0",
    ]
    assert [f"{p}{mb}c{c}" for p, mb, c in s1][:4] == ["F0c0", "F1c0", "F0c1", "B0c1"]


@pytest.mark.parametrize("pp, vp, k", list(itertools.product((2, 3, 4), (2, 3), (1, 2, 3))))
def test_interleaved_runs_every_pass_once_forward_first(pp, vp, k):
    m = pp * k
    for stage in range(pp):
        ops = pipeline_schedule("interleaved", pp=pp, stage=stage, microbatches=m, vp=vp)
        warm = m * vp if m == pp else min((pp - stage - 1) * 2 + (vp - 1) * pp, m * vp)
        assert "".join(p for p, _, _ in ops[:warm]) == "F" * warm
        assert sorted((p, mb, c) for p, mb, c in ops) == sorted(
            (p, mb, c) for p in "FB" for mb in range(m) for c in range(vp)
        )
        position = {op: i for i, op in enumerate(ops)}
        assert all(position[("F", mb, c)] < position[("B", mb, c)] for mb in range(m) for c in range(vp))


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="stage: 3 is not allowed"):
        pipeline_schedule("1f1b", pp=3, stage=3, microbatches=2)
    with pytest.raises(ValueError, match="microbatches: 3 is not allowed; expected a multiple of pp"):
        pipeline_schedule("interleaved", pp=2, stage=0, microbatches=3, vp=2)
    with pytest.raises(ValueError, match="schedule: 'zb'"):
        pipeline_schedule("zb", pp=2, stage=0, microbatches=2)


@pytest.mark.parametrize(
    "sg, sp, expected, gathers", [(True, False, 2048, True), (False, False, 4096, False), (True, True, 2048, False)]
)
def test_pipeline_transfers(sg, sp, expected, gathers):
    # s b h D = 4096; SC21 scatter/gather or sequence parallelism send 1/t of it
    model = gpt()
    spec = ParallelismSpec(tp=2, pp=2, dp=1, global_batch=3, scatter_gather=sg, sequence_parallel=sp)
    tw = build(model, spec)
    p2p = [
        c
        for i, c in enumerate(tw.workload.collectives)
        if tw.group_kinds[i] == "pp" and c.kind is CollectiveKind.ALL_TO_ALL
    ]
    # one activation and one gradient per micro-batch and stage boundary, for each of the t tensor ranks
    assert len(p2p) == 2 * 3 * 1 * 2
    for c in p2p:
        assert c.nbytes == expected and c.splits == ((0, expected), (0, 0))  # one-directional
        a, b = c.group
        assert spec.coords(a).tp == spec.coords(b).tp and abs(spec.coords(a).pp - spec.coords(b).pp) == 1
    rebuild = [c for i, c in enumerate(tw.workload.collectives) if "pp allgather" in tw.collective_names[i]]
    assert (len(rebuild) == 2 * 3 * 1) if gathers else not rebuild
    assert all(c.kind is CollectiveKind.ALL_GATHER and c.nbytes == 4096 for c in rebuild)


def test_uneven_pipeline_stages_hold_every_layer_once():
    """30 layers on pp = 4: chunks of 30 // 4 = 7 layers, the first 30 % 4 = 2 stages one more (8, 8, 7, 7),
    as ModelSpec.stage_layers; every layer's forward appears exactly once per micro-batch."""
    model = custom_gpt(layers=30, hidden=256, heads=4)
    spec = ParallelismSpec(tp=1, pp=4, dp=1, global_batch=2, micro_batch=1, seq_len=128)
    compute = StepCompute.uniform(layers=30, forward_s=1e-3, backward_s=2e-3)
    training = training_step(model, spec, compute)
    assert [len(r) for r in model.stage_layers(pp=4)] == [8, 8, 7, 7]
    fwd = sum(
        task.duration_s
        for program in training.workload.programs
        for task in program
        if isinstance(task, ComputeTask) and task.name.startswith("fwd")
    )
    # 30 layers x 2 micro-batches x 1 ms (plus no embedding/logits time in a uniform StepCompute)
    assert fwd == pytest.approx(30 * 2 * 1e-3, rel=1e-12)


def test_worked_number_transfer_size():
    # s 2048, b 1, h 4096, bf16: s b h D = 2048 x 4096 x 2 = 16,777,216 B; t = 8 with SP sends 1/8: 2,097,152 B
    model = custom_gpt(layers=2, hidden=4096, heads=32, seq_len=2048, vocab=1024)
    for sp, expected in ((False, 16_777_216), (True, 2_097_152)):
        spec = ParallelismSpec(tp=8, pp=2, dp=1, global_batch=1, sequence_parallel=sp, scatter_gather=False)
        tw = training_step(model, spec)
        p2p = {
            c.nbytes
            for i, c in enumerate(tw.workload.collectives)
            if tw.group_kinds[i] == "pp" and c.kind is CollectiveKind.ALL_TO_ALL
        }
        assert p2p == {expected}


def test_worked_number_1f1b_bubble():
    # p 4, m 8, one layer per stage of f 1 ms, b 2 ms (no embedding or logits time): on an infinitely fast
    # network (every collective 0 s) 1F1B takes (m + p - 1)(f + b) = 11 x 3 ms = 33 ms; the busiest stage
    # computes m (f + b) = 24 ms, so the bubble is (p - 1)(f + b) = 9 ms
    model = gpt(4)
    spec = ParallelismSpec(pp=4, dp=1, global_batch=8)
    tw = training_step(model, spec, StepCompute.uniform(layers=4, forward_s=1e-3, backward_s=2e-3), part="pipeline")
    assert task_times(tw.workload).makespan_s == pytest.approx(33e-3, rel=1e-12)
    busy = max(sum(t.duration_s for t in program if isinstance(t, ComputeTask)) for program in tw.workload.programs)
    assert busy == pytest.approx(24e-3, rel=1e-12)


def test_interleaving_divides_the_bubble_by_v():
    # the same stages as above cut into v = 2 chunks of one layer (f 0.5 ms, b 1 ms per chunk): the busiest
    # stage still computes 24 ms and the bubble shrinks to (p - 1)(f + b) / v = 9 / 2 ms: 28.5 ms in all
    model = gpt(8)
    spec = ParallelismSpec(pp=4, vp=2, schedule="interleaved", dp=1, global_batch=8)
    compute = StepCompute.uniform(layers=8, forward_s=0.5e-3, backward_s=1e-3)
    tw = training_step(model, spec, compute, part="pipeline")
    assert task_times(tw.workload).makespan_s == pytest.approx(28.5e-3, rel=1e-12)


def test_embedding_and_loss_slots_in_the_pipeline_split():
    """Megatron-Core's --account-for-embedding/loss-in-pipeline-split: gpt(8), pp 4 x vp 2 = 8 chunks over
    8 layers + 2 slots = 10 slots, the first 10 % 8 = 2 chunks two slots each. Chunk layers: chunk 0 = the
    embedding + layer 0, chunk 1 = layers 1-2, chunks 2-6 one layer each (3..7 minus chunk 7's loss slot:
    chunk 6 = layer 7), chunk 7 = the loss only. Stage s holds chunks s and s + 4: layers 1+1, 2+1, 1+1, 1+0,
    and with 4 micro-batches of 1 ms forward + 2 ms backward per layer its layer work is layers x 12 ms."""
    slots = dict(account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    spec = ParallelismSpec(pp=4, dp=1, vp=2, schedule="interleaved", global_batch=4, **slots)
    assert [len(c) for c in spec.chunk_layers(gpt(8))] == [1, 2, 1, 1, 1, 1, 1, 0]
    tw = build(gpt(8), spec)
    work = []
    for rank in range(4):
        tasks = [t for t in tw.workload.programs[rank] if isinstance(t, ComputeTask) and "optim" not in t.name]
        work.append(round(sum(t.duration_s for t in tasks), 9))
    assert work == [0.024, 0.036, 0.024, 0.012]
    # 126 layers fill pp 16 x vp 8 = 128 chunks only with both slots (Llama 3 405B's layout)
    model = custom_gpt(layers=126, hidden=256, heads=8, seq_len=64)
    with pytest.raises(ValueError, match="account-for-embedding-in-pipeline-split"):
        ParallelismSpec(pp=16, dp=1, vp=8, schedule="interleaved", global_batch=16).check(model)
    ParallelismSpec(pp=16, dp=1, vp=8, schedule="interleaved", global_batch=16, **slots).check(model)


def test_one_slot_for_the_embedding_or_the_loss():
    # 6 layers + 1 slot = 7 over 4 stages: 2, 2, 2, 1 slots. Embedding slot first: layers 1, 2, 2, 1; loss slot
    # last: 2, 2, 2 and a last stage with the loss alone
    model = gpt(6)
    assert [len(r) for r in model.stage_layers(pp=4, split_slots=(1, 0))] == [1, 2, 2, 1]
    assert [len(r) for r in model.stage_layers(pp=4, split_slots=(0, 1))] == [2, 2, 2, 0]
    # the first stage holds one layer fewer, so fewer weights; the stages still hold every layer once
    plain, slotted = model.stage_parameters(0, pp=4), model.stage_parameters(0, pp=4, split_slots=(1, 0))
    assert plain - slotted == model.stage_parameters(1, pp=4, split_slots=(1, 0)) // 2
    assert [r.start for r in model.stage_layers(pp=4, split_slots=(1, 0))] == [0, 1, 3, 5]
