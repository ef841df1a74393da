"""Tests for topologies.routing: Router paths (walks, shortest ECMP, rails, PXN) and equal_share_rates."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from topologies import devices as dv
from topologies import links as lk
from topologies.fat_tree import leaf_spine
from topologies.node import dgx_h100
from topologies.presets import build_system
from topologies.routing import Router, equal_share_rates, mix64
from topologies.topology import LinkTier, NodeKind, Topology


def _switch(radix: int) -> dv.SwitchSpec:
    return dv.SwitchSpec(name=f"toy_radix{radix}", kind="infiniband", radix=radix,
                         port_rate_bytes_per_s=lk.IB_NDR.line_rate_bytes_per_s, latency_s=2e-7)


@pytest.fixture(scope="module")
def dgx4() -> Topology:
    # 4 DGX H100, rail-optimised Quantum-2: d = 32 -> 8 leaves (one per rail) of 4 NICs, 4 spines
    return build_system("dgx-h100", nodes=4)


@pytest.fixture(scope="module")
def tor3() -> Topology:
    # 3 DGX H100 on a ToR radix-16 leaf-spine: d = 8 -> one leaf per server, 3 leaves, 8 spines
    return leaf_spine(server=dgx_h100(), servers=3, switch=_switch(16), fabric_link=lk.IB_NDR,
                      rail_optimised=False)


@pytest.fixture(scope="module")
def uneven12() -> Topology:
    # 12 DGX H100, rail-optimised radix 16, R = 1: d = 8 -> per rail leaf A (servers 0-7, 8 uplinks)
    # and leaf B (servers 8-11, 4 uplinks to spines 0-3); 16 leaves, 8 spines
    return leaf_spine(server=dgx_h100(), servers=12, switch=_switch(16), fabric_link=lk.IB_NDR)


def _fabric_switches(topo: Topology) -> list[int]:
    return [n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH]


def _spines_on(topo: Topology, path: np.ndarray) -> list[int]:
    return [int(topo.link_dst[l]) for l in path
            if topo.link_tier[l] == LinkTier.FABRIC_1 and topo.graph.nodes[int(topo.link_dst[l])]["tier"] == 2]


def _assert_walk(topo: Topology, path: np.ndarray, src: int, dst: int) -> None:
    assert path.size > 0
    assert path.dtype == np.int64
    assert topo.link_src[path[0]] == topo.gpu_nodes[src]
    assert topo.link_dst[path[-1]] == topo.gpu_nodes[dst]
    assert np.array_equal(topo.link_dst[path[:-1]], topo.link_src[path[1:]])


# ------------------------------------------------------------------------------------------------
# Every pair routable, paths are contiguous walks
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dgx4", "tor3"])
@pytest.mark.parametrize("pxn", [True, False])
def test_every_gpu_pair_is_routable_as_a_contiguous_walk(request, name, pxn):
    topo = request.getfixturevalue(name)
    router = Router(topo, pxn=pxn)
    n = topo.num_gpus
    for src in range(n):
        for dst in range(n):
            if src != dst:
                _assert_walk(topo, router.path(src, dst), src, dst)


def test_paths_are_read_only(dgx4):
    path = Router(dgx4).path(0, 9)
    with pytest.raises(ValueError):
        path[0] = 0


def test_same_server_path_is_over_nvswitch(dgx4):
    # GPU 2 -> GPU 5 of server 1: GPU -> NVSwitch -> GPU, two NVLink links, no fabric
    router = Router(dgx4)
    src, dst = dgx4.gpu(1, 2), dgx4.gpu(1, 5)
    path = router.path(src, dst)
    assert len(path) == 2
    assert all(dgx4.link_tier[l] == LinkTier.NVLINK for l in path)
    assert dgx4.link_dst[path[0]] == dgx4.servers[1].nvswitch


# ------------------------------------------------------------------------------------------------
# ECMP: shortest, spreading, deterministic
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dgx4", "tor3", "uneven12"])
@pytest.mark.parametrize("pxn", [True, False])
def test_fabric_part_of_inter_server_paths_is_shortest(request, name, pxn):
    topo = request.getfixturevalue(name)
    router = Router(topo, pxn=pxn, seed=7)
    switch_graph = topo.graph.subgraph(_fabric_switches(topo))
    lengths = dict(nx.all_pairs_shortest_path_length(switch_graph))
    gpus_per = len(topo.servers[0].gpus)
    # GPUs of server 0 to every GPU of every other server (server pairs are symmetric here)
    for src in range(gpus_per):
        for dst in range(gpus_per, topo.num_gpus):
            for flow_key in (0, 1, 2):
                path = router.path(src, dst, flow_key=flow_key)
                up = [l for l in path if topo.link_tier[l] == LinkTier.NIC and topo.node_kind(int(topo.link_src[l])) == NodeKind.NIC]
                down = [l for l in path if topo.link_tier[l] == LinkTier.NIC and topo.node_kind(int(topo.link_dst[l])) == NodeKind.NIC]
                assert len(up) == len(down) == 1
                leaf_a, leaf_b = int(topo.link_dst[up[0]]), int(topo.link_src[down[0]])
                fabric = [l for l in path if topo.link_tier[l] == LinkTier.FABRIC_1]
                assert len(fabric) == lengths[leaf_a][leaf_b]


def test_ecmp_spreads_over_spines(dgx4):
    # GPU 0 of server 0 (rail 0) -> GPU 1 of server 1 (rail 1), own NICs (pxn=False): leaf0 and
    # leaf1 differ, so every path is leaf0 -> spine -> leaf1 with 4 equal-cost spines
    router = Router(dgx4, pxn=False)
    src, dst = dgx4.gpu(0, 0), dgx4.gpu(1, 1)
    spines = [tuple(_spines_on(dgx4, router.path(src, dst, flow_key=k))) for k in range(256)]
    assert all(len(s) == 1 for s in spines)                 # exactly one spine per path
    used = {s[0] for s in spines}
    assert len(used) > 1
    # with 256 hashed keys over 4 spines, all 4 are used (a miss has probability ~4 * 0.75^256)
    assert len(used) == 4


def test_ecmp_uses_only_spines_that_reach_the_destination(uneven12):
    # rail-0 leaf A (8 uplinks, spines 0-7) -> rail-1 leaf B (4 uplinks, spines 0-3): only
    # spines 0-3 connect both, so only those may appear, and all 4 should be used
    topo = uneven12
    router = Router(topo, pxn=False)
    src, dst = topo.gpu(0, 0), topo.gpu(10, 1)
    b_leaf = int(topo.link_dst[topo.nic_leaf_link[topo.servers[10].nics[1]]])
    reachable = {int(v) for v in topo.graph.predecessors(b_leaf) if topo.graph.nodes[v].get("tier") == 2}
    assert len(reachable) == 4
    used = set()
    for k in range(128):
        used.update(_spines_on(topo, router.path(src, dst, flow_key=k)))
    assert used == reachable


def test_ecmp_is_deterministic_and_seeded(dgx4):
    src, dst = dgx4.gpu(0, 0), dgx4.gpu(2, 3)
    a, b, other = Router(dgx4, seed=0, pxn=False), Router(dgx4, seed=0, pxn=False), Router(dgx4, seed=1, pxn=False)
    keys = range(64)
    first = [a.path(src, dst, flow_key=k) for k in keys]
    for k in keys:
        assert np.array_equal(a.path(src, dst, flow_key=k), first[k])          # repeat call
        assert np.array_equal(b.path(src, dst, flow_key=k), first[k])          # fresh router, same seed
    differs = [k for k in keys if not np.array_equal(other.path(src, dst, flow_key=k), first[k])]
    assert differs, "seed 1 picked the same spine as seed 0 for all 64 flow keys"


def test_mix64_is_deterministic_order_sensitive_64_bit():
    assert mix64(1, 2, 3) == mix64(1, 2, 3)
    assert mix64(1, 2) != mix64(2, 1)
    assert mix64(0) != mix64(1)
    values = [mix64(i) for i in range(1000)]
    assert all(0 <= v < 2**64 for v in values)
    assert len(set(values)) == 1000
    assert mix64(-1) == mix64(2**64 - 1)       # inputs are taken modulo 2^64


# ------------------------------------------------------------------------------------------------
# Rails and PXN
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", range(8))
def test_same_rail_with_pxn_crosses_no_spine(dgx4, gpu):
    router = Router(dgx4, pxn=True)
    for flow_key in range(4):
        path = router.path(dgx4.gpu(0, gpu), dgx4.gpu(1, gpu), flow_key=flow_key)
        assert not any(dgx4.link_tier[l] == LinkTier.FABRIC_1 for l in path)
        assert not any(dgx4.link_tier[l] == LinkTier.NVLINK for l in path)     # own NIC is on the rail
        # GPU -> PCIe switch -> NIC -> leaf -> NIC -> PCIe switch -> GPU
        assert len(path) == 6


@pytest.mark.parametrize("a, b", [(0, 1), (0, 7), (5, 2), (3, 4)])
def test_pxn_leaves_through_destination_rail_nic(dgx4, a, b):
    topo = dgx4
    s0, s1 = topo.servers[0], topo.servers[1]
    path = Router(topo, pxn=True).path(topo.gpu(0, a), topo.gpu(1, b))
    rail = s1.nic_of_gpu[b]
    assert rail == b                               # DGX H100: GPU i sits by NIC i
    assert topo.nic_leaf_link[s0.nics[rail]] in path
    assert topo.nic_leaf_link[s0.nics[s0.nic_of_gpu[a]]] not in path
    # relayed over NVLink to the GPU next to that NIC, then down its PCIe switch
    assert topo.link_tier[path[0]] == LinkTier.NVLINK
    assert topo.link_dst[path[0]] == s0.nvswitch
    assert topo.link_dst[path[1]] == s0.gpus[s0.gpu_of_nic[rail]]
    # the sending NIC is on the destination's rail, so no spine is crossed
    assert not any(topo.link_tier[l] == LinkTier.FABRIC_1 for l in path)


@pytest.mark.parametrize("a, b", [(0, 1), (0, 7), (5, 2), (3, 4)])
def test_without_pxn_leaves_through_own_nic(dgx4, a, b):
    topo = dgx4
    s0 = topo.servers[0]
    path = Router(topo, pxn=False).path(topo.gpu(0, a), topo.gpu(1, b))
    assert topo.nic_leaf_link[s0.nics[s0.nic_of_gpu[a]]] in path
    assert not any(topo.link_tier[l] == LinkTier.NVLINK for l in path)
    # different rails: leaf(rail a) -> spine -> leaf(rail b)
    assert sum(topo.link_tier[l] == LinkTier.FABRIC_1 for l in path) == 2


def test_per_path_pxn_overrides_router_default(dgx4):
    src, dst = dgx4.gpu(0, 0), dgx4.gpu(1, 1)
    on, off = Router(dgx4, pxn=True), Router(dgx4, pxn=False)
    assert np.array_equal(on.path(src, dst, pxn=False), off.path(src, dst))
    assert np.array_equal(off.path(src, dst, pxn=True), on.path(src, dst))
    assert not np.array_equal(on.path(src, dst), off.path(src, dst))


def test_receiver_always_uses_its_own_nic(dgx4):
    topo = dgx4
    s2 = topo.servers[2]
    for pxn in (True, False):
        router = Router(topo, pxn=pxn)
        for a in range(8):
            for b in range(8):
                path = router.path(topo.gpu(0, a), topo.gpu(2, b))
                nic = s2.nics[s2.nic_of_gpu[b]]
                into_nic = [l for l in path if topo.node_kind(int(topo.link_dst[l])) == NodeKind.NIC]
                assert int(topo.link_dst[into_nic[-1]]) == nic


# ------------------------------------------------------------------------------------------------
# Router argument errors
# ------------------------------------------------------------------------------------------------


def test_unknown_policy_is_rejected(dgx4):
    with pytest.raises(ValueError, match=r"'spray'.*ecmp"):
        Router(dgx4, policy="spray")


@pytest.mark.parametrize("seed", [1.5, "0", True])
def test_bad_seed_is_rejected(dgx4, seed):
    with pytest.raises(ValueError, match="seed") as err:
        Router(dgx4, seed=seed)
    assert repr(seed) in str(err.value)


@pytest.mark.parametrize("src, dst, named", [(32, 0, "src_gpu=32"), (0, 32, "dst_gpu=32"), (-1, 0, "src_gpu=-1"),
                                             (0, -5, "dst_gpu=-5")])
def test_out_of_range_gpu_is_rejected(dgx4, src, dst, named):
    # dgx-h100 x4 has 4 x 8 = 32 GPUs: valid indices 0..31
    with pytest.raises(ValueError, match=named) as err:
        Router(dgx4).path(src, dst)
    assert "32 GPUs" in str(err.value)


def test_same_source_and_destination_is_rejected(dgx4):
    with pytest.raises(ValueError, match=r"same GPU \(3\)"):
        Router(dgx4).path(3, 3)


# ------------------------------------------------------------------------------------------------
# equal_share_rates
# ------------------------------------------------------------------------------------------------


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
    assert rates == pytest.approx([40.0, 70.0])       # min(100, 40) and 70


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
    assert rates[0] == np.inf                     # an empty path has no bottleneck
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
