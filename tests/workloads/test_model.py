"""ModelSpec and presets: invariants first, then hand-derived numbers, then bad input."""

from __future__ import annotations

import csv
import itertools
import math
from importlib import resources

import numpy as np
import pytest

from tests.workloads import shapes
from workloads.collectives import CollectiveKind
from workloads.model import ModelSpec, ceil_div, zero_state_bytes
from workloads.presets import MODELS, SC21_GPTS, custom_gpt, model_preset


def tiny_gpt(**kw) -> ModelSpec:
    # h 8, a 2 (d 4), f 32, V 16, s 4: small enough to derive every number by hand
    return custom_gpt(layers=2, hidden=8, heads=2, vocab=16, seq_len=4, **kw)


def tiny_moe(**kw) -> ModelSpec:
    args = dict(
        name="tiny-moe",
        layers=3,
        hidden=8,
        heads=4,
        kv_heads=2,
        vocab=16,
        seq_len=4,
        ffn_hidden=16,
        gated_mlp=True,
        position_embedding="rope",
        norm="rmsnorm",
        bias=False,
        dropout=False,
        experts=4,
        top_k=2,
        expert_ffn_hidden=8,
        shared_experts=1,
        first_dense_layers=1,
    )
    args.update(kw)
    return ModelSpec(**args)


# h 64: layer 0 dense, layers 1, 3, 5 MoE (8 experts of f_e 64, one shared expert)
MOE = shapes.moe(6, first_dense_layers=1, moe_layer_freq=2, shared_experts=1, expert_ffn_hidden=64)


def sc21_rows(metric: str) -> list[dict[str, str]]:
    path = resources.files("simulator.validation") / "data" / "training_megatron_sc21.csv"
    with path.open(newline="") as handle:
        return [r for r in csv.DictReader(handle) if r["metric_name"] == metric and "Table 1" in r["source_ref"]]


# --------------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_flop_breakdown_sums_to_the_gemms(name):
    model = MODELS[name]
    layer = model.layers - 1  # a MoE layer for the MoE presets
    flops = model.layer_forward_flops(layer, micro_batch=2, seq_len=1024)
    gemms = model.layer_gemms(layer, micro_batch=2, seq_len=1024)
    assert math.isclose(flops.total, sum(g.flops for g in gemms), rel_tol=1e-12)
    assert math.isclose(flops.total, sum(flops.as_dict().values()), rel_tol=1e-12)
    assert all(v > 0 for k, v in flops.as_dict().items() if k != "router")
    assert (flops.router > 0) == model.is_moe_layer(layer)


@pytest.mark.parametrize("name", ["gpt-145.6b", "llama3-70b", "mixtral-8x7b", "deepseek-v3-like"])
def test_parallel_ranks_share_the_work_exactly(name):
    # tensor, context and expert parallelism split the same arithmetic: ranks x per-rank = whole
    model = MODELS[name]
    layer = model.layers - 1
    whole = model.layer_forward_flops(layer, micro_batch=1, seq_len=4096).total
    ep = 4 if model.is_moe else 1
    part = model.layer_forward_flops(layer, micro_batch=1, seq_len=4096, tp=8, cp=2, ep=ep).total
    assert math.isclose(part * 8 * 2, whole, rel_tol=1e-12)


def test_backward_is_twice_forward_and_recompute_adds_forward_work():
    model = MODELS["gpt-18.4b"]
    kw = dict(micro_batch=4, seq_len=2048, tp=8)
    fwd = model.layer_forward_flops(0, **kw)
    assert model.layer_training_flops(0, recompute="none", **kw) == pytest.approx(3 * fwd.total, rel=1e-12)
    assert model.layer_training_flops(0, recompute="selective", **kw) == pytest.approx(
        3 * fwd.total + fwd.attn_scores + fwd.attn_values, rel=1e-12
    )
    assert model.layer_training_flops(0, recompute="full", **kw) == pytest.approx(4 * fwd.total, rel=1e-12)


def test_tensor_parallel_weights_replicate_only_norms_biases_and_router():
    # t ranks hold t x P_t = P_1 + (t - 1) x replicated; GPT replicates 2 LayerNorms (4h) and the two
    # row-parallel biases (2h): 6h = 48 for h = 8
    gpt = tiny_gpt()
    assert 2 * gpt.layer_parameters(0, tp=2) - gpt.layer_parameters(0) == 48
    # MoE layer without biases: 2 RMSNorms (2h = 16), the router (h E = 32) and, with expert tensor
    # parallelism 1, the routed experts (E x 3 h f_e = 768) are replicated; the shared expert is split
    moe = tiny_moe()
    assert 2 * moe.layer_parameters(1, tp=2) - moe.layer_parameters(1) == 16 + 32 + 768


@pytest.mark.parametrize("pp", [1, 2, 3, 5])
def test_pipeline_stages_cover_every_weight(pp):
    model = MODELS["llama3-8b"]
    stages = model.stage_layers(pp=pp)
    assert [i for r in stages for i in r] == list(range(model.layers))
    assert max(map(len, stages)) - min(map(len, stages)) <= 1
    assert sum(model.stage_parameters(j, pp=pp) for j in range(pp)) == model.total_parameters()
    # a tied embedding is stored twice once the output layer sits on another stage
    gpt = MODELS["gpt-1.7b"]
    extra = 0 if pp == 1 else gpt.vocab * gpt.hidden
    assert sum(gpt.stage_parameters(j, pp=pp) for j in range(pp)) == gpt.total_parameters() + extra


def test_activation_memory_falls_with_recomputation_and_parallelism():
    model = MODELS["gpt-145.6b"]
    kw = dict(micro_batch=2, seq_len=2048)
    none = model.activation_bytes_per_layer(**kw)
    assert model.activation_bytes_per_layer(recompute="selective", **kw) < none
    assert model.activation_bytes_per_layer(recompute="full", **kw) < model.activation_bytes_per_layer(
        recompute="selective", **kw
    )
    assert model.activation_bytes_per_layer(tp=8, **kw) < none
    assert model.activation_bytes_per_layer(tp=8, sp=True, **kw) < model.activation_bytes_per_layer(tp=8, **kw)
    assert model.activation_bytes_per_layer(flash_attention=True, **kw) < none


@pytest.mark.parametrize("model", [shapes.gpt(7), shapes.llama(5), MOE], ids=["gpt", "llama", "moe"])
def test_stage_and_model_sums_agree_with_the_per_layer_function(model):
    eps = (1, 2, 8) if model.is_moe else (1,)
    for tp, ep, pp in itertools.product((1, 2), eps, (1, 2, 3)):
        stages = model.stage_layers(pp=pp)
        for stage, layers in enumerate(stages):
            extra = model.embedding_parameters(tp=tp) if stage == 0 else 0
            if stage == pp - 1:
                extra += model.final_norm_parameters() + model.last_stage_output_parameters(tp=tp, pp=pp)
            expected = sum(model.layer_parameters(i, tp=tp, ep=ep) for i in layers) + extra
            assert model.stage_parameters(stage, tp=tp, pp=pp, ep=ep) == expected
        # ep splits only the routed experts
        for i in range(model.layers):
            assert model.layer_parameters(i, tp=tp) - model.layer_parameters(
                i, tp=tp, ep=ep
            ) == model.routed_expert_parameters(i) - model.routed_expert_parameters(i, ep=ep)
    assert (
        model.total_parameters()
        == sum(model.layer_parameters(i) for i in range(model.layers))
        + model.embedding_parameters()
        + model.output_parameters()
        + model.final_norm_parameters()
    )
    assert model.moe_layers == sum(model.is_moe_layer(i) for i in range(model.layers))


def test_moe_active_parameters_count_top_k_experts():
    moe = tiny_moe()
    idle = (moe.experts - moe.top_k) * 3 * moe.hidden * moe.expert_ffn_hidden
    assert moe.total_parameters() - moe.active_parameters() == moe.moe_layers * idle
    assert [moe.is_moe_layer(i) for i in range(3)] == [False, True, True]


# --------------------------------------------------------------------------------------------------
# hand-derived numbers
# --------------------------------------------------------------------------------------------------


def test_output_weight_of_the_last_stage_and_one_expert_by_hand():
    # ceil_div(51,200, 3) = 17,067 (17,066.7 rounded up). Vocabulary 51,201, h 64, t 2: V/t = 25,600.5 rows,
    # rounded up to 25,601 (the vocabulary is padded to a multiple of t), so 25,601 x 64 weights. A tied output
    # weight is a copy on the last stage when pp > 1 and the embedding itself when pp = 1; an untied one is
    # always there.
    tied = custom_gpt(layers=2, hidden=64, heads=4, vocab=51_201, seq_len=32)
    untied = ModelSpec(name="untied", layers=2, hidden=64, heads=4, vocab=51_201, seq_len=32)
    assert ceil_div(51_200, 3) == 17_067 and ceil_div(51_201, 2) == 25_601
    assert tied.last_stage_output_parameters(tp=1, pp=1) == 0
    assert tied.last_stage_output_parameters(tp=2, pp=2) == 25_601 * 64
    assert untied.last_stage_output_parameters(tp=2, pp=1) == untied.output_parameters(tp=2) == 25_601 * 64
    # one routed SwiGLU expert of f_e: 3 h f_e weights, no biases, not split over t; none in a dense model
    moe = tiny_moe()
    assert moe.expert_parameters() == 3 * 8 * 8 == 192  # h = f_e = 8
    assert tied.expert_parameters() == 0


def test_hand_derived_layer_counts():
    # GPT, h 64: attention 4 h^2 + 4 h, MLP 8 h^2 + 5 h, two LayerNorms 4 h -> 12 h^2 + 13 h = 49,984
    assert shapes.gpt().layer_parameters(0) == 12 * 64**2 + 13 * 64 == 49_984
    # MoE layer 1 (first_dense_layers 1, every 2nd layer): 2 RMSNorms 2 h, attention 4 h^2 (MHA, no biases),
    # router h E = 512, 8 experts and 1 shared expert of 3 h f_e = 3 x 64 x 64 = 12,288 each:
    # 128 + 16,384 + 512 + 9 x 12,288 = 127,616; with ep = 8 one routed expert stays: 127,616 - 7 x 12,288
    assert [MOE.is_moe_layer(i) for i in range(6)] == [False, True, False, True, False, True]
    assert MOE.layer_parameters(1) == 127_616
    assert MOE.layer_parameters(1, ep=8) == 127_616 - 7 * 12_288 == 41_600
    # the routed experts of that layer: 8 x 12,288 = 98,304, with ep = 8 one of them; none on dense layer 0
    assert MOE.routed_expert_parameters(1) == 8 * 12_288 == 98_304
    assert MOE.routed_expert_parameters(1, ep=8) == 12_288
    assert MOE.routed_expert_parameters(0) == 0


def test_gpt_parameters_follow_megatron_formula():
    # 12 l h^2 + 13 l h + (V + s) h + 2h (final LayerNorm), GPT-3: l 96, h 12288, V 50257, s 2048
    l, h, V, s = 96, 12288, 50257, 2048
    model = model_preset("gpt3-175b")
    assert model.total_parameters() == 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h == 174_604_259_328
    assert round(model.total_parameters() / 1e9, 1) == 174.6  # Brown et al. "175B"; SC21 Table 2: 174.6


def test_llama3_8b_parameters_by_hand():
    # attention 4096 (4096 + 2 x 1024) + 4096^2 = 41,943,040; SwiGLU 3 x 4096 x 14336 = 176,160,768;
    # 2 RMSNorms 8192 -> 218,112,000 per layer x 32 = 6,979,584,000; embedding + untied output
    # 2 x 128256 x 4096 = 1,050,673,152; final norm 4096
    model = model_preset("llama3-8b")
    assert model.layer_parameters(0) == 218_112_000
    assert model.total_parameters() == 6_979_584_000 + 1_050_673_152 + 4096 == 8_030_261_248


@pytest.mark.parametrize(
    "name,total_b,active_b,tolerance_b",
    [
        # published totals rounded to 0.1 B are matched to +-0.05 B; those rounded to 1 B to +-0.5 B
        ("llama3-8b", 8.0, 8.0, 0.05),  # Llama 3 paper: 8B (8.03)
        ("llama3-70b", 70.6, 70.6, 0.05),  # 70.55
        ("llama3-405b", 405.8, 405.8, 0.06),  # 405.85: the 0.1 B figure is truncated, hence 0.06
        ("mixtral-8x7b", 46.7, 12.9, 0.05),  # Mixtral paper: 46.7B total, 12.9B active
        ("mixtral-8x22b", 141.0, 39.0, 0.5),  # Mistral: 141B total, 39B active
        # Nemotron-4 15B report: 12.5B non-embedding + 3.2B embedding (0.1 B figures, so +-0.1 on their sum)
        ("nemotron4-15b", 15.7, 15.7, 0.1),
        # Nemotron-4 340B report: 331.6B non-embedding + 9.4B embedding
        ("nemotron4-340b", 341.0, 341.0, 0.1),
    ],
)
def test_presets_match_published_totals(name, total_b, active_b, tolerance_b):
    model = model_preset(name)
    assert abs(model.total_parameters() / 1e9 - total_b) <= tolerance_b
    assert abs(model.active_parameters() / 1e9 - active_b) <= tolerance_b


def test_grok_1_and_llama_4_maverick_against_their_cards():
    # Grok-1 (xai-org/grok-1 README: 314B, 8 experts, top 2): 64 x (attention 88.1e6 + experts 8 x 3 x 6144 x 32768)
    # + 2 x 131072 x 6144 untied embeddings (the recipe's share_embeddings_and_output_weights false) = 316.5e9;
    # the card's 314B is within 1 %
    grok = model_preset("grok-1")
    assert grok.total_parameters() / 1e9 == pytest.approx(314, rel=0.01)
    assert (grok.experts, grok.top_k, grok.is_moe_layer(0), grok.is_moe_layer(63)) == (8, 2, True, True)
    # Llama 4 Maverick (Meta: 400B total, 17B active): MoE on the odd layers, dense ffn 16384 on the even ones
    maverick = model_preset("llama4-maverick")
    assert maverick.total_parameters() / 1e9 == pytest.approx(400, rel=0.005)
    assert maverick.active_parameters() / 1e9 == pytest.approx(17, rel=0.02)
    assert [maverick.is_moe_layer(i) for i in range(4)] == [False, True, False, True]


def test_deepseek_v3_like_within_the_mla_approximation():
    # MLA weights per layer (DeepSeek-V3 config: q_lora 1536, kv_lora 512, nope 128, rope 64, v 128, 128 heads):
    # q_a 7168x1536 + q_b 1536x128x192 + kv_a 7168x576 + kv_b 512x128x256 + o 16384x7168 + norms 2048
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168 + 1536 + 512
    model = model_preset("deepseek-v3-like")
    excess = model.layers * (4 * 7168**2 - mla)  # standard attention has 4 h^2 weights
    assert abs((model.total_parameters() - excess) / 1e9 - 671) <= 0.5  # "671B total"
    # "37B activated" (rounded to 1 B), read as the weights a token computes with, i.e. without the input
    # embedding lookup (129280 x 7168)
    active = model.active_parameters() - excess - 129280 * 7168
    assert abs(active / 1e9 - 37) <= 0.5


def test_sc21_presets_match_table1_sizes():
    rows = sc21_rows("achieved_tflops_per_gpu")
    assert len(rows) == 10 == len(SC21_GPTS)
    for row in rows:
        model = custom_gpt(layers=int(row["layers"]), hidden=int(row["hidden"]), heads=int(row["heads"]))
        assert round(model.total_parameters() / 1e9, 1) == float(row["params_B"]), row["model"]
        preset = [
            m for m in SC21_GPTS.values() if (m.layers, m.hidden, m.heads) == (model.layers, model.hidden, model.heads)
        ]
        assert len(preset) == 1 and preset[0].vocab == 51200 and preset[0].seq_len == 2048


def test_step_flops_reproduce_sc21_eq3():
    for row in sc21_rows("iteration_time_s_DERIVED"):
        B, s, l, h, V = int(row["global_batch"]), int(row["seq_len"]), int(row["layers"]), int(row["hidden"]), 51200
        eq3 = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
        model = custom_gpt(layers=l, hidden=h, heads=int(row["heads"]), seq_len=s)
        flops = model.step_flops(batch=B, recompute="full")
        assert flops == pytest.approx(eq3, rel=1e-12), row["model"]
        # the table derives the iteration time as F / (gpus x X) and rounds it to 0.01 s
        tflops = float(
            next(r["metric_value"] for r in sc21_rows("achieved_tflops_per_gpu") if r["model"] == row["model"])
        )
        assert flops / (int(row["gpus"]) * tflops * 1e12) == pytest.approx(float(row["metric_value"]), abs=0.006)


def test_tiny_gpt_forward_flops_by_hand():
    # b 1, s 4, h 8, a 2: QKV 6 b s h^2 = 1536; scores = values = 2 b s^2 h = 256; projection 2 b s h^2 = 512;
    # MLP 16 b s h^2 = 4096; total 24 b s h^2 + 4 b s^2 h = 6656; logits 2 b s h V = 1024
    flops = tiny_gpt().layer_forward_flops(0, micro_batch=1)
    assert flops.as_dict() == {
        "qkv": 1536,
        "attn_scores": 256,
        "attn_values": 256,
        "attn_proj": 512,
        "mlp": 4096,
        "router": 0,
    }
    assert tiny_gpt().logits_flops(micro_batch=1) == 1024


def test_tiny_gqa_and_moe_flops_by_hand():
    # h 8, a 4, g 2, d 2: QKV 2 b s h (a + 2g) d = 2 x 4 x 8 x 8 x 2 = 1024. MoE layer 1, b 1, s 4:
    # router 2 b s h E = 256; routed 2 x 3 x (b s k) h f_e = 2 x 3 x 8 x 8 x 8 = 3072; shared 2 x 3 x 4 x 8 x 8 = 1536
    flops = tiny_moe().layer_forward_flops(1, micro_batch=1)
    assert flops.qkv == 1024 and flops.router == 256 and flops.mlp == 3072 + 1536
    # layer 0 is dense: SwiGLU 2 x 3 x b s h f = 2 x 3 x 4 x 8 x 16 = 3072
    assert tiny_moe().layer_forward_flops(0, micro_batch=1).mlp == 3072


def test_expert_gemms_split_tokens_over_expert_ranks():
    # 4 tokens x top-2 over 4 experts: 2 tokens per expert; with ep 2 a rank holds 2 experts and receives
    # its share of all ranks' tokens, 4 x 2 x 2 / 4 = 4 each (balanced routing)
    gemms = {g.name: g for g in tiny_moe().layer_gemms(1, micro_batch=1, ep=2)}
    assert (gemms["expert_up"].m, gemms["expert_up"].count, gemms["expert_up"].n) == (4, 2, 16)
    assert (gemms["expert_down"].n, gemms["expert_down"].k) == (8, 8)


def test_activation_bytes_korthikanti_closed_forms():
    # s 4, b 1, h 8, a 2 -> s b h = 32, 5 a s / h = 5:  none 32 (34 + 5) = 1248;  t = 2:
    # 32 (10 + 24/2 + 5/2) = 784; with SP 1248 / 2 = 624; selective + SP 34 x 32 / 2 = 544; full 2 s b h = 64
    m = tiny_gpt()
    assert m.activation_bytes_per_layer(micro_batch=1) == 1248
    assert m.activation_bytes_per_layer(micro_batch=1, tp=2) == 784
    assert m.activation_bytes_per_layer(micro_batch=1, tp=2, sp=True) == 624
    assert m.activation_bytes_per_layer(micro_batch=1, tp=2, sp=True, recompute="selective") == 544
    assert m.activation_bytes_per_layer(micro_batch=1, recompute="full") == 64
    assert m.activation_bytes_per_layer(micro_batch=1, tp=2, sp=True, recompute="full") == 32
    # GPT-3 scale: s b h (34 + 5 a s / h) for s 2048, b 1, h 12288, a 96
    g = MODELS["gpt3-175b"]
    assert g.activation_bytes_per_layer(micro_batch=1) == pytest.approx(2048 * 12288 * (34 + 5 * 96 * 2048 / 12288))


def test_activation_bytes_other_shapes_by_hand():
    # flash attention replaces 5 a s^2 b (= 5 x 2 x 16 = 160) by a fp32 log-sum-exp 4 a s b = 32: 1248 - 160 + 32
    assert tiny_gpt().activation_bytes_per_layer(micro_batch=1, flash_attention=True) == 1120
    # dense layer of tiny_moe (no dropout, GQA, SwiGLU, s b = 4): norms 2 x 2 x 32 = 128; attention input 64,
    # Q 64, K and V 2 x 2 x 4 x 4 = 64, projection input 64, softmax 2 a s^2 b = 128; MLP input 64,
    # SwiGLU 6 s b f = 384 -> 960
    assert tiny_moe().activation_bytes_per_layer(0, micro_batch=1) == 960
    # MoE layer: the SwiGLU 384 becomes routed (s b k = 8) x (2 h + 6 f_e) = 8 x 64 = 512, shared
    # s b x 6 f_e = 192 and fp32 router probabilities 4 s b E = 64
    assert tiny_moe().activation_bytes_per_layer(1, micro_batch=1) == 960 - 384 + 512 + 192 + 64


def test_zero_stages_match_the_zero_paper():
    # Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, Nd = 64, K = 12
    stages = [zero_state_bytes(7.5e9, zero_stage=z, dp=64).total / 1e9 for z in range(4)]
    assert stages[0] == pytest.approx(120.0)  # 16 Psi
    assert stages[1] == pytest.approx(4 * 7.5 + 12 * 7.5 / 64)  # 31.4
    assert stages[2] == pytest.approx(2 * 7.5 + 14 * 7.5 / 64)  # 16.6
    assert stages[3] == pytest.approx(16 * 7.5 / 64)  # 1.9
    state = MODELS["llama3-8b"].training_state_bytes(tp=2, dp=8, zero_stage=1)
    local = MODELS["llama3-8b"].parameters_per_gpu(tp=2)
    assert state.total == pytest.approx(local * (2 + 2 + 12 / 8))


def test_communication_sizes_by_hand():
    # GPT-145.6B, b 2, s 2048, h 12288, bf16: s b h D = 100,663,296 bytes
    model = MODELS["gpt-145.6b"]
    sbhd = 2 * 2048 * 12288 * 2
    kw = dict(micro_batch=2, tp=8)
    assert model.tp_collectives_per_layer(**kw) == model.tp_collectives_per_layer(phase="backward", **kw)
    (ar,) = model.tp_collectives_per_layer(**kw)
    assert (ar.kind, ar.nbytes, ar.count) == (CollectiveKind.ALL_REDUCE, sbhd, 2)
    fwd = {c.kind: c.count for c in model.tp_collectives_per_layer(sp=True, **kw)}
    bwd = {c.kind: c.count for c in model.tp_collectives_per_layer(sp=True, phase="backward", **kw)}
    assert fwd == {CollectiveKind.ALL_GATHER: 2, CollectiveKind.REDUCE_SCATTER: 2}
    assert bwd == {CollectiveKind.ALL_GATHER: 4, CollectiveKind.REDUCE_SCATTER: 2}
    full = model.tp_collectives_per_layer(sp=True, phase="backward", recompute="full", **kw)
    assert sum(c.count for c in full) == 4 + 6
    assert model.tp_collectives_per_layer(micro_batch=2, tp=1) == ()
    assert model.pp_activation_bytes(micro_batch=2) == sbhd
    assert model.pp_activation_bytes(micro_batch=2, tp=8, scatter_gather=True) == sbhd // 8
    # Mixtral 8x7B, b 1, s 4096: a dispatch sends 4096 tokens x top-2 x 4096 x 2 bytes
    mixtral = MODELS["mixtral-8x7b"]
    assert mixtral.ep_alltoall_bytes(micro_batch=1, seq_len=4096) == 4096 * 2 * 4096 * 2
    (a2a,) = mixtral.ep_collectives_per_layer(micro_batch=1, seq_len=4096, ep=8, phase="backward", recompute="full")
    assert (a2a.kind, a2a.count) == (CollectiveKind.ALL_TO_ALL, 4)
    # Llama 3 8B, s 8192, cp 2: K and V of 4096 tokens x 8 KV heads x 128 x 2 bytes = 16 MiB per ring step
    llama = MODELS["llama3-8b"]
    assert llama.cp_kv_bytes(micro_batch=1, cp=2) == 2 * 4096 * 1024 * 2
    assert [c.count for c in llama.cp_collectives_per_layer(micro_batch=1, cp=4)] == [3]
    assert [c.count for c in llama.cp_collectives_per_layer(micro_batch=1, cp=4, phase="backward")] == [6]
    assert llama.dp_gradient_bytes(tp=2, grad_bytes=4) == 4 * llama.parameters_per_gpu(tp=2)


# --------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(heads=3), r"ModelSpec.heads: 3 is not allowed; expected a divisor of hidden \(8\)"),
        (dict(kv_heads=3, heads=4), r"ModelSpec.kv_heads: 3 is not allowed; expected a divisor of heads \(4\)"),
        (dict(layers=0), r"ModelSpec.layers: 0 is not allowed; expected an integer from 1 to 65536"),
        (dict(norm="batchnorm"), r"ModelSpec.norm: 'batchnorm' is not allowed; expected one of 'layernorm', 'rmsnorm'"),
        (dict(top_k=2), r"ModelSpec.top_k: 2 is not allowed; expected 0 for a dense model"),
        (dict(experts=4, top_k=5), r"ModelSpec.top_k: 5 is not allowed; expected an integer in 1..experts \(4\)"),
        (dict(experts=4, top_k=1, first_dense_layers=2), r"ModelSpec.first_dense_layers: 2 is not allowed"),
        (dict(dtype_bytes=3), r"ModelSpec.dtype_bytes: 3 is not allowed; expected 1, 2 or 4"),
        (dict(gated_mlp=1), r"ModelSpec.gated_mlp: 1 is not allowed; expected True or False"),
    ],
)
def test_bad_model_specs(kwargs, match):
    args = dict(name="bad", layers=2, hidden=8, heads=2, vocab=16)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ModelSpec(**args)


def test_bad_parallel_and_call_arguments():
    model = MODELS["llama3-8b"]
    with pytest.raises(
        ValueError,
        match=r"tp: 16 is not allowed; expected a divisor of heads \(32\) and kv_heads "
        r"\(8\)",
    ):
        model.layer_forward_flops(0, micro_batch=1, tp=16)
    with pytest.raises(ValueError, match=r"ep: 2 is not allowed; expected 1 for a dense model"):
        model.layer_gemms(0, micro_batch=1, ep=2)
    with pytest.raises(ValueError, match=r"ep: 3 is not allowed; expected a divisor of experts \(8\)"):
        MODELS["mixtral-8x7b"].layer_gemms(0, micro_batch=1, ep=3)
    with pytest.raises(ValueError, match=r"cp: 3 is not allowed; expected a divisor of seq_len \(8192\)"):
        model.layer_forward_flops(0, micro_batch=1, cp=3)
    with pytest.raises(ValueError, match=r"layer: 32 is not allowed; expected an integer in 0..31"):
        model.layer_parameters(32)
    with pytest.raises(
        ValueError,
        match=r"recompute: 'some' is not allowed; expected one of 'none', 'selective', "
        r"'full'",
    ):
        model.step_flops(batch=1, recompute="some")
    with pytest.raises(ValueError, match=r"micro_batch: 0 is not allowed; expected an integer >= 1"):
        model.activation_bytes_per_layer(micro_batch=0)
    with pytest.raises(ValueError, match=r"zero_state_bytes.zero_stage: 4 is not allowed; expected 0, 1, 2 or 3"):
        zero_state_bytes(1e9, zero_stage=4)
    with pytest.raises(ValueError, match=r"ep_alltoall_bytes: 'llama3-8b' is not allowed; expected a MoE model"):
        model.ep_alltoall_bytes(micro_batch=1)


def test_validation_is_kept_at_every_public_entry():
    model = MOE
    # numpy integers are integers; booleans and floats are not
    assert model.layer_parameters(np.int64(1), tp=np.int64(2), ep=np.int64(2)) == model.layer_parameters(1, tp=2, ep=2)
    for bad in (6, -1, 1.0, True, "1"):
        with pytest.raises(ValueError, match=f"layer: {bad!r} is not allowed; expected an integer in 0..5"):
            model.layer_parameters(bad)
        with pytest.raises(ValueError, match=f"layer: {bad!r} is not allowed"):
            model.is_moe_layer(bad)
        with pytest.raises(ValueError, match=f"layer: {bad!r} is not allowed"):
            model.routed_expert_parameters(bad)
    with pytest.raises(ValueError, match="tp: 3 is not allowed; expected a divisor of heads"):
        model.layer_parameters(1, tp=3)
    with pytest.raises(ValueError, match="ep: 3 is not allowed; expected a divisor of experts"):
        model.stage_parameters(0, pp=2, ep=3)
    with pytest.raises(ValueError, match="ep: 3 is not allowed; expected a divisor of experts"):
        model.routed_expert_parameters(1, ep=3)
    with pytest.raises(ValueError, match="tp: 0 is not allowed; expected an integer >= 1"):
        model.stage_parameters(0, tp=0)
    with pytest.raises(ValueError, match="stage: 2 is not allowed; expected an integer in 0..1"):
        model.stage_parameters(2, pp=2)
    with pytest.raises(ValueError, match="tp: 3 is not allowed"):
        model.attention_parameters(tp=3)
    with pytest.raises(ValueError, match="ep: 2 is not allowed; expected 1 for a dense model"):
        shapes.gpt().layer_parameters(0, ep=2)


def test_unknown_preset_lists_the_names():
    with pytest.raises(ValueError, match=r"model preset: 'gpt-5' is not known; expected one of gpt-1.7b, .*llama3-8b"):
        model_preset("gpt-5")
    assert model_preset(" LLAMA3_405B ") is MODELS["llama3-405b"]


def test_expert_tensor_parallelism_by_hand():
    # Mixtral 8x7B (h 4096, f_e 14336, E 8, k 2, SwiGLU), b 1, s 4096, t 2 with sequence parallelism, e 4:
    # T = 4096 / 2 = 2048 tokens routed per rank; the a2a sends T k h D = 2048 x 2 x 4096 x 2 = 32 MiB
    mixtral = MODELS["mixtral-8x7b"]
    kw = dict(micro_batch=1, seq_len=4096, tp=2, ep=4)
    a2a = 2048 * 2 * 4096 * 2
    for etp in (1, 2):
        gemms = {g.name: g for g in mixtral.layer_gemms(**kw, etp=etp)}
        up = gemms["expert_up"]
        # E/e = 2 local experts of m = etp T k e / E = etp x 2048 tokens, fc1 columns 2 f_e / etp
        assert (up.count, up.m, up.n, up.k) == (2, etp * 2048, 2 * 14336 // etp, 4096)
        down = gemms["expert_down"]
        assert (down.m, down.n, down.k) == (etp * 2048, 4096, 14336 // etp)
    # the same FLOPs per rank whatever etp (etp x the tokens, 1/etp of the weights)
    assert mixtral.layer_forward_flops(**kw, etp=2).total == mixtral.layer_forward_flops(**kw, etp=1).total
    # weights: 2 experts x 3 x 4096 x 14336 = 352,321,536 at etp 1, half at etp 2
    assert mixtral.routed_expert_parameters(ep=4, etp=1) == 2 * 3 * 4096 * 14336 == 352_321_536
    assert mixtral.routed_expert_parameters(ep=4, etp=2) == 352_321_536 // 2
    # collectives per MoE layer, forward: 2 a2a of 32 MiB, 1 all-gather + 1 reduce-scatter of etp x 32 MiB
    sizes = mixtral.ep_collectives_per_layer(**kw, etp=2)
    assert [(c.kind, c.nbytes, c.count, c.group) for c in sizes] == [
        (CollectiveKind.ALL_TO_ALL, a2a, 2, "ep"),
        (CollectiveKind.ALL_GATHER, 2 * a2a, 1, "etp"),
        (CollectiveKind.REDUCE_SCATTER, 2 * a2a, 1, "etp"),
    ]
    # full recomputation runs the forward ones again in the backward: 4 a2a, 2 + 2 gathers / scatters
    back = mixtral.ep_collectives_per_layer(**kw, etp=2, phase="backward", recompute="full")
    assert [c.count for c in back] == [4, 2, 2]
    # etp 1 and e 1: no expert collectives; etp 2 alone: the gathers only
    assert mixtral.ep_collectives_per_layer(micro_batch=1, seq_len=4096, tp=2) == ()
    assert [c.group for c in mixtral.ep_collectives_per_layer(micro_batch=1, seq_len=4096, tp=2, etp=2)] == [
        "etp",
        "etp",
    ]
    # activations: the permuted expert input kept at etp x T k h D; the expert activations do not change
    act = {
        etp: mixtral.activation_bytes_per_layer(micro_batch=1, seq_len=4096, tp=2, sp=True, etp=etp) for etp in (1, 2)
    }
    assert act[2] - act[1] == a2a  # (2 - 1) x T k h D
    with pytest.raises(ValueError, match="etp: 3 is not allowed; expected a divisor of expert_ffn_hidden"):
        mixtral.routed_expert_parameters(ep=4, etp=3)


def test_expert_state_shards_over_the_expert_data_parallel_group():
    # ZeRO 1: the dense state over dp, the routed experts' over edp (Megatron's distributed optimizer shards each
    # buffer over its own group). MOE (shapes.moe(6, ...)): with edp = dp the split changes nothing
    kw = dict(tp=1, pp=1, ep=2, dp=8, zero_stage=1, grad_bytes=4)
    assert MOE.training_state_bytes(**kw, edp=8) == MOE.training_state_bytes(**kw)
    one = MOE.training_state_bytes(**kw, edp=1)
    experts = sum(MOE.routed_expert_parameters(i, ep=2) for i in range(MOE.layers))
    # edp 1 keeps the experts' 12 B/param of Adam state whole: 12 x experts x (1 - 1/8) more
    assert one.optimizer - MOE.training_state_bytes(**kw).optimizer == pytest.approx(12 * experts * 7 / 8)
    assert one.parameters == MOE.training_state_bytes(**kw).parameters
