"""One GEMM efficiency per GPU generation and precision, fitted on the DGX Cloud recipes, with leave-one-model-out.

What is fitted
--------------
As the A100's one parameter is fitted on Megatron SC21 (``simulator.validation.sc21``), a GPU generation and a
precision get at most one fitted number: the best-shape GEMM efficiency of that precision
(``GpuComputeModel.gemm_efficiency_bf16`` / ``gemm_efficiency_fp8``), which stands for everything the kernel
model does not resolve (shapes it has no measurement for, kernels it does not cost, host gaps). Every other
parameter keeps its sourced value. The rows are the dense-model DGX Cloud rows simulated on that GPU in that
precision (``simulator.validation.dgxc``), each with its recipe's layout and settings; the MoE recipes are not
fitted on (their errors are reported, ``DGXC_MOE_MODELS``). Fitted and shipped: H100 FP8 (``--precision FP8
--smallest``) and GB200 BF16 and FP8 (``--system gb200-nvl72 --precision BF16|FP8 --max-gpus 128``: the 128-GPU rows,
weak and strong scaling; the 256- and 512-GPU rows, which differ in data parallelism or accumulation only, are
left to check the fit on).

How (two simulations a row, then arithmetic)
---------------------------------------------
GEMMs take a time proportional to 1 / efficiency, and the rest of the step (attention, memory-bound kernels,
exposed communication, bubble) does not depend on it to first order, so a row's step time is
``T(e) = a + b / e``. Each row is simulated at the efficiency in the code ``e0`` and at ``e1 = SPAN x e0``;
``a`` and ``b`` follow, and the fit is the e on a grid of 0.001 that minimises the mean |T(e) / measured - 1|
over the rows (the smaller e on a tie). Worked number: a row measured at 10 s simulated at 9 s with e0 = 0.8 and
at 9.5 s with e1 = 0.72: b / 0.72 - b / 0.8 = 0.5 gives b = 3.6 and a = 4.5; T(e) = 10 needs e = 3.6 / 5.5 =
0.655. Where the exposed communication moves with e (compute hiding more or less of it), T is not exactly
a + b / e: ``--verify`` simulates the rows again at the fitted value and prints both.

Leave one model out: for each model, the efficiency fitted on the other models' rows, and that model's
mean |error| with it (held out) and with the pooled value (in sample).

Run ``python -m simulator.validation.dgxc_fit [--precision BF16] [--max-gpus N] [--smallest] [--verify]``;
each row is simulated twice (the 8-GPU rows in seconds, a 70B row in about a minute).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from topologies.checks import reject
from topologies.presets import SYSTEMS

from ..compute import gpu as cmp
from .dgxc import DGXC_DENSE_MODELS, DGXC_DTYPES, DGXC_SYSTEMS, DgxcRow, dgxc_check

__all__ = ("SPAN", "GRID", "FittedRow", "EfficiencyFit", "fit_rows", "fit_efficiency", "format_fit", "main")

SPAN = 0.9  # the second simulation's efficiency, relative to the first
GRID = tuple(round(0.400 + 0.001 * i, 3) for i in range(601))  # 0.400 ... 1.000


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedRow:
    """A row's step time as a function of the GEMM efficiency: ``a + b / e`` seconds."""

    model: str
    label: str
    measured_s: float
    fixed_s: float  # a: the part that does not scale with the efficiency
    gemm_s: float  # b: the GEMMs' time at efficiency 1

    def predicted_s(self, efficiency: float) -> float:
        return self.fixed_s + self.gemm_s / efficiency

    def error(self, efficiency: float) -> float:
        return self.predicted_s(efficiency) / self.measured_s - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class EfficiencyFit:
    """The rows of one GPU and precision, with their pooled and leave-one-model-out fits (derived)."""

    gpu: str
    system: str
    precision: str
    attribute: str
    current: float
    rows: tuple[FittedRow, ...]

    @property
    def pooled(self) -> float:
        """The efficiency fitted on every row."""
        return _best(self.rows)

    @property
    def held_out(self) -> tuple[tuple[str, float], ...]:
        """(model, efficiency fitted without its rows); NaN with one model, which leaves nothing to fit on."""
        names = list(dict.fromkeys(r.model for r in self.rows))
        return tuple(
            (name, _best([r for r in self.rows if r.model != name]) if len(names) > 1 else math.nan) for name in names
        )

    def mean_error(self, efficiency: float, model: str | None = None) -> float:
        chosen = [r for r in self.rows if model is None or r.model == model]
        return statistics.fmean(abs(r.error(efficiency)) for r in chosen)

    @property
    def leave_one_out_error(self) -> float:
        """Mean |error| over every row, each predicted with the efficiency fitted without its model."""
        fitted = dict(self.held_out)
        return statistics.fmean(abs(r.error(fitted[r.model])) for r in self.rows)


def _best(rows: Sequence[FittedRow]) -> float:
    return min(GRID, key=lambda e: (statistics.fmean(abs(r.error(e)) for r in rows), e))


def _attribute(precision: str) -> str:
    return f"gemm_efficiency_{DGXC_DTYPES[precision]}"


def _gpu_model(system: str) -> cmp.GpuComputeModel:
    if system not in SYSTEMS:
        raise reject("system", system, f"one of {', '.join(SYSTEMS)}")
    return cmp.compute_model_for(SYSTEMS[system].server().gpu)


def _with_efficiency(base: cmp.GpuComputeModel, precision: str, efficiency: float) -> cmp.GpuComputeModel:
    if DGXC_DTYPES[precision] == "fp8":
        return dataclasses.replace(base, gemm_efficiency_fp8=efficiency)
    return dataclasses.replace(base, gemm_efficiency_bf16=efficiency)


def _table_systems(system: str) -> tuple[str, ...]:
    """The DGX Cloud table's names of the rows run on the preset ``system``."""
    return tuple(name for name, preset in DGXC_SYSTEMS.items() if preset == system)


def fit_rows(
    *,
    precision: str,
    system: str = "dgx-h100",
    models: Iterable[str] | None = None,
    max_gpus: int | None = None,
    smallest: bool = False,
    progress: Callable[[DgxcRow], object] | None = None,
) -> tuple[cmp.GpuComputeModel, tuple[FittedRow, ...]]:
    """Simulate the selected DGX Cloud rows of ``precision`` on ``system`` at its GPU's GEMM efficiency and at
    ``SPAN`` x it: the GPU's compute model and every row's ``a + b / e``."""
    if precision not in DGXC_DTYPES:
        raise reject("precision", precision, f"one of {', '.join(DGXC_DTYPES)}")
    base = _gpu_model(system)
    attribute = _attribute(precision)
    e0 = getattr(base, attribute)
    if e0 is None:
        raise reject("precision", precision, f"a precision {base.name} has a GEMM efficiency for")
    e1 = e0 * SPAN
    r0s, r1s = (
        dgxc_check(
            models=DGXC_DENSE_MODELS if models is None else models,
            precisions=(precision,),
            systems=_table_systems(system),
            max_gpus=max_gpus,
            smallest=smallest,
            compute_model=_with_efficiency(base, precision, e),
            progress=progress,
        )
        for e in (e0, e1)
    )
    fitted = []
    for r0, r1 in zip(r0s, r1s, strict=True):
        # T(e0) = a + b / e0 and T(e1) = a + b / e1
        b = (r1.predicted_step_s - r0.predicted_step_s) / (1 / e1 - 1 / e0)
        c = r0.case
        fitted.append(
            FittedRow(
                model=c.model,
                label=f"{c.version} {c.model} {c.gpus} GPUs t{c.tp} p{c.pp} c{c.cp} v{c.vp}",
                measured_s=c.measured_step_s,
                fixed_s=r0.predicted_step_s - b / e0,
                gemm_s=b,
            )
        )
    return base, tuple(fitted)


def fit_efficiency(
    *,
    precision: str,
    system: str = "dgx-h100",
    models: Iterable[str] | None = None,
    max_gpus: int | None = None,
    smallest: bool = False,
    progress: Callable[[DgxcRow], object] | None = None,
) -> EfficiencyFit:
    """The pooled and leave-one-model-out GEMM efficiency of ``precision`` on the selected rows of ``system``."""
    base, rows = fit_rows(
        precision=precision, system=system, models=models, max_gpus=max_gpus, smallest=smallest, progress=progress
    )
    if not rows:
        raise reject("rows", 0, "at least one simulated DGX Cloud row (widen --models / --max-gpus)")
    return EfficiencyFit(
        gpu=base.name,
        system=system,
        precision=precision,
        attribute=_attribute(precision),
        current=getattr(base, _attribute(precision)),
        rows=rows,
    )


def format_fit(fit: EfficiencyFit, verified: Sequence[DgxcRow] = ()) -> str:
    """The fit as text: the value in the code and fitted, per row the errors, per model leave-one-out."""
    lines = [
        f"# {fit.system} ({fit.gpu}) {fit.precision}: {fit.attribute} in the code {fit.current:.4f}, "
        f"fitted {fit.pooled:.3f} "
        f"(mean |error| {fit.mean_error(fit.current) * 100:.1f} % -> {fit.mean_error(fit.pooled) * 100:.1f} % "
        f"on {len(fit.rows)} rows)",
        f"{'row':<58}{'meas s':>9}{'code':>9}{'fitted':>9}" + (f"{'verified':>10}" if verified else ""),
    ]
    for i, r in enumerate(fit.rows):
        line = (
            f"{r.label:<58}{r.measured_s:>9.2f}{r.error(fit.current) * 100:>+8.1f}%{r.error(fit.pooled) * 100:>+8.1f}%"
        )
        if verified:
            line += f"{(verified[i].predicted_step_s / r.measured_s - 1) * 100:>+9.1f}%"
        lines.append(line)
    lines += ["", "# leave one model out", f"{'model':<18}{'fitted without':>15}{'held out':>10}{'in sample':>11}"]
    for name, value in fit.held_out:
        lines.append(
            f"{name:<18}{value:>15.3f}{fit.mean_error(value, name) * 100:>9.1f}%"
            f"{fit.mean_error(fit.pooled, name) * 100:>10.1f}%"
        )
    if len(fit.held_out) > 1:
        lines.append(
            f"{'all rows':<18}{'':>15}{fit.leave_one_out_error * 100:>9.1f}%{fit.mean_error(fit.pooled) * 100:>10.1f}%"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m simulator.validation.dgxc_fit",
        description="fit one GEMM efficiency per GPU and precision on the DGX Cloud rows, leave one model out",
    )
    parser.add_argument("--precision", default="BF16", help="BF16 or FP8 (default BF16)")
    parser.add_argument("--system", default="dgx-h100", help="the system whose rows are fitted (default dgx-h100)")
    parser.add_argument("--models", help="comma-separated recipe model names (default all)")
    parser.add_argument("--max-gpus", type=int, help="skip layouts on more GPUs")
    parser.add_argument("--smallest", action="store_true", help="only the fewest-GPU layout per recipe and model")
    parser.add_argument("--verify", action="store_true", help="simulate the rows again at the fitted value")
    args = parser.parse_args(argv)
    models = None if args.models is None else tuple(m.strip() for m in args.models.split(","))
    try:
        fit = fit_efficiency(
            precision=args.precision,
            system=args.system,
            models=models,
            max_gpus=args.max_gpus,
            smallest=args.smallest,
            progress=lambda r: print(f"# simulated {r.case.model} {r.case.gpus} GPUs ({r.wall_s:.0f} s)", flush=True),
        )
        verified: tuple[DgxcRow, ...] = ()
        if args.verify:
            verified = dgxc_check(
                models=DGXC_DENSE_MODELS if models is None else models,
                precisions=(args.precision,),
                systems=_table_systems(args.system),
                max_gpus=args.max_gpus,
                smallest=args.smallest,
                compute_model=_with_efficiency(_gpu_model(args.system), args.precision, fit.pooled),
            )
    except ValueError as exc:
        parser.error(str(exc))
    print(format_fit(fit, verified), end="")


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
