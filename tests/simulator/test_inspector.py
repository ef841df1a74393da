"""NCCL's inspector JSON (validation/inspector.py) as input: reading, grouping, and the commands that take it."""

from __future__ import annotations

import csv
import json

import pytest

from simulator.cli import main
from simulator.validation.calibration import parse_measurements
from simulator.validation.inspector import is_inspector_json, parse_inspector_json
from tests.simulator.inspector_logs import MIB, inspector_trace_text
from tests.simulator.nccl_logs import a100_mpirun_rows, render_nccl_tests_log


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "inspector.jsonl"
    path.write_text(inspector_trace_text())
    return path


def test_rows_are_medians_per_collective_shape_and_size():
    trace = parse_inspector_json(inspector_trace_text(), name="t")
    rows = {(r.collective, r.nranks, r.nnodes, r.size_bytes): r for r in trace.rows()}
    # all_reduce 1 MiB on 16 ranks: records 60, 64, 58 us -> median 60; kernel events 4, 4 (third: none) -> 4
    r = rows["all_reduce", 16, 2, MIB]
    assert (r.time_us, r.channels, r.records) == (60.0, 4, 3)
    # 4 MiB: 101 and 95 -> median of two = 98
    assert rows["all_reduce", 16, 2, 4 * MIB].time_us == 98.0
    # 64 MiB: 560, 571, 566 -> 566; the 0 us record is skipped, not a row
    assert (rows["all_reduce", 16, 2, 64 * MIB].time_us, rows["all_reduce", 16, 2, 64 * MIB].records) == (566.0, 3)
    # all_gather's message is one rank's share: 512 KiB x 8 ranks = nccl-tests' 4 MiB; 30 and 32 us -> 31
    assert rows["all_gather", 8, 1, 4 * MIB].time_us == 31.0
    assert len(rows) == 4
    assert dict(trace.skipped) == {"point-to-point (p2p_perf) records": 1, "records of 0 us or 0 bytes": 1}
    assert trace.format_versions == ("v4.0",)


def test_pretty_printed_objects_and_line_numbers():
    one = json.loads(inspector_trace_text().splitlines()[0])
    text = "\n" + json.dumps(one, indent=2) + "\n" + json.dumps(one, indent=2) + "\n"
    trace = parse_inspector_json(text, name="t")
    # the first object opens on line 2; the second after its 40-odd lines
    lines = json.dumps(one, indent=2).count("\n") + 1
    assert [r.line for r in trace.records] == [2, 2 + lines]


def test_format_is_told_by_content():
    assert is_inspector_json(inspector_trace_text())
    log_text = render_nccl_tests_log(a100_mpirun_rows())
    assert not is_inspector_json(log_text)
    assert parse_measurements(log_text, name="l").collective == "all_reduce"
    log = parse_measurements(inspector_trace_text(), name="t", collective="all_reduce")
    # one row per size, each its median; the inspector's header gives the nodes
    assert [(r.size_bytes, r.time_us) for r in log.rows] == [(MIB, 60.0), (4 * MIB, 98.0), (64 * MIB, 566.0)]
    assert (log.nranks, log.nodes, log.collective) == (16, 2, "all_reduce")


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda d: d["coll_perf"].update(coll="AllScatter"), "coll_perf.coll: 'AllScatter' is not allowed"),
        (lambda d: d["coll_perf"].update(coll_exec_time_us="fast"), "coll_perf.coll_exec_time_us: 'fast'"),
        (lambda d: d["header"].update(n_ranks=0), "header.n_ranks: 0 is not allowed; expected an integer >= 1"),
        (lambda d: d["header"].update(nnodes=32), "header.nnodes: 32 is not allowed; expected at most n_ranks"),
        (lambda d: d.pop("coll_perf"), "coll_perf: None is not allowed"),
        (lambda d: d["coll_perf"].update(coll_timing_source="wall"), "coll_timing_source: 'wall'"),
    ],
)
def test_bad_records_name_the_line_and_field(change, needle):
    lines = inspector_trace_text().splitlines()
    data = json.loads(lines[2])
    change(data)
    lines[2] = json.dumps(data)
    with pytest.raises(ValueError) as info:
        parse_inspector_json("\n".join(lines), name="t")
    assert str(info.value).startswith("t line 3: ") and needle in str(info.value), str(info.value)


def test_not_json_and_nothing_to_compare():
    with pytest.raises(ValueError, match="t line 2: not JSON"):
        parse_inspector_json(inspector_trace_text().splitlines()[0] + '\n{"header": ', name="t")
    p2p_only = inspector_trace_text().splitlines()[1]
    with pytest.raises(ValueError, match=r"no collective records .*\(1 point-to-point"):
        parse_inspector_json(p2p_only, name="t")


def test_validate_data_compares_and_reports_nccl_channels(capsys, trace_file, tmp_path):
    rows_path = tmp_path / "rows.csv"
    code, out, err = run(capsys, "validate", "--data", trace_file, "--system", "dgx-h100", "--rows", rows_path)
    assert code == 0, err
    assert "inspector.jsonl" in out and "NCCL's recorded choice" in out
    rows = list(csv.DictReader(rows_path.open()))
    assert [(r["collective"], int(r["size_bytes"]), float(r["t_meas_us"])) for r in rows] == [
        ("all_gather", 4 * MIB, 31.0),
        ("all_reduce", MIB, 60.0),
        ("all_reduce", 4 * MIB, 98.0),
        ("all_reduce", 64 * MIB, 566.0),
    ]
    assert [r["nccl_channels"] for r in rows] == ["", "4", "16", ""]
    same = sum(r["nccl_channels"] == r["launched_channels"] for r in rows if r["nccl_channels"])
    assert f"in {same} of 2 row(s)" in out
    code, out, err = run(capsys, "validate", "--data", trace_file)
    assert code == 2 and "system: not given" in err and "inspector JSON" in err


def test_calibrate_takes_one_communicator_shape(capsys, trace_file):
    code, out, err = run(capsys, "calibrate", trace_file, "--system", "dgx-h100", "--quiet")
    assert code == 2 and "2 communicator shape(s) match" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(
        capsys, "calibrate", trace_file, "--system", "dgx-h100", "--collective", "all_reduce", "--quiet"
    )
    assert code == 0, err
    assert out.startswith(f"# fabricsim calibrate {trace_file}: all_reduce on dgx-h100, 2 node(s) x 8 GPUs (16 ranks")
    assert "3 rows" in out.splitlines()[0]
    code, out, err = run(capsys, "calibrate", trace_file, "--collective", "all_reduce", "--quiet")
    assert code == 2 and "system: not given" in err
