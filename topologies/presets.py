"""Named systems: a server preset, the fabric technology that joins several of them, and the wiring.

``build_system("dgx-h100", nodes=4)`` gives four DGX H100 whose 8 NDR NICs each sit on a
rail-optimised, non-blocking InfiniBand leaf-spine of Quantum-2 switches (NVIDIA DGX SuperPOD
reference architecture wiring). One node has no fabric.

Three choices can be changed independently of the server preset:

* ``topology``: a name in :data:`TOPOLOGIES` (``leaf-spine``, ``fat-tree``, ``rail-only``,
  ``dragonfly``). Each
  entry is a :class:`TopologyKind`: a builder with the keyword signature
  ``build(*, server, servers, switch, fabric_link, rail_optimised, oversubscription, planes, name)``
  and a capacity function ``max_servers(*, server, switch, rail_optimised, oversubscription,
  planes)`` (or None when the builder reports its own limits); registering another wiring is
  adding one entry.
* ``fabric``: a name in :data:`FABRICS`, a (link, switch, NIC) technology triple, or a
  :class:`FabricPreset` (``topologies.io.custom_fabric`` builds one from a table). The server's NICs
  are replaced by the fabric's NIC (``dataclasses.replace`` on the ServerSpec). A NIC's host link
  trains at the slower PCIe generation of the NIC and the server's PCIe switch/root ports (PCIe
  link training negotiates the highest rate both ends support), so a ConnectX-8 (Gen6) in a Gen5
  DGX H100 runs at Gen5 x16, 57.6 GB/s, below its 99.4 GB/s XDR port.
* ``nics_per_node`` K: the number of NICs per server. NICs are spread evenly over the server's
  PCIe switches, so K must be a multiple of their number (DGX/HGX: 4) and at most the GPU count;
  GPU i uses the NIC under its own PCIe switch (``node.add_server``): with K = 4 on an 8-GPU DGX
  the two GPUs of a PCIe switch share its NIC, with K = 8 each GPU has its own. More NICs than
  GPUs is rejected: each GPU sends and receives through one NIC, so the extra NICs would sit idle.
* ``planes`` P (P dividing K): NIC j on plane j % P, each plane an independent fabric.

Capacity (``SystemPreset.max_nodes_for``): DGX H100 on Quantum-2 (radix 64), non-blocking,
rail-optimised: a leaf-spine holds floor(64 / 8) x 32 = 256 nodes, a 3-tier fat-tree
64 x 32 / 8 x 32 = 8,192 nodes (k^3/4 = 65,536 NIC ports), rail-only 64 x 32 = 2,048 nodes, and a
balanced dragonfly (p = h = 16, a = 32, g = a h + 1 = 513 groups of 32 x 16 / 8 = 64 nodes) 32,832.

>>> SYSTEMS["dgx-h100"].max_nodes_for("leaf-spine"), SYSTEMS["dgx-h100"].max_nodes_for("fat-tree")
(256, 8192)
>>> SYSTEMS["dgx-h100"].max_nodes
32832
>>> link, switch, nic = FABRICS["roce-400g"]
>>> link.name, switch.name, nic.name
('roce_400g', 'spectrum_4_400g', 'connectx7_400gbe')
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TypeVar

from . import checks
from . import devices as dev
from . import links as lk
from .devices import NicSpec, SwitchSpec
from .dragonfly import ARRANGEMENTS, dragonfly
from .fat_tree import (
    fat_tree,
    fat_tree_max_servers,
    leaf_spine,
    leaf_spine_max_servers,
    rail_only,
    rail_only_max_servers,
)
from .links import LinkSpec
from .node import ServerSpec, dgx_a100, dgx_h100, gb200_nvl72, hgx_b200, hgx_h200, pcie_rtx4090
from .topology import Topology

__all__ = (
    "FabricPreset",
    "FABRICS",
    "TopologyKind",
    "TOPOLOGIES",
    "SystemPreset",
    "SYSTEMS",
    "build_system",
    "as_system",
    "as_fabric",
    "system_switch",
    "dragonfly_shape",
)


# ------------------------------------------------------------------------------------------------
# Fabric technologies
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricPreset:
    """A fabric technology: the cable, the switch and the server NIC. Unpacks as (link, switch, nic)."""

    name: str
    description: str
    link: LinkSpec
    switch: SwitchSpec
    nic: NicSpec

    def __iter__(self) -> Iterator[LinkSpec | SwitchSpec | NicSpec]:
        return iter((self.link, self.switch, self.nic))


FABRICS = MappingProxyType(
    {
        f.name: f
        for f in (
            FabricPreset(
                name="ib-hdr",
                description="InfiniBand HDR 200G: Quantum QM8700 (40 ports), ConnectX-6",
                link=lk.IB_HDR,
                switch=dev.QUANTUM_HDR,
                nic=dev.CONNECTX6_HDR,
            ),
            FabricPreset(
                name="ib-ndr",
                description="InfiniBand NDR 400G: Quantum-2 QM9700 (64 ports), ConnectX-7",
                link=lk.IB_NDR,
                switch=dev.QUANTUM2_NDR,
                nic=dev.CONNECTX7_NDR,
            ),
            FabricPreset(
                name="ib-xdr",
                description="InfiniBand XDR 800G: Quantum-X800 Q3400 (144 ports), ConnectX-8",
                link=lk.IB_XDR,
                switch=dev.QUANTUM_X800_XDR,
                nic=dev.CONNECTX8_XDR,
            ),
            FabricPreset(
                name="roce-100g",
                description="RoCEv2 100GbE: Tomahawk 4 (256 x 100G), ConnectX-6 Dx",
                link=lk.ROCE_100G,
                switch=dev.TOMAHAWK_4_100G,
                nic=dev.CONNECTX6DX_100G,
            ),
            FabricPreset(
                name="roce-200g",
                description="RoCEv2 200GbE: Tomahawk 4 (128 x 200G), ConnectX-6 Dx",
                link=lk.ROCE_200G,
                switch=dev.TOMAHAWK_4_200G,
                nic=dev.CONNECTX6DX_200G,
            ),
            FabricPreset(
                name="roce-400g",
                description="RoCEv2 400GbE (Spectrum-X): Spectrum-4 SN5600 (128 x 400G), ConnectX-7",
                link=lk.ROCE_400G,
                switch=dev.SPECTRUM_4_400G,
                nic=dev.CONNECTX7_400GBE,
            ),
            FabricPreset(
                name="roce-800g",
                description="RoCEv2 800GbE (Spectrum-X): Spectrum-4 SN5600 (64 x 800G), ConnectX-8",
                link=lk.ROCE_800G,
                switch=dev.SPECTRUM_4,
                nic=dev.CONNECTX8_800GBE,
            ),
        )
    }
)


# ------------------------------------------------------------------------------------------------
# Wirings
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyKind:
    """A wiring: its builder and (optionally) the largest server count it holds."""

    name: str
    description: str
    build: Callable[..., Topology]
    max_servers: Callable[..., int] | None = None


def _build_rail_only(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    rail_optimised: object,
    oversubscription: float,
    planes: object,
    name: str | None,
) -> Topology:
    _rail_only_options(rail_optimised, planes)
    return rail_only(
        server=server,
        servers=servers,
        switch=switch,
        fabric_link=fabric_link,
        oversubscription=oversubscription,
        name=name,
    )


def _rail_only_max(
    *, server: ServerSpec, switch: SwitchSpec, rail_optimised: object, oversubscription: float, planes: object
) -> int:
    _rail_only_options(rail_optimised, planes)
    return rail_only_max_servers(server=server, switch=switch, oversubscription=oversubscription)


def _require_rail_optimised(rail_optimised: object, topology: str, reason: str) -> None:
    """Reject ``rail_optimised`` other than True for a ``topology`` whose wiring places the NICs (``reason``)."""
    if rail_optimised is not True:
        raise ValueError(
            f"rail_optimised: {rail_optimised!r} is not allowed with topology '{topology}', {reason}; expected True"
        )


def _rail_only_options(rail_optimised: object, planes: object) -> None:
    _require_rail_optimised(rail_optimised, "rail-only", "whose rails are its wiring")
    if planes != 1:
        raise ValueError(
            f"planes: {planes!r} is not allowed with topology 'rail-only', where every rail is "
            "already its own fabric; expected 1"
        )


def _dragonfly_shape(
    *,
    server: ServerSpec,
    switch: SwitchSpec,
    servers: int | None,
    p: int | None = None,
    a: int | None = None,
    h: int | None = None,
) -> tuple[int, int, int, int]:
    """(p, a, h, g) of a dragonfly of ``switch`` routers. Parameters given are kept and the others follow the
    balanced rule (Kim et al.: a = 2p = 2h); with none given, the smallest balanced p whose groups (a p / K
    servers of K NICs each) hold ``servers`` in 2 to a h + 1 whole groups (the most groups, so the most
    global links: a group of a few large routers, as the largest p gives, leaves 2 groups and one global
    cable between them); ``servers=None``: the largest shape (the most servers)."""
    nics = server.nics
    if (p, a, h) != (None, None, None):
        p, a, h = (None if v is None else checks.integer(f"dragonfly_{n}", v, low=1) for n, v in zip("pah", (p, a, h)))
        p = p or h or max(1, (a or 2) // 2)
        a, h = a or 2 * p, h or p
        if p + (a - 1) + h > switch.radix:
            raise ValueError(
                f"dragonfly_p/a/h: p={p} a={a} h={h} is not allowed with {switch.name} routers: p + (a - 1) + h = "
                f"{p + a - 1 + h} ports; expected at most the radix ({switch.radix})"
            )
        if (a * p) % nics:
            raise ValueError(
                f"dragonfly_p/a/h: p={p} a={a} is not allowed: a group's a x p = {a * p} NIC ports do not make "
                f"whole servers of {nics} NICs; expected a x p a multiple of {nics}"
            )
        per_group = a * p // nics
        if servers is None:
            return p, a, h, a * h + 1
        if servers % per_group or not 2 <= servers // per_group <= a * h + 1:
            raise ValueError(
                f"nodes: {servers} is not allowed on a dragonfly with p={p} a={a} h={h}: a group holds "
                f"{per_group} servers; expected a multiple of {per_group} from {2 * per_group} to "
                f"{(a * h + 1) * per_group} (2 to a h + 1 = {a * h + 1} groups)"
            )
        return p, a, h, servers // per_group
    shapes = range((switch.radix + 1) // 4, 0, -1) if servers is None else range(1, (switch.radix + 1) // 4 + 1)
    for p in shapes:
        a, h = 2 * p, p
        if (a * p) % nics:
            continue
        per_group = a * p // nics
        if servers is None:
            return p, a, h, a * h + 1
        if servers % per_group == 0 and 2 <= servers // per_group <= a * h + 1:
            return p, a, h, servers // per_group
    raise ValueError(
        f"topology: dragonfly of {switch.name} routers cannot hold exactly {servers} servers of "
        f"{nics} NICs in whole groups (2 or more); expected a multiple of a group's servers"
    )


def _dragonfly_options(rail_optimised: object, oversubscription: object, planes: object) -> None:
    _require_rail_optimised(
        rail_optimised, "dragonfly", "which spreads each server's NICs over its group's routers itself (dragonfly.py)"
    )
    if oversubscription != 1 or planes != 1:
        raise ValueError(
            "oversubscription/planes: not used by topology 'dragonfly' (its global links set the "
            "bisection); expected the defaults 1 and 1"
        )


def _build_dragonfly(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    rail_optimised: object,
    oversubscription: object,
    planes: object,
    name: str | None,
    dragonfly_p: int | None = None,
    dragonfly_a: int | None = None,
    dragonfly_h: int | None = None,
    dragonfly_arrangement: str = "absolute",
) -> Topology:
    _dragonfly_options(rail_optimised, oversubscription, planes)
    p, a, h, g = _dragonfly_shape(
        server=server, switch=switch, servers=servers, p=dragonfly_p, a=dragonfly_a, h=dragonfly_h
    )
    return dragonfly(
        server=server,
        servers_per_router=p,
        routers_per_group=a,
        global_links_per_router=h,
        groups=g,
        switch=switch,
        fabric_link=fabric_link,
        arrangement=dragonfly_arrangement,
        name=name,
    )


def _dragonfly_max(
    *,
    server: ServerSpec,
    switch: SwitchSpec,
    rail_optimised: object,
    oversubscription: object,
    planes: object,
    dragonfly_p: int | None = None,
    dragonfly_a: int | None = None,
    dragonfly_h: int | None = None,
    dragonfly_arrangement: str = "absolute",
) -> int:
    _dragonfly_options(rail_optimised, oversubscription, planes)
    p, a, _, g = _dragonfly_shape(
        server=server, switch=switch, servers=None, p=dragonfly_p, a=dragonfly_a, h=dragonfly_h
    )
    return a * p * g // server.nics


TOPOLOGIES = MappingProxyType(
    {
        t.name: t
        for t in (
            TopologyKind(
                name="leaf-spine",
                description="2-tier folded Clos (leaf-spine)",
                build=leaf_spine,
                max_servers=leaf_spine_max_servers,
            ),
            TopologyKind(
                name="fat-tree",
                description="k-ary 3-tier folded Clos (edge, aggregation, core)",
                build=fat_tree,
                max_servers=fat_tree_max_servers,
            ),
            TopologyKind(
                name="rail-only",
                description="one switch or leaf-spine per rail, no cross-rail switch "
                "(cross-rail traffic relays over NVLink)",
                build=_build_rail_only,
                max_servers=_rail_only_max,
            ),
            TopologyKind(
                name="dragonfly",
                description="dragonfly of the fabric's switches (p, a, h as given, else balanced: a = 2p = 2h, "
                "the smallest p that holds the servers), routers of a group fully connected, one global cable "
                "per pair of groups at full size",
                build=_build_dragonfly,
                max_servers=_dragonfly_max,
            ),
        )
    }
)


# ------------------------------------------------------------------------------------------------
# Systems
# ------------------------------------------------------------------------------------------------


_Entry = TypeVar("_Entry")


def _lookup(field: str, value: object, table: Mapping[str, _Entry]) -> _Entry:
    entry = table.get(value) if isinstance(value, str) else None
    if entry is None:
        raise ValueError(f"{field}: {value!r} is not a preset; expected one of {', '.join(table)}")
    return entry


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemPreset:
    name: str
    description: str
    server: Callable[[], ServerSpec]
    fabric_link: LinkSpec | None
    switch: SwitchSpec | None

    @property
    def max_nodes(self) -> int:
        """Largest node count any registered wiring of this preset's fabric holds (default options)."""
        if self.switch is None:
            return 1
        return max(self.max_nodes_for(name) for name, kind in TOPOLOGIES.items() if kind.max_servers is not None)

    def max_nodes_for(
        self,
        topology: str = "leaf-spine",
        *,
        fabric: str | FabricPreset | None = None,
        oversubscription: float = 1.0,
        rail_optimised: bool = True,
        nics_per_node: int | None = None,
        planes: int = 1,
        dragonfly_p: int | None = None,
        dragonfly_a: int | None = None,
        dragonfly_h: int | None = None,
        dragonfly_arrangement: str = "absolute",
    ) -> int:
        """Largest node count ``build_system(self.name, topology=..., ...)`` accepts with these options."""
        kind = _lookup("topology", topology, TOPOLOGIES)
        shape = _shape_options(topology, dragonfly_p, dragonfly_a, dragonfly_h, dragonfly_arrangement)
        server, switch, _ = _configure(self, fabric=fabric, nics_per_node=nics_per_node)
        if switch is None or server.nics == 0:
            return 1
        if kind.max_servers is None:
            raise ValueError(f"topology: {topology!r} does not state its capacity; build it to find its limits")
        return kind.max_servers(
            server=server,
            switch=switch,
            rail_optimised=rail_optimised,
            oversubscription=oversubscription,
            planes=planes,
            **shape,
        )


def _shape_options(
    topology: str, p: object, a: object, h: object, arrangement: object, *, nodes: int | None = None
) -> dict:
    """The dragonfly_* options for topology ``topology``'s builder ({} unless a dragonfly of more than one server,
    ``nodes``); refused elsewhere."""
    if topology != "dragonfly" or nodes == 1:
        given = [(n, v) for n, v in (("dragonfly_p", p), ("dragonfly_a", a), ("dragonfly_h", h)) if v is not None]
        if arrangement != "absolute":
            given.append(("dragonfly_arrangement", arrangement))
        if given:
            name, value = given[0]
            where = f"topology {topology!r}" if topology != "dragonfly" else "one server (no fabric)"
            raise checks.reject(name, value, f"no value with {where} (it shapes a dragonfly)")
        return {}
    checks.choice("dragonfly_arrangement", arrangement, ARRANGEMENTS)
    return {"dragonfly_p": p, "dragonfly_a": a, "dragonfly_h": h, "dragonfly_arrangement": arrangement}


SYSTEMS = MappingProxyType(
    {
        p.name: p
        for p in (
            SystemPreset(
                name="dgx-a100",
                description="DGX A100 (8x A100 SXM4 80GB, NVSwitch); 8x HDR 200G rail-optimised IB leaf-spine",
                server=dgx_a100,
                fabric_link=lk.IB_HDR,
                switch=dev.QUANTUM_HDR,
            ),
            SystemPreset(
                name="dgx-h100",
                description="DGX H100 (8x H100 SXM5, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                server=dgx_h100,
                fabric_link=lk.IB_NDR,
                switch=dev.QUANTUM2_NDR,
            ),
            SystemPreset(
                name="hgx-h200",
                description="HGX H200 (8x H200 SXM, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                server=hgx_h200,
                fabric_link=lk.IB_NDR,
                switch=dev.QUANTUM2_NDR,
            ),
            SystemPreset(
                name="hgx-b200",
                description="HGX B200 (8x B200, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                server=hgx_b200,
                fabric_link=lk.IB_NDR,
                switch=dev.QUANTUM2_NDR,
            ),
            SystemPreset(
                name="gb200-nvl72",
                description="GB200 NVL72 rack (72x B200 + 36 Grace, one 72-GPU NVLink domain); 72x NDR 400G "
                "rail-optimised IB fabric (fat-tree beyond one rack)",
                server=gb200_nvl72,
                fabric_link=lk.IB_NDR,  # DGX SuperPOD GB200 RA: NDR 400 Gb/s InfiniBand compute fabric
                switch=dev.QUANTUM2_NDR,  # same RA: Quantum-2 QM9700 switches
            ),
            SystemPreset(
                name="pcie-rtx4090",
                description="8x RTX 4090 on PCIe Gen4, two sockets, P2P off (staged through host memory); single node",
                server=pcie_rtx4090,
                fabric_link=None,
                switch=None,
            ),
        )
    }
)


def as_fabric(value: object) -> FabricPreset:
    """The fabric ``value`` names: a :data:`FABRICS` name, or a :class:`FabricPreset` (a custom fabric,
    ``topologies.io.custom_fabric``)."""
    return value if isinstance(value, FabricPreset) else _lookup("fabric", value, FABRICS)


def as_system(value: object) -> SystemPreset:
    """The system ``value`` names: a :data:`SYSTEMS` name, a :class:`SystemPreset` (an imported server with its
    fabric, ``topologies.io.import_system``) or a bare :class:`ServerSpec` (no fabric of its own: pass
    ``fabric=`` to join several)."""
    if isinstance(value, SystemPreset):
        return value
    if isinstance(value, ServerSpec):
        return SystemPreset(
            name=value.name,
            description=f"{value.name} ({value.gpus}x {value.gpu.name}, {value.nics} NICs); no fabric of its own",
            server=functools.partial(dataclasses.replace, value),
            fabric_link=None,
            switch=None,
        )
    return _lookup("system", value, SYSTEMS)


def _nic_in_server(nic: NicSpec, server: ServerSpec) -> NicSpec:
    """The NIC as it runs in this server: its host link trains at the slower PCIe generation of the
    two ends (the server side is its PCIe switch uplink / root-port generation, ``pcie_uplink``)."""
    if nic.pcie.line_rate_bytes_per_s > server.pcie_uplink.line_rate_bytes_per_s:
        return dataclasses.replace(nic, pcie=server.pcie_uplink)
    return nic


def _configure(
    preset: SystemPreset, *, fabric: str | FabricPreset | None, nics_per_node: int | None
) -> tuple[ServerSpec, SwitchSpec | None, LinkSpec | None]:
    """The server, switch and cable of ``preset`` with a fabric and a NIC count applied."""
    server, switch, link = preset.server(), preset.switch, preset.fabric_link
    nic = server.nic
    fabric_preset = None if fabric is None else as_fabric(fabric)
    if fabric_preset is not None:
        link, switch, nic = fabric_preset.link, fabric_preset.switch, fabric_preset.nic
    if nics_per_node is not None and server.layout is not None and nics_per_node != server.nics:
        raise ValueError(
            f"nics_per_node: {nics_per_node!r} is not allowed for {preset.name}, whose NICs are placed as its file "
            f"says; expected its own {server.nics} (or no nics_per_node)"
        )
    if nics_per_node is not None and server.layout is None:
        count = nics_per_node
        per_switch = server.pcie_switches or 1
        allowed = [n for n in range(per_switch, server.gpus + 1, per_switch)]
        if not isinstance(count, int) or isinstance(count, bool) or count not in allowed:
            spread = (
                f"a multiple of its {server.pcie_switches} PCIe switches (NICs are spread evenly over them) "
                if server.pcie_switches
                else ""
            )
            raise ValueError(
                f"nics_per_node: {count!r} is not allowed for {preset.name}; expected {spread}at most its "
                f"{server.gpus} GPUs (each GPU uses one NIC): one of {', '.join(map(str, allowed))}"
            )
        if nic is None:
            raise ValueError(
                f"nics_per_node: {count} needs a NIC, but {preset.name} has none; "
                f"pass fabric= (one of {', '.join(FABRICS)})"
            )
        server = dataclasses.replace(server, nics=count, nic=nic)
    if fabric_preset is not None and server.nics:
        server = dataclasses.replace(server, nic=_nic_in_server(fabric_preset.nic, server))
    return server, switch, link


def system_switch(
    name: str | SystemPreset | ServerSpec, *, fabric: str | FabricPreset | None = None, nics_per_node: int | None = None
) -> SwitchSpec | None:
    """The fabric switch system ``name`` is built with (its preset's, or ``fabric``'s); None without a fabric."""
    return _configure(as_system(name), fabric=fabric, nics_per_node=nics_per_node)[1]


def dragonfly_shape(
    name: str | SystemPreset | ServerSpec,
    *,
    nodes: int,
    fabric: str | FabricPreset | None = None,
    nics_per_node: int | None = None,
    dragonfly_p: int | None = None,
    dragonfly_a: int | None = None,
    dragonfly_h: int | None = None,
) -> tuple[int, int, int, int]:
    """(p, a, h, g) of the dragonfly ``build_system(name, nodes=nodes, topology="dragonfly", ...)`` builds."""
    server, switch, _ = _configure(as_system(name), fabric=fabric, nics_per_node=nics_per_node)
    if switch is None:
        raise ValueError(f"system: {name!r} has no fabric switch; expected a system with one (or pass fabric=)")
    return _dragonfly_shape(
        server=server,
        switch=switch,
        servers=checks.integer("nodes", nodes, low=1),
        p=dragonfly_p,
        a=dragonfly_a,
        h=dragonfly_h,
    )


def build_system(
    name: str | SystemPreset | ServerSpec,
    *,
    nodes: int = 1,
    topology: str = "leaf-spine",
    fabric: str | FabricPreset | None = None,
    oversubscription: float = 1.0,
    rail_optimised: bool = True,
    nics_per_node: int | None = None,
    planes: int = 1,
    gdr: bool = True,
    dragonfly_p: int | None = None,
    dragonfly_a: int | None = None,
    dragonfly_h: int | None = None,
    dragonfly_arrangement: str = "absolute",
) -> Topology:
    """Build preset ``name`` with ``nodes`` servers on ``topology`` (a :data:`TOPOLOGIES` name).

    ``name`` may also be a :class:`SystemPreset` (an imported server: ``topologies.io.import_system``) or a
    :class:`ServerSpec` (:func:`as_system`).

    ``fabric`` (a :data:`FABRICS` name) replaces the preset's NICs, switch and cables; None keeps
    its own. ``nics_per_node`` replaces its NIC count; ``planes`` splits the NICs over independent
    fabric planes; ``gdr=False`` turns GPUDirect RDMA off (network traffic staged through host
    memory, NCCL's "GDR 0"). ``dragonfly_p/a/h`` (NIC ports per router, routers per group, global links
    per router; the others balanced, a = 2p = 2h) and ``dragonfly_arrangement`` (global links:
    absolute, relative or circulant) shape topology "dragonfly" only. See the module docstring for the rules.
    """
    preset = as_system(name)
    name = preset.name
    nodes = checks.integer("nodes", nodes, low=1)
    kind = _lookup("topology", topology, TOPOLOGIES)
    oversubscription = checks.finite("oversubscription", oversubscription, low=1)
    rail_optimised = checks.flag("rail_optimised", rail_optimised)
    planes = checks.integer("planes", planes, low=1)
    if checks.is_int(nics_per_node):  # a numpy integer as an int; other values: _configure's message
        nics_per_node = int(nics_per_node)
    shape = _shape_options(topology, dragonfly_p, dragonfly_a, dragonfly_h, dragonfly_arrangement, nodes=nodes)
    server, switch, link = _configure(preset, fabric=fabric, nics_per_node=nics_per_node)
    gdr = checks.flag("gdr", gdr)
    if not gdr:
        server = dataclasses.replace(server, gdr=False)
    label = " ".join(
        [name if nodes == 1 else f"{name} x{nodes}"]
        + ([topology] if topology != "leaf-spine" and nodes > 1 else [])
        + ([as_fabric(fabric).name] if fabric is not None else [])
        + ([f"{nics_per_node} NICs"] if nics_per_node is not None else [])
        + ([f"{planes} planes"] if planes != 1 else [])
        + (["no GDR"] if not gdr else [])
    )
    if nodes == 1:
        return leaf_spine(server=server, servers=1, switch=switch, fabric_link=link, planes=planes, name=label)
    if switch is None:
        raise ValueError(
            f"nodes: {nodes} is not allowed for {name}, a single server without a fabric; expected 1 "
            f"(or pass fabric=, one of {', '.join(FABRICS)}, with nics_per_node=)"
        )
    if server.nics == 0:
        raise ValueError(
            f"nodes: {nodes} is not allowed for {name}: its server has no NIC; expected 1 (or pass nics_per_node=)"
        )
    if kind.max_servers is not None:
        most = preset.max_nodes_for(
            topology,
            fabric=fabric,
            oversubscription=oversubscription,
            rail_optimised=rail_optimised,
            nics_per_node=nics_per_node,
            planes=planes,
            **shape,
        )
        if nodes > most:
            larger = {
                t: preset.max_nodes_for(
                    t, fabric=fabric, oversubscription=oversubscription, nics_per_node=nics_per_node
                )
                for t, k in TOPOLOGIES.items()
                if k.max_servers is not None and t != topology
            }
            hint = ", ".join(f"{t} holds {n}" for t, n in larger.items() if n >= nodes)
            raise ValueError(
                f"nodes: {nodes} is too many for {name} on topology {topology!r} with "
                f"{switch.name} switches; it holds at most {most} nodes" + (f" ({hint})" if hint else "")
            )
    return kind.build(
        server=server,
        servers=nodes,
        switch=switch,
        fabric_link=link,
        rail_optimised=rail_optimised,
        oversubscription=oversubscription,
        planes=planes,
        name=label,
        **shape,
    )
