"""NVIDIA DGX Cloud benchmarking recipes on H100 (BF16): predicted against measured step time and MFU.

The table
---------
``data/training_dgxc_h100_bf16.csv`` holds the H100 BF16 rows of the DGX Cloud recipe tables that
``simulate_step`` can lay out (Llama 3.1 8B, 70B, 405B; GPT3-175B), copied with their ``source`` and
``source_ref`` columns (NVIDIA/dgxc-benchmarking READMEs, recipes v24.11.1, v25.04.01, v25.05.05): per
layout the step time, the tokens/s and NVIDIA's MFU (recipe model FLOPs over 989 TFLOP/s). Nemotron4,
Grok-1, DeepSeek-V3, Llama 4 and the JAX recipes are left out (architectures or layouts the presets do not
have). Rows marked ``proxy`` ran the 405B with fewer layers; they are simulated with those layers and
reported apart (``--proxy``), since their step mixes first/last-stage work differently.

How a row is simulated
----------------------
The recipe's layout (t, p, c, d, v, micro-batch 1, global batch, sequence) on ``dgx-h100`` servers
(8 NDR NICs each, a rail-optimised leaf-spine, as the recipes' "DGX-H100 reference arch (8x400G IB per
node)"), BF16, flash attention, no recomputation, interleaved 1F1B when v > 1, sequence parallelism when
t > 1, with the communication settings of NeMo's recipes, not Megatron-Core's defaults (``dgxc_layout``):
the distributed optimizer (ZeRO 1) with overlapped gradient reduce-scatter and parameter all-gather
(NeMo's llama3_70b / gpt3_175b trainer: DistributedDataParallelConfig(overlap_grad_reduce=True,
overlap_param_gather=True), distributed_fused_adam), TP communication overlap when t > 1 (the performance
recipes' MegatronCommOverlapCallback(tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_bf16_h100_*);
NVIDIA/dgxc-benchmarking llama3.1/pretrain_llama31.py sets it for 70B and 405B; modelled with Transformer
Engine's default overlap methods, not the recipes' tuned SM counts), non-blocking stage-to-stage transfers
with the interleaved schedule (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py sets
overlap_p2p_comm=True when vp > 1, as Megatron-LM's training script does), and gradients reduced in fp32 for
Llama (DDP grad_reduce_in_fp32=True) but in bf16 for GPT3-175B (its pretrain_performance_optimizations set
trainer.plugins.grad_reduce_in_fp32 = False). ASSUMPTION: the v24.11.1 recipes (NeMo 24.09) ran the same
settings as the NeMo 2.0 recipe files read. When the layers do not fill p x v chunks evenly
but layers + 2 does (405B on p 8 v 8), the embedding and the loss count as layers in the split (the
recipe's ``account_for_embedding/loss_in_pipeline_split``). Rows with m >= 4k micro-batches per pipeline
(k = 16 rounded up to a multiple of p) are extrapolated from k and 2k, as ``simulator.validation.sc21``.

What is compared: the step time, error = predicted / measured - 1; and MFU in NVIDIA's accounting,
predicted as measured MFU x measured / predicted step time (same FLOPs, the simulator's time; the
simulator's own MFU counts FLOPs its own way and is printed beside it). Nothing is fitted on this table.

Run ``python -m simulator.validation.dgxc [--models "Llama 3.1 8B"] [--max-gpus N] [--proxy]``; the 8-GPU
rows take seconds, the 405B rows minutes each.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources

from topologies.checks import positive_finite, reject
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.presets import MODELS

from ..compute import gpu as cmp
from ..studies.training import StepOptions, simulate_step
from .sc21 import steady_microbatches

__all__ = (
    "DGXC_TABLE",
    "DGXC_MODELS",
    "BF16_GRADIENTS",
    "DgxcCase",
    "dgxc_cases",
    "dgxc_layout",
    "DgxcRow",
    "dgxc_check",
    "format_dgxc",
    "main",
)

DGXC_TABLE = "training_dgxc_h100_bf16.csv"
DGXC_MODELS = {
    "Llama 3.1 8B": "llama3-8b",
    "Llama 3.1 70B": "llama3-70b",
    "Llama 3.1 405B": "llama3-405b",
    "GPT3-175B": "gpt3-175b",
}
"""Recipe model name -> ``workloads.presets`` name."""
BF16_GRADIENTS = frozenset({"GPT3-175B"})
"""Recipes that reduce gradients in bf16 (NeMo gpt3_175b.py pretrain_performance_optimizations:
``recipe.trainer.plugins.grad_reduce_in_fp32 = False``); the Llama recipes keep fp32 (see the module docstring)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DgxcCase:
    """One measured layout: the recipe's parallelism and its step time and MFU."""

    source: str
    model: str
    layers: int
    gpus: int
    tp: int
    pp: int
    cp: int
    dp: int
    vp: int
    micro_batch: int
    global_batch: int
    seq_len: int
    proxy: bool
    measured_step_s: float
    measured_mfu: float

    @property
    def version(self) -> str:
        """The recipe release ('v24.11.1', ...), the last word of ``source``."""
        return self.source.split()[-1]


def _int(row: dict[str, str], name: str, default: int = 1) -> int:
    text = row[name].strip()
    return int(text) if text else default


def dgxc_cases() -> tuple[DgxcCase, ...]:
    """The table's layouts, in file order, each with its step time and MFU."""
    shipped = resources.files("simulator.validation") / "data" / DGXC_TABLE
    with io.TextIOWrapper(shipped.open("rb"), newline="") as handle:
        rows = list(csv.DictReader(handle))
    keys = ("source", "model", "layers", "gpus", "global_batch", "tp", "pp", "cp", "vp", "seq_len")
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
                layers=_int(row, "layers"),
                gpus=_int(row, "gpus"),
                tp=_int(row, "tp"),
                pp=_int(row, "pp"),
                cp=_int(row, "cp"),
                dp=_int(row, "dp"),
                vp=_int(row, "vp"),
                micro_batch=_int(row, "micro_batch"),
                global_batch=_int(row, "global_batch"),
                seq_len=_int(row, "seq_len"),
                proxy=row["uncertain"].strip() == "proxy",
                measured_step_s=float(row["metric_value"]),
                measured_mfu=float(metrics["mfu"]["metric_value"].rstrip("%")) / 100,
            )
        )
    return tuple(out)


def dgxc_layout(case: DgxcCase) -> tuple[ModelSpec, ParallelismSpec]:
    """The preset model (with the row's layers) and the recipe's layout (see the module docstring)."""
    if not isinstance(case, DgxcCase):
        raise reject("case", case, "a DgxcCase")
    base = MODELS[DGXC_MODELS[case.model]]
    model = base if case.layers == base.layers else dataclasses.replace(base, layers=case.layers)
    chunks = case.pp * case.vp
    account = case.pp > 1 and case.layers % chunks != 0 and (case.layers + 2) % chunks == 0
    spec = ParallelismSpec(
        tp=case.tp,
        pp=case.pp,
        cp=case.cp,
        vp=case.vp,
        gpus=case.gpus,
        zero=1,
        micro_batch=case.micro_batch,
        global_batch=case.global_batch,
        seq_len=case.seq_len,
        schedule="interleaved" if case.vp > 1 else "1f1b",
        sequence_parallel=case.tp > 1,
        overlap_param_gather=True,
        tp_comm_overlap=case.tp > 1,
        overlap_p2p_comm=case.vp > 1,
        grad_reduce_in_bf16=case.model in BF16_GRADIENTS,
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


def dgxc_check(
    *,
    models: Iterable[str] | None = None,
    max_gpus: int | None = None,
    proxy: bool = False,
    smallest: bool = False,
    compute_model: cmp.GpuComputeModel | None = None,
    progress: Callable[[DgxcRow], object] | None = None,
) -> tuple[DgxcRow, ...]:
    """Simulate the table's full-model cases (the proxies too with ``proxy``), those of ``models`` (recipe
    names, e.g. "Llama 3.1 8B") and up to ``max_gpus`` GPUs; with ``smallest`` only the fewest-GPU layout
    of each recipe release and model (the weak-scaling rows above it differ in data parallelism only).
    ``compute_model`` replaces the H100's kernel parameters."""
    wanted = None
    if models is not None:
        if isinstance(models, str):
            raise reject("models", models, "an iterable of recipe model names or None")
        wanted = frozenset(models)
        unknown = sorted(wanted - set(DGXC_MODELS))
        if unknown:
            raise reject("models", unknown[0], f"one of {', '.join(DGXC_MODELS)}")
    if max_gpus is not None:
        positive_finite("max_gpus", max_gpus)
    out = []
    seen: set[tuple[str, str, bool]] = set()
    for case in sorted(dgxc_cases(), key=lambda c: c.gpus) if smallest else dgxc_cases():
        if smallest and (case.source, case.model, case.proxy) in seen:
            continue
        if (wanted is not None and case.model not in wanted) or (case.proxy and not proxy):
            continue
        if max_gpus is not None and case.gpus > max_gpus:
            continue
        seen.add((case.source, case.model, case.proxy))
        model, spec = dgxc_layout(case)
        steady = steady_microbatches(spec)
        began = time.perf_counter()
        result = simulate_step(
            model,
            spec,
            system="dgx-h100",
            options=StepOptions(compute_model=compute_model, steady_state_microbatches=steady),
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
    f"{'recipe':<10}{'model':<16}{'GPUs':>6}{'t':>3}{'p':>3}{'c':>3}{'d':>4}{'v':>4}{'GBS':>6}"
    f"{'meas s':>9}{'pred s':>9}{'error':>8}{'meas MFU':>10}{'pred MFU':>10}{'sim MFU':>9}{'exposed s':>11}"
)


def _line(r: DgxcRow) -> str:
    c = r.case
    name = c.model.replace("Llama 3.1 ", "Llama-") + (" (proxy)" if c.proxy else "")
    return (
        f"{c.version:<10}{name:<16}{c.gpus:>6}{c.tp:>3}{c.pp:>3}{c.cp:>3}{c.dp:>4}{c.vp:>4}{c.global_batch:>6}"
        f"{c.measured_step_s:>9.2f}{r.predicted_step_s:>9.2f}{r.error:>+8.1%}{c.measured_mfu:>10.1%}"
        f"{r.predicted_mfu:>10.1%}{r.simulator_mfu:>9.1%}{r.exposed_comm_s:>11.2f}"
    )


def format_dgxc(rows: Iterable[DgxcRow]) -> str:
    """A text table of :func:`dgxc_check` with the mean absolute step-time error, overall and per model."""
    rows = list(rows)
    lines = [_HEADER] + [_line(r) for r in rows]
    if rows:
        lines.append(f"mean |error| {math.fsum(abs(r.error) for r in rows) / len(rows):.1%} over {len(rows)} rows")
        for name in dict.fromkeys(r.case.model for r in rows):
            errs = [r.error for r in rows if r.case.model == name]
            lines.append(
                f"  {name}: mean |error| {math.fsum(map(abs, errs)) / len(errs):.1%}, "
                f"from {min(errs):+.1%} to {max(errs):+.1%}"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.validation.dgxc",
        description="DGX Cloud H100 BF16 recipes: predicted against measured step time and MFU",
    )
    parser.add_argument("--models", help="comma-separated recipe model names (default all)")
    parser.add_argument("--max-gpus", type=int, help="skip layouts on more GPUs")
    parser.add_argument("--proxy", action="store_true", help="also the reduced-layer 405B proxies")
    parser.add_argument("--smallest", action="store_true", help="only the fewest-GPU layout per recipe and model")
    args = parser.parse_args(argv)
    models = None if args.models is None else tuple(m.strip() for m in args.models.split(","))
    try:
        print(_HEADER, flush=True)
        rows = dgxc_check(
            models=models,
            max_gpus=args.max_gpus,
            proxy=args.proxy,
            smallest=args.smallest,
            progress=lambda r: print(_line(r), flush=True),
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(format_dgxc(rows).split("\n", 1 + len(rows))[-1], end="")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
