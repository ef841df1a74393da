"""Micro-benchmarks of fabricsim's hot kernels.

Each ``bench_*`` function builds a seeded random instance, warms the kernel once (numba
compilation or cache load happens there, outside the timing), times a few calls with
``time.perf_counter`` and returns a plain dict of figures. ``format_report`` renders one.
Nothing here prints; a CLI front end decides what to show.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from ..kernels import maxmin_rates

__all__ = ["bench_maxmin", "format_report"]


def _random_maxmin_instance(
    nflows: int, nlinks: int, min_path: int, max_path: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A seeded random max-min instance, shaped like a loaded fabric.

    Paths of ``min_path..max_path`` uniformly random links (weight 1); link capacities
    uniform in 12.5-50 GB/s (100-400 Gb/s ports); every flow active; 10 % of flows capped at
    a rate uniform in 1-50 GB/s.
    """
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_path, max_path + 1, size=nflows)
    flow_ptr = np.zeros(nflows + 1, dtype=np.int64)
    np.cumsum(lengths, out=flow_ptr[1:])
    nnz = int(flow_ptr[-1])
    flow_links = rng.integers(0, nlinks, size=nnz, dtype=np.int64)
    flow_weights = np.ones(nnz, dtype=np.float64)
    active = np.ones(nflows, dtype=np.bool_)
    link_capacity = rng.uniform(12.5e9, 50e9, size=nlinks)
    flow_cap = np.full(nflows, np.inf)
    capped = rng.random(nflows) < 0.1
    flow_cap[capped] = rng.uniform(1e9, 50e9, size=int(capped.sum()))
    return flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap


def bench_maxmin(
    *,
    nflows: int = 100_000,
    nlinks: int = 20_000,
    min_path: int = 2,
    max_path: int = 8,
    repeats: int = 5,
    seed: int = 0,
) -> dict:
    """Time ``maxmin_rates`` on a random instance of ``nflows`` flows over ``nlinks`` links.

    Returns ``{"nflows", "nlinks", "nnz", "best_s", "median_s"}``: the instance size, the
    number of (flow, link) entries, and the best and median wall time in seconds of
    ``repeats`` calls after one untimed warm-up call.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not 0 <= min_path <= max_path:
        raise ValueError(f"need 0 <= min_path <= max_path, got {min_path}, {max_path}")
    if nlinks < 1 and max_path > 0:
        raise ValueError(f"need at least one link for paths up to {max_path} long")
    instance = _random_maxmin_instance(nflows, nlinks, min_path, max_path, seed)
    maxmin_rates(*instance)  # compile (or load from cache) and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        maxmin_rates(*instance)
        times.append(time.perf_counter() - start)
    return {
        "nflows": nflows,
        "nlinks": nlinks,
        "nnz": int(instance[1].shape[0]),
        "best_s": min(times),
        "median_s": statistics.median(times),
    }


def format_report(d: dict) -> str:
    """One line summarising a ``bench_maxmin`` result, times in milliseconds."""
    return (
        f"maxmin: {d['nflows']:,} flows x {d['nlinks']:,} links ({d['nnz']:,} entries): "
        f"best {d['best_s'] * 1e3:.1f} ms, median {d['median_s'] * 1e3:.1f} ms"
    )
