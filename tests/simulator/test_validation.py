"""Accuracy against the shipped nccl-tests tables (measured data, sources in each row).

Acceptance of the foundation: on the ring-only tables, large messages (>= 64 MiB) are predicted
with median |t_pred / t_meas - 1| <= 10%. The per-series errors are printed (pytest -s) so a
reviewer sees where the model is weak, not only the pooled median.
"""

from __future__ import annotations

import statistics

import pytest

from simulator.validation.collectives import SERIES, compare, read_table, summarise


@pytest.fixture(scope="module")
def comparisons():
    return {s.name: compare(s) for s in SERIES}


def test_every_shipped_row_keeps_its_source():
    for series in SERIES:
        rows = read_table(series.file)
        assert rows and all(r["source"].strip() for r in rows), series.file


def test_ring_only_bandwidth_regime_median_error_within_10_percent(comparisons):
    ring = [c for s in SERIES if s.ring_only for c in comparisons[s.name] if c.regime == "bandwidth"]
    assert len(ring) >= 50  # the ten ring-only series hold 87 rows >= 64 MiB
    for name, rows in comparisons.items():
        summary = summarise(rows)
        print(
            f"{name:58s} bandwidth median {summary['bandwidth']['median']:.1%} p90 {summary['bandwidth']['p90']:.1%}"
            f" (n={summary['bandwidth']['n']}); latency median {summary['latency']['median']:.1%}"
        )
    pooled = statistics.median(abs(c.error) for c in ring)
    print(f"pooled ring-only bandwidth-regime median |error| = {pooled:.1%} over {len(ring)} rows")
    assert pooled <= 0.10


def test_nvlink_ring_ceilings(comparisons):
    # NVLink ring busbw ceiling = links x NCCL's per-link figure (18 x 20.6 = 370.8 GB/s on H100/H200):
    # predicted 8 GiB+ busbw on H200 ring within 3% of the measured 363-367 GB/s
    rows = comparisons["H200/B200 all_reduce 8 GiB by GPU count, NVLS off"]
    h200 = [c for c in rows if "H200" in c.gpu]
    assert h200 and all(abs(c.busbw_pred_GBps / c.busbw_meas_GBps - 1) < 0.03 for c in h200)


def test_automatic_choice_matches_nccl_where_the_tables_say():
    # nvls_vs_ring table: "NCCL picked: Ring/NVLS" for 4..8 GPUs of H200 and B200 at 8 GiB. The one
    # known miss: 4x H200, where NVLS is 2% ahead in the model (378 vs 371 GB/s) but NCCL ran Ring.
    from simulator.studies.nccl_tests import run_bench
    from simulator.validation.collectives import system_for_gpu

    agree, total = 0, 0
    for row in read_table("nvls_vs_ring_gpucount_h200_b200_mleng.csv"):
        if "NVLS default" not in row["interconnect"]:
            continue
        picked = row["interconnect"].split("picked: ")[1].rstrip(")").lower()
        n = int(row["nranks"])
        ours = run_bench(
            "all_reduce",
            system=system_for_gpu(row["gpu"]),
            gpus_per_node=n,
            minbytes=int(row["size_bytes"]),
            maxbytes=int(row["size_bytes"]),
        )[0].algorithm
        agree += ours == picked
        total += 1
    assert total == 10 and agree >= 9
    # one DGX H100, 8 GiB: NVLS by default, Ring with NCCL_NVLS_ENABLE=0 (nccl-tests issue 309)
    from simulator.collectives.tuner import CollectivePolicy
    from simulator.config import SimConfig

    assert run_bench("all_reduce", minbytes="8G", maxbytes="8G")[0].algorithm == "nvls"
    off = SimConfig(collectives=CollectivePolicy(nvls=False))
    assert run_bench("all_reduce", minbytes="8G", maxbytes="8G", config=off)[0].algorithm == "ring"
