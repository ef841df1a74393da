"""Megatron-Core's communication overlaps on hand-derived small steps: TP communication overlap (Transformer
Engine's userbuffers), the parameter all-gather overlapped with the next forward, gradient reduction in bf16."""

from __future__ import annotations

import dataclasses
import math

import pytest

from simulator.api import simulate
from simulator.compute.gpu import default_overlap_slowdown, layer_backward, layer_forward
from simulator.engine.timeline import task_times
from simulator.placement import Placement
from simulator.studies.scenario import prepare_step, step_settings
from simulator.studies.training import (
    StepOptions,
    overlap_notes,
    simulate_step,
    step_compute,
    tp_overlap_stretch_s,
)
from topologies.devices import H100_SXM5_80GB
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.tasks import Workload
from workloads.training import STREAM_PARAM, STREAM_TP, StepCompute, pipeline_schedule, training_step


@pytest.fixture(scope="module")
def h100():
    return build_system("dgx-h100", nodes=1)


def _alone_s(topology, kind: CollectiveKind, nbytes: int, group: tuple[int, ...], dtype: str = "bfloat16") -> float:
    """Seconds of one collective run alone on ``topology``."""
    c = Collective(kind=kind, nbytes=nbytes, group=group, dtype=dtype)
    return simulate(topology, Workload.sequence([c], nranks=8)).makespan_s


def test_tp_comm_overlap_leaves_only_the_pipelined_reduce_scatters_last_chunks(h100):
    # One layer (h 64, s 32, b 1, bf16) on a tensor pair with sequence parallelism: A = 32 x 64 x 2 = 4096 B per
    # collective. Forward: all-gather (QKV), reduce-scatter (proj), all-gather (FC1), reduce-scatter (FC2); backward
    # 4 all-gathers + 2 reduce-scatters. Compute 10 ms forward, 20 ms backward: every overlapped part (microseconds
    # on NVLink) hides behind it, so the step is 30 ms + the two exposed last chunks of the pipelined
    # reduce-scatters (TE num_splits 4): 2 x T(reduce-scatter of A/4 = 1024 B).
    model = custom_gpt(layers=1, hidden=64, heads=4, vocab=128, seq_len=32)
    compute = StepCompute.uniform(layers=1, forward_s=10e-3, backward_s=20e-3)
    options = StepOptions(compute=compute, exact=True)
    base = dict(tp=2, dp=1, global_batch=1, sequence_parallel=True)
    overlapped = simulate_step(model, ParallelismSpec(**base, tp_comm_overlap=True), system=h100, options=options)
    chunk_s = _alone_s(h100, CollectiveKind.REDUCE_SCATTER, 1024, (0, 1))
    assert math.isclose(overlapped.step_time_s, 30e-3 + 2 * chunk_s, rel_tol=1e-9)
    # without the overlap every collective sits on the compute stream: 30 ms + 6 all-gathers + 4 reduce-scatters of A
    plain = simulate_step(model, ParallelismSpec(**base), system=h100, options=options)
    ag_s = _alone_s(h100, CollectiveKind.ALL_GATHER, 4096, (0, 1))
    rs_s = _alone_s(h100, CollectiveKind.REDUCE_SCATTER, 4096, (0, 1))
    assert math.isclose(plain.step_time_s, 30e-3 + 6 * ag_s + 4 * rs_s, rel_tol=1e-9)
    # the same bytes move either way
    assert overlapped.breakdown["group"]["tp"]["nbytes"] == plain.breakdown["group"]["tp"]["nbytes"]


@pytest.mark.parametrize("granularity", ["layer", "chunk"])
def test_tp_comm_overlap_conserves_bytes_and_splits_as_te(granularity):
    model = custom_gpt(layers=4, hidden=64, heads=4, vocab=128, seq_len=32)
    base = dict(tp=4, pp=2, dp=1, global_batch=4, sequence_parallel=True)
    plain = training_step(model, ParallelismSpec(**base), granularity=granularity)
    over = training_step(model, ParallelismSpec(**base, tp_comm_overlap=True), granularity=granularity)
    for rank in range(8):
        assert over.nbytes_by_kind(rank) == plain.nbytes_by_kind(rank)
    program = over.workload.programs[0]
    tails = [t for t in program if t.stream == 0 and "exposed" in t.name]
    side = [t for t in program if t.stream == STREAM_TP]
    assert side and all(over.workload.collectives[t.index].kind is CollectiveKind.REDUCE_SCATTER for t in tails)
    a = 32 * 64 * 2  # s h D bytes of one collective
    tail_bytes = sum(over.workload.collectives[t.index].nbytes for t in tails)
    # stage 0 holds 2 of the 4 layers and runs m = 4 micro-batches: 8 layer forwards, each 2 exposed chunks of A/4
    assert tail_bytes == 8 * 2 * a // 4


def test_tp_comm_overlap_stretch_is_the_paired_gemms_share_of_sms():
    # Stretch of one layer's forward: the 4 paired GEMMs, QKV and FC1 beside 1-SM ring exchanges, proj and FC2 beside
    # 16-SM pipelined reduce-scatters: g k / (S - k) each (TE initialize_ub defaults).
    model = custom_gpt(layers=2, hidden=4096, heads=32, vocab=32000, seq_len=4096)
    p = ParallelismSpec(tp=4, dp=1, global_batch=1, sequence_parallel=True, tp_comm_overlap=True)
    fwd = layer_forward(model, H100_SXM5_80GB, micro_batch=1, seq_len=4096, tp=4, sp=True).by_name()
    bwd = layer_backward(model, H100_SXM5_80GB, micro_batch=1, seq_len=4096, tp=4, sp=True).by_name()
    one, sixteen = (default_overlap_slowdown(H100_SXM5_80GB, comm_ctas=k) for k in (1, 16))
    forward = (fwd["qkv"] + fwd["mlp_up"]) * one + (fwd["attn_proj"] + fwd["mlp_down"]) * sixteen
    backward = (bwd["attn_proj.dgrad"] + bwd["mlp_down.dgrad"]) * one + sixteen * (
        bwd["qkv.dgrad"] + bwd["qkv.wgrad"] + bwd["mlp_up.dgrad"] + bwd["mlp_up.wgrad"]
    )
    stretch = tp_overlap_stretch_s(model, p, H100_SXM5_80GB)
    assert stretch[0] == pytest.approx((forward,) * 2, rel=1e-12)
    assert stretch[1] == pytest.approx((backward,) * 2, rel=1e-12)
    plain = step_compute(model, ParallelismSpec(tp=4, dp=1, global_batch=1, sequence_parallel=True), H100_SXM5_80GB)
    over = step_compute(model, p, H100_SXM5_80GB)
    assert over.layer_forward_s[0] == pytest.approx(plain.layer_forward_s[0] + forward, rel=1e-12)


def test_overlap_param_gather_moves_the_gathers_before_the_first_forwards():
    # ZeRO-1, 2 data-parallel ranks, 2 layers: with overlap_param_gather the updated parameters are gathered on
    # stream 2 before the forward that needs them, not after the optimizer; the same bytes.
    model = custom_gpt(layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    base = dict(dp=2, zero=1, global_batch=4, bucket_bytes=64 * 64 * 4 * 4)
    plain = training_step(model, ParallelismSpec(**base))
    over = training_step(model, ParallelismSpec(**base, overlap_param_gather=True))
    assert over.nbytes_by_kind(0) == plain.nbytes_by_kind(0)
    program = over.workload.programs[0]
    gathers = [i for i, t in enumerate(program) if t.stream == STREAM_PARAM]
    optimizer = next(i for i, t in enumerate(program) if t.name.startswith("optimizer"))
    assert gathers and max(gathers) < optimizer
    # every gather is awaited by a forward compute task of the first micro-batch, none after the optimizer
    waiting = {j for t in program for j in t.after if j in gathers}
    assert waiting == set(gathers)
    assert all(program[i].name.startswith("fwd mb0") for i, t in enumerate(program) if set(t.after) & set(gathers))


def test_overlap_param_gather_hides_the_gathers_behind_compute(h100):
    # 8 data-parallel ranks, ZeRO-1, buckets of 16,384 parameters (64 KiB of fp32 gradients); compute 10 ms per layer
    # forward, 20 ms backward, 0 s for the embedding, logits and optimizer. Without overlap every bucket's gather
    # runs after the optimizer and ends the step. With it they run back to back from the step's start: those the
    # embedding (0 s) and layer 0 need are waited for before layer 0 runs, the others hide behind layer 0's 10 ms.
    # So the step is shorter by the gathers of the buckets first needed by layer 1 and the logits, each timed alone.
    model = custom_gpt(layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    compute = StepCompute.uniform(layers=2, forward_s=10e-3, backward_s=20e-3)
    options = StepOptions(compute=compute, exact=True)
    base = dict(dp=8, zero=1, global_batch=8, bucket_bytes=16384 * 4)
    plain = simulate_step(model, ParallelismSpec(**base), system=h100, options=options)
    spec = ParallelismSpec(**base, overlap_param_gather=True)
    over = simulate_step(model, spec, system=h100, options=options)
    built = training_step(model, spec)
    program = built.workload.programs[0]
    hidden = {
        j
        for t in program
        if t.name in ("fwd mb0 stage0 layer1", "fwd mb0 stage0 logits")
        for j in t.after
        if program[j].stream == STREAM_PARAM
    }
    assert hidden
    saved = sum(
        _alone_s(h100, CollectiveKind.ALL_GATHER, built.workload.collectives[program[j].index].nbytes, tuple(range(8)))
        for j in hidden
    )
    assert math.isclose(over.step_time_s, plain.step_time_s - saved, rel_tol=1e-9)
    assert over.breakdown["group"]["dp"]["nbytes"] == plain.breakdown["group"]["dp"]["nbytes"]


def test_align_param_gather_dispatches_each_chunk_with_the_interleaved_schedule():
    # pp 2, vp 4, dp 2, ZeRO-1, m 4: with align_param_gather stage s issues chunks 0 and 1's all-gathers at the
    # step's start and chunk c's (c >= 2) when its forward number (c - 1) p - s begins (Megatron's
    # forward_step_helper: virtual micro-batch k + s is the first of chunk c - 1), i.e. after the last task on the
    # compute stream before that forward; without it every gather is issued at the start (no dependency).
    model = custom_gpt(layers=8, hidden=64, heads=4, vocab=128, seq_len=32)
    base = dict(
        pp=2, vp=4, dp=2, zero=1, global_batch=8, schedule="interleaved", bucket_bytes=None, overlap_param_gather=True
    )
    plain = training_step(model, ParallelismSpec(**base))
    aligned = training_step(model, ParallelismSpec(**base, align_param_gather=True))
    for rank, stage in ((0, 0), (2, 1)):  # data-parallel ranks first: ranks 0 and 2 hold stages 0 and 1
        assert aligned.nbytes_by_kind(rank) == plain.nbytes_by_kind(rank)
        assert all(not t.after for t in plain.workload.programs[rank] if t.stream == STREAM_PARAM)
        program = aligned.workload.programs[rank]
        forwards = [
            (mb, c)
            for phase, mb, c in pipeline_schedule("interleaved", pp=2, stage=stage, microbatches=4, vp=4)
            if phase == "F"
        ]
        for chunk in range(4):
            gathers = [t for t in program if t.stream == STREAM_PARAM and t.name.endswith(f"chunk{chunk}")]
            assert gathers
            if chunk < 2:
                assert all(not t.after for t in gathers)
                continue
            mb, c = forwards[(chunk - 1) * 2 - stage]
            begins = next(i for i, t in enumerate(program) if t.name.startswith(f"fwd mb{mb} stage{stage} chunk{c}"))
            before = max(i for i in range(begins) if program[i].stream == 0)
            assert all(t.after == (before,) for t in gathers)


def test_defer_embedding_wgrad_runs_the_output_layer_weight_gradients_in_the_flush(h100):
    # 1F1B, p 2 (one layer a stage), m 4, dp 1; every layer 1 ms forward, 2 ms backward; the logits backward 5 ms,
    # of which the output layer's weight gradient 2 ms; the rest 0 s. With every collective at 0 s (critical path):
    # stage 1 runs F0 B0 F1 B1 F2 B2 F3 B3 (1 + 7 ms each, its forward waiting 1 ms for stage 0's first), so its last
    # backward ends at 1 + 4 x 8 = 33 ms and stage 0's B3 at 35 ms. With wgrad_deferral_limit 3 the first three
    # backwards take 5 ms: stage 1's B3 ends at 1 + 3 x 6 + 8 = 27 ms, stage 0's B3 at 29 ms, and the three deferred
    # 2 ms GEMMs after it end stage 1 at 33 ms: 2 ms shorter, the same compute.
    model = custom_gpt(layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    compute = StepCompute(
        layer_forward_s=(1e-3, 1e-3), layer_backward_s=(2e-3, 2e-3), logits_backward_s=5e-3, logits_wgrad_s=2e-3
    )
    options = StepOptions(compute=compute, exact=True)
    base = dict(pp=2, dp=1, global_batch=4)
    plain = simulate_step(model, ParallelismSpec(**base), system=h100, options=options)
    spec = ParallelismSpec(**base, defer_embedding_wgrad_compute=True, wgrad_deferral_limit=3)
    deferred = simulate_step(model, spec, system=h100, options=options)
    assert math.isclose(plain.critical_path_s, 35e-3, rel_tol=1e-9)
    assert math.isclose(deferred.critical_path_s, 33e-3, rel_tol=1e-9)
    assert math.isclose(deferred.compute_s, plain.compute_s, rel_tol=1e-12)
    names = [t.name for t in training_step(model, spec).workload.programs[1]]
    assert [n for n in names if n.startswith("logits wgrad")] == [f"logits wgrad mb{i} stage1" for i in range(3)]
    assert names.index("logits wgrad mb0 stage1") > names.index("bwd mb3 stage1 logits")


def test_the_notes_name_the_deferred_output_layer_weight_gradients():
    # p 2, m 4: a limit of 3 defers the first three micro-batches' GEMMs, a limit of 0 every one; off, no note
    base = dict(pp=2, dp=1, global_batch=4)
    assert not any("defer embedding wgrad" in n for n in overlap_notes(ParallelismSpec(**base)))
    limited = ParallelismSpec(**base, defer_embedding_wgrad_compute=True, wgrad_deferral_limit=3)
    (note,) = [n for n in overlap_notes(limited) if n.startswith("defer embedding wgrad compute")]
    assert "weight gradients of the first 3 micro-batches in the pipeline flush" in note
    (note,) = overlap_notes(ParallelismSpec(**base, defer_embedding_wgrad_compute=True))
    assert "weight gradients of all micro-batches in the pipeline flush" in note


def test_grad_reduce_in_bf16_halves_the_gradient_bytes():
    model = custom_gpt(layers=2, hidden=64, heads=4, vocab=128, seq_len=32)
    base = dict(dp=2, global_batch=2, bucket_bytes=None)
    fp32 = training_step(model, ParallelismSpec(**base))
    bf16 = training_step(model, ParallelismSpec(**base, grad_reduce_in_bf16=True))
    assert 2 * bf16.nbytes_by_kind(0)["dp"] == fp32.nbytes_by_kind(0)["dp"]
    assert {c.dtype for c in bf16.workload.collectives} == {"bfloat16"}


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        (dict(tp=2, dp=1, tp_comm_overlap=True), "tp_comm_overlap"),
        (dict(dp=2, overlap_param_gather=True), "overlap_param_gather"),
        (dict(dp=2, zero=1, dp_overlap=False, overlap_param_gather=True), "overlap_param_gather"),
        (dict(dp=2, dtype="fp16", grad_reduce_in_bf16=True), "grad_reduce_in_bf16"),
        (dict(pp=2, dp=1, global_batch=2, overlap_p2p_comm=True), "overlap_p2p_comm"),
        (dict(dp=2, zero=1, align_param_gather=True), "align_param_gather"),
        (dict(dp=2, defer_embedding_wgrad_compute=True), "defer_embedding_wgrad_compute"),
        (dict(pp=2, global_batch=2, wgrad_deferral_limit=-1), "wgrad_deferral_limit"),
        # align_param_gather with the 1F1B schedule (pp 2, no virtual stages): only the interleaved one dispatches
        (
            dict(pp=2, dp=2, zero=1, global_batch=4, overlap_param_gather=True, align_param_gather=True),
            "align_param_gather",
        ),
        # a deferral limit without the deferral it limits
        (dict(pp=2, global_batch=2, wgrad_deferral_limit=3), "wgrad_deferral_limit"),
    ],
)
def test_bad_overlap_settings_are_refused_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=f"ParallelismSpec.{field}"):
        ParallelismSpec(**kw)


def test_step_settings_take_the_megatron_flags():
    s = step_settings(
        {"tp_comm_overlap": True, "sequence_parallel": True, "zero": 1, "overlap_param_gather": True, "nodes": 1}
    )
    s["grad_reduce_in_bf16"] = True
    p = prepare_step(s, environ={}).parallelism
    assert (p.tp_comm_overlap, p.overlap_param_gather, p.grad_reduce_in_bf16) == (True, True, True)
    s = step_settings({"pp": 2, "vp": 2, "schedule": "interleaved", "overlap_p2p_communication": True, "nodes": 1})
    assert prepare_step(s, environ={}).parallelism.overlap_p2p_comm
    s = step_settings(
        {
            "pp": 2,
            "vp": 2,
            "schedule": "interleaved",
            "zero": 1,
            "overlap_param_gather": True,
            "align_param_gather": True,
            "defer_embedding_wgrad_compute": True,
            "wgrad_deferral_limit": 4,
            "nodes": 2,
        }
    )
    setup = prepare_step(s, environ={})
    p = setup.parallelism
    assert (p.align_param_gather, p.defer_embedding_wgrad_compute, p.wgrad_deferral_limit) == (True, True, 4)
    assert not any("wgrad-deferral-limit" in line for line in setup.ignored)
    # a limit at or above the micro-batches (256 sequences over d 2: m 128) defers them all, as 0 does: said
    s = step_settings(
        {"pp": 2, "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": 128, "nodes": 2, "tp": 4}
    )
    assert any(line.startswith("wgrad-deferral-limit 128 ignored") for line in prepare_step(s, environ={}).ignored)
    defaults = prepare_step(step_settings({"nodes": 1}), environ={}).parallelism
    assert not (
        defaults.tp_comm_overlap
        or defaults.overlap_param_gather
        or defaults.align_param_gather
        or defaults.defer_embedding_wgrad_compute
        or defaults.wgrad_deferral_limit
        or defaults.grad_reduce_in_bf16
        or defaults.overlap_p2p_comm
    )
    with pytest.raises(ValueError, match="wgrad_deferral_limit: -2 is not allowed"):
        step_settings({"wgrad_deferral_limit": -2})


def test_reductions_stay_exact_with_the_overlaps():
    # tp 8 x cp 2 x dp 2 on 4 DGX H100 (server 2d + j holds context rank j of replica d), ZeRO-1: TP overlap keeps
    # the tensor group's collectives on NVLink inside each pass, and the parameter gathers run between servers, as
    # the overlapped gradient buckets do: the step picks the reductions it picks without the overlaps (context
    # rank 0 standing exactly for both; replicas not, their buckets crossing the pipeline's PCIe links), and
    # they still reproduce the full simulation.
    model = custom_gpt(layers=4, hidden=128, heads=8, vocab=128, seq_len=64)
    spec = ParallelismSpec(
        tp=8,
        cp=2,
        dp=2,
        zero=1,
        global_batch=8,
        bucket_bytes=4096,
        sequence_parallel=True,
        tp_comm_overlap=True,
        overlap_param_gather=True,
    )
    system = build_system("dgx-h100", nodes=4)
    compute = StepCompute.uniform(layers=4, forward_s=1e-3, backward_s=2e-3)
    reduced = simulate_step(model, spec, system=system, options=StepOptions(compute=compute))
    full = simulate_step(model, spec, system=system, options=StepOptions(compute=compute, exact=True))
    plain = dataclasses.replace(spec, tp_comm_overlap=False, overlap_param_gather=False)
    without = simulate_step(model, plain, system=system, options=StepOptions(compute=compute))
    assert reduced.notes[: len(without.notes)] == without.notes and without.notes[0].startswith("context ranks (exact)")
    assert not reduced.approximate
    assert math.isclose(reduced.step_time_s, full.step_time_s, rel_tol=1e-9)
    for group, entry in full.breakdown["group"].items():
        assert reduced.breakdown["group"][group]["nbytes"] == entry["nbytes"]


@pytest.mark.parametrize(("pp", "vp", "k"), [(p, v, k) for p in (2, 3, 4) for v in (2, 3) for k in (1, 2)])
def test_overlap_p2p_comm_keeps_the_interleaved_closed_form_without_deadlock(pp, vp, k):
    # every layer f = 1 ms, b = 2 ms, 2 layers per model chunk, free network (task_times: collectives take 0 s):
    # the non-blocking transfers change no compute dependency, so the step is still (m + (p - 1)/v)(f + b) per
    # stage's layers (SC21 sec. 2.2.2), m = p k, and every rank finishes (no deadlock)
    layers = 2 * pp * vp
    model = custom_gpt(layers=layers, hidden=64, heads=4, vocab=128, seq_len=32)
    m = pp * k
    spec = ParallelismSpec(tp=2, pp=pp, dp=2, vp=vp, schedule="interleaved", global_batch=2 * m, overlap_p2p_comm=True)
    compute = StepCompute.uniform(layers=layers, forward_s=1e-3, backward_s=2e-3)
    tw = training_step(model, spec, compute, granularity="chunk")
    assert task_times(tw.workload).makespan_s == pytest.approx((m + (pp - 1) / vp) * 3e-3 * layers / pp, rel=1e-12)


def test_overlap_p2p_comm_hides_stage_transfers_behind_the_backward():
    # interleaved p 4 x v 2 on 4 DGX H100 (stages on separate servers through the NICs), m = 8, large activations
    # (s 4096, h 1024: 8 MiB a transfer, ~0.2 ms at 400 Gb/s) beside 10 / 20 ms passes: blocking, a steady-state
    # forward waits for its receive after the backward before it, and the next pass for the sends; overlapped,
    # both run beside that backward. Same transfers and compute critical path, less exposed.
    model = custom_gpt(layers=8, hidden=1024, heads=8, vocab=128, seq_len=4096)
    system = build_system("dgx-h100", nodes=4)
    compute = StepCompute.uniform(layers=8, forward_s=10e-3, backward_s=20e-3)
    base = dict(pp=4, dp=1, vp=2, schedule="interleaved", global_batch=8, gpus=4)
    placement = Placement.block(system, nranks=4, gpus_per_node=1)  # one stage per server
    options = StepOptions(compute=compute, exact=True, placement=placement)
    blocking = simulate_step(model, ParallelismSpec(**base), system=system, options=options)
    overlapped = simulate_step(model, ParallelismSpec(**base, overlap_p2p_comm=True), system=system, options=options)
    assert overlapped.critical_path_s == pytest.approx(blocking.critical_path_s, rel=1e-12)
    # the warm-up and cool-down transfers stay blocking: less exposed, not none (11.1 -> 6.3 ms here)
    assert 0 < overlapped.exposed_comm_s < blocking.exposed_comm_s
    assert overlapped.breakdown["group"]["pp"]["nbytes"] == blocking.breakdown["group"]["pp"]["nbytes"]


@pytest.mark.parametrize("comm_type", ["p2p", "a2a", "allgather"])
def test_cp_comm_types_on_a_context_pair(h100, comm_type):
    # One layer (h 64 = 4 heads x 16, g = 4 KV heads, s 32, b 1, bf16) on a context pair: local K and V
    # 2 x 16 x 64 x 2 = 4096 B, local Q (and output) 16 x 64 x 2 = 2048 B. Compute 10 ms forward, 20 ms backward;
    # the pair also averages its gradients (one fp32 bucket, after the last backward task, exposed).
    # p2p: 1 ring step forward and 2 backward beside the attention: hidden, 30 ms + the gradient all-reduce.
    # a2a: forward all-to-alls of Q + K V = 6144 B and of the output 2048 B, backward the same two (output
    # gradient; dQ, dK, dV), all blocking. allgather: forward an all-gather of 2 x 4096 = 8192 B, backward the
    # all-gather again and a reduce-scatter of dK, dV of 8192 B, blocking.
    model = custom_gpt(layers=1, hidden=64, heads=4, vocab=128, seq_len=32)
    compute = StepCompute.uniform(layers=1, forward_s=10e-3, backward_s=20e-3)
    spec = ParallelismSpec(cp=2, dp=1, global_batch=1, cp_comm_type=comm_type)
    r = simulate_step(model, spec, system=h100, options=StepOptions(compute=compute, exact=True))
    pair = (0, 1)
    grads = r.breakdown["group"]["dp"]["nbytes"]
    expected = 30e-3 + _alone_s(h100, CollectiveKind.ALL_REDUCE, int(grads), pair, "float32")
    if comm_type == "a2a":
        expected += 2 * (
            _alone_s(h100, CollectiveKind.ALL_TO_ALL, 6144, pair)
            + _alone_s(h100, CollectiveKind.ALL_TO_ALL, 2048, pair)
        )
    elif comm_type == "allgather":
        expected += 2 * _alone_s(h100, CollectiveKind.ALL_GATHER, 8192, pair)
        expected += _alone_s(h100, CollectiveKind.REDUCE_SCATTER, 8192, pair)
    assert math.isclose(r.step_time_s, expected, rel_tol=1e-9)


def test_cp_a2a_needs_heads_per_tensor_rank_divisible_by_cp():
    model = custom_gpt(layers=1, hidden=64, heads=4, vocab=128, seq_len=32)
    with pytest.raises(ValueError, match="ParallelismSpec.cp"):
        ParallelismSpec(tp=4, cp=2, dp=1, global_batch=1, cp_comm_type="a2a").check(model)
    with pytest.raises(ValueError, match="ParallelismSpec.cp_comm_type"):
        ParallelismSpec(cp=2, dp=1, cp_comm_type="a2a+p2p")


def test_fabricsim_step_takes_the_overlap_flags(capsys):
    # the switches through the command a user calls: a Llama-3 8B-class step on one DGX H100, tp 2 with sequence
    # parallelism and ZeRO-1; the JSON echoes the layout and the notes name the approximations
    import json

    from simulator.cli import main

    argv = ["step", "--nodes", "1", "--tp", "2", "--pp", "1", "--global-batch", "4", "--seq-len", "2048"]
    argv += ["--sequence-parallel", "--zero", "1", "--format", "json", "--quiet"]
    argv += ["--tp-comm-overlap", "--overlap-param-gather", "--grad-reduce-in-bf16", "--cp-comm-type", "allgather"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    p = data["parallelism"]
    assert (p["tp_comm_overlap"], p["overlap_param_gather"], p["grad_reduce_in_bf16"], p["cp_comm_type"]) == (
        True,
        True,
        True,
        "allgather",
    )
    assert any(n.startswith("tp comm overlap (APPROXIMATE") for n in data["notes"])
    assert any(n.startswith("overlap param gather") for n in data["notes"])
