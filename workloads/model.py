"""Transformer shapes: parameters, FLOPs, memory and the per-layer communication sizes of training.

A :class:`ModelSpec` is a decoder-only transformer: ``layers`` blocks of (norm, attention, norm,
MLP or mixture-of-experts), an input embedding, a final norm and an output (logits) layer.
Notation: h hidden, a heads, g KV heads (GQA; g = a is multi-head attention), d = h/a head
dimension, f MLP hidden, V vocabulary, s sequence, b micro-batch, B global batch, l layers,
t tensor-parallel, c context-parallel, E experts, k experts per token, f_e expert MLP hidden,
D bytes per activation/weight element (2 for bf16), T = b s / c tokens on one rank.

Parameters (weights; biases only with ``bias=True``; LayerNorm has 2h, RMSNorm h)::

    attention   h (a + 2g) d + h^2            (+ (a + 2g) d + h biases)
    MLP         m h f, m = 2 (GeLU) or 3 (SwiGLU: gate, up, down)   (+ (m-1) f + h biases)
    MoE layer   E experts of m h f_e, shared experts of m h f_e, router h E
    embedding   V h (+ s h learned positions); output layer V h unless tied; final norm

GPT (MHA, f = 4h, biases, LayerNorm, learned positions, tied): 12 l h^2 + 13 l h + (V + s) h + 2h,
Megatron's ``12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))`` (Narayanan et al., SC21) plus the final norm.
GPT-3 175B (l 96, h 12288, V 51200, s 2048): 174.62e9. Llama-3 8B: 6.98e9 in the blocks + 2 x 0.525e9
untied embedding and output = 8.03e9.

Forward FLOPs of one layer and one micro-batch (a multiply-add is 2 FLOPs; a GEMM (m x k)(k x n)
is 2mnk)::

    QKV                 2 b s h (a + 2g) d          = 6 b s h^2 for MHA
    attention scores    2 b s^2 a d = 2 b s^2 h     (Q K^T, the full s x s, as Megatron counts it)
    attention x values  2 b s^2 h
    output projection   2 b s h^2
    MLP                 2 m b s h f                 = 16 b s h^2 for GeLU with f = 4h
    MoE                 2 m b s k h f_e routed + 2 m b s h f_e per shared expert + router 2 b s h E

GPT total 24 b s h^2 + 4 b s^2 h per layer; logits 2 b s h V. Backward costs twice the forward
GEMMs (input and weight gradients). Recomputation re-runs forward work before the backward:
"selective" the attention core (scores and x values, 4 b s^2 h; Korthikanti et al. 2022),
"full" the whole layer. A training step with full recomputation is then
4 x layers + 3 x logits = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), Megatron SC21 eq. 3, exactly.
Worked number: GPT-1.7B row of SC21 Table 1 (l 24, h 2304, B 512): 1.5467e16 FLOP per step; at the
137 TFLOP/s per GPU measured on 32 GPUs that is 3.53 s per iteration.

The model-FLOPs formula published step throughputs use (``megatron_flops``): Megatron-LM's
``num_floating_point_operations`` (megatron/training/training.py, the number behind its logged
"throughput per GPU" and NeMo / DGX Cloud's MFU), per step of B sequences::

    B s [ l 6 (h (q + 2 g d) + q s + q h) + 6 h m f (dense layers) + 6 h m f_e (k + shared) (MoE layers)
          + 6 h V_pad ]                        q = a d, V_pad = V rounded up to a multiple of 128 t

It counts every GEMM 3 times (forward, weight and input gradients) and nothing else: causal attention at
half the s x s scores (q s/2 per token for QK^T and again for x V), GQA's K and V at their g d width,
SwiGLU's three matrices (m = 3; 2 for GeLU), routed experts at top k and shared experts (no router), the
logits at the vocabulary padded as Megatron pads it (``--make-vocab-size-divisible-by 128`` x t), no
recomputation (the same count with or without it), no norms, softmax, activations or optimizer, and
nothing of context parallelism (it splits the same work). Llama-3 8B (l 32, h 4096, a 32, g 8, f 14336,
V 128256), s 8192: 4.2165e14 FLOP per sequence (SC21-style full attention without
recomputation, ``step_flops(recompute="none")``: 4.7442e14). The SC21 paper's count (eq. 3,
``step_flops(recompute="full")``) takes the full s x s and 4 instead of 3 with recomputation.

Memory per GPU (Rajbhandari et al. 2020, ZeRO, sec. 3.1 and 5): mixed-precision Adam keeps 2 bytes of
weights, 2 of gradients and K = 12 of optimizer state (fp32 master weights, momentum, variance) per
parameter, 16 Psi in all; ZeRO stage 1 divides the 12 by dp, stage 2 also the gradients, stage 3
also the weights. Psi = 7.5e9, dp = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (ZeRO paper, Figure 1).

Activations kept for the backward of one layer (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", sec. 4; 2-byte activations, 1-byte dropout masks)::

    no parallelism      s b h (34 + 5 a s / h)
    tensor parallel t   s b h (10 + 24/t + 5 a s / (h t))
    + sequence parallel s b h (34 + 5 a s / h) / t
    + selective recomp. 34 s b h / t        (the 5 a s^2 b softmax/dropout terms are recomputed)
    full recomputation  2 s b h             (the layer input only; / t with sequence parallelism)

The 34 is attention 11 s b h (QKV input 2, Q and K 4, V 2, projection input 2, dropout mask 1),
MLP 19 s b h (input 2, GeLU input 8, GeLU output 8, mask 1), two LayerNorm inputs 4 s b h; the
replicated 10 = norms 4 + block inputs 4 + masks 2. For other shapes the same terms are counted:
K and V take 2 s b g d each, a gated MLP keeps 6 s b f (fc1 output, SwiGLU output), no dropout
drops the masks and the softmax copy, FlashAttention keeps a fp32 log-sum-exp (4 a s b) instead
of the s^2 terms, MoE keeps each routed token's expert activations.

Communication sizes per layer and micro-batch (nccl-tests size convention: the whole buffer):
TP all-reduce of s b h D, 2 in the forward and 2 in the backward (Megatron's f and g operators);
with sequence parallelism 2 all-gathers and 2 reduce-scatters of s b h D forward, and backward 2
reduce-scatters and 4 all-gathers (Megatron gathers the sequence-parallel input again for the
weight gradient); pipeline activations s b h D per micro-batch and stage boundary (/t with
sequence parallelism or SC21's scatter/gather); EP all-to-all of T k h D per dispatch and per
combine (T = b s / (c t)), and with expert tensor parallelism etp > 1 an all-gather and a reduce-scatter of
etp T k h D between them (the expert GEMMs then take etp x the tokens and 1/etp of each expert's weights: the
same FLOPs, weights / etp); context parallelism passes the local K and V, 2 b (s/c) g d D, c-1 times around a ring.

What is ignored: vocabulary padding beyond a multiple of t, the small non-GEMM FLOPs (softmax,
norms) in the FLOP counts, the router's auxiliary loss, load imbalance between experts, and
multi-head latent attention (DeepSeek-V3's MLA is modelled as standard attention by the presets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from topologies.checks import MAX_BYTES, choice, finite_nonnegative, flag, int_at_least, integer, is_int, reject

from .collectives import CollectiveKind
from .options import Recompute, names

__all__ = (
    "RECOMPUTE",
    "NORMS",
    "POSITION_EMBEDDINGS",
    "ModelSpec",
    "Gemm",
    "LayerFlops",
    "TrainingStateBytes",
    "CommSize",
    "zero_state_bytes",
    "ceil_div",
)

RECOMPUTE = names(Recompute)
# the largest dimensions a ModelSpec takes, far above any model built (Llama 3 405B: 126 layers, hidden 16384,
# vocabulary 128256, 128K context): beyond them, counts of bytes and FLOPs leave the integers the simulation uses
MAX_LAYERS = 1 << 16
MAX_DIMENSION = 1 << 24
NORMS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rope")
PHASES = ("forward", "backward")
MASK_BYTES = 1  # Korthikanti et al. 2022 sec. 4.1: dropout masks take 1 byte per element
LSE_BYTES = 4  # FlashAttention keeps the softmax log-sum-exp in fp32 (Dao 2023, Algorithm 1)
# Megatron-LM pads the vocabulary to a multiple of this x t (--make-vocab-size-divisible-by, default 128;
# megatron/training/tokenizer: _vocab_size_with_padding)
MEGATRON_VOCAB_MULTIPLE = 128
ADAM_STATE_BYTES_PER_PARAM = 12  # ZeRO sec. 3.1: fp32 master weights, momentum and variance, K = 12


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for integers b > 0, exactly (no float): ceil_div(7, 2) = 4."""
    return -(-a // b)


# --------------------------------------------------------------------------------------------------
# small result records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Gemm:
    """One GEMM of the forward pass on one GPU: ``count`` independent (m x k)(k x n) products.

    ``m`` may be fractional for expert GEMMs (the average number of tokens an expert receives).
    ``weight`` is True for a product with a weight matrix (a linear layer), False for the
    activation-activation products of attention.
    """

    name: str
    m: float
    n: int
    k: int
    count: int = 1
    weight: bool = True

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerFlops:
    """Forward FLOPs of one layer and one micro-batch on one GPU, per operation."""

    qkv: float
    attn_scores: float
    attn_values: float
    attn_proj: float
    mlp: float
    router: float

    @property
    def total(self) -> float:
        return self.qkv + self.attn_scores + self.attn_values + self.attn_proj + self.mlp + self.router

    @property
    def attention_core(self) -> float:
        return self.attn_scores + self.attn_values

    def as_dict(self) -> dict[str, float]:
        return {
            "qkv": self.qkv,
            "attn_scores": self.attn_scores,
            "attn_values": self.attn_values,
            "attn_proj": self.attn_proj,
            "mlp": self.mlp,
            "router": self.router,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingStateBytes:
    """Bytes of weights, gradients and optimizer state held by one GPU."""

    parameters: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer


@dataclass(frozen=True, slots=True, kw_only=True)
class CommSize:
    """``count`` collectives of ``kind`` and size ``nbytes`` (nccl-tests size column) in group ``group``."""

    name: str
    kind: CollectiveKind
    nbytes: int
    count: int
    group: str

    @property
    def total_nbytes(self) -> int:
        return self.nbytes * self.count


def zero_state_bytes(
    parameters: float,
    *,
    zero_stage: int = 0,
    dp: int = 1,
    param_bytes: int = 2,
    grad_bytes: int = 2,
    optimizer_bytes: int = ADAM_STATE_BYTES_PER_PARAM,
) -> TrainingStateBytes:
    """Weights, gradients and Adam state per GPU for ``parameters`` weights under ZeRO ``zero_stage``.

    Stage 0 keeps everything on every data-parallel rank; 1 shards the optimizer state over ``dp``;
    2 also the gradients; 3 also the weights (Rajbhandari et al. 2020, sec. 5).

    >>> s = zero_state_bytes(7.5e9, zero_stage=1, dp=64)
    >>> round(s.total / 1e9, 1)
    31.4
    """
    finite_nonnegative("zero_state_bytes.parameters", parameters, "a finite number >= 0")
    zero_stage = int_at_least("zero_state_bytes.zero_stage", zero_stage, 0)
    if zero_stage > 3:
        raise reject("zero_state_bytes.zero_stage", zero_stage, "0, 1, 2 or 3")
    dp = int_at_least("zero_state_bytes.dp", dp, 1)
    for field, value in (
        ("param_bytes", param_bytes),
        ("grad_bytes", grad_bytes),
        ("optimizer_bytes", optimizer_bytes),
    ):
        int_at_least(f"zero_state_bytes.{field}", value, 0)
    return TrainingStateBytes(
        parameters=parameters * param_bytes / (dp if zero_stage >= 3 else 1),
        gradients=parameters * grad_bytes / (dp if zero_stage >= 2 else 1),
        optimizer=parameters * optimizer_bytes / (dp if zero_stage >= 1 else 1),
    )


# --------------------------------------------------------------------------------------------------
# ModelSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. ``None`` defaults: kv_heads = heads, ffn_hidden = 4 hidden,
    expert_ffn_hidden = ffn_hidden.

    MoE: with ``experts > 0`` layer i is a MoE layer when i >= first_dense_layers and
    (i - first_dense_layers) % moe_layer_freq == 0; the others keep the dense MLP of ``ffn_hidden``.
    Shared experts (DeepSeek) see every token; routed experts see ``top_k`` per token.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    # None defaults are replaced in __post_init__, so the fields read as int
    kv_heads: int = None  # type: ignore[assignment]  # None: heads
    ffn_hidden: int = None  # type: ignore[assignment]  # None: 4 hidden
    seq_len: int = 2048
    gated_mlp: bool = False
    tied_embeddings: bool = False
    position_embedding: str = "learned"
    norm: str = "layernorm"
    bias: bool = True
    dropout: bool = True
    experts: int = 0
    top_k: int = 0
    expert_ffn_hidden: int | None = None
    shared_experts: int = 0
    moe_layer_freq: int = 1
    first_dense_layers: int = 0
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        owner = "ModelSpec"
        if not isinstance(self.name, str) or not self.name.strip():
            raise reject(f"{owner}.name", self.name, "a non-empty string")
        for field in ("layers", "hidden", "heads", "vocab", "seq_len"):
            object.__setattr__(
                self,
                field,
                integer(
                    f"{owner}.{field}",
                    getattr(self, field),
                    low=1,
                    high=MAX_LAYERS if field == "layers" else MAX_DIMENSION,
                ),
            )
        if self.hidden % self.heads:
            raise reject(f"{owner}.heads", self.heads, f"a divisor of hidden ({self.hidden}) so heads have equal size")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        int_at_least(f"{owner}.kv_heads", self.kv_heads, 1)
        if self.heads % self.kv_heads:
            raise reject(
                f"{owner}.kv_heads",
                self.kv_heads,
                f"a divisor of heads ({self.heads}) (grouped-query "
                "attention shares each KV head among heads/kv_heads query heads)",
            )
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        integer(f"{owner}.ffn_hidden", self.ffn_hidden, low=1, high=MAX_DIMENSION)
        for field in ("gated_mlp", "tied_embeddings", "bias", "dropout"):
            if not isinstance(getattr(self, field), bool):
                raise reject(f"{owner}.{field}", getattr(self, field), "True or False")
        choice(f"{owner}.position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        choice(f"{owner}.norm", self.norm, NORMS)
        integer(f"{owner}.experts", self.experts, low=0, high=MAX_LAYERS)
        int_at_least(f"{owner}.top_k", self.top_k, 0)
        int_at_least(f"{owner}.shared_experts", self.shared_experts, 0)
        int_at_least(f"{owner}.moe_layer_freq", self.moe_layer_freq, 1)
        int_at_least(f"{owner}.first_dense_layers", self.first_dense_layers, 0)
        if self.experts == 0:
            for field in ("top_k", "shared_experts", "first_dense_layers"):
                if getattr(self, field):
                    raise reject(f"{owner}.{field}", getattr(self, field), "0 for a dense model (experts = 0)")
            if self.expert_ffn_hidden is not None:
                raise reject(f"{owner}.expert_ffn_hidden", self.expert_ffn_hidden, "None for a dense model")
        else:
            if not 1 <= self.top_k <= self.experts:
                raise reject(f"{owner}.top_k", self.top_k, f"an integer in 1..experts ({self.experts})")
            if self.first_dense_layers >= self.layers:
                raise reject(
                    f"{owner}.first_dense_layers",
                    self.first_dense_layers,
                    f"an integer < layers ({self.layers}) so at least one layer is MoE",
                )
            if self.expert_ffn_hidden is None:
                object.__setattr__(self, "expert_ffn_hidden", self.ffn_hidden)
            integer(f"{owner}.expert_ffn_hidden", self.expert_ffn_hidden, low=1, high=MAX_DIMENSION)
        if self.dtype_bytes not in (1, 2, 4):
            raise reject(f"{owner}.dtype_bytes", self.dtype_bytes, "1, 2 or 4")
        weights = self.total_parameters() * self.dtype_bytes
        if weights > MAX_BYTES:
            raise ValueError(
                f"{owner}: {self.name!r} has {weights:.3g} bytes of weights; expected at most 1 PiB "
                "(layers, hidden, vocab and experts of a model that exists)"
            )

    # ------------------------------------------------------------------------------------------
    # shape
    # ------------------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads x head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def _expert_ffn(self) -> int:
        """``expert_ffn_hidden`` where a MoE model asks (None only on a dense model, which never does)."""
        assert self.expert_ffn_hidden is not None
        return self.expert_ffn_hidden

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of one MLP: 3 with a gated (SwiGLU) MLP, 2 with GeLU."""
        return 3 if self.gated_mlp else 2

    def is_moe_layer(self, layer: int) -> bool:
        self._check_layer(layer)
        return self._is_moe_layer(layer)

    def _is_moe_layer(self, layer: int) -> bool:
        """:meth:`is_moe_layer` of a layer index already checked."""
        return (
            self.is_moe
            and layer >= self.first_dense_layers
            and (layer - self.first_dense_layers) % self.moe_layer_freq == 0
        )

    @property
    def moe_layers(self) -> int:
        return sum(self._is_moe_layer(i) for i in range(self.layers))

    def _check_layer(self, layer: int) -> None:
        if not is_int(layer) or not 0 <= layer < self.layers:
            raise reject("layer", layer, f"an integer in 0..{self.layers - 1}")

    def _seq(self, seq_len: int | None) -> int:
        return self.seq_len if seq_len is None else int_at_least("seq_len", seq_len, 1)

    # ------------------------------------------------------------------------------------------
    # parameters
    # ------------------------------------------------------------------------------------------
    def _norm_parameters(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    def _mlp_parameters(self, ffn: int, *, tp: int = 1) -> int:
        """One MLP of hidden ``ffn``; the fc1/gate-up and fc2 weights are split over tp, the fc2 bias is not."""
        h, m = self.hidden, self.mlp_matrices
        weights = m * h * ffn // tp
        biases = ((m - 1) * ffn // tp + h) if self.bias else 0
        return weights + biases

    def _check_tp(self, tp: int) -> int:
        tp = int_at_least("tp", tp, 1)
        if self.heads % tp or self.kv_heads % tp:
            raise reject("tp", tp, f"a divisor of heads ({self.heads}) and kv_heads ({self.kv_heads})")
        if self.ffn_hidden % tp:
            raise reject("tp", tp, f"a divisor of ffn_hidden ({self.ffn_hidden})")
        return tp

    def _check_etp(self, etp: int) -> int:
        """Expert tensor parallelism: each expert's fc1 columns and fc2 rows split over etp GPUs (Megatron-Core
        expert_tensor_parallel_size; moe/experts.py builds the expert linears over the expert TP group)."""
        etp = int_at_least("etp", etp, 1)
        if not self.is_moe:
            return 1  # nothing to split (Megatron keeps expert_tensor_parallel_size = tp on dense models too)
        if self._expert_ffn % etp:
            raise reject("etp", etp, f"a divisor of expert_ffn_hidden ({self.expert_ffn_hidden})")
        return etp

    def _check_ep(self, ep: int) -> int:
        ep = int_at_least("ep", ep, 1)
        if ep > 1 and not self.is_moe:
            raise reject("ep", ep, "1 for a dense model (no experts to distribute)")
        if self.is_moe and self.experts % ep:
            raise reject("ep", ep, f"a divisor of experts ({self.experts})")
        return ep

    def attention_parameters(self, *, tp: int = 1) -> int:
        """QKV and output projection of one layer on one tensor-parallel rank."""
        return self._attention_parameters(self._check_tp(tp))

    def _attention_parameters(self, tp: int) -> int:
        h, q = self.hidden, self.hidden + 2 * self.kv_dim
        weights = h * q // tp + h * h // tp
        biases = (q // tp + h) if self.bias else 0
        return weights + biases

    def layer_parameters(self, layer: int = 0, *, tp: int = 1, ep: int = 1, etp: int = 1) -> int:
        """Weights of layer ``layer`` on one GPU: tp splits the GEMM weights (norms, the router and
        row-parallel biases are replicated), ep splits the routed experts and etp each routed expert's weights
        (Megatron-Core expert_tensor_parallel_size; 1 here by default, as Megatron's MoE recipes and DeepSeek-V3
        use; ParallelismSpec passes its own, t unless set)."""
        self._check_layer(layer)
        return self._layer_parameters(layer, self._check_tp(tp), self._check_ep(ep), self._check_etp(etp))

    def _layer_parameters(self, layer: int, tp: int, ep: int, etp: int = 1) -> int:
        """:meth:`layer_parameters` with arguments already checked (stage and model sums check them once)."""
        total = 2 * self._norm_parameters() + self._attention_parameters(tp)
        if self._is_moe_layer(layer):
            total += self.hidden * self.experts  # router
            total += self._routed_expert_parameters(ep, etp)
            total += self.shared_experts * self._mlp_parameters(self._expert_ffn, tp=tp)
        else:
            total += self._mlp_parameters(self.ffn_hidden, tp=tp)
        return total

    def embedding_parameters(self, *, tp: int = 1) -> int:
        """Input embedding (vocabulary-parallel: V/t rows per rank) plus learned positions (replicated)."""
        tp = self._check_tp(tp)
        positions = self.seq_len * self.hidden if self.position_embedding == "learned" else 0
        return self._vocab_parameters(tp) + positions

    def output_parameters(self, *, tp: int = 1) -> int:
        """The logits layer: 0 when tied to the input embedding, else V h / t."""
        tp = self._check_tp(tp)
        return 0 if self.tied_embeddings else self._vocab_parameters(tp)

    def last_stage_output_parameters(self, *, tp: int = 1, pp: int = 1) -> int:
        """The logits weight on one GPU of the last of ``pp`` pipeline stages: V/t x h, also when tied to the
        input embedding and pp > 1 (Megatron keeps a copy there and all-reduces its gradient with the first
        stage); 0 when tied and pp = 1 (the embedding itself, counted by :meth:`embedding_parameters`)."""
        pp = int_at_least("pp", pp, 1)
        if self.tied_embeddings and pp == 1:
            return 0
        return self._vocab_parameters(self._check_tp(tp))

    def _vocab_parameters(self, tp: int) -> int:
        """One vocabulary-parallel V x h weight on one of ``tp`` ranks (already checked): V/t rounded up rows."""
        return ceil_div(self.vocab, tp) * self.hidden

    def expert_parameters(self) -> int:
        """Weights of one routed expert (an MLP of ``expert_ffn_hidden``, not split over tensor-parallel ranks);
        0 for a dense model."""
        return self._mlp_parameters(self._expert_ffn) if self.is_moe else 0

    def routed_expert_parameters(self, layer: int = 0, *, ep: int = 1, etp: int = 1) -> int:
        """The routed experts' weights of layer ``layer`` on one GPU (part of :meth:`layer_parameters`): its
        experts / ep experts of :meth:`expert_parameters` / etp on a MoE layer, 0 on a dense one."""
        self._check_layer(layer)
        ep, etp = self._check_ep(ep), self._check_etp(etp)
        return self._routed_expert_parameters(ep, etp) if self._is_moe_layer(layer) else 0

    def _routed_expert_parameters(self, ep: int, etp: int = 1) -> int:
        """The routed experts of one MoE layer on one GPU (``ep``, ``etp`` already checked): etp divides the
        expert's ffn hidden, so its fc1 columns and fc2 rows split evenly (biases too, as a dense MLP's)."""
        return (self.experts // ep) * self._mlp_parameters(self._expert_ffn, tp=etp)

    def final_norm_parameters(self) -> int:
        return self._norm_parameters()

    def total_parameters(self) -> int:
        """Every weight of the model once (tied embeddings counted once).

        >>> from workloads.presets import model_preset
        >>> round(model_preset("gpt3-175b").total_parameters() / 1e9, 1)
        174.6
        """
        return (
            sum(self._layer_parameters(i, 1, 1) for i in range(self.layers))
            + self.embedding_parameters()
            + self.output_parameters()
            + self.final_norm_parameters()
        )

    def active_parameters(self) -> int:
        """Weights one token passes through: MoE layers count top_k routed experts (and the shared ones)."""
        total = self.total_parameters()
        if self.is_moe:
            idle = (self.experts - self.top_k) * self.expert_parameters()
            total -= self.moe_layers * idle
        return total

    def stage_layers(self, *, pp: int = 1, split_slots: tuple[int, int] = (0, 0)) -> tuple[range, ...]:
        """Layers of each pipeline stage: contiguous, the first ``slots % pp`` stages one slot more, where the
        slots are the layers plus ``split_slots`` = (embedding, loss) slots that count as a layer each on the
        first and the last stage (Megatron-Core's --account-for-embedding-in-pipeline-split and
        --account-for-loss-in-pipeline-split), so a stage may hold no transformer layer.

        >>> from workloads.presets import model_preset
        >>> chunks = model_preset("llama3-405b").stage_layers(pp=16 * 8, split_slots=(1, 1))  # 126 + 2 slots
        >>> [len(c) for c in chunks[:2]], chunks[1], [len(c) for c in chunks[-2:]]
        ([0, 1], range(0, 1), [1, 0])
        """
        pp = int_at_least("pp", pp, 1)
        first, last = split_slots
        slots = self.layers + first + last
        if pp > slots:
            raise reject("pp", pp, f"an integer <= layers ({self.layers}) + embedding and loss slots ({first + last})")
        base, extra = divmod(slots, pp)
        stages, start = [], 0
        for stage in range(pp):
            end = start + base + (stage < extra)  # slots start..end, layer = slot - first
            stages.append(range(max(0, start - first), min(self.layers, end - first)))
            start = end
        return tuple(stages)

    def stage_parameters(
        self,
        stage: int,
        *,
        tp: int = 1,
        pp: int = 1,
        ep: int = 1,
        etp: int = 1,
        split_slots: tuple[int, int] = (0, 0),
    ) -> int:
        """Weights on one GPU of pipeline stage ``stage``: its layers, the embedding on the first stage,
        the final norm and output layer on the last (Megatron; a tied embedding is also kept, as the
        output weight, on the last stage when pp > 1)."""
        stages = self.stage_layers(pp=pp, split_slots=split_slots)
        if not is_int(stage) or not 0 <= stage < len(stages):
            raise reject("stage", stage, f"an integer in 0..{len(stages) - 1}")
        checked_tp, checked_ep, checked_etp = self._check_tp(tp), self._check_ep(ep), self._check_etp(etp)  # once
        total = sum(self._layer_parameters(i, checked_tp, checked_ep, checked_etp) for i in stages[stage])
        if stage == 0:
            total += self.embedding_parameters(tp=tp)
        if stage == len(stages) - 1:
            total += self.final_norm_parameters() + self.last_stage_output_parameters(tp=tp, pp=len(stages))
        return total

    def parameters_per_gpu(
        self, *, tp: int = 1, pp: int = 1, ep: int = 1, etp: int = 1, split_slots: tuple[int, int] = (0, 0)
    ) -> int:
        """The largest :meth:`stage_parameters` over the stages (the GPU that runs out of memory first)."""
        return max(self.stage_parameters(j, tp=tp, pp=pp, ep=ep, etp=etp, split_slots=split_slots) for j in range(pp))

    def parameter_bytes(self) -> int:
        return self.total_parameters() * self.dtype_bytes

    def training_state_bytes(
        self,
        *,
        tp: int = 1,
        pp: int = 1,
        ep: int = 1,
        etp: int = 1,
        dp: int = 1,
        edp: int | None = None,
        zero_stage: int = 0,
        grad_bytes: int = 2,
        split_slots: tuple[int, int] = (0, 0),
    ) -> TrainingStateBytes:
        """Weights, gradients and Adam state on the most loaded GPU (:func:`zero_state_bytes` of
        :meth:`parameters_per_gpu`). ZeRO shards the dense weights over ``dp`` and, given ``edp``, the routed
        experts' over their expert-data-parallel group of ``edp`` (Megatron-Core's distributed optimizer shards
        each gradient buffer over its own group: expert buffers over get_expert_data_parallel_group,
        distributed_data_parallel.py); ``edp`` None shards every weight over ``dp``."""
        kw = dict(zero_stage=zero_stage, param_bytes=self.dtype_bytes, grad_bytes=grad_bytes)
        per_stage = [self.stage_parameters(j, tp=tp, pp=pp, ep=ep, etp=etp, split_slots=split_slots) for j in range(pp)]
        if edp is None or not self.is_moe:
            return zero_state_bytes(max(per_stage), dp=dp, **kw)
        edp = int_at_least("edp", edp, 1)
        states = []
        for j, layers in enumerate(self.stage_layers(pp=pp, split_slots=split_slots)):
            expert = sum(self.routed_expert_parameters(i, ep=ep, etp=etp) for i in layers)
            dense, routed = zero_state_bytes(per_stage[j] - expert, dp=dp, **kw), zero_state_bytes(expert, dp=edp, **kw)
            states.append(
                TrainingStateBytes(
                    parameters=dense.parameters + routed.parameters,
                    gradients=dense.gradients + routed.gradients,
                    optimizer=dense.optimizer + routed.optimizer,
                )
            )
        return max(states, key=lambda state: state.total)

    # ------------------------------------------------------------------------------------------
    # FLOPs
    # ------------------------------------------------------------------------------------------
    def _tokens(self, micro_batch: int, seq_len: int | None, cp: int) -> tuple[int, int, int]:
        b = int_at_least("micro_batch", micro_batch, 1)
        s = self._seq(seq_len)
        cp = int_at_least("cp", cp, 1)
        if s % cp:
            raise reject("cp", cp, f"a divisor of seq_len ({s})")
        return b, s, cp

    def moe_tokens(self, *, micro_batch: int, seq_len: int | None = None, tp: int = 1, cp: int = 1) -> float:
        """Tokens one GPU routes in a MoE layer: b s / (c t) (the sequence-parallel shard)."""
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        tp = self._check_tp(tp)
        return b * s / cp / tp

    def layer_gemms(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> tuple[Gemm, ...]:
        """The forward GEMMs of one layer and one micro-batch on one GPU, in execution order.

        Attention products are batched over (micro-batch x local heads); with context parallelism a
        rank holds s/c queries and meets all s keys (ring attention), so scores are (s/c) x s.
        Routed expert GEMMs are ``E/ep`` products of the average m = etp (b s/(c t)) k ep / E tokens (the
        all-to-all brings a rank the tokens of its experts, the expert-TP all-gather those of its etp group:
        moe/token_dispatcher.py MoEAlltoAllTokenDispatcher) with 1/etp of each expert's columns (fc1) or rows
        (fc2): the same FLOPs per rank whatever etp.
        """
        self._check_layer(layer)
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        tp, ep, etp = self._check_tp(tp), self._check_ep(ep), self._check_etp(etp)
        h, d, tokens = self.hidden, self.head_dim, b * s // cp
        local_heads = self.heads // tp
        gemms = [
            Gemm(name="qkv", m=tokens, n=(self.hidden + 2 * self.kv_dim) // tp, k=h),
            Gemm(name="attn_scores", m=s // cp, n=s, k=d, count=b * local_heads, weight=False),
            Gemm(name="attn_values", m=s // cp, n=d, k=s, count=b * local_heads, weight=False),
            Gemm(name="attn_proj", m=tokens, n=h, k=h // tp),
        ]
        up = self.mlp_matrices - 1  # fc1 (GeLU) or fused gate+up (SwiGLU) columns per ffn unit
        if self._is_moe_layer(layer):
            t_moe = tokens / tp
            fe = self._expert_ffn
            per_expert = etp * t_moe * self.top_k * ep / self.experts
            gemms.append(Gemm(name="router", m=t_moe, n=self.experts, k=h))
            gemms.append(Gemm(name="expert_up", m=per_expert, n=up * fe // etp, k=h, count=self.experts // ep))
            gemms.append(Gemm(name="expert_down", m=per_expert, n=h, k=fe // etp, count=self.experts // ep))
            if self.shared_experts:
                fs = self.shared_experts * fe
                if fs % tp:
                    raise reject("tp", tp, f"a divisor of shared_experts x expert_ffn_hidden ({fs})")
                gemms.append(Gemm(name="shared_up", m=tokens, n=up * fs // tp, k=h))
                gemms.append(Gemm(name="shared_down", m=tokens, n=h, k=fs // tp))
        else:
            f = self.ffn_hidden
            gemms.append(Gemm(name="mlp_up", m=tokens, n=up * f // tp, k=h))
            gemms.append(Gemm(name="mlp_down", m=tokens, n=h, k=f // tp))
        return tuple(gemms)

    def layer_forward_flops(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> LayerFlops:
        """Forward FLOPs of one layer and micro-batch on one GPU, per operation (sums of :meth:`layer_gemms`)."""
        parts = {"qkv": 0.0, "attn_scores": 0.0, "attn_values": 0.0, "attn_proj": 0.0, "mlp": 0.0, "router": 0.0}
        for gemm in self.layer_gemms(layer, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp):
            key = gemm.name if gemm.name in parts else "mlp"
            parts[key] += gemm.flops
        return LayerFlops(**parts)

    def layer_recompute_flops(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        recompute: str = "none",
        tp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> float:
        """Forward work re-run before the backward: 0, the attention core, or the whole layer."""
        choice("recompute", recompute, RECOMPUTE)
        fwd = self.layer_forward_flops(layer, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp)
        return {"none": 0.0, "selective": fwd.attention_core, "full": fwd.total}[recompute]

    def layer_training_flops(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        recompute: str = "none",
        tp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
    ) -> float:
        """Forward + backward (2x forward) + recomputation of one layer and micro-batch on one GPU."""
        fwd = self.layer_forward_flops(
            layer, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp
        ).total
        extra = self.layer_recompute_flops(
            layer, micro_batch=micro_batch, seq_len=seq_len, recompute=recompute, tp=tp, cp=cp, ep=ep, etp=etp
        )
        return 3.0 * fwd + extra

    def logits_flops(self, *, micro_batch: int, seq_len: int | None = None, tp: int = 1, cp: int = 1) -> float:
        """Forward FLOPs of the output layer: 2 b s h V / (t c) (V/t rounded up: Megatron pads the vocabulary)."""
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        tp = self._check_tp(tp)
        return 2.0 * (b * s // cp) * self.hidden * ceil_div(self.vocab, tp)

    def deferred_wgrad_bytes(
        self, *, micro_batch: int, seq_len: int | None = None, tp: int = 1, sp: bool = False, cp: int = 1
    ) -> float:
        """Bytes the last pipeline stage keeps per micro-batch whose output-layer weight gradient it defers
        (Megatron-Core defer_embedding_wgrad_compute, tensor_parallel/layers.py): the layer's input, b s h / c
        elements (/ t with sequence parallelism, which buffers the local shard), and the gradient of its
        output, b s V / (t c) elements (V/t rounded up), D bytes each."""
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        tp = self._check_tp(tp)
        tokens = b * s / cp
        return self.dtype_bytes * tokens * (self.hidden / (tp if sp else 1) + ceil_div(self.vocab, tp))

    def step_flops(self, *, batch: int, seq_len: int | None = None, recompute: str = "full") -> float:
        """FLOPs of one training step over ``batch`` sequences, all GPUs together.

        Each layer: 3 x forward + recomputation; logits: 3 x forward. With ``recompute="full"`` and a
        GPT shape this is SC21 eq. 3, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
        """
        batch = int_at_least("batch", batch, 1)
        total = sum(
            self.layer_training_flops(i, micro_batch=batch, seq_len=seq_len, recompute=recompute)
            for i in range(self.layers)
        )
        return total + 3.0 * self.logits_flops(micro_batch=batch, seq_len=seq_len)

    def megatron_flops(self, *, batch: int, seq_len: int | None = None, tp: int = 1) -> float:
        """Megatron-LM's ``num_floating_point_operations`` of one step over ``batch`` sequences (module
        docstring): 3 x the forward GEMMs with causal attention at half its scores, no recomputation, the
        vocabulary padded to a multiple of 128 ``tp``.

        >>> from workloads.presets import model_preset
        >>> f"{model_preset('llama3-8b').megatron_flops(batch=1, seq_len=8192):.4e}"
        '4.2165e+14'
        """
        batch = int_at_least("batch", batch, 1)
        s = self._seq(seq_len)
        tp = int_at_least("tp", tp, 1)
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_dim
        attention = h * (q + 2 * kv) + q * s / 2 * 2 + q * h  # QKV, causal QK^T and x V, output projection
        per_token = 0.0
        for layer in range(self.layers):
            if self._is_moe_layer(layer):
                units = self._expert_ffn * (self.top_k + self.shared_experts)
            else:
                units = self.ffn_hidden
            per_token += 6.0 * (attention + h * self.mlp_matrices * units)
        per_token += 6.0 * h * ceil_div(self.vocab, MEGATRON_VOCAB_MULTIPLE * tp) * MEGATRON_VOCAB_MULTIPLE * tp
        return batch * s * per_token

    def model_flops_per_token(self, *, seq_len: int | None = None) -> float:
        """Training FLOPs per token without recomputation (the MFU numerator): step_flops / (B s)."""
        s = self._seq(seq_len)
        return self.step_flops(batch=1, seq_len=s, recompute="none") / s

    # ------------------------------------------------------------------------------------------
    # activation memory
    # ------------------------------------------------------------------------------------------
    def activation_bytes_per_layer(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        sp: bool = False,
        cp: int = 1,
        recompute: str = "none",
        flash_attention: bool = False,
        etp: int = 1,
    ) -> float:
        """Bytes one GPU keeps for the backward of one layer and one micro-batch (Korthikanti et al. 2022).

        Replicated over tensor-parallel ranks unless ``sp``: norm inputs, block inputs, residual
        dropout masks. Everything else is split over t. With context parallelism a rank holds s/c
        tokens and (s/c) x s attention scores. A MoE layer keeps its routed tokens' expert input as the
        expert-TP all-gather leaves it, etp times the tokens it dispatched (the fc1 weight gradient needs it),
        and their expert activations at 1/etp of the columns.
        """
        self._check_layer(layer)
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        tp, etp = self._check_tp(tp), self._check_etp(etp)
        choice("recompute", recompute, RECOMPUTE)
        flag("sp", sp)
        flag("flash_attention", flash_attention)
        D, h, a, mask = self.dtype_bytes, self.hidden, self.heads, (MASK_BYTES if self.dropout else 0)
        sb = b * s / cp  # local tokens
        scores = a * b * (s / cp) * s  # score elements of the local queries
        if recompute == "full":
            return D * sb * h / (tp if sp else 1)
        replicated = 2 * D * sb * h  # the two norm inputs
        replicated += D * sb * h + mask * sb * h  # attention block input, residual dropout mask
        sharded = D * sb * h + 2 * D * sb * self.kv_dim  # Q, K and V
        sharded += D * sb * h  # output-projection input
        if flash_attention:
            sharded += LSE_BYTES * a * sb
        elif recompute != "selective":
            sharded += (D + (mask + D if self.dropout else 0)) * scores  # softmax output, dropout mask and output
        replicated += D * sb * h + mask * sb * h  # MLP block input, residual dropout mask
        act = 3 * D if self.gated_mlp else 2 * D  # per MLP unit: fc1 output(s) and activation output
        if self._is_moe_layer(layer):
            routed = sb * self.top_k
            sharded += routed * (etp * D * h + act * self._expert_ffn)  # permuted input, expert activations
            sharded += sb * self.shared_experts * act * self._expert_ffn
            sharded += 4 * sb * self.experts  # fp32 router probabilities
        else:
            sharded += act * sb * self.ffn_hidden
        return (replicated + sharded) / tp if sp else replicated + sharded / tp

    # ------------------------------------------------------------------------------------------
    # communication sizes
    # ------------------------------------------------------------------------------------------
    def _hidden_bytes(self, micro_batch: int, seq_len: int | None, cp: int) -> int:
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        return b * (s // cp) * self.hidden * self.dtype_bytes

    def tp_collectives_per_layer(
        self,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int,
        sp: bool = False,
        cp: int = 1,
        phase: str = "forward",
        recompute: str = "none",
    ) -> tuple[CommSize, ...]:
        """Tensor-parallel collectives of one layer and micro-batch (empty for tp = 1).

        Without sequence parallelism: 2 all-reduces of s b h D per direction. With it: forward 2
        all-gathers + 2 reduce-scatters; backward 2 reduce-scatters + 4 all-gathers (2 of gradients,
        2 re-gathering the input for the weight gradient). Full recomputation repeats the forward
        collectives in the backward phase.
        """
        tp = self._check_tp(tp)
        choice("phase", phase, PHASES)
        choice("recompute", recompute, RECOMPUTE)
        nbytes = self._hidden_bytes(micro_batch, seq_len, cp)
        if tp == 1:
            return ()
        fwd: tuple[CommSize, ...]
        bwd: tuple[CommSize, ...]
        if not sp:
            fwd = (CommSize(name="tp_allreduce", kind=CollectiveKind.ALL_REDUCE, nbytes=nbytes, count=2, group="tp"),)
            bwd = (CommSize(name="tp_allreduce", kind=CollectiveKind.ALL_REDUCE, nbytes=nbytes, count=2, group="tp"),)
        else:
            fwd = (
                CommSize(name="sp_allgather", kind=CollectiveKind.ALL_GATHER, nbytes=nbytes, count=2, group="tp"),
                CommSize(
                    name="sp_reducescatter", kind=CollectiveKind.REDUCE_SCATTER, nbytes=nbytes, count=2, group="tp"
                ),
            )
            bwd = (
                CommSize(name="sp_allgather", kind=CollectiveKind.ALL_GATHER, nbytes=nbytes, count=4, group="tp"),
                CommSize(
                    name="sp_reducescatter", kind=CollectiveKind.REDUCE_SCATTER, nbytes=nbytes, count=2, group="tp"
                ),
            )
        if phase == "forward":
            return fwd
        return (
            tuple(
                CommSize(name=f"recompute_{c.name}", kind=c.kind, nbytes=c.nbytes, count=c.count, group="tp")
                for c in fwd
            )
            if recompute == "full"
            else ()
        ) + bwd

    def pp_activation_bytes(
        self,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        sp: bool = False,
        cp: int = 1,
        scatter_gather: bool = False,
    ) -> int:
        """Bytes one stage sends the next per micro-batch (forward activations; backward gradients are
        the same size): s b h D / c, divided by t when the tensor is sequence-parallel or split by SC21's
        scatter/gather optimisation (sec. 4.1)."""
        tp = self._check_tp(tp)
        nbytes = self._hidden_bytes(micro_batch, seq_len, cp)
        return ceil_div(nbytes, tp) if (sp or scatter_gather) else nbytes

    def ep_alltoall_bytes(self, *, micro_batch: int, seq_len: int | None = None, tp: int = 1, cp: int = 1) -> int:
        """Send buffer of one MoE all-to-all on one GPU: its b s / (c t) tokens x top_k copies x h x D."""
        if not self.is_moe:
            raise reject("ep_alltoall_bytes", self.name, "a MoE model (experts > 0)")
        tokens = self.moe_tokens(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
        return int(math.ceil(tokens * self.top_k)) * self.hidden * self.dtype_bytes

    def ep_collectives_per_layer(
        self,
        layer: int = 0,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int = 1,
        phase: str = "forward",
        recompute: str = "none",
    ) -> tuple[CommSize, ...]:
        """Dispatch and combine all-to-alls of a MoE layer (none for a dense layer or ep = 1) and, with expert
        tensor parallelism etp > 1, the all-gather of the received tokens over the expert tensor-parallel group
        after the dispatch and the reduce-scatter of the expert output before the combine, etp x the all-to-all
        buffer each (moe/token_dispatcher.py MoEAlltoAllTokenDispatcher: dispatch_postprocess
        gather_from_sequence_parallel_region(..., group=self.tp_group), combine_preprocess
        reduce_scatter_to_sequence_parallel_region; tp_group is the expert TP group, Megatron-Core >= 0.10);
        the backward runs each once more (an all-gather's gradient is a reduce-scatter), full recomputation
        the forward ones again. The routing probabilities gathered beside the tokens (4 B per token and expert
        against h D) are left out."""
        self._check_layer(layer)
        ep, etp = self._check_ep(ep), self._check_etp(etp)
        choice("phase", phase, PHASES)
        choice("recompute", recompute, RECOMPUTE)
        if (ep == 1 and etp == 1) or not self._is_moe_layer(layer):
            return ()
        nbytes = self.ep_alltoall_bytes(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
        count = 2 if phase == "forward" else (4 if recompute == "full" else 2)
        out = []
        if ep > 1:
            out.append(
                CommSize(name="ep_alltoall", kind=CollectiveKind.ALL_TO_ALL, nbytes=nbytes, count=count, group="ep")
            )
        if etp > 1:
            for name, kind in (
                ("etp_allgather", CollectiveKind.ALL_GATHER),
                ("etp_reducescatter", CollectiveKind.REDUCE_SCATTER),
            ):
                out.append(CommSize(name=name, kind=kind, nbytes=etp * nbytes, count=count // 2, group="etp"))
        return tuple(out)

    def cp_kv_bytes(self, *, micro_batch: int, seq_len: int | None = None, tp: int = 1, cp: int) -> int:
        """Bytes of the local K and V block passed to the next context-parallel rank in one ring step:
        2 b (s/c) g d D / t."""
        tp = self._check_tp(tp)
        b, s, cp = self._tokens(micro_batch, seq_len, cp)
        return 2 * b * (s // cp) * (self.kv_dim // tp) * self.dtype_bytes

    def cp_collectives_per_layer(
        self,
        *,
        micro_batch: int,
        seq_len: int | None = None,
        tp: int = 1,
        cp: int,
        phase: str = "forward",
        recompute: str = "none",
        comm_type: str = "p2p",
    ) -> tuple[CommSize, ...]:
        """Context-parallel collectives of one layer and micro-batch, by ``comm_type`` (Megatron-Core
        --cp-comm-type, Transformer Engine's implementations), with K V = ``cp_kv_bytes`` (local K and V) and
        Q = b (s/c) a d D / t (local queries; the output and its gradient are as large):

        * "p2p" (ring attention): c-1 KV send/receives forward; backward c-1 of KV and c-1 of dK, dV;
        * "a2a" (Ulysses): forward an all-to-all of Q, K, V (buffer Q + K V) before attention and one of the
          output (Q) after; backward one of the output gradient (Q) and one of dQ, dK, dV (Q + K V);
        * "allgather": forward an all-gather of K and V (c K V gathered); backward the all-gather again and a
          reduce-scatter of dK, dV (c K V);

        the forward ones again in the backward phase under full recomputation."""
        choice("phase", phase, PHASES)
        choice("recompute", recompute, RECOMPUTE)
        choice("comm_type", comm_type, ("p2p", "a2a", "allgather"))
        nbytes = self.cp_kv_bytes(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
        if cp == 1:
            return ()
        again = recompute == "full" and phase == "backward"
        if comm_type == "p2p":
            steps = cp - 1
            count = steps if phase == "forward" else (2 * steps + (steps if again else 0))
            return (CommSize(name="cp_kv", kind=CollectiveKind.SENDRECV, nbytes=nbytes, count=count, group="cp"),)
        if comm_type == "a2a":
            b, s, cp = self._tokens(micro_batch, seq_len, cp)
            q = b * (s // cp) * (self.heads * self.head_dim // tp) * self.dtype_bytes
            a2a = CollectiveKind.ALL_TO_ALL
            count = 1 if phase == "forward" else 1 + int(again)
            return (
                CommSize(name="cp_a2a_qkv", kind=a2a, nbytes=q + nbytes, count=count, group="cp"),
                CommSize(name="cp_a2a_out", kind=a2a, nbytes=q, count=count, group="cp"),
            )
        gathered = cp * nbytes
        ag = CommSize(
            name="cp_kv_allgather",
            kind=CollectiveKind.ALL_GATHER,
            nbytes=gathered,
            count=1 if phase == "forward" else 1 + int(again),
            group="cp",
        )
        if phase == "forward":
            return (ag,)
        rs = CommSize(
            name="cp_dkv_reducescatter", kind=CollectiveKind.REDUCE_SCATTER, nbytes=gathered, count=1, group="cp"
        )
        return (ag, rs)

    def dp_gradient_bytes(self, *, tp: int = 1, pp: int = 1, ep: int = 1, grad_bytes: int = 2) -> int:
        """Gradient bytes one GPU reduces over data parallelism per step (its largest stage's weights)."""
        grad_bytes = int_at_least("grad_bytes", grad_bytes, 1)
        return self.parameters_per_gpu(tp=tp, pp=pp, ep=ep) * grad_bytes
