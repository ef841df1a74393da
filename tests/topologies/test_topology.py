"""Tests for topologies.topology (Topology, TopologyBuilder, validate) and node.add_server counts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from topologies import devices as dv
from topologies import links as lk
from topologies.links import LinkKind
from topologies.node import SERVER_PRESETS, add_server, dgx_h100
from topologies.presets import build_system
from topologies.topology import LinkTier, NodeKind, Topology, TopologyBuilder

_ARRAYS = (
    "link_src",
    "link_dst",
    "link_capacity_bytes_per_s",
    "link_latency_s",
    "link_kind",
    "link_tier",
    "gpu_nodes",
    "gpu_server",
    "gpu_local",
)


def _one_server() -> Topology:
    builder = TopologyBuilder("one dgx")
    add_server(builder, dgx_h100(), 0)
    return builder.build()


@pytest.fixture(scope="module")
def two_dgx() -> Topology:
    return build_system("dgx-h100", nodes=2)


# ------------------------------------------------------------------------------------------------
# validate(): rejections with a message naming the problem
# ------------------------------------------------------------------------------------------------


def test_two_servers_without_fabric_are_disconnected():
    builder = TopologyBuilder("islands")
    add_server(builder, dgx_h100(), 0)
    add_server(builder, dgx_h100(), 1)
    with pytest.raises(ValueError) as err:
        builder.build()
    msg = str(err.value)
    # server 1's 8 GPUs are unreachable from s0.gpu0: the first is named, the other 7 counted
    assert "islands" in msg
    assert "disconnected" in msg
    assert "s1.gpu0" in msg and "s0.gpu0" in msg
    assert "7 more" in msg


def test_gpu_with_no_link_is_disconnected():
    builder = TopologyBuilder("lonely")
    add_server(builder, dgx_h100(), 0)
    builder.add_gpu("stray.gpu", server=1, local=0)
    with pytest.raises(ValueError, match=r"GPU stray\.gpu is disconnected"):
        builder.build()


def test_gpu_that_can_only_send_is_rejected():
    # validate() promises "every GPU reaches every other GPU". Here g0 -> g1 exists but nothing
    # leads back from g1 to g0 (a one-way link), so g1 cannot reach g0.
    builder = TopologyBuilder("one-way")
    g0 = builder.add_gpu("g0", server=0, local=0)
    g1 = builder.add_gpu("g1", server=0, local=1)
    builder.add_link(g0, g1, lk.NVLINK4, tier=LinkTier.NVLINK, duplex=False)
    with pytest.raises(ValueError, match=r"one-way.*\bg[01]\b"):
        builder.build()


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_non_positive_or_non_finite_capacity_is_rejected(bad):
    topo = _one_server()
    cap = topo.link_capacity_bytes_per_s.copy()
    cap[3] = bad
    broken = dataclasses.replace(topo, link_capacity_bytes_per_s=cap)
    with pytest.raises(ValueError) as err:
        broken.validate()
    msg = str(err.value)
    assert "capacity" in msg
    assert topo.link_names[3] in msg  # names the offending link
    assert repr(cap[3]) in msg


def test_negative_latency_is_rejected():
    topo = _one_server()
    lat = topo.link_latency_s.copy()
    lat[5] = -1e-9
    broken = dataclasses.replace(topo, link_latency_s=lat)
    with pytest.raises(ValueError, match="latency") as err:
        broken.validate()
    assert topo.link_names[5] in str(err.value)


def test_zero_latency_is_accepted():
    # the rule is latency >= 0, so 0 itself is valid
    topo = _one_server()
    lat = topo.link_latency_s.copy()
    lat[:] = 0.0
    assert dataclasses.replace(topo, link_latency_s=lat).validate() is not None


def test_duplicate_device_names_are_rejected():
    builder = TopologyBuilder("twins")
    a = builder.add_gpu("gpu", server=0, local=0)
    b = builder.add_gpu("gpu", server=0, local=1)
    builder.add_link(a, b, lk.NVLINK4, tier=LinkTier.NVLINK)
    with pytest.raises(ValueError, match=r"duplicate device names \['gpu'\]"):
        builder.build()


def test_same_server_index_twice_gives_duplicate_names():
    builder = TopologyBuilder("clash")
    add_server(builder, dgx_h100(), 0)
    add_server(builder, dgx_h100(), 0)
    # the duplicate-name check runs before the connectivity check, so the names are reported
    with pytest.raises(ValueError, match="duplicate device names") as err:
        builder.build()
    assert "s0.cpu0" in str(err.value)  # sorted first of the duplicated names


def test_topology_without_gpu_is_rejected():
    builder = TopologyBuilder("cpus only")
    c0 = builder.add_node(NodeKind.CPU, "c0")
    c1 = builder.add_node(NodeKind.CPU, "c1")
    builder.add_link(c0, c1, lk.UPI_INTEL, tier=LinkTier.HOST)
    with pytest.raises(ValueError, match="no GPU"):
        builder.build()


# ------------------------------------------------------------------------------------------------
# Arrays and graph
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attr", _ARRAYS)
def test_arrays_are_read_only(two_dgx, attr):
    array = getattr(two_dgx, attr)
    assert not array.flags.writeable
    with pytest.raises(ValueError):
        array[0] = array[1]


def test_arrays_are_indexed_by_link_id(two_dgx):
    n = two_dgx.num_links
    for attr in ("link_src", "link_dst", "link_capacity_bytes_per_s", "link_latency_s", "link_kind", "link_tier"):
        assert getattr(two_dgx, attr).shape == (n,)
    assert len(two_dgx.link_names) == n
    # 2 servers x 8 GPUs
    assert two_dgx.num_gpus == 16
    assert list(two_dgx.gpu_server) == [0] * 8 + [1] * 8
    assert list(two_dgx.gpu_local) == list(range(8)) * 2


def test_graph_has_one_edge_per_link_with_matching_attributes(two_dgx):
    topo = two_dgx
    g = topo.graph
    assert g.number_of_edges() == topo.num_links
    seen = []
    for u, v, key, data in g.edges(keys=True, data=True):
        seen.append(key)
        assert data["link"] == key
        assert topo.link_src[key] == u and topo.link_dst[key] == v
        assert data["capacity_bytes_per_s"] == topo.link_capacity_bytes_per_s[key]
        assert data["latency_s"] == topo.link_latency_s[key]
        assert data["tier"] == LinkTier(int(topo.link_tier[key])).name.lower()
        assert data["kind"] == LinkKind(int(topo.link_kind[key])).name.lower()
        assert topo.link_names[key] == f"{topo.node_name(u)}->{topo.node_name(v)}"
    assert sorted(seen) == list(range(topo.num_links))
    # read-only, one shared dict per kind of link; a copied graph has its own plain dicts
    u, v, key = next(iter(g.edges(keys=True)))
    with pytest.raises(TypeError):
        g.edges[u, v, key]["capacity_bytes_per_s"] = 0.0
    copied = g.copy()
    copied.edges[u, v, key]["note"] = "mine"
    assert "note" not in g.edges[u, v, key] and copied.edges[u, v, key]["link"] == key


def test_every_link_has_its_reverse_with_the_same_capacity(two_dgx):
    # full duplex: every cable/bundle is two links, one per direction, each with the spec's capacity
    topo = two_dgx
    pairs = {}
    for link in range(topo.num_links):
        pairs.setdefault((int(topo.link_src[link]), int(topo.link_dst[link])), []).append(link)
    for (u, v), ids in pairs.items():
        back = pairs.get((v, u))
        assert back is not None, f"{topo.node_name(u)}->{topo.node_name(v)} has no reverse link"
        assert sorted(topo.link_capacity_bytes_per_s[ids]) == sorted(topo.link_capacity_bytes_per_s[back])


# ------------------------------------------------------------------------------------------------
# Link latency = spec latency + traversal latency of the entered device when it forwards
# ------------------------------------------------------------------------------------------------


def test_latency_charges_forwarding_devices_only():
    spec = lk.LinkSpec(
        name="toy",
        kind=LinkKind.PCIE,
        line_rate_bytes_per_s=1e9,
        encoding_efficiency=1.0,
        protocol_efficiency=1.0,
        latency_s=1e-6,
    )
    builder = TopologyBuilder("latency")
    # every node gets a distinct non-zero latency, so a wrongly charged one shows up
    gpu0 = builder.add_gpu("gpu0", server=0, local=0, latency_s=7e-3)
    gpu1 = builder.add_gpu("gpu1", server=0, local=1, latency_s=7e-3)
    cpu = builder.add_node(NodeKind.CPU, "cpu", latency_s=5e-3)
    mem = builder.add_node(NodeKind.HOST_MEMORY, "mem", latency_s=3e-3)
    pcie = builder.add_node(NodeKind.PCIE_SWITCH, "pcie", latency_s=2e-6)
    nvsw = builder.add_node(NodeKind.NVSWITCH, "nvsw", latency_s=3e-6)
    nic = builder.add_node(NodeKind.NIC, "nic", latency_s=4e-6)
    leaf = builder.add_node(NodeKind.FABRIC_SWITCH, "leaf", latency_s=5e-6)
    ids = {}
    for u, v, name in (
        (gpu0, nvsw, "gpu0-nvsw"),
        (nvsw, gpu1, "nvsw-gpu1"),
        (gpu0, pcie, "gpu0-pcie"),
        (pcie, cpu, "pcie-cpu"),
        (cpu, mem, "cpu-mem"),
        (pcie, nic, "pcie-nic"),
        (nic, leaf, "nic-leaf"),
    ):
        ids[name] = builder.add_link(u, v, spec, tier=LinkTier.PCIE)
    topo = builder.build()
    lat = topo.link_latency_s

    def pair(name):
        fwd, back = ids[name]
        return lat[fwd], lat[back]

    link = 1e-6
    # (u->v, v->u): entering a forwarding device adds its latency, entering a GPU/CPU/memory adds 0
    assert pair("gpu0-nvsw") == pytest.approx((link + 3e-6, link))  # enter NVSwitch | GPU
    assert pair("nvsw-gpu1") == pytest.approx((link, link + 3e-6))  # enter GPU | NVSwitch
    assert pair("gpu0-pcie") == pytest.approx((link + 2e-6, link))  # enter PCIe switch | GPU
    assert pair("pcie-cpu") == pytest.approx((link, link + 2e-6))  # enter CPU | PCIe switch
    assert pair("cpu-mem") == pytest.approx((link, link))  # enter memory | CPU
    assert pair("pcie-nic") == pytest.approx((link + 4e-6, link + 2e-6))  # enter NIC | PCIe switch
    assert pair("nic-leaf") == pytest.approx((link + 5e-6, link + 4e-6))  # enter leaf | NIC
    # a path's latency is the sum of its links': gpu0 -> pcie -> nic -> leaf
    path = np.array([ids["gpu0-pcie"][0], ids["pcie-nic"][0], ids["nic-leaf"][0]])
    assert topo.path_latency_s(path) == pytest.approx(3 * link + 2e-6 + 4e-6 + 5e-6)


def test_latency_on_a_built_dgx_system(two_dgx):
    # expected latency of each link, by (entered-from kind, entered kind), on DGX H100 + NDR fabric
    K = NodeKind
    nvl = lk.NVLINK4.latency_s  # the 18-link bundle keeps the single-link latency
    pcie5 = lk.PCIE_GEN5_X16.latency_s  # GPU, NIC and PCIe-switch uplinks are all Gen5 x16 on DGX H100
    ndr = lk.IB_NDR.latency_s
    expected = {
        (K.GPU, K.NVSWITCH): nvl + dv.NVSWITCH_GEN3.latency_s,
        (K.NVSWITCH, K.GPU): nvl,
        (K.GPU, K.PCIE_SWITCH): pcie5 + dv.PCIE_SWITCH_GEN5.latency_s,
        (K.PCIE_SWITCH, K.GPU): pcie5,
        (K.PCIE_SWITCH, K.NIC): pcie5 + dv.CONNECTX7_NDR.latency_s,
        (K.NIC, K.PCIE_SWITCH): pcie5 + dv.PCIE_SWITCH_GEN5.latency_s,
        (K.PCIE_SWITCH, K.CPU): pcie5,
        (K.CPU, K.PCIE_SWITCH): pcie5 + dv.PCIE_SWITCH_GEN5.latency_s,
        (K.CPU, K.HOST_MEMORY): lk.HOST_MEMORY_STAGING.latency_s,
        (K.HOST_MEMORY, K.CPU): lk.HOST_MEMORY_STAGING.latency_s,
        (K.CPU, K.CPU): lk.UPI_INTEL_SPR.latency_s,
        (K.NIC, K.FABRIC_SWITCH): ndr + dv.QUANTUM2_NDR.latency_s,
        (K.FABRIC_SWITCH, K.NIC): ndr + dv.CONNECTX7_NDR.latency_s,
        (K.FABRIC_SWITCH, K.FABRIC_SWITCH): ndr + dv.QUANTUM2_NDR.latency_s,
    }
    seen = set()
    for link in range(two_dgx.num_links):
        kinds = (two_dgx.node_kind(int(two_dgx.link_src[link])), two_dgx.node_kind(int(two_dgx.link_dst[link])))
        seen.add(kinds)
        assert two_dgx.link_latency_s[link] == pytest.approx(expected[kinds], rel=1e-12), two_dgx.link_names[link]
    assert seen == set(expected)  # every kind of link was checked


# ------------------------------------------------------------------------------------------------
# Server device counts: G + K + P + 2S (+1 NVSwitch)
# ------------------------------------------------------------------------------------------------

# Hand-derived from the presets in node.py:
#   DGX A100 / DGX H100 / HGX H200 / HGX B200: G=8, K=8, P=4, S=2, NVSwitch -> 8+8+4+4+1 = 25
#   8x RTX 4090: G=8, K=0, P=0, S=2, no NVSwitch                             -> 8+0+0+4   = 12
# 8 GPUs + 8 NICs + 4 PCIe switches + 2 x (CPU, memory) + 1 NVSwitch = 25; RTX box 8 + 2 x 2 = 12;
# GB200 NVL72 72 GPUs + 72 NICs + 36 x (Grace, memory) + 1 NVSwitch = 217
_EXPECTED_DEVICES = {
    "dgx-a100": 25,
    "dgx-h100": 25,
    "hgx-h200": 25,
    "hgx-b200": 25,
    "gb200-nvl72": 217,
    "pcie-rtx4090": 12,
}


@pytest.mark.parametrize("preset", list(SERVER_PRESETS))
def test_server_device_count_matches_closed_form(preset):
    spec = SERVER_PRESETS[preset]()
    builder = TopologyBuilder(preset)
    info = add_server(builder, spec, 3)
    topo = builder.build()
    nodes = [n for n in topo.graph.nodes if topo.graph.nodes[n]["server"] == 3]
    closed_form = (
        spec.gpus + spec.nics + spec.pcie_switches + 2 * spec.sockets + (1 if spec.nvswitch is not None else 0)
    )
    assert len(nodes) == closed_form == _EXPECTED_DEVICES[preset]
    assert len(nodes) == topo.graph.number_of_nodes()  # nothing outside the server
    counts = {k: 0 for k in NodeKind}
    for n in nodes:
        counts[topo.node_kind(n)] += 1
    assert counts[NodeKind.GPU] == spec.gpus == len(info.gpus)
    assert counts[NodeKind.NIC] == spec.nics == len(info.nics)
    assert counts[NodeKind.PCIE_SWITCH] == spec.pcie_switches
    assert counts[NodeKind.CPU] == counts[NodeKind.HOST_MEMORY] == spec.sockets
    assert counts[NodeKind.NVSWITCH] == (1 if spec.nvswitch is not None else 0)
    assert counts[NodeKind.FABRIC_SWITCH] == 0
    assert all(topo.node_name(n).startswith("s3.") for n in nodes)
