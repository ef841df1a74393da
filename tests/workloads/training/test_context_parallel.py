"""workloads.training.context_parallel: ring-attention steps per layer and the module's worked number."""

from __future__ import annotations

from tests.workloads.shapes import gpt
from tests.workloads.training.helpers import build, colls
from workloads.collectives import CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import model_preset
from workloads.training import STREAM_CP, training_step


def test_context_parallel_ring_steps():
    model = gpt()
    spec = ParallelismSpec(cp=4, dp=1)
    tw = build(model, spec)
    kv = [c for _, c in colls(tw, 0, "cp")]
    # c - 1 = 3 ring steps forward and 2 (c - 1) = 6 backward per layer, 2 b (s/c) g d D = 2 x 8 x 64 x 2 bytes
    assert len(kv) == 9 * model.layers
    assert {c.nbytes for c in kv} == {2 * 8 * 64 * 2}
    assert all(c.kind is CollectiveKind.SENDRECV and c.group == (0, 1, 2, 3) for c in kv)


def test_worked_number_llama3_8b_ring_step():
    # Llama-3 8B: s 8192, g d = 8 x 128 = 1024, bf16; c 4, t 1, b 1: one step moves 2 b (s/c) g d D =
    # 2 x 2048 x 1024 x 2 = 8,388,608 B; per layer 3 steps forward and 6 backward, on stream 3
    model = model_preset("llama3-8b")
    spec = ParallelismSpec(cp=4, dp=1, global_batch=1, dp_overlap=False)  # merged backward too
    tw = training_step(model, spec, granularity="chunk")
    assert model.cp_kv_bytes(micro_batch=1, cp=4) == 8_388_608
    kv = colls(tw, 0, "cp")
    # merged: one sendrecv per chunk pass carrying all the steps of its 32 layers
    assert [c.nbytes for _, c in kv] == [3 * 32 * 8_388_608, 6 * 32 * 8_388_608]
    program = tw.workload.programs[0]
    assert {program[j].stream for j, task in enumerate(program) if getattr(task, "index", None) in dict(kv)} == {
        STREAM_CP
    }
