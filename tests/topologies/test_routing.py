"""Tests for topologies.routing: Router paths (walks, shortest ECMP, rails, PXN), the routing policies
(minimal, Valiant, UGAL, adaptive, spray) on leaf-spine and dragonfly, partitioned fabrics, link
failures (equal-share rates: tests/simulator/test_rates.py)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from simulator.rates import equal_share_rates
from tests.topologies.fabrics import BOX, DUO, reverse, toy_switch
from topologies import links as lk
from topologies.dragonfly import dragonfly
from topologies.fat_tree import leaf_spine
from topologies.node import add_server, dgx_h100
from topologies.presets import build_system
from topologies.routing import POLICIES, ROUTING_POLICIES, Router, mix64
from topologies.topology import LinkTier, NodeKind, Topology, TopologyBuilder


@pytest.fixture(scope="module")
def dgx4() -> Topology:
    # 4 DGX H100, rail-optimised Quantum-2: d = 32 -> 8 leaves (one per rail) of 4 NICs, 4 spines
    return build_system("dgx-h100", nodes=4)


@pytest.fixture(scope="module")
def tor3() -> Topology:
    # 3 DGX H100 on a ToR radix-16 leaf-spine: d = 8 -> one leaf per server, 3 leaves, 8 spines
    return leaf_spine(server=dgx_h100(), servers=3, switch=toy_switch(16), fabric_link=lk.IB_NDR, rail_optimised=False)


@pytest.fixture(scope="module")
def uneven12() -> Topology:
    # 12 DGX H100, rail-optimised radix 16, R = 1: d = 8 -> per rail leaf A (servers 0-7, 8 uplinks)
    # and leaf B (servers 8-11, 4 uplinks to spines 0-3); 16 leaves, 8 spines
    return leaf_spine(server=dgx_h100(), servers=12, switch=toy_switch(16), fabric_link=lk.IB_NDR)


def _fabric_switches(topo: Topology) -> list[int]:
    return [n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH]


def _spines_on(topo: Topology, path: np.ndarray) -> list[int]:
    return [
        int(topo.link_dst[l])
        for l in path
        if topo.link_tier[l] == LinkTier.FABRIC_1 and topo.graph.nodes[int(topo.link_dst[l])]["tier"] == 2
    ]


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
                leaf_a, leaf_b = _leaves(topo, path)  # exactly one NIC cable up and one down
                fabric = [l for l in path if topo.link_tier[l] == LinkTier.FABRIC_1]
                assert len(fabric) == lengths[leaf_a][leaf_b]


def test_ecmp_spreads_over_spines(dgx4):
    # GPU 0 of server 0 (rail 0) -> GPU 1 of server 1 (rail 1), own NICs (pxn=False): leaf0 and
    # leaf1 differ, so every path is leaf0 -> spine -> leaf1 with 4 equal-cost spines
    router = Router(dgx4, pxn=False)
    src, dst = dgx4.gpu(0, 0), dgx4.gpu(1, 1)
    spines = [tuple(_spines_on(dgx4, router.path(src, dst, flow_key=k))) for k in range(256)]
    assert all(len(s) == 1 for s in spines)  # exactly one spine per path
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
        assert np.array_equal(a.path(src, dst, flow_key=k), first[k])  # repeat call
        assert np.array_equal(b.path(src, dst, flow_key=k), first[k])  # fresh router, same seed
    differs = [k for k in keys if not np.array_equal(other.path(src, dst, flow_key=k), first[k])]
    assert differs, "seed 1 picked the same spine as seed 0 for all 64 flow keys"


def test_mix64_is_deterministic_order_sensitive_64_bit():
    assert mix64(1, 2, 3) == mix64(1, 2, 3)
    assert mix64(1, 2) != mix64(2, 1)
    assert mix64(0) != mix64(1)
    values = [mix64(i) for i in range(1000)]
    assert all(0 <= v < 2**64 for v in values)
    assert len(set(values)) == 1000
    assert mix64(-1) == mix64(2**64 - 1)  # inputs are taken modulo 2^64


# ------------------------------------------------------------------------------------------------
# Rails and PXN
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", range(8))
def test_same_rail_with_pxn_crosses_no_spine(dgx4, gpu):
    router = Router(dgx4, pxn=True)
    for flow_key in range(4):
        path = router.path(dgx4.gpu(0, gpu), dgx4.gpu(1, gpu), flow_key=flow_key)
        assert not any(dgx4.link_tier[l] == LinkTier.FABRIC_1 for l in path)
        assert not any(dgx4.link_tier[l] == LinkTier.NVLINK for l in path)  # own NIC is on the rail
        # GPU -> PCIe switch -> NIC -> leaf -> NIC -> PCIe switch -> GPU
        assert len(path) == 6


@pytest.mark.parametrize("a, b", [(0, 1), (0, 7), (5, 2), (3, 4)])
def test_pxn_leaves_through_destination_rail_nic(dgx4, a, b):
    topo = dgx4
    s0, s1 = topo.servers[0], topo.servers[1]
    path = Router(topo, pxn=True).path(topo.gpu(0, a), topo.gpu(1, b))
    rail = s1.nic_of_gpu[b]
    assert rail == b  # DGX H100: GPU i sits by NIC i
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
    with pytest.raises(ValueError, match=r"'dimension-order'.*ecmp, minimal, valiant, ugal, adaptive, spray"):
        Router(dgx4, policy="dimension-order")


def test_policies_are_one_object_each_in_a_read_only_registry(dgx4):
    # the registry is the list of names the CLI and SimConfig accept, in the same order
    assert tuple(POLICIES) == ROUTING_POLICIES == ("ecmp", "minimal", "valiant", "ugal", "adaptive", "spray")
    assert all(policy.name == name for name, policy in POLICIES.items())
    assert [name for name, policy in POLICIES.items() if policy.sprays] == ["spray"]
    with pytest.raises(TypeError):
        POLICIES["mine"] = POLICIES["ecmp"]  # read-only: no registration at run time
    for name in ROUTING_POLICIES:
        router = Router(dgx4, policy=name)
        assert router.policy == name and router._policy is POLICIES[name] and router.spraying == (name == "spray")


@pytest.mark.parametrize("seed", [1.5, "0", True])
def test_bad_seed_is_rejected(dgx4, seed):
    with pytest.raises(ValueError, match="seed") as err:
        Router(dgx4, seed=seed)
    assert repr(seed) in str(err.value)


@pytest.mark.parametrize(
    "src, dst, named", [(32, 0, "src_gpu=32"), (0, 32, "dst_gpu=32"), (-1, 0, "src_gpu=-1"), (0, -5, "dst_gpu=-5")]
)
def test_out_of_range_gpu_is_rejected(dgx4, src, dst, named):
    # dgx-h100 x4 has 4 x 8 = 32 GPUs: valid indices 0..31
    with pytest.raises(ValueError, match=named) as err:
        Router(dgx4).path(src, dst)
    assert "32 GPUs" in str(err.value)


def test_same_source_and_destination_is_rejected(dgx4):
    with pytest.raises(ValueError, match=r"same GPU \(3\)"):
        Router(dgx4).path(3, 3)


# ================================================================================================
# Routing policies, dragonfly, partitioned fabrics, failures
# ================================================================================================

NDR = lk.IB_NDR.bandwidth_bytes_per_s
SINGLE_PATH = ("ecmp", "minimal", "valiant", "ugal", "adaptive")


def _fly(arrangement: str = "absolute", **kwargs) -> Topology:
    # p = 2, a = 4, h = 2: g = 4 * 2 + 1 = 9 groups of 4 routers, 8 single-GPU servers per group, 72 GPUs
    args = dict(servers_per_router=2, routers_per_group=4, global_links_per_router=2)
    args.update(kwargs)
    return dragonfly(server=BOX, switch=toy_switch(16), fabric_link=lk.IB_NDR, arrangement=arrangement, **args)


@pytest.fixture(scope="module")
def fly() -> Topology:
    return _fly()


@pytest.fixture(scope="module")
def fly_duo() -> Topology:
    # DUO, p = 2, a = 2, h = 1: g = 3 groups, a*p/K = 2 servers per group, 6 servers, 12 GPUs
    return dragonfly(
        server=DUO,
        servers_per_router=2,
        routers_per_group=2,
        global_links_per_router=1,
        switch=toy_switch(16),
        fabric_link=lk.IB_NDR,
    )


def _fabric_links(topo: Topology, path: np.ndarray) -> list[int]:
    return [int(l) for l in path if topo.link_tier[l] in (LinkTier.FABRIC_1, LinkTier.FABRIC_2)]


def _leaves(topo: Topology, path: np.ndarray) -> tuple[int, int]:
    """Switch the path enters the fabric at and the one it leaves from."""
    nic = [l for l in path if topo.link_tier[l] == LinkTier.NIC]
    up = [l for l in nic if topo.node_kind(int(topo.link_src[l])) == NodeKind.NIC]
    down = [l for l in nic if topo.node_kind(int(topo.link_dst[l])) == NodeKind.NIC]
    assert len(up) == len(down) == 1
    return int(topo.link_dst[up[0]]), int(topo.link_src[down[0]])


def _group(topo: Topology, switch: int) -> int:
    return topo.graph.nodes[switch]["group"]


def _switch_graph(topo: Topology, failed: frozenset[int] = frozenset()) -> nx.DiGraph:
    graph = nx.DiGraph()
    for l in range(topo.num_links):
        u, v = int(topo.link_src[l]), int(topo.link_dst[l])
        if l not in failed and topo.node_kind(u) == NodeKind.FABRIC_SWITCH == topo.node_kind(v):
            graph.add_edge(u, v)
    return graph


def _min_lgl_hops(topo: Topology, u: int, v: int) -> int:
    """Kim et al.'s minimal route length between routers u and v: 0 or 1 inside a group; else, over
    the global cables (x, y) from u's group to v's, [u != x] + 1 + [y != v], minimised."""
    if u == v:
        return 0
    if _group(topo, u) == _group(topo, v):
        return 1
    glob = np.flatnonzero(topo.link_tier == LinkTier.FABRIC_2)
    cables = [(int(topo.link_src[l]), int(topo.link_dst[l])) for l in glob]
    return min(
        (u != x) + 1 + (y != v)
        for x, y in cables
        if _group(topo, x) == _group(topo, u) and _group(topo, y) == _group(topo, v)
    )


# ---- every policy routes every pair --------------------------------------------------------------


@pytest.mark.parametrize("policy", SINGLE_PATH)
def test_every_gpu_pair_is_routable_on_dragonfly(fly_duo, policy):
    topo = fly_duo
    router = Router(topo, policy=policy, seed=3)
    for src in range(topo.num_gpus):
        for dst in range(topo.num_gpus):
            if src != dst:
                for pxn in (True, False):
                    _assert_walk(topo, router.path(src, dst, pxn=pxn), src, dst)


def test_spray_routes_every_pair_and_its_path_is_the_ecmp_path(fly_duo):
    topo = fly_duo
    router, ecmp = Router(topo, policy="spray", seed=3), Router(topo, seed=3)
    for src in range(topo.num_gpus):
        for dst in range(topo.num_gpus):
            if src != dst:
                links, weights = router.weighted_path(src, dst)
                assert links.shape == weights.shape and links.dtype == np.int64
                assert topo.link_src[links[0]] == topo.gpu_nodes[src]
                assert topo.link_dst[links[-1]] == topo.gpu_nodes[dst]
                # path() under spray: the flow's ECMP walk, one of the paths it is sprayed over
                walk = router.path(src, dst)
                assert np.array_equal(walk, ecmp.path(src, dst))
                assert set(walk.tolist()) <= set(links.tolist())
    # path() assigned no load: only the sprayed weights were counted
    assert router.assigned_bytes.sum() == pytest.approx(
        sum(router.weighted_path(s, d)[1].sum() for s in range(topo.num_gpus) for d in range(topo.num_gpus) if s != d)
    )


# ---- ecmp and minimal on a dragonfly --------------------------------------------------------------


def test_dragonfly_ecmp_is_min_hop_and_minimal_is_local_global_local(fly):
    topo = fly
    hops = dict(nx.all_pairs_shortest_path_length(_switch_graph(topo)))
    ecmp, minimal = Router(topo, policy="ecmp", seed=5), Router(topo, policy="minimal", seed=5)
    shorter = 0
    for src in range(8):  # the 8 servers of group 0 ...
        for dst in range(8, topo.num_gpus):  # ... to every server of another group
            a, b = _leaves(topo, ecmp.path(src, dst))
            e = _fabric_links(topo, ecmp.path(src, dst))
            m = _fabric_links(topo, minimal.path(src, dst))
            assert len(e) == hops[a][b]
            assert len(m) == _min_lgl_hops(topo, a, b) <= 3
            assert sum(topo.link_tier[l] == LinkTier.FABRIC_2 for l in m) == 1  # one global hop
            shorter += len(e) < len(m)
    # min-hop paths through a third group (global, global) beat local, global, local for some
    # router pairs, which is why the two policies differ on a dragonfly
    assert shorter > 0


def test_minimal_equals_ecmp_without_groups(dgx4):
    ecmp, minimal = Router(dgx4, policy="ecmp", seed=2), Router(dgx4, policy="minimal", seed=2)
    for k in range(32):
        assert np.array_equal(ecmp.path(0, 9, flow_key=k, pxn=False), minimal.path(0, 9, flow_key=k, pxn=False))


# ---- Valiant ---------------------------------------------------------------------------------------


def test_valiant_goes_through_its_intermediate_group(fly):
    topo = fly
    router = Router(topo, policy="valiant", seed=11)
    seen = set()
    for k in range(64):
        src, dst = 3, 8 + 5  # server 3 of group 0 -> server 5 of group 1
        via = router.valiant_intermediate(src, dst, flow_key=k)
        groups = {_group(topo, n) for n in via}
        assert len(groups) == 1 and len(via) == 4  # all a = 4 routers of one group
        (g,) = groups
        assert g not in (0, 1)
        seen.add(g)
        path = router.path(src, dst, flow_key=k)
        fabric = _fabric_links(topo, path)
        visited = {int(topo.link_dst[l]) for l in fabric}
        assert visited & set(via)
        # at most local, global, local, global, local; exactly two global links, the first into g
        glob = [l for l in fabric if topo.link_tier[l] == LinkTier.FABRIC_2]
        assert len(glob) == 2 and len(fabric) <= 5
        assert _group(topo, int(topo.link_dst[glob[0]])) == g
    # 64 hashed keys over the 7 eligible groups: all are used (a miss has probability
    # 7 * (6/7)^64 ~ 4e-4)
    assert seen == set(range(2, 9))


def test_valiant_on_leaf_spine_uses_a_top_tier_switch(dgx4):
    topo = dgx4
    router = Router(topo, policy="valiant", pxn=False)
    spines = {n for n in _fabric_switches(topo) if topo.graph.nodes[n]["tier"] == 2}
    for k in range(16):
        via = router.valiant_intermediate(0, 9, flow_key=k)
        assert len(via) == 1 and via[0] in spines
        assert [via[0]] == _spines_on(topo, router.path(0, 9, flow_key=k))
    # same rail with PXN: one leaf, no fabric hop and no intermediate
    assert Router(topo, policy="valiant").valiant_intermediate(0, 8) == ()


def test_valiant_is_deterministic_and_seeded(fly):
    keys = range(32)
    a, b, other = (Router(fly, policy="valiant", seed=s) for s in (4, 4, 5))
    first = [a.path(0, 20, flow_key=k) for k in keys]
    assert all(np.array_equal(b.path(0, 20, flow_key=k), first[k]) for k in keys)
    assert any(not np.array_equal(other.path(0, 20, flow_key=k), first[k]) for k in keys)


# ---- UGAL ------------------------------------------------------------------------------------------


def _ugal_cost(router: Router, topo: Topology, fabric: list[int], w: float) -> float:
    # H(P) x max_l (L_l + n_l w) / c_l   (routing/policies.py docstring)
    load = router.assigned_bytes
    return len(fabric) * max((load[l] + fabric.count(l) * w) / topo.link_capacity_bytes_per_s[l] for l in fabric)


def _adversarial(topo: Topology, per_group: int, groups: int) -> list[tuple[int, int]]:
    # every server of group i sends to the server at the same position in group i + 1
    return [(i * per_group + s, ((i + 1) % groups) * per_group + s) for i in range(groups) for s in range(per_group)]


def test_ugal_chooses_by_its_cost_rule(fly):
    topo = fly
    ugal = Router(topo, policy="ugal", seed=1)
    minimal, valiant = Router(topo, policy="minimal", seed=1), Router(topo, policy="valiant", seed=1)
    chose_valiant = chose_minimal = 0
    for src, dst in _adversarial(topo, 8, 9):
        w = 1.0 + src  # distinct sizes exercise the byte weighting
        m = _fabric_links(topo, minimal.path(src, dst))
        v = _fabric_links(topo, valiant.path(src, dst))
        expect = m if _ugal_cost(ugal, topo, m, w) <= _ugal_cost(ugal, topo, v, w) else v
        got = _fabric_links(topo, ugal.path(src, dst, nbytes=w))
        assert got == expect
        chose_minimal += got == m
        chose_valiant += got == v and got != m
    assert chose_minimal and chose_valiant  # the pattern exercises both branches


def test_ugal_worked_number(fly):
    # Unit flows on links of capacity c: a 3-hop minimal path costs 3 x 1/c on an empty fabric
    # and a 4-hop Valiant path 4 x 1/c, so the first flow goes minimal; once the minimal path
    # carries 1 flow it costs 3 x 2/c = 6/c > 4/c, so a flow of the same pair whose Valiant path
    # is 4 hops and shares no link with that minimal path goes Valiant. (In the absolute
    # arrangement router 0 of every group k >= 2 owns the cables to groups 0 and 1, so Valiant
    # paths from group 0 to group 1 enter the intermediate at a router that reaches group 1
    # directly: 4 hops, not 5.)
    topo = fly
    minimal, valiant = Router(topo, policy="minimal"), Router(topo, policy="valiant")
    pair = next((s, d) for s in range(8) for d in range(8, 16) if len(_fabric_links(topo, minimal.path(s, d))) == 3)
    m = _fabric_links(topo, minimal.path(*pair))
    keys = [
        k
        for k in range(64)
        if len(v := _fabric_links(topo, valiant.path(*pair, flow_key=k))) == 4 and not set(v) & set(m)
    ]
    assert len(keys) >= 2
    ugal = Router(topo, policy="ugal")
    assert _fabric_links(topo, ugal.path(*pair, flow_key=keys[0])) == m
    second = _fabric_links(topo, ugal.path(*pair, flow_key=keys[1]))
    assert second == _fabric_links(topo, valiant.path(*pair, flow_key=keys[1])) != m


@pytest.mark.parametrize("arrangement", ["absolute", "relative", "circulant"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ugal_on_adversarial_traffic_beats_minimal_and_matches_valiant(arrangement, seed):
    topo = _fly(arrangement)
    pairs = _adversarial(topo, 8, 9)
    cap = topo.link_capacity_bytes_per_s
    stats = {}
    for policy in ("minimal", "valiant", "ugal"):
        router = Router(topo, policy=policy, seed=seed)
        rates = equal_share_rates([router.path(s, d) for s, d in pairs], cap) / NDR
        stats[policy] = (rates.min(), rates.sum())
    # minimal: the a*p = 8 flows of group i all cross the single global cable i -> i+1 (local
    # links carry at most p = 2 of them): each gets NDR / 8; 72 flows -> aggregate 9 NDR
    assert stats["minimal"][0] == pytest.approx(1 / 8)
    assert stats["minimal"][1] == pytest.approx(9.0)
    best_min = max(stats["minimal"][0], stats["valiant"][0])
    best_sum = max(stats["minimal"][1], stats["valiant"][1])
    # Tolerance on the slowest flow: one extra flow on its bottleneck link. UGAL places each flow
    # with only the load assigned before it (UGAL-L decides from the queues it sees, not from
    # traffic still to come), so the last flows it places can leave one link one flow above the
    # better oblivious policy's bottleneck: rate 1 / (k + 1) instead of 1 / k.
    assert stats["ugal"][0] >= 1 / (1 / best_min + 1) - 1e-12
    # Aggregate: no tolerance. UGAL keeps each pair's direct global cable busy (what gives minimal
    # its 9 NDR) and adds Valiant paths only where they are less loaded; it carries more than both.
    assert stats["ugal"][1] >= best_sum


# ---- adaptive --------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [4, 8, 12])
def test_adaptive_spreads_k_flows_evenly_over_equal_next_hops(dgx4, k):
    # GPU 0 of server 0 -> GPU 1 of server 1, own NICs: leaf0 -> one of 4 spines -> leaf1. Each new
    # flow takes a least-loaded uplink, so k flows put k / 4 on each spine.
    router = Router(dgx4, policy="adaptive", pxn=False, seed=9)
    spines = [_spines_on(dgx4, router.path(0, 9, flow_key=key))[0] for key in range(k)]
    assert sorted(spines.count(s) for s in set(spines)) == [k // 4] * 4
    # the first 4 flows use 4 different spines
    assert len(set(spines[:4])) == 4
    # deterministic for a given order of calls
    again = Router(dgx4, policy="adaptive", pxn=False, seed=9)
    assert [_spines_on(dgx4, again.path(0, 9, flow_key=key))[0] for key in range(k)] == spines


def test_adaptive_paths_are_min_hop_on_dragonfly(fly):
    hops = dict(nx.all_pairs_shortest_path_length(_switch_graph(fly)))
    router = Router(fly, policy="adaptive")
    for src, dst in _adversarial(fly, 8, 9):
        path = router.path(src, dst)
        a, b = _leaves(fly, path)
        assert len(_fabric_links(fly, path)) == hops[a][b]


# ---- spray -----------------------------------------------------------------------------------------


def test_spray_over_four_spines_hand_derived(dgx4):
    # leaf0 -> 4 spines -> leaf1: each of the 4 uplinks and 4 downlinks carries 1/4 of the flow;
    # the links inside the servers and the two NIC cables carry all of it
    topo = dgx4
    links, weights = Router(topo, policy="spray", pxn=False).weighted_path(0, 9)
    ecmp = Router(topo, pxn=False).path(0, 9)
    fabric = topo.link_tier[links] == LinkTier.FABRIC_1
    assert fabric.sum() == 8
    assert np.allclose(weights[fabric], 0.25)
    assert np.all(weights[~fabric] == 1.0)
    # the non-fabric part is exactly ECMP's
    assert list(links[~fabric]) == [l for l in ecmp if topo.link_tier[l] != LinkTier.FABRIC_1]
    assert len(set(links.tolist())) == len(links)  # each link once


def _check_spray(topo: Topology, links: np.ndarray, weights: np.ndarray) -> None:
    a, b = _leaves(topo, links)
    graph = _switch_graph(topo)
    dist = nx.shortest_path_length(graph, target=b)
    inflow: dict[int, float] = {}
    outflow: dict[int, float] = {}
    cut: dict[int, float] = {}
    for l, w in zip(links.tolist(), weights.tolist()):
        assert 0 < w <= 1
        u, v = int(topo.link_src[l]), int(topo.link_dst[l])
        if topo.node_kind(u) == NodeKind.FABRIC_SWITCH == topo.node_kind(v):
            assert dist[v] == dist[u] - 1  # only shortest next hops
            outflow[u] = outflow.get(u, 0.0) + w
            inflow[v] = inflow.get(v, 0.0) + w
            cut[dist[u]] = cut.get(dist[u], 0.0) + w
        else:
            assert w == 1.0
    if a != b:
        assert set(cut) == set(range(1, dist[a] + 1))
        assert all(total == pytest.approx(1.0) for total in cut.values())  # each level carries all
        assert outflow[a] == pytest.approx(1.0) and inflow[b] == pytest.approx(1.0)
        for s in set(inflow) | set(outflow):
            if s not in (a, b):
                assert inflow[s] == pytest.approx(outflow[s])  # conservation


@pytest.mark.parametrize("name", ["dgx4", "uneven12", "tor3"])
def test_spray_weights_conserve_on_leaf_spine(request, name):
    topo = request.getfixturevalue(name)
    router = Router(topo, policy="spray")
    gpus = len(topo.servers[0].gpus)
    for src in range(gpus):
        for dst in range(gpus, topo.num_gpus, 3):
            for pxn in (True, False):
                _check_spray(topo, *router.weighted_path(src, dst, pxn=pxn))


def test_spray_weights_conserve_on_dragonfly_with_parallel_global_cables():
    # g = 5 < a*h + 1 = 9: m = 8 / 4 = 2 global cables per pair of groups, so flows between groups
    # split over both
    topo = _fly(groups=5)
    router = Router(topo, policy="spray")
    split = 0
    for src in range(8):
        for dst in range(8, topo.num_gpus):
            links, weights = router.weighted_path(src, dst)
            _check_spray(topo, links, weights)
            split += bool(np.any(weights < 1))
    assert split > 0


def test_weighted_path_of_single_path_policies_has_unit_weights(dgx4):
    for policy in SINGLE_PATH:
        router = Router(dgx4, policy=policy, pxn=False)
        links, weights = router.weighted_path(0, 9, flow_key=3)
        assert np.array_equal(links, router.path(0, 9, flow_key=3))
        assert np.all(weights == 1.0) and weights.dtype == np.float64


def test_sprayed_flows_share_spines_by_their_fractions(dgx4):
    # Two flows leaf0 -> leaf1 (servers 0 -> 1 and 2 -> 3, rail 0 to rail 1, own NICs): each
    # uplink carries 1/4 + 1/4 = 1/2 flow, so its share gives 2 NDR; each flow's NIC cable is
    # its own (weight 1): both run at NDR.
    router = Router(dgx4, policy="spray", pxn=False)
    flows = [router.weighted_path(dgx4.gpu(0, 0), dgx4.gpu(1, 1)), router.weighted_path(dgx4.gpu(2, 0), dgx4.gpu(3, 1))]
    rates = equal_share_rates([f[0] for f in flows], dgx4.link_capacity_bytes_per_s, [f[1] for f in flows])
    assert rates == pytest.approx([NDR, NDR])


# ---- assigned load ---------------------------------------------------------------------------------


def test_assigned_load_counts_each_flow_once(dgx4):
    router = Router(dgx4, pxn=False)
    path = router.path(0, 9, nbytes=1e6)
    load = router.assigned_bytes
    assert np.all(load[path] == 1e6) and load.sum() == 1e6 * len(path)
    router.path(0, 9, nbytes=5e6)  # the same flow again: pinned, not counted twice
    assert np.array_equal(router.assigned_bytes, load)
    router.reset_load()
    assert not router.assigned_bytes.any()
    spray = Router(dgx4, policy="spray", pxn=False)
    links, weights = spray.weighted_path(0, 9, nbytes=8.0)
    assert spray.assigned_bytes[links] == pytest.approx(8.0 * weights)


@pytest.mark.parametrize("nbytes", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_bad_nbytes_is_rejected(dgx4, nbytes):
    with pytest.raises(ValueError, match="nbytes"):
        Router(dgx4).path(0, 9, nbytes=nbytes)


# ---- partitioned fabrics (rail-only) ----------------------------------------------------------------


def _rails(cabling: list[tuple[int, int]]) -> Topology:
    """DUO servers; server s's NIC j plugs into switch cabling[s][j]; switches are not joined."""
    builder = TopologyBuilder("rail-only")
    infos = [add_server(builder, DUO, s) for s in range(len(cabling))]
    count = 1 + max(max(c) for c in cabling)
    switches = [builder.add_node(NodeKind.FABRIC_SWITCH, f"rail{k}", latency_s=2e-7, tier=1) for k in range(count)]
    for info, plugs in zip(infos, cabling):
        for nic, k in zip(info.nics, plugs):
            up, _ = builder.add_link(nic, switches[k], lk.IB_NDR, tier=LinkTier.NIC)
            builder.nic_leaf_link[nic] = up
    return builder.build()


@pytest.mark.parametrize("pxn", [True, False])
def test_rail_only_relays_to_the_nic_on_the_destination_rail(pxn):
    # two servers, rail0 switch holds both NIC 0s, rail1 both NIC 1s, no link between them
    topo = _rails([(0, 1), (0, 1)])
    s0, s1 = topo.servers
    router = Router(topo, pxn=pxn)
    path = router.path(topo.gpu(0, 0), topo.gpu(1, 1))
    # GPU 0's own NIC 0 (rail0) cannot reach NIC 1 of server 1 (rail1): relay over NVLink to
    # GPU 1, down to NIC 1, rail1, NIC 1 of server 1, GPU 1
    assert topo.link_tier[path[0]] == LinkTier.NVLINK
    assert topo.nic_leaf_link[s0.nics[1]] in path
    assert topo.nic_leaf_link[s0.nics[0]] not in path
    _assert_walk(topo, path, topo.gpu(0, 0), topo.gpu(1, 1))
    # same rail: own NIC, no NVLink
    same = router.path(topo.gpu(0, 0), topo.gpu(1, 0))
    assert topo.nic_leaf_link[s0.nics[0]] in same
    assert not any(topo.link_tier[l] == LinkTier.NVLINK for l in same)


def test_receiver_falls_back_to_a_reachable_nic():
    # server 0: both NICs on rail0; server 1: NIC 0 on rail0, NIC 1 on rail1. GPU 1 of server 1 owns
    # NIC 1, which nothing of server 0 reaches, so it receives through its NIC 0
    topo = _rails([(0, 0), (0, 1)])
    s1 = topo.servers[1]
    path = Router(topo).path(topo.gpu(0, 0), topo.gpu(1, 1))
    _assert_walk(topo, path, topo.gpu(0, 0), topo.gpu(1, 1))
    into_nics = [int(topo.link_dst[l]) for l in path if topo.node_kind(int(topo.link_dst[l])) == NodeKind.NIC]
    assert into_nics[-1] == s1.nics[0]


def test_unreachable_pair_names_both_gpus():
    # server 0 only on rail0, server 2 only on rail1; server 1 bridges them inside itself (which is
    # what makes the topology connected), but routes never transit a server
    topo = _rails([(0, 0), (0, 1), (1, 1)])
    with pytest.raises(ValueError, match=r"GPU 0 of s0 \(GPU 0\) cannot reach GPU 1 of s2 \(GPU 5\)"):
        Router(topo).path(0, 5)


# ---- link failures ---------------------------------------------------------------------------------


def test_failed_cable_is_avoided_and_paths_stay_shortest(dgx4):
    topo = dgx4
    leaf0 = int(topo.link_dst[topo.nic_leaf_link[topo.servers[0].nics[0]]])
    spine0 = min(n for n in _fabric_switches(topo) if topo.graph.nodes[n]["tier"] == 2)
    up = min(topo.graph.get_edge_data(leaf0, spine0))
    failed = frozenset({up, reverse(topo, up)})
    for policy in SINGLE_PATH:
        router = Router(topo, policy=policy, pxn=False, failed_links=failed)
        used = set()
        for k in range(128):
            for src, dst in ((0, 9), (9, 0)):
                path = router.path(src, dst, flow_key=k)
                assert not failed & set(path.tolist())
                _assert_walk(topo, path, src, dst)
                if policy in ("ecmp", "minimal", "adaptive"):  # Valiant (and UGAL taking it) may
                    assert len(_fabric_links(topo, path)) == 2  # still reach spine0 the long way
                    used.update(_spines_on(topo, path))
        if policy in ("ecmp", "minimal", "adaptive"):
            assert spine0 not in used and len(used) == 3
    links, _ = Router(topo, policy="spray", pxn=False, failed_links=failed).weighted_path(0, 9)
    assert not failed & set(links.tolist())


def test_failed_global_cable_reroutes_on_dragonfly(fly):
    topo = fly
    glob = [
        l
        for l in np.flatnonzero(topo.link_tier == LinkTier.FABRIC_2).tolist()
        if {_group(topo, int(topo.link_src[l])), _group(topo, int(topo.link_dst[l]))} == {0, 1}
    ]
    failed = frozenset(glob)
    assert len(glob) == 2  # the one cable between groups 0 and 1
    hops = dict(nx.all_pairs_shortest_path_length(_switch_graph(topo, failed)))
    for policy in SINGLE_PATH:
        router = Router(topo, policy=policy, failed_links=failed)
        for src in range(8):
            for dst in range(8, 16):  # group 0 -> group 1
                path = router.path(src, dst)
                _assert_walk(topo, path, src, dst)
                assert not failed & set(path.tolist())
                if policy in ("ecmp", "adaptive"):
                    a, b = _leaves(topo, path)
                    assert len(_fabric_links(topo, path)) == hops[a][b]
                if policy == "minimal":  # no direct cable left: two global hops
                    assert sum(topo.link_tier[l] == LinkTier.FABRIC_2 for l in path) == 2


def test_failed_nic_cable_relays_through_another_nic(dgx4):
    topo = dgx4
    s0 = topo.servers[0]
    failed = frozenset({topo.nic_leaf_link[s0.nics[0]]})
    path = Router(topo, failed_links=failed).path(topo.gpu(0, 0), topo.gpu(1, 0))
    # preferred NIC 0 (own and destination rail) is cut; the next by index is NIC 1 (rail 1): relay
    # over NVLink to GPU 1, rail-1 leaf -> spine -> rail-0 leaf -> NIC 0 of server 1
    assert topo.nic_leaf_link[s0.nics[1]] in path
    assert topo.link_tier[path[0]] == LinkTier.NVLINK
    assert len(_fabric_links(topo, path)) == 2
    _assert_walk(topo, path, topo.gpu(0, 0), topo.gpu(1, 0))


def test_destination_cut_off_by_failures_names_the_pair(dgx4):
    topo = dgx4
    s1 = topo.servers[1]
    down = frozenset(reverse(topo, topo.nic_leaf_link[nic]) for nic in s1.nics)
    with pytest.raises(ValueError, match=r"GPU 0 of s0 \(GPU 0\) cannot reach GPU 3 of s1 \(GPU 11\).*failed"):
        Router(topo, failed_links=down).path(0, 11)


def test_failed_link_inside_a_server_is_an_error(dgx4):
    topo = dgx4
    nvlink = min(topo.graph.get_edge_data(int(topo.gpu_nodes[0]), topo.servers[0].nvswitch))
    with pytest.raises(ValueError, match=r"GPU 0 -> GPU 1 of s0 crosses failed link"):
        Router(topo, failed_links={nvlink}).path(0, 1)


@pytest.mark.parametrize(
    "failed, shown", [({-1}, "-1"), ({10**6}, "1000000"), ({"x"}, "'x'"), (5, "5"), ({1.0}, "1.0")]
)
def test_bad_failed_links_are_rejected(dgx4, failed, shown):
    with pytest.raises(ValueError, match=r"Router\.failed_links") as err:
        Router(dgx4, failed_links=failed)
    assert shown in str(err.value)


def test_spines_above_on_dragonfly_and_leaf_spine(fly, dgx4):
    router = Router(fly)
    assert all(router.spines_above(r) == [] for r in _fabric_switches(fly))  # one tier: nothing above
    leaf0 = Router(dgx4).leaf_of(0)
    assert len(Router(dgx4).spines_above(leaf0)) == 4
