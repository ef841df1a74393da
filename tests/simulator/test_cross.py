"""simulator.validation.cross and ``fabricsim validate --cross``: constants fitted on measured tables, fitted
again on a grid, pooled and leaving one table out."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from simulator.cli import main
from simulator.collectives import nccl_model
from simulator.validation.collectives import SERIES, compare
from simulator.validation.cross import FITS, MOVES, cross_validate, format_cross, held_out_pool

PROXY = next(f for f in FITS if f.attribute == "PROXY_STEP_US_INTEL")
TWO_TABLES = tuple(s for s in SERIES if s.name in ("2x DGX A100 HDR all_reduce", "2x B200 NDR sendrecv"))
GRID = (0.0, 1.25, 3.0)


def test_set_to_sets_the_constant_and_restores_it():
    kept = nccl_model.PROXY_STEP_US_INTEL
    with pytest.raises(RuntimeError), PROXY.set_to(9.0):
        assert nccl_model.PROXY_STEP_US_INTEL == 9.0
        raise RuntimeError("restored all the same")
    assert nccl_model.PROXY_STEP_US_INTEL == kept


@pytest.fixture(scope="module")
def report():
    (r,) = cross_validate([dataclasses.replace(PROXY, grid=GRID)], TWO_TABLES)
    return r


def _median_error(series, step_us):
    # the same rows through SimConfig's own knob (proxy_step_us) rather than the module constant
    rows = [c for c in compare(series, proxy_step_us=step_us) if c.nnodes > 1 and c.regime == "mid"]
    return rows, statistics.median(abs(c.error) for c in rows)


def test_pooled_and_held_out_values_are_the_grid_minima(report):
    assert len(TWO_TABLES) == 2 and report.tables == tuple(s.name for s in TWO_TABLES)
    rows = {v: {s.name: _median_error(s, v)[0] for s in TWO_TABLES} for v in GRID}
    pooled = {v: statistics.median(abs(c.error) for t in rows[v].values() for c in t) for v in GRID}
    assert report.errors == pytest.approx(pooled, rel=0, abs=0)
    assert report.pooled == min(GRID, key=lambda v: (pooled[v], v))
    assert report.errors[report.pooled] == min(pooled.values())
    for held, other in (TWO_TABLES, TWO_TABLES[::-1]):
        # two tables: the value fitted without one is the other table's own best value
        own = {v: _median_error(other, v)[1] for v in GRID}
        value = min(GRID, key=lambda v: (own[v], v))
        assert report.folds[held.name] == (value, _median_error(held, value)[1], _median_error(held, report.pooled)[1])
    values = [v for v, _, _ in report.folds.values()]
    assert report.moves == (max(values) - min(values) > MOVES * report.pooled)


def test_held_out_pool_replays_each_table_with_its_fold_value(report):
    inside, held = held_out_pool([report], TWO_TABLES)
    # in sample: every row at the code's value; held out: each table at the value fitted on the other one
    rows = [c for s in TWO_TABLES for c in compare(s)]
    away = [c for s in TWO_TABLES for c in compare(s, proxy_step_us=report.folds[s.name][0])]
    for name, pick in (("all", lambda c: True), ("mid", lambda c: c.regime == "mid")):
        assert inside[name] == statistics.median(abs(c.error) for c in rows if pick(c))
        assert held[name] == statistics.median(abs(c.error) for c in away if pick(c))
    text = format_cross([report], (inside, held))
    assert "each table with every constant at the value fitted without it" in text and "all sizes" in text


def test_the_report_names_each_table_and_the_verdict(report):
    text = format_cross([report])
    assert "network proxy step cost (simulator.collectives.nccl_model.PROXY_STEP_US_INTEL)" in text
    assert all(s.name in text for s in TWO_TABLES)
    assert ("MOVES:" in text) == report.moves and ("stable:" in text) == (not report.moves)
    assert "no other table can check it" in text  # the -g launch cost, said so


def test_cross_command(capsys):
    # one table: no table to leave out; NVLS, the one-server LL p2p channel and the A100 constants have no row in it
    assert main(["validate", "--cross", "--series", "2x B200 NDR sendrecv", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    proxy, ring, p2p_ll, p2p_read, ll, ll128, nvls = data
    assert proxy["tables"] == ["2x B200 NDR sendrecv"] and proxy["leave_one_table_out"] == {}
    assert ring["constant"] == "ring network step round trip" and ring["tables"] == ["2x B200 NDR sendrecv"]
    assert proxy["held_out_error"] is None and nvls["tables"] == [] and nvls["in_sample_error"] is None
    assert p2p_ll["constant"] == "LL point-to-point channel throughput"
    assert all(fit["tables"] == [] for fit in (p2p_ll, p2p_read, ll, ll128))
    for argv, message in (
        (["--data", "x.csv"], "cross: --data is not allowed with --cross"),
        (["--format", "csv"], "format: 'csv' is not allowed with --cross"),
        (["--net-model", "analytical"], "cross: --net-model is not allowed with --cross"),
    ):
        assert main(["validate", "--cross", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
