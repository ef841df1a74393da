"""The max-min fair-share kernel against its slow twin, its invariants and hand derivations."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.kernels import build_csr, maxmin_rates
from tests.naive import maxmin_rates_naive

GB = 1e9  # bytes/s per GB/s

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def random_instance(seed: int):
    """A random instance: 1-300 flows, 1-60 links, paths of 1-6 links (repeats allowed),
    weights in (0.1, 2], ~30 % capped, ~20 % inactive, capacities over 3 decades."""
    rng = np.random.default_rng(seed)
    n_flows = int(rng.integers(1, 301))
    n_links = int(rng.integers(1, 61))
    paths, weights = [], []
    for _ in range(n_flows):
        length = int(rng.integers(1, 7))
        path = rng.integers(0, n_links, size=length)
        if length >= 2 and rng.random() < 0.2:
            path[-1] = path[0]  # force a repeated link on some paths
        paths.append(path)
        weights.append(2.0 - rng.random(length) * 1.9)  # (0.1, 2]
    flow_ptr, flow_links, flow_weights = build_csr(paths, weights)
    link_capacity = 10.0 ** rng.uniform(9.0, 12.0, size=n_links)  # 1 GB/s .. 1 TB/s
    flow_cap = np.full(n_flows, np.inf)
    capped = rng.random(n_flows) < 0.3
    flow_cap[capped] = 10.0 ** rng.uniform(8.0, 11.0, size=int(capped.sum()))
    active = rng.random(n_flows) >= 0.2
    return flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap


def link_matrix(flow_ptr, flow_links, flow_weights, n_links):
    """Dense A[l, f]: total weight of flow f on link l."""
    n_flows = len(flow_ptr) - 1
    A = np.zeros((n_links, n_flows))
    rows = np.repeat(np.arange(n_flows), np.diff(flow_ptr))
    np.add.at(A, (flow_links, rows), flow_weights)
    return A


def check_invariants(rates, flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap):
    """Feasibility, inactive = 0, and the max-min bottleneck condition for every active flow."""
    A = link_matrix(flow_ptr, flow_links, flow_weights, len(link_capacity))
    assert rates.dtype == np.float64 and rates.shape == active.shape
    assert np.all(rates[~active] == 0.0)
    assert np.all(rates >= 0.0)
    assert np.all(rates <= flow_cap * (1 + 1e-12))
    load = A @ rates
    assert np.all(load <= link_capacity * (1 + 1e-9))
    saturated = load >= link_capacity * (1 - 1e-9)
    for f in np.flatnonzero(active):
        if rates[f] >= flow_cap[f] * (1 - 1e-9):
            continue  # at its cap
        bottlenecked = False
        for link in np.flatnonzero((A[:, f] > 0) & saturated):
            on_link = (A[link] > 0) & active
            if rates[f] >= rates[on_link].max() * (1 - 1e-9):
                bottlenecked = True
                break
        assert bottlenecked, f"flow {f} (rate {rates[f]}) has no bottleneck and is below its cap"


# --------------------------------------------------------------------------------------------
# Kernel == twin on random instances, plus invariants and determinism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_kernel_matches_naive_and_invariants(seed):
    instance = random_instance(seed)
    frozen_copies = [a.copy() for a in instance]
    rates = maxmin_rates(*instance)
    expected = maxmin_rates_naive(*instance)
    np.testing.assert_allclose(rates, expected, rtol=1e-9, atol=0.0)
    check_invariants(rates, *instance)
    again = maxmin_rates(*instance)
    assert rates.tobytes() == again.tobytes()  # bit-identical
    for before, after in zip(frozen_copies, instance):
        np.testing.assert_array_equal(before, after)  # inputs untouched


# --------------------------------------------------------------------------------------------
# Hand-derived cases
# --------------------------------------------------------------------------------------------


def solve(paths, capacity, caps=None, weights=None, active=None):
    flow_ptr, flow_links, flow_weights = build_csr([np.asarray(p) for p in paths], weights)
    n = len(paths)
    active = np.ones(n, np.bool_) if active is None else np.asarray(active, np.bool_)
    caps = np.full(n, np.inf) if caps is None else np.asarray(caps, float)
    capacity = np.asarray(capacity, float)
    rates = maxmin_rates(flow_ptr, flow_links, flow_weights, active, capacity, caps)
    twin = maxmin_rates_naive(flow_ptr, flow_links, flow_weights, active, capacity, caps)
    np.testing.assert_allclose(rates, twin, rtol=1e-12)
    return rates


def test_single_link_four_equal_flows():
    # One 100 GB/s link, 4 flows of weight 1: saturates at 4*lam = 100 -> lam = 25 GB/s each.
    rates = solve([[0]] * 4, [100 * GB])
    np.testing.assert_allclose(rates, [25 * GB] * 4, rtol=1e-15)


def test_parking_lot():
    # Links 0 and 1, capacity 10 each. Flow 0 crosses both, flow 1 uses link 0, flow 2 link 1.
    # Each link carries 2 unfrozen flows: R/W = 10/2 = 5 on both. Link 0 (lower id) saturates
    # first at lam = 5, freezing flows 0 and 1; link 1 then has R = 10 - 5 = 5, W = 1 -> 5.
    rates = solve([[0, 1], [0], [1]], [10.0, 10.0])
    np.testing.assert_allclose(rates, [5.0, 5.0, 5.0], rtol=1e-15)


def test_repeated_link_adds_weight():
    # Flow 0 lists link 0 twice (weight 1 + 1 = 2), flow 1 once (weight 1), capacity 30:
    # 2*lam + lam = 30 -> lam = 10 for both; link load = 2*10 + 10 = 30.
    rates = solve([[0, 0], [0]], [30.0])
    np.testing.assert_allclose(rates, [10.0, 10.0], rtol=1e-15)


def test_explicit_weights():
    # Same as above with the weight given explicitly: w = 2 on flow 0, 1 on flow 1 -> 10, 10.
    rates = solve([[0], [0]], [30.0], weights=[np.array([2.0]), np.array([1.0])])
    np.testing.assert_allclose(rates, [10.0, 10.0], rtol=1e-15)


def test_cap_frees_bandwidth():
    # 3 flows on a 100 GB/s link, flow 0 capped at 10 GB/s. Uncapped level would be 100/3;
    # the cap (10) comes first: flow 0 freezes at 10, then R = 90, W = 2 -> lam = 45.
    rates = solve([[0]] * 3, [100 * GB], caps=[10 * GB, np.inf, np.inf])
    np.testing.assert_allclose(rates, [10 * GB, 45 * GB, 45 * GB], rtol=1e-15)


def test_inactive_flow_consumes_nothing():
    # Two flows on a 10 B/s link but flow 1 inactive: flow 0 alone gets 10, flow 1 gets 0.
    rates = solve([[0], [0]], [10.0], active=[True, False])
    np.testing.assert_array_equal(rates, [10.0, 0.0])


def test_flows_without_links():
    # No links: a capped flow runs at its cap (3), an uncapped one is unbounded (inf, not NaN).
    rates = solve([[], []], [5.0], caps=[3.0, np.inf])
    assert rates[0] == 3.0 and rates[1] == np.inf


def test_empty_inputs():
    # No flows at all; and flows that are all inactive.
    assert solve([], [1.0]).shape == (0,)
    np.testing.assert_array_equal(solve([[0], [0]], [1.0], active=[False, False]), [0.0, 0.0])


def test_wrapper_casts_dtypes_and_does_not_mutate():
    # int32 pointers / links, a Python list for active: the wrapper converts; same answer as
    # test_cap_frees_bandwidth.
    flow_ptr = np.array([0, 1, 2, 3], dtype=np.int32)
    flow_links = np.array([0, 0, 0], dtype=np.int32)
    weights = np.ones(3)
    caps = np.array([10.0, np.inf, np.inf])
    rates = maxmin_rates(flow_ptr, flow_links, weights, [True, True, True], np.array([100.0]), caps)
    np.testing.assert_allclose(rates, [10.0, 45.0, 45.0], rtol=1e-15)
    np.testing.assert_array_equal(caps, [10.0, np.inf, np.inf])


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        maxmin_rates(np.array([0, 1]), np.array([0]), np.ones(1), np.ones(2, np.bool_), np.ones(1), np.full(2, np.inf))


@pytest.mark.parametrize("nlinks, group, walk_floor", [(12, 12, 4096), (400, 8, 4096), (400, 8, 1)])
def test_re_rating_what_a_change_reaches_gives_every_rate_of_a_full_re_rating(nlinks, group, walk_floor):
    # two flow networks see the same random starts and ends (up to 4 links a flow, within one group of links,
    # some capped; on 12 links in one group a change reaches much of the network, which is rated in place, on
    # 400 links in groups of 8 one group, rated on its own; with no floor a walk that reaches more than half of the
    # active flows' entries stops early and every flow is re-rated, as when a large network's data-parallel traffic
    # ties it together):
    # one re-rates only the flows connected to a changed link (FlowNetwork's default), the other every flow;
    # storage compacts now and then and one link degrades half way.
    # Progressive filling rates each connected component from its own flows and links, so after every change
    # the rates are the same, bit for bit, and so are the completion times and link bytes.
    from simulator.network import FlowNetwork

    rng = np.random.default_rng(7)
    capacity = rng.uniform(10.0, 100.0, nlinks)
    incremental, full = FlowNetwork(capacity), FlowNetwork(capacity)
    full.incremental = False
    incremental.WALK_FLOOR = walk_floor
    for net in (incremental, full):
        net.COMPACT_MIN_SLOTS = 16  # storage compacts (and the link lists are rebuilt) every few changes
    for i in range(120):
        if i == 60:  # a link degrades: the flows connected to it re-rate
            for net in (incremental, full):
                net.set_link_scale(3, 0.25)
        n = int(rng.integers(1, 4))
        counts = rng.integers(0 if i % 10 == 5 else 1, 5, n)  # now and then a flow on no link: its cap
        links = np.concatenate(
            [group * rng.integers(nlinks // group) + rng.choice(group, c, replace=False) for c in counts]
        )
        weights = rng.uniform(0.5, 1.5, links.shape[0])
        wire = rng.uniform(1.0, 50.0, n)
        caps = np.where(rng.random(n) < 0.3, rng.uniform(5.0, 30.0, n), np.inf)
        for net in (incremental, full):
            net.add(links, weights, counts, wire, caps)
        dt = incremental.next_completion_s()
        assert dt == full.next_completion_s()
        assert np.array_equal(incremental.rate, full.rate)
        for _ in range(int(rng.integers(1, 5))):  # to the next ends, or part of the way
            step = dt if rng.random() < 0.7 else min(dt, float(rng.uniform(0.0, 0.5)))
            assert np.array_equal(incremental.advance(step), full.advance(step))
            dt = incremental.next_completion_s()
            assert dt == full.next_completion_s() and np.array_equal(incremental.rate, full.rate)
            if not np.isfinite(dt):
                break
    while np.isfinite(dt := incremental.next_completion_s()):
        assert dt == full.next_completion_s() and np.array_equal(incremental.rate, full.rate)
        assert np.array_equal(incremental.advance(dt), full.advance(dt))
    assert np.array_equal(incremental.link_bytes, full.link_bytes) and incremental.link_bytes.sum() > 0


@pytest.mark.parametrize("seed", range(5))
def test_drain_matches_the_numpy_expressions_bit_for_bit(seed):
    # random flows (some inactive, some stopped, some with start-up fill, some about to finish, one unbounded),
    # drained by a random time and by none: the kernel and its naive twin leave the same bits and the same ends
    from simulator.kernels import drain, soonest_end
    from tests.naive import drain_naive, soonest_end_naive

    rng = np.random.default_rng(seed)
    n = 200
    rate = np.where(rng.random(n) < 0.1, 0.0, rng.uniform(1e9, 5e10, n))
    rate[0] = np.inf
    remaining = rng.uniform(0.0, 1e8, n)
    remaining[rng.random(n) < 0.1] = 1e-12  # within round-off of done
    fill = np.minimum(np.where(rng.random(n) < 0.3, rng.uniform(0.0, 1e6, n), 0.0), remaining)
    active = rng.random(n) < 0.8
    for dt_s in (float(rng.uniform(0.0, 1e-3)), 0.0):
        assert soonest_end(rate, remaining, active) == soonest_end_naive(rate, remaining, active)
        fast = [a.copy() for a in (remaining, fill)] + [np.zeros(n, np.int64), np.zeros(n)]
        slow = [a.copy() for a in (remaining, fill)] + [np.zeros(n, np.int64), np.zeros(n)]
        k = drain(rate, fast[0], fast[1], active, dt_s, fast[2], fast[3])
        assert k == drain_naive(rate, slow[0], slow[1], active, dt_s, slow[2], slow[3]) and k > 0
        for a, b in zip(fast, slow):
            assert np.array_equal(a, b)
        remaining, fill = fast[0], fast[1]


@pytest.mark.parametrize("seed", range(5))
def test_count_link_bytes_matches_the_numpy_expressions_bit_for_bit(seed):
    # random flows of 1 to 12 links (repeats within a flow and across flows, random weights) ending in a random
    # order, a few at a time or all at once: the kernel leaves the bits of bincount-then-add, its scratch zeros
    from simulator.kernels import count_link_bytes
    from tests.naive import count_link_bytes_naive

    rng = np.random.default_rng(seed)
    nflows, nlinks = 300, 50
    counts = rng.integers(1, 13, nflows)
    ptr = np.concatenate(([0], np.cumsum(counts)))
    links = rng.integers(0, nlinks, int(ptr[-1]))
    weights = rng.uniform(0.1, 1.0, int(ptr[-1]))
    fast = rng.uniform(0.0, 1e9, nlinks)  # bytes the links have carried so far
    slow = fast.copy()
    sums, seen = np.zeros(nlinks), np.zeros(nlinks, dtype=np.bool_)
    order = rng.permutation(nflows)
    for batch in (order[:3], order[3:40], order[40:]):
        nbytes = rng.uniform(0.0, 1e8, batch.shape[0])
        got = count_link_bytes(ptr, links, weights, batch, nbytes, fast, sums, seen)
        want = count_link_bytes_naive(ptr, links, weights, batch, nbytes, slow)
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        assert np.array_equal(fast, slow) and not sums.any() and not seen.any()
