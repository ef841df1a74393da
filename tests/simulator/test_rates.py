"""Tests for simulator.rates: static equal-share rates (hand-derived numbers, then real paths)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.rates import equal_share_rates
from topologies import links as lk
from topologies.presets import build_system
from topologies.routing import Router
from topologies.topology import Topology


@pytest.fixture(scope="module")
def dgx4() -> Topology:
    # 4 DGX H100, rail-optimised Quantum-2: d = 32 -> 8 leaves (one per rail) of 4 NICs, 4 spines
    return build_system("dgx-h100", nodes=4)


def _p(*links: int) -> np.ndarray:
    return np.asarray(links, dtype=np.int64)


def test_two_paths_sharing_one_link_get_half_each():
    c = np.array([100.0, 40.0, 1000.0])
    # link 1 (40) is shared: 40 / 2 = 20 each; link 0 alone (100) and link 2 alone (1000) are looser
    rates = equal_share_rates([_p(0, 1), _p(1, 2)], c)
    assert rates == pytest.approx([20.0, 20.0])


def test_disjoint_paths_get_their_own_bottleneck():
    c = np.array([100.0, 40.0, 70.0])
    rates = equal_share_rates([_p(0, 1), _p(2)], c)
    assert rates == pytest.approx([40.0, 70.0])  # min(100, 40) and 70


def test_path_crossing_a_link_twice_counts_twice():
    c = np.array([90.0])
    # path A crosses link 0 twice, path B once: load 2 + 1 = 3, each share 90 / 3 = 30, and both
    # rates are 30 (A uses 2 x 30 = 60 of the link, B 30: the link is exactly full)
    rates = equal_share_rates([_p(0, 0), _p(0)], c)
    assert rates == pytest.approx([30.0, 30.0])


def test_weights_scale_the_load():
    c = np.array([10.0, 12.0, 6.0])
    # A = [0, 1] weights [1, 1]; B = [1, 2] weights [2, 2]; C = [2] weight [1]
    # loads: l0 = 1, l1 = 1 + 2 = 3, l2 = 2 + 1 = 3
    # A: min(10/1, 12/3) = 4;  B: min(12/3, 6/3) = 2;  C: 6/3 = 2
    paths = [_p(0, 1), _p(1, 2), _p(2)]
    weights = [np.array([1.0, 1.0]), np.array([2.0, 2.0]), np.array([1.0])]
    assert equal_share_rates(paths, c, weights) == pytest.approx([4.0, 2.0, 2.0])
    # unit weights are the same as no weights: loads l0 = 1, l1 = 2, l2 = 2
    # A: min(10, 6) = 6;  B: min(6, 3) = 3;  C: 3
    ones = [np.ones(len(p)) for p in paths]
    assert equal_share_rates(paths, c, ones) == pytest.approx([6.0, 3.0, 3.0])
    assert equal_share_rates(paths, c) == pytest.approx([6.0, 3.0, 3.0])


def test_equal_share_edge_cases():
    assert equal_share_rates([], np.array([1.0])).shape == (0,)
    rates = equal_share_rates([_p(), _p(0)], np.array([8.0]))
    assert rates[0] == np.inf  # an empty path has no bottleneck
    assert rates[1] == pytest.approx(8.0)


def test_equal_share_on_real_paths(dgx4):
    # 8 flows, GPU i of server 0 -> GPU i of server 1 with PXN: each uses its own rail (NIC i,
    # leaf i) and no spine; nothing is shared, so each rate is the path's slowest link, the NDR
    # cable (49.68 GB/s < PCIe Gen5 x16)
    router = Router(dgx4, pxn=True)
    paths = [router.path(dgx4.gpu(0, i), dgx4.gpu(1, i)) for i in range(8)]
    rates = equal_share_rates(paths, dgx4.link_capacity_bytes_per_s)
    assert rates == pytest.approx([lk.IB_NDR.bandwidth_bytes_per_s] * 8)
    # the same 8 flows all sent from GPU 0 of server 0 without PXN share its one NIC uplink:
    # NDR / 8 each
    paths = [router.path(dgx4.gpu(0, 0), dgx4.gpu(1, i), pxn=False) for i in range(8)]
    rates = equal_share_rates(paths, dgx4.link_capacity_bytes_per_s)
    assert rates == pytest.approx([lk.IB_NDR.bandwidth_bytes_per_s / 8] * 8)
