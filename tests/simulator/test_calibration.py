"""`fabricsim calibrate`: reading nccl-tests output, the fit, the calibration file and `bench --calibration`.

Acceptance (issue "validation suite"): calibrating on the 8x A100 `mpirun -np 8` table (rendered
as nccl-tests stdout) lowers its error.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from simulator.cli import main
from simulator.config import SimConfig
from simulator.studies.nccl_tests import run_bench
from simulator.validation.calibration import (
    OVERHEAD_BOUNDS_S,
    SCALE_BOUNDS,
    Calibration,
    LogRow,
    apply_calibration,
    calibrate,
    format_result,
    golden_section_min,
    parse_nccl_tests_log,
    scaled_link_kinds,
)
from simulator.validation.collectives import read_table
from tests.simulator.nccl_logs import a100_mpirun_rows, render_nccl_tests_log
from topologies.links import LinkKind
from topologies.presets import build_system


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def a100_log_text():
    return render_nccl_tests_log(a100_mpirun_rows())


# ---- reading nccl-tests output ------------------------------------------------------------------


def test_log_reader_takes_rows_ranks_and_test(a100_log_text):
    log = parse_nccl_tests_log(a100_log_text, name="a100.log")
    table = a100_mpirun_rows()
    assert log.collective == "all_reduce" and log.nranks == 8 and log.hosts == ("thanos",)
    assert log.devices == ("NVIDIA A100-SXM4-80GB",) and log.gpus_per_thread == 1
    assert [r.size_bytes for r in log.rows] == [int(r["size_bytes"]) for r in table]
    assert [r.time_us for r in log.rows] == [float(r["time_us"]) for r in table]  # out-of-place time
    assert log.rows[0].type == "float" and log.rows[0].redop == "sum" and log.rows[0].root == -1


@pytest.mark.parametrize("in_place", ["na", "absent"])
def test_in_place_columns_na_or_absent(in_place):
    rows = a100_mpirun_rows()
    log = parse_nccl_tests_log(render_nccl_tests_log(rows, in_place=in_place))
    assert [r.time_us for r in log.rows] == [float(r["time_us"]) for r in rows]


def test_collective_from_command_line_and_hosts_counted():
    rows = a100_mpirun_rows()[:4]
    text = "$ mpirun -np 16 ./build/all_gather_perf -b 8 -e 8G -f 2\n" + render_nccl_tests_log(
        rows, binary="all_gather_perf", nranks=16, hosts=("node-a", "node-b"), starting_line=False
    )
    log = parse_nccl_tests_log(text)
    assert log.collective == "all_gather" and log.nranks == 16 and log.hosts == ("node-a", "node-b")


def _line_of(text: str, size: int) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if line.split()[:1] == [str(size)])


@pytest.mark.parametrize(
    "mutate,needles",
    [
        (lambda t: t.replace("  1181.6 ", "  11x1.6 ", 1), ("line {134217728}", "time", "'11x1.6'")),
        (
            lambda t: t.replace("     float     sum      -1     615.7", "     fp8e4     sum      -1     615.7"),
            ("line {67108864}", "type", "'fp8e4'"),
        ),
        (lambda t: "\n".join(line for line in t.splitlines() if line.startswith("#")), ("no nccl-tests result rows",)),
        (lambda t: t + "\n# Collective test starting: all_gather_perf\n", ("several collective tests",)),
    ],
)
def test_bad_logs_raise_naming_the_line(a100_log_text, mutate, needles):
    text = mutate(a100_log_text)
    assert text != a100_log_text
    with pytest.raises(ValueError) as info:
        parse_nccl_tests_log(text, name="a100.log")
    message = str(info.value)
    assert message.startswith("a100.log")
    for needle in needles:
        if needle.startswith("line {"):
            needle = f"line {_line_of(a100_log_text, int(needle[6:-1]))}"
        assert needle in message, (needle, message)


def test_bad_logs_on_the_command_line_are_one_line(capsys, tmp_path, a100_log_text):
    cases = {
        "empty.log": ("nothing here\n", "no nccl-tests result rows"),
        "norank.log": ("\n".join(line for line in a100_log_text.splitlines() if "Rank" not in line), "--nranks"),
        "nocoll.log": ("\n".join(line for line in a100_log_text.splitlines() if "_perf" not in line), "--collective"),
        "gather.log": (a100_log_text.replace("all_reduce_perf", "gather_perf"), "'gather'"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        argv = ["calibrate", tmp_path / name] + (["--system", "dgx-a100"] if name == "norank.log" else [])
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", name
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err, (name, err)
    for argv, needle in (
        (["calibrate", tmp_path / "absent.log"], "no such file"),
        (
            ["calibrate", tmp_path / "gather.log", "--collective", "all_reduce", "--nodes", "3"],
            "nodes: 3 is not allowed",
        ),  # the log's ranks are on one host
        (["calibrate", tmp_path / "gather.log", "--collective", "all_reduce", "--system", "dgx-z900"], "system"),
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


# ---- the fit ------------------------------------------------------------------------------------


def test_golden_section_finds_interior_and_boundary_minima():
    assert golden_section_min(lambda x: (x - 0.7) ** 2, 0.3, 1.5, tol=1e-4) == pytest.approx(0.7, abs=1e-4)
    assert golden_section_min(lambda x: x, 0.0, 2e-4, tol=1e-8) == 0.0  # the bound itself is tried
    assert golden_section_min(lambda x: -x, 0.3, 1.5, tol=1e-3) == 1.5


def test_scaled_link_kinds():
    assert scaled_link_kinds(build_system("dgx-a100"), nodes=1) == (LinkKind.NVLINK,)
    assert scaled_link_kinds(build_system("dgx-a100", nodes=2), nodes=2) == (LinkKind.INFINIBAND,)
    assert scaled_link_kinds(build_system("pcie-rtx4090"), nodes=1) == (LinkKind.PCIE, LinkKind.CPU_INTERCONNECT)


def test_fit_recovers_known_parameters():
    # "measurements" made by the simulator itself with NVLink at 0.8 x and 5 us of overhead:
    # the fit must find them again (to its tolerances: 1e-3 on s, 0.05 us on o, after rounding)
    truth = Calibration(system="dgx-h100", link_scale=(("nvlink", 0.8),), launch_overhead_s=5e-6)
    topo, config = apply_calibration(build_system("dgx-h100"), SimConfig(), truth)
    sizes = [8 << (2 * k) for k in range(16)]  # 8 B .. 8 GiB, x4
    measured = run_bench("all_reduce", system=topo, sizes=sizes, config=config)
    rows = [
        LogRow(
            line=i,
            size_bytes=r.size_bytes,
            count=r.count,
            type="float",
            redop="sum",
            root=-1,
            time_us=r.time_us,
            algbw_GBps=r.algbw_GBps,
            busbw_GBps=r.busbw_GBps,
        )
        for i, r in enumerate(measured, start=1)
    ]
    result = calibrate(rows, system="dgx-h100", collective="all_reduce", nranks=8)
    ((kind, scale),) = result.calibration.link_scale
    assert kind == "nvlink" and scale == pytest.approx(0.8, abs=2e-3)
    assert result.calibration.launch_overhead_s == pytest.approx(5e-6, abs=0.1e-6)
    assert result.summary_after["all"]["median"] < 0.005 < result.summary_before["all"]["median"]


@pytest.fixture(scope="module")
def a100_calibration(tmp_path_factory, a100_log_text):
    """`fabricsim calibrate LOG --out cal.json` on the rendered 8x A100 mpirun table."""
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("calibrate")
    (folder / "a100.log").write_text(a100_log_text)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["calibrate", str(folder / "a100.log"), "--system", "dgx-a100", "--out", str(folder / "cal.json")])
    return code, out.getvalue(), folder / "cal.json"


def test_calibrate_lowers_the_error_on_the_a100_table(a100_calibration):
    code, out, path = a100_calibration
    assert code == 0
    data = json.loads(path.read_text())
    before, after = data["error_before"], data["error_after"]
    assert data["fitted_on"]["rows"] == 30 == before["all"]["n"]
    # acceptance: lower in the bandwidth regime, which the NVLink scale is fitted on; no regime worse (the preset
    # already meets this table within a few percent: 3.5 % over all sizes before the calibration)
    assert after["bandwidth"]["median"] < before["bandwidth"]["median"]
    for regime in ("all", "latency", "mid"):
        assert after[regime]["median"] <= before[regime]["median"], regime
    # the preset's plateau is within a percent of the measured one: the fitted scale stays near 1 (1.002)
    assert SCALE_BOUNDS[0] < data["link_scale"]["nvlink"] < SCALE_BOUNDS[1]
    assert abs(data["link_scale"]["nvlink"] - 1.0) < 0.01
    assert OVERHEAD_BOUNDS_S[0] <= data["launch_overhead_s"] < OVERHEAD_BOUNDS_S[1]
    assert data["fitted_on"]["overhead_rows"] == 13  # 8 B .. 32 KiB: 13 sizes < 64 KiB
    # the printed report carries the same numbers
    lines = out.splitlines()
    assert lines[1].startswith("nvlink bandwidth scale") and f"{data['link_scale']['nvlink']:.3f}" in lines[1]
    assert f"{data['launch_overhead_s'] * 1e6:.2f} us" in lines[2]
    all_sizes = next(line for line in lines if line.startswith("all sizes")).split()
    assert all_sizes[2:6] == [
        "30",
        f"{before['all']['median']:.1%}",
        f"{after['all']['median']:.1%}",
        f"{before['all']['p90']:.1%}",
    ]
    assert f"--calibration {path}" in out


def test_bench_with_the_calibration(capsys, a100_calibration):
    _, _, path = a100_calibration
    data = json.loads(path.read_text())
    argv = ["bench", "all_reduce", "-b", "8", "-e", "4G", "-f", "536870912", "--format", "json"]
    code, out, _ = run(capsys, *argv, "--system", "dgx-a100")
    plain = json.loads(out)["rows"]
    code, out, err = run(capsys, *argv, "--calibration", path)  # the file's system is the default
    assert code == 0 and err == ""
    calibrated = json.loads(out)
    assert calibrated["system"] == "dgx-a100" and calibrated["calibration"]["link_scale"] == data["link_scale"]
    rows = calibrated["rows"]
    # 8 B: latency only, so the overhead adds as is (8 B over NVLink moves in well under 0.01 us)
    assert rows[0]["time_us"] - plain[0]["time_us"] == pytest.approx(data["launch_overhead_s"] * 1e6, abs=0.01)
    # 4 GiB: bandwidth-bound, so time scales as 1 / s (within the overhead and fixed latencies, < 0.1%)
    assert rows[1]["time_us"] / plain[1]["time_us"] == pytest.approx(1 / data["link_scale"]["nvlink"], rel=1e-3)


def test_bench_calibration_errors_are_one_line(capsys, tmp_path, a100_calibration):
    _, _, good = a100_calibration
    data = json.loads(good.read_text())
    cases = {
        "system.json": (data, ["--system", "dgx-h100"], "fitted on system 'dgx-a100'"),
        "kind.json": ({**data, "link_scale": {"nvlnk": 0.9}}, [], "'nvlnk' is not a link kind"),
        "factor.json": ({**data, "link_scale": {"nvlink": -1}}, [], "link_scale.nvlink: -1"),
        "overhead.json": ({**data, "launch_overhead_s": "8us"}, [], "launch_overhead_s"),
        "format.json": ({**data, "format": "other"}, [], "format"),
        "missing.json": ({k: v for k, v in data.items() if k != "system"}, [], "system: missing"),
        "list.json": ([1, 2], [], "expected a JSON object"),
    }
    for name, (content, extra, needle) in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
        code, out, err = run(capsys, "bench", "all_reduce", "--calibration", tmp_path / name, *extra)
        assert code == 2 and out == "", name
        assert len(err.strip().splitlines()) == 1 and needle in err and name in err, (name, err)
    (tmp_path / "broken.json").write_text("{")
    code, _, err = run(capsys, "bench", "all_reduce", "--calibration", tmp_path / "broken.json")
    assert code == 2 and "not JSON" in err


def test_apply_calibration_scales_only_the_named_kind():
    topology = build_system("dgx-h100", nodes=2)
    calibration = Calibration(system="dgx-h100", link_scale=(("infiniband", 0.9),), launch_overhead_s=3e-6)
    config = SimConfig(launch_overhead_s=1e-6)
    scaled, new_config = apply_calibration(topology, config, calibration)
    ib = topology.link_kind == int(LinkKind.INFINIBAND)
    assert ib.any() and (~ib).any()
    np.testing.assert_allclose(scaled.link_capacity_bytes_per_s[ib], 0.9 * topology.link_capacity_bytes_per_s[ib])
    np.testing.assert_array_equal(scaled.link_capacity_bytes_per_s[~ib], topology.link_capacity_bytes_per_s[~ib])
    assert new_config.launch_overhead_s == pytest.approx(4e-6)  # added to what the config had
    assert replace(new_config, launch_overhead_s=1e-6) == config


def test_calibration_round_trips_through_its_dict():
    calibration = Calibration(system="dgx-a100", link_scale=(("nvlink", 0.948),), launch_overhead_s=8.17e-6)
    assert Calibration.from_dict(json.loads(json.dumps(calibration.to_dict()))) == calibration
    with pytest.raises(ValueError, match="system"):
        Calibration(system="dgx-z900", link_scale=())
    with pytest.raises(ValueError, match="launch_overhead_s"):
        Calibration(system="dgx-a100", link_scale=(), launch_overhead_s=math.nan)


def test_two_node_log_scales_the_network(capsys, tmp_path):
    # four rows of the 2x DGX A100 table: nodes come from the two hosts, so the fabric is what scales
    rows = [
        r
        for r in read_table("a100_dgx_2node_ib_hdr_k8s_deepops.csv")
        if int(r["size_bytes"]) in (8, 1024, 1 << 30, 1 << 32)
    ]
    log = parse_nccl_tests_log(render_nccl_tests_log(rows, nranks=16, hosts=("node-a", "node-b")))
    result = calibrate(log, system="dgx-a100")
    assert (result.nodes, result.gpus_per_node) == (2, 8)
    assert [kind for kind, _ in result.calibration.link_scale] == ["infiniband"]
    assert result.scale_rows == 2 and result.overhead_rows == 2
    assert result.summary_after["bandwidth"]["median"] < result.summary_before["bandwidth"]["median"]


def test_nccl_settings_in_the_log_are_replayed():
    # NCCL_DEBUG=INFO prints the settings a run had; calibrate replays them as the measurement ran. Without
    # them the 8x A100 log's small sizes run LL; with NCCL_PROTO=Simple every row runs Simple, and an option wins
    rows = a100_mpirun_rows()[:6] + a100_mpirun_rows()[-2:]
    text = render_nccl_tests_log(rows)
    lines = text.splitlines()
    settings = [
        "thanos:4000:4000 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
        "thanos:4000:4000 [0] NCCL INFO NCCL_PROTO set by environment to Simple",
        "thanos:4001:4001 [1] NCCL INFO NCCL_IB_QPS_PER_CONNECTION set by environment to 2.",
    ]
    logged = "\n".join(lines[:4] + settings + lines[4:])
    log = parse_nccl_tests_log(logged)
    assert log.environment == (("NCCL_PROTO", "Simple"), ("NCCL_IB_QPS_PER_CONNECTION", "2"))
    assert {c.protocol for c in calibrate(parse_nccl_tests_log(text), system="dgx-a100").before} >= {"LL"}
    result = calibrate(log, system="dgx-a100")
    assert {c.protocol for c in result.before} == {"Simple"}
    assert result.to_dict()["fitted_on"]["nccl_environment"] == {
        "NCCL_PROTO": "Simple",
        "NCCL_IB_QPS_PER_CONNECTION": "2",
    }
    assert "as the log's run: NCCL_PROTO=Simple NCCL_IB_QPS_PER_CONNECTION=2" in format_result(result)
    forced = calibrate(log, system="dgx-a100", protocol="LL")  # the option replaces NCCL_PROTO
    assert {c.protocol for c in forced.before} == {"LL"}
    assert forced.environment == (("NCCL_IB_QPS_PER_CONNECTION", "2"),)
    bad = logged.replace("to Simple", "to LL256")
    with pytest.raises(ValueError, match=r"a100.log line 6: NCCL_PROTO: 'll256' in 'LL256' is not allowed"):
        parse_nccl_tests_log(bad, name="a100.log")
    clash = logged + "\nthanos:4002:4002 [2] NCCL INFO NCCL_PROTO set by environment to LL"
    with pytest.raises(ValueError, match=r"a100.log line \d+: NCCL_PROTO set to 'LL' here and 'Simple' before"):
        parse_nccl_tests_log(clash, name="a100.log")


STEP_ARGV = ["step", "--nodes", "2", "--tp", "8", "--pp", "1", "--global-batch", "16", "--seq-len", "1024",
             "--granularity", "chunk", "--format", "json"]  # fmt: skip


def test_step_with_a_calibration(capsys, tmp_path):
    # NVLink at half its capacity: the tensor-parallel all-reduces (inside a server, over NVLink) take longer;
    # the file's system is the default, and its figures are recorded in the output
    path = tmp_path / "half.json"
    path.write_text(json.dumps(Calibration(system="dgx-h100", link_scale=(("nvlink", 0.5),)).to_dict()))
    code, out, err = run(capsys, *STEP_ARGV)
    plain = json.loads(out)
    code, out, err = run(capsys, *STEP_ARGV, "--calibration", path)
    assert code == 0 and err == ""
    calibrated = json.loads(out)
    assert calibrated["calibration"]["link_scale"] == {"nvlink": 0.5}
    tp_plain, tp_half = (d["breakdown"]["group"]["tp"]["time_s"] for d in (plain, calibrated))
    assert tp_half > 1.5 * tp_plain  # bandwidth-bound all-reduces of a few MiB: close to 2x, latency aside
    code, out, err = run(capsys, *STEP_ARGV, "--calibration", path, "--system", "dgx-a100")
    assert code == 2 and "fitted on system 'dgx-h100'" in err and err.count("\n") == 1


def test_step_with_sharp_reduces_gradients_in_the_network(capsys):
    # DGX A100 on Quantum HDR switches: --sharp lets NCCL's tuner pick CollNet for the data-parallel all-reduce
    argv = [*STEP_ARGV, "--system", "dgx-a100", "--tp", "4", "--dp", "4"]
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "collnet Simple" not in json.loads(out)["breakdown"]["algorithm"]["dp"]
    code, out, _ = run(capsys, *argv, "--sharp")
    data = json.loads(out)
    assert code == 0 and data["sharp"] is True and "collnet Simple" in data["breakdown"]["algorithm"]["dp"]


def test_calibrate_reports_each_simulation_of_its_fit(a100_log_text, a100_calibration):
    # the fit simulates the table once as the preset stands (scale 1, no overhead), then once per trial; each
    # is reported before it runs, and the fit is the command's (the same link scale as `fabricsim calibrate`)
    stages: list[str] = []
    result = calibrate(parse_nccl_tests_log(a100_log_text, name="a100"), system="dgx-a100", progress=stages.append)
    assert stages[0] == "simulation 1 of the fit (link scale 1.000, overhead 0.0 us)"
    assert len(stages) > 2 and all(s.startswith(f"simulation {i} of the fit") for i, s in enumerate(stages, 1))
    assert result.to_dict()["link_scale"] == json.loads(a100_calibration[2].read_text())["link_scale"]
