"""Static equal-share rates: the congestion-unaware bandwidth of paths that start together.

Each link's capacity ``c_l`` is split among the paths crossing it in proportion to their weights
``w_jl`` (the fraction of path j's bytes on link l; a path crossing a link twice counts twice), and
a path's rate is its tightest share::

    r_i = min over links l of path i of  c_l / sum_j w_jl

This is the alpha-beta view of a batch of flows: no redistribution when a flow ends, no other
traffic. It equals max-min fairness whenever the paths do not contend or are symmetric. The
``analytical`` network model rates each batch with it (``simulator.network.analytical``); the
algorithms' NCCL-style estimates rate their chains with it (``simulator.collectives``).

Worked number: capacities 100, 40 and 1000 B/s on links 0, 1, 2; path A = [0, 1], B = [1, 2]. Link 1
carries both: 40 / 2 = 20 each, tighter than link 0 alone (100) and link 2 alone (1000), so both
paths get 20 B/s.

Pure numpy on flat arrays, no model state: a module of its own (not in ``simulator.network``, whose
package loads the network models and their numba kernels) so that the algorithms can use it too.
"""

from __future__ import annotations

import numpy as np


def equal_share_rates(
    paths: list[np.ndarray], capacity_bytes_per_s: np.ndarray, weights: list[np.ndarray] | None = None
) -> np.ndarray:
    """Static equal-share rate of each path when all of them start together and never re-share.

    Each link's capacity is split among the paths crossing it in proportion to their weights
    (a path crossing a link twice counts twice); a path's rate is its tightest share:
    ``r_i = min_l c_l / sum_j w_jl`` over the links l of path i. This is the congestion-unaware
    alpha-beta view (no redistribution when a flow ends); it equals max-min fairness whenever
    the paths do not contend or are symmetric.
    """
    if not paths:
        return np.zeros(0)
    links = np.concatenate(paths)
    w = np.concatenate(weights) if weights is not None else np.ones(links.shape[0])
    counts = np.fromiter((p.shape[0] for p in paths), dtype=np.int64, count=len(paths))
    return equal_share_rates_csr(links, w, counts, capacity_bytes_per_s)


def equal_share_rates_csr(
    links: np.ndarray, weights: np.ndarray, counts: np.ndarray, capacity_bytes_per_s: np.ndarray
) -> np.ndarray:
    """:func:`equal_share_rates` of paths given as one array of links (path i: the next
    ``counts[i]`` entries) with their weights; a path without links gets ``inf``. Loads are summed
    over the links used only (not the whole topology), in entry order."""
    used, inverse = np.unique(links, return_inverse=True)
    load = np.bincount(inverse, weights=weights, minlength=used.shape[0])
    share = capacity_bytes_per_s[links] / load[inverse]  # each link's equal share, per unit of weight
    rates = np.full(counts.shape[0], np.inf)
    has = counts > 0
    if has.any():
        starts = (np.cumsum(counts) - counts)[has]
        rates[has] = np.minimum.reduceat(share, starts)
    return rates
