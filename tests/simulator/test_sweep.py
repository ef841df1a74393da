"""simulator.studies.sweep and ``fabricsim sweep``: grids expand as documented, one scenario's row is what the
study it names gives, a failing scenario is an error row, and a sweep on a Dask LocalCluster caches each
result, so that an interrupted sweep resumes without recomputing what finished."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simulator.cli import main
from simulator.studies.nccl_tests import run_bench
from simulator.studies.scenario import prepare_step, run_step, step_settings
from simulator.studies.sweep import expand, run_scenario, scenario_key, sweep
from topologies.presets import build_system

SMALL_STEP = {"kind": "step", "model": "llama3-8b", "nodes": 2, "tp": 2, "pp": 2, "global_batch": 16, "seq_len": 2048}


def test_expand_crosses_scenarios_with_the_grid():
    grid = {
        "kind": "bench",
        "size": "1M",
        "grid": {"nodes": [1, 2], "routing": ["ecmp", "spray", "adaptive"]},
        "scenarios": [{"name": "a"}, {"name": "b", "size": "1G"}],
    }
    scenarios = expand(grid)
    # 2 scenarios x 2 nodes x 3 routings, the last list fastest
    assert len(scenarios) == 2 * 2 * 3
    assert [(s["name"], s["nodes"], s["routing"]) for s in scenarios[:4]] == [
        ("a", 1, "ecmp"),
        ("a", 1, "spray"),
        ("a", 1, "adaptive"),
        ("a", 2, "ecmp"),
    ]
    assert {s["size"] for s in scenarios[:6]} == {"1M"} and {s["size"] for s in scenarios[6:]} == {"1G"}
    assert expand({"kind": "bench", "size": "1M", "grid": {"size": ["2M"]}}) == [{"kind": "bench", "size": "2M"}]
    for bad, field in (
        ({"grid": {"nodes": [1, 2]}, "scenarios": [{"nodes": 4}]}, r"grid.scenarios\[0\].nodes: 4 is not allowed"),
        ({"grid": {"nodes": 4}}, "grid.nodes"),
        ({"grid": {"nodes": []}}, "grid.nodes"),
        ({"scenarios": []}, "grid.scenarios"),
        ({"scenarios": [1]}, "grid.scenarios"),
    ):
        with pytest.raises(ValueError, match=field):
            expand(bad)


def test_the_cache_key_is_the_scenario_whatever_its_order():
    a = {"kind": "bench", "nodes": 2, "size": "1M"}
    b = {"size": "1M", "nodes": 2, "kind": "bench"}
    assert scenario_key(a) == scenario_key(b) != scenario_key(a | {"nodes": 4})
    assert scenario_key(a, "v1") != scenario_key(a, "v2")  # another source: another key


def test_a_bench_row_is_the_bench_tables_row():
    row = run_scenario({"kind": "bench", "collective": "all_gather", "nodes": 2, "size": "4M", "routing": "spray"})
    from simulator.config import SimConfig

    (expected,) = run_bench(
        "all_gather", system=build_system("dgx-h100", nodes=2), nodes=2, sizes=["4M"], config=SimConfig(routing="spray")
    )
    assert row["status"] == "ok" and row["gpus"] == 16
    assert (row["size_bytes"], row["time_s"], row["busbw_GBps"], row["algorithm"], row["protocol"]) == (
        expected.size_bytes,
        expected.time_us * 1e-6,
        expected.busbw_GBps,
        expected.algorithm,
        expected.protocol,
    )


def test_a_step_row_is_the_steps_result():
    row = run_scenario(SMALL_STEP)
    fields = {k: v for k, v in SMALL_STEP.items() if k != "kind"}
    result = run_step(prepare_step(step_settings(fields), environ={}))
    assert row["status"] == "ok"
    assert (row["step_time_s"], row["exposed_comm_s"], row["gpus"]) == (
        result.step_time_s,
        result.exposed_comm_s,
        16,
    )
    assert row["tp_exposed_s"] == result.breakdown["group"]["tp"]["exposed_s"]
    # NCCL settings are fields of the scenario (the process environment does not apply)
    ring = run_scenario(SMALL_STEP | {"NCCL_ALGO": "Ring"})
    assert ring["status"] == "ok" and ring["step_time_s"] != row["step_time_s"]


@pytest.mark.parametrize(
    "scenario, message",
    [
        ({"kind": "bench", "nodes": 0}, "nodes: 0 is not allowed"),
        ({"kind": "bench", "layers": 4}, "'layers' is not a field of a bench scenario"),
        ({"kind": "train"}, "kind: 'train' is not allowed"),
        (SMALL_STEP | {"trace": "x.json"}, "trace: 'x.json' is not allowed; expected no value in a sweep"),
        # 16 GPUs cannot hold tp 3 x pp 2
        (SMALL_STEP | {"tp": 3}, "ParallelismSpec.gpus: 16 is not allowed; expected a multiple of tp x cp x pp"),
        (SMALL_STEP | {"trace-ranks": "0-7"}, "trace_ranks: '0-7' is not allowed; expected no value in a sweep"),
        ({"kind": "bench", "sharp": "no"}, "sharp: 'no' is not allowed; expected True or False"),
        ({"kind": "bench", "congestion": "dcqcn"}, "congestion: 'dcqcn' is not allowed; expected a list"),
        ({"kind": "bench", "size": "abc"}, "size: 'abc' is not allowed; expected a byte count"),
        ({"kind": "bench", "collective": "foo"}, "collective: 'foo' is not known"),
        ({"kind": "bench", "NCCL_ALOG": "Ring"}, "NCCL_ALOG: 'Ring' is not allowed; expected no value: not an NCCL"),
        ({"kind": "bench", "global-batch": 4, "global_batch": 4}, "expected one spelling of 'global_batch'"),
        ({"kind": "step", "model": "nope"}, "model preset: 'nope' is not known"),
    ],
)
def test_a_refused_scenario_is_an_error_row(scenario, message):
    row = run_scenario(scenario)
    assert row["status"] == "error" and message in row["error"] and "\n" not in row["error"]


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local:
        with Client(local) as client:
            yield client


class _Interrupt:
    """A progress callback that stops the sweep (as Ctrl-C would) once ``after`` results have arrived."""

    def __init__(self, after: int):
        self.after, self.calls = after, []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))
        if len(self.calls) == self.after:
            raise KeyboardInterrupt


def test_an_interrupted_sweep_resumes_from_its_cache(cluster, tmp_path):
    # 5 collectives x 2 server counts x 20 sizes = 200 scenarios (small, so that the test is quick)
    sizes = [f"{1 << k}K" for k in range(20)]
    grid = {
        "kind": "bench",
        "grid": {
            "collective": ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"],
            "nodes": [1, 2],
            "size": sizes,
        },
    }
    stop = _Interrupt(after=60)
    with pytest.raises(KeyboardInterrupt):
        sweep(grid, client=cluster, cache_dir=tmp_path, progress=stop)
    assert stop.calls[-1] == (60, 200)
    stored = {p.name for p in tmp_path.glob("*.json")}
    assert len(stored) == 60  # every result that arrived is kept, written whole
    assert not list(tmp_path.glob("*.tmp"))
    counted = []
    table = sweep(grid, client=cluster, cache_dir=tmp_path, progress=lambda done, total: counted.append(done))
    assert len(table) == 200 and (table["status"] == "ok").all()
    assert int(table["cached"].sum()) == len(stored)  # nothing that finished is computed again
    assert counted[0] == len(stored) + 1 and counted[-1] == 200  # progress starts at the cached count
    # a cached row is what computing it gives
    first = table[table["cached"]].iloc[0]
    scenario = {"kind": "bench", "collective": first["collective"], "nodes": int(first["nodes"]), "size": first["size"]}
    fresh = run_scenario(scenario)
    assert (first["time_s"], first["busbw_GBps"]) == (fresh["time_s"], fresh["busbw_GBps"])
    again = sweep(grid, client=cluster, cache_dir=tmp_path)
    assert again["cached"].all()  # a repeated sweep is read back
    pd.testing.assert_frame_equal(again.drop(columns="cached"), table.drop(columns="cached"))


def test_the_sweep_command_prints_and_writes_the_table(capsys, tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('kind = "bench"\ncollective = "all_reduce"\n[grid]\nsize = ["1M", "64M"]\nnodes = [1, 0]\n')
    csv, parquet = tmp_path / "t.csv", tmp_path / "t.parquet"
    argv = ["sweep", str(grid), "--workers", "1", "--cache", str(tmp_path / "cache"), "--out", str(csv)]
    assert main([*argv, "--out", str(parquet)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# fabricsim sweep") and "4 scenarios, 0 read from the cache, 2 failed" in out
    assert "nodes: 0 is not allowed" in out  # the failing rows say why
    written = pd.read_csv(csv)
    assert list(written["status"]) == ["ok", "error", "ok", "error"]
    pd.testing.assert_frame_equal(pd.read_parquet(parquet).drop(columns="error"), written.drop(columns="error"))
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["cached"] for r in rows] == [True] * 4 and rows[0]["busbw_GBps"] == written["busbw_GBps"][0]
    assert main(["sweep", str(grid), "--out", str(tmp_path / "t.txt")]) == 2
    assert "out: " in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert main(["sweep", str(grid), "--cache", str(blocked)]) == 2
    assert capsys.readouterr().err.startswith(f"fabricsim: error: cache: {str(blocked)!r} is not allowed")
    assert main(["sweep", str(grid), "--scheduler", "tcp://127.0.0.1:9", "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fabricsim: error: scheduler: 'tcp://127.0.0.1:9' cannot be reached") and err.count("\n") == 1
