"""simulator.studies.compare and ``fabricsim compare``: designs x workloads as one sweep, each row what the
study gives for that scenario, the hardware of each design, and the sentence that says why it ties or differs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.studies.compare import DEFAULT_DESIGNS, compare, explain, load_designs
from simulator.studies.sweep import run_scenario
from topologies.cost import cost_summary
from topologies.presets import build_system

# Two servers: rail-optimised leaves (every GPU's traffic stays on its rail's leaf) against top-of-rack leaves at
# 2:1 (cross-server traffic climbs to the spines through half the uplinks). The step's groups stay inside a
# server but for its data-parallel ring.
SPEC = {
    "system": "dgx-h100",
    "nodes": 2,
    "designs": {
        "rail-optimised": {},
        "same again": {},
        "top-of-rack 2:1": {"rail_optimised": False, "oversubscription": 2.0},
    },
    "workloads": {
        "all_reduce 64 MiB": {"kind": "bench", "collective": "all_reduce", "size": "64M"},
        "step": {"kind": "step", "model": "llama3-8b", "tp": 8, "global_batch": 4, "seq_len": 1024},
    },
}


@pytest.fixture(scope="module")
def comparison():
    return compare(SPEC, workers=1, cache=False)


def test_rows_are_the_scenarios_results(comparison):
    table = comparison.table
    assert len(table) == 3 * 2 and (table["status"] == "ok").all()
    row = table[(table["workload"] == "all_reduce 64 MiB") & (table["design"] == "top-of-rack 2:1")].iloc[0]
    fresh = run_scenario(
        {"kind": "bench", "collective": "all_reduce", "size": "64M", "nodes": 2, "rail_optimised": False}
        | {"oversubscription": 2.0}
    )
    assert (row["time_s"], row["busbw_GBps"]) == (fresh["time_s"], fresh["busbw_GBps"])
    summary = comparison.summary()
    assert list(summary.index) == list(SPEC["designs"])
    assert summary.loc["same again"].equals(summary.loc["rail-optimised"])


def test_hardware_is_each_designs_cost_summary(comparison):
    tor = cost_summary(build_system("dgx-h100", nodes=2, rail_optimised=False, oversubscription=2.0))
    assert comparison.hardware.loc["top-of-rack 2:1", "switches"] == tor.switches
    assert comparison.hardware.loc["top-of-rack 2:1", "transceivers per GPU"] == tor.transceivers_per_gpu


def test_explain_says_why_designs_tie_or_differ(comparison):
    bench = dict(zip(comparison.designs, explain(comparison, "all_reduce 64 MiB")))
    assert bench["same again"].startswith("same again: ") and "(+0.0%)" in bench["same again"]
    tor = comparison.summary().loc["top-of-rack 2:1", "all_reduce 64 MiB: busbw GB/s"]
    base = comparison.summary().loc["rail-optimised", "all_reduce 64 MiB: busbw GB/s"]
    assert f"({tor / base - 1:+.1%})" in bench["top-of-rack 2:1"]
    # NVLS trees on 2 servers: the NVLink into the NVSwitch bounds both designs alike (hence the tie)
    assert all("its busiest link is an NVLink (s0." in bench[d] for d in ("rail-optimised", "top-of-rack 2:1"))
    step = dict(zip(comparison.designs, explain(comparison, "step")))
    # the same design: a tie, and no byte climbs above the rail-optimised leaves
    assert "a tie. No byte climbs above the leaves" in step["same again"]
    assert "GB of its traffic climbs above the leaves" in step["rail-optimised"]
    assert comparison.format().startswith("# fabricsim compare: 3 designs x 2 workloads")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"designs": {}}, "designs: {} is not allowed; expected a table of named tables"),
        ({"designs": {"a": {"tp": 2}}}, "designs.a.tp: 2 is not allowed; expected a fabric field"),
        ({"baseline": "nope"}, "baseline: 'nope' is not allowed; expected one of the designs"),
        ({"workloads": {"w": 3}}, "workloads: {'w': 3} is not allowed"),
        (
            {"workloads": {"w": {"topology": "fat-tree"}}},
            "workloads.w.topology: 'fat-tree' is not allowed; expected no",
        ),
        ({"designs": {"a | b": {}}}, "designs.a | b: 'a | b' is not allowed; expected a name without"),
        ({"designs": {"a": {"topology": "ring"}}}, "designs.a: topology: 'ring' is not"),
        (
            {"designs": {"a": {}, "b": {"match_cost": "c"}}},
            "designs.b.match_cost: 'c' is not allowed; expected one of 'a'",
        ),
        (
            {"designs": {"a": {"match_power": "b"}, "b": {"match_cost": "a"}, "c": {}}},
            "designs.a.match_power: 'b' is not allowed; expected one of 'c'",
        ),
        (
            {"designs": {"a": {}, "b": {"match_cost": "a", "match_power": "a"}}},
            "designs.b.match_cost: 'a' is not allowed; expected one of match_cost or match_power, not both",
        ),
        ({"designs": {"a": {}, "b": {"match_cost": ["a"]}}}, "designs.b.match_cost: ['a'] is not allowed"),
        ({"match_cost": "a"}, "match_cost: 'a' is not allowed; expected no value at the top level"),
        (
            {"designs": {"a": {}, "b": {"match_cost": "a", "topology": "rail-only", "planes": 2}}},
            "designs.b.planes: 2 is not allowed; expected 1 for a rail-only sized to another design",
        ),
        (
            {"designs": {"a": {"topology": "ring"}, "b": {"match_cost": "a"}}},
            "designs.a: topology: 'ring' is not",
        ),
    ],
)
def test_a_comparison_that_cannot_run_is_refused_before_any_work(change, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        compare(SPEC | change, workers=1, cache=False)


def test_hardware_has_capex_and_power_and_a_design_sized_to_anothers_cost():
    # 4 DGX H100: the leaf-spine at 2:1 costs 472,608 USD (tests/simulator/test_sizing.py derives it); sized to
    # it, a leaf-spine takes the least oversubscription with 2 uplinks per leaf of 4 NICs, R = 43/21
    spec = {
        "system": "dgx-h100",
        "nodes": 4,
        "designs": {"2:1": {"oversubscription": 2.0}, "at its cost": {"match_cost": "2:1"}},
        "workloads": {"ar": {"kind": "bench", "collective": "all_reduce", "size": "8M"}},
    }
    result = compare(spec, workers=1, cache=False)
    assert (result.table["status"] == "ok").all()
    assert list(result.hardware["capex USD"]) == [472_608.0, 472_608.0]
    assert result.sized == {"at its cost": "sized to the cost of '2:1': oversubscription 2.04762 (100.0% of its capex)"}
    row = result.table[result.table["design"] == "at its cost"].iloc[0]
    assert row["oversubscription"] == 43 / 21
    summary = result.summary()
    assert summary.loc["2:1", "ar: USD per GB/s"] == 472_608.0 / summary.loc["2:1", "ar: busbw GB/s"]
    assert "at its cost: sized to the cost of '2:1'" in result.format()


def test_the_shipped_comparison_loads():
    spec = load_designs(DEFAULT_DESIGNS)
    assert spec["nodes"] * 8 == 4096 and spec["baseline"] in spec["designs"] and len(spec["workloads"]) == 3
    assert spec["designs"]["fat-tree at the dragonfly's cost"]["match_cost"] == "dragonfly, UGAL"
    assert load_designs(Path(__file__).parents[2] / "examples" / "designs.toml") == spec


def test_the_compare_command_prints_and_writes(capsys, tmp_path):
    designs = tmp_path / "designs.toml"
    designs.write_text(
        'system = "dgx-h100"\nnodes = 2\n[designs.rail]\n[designs.tor]\nrail_optimised = false\n'
        'oversubscription = 2.0\n[workloads.ar]\nkind = "bench"\ncollective = "all_reduce"\nsize = "8M"\n'
    )
    report, table = tmp_path / "r.png", tmp_path / "t.csv"
    argv = ["compare", str(designs), "--workers", "1", "--no-cache", "--report", str(report), "--out", str(table)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("# fabricsim compare: 2 designs x 1 workloads") and "ar:\n  rail: " in out
    assert report.read_bytes().startswith(b"\x89PNG") and table.read_text().startswith("name,")
    assert main(["compare", str(designs), "--report", str(tmp_path / "r.svg")]) == 2
    assert "report: " in capsys.readouterr().err
