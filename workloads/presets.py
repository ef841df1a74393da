"""Published model shapes as :class:`~workloads.model.ModelSpec` presets.

``MODELS`` maps a name to a spec; ``model_preset(name)`` looks one up (case-insensitive) and
``custom_gpt(...)`` builds a Megatron-style GPT of any size. Sources and the parameter count each
shape gives (``total_parameters()``; published figure in brackets):

* Megatron SC21 Table 1 GPTs (Narayanan et al., arXiv 2104.04473; NVIDIA/Megatron-LM
  examples/sc21/run_table_1.sh): ``gpt-1.7b`` ... ``gpt-1t``, vocabulary 51200, sequence 2048,
  learned positions, LayerNorm, GeLU MLP of 4h, biases, dropout, tied embeddings. 1.65e9 [1.7]
  ... 1008.04e9 [1008.0]: Megatron's formula 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)) plus a final
  norm of 2h.
* ``gpt3-175b``: Brown et al. 2020 Table 2.1 (96 layers, d_model 12288, 96 heads, context 2048),
  GPT-2 BPE vocabulary 50257: 174.60e9 [175; 174.6 in SC21 Table 2].
* Llama 3 (Meta, "The Llama 3 Herd of Models", arXiv 2407.21783, Table 3; Hugging Face configs):
  vocabulary 128256, 8 KV heads, SwiGLU, RoPE, RMSNorm, no biases, no dropout, untied, 8192
  tokens. ``llama3-8b`` 32 x 4096, 32 heads, ffn 14336: 8.03e9 [8.0]; ``llama3-70b`` 80 x 8192, 64
  heads, ffn 28672: 70.55e9 [70.6]; ``llama3-405b`` 126 x 16384, 128 heads, ffn 53248: 405.85e9 [405.8].
* Nemotron-4 (NVIDIA, arXiv 2402.16819 Table 1 and arXiv 2406.11704 Table 1; NeMo
  ``Nemotron4Config15B``/``Nemotron4Config340B`` in nemo/collections/llm/gpt/model/nemotron.py): 8 KV
  heads, squared-ReLU MLP (not gated; its kernel moves the bytes of the GeLU kernel, as which it is
  timed), RoPE on half of each head (the fused kernel reads and writes the whole tensor all the same),
  LayerNorm, no linear biases, no dropout, untied, vocabulary 256000, 4096 tokens. ``nemotron4-15b``
  32 x 6144, 48 heads, ffn 24576: 15.63e9 [15.6: 12.5 non-embedding + 3.2 embedding];
  ``nemotron4-340b`` 96 x 18432, 96 heads, ffn 73728: 341.0e9 [340: 331.6 + 9.4].
* Mixtral (Mistral AI, arXiv 2401.04088; Hugging Face configs): ``mixtral-8x7b`` 32 x 4096, 32
  heads, 8 KV heads, 8 experts of ffn 14336, top-2, vocabulary 32000, 32768 tokens: 46.70e9 total
  [46.7], 12.88e9 active [12.9]; ``mixtral-8x22b`` 56 x 6144, 48 heads, 8 KV heads, 8 experts of
  16384, top-2, vocabulary 32768, 65536 tokens: 140.6e9 [141], 39.2e9 active [39].
* ``deepseek-v3-like`` (DeepSeek-AI, arXiv 2412.19437, sec. 4.2 and the Hugging Face config): 61
  layers, hidden 7168, 128 heads, vocabulary 129280, first 3 layers dense (ffn 18432), then 256
  routed experts (top-8) + 1 shared of ffn 2048, 4096 tokens. Multi-head latent attention is
  APPROXIMATED by standard multi-head attention (4 h^2 = 205.5e6 weights per layer instead of
  MLA's 187.1e6; the KV cache and attention FLOPs of MLA differ too); the multi-token-prediction
  module is left out. 672.2e9 total [671], 38.7e9 active [37].
* ``grok-1`` (xAI, github xai-org/grok-1 README and model.py; the DGX Cloud recipe's grok1_314b.yaml): 64
  layers, hidden 6144, 48 heads, 8 KV heads, 8 experts of ffn 32768 (gated GeLU, 3 matrices), top-2, RMSNorm,
  RoPE, vocabulary 131072, untied (the recipe's ``share_embeddings_and_output_weights: false``), 8192 tokens:
  316.5e9 total [314], 84.6e9 active.
* ``llama4-maverick`` (Meta, Hugging Face Llama-4-Maverick-17B-128E config: ``interleave_moe_layer_step`` 2,
  ``intermediate_size`` 8192, ``intermediate_size_mlp`` 16384): 48 layers, hidden 5120, 40 heads, 8 KV heads,
  SwiGLU; the odd layers MoE (128 routed experts of ffn 8192, top-1, and 1 shared expert), the even ones a dense
  MLP of 16384; vocabulary 202048, untied, 8192 tokens. 400.7e9 total [400], 17.2e9 active [17].
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

from .model import ModelSpec

__all__ = ("MODELS", "SC21_GPTS", "model_preset", "custom_gpt")

SC21_VOCAB = 51200  # SC21 Table 1 / run_table_1.sh: --vocab-file gpt2-vocab.json padded to 51200
SC21_SEQ_LEN = 2048


def custom_gpt(
    *,
    layers: int,
    hidden: int,
    heads: int,
    vocab: int = SC21_VOCAB,
    ffn_hidden: int | None = None,
    seq_len: int = SC21_SEQ_LEN,
    name: str | None = None,
) -> ModelSpec:
    """A Megatron GPT: learned positions, LayerNorm, GeLU MLP (``ffn_hidden`` defaults to 4 hidden),
    biases, dropout, embeddings tied to the output layer.

    >>> m = custom_gpt(layers=24, hidden=2304, heads=24)
    >>> m.ffn_hidden, round(m.total_parameters() / 1e9, 2)
    (9216, 1.65)
    """
    return ModelSpec(
        name=name or f"gpt-l{layers}-h{hidden}",
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab=vocab,
        ffn_hidden=4 * hidden if ffn_hidden is None else ffn_hidden,
        seq_len=seq_len,
        gated_mlp=False,
        tied_embeddings=True,
        position_embedding="learned",
        norm="layernorm",
        bias=True,
        dropout=True,
    )


# SC21 Table 1 (layers, hidden, heads), exactly the rows of training_megatron_sc21.csv.
_SC21_TABLE1 = {
    "gpt-1.7b": (24, 2304, 24),
    "gpt-3.6b": (30, 3072, 32),
    "gpt-7.5b": (36, 4096, 32),
    "gpt-18.4b": (40, 6144, 48),
    "gpt-39.1b": (48, 8192, 64),
    "gpt-76.1b": (60, 10240, 80),
    "gpt-145.6b": (80, 12288, 96),
    "gpt-310.1b": (96, 16384, 128),
    "gpt-529.6b": (105, 20480, 128),
    "gpt-1t": (128, 25600, 160),
}

SC21_GPTS: Mapping[str, ModelSpec] = types.MappingProxyType(
    {name: custom_gpt(layers=l, hidden=h, heads=a, name=name) for name, (l, h, a) in _SC21_TABLE1.items()}
)
"""The ten GPT shapes of Megatron SC21 Table 1, by name."""


def _rope_decoder(
    name: str,
    shape: tuple[int, int, int, int],
    *,
    vocab: int,
    seq_len: int,
    gated_mlp: bool = True,
    norm: str = "rmsnorm",
    experts: int = 0,
    top_k: int = 0,
) -> ModelSpec:
    """The shape Llama 3, Nemotron-4 and Mixtral share: 8 KV heads, RoPE, no biases, no dropout, untied;
    ``shape`` is (layers, hidden, heads, ffn_hidden)."""
    layers, hidden, heads, ffn_hidden = shape
    return ModelSpec(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=8,
        ffn_hidden=ffn_hidden,
        vocab=vocab,
        seq_len=seq_len,
        gated_mlp=gated_mlp,
        tied_embeddings=False,
        position_embedding="rope",
        norm=norm,
        bias=False,
        dropout=False,
        experts=experts,
        top_k=top_k,
        expert_ffn_hidden=ffn_hidden if experts else None,
    )


def _llama3(name: str, *, layers: int, hidden: int, heads: int, ffn_hidden: int) -> ModelSpec:
    return _rope_decoder(name, (layers, hidden, heads, ffn_hidden), vocab=128256, seq_len=8192)


def _nemotron4(name: str, *, layers: int, hidden: int, heads: int, ffn_hidden: int) -> ModelSpec:
    shape = (layers, hidden, heads, ffn_hidden)
    return _rope_decoder(name, shape, vocab=256000, seq_len=4096, gated_mlp=False, norm="layernorm")


def _mixtral(
    name: str, *, layers: int, hidden: int, heads: int, ffn_hidden: int, vocab: int, seq_len: int
) -> ModelSpec:
    return _rope_decoder(name, (layers, hidden, heads, ffn_hidden), vocab=vocab, seq_len=seq_len, experts=8, top_k=2)


MODELS: Mapping[str, ModelSpec] = types.MappingProxyType(
    {
        **SC21_GPTS,
        "gpt3-175b": custom_gpt(layers=96, hidden=12288, heads=96, vocab=50257, name="gpt3-175b"),
        "llama3-8b": _llama3("llama3-8b", layers=32, hidden=4096, heads=32, ffn_hidden=14336),
        "llama3-70b": _llama3("llama3-70b", layers=80, hidden=8192, heads=64, ffn_hidden=28672),
        "llama3-405b": _llama3("llama3-405b", layers=126, hidden=16384, heads=128, ffn_hidden=53248),
        "nemotron4-15b": _nemotron4("nemotron4-15b", layers=32, hidden=6144, heads=48, ffn_hidden=24576),
        "nemotron4-340b": _nemotron4("nemotron4-340b", layers=96, hidden=18432, heads=96, ffn_hidden=73728),
        "mixtral-8x7b": _mixtral(
            "mixtral-8x7b", layers=32, hidden=4096, heads=32, ffn_hidden=14336, vocab=32000, seq_len=32768
        ),
        "mixtral-8x22b": _mixtral(
            "mixtral-8x22b", layers=56, hidden=6144, heads=48, ffn_hidden=16384, vocab=32768, seq_len=65536
        ),
        "deepseek-v3-like": ModelSpec(
            name="deepseek-v3-like",
            layers=61,
            hidden=7168,
            heads=128,
            kv_heads=128,
            ffn_hidden=18432,
            vocab=129280,
            seq_len=4096,
            gated_mlp=True,
            tied_embeddings=False,
            position_embedding="rope",
            norm="rmsnorm",
            bias=False,
            dropout=False,
            experts=256,
            top_k=8,
            expert_ffn_hidden=2048,
            shared_experts=1,
            moe_layer_freq=1,
            first_dense_layers=3,
        ),
        "grok-1": _rope_decoder("grok-1", (64, 6144, 48, 32768), vocab=131072, seq_len=8192, experts=8, top_k=2),
        "llama4-maverick": dataclasses.replace(
            _rope_decoder("llama4-maverick", (48, 5120, 40, 16384), vocab=202048, seq_len=8192, experts=128, top_k=1),
            expert_ffn_hidden=8192,
            shared_experts=1,
            moe_layer_freq=2,
            first_dense_layers=1,
        ),
    }
)
"""Every preset by name (SC21 GPTs, GPT-3, Llama 3, Nemotron-4, Mixtral, DeepSeek-V3-like, Grok-1, Llama 4
Maverick)."""


def model_preset(name: str) -> ModelSpec:
    """The preset called ``name`` (case-insensitive; ``_`` and ``-`` are the same).

    >>> model_preset("Llama3_70B").layers
    80
    """
    key = str(name).strip().lower().replace("_", "-")
    if key not in MODELS:
        raise ValueError(f"model preset: {name!r} is not known; expected one of {', '.join(MODELS)}")
    return MODELS[key]
