"""Cross-validation of the constants fitted on the shipped measured tables (``fabricsim validate --cross``).

Each entry of :data:`FITS` is one constant of the collective model whose value was chosen against measured
nccl-tests tables: where it lives, a grid of candidate values, and the rows it is fitted on (its objective:
the median |t_pred / t_meas - 1| over those rows). :func:`cross_validate` replays the tables once per grid
value (the constant set for the run, then restored) and reports

* the value fitted on all tables (least pooled median |error|; the smaller value on a tie) next to the value
  in the code, with its in-sample error;
* leave one table out: for each table with rows in the objective, the value fitted on the other tables and
  that table's error with it (held out) and with the pooled value (in sample);
* whether the constant *moves*: its leave-one-out values spread over more than ``MOVES`` of the pooled value
  (then one table decides it, and the output names it);
* then (:func:`held_out_pool`) every row of every table, in sample and with each table replayed with every
  constant at the value fitted without it: the pooled median |error| per size regime held out.

The rows are chosen at each grid value (the NVLS rows are those the model runs as NVLS there; the tuner's
choice does not see either constant, so the row set is the same across the grid), and the tables listed are
those with rows at the grid's first value. A grid search rather than a solver: each evaluation is a replay
of every table (a few seconds), the objective is a median (piecewise constant), and the grid says at which
resolution the data pins the value.

Fitted elsewhere, with their own checks: the A100 GEMM efficiency (``validation/sc21.py``: Megatron SC21
Table 1, odd and even rows held out in turn). Not cross-validated, said so in the report: the host launch
cost per GPU of nccl-tests ``-g`` (``studies/nccl_tests.HOST_LAUNCH_S_PER_GPU``), an arithmetic difference of
the one pair of A100 tables measured both ways, which has no other table to be checked on.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .collectives import REGIMES, SERIES, Comparison, Series, compare

__all__ = ("FITS", "MOVES", "Fit", "FitReport", "cross_validate", "format_cross", "held_out_pool")

MOVES = 0.5  # leave-one-out values spread over more than half the pooled value: the constant moves


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    """A constant fitted on measured tables: ``module.attribute`` holds it (in model units, ``scale`` x the
    grid's unit), ``rows`` selects the comparisons it is fitted on."""

    name: str
    module: str
    attribute: str
    unit: str
    scale: float  # model value = grid value x scale
    grid: tuple[float, ...]
    rows: Callable[[Comparison], bool]
    rows_text: str

    @property
    def current(self) -> float:
        return getattr(importlib.import_module(self.module), self.attribute) / self.scale

    @contextlib.contextmanager
    def set_to(self, value: float) -> Iterator[None]:
        module = importlib.import_module(self.module)
        kept = getattr(module, self.attribute)
        setattr(module, self.attribute, value * self.scale)
        try:
            yield
        finally:
            setattr(module, self.attribute, kept)


FITS = (
    Fit(
        name="network proxy step cost",
        module="simulator.collectives.nccl_model",
        attribute="PROXY_STEP_US_INTEL",
        unit="us",
        scale=1.0,
        grid=(0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0),
        rows=lambda c: c.nnodes > 1 and c.regime == "mid",
        rows_text="mid sizes (64 KiB - 64 MiB) of multi-node tables",
    ),
    Fit(
        name="ring network step round trip",
        module="simulator.collectives.nccl_model",
        attribute="NET_STEP_US_LL128",
        unit="us",
        scale=1.0,
        grid=(0.0, 1.0, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0),
        rows=lambda c: c.nnodes > 1 and c.regime == "mid",
        rows_text="mid sizes (64 KiB - 64 MiB) of multi-node tables",
    ),
    Fit(
        name="LL point-to-point channel throughput",
        module="simulator.collectives.nccl_model",
        attribute="P2P_LL_CHANNEL_GBPS_BLACKWELL",
        unit="GB/s",
        scale=1.0,
        grid=(3.0, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 8.8),
        rows=lambda c: c.nnodes == 1 and c.protocol == "LL" and c.algorithm in ("p2p", "direct") and c.regime == "mid",
        rows_text="mid sizes of one-server sendrecv and all-to-all rows the model sends with LL",
    ),
    Fit(
        name="P2P read slice (sm80 NVLink, Simple ring)",
        module="simulator.collectives.nccl_model",
        attribute="P2P_READ_SLICE_US",
        unit="us",
        scale=1.0,
        grid=(0.0, 0.5, 1.0, 1.5, 1.8, 2.0, 2.5, 3.0, 4.0),
        rows=lambda c: c.algorithm == "ring" and c.protocol == "Simple" and "A100" in c.gpu,
        rows_text="ring Simple rows on A100 (sm80 NVLink, P2P read)",
    ),
    Fit(
        name="LL channel rate, Ampere on one NVLink server",
        module="simulator.collectives.nccl_model",
        attribute="LL_CHANNEL_GBPS_AMPERE",
        unit="GB/s",
        scale=1.0,
        grid=(5.5, 6.5, 7.5, 8.5, 10.0, 11.0, 12.0, 13.0, 14.0, 16.0),
        rows=lambda c: c.protocol == "LL" and c.nnodes == 1 and c.regime == "mid" and "A100" in c.gpu,
        rows_text="LL rows of the one-server A100 tables, mid sizes (64 KiB - 64 MiB)",
    ),
    Fit(
        name="LL128 channel rate, Ampere on one NVLink server",
        module="simulator.collectives.nccl_model",
        attribute="LL128_CHANNEL_GBPS_AMPERE",
        unit="GB/s",
        scale=1.0,
        grid=(9.0, 10.0, 10.5, 11.0, 11.5, 12.0, 13.0, 15.0, 20.0),
        rows=lambda c: c.protocol == "LL128" and c.nnodes == 1 and "A100" in c.gpu,
        rows_text="LL128 rows of the one-server A100 tables",
    ),
    Fit(
        name="NVLS chunk synchronisation",
        module="simulator.collectives.nvls",
        attribute="NVLS_CHUNK_SYNC_S",
        unit="us",
        scale=1e-6,
        grid=(0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
        rows=lambda c: c.algorithm == "nvls",
        rows_text="rows the model runs as NVLS",
    ),
)

# what is fitted on measured data but not here, and why (printed with the report)
ELSEWHERE = (
    "A100 GEMM efficiency (compute/gpu.py): fitted on Megatron SC21 Table 1 by python -m simulator.validation.sc21, "
    "which holds out the odd and the even rows in turn",
    "nccl-tests -g host launch cost per GPU (studies/nccl_tests.py HOST_LAUNCH_S_PER_GPU, 2.8 us): the difference "
    "of the one pair of A100 tables measured with -g 8 and with 8 processes; no other table can check it",
)


def _median(rows: Sequence[Comparison]) -> float:
    return statistics.median(abs(c.error) for c in rows) if rows else float("nan")


@dataclass(frozen=True, slots=True, kw_only=True)
class FitReport:
    """One constant's cross-validation (see the module docstring); errors are median |t_pred / t_meas - 1|."""

    fit: Fit
    current: float
    pooled: float  # the value fitted on all tables
    errors: dict[float, float]  # grid value -> pooled error over the objective's rows
    rows: int  # rows in the objective
    tables: tuple[str, ...]  # the tables with rows in the objective
    folds: dict[str, tuple[float, float, float]]  # table -> (value without it, its error then, with pooled)

    @property
    def moves(self) -> bool:
        values = [v for v, _, _ in self.folds.values()]
        if len(values) < 2:
            return False
        spread = max(values) - min(values)
        return spread > MOVES * self.pooled if self.pooled else spread > 0

    @property
    def held_out_error(self) -> float:
        """The median over tables of each table's error with the value fitted without it."""
        held = [e for _, e, _ in self.folds.values()]
        return statistics.median(held) if held else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "constant": self.fit.name,
            "where": f"{self.fit.module}.{self.fit.attribute}",
            "unit": self.fit.unit,
            "rows": self.fit.rows_text,
            "n": self.rows,
            "tables": list(self.tables),
            "in_code": self.current,
            "fitted_on_all": self.pooled,
            "in_sample_error": self.errors[self.pooled] if self.tables else None,
            "held_out_error": self.held_out_error if self.folds else None,
            "moves": self.moves,
            "grid": {str(v): e for v, e in self.errors.items()} if self.tables else {},
            "leave_one_table_out": {
                table: {"fitted_without": v, "error_held_out": held, "error_in_sample": pooled}
                for table, (v, held, pooled) in self.folds.items()
            },
        }


def cross_validate(
    fits: Sequence[Fit] = FITS,
    series: Sequence[Series] = SERIES,
    *,
    progress: Callable[[str], None] | None = None,
) -> list[FitReport]:
    """Each of ``fits`` fitted on ``series`` (all shipped tables by default), pooled and leave-one-table-out."""
    reports = []
    for fit in fits:
        runs: dict[float, dict[str, list[Comparison]]] = {}
        for value in fit.grid:
            if progress is not None:
                progress(f"{fit.name}: {value:g} {fit.unit}")
            with fit.set_to(value):
                runs[value] = {s.name: [c for c in compare(s) if fit.rows(c)] for s in series}
        tables = [t for t in runs[fit.grid[0]] if runs[fit.grid[0]][t]]

        def error(value: float, tables: Sequence[str], runs: dict = runs) -> float:
            return _median([c for t in tables for c in runs[value][t]])

        errors = {v: error(v, tables) for v in fit.grid}
        pooled = min(fit.grid, key=lambda v: (errors[v], v))
        folds = {}
        for held in tables:
            others = [t for t in tables if t != held]
            if not others:
                continue
            value = min(fit.grid, key=lambda v: (error(v, others), v))
            folds[held] = (value, error(value, [held]), error(pooled, [held]))
        reports.append(
            FitReport(
                fit=fit,
                current=fit.current,
                pooled=pooled,
                errors=errors,
                rows=sum(len(runs[pooled][t]) for t in tables),
                tables=tuple(tables),
                folds=folds,
            )
        )
    return reports


def held_out_pool(
    reports: Sequence[FitReport], series: Sequence[Series] = SERIES
) -> tuple[dict[str, float], dict[str, float]]:
    """Median |error| per regime (``REGIMES``) over every row of ``series``, in sample (each constant at its value
    in the code) and held out (each table replayed with every constant at the value fitted without that table;
    a table a constant is not fitted on, or the only one, keeps the value in the code)."""
    inside: list[Comparison] = []
    held: list[Comparison] = []
    for s in series:
        rows = compare(s)
        inside += rows
        folds = [(r.fit, r.folds[s.name][0]) for r in reports if s.name in r.folds]
        if not folds:
            held += rows
            continue
        with contextlib.ExitStack() as stack:
            for fit, value in folds:
                stack.enter_context(fit.set_to(value))
            held += compare(s)

    def per_regime(rows: Sequence[Comparison]) -> dict[str, float]:
        return {name: _median([c for c in rows if name == "all" or c.regime == name]) for name, _ in REGIMES}

    return per_regime(inside), per_regime(held)


def format_cross(reports: Sequence[FitReport], pool: tuple[dict[str, float], dict[str, float]] | None = None) -> str:
    """The reports as text: per constant its pooled fit and errors, then one line per held-out table; with
    ``pool`` (:func:`held_out_pool`), the pooled medians over every row in sample and held out."""
    lines = ["# fabricsim validate --cross: constants fitted on the measured tables, fitted again leaving each out"]
    for r in reports:
        f = r.fit
        if not r.tables:
            lines += ["", f"{f.name} ({f.module}.{f.attribute}): no row of these tables is among its {f.rows_text}"]
            continue
        lines += [
            "",
            f"{f.name} ({f.module}.{f.attribute}): {r.current:g} {f.unit} in the code, {r.pooled:g} {f.unit} fitted "
            f"on all tables; fitted on {f.rows_text} ({r.rows} rows, {len(r.tables)} tables)",
            f"  median |error|: {100 * r.errors[r.pooled]:.1f}% in sample"
            + (
                f", {100 * r.held_out_error:.1f}% held out (median over tables of each table's error with the value "
                "fitted without it)"
                if r.folds
                else "; one table only: none to leave out, so it cannot be cross-validated"
            ),
            "  grid: " + ", ".join(f"{v:g} {f.unit} {100 * e:.1f}%" for v, e in r.errors.items()),
            f"  {'table left out':<55}{'fitted without':>16}{'held out':>10}{'in sample':>11}",
        ]
        for table, (value, held, pooled) in r.folds.items():
            lines.append(f"  {table:<55}{value:>13g} {f.unit}{100 * held:>9.1f}%{100 * pooled:>10.1f}%")
        values = [v for v, _, _ in r.folds.values()]
        if r.moves:
            lines.append(
                f"  MOVES: fitted without one table it ranges {min(values):g}-{max(values):g} {f.unit}; the tables "
                "disagree, so its value rests on which are shipped"
            )
        elif values:
            lines.append(f"  stable: {min(values):g}-{max(values):g} {f.unit} over the folds")
    if pool is not None:
        in_sample, held_out = pool
        lines += ["", "every row, each table with every constant at the value fitted without it (median |error|):"]
        for name, label in REGIMES:
            lines.append(f"  {label:<24}{100 * in_sample[name]:>6.1f}% in sample{100 * held_out[name]:>8.1f}% held out")
    lines += ["", "fitted elsewhere or not cross-validated:"] + [f"  {text}" for text in ELSEWHERE]
    return "\n".join(lines) + "\n"
