"""Named systems: a server preset and the fabric that joins several of them.

``build_system("dgx-h100", nodes=4)`` gives four DGX H100 whose 8 NDR NICs each sit on a
rail-optimised, non-blocking InfiniBand leaf-spine of Quantum-2 switches (NVIDIA DGX SuperPOD
reference architecture wiring). One node has no fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable

from . import devices as dev
from . import links as lk
from .devices import SwitchSpec
from .fat_tree import leaf_spine
from .links import LinkSpec
from .node import ServerSpec, dgx_a100, dgx_h100, hgx_b200, hgx_h200, pcie_rtx4090
from .topology import Topology


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemPreset:
    name: str
    description: str
    server: Callable[[], ServerSpec]
    fabric_link: LinkSpec | None
    switch: SwitchSpec | None

    @property
    def max_nodes(self) -> int:
        """Largest node count a 2-tier non-blocking rail-optimised leaf-spine of this switch holds."""
        if self.switch is None:
            return 1
        nics = self.server().nics
        leaves_per_rail = self.switch.radix // nics          # a spine has `radix` ports, one per leaf
        return leaves_per_rail * (self.switch.radix // 2)


SYSTEMS = MappingProxyType({
    p.name: p for p in (
        SystemPreset(name="dgx-a100", description="DGX A100 (8x A100 SXM4 80GB, NVSwitch); 8x HDR 200G rail-optimised IB leaf-spine",
                     server=dgx_a100, fabric_link=lk.IB_HDR, switch=dev.QUANTUM_HDR),
        SystemPreset(name="dgx-h100", description="DGX H100 (8x H100 SXM5, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                     server=dgx_h100, fabric_link=lk.IB_NDR, switch=dev.QUANTUM2_NDR),
        SystemPreset(name="hgx-h200", description="HGX H200 (8x H200 SXM, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                     server=hgx_h200, fabric_link=lk.IB_NDR, switch=dev.QUANTUM2_NDR),
        SystemPreset(name="hgx-b200", description="HGX B200 (8x B200, NVSwitch); 8x NDR 400G rail-optimised IB leaf-spine",
                     server=hgx_b200, fabric_link=lk.IB_NDR, switch=dev.QUANTUM2_NDR),
        SystemPreset(name="pcie-rtx4090", description="8x RTX 4090 on PCIe Gen4, two sockets, P2P off (staged through host memory); single node",
                     server=pcie_rtx4090, fabric_link=None, switch=None),
    )
})


def build_system(name: str, *, nodes: int = 1, rail_optimised: bool = True, oversubscription: float = 1.0) -> Topology:
    """Build preset ``name`` with ``nodes`` servers."""
    preset = SYSTEMS.get(name)
    if preset is None:
        raise ValueError(f"system: {name!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise ValueError(f"nodes: {nodes!r} is not allowed; expected an integer >= 1")
    if preset.switch is None and nodes > 1:
        raise ValueError(f"nodes: {nodes} is not allowed for {name}, a single server without a fabric; expected 1")
    if nodes > preset.max_nodes:
        raise ValueError(f"nodes: {nodes} is too many for {name}; its 2-tier fabric holds at most {preset.max_nodes} nodes")
    server = preset.server()
    if nodes == 1:
        return leaf_spine(server=server, servers=1, switch=preset.switch, fabric_link=preset.fabric_link,
                          name=f"{name}")
    return leaf_spine(server=server, servers=nodes, switch=preset.switch, fabric_link=preset.fabric_link,
                      rail_optimised=rail_optimised, oversubscription=oversubscription, name=f"{name} x{nodes}")
