"""`fabricsim validate`: the error table per series and size regime, its formats, --series, --data, --rows,
--plot."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

import simulator.validation.collectives as validation
from simulator.cli import main
from simulator.validation.collectives import (
    ROW_COLUMNS,
    SERIES,
    TABLE_COLUMNS,
    Comparison,
    compare,
    data_series,
    format_rows,
    read_table,
    rows_frame,
    run_validation,
    select_series,
    summarise,
)

A100_TABLE = "a100_sxm4_80gb_1node_8gpu.csv"
A100_MPIRUN = "A100 8 GPU all_reduce, mpirun -np 8"
REGIMES = ("latency", "mid", "bandwidth", "all")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module", autouse=True)
def simulate_each_series_once():
    """compare() memoised for this module: the CLI runs below replay the same series (deterministic
    simulations), so each is simulated once; the CLI's own path (selection, summaries, formats, plots)
    runs every time."""
    original = validation.compare
    cache = {}

    def compare_once(series, *, net_model="flow", **options):
        key = (series, net_model, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = original(series, net_model=net_model, **options)
        return list(cache[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validation, "compare", compare_once)
        yield


@pytest.fixture(scope="module")
def reports():
    return {r.series.name: r for r in run_validation()}


@pytest.fixture(scope="module")
def table():
    """One full `validate` run (table format), shared by the tests below."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate"])
    return code, out.getvalue(), err.getvalue()


def test_table_has_one_line_per_series_and_a_pooled_line(table, reports):
    code, out, err = table
    assert code == 0 and err == ""
    lines = out.splitlines()
    body = [
        line
        for line in lines
        if line and not line.startswith(("#", "-")) and "median" not in line and "latency (" not in line
    ]
    names = [s.name for s in SERIES] + ["all tables"]
    assert len(body) == len(names)
    for line, name in zip(body, names):
        assert line.startswith(name)
        fields = line[len(name) :].split()
        assert len(fields) == 12  # n, median, p90 for latency, mid, bandwidth, all sizes
        summary = (
            summarise([c for r in reports.values() for c in r.comparisons])
            if name == "all tables"
            else reports[name].summary
        )
        for i, regime in enumerate(REGIMES):
            n, median, p90 = fields[3 * i : 3 * i + 3]
            assert int(n) == summary[regime]["n"]
            for text, value in ((median, summary[regime]["median"]), (p90, summary[regime]["p90"])):
                assert text == ("-" if math.isnan(value) else f"{value:.1%}")


def test_plot_writes_one_png_per_series(capsys, tmp_path):
    chosen = select_series("A100")
    code, out, err = run(capsys, "validate", "--series", "A100", "--plot", tmp_path / "plots")
    assert code == 0 and err == ""
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert len(pngs) == len(chosen) == len({p.name for p in pngs}) == 3
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000 for p in pngs)
    assert f"wrote {len(chosen)} plot(s)" in out
    assert list(tmp_path.iterdir()) == [tmp_path / "plots"]  # nothing written elsewhere


def test_csv_numbers_are_summarise_of_compare(capsys, reports):
    code, out, err = run(capsys, "validate", "--format", "csv")
    assert code == 0 and err == ""
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["table"] for r in rows] == [s.name for s in SERIES] + ["all tables"]
    pooled = summarise([c for r in reports.values() for c in r.comparisons])
    for row in rows:
        summary = pooled if row["table"] == "all tables" else reports[row["table"]].summary
        for regime in REGIMES:
            assert int(row[f"{regime}_n"]) == summary[regime]["n"]
            for stat in ("median", "p90"):
                value = summary[regime][stat]
                if math.isnan(value):
                    assert row[f"{regime}_{stat}"] == ""
                else:  # written with 6 significant digits
                    assert float(row[f"{regime}_{stat}"]) == pytest.approx(value, rel=1e-5)
    # the pooled line counts every row of every series
    assert int(rows[-1]["all_n"]) == sum(int(r["all_n"]) for r in rows[:-1])


def test_series_filter_and_json(capsys, reports):
    code, out, _ = run(capsys, "validate", "--series", "a100", "--format", "json")
    assert code == 0
    data = json.loads(out)
    names = [t["name"] for t in data["tables"]]
    assert names == [s.name for s in SERIES if "a100" in s.name.lower()] and len(names) == 3
    assert data["all_tables"]["all"]["n"] == sum(t["all"]["n"] for t in data["tables"])
    for table in data["tables"]:
        expected = reports[table["name"]].summary
        assert table["bandwidth"]["median"] == pytest.approx(expected["bandwidth"]["median"])
        assert table["latency"]["n"] == expected["latency"]["n"]
    assert data["latency_max_bytes"] == 64 * 1024 and data["bandwidth_min_bytes"] == 64 * 1024 * 1024


def _comparison(size_bytes: int, t_pred_us: float) -> Comparison:
    """A hand-made compared row measured at 100 us (its error is t_pred / 100 - 1)."""
    return Comparison(
        series="hand-made",
        collective="all_reduce",
        gpu="A100",
        nranks=8,
        nnodes=1,
        size_bytes=size_bytes,
        t_meas_us=100.0,
        t_pred_us=t_pred_us,
        busbw_meas_GBps=1.0,
        busbw_pred_GBps=1.0,
        algorithm="ring",
        protocol="Simple",
        channels=8,
        source="hand-made",
    )


def test_regimes_split_at_64_kib_and_64_mib():
    assert REGIMES == tuple(name for name, _ in validation.REGIMES)
    # sizes on both sides of each boundary; errors t_pred / 100 us - 1
    rows = [
        _comparison(1024, 110.0),  # latency, +10%
        _comparison(64 * 1024 - 1, 80.0),  # latency, -20%
        _comparison(64 * 1024, 130.0),  # mid, +30%
        _comparison(1 << 20, 95.0),  # mid, -5%
        _comparison(64 * 1024 * 1024 - 1, 60.0),  # mid, -40%
        _comparison(64 * 1024 * 1024, 102.0),  # bandwidth, +2%
        _comparison(1 << 30, 99.0),  # bandwidth, -1%
    ]
    assert [c.regime for c in rows] == ["latency"] * 2 + ["mid"] * 3 + ["bandwidth"] * 2
    summary = summarise(rows)
    assert list(summary) == list(REGIMES)
    # p90 is the sorted |error| at index round(0.9 (n - 1)):
    # latency |e| 0.10, 0.20: median 0.15, p90 index round(0.9) = 1 -> 0.20
    # mid 0.05, 0.30, 0.40: median 0.30, p90 index round(1.8) = 2 -> 0.40
    # bandwidth 0.01, 0.02: median 0.015, p90 index 1 -> 0.02
    # all 0.01, 0.02, 0.05, 0.10, 0.20, 0.30, 0.40: median 0.10, p90 index round(5.4) = 5 -> 0.30
    expected = {
        "latency": (2, 0.15, 0.20),
        "mid": (3, 0.30, 0.40),
        "bandwidth": (2, 0.015, 0.02),
        "all": (7, 0.10, 0.30),
    }
    for regime, (n, median, p90) in expected.items():
        assert summary[regime]["n"] == n
        assert summary[regime]["median"] == pytest.approx(median) and summary[regime]["p90"] == pytest.approx(p90)
    empty = summarise(rows[:2])["mid"]
    assert empty["n"] == 0 and math.isnan(empty["median"]) and math.isnan(empty["p90"])


# a hand-made A100 table: one all_reduce row on each side of 64 KiB and of 64 MiB (float all_reduce sizes are
# multiples of 4 bytes, so 64 KiB - 4 and 64 MiB - 4 are the sizes just below the boundaries nccl-tests runs)
TINY_SIZES_US = ((64 * 1024 - 4, 30.0), (64 * 1024, 31.0), (64 * 1024 * 1024 - 4, 450.0), (64 * 1024 * 1024, 460.0))


@pytest.fixture(scope="module")
def tiny_table(tmp_path_factory) -> Path:
    rows = [
        {
            "collective": "all_reduce",
            "nranks": "8",
            "nnodes": "1",
            "gpu": "A100-SXM4-80GB",
            "interconnect": "NVLink",
            "size_bytes": str(size),
            "time_us": str(time_us),
            "algbw_GBps": "",
            "busbw_GBps": "",
            "source": "hand-made",
            "notes": "",
        }
        for size, time_us in TINY_SIZES_US
    ]
    return _write_table(tmp_path_factory.mktemp("tiny") / "tiny.csv", rows)


def test_tiny_table_rows_and_regimes(capsys, tmp_path, tiny_table):
    code, out, err = run(capsys, "validate", "--data", tiny_table, "--format", "csv", "--rows", tmp_path / "rows.csv")
    assert code == 0 and err == ""
    summary, pooled = list(csv.DictReader(io.StringIO(out)))
    assert (summary["table"], pooled["table"]) == ("tiny.csv", "all tables")
    assert list(summary.values())[1:] == list(pooled.values())[1:]  # one table: pooled is that table
    assert [summary[f"{r}_n"] for r in REGIMES] == ["1", "2", "1", "4"]
    with (tmp_path / "rows.csv").open(newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames or ()) == ROW_COLUMNS
        rows = list(reader)
    assert [(int(r["size_bytes"]), float(r["t_meas_us"])) for r in rows] == list(TINY_SIZES_US)
    assert [r["regime"] for r in rows] == ["latency", "mid", "mid", "bandwidth"]
    for r in rows:
        assert (r["table"], r["collective"], r["gpu"], r["system"]) == (
            "tiny.csv",
            "all_reduce",
            "A100-SXM4-80GB",
            "dgx-a100",
        )
        assert (int(r["nranks"]), int(r["nnodes"])) == (8, 1) and r["source"] == "hand-made"
        size, t_meas, t_pred = int(r["size_bytes"]), float(r["t_meas_us"]), float(r["t_pred_us"])
        # busbw = size / t x 2 (n - 1) / n, all_reduce on 8 ranks: x 7/4
        assert float(r["busbw_meas_GBps"]) == pytest.approx(size / t_meas * 1e-3 * 7 / 4)
        assert float(r["busbw_pred_GBps"]) == pytest.approx(size / t_pred * 1e-3 * 7 / 4)
        assert float(r["error"]) == t_pred / t_meas - 1
        assert float(r["error_pct"]) == pytest.approx(100 * float(r["error"]))
        assert r["algorithm"] in ("ring", "tree") and r["protocol"] in ("LL", "LL128", "Simple")
        assert int(r["channels"]) >= 1
    # the summary's mid median is the median (here the mean) of the two mid rows' |error|
    mid = sorted(abs(float(r["error"])) for r in rows if r["regime"] == "mid")
    assert float(summary["mid_median"]) == pytest.approx((mid[0] + mid[1]) / 2, rel=1e-5)
    assert float(summary["mid_p90"]) == pytest.approx(mid[1], rel=1e-5)  # index round(0.9 x 1) = 1
    # the same rows as JSON (records of the same columns, the same numbers) and as Parquet
    code, out, _ = run(capsys, "validate", "--data", tiny_table, "--rows", tmp_path / "rows.json")
    assert code == 0 and out.endswith(f"# wrote 4 rows to {tmp_path / 'rows.json'}\n")
    records = json.loads((tmp_path / "rows.json").read_text())
    assert [list(r) for r in records] == [list(ROW_COLUMNS)] * 4
    assert [str(r[k]) for r in records for k in ROW_COLUMNS] == [r[k] for r in rows for k in ROW_COLUMNS]
    code, _, _ = run(capsys, "validate", "--data", tiny_table, "--format", "json", "--rows", tmp_path / "rows.parquet")
    assert code == 0
    frame = pd.read_parquet(tmp_path / "rows.parquet")
    assert list(frame.columns) == list(ROW_COLUMNS) and frame["error"].tolist() == [r["error"] for r in records]
    # from Python: the same rows of the same table as a DataFrame
    python = rows_frame(run_validation((data_series(tiny_table),)))
    assert python.astype(str).values.tolist() == [[r[k] for k in ROW_COLUMNS] for r in rows]
    assert python["size_bytes"].dtype.kind == python["channels"].dtype.kind == "i"


def test_row_formats():
    with pytest.raises(ValueError, match="format: 'xml' is not known; expected one of csv, json"):
        format_rows((), format="xml")
    assert format_rows(()) == ",".join(ROW_COLUMNS) + "\n" and format_rows((), format="json") == "[]\n"
    assert list(rows_frame(())) == list(ROW_COLUMNS)


def test_json_summary_has_every_regime(capsys, tiny_table):
    code, out, _ = run(capsys, "validate", "--data", tiny_table, "--format", "json")
    assert code == 0
    data = json.loads(out)
    (table,) = data["tables"]
    assert set(table) == {"name", "file", "settings", *REGIMES}
    assert set(data["all_tables"]) == set(REGIMES)
    assert [table[r]["n"] for r in REGIMES] == [1, 2, 1, 4]
    assert all(set(table[r]) == {"n", "median", "p90"} for r in REGIMES)


def _stats(errors: list[float]) -> tuple[int, float, float]:
    """n, median and p90 (sorted |error| at index round(0.9 (n - 1))) recomputed from signed errors."""
    values = sorted(abs(e) for e in errors)
    if not values:
        return 0, math.nan, math.nan
    return len(values), statistics.median(values), values[round(0.9 * (len(values) - 1))]


def test_summaries_are_the_per_row_table_recomputed(capsys, tmp_path, reports):
    code, out, err = run(capsys, "validate", "--format", "csv", "--rows", tmp_path / "rows.csv")
    assert code == 0 and err == ""
    summary = {row["table"]: row for row in csv.DictReader(io.StringIO(out))}
    rows = pd.read_csv(tmp_path / "rows.csv")
    frame = rows_frame(tuple(reports.values()))
    assert len(rows) == len(frame) == sum(len(r.comparisons) for r in reports.values())
    assert rows["error"].tolist() == frame["error"].tolist()  # the CSV keeps every digit
    assert list(rows["table"].unique()) == [s.name for s in SERIES]
    for table in [s.name for s in SERIES] + ["all tables"]:
        chosen = rows if table == "all tables" else rows[rows["table"] == table]
        for regime in REGIMES:
            in_regime = chosen if regime == "all" else chosen[chosen["regime"] == regime]
            n, median, p90 = _stats(in_regime["error"].tolist())
            assert int(summary[table][f"{regime}_n"]) == n
            for stat, value in (("median", median), ("p90", p90)):
                assert summary[table][f"{regime}_{stat}"] == ("" if math.isnan(value) else f"{value:.6g}")


def _write_table(path: Path, rows: list[dict[str, str]], columns=TABLE_COLUMNS) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _mpirun_rows() -> list[dict[str, str]]:
    return [r for r in read_table(A100_TABLE) if "run 2" in r["source"]]


def test_data_file_gives_the_same_errors_as_the_shipped_series(capsys, tmp_path, reports):
    # the mpirun series is every run-2 row of the A100 table with NCCL's own choices and -g 1:
    # the same rows as a user's file give the same summary
    path = _write_table(tmp_path / "mine.csv", _mpirun_rows())
    code, out, err = run(capsys, "validate", "--data", path, "--format", "csv")
    assert code == 0 and err == ""
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["table"] == "mine.csv"
    expected = reports[A100_MPIRUN].summary
    for regime in REGIMES:
        assert int(rows[0][f"{regime}_n"]) == expected[regime]["n"]
        assert float(rows[0][f"{regime}_median"]) == pytest.approx(expected[regime]["median"], rel=1e-5)


def test_data_file_with_system_option_and_unknown_gpu(capsys, tmp_path, reports):
    rows = [dict(r, gpu="our lab's GPUs") for r in _mpirun_rows()]
    path = _write_table(tmp_path / "lab.csv", rows)
    code, _, err = run(capsys, "validate", "--data", path)
    assert code == 2 and "gpu" in err and "line 2" in err
    code, out, err = run(capsys, "validate", "--data", path, "--system", "dgx-a100", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["tables"][0]["all"]["median"] == pytest.approx(reports[A100_MPIRUN].summary["all"]["median"])
    assert "system dgx-a100" in data["tables"][0]["settings"]


def test_data_file_with_busbw_only_rows(tmp_path):
    # time_us may be empty when busbw is given: t = size / (busbw / busbw factor), all_reduce factor 2(n-1)/n
    rows = [dict(r, time_us="") for r in _mpirun_rows() if int(r["size_bytes"]) >= 1 << 26]
    comparisons = compare(data_series(_write_table(tmp_path / "busbw.csv", rows)))
    for c, r in zip(comparisons, rows):
        algbw = float(r["busbw_GBps"]) / (2 * 7 / 8)
        assert c.t_meas_us == pytest.approx(int(r["size_bytes"]) / (algbw * 1e9) * 1e6)


def _bad(rows, line, **change):
    rows = [dict(r) for r in rows]
    rows[line - 2].update(change)
    return rows


@pytest.mark.parametrize(
    "case,needles",
    [
        ("missing_column", ("line 1", "size_bytes", "missing")),
        ("bad_size", ("line 5", "size_bytes", "'6x4'")),
        ("bad_time", ("line 3", "time_us", "'fast'")),
        ("negative_time", ("line 4", "time_us", "'-1'")),
        ("unknown_collective", ("line 7", "collective", "'allreduse'")),
        ("bad_nranks", ("line 2", "nranks", "'eight'")),
        ("uneven_nodes", ("line 2", "nranks", "nnodes")),
        ("no_time_no_busbw", ("line 6", "busbw_GBps", "time_us is empty")),
        ("unknown_gpu", ("line 9", "gpu", "'MI300X'")),
        ("too_many_gpus", ("line 2", "16 GPUs", "gpus_per_node")),
        ("no_rows", ("no data rows",)),
        ("no_file", ("no such file",)),
    ],
)
def test_bad_data_file_is_one_line_naming_file_line_and_field(capsys, tmp_path, case, needles):
    rows = _mpirun_rows()
    path = tmp_path / f"{case}.csv"
    if case == "missing_column":
        _write_table(path, rows, columns=[c for c in TABLE_COLUMNS if c != "size_bytes"])
    elif case == "no_file":
        path = tmp_path / "absent.csv"
    elif case == "no_rows":
        _write_table(path, [])
    else:
        change = {
            "bad_size": (5, {"size_bytes": "6x4"}),
            "bad_time": (3, {"time_us": "fast"}),
            "negative_time": (4, {"time_us": "-1"}),
            "unknown_collective": (7, {"collective": "allreduse"}),
            "bad_nranks": (2, {"nranks": "eight"}),
            "uneven_nodes": (2, {"nranks": "9", "nnodes": "2"}),
            "no_time_no_busbw": (6, {"time_us": "", "busbw_GBps": ""}),
            "unknown_gpu": (9, {"gpu": "MI300X"}),
            "too_many_gpus": (2, {"nranks": "16"}),
        }[case]
        _write_table(path, _bad(rows, change[0], **change[1]))
    code, out, err = run(capsys, "validate", "--data", path)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fabricsim: error:") and "Traceback" not in err
    assert path.name in lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["validate", "--system", "dgx-a100"], "--data"),
        (["validate", "--algo", "ring"], "--data"),
        (["validate", "--series", "no such series"], "series"),
        (["validate", "--format", "xml"], "format"),
        (["validate", "--channels", "0"], "channels"),
        (
            ["validate", "--rows", "rows.txt"],
            "rows: 'rows.txt' is not allowed; expected a file name ending in .csv, .json, .parquet",
        ),
        (["validate", "--rows", "no/such/dir/rows.csv"], "rows: 'no/such/dir/rows.csv' is not allowed"),
        (["validate", "--rows", "."], "rows: '.' is not allowed"),
    ],
)
def test_bad_validate_options_are_one_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err


def test_read_table_takes_a_path_or_a_shipped_name(tmp_path):
    shipped = read_table(A100_TABLE)
    copy = tmp_path / A100_TABLE
    _write_table(copy, shipped)
    assert read_table(copy) == read_table(str(copy)) == shipped


def test_select_series():
    assert select_series() == SERIES
    assert [s.name for s in select_series("MPIRUN")] == [A100_MPIRUN]
    with pytest.raises(ValueError, match="matches no series"):
        select_series("zzz")
