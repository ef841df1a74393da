"""Small model shapes shared by the workloads tests: h 64, a 4, s 32, so every count can be derived by hand."""

from __future__ import annotations

from workloads.model import ModelSpec
from workloads.presets import custom_gpt


def gpt(layers: int = 4) -> ModelSpec:
    # h 64, a 4, V 128, s 32, tied embeddings, learned positions: 12 h^2 + 13 h = 49,984 weights per layer
    return custom_gpt(layers=layers, hidden=64, heads=4, vocab=128, seq_len=32)


def llama(layers: int = 5) -> ModelSpec:
    return ModelSpec(
        name="tiny-llama",
        layers=layers,
        hidden=64,
        heads=4,
        kv_heads=2,
        vocab=130,
        seq_len=32,
        ffn_hidden=96,
        gated_mlp=True,
        position_embedding="rope",
        norm="rmsnorm",
        bias=False,
        dropout=False,
    )


def moe(layers: int = 4, **kw) -> ModelSpec:
    args = dict(
        name="tiny-moe",
        layers=layers,
        hidden=64,
        heads=4,
        kv_heads=4,
        vocab=128,
        seq_len=32,
        ffn_hidden=128,
        gated_mlp=True,
        position_embedding="rope",
        norm="rmsnorm",
        bias=False,
        dropout=False,
        experts=8,
        top_k=2,
    )
    args.update(kw)
    return ModelSpec(**args)
