"""``fabricsim validate --training``: the shipped training rows, predicted against measured step time."""

from __future__ import annotations

import csv
import json

import pytest

from simulator.cli import main
from simulator.validation.dgxc import dgxc_cases
from simulator.validation.steps import TrainingCheck, TrainingRow, format_training, training_check


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def check() -> TrainingCheck:
    return training_check()  # the default: rows on up to 32 GPUs, the fewest-GPU layout of each recipe


def test_rows_and_their_errors(check):
    assert check.rows[0].table == "SC21" and all(r.table.startswith("DGX Cloud v") for r in check.rows[1:])
    for r in check.rows:
        assert r.gpus <= 32
        assert r.error == pytest.approx(r.predicted_step_s / r.measured_step_s - 1, rel=1e-12)
        assert 0 <= r.exposed_share < 1
    sc21 = check.rows[0]
    # SC21 GPT-1.7B: eq. 3 gives 1.5467e16 FLOP per step; at the measured 137 TFLOP/s per GPU on 32 GPUs that is
    # 1.5467e16 / (32 x 137e12) = 3.528 s (workloads.model's worked number)
    assert sc21.model == "GPT-1.7B" and sc21.measured_step_s == pytest.approx(1.5467e16 / (32 * 137e12), rel=1e-4)
    # the Llama 3.1 8B BF16 step times as published (training_dgxc_h100_bf16.csv): 12.91 s and 12.27 s, the same
    # layout in two recipe releases, simulated alike but for the gradients: v24.11.1's file reduces them in bf16
    # (half the data-parallel bytes, mostly hidden behind the backward), v25.04.01 in fp32
    first, second = (r for r in check.rows if r.model == "Llama 3.1 8B" and r.precision == "BF16")
    assert (first.measured_step_s, second.measured_step_s) == (12.91, 12.27)
    assert first.predicted_step_s < second.predicted_step_s


def test_what_is_skipped_is_said(check):
    skipped = {str(s) for s in check.skipped}
    assert "SC21 GPT-3.6B on 64 GPUs: more than 32 GPUs" in skipped
    assert "DGX Cloud v24.11.1 Llama 3.1 8B on 16 GPUs: weak-scaling layout" in skipped
    assert len(check.rows) + len(check.skipped) == 10 + sum(not c.proxy for c in dgxc_cases())  # 10 SC21 rows
    text = format_training(check)
    assert f"# skipped {len(check.skipped)} rows" in text and "DGX Cloud Llama 3.1 405B: " in text
    assert "# SC21: mean |error|" in text and "# DGX Cloud dgx-h100 dense: mean |error|" in text
    data = json.loads(format_training(check, format="json"))
    assert len(data["rows"]) == len(check.rows) and {"table", "model", "gpus", "reason"} == set(data["skipped"][0])


def test_cli_csv(capsys):
    code, out, err = run(capsys, "validate", "--training", "--max-gpus", "8", "--format", "csv", "--quiet")
    assert code == 0, err
    lines = out.splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert rows and {r["model"] for r in rows} == {"Llama 3.1 8B"} and all(r["gpus"] == "8" for r in rows)
    assert float(rows[0]["error"]) == pytest.approx(
        float(rows[0]["predicted_step_s"]) / float(rows[0]["measured_step_s"]) - 1, rel=1e-12
    )
    assert "# skipped: SC21 GPT-1.7B on 32 GPUs: more than 8 GPUs" in lines


@pytest.mark.parametrize(
    "argv,message",
    [
        (("--max-gpus", "8"), "max-gpus: 8 is not allowed without --training"),
        (("--training", "--series", "H100"), "training: --series is not allowed with --training"),
        (("--training", "--max-gpus", "-1"), "max_gpus: -1 is not allowed"),
    ],
)
def test_bad_options(capsys, argv, message):
    code, out, err = run(capsys, "validate", *argv)
    assert code == 2 and message in err


def test_moe_and_gb200_rows_have_their_own_means():
    # two hand-made rows: errors +10 % (dense H100) and -20 % (MoE H100), each in its own mean line
    def row(model: str, moe: bool, predicted: float) -> TrainingRow:
        return TrainingRow(
            table="DGX Cloud v25.05.05", model=model, precision="BF16", moe=moe, system="dgx-h100", gpus=512,
            tp=4, pp=8, cp=2, ep=8 if moe else 1, dp=8, vp=8, global_batch=1024, measured_step_s=10.0,
            predicted_step_s=predicted, exposed_comm_s=1.0, bubble_s=0.5, wall_s=1.0,
        )  # fmt: skip

    check = TrainingCheck(rows=(row("Llama 3.1 405B", False, 11.0), row("Grok-1 314B (MoE)", True, 8.0)), skipped=())
    text = format_training(check)
    assert "# DGX Cloud dgx-h100 dense: mean |error| 10.0%, max 10.0% over 1 rows" in text
    assert "# DGX Cloud dgx-h100 MoE: mean |error| 20.0%, max 20.0% over 1 rows" in text
    assert "Grok-1 314B " in text and "(MoE)" not in text.split("\n")[2]  # the group names it, not the row
    assert all(len(line) <= 120 for line in text.splitlines())
