"""Calibrating the A100 compute model once on Megatron SC21 Table 1: the GEMM efficiency of 2021 fp16 training.

What is fitted, and why one number
----------------------------------
One physical parameter of ``compute.COMPUTE_MODELS["a100_sxm4_80gb"]``: ``gemm_efficiency_bf16`` (eff_max,
the best-shape tensor-core GEMM throughput over the 312 TFLOP/s datasheet peak; fp16 and bf16 run at the
same rate). The sourced value, 271.2/312 = 0.869 (Bekman's MAMF table, torch 2.6, 2024), is what a
short best-shape benchmark reaches today; Megatron-LM in 2021 reached less (plausible causes, not
separated by the data: cuBLAS of CUDA 11, real rather than best-case shapes' epilogues, sustained clocks
at the 400 W limit over hour-long runs), and with 0.869 every Table 1 row over-predicts by 13-23 %.
Everything else stays sourced: tiles and waves, the STREAM-like memory efficiency, no flash attention,
Megatron's fused kernels (``simulator.compute``).

The prediction of row r as a function of g = eff_max::

    T_r(g) = I_r(g) + N_r            predicted TFLOP/s per GPU = F_r / (GPUs_r T_r(g))

* I_r(g): the compute-only iteration (``compute.sc21_compute_only_check``: m stage times with full
  recomputation + the (p - 1)/v pipeline bubble + Adam; no communication), milliseconds to evaluate;
* N_r = S_r - I_r(0.869): what the full step simulation adds to it, S_r being ``sc21_check``'s step time
  with ``compute.A100_MAMF_2024`` (``SC21_MAMF_STEP_S``, measured once with ``python -m simulator.training
  --compute-model mamf-2024``, 15 min for the table). N_r is mostly exposed communication: Megatron's
  2021 layouts (tensor all-reduces on the critical path, gradients all-reduced after the pipeline) do not
  overlap communication with compute, so N_r does not depend on g to first order; checked after the fit:
  the full simulation with g = 0.70 has the same exposed communication, to the printed 1 ms, on all ten rows;
* F_r: SC21 eq. 3, ``ModelSpec.step_flops(recompute="full")``.

Objective: mean over the 10 rows of |predicted / measured - 1| (the acceptance metric), minimised by a
golden-section search over g in [0.5, 1] (each term is V-shaped in g; on a 0.005 grid the sum has a
single minimum). Result: optimum
g = 0.697 (mean |error| 2.12 %), shipped as **g = 0.70** (``compute.A100_SC21_GEMM_EFFICIENCY``; two
digits, as far as the hold-out below agrees; 218 TFLOP/s on the best shape, 80.5 % of the 2024 figure):
mean |error| 2.17 % on the proxy, rows +7.2, +0.7, +0.3, -0.0, -2.3, +5.6, -1.3, +0.5, +0.3, -3.5 %
(GPT-1.7B and GPT-76.1B the outliers). Hold-out: fitting rows 1, 3, 5, 7, 9 (Table 1 order) gives
g = 0.697 and 2.01 % on rows 2, 4, 6, 8, 10; fitting the even rows gives 0.695 and 2.35 % on the odd
ones. The full step simulation at g = 0.70 (``python -m simulator.training``) agrees with the proxy to
0.2 points on every row, mean |error| 2.2 % both (table in simulator.training's module docstring).

Rejected alternatives (measured with the same proxy on a grid of 0.005 in eff_max and 0.02 in memory
efficiency): adding the memory efficiency as a second fitted parameter lowers the in-sample error to
2.0 % but the hold-out error rises to 3.0 % and the fitted memory efficiency swings from 0.65 to 0.81
between halves: Table 1 cannot tell it apart. A per-kernel launch gap is physical but unidentifiable
here: the mean kernel of these layouts runs 0.5-2.5 ms, so a 5 us gap moves the step < 1 %.

What this ignores: the rest of the spread is per-row (GPT-1.7B's head dimension 96 and s/h close to 1,
GPT-76.1B's v = 3 pipeline with b = 2) and no single GPU parameter removes it; data loading and logging
are inside the measured numbers and so inside the fitted g.

Worked number: GPT-1.7B (32 GPUs, t = p = 1, b = 16, one micro-batch per step): I = 3.259 s at g = 0.70
(2.853 s at 0.869), N = 2.886 - 2.853 = 0.033 s (the gradient all-reduce), T = 3.292 s, predicted
1.5467e16 / (32 x 3.292) = 146.8 TFLOP/s against 137 measured (+7.2 %).
"""

from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass
from typing import Iterable, Mapping

from topologies.devices import A100_SXM4_80GB

from . import compute as cmp
from .calibration import golden_section_min

__all__ = ("SC21_MAMF_STEP_S", "Sc21Prediction", "Sc21Fit", "sc21_network_added_s", "sc21_predict",
           "mean_abs_error", "fit_gemm_efficiency", "sc21_holdout", "format_fit")

SC21_MAMF_STEP_S: Mapping[str, float] = types.MappingProxyType({
    # sc21_check step_time_s with compute.A100_MAMF_2024 (flow model, tasks per layer, symmetric replicas,
    # tensor-rank-0 pipeline transfers, rows with m >= 4k extrapolated from k and 2k micro-batches)
    "GPT-1.7B": 2.886, "GPT-3.6B": 3.228, "GPT-7.5B": 3.230, "GPT-18.4B": 8.247, "GPT-39.1B": 12.776,
    "GPT-76.1B": 13.035, "GPT-145.6B": 21.362, "GPT-310.1B": 31.400, "GPT-529.6B": 44.982, "GPT-1008.0B": 87.813,
})
"""Full-simulation step seconds of every Table 1 row with the 2024 MAMF GEMM efficiency (measured once)."""

FIT_RANGE = (0.5, 1.0)        # eff_max searched; 0.5 is below any published dense-GEMM figure for A100
FIT_TOLERANCE = 1e-4          # bracket width at which the golden-section search stops


@dataclass(frozen=True, slots=True, kw_only=True)
class Sc21Prediction:
    """One Table 1 row: compute-only iteration at the candidate model plus what the network adds."""

    model: str
    gpus: int
    measured_tflops: float
    compute_only_iteration_s: float
    network_added_s: float
    predicted_tflops: float

    @property
    def step_time_s(self) -> float:
        return self.compute_only_iteration_s + self.network_added_s

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_tflops / self.measured_tflops - 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Sc21Fit:
    """The fitted GEMM efficiency, the rows it was fitted on and every row's prediction with it."""

    gemm_efficiency: float
    fit_models: tuple[str, ...]
    predictions: tuple[Sc21Prediction, ...]

    @property
    def fit_error(self) -> float:
        """Mean |error| over the rows used for the fit."""
        return mean_abs_error(p for p in self.predictions if p.model in self.fit_models)

    @property
    def holdout_error(self) -> float | None:
        """Mean |error| over the rows not used for the fit (None if there are none)."""
        rest = [p for p in self.predictions if p.model not in self.fit_models]
        return mean_abs_error(rest) if rest else None


def sc21_network_added_s(step_s: Mapping[str, float] = SC21_MAMF_STEP_S, *,
                         compute_model: cmp.GpuComputeModel = cmp.A100_MAMF_2024) -> dict[str, float]:
    """N_r = simulated step - compute-only iteration, both with ``compute_model``, for every row in ``step_s``."""
    names = cmp.sc21_models()
    for name, value in step_s.items():
        if name not in names:
            raise ValueError(f"step_s: {name!r} is not a Table 1 row; expected one of {', '.join(names)}")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"step_s[{name!r}]: {value!r} is not allowed; expected a finite number of seconds > 0")
    co = {c.model: c for c in cmp.sc21_compute_only_check(gpu=A100_SXM4_80GB, compute_model=compute_model)}
    return {name: float(value) - co[name].iteration_time_s for name, value in step_s.items()}


def sc21_predict(compute_model: cmp.GpuComputeModel | None = None, *,
                 network_added_s: Mapping[str, float] | None = None) -> tuple[Sc21Prediction, ...]:
    """T_r = I_r + N_r for every row that has an N_r (default: all ten, from ``SC21_MAMF_STEP_S``)."""
    added = sc21_network_added_s() if network_added_s is None else network_added_s
    out = []
    for c in cmp.sc21_compute_only_check(gpu=A100_SXM4_80GB, compute_model=compute_model):
        if c.model not in added:
            continue
        step_s = c.iteration_time_s + added[c.model]
        out.append(Sc21Prediction(model=c.model, gpus=c.gpus, measured_tflops=c.measured_tflops,
                                  compute_only_iteration_s=c.iteration_time_s, network_added_s=added[c.model],
                                  predicted_tflops=c.flops / (c.gpus * step_s) / 1e12))
    return tuple(out)


def mean_abs_error(predictions: Iterable[Sc21Prediction]) -> float:
    """Mean of |predicted / measured - 1|."""
    errors = [abs(p.error) for p in predictions]
    if not errors:
        raise ValueError("predictions: empty is not allowed; expected at least one row")
    return math.fsum(errors) / len(errors)


def fit_gemm_efficiency(*, models: Iterable[str] | None = None, network_added_s: Mapping[str, float] | None = None,
                        base: cmp.GpuComputeModel = cmp.A100_MAMF_2024) -> Sc21Fit:
    """Golden-section search for the eff_max minimising the mean |error| over ``models`` (default all rows).

    Every other field of the model is ``base``'s; the returned fit is not rounded (the shipped value is
    ``round(fit.gemm_efficiency, 3)``) and predicts every row, fitted or not.
    """
    fit_models = cmp.check_sc21_models(models)
    if not fit_models:
        raise ValueError("models: () is not allowed; expected at least one Table 1 model name or None")
    added = sc21_network_added_s() if network_added_s is None else dict(network_added_s)
    missing = [m for m in fit_models if m not in added]
    if missing:
        raise ValueError(f"network_added_s: has no value for {missing[0]!r}; expected one for every fitted row")

    def at(g: float) -> tuple[Sc21Prediction, ...]:
        return sc21_predict(dataclasses.replace(base, gemm_efficiency_bf16=g), network_added_s=added)

    def objective(g: float) -> float:
        return mean_abs_error(p for p in at(g) if p.model in fit_models)

    g = golden_section_min(objective, *FIT_RANGE, tol=FIT_TOLERANCE)
    return Sc21Fit(gemm_efficiency=g, fit_models=fit_models, predictions=at(g))


def sc21_holdout(*, network_added_s: Mapping[str, float] | None = None) -> tuple[Sc21Fit, Sc21Fit]:
    """Fit on Table 1 rows 1, 3, 5, 7, 9 and, separately, on rows 2, 4, 6, 8, 10; each predicts the others."""
    names = cmp.sc21_models()
    added = sc21_network_added_s() if network_added_s is None else network_added_s
    return (fit_gemm_efficiency(models=names[0::2], network_added_s=added),
            fit_gemm_efficiency(models=names[1::2], network_added_s=added))


def format_fit(fit: Sc21Fit) -> str:
    """A text table of a fit's per-row predictions, fitted rows marked ``*``."""
    peak_tflops = A100_SXM4_80GB.dense_bf16_flop_per_s / 1e12
    lines = [f"gemm_efficiency {fit.gemm_efficiency:.4f} ({fit.gemm_efficiency * peak_tflops:.1f} TFLOP/s on an A100); "
             f"mean |error| {fit.fit_error * 100:.2f} % on the {len(fit.fit_models)} fitted rows"
             + (f", {fit.holdout_error * 100:.2f} % on the others" if fit.holdout_error is not None else ""),
             f"{'model':<12} {'gpus':>5} {'compute s':>9} {'network s':>9} {'meas TF':>8} {'pred TF':>8} {'error':>7}"]
    for p in fit.predictions:
        mark = "*" if p.model in fit.fit_models else " "
        lines.append(f"{p.model:<11}{mark} {p.gpus:>5} {p.compute_only_iteration_s:>9.3f} {p.network_added_s:>9.3f} "
                     f"{p.measured_tflops:>8.0f} {p.predicted_tflops:>8.1f} {p.error * 100:>6.1f}%")
    return "\n".join(lines)


def _main() -> None:
    added = sc21_network_added_s()
    print("fit on all rows:")
    print(format_fit(fit_gemm_efficiency(network_added_s=added)))
    for label, fit in zip(("odd rows", "even rows"), sc21_holdout(network_added_s=added)):
        print(f"\nhold-out, fit on the {label}:")
        print(format_fit(fit))


if __name__ == "__main__":        # python -m simulator.compute_calibration: the fit and the hold-out check
    _main()
