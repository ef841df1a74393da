"""What a step's output says: each figure defined once, the time-in-network split adding up, link tiers' busy
time and utilisation, and every warning in every output format."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.studies.scenario import step_settings
from simulator.studies.training import FIGURES, OVERLAP_OF_GROUPS, VIA_OTHER_RANKS, simulate_step
from topologies.presets import build_system
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt

README = Path(__file__).resolve().parents[2] / "README.md"
# 4 layers of h 1024 on 2 DGX H100 (16 GPUs): tp 2 x pp 2 leaves dp 4; 16 sequences make m = 4 micro-batches
SMALL = ["--model", "gpt", "--layers", "4", "--hidden", "1024", "--heads", "16", "--nodes", "2", "--seq-len", "2048"]


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def pipelined():
    """tp 2 x pp 2 x dp 4 with m = 4: tensor, pipeline and data-parallel traffic all in the step."""
    model = custom_gpt(layers=4, hidden=1024, heads=16, seq_len=2048)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=16)
    return simulate_step(model, spec, system=build_system("dgx-h100", nodes=2))


def test_time_in_network_split_adds_up(pipelined):
    r = pipelined
    split = r.breakdown["exposed"]
    assert list(split)[: len(r.breakdown["group"])] == list(r.breakdown["group"])
    assert OVERLAP_OF_GROUPS in split and VIA_OTHER_RANKS in split
    assert math.fsum(split.values()) == pytest.approx(r.exposed_comm_s, rel=1e-12, abs=1e-15)
    # the overlap only takes away: time counted under several groups at once
    assert split[OVERLAP_OF_GROUPS] <= 1e-15
    frame = r.frame("exposed").set_index("part")["exposed_s"]
    assert frame.to_dict() == dict(split)


def test_link_tiers_busy_time_and_utilisation(pipelined):
    r = pipelined
    tiers = r.frame("link_tier").set_index("tier")
    assert set(tiers.columns) == {"bytes", "busy_s", "utilisation"}
    assert (tiers["bytes"] > 0).any()
    for _, row in tiers.iterrows():
        # no link carries more than its capacity over the step: bytes <= capacity x step, so utilisation <= 1
        assert 0 <= row["utilisation"] <= 1 and row["busy_s"] <= r.step_time_s
        assert row["utilisation"] == pytest.approx(row["busy_s"] / r.step_time_s, rel=1e-12)
        assert (row["busy_s"] > 0) == (row["bytes"] > 0)


def test_every_figure_is_defined_in_the_readme_as_in_help(capsys):
    readme = " ".join(README.read_text().split())
    with pytest.raises(SystemExit):
        main(["step", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for name, definition in FIGURES:
        assert f"**{name}**: {definition}" in readme, name
        assert f"{name}: {definition}" in help_text, name


def test_out_of_memory_is_a_warning_in_every_format(capsys):
    # 24 layers of h 8192: 24 x 12 h^2 = 19.3e9 parameters, 18 bytes each (bf16 weights, fp32 gradients, 12 of
    # Adam) = 348 GB over tp 2 x pp 2 = 87 GB per GPU before any activation: past the H100's 80 GB
    argv = [*SMALL, "--layers", "24", "--hidden", "8192", "--heads", "64", "--seq-len", "16384"]
    argv += ["--global-batch", "2", "--nodes", "1", "--pp", "2", "--tp", "2", "--net-model", "analytical"]
    text = run(capsys, "step", *argv)
    assert re.search(r"^# WARNING: out of memory: [\d.]+ GiB per GPU", text, re.M)
    data = json.loads(run(capsys, "step", *argv, "--format", "json"))
    assert data["out_of_memory"] and any(w.startswith("out of memory") for w in data["warnings"])
    rows = list(csv.reader(io.StringIO(run(capsys, "step", *argv, "--format", "csv"))))
    assert rows[0] == ["section", "name", "field", "value"]
    assert any(row[0] == "warning" and row[3].startswith("out of memory") for row in rows)


def test_under_filled_pipeline_and_ignored_options_are_warned(capsys, monkeypatch):
    # pp 4 x dp 4 on 16 GPUs with 8 sequences: m = 8 / 4 = 2 micro-batches for 4 stages; the 1F1B bubble share
    # with equal stages is (p - 1) / (m + p - 1) = 3 / 5 = 60 %
    monkeypatch.setenv("NCCL_BUFFSIZE", "8388608")
    argv = [*SMALL, "--tp", "1", "--pp", "4", "--global-batch", "8", "--net-model", "analytical"]
    data = json.loads(run(capsys, "step", *argv, "--sequence-parallel", "--format", "json"))
    pipeline = [w for w in data["warnings"] if w.startswith("under-filled pipeline")]
    assert len(pipeline) == 1 and "2 micro-batches for 4 stages" in pipeline[0] and "= 60%" in pipeline[0]
    assert "sequence-parallel True ignored: tp is 1, there is no tensor-parallel group" in data["warnings"]
    assert "NCCL_BUFFSIZE=8388608 ignored (not modelled)" in data["warnings"]


def test_a_filled_pipeline_has_no_warning(pipelined):
    # m = 4 micro-batches for 2 stages: the bubble is (p - 1) / (m + p - 1) = 1/5 of an equal-stage 1F1B step
    assert pipelined.warnings == ()
    assert list(pipelined.frame("notes")["kind"]) == ["note"] * len(pipelined.notes)


def test_the_attention_kernel_reaches_the_step_from_the_command_and_a_scenario(capsys, tmp_path):
    # FlashAttention-2 is slower than cuDNN's fused attention at every published shape on H100 (FA-3 paper figs.
    # 5-6), so the step that runs it takes longer; a scenario file's value is checked as the option is
    argv = [*SMALL, "--tp", "2", "--pp", "1", "--global-batch", "8", "--net-model", "analytical", "--format", "json"]
    cudnn = json.loads(run(capsys, "step", *argv))
    fa2 = json.loads(run(capsys, "step", *argv, "--attention-kernel", "fa2"))
    assert fa2["step_time_s"] > cudnn["step_time_s"]
    bad = tmp_path / "bad.toml"
    bad.write_text('attention-kernel = "fa9"\n')
    assert main(["step", str(bad)]) != 0
    assert "attention_kernel: 'fa9' is not allowed; expected one of 'cudnn', 'fa2', 'fa3'" in capsys.readouterr().err
    # the A100 has one flat FlashAttention-2 figure: another kernel is refused before the step runs, naming the option
    assert main(["step", *SMALL, "--system", "dgx-a100", "--attention-kernel", "cudnn"]) != 0
    assert "attention_kernel: 'cudnn' is not allowed; expected fa2 on a100" in capsys.readouterr().err
    # None is the default, and a sweep may give it
    assert step_settings({"attention_kernel": None})["attention_kernel"] is None
