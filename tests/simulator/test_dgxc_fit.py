"""The GEMM-efficiency fit on the DGX Cloud rows (simulator.validation.dgxc_fit)."""

from __future__ import annotations

import math

import pytest

from simulator.validation.dgxc_fit import EfficiencyFit, FittedRow, fit_efficiency, format_fit


def _row(model: str, measured: float, a: float, b: float) -> FittedRow:
    return FittedRow(model=model, label=model, measured_s=measured, fixed_s=a, gemm_s=b)


def _fit(rows: tuple[FittedRow, ...]) -> EfficiencyFit:
    return EfficiencyFit(
        gpu="g", system="s", precision="BF16", attribute="gemm_efficiency_bf16", current=0.8, rows=rows
    )


def test_the_docstring_worked_number():
    # measured 10 s, 9 s at e = 0.8 and 9.5 s at 0.72: b (1/0.72 - 1/0.8) = 0.5, b = 3.6, a = 9 - 3.6/0.8 = 4.5;
    # T(e) = 10 at e = 3.6/5.5 = 0.6545: 0.655 on the grid (|error| 0.038 % against 0.046 % at 0.654)
    row = _row("m", 10.0, 4.5, 3.6)
    assert row.predicted_s(0.8) == pytest.approx(9.0) and row.predicted_s(0.72) == pytest.approx(9.5)
    assert _fit((row,)).pooled == 0.655


def test_leave_one_model_out_predicts_each_model_with_the_others_fit():
    # model A wants e = 3.6/5.5 = 0.655, model B e = 3.6/4.5 = 0.8 (a = 4.5, measured 9 s). Between them the
    # pooled |error| sum is (1 - T/10) + (T/9 - 1) = T/90, lowest at the larger e: pooled 0.8 (A -10 %, B 0).
    # Without A the fit is B's 0.8, which predicts A at 4.5 + 4.5 = 9 s: -10 % held out
    fit = _fit((_row("A", 10.0, 4.5, 3.6), _row("B", 9.0, 4.5, 3.6)))
    held = dict(fit.held_out)
    assert held == {"A": 0.8, "B": 0.655} and fit.pooled == 0.8
    assert fit.mean_error(held["A"], "A") == pytest.approx(0.1)
    assert fit.leave_one_out_error >= fit.mean_error(fit.pooled)
    text = format_fit(fit)
    assert "leave one model out" in text and "fitted without" in text


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"precision": "FP4"}, "precision"), ({"precision": "BF16", "system": "dgx-z"}, "system")]
)
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        fit_efficiency(**kwargs)


@pytest.mark.slow
def test_a_fit_on_the_8_gpu_rows_moves_their_error_down():
    fit = fit_efficiency(precision="BF16", models=("Llama 3.1 8B",), smallest=True)
    assert fit.gpu == "h100_sxm5_80gb" and len(fit.rows) == 2
    assert fit.mean_error(fit.pooled) <= fit.mean_error(fit.current)
    # one model: nothing to hold out
    assert math.isnan(dict(fit.held_out)["Llama 3.1 8B"])
