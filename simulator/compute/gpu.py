"""How long a GPU computes: a roofline per kernel, with GEMM tile and wave quantisation.

The maths
---------
Every kernel takes the longer of its arithmetic and its memory traffic::

    time = max(t_math, bytes / (hbm_bandwidth x memory_efficiency))

* **GEMM** (m x k)(k x n), ``count`` independent products (NVIDIA, "Matrix Multiplication
  Background User's Guide", ch. 3: tile and wave quantisation). The output is cut into tiles of
  T_m x T_n; each SM computes one tile at a time at eff_max x f_s x peak / SMs, so::

      tiles  = ceil(m / T_m) ceil(n / T_n) count          waves = ceil(tiles / SMs)
      t_math = waves x 2 T_m T_n k / (eff_max x f_s x peak / SMs)
      efficiency = eff_max x f_s x [m n / (ceil(m/T_m) T_m ceil(n/T_n) T_n)] x [tiles / (waves SMs)]

  where f_s (``sustained_fraction``) is the share of a single-GPU benchmark's throughput that a
  tensor-core kernel keeps when every GPU of the server computes at once (clocks fall under the power
  limit); a huge aligned GEMM approaches eff_max x f_s x peak; a GEMM of a few tiles leaves SMs idle; time never
  falls when m, n or k grows. Bytes: (m k + k n) x input size + m n x output size, per product.
* **Elementwise, normalisation, softmax, permutation, optimizer**: memory-bound, bytes read + written, at the
  GPU's STREAM-like share of its HBM bandwidth (below).
* **Optimizer** (``optimizer_step``; Megatron-Core's mixed-precision and distributed optimizer, once per step):
  the rank's fp32 gradient buffer is zeroed (``zero_grad_buffer``, 4 B per local parameter, "called at the
  beginning of each training iteration", megatron/core/distributed/distributed_data_parallel.py); on the
  parameters the rank updates (its 1/d shard with the distributed optimizer) the gradient-norm pass of
  clipping reads the gradients (4 B), fused Adam reads gradient, fp32 master weight, momentum and variance
  and writes the last three (4 + 24 B), and the master weights are copied to the bf16 model weights (4 + 2 B,
  Megatron's ``_copy_main_params_to_model_params``): 4 + 38/d B per parameter with fp32 gradients (memory:
  ZeRO's 16 B per parameter, Rajbhandari et al. 2020, Megatron's 6 + 12/d). Clipping's rescale pass runs only
  when the norm exceeds the threshold (``clip_coeff < 1``), ASSUMED not in steady state.
* **FP8** (``dtype="fp8"``; Transformer Engine with delayed scaling, the DGX Cloud recipes' FP8): the
  weight GEMMs of TE modules (QKV, attention projection, MLP and expert matrices) run at
  ``dense_fp8_flop_per_s`` with 1-byte operands and the FP8 GEMM efficiency; each needs its input cast to FP8
  with its transpose for the weight gradient (TE's ``fp8_cast_transpose_fused``, amax taken in the same pass):
  2 + 1 + 1 B per element, or, where a norm feeds the GEMM (``LayerNormLinear``: QKV, MLP up), the norm writes
  FP8 instead of bf16 and the transpose is read and written, 1 - 2 + 1 + 1 = +1 B; backward, the output
  gradient is cast and transposed the same way (4 B per element of dY). Weights are cast (2 + 1 + 1 B) once per
  step, on the first micro-batch, counted in the optimizer step. The output layer (Megatron-Core's
  ``tensor_parallel.ColumnParallelLinear``, megatron/core/models/gpt/gpt_model.py) and the MoE router (plain
  torch) are not TE modules and stay bf16, as do attention and the element-wise kernels. The amax-history and
  scale updates (a few bytes per tensor) are ignored.
* **FlashAttention** (fused, never writes the s x s scores): executes 4 b s_q s_k a d / t FLOPs forward,
  of which the causal mask lets it skip all but (n+1)/(2n) for n = ceil(s/128) key blocks, and 2.5x that
  backward (5 matmuls to the forward's 2; Dao 2023 sec. 4.1); it runs at the FlashAttention efficiency
  of the GPU times f_s. Without flash attention (Megatron SC21) the scores are two batched GEMMs around a fused
  scale-mask-softmax and a dropout, each reading and writing b a s^2 elements.

Parameters per GPU (set once here, used for every scenario)
----------------------------------------------------------
* eff_max: measured best-shape cuBLAS matmul throughput / datasheet peak, from the "Maximum
  Achievable Matmul FLOPS" table of S. Bekman, ml-engineering, compute/accelerator/README.md (mean of
  100 iterations, torch 2.6-2.7): BF16 A100 SXM 271.2/312 = 0.869, H100 SXM 794.5/989 = 0.803 ("H200 is
  the same"), B200 1745/2250 = 0.776; FP8 H100 1402.6/1979 = 0.709, H200 1453.4/1979 = 0.734, B200
  3432.5/4500 = 0.763.
* sustained_fraction f_s: matmul throughput sustained while all 8 GPUs of a server run (MSMF, "the
  power-saturated, sustained rate that matches real training throughput") over the single-GPU MAMF, both
  from S. Bekman, ml-engineering, compute/accelerator/benchmarks/README.md: H200 MSMF 699-703 over MAMF
  ~828 TFLOP/s (clocks ~1405-1527 MHz under load) = 701/828 = 0.847; B200 MSMF 1426-1456 over MAMF
  1733-1757 = 1441/1745 = 0.826. H100 SXM: ESTIMATE 0.847, the H200's ratio (same GH100 die, same 700 W
  SXM limit; no H100 MSMF is published); the same README's example, one 4096^3 shape, shows a milder
  781 -> 743 TFLOP/s (1980 -> 1792 MHz, 0.951), so 0.847 is the all-shapes power-saturated figure, not a
  bound. (The datasheet's 989 TFLOP/s is at 1830 MHz, FA-3 paper appendix C.1; reported clocks are
  samples, so the measured throughput ratios are used rather than clock ratios.) ASSUMED to hold for FP8
  GEMMs and attention too (tensor-core bound under the same power limit). A100: 1 (none published; the
  SC21-fitted eff_max already stands for sustained 2021 training).
  **A100 exception, fitted once**: the shipped A100 uses eff_max = 0.71 (``A100_SC21_GEMM_EFFICIENCY``,
  221.5 TFLOP/s), the one parameter fitted on Megatron SC21 Table 1 (``simulator.validation.sc21``:
  mean |predicted/measured - 1| of TFLOP/s per GPU over the ten rows, golden-section search, optimum
  0.7063, rounded to two digits: fits on odd and even rows give 0.7224 and 0.7063, 0.7059 and 0.7064 before
  the data-parallel groups ran on NCCL's searched channels). It stands for fp16 GEMMs inside Megatron-LM in
  2021 (plausibly CUDA 11 cuBLAS and sustained clocks at the power limit; the data do not separate causes)
  rather than a 2024 benchmark; the sourced
  0.869 stays available as ``A100_MAMF_2024``.
  **H100 FP8, fitted once**: eff_max FP8 = 0.660 (``H100_DGXC_FP8_GEMM_EFFICIENCY``, 1306 TFLOP/s before f_s),
  the one parameter fitted on the NVIDIA DGX Cloud FP8 recipes (``simulator.validation.dgxc_fit --precision FP8
  --smallest``: the fewest-GPU layout of each recipe release of Llama 3.1 8B / 70B, GPT3-175B, Nemotron4 15B /
  340B, nine rows, grid 0.001; mean |error| 9.0 % at the measured 0.709 -> 7.5 % at the fitted 0.656 when first
  fitted; refitted with the attention kernels each recipe ran: optimum 0.660, 4.4 % at it, held out one model at a
  time 5.4 %, leave-one-model-out fits 0.657-0.691). It
  stands for what Transformer Engine's FP8 layers cost beyond the kernels modelled (casts, transposes and amax are
  costed; scaling-factor updates and amax reductions, FP8 GEMM shapes below the best one, and any error common to the
  FP8 rows are not separated), below the measured best-shape 0.709 (``H100_FP8_MAMF_2024``).
  BF16 on H100 stays the measured 0.803 (not fitted; the same script on the BF16 rows puts the optimum at 0.794,
  within 1.1 %, docs/models.md section 48). H200 keeps its own measured FP8 figure.
  **GB200, fitted once per precision**: eff_max BF16 = 0.650 (``GB200_DGXC_BF16_GEMM_EFFICIENCY``) and FP8 = 0.546
  (``GB200_DGXC_FP8_GEMM_EFFICIENCY``), each the one parameter fitted on the NVIDIA DGX Cloud GB200 NVL72 recipes of
  its precision (``simulator.validation.dgxc_fit --system gb200-nvl72 --precision BF16|FP8 --max-gpus 128``: the
  128-GPU rows of Llama 3.1 405B and Nemotron4 340B, weak and strong scaling, three rows a precision, grid 0.001;
  mean |error| 2.5 % BF16, 2.7 % FP8 at the fitted values, against 14.8 % and 23.6 % at B200's shares 0.776 / 0.763
  before the fit; leave-one-model-out fits BF16 0.617-0.668, held-out mean 5.7 %; FP8 0.504-0.557, 6.0 %).
  The measured GB200 best shapes are higher: Bekman's MAMF table (same source as above; torch
  2.10.0.dev20250916+cu130) BF16 1822.0 of 2500, FP8 3615.6 of 5000 TFLOP/s, i.e. 0.744 / 0.738 of the
  2450 / 4900 used here (``GB200_BF16_MAMF_2025``, ``GB200_FP8_MAMF_2025``);
  with them the same rows were still 11.7 % (BF16) and 21.7 % (FP8) fast. The fitted values stand for what the
  recipes' GB200 runs lose beyond the kernels modelled (sustained clocks of a 72-GPU rack under its power limit,
  the NeMo 25.04 release's cuBLAS against a 2025-09 CUDA 13 benchmark, FP8 shapes below the best one; the data do
  not separate them). Cross-check: the fitted FP8 / BF16 GEMM throughput ratio, 0.546 x 4900 / (0.650 x 2450) =
  1.68, is the H100's 0.660 x 1979 / (0.803 x 989) = 1.64 within 3 % (fits on disjoint rows).
* Tile 256 x 128: the NVIDIA guide's most efficient cuBLAS tile on A100 (its wave-quantisation example);
  assumed for Hopper and Blackwell too, whose default CUTLASS tiles (128 x 256 per SM; Blackwell's 2-SM
  256 x 256) have the same area per SM. cuBLAS picks smaller tiles for skinny GEMMs, which this ignores
  (pessimistic for m or n < 256).
* SMs: A100 108 (pc2/GPUInspector.jl docs, DGX-A100 ``gpuinfo``), H100/H200 SXM 132 (NVIDIA H100
  whitepaper), B200 148 (``multi_processor_count`` of compute capability 10.0 devices in PyTorch
  Inductor kernel metadata).
* Memory efficiency, STREAM-like kernels / datasheet bandwidth: A100 1220.7/1448.4 GiB/s = 0.843
  (pc2/GPUInspector.jl, A100-SXM4-40GB, same GA100 memory system as the 80 GB part); Hopper 3614.6/4000
  GB/s = 0.904 (OpenCL-Benchmark coalesced read on a GH200 96 GB HBM3, mredenti/PowerCapping);
  Blackwell 7.140/8.0 TB/s = 0.893 (measured STREAM triad on GB300, KernelAgent-Oink SM10x benchmarks).
  The Hopper figure agrees with what tuned memory-bound training kernels reach on an H100 (QuACK's RMSNorm,
  softmax and cross-entropy kernels: ~3.0 of 3.35 TB/s, 0.90).
* Attention efficiency (forward, backward) at a reference shape, then (``flash_shape``) scaled by the
  throughput of the compute model's ``flash_kernel`` at the kernel's shape over FlashAttention-3's at the
  reference (head dimension 128, no mask, sequence 16k). The FlashAttention-3 paper measures three kernels side
  by side on H100 SXM5 (Shah et al. 2024, arXiv 2407.08608, figs. 5-6; TFLOP/s of the 989 at 1830 MHz; 16k
  tokens per batch, hidden 2048) at sequence 512, 1k, 2k, 4k, 8k, 16k: forward by head dimension 64, 128, 256
  without the mask and 128, 256 with it, backward at 64 and 128 without it (``_ATTN_FWD``, ``_ATTN_BWD``). E.g.
  causal, head dimension 128: FlashAttention-3 292 -> 616, cuDNN's fused attention 315 -> 539, FlashAttention-2
  (flash-attn) 191 -> 335; backward 316 -> 561, 305 -> 516, 214 -> 322. Interpolated linearly in log(sequence)
  between the points and in log(head dimension), held flat outside. ASSUMED, nothing published: head dimension
  64 with the mask loses what 128 loses; the backward past head dimension 128, and with the mask, changes as the
  kernel's forward does at the same length. The sequence of a kernel is s/c (context parallelism: c ring steps of s/c
  keys); with Megatron's load-balanced causal split 1/c of the FLOPs runs masked, the rest unmasked.
  Kernel: H100/H200 cuDNN, Transformer Engine's choice on Hopper when cuDNN's and flash-attn's both apply
  (NeMo docs, memory_optimizations.rst: it "prefers cuDNN flash attention on Hopper+ architectures"); a
  recipe exporting NVTE_FUSED_ATTN=0 runs flash-attn's FlashAttention-2 (``StepOptions.attention_kernel``).
  H100/H200 reference: 648/989 forward, 561/989 backward (FA-3 itself). B200: FlashAttention-4 1613 TFLOP/s =
  71.7% forward (Zadouri et al. 2026), ASSUMED to be at the reference shape and to follow FA-3's H100 shape
  (another kernel: its H100 ratio to FA-3, ASSUMED); backward ASSUMED 561/648 of it. A100: FlashAttention-2
  "up to 73% ... forward, up to 63% ... backward" (Dao 2023, abstract), kept flat (best case; no shape, no
  other kernel).
* ``overlap_slowdown``: when a NCCL kernel runs beside compute it holds one SM per channel; with C
  channels of S SMs compute slows by S/(S - C) - 1 = C/(S - C). C = 16 is NCCL's default channel count
  on 8x H100 NDR nodes (nccl-tests issue 309, see topologies/devices.py): H100 0.138, A100 0.174. HBM
  contention by the communication kernel is ignored (ASSUMPTION: copies are small next to compute).

* ``launch_gap_s``: idle time of the GPU between consecutive kernels (launch latency and CPU scheduling not
  hidden by the host running ahead), added to every kernel. 0 for every GPU: no published figure for these
  training stacks was found (launches cost microseconds each and CUDA graphs remove most of them, against
  kernels of 0.1-10 ms in the layouts validated). What would set it: the mean gap between kernels on the
  compute stream of an Nsight Systems trace of a recipe's steady-state step, per GPU generation and software
  release.

What is ignored: clock differences between kernels (f_s is
one matmul-derived figure per GPU model), fp32 gradient accumulation traffic of weight-gradient GEMMs, FP4
(B200's NVFP4 GEMMs: no measured GEMM efficiency was found, so the dtype is not offered), loss scaling of fp16
training (unscale and inf check, 8 B per parameter),
L2-cache reuse between kernels, imbalance between experts, FlashAttention's batch and head count (the
FA-3 figures hold 16k tokens per batch; more heads fill SMs better at short sequences), the A100's
FlashAttention-2 shape.

Worked number: a 8192^3 bf16 GEMM on an H100 SXM has 32 x 64 = 2048 tiles = 15.5 -> 16 waves of 132,
so efficiency 0.803 x 0.847 x 2048/2112 = 0.660 and time 2 x 8192^3 / (0.660 x 989e12) = 1.69 ms.

Check against SC21 Table 1 (``sc21_compute_only_check``, ``python -m simulator.validation.sc21 compute``): the
compute-only throughput of each configuration (eq. 3 FLOPs over one iteration's kernels, full
recomputation, no flash attention, pipeline bubble included) is 148-181 TFLOP/s per A100 with the fitted
eff_max (169-222 with the 2024 MAMF 0.869); the measured 135-163 TFLOP/s, which also pay for
communication, are 0.80-0.97 of it (0.66-0.81 with MAMF), never above.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topologies.checks import choice, finite, finite_nonnegative, flag, integer, positive_finite, reject
from topologies.devices import GpuSpec
from workloads.model import RECOMPUTE, Gemm, ModelSpec, ceil_div

__all__ = (
    "DTYPES",
    "OP_KINDS",
    "GpuComputeModel",
    "A100_SC21_GEMM_EFFICIENCY",
    "A100_MAMF_2024",
    "H100_DGXC_FP8_GEMM_EFFICIENCY",
    "H100_FP8_MAMF_2024",
    "GB200_DGXC_BF16_GEMM_EFFICIENCY",
    "GB200_DGXC_FP8_GEMM_EFFICIENCY",
    "GB200_BF16_MAMF_2025",
    "GB200_FP8_MAMF_2025",
    "COMPUTE_MODELS",
    "compute_model_for",
    "OpTime",
    "ComputeBreakdown",
    "gemm_op",
    "gemm_efficiency",
    "flash_efficiency",
    "with_attention_kernel",
    "memory_op",
    "layer_forward",
    "layer_backward",
    "layer_forward_time_s",
    "layer_backward_time_s",
    "layer_times",
    "embedding_forward",
    "embedding_backward",
    "logits_forward",
    "logits_backward",
    "optimizer_step",
    "default_overlap_slowdown",
    "overlapped_time_s",
)

DTYPES = ("bf16", "fp8")
OP_KINDS = ("gemm", "attention", "elementwise", "optimizer")
FLASH_BLOCK = 128  # FlashAttention key/query block (Dao 2023: 128 x 128 tiles for d = 128)
FLASH_BWD_FLOP_RATIO = 2.5  # Dao 2023 sec. 4.1: backward FLOPs = 2.5 x forward (5 matmuls vs 2)
DEFAULT_COMM_CTAS = 16  # NCCL default channels on 8x H100 NDR (nccl-tests issue 309)
ADAM_BYTES_PER_PARAM = 12 + 12  # fused Adam reads and writes fp32 master weights, momentum, variance
FP32 = 4
BF16 = 2  # activations stay bf16 under FP8 training (Transformer Engine casts only GEMM operands)
FP8 = 1


# --------------------------------------------------------------------------------------------------
# per-GPU parameters
# --------------------------------------------------------------------------------------------------


def _fraction(owner: str, name: str, value: object, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    finite(
        f"{owner}.{name}",
        value,
        low=0,
        low_open=True,
        high=1,
        expected="a number in (0, 1]" + (" or None" if allow_none else ""),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuComputeModel:
    """How well kernels use one GPU model (sources in the module docstring)."""

    name: str
    sm_count: int
    gemm_efficiency_bf16: float
    gemm_efficiency_fp8: float | None
    memory_efficiency: float
    flash_fwd_efficiency: float
    flash_bwd_efficiency: float
    sustained_fraction: float = 1.0
    flash_shape: bool = False
    flash_kernel: str | None = None  # None: "fa3" with flash_shape, "fa2" without
    tile_m: int = 256
    tile_n: int = 128
    launch_gap_s: float = 0.0

    def __post_init__(self) -> None:
        owner = "GpuComputeModel"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"{owner}.name: {self.name!r} is not allowed; expected a non-empty string")
        for name in ("sm_count", "tile_m", "tile_n"):
            value = getattr(self, name)
            integer(f"{owner}.{name}", value, low=1)
        for name in (
            "gemm_efficiency_bf16",
            "memory_efficiency",
            "flash_fwd_efficiency",
            "flash_bwd_efficiency",
            "sustained_fraction",
        ):
            _fraction(owner, name, getattr(self, name))
        _fraction(owner, "gemm_efficiency_fp8", self.gemm_efficiency_fp8, allow_none=True)
        flag(f"{owner}.flash_shape", self.flash_shape)
        if self.flash_kernel is None:
            object.__setattr__(self, "flash_kernel", "fa3" if self.flash_shape else "fa2")
        choice(f"{owner}.flash_kernel", self.flash_kernel, ATTENTION_KERNELS)
        if not self.flash_shape and self.flash_kernel != "fa2":
            raise ValueError(
                f"{owner}.flash_kernel: {self.flash_kernel!r} is not allowed for {self.name} (no flash_shape: its "
                "attention is FlashAttention-2's flat best case); expected fa2"
            )
        finite(f"{owner}.launch_gap_s", self.launch_gap_s, low=0, high=1, high_open=True, expected="0 <= s < 1")


_HOPPER_MEMORY = 3614.60 / 4000.0  # GH200 96 GB HBM3: coalesced read 3614.60 GB/s of 4.0 TB/s
# Matmul throughput sustained with all 8 GPUs of a server busy (MSMF) over the single-GPU best-shape rate
# (MAMF), same benchmark (Bekman, ml-engineering, compute/accelerator/benchmarks/README.md):
_H200_SUSTAINED = 701.0 / 828.0  # H200: MSMF 699-703 (midpoint) over MAMF ~828 TFLOP/s, at ~1405-1527 MHz
# Transformer Engine's attention kernel on Hopper when cuDNN's and flash-attn's both apply (NeMo docs,
# memory_optimizations.rst: it "prefers cuDNN flash attention on Hopper+ architectures")
_HOPPER_ATTENTION = "cudnn"
_B200_SUSTAINED = 1441.0 / 1745.0  # B200: MSMF 1426-1456 over MAMF 1733-1757 TFLOP/s (midpoints)

# Attention kernels on H100 SXM5, measured side by side in the FlashAttention-3 paper (Shah et al. 2024, arXiv
# 2407.08608, figs. 5-6; BF16, TFLOP/s against the 989 of 1830 MHz, appendix C.1; batch x sequence = 16k tokens,
# hidden 2048): FlashAttention-3, cuDNN's fused attention and FlashAttention-2 (the flash-attn package), forward at
# each sequence length by head dimension, without and with the causal mask (head dimension 64 with the mask is not
# published), backward at head dimensions 64 and 128 without the mask.
ATTENTION_KERNELS = ("cudnn", "fa2", "fa3")
_ATTN_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_ATTN_FWD: Mapping[str, Mapping[tuple[int, bool], tuple[float, ...]]] = types.MappingProxyType(
    {
        "fa3": {
            (64, False): (333.0, 392.0, 460.0, 476.0, 496.0, 497.0),
            (128, False): (467.0, 565.0, 625.0, 638.0, 646.0, 648.0),
            (128, True): (292.0, 423.0, 521.0, 579.0, 602.0, 616.0),
            (256, False): (482.0, 639.0, 707.0, 736.0, 746.0, 756.0),
            (256, True): (286.0, 427.0, 537.0, 612.0, 628.0, 642.0),
        },
        "cudnn": {
            (64, False): (335.0, 373.0, 395.0, 408.0, 412.0, 413.0),
            (128, False): (497.0, 574.0, 617.0, 609.0, 600.0, 595.0),
            (128, True): (315.0, 410.0, 484.0, 518.0, 529.0, 539.0),
            (256, False): (470.0, 546.0, 580.0, 581.0, 580.0, 581.0),
            (256, True): (308.0, 391.0, 450.0, 483.0, 497.0, 509.0),
        },
        "fa2": {
            (64, False): (282.0, 306.0, 318.0, 321.0, 322.0, 324.0),
            (128, False): (309.0, 350.0, 362.0, 368.0, 370.0, 370.0),
            (128, True): (191.0, 260.0, 298.0, 319.0, 333.0, 335.0),
            (256, False): (275.0, 313.0, 321.0, 323.0, 324.0, 326.0),
            (256, True): (208.0, 251.0, 278.0, 293.0, 297.0, 298.0),
        },
    }
)
_ATTN_BWD: Mapping[str, Mapping[int, tuple[float, ...]]] = types.MappingProxyType(
    {
        "fa3": {64: (272.0, 363.0, 422.0, 453.0, 472.0, 474.0), 128: (316.0, 424.0, 501.0, 542.0, 559.0, 561.0)},
        "cudnn": {64: (266.0, 348.0, 395.0, 417.0, 432.0, 433.0), 128: (305.0, 408.0, 465.0, 499.0, 518.0, 516.0)},
        "fa2": {64: (198.0, 238.0, 264.0, 279.0, 287.0, 291.0), 128: (214.0, 260.0, 291.0, 310.0, 318.0, 322.0)},
    }
)

# the reference every GPU's attention efficiency is scaled from: FlashAttention-3 at head dimension 128, no mask, 16k,
# against the paper's H100 SXM5 BF16 peak at 1830 MHz (appendix C.1)
_FA3_REF_FWD = _ATTN_FWD["fa3"][128, False][-1]  # 648 TFLOP/s
_FA3_REF_BWD = _ATTN_BWD["fa3"][128][-1]  # 561 TFLOP/s
_FA3_PAPER_PEAK = 989.0  # TFLOP/s


def _log_interp(x: float, xs: tuple[float, ...], ys: tuple[float, ...]) -> float:
    """Piecewise-linear in log(x) through (xs, ys), held flat outside [xs[0], xs[-1]]."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = next(j for j in range(1, len(xs)) if x <= xs[j])
    w = math.log(x / xs[i - 1]) / math.log(xs[i] / xs[i - 1])
    return ys[i - 1] + w * (ys[i] - ys[i - 1])


def _fwd_at_head_dim(kernel: str, seq_len: float, head_dim: int, causal: bool) -> float:
    curves = _ATTN_FWD[kernel]
    if (head_dim, causal) in curves:
        return _log_interp(seq_len, _ATTN_SEQ, curves[head_dim, causal])
    # head dimension 64 with the mask is not published: ASSUMED to lose what 128 loses to the mask
    plain = _log_interp(seq_len, _ATTN_SEQ, curves[head_dim, False])
    return (
        plain * _log_interp(seq_len, _ATTN_SEQ, curves[128, True]) / _log_interp(seq_len, _ATTN_SEQ, curves[128, False])
    )


def _attention_tflops(kernel: str, seq_len: float, head_dim: float, causal: bool, backward: bool) -> float:
    """One attention kernel's H100 throughput at one shape: the published points, interpolated in log(sequence)
    and log(head dimension), held flat outside 512-16k and 64-256."""
    dims = (64.0, 128.0, 256.0)

    def forward(masked: bool) -> float:
        return _log_interp(head_dim, dims, tuple(_fwd_at_head_dim(kernel, seq_len, int(d), masked) for d in dims))

    fwd = forward(causal)
    if not backward:
        return fwd
    # backward published without the mask at head dimensions 64 and 128: ASSUMED past 128 to change with the head
    # dimension, and with the mask at any, as the kernel's forward does at the same sequence length
    b64, b128 = (_log_interp(seq_len, _ATTN_SEQ, _ATTN_BWD[kernel][d]) for d in (64, 128))
    if head_dim <= 128:
        unmasked = _log_interp(head_dim, dims[:2], (b64, b128))
    else:
        unmasked = b128 * forward(False) / _fwd_at_head_dim(kernel, seq_len, 128, False)
    return unmasked * fwd / forward(False) if causal else unmasked


def flash_efficiency(
    compute_model: GpuComputeModel, *, seq_len: float, head_dim: float, causal: bool, backward: bool
) -> float:
    """Fraction of the BF16 peak one attention kernel reaches on a single GPU (before ``sustained_fraction``): the
    GPU's reference efficiency (FlashAttention-3 at head dimension 128, no mask, 16k sequence) times the
    compute model's ``flash_kernel`` throughput at this shape over FlashAttention-3's at the reference (the
    kernels' H100 measurements), capped at 1; without ``flash_shape`` the reference figure itself.

    >>> cm = COMPUTE_MODELS["h100_sxm5_80gb"]
    >>> round(flash_efficiency(cm, seq_len=2048, head_dim=128, causal=True, backward=False) * 989)
    484
    >>> fa3 = dataclasses.replace(cm, flash_kernel="fa3")
    >>> round(flash_efficiency(fa3, seq_len=2048, head_dim=128, causal=False, backward=True) * 989)
    501
    """
    ref = compute_model.flash_bwd_efficiency if backward else compute_model.flash_fwd_efficiency
    if not compute_model.flash_shape:
        return ref
    positive_finite("flash_efficiency.seq_len", seq_len)
    positive_finite("flash_efficiency.head_dim", head_dim)
    kernel = compute_model.flash_kernel or "fa3"  # resolved on construction; "or" for the type checker
    reference = _FA3_REF_BWD if backward else _FA3_REF_FWD
    return min(1.0, ref * _attention_tflops(kernel, seq_len, head_dim, causal, backward) / reference)


def with_attention_kernel(compute_model: GpuComputeModel, kernel: str, *, field: str) -> GpuComputeModel:
    """``compute_model`` timing attention with ``kernel`` (one of ``ATTENTION_KERNELS``); ValueError naming
    ``field`` for another value, or for a kernel other than its own on a GPU without kernel curves (the A100's
    one flat FlashAttention-2 figure)."""
    choice(field, kernel, ATTENTION_KERNELS)
    try:  # the constructor holds the rule of which kernels a compute model can time
        return dataclasses.replace(compute_model, flash_kernel=kernel)
    except ValueError:
        raise reject(
            field, kernel, f"{compute_model.flash_kernel} on {compute_model.name} (one flat figure, no kernel curves)"
        ) from None


A100_SC21_GEMM_EFFICIENCY = 0.71
"""A100 fp16/bf16 GEMM eff_max fitted once on Megatron SC21 Table 1 (``simulator.validation.sc21``)."""

H100_DGXC_FP8_GEMM_EFFICIENCY = 0.660
"""H100 FP8 GEMM eff_max fitted once on the DGX Cloud FP8 recipes (``simulator.validation.dgxc_fit``)."""
H100_FP8_MAMF_2024 = 1402.6 / 1979
"""H100 FP8 best-shape matmul throughput over peak, Bekman MAMF (torch 2.6): the measured alternative."""

GB200_DGXC_BF16_GEMM_EFFICIENCY = 0.650
"""GB200 BF16 GEMM eff_max fitted once on the DGX Cloud GB200 NVL72 BF16 recipes (``simulator.validation.dgxc_fit``)."""
GB200_DGXC_FP8_GEMM_EFFICIENCY = 0.546
"""GB200 FP8 GEMM eff_max fitted once on the DGX Cloud GB200 NVL72 FP8 recipes (``simulator.validation.dgxc_fit``)."""
GB200_BF16_MAMF_2025 = 1822.0 / 2450
"""GB200 BF16 best-shape matmul throughput over the 2450 TFLOP/s peak, Bekman MAMF (torch 2.10 dev, CUDA 13)."""
GB200_FP8_MAMF_2025 = 3615.6 / 4900
"""GB200 FP8 best-shape matmul throughput over the 4900 TFLOP/s peak, Bekman MAMF (torch 2.10 dev, CUDA 13)."""

A100_MAMF_2024 = GpuComputeModel(
    name="a100_sxm4_80gb",
    sm_count=108,
    gemm_efficiency_bf16=271.2 / 312,
    gemm_efficiency_fp8=None,  # Bekman MAMF, torch 2.6 (2024)
    memory_efficiency=1220.7 / 1448.4,
    flash_fwd_efficiency=0.73,
    flash_bwd_efficiency=0.63,
)
"""The A100 with the best-shape GEMM efficiency measured in 2024 (documented alternative to the default)."""

COMPUTE_MODELS: Mapping[str, GpuComputeModel] = types.MappingProxyType(
    {
        "a100_sxm4_80gb": dataclasses.replace(A100_MAMF_2024, gemm_efficiency_bf16=A100_SC21_GEMM_EFFICIENCY),
        "h100_sxm5_80gb": GpuComputeModel(
            name="h100_sxm5_80gb",
            sm_count=132,
            gemm_efficiency_bf16=794.5 / 989,
            # FITTED (the one H100 FP8 parameter): DGX Cloud FP8 recipes, against MAMF 0.709 (module docstring)
            gemm_efficiency_fp8=H100_DGXC_FP8_GEMM_EFFICIENCY,
            memory_efficiency=_HOPPER_MEMORY,
            flash_fwd_efficiency=_FA3_REF_FWD / _FA3_PAPER_PEAK,  # FA-3, head dimension 128, no mask, 16k
            flash_bwd_efficiency=_FA3_REF_BWD / _FA3_PAPER_PEAK,
            flash_shape=True,
            flash_kernel=_HOPPER_ATTENTION,
            # ESTIMATE: the H200's ratio (same GH100 die and 700 W SXM power limit; no published H100 MSMF)
            sustained_fraction=_H200_SUSTAINED,
        ),
        "h200_sxm": GpuComputeModel(
            name="h200_sxm",
            sm_count=132,
            gemm_efficiency_bf16=794.5 / 989,
            gemm_efficiency_fp8=1453.4 / 1979,
            memory_efficiency=_HOPPER_MEMORY,
            flash_fwd_efficiency=_FA3_REF_FWD / _FA3_PAPER_PEAK,  # FA-3, head dimension 128, no mask, 16k
            flash_bwd_efficiency=_FA3_REF_BWD / _FA3_PAPER_PEAK,
            flash_shape=True,
            flash_kernel=_HOPPER_ATTENTION,
            sustained_fraction=_H200_SUSTAINED,
        ),
        "b200": GpuComputeModel(
            name="b200",
            sm_count=148,
            gemm_efficiency_bf16=1745 / 2250,
            gemm_efficiency_fp8=3432.5 / 4500,
            memory_efficiency=7.140 / 8.0,
            # FA-4's best forward, ASSUMED at FA-3's reference shape; backward ASSUMED at FA-3's 561/648 of it
            flash_fwd_efficiency=1613 / 2250,
            flash_bwd_efficiency=1613 / 2250 * _FA3_REF_BWD / _FA3_REF_FWD,
            flash_shape=True,
            sustained_fraction=_B200_SUSTAINED,
        ),
        # GB200 (the B200 die at 1200 W, 2450/4900 TFLOP/s dense BF16/FP8 peaks). GEMMs: FITTED, one number per
        # precision on the DGX Cloud GB200 NVL72 recipes (module docstring), below the measured single-GPU best
        # shape (Bekman MAMF 1822 / 3615.6 TFLOP/s = 0.744 / 0.738 of these peaks, GB200_*_MAMF_2025). No GB200
        # attention or all-GPU sustained benchmark was found: FlashAttention and f_s are B200's as a fraction of
        # the GPU's own peak (ESTIMATE); memory as Blackwell's (8 TB/s HBM3e, STREAM share 0.893).
        "gb200": GpuComputeModel(
            name="gb200",
            sm_count=148,  # the B200 die (compute capability 10.0)
            gemm_efficiency_bf16=GB200_DGXC_BF16_GEMM_EFFICIENCY,
            gemm_efficiency_fp8=GB200_DGXC_FP8_GEMM_EFFICIENCY,
            memory_efficiency=7.140 / 8.0,
            flash_fwd_efficiency=1613 / 2250,
            flash_bwd_efficiency=1613 / 2250 * _FA3_REF_BWD / _FA3_REF_FWD,
            flash_shape=True,
            sustained_fraction=_B200_SUSTAINED,
        ),
    }
)
"""Kernel-efficiency parameters by ``GpuSpec.name``."""


def compute_model_for(gpu: GpuSpec, compute_model: GpuComputeModel | None = None) -> GpuComputeModel:
    """``compute_model`` if given, else the shipped parameters of ``gpu`` (ValueError if there are none)."""
    if not isinstance(gpu, GpuSpec):
        raise ValueError(f"gpu: {gpu!r} is not allowed; expected a topologies.devices.GpuSpec")
    if compute_model is not None:
        if not isinstance(compute_model, GpuComputeModel):
            raise ValueError(f"compute_model: {compute_model!r} is not allowed; expected a GpuComputeModel or None")
        return compute_model
    if gpu.name not in COMPUTE_MODELS:
        raise ValueError(
            f"gpu: {gpu.name!r} has no kernel-efficiency parameters; expected one of "
            f"{', '.join(COMPUTE_MODELS)}, or pass compute_model=GpuComputeModel(...) with sourced values"
        )
    return COMPUTE_MODELS[gpu.name]


# --------------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OpTime:
    """One kernel: the FLOPs it executes, the bytes it moves, its time and what bounds it."""

    name: str
    kind: str
    flops: float
    nbytes: float
    time_s: float
    bound: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeBreakdown:
    """Kernels in execution order; ``time_s`` is their sum (one CUDA stream)."""

    ops: tuple[OpTime, ...] = field(default_factory=tuple)

    @property
    def time_s(self) -> float:
        return math.fsum(op.time_s for op in self.ops)

    @property
    def flops(self) -> float:
        return math.fsum(op.flops for op in self.ops)

    @property
    def nbytes(self) -> float:
        return math.fsum(op.nbytes for op in self.ops)

    def time_of(self, kind: str) -> float:
        if kind not in OP_KINDS:
            raise ValueError(f"kind: {kind!r} is not known; expected one of {', '.join(OP_KINDS)}")
        return math.fsum(op.time_s for op in self.ops if op.kind == kind)

    def by_kind(self) -> dict[str, float]:
        return {kind: self.time_of(kind) for kind in OP_KINDS}

    def by_name(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for op in self.ops:
            out[op.name] = out.get(op.name, 0.0) + op.time_s
        return out

    def __add__(self, other: ComputeBreakdown) -> ComputeBreakdown:
        if not isinstance(other, ComputeBreakdown):
            return NotImplemented
        return ComputeBreakdown(ops=self.ops + other.ops)


# --------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------


def _check_dtype(dtype: str, gpu: GpuSpec, cm: GpuComputeModel) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not allowed; expected one of {', '.join(map(repr, DTYPES))}")
    if dtype == "fp8" and (gpu.dense_fp8_flop_per_s is None or cm.gemm_efficiency_fp8 is None):
        raise ValueError(
            f"dtype: 'fp8' is not allowed on {gpu.name} (no FP8 tensor cores or no measured FP8 "
            "GEMM efficiency); expected 'bf16'"
        )


def _positive(name: str, value: object) -> float:
    return positive_finite(name, value)


def _memory_time_s(nbytes: float, gpu: GpuSpec, cm: GpuComputeModel) -> float:
    return nbytes / (gpu.hbm_bandwidth_bytes_per_s * cm.memory_efficiency)


def _gemm_math_time_s(m: float, n: float, k: float, count: int, peak: float, eff: float, cm: GpuComputeModel) -> float:
    tiles = math.ceil(m / cm.tile_m) * math.ceil(n / cm.tile_n) * count
    waves = math.ceil(tiles / cm.sm_count)
    return waves * 2.0 * cm.tile_m * cm.tile_n * k / (eff * cm.sustained_fraction * peak / cm.sm_count)


def gemm_op(
    gpu: GpuSpec,
    *,
    m: float,
    n: float,
    k: float,
    count: int = 1,
    dtype: str = "bf16",
    name: str = "gemm",
    kind: str = "gemm",
    out_bytes: int = 2,
    compute_model: GpuComputeModel | None = None,
) -> OpTime:
    """Time of ``count`` GEMMs (m x k)(k x n) on ``gpu`` (tile/wave-quantised roofline).

    >>> from topologies.devices import H100_SXM5_80GB
    >>> round(gemm_op(H100_SXM5_80GB, m=8192, n=8192, k=8192).time_s * 1e3, 2)
    1.69
    """
    cm = compute_model_for(gpu, compute_model)
    _check_dtype(dtype, gpu, cm)
    m, n, k = _positive("gemm.m", m), _positive("gemm.n", n), _positive("gemm.k", k)
    integer("gemm.count", count, low=1)
    if kind not in OP_KINDS:
        raise ValueError(f"gemm.kind: {kind!r} is not known; expected one of {', '.join(OP_KINDS)}")
    if dtype == "fp8":
        fp8_peak, fp8_eff = gpu.dense_fp8_flop_per_s, cm.gemm_efficiency_fp8
        assert fp8_peak is not None and fp8_eff is not None  # _check_dtype rejected fp8 on a GPU without them
        peak, eff, in_bytes = fp8_peak, fp8_eff, 1
    else:
        peak, eff, in_bytes = gpu.dense_bf16_flop_per_s, cm.gemm_efficiency_bf16, 2
    flops = 2.0 * m * n * k * count
    nbytes = ((m * k + k * n) * in_bytes + m * n * out_bytes) * count
    t_math = _gemm_math_time_s(m, n, k, int(count), peak, eff, cm)
    t_mem = _memory_time_s(nbytes, gpu, cm)
    return OpTime(
        name=name,
        kind=kind,
        flops=flops,
        nbytes=nbytes,
        time_s=max(t_math, t_mem) + cm.launch_gap_s,
        bound="compute" if t_math >= t_mem else "memory",
    )


def gemm_efficiency(
    gpu: GpuSpec,
    *,
    m: float,
    n: float,
    k: float,
    count: int = 1,
    dtype: str = "bf16",
    compute_model: GpuComputeModel | None = None,
) -> float:
    """Achieved FLOP/s of :func:`gemm_op` over the GPU's peak for that dtype."""
    op = gemm_op(gpu, m=m, n=n, k=k, count=count, dtype=dtype, compute_model=compute_model)
    peak = gpu.dense_fp8_flop_per_s if dtype == "fp8" else gpu.dense_bf16_flop_per_s
    assert peak is not None  # gemm_op rejected fp8 on a GPU without it
    return op.flops / op.time_s / peak


def memory_op(
    gpu: GpuSpec,
    *,
    nbytes: float,
    name: str = "elementwise",
    kind: str = "elementwise",
    compute_model: GpuComputeModel | None = None,
) -> OpTime:
    """A memory-bound kernel moving ``nbytes`` (read + written)."""
    cm = compute_model_for(gpu, compute_model)
    finite_nonnegative(f"{name}.nbytes", nbytes, "a finite number >= 0")
    if kind not in OP_KINDS:
        raise ValueError(f"{name}.kind: {kind!r} is not known; expected one of {', '.join(OP_KINDS)}")
    return OpTime(
        name=name,
        kind=kind,
        flops=0.0,
        nbytes=float(nbytes),
        time_s=_memory_time_s(nbytes, gpu, cm) + cm.launch_gap_s,
        bound="memory",
    )


# --------------------------------------------------------------------------------------------------
# the operations of one layer
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Op:
    """A forward kernel and how its backward looks: a GEMM (two gradient GEMMs), a memory-bound
    kernel (``bwd_nbytes``), or flash attention (``flash_flops`` executed forward)."""

    name: str
    kind: str
    gemm: Gemm | None = None
    fwd_nbytes: float = 0.0
    bwd_nbytes: float = 0.0
    flash_flops: float = 0.0
    flash_fwd_nbytes: float = 0.0
    flash_bwd_nbytes: float = 0.0
    flash_seq_len: float = 0.0  # keys (and local queries) of one kernel call
    flash_head_dim: int = 0
    flash_causal_share: float = 1.0  # of the FLOPs, the share in kernels with the causal mask
    fp8: bool = True  # a weight GEMM of a Transformer Engine module: FP8 under dtype "fp8"
    fp8_cast_fused: bool = False  # its FP8 input is written by the norm before it (TE LayerNormLinear)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Ctx:
    gpu: GpuSpec
    cm: GpuComputeModel
    dtype: str


def _gemm_dtype(op: _Op, ctx: _Ctx) -> str:
    """FP8 for the weight GEMMs of Transformer Engine modules under dtype "fp8", else bf16."""
    assert op.gemm is not None
    return ctx.dtype if op.gemm.weight and op.fp8 else "bf16"


def _forward_times(op: _Op, ctx: _Ctx, prefix: str = "") -> list[OpTime]:
    name = prefix + op.name
    if op.gemm is not None:
        g = op.gemm
        dtype = _gemm_dtype(op, ctx)
        times = []
        if dtype == "fp8":  # cast (+ amax) of the input and its transpose for the weight gradient
            per_element = 3 * FP8 - BF16 if op.fp8_cast_fused else BF16 + 2 * FP8
            nbytes = per_element * g.m * g.k * g.count
            times.append(memory_op(ctx.gpu, nbytes=nbytes, name=f"{name}.fp8_cast", compute_model=ctx.cm))
        times.append(
            gemm_op(
                ctx.gpu, m=g.m, n=g.n, k=g.k, count=g.count, dtype=dtype, name=name, kind=op.kind, compute_model=ctx.cm
            )
        )
        return times
    if op.flash_flops:
        return [_flash_time(name, op, op.flash_flops, op.flash_fwd_nbytes, ctx, backward=False)]
    return [memory_op(ctx.gpu, nbytes=op.fwd_nbytes, name=name, kind=op.kind, compute_model=ctx.cm)]


def _backward_times(op: _Op, ctx: _Ctx) -> list[OpTime]:
    if op.gemm is not None:
        g = op.gemm
        dtype = _gemm_dtype(op, ctx)
        first, second = ("dgrad", "wgrad") if g.weight else ("grad_lhs", "grad_rhs")
        cast = []
        if dtype == "fp8":  # cast (+ amax) of the output gradient and its transpose
            nbytes = (BF16 + 2 * FP8) * g.m * g.n * g.count
            cast.append(memory_op(ctx.gpu, nbytes=nbytes, name=f"{op.name}.fp8_cast_grad", compute_model=ctx.cm))
        # Y = A B with A (m x k), B (k x n): dA = dY B^T is (m x n)(n x k); dB = A^T dY is (k x m)(m x n).
        return cast + [
            gemm_op(
                ctx.gpu,
                m=g.m,
                n=g.k,
                k=g.n,
                count=g.count,
                dtype=dtype,
                name=f"{op.name}.{first}",
                kind=op.kind,
                compute_model=ctx.cm,
            ),
            gemm_op(
                ctx.gpu,
                m=g.k,
                n=g.n,
                k=g.m,
                count=g.count,
                dtype=dtype,
                name=f"{op.name}.{second}",
                kind=op.kind,
                compute_model=ctx.cm,
            ),
        ]
    if op.flash_flops:
        return [
            _flash_time(
                f"{op.name}.bwd",
                op,
                FLASH_BWD_FLOP_RATIO * op.flash_flops,
                op.flash_bwd_nbytes,
                ctx,
                backward=True,
            )
        ]
    if op.bwd_nbytes == 0:
        return []
    return [memory_op(ctx.gpu, nbytes=op.bwd_nbytes, name=f"{op.name}.bwd", kind=op.kind, compute_model=ctx.cm)]


def _flash_time(name: str, op: _Op, flops: float, nbytes: float, ctx: _Ctx, *, backward: bool) -> OpTime:
    def efficiency(causal: bool) -> float:
        return flash_efficiency(
            ctx.cm, seq_len=op.flash_seq_len, head_dim=op.flash_head_dim, causal=causal, backward=backward
        )

    share = op.flash_causal_share
    per_flop = share / efficiency(True) + ((1 - share) / efficiency(False) if share < 1 else 0.0)
    t_math = flops * per_flop / (ctx.gpu.dense_bf16_flop_per_s * ctx.cm.sustained_fraction)
    t_mem = _memory_time_s(nbytes, ctx.gpu, ctx.cm)
    return OpTime(
        name=name,
        kind="attention",
        flops=flops,
        nbytes=nbytes,
        time_s=max(t_math, t_mem) + ctx.cm.launch_gap_s,
        bound="compute" if t_math >= t_mem else "memory",
    )


def _check_flag(name: str, value: object) -> bool:
    return flag(name, value)


def _layer_ops(
    model: ModelSpec,
    layer: int,
    *,
    micro_batch: int,
    seq_len: int | None,
    tp: int,
    sp: bool,
    cp: int,
    ep: int,
    flash_attention: bool,
    etp: int = 1,
) -> list[_Op]:
    """The forward kernels of one layer on one GPU, in order (Megatron's fused kernels: bias+GeLU,
    bias+dropout+residual-add, scale+mask+softmax; SC21 sec. 4.2)."""
    if not isinstance(model, ModelSpec):
        raise ValueError(f"model: {model!r} is not allowed; expected a workloads.model.ModelSpec")
    _check_flag("sp", sp)
    _check_flag("flash_attention", flash_attention)
    gemms = {
        g.name: g
        for g in model.layer_gemms(layer, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp, ep=ep, etp=etp)
    }
    if model.is_moe_layer(layer) and tp > 1 and not sp:
        raise ValueError(
            f"sp: False is not allowed for MoE layer {layer} with tp = {tp}; expected True "
            "(Megatron requires sequence parallelism for MoE with tensor parallelism)"
        )
    D, h, d = model.dtype_bytes, model.hidden, model.head_dim
    s = model.seq_len if seq_len is None else seq_len
    tokens = micro_batch * s / cp
    rep = tokens / tp if sp else tokens  # tokens of the hidden-width tensors on this rank
    mask = 1 if model.dropout else 0
    heads = model.heads // tp
    ops: list[_Op] = []

    def norm(name: str) -> _Op:  # read x, write y; backward read x and dy, write dx
        return _Op(name=name, kind="elementwise", fwd_nbytes=2 * D * rep * h, bwd_nbytes=3 * D * rep * h)

    def residual(name: str) -> _Op:  # [bias +] [dropout +] residual add: read x and residual, write y (+ mask)
        n = rep * h
        return _Op(
            name=name,
            kind="elementwise",
            fwd_nbytes=(3 * D + mask) * n,
            bwd_nbytes=(2 * D + mask) * n if model.dropout else 0.0,
        )

    def activation(name: str, units: float) -> _Op:
        if model.gated_mlp:  # SwiGLU: read gate and up, write product; backward 3 reads, 2 writes
            return _Op(name=name, kind="elementwise", fwd_nbytes=3 * D * units, bwd_nbytes=5 * D * units)
        return _Op(name=name, kind="elementwise", fwd_nbytes=2 * D * units, bwd_nbytes=3 * D * units)

    ops.append(norm("input_norm"))
    ops.append(_Op(name="qkv", kind="gemm", gemm=gemms["qkv"], fp8_cast_fused=True))
    if model.position_embedding == "rope":
        n = tokens * (model.heads + model.kv_heads) * d / tp
        ops.append(_Op(name="rope", kind="elementwise", fwd_nbytes=2 * D * n, bwd_nbytes=2 * D * n))
    if flash_attention:
        blocks = math.ceil(s / FLASH_BLOCK)
        causal = (blocks + 1) / (2 * blocks)
        flops = 4.0 * micro_batch * heads * (s / cp) * s * d * causal
        q = tokens * heads * d * D  # Q, O, dO, dQ: local queries
        kv = micro_batch * s * (model.kv_heads // tp) * d * D  # K, V: every key streams past the local queries
        lse = FP32 * micro_batch * heads * (s / cp)
        ops.append(
            _Op(
                name="flash_attention",
                kind="attention",
                flash_flops=flops,
                flash_fwd_nbytes=2 * q + 2 * kv + lse,
                flash_bwd_nbytes=4 * q + 4 * kv + lse,
                # context parallelism runs c ring steps of s/c keys against the s/c local queries; with
                # Megatron's load balancing one of them (1/c of the FLOPs) carries the causal mask
                flash_seq_len=s / cp,
                flash_head_dim=d,
                flash_causal_share=1.0 / cp,
            )
        )
    else:
        scores = micro_batch * heads * (s / cp) * s
        ops.append(_Op(name="attn_scores", kind="attention", gemm=gemms["attn_scores"]))
        ops.append(_Op(name="softmax", kind="attention", fwd_nbytes=2 * D * scores, bwd_nbytes=3 * D * scores))
        if model.dropout:
            ops.append(
                _Op(
                    name="attn_dropout",
                    kind="attention",
                    fwd_nbytes=(2 * D + mask) * scores,
                    bwd_nbytes=(2 * D + mask) * scores,
                )
            )
        ops.append(_Op(name="attn_values", kind="attention", gemm=gemms["attn_values"]))
    ops.append(_Op(name="attn_proj", kind="gemm", gemm=gemms["attn_proj"]))
    ops.append(residual("attn_residual"))
    ops.append(norm("post_attn_norm"))
    if model.is_moe_layer(layer):
        t_moe = tokens / tp
        routed = t_moe * model.top_k
        ops.append(_Op(name="router", kind="gemm", gemm=gemms["router"], fp8=False))
        n = t_moe * model.experts  # fp32 softmax and top-k over the router logits
        ops.append(_Op(name="router_topk", kind="elementwise", fwd_nbytes=2 * FP32 * n, bwd_nbytes=3 * FP32 * n))
        ops.append(
            _Op(name="moe_permute", kind="elementwise", fwd_nbytes=2 * D * routed * h, bwd_nbytes=2 * D * routed * h)
        )
        ops.append(_Op(name="expert_up", kind="gemm", gemm=gemms["expert_up"]))
        assert model.expert_ffn_hidden is not None  # set on every MoE model
        ops.append(activation("expert_act", routed * model.expert_ffn_hidden))
        ops.append(_Op(name="expert_down", kind="gemm", gemm=gemms["expert_down"]))
        ops.append(
            _Op(name="moe_unpermute", kind="elementwise", fwd_nbytes=2 * D * routed * h, bwd_nbytes=2 * D * routed * h)
        )
        if model.shared_experts:
            ops.append(_Op(name="shared_up", kind="gemm", gemm=gemms["shared_up"]))
            ops.append(activation("shared_act", tokens * model.shared_experts * model.expert_ffn_hidden / tp))
            ops.append(_Op(name="shared_down", kind="gemm", gemm=gemms["shared_down"]))
    else:
        ops.append(_Op(name="mlp_up", kind="gemm", gemm=gemms["mlp_up"], fp8_cast_fused=True))
        ops.append(activation("swiglu" if model.gated_mlp else "bias_gelu", tokens * model.ffn_hidden / tp))
        ops.append(_Op(name="mlp_down", kind="gemm", gemm=gemms["mlp_down"]))
    ops.append(residual("mlp_residual"))
    return ops


def layer_forward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    layer: int = 0,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    dtype: str = "bf16",
    flash_attention: bool = True,
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Kernels of the forward pass of layer ``layer`` for one micro-batch on one GPU."""
    cm = compute_model_for(gpu, compute_model)
    _check_dtype(dtype, gpu, cm)
    ctx = _Ctx(gpu=gpu, cm=cm, dtype=dtype)
    ops = _layer_ops(
        model,
        layer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        ep=ep,
        etp=etp,
        flash_attention=flash_attention,
    )
    return ComputeBreakdown(ops=tuple(t for op in ops for t in _forward_times(op, ctx)))


def layer_backward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    layer: int = 0,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    dtype: str = "bf16",
    flash_attention: bool = True,
    recompute: str = "none",
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Kernels of the backward pass of one layer and micro-batch, preceded by the recomputed forward
    kernels: none; "selective" the attention core (nothing with flash attention, which recomputes
    inside its backward); "full" the whole layer. Recomputed kernels are named ``recompute.<op>``."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute: {recompute!r} is not allowed; expected one of {', '.join(map(repr, RECOMPUTE))}")
    cm = compute_model_for(gpu, compute_model)
    _check_dtype(dtype, gpu, cm)
    ctx = _Ctx(gpu=gpu, cm=cm, dtype=dtype)
    ops = _layer_ops(
        model,
        layer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        ep=ep,
        etp=etp,
        flash_attention=flash_attention,
    )
    core = {"attn_scores", "softmax", "attn_dropout", "attn_values"}
    again = [op for op in ops if recompute == "full" or (recompute == "selective" and op.name in core)]
    times = [t for op in again for t in _forward_times(op, ctx, prefix="recompute.")]
    times += [t for op in reversed(ops) for t in _backward_times(op, ctx)]
    return ComputeBreakdown(ops=tuple(times))


def layer_forward_time_s(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    dtype: str = "bf16",
    flash_attention: bool = True,
    layer: int = 0,
    compute_model: GpuComputeModel | None = None,
) -> float:
    """Seconds of :func:`layer_forward`."""
    return layer_forward(
        model,
        gpu,
        layer=layer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        ep=ep,
        etp=etp,
        dtype=dtype,
        flash_attention=flash_attention,
        compute_model=compute_model,
    ).time_s


def layer_backward_time_s(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    dtype: str = "bf16",
    flash_attention: bool = True,
    recompute: str = "none",
    layer: int = 0,
    compute_model: GpuComputeModel | None = None,
) -> float:
    """Seconds of :func:`layer_backward` (recomputation included)."""
    return layer_backward(
        model,
        gpu,
        layer=layer,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        ep=ep,
        etp=etp,
        dtype=dtype,
        flash_attention=flash_attention,
        recompute=recompute,
        compute_model=compute_model,
    ).time_s


def layer_times(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    ep: int = 1,
    etp: int = 1,
    dtype: str = "bf16",
    flash_attention: bool = True,
    recompute: str = "none",
    compute_model: GpuComputeModel | None = None,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Seconds of :func:`layer_forward` and :func:`layer_backward` of every layer, (forward, backward). All
    dense (all MoE) layers of a model run the same kernels, so one layer of each kind is timed."""
    if not isinstance(model, ModelSpec):
        raise ValueError(f"model: {model!r} is not allowed; expected a workloads.model.ModelSpec")
    kw: dict[str, Any] = dict(
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        ep=ep,
        etp=etp,
        dtype=dtype,
        flash_attention=flash_attention,
        compute_model=compute_model,
    )
    by_kind: dict[bool, tuple[float, float]] = {}
    forward, backward = [], []
    for layer in range(model.layers):
        kind = model.is_moe_layer(layer)
        if kind not in by_kind:
            by_kind[kind] = (
                layer_forward(model, gpu, layer=layer, **kw).time_s,
                layer_backward(model, gpu, layer=layer, recompute=recompute, **kw).time_s,
            )
        forward.append(by_kind[kind][0])
        backward.append(by_kind[kind][1])
    return tuple(forward), tuple(backward)


# --------------------------------------------------------------------------------------------------
# embedding, logits and loss, optimizer
# --------------------------------------------------------------------------------------------------


def _tokens(model: ModelSpec, micro_batch: int, seq_len: int | None, tp: int, cp: int) -> tuple[float, int]:
    # validates through the model (micro_batch, seq_len, cp, tp) and returns (local tokens, V/t)
    model.logits_flops(micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
    s = model.seq_len if seq_len is None else seq_len
    return micro_batch * s / cp, ceil_div(model.vocab, tp)


def _embedding_ops(model: ModelSpec, *, micro_batch: int, seq_len: int | None, tp: int, cp: int) -> list[_Op]:
    tokens, v_local = _tokens(model, micro_batch, seq_len, tp, cp)
    D, n = model.dtype_bytes, tokens * model.hidden
    ops = [_Op(name="embedding", kind="elementwise", fwd_nbytes=2 * D * n, bwd_nbytes=3 * D * n)]
    if model.position_embedding == "learned":
        ops.append(_Op(name="position_add", kind="elementwise", fwd_nbytes=3 * D * n, bwd_nbytes=2 * D * n))
    if model.dropout:
        ops.append(
            _Op(name="embedding_dropout", kind="elementwise", fwd_nbytes=(2 * D + 1) * n, bwd_nbytes=(2 * D + 1) * n)
        )
    return ops


def embedding_forward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    cp: int = 1,
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Vocabulary-parallel lookup of the local tokens (read and write b s h / c), learned positions, dropout."""
    ctx = _Ctx(gpu=gpu, cm=compute_model_for(gpu, compute_model), dtype="bf16")
    ops = _embedding_ops(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
    return ComputeBreakdown(ops=tuple(t for op in ops for t in _forward_times(op, ctx)))


def embedding_backward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    cp: int = 1,
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Scatter-add of the token gradients into a dense (V/t x h) gradient (zero-filled, then added to the
    fp32 main gradient: D + D + 8 bytes per element) and the position/dropout backward."""
    ctx = _Ctx(gpu=gpu, cm=compute_model_for(gpu, compute_model), dtype="bf16")
    ops = _embedding_ops(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp)
    _, v_local = _tokens(model, micro_batch, seq_len, tp, cp)
    dense = v_local * model.hidden * (2 * model.dtype_bytes + 2 * FP32)
    times = [t for op in reversed(ops) for t in _backward_times(op, ctx)]
    times.append(memory_op(gpu, nbytes=dense, name="embedding.dense_grad", compute_model=ctx.cm))
    return ComputeBreakdown(ops=tuple(times))


def _logits_ops(model: ModelSpec, *, micro_batch: int, seq_len: int | None, tp: int, sp: bool, cp: int) -> list[_Op]:
    tokens, v_local = _tokens(model, micro_batch, seq_len, tp, cp)
    _check_flag("sp", sp)
    D, h = model.dtype_bytes, model.hidden
    rep = tokens / tp if sp else tokens
    n = tokens * v_local
    return [
        _Op(name="final_norm", kind="elementwise", fwd_nbytes=2 * D * rep * h, bwd_nbytes=3 * D * rep * h),
        # Megatron-Core's output layer is a tensor_parallel.ColumnParallelLinear, not a TE module: bf16 under FP8
        _Op(name="logits", kind="gemm", gemm=Gemm(name="logits", m=tokens, n=v_local, k=h), fp8=False),
        # Megatron's vocabulary-parallel cross-entropy: read the logits twice (max, exp) and keep the fp32
        # softmax for the backward, which reads it and writes the bf16 gradient.
        _Op(name="cross_entropy", kind="elementwise", fwd_nbytes=(2 * D + FP32) * n, bwd_nbytes=(FP32 + D) * n),
    ]


def _logits(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None,
    tp: int,
    sp: bool,
    cp: int,
    dtype: str,
    compute_model: GpuComputeModel | None,
) -> tuple[_Ctx, list[_Op]]:
    cm = compute_model_for(gpu, compute_model)
    _check_dtype(dtype, gpu, cm)
    return _Ctx(gpu=gpu, cm=cm, dtype=dtype), _logits_ops(
        model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, sp=sp, cp=cp
    )


def logits_forward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    dtype: str = "bf16",
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Final norm, output GEMM (b s / c) x (V/t) x h and the loss."""
    ctx, ops = _logits(
        model,
        gpu,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        dtype=dtype,
        compute_model=compute_model,
    )
    return ComputeBreakdown(ops=tuple(t for op in ops for t in _forward_times(op, ctx)))


def logits_backward(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    micro_batch: int,
    seq_len: int | None = None,
    tp: int = 1,
    sp: bool = False,
    cp: int = 1,
    dtype: str = "bf16",
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Loss gradient, output-layer gradient GEMMs, final-norm backward."""
    ctx, ops = _logits(
        model,
        gpu,
        micro_batch=micro_batch,
        seq_len=seq_len,
        tp=tp,
        sp=sp,
        cp=cp,
        dtype=dtype,
        compute_model=compute_model,
    )
    return ComputeBreakdown(ops=tuple(t for op in reversed(ops) for t in _backward_times(op, ctx)))


def optimizer_step(
    gpu: GpuSpec,
    *,
    parameters: float,
    grad_bytes: int = FP32,
    param_bytes: int = 2,
    buffer_parameters: float | None = None,
    fp8_weights: float = 0.0,
    compute_model: GpuComputeModel | None = None,
) -> ComputeBreakdown:
    """Memory-bound step of Megatron's mixed-precision optimizer on one GPU, per training step (kernels in the
    order they run, bytes per parameter):

    * ``zero_grad_buffer``: the rank's whole gradient buffer is zeroed (``grad_bytes`` per parameter of
      ``buffer_parameters``, the rank's weights; default ``parameters``);
    * ``grad_norm``: the gradient-norm pass of clipping reads the gradients of the ``parameters`` this GPU
      updates (its shard under the distributed optimizer);
    * ``adam``: fused Adam reads gradient, fp32 master weight, momentum, variance and writes the last three:
      grad_bytes + 24;
    * ``copy_main_to_model``: the updated fp32 master weights are copied to the ``param_bytes`` model weights:
      4 + param_bytes;
    * ``fp8_weight_cast``: under FP8, Transformer Engine casts each of the ``fp8_weights`` GEMM weights once per
      step (first micro-batch; later ones reuse it) to FP8 and its transpose: param_bytes + 2.

    With fp32 gradients and bf16 weights that is 4 + 4 + 28 + 6 = 42 bytes per parameter without sharding.

    >>> from topologies.devices import H100_SXM5_80GB
    >>> round(optimizer_step(H100_SXM5_80GB, parameters=1e9).time_s * 1e3, 2)   # 42e9 B / (3.35e12 x 0.904)
    13.87
    """
    cm = compute_model_for(gpu, compute_model)
    finite_nonnegative("optimizer_step.parameters", parameters, "a finite number >= 0")
    buffer = parameters if buffer_parameters is None else buffer_parameters
    finite_nonnegative("optimizer_step.buffer_parameters", buffer, "a finite number >= 0 or None")
    finite_nonnegative("optimizer_step.fp8_weights", fp8_weights, "a finite number >= 0")
    for name, value in (("grad_bytes", grad_bytes), ("param_bytes", param_bytes)):
        integer(f"optimizer_step.{name}", value, low=1)
    kernels = [
        ("zero_grad_buffer", buffer * grad_bytes),
        ("grad_norm", parameters * grad_bytes),
        ("adam", parameters * (grad_bytes + ADAM_BYTES_PER_PARAM)),
        ("copy_main_to_model", parameters * (FP32 + param_bytes)),
    ]
    if fp8_weights:
        kernels.append(("fp8_weight_cast", fp8_weights * (param_bytes + 2 * FP8)))
    return ComputeBreakdown(
        ops=tuple(
            memory_op(gpu, nbytes=nbytes, name=name, kind="optimizer", compute_model=cm) for name, nbytes in kernels
        )
    )


# --------------------------------------------------------------------------------------------------
# compute slowed by a concurrent communication kernel
# --------------------------------------------------------------------------------------------------


def default_overlap_slowdown(
    gpu: GpuSpec, *, comm_ctas: int = DEFAULT_COMM_CTAS, compute_model: GpuComputeModel | None = None
) -> float:
    """C / (S - C): compute loses the ``comm_ctas`` SMs a NCCL kernel occupies (one per channel).

    >>> from topologies.devices import H100_SXM5_80GB
    >>> round(default_overlap_slowdown(H100_SXM5_80GB), 3)
    0.138
    """
    cm = compute_model_for(gpu, compute_model)
    integer(
        "comm_ctas",
        comm_ctas,
        low=0,
        high=cm.sm_count - 1,
        expected=f"an integer in 0..{cm.sm_count - 1} (SMs of {gpu.name})",
    )
    return comm_ctas / (cm.sm_count - comm_ctas)


def overlapped_time_s(
    time_s: float, gpu: GpuSpec, *, overlap_slowdown: float | None = None, compute_model: GpuComputeModel | None = None
) -> float:
    """``time_s`` of compute stretched while a communication kernel runs beside it:
    time_s x (1 + overlap_slowdown); ``None`` takes :func:`default_overlap_slowdown`."""
    finite_nonnegative("time_s", time_s, "a finite number >= 0")
    if overlap_slowdown is None:
        overlap_slowdown = default_overlap_slowdown(gpu, compute_model=compute_model)
    else:
        finite_nonnegative("overlap_slowdown", overlap_slowdown, "a finite number >= 0 or None")
    return time_s * (1.0 + overlap_slowdown)
