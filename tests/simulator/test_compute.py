"""GPU compute-time model: roofline invariants, hand-derived numbers, the SC21 compute-only check, bad input."""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
from importlib import resources

import numpy as np
import pytest

from simulator.compute.gpu import (
    A100_MAMF_2024,
    A100_SC21_GEMM_EFFICIENCY,
    COMPUTE_MODELS,
    GB200_BF16_MAMF_2025,
    GB200_DGXC_BF16_GEMM_EFFICIENCY,
    GB200_DGXC_FP8_GEMM_EFFICIENCY,
    GB200_FP8_MAMF_2025,
    H100_DGXC_FP8_GEMM_EFFICIENCY,
    ComputeBreakdown,
    GpuComputeModel,
    compute_model_for,
    default_overlap_slowdown,
    embedding_backward,
    embedding_forward,
    flash_efficiency,
    gemm_efficiency,
    gemm_op,
    layer_backward,
    layer_backward_time_s,
    layer_forward,
    layer_forward_time_s,
    layer_times,
    logits_backward,
    logits_forward,
    memory_op,
    optimizer_step,
    overlapped_time_s,
)
from simulator.validation import sc21 as cal
from simulator.validation.sc21 import format_sc21_check, sc21_compute_only_check
from topologies.devices import A100_SXM4_80GB, B200, GB200, H100_SXM5_80GB, H200_SXM, RTX_4090
from workloads.presets import MODELS

GPUS = [A100_SXM4_80GB, H100_SXM5_80GB, H200_SXM, B200]


def hbm_s(gpu, nbytes):
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * COMPUTE_MODELS[gpu.name].memory_efficiency)


# --------------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_no_gemm_beats_the_hardware_or_eff_max(gpu):
    rng = np.random.default_rng(7)
    eff_max = COMPUTE_MODELS[gpu.name].gemm_efficiency_bf16
    for m, n, k, count in zip(*(rng.integers(1, 20000, 200) for _ in range(3)), rng.integers(1, 64, 200)):
        op = gemm_op(gpu, m=int(m), n=int(n), k=int(k), count=int(count))
        assert op.time_s >= op.flops / gpu.dense_bf16_flop_per_s
        assert op.time_s >= op.nbytes / gpu.hbm_bandwidth_bytes_per_s
        assert op.flops / op.time_s <= eff_max * gpu.dense_bf16_flop_per_s * (1 + 1e-12)


def test_gemm_time_never_falls_as_a_dimension_grows():
    rng = np.random.default_rng(11)
    for _ in range(100):
        m, n, k = (int(x) for x in rng.integers(1, 12000, 3))
        base = gemm_op(H100_SXM5_80GB, m=m, n=n, k=k).time_s
        for grown in (dict(m=m + 1, n=n, k=k), dict(m=m, n=n + 37, k=k), dict(m=m, n=n, k=2 * k)):
            assert gemm_op(H100_SXM5_80GB, **grown).time_s >= base


def test_layer_breakdowns_add_up_and_match_the_model_flops():
    model = MODELS["gpt-18.4b"]
    kw = dict(micro_batch=2, tp=8, flash_attention=False)
    fwd = layer_forward(model, A100_SXM4_80GB, **kw)
    assert fwd.time_s == pytest.approx(sum(op.time_s for op in fwd.ops), rel=1e-12)
    assert sum(fwd.by_kind().values()) == pytest.approx(fwd.time_s, rel=1e-12)
    # without flash attention the kernels execute exactly the model's FLOPs (all GEMMs)
    assert fwd.flops == pytest.approx(model.layer_forward_flops(0, micro_batch=2, tp=8).total, rel=1e-12)
    bwd = layer_backward(model, A100_SXM4_80GB, **kw)
    assert bwd.flops == pytest.approx(2 * fwd.flops, rel=1e-12)  # dgrad + wgrad per GEMM
    full = layer_backward(model, A100_SXM4_80GB, recompute="full", **kw)
    assert full.time_s == pytest.approx(bwd.time_s + fwd.time_s, rel=1e-12)
    selective = layer_backward(model, A100_SXM4_80GB, recompute="selective", **kw)
    core = sum(op.time_s for op in fwd.ops if op.kind == "attention")
    assert selective.time_s == pytest.approx(bwd.time_s + core, rel=1e-12)
    assert [op.name for op in full.ops[: len(fwd.ops)]] == ["recompute." + op.name for op in fwd.ops]


def test_layer_times_of_every_layer_are_those_of_its_kind():
    # DeepSeek-V3-like: 3 dense layers, then MoE; each layer's times are layer_forward / layer_backward's
    model = MODELS["deepseek-v3-like"]
    kw = dict(micro_batch=1, tp=8, sp=True, ep=8)
    forward, backward = layer_times(model, H100_SXM5_80GB, recompute="full", **kw)
    assert len(forward) == len(backward) == model.layers
    for layer in (0, 2, 3, model.layers - 1):
        assert forward[layer] == layer_forward(model, H100_SXM5_80GB, layer=layer, **kw).time_s
        assert backward[layer] == layer_backward(model, H100_SXM5_80GB, layer=layer, recompute="full", **kw).time_s
    assert forward[0] != forward[3]  # a dense and a MoE layer


def test_elementwise_kernels_are_memory_bound_and_flash_needs_no_selective_recompute():
    model = MODELS["llama3-70b"]
    kw = dict(micro_batch=1, tp=8, sp=True)
    fwd = layer_forward(model, H100_SXM5_80GB, **kw)
    elementwise = [op for op in fwd.ops if op.kind == "elementwise"]
    assert elementwise and all(op.bound == "memory" and op.flops == 0 for op in elementwise)
    assert {op.name for op in fwd.ops if op.kind == "attention"} == {"flash_attention"}
    assert layer_backward_time_s(model, H100_SXM5_80GB, recompute="selective", **kw) == layer_backward_time_s(
        model, H100_SXM5_80GB, **kw
    )


def test_layer_time_grows_with_work_and_falls_with_tensor_parallelism():
    model = MODELS["llama3-70b"]
    by_batch = [layer_forward_time_s(model, H100_SXM5_80GB, micro_batch=b, tp=8, sp=True) for b in (1, 2, 4)]
    by_seq = [
        layer_forward_time_s(model, H100_SXM5_80GB, micro_batch=1, seq_len=s, tp=8, sp=True) for s in (2048, 4096, 8192)
    ]
    by_tp = [layer_forward_time_s(model, H100_SXM5_80GB, micro_batch=1, tp=t, sp=True) for t in (1, 2, 4, 8)]
    assert all(a < b for a, b in zip(by_batch, by_batch[1:]))
    assert all(a < b for a, b in zip(by_seq, by_seq[1:]))
    assert all(a > b for a, b in zip(by_tp, by_tp[1:]))


def test_fp8_speeds_up_linear_layers_only():
    model = MODELS["llama3-405b"]
    kw = dict(micro_batch=1, tp=8, sp=True)
    bf16 = layer_forward(model, H100_SXM5_80GB, **kw).by_kind()
    fp8 = layer_forward(model, H100_SXM5_80GB, dtype="fp8", **kw).by_kind()
    assert fp8["gemm"] < 0.7 * bf16["gemm"]  # 1979 x 0.660 vs 989 x 0.803 TFLOP/s: 1.64x
    assert fp8["attention"] == bf16["attention"]
    # elementwise work grows by Transformer Engine's casts only: 8192 tokens; qkv (k = h = 16384) and mlp_up
    # (k = 16384) take their FP8 input from the norm, 3 x 1 - 2 = 1 byte per element more; attn_proj
    # (k = 16384/8 = 2048) and mlp_down (k = 53248/8 = 6656) cast and transpose it, 2 + 1 + 1 = 4 bytes
    cast_bytes = 8192 * (16384 + 16384 + 4 * 2048 + 4 * 6656)
    assert fp8["elementwise"] - bf16["elementwise"] == pytest.approx(hbm_s(H100_SXM5_80GB, cast_bytes), rel=1e-12)


def test_fp8_backward_casts_each_output_gradient():
    model = MODELS["llama3-8b"]
    kw = dict(micro_batch=1, tp=1)
    bwd = {op.name: op for op in layer_backward(model, H100_SXM5_80GB, dtype="fp8", **kw).ops}
    # dY of mlp_down is 8192 tokens x h 4096; cast + transpose: read 2, write 1 + 1 bytes per element
    assert bwd["mlp_down.fp8_cast_grad"].nbytes == 4 * 8192 * 4096
    # mlp_up's dY is the fused gate and up output, 8192 x 2 x 14336
    assert bwd["mlp_up.fp8_cast_grad"].nbytes == 4 * 8192 * 2 * 14336
    assert not any(
        name.endswith("fp8_cast_grad") for name in (op.name for op in layer_backward(model, H100_SXM5_80GB, **kw).ops)
    )
    # the output layer is not a Transformer Engine module: bf16 and no cast under FP8
    fp8 = logits_forward(model, H100_SXM5_80GB, micro_batch=1, dtype="fp8")
    assert fp8.time_s == logits_forward(model, H100_SXM5_80GB, micro_batch=1).time_s


def test_moe_layers_time_every_expert_kernel():
    model = MODELS["deepseek-v3-like"]
    moe = layer_forward(model, H100_SXM5_80GB, layer=3, micro_batch=1, ep=64)
    dense = layer_forward(model, H100_SXM5_80GB, layer=0, micro_batch=1, ep=64)
    names = {op.name for op in moe.ops}
    assert {"router", "moe_permute", "expert_up", "expert_down", "moe_unpermute", "shared_up"} <= names
    assert "mlp_up" in {op.name for op in dense.ops} and "router" not in {op.name for op in dense.ops}
    # ep spreads experts, not tokens: the routed GEMM FLOPs per GPU do not depend on ep (balanced routing)
    one = layer_forward(model, H100_SXM5_80GB, layer=3, micro_batch=1, ep=8)
    assert sum(op.flops for op in one.ops if op.name.startswith("expert")) == pytest.approx(
        sum(op.flops for op in moe.ops if op.name.startswith("expert")), rel=1e-12
    )


# --------------------------------------------------------------------------------------------------
# hand-derived numbers
# --------------------------------------------------------------------------------------------------


def test_huge_aligned_gemm_reaches_eff_max():
    # A100: m = 108 x 256, n = 64 x 128 -> 6912 tiles = exactly 64 waves of 108 SMs, no padding, compute-bound
    eff = gemm_efficiency(A100_SXM4_80GB, m=108 * 256, n=64 * 128, k=8192)
    assert eff == pytest.approx(A100_SC21_GEMM_EFFICIENCY, rel=1e-12)  # the SC21-fitted A100 eff_max
    eff = gemm_efficiency(A100_SXM4_80GB, m=108 * 256, n=64 * 128, k=8192, compute_model=A100_MAMF_2024)
    assert eff == pytest.approx(271.2 / 312, rel=1e-12)  # Bekman's 2024 MAMF measurement


def test_h100_8192_cube_by_hand():
    # 32 x 64 = 2048 tiles -> ceil(2048/132) = 16 waves: efficiency 0.803 x 0.847 x 2048 / 2112, where
    # 0.847 = 701/828 is the sustained (all 8 GPUs busy) over single-GPU matmul throughput of the H200 (MSMF/MAMF)
    eff = 794.5 / 989 * (701 / 828) * 2048 / (16 * 132)
    op = gemm_op(H100_SXM5_80GB, m=8192, n=8192, k=8192)
    assert op.bound == "compute"
    assert op.time_s == pytest.approx(2 * 8192**3 / (989e12 * eff), rel=1e-12)


def test_wave_and_tile_quantisation():
    # A100: 9 x 12 = 108 tiles fill one wave; one more column of n spills into a 13th tile column,
    # 117 tiles = 2 waves, twice the time (compute-bound: 0.21 ms of math vs 0.04 ms of traffic)
    one = gemm_op(A100_SXM4_80GB, m=9 * 256, n=12 * 128, k=8192)
    two = gemm_op(A100_SXM4_80GB, m=9 * 256, n=12 * 128 + 1, k=8192)
    assert one.bound == two.bound == "compute"
    assert two.time_s == pytest.approx(2 * one.time_s, rel=1e-12)
    # a single 64^3 GEMM uses 1 of 108 SMs and 1/16 of its tile: eff_max x (64 x 64)/(256 x 128) / 108
    assert gemm_efficiency(A100_SXM4_80GB, m=64, n=64, k=64) == pytest.approx(
        A100_SC21_GEMM_EFFICIENCY * (64 * 64) / (256 * 128) / 108, rel=1e-12
    )


def test_small_elementwise_op_is_memory_bound_at_measured_bandwidth():
    op = memory_op(A100_SXM4_80GB, nbytes=1e6)
    # 1 MB at 2039 GB/s x 1220.7/1448.4 (STREAM-like efficiency) = 0.582 us
    assert op.bound == "memory" and op.time_s == pytest.approx(1e6 / (2039e9 * 1220.7 / 1448.4), rel=1e-12)
    # a low-intensity GEMM (k = 16: 16 FLOP per 2-byte element) is memory-bound too
    assert gemm_op(H100_SXM5_80GB, m=65536, n=8192, k=16).bound == "memory"


def test_flash_attention_time_by_hand():
    # Llama 3 8B, b 1, s 8192, 32 heads of 128: 4 b a s^2 d FLOPs x causal (64 + 1)/(2 x 64) of 128-blocks,
    # at cuDNN's causal head-dimension-128 forward at 8192 (529 TFLOP/s, FA-3 paper fig. 5; the H100's default
    # kernel), times the sustained fraction 701/828
    model = MODELS["llama3-8b"]
    fwd = {op.name: op for op in layer_forward(model, H100_SXM5_80GB, micro_batch=1).ops}["flash_attention"]
    flops = 4 * 32 * 8192 * 8192 * 128 * 65 / 128
    assert fwd.flops == pytest.approx(flops, rel=1e-12)
    assert fwd.time_s == pytest.approx(flops / (529e12 * 701 / 828), rel=1e-12)
    # backward: cuDNN's unmasked 518 TFLOP/s at 8192 times its forward's masked/unmasked ratio there (529 / 600),
    # 2.5 x the forward FLOPs
    causal_bwd = 518 * 529 / 600
    bwd = {op.name: op for op in layer_backward(model, H100_SXM5_80GB, micro_batch=1).ops}["flash_attention.bwd"]
    assert bwd.time_s == pytest.approx(2.5 * flops / (causal_bwd * 1e12 * 701 / 828), rel=1e-12)


def test_flash_efficiency_follows_the_kernels_measurements_and_context_parallel_split():
    h100 = COMPUTE_MODELS["h100_sxm5_80gb"]
    assert h100.flash_kernel == "cudnn" and COMPUTE_MODELS["b200"].flash_kernel == "fa3"
    fa3 = dataclasses.replace(h100, flash_kernel="fa3")
    fa2 = dataclasses.replace(h100, flash_kernel="fa2")
    eff = functools.partial(flash_efficiency, fa3, head_dim=128)
    # the published points come back (FA-3 paper figs. 5-6): FA-3 forward 467 / 625 / 648 at 512 / 2k / 16k
    # unmasked, 616 masked at 16k, backward 316 ... 561; cuDNN 484 and FA-2 298 masked at 2k, FA-2 backward 322 at 16k
    assert eff(seq_len=512, causal=False, backward=False) * 989 == pytest.approx(467, rel=1e-12)
    assert eff(seq_len=2048, causal=False, backward=False) * 989 == pytest.approx(625, rel=1e-12)
    assert eff(seq_len=16384, causal=True, backward=False) * 989 == pytest.approx(616, rel=1e-12)
    for seq, tflops in zip((512, 1024, 2048, 4096, 8192, 16384), (316, 424, 501, 542, 559, 561), strict=True):
        assert eff(seq_len=seq, causal=False, backward=True) * 989 == pytest.approx(tflops, rel=1e-12)
    at_2k = {
        k: flash_efficiency(c, seq_len=2048, head_dim=128, causal=True, backward=False)
        for k, c in (("cudnn", h100), ("fa2", fa2), ("fa3", fa3))
    }
    assert at_2k["cudnn"] * 989 == pytest.approx(484, rel=1e-12) and at_2k["fa2"] * 989 == pytest.approx(298, rel=1e-12)
    assert flash_efficiency(fa2, seq_len=16384, head_dim=128, causal=False, backward=True) * 989 == pytest.approx(322)
    # between the published points, linear in log(sequence) and log(head dimension), w = log(1.5) / log(2) of the
    # way: cuDNN masked at 3072, head dimension 128, 484 + (518 - 484) w = 503.9; unmasked at 16k, head dimension 96
    # (64 -> 128), 413 + (595 - 413) w = 519.5; FA-2's backward there 291 + (322 - 291) w = 309.1 (figs. 5-6)
    w = math.log(1.5) / math.log(2)
    cudnn_at = functools.partial(flash_efficiency, h100)
    assert cudnn_at(seq_len=3072, head_dim=128, causal=True, backward=False) * 989 == pytest.approx(484 + 34 * w)
    assert cudnn_at(seq_len=16384, head_dim=96, causal=False, backward=False) * 989 == pytest.approx(413 + 182 * w)
    assert flash_efficiency(fa2, seq_len=16384, head_dim=96, causal=False, backward=True) * 989 == pytest.approx(
        291 + 31 * w
    )
    # FA-3 beats cuDNN beats FA-2 masked at 2k and longer (521 > 484 > 298 at 2k)
    assert at_2k["fa3"] > at_2k["cudnn"] > at_2k["fa2"]
    # FA-3's curves rise with the sequence, lower with the mask (cuDNN's unmasked forward peaks at 2k: not here)
    seqs = (256, 512, 1000, 3000, 8192, 16384, 65536)
    for backward in (False, True):
        for causal in (False, True):
            values = [eff(seq_len=s, causal=causal, backward=backward) for s in seqs]
            assert values == sorted(values)
        assert eff(seq_len=4096, causal=True, backward=backward) < eff(seq_len=4096, causal=False, backward=backward)
    # head dimension 256 beats 128 beats 64 unmasked (756 > 648 > 497 at 16k)
    by_dim = [flash_efficiency(fa3, seq_len=16384, head_dim=d, causal=False, backward=False) for d in (64, 128, 256)]
    assert by_dim == sorted(by_dim) and by_dim[0] * 989 == pytest.approx(497, rel=1e-12)
    # the A100 keeps FlashAttention-2's flat best case, and no other kernel
    a100 = COMPUTE_MODELS["a100_sxm4_80gb"]
    assert a100.flash_kernel == "fa2"
    assert flash_efficiency(a100, seq_len=512, head_dim=64, causal=True, backward=True) == 0.63
    with pytest.raises(ValueError, match=r"GpuComputeModel.flash_kernel: 'cudnn' is not allowed for a100_sxm4_80gb"):
        dataclasses.replace(a100, flash_kernel="cudnn")
    with pytest.raises(ValueError, match=r"GpuComputeModel.flash_kernel: 'fa4' is not allowed; expected one of"):
        dataclasses.replace(h100, flash_kernel="fa4")
    # context parallelism 2 on Llama 3 8B: kernels of 4096 keys, half the FLOPs masked, half not (cuDNN)
    cudnn = functools.partial(flash_efficiency, h100, head_dim=128)
    model = MODELS["llama3-8b"]
    op = {o.name: o for o in layer_forward(model, H100_SXM5_80GB, micro_batch=1, cp=2).ops}["flash_attention"]
    per_flop = 0.5 / cudnn(seq_len=4096, causal=True, backward=False) + 0.5 / cudnn(
        seq_len=4096, causal=False, backward=False
    )
    assert op.time_s == pytest.approx(op.flops * per_flop / (989e12 * 701 / 828), rel=1e-12)
    # 518 and 609 TFLOP/s: cuDNN's masked and unmasked forward at 4096
    assert per_flop == pytest.approx(0.5 * 989 / 518 + 0.5 * 989 / 609, rel=1e-12)


def test_embedding_logits_and_optimizer_by_hand():
    model = MODELS["gpt-1.7b"]
    # forward embedding of b s = 2048 tokens x h 2304: gather 2D + position add 3D + dropout (2D + 1) = 15 B/element
    emb = embedding_forward(model, A100_SXM4_80GB, micro_batch=1)
    assert emb.nbytes == 2048 * 2304 * 15 and emb.time_s == pytest.approx(hbm_s(A100_SXM4_80GB, emb.nbytes))
    assert embedding_backward(model, A100_SXM4_80GB, micro_batch=1).time_s > 0
    logits = {op.name: op for op in logits_forward(model, A100_SXM4_80GB, micro_batch=1).ops}
    assert logits["logits"].flops == model.logits_flops(micro_batch=1) == 2 * 2048 * 2304 * 51200
    assert (
        sum(op.flops for op in logits_backward(model, A100_SXM4_80GB, micro_batch=1).ops) == 2 * logits["logits"].flops
    )
    # zero the buffer 4 + norm pass 4 + Adam 4 + 24 + master -> model copy 4 + 2 = 42 bytes per parameter
    opt = optimizer_step(H100_SXM5_80GB, parameters=1e9)
    assert opt.nbytes == 42e9 and opt.time_s == pytest.approx(hbm_s(H100_SXM5_80GB, 42e9), rel=1e-12)
    assert opt.by_kind()["optimizer"] == opt.time_s
    # distributed optimizer over d = 8: the shard's 38 bytes per parameter / 8, the whole buffer zeroed (4 bytes);
    # FP8 casts every weight once, 2 + 1 + 1 bytes
    sharded = optimizer_step(H100_SXM5_80GB, parameters=1e9 / 8, buffer_parameters=1e9, fp8_weights=1e9)
    assert sharded.nbytes == pytest.approx(38e9 / 8 + 4e9 + 4e9, rel=1e-12)
    assert sharded.by_name()["fp8_weight_cast"] == pytest.approx(hbm_s(H100_SXM5_80GB, 4e9), rel=1e-12)


def test_a_launch_gap_is_paid_once_per_kernel():
    # every GPU ships 0 s (no sourced figure); a gap set by the user lengthens each kernel by exactly that much
    assert all(cm.launch_gap_s == 0.0 for cm in COMPUTE_MODELS.values())
    gapped = dataclasses.replace(COMPUTE_MODELS["h100_sxm5_80gb"], launch_gap_s=5e-6)
    model = MODELS["llama3-8b"]
    plain = layer_backward(model, H100_SXM5_80GB, micro_batch=1, recompute="full")
    slow = layer_backward(model, H100_SXM5_80GB, micro_batch=1, recompute="full", compute_model=gapped)
    assert len(slow.ops) == len(plain.ops)
    assert slow.time_s - plain.time_s == pytest.approx(5e-6 * len(plain.ops), rel=1e-9)
    with pytest.raises(ValueError, match=r"GpuComputeModel.launch_gap_s: -1e-06 is not allowed; expected 0 <= s < 1"):
        dataclasses.replace(gapped, launch_gap_s=-1e-6)


def test_overlap_slowdown_from_sms_taken_by_nccl():
    # 16 channel CTAs hold 16 SMs: H100 132 -> 16/116, A100 108 -> 16/92
    assert default_overlap_slowdown(H100_SXM5_80GB) == pytest.approx(16 / 116)
    assert default_overlap_slowdown(A100_SXM4_80GB) == pytest.approx(16 / 92)
    assert overlapped_time_s(2.0, H100_SXM5_80GB) == pytest.approx(2.0 * (1 + 16 / 116))
    assert overlapped_time_s(2.0, H100_SXM5_80GB, overlap_slowdown=0.25) == 2.5


def test_breakdowns_concatenate():
    a = optimizer_step(A100_SXM4_80GB, parameters=1e6)
    b = embedding_forward(MODELS["gpt-1.7b"], A100_SXM4_80GB, micro_batch=1)
    both = a + b
    assert isinstance(both, ComputeBreakdown) and both.ops == a.ops + b.ops
    assert both.time_s == pytest.approx(a.time_s + b.time_s, rel=1e-12)


# --------------------------------------------------------------------------------------------------
# calibration check: SC21 Table 1, compute only
# --------------------------------------------------------------------------------------------------


def test_sc21_compute_only_throughput_bounds_the_measured_one():
    rows = sc21_compute_only_check()
    print("\n" + format_sc21_check(rows))
    assert len(rows) == 10
    # A100 best-shape GEMM, TFLOP/s: nothing runs faster on average
    ceiling = A100_SC21_GEMM_EFFICIENCY * A100_SXM4_80GB.dense_bf16_flop_per_s / 1e12
    for r in rows:
        # the measured runs also communicate, load data and log: compute alone must be at least as fast
        assert r.ratio <= 1.0, r.model
        assert r.measured_tflops < r.compute_only_tflops <= r.compute_only_tflops_no_bubble < ceiling
        assert (
            r.microbatches * r.micro_batch * r.dp
            == {
                "GPT-1.7B": 512,
                "GPT-3.6B": 512,
                "GPT-7.5B": 512,
                "GPT-18.4B": 1024,
                "GPT-39.1B": 1536,
                "GPT-76.1B": 1792,
                "GPT-145.6B": 2304,
                "GPT-310.1B": 2160,
                "GPT-529.6B": 2520,
                "GPT-1008.0B": 3072,
            }[r.model]
        )


def test_a100_gemm_efficiency_is_the_documented_sc21_fit():
    # compute.py and compute_calibration.py document eff_max = 0.71 for the A100 (optimum 0.7063, two digits),
    # every other A100 parameter the sourced one; the 2024 MAMF figure 271.2/312 stays available
    a100 = COMPUTE_MODELS["a100_sxm4_80gb"]
    assert A100_SC21_GEMM_EFFICIENCY == a100.gemm_efficiency_bf16 == 0.71
    assert A100_MAMF_2024.gemm_efficiency_bf16 == 271.2 / 312
    assert dataclasses.replace(a100, gemm_efficiency_bf16=A100_MAMF_2024.gemm_efficiency_bf16) == A100_MAMF_2024
    fit = cal.fit_gemm_efficiency()
    assert round(fit.gemm_efficiency, 4) == 0.7063 and round(fit.gemm_efficiency, 2) == A100_SC21_GEMM_EFFICIENCY
    assert fit.holdout_error is None and len(fit.predictions) == 10
    # the fit's optimum is at least as good as the shipped rounding, which is at least as good as MAMF
    shipped = cal.mean_abs_error(cal.sc21_predict())
    assert fit.fit_error <= shipped < cal.mean_abs_error(cal.sc21_predict(A100_MAMF_2024))


def test_gb200_gemm_efficiencies_are_the_documented_dgxc_fits_below_the_measured_best_shapes():
    # gpu.py documents one fitted number per precision for the GB200 (dgxc_fit --system gb200-nvl72 --max-gpus 128),
    # each below Bekman's measured GB200 MAMF (1822.0 BF16, 3615.6 FP8 TFLOP/s) over this GPU's 2450 / 4900 peaks
    gb200 = COMPUTE_MODELS["gb200"]
    assert gb200.gemm_efficiency_bf16 == GB200_DGXC_BF16_GEMM_EFFICIENCY == 0.650
    assert gb200.gemm_efficiency_fp8 == GB200_DGXC_FP8_GEMM_EFFICIENCY == 0.546
    assert GB200_BF16_MAMF_2025 * GB200.dense_bf16_flop_per_s == pytest.approx(1822.0e12)
    assert GB200_FP8_MAMF_2025 * GB200.dense_fp8_flop_per_s == pytest.approx(3615.6e12)
    assert gb200.gemm_efficiency_bf16 < GB200_BF16_MAMF_2025 and gb200.gemm_efficiency_fp8 < GB200_FP8_MAMF_2025

    # the documented cross-check: fitted FP8 over BF16 GEMM throughput, GB200 0.546 x 4900 / (0.650 x 2450) = 1.680,
    # H100 0.660 x 1979 / (0.803 x 989) = 1.644 (H100 BF16 the measured 794.5 / 989): within 3 %
    def ratio(gpu, cm):
        return cm.gemm_efficiency_fp8 * gpu.dense_fp8_flop_per_s / (cm.gemm_efficiency_bf16 * gpu.dense_bf16_flop_per_s)

    h100 = COMPUTE_MODELS["h100_sxm5_80gb"]
    assert h100.gemm_efficiency_fp8 == H100_DGXC_FP8_GEMM_EFFICIENCY
    assert ratio(GB200, gb200) == pytest.approx(1.680, abs=5e-4)
    assert ratio(H100_SXM5_80GB, h100) == pytest.approx(1.644, abs=5e-4)
    assert ratio(GB200, gb200) / ratio(H100_SXM5_80GB, h100) - 1 < 0.03


def test_sc21_proxy_meets_the_acceptance_and_mamf_does_not():
    before = cal.sc21_predict(A100_MAMF_2024)
    after = cal.sc21_predict()
    # with MAMF the proxy is the full simulation itself (T = I + N_r, N_r measured with MAMF): every row
    # over-predicts, +9.7 % (GPT-7.5B) to +21.9 % (GPT-1.7B) in simulator.validation.sc21's table
    assert [p.step_time_s for p in before] == pytest.approx(list(cal.SC21_MAMF_STEP_S.values()), rel=1e-12)
    assert all(0.09 <= p.error <= 0.23 for p in before)
    assert cal.mean_abs_error(after) <= 0.10
    # a slower GEMM only adds time: every row's prediction falls, the network part is unchanged
    for b, a in zip(before, after):
        assert a.model == b.model and a.network_added_s == b.network_added_s
        assert a.compute_only_iteration_s > b.compute_only_iteration_s and a.predicted_tflops < b.predicted_tflops


@pytest.mark.slow
def test_sc21_holdout_odd_and_even_rows():
    odd, even = cal.sc21_holdout()
    # measured (sc21 docstring): odd rows -> 0.7224, 2.45 % on the even; even -> 0.7063, 2.99 %
    assert odd.fit_models == ("GPT-1.7B", "GPT-7.5B", "GPT-39.1B", "GPT-145.6B", "GPT-529.6B")
    assert set(odd.fit_models).isdisjoint(even.fit_models) and len(even.fit_models) == 5
    for fit in (odd, even):
        assert fit.holdout_error <= 0.10
        assert 0.70 <= fit.gemm_efficiency <= 0.73


def test_training_tables_ship_with_their_sources():
    for table in ("training_megatron_sc21.csv", "training_hardware_network_specs.csv"):
        with (resources.files("simulator.validation") / "data" / table).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert rows and all(r["source"].strip() and r["source_ref"].strip() for r in rows), table


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------


def test_calibration_bad_inputs():
    with pytest.raises(ValueError, match=r"models: 'GPT-2' is not a Table 1 row; expected one of GPT-1.7B"):
        cal.fit_gemm_efficiency(models=("GPT-2",))
    with pytest.raises(ValueError, match=r"models: 'GPT-1.7B' is not allowed; expected a tuple"):
        cal.fit_gemm_efficiency(models="GPT-1.7B")
    with pytest.raises(ValueError, match=r"models: \(\) is not allowed"):
        cal.fit_gemm_efficiency(models=())
    with pytest.raises(ValueError, match=r"network_added_s: has no value for 'GPT-3.6B'"):
        cal.fit_gemm_efficiency(models=("GPT-3.6B",), network_added_s={"GPT-1.7B": 0.0})
    with pytest.raises(ValueError, match=r"step_s\['GPT-1.7B'\]: nan is not allowed; expected a finite number"):
        cal.sc21_network_added_s({"GPT-1.7B": float("nan")})
    with pytest.raises(ValueError, match=r"step_s: 'GPT-9B' is not a Table 1 row"):
        cal.sc21_network_added_s({"GPT-9B": 1.0})
    with pytest.raises(ValueError, match=r"predictions: \[\] is not allowed; expected at least one row"):
        cal.mean_abs_error([])


def test_bad_inputs_name_the_field_and_the_allowed_values():
    model = MODELS["llama3-8b"]
    with pytest.raises(ValueError, match=r"dtype: 'fp16' is not allowed; expected one of 'bf16', 'fp8'"):
        layer_forward(model, H100_SXM5_80GB, micro_batch=1, dtype="fp16")
    with pytest.raises(ValueError, match=r"dtype: 'fp8' is not allowed on a100_sxm4_80gb"):
        gemm_op(A100_SXM4_80GB, m=1, n=1, k=1, dtype="fp8")
    with pytest.raises(
        ValueError,
        match=r"gpu: 'rtx_4090' has no kernel-efficiency parameters; expected one of "
        r"a100_sxm4_80gb, h100_sxm5_80gb, h200_sxm, b200",
    ):
        layer_forward_time_s(model, RTX_4090, micro_batch=1)
    with pytest.raises(ValueError, match=r"gemm.m: 0 is not allowed; expected a finite number > 0"):
        gemm_op(H100_SXM5_80GB, m=0, n=1, k=1)
    with pytest.raises(ValueError, match=r"gemm.count: 0 is not allowed; expected an integer >= 1"):
        gemm_op(H100_SXM5_80GB, m=1, n=1, k=1, count=0)
    with pytest.raises(ValueError, match=r"recompute: 'most' is not allowed; expected one of 'none', 'selective'"):
        layer_backward(model, H100_SXM5_80GB, micro_batch=1, recompute="most")
    with pytest.raises(ValueError, match=r"sp: False is not allowed for MoE layer 0 with tp = 2; expected True"):
        layer_forward(MODELS["mixtral-8x7b"], H100_SXM5_80GB, micro_batch=1, tp=2)
    with pytest.raises(ValueError, match=r"tp: 16 is not allowed; expected a divisor of heads"):
        layer_forward(model, H100_SXM5_80GB, micro_batch=1, tp=16)
    with pytest.raises(ValueError, match=r"comm_ctas: 132 is not allowed; expected an integer in 0..131"):
        default_overlap_slowdown(H100_SXM5_80GB, comm_ctas=132)
    with pytest.raises(ValueError, match=r"overlap_slowdown: -0.1 is not allowed; expected a finite number >= 0"):
        overlapped_time_s(1.0, H100_SXM5_80GB, overlap_slowdown=-0.1)
    with pytest.raises(
        ValueError,
        match=r"GpuComputeModel.memory_efficiency: 1.5 is not allowed; expected a "
        r"number in \(0, 1\]",
    ):
        dataclasses.replace(COMPUTE_MODELS["b200"], memory_efficiency=1.5)
    with pytest.raises(ValueError, match=r"gpu: 'h100' is not allowed; expected a topologies.devices.GpuSpec"):
        compute_model_for("h100")
    with pytest.raises(ValueError, match=r"optimizer_step.parameters: nan is not allowed"):
        optimizer_step(H100_SXM5_80GB, parameters=math.nan)


def test_a_gpu_without_shipped_parameters_runs_with_explicit_ones():
    # illustrative parameters (not a calibration): 128 SMs, eff_max 0.5, memory 0.8
    cm = GpuComputeModel(
        name="rtx_4090_example",
        sm_count=128,
        gemm_efficiency_bf16=0.5,
        gemm_efficiency_fp8=None,
        memory_efficiency=0.8,
        flash_fwd_efficiency=0.5,
        flash_bwd_efficiency=0.4,
    )
    # 16 x 64 = 1024 tiles = 8 waves of 128 SMs: exactly 0.5 x peak
    op = gemm_op(RTX_4090, m=16 * 256, n=64 * 128, k=4096, compute_model=cm)
    assert op.time_s == pytest.approx(op.flops / (0.5 * RTX_4090.dense_bf16_flop_per_s), rel=1e-12)
    assert layer_forward_time_s(MODELS["llama3-8b"], RTX_4090, micro_batch=1, seq_len=2048, compute_model=cm) > 0
