"""NVIDIA DGX Cloud benchmarking recipes on H100 and GB200 NVL72 (BF16 and FP8): predicted against measured step
time and MFU.

The table
---------
``data/training_dgxc_h100_bf16.csv``, ``data/training_dgxc_h100_fp8.csv`` and
``data/training_dgxc_gb200_nvl72.csv`` hold the dense-model rows of the DGX Cloud recipe tables (Llama 3.1 8B,
70B, 405B; GPT3-175B; Nemotron4 15B, 340B) on H100 in BF16 and FP8 and on GB200 NVL72, copied with their
``source`` and ``source_ref`` columns (NVIDIA/dgxc-benchmarking READMEs, recipes v24.11.1, v25.04.01,
v25.05.05): per layout the step time, the tokens/s and NVIDIA's MFU (recipe model FLOPs over the dense peak of
the precision: H100 989 BF16, 1979 FP8; GB200 2450, 4900). ``data/training_dgxc_moe.csv`` holds the
mixture-of-experts rows (Grok-1 314B, DeepSeek-V3 671B, Llama 4 Maverick 400B; H100 and GB200), copied the same
way: they are simulated and reported apart (``DGXC_MOE_MODELS``: not in the dense means, not fitted on), with the
expert parallelism e the recipe ran (``ParallelismSpec.ep``) and the expert tensor parallelism its notes give
(``ETP=n``: ``ParallelismSpec.etp``, Megatron-Core's --expert-tensor-parallel-size; rows without it run with
Megatron-Core's default, t): ETP=1 with t > 1 folds the tensor ranks into the expert groups, which is how the
DeepSeek-V3 layouts fit e > d x c (t 2, e 64 or 32: etp x e = t c d). The ``deepseek-v3-like`` preset lacks
multi-head latent attention (standard attention of 128 heads instead) and the multi-token-prediction layer; it
has the shared expert and the 3 leading dense layers. The rows whose README prints no layout are named, not
simulated.
Nemotron-H and the JAX recipes are left out (architectures the presets do not have). The GB200 NVL72 rows run on
``gb200-nvl72`` (one 72-GPU NVLink domain a rack, 72 NDR NICs, ``topologies.node``), 64 GPUs a rack
(``DGXC_GPUS_PER_DOMAIN``), the racks on a fat-tree. Rows marked ``proxy`` ran the 405B with fewer
layers; they are simulated with those layers and reported apart (``--proxy``), since their step mixes
first/last-stage work differently.

How a row is simulated
----------------------
The recipe's layout (t, p, c, d, v, micro-batch, global batch, sequence) on ``dgx-h100`` servers (8 NDR NICs each,
a rail-optimised leaf-spine, as the recipes' "DGX-H100 reference arch (8x400G IB per node)") or GB200 NVL72 racks,
in the row's precision (FP8: Transformer Engine's FP8 GEMMs and casts, ``simulator.compute.gpu``), flash attention,
no recomputation, interleaved 1F1B when v > 1, sequence parallelism when t > 1, with the communication settings of
NeMo's recipes, not Megatron-Core's defaults (``dgxc_layout``): the distributed optimizer (ZeRO 1) with overlapped
gradient reduce-scatter and parameter all-gather (NeMo's llama3_70b / gpt3_175b trainer:
DistributedDataParallelConfig(overlap_grad_reduce=True, overlap_param_gather=True), distributed_fused_adam), each
model chunk's all-gathers dispatched by the interleaved schedule when d > 1 (align_param_gather: NeMo's
MegatronCommOverlapCallback sets it when d > 1, p > 1 and vp > 1), the output layer's weight gradients of the
first 22 or 50 micro-batches deferred to the pipeline flush when p > 1 (``WGRAD_DEFERRAL_LIMITS``), TP
communication overlap when t > 1 (the performance recipes' MegatronCommOverlapCallback(tp_comm_overlap=True,
tp_comm_overlap_cfg=userbuffers_*_h100_*); NVIDIA/dgxc-benchmarking llama3.1/pretrain_llama31.py sets it for 70B
and 405B; modelled with Transformer Engine's default overlap methods, not the recipes' tuned SM counts),
non-blocking stage-to-stage transfers with the interleaved schedule
(nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py sets overlap_p2p_comm=True when vp > 1, as Megatron-LM's
training script does), and gradients reduced in fp32 (DDP grad_reduce_in_fp32=True) except for the recipes of
``BF16_GRADIENTS`` (GPT3-175B, Nemotron4 340B, Grok-1, each with its source), the releases of ``BF16_GRADIENT_RELEASES``
and the FP8 rows (pretrain_llama31.py: bf16_with_fp8_mixed() with grad_reduce_in_fp32 = False), which reduce bf16
gradients. The v24.11.1 rows ran NeMo 1.0 Hydra configurations, read at that release's commit 35a9aec
(llama3.1/llama3.1_{8b,70b,405b}.yaml and configure.sh, nemo_megatron/gpt3_175b_hydra.yaml and launch.sh,
nemotron/nemotron4-{15b,340b}-synth.yaml and configure.sh): Apex's distributed_fused_adam with
``overlap_grad_sync``/``overlap_param_sync`` and ``grad_sync_dtype: bf16`` in every one of them (hence
``BF16_GRADIENT_RELEASES``), TP communication overlap and non-blocking stage transfers where t > 1 and v > 1 (the
Nemotron files set them off, its configure.sh turns them on), the output-layer weight-gradient deferral of
``WGRAD_DEFERRAL_LIMITS`` (70B 22, 405B 50, Nemotron4 340B 22; the GPT-3 file has none), no dropout but GPT-3's
(hidden and attention dropout 0.1, as the ``gpt3-175b`` preset), Nemotron4 340B's selective recomputation of core
attention (not modelled: ``recompute="selective"`` costs nothing extra with flash attention here), and the
attention kernel of ``FLASH_ATTENTION_2`` (NVTE_FUSED_ATTN=0: GPT-3 on the NeMo 24.05 image, Nemotron4 340B and
Grok-1 on 24.09 run the flash-attn package's FlashAttention-2; the other rows run cuDNN's fused attention,
``StepOptions.attention_kernel``). Not modelled from those files: NCCL_NVLS_ENABLE=0 (no collective of these
layouts would take NVLS: the data-parallel groups hold one GPU a server, tensor-parallel traffic runs on
userbuffers) and the tuned userbuffers SM counts (GPT-3: 24 and 20 SMs for the pipelined reduce-scatters, 2-8 for
the bulk ones, where the model keeps TE's defaults).
When the layers do not fill p x v chunks evenly but layers + 2 does (405B on p 8 v 8),
the embedding and the loss count as layers in the split (the recipe's
``account_for_embedding/loss_in_pipeline_split``). Rows with m >= 4k micro-batches per pipeline (k = 16 rounded up
to a multiple of p) are extrapolated from k and 2k, as ``simulator.validation.sc21``.

What is compared: the step time, error = predicted / measured - 1; and MFU in NVIDIA's accounting,
predicted as measured MFU x measured / predicted step time (same FLOPs, the simulator's time; the
simulator's own MFU, Megatron-LM's count with causal attention at half its scores, is printed beside it).
Three numbers are fitted on these tables, one per GPU and precision, each by ``simulator.validation.dgxc_fit``
with leave-one-model-out errors (``simulator.compute.gpu``): the H100's FP8 GEMM efficiency
(``H100_DGXC_FP8_GEMM_EFFICIENCY``) and the GB200's BF16 and FP8 ones (``GB200_DGXC_BF16_GEMM_EFFICIENCY``,
``GB200_DGXC_FP8_GEMM_EFFICIENCY``, on the 128-GPU GB200 NVL72 rows); H100 BF16 keeps its measured value (the
script reports what fitting it would give).

Run ``python -m simulator.validation.dgxc [--models "Llama 3.1 8B"] [--precision FP8] [--systems "GB200 NVL72"]
[--max-gpus N] [--proxy] [--smallest]``; the 8-GPU rows take seconds, the 405B rows minutes each.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources

from topologies.checks import positive_finite, reject
from topologies.presets import SYSTEMS, build_system
from topologies.topology import Topology
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.presets import MODELS

from ..compute import gpu as cmp
from ..placement import Placement
from ..studies.training import StepOptions, simulate_step
from .sc21 import steady_microbatches

__all__ = (
    "DGXC_TABLES",
    "DGXC_MODELS",
    "DGXC_MOE_MODELS",
    "DGXC_DENSE_MODELS",
    "DGXC_SYSTEMS",
    "DGXC_DTYPES",
    "BF16_GRADIENTS",
    "BF16_GRADIENT_RELEASES",
    "FLASH_ATTENTION_2",
    "dgxc_attention_kernel",
    "WGRAD_DEFERRAL_LIMITS",
    "DgxcCase",
    "dgxc_cases",
    "dgxc_layout",
    "dgxc_system",
    "DGXC_GPUS_PER_DOMAIN",
    "DgxcRow",
    "dgxc_check",
    "dgxc_not_simulated",
    "dgxc_why_not",
    "format_dgxc",
    "main",
)

DGXC_TABLES = (
    "training_dgxc_h100_bf16.csv",
    "training_dgxc_h100_fp8.csv",
    "training_dgxc_gb200_nvl72.csv",
    "training_dgxc_moe.csv",
)
DGXC_MODELS = {
    "Llama 3.1 8B": "llama3-8b",
    "Llama 3.1 70B": "llama3-70b",
    "Llama 3.1 405B": "llama3-405b",
    "GPT3-175B": "gpt3-175b",
    "Nemotron4 15B": "nemotron4-15b",
    "Nemotron4 340B": "nemotron4-340b",
    "Grok-1 314B (MoE)": "grok-1",
    "DeepSeek-V3 671B (MoE)": "deepseek-v3-like",
    "Llama 4 Maverick 400B (MoE)": "llama4-maverick",
}
"""Recipe model name -> ``workloads.presets`` name."""
DGXC_MOE_MODELS = frozenset(name for name, preset in DGXC_MODELS.items() if MODELS[preset].experts)
"""The mixture-of-experts recipes, reported apart from the dense ones (not in their mean, not fitted on)."""
DGXC_DENSE_MODELS = tuple(name for name in DGXC_MODELS if name not in DGXC_MOE_MODELS)
DGXC_SYSTEMS = {
    "DGX-H100 reference arch (8x400G IB per node)": "dgx-h100",
    "GB200 NVL72": "gb200-nvl72",  # one 72-GPU NVLink domain per rack, 72x NDR 400G (``topologies.node``)
}
"""The table's ``system`` -> ``topologies.presets`` system name (None: no preset, the rows are not simulated)."""
DGXC_GPUS_PER_DOMAIN = {"GB200 NVL72": 64}
"""GPUs a job takes in each NVLink domain of a rack-scale system (the others: whole servers). ASSUMPTION, the
READMEs do not print it: GB200 NVL72 clusters schedule jobs in Slurm segments of 16 of a rack's 18 compute trays
(``#SBATCH --segment=16``, 64 GPUs, two trays spare; NVIDIA's GB200 Slurm job examples), so the 128-512-GPU rows
fill 2-8 racks with 64 GPUs each and no tensor, context or data-parallel group straddles two racks."""
DGXC_DTYPES = {"BF16": "bf16", "FP8": "fp8"}
"""The table's ``precision`` -> ``ParallelismSpec.dtype``."""
BF16_GRADIENT_RELEASES = frozenset({"v24.11.1"})
"""Recipe releases whose every configuration reduces gradients in bf16: v24.11.1's NeMo 1.0 files set
``optim.grad_sync_dtype: bf16`` for Llama 3.1 8B/70B/405B, GPT3-175B, Nemotron4 15B/340B and Grok-1 (commit 35a9aec,
see the module docstring)."""
BF16_GRADIENTS = frozenset({"GPT3-175B", "Nemotron4 340B", "Grok-1 314B (MoE)"})
"""Recipes that reduce gradients in bf16; the others fp32, but in FP8 (see the module docstring). GPT3-175B: NeMo
gpt3_175b.py pretrain_performance_optimizations, ``recipe.trainer.plugins.grad_reduce_in_fp32 = False``.
Nemotron4 340B: the same line in NeMo nemotron4_340b.py (v25.05.05) and, in v24.11.1 (NeMo 24.09, the
recipe's nemotron4-340b-synth.yaml), ``optim.grad_sync_dtype: bf16`` of its distributed_fused_adam. Grok-1:
``optim.grad_sync_dtype: bf16`` in the recipe's grok1_314b.yaml (v24.11.1; ASSUMED for v25.05.05)."""

FLASH_ATTENTION_2 = frozenset(
    {("v24.11.1", "GPT3-175B"), ("v24.11.1", "Nemotron4 340B"), ("v24.11.1", "Grok-1 314B (MoE)")}
)
"""(release, recipe) pairs that ran the flash-attn package's FlashAttention-2 (``attention_kernel="fa2"``): at commit
35a9aec nemo_megatron/launch.sh (GPT3-175B), nemotron/configure.sh's 340b branch and grok1/configure.sh export
NVTE_FUSED_ATTN=0, which leaves Transformer Engine the flash-attn backend. The others run cuDNN's fused attention,
the compute model's default on Hopper: llama3.1/configure.sh and the nemotron 15b branch export NVTE_FUSED_ATTN=1
(v24.11.1), llama3.1/llama31_utils.py sets it (v25.04.01), and the later NeMo 2.0 scripts leave Transformer Engine
its choice, cuDNN on Hopper."""

WGRAD_DEFERRAL_LIMITS = {"Llama 3.1 70B": 22, "Llama 3.1 405B": 50, "Nemotron4 340B": 22}
"""Recipes whose performance settings defer the output layer's weight gradient to the pipeline flush
(``ParallelismSpec.defer_embedding_wgrad_compute``) and their ``wgrad_deferral_limit``: NeMo's
MegatronCommOverlapCallback(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=...) in llama3_70b.py
pretrain_recipe_performance (22), llama31_405b.py and nemotron4_340b.py (22) pretrain_performance_optimizations, and
the same keys in v24.11.1's llama3.1_70b.yaml (22), llama3.1_405b.yaml (50) and nemotron4-340b-synth.yaml (22).
GPT3-175B's only release here, v24.11.1, does not defer (gpt3_175b_hydra.yaml has no such key; NeMo 2.0's
gpt3_175b.py, which sets 50, came later). Applied when p > 1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DgxcCase:
    """One measured layout: the recipe's parallelism and its step time and MFU."""

    source: str
    model: str
    precision: str
    system: str
    layers: int
    gpus: int
    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    etp: int | None  # ETP=n in the row's notes; None: Megatron-Core's default, t
    vp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    proxy: bool
    layout_known: bool  # False where the README prints no layout for the row (its table's "config unknown")
    measured_step_s: float
    measured_mfu: float

    @property
    def version(self) -> str:
        """The recipe release ('v24.11.1', ...), the last word of ``source``."""
        return self.source.split()[-1]

    @property
    def moe(self) -> bool:
        """A mixture-of-experts recipe (``DGXC_MOE_MODELS``)."""
        return self.model in DGXC_MOE_MODELS

    @property
    def dtype(self) -> str:
        """The ``ParallelismSpec.dtype`` of the row's precision."""
        return DGXC_DTYPES[self.precision]

    @property
    def system_preset(self) -> str | None:
        """The ``topologies.presets`` system the row ran on, None when the project has none."""
        return DGXC_SYSTEMS[self.system]


def _int(row: dict[str, str], name: str, default: int = 1) -> int:
    text = row[name].strip()
    return int(text) if text else default


def _etp(notes: str) -> int | None:
    """The expert tensor parallelism a row's notes give as ``ETP=n`` (the recipes' expert_tensor_parallel_size),
    None when they give none."""
    found = re.search(r"\bETP=(\d+)", notes)
    return int(found.group(1)) if found else None


def dgxc_cases() -> tuple[DgxcCase, ...]:
    """The tables' layouts (``DGXC_TABLES`` in order, each in file order), each with its step time and MFU."""
    rows: list[dict[str, str]] = []
    for table in DGXC_TABLES:
        shipped = resources.files("simulator.validation") / "data" / table
        with io.TextIOWrapper(shipped.open("rb"), newline="") as handle:
            rows.extend(csv.DictReader(handle))
    keys = (
        "source",
        "model",
        "precision",
        "system",
        "layers",
        "gpus",
        "global_batch",
        "tp",
        "pp",
        "cp",
        "ep",
        "vp",
        "seq_len",
    )
    grouped: dict[tuple[str, ...], dict[str, dict[str, str]]] = {}
    for row in rows:
        grouped.setdefault(tuple(row[k] for k in keys), {})[row["metric_name"]] = row
    out = []
    for metrics in grouped.values():
        if "step_time_s" not in metrics or "mfu" not in metrics:
            continue
        row = metrics["step_time_s"]
        out.append(
            DgxcCase(
                source=row["source"],
                model=row["model"],
                precision=row["precision"],
                system=row["system"],
                layers=_int(row, "layers"),
                gpus=_int(row, "gpus"),
                tp=_int(row, "tp"),
                pp=_int(row, "pp"),
                cp=_int(row, "cp"),
                # Megatron's data-parallel size (the MoE tables print it without the expert-parallel ranks)
                dp=_int(row, "gpus") // (_int(row, "tp") * _int(row, "pp") * _int(row, "cp")),
                ep=_int(row, "ep"),
                etp=_etp(row["notes"]),
                vp=_int(row, "vp"),
                micro_batch=_int(row, "micro_batch"),
                global_batch=_int(row, "global_batch"),
                seq_len=_int(row, "seq_len"),
                proxy=row["uncertain"].strip() == "proxy",
                layout_known=row["uncertain"].strip() != "config unknown",
                measured_step_s=float(row["metric_value"]),
                measured_mfu=float(metrics["mfu"]["metric_value"].rstrip("%")) / 100,
            )
        )
    return tuple(out)


def dgxc_system(case: DgxcCase) -> tuple[str | Topology, Placement | None]:
    """The system to simulate ``case`` on and its placement: the preset name and None (ranks fill whole servers)
    for servers the recipes fill, else (``DGXC_GPUS_PER_DOMAIN``) that many racks, leaf-spine while it holds
    them else fat-tree, with ranks in blocks of the domain's GPUs used."""
    name = case.system_preset
    if name is None:
        raise reject(
            "system", case.system, f"a system with a preset: {', '.join(k for k, v in DGXC_SYSTEMS.items() if v)}"
        )
    used = DGXC_GPUS_PER_DOMAIN.get(case.system)
    if used is None:
        return name, None
    nodes = math.ceil(case.gpus / used)
    wiring = "leaf-spine" if nodes <= SYSTEMS[name].max_nodes_for("leaf-spine") else "fat-tree"
    topology = build_system(name, nodes=nodes, topology=wiring)
    return topology, Placement.block(topology, nranks=case.gpus, gpus_per_node=min(used, case.gpus))


def dgxc_attention_kernel(case: DgxcCase) -> str | None:
    """The attention kernel ``case`` ran: "fa2" for ``FLASH_ATTENTION_2``'s recipes, else None (the GPU's, cuDNN on
    Hopper)."""
    return "fa2" if (case.version, case.model) in FLASH_ATTENTION_2 else None


def dgxc_layout(case: DgxcCase) -> tuple[ModelSpec, ParallelismSpec]:
    """The preset model (with the row's layers) and the recipe's layout (see the module docstring)."""
    if not isinstance(case, DgxcCase):
        raise reject("case", case, "a DgxcCase")
    base = MODELS[DGXC_MODELS[case.model]]
    model = base if case.layers == base.layers else dataclasses.replace(base, layers=case.layers)
    vp = case.vp if case.pp > 1 else 1  # a virtual pipeline needs a pipeline (one table prints VP with PP 1)
    chunks = case.pp * vp
    account = case.pp > 1 and case.layers % chunks != 0 and (case.layers + 2) % chunks == 0
    interleaved = vp > 1  # ParallelismSpec accepts align_param_gather and overlap_p2p_comm with it only
    defer = case.pp > 1 and case.model in WGRAD_DEFERRAL_LIMITS  # and a wgrad_deferral_limit only with the deferral
    spec = ParallelismSpec(
        tp=case.tp,
        pp=case.pp,
        cp=case.cp,
        ep=case.ep,
        etp=case.etp,
        vp=vp,
        gpus=case.gpus,
        zero=1,
        micro_batch=case.micro_batch,
        global_batch=case.global_batch,
        seq_len=case.seq_len,
        dtype=case.dtype,
        schedule="interleaved" if interleaved else "1f1b",
        sequence_parallel=case.tp > 1,
        overlap_param_gather=True,
        # NeMo's MegatronCommOverlapCallback._get_optimizer_overlap_cfgs: align_param_gather when d > 1, p > 1, vp > 1
        align_param_gather=interleaved and case.gpus > case.tp * case.pp * case.cp,
        defer_embedding_wgrad_compute=defer,
        wgrad_deferral_limit=WGRAD_DEFERRAL_LIMITS[case.model] if defer else 0,
        # MoE rows without it: the step model does not overlap expert layers' TP communication (ParallelismSpec
        # refuses it; grok1_314b.yaml also sets ``ub_tp_comm_overlap: false``)
        tp_comm_overlap=case.tp > 1 and not case.moe,
        overlap_p2p_comm=interleaved,
        grad_reduce_in_bf16=(
            case.version in BF16_GRADIENT_RELEASES or case.model in BF16_GRADIENTS or case.dtype == "fp8"
        ),
        account_for_embedding_in_pipeline_split=account,
        account_for_loss_in_pipeline_split=account,
    )
    return model, spec


@dataclass(frozen=True, slots=True, kw_only=True)
class DgxcRow:
    """A simulated case against its measurement."""

    case: DgxcCase
    predicted_step_s: float
    simulator_mfu: float  # the simulator's own FLOP accounting
    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    wall_s: float  # how long the simulation took

    @property
    def error(self) -> float:
        """Step time, predicted / measured - 1 (positive: the simulator is too slow)."""
        return self.predicted_step_s / self.case.measured_step_s - 1

    @property
    def predicted_mfu(self) -> float:
        """MFU in NVIDIA's accounting: measured MFU x measured / predicted step time."""
        return self.case.measured_mfu * self.case.measured_step_s / self.predicted_step_s


def _selected(
    *,
    models: Iterable[str] | None,
    precisions: Iterable[str] | None,
    max_gpus: int | None,
    proxy: bool,
    smallest: bool,
    systems: Iterable[str] | None = None,
) -> list[DgxcCase]:
    """The cases of ``models``, ``precisions`` and ``systems`` (None: all) on up to ``max_gpus`` GPUs, proxies with
    ``proxy``; fewest GPUs first with ``smallest``, else in table order."""
    wanted = {}
    for name, given, known in (
        ("models", models, DGXC_MODELS),
        ("precisions", precisions, DGXC_DTYPES),
        ("systems", systems, DGXC_SYSTEMS),
    ):
        if given is None:
            continue
        if isinstance(given, str):
            raise reject(name, given, f"an iterable of {', '.join(map(repr, known))} or None")
        wanted[name] = frozenset(given)
        unknown = sorted(wanted[name] - set(known))
        if unknown:
            raise reject(name, unknown[0], f"one of {', '.join(known)}")
    if max_gpus is not None:
        positive_finite("max_gpus", max_gpus)
    cases = sorted(dgxc_cases(), key=lambda c: c.gpus) if smallest else list(dgxc_cases())
    return [
        c
        for c in cases
        if c.model in wanted.get("models", DGXC_MODELS)
        and c.precision in wanted.get("precisions", DGXC_DTYPES)
        and c.system in wanted.get("systems", DGXC_SYSTEMS)
        and (proxy or not c.proxy)
        and (max_gpus is None or c.gpus <= max_gpus)
    ]


def dgxc_why_not(case: DgxcCase) -> str | None:
    """Why ``case`` cannot be simulated (no system preset, no published layout, a layout the parallelism model
    refuses, e.g. experts spread over tensor-parallel ranks), None when it can."""
    if not isinstance(case, DgxcCase):
        raise reject("case", case, "a DgxcCase")
    if case.system_preset is None:
        return f"no {case.system} system preset"
    if not case.layout_known:
        return "its README prints no layout"
    try:
        model, spec = dgxc_layout(case)
        spec.check(model)
    except ValueError as exc:
        return str(exc)
    return None


def dgxc_not_simulated(
    *,
    models: Iterable[str] | None = None,
    precisions: Iterable[str] | None = None,
    max_gpus: int | None = None,
    systems: Iterable[str] | None = None,
) -> tuple[DgxcCase, ...]:
    """The selected cases :func:`dgxc_check` leaves out (:func:`dgxc_why_not` says why)."""
    selected = _selected(
        models=models, precisions=precisions, max_gpus=max_gpus, proxy=False, smallest=False, systems=systems
    )
    return tuple(c for c in selected if dgxc_why_not(c) is not None)


def dgxc_check(
    *,
    models: Iterable[str] | None = None,
    max_gpus: int | None = None,
    proxy: bool = False,
    smallest: bool = False,
    precisions: Iterable[str] | None = None,
    compute_model: cmp.GpuComputeModel | None = None,
    progress: Callable[[DgxcRow], object] | None = None,
    systems: Iterable[str] | None = None,
) -> tuple[DgxcRow, ...]:
    """Simulate the tables' full-model cases (the proxies too with ``proxy``) on their system with their
    precision, those of ``models`` (recipe names, e.g. "Llama 3.1 8B") and ``precisions`` ("BF16", "FP8") and
    up to ``max_gpus`` GPUs; with ``smallest`` only the fewest-GPU layout of each recipe release, model,
    precision and system (the weak-scaling rows above it differ in data parallelism only); ``systems``: the
    table's system names (e.g. "GB200 NVL72", None: all). Cases on a system without a preset are left out
    (:func:`dgxc_not_simulated`). ``compute_model`` replaces the GPU's kernel parameters."""
    out = []
    seen: set[tuple[str, str, str, str, bool]] = set()
    for case in _selected(
        models=models, precisions=precisions, max_gpus=max_gpus, proxy=proxy, smallest=smallest, systems=systems
    ):
        if dgxc_why_not(case) is not None:
            continue
        group = (case.source, case.model, case.precision, case.system, case.proxy)
        if smallest and group in seen:
            continue
        seen.add(group)
        model, spec = dgxc_layout(case)
        steady = steady_microbatches(spec)
        began = time.perf_counter()
        system, placement = dgxc_system(case)
        result = simulate_step(
            model,
            spec,
            system=system,
            # the step time is the reduced run's; its bound (a second run) is not needed here
            options=StepOptions(
                compute_model=compute_model,
                attention_kernel=dgxc_attention_kernel(case),
                steady_state_microbatches=steady,
                placement=placement,
                bound=False,
            ),
        )
        row = DgxcRow(
            case=case,
            predicted_step_s=result.step_time_s,
            simulator_mfu=result.mfu,
            compute_s=result.compute_s,
            exposed_comm_s=result.exposed_comm_s,
            bubble_s=result.bubble_s,
            wall_s=time.perf_counter() - began,
        )
        out.append(row)
        if progress is not None:
            progress(row)
    return tuple(out)


_HEADER = (
    f"{'recipe':<10}{'model':<16}{'prec':<5}{'GPUs':>6}{'t':>3}{'p':>3}{'c':>3}{'d':>4}{'v':>4}{'e':>4}{'etp':>4}"
    f"{'GBS':>6}"
    f"{'meas s':>9}{'pred s':>9}{'error':>8}{'meas MFU':>10}{'pred MFU':>10}{'sim MFU':>9}{'exposed s':>11}"
)


def _line(r: DgxcRow) -> str:
    c = r.case
    name = c.model.replace("Llama 3.1 ", "Llama-") + (" (proxy)" if c.proxy else "")
    return (
        f"{c.version:<10}{name:<16}{c.precision:<5}"
        f"{c.gpus:>6}{c.tp:>3}{c.pp:>3}{c.cp:>3}{c.dp:>4}{c.vp:>4}{c.ep:>4}{c.tp if c.etp is None else c.etp:>4}"
        f"{c.global_batch:>6}"
        f"{c.measured_step_s:>9.2f}{r.predicted_step_s:>9.2f}{r.error:>+8.1%}{c.measured_mfu:>10.1%}"
        f"{r.predicted_mfu:>10.1%}{r.simulator_mfu:>9.1%}{r.exposed_comm_s:>11.2f}"
    )


def format_dgxc(rows: Iterable[DgxcRow], *, not_simulated: Iterable[DgxcCase] = ()) -> str:
    """A text table of :func:`dgxc_check` with the mean absolute step-time error, overall and per model and
    precision, and a line naming the ``not_simulated`` cases (:func:`dgxc_not_simulated`) when there are any."""
    rows = list(rows)
    lines = [_HEADER] + [_line(r) for r in rows]
    if rows:
        lines.append(f"mean |error| {math.fsum(abs(r.error) for r in rows) / len(rows):.1%} over {len(rows)} rows")
        for name, precision in dict.fromkeys((r.case.model, r.case.precision) for r in rows):
            errs = [r.error for r in rows if (r.case.model, r.case.precision) == (name, precision)]
            lines.append(
                f"  {name} {precision}: mean |error| {math.fsum(map(abs, errs)) / len(errs):.1%}, "
                f"from {min(errs):+.1%} to {max(errs):+.1%}"
            )
    lines.extend(_not_simulated_lines(not_simulated))
    return "\n".join(lines) + "\n"


def _not_simulated_lines(cases: Iterable[DgxcCase]) -> list[str]:
    by_reason: dict[tuple[str, str], list[DgxcCase]] = {}
    for c in cases:
        by_reason.setdefault((c.model, str(dgxc_why_not(c))), []).append(c)
    return [
        f"not simulated: {len(group)} {model} layout{'s' if len(group) > 1 else ''} "
        f"({', '.join(dict.fromkeys(f'{c.system_preset} {c.precision} {c.gpus}' for c in group))} GPUs): {reason}"
        for (model, reason), group in by_reason.items()
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.validation.dgxc",
        description="DGX Cloud recipes (H100 and GB200 NVL72, BF16 and FP8): predicted against measured step time "
        "and MFU",
    )
    parser.add_argument("--models", help="comma-separated recipe model names (default all)")
    parser.add_argument("--precision", help="comma-separated precisions, BF16 or FP8 (default both)")
    parser.add_argument("--max-gpus", type=int, help="skip layouts on more GPUs")
    parser.add_argument(
        "--systems", help="comma-separated systems as the table names them, e.g. 'GB200 NVL72' (default all)"
    )
    parser.add_argument("--proxy", action="store_true", help="also the reduced-layer 405B proxies")
    parser.add_argument(
        "--smallest", action="store_true", help="only the fewest-GPU layout per recipe, model and precision"
    )
    args = parser.parse_args(argv)
    models = None if args.models is None else tuple(m.strip() for m in args.models.split(","))
    precisions = None if args.precision is None else tuple(p.strip() for p in args.precision.split(","))
    systems = None if args.systems is None else tuple(p.strip() for p in args.systems.split(","))
    try:
        left_out = dgxc_not_simulated(models=models, precisions=precisions, max_gpus=args.max_gpus, systems=systems)
        print(_HEADER, flush=True)
        rows = dgxc_check(
            models=models,
            precisions=precisions,
            max_gpus=args.max_gpus,
            proxy=args.proxy,
            smallest=args.smallest,
            systems=systems,
            progress=lambda r: print(_line(r), flush=True),
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(format_dgxc(rows, not_simulated=left_out).split("\n", 1 + len(rows))[-1], end="")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
