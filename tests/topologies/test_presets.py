"""Tests for topologies.presets: fabric presets, the topology registry and build_system options."""

from __future__ import annotations

import doctest
import types

import numpy as np
import pytest

from topologies import devices as dv
from topologies import links as lk
from topologies import presets
from topologies.links import LinkKind
from topologies.presets import FABRICS, SYSTEMS, TOPOLOGIES, FabricPreset, TopologyKind, build_system
from topologies.routing import Router
from topologies.topology import LinkTier, NodeKind, Topology


def _nic_links(topo: Topology) -> list[int]:
    return list(topo.nic_leaf_link.values())


def _nic_pcie_capacity(topo: Topology, nic: int) -> float:
    """Capacity of the PCIe link entering the NIC from its PCIe switch / root port."""
    links = [l for l in range(topo.num_links) if topo.link_dst[l] == nic and topo.link_kind[l] == LinkKind.PCIE]
    assert len(links) == 1
    return float(topo.link_capacity_bytes_per_s[links[0]])


def _switch_names(topo: Topology) -> set[str]:
    return {d["switch"] for _, d in topo.graph.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH}


def test_module_doctests_pass():
    assert doctest.testmod(presets).failed == 0


# ------------------------------------------------------------------------------------------------
# FABRICS
# ------------------------------------------------------------------------------------------------


def test_fabric_names_and_read_only_mapping():
    assert list(FABRICS) == ["ib-hdr", "ib-ndr", "ib-xdr", "roce-100g", "roce-200g", "roce-400g", "roce-800g"]
    assert isinstance(FABRICS, types.MappingProxyType)


@pytest.mark.parametrize("name", list(FABRICS))
def test_fabric_parts_agree(name):
    fabric = FABRICS[name]
    assert isinstance(fabric, FabricPreset) and fabric.name == name
    link, switch, nic = fabric  # unpacks as (link, switch, NIC)
    assert (link, switch, nic) == (fabric.link, fabric.switch, fabric.nic)
    ib = name.startswith("ib-")
    assert link.kind == (LinkKind.INFINIBAND if ib else LinkKind.ROCE)
    assert switch.kind == ("infiniband" if ib else "ethernet")
    assert nic.port is link  # the NIC's port is the fabric's cable
    assert switch.port_rate_bytes_per_s == link.line_rate_bytes_per_s
    gbit = int(name.split("-")[1].rstrip("g")) if not ib else {"hdr": 200, "ndr": 400, "xdr": 800}[name[3:]]
    assert link.line_rate_bytes_per_s == gbit * 1e9 / 8


# PCIe x16 per-direction effective rates of the NIC's host link in a DGX H100 (Gen5 platform): the link trains
# at the slower generation of the NIC and the server, so Gen4 NICs run at Gen4 and Gen6 NICs (ConnectX-8) at Gen5.
_NIC_PCIE_IN_DGX_H100 = {
    "ib-hdr": lk.PCIE_GEN4_X16,
    "ib-ndr": lk.PCIE_GEN5_X16,
    "ib-xdr": lk.PCIE_GEN5_X16,
    "roce-100g": lk.PCIE_GEN4_X16,
    "roce-200g": lk.PCIE_GEN4_X16,
    "roce-400g": lk.PCIE_GEN5_X16,
    "roce-800g": lk.PCIE_GEN5_X16,
}


@pytest.mark.parametrize("name", list(FABRICS))
def test_build_system_with_each_fabric_has_its_link_rate(name):
    link, switch, nic = FABRICS[name]
    topo = build_system("dgx-h100", nodes=2, fabric=name)
    assert topo.name == f"dgx-h100 x2 {name}"
    caps = topo.link_capacity_bytes_per_s
    for l in _nic_links(topo):
        assert caps[l] == link.bandwidth_bytes_per_s
        assert topo.link_kind[l] == link.kind
    fabric_links = [l for l in range(topo.num_links) if topo.link_tier[l] in (LinkTier.NIC, LinkTier.FABRIC_1)]
    assert fabric_links and np.all(caps[fabric_links] == link.bandwidth_bytes_per_s)
    assert _switch_names(topo) == {switch.name}
    expected_pcie = _NIC_PCIE_IN_DGX_H100[name]
    for info in topo.servers:
        assert len(info.nics) == 8
        for n in info.nics:
            assert topo.graph.nodes[n]["nic"] == nic.name
            assert _nic_pcie_capacity(topo, n) == expected_pcie.bandwidth_bytes_per_s
    # GPU 0 -> GPU 0 of the other server (same rail, PXN): the slowest link is min(cable, NIC host link)
    path = Router(topo).path(0, 8)
    assert caps[path].min() == min(link.bandwidth_bytes_per_s, expected_pcie.bandwidth_bytes_per_s)


def test_an_ndr_nic_in_a_gen4_dgx_a100_is_pcie_bound():
    # DGX A100 is a PCIe Gen4 platform: a ConnectX-7 (Gen5) trains at Gen4 x16 = 28.81 GB/s < NDR 49.68 GB/s
    topo = build_system("dgx-a100", nodes=2, fabric="ib-ndr")
    nic = topo.servers[0].nics[0]
    assert _nic_pcie_capacity(topo, nic) == pytest.approx(lk.PCIE_GEN4_X16.bandwidth_bytes_per_s)
    assert lk.PCIE_GEN4_X16.bandwidth_bytes_per_s < lk.IB_NDR.bandwidth_bytes_per_s


def test_the_presets_own_fabric_gives_the_same_system():
    default, explicit = build_system("dgx-h100", nodes=4), build_system("dgx-h100", nodes=4, fabric="ib-ndr")
    assert default.name == "dgx-h100 x4"
    for attr in ("link_src", "link_dst", "link_capacity_bytes_per_s", "link_latency_s", "link_tier", "link_kind"):
        assert np.array_equal(getattr(default, attr), getattr(explicit, attr)), attr
    assert default.link_names == explicit.link_names


def test_one_node_with_a_fabric_changes_its_nics_but_builds_no_switch():
    topo = build_system("dgx-h100", fabric="roce-400g")
    assert topo.name == "dgx-h100 roce-400g"
    assert not _switch_names(topo)
    assert {topo.graph.nodes[n]["nic"] for n in topo.servers[0].nics} == {dv.CONNECTX7_400GBE.name}
    assert build_system("dgx-h100").name == "dgx-h100"


# ------------------------------------------------------------------------------------------------
# topologies and capacities
# ------------------------------------------------------------------------------------------------


def test_topology_registry_is_read_only_and_uniform():
    assert list(TOPOLOGIES) == ["leaf-spine", "fat-tree", "rail-only", "dragonfly"]
    assert isinstance(TOPOLOGIES, types.MappingProxyType)
    server = SYSTEMS["dgx-h100"].server()
    for name, kind in TOPOLOGIES.items():
        assert isinstance(kind, TopologyKind) and kind.name == name
        topo = kind.build(
            server=server,
            servers=2,
            switch=dv.QUANTUM2_NDR,
            fabric_link=lk.IB_NDR,
            rail_optimised=True,
            oversubscription=1.0,
            planes=1,
            name=name,
        )
        assert topo.num_gpus == 16
        assert (
            kind.max_servers(server=server, switch=dv.QUANTUM2_NDR, rail_optimised=True, oversubscription=1.0, planes=1)
            >= 2
        )


def test_a_registered_builder_is_used_by_build_system(monkeypatch):
    calls = []

    def build(**kwargs):
        calls.append(kwargs)
        return TOPOLOGIES["leaf-spine"].build(**kwargs)

    extra = TopologyKind(name="mine", description="test wiring", build=build)  # no capacity function
    monkeypatch.setattr(presets, "TOPOLOGIES", types.MappingProxyType({**TOPOLOGIES, "mine": extra}))
    topo = build_system("dgx-h100", nodes=3, topology="mine", oversubscription=2.0)
    assert topo.name == "dgx-h100 x3 mine"
    assert len(calls) == 1
    assert calls[0]["servers"] == 3 and calls[0]["oversubscription"] == 2.0 and calls[0]["planes"] == 1
    assert calls[0]["switch"] is dv.QUANTUM2_NDR and calls[0]["fabric_link"] is lk.IB_NDR


@pytest.mark.parametrize(
    "system, topology, kwargs, expected",
    [
        # Quantum-2 (radix 64), K = 8, R = 1: d = 32. leaf-spine floor(64/8) x 32; fat-tree 64 pods x 32 edges
        # / 8 rails x 32; rail-only 64 leaves x 32
        ("dgx-h100", "leaf-spine", {}, 256),
        ("dgx-h100", "fat-tree", {}, 8192),
        ("dgx-h100", "rail-only", {}, 2048),
        # Quantum HDR (radix 40), d = 20: floor(40/8) x 20 = 100; 40 x 20 / 8 x 20 = 2000; 40 x 20 = 800
        ("dgx-a100", "leaf-spine", {}, 100),
        ("dgx-a100", "fat-tree", {}, 2000),
        ("dgx-a100", "rail-only", {}, 800),
        # Spectrum-4 at 400G (radix 128), d = 64: floor(128/8) x 64 = 1024
        ("dgx-h100", "leaf-spine", {"fabric": "roce-400g"}, 1024),
        # 4 NICs or 2 planes of 4: floor(64/4) x 32 = 512
        ("dgx-h100", "leaf-spine", {"nics_per_node": 4}, 512),
        ("dgx-h100", "leaf-spine", {"planes": 2}, 512),
        # R = 3: d = floor(64 x 3 / 4) = 48 -> 8 x 48 = 384
        ("dgx-h100", "leaf-spine", {"oversubscription": 3.0}, 384),
        # ToR: 64 leaves x floor(32/8) = 256
        ("dgx-h100", "leaf-spine", {"rail_optimised": False}, 256),
        ("pcie-rtx4090", "fat-tree", {}, 1),
    ],
)
def test_max_nodes_for_matches_closed_forms(system, topology, kwargs, expected):
    assert SYSTEMS[system].max_nodes_for(topology, **kwargs) == expected


def test_max_nodes_is_the_largest_wiring():
    # the largest over every wiring (leaf-spine, fat-tree, rail-only, dragonfly): max(256, 8192, 2048, 32832); the
    # balanced dragonfly of radix-64 routers: p = h = 16, a = 32, 513 groups of 32 x 16 / 8 = 64 nodes
    assert SYSTEMS["dgx-h100"].max_nodes == 513 * 64
    # Quantum HDR radix 40: p = h = 10, a = 20, 201 groups of 20 x 10 / 8 = 25 nodes
    assert SYSTEMS["dgx-a100"].max_nodes == 201 * 25
    assert SYSTEMS["pcie-rtx4090"].max_nodes == 1


def test_too_many_nodes_names_the_limit_and_the_wirings_that_hold_them():
    with pytest.raises(ValueError, match=r"nodes: 257 is too many for dgx-h100 on topology 'leaf-spine'") as err:
        build_system("dgx-h100", nodes=257)
    msg = str(err.value)
    assert "at most 256 nodes" in msg and "fat-tree holds 8192" in msg and "rail-only holds 2048" in msg
    with pytest.raises(ValueError, match=r"at most 8192 nodes \(dragonfly holds 32832\)$"):
        build_system("dgx-h100", nodes=8193, topology="fat-tree")


@pytest.mark.parametrize("topology", ["fat-tree", "rail-only"])
def test_build_system_other_topologies(topology):
    topo = build_system("dgx-h100", nodes=3, topology=topology)
    assert topo.name == f"dgx-h100 x3 {topology}"
    tiers = {d["tier"] for _, d in topo.graph.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH}
    # 3 DGX on Quantum-2: 8 edges of 3 NICs. Fat-tree: one pod, so edges and aggregation switches;
    # rail-only: 3 <= 64 servers, one switch per rail
    assert tiers == ({1, 2} if topology == "fat-tree" else {1})
    router = Router(topo, pxn=True)
    for src in range(0, 24, 3):
        for dst in range(24):
            if src != dst:
                assert router.path(src, dst).size > 0


# ------------------------------------------------------------------------------------------------
# NICs per node and planes
# ------------------------------------------------------------------------------------------------


def test_nics_per_node_four_on_a_dgx_pairs_gpus_on_a_nic():
    # DGX H100: 4 PCIe switches, each with GPUs 2p and 2p+1; with 4 NICs each switch has one, NIC p
    topo = build_system("dgx-h100", nodes=2, nics_per_node=4)
    assert topo.name == "dgx-h100 x2 4 NICs"
    for info in topo.servers:
        assert len(info.nics) == 4
        assert info.nic_of_gpu == (0, 0, 1, 1, 2, 2, 3, 3)
    assert len(topo.nic_leaf_link) == 8
    # rail-optimised on Quantum-2 (d = 32): 4 rails of one leaf with 2 NICs each; 4 leaves need
    # spines = ceil(2 / 1) = 2
    tiers = [d["tier"] for _, d in topo.graph.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH]
    assert tiers.count(1) == 4 and tiers.count(2) == 2


@pytest.mark.parametrize("count", [2, 6, 16, 0, True, 4.0])
def test_bad_nics_per_node_lists_the_allowed_counts(count):
    with pytest.raises(ValueError, match=rf"nics_per_node: {count!r} is not allowed for dgx-h100") as err:
        build_system("dgx-h100", nodes=2, nics_per_node=count)
    msg = str(err.value)
    assert "4 PCIe switches" in msg and "one of 4, 8" in msg


def test_a_pcie_box_can_be_given_nics_and_a_fabric():
    # 8x RTX 4090 (no PCIe switch, 2 sockets): 2 NICs, one per socket; RoCE 100G leaf-spine
    topo = build_system("pcie-rtx4090", nodes=2, fabric="roce-100g", nics_per_node=2)
    assert topo.num_gpus == 16
    assert _switch_names(topo) == {dv.TOMAHAWK_4_100G.name}
    router = Router(topo)
    for src in range(16):
        for dst in range(16):
            if src != dst:
                assert router.path(src, dst).size > 0


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"nodes": 2}, r"nodes: 2 is not allowed for pcie-rtx4090, a single server without a fabric.*fabric="),
        ({"nodes": 2, "fabric": "roce-100g"}, r"nodes: 2 is not allowed for pcie-rtx4090: its server has no NIC"),
        ({"nics_per_node": 2}, r"nics_per_node: 2 needs a NIC, but pcie-rtx4090 has none.*ib-hdr"),
        ({"nics_per_node": 9, "fabric": "roce-100g"}, r"nics_per_node: 9 is not allowed.*at most its 8 GPUs"),
    ],
)
def test_pcie_box_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_system("pcie-rtx4090", **kwargs)


def test_planes_split_the_nics_over_independent_fabrics():
    topo = build_system("dgx-h100", nodes=4, planes=2)
    assert topo.name == "dgx-h100 x4 2 planes"
    g = topo.graph
    planes = {d["plane"] for _, d in g.nodes(data=True) if d["kind"] == NodeKind.FABRIC_SWITCH}
    assert planes == {0, 1}
    for l in range(topo.num_links):
        u, v = int(topo.link_src[l]), int(topo.link_dst[l])
        if g.nodes[u]["kind"] == g.nodes[v]["kind"] == NodeKind.FABRIC_SWITCH:
            assert g.nodes[u]["plane"] == g.nodes[v]["plane"]


# ------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field, listed",
    [
        ({"topology": "torus"}, "topology", "leaf-spine, fat-tree, rail-only"),
        ({"fabric": "ib-qdr"}, "fabric", "ib-hdr, ib-ndr, ib-xdr, roce-100g, roce-200g, roce-400g, roce-800g"),
        ({"fabric": 400}, "fabric", "ib-hdr"),
    ],
)
def test_unknown_names_list_the_allowed_ones(kwargs, field, listed):
    with pytest.raises(ValueError, match=rf"^{field}: ") as err:
        build_system("dgx-h100", nodes=2, **kwargs)
    assert repr(next(iter(kwargs.values()))) in str(err.value)
    assert listed in str(err.value)


def test_unknown_system_lists_the_presets():
    with pytest.raises(ValueError, match=r"system: 'dgx-z' is not a preset; expected one of dgx-a100, dgx-h100"):
        build_system("dgx-z")


@pytest.mark.parametrize("nodes", [0, -2, 1.5, True])
def test_bad_node_count(nodes):
    with pytest.raises(ValueError, match=rf"nodes: {nodes!r} is not allowed; expected an integer >= 1"):
        build_system("dgx-h100", nodes=nodes)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"planes": 2}, r"planes: 2 is not allowed with topology 'rail-only'"),
        ({"rail_optimised": False}, r"rail_optimised: False is not allowed with topology 'rail-only'"),
    ],
)
def test_rail_only_rejects_options_it_cannot_honour(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_system("dgx-h100", nodes=2, topology="rail-only", **kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"rail_optimised": False}, r"rail_optimised: False is not allowed with topology 'dragonfly'.*expected True$"),
        ({"planes": 2}, r"oversubscription/planes: not used by topology 'dragonfly'"),
    ],
)
def test_dragonfly_rejects_options_it_cannot_honour(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_system("dgx-h100", nodes=128, topology="dragonfly", **kwargs)
    with pytest.raises(ValueError, match=pattern):
        SYSTEMS["dgx-h100"].max_nodes_for("dragonfly", **kwargs)


def test_planes_not_dividing_the_nics_is_an_error():
    with pytest.raises(ValueError, match=r"leaf_spine\.planes: 3 is not allowed.*1, 2, 4, 8"):
        build_system("dgx-h100", nodes=2, planes=3)


def test_dragonfly_shape_balanced_by_default_or_as_given():
    # DGX H100 (8 NICs) on RoCE 400G routers. Balanced (a = 2p = 2h), the smallest p whose group of a p / 8
    # servers holds 512 servers in 2 to a h + 1 groups: p = 2 holds 1 server per group (512 > 9 groups), p = 4
    # 4 (128 > 33), p = 6 9 (512 % 9 != 0), p = 8 16: 32 groups <= 129
    auto = build_system("dgx-h100", nodes=512, topology="dragonfly", fabric="roce-400g")
    assert "dragonfly p=8 a=16 h=8 g=32 (absolute)" in auto.description
    # p = 16 given: a = 32, h = 16, a group holds 32 x 16 / 8 = 64 servers: 8 groups
    given = build_system("dgx-h100", nodes=512, topology="dragonfly", fabric="roce-400g", dragonfly_p=16)
    assert "dragonfly p=16 a=32 h=16 g=8 (absolute)" in given.description
    # h alone: p = h = 4, a = 8; 4 servers per group, 16 groups; the arrangement as given
    circulant = build_system(
        "dgx-h100", nodes=64, topology="dragonfly", dragonfly_h=4, dragonfly_arrangement="circulant"
    )
    assert "dragonfly p=4 a=8 h=4 g=16 (circulant)" in circulant.description
    # the largest with p = 4 given: a h + 1 = 33 groups of 4 servers
    assert SYSTEMS["dgx-h100"].max_nodes_for("dragonfly", dragonfly_p=4) == 33 * 4


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            {"topology": "fat-tree", "dragonfly_p": 4},
            r"^dragonfly_p: 4 is not allowed; expected no value with topology",
        ),
        ({"topology": "leaf-spine", "dragonfly_arrangement": "relative"}, r"^dragonfly_arrangement: 'relative'"),
        ({"topology": "dragonfly", "dragonfly_a": 0}, r"^dragonfly_a: 0 is not allowed; expected an integer >= 1$"),
        ({"topology": "dragonfly", "dragonfly_arrangement": "ring"}, r"^dragonfly_arrangement: 'ring' is not allowed"),
        # p = 40: a = 80, h = 40, 40 + 79 + 40 = 159 ports on radix-64 Quantum-2 routers
        ({"topology": "dragonfly", "dragonfly_p": 40}, r"p \+ \(a - 1\) \+ h = 159 ports; expected at most the radix"),
        # a p = 24: 3 servers per group; 64 is no multiple of 3
        ({"topology": "dragonfly", "dragonfly_p": 4, "dragonfly_a": 6}, r"^nodes: 64 is not allowed on a dragonfly"),
    ],
)
def test_dragonfly_shape_refused(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        build_system("dgx-h100", nodes=64, **kwargs)


# ---- GB200 NVL72: one rack-scale NVLink domain ----------------------------------------------------------


def test_gb200_nvl72_is_one_72_gpu_nvlink_domain_with_a_nic_per_gpu():
    topo = build_system("gb200-nvl72")
    (info,) = topo.servers
    assert len(info.gpus) == 72 and len(info.nics) == 72 and info.nvswitch >= 0
    assert info.nic_of_gpu == tuple(range(72))  # NIC j on GPU j's Grace, serving GPU j
    # every GPU pair talks over the one logical NVSwitch: GPU -> switch -> GPU, two NVLink links
    kinds = {tuple(LinkKind(topo.link_kind[link]) for link in route) for route in info.intra_routes.values()}
    assert kinds == {(LinkKind.NVLINK, LinkKind.NVLINK)}
    # 18 NVLink5 links of 37.9 GB/s a direction each (measured B200 ring plateau / 18): 682.2 GB/s
    first = info.intra_routes[(0, 71)][0]
    assert topo.link_capacity_bytes_per_s[first] == pytest.approx(18 * 37.9e9)


def test_gb200_nvl72_trays_share_no_cpu_link():
    topo = build_system("gb200-nvl72")
    cpu_links = [i for i, kind in enumerate(topo.link_kind) if LinkKind(kind) is LinkKind.CPU_INTERCONNECT]
    socket_links = [
        i
        for i in cpu_links
        if NodeKind(topo.node_kind(int(topo.link_src[i]))) is NodeKind.CPU
        and NodeKind(topo.node_kind(int(topo.link_dst[i]))) is NodeKind.CPU
    ]
    # 18 trays x one C2C link between their two Graces, both directions
    assert len(socket_links) == 18 * 2
    (info,) = topo.servers
    # GPU 0 (tray 0) to NIC 71 (tray 17): NVLink to GPU 71, then its C2C and the Grace root port, no CPU hop
    route = info.gpu_to_nic_routes[(0, 71)]
    assert [LinkKind(topo.link_kind[link]) for link in route] == [
        LinkKind.NVLINK,
        LinkKind.NVLINK,
        LinkKind.CPU_INTERCONNECT,
        LinkKind.PCIE,
    ]
    back = info.nic_to_gpu_routes[(71, 0)]
    assert [LinkKind(topo.link_kind[link]) for link in back][-2:] == [LinkKind.NVLINK, LinkKind.NVLINK]


def test_gb200_nvl72_racks_need_a_fat_tree_on_quantum2():
    # 72 rails: a rail-optimised leaf-spine needs 72 leaves per 32 racks, one spine port each, over radix 64;
    # a 3-tier fat-tree holds floor(64 x 32 / 72) x 32 = 28 x 32 = 896 racks
    assert SYSTEMS["gb200-nvl72"].max_nodes_for("leaf-spine") == 1
    assert SYSTEMS["gb200-nvl72"].max_nodes_for("fat-tree") == 896
    with pytest.raises(ValueError, match=r"^nodes: 2 is too many for gb200-nvl72 .*fat-tree holds 896"):
        build_system("gb200-nvl72", nodes=2)
    topo = build_system("gb200-nvl72", nodes=2, topology="fat-tree")
    assert len(topo.servers) == 2 and int(topo.num_gpus) == 144


def test_sockets_per_host_must_divide_the_sockets():
    from topologies.node import gb200_nvl72

    spec = gb200_nvl72()
    with pytest.raises(ValueError, match=r"^ServerSpec.sockets_per_host: 5 is not allowed; expected 0 or a divisor"):
        type(spec)(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "sockets_per_host": 5})
