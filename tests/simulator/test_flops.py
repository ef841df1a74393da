"""The step's two named FLOP counts: Megatron-LM's model FLOPs and the FLOPs the kernels execute."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.studies.training import StepOptions, executed_flops, simulate_step
from topologies.devices import H100_SXM5_80GB
from topologies.links import LinkKind
from topologies.presets import build_system
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt


@pytest.fixture(scope="module")
def free_network():
    """2 DGX H100 with every link 1e6 x faster and no latency: a step as close to its kernels as it gets."""
    topo = build_system("dgx-h100", nodes=2).with_link_scale({kind: 1e6 for kind in LinkKind})
    latency = np.zeros(topo.num_links)
    latency.setflags(write=False)
    caps = topo.link_flow_cap_bytes_per_s * 1e6
    caps.setflags(write=False)
    return dataclasses.replace(topo, link_latency_s=latency, link_flow_cap_bytes_per_s=caps)


def test_megatron_flops_of_a_gpt_is_the_closed_form():
    # MHA, GeLU, f = 4h, per token and layer: 6 (h 3h + h s + h h) attention (causal: h s/2 twice) + 6 h 2 (4h)
    # MLP = 72 h^2 (1 + s/(12 h)); logits 6 h V_pad: 72 B s l h^2 (1 + s/(12h) + V_pad/(12 l h)).
    # V 50257 at t 2 pads to a multiple of 256: 50432.
    l, h, s, B = 24, 2304, 2048, 512
    model = custom_gpt(layers=l, hidden=h, heads=24, vocab=50257, seq_len=s)
    expected = 72 * B * s * l * h**2 * (1 + s / (12 * h) + 50432 / (12 * l * h))
    assert model.megatron_flops(batch=B, tp=2) == pytest.approx(expected, rel=1e-12)


def test_megatron_flops_counts_gqa_swiglu_and_experts():
    # Llama-3 8B-like: per token and layer 6 (h (q + 2 g d) + q s + q h) + 6 h 3 f; the MoE twin with 8 experts
    # of f_e = f / 2, top 2 and one shared expert runs 6 h 3 f_e (2 + 1) = 6 h 3 (1.5 f) in its MLP
    h, q, kv, s, f, V = 4096, 4096, 1024, 8192, 14336, 128256
    dense = ModelSpec(
        name="d", layers=2, hidden=h, heads=32, kv_heads=8, ffn_hidden=f, vocab=V, seq_len=s, gated_mlp=True
    )
    per_layer = 6 * (h * (q + 2 * kv) + q * s + q * h) + 6 * h * 3 * f
    assert dense.megatron_flops(batch=1) == pytest.approx(s * (2 * per_layer + 6 * h * V), rel=1e-12)
    moe = dataclasses.replace(dense, experts=8, top_k=2, expert_ffn_hidden=f // 2, shared_experts=1)
    per_moe = 6 * (h * (q + 2 * kv) + q * s + q * h) + 6 * h * 3 * (f // 2) * 3
    assert moe.megatron_flops(batch=1) == pytest.approx(s * (2 * per_moe + 6 * h * V), rel=1e-12)


def test_executed_flops_without_flash_attention_are_the_full_gemm_count():
    # materialised attention runs the full s x s score GEMMs, every GEMM 3 x (forward, two gradients), and the
    # memory-bound kernels execute no FLOPs: ModelSpec.step_flops without recomputation, exactly what it counts
    model = custom_gpt(layers=4, hidden=256, heads=4, vocab=512, seq_len=512)
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=8, gpus=8)
    got = executed_flops(model, spec, H100_SXM5_80GB, flash_attention=False)
    assert got == pytest.approx(model.step_flops(batch=8, recompute="none"), rel=1e-12)
    # full recomputation re-runs each layer's forward: step_flops(recompute="full")
    got = executed_flops(model, spec, H100_SXM5_80GB, flash_attention=False, recompute="full")
    assert got == pytest.approx(model.step_flops(batch=8, recompute="full"), rel=1e-12)


def test_flash_attention_executes_the_causal_share_and_its_backward():
    # flash attention executes 4 b s^2 h (n+1)/(2n) forward (n = s/128 key blocks) and 2.5 x that backward; the
    # rest is the GEMM count of the test above without the full attention core 3 x 4 b s^2 h
    model = custom_gpt(layers=4, hidden=256, heads=4, vocab=512, seq_len=1024)
    spec = ParallelismSpec(tp=1, pp=1, dp=1, global_batch=2, gpus=1)
    n = 1024 // 128
    core = 4 * 2 * 1024**2 * 256
    expected = model.step_flops(batch=2, recompute="none") - 4 * 3 * core + 4 * core * (n + 1) / (2 * n) * 3.5
    assert executed_flops(model, spec, H100_SXM5_80GB) == pytest.approx(expected, rel=1e-12)


LAYOUT = st.fixed_dictionaries(
    {
        "tp": st.sampled_from((1, 2)),
        "pp": st.sampled_from((1, 2)),
        "cp": st.sampled_from((1, 2)),
        "dp": st.sampled_from((1, 2)),
        "micro_batch": st.sampled_from((1, 2)),
        "microbatches": st.integers(1, 4),
        "seq_len": st.sampled_from((1024, 8192, 32768)),
        "hidden": st.sampled_from((1024, 4096, 8192)),
        "kv_heads": st.sampled_from((2, 8)),
        "gated_mlp": st.booleans(),
        "moe": st.booleans(),
        "recompute": st.sampled_from(("none", "selective", "full")),
        "flash_attention": st.booleans(),
        "dtype": st.sampled_from(("bf16", "fp8")),
    }
)


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=LAYOUT)
def test_executed_mfu_never_exceeds_one(free_network, layout):
    x = layout
    moe = dict(experts=4, top_k=2, expert_ffn_hidden=2 * x["hidden"]) if x["moe"] else {}
    model = ModelSpec(
        name="random",
        layers=4,
        hidden=x["hidden"],
        heads=8,
        kv_heads=x["kv_heads"],
        vocab=1024,
        seq_len=x["seq_len"],
        gated_mlp=x["gated_mlp"],
        **moe,
    )
    spec = ParallelismSpec(
        tp=x["tp"],
        pp=x["pp"],
        cp=x["cp"],
        dp=x["dp"],
        ep=x["dp"] if x["moe"] else 1,
        micro_batch=x["micro_batch"],
        global_batch=x["micro_batch"] * x["dp"] * x["microbatches"],
        sequence_parallel=x["tp"] > 1,
        dtype=x["dtype"],
        gpus=x["tp"] * x["pp"] * x["cp"] * x["dp"],
    )
    options = StepOptions(recompute=x["recompute"], flash_attention=x["flash_attention"], granularity="chunk")
    r = simulate_step(model, spec, system=free_network, options=options)
    assert 0 < r.executed_mfu <= 1
    assert 0 < r.mfu
