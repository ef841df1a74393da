"""Tests for topologies.cost: switch ports, cables and transceivers per tier, total and per GPU."""

from __future__ import annotations

import doctest

import pytest

from tests.topologies.fabrics import BOX, toy_switch
from topologies import cost as cost_module
from topologies import links as lk
from topologies.cost import FabricCost, cost_summary
from topologies.fat_tree import fat_tree, leaf_spine, rail_only
from topologies.node import add_server, dgx_h100
from topologies.presets import build_system
from topologies.topology import LinkTier, NodeKind, Topology, TopologyBuilder


def _tier(cost: FabricCost, tier: int):
    return next(t for t in cost.switch_tiers if t.tier == tier)


def _links(cost: FabricCost) -> dict[str, tuple[str, int, int]]:
    """(media, cables, transceivers) per link tier, over its rows of every port rate."""
    out: dict[str, tuple[str, int, int]] = {}
    for t in cost.link_tiers:
        _, cables, optics = out.get(t.tier, (t.media, 0, 0))
        out[t.tier] = (t.media, cables + t.cables, optics + t.transceivers)
    return out


def test_module_doctests_pass():
    assert doctest.testmod(cost_module).failed == 0


# ------------------------------------------------------------------------------------------------
# Hand-derived numbers
# ------------------------------------------------------------------------------------------------


def test_leaf_spine_of_four_dgx():
    # 4 DGX H100, rail-optimised Quantum-2 (radix 64): 8 leaves x (4 NICs + 4 uplinks) = 64 ports,
    # 4 spines x 8 leaves = 32 ports; 12 x 64 = 768 available. Cables: 32 NIC + 32 leaf-spine;
    # optics 2 per cable = 128; per GPU (32): 3 ports, 4 transceivers, 2 cables, 12/32 switches.
    cost = cost_summary(build_system("dgx-h100", nodes=4))
    assert (cost.gpus, cost.nics) == (32, 32)
    assert [(t.tier, t.switches, t.ports_used, t.ports_available) for t in cost.switch_tiers] == [
        (1, 8, 64, 512),
        (2, 4, 32, 256),
    ]
    assert _links(cost) == {"nic": ("optical", 32, 64), "fabric_1": ("optical", 32, 64)}
    assert (cost.switches, cost.switch_ports_used, cost.switch_ports_available) == (12, 96, 768)
    assert (cost.cables, cost.transceivers) == (64, 128)
    assert cost.switch_ports_per_gpu == 3.0
    assert cost.transceivers_per_gpu == 4.0
    assert cost.cables_per_gpu == 2.0
    assert cost.switches_per_gpu == 12 / 32
    assert _tier(cost, 1).utilisation == 64 / 512


def test_copper_nic_cables_carry_no_optics():
    # same system, NIC cables as DAC: only the 32 leaf-spine cables carry 2 transceivers each
    cost = cost_summary(build_system("dgx-h100", nodes=4), nic_cables="copper")
    assert _links(cost) == {"nic": ("copper", 32, 0), "fabric_1": ("optical", 32, 64)}
    assert cost.transceivers == 64
    everything_copper = cost_summary(build_system("dgx-h100", nodes=4), nic_cables="copper", switch_cables="copper")
    assert everything_copper.transceivers == 0
    assert everything_copper.cables == 64


def test_three_tier_fat_tree_with_a_partial_pod():
    # 40 single-NIC hosts on a k = 8 fat-tree (test_fat_tree FT_CASES "hosts-k8-N40"): 10 edges with
    # 4 NICs + 4 uplinks = 80 ports; 12 aggs: pods 0, 1 have 4 with 4 down + 4 up (64 ports), pod 2 has
    # 4 with 2 down + 2 up (16): 80; 8 cores: per group, core 0 takes 2 links from pods 0 and 1 and
    # 2 from pod 2 (6 ports), core 1 takes 2 + 2 (4): 4 groups x 10 = 40. Used 200 = 5 per NIC port;
    # available 30 x 8 = 240. Cables 40 per link tier; optics 2 x 120 = 240; per GPU 5 ports, 6 optics.
    topo = fat_tree(server=BOX, servers=40, switch=toy_switch(8), fabric_link=lk.IB_NDR)
    cost = cost_summary(topo)
    assert [(t.tier, t.switches, t.ports_used, t.ports_available) for t in cost.switch_tiers] == [
        (1, 10, 80, 80),
        (2, 12, 80, 96),
        (3, 8, 40, 64),
    ]
    assert _links(cost) == {
        "nic": ("optical", 40, 80),
        "fabric_1": ("optical", 40, 80),
        "fabric_2": ("optical", 40, 80),
    }
    assert (cost.switch_ports_used, cost.switch_ports_available) == (200, 240)
    assert cost.switch_ports_per_gpu == 5.0
    assert cost.transceivers_per_gpu == 6.0


def test_rail_only_is_cheaper_than_a_fat_tree_for_the_same_servers():
    # 12 DGX H100 (96 GPUs), radix-8 switches. Rail-only (test_fat_tree): per rail 3 leaves (8 ports)
    # and 2 spines (6 ports): 8 x (24 + 12) = 288 ports = 3 per GPU. Fat-tree k = 8: d = 4, E = 8 x 3
    # = 24 edges, 6 pods of 4 aggs, non-blocking 3 tiers: 5 ports per NIC port = 480.
    servers = dict(server=dgx_h100(), servers=12, switch=toy_switch(8), fabric_link=lk.IB_NDR)
    rail, tree = cost_summary(rail_only(**servers)), cost_summary(fat_tree(**servers))
    assert rail.switch_ports_used == 288 and rail.switch_ports_per_gpu == 3.0
    assert tree.switch_ports_used == 480 and tree.switch_ports_per_gpu == 5.0
    # switches: rail-only 8 x 5 = 40; fat-tree 24 edges + 24 aggs + 4 groups x ceil(4 / floor(8/6)) = 16 cores
    assert (rail.switches, tree.switches) == (40, 64)
    assert rail.transceivers_per_gpu == 4.0 and tree.transceivers_per_gpu == 6.0


def test_generic_graph_without_generator_attributes():
    # Hand-built: two BOX servers (1 GPU, 1 NIC), switch A (attribute switch="quantum2_ndr", no radix, no tier) and
    # switch B (unknown switch name). Cables: s0.nic0 - A, s1.nic0 - B, two parallel A - B cables,
    # plus one extra one-way A -> B link (it still occupies a cable): A - B = max(3 out, 2 back) = 3.
    builder = TopologyBuilder("generic")
    infos = [add_server(builder, BOX, s) for s in range(2)]
    a = builder.add_node(NodeKind.FABRIC_SWITCH, "A", switch="quantum2_ndr")
    b = builder.add_node(NodeKind.FABRIC_SWITCH, "B", switch="mystery")
    builder.add_link(infos[0].nics[0], a, lk.IB_NDR, tier=LinkTier.NIC)
    builder.add_link(infos[1].nics[0], b, lk.IB_NDR, tier=LinkTier.NIC)
    for _ in range(2):
        builder.add_link(a, b, lk.IB_NDR, tier=LinkTier.FABRIC_1)
    builder.add_link(a, b, lk.IB_NDR, tier=LinkTier.FABRIC_1, duplex=False)
    cost = cost_summary(builder.build())
    tier0 = _tier(cost, 0)  # no tier attribute
    assert (tier0.switches, tier0.ports_used) == (2, 8)  # A: 1 + 3, B: 1 + 3
    assert tier0.ports_available is None  # B's radix is unknown
    assert cost.switch_ports_available is None
    assert _links(cost) == {"nic": ("optical", 2, 4), "fabric_1": ("optical", 3, 6)}
    text = cost.format()
    assert "?" in text and "untiered" in text
    # with a known radix only: A alone is 64 ports (SWITCH_PRESETS["quantum2_ndr"])
    builder = TopologyBuilder("known")
    infos = [add_server(builder, BOX, s) for s in range(2)]
    a = builder.add_node(NodeKind.FABRIC_SWITCH, "A", switch="quantum2_ndr", tier=1)
    for info in infos:
        builder.add_link(info.nics[0], a, lk.IB_NDR, tier=LinkTier.NIC)
    cost = cost_summary(builder.build())
    assert [(t.tier, t.switches, t.ports_used, t.ports_available) for t in cost.switch_tiers] == [(1, 1, 2, 64)]


# ------------------------------------------------------------------------------------------------
# Invariants
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["leaf-spine", "fat-tree", "rail-only", "planes", "tor"])
def fabric(request) -> Topology:
    common = dict(server=dgx_h100(), servers=6, switch=toy_switch(16), fabric_link=lk.IB_NDR)
    return {
        "leaf-spine": lambda: leaf_spine(**common, oversubscription=3.0),
        "fat-tree": lambda: fat_tree(**common, k=8),
        "rail-only": lambda: rail_only(**dict(common, switch=toy_switch(4))),
        "planes": lambda: leaf_spine(**common, planes=4),
        "tor": lambda: fat_tree(**common, rail_optimised=False),
    }[request.param]()


def test_ports_are_the_ends_of_the_cables(fabric):
    cost = cost_summary(fabric)
    cables = {t.tier: t.cables for t in cost.link_tiers}
    # every switch-to-switch cable uses two switch ports, every NIC cable one
    assert cost.switch_ports_used == cables["nic"] + 2 * (cost.cables - cables["nic"])
    assert cost.nics == cables["nic"] == len(fabric.nic_leaf_link) == 6 * 8
    assert cost.switch_ports_used <= cost.switch_ports_available
    assert cost.switches == sum(1 for n in fabric.graph.nodes if fabric.node_kind(n) == NodeKind.FABRIC_SWITCH)
    assert cost.transceivers == 2 * cost.cables  # all optical by default
    for t in cost.switch_tiers:
        assert 0 < t.utilisation <= 1


def test_format_lists_every_tier_and_the_per_gpu_figures(fabric):
    cost = cost_summary(fabric)
    text = cost.format()
    assert text.splitlines()[0] == f"fabric cost: {fabric.name} (48 GPUs, 48 NICs on the fabric)"
    for t in cost.switch_tiers:
        assert any(
            line.split()[:4] == ["tier", str(t.tier), str(t.switches), str(t.ports_used)] for line in text.splitlines()
        )
    for t in cost.link_tiers:
        assert any(
            line.split()[:5] == [t.tier, t.media, str(t.rate_gbps or "?"), str(t.cables), str(t.transceivers)]
            for line in text.splitlines()
        )
    assert f"{cost.switch_ports_per_gpu:.3f} switch ports used" in text
    assert f"{cost.transceivers_per_gpu:.3f} transceivers" in text


def test_a_single_server_has_no_fabric_cost():
    cost = cost_summary(build_system("dgx-h100"))
    assert (cost.switches, cost.cables, cost.transceivers, cost.nics) == (0, 0, 0, 0)
    assert cost.switch_ports_per_gpu == 0.0
    assert cost.switch_ports_available == 0
    assert "total" in cost.format()


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["nic_cables", "switch_cables"])
def test_unknown_cable_media_is_rejected(field):
    with pytest.raises(
        ValueError,
        match=rf"cost_summary\.{field}: 'fibre' is not allowed; expected one of "
        r"'optical', 'copper'",
    ):
        cost_summary(build_system("dgx-h100", nodes=2), **{field: "fibre"})


def test_not_a_topology_is_rejected():
    with pytest.raises(ValueError, match=r"cost_summary\.topology: 'dgx-h100' is not allowed; expected a Topology"):
        cost_summary("dgx-h100")
