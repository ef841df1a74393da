"""What a fabric is made of: switches, ports, cables and optics per tier, and per GPU.

``cost_summary(topology)`` counts hardware so that designs can be compared (switch ports per GPU,
transceivers per GPU), with what ``pricing.fabric_price`` needs to price and power it: the switch and NIC
models, and each cable tier's port rate and NIC ends.

What is counted (only fabric switches, ``NodeKind.FABRIC_SWITCH``, and the links touching them;
NVLink, PCIe and host links are inside the servers and not counted):

* **Switches** grouped by their node attribute ``tier`` (1 leaf/edge, 2 spine/aggregation, 3 core;
  switches without one are grouped as tier 0). A switch's *ports used* is the number of cables
  plugged into it: the cables to each neighbour, ``max(links out, links in)`` (a duplex cable is
  two directed links, one each way). *Ports available* is its radix, from the node attribute
  ``radix`` (set by the generators in ``fat_tree.py``) or, when absent, the radix of the
  ``devices.SWITCH_PRESETS`` entry named by its ``switch`` attribute; None when neither is known.
* **Cables** grouped by ``LinkTier`` (``nic`` NIC-to-switch, ``fabric_1``, ``fabric_2``) and by
  whether a NIC or only switches sit at the ends: one cable per neighbouring pair and parallel
  link, counted as above.
* **Transceivers** (optical modules): ``OPTICAL_TRANSCEIVERS_PER_CABLE = 2`` per optical cable, one
  at each end; 0 per copper cable (``COPPER_TRANSCEIVERS_PER_CABLE``: a passive DAC has its
  connectors moulded on). Assumption, stated rather than sourced: NIC-to-switch cables are optical
  by default because rail-optimised leaves sit in other racks than the servers (DGX SuperPOD
  layout); pass ``nic_cables="copper"`` for a top-of-rack design whose DACs stay in the rack.
  Switch-to-switch cables leave the rack and are optical (``switch_cables="copper"`` overrides).
  A twin-port module (e.g. an 800G OSFP carrying two 400G ports on a Quantum-2 switch) serves two
  cable ends: count modules as half the switch-side figure in that case; this module counts ends.

Ignored: management and storage networks, patch panels, cable lengths and cooling (``pricing`` prices
and powers the NICs, switches, optics and cables counted here).

Per GPU: ``switch_ports_per_gpu = ports used / GPUs``. A non-blocking 2-tier fabric spends 3 switch
ports per NIC port (leaf down, leaf up, spine), a 3-tier one 5 (edge down and up, aggregation down
and up, core).

Worked number: 4 DGX H100 (32 GPUs, 32 NICs), rail-optimised Quantum-2 leaf-spine: 8 leaves with 4
NIC ports and 4 uplinks each (64 ports) and 4 spines with 8 ports each (32): 96 ports used of
12 x 64 = 768, 3 per GPU; 32 NIC cables + 32 leaf-spine cables, all optical: 128 transceivers,
4 per GPU.

>>> from topologies.presets import build_system
>>> cost = cost_summary(build_system("dgx-h100", nodes=4))
>>> cost.switches, cost.switch_ports_used, cost.switch_ports_available, cost.transceivers
(12, 96, 768, 128)
>>> cost.switch_ports_per_gpu, cost.transceivers_per_gpu
(3.0, 4.0)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .checks import choice, instance
from .devices import SWITCH_PRESETS
from .topology import LinkTier, NodeKind, Topology

__all__ = (
    "OPTICAL_TRANSCEIVERS_PER_CABLE",
    "COPPER_TRANSCEIVERS_PER_CABLE",
    "CABLE_MEDIA",
    "SwitchTierCost",
    "LinkTierCost",
    "FabricCost",
    "cost_summary",
)

OPTICAL_TRANSCEIVERS_PER_CABLE = 2  # one pluggable optical module at each end of the fibre (stated assumption)
COPPER_TRANSCEIVERS_PER_CABLE = 0  # passive copper DAC: connectors are part of the cable (stated assumption)
CABLE_MEDIA = {"optical": OPTICAL_TRANSCEIVERS_PER_CABLE, "copper": COPPER_TRANSCEIVERS_PER_CABLE}


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchTierCost:
    """Switches of one tier (node attribute ``tier``)."""

    tier: int
    switches: int
    ports_used: int
    ports_available: int | None  # None when a switch's radix is unknown

    @property
    def utilisation(self) -> float | None:
        """Fraction of the tier's ports that carry a cable."""
        return None if not self.ports_available else self.ports_used / self.ports_available


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkTierCost:
    """Cables of one link tier (``LinkTier``), with their medium and optics."""

    tier: str  # LinkTier name in lower case: nic, fabric_1, fabric_2, ...
    media: str  # "optical" | "copper"
    cables: int
    transceivers: int
    rate_gbps: int | None = None  # the switch ports' line rate (Gb/s), None when the switch is not a preset
    nic_ends: int = 0  # cable ends plugged into a NIC (the others are in switch ports)


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricCost:
    """Hardware of a fabric per tier and in total; see the module docstring for what is counted."""

    name: str
    gpus: int
    nics: int  # NICs cabled to a fabric switch
    switch_tiers: tuple[SwitchTierCost, ...]
    link_tiers: tuple[LinkTierCost, ...]
    switch_models: tuple[tuple[str, int], ...] = ()  # (switch preset name, switches), "?" when unknown
    nic_models: tuple[tuple[str, int], ...] = ()  # (NIC preset name, NICs on the fabric), "?" when unknown

    @property
    def switches(self) -> int:
        return sum(t.switches for t in self.switch_tiers)

    @property
    def switch_ports_used(self) -> int:
        return sum(t.ports_used for t in self.switch_tiers)

    @property
    def switch_ports_available(self) -> int | None:
        total = 0
        for t in self.switch_tiers:
            if t.ports_available is None:
                return None
            total += t.ports_available
        return total

    @property
    def cables(self) -> int:
        return sum(t.cables for t in self.link_tiers)

    @property
    def transceivers(self) -> int:
        return sum(t.transceivers for t in self.link_tiers)

    @property
    def switch_ports_per_gpu(self) -> float:
        return self.switch_ports_used / self.gpus

    @property
    def switches_per_gpu(self) -> float:
        return self.switches / self.gpus

    @property
    def cables_per_gpu(self) -> float:
        return self.cables / self.gpus

    @property
    def transceivers_per_gpu(self) -> float:
        return self.transceivers / self.gpus

    def format(self) -> str:
        """A text table: switches per tier, cables per link tier, totals and per-GPU figures."""

        def avail(value: int | None) -> str:
            return "?" if value is None else str(value)

        def share(used: int, available: int | None) -> str:
            return "?" if not available else f"{100.0 * used / available:.1f} %"

        lines = [
            f"fabric cost: {self.name} ({self.gpus} GPUs, {self.nics} NICs on the fabric)",
            f"{'switch tier':<16}{'switches':>10}{'ports used':>12}{'available':>12}{'used':>10}",
        ]
        for t in self.switch_tiers:
            label = f"tier {t.tier}" if t.tier else "untiered"
            lines.append(
                f"{label:<16}{t.switches:>10}{t.ports_used:>12}"
                f"{avail(t.ports_available):>12}{share(t.ports_used, t.ports_available):>10}"
            )
        lines.append(
            f"{'total':<16}{self.switches:>10}{self.switch_ports_used:>12}"
            f"{avail(self.switch_ports_available):>12}"
            f"{share(self.switch_ports_used, self.switch_ports_available):>10}"
        )
        lines.append(f"{'link tier':<16}{'media':>10}{'Gb/s':>8}{'cables':>12}{'optics':>12}")
        for lt in self.link_tiers:
            rate = "?" if lt.rate_gbps is None else str(lt.rate_gbps)
            lines.append(f"{lt.tier:<16}{lt.media:>10}{rate:>8}{lt.cables:>12}{lt.transceivers:>12}")
        lines.append(f"{'total':<16}{'':>18}{self.cables:>12}{self.transceivers:>12}")
        lines.append(
            f"per GPU: {self.switch_ports_per_gpu:.3f} switch ports used, {self.switches_per_gpu:.4f} "
            f"switches, {self.cables_per_gpu:.3f} cables, {self.transceivers_per_gpu:.3f} transceivers"
        )
        return "\n".join(lines)


def _media(field: str, value: str) -> int:
    return CABLE_MEDIA[choice(f"cost_summary.{field}", value, tuple(CABLE_MEDIA))]


def cost_summary(topology: Topology, *, nic_cables: str = "optical", switch_cables: str = "optical") -> FabricCost:
    """Count the switches, ports, cables and transceivers of ``topology``'s fabric (per tier, total, per GPU)."""
    instance("cost_summary.topology", topology, Topology, "a Topology")
    per_cable = {"nic": _media("nic_cables", nic_cables), "switch": _media("switch_cables", switch_cables)}
    media = {"nic": nic_cables, "switch": switch_cables}
    graph = topology.graph
    kinds = {n: NodeKind(d["kind"]) for n, d in graph.nodes(data=True)}
    switches = [n for n, k in kinds.items() if k == NodeKind.FABRIC_SWITCH]
    is_switch = set(switches)

    # directed link counts per (ordered node pair, link tier), for links touching a fabric switch
    directed: Counter = Counter()
    for link in range(topology.num_links):
        u, v = int(topology.link_src[link]), int(topology.link_dst[link])
        if u in is_switch or v in is_switch:
            directed[(u, v, int(topology.link_tier[link]))] += 1
    cables: Counter = Counter()  # (unordered pair, tier) -> cables
    for (u, v, tier), count in directed.items():
        a, b = min(u, v), max(u, v)
        cables[(a, b, tier)] = max(cables[(a, b, tier)], count)

    def rate(switch: int) -> int | None:
        spec = SWITCH_PRESETS.get(graph.nodes[switch].get("switch"))
        return None if spec is None else round(spec.port_rate_bytes_per_s * 8 / 1e9)

    ports: Counter = Counter()
    link_tiers: Counter = Counter()  # (link tier, "nic" | "switch", port rate) -> cables
    nics: set[int] = set()
    nic_models: Counter = Counter()  # NIC preset name -> NICs
    for (a, b, tier), count in cables.items():
        for end in (a, b):
            if end in is_switch:
                ports[end] += count
            elif kinds[end] == NodeKind.NIC and end not in nics:
                nics.add(end)
                nic_models[graph.nodes[end].get("nic", "?")] += 1
        ends = "switch" if a in is_switch and b in is_switch else "nic"
        link_tiers[(tier, ends, rate(a if a in is_switch else b))] += count

    by_tier: dict[int, list] = {}
    switch_models: Counter = Counter()
    for s in switches:
        attrs = graph.nodes[s]
        tier = attrs.get("tier", 0)
        radix = attrs.get("radix")
        if radix is None and attrs.get("switch") in SWITCH_PRESETS:
            radix = SWITCH_PRESETS[attrs["switch"]].radix
        switch_models[attrs.get("switch") if attrs.get("switch") in SWITCH_PRESETS else "?"] += 1
        entry = by_tier.setdefault(int(tier), [0, 0, 0])
        entry[0] += 1
        entry[1] += ports[s]
        entry[2] = None if entry[2] is None or radix is None else entry[2] + int(radix)

    return FabricCost(
        name=topology.name,
        gpus=topology.num_gpus,
        nics=len(nics),
        switch_tiers=tuple(
            SwitchTierCost(tier=t, switches=c[0], ports_used=c[1], ports_available=c[2])
            for t, c in sorted(by_tier.items())
        ),
        link_tiers=tuple(
            LinkTierCost(
                tier=LinkTier(t).name.lower(),
                media=media[end],
                cables=count,
                transceivers=count * per_cable[end],
                rate_gbps=gbps,
                nic_ends=count if end == "nic" else 0,
            )
            for (t, end, gbps), count in sorted(link_tiers.items(), key=lambda item: (item[0][0], item[0][1]))
        ),
        switch_models=tuple(sorted(switch_models.items())),
        nic_models=tuple(sorted(nic_models.items())),
    )
