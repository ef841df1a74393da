"""``fabricsim validate --training``: the shipped training rows, predicted against measured step time."""

from __future__ import annotations

import csv
import json

import pytest

from simulator.cli import main
from simulator.validation.steps import TrainingCheck, format_training, training_check


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def check() -> TrainingCheck:
    return training_check(max_gpus=32)  # SC21's GPT-1.7B, the 8-GPU Llama 3.1 8B recipes: seconds


def test_rows_and_their_errors(check):
    tables = [r.table for r in check.rows]
    assert tables == ["SC21", "DGX Cloud v24.11.1", "DGX Cloud v25.04.01"]
    for r in check.rows:
        assert r.error == pytest.approx(r.predicted_step_s / r.measured_step_s - 1, rel=1e-12)
        assert 0 <= r.exposed_share < 1
    sc21, first, second = check.rows
    # SC21 GPT-1.7B: eq. 3 gives 1.5467e16 FLOP per step; at the measured 137 TFLOP/s per GPU on 32 GPUs that is
    # 1.5467e16 / (32 x 137e12) = 3.528 s (workloads.model's worked number)
    assert sc21.measured_step_s == pytest.approx(1.5467e16 / (32 * 137e12), rel=1e-4)
    # the DGX Cloud step times as published (training_dgxc_h100_bf16.csv): 12.91 s and 12.27 s
    assert (first.measured_step_s, second.measured_step_s) == (12.91, 12.27)
    assert first.predicted_step_s == second.predicted_step_s  # the same layout, simulated alike


def test_what_is_skipped_is_said(check):
    skipped = {str(s) for s in check.skipped}
    assert "SC21 GPT-3.6B on 64 GPUs: more than 32 GPUs" in skipped
    assert "DGX Cloud v24.11.1 Llama 3.1 8B on 16 GPUs: weak-scaling layout" in skipped
    assert not any("405B" in s and s.split(" on ")[1].startswith(("32 ", "64 ")) for s in skipped)  # proxies out
    text = format_training(check)
    assert "# skipped 41 rows" in text and "DGX Cloud Llama 3.1 405B: 7 layouts on 512-2304 GPUs" in text
    assert "# SC21: mean |error|" in text and "# DGX Cloud: mean |error|" in text


def test_cli_csv_and_json(capsys):
    code, out, err = run(capsys, "validate", "--training", "--max-gpus", "8", "--format", "csv", "--quiet")
    assert code == 0, err
    lines = out.splitlines()
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert [r["model"] for r in rows] == ["Llama 3.1 8B", "Llama 3.1 8B"]
    assert float(rows[0]["error"]) == pytest.approx(
        float(rows[0]["predicted_step_s"]) / float(rows[0]["measured_step_s"]) - 1, rel=1e-12
    )
    assert "# skipped: SC21 GPT-1.7B on 32 GPUs: more than 8 GPUs" in lines
    code, out, err = run(capsys, "validate", "--training", "--max-gpus", "8", "--format", "json", "--quiet")
    data = json.loads(out)
    assert len(data["rows"]) == 2 and {"table", "model", "gpus", "reason"} == set(data["skipped"][0])


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
