"""Fit of the network proxy's per-step cost (``nccl_model.PROXY_STEP_US_INTEL``) on every multi-node table.

The one free number of the proxy model (collectives/nccl_model.py: one host thread per GPU serving its
network connections a step at a time) is the host cost of one step on one connection. It is chosen
from ``GRID_US`` to minimise the median |t_pred / t_meas - 1| over the mid-size rows (64 KiB - 64 MiB,
where the proxy shows) of every shipped table run on more than one server, and checked
leave-one-table-out: for each table, the value fitted on the others and that table's mid-size error
with it, next to its error with the value fitted on all. ``main`` also prints the all-sizes error, so
a value that helps the mid sizes and spoils the small ones shows.

Run ``python -m simulator.validation.proxy_fit`` (one validation pass per grid value, about a minute).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .collectives import SERIES, Comparison, compare

#: candidate per-step costs (us); 0 is the model without its proxy floor
GRID_US = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)


def _median_error(rows: Sequence[Comparison]) -> float:
    return statistics.median(abs(c.error) for c in rows) if rows else float("nan")


def _mid_error(rows: Sequence[Comparison]) -> float:
    return _median_error([c for c in rows if c.regime == "mid"])


def multi_node_rows(step_us: float) -> dict[str, list[Comparison]]:
    """Every multi-node row of the shipped tables, by table, simulated at ``step_us`` per step."""
    out: dict[str, list[Comparison]] = {}
    for series in SERIES:
        rows = [c for c in compare(series, proxy_step_us=step_us) if c.nnodes > 1]
        if rows:
            out[series.name] = rows
    return out


def fit(grid: Sequence[float] = GRID_US) -> tuple[float, dict[float, dict[str, list[Comparison]]]]:
    """(the grid value with the least pooled mid-size median |error|, every value's rows by table)."""
    runs = {step_us: multi_node_rows(step_us) for step_us in grid}
    best = min(grid, key=lambda v: (_mid_error([c for rows in runs[v].values() for c in rows]), v))
    return best, runs


def leave_one_out(runs: dict[float, dict[str, list[Comparison]]]) -> dict[str, tuple[float, float, float]]:
    """Per table with mid-size rows: (value fitted without it, its mid-size median |error| with that
    value, with the value fitted on all)."""
    tables = sorted(t for t, rows in next(iter(runs.values())).items() if any(c.regime == "mid" for c in rows))
    grid = sorted(runs)
    pooled = min(grid, key=lambda v: (_mid_error([c for rows in runs[v].values() for c in rows]), v))
    out = {}
    for held in tables:
        value = min(
            grid,
            key=lambda v: (_mid_error([c for t, rows in runs[v].items() if t != held for c in rows]), v),
        )
        out[held] = (value, _mid_error(runs[value][held]), _mid_error(runs[pooled][held]))
    return out


def main() -> None:
    best, runs = fit()
    print("step cost (us)  median |error| of multi-node rows: all sizes / mid (64 KiB - 64 MiB)")
    for value in sorted(runs):
        rows = [c for table in runs[value].values() for c in table]
        print(f"{value:14.2f}  {100 * _median_error(rows):6.1f}% / {100 * _mid_error(rows):6.1f}%")
    print(f"fitted: {best} us")
    print("leave one table out (mid sizes): fitted without it, its error then, its error with the pooled fit")
    for table, (value, held, pooled) in leave_one_out(runs).items():
        print(f"  {table:55s} {value:5.2f} us  {100 * held:6.1f}%  {100 * pooled:6.1f}%")


if __name__ == "__main__":
    main()
