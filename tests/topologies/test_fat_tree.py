"""Tests for topologies.fat_tree.leaf_spine: closed-form switch counts, cabling, validation."""

from __future__ import annotations

import dataclasses
import math

import pytest

from topologies import devices as dv
from topologies import links as lk
from topologies.fat_tree import leaf_spine
from topologies.node import dgx_h100, pcie_rtx4090
from topologies.topology import LinkTier, NodeKind, Topology

K_NICS = 8   # DGX H100: 8 compute NICs, one per rail


def _switch(radix: int) -> dv.SwitchSpec:
    return dv.SwitchSpec(name=f"toy_radix{radix}", kind="infiniband", radix=radix,
                         port_rate_bytes_per_s=lk.IB_NDR.line_rate_bytes_per_s, latency_s=2e-7)


def _build(radix: int, servers: int, oversub: float, rail: bool) -> Topology:
    switch = dv.QUANTUM2_NDR if radix == dv.QUANTUM2_NDR.radix else _switch(radix)
    return leaf_spine(server=dgx_h100(), servers=servers, switch=switch, fabric_link=lk.IB_NDR,
                      rail_optimised=rail, oversubscription=oversub)


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
        assert leaves == math.ceil(servers / (d // K_NICS))   # floor(d / K) whole servers per leaf
    assert len(_switches(topo, 1)) == leaves
    assert len(_switches(topo, 2)) == spines
    # every leaf has at most d NICs, and uplinks = ceil(n / R) to spines 0..u-1
    g = topo.graph
    for leaf in _switches(topo, 1):
        down = [v for v in g.successors(leaf) if topo.node_kind(v) == NodeKind.NIC]
        up = [v for v in g.successors(leaf) if topo.node_kind(v) == NodeKind.FABRIC_SWITCH]
        assert 1 <= len(down) <= d
        assert len(up) == (math.ceil(len(down) / oversub) if leaves > 1 else 0)
        assert len(set(up)) == len(up)                         # one uplink to each of u distinct spines
        assert len(down) + len(up) <= radix                    # the leaf has enough ports
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
            assert not rail_leaves & leaves_of_rail[k]      # rails never share a leaf


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
    topo = leaf_spine(server=server, servers=4, switch=_switch(16), fabric_link=lk.IB_NDR)
    assert len(_switches(topo, 1)) == 1
    assert len(_switches(topo, 2)) == 0
