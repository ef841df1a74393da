"""Tests for topologies.fat_tree: leaf-spine, k-ary fat-tree, rail-only and multi-plane fabrics
(closed-form switch counts, cabling invariants, routing over shortest paths, validation)."""

from __future__ import annotations

import dataclasses
import doctest
import math

import networkx as nx
import numpy as np
import pytest

from tests.topologies.fabrics import BOX, toy_switch
from topologies import devices as dv
from topologies import fat_tree as fat_tree_module
from topologies import links as lk
from topologies.fat_tree import (
    add_servers,
    fat_tree,
    fat_tree_max_servers,
    leaf_spine,
    leaf_spine_max_servers,
    rail_only,
    rail_only_max_servers,
)
from topologies.node import ServerSpec, add_server, dgx_h100, pcie_rtx4090
from topologies.routing import Router
from topologies.topology import LinkTier, NodeKind, Topology, TopologyBuilder

K_NICS = 8  # DGX H100: 8 compute NICs, one per rail


def _build(radix: int, servers: int, oversub: float, rail: bool) -> Topology:
    switch = dv.QUANTUM2_NDR if radix == dv.QUANTUM2_NDR.radix else toy_switch(radix)
    return leaf_spine(
        server=dgx_h100(),
        servers=servers,
        switch=switch,
        fabric_link=lk.IB_NDR,
        rail_optimised=rail,
        oversubscription=oversub,
    )


def _switches(topo: Topology, tier: int) -> list[int]:
    g = topo.graph
    return [n for n, d in g.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH and d.get("tier") == tier]


def _nics(topo: Topology) -> list[int]:
    return [n for info in topo.servers for n in info.nics]


def _leaf_of(topo: Topology, nic: int) -> int:
    return int(topo.link_dst[topo.nic_leaf_link[nic]])


# Closed forms (fat_tree.py docstring): d = floor(radix * R / (R + 1)) NIC ports per leaf;
# rail-optimised: leaves = K * ceil(N / d); ToR: floor(d / K) whole servers per leaf, so
# leaves = ceil(N / floor(d / K)); a leaf with n NICs gets ceil(n / R) uplinks;
# spines = max over leaves of ceil(n / R) (0 when there is a single leaf).
# Radix 8 cannot give several leaves per rail on an 8-NIC server: that is >= 16 leaves, more
# than an 8-port spine takes (see test_more_leaves_than_spine_radix_is_an_error), so the small
# switch here has radix 16.
CASES = [
    # (radix, N, R, rail, leaves, spines)
    # d = floor(16*1/2) = 8; ceil(16/8) = 2 leaves/rail -> 16 leaves of 8 NICs; spines = ceil(8/1) = 8
    pytest.param(16, 16, 1, True, 16, 8, id="r16-N16-R1-rail"),
    # d = 8; ceil(12/8) = 2 leaves/rail -> 16 leaves of 8 and 4 NICs; spines = max(8, 4) = 8
    pytest.param(16, 12, 1, True, 16, 8, id="r16-N12-R1-rail"),
    # d = floor(48/4) = 12; ceil(16/12) = 2/rail -> 16 leaves of 12 and 4; uplinks ceil(12/3)=4,
    # ceil(4/3)=2 -> spines 4
    pytest.param(16, 16, 3, True, 16, 4, id="r16-N16-R3-rail"),
    # d = floor(32/3) = 10; ceil(10/10) = 1/rail -> 8 leaves of 10; spines = ceil(10/2) = 5
    pytest.param(16, 10, 2, True, 8, 5, id="r16-N10-R2-rail"),
    # d = 8; 1 leaf/rail -> 8 leaves of 2 NICs; spines = ceil(2/1) = 2
    pytest.param(16, 2, 1, True, 8, 2, id="r16-N2-R1-rail"),
    # Quantum-2 (radix 64): d = 32; 1 leaf/rail -> 8 leaves of 4; spines = 4 (build_system dgx-h100 x4)
    pytest.param(64, 4, 1, True, 8, 4, id="q2-N4-R1-rail"),
    # ToR (not rail-optimised), d a multiple of K so whole servers fill leaves:
    # d = 8 = one server per leaf -> 3 leaves of 8 NICs; spines = 8
    pytest.param(16, 3, 1, False, 3, 8, id="r16-N3-R1-tor"),
    # d = floor(64*3/4) = 48 = 6 servers per leaf -> ceil(7/6) = 2 leaves of 48 and 8 NICs;
    # uplinks ceil(48/3) = 16, ceil(8/3) = 3 -> spines 16
    pytest.param(64, 7, 3, False, 2, 16, id="q2-N7-R3-tor"),
    # d = 32 = 4 servers: one leaf holds all 32 NICs; a single leaf needs no spine
    pytest.param(64, 4, 1, False, 1, 0, id="q2-N4-R1-tor-single-leaf"),
]


@pytest.mark.parametrize("radix, servers, oversub, rail, leaves, spines", CASES)
def test_switch_counts_match_closed_forms(radix, servers, oversub, rail, leaves, spines):
    topo = _build(radix, servers, oversub, rail)
    d = math.floor(radix * oversub / (oversub + 1))
    # the hand numbers agree with the closed forms
    if rail:
        assert leaves == K_NICS * math.ceil(servers / d)
    else:
        assert leaves == math.ceil(servers / (d // K_NICS))  # floor(d / K) whole servers per leaf
    assert len(_switches(topo, 1)) == leaves
    assert len(_switches(topo, 2)) == spines
    # every leaf has at most d NICs, and uplinks = ceil(n / R) to spines 0..u-1
    g = topo.graph
    for leaf in _switches(topo, 1):
        down = [v for v in g.successors(leaf) if topo.node_kind(v) == NodeKind.NIC]
        up = [v for v in g.successors(leaf) if topo.node_kind(v) == NodeKind.FABRIC_SWITCH]
        assert 1 <= len(down) <= d
        assert len(up) == (math.ceil(len(down) / oversub) if leaves > 1 else 0)
        assert len(set(up)) == len(up)  # one uplink to each of u distinct spines
        assert len(down) + len(up) <= radix  # the leaf has enough ports
    for spine in _switches(topo, 2):
        assert g.out_degree(spine) <= radix


@pytest.mark.parametrize("radix, servers, oversub, rail, leaves, spines", CASES)
def test_every_nic_has_exactly_one_uplink(radix, servers, oversub, rail, leaves, spines):
    topo = _build(radix, servers, oversub, rail)
    g = topo.graph
    nics = _nics(topo)
    assert len(nics) == servers * K_NICS
    assert set(topo.nic_leaf_link) == set(nics)
    for nic in nics:
        out = [(v, key) for _, v, key in g.out_edges(nic, keys=True) if topo.node_kind(v) == NodeKind.FABRIC_SWITCH]
        assert len(out) == 1, topo.node_name(nic)
        leaf, link = out[0]
        assert topo.nic_leaf_link[nic] == link
        assert topo.link_tier[link] == LinkTier.NIC
        assert g.nodes[leaf]["tier"] == 1
        # and exactly one link back down from that leaf
        assert len(g.get_edge_data(leaf, nic)) == 1


RAIL_CASES = [case for case in CASES if case.values[3]]


@pytest.mark.parametrize("radix, servers, oversub, rail, leaves, spines", RAIL_CASES)
def test_rail_optimised_puts_each_rail_on_its_own_leaves(radix, servers, oversub, rail, leaves, spines):
    topo = _build(radix, servers, oversub, rail)
    leaves_of_rail = [{_leaf_of(topo, info.nics[j]) for info in topo.servers} for j in range(K_NICS)]
    per_rail = math.ceil(servers / math.floor(radix * oversub / (oversub + 1)))
    for j, rail_leaves in enumerate(leaves_of_rail):
        assert len(rail_leaves) == per_rail
        for k in range(j):
            assert not rail_leaves & leaves_of_rail[k]  # rails never share a leaf


@pytest.mark.parametrize("radix, servers, rail", [(16, 16, True), (16, 12, True), (16, 3, False), (64, 4, True)])
def test_non_blocking_leaf_uplink_capacity_equals_downlink_capacity(radix, servers, rail):
    topo = _build(radix, servers, 1, rail)
    g = topo.graph
    cap = topo.link_capacity_bytes_per_s
    for leaf in _switches(topo, 1):
        down = up = 0.0
        for _, v, key in g.out_edges(leaf, keys=True):
            if topo.node_kind(v) == NodeKind.NIC:
                down += cap[key]
            else:
                assert topo.link_tier[key] == LinkTier.FABRIC_1
                up += cap[key]
        assert down > 0
        assert up == pytest.approx(down, rel=1e-12)


def test_oversubscribed_leaf_has_ratio_r():
    # radix 16, R = 3, N = 16, rail: first leaf of each rail has 12 NICs and ceil(12/3) = 4
    # uplinks, so downlink / uplink capacity = 12 / 4 = 3 exactly (same cable on both sides)
    topo = _build(16, 16, 3, True)
    g = topo.graph
    cap = topo.link_capacity_bytes_per_s
    leaf = _leaf_of(topo, topo.servers[0].nics[0])
    down = sum(cap[k] for _, v, k in g.out_edges(leaf, keys=True) if topo.node_kind(v) == NodeKind.NIC)
    up = sum(cap[k] for _, v, k in g.out_edges(leaf, keys=True) if topo.node_kind(v) == NodeKind.FABRIC_SWITCH)
    assert down / up == pytest.approx(3.0)


def test_tor_keeps_all_nics_of_a_server_on_one_leaf():
    # Docstring: "Not rail-optimised: all NICs of a server go to the same top-of-rack leaf,
    # servers filling leaves in order." Quantum-2 (radix 64) at R = 2: d = floor(128/3) = 42 NIC
    # ports per leaf, room for floor(42/8) = 5 whole servers. 6 servers -> leaf0 holds servers 0-4
    # (40 NICs), leaf1 holds server 5 (8 NICs); no server may straddle two leaves.
    # Spines = max(ceil(40/2), ceil(8/2)) = 20 (a server split 42 + 6 would give 21).
    topo = _build(64, 6, 2, False)
    for info in topo.servers:
        leaves = {topo.node_name(_leaf_of(topo, nic)) for nic in info.nics}
        assert len(leaves) == 1, f"{info.name} NICs are spread over {sorted(leaves)}"
    assert [_leaf_of(topo, info.nics[0]) for info in topo.servers].count(_leaf_of(topo, topo.servers[0].nics[0])) == 5
    assert len(_switches(topo, 1)) == 2
    assert len(_switches(topo, 2)) == 20


def test_tor_leaf_smaller_than_a_server_is_an_error():
    # radix 8, R = 1: d = 4 NIC ports per leaf < the 8 NICs of one DGX H100, so no leaf can hold
    # a whole server
    with pytest.raises(ValueError, match="leaf_spine") as err:
        _build(8, 3, 1, False)
    msg = str(err.value)
    assert "8 NICs" in msg
    assert "4 down ports" in msg


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------


def test_more_leaves_than_spine_radix_is_an_error():
    # radix 8, R = 1: d = 4; 5 servers -> ceil(5/4) = 2 leaves per rail x 8 rails = 16 leaves > 8 ports
    with pytest.raises(ValueError) as err:
        _build(8, 5, 1, True)
    msg = str(err.value)
    assert "16 leaves" in msg
    assert "8 ports" in msg
    assert "5 servers" in msg


def test_exactly_radix_leaves_is_allowed():
    # radix 16, R = 1, N = 16: 16 leaves == 16 spine ports: the boundary is allowed (case above)
    topo = _build(16, 16, 1, True)
    assert len(_switches(topo, 1)) == 16


@pytest.mark.parametrize("servers", [0, -1, 2.0, True])
def test_bad_server_count_is_rejected(servers):
    with pytest.raises(ValueError, match=r"leaf_spine\.servers") as err:
        _build(16, servers, 1, True)
    assert repr(servers) in str(err.value)


@pytest.mark.parametrize("oversub", [0.5, 0, -1, math.inf, math.nan])
def test_bad_oversubscription_is_rejected(oversub):
    with pytest.raises(ValueError, match=r"leaf_spine\.oversubscription") as err:
        _build(16, 2, oversub, True)
    assert repr(oversub) in str(err.value)


def test_server_without_nic_cannot_be_joined():
    with pytest.raises(ValueError, match=r"leaf_spine\.server:") as err:
        leaf_spine(server=pcie_rtx4090(), servers=2, switch=dv.QUANTUM2_NDR, fabric_link=lk.IB_NDR)
    assert "no NIC" in str(err.value)
    assert pcie_rtx4090().name in str(err.value)


def test_single_server_without_nic_is_fine_and_has_no_fabric():
    topo = leaf_spine(server=pcie_rtx4090(), servers=1, switch=dv.QUANTUM2_NDR, fabric_link=lk.IB_NDR)
    assert topo.num_gpus == 8
    assert not _switches(topo, 1) and not _switches(topo, 2)


def test_single_dgx_has_no_fabric_even_with_nics():
    topo = _build(64, 1, 1, True)
    assert not _switches(topo, 1)
    assert dict(topo.nic_leaf_link) == {}


def test_single_nic_servers_on_one_leaf_need_no_spine():
    # 1 NIC per server, radix 16, R = 1: d = 8; 4 servers -> 1 rail x ceil(4/8) = 1 leaf, 0 spines
    server = dataclasses.replace(dgx_h100(), nics=1, pcie_switches=0, pcie_switch=None)
    topo = leaf_spine(server=server, servers=4, switch=toy_switch(16), fabric_link=lk.IB_NDR)
    assert len(_switches(topo, 1)) == 1
    assert len(_switches(topo, 2)) == 0


# ================================================================================================
# add_servers: stamping copies of one server gives exactly what add_server gives
# ================================================================================================


def _host() -> ServerSpec:
    """``BOX`` (1 GPU, 1 NIC: one NIC port per server, so the k-ary closed forms count servers), as a
    server maker like ``dgx_h100``."""
    return BOX


@pytest.mark.parametrize("make", [dgx_h100, pcie_rtx4090, _host], ids=["dgx-h100", "rtx4090", "host"])
def test_add_servers_equals_add_server_one_by_one(make):
    spec = make()
    one, many = TopologyBuilder("a"), TopologyBuilder("a")
    # something already in the builder, so ids do not start at 0
    for builder in (one, many):
        builder.add_node(NodeKind.FABRIC_SWITCH, "sw")
    expected = [add_server(one, spec, s) for s in range(2, 5)]
    got = add_servers(many, spec, 3, first_index=2)
    assert got == expected == one.servers == many.servers
    assert list(one.graph.nodes(data=True)) == list(many.graph.nodes(data=True))
    assert list(one.graph.edges(keys=True, data=True)) == list(many.graph.edges(keys=True, data=True))
    for attr in (
        "_src",
        "_dst",
        "_cap",
        "_lat",
        "_flow_cap",
        "_kind",
        "_tier",
        "_names",
        "_gpus",
        "_gpu_server",
        "_gpu_local",
    ):
        assert getattr(one, attr) == getattr(many, attr), attr


def test_module_doctests_pass():
    assert doctest.testmod(fat_tree_module).failed == 0


# ================================================================================================
# fat_tree: closed forms
# ================================================================================================


def _tiers(topo: Topology) -> tuple[int, int, int]:
    return tuple(len(_switches(topo, t)) for t in (1, 2, 3))


def _ports(topo: Topology, node: int) -> int:
    return topo.graph.out_degree(node)  # every cable is one link each way


def _fabric_nics(topo: Topology) -> int:
    return len(topo.nic_leaf_link)


def _ft(server, servers, k, *, oversub=1.0, rail=True, planes=1) -> Topology:
    return fat_tree(
        server=server,
        servers=servers,
        switch=toy_switch(k),
        fabric_link=lk.IB_NDR,
        rail_optimised=rail,
        oversubscription=oversub,
        planes=planes,
    )


@pytest.mark.parametrize("k", [4, 6, 8])
def test_full_k_ary_fat_tree_has_k3_over_4_hosts_and_5k2_over_4_switches(k):
    # k^3/4 single-NIC hosts fill every edge port: k pods of k/2 edges and k/2 aggregation switches,
    # (k/2)^2 cores; 5k^2/4 switches, every one of them using all k ports
    topo = _ft(_host(), k**3 // 4, k)
    assert _tiers(topo) == (k * k // 2, k * k // 2, k * k // 4)
    assert sum(_tiers(topo)) == 5 * k * k // 4
    for n in topo.graph.nodes:
        if topo.node_kind(n) == NodeKind.FABRIC_SWITCH:
            assert _ports(topo, n) == k, topo.node_name(n)
    # each core switch reaches each of the k pods exactly once (c = floor(k / k) = 1)
    g = topo.graph
    for core in _switches(topo, 3):
        pods = [g.nodes[v]["pod"] for v in g.successors(core)]
        assert sorted(pods) == list(range(k))


FT_CASES = [
    # (server, N, k, R, rail, planes, (edges, aggs, cores))
    # hosts (K = 1), k = 8, R = 1: d = 4, E = 10 edges, pods = ceil(10/4) = 3 holding 4, 4, 2 edges,
    # each pod u = 4 aggs (D = 4, 4, 2). Core: floor(8/3) = 2 links per pod per core; groups 0-3
    # each need ceil(4/2) = 2 cores -> 8. Switches 10 + 12 + 8.
    pytest.param(_host, 40, 8, 1, True, 1, (10, 12, 8), id="hosts-k8-N40"),
    # hosts, k = 8, R = 3: d = floor(24/4) = 6, u = ceil(6/3) = 2; E = 5, pods 2 holding 4 and 1 edges,
    # 2 aggs each (D = 4 and 1). Core: floor(8/2) = 4 links per pod; groups 0, 1: ceil(4/4) = 1 -> 2.
    pytest.param(_host, 30, 8, 3, True, 1, (5, 4, 2), id="hosts-k8-N30-R3"),
    # DGX H100 (K = 8), k = 8, R = 1, rail-optimised: d = 4, G = 2 groups (4 and 2 servers), E = 16
    # rail-major edges: rail r has edges (4 NICs, u = 4) and (2 NICs, u = 2); pods of 4 edges = rails
    # 2p, 2p+1. Each pod: 4 aggs with D = 4, 4, 2, 2. Core floor(8/4) = 2 per pod: groups 0, 1 need
    # ceil(4/2) = 2 cores, groups 2, 3 ceil(2/2) = 1 -> 6.
    pytest.param(dgx_h100, 6, 8, 1, True, 1, (16, 16, 6), id="dgx-k8-N6-rail"),
    # DGX H100, k = 16, R = 1, ToR: d = 8 = one server per edge, E = 10, pods of 8: 8 and 2 edges,
    # 8 aggs each (D = 8 and 2). Core floor(16/2) = 8 per pod: groups 0..7 each ceil(8/8) = 1 -> 8.
    pytest.param(dgx_h100, 10, 16, 1, False, 1, (10, 16, 8), id="dgx-k16-N10-tor"),
    # one pod: DGX H100, k = 16, ToR, N = 5: E = 5 <= 8, c = floor(8/5) = 1, ceil(8/1) = 8 aggs, no core
    pytest.param(dgx_h100, 5, 16, 1, False, 1, (5, 8, 0), id="dgx-k16-N5-tor-one-pod"),
    # one edge: hosts, k = 8, N = 3 <= d = 4: a single edge switch, nothing above it
    pytest.param(_host, 3, 8, 1, True, 1, (1, 0, 0), id="hosts-single-edge"),
    # 2 planes of DGX H100 (K_p = 4), k = 8, N = 8: per plane d = 4, G = 2, E = 8, 2 full pods of 4 aggs
    # (D = 4), core floor(8/2) = 4 per pod -> 4 groups x 1 core. Per plane 8 + 8 + 4; x 2 planes.
    pytest.param(dgx_h100, 8, 8, 1, True, 2, (16, 16, 8), id="dgx-k8-N8-2planes"),
    # 4 planes (K_p = 2), k = 8, N = 4: per plane d = 4, G = 1, E = 2 edges in 1 pod, c = floor(4/2) = 2,
    # ceil(4/2) = 2 aggs, no core. x 4 planes.
    pytest.param(dgx_h100, 4, 8, 1, True, 4, (8, 8, 0), id="dgx-k8-N4-4planes"),
]


@pytest.fixture(scope="module")
def ft_built():
    cache = {}

    def get(server, n, k, r, rail, planes):
        key = (server.__name__, n, k, r, rail, planes)
        if key not in cache:
            cache[key] = _ft(server(), n, k, oversub=r, rail=rail, planes=planes)
        return cache[key]

    return get


@pytest.mark.parametrize("server, n, k, r, rail, planes, counts", FT_CASES)
def test_fat_tree_counts_match_hand_derivations(ft_built, server, n, k, r, rail, planes, counts):
    topo = ft_built(server, n, k, r, rail, planes)
    assert _tiers(topo) == counts


@pytest.mark.parametrize("server, n, k, r, rail, planes, counts", FT_CASES)
def test_fat_tree_invariants(ft_built, server, n, k, r, rail, planes, counts):
    topo = ft_built(server, n, k, r, rail, planes)
    g = topo.graph
    cap = topo.link_capacity_bytes_per_s
    nic_ports = n * server().nics
    assert _fabric_nics(topo) == nic_ports
    d = math.floor(k * r / (r + 1))
    used = 0
    for node in g.nodes:
        if topo.node_kind(node) != NodeKind.FABRIC_SWITCH:
            continue
        tier = g.nodes[node]["tier"]
        down = [
            key
            for _, v, key in g.out_edges(node, keys=True)
            if topo.node_kind(v) == NodeKind.NIC or g.nodes[v].get("tier", 0) < tier
        ]
        up = [
            key
            for _, v, key in g.out_edges(node, keys=True)
            if topo.node_kind(v) == NodeKind.FABRIC_SWITCH and g.nodes[v]["tier"] > tier
        ]
        assert len(down) + len(up) == _ports(topo, node) <= k
        used += _ports(topo, node)
        if tier == 1:
            assert 1 <= len(down) <= d
            if counts[1]:
                assert len(up) == math.ceil(len(down) / r)  # down:up = R:1 at the edge
            assert all(topo.link_tier[key] == LinkTier.FABRIC_1 for key in up)
        elif tier == 2:
            assert len(down) <= k // 2  # half the ports face the edges
            if counts[2]:
                assert cap[up].sum() == pytest.approx(cap[down].sum())  # non-blocking above the edge
                assert all(topo.link_tier[key] == LinkTier.FABRIC_2 for key in up)
            else:
                assert not up
        else:
            assert tier == 3 and not up
    # switch ports per NIC port: 1 (single edge), 3 (one pod), 5 (3 tiers) at R = 1
    if r == 1:
        per_port = 5 if counts[2] else 3 if counts[1] else 1
        assert used == per_port * nic_ports


@pytest.mark.parametrize("server, n, k, r, rail, planes, counts", FT_CASES)
def test_fat_tree_planes_are_independent(ft_built, server, n, k, r, rail, planes, counts):
    topo = ft_built(server, n, k, r, rail, planes)
    g = topo.graph
    switch_graph = g.subgraph(_fabric_switches(topo)).to_undirected()
    components = list(nx.connected_components(switch_graph))
    assert len(components) == planes
    for comp in components:
        assert len({g.nodes[s]["plane"] for s in comp}) == 1
    for info in topo.servers:
        for j, nic in enumerate(info.nics):
            assert g.nodes[_leaf_of(topo, nic)]["plane"] == j % planes


def test_rail_optimised_fat_tree_puts_a_rail_on_consecutive_edges_in_one_pod(ft_built):
    # dgx-k8-N6-rail: rail r's two edges are edges 2r and 2r+1, both in pod r // 2
    topo = ft_built(dgx_h100, 6, 8, 1, True, 1)
    g = topo.graph
    for info in topo.servers:
        for j, nic in enumerate(info.nics):
            leaf = _leaf_of(topo, nic)
            assert g.nodes[leaf]["rail"] == j
            assert g.nodes[leaf]["pod"] == j // 2
            assert topo.node_name(leaf) == f"edge{2 * j + info.index // 4}"  # groups of d = 4 servers


def _fabric_switches(topo: Topology) -> list[int]:
    return [n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH]


def _assert_walk(topo: Topology, path: np.ndarray, src: int, dst: int) -> None:
    assert path.size > 0
    assert topo.link_src[path[0]] == topo.gpu_nodes[src]
    assert topo.link_dst[path[-1]] == topo.gpu_nodes[dst]
    assert np.array_equal(topo.link_dst[path[:-1]], topo.link_src[path[1:]])


def _switch_hops(topo: Topology, path: np.ndarray) -> tuple[int, int, int]:
    """(first switch, last switch, switch-to-switch links) of an inter-server path."""
    is_sw = [
        topo.node_kind(int(topo.link_src[l])) == NodeKind.FABRIC_SWITCH
        and topo.node_kind(int(topo.link_dst[l])) == NodeKind.FABRIC_SWITCH
        for l in path
    ]
    up = next(l for l in path if topo.link_tier[l] == LinkTier.NIC)
    down = [l for l in path if topo.link_tier[l] == LinkTier.NIC][-1]
    return int(topo.link_dst[up]), int(topo.link_src[down]), sum(is_sw)


@pytest.mark.parametrize("case", ["hosts-k8-N40", "dgx-k8-N6-rail", "dgx-k16-N10-tor", "dgx-k8-N8-2planes"])
def test_fat_tree_every_pair_routes_over_shortest_paths(ft_built, case):
    server, n, k, r, rail, planes, _ = next(c.values for c in FT_CASES if c.id == case)
    topo = ft_built(server, n, k, r, rail, planes)
    lengths = dict(nx.all_pairs_shortest_path_length(topo.graph.subgraph(_fabric_switches(topo))))
    # planes: a GPU can only send through a NIC on the destination NIC's plane, which PXN does
    for pxn in (True,) if planes > 1 else (True, False):
        router = Router(topo, pxn=pxn, seed=3)
        for src in range(topo.num_gpus):
            for dst in range(topo.num_gpus):
                if src == dst:
                    continue
                path = router.path(src, dst, flow_key=src)
                _assert_walk(topo, path, src, dst)
                if topo.gpu_server[src] != topo.gpu_server[dst]:
                    a, b, hops = _switch_hops(topo, path)
                    assert hops == lengths[a][b]


def test_fat_tree_ecmp_spreads_over_aggregation_and_core(ft_built):
    # hosts-k8-N40: host 0 (pod 0) -> host 39 (pod 2): edge -> 4 aggs -> 2 cores each -> ...; every
    # aggregation switch of pod 0 reaches pod 2 (its core group has an aggregation switch there), so
    # 256 hashed flow keys use all 4 and more than one core
    topo = ft_built(_host, 40, 8, 1, True, 1)
    router = Router(topo, seed=0)
    g = topo.graph
    aggs, cores = set(), set()
    for key in range(256):
        for l in router.path(0, 39, flow_key=key):
            v = int(topo.link_dst[l])
            if topo.node_kind(v) == NodeKind.FABRIC_SWITCH:
                (aggs if g.nodes[v]["tier"] == 2 and g.nodes[v]["pod"] == 0 else cores).add(v)
    assert len(aggs) == 4
    assert len([c for c in cores if g.nodes[c]["tier"] == 3]) > 1


def test_same_rail_traffic_stays_in_its_pod(ft_built):
    # dgx-k8-N6-rail with PXN: GPU i of server 0 and of server 5 sit on rail i's two edges in one pod:
    # edge -> aggregation -> edge, no core link
    topo = ft_built(dgx_h100, 6, 8, 1, True, 1)
    router = Router(topo, pxn=True)
    for i in range(8):
        for key in range(8):
            path = router.path(topo.gpu(0, i), topo.gpu(5, i), flow_key=key)
            tiers = [int(topo.link_tier[l]) for l in path]
            assert tiers.count(LinkTier.FABRIC_2) == 0
            assert tiers.count(LinkTier.FABRIC_1) == 2


@pytest.mark.parametrize(
    "make, k, rail, oversub, planes",
    [
        (_host, 8, True, 1.0, 1),
        (dgx_h100, 8, True, 1.0, 1),
        (dgx_h100, 16, False, 1.0, 1),
        (dgx_h100, 8, True, 3.0, 2),
    ],
)
def test_fat_tree_max_servers_is_the_boundary(make, k, rail, oversub, planes):
    # hosts k = 8: 8 pods x 4 edges x d = 4 = 128 = k^3/4. DGX k = 8 rail: 32 edges / 8 rails x 4 = 16.
    # DGX k = 16 ToR: 16 x 8 edges x floor(8 / 8) = 128. DGX k = 8, R = 3, 2 planes: d = 6,
    # 32 edges / 4 rails x 6 = 48.
    expected = {
        (_host, 8, True, 1.0, 1): 128,
        (dgx_h100, 8, True, 1.0, 1): 16,
        (dgx_h100, 16, False, 1.0, 1): 128,
        (dgx_h100, 8, True, 3.0, 2): 48,
    }[(make, k, rail, oversub, planes)]
    server = make()
    most = fat_tree_max_servers(
        server=server, switch=toy_switch(k), rail_optimised=rail, oversubscription=oversub, planes=planes
    )
    assert most == expected
    if make is _host:  # building the boundary itself is cheap with 1-GPU hosts
        topo = _ft(server, most, k, oversub=oversub, rail=rail, planes=planes)
        assert len(_switches(topo, 1)) == k * k // 2
    with pytest.raises(ValueError, match=r"fat_tree: .* pods") as err:
        _ft(server, most + 1, k, oversub=oversub, rail=rail, planes=planes)
    assert f"{most} servers" in str(err.value)


def test_leaf_spine_max_servers_matches_its_closed_form():
    # radix 16, K = 8, R = 1: floor(16 / 8) x 8 = 16 servers (16 leaves = 16 spine ports);
    # ToR: 16 leaves x floor(8 / 8) = 16; Quantum-2 DGX H100: 8 x 32 = 256
    assert leaf_spine_max_servers(server=dgx_h100(), switch=toy_switch(16)) == 16
    assert leaf_spine_max_servers(server=dgx_h100(), switch=toy_switch(16), rail_optimised=False) == 16
    assert leaf_spine_max_servers(server=dgx_h100(), switch=dv.QUANTUM2_NDR) == 256
    # 2 planes: K_p = 4 -> floor(16 / 4) x 8 = 32
    assert leaf_spine_max_servers(server=dgx_h100(), switch=toy_switch(16), planes=2) == 32
    _build(16, 16, 1, True)  # the boundary builds (see test_exactly_radix_leaves_is_allowed)
    # one more server: 8 rails x ceil(17/8) = 24 leaves > 16 spine ports
    with pytest.raises(ValueError, match="24 leaves"):
        _build(16, 17, 1, True)


@pytest.mark.parametrize("k, msg", [(7, "7"), (0, "0"), (18, "18"), (2.0, "2.0"), ("8", "'8'")])
def test_bad_k_is_rejected(k, msg):
    with pytest.raises(ValueError, match=r"fat_tree\.k: ") as err:
        fat_tree(server=_host(), servers=5, switch=toy_switch(16), fabric_link=lk.IB_NDR, k=k)
    assert msg in str(err.value) and "even integer in 2..16" in str(err.value)


def test_k_smaller_than_the_radix_uses_only_k_ports():
    # radix 16 switches wired as a k = 4 fat-tree: 16 hosts fill it (4 pods), every switch uses 4 ports
    topo = fat_tree(server=_host(), servers=16, switch=toy_switch(16), fabric_link=lk.IB_NDR, k=4)
    assert _tiers(topo) == (8, 8, 4)
    assert all(_ports(topo, s) == 4 for s in _fabric_switches(topo))
    assert all(topo.graph.nodes[s]["radix"] == 16 for s in _fabric_switches(topo))


@pytest.mark.parametrize("planes", [3, 0, 16, 1.0])
def test_planes_must_divide_the_nic_count(planes):
    for fn in (fat_tree, leaf_spine):
        with pytest.raises(ValueError, match=rf"{fn.__name__}\.planes: {planes!r} is not allowed") as err:
            fn(server=dgx_h100(), servers=2, switch=toy_switch(16), fabric_link=lk.IB_NDR, planes=planes)
        assert "1, 2, 4, 8" in str(err.value)


@pytest.mark.parametrize("fn", [fat_tree, rail_only])
@pytest.mark.parametrize(
    "field, value", [("servers", 0), ("servers", 1.5), ("oversubscription", 0.5), ("oversubscription", math.nan)]
)
def test_bad_common_arguments_name_the_generator_and_field(fn, field, value):
    kwargs = dict(server=dgx_h100(), servers=2, switch=toy_switch(16), fabric_link=lk.IB_NDR)
    kwargs[field] = value
    with pytest.raises(ValueError, match=rf"{fn.__name__}\.{field}: {value!r} is not allowed"):
        fn(**kwargs)


def test_fat_tree_tor_with_a_server_wider_than_an_edge_is_an_error():
    # k = 8: d = 4 ports < the 8 NICs of a DGX H100
    with pytest.raises(ValueError, match=r"fat_tree: a DGX H100 has 8 NICs .* 4 down ports"):
        _ft(dgx_h100(), 3, 8, rail=False)


# ================================================================================================
# Multi-plane leaf-spine
# ================================================================================================


def test_multi_plane_leaf_spine_counts_and_independence():
    # DGX H100, 2 planes (K_p = 4), radix 16, R = 1, N = 12: per plane d = 8, leaves = 4 x ceil(12/8) = 8
    # (4 with 8 NICs, 4 with 4), spines = max(8, 4) = 8; x 2 planes = 16 leaves, 16 spines
    topo = leaf_spine(server=dgx_h100(), servers=12, switch=toy_switch(16), fabric_link=lk.IB_NDR, planes=2)
    assert len(_switches(topo, 1)) == 16 and len(_switches(topo, 2)) == 16
    g = topo.graph
    comps = list(nx.connected_components(g.subgraph(_fabric_switches(topo)).to_undirected()))
    assert len(comps) == 2
    for info in topo.servers:
        for j, nic in enumerate(info.nics):
            leaf = _leaf_of(topo, nic)
            assert g.nodes[leaf]["plane"] == j % 2 and g.nodes[leaf]["rail"] == j
            assert topo.node_name(leaf).startswith(f"plane{j % 2}.leaf")
    # with PXN every GPU pair routes (the sending NIC is on the destination NIC's plane)
    router = Router(topo, pxn=True)
    for src in range(0, topo.num_gpus, 5):
        for dst in range(topo.num_gpus):
            if src != dst:
                _assert_walk(topo, router.path(src, dst), src, dst)


def test_one_plane_keeps_the_historical_switch_names():
    topo = _build(64, 4, 1, True)
    names = sorted(topo.node_name(s) for s in _fabric_switches(topo))
    assert names == sorted([f"leaf{i}" for i in range(8)] + [f"spine{i}" for i in range(4)])


# ================================================================================================
# rail-only
# ================================================================================================


def test_rail_only_with_a_rail_per_switch():
    # 64 DGX H100 on Quantum-2 (radix 64): each rail's 64 NICs fit one switch: 8 switches, no tier 2
    topo = rail_only(server=dgx_h100(), servers=64, switch=dv.QUANTUM2_NDR, fabric_link=lk.IB_NDR)
    assert len(_switches(topo, 1)) == 8 and not _switches(topo, 2)
    for leaf in _switches(topo, 1):
        assert _ports(topo, leaf) == 64


def test_rail_only_leaf_spine_per_rail_counts_and_no_cross_rail_switch():
    # radix 8, R = 1, N = 12 DGX > 8: d = 4, L = 3 leaves per rail (4 NICs, 4 uplinks each); a spine
    # takes floor(8/3) = 2 links from each leaf -> ceil(4/2) = 2 spines per rail; 8 rails x (3 + 2)
    topo = rail_only(server=dgx_h100(), servers=12, switch=toy_switch(8), fabric_link=lk.IB_NDR)
    assert len(_switches(topo, 1)) == 24 and len(_switches(topo, 2)) == 16
    g = topo.graph
    comps = list(nx.connected_components(g.subgraph(_fabric_switches(topo)).to_undirected()))
    assert len(comps) == 8
    for comp in comps:
        assert len({g.nodes[s]["rail"] for s in comp}) == 1
    for info in topo.servers:
        for j, nic in enumerate(info.nics):
            assert g.nodes[_leaf_of(topo, nic)]["rail"] == j
    for spine in _switches(topo, 2):
        assert _ports(topo, spine) == 6  # 2 links from each of 3 leaves
        assert len(set(g.successors(spine))) == 3


def test_rail_only_routes_same_rail_pairs_and_pxn_pairs_over_shortest_paths():
    topo = rail_only(server=dgx_h100(), servers=12, switch=toy_switch(8), fabric_link=lk.IB_NDR)
    lengths = dict(nx.all_pairs_shortest_path_length(topo.graph.subgraph(_fabric_switches(topo))))
    own = Router(topo, pxn=False)
    pxn = Router(topo, pxn=True)
    for src in range(topo.num_gpus):
        for dst in range(topo.num_gpus):
            if src == dst or topo.gpu_server[src] == topo.gpu_server[dst]:
                continue
            # with PXN the sender uses the NIC on the destination's rail, so every pair routes
            paths = [pxn.path(src, dst, flow_key=dst)]
            if topo.gpu_local[src] == topo.gpu_local[dst]:  # same rail: own NIC works too
                paths.append(own.path(src, dst, flow_key=dst))
            for path in paths:
                _assert_walk(topo, path, src, dst)
                a, b, hops = _switch_hops(topo, path)
                assert topo.graph.nodes[a]["rail"] == topo.gpu_local[dst]
                assert hops == lengths[a][b] <= 2


def test_rail_only_max_servers_is_the_boundary():
    # radix 8, R = 1: d = 4, at most 8 leaves per rail -> 32 servers; 1-NIC hosts keep it cheap
    assert rail_only_max_servers(server=_host(), switch=toy_switch(8)) == 32
    assert rail_only_max_servers(server=dgx_h100(), switch=dv.QUANTUM2_NDR) == 64 * 32
    topo = rail_only(server=_host(), servers=32, switch=toy_switch(8), fabric_link=lk.IB_NDR)
    assert len(_switches(topo, 1)) == 8 and len(_switches(topo, 2)) == 4  # floor(8/8) = 1 link per leaf
    with pytest.raises(ValueError, match=r"rail_only: 33 servers need 9 leaves per rail.*at most 32 servers"):
        rail_only(server=_host(), servers=33, switch=toy_switch(8), fabric_link=lk.IB_NDR)


# ================================================================================================
# Scale (the sizes of the design brief; slow because Topology.validate checks names pairwise)
# ================================================================================================


@pytest.mark.slow
@pytest.mark.parametrize("servers, counts", [(512, (128, 128, 64)), (2048, (512, 512, 256))])
def test_dgx_h100_fat_tree_at_scale(servers, counts):
    # module docstring worked numbers: 512 -> 4 pods, 128 + 128 + 64; 2048 -> 16 pods, 512 + 512 + 256
    topo = fat_tree(server=dgx_h100(), servers=servers, switch=dv.QUANTUM2_NDR, fabric_link=lk.IB_NDR)
    assert topo.num_gpus == 8 * servers
    assert _tiers(topo) == counts
    router = Router(topo)
    for key in range(16):
        src, dst = (key * 977) % topo.num_gpus, (key * 7919 + 13) % topo.num_gpus
        if topo.gpu_server[src] != topo.gpu_server[dst]:
            _assert_walk(topo, router.path(src, dst, flow_key=key), src, dst)
