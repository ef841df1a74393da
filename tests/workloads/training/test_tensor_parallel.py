"""workloads.training.tensor_parallel: Megatron f/g all-reduces, sequence-parallel gathers and scatters, merging,
and the module's worked number."""

from __future__ import annotations

from tests.workloads.shapes import gpt
from tests.workloads.training.helpers import build, colls
from workloads.collectives import CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.training import training_step


def test_tp_allreduce_four_per_layer_and_microbatch():
    model = gpt()
    spec = ParallelismSpec(tp=2, dp=1, micro_batch=1, global_batch=3)
    tw = build(model, spec)
    ars = colls(tw, 0, "tp", CollectiveKind.ALL_REDUCE)
    # 2 forward + 2 backward per layer (Megatron f/g), 4 layers, m = 3 micro-batches
    assert len(ars) == 4 * model.layers * 3
    assert {c.nbytes for _, c in ars} == {4096}  # s b h D
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


def test_worked_number_all_reduce_bytes_per_layer_and_merged_chunk():
    # s 2048, b 1, h 4096, bf16, t 8 without SP: A = 2048 x 4096 x 2 = 16,777,216 B; per layer and micro-batch
    # 4 all-reduces of A (64 MiB); a merged pass of the 4-layer chunk: one forward all-reduce of 4 x 2 x A
    model = custom_gpt(layers=4, hidden=4096, heads=32, seq_len=2048, vocab=1024)
    spec = ParallelismSpec(tp=8, dp=1, global_batch=1)
    a = 16_777_216
    fine = colls(training_step(model, spec), 0, "tp", CollectiveKind.ALL_REDUCE)
    assert len(fine) == 4 * 4 and {c.nbytes for _, c in fine} == {a}
    assert sum(c.nbytes for _, c in fine) // 4 == 4 * a == 64 * 2**20
    merged = colls(training_step(model, spec, granularity="chunk"), 0, "tp", CollectiveKind.ALL_REDUCE)
    assert [c.nbytes for _, c in merged] == [4 * 2 * a, 4 * 2 * a] and 4 * 2 * a == 128 * 2**20
