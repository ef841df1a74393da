"""Small servers, switches and helpers shared by the topology tests (plain definitions, imported
explicitly: ``from tests.topologies.fabrics import DUO, TOY8, reverse``)."""

from __future__ import annotations

from topologies import devices as dv
from topologies import links as lk
from topologies.node import ServerSpec
from topologies.topology import Topology

# One GPU and one NIC per server (K = 1): on a dragonfly, p is servers per router.
BOX = ServerSpec(name="box", gpu=dv.H100_SXM5_80GB, gpus=1, nic=dv.CONNECTX7_NDR, nics=1, sockets=1)
# Two GPUs on an NVSwitch, two NICs (K = 2), one GPU and one NIC per PCIe switch (NIC j next to GPU j):
# two rails, so PXN matters.
DUO = ServerSpec(
    name="duo",
    gpu=dv.H100_SXM5_80GB,
    gpus=2,
    nvswitch=dv.NVSWITCH_GEN3,
    nic=dv.CONNECTX7_NDR,
    nics=2,
    pcie_switch=dv.PCIE_SWITCH_GEN5,
    pcie_switches=2,
    sockets=2,
)


def toy_switch(radix: int) -> dv.SwitchSpec:
    """An InfiniBand switch of ``radix`` NDR ports, to build small fabrics."""
    return dv.SwitchSpec(
        name=f"toy_radix{radix}",
        kind="infiniband",
        radix=radix,
        port_rate_bytes_per_s=lk.IB_NDR.line_rate_bytes_per_s,
        latency_s=2e-7,
    )


TOY8 = toy_switch(8)


def reverse(topo: Topology, link: int) -> int:
    """The other direction of ``link``'s cable. A duplex cable adds its two directions in turn
    (``Topology.add_link``), so parallel cables between two nodes pair by rank: the i-th lowest link id
    from tail to head with the i-th lowest from head back to tail (graph edge keys are link ids)."""
    u, v = int(topo.link_src[link]), int(topo.link_dst[link])
    ups, downs = sorted(topo.graph.get_edge_data(u, v)), sorted(topo.graph.get_edge_data(v, u))
    return downs[ups.index(link)]
