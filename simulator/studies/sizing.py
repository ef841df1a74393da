"""Designs at equal cost or power: a design family sized to what a reference design costs or draws.

:func:`match` takes a reference design (fabric settings, as ``fabricsim topo`` takes them) and a family, and
returns the family's most capable design that costs (or draws) no more than the reference, priced from
``topologies.pricing``. Each family has one knob, searched over every design it can build:

* ``fat-tree`` (3 tiers), ``leaf-spine`` (2 tiers), ``rail-only``, and ``multi-plane`` (a fat-tree split into
  the reference's planes, or 2): the oversubscription of the leaves, over every split of a leaf's ports into
  d down and r - d up (d = r/2 ... r - 1, so R = d / (r - d) from 1:1 up); the least oversubscribed design
  within the budget is the most capable.
* ``dragonfly``: the global links per router h (1 up to the ports left after p terminals and a - 1 local
  links), for the design's own p and a if it gives them, else for every balanced shape (a = 2p) that holds the
  nodes in whole groups. A group's a h global ports are cabled floor(a h / (g - 1)) times to each of its g - 1
  peers, the rest idle: the design with the most cabled global links per terminal within the budget wins (the
  cheaper on a tie), at the fewest h that cables them.

Cost and power fall as oversubscription grows and rise with h, so each knob is bisected (about log2(r / 2)
designs built per line, 5 for radix 64), after skipping the least capable values a family cannot build (a
dragonfly whose few global links cannot join its groups). The result lists every design built with its
figures, so a user sees the neighbours on either side of the budget.

Worked case (``tests/simulator/test_sizing.py``): 4 DGX H100 on a rail-optimised Quantum-2 leaf-spine at 2:1
have 8 leaves of 4 NICs with ceil(4 / 2) = 2 uplinks each and 2 spines, 48 optical cables: 10 x 36,000 +
32 x 1,599 + 96 ends x 640 = 472,608 USD. A leaf-spine sized to that is the first split of 64 ports with
ceil(4 / R) = 2, d = 43 (R = 43/21 = 2.048; d = 42 gives R = 1.91 and 3 uplinks, 518,848 USD).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topologies import checks

from .scenario import FABRIC_DEFAULTS, NETWORK_DEFAULTS, build_topology, fabric_of, system_of

__all__ = ("FAMILIES", "Sizing", "match", "price_design")

FAMILIES = ("fat-tree", "leaf-spine", "rail-only", "multi-plane", "dragonfly")
# the fields a family sets (the rest of a design, e.g. its routing, fabric or rail optimisation, stays its own)
FAMILY_FIELDS = ("topology", "oversubscription", "planes", "dragonfly_p", "dragonfly_a", "dragonfly_h")
MEASURES = ("cost", "power")


def _settings(design: Mapping[str, Any]) -> dict[str, Any]:
    """A design's full fabric settings: the defaults with ``design``'s fields (dashes as underscores)."""
    fields = {str(k).replace("-", "_"): v for k, v in design.items()}
    if "system" not in fields:
        raise checks.reject("system", None, "a system preset name (fabricsim systems)")
    return dict(FABRIC_DEFAULTS) | dict(NETWORK_DEFAULTS) | fields


def price_design(design: Mapping[str, Any], prices=None, *, nic_cables: str = "optical"):
    """(topology, FabricCost, FabricPrice) of the design the fabric settings ``design`` describe."""
    from topologies.cost import cost_summary
    from topologies.pricing import fabric_price

    topology = build_topology(_settings(design))
    cost = cost_summary(topology, nic_cables=nic_cables)
    return topology, cost, fabric_price(cost, prices)


def _value(price, by: str) -> float:
    missing = price.unpriced if by == "cost" else price.unpowered
    if missing:
        flag = "--prices FILE.toml" if by == "cost" else "--prices FILE.toml (a watts figure)"
        raise ValueError(
            f"match_{by}: {price.name} has parts without a {'price' if by == 'cost' else 'power figure'} "
            f"({', '.join(missing)}); expected every part in the price book (give them with {flag})"
        )
    return price.capex_usd if by == "cost" else price.power_w


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizing:
    """A family's design at the reference's cost (or power): ``settings`` to build it (the reference's with
    the family's fields), its ``price``, the ``target`` it was sized to, and every design tried."""

    family: str
    by: str  # "cost" | "power"
    target: float  # USD or W
    reference: Any  # FabricPrice of the reference design
    settings: dict[str, Any]
    description: str  # the chosen design's wiring (Topology.description)
    price: Any  # FabricPrice of the chosen design
    knob: str  # the field that was sized
    fields: dict[str, Any]  # the family's fields of the chosen design that have a value (topology, planes, shape, knob)
    tried: tuple[tuple[tuple[Any, ...], float], ...]  # (values of the ``shown`` fields, USD or W) per design built
    shown: tuple[str, ...]  # the fields that tell the designs tried apart

    @property
    def value(self) -> float:
        return self.price.capex_usd if self.by == "cost" else self.price.power_w

    def format(self) -> str:
        unit = "USD" if self.by == "cost" else "kW"

        def shown(v: float) -> str:
            return f"{v:,.0f} USD" if self.by == "cost" else f"{v / 1e3:,.1f} kW"

        chosen = tuple(self.settings[k] for k in self.shown)
        lines = [
            f"# {self.family} at the {self.by} of {self.reference.name} ({shown(self.target)}): "
            + ", ".join(f"{k} = {self.settings[k]:g}" for k in self.shown)
            + f", {shown(self.value)} ({self.value / self.target:.1%} of it)",
            f"# {self.description}",
            "".join(f"{k:>18}" for k in self.shown) + f"{unit:>16}{'share':>9}",
        ]
        for values, value in self.tried:
            mark = "  <- chosen" if values == chosen else ""
            amount = f"{value:,.0f}" if self.by == "cost" else f"{value / 1e3:,.1f}"
            lines.append("".join(f"{v:>18.4g}" for v in values) + f"{amount:>16}{value / self.target:>9.1%}{mark}")
        return "\n".join(lines)


def _lines(family: str, design: Mapping[str, Any]) -> tuple[str, list[tuple[dict[str, Any], list[Any]]]]:
    """(knob, lines) for a design with the fields ``design``: each line is the family's fixed fields
    and the knob's values, from the most capable design to the least (cost and power fall along a line)."""
    from topologies.presets import system_switch

    switch = system_switch(system_of(design), fabric=fabric_of(design), nics_per_node=design["nics_per_node"])
    if switch is None:
        raise checks.reject("system", design["system"], "a system with a fabric switch (or pass fabric)")
    if family == "dragonfly":
        fixed = {"topology": "dragonfly", "oversubscription": 1.0, "planes": 1}
        if design["topology"] == "dragonfly" and design["dragonfly_p"] is not None:
            p, a, _, _ = _shape({**design, "dragonfly_h": None})
            shapes = [(p, a)]
        else:  # every balanced shape (a = 2p) whose routers have ports left for global links
            shapes = [(p, 2 * p) for p in range(1, (switch.radix + 1) // 4 + 1)]
        lines = [
            (fixed | {"dragonfly_p": p, "dragonfly_a": a}, list(range(switch.radix - p - (a - 1), 0, -1)))
            for p, a in shapes
        ]
        return "dragonfly_h", [(f, v) for f, v in lines if v]
    radix = switch.radix
    planes = 1
    if family == "multi-plane":
        planes = design["planes"] if design["planes"] > 1 else 2
    fixed = {
        "topology": "fat-tree" if family == "multi-plane" else family,
        "planes": planes,
        "dragonfly_p": None,
        "dragonfly_a": None,
        "dragonfly_h": None,
    }
    return "oversubscription", [(fixed, [d / (radix - d) for d in range(radix // 2, radix)])]


def _capability(settings: Mapping[str, Any]) -> float:
    """How much traffic a design's upper tiers take per NIC, to choose between lines: for a dragonfly the
    global cables per terminal (a group's a h global ports are cabled floor(a h / (g - 1)) times to each of
    its g - 1 peers; the rest stay idle), 1 / oversubscription otherwise."""
    if settings["topology"] != "dragonfly":
        return 1.0 / settings["oversubscription"]
    p, a, h, g = _shape(settings)
    return (a * h // (g - 1)) * (g - 1) / (a * p)


def _shape(settings: Mapping[str, Any]) -> tuple[int, int, int, int]:
    from topologies.presets import dragonfly_shape

    return dragonfly_shape(
        system_of(settings),
        nodes=settings["nodes"],
        fabric=fabric_of(settings),
        nics_per_node=settings["nics_per_node"],
        dragonfly_p=settings["dragonfly_p"],
        dragonfly_a=settings["dragonfly_a"],
        dragonfly_h=settings["dragonfly_h"],
    )


def match(
    reference: Mapping[str, Any],
    family: str,
    *,
    design: Mapping[str, Any] | None = None,
    by: str = "cost",
    prices=None,
    nic_cables: str = "optical",
) -> Sizing:
    """The ``family`` design (a :data:`FAMILIES` name) that costs (``by="cost"``) or draws (``"power"``) the
    most without exceeding the ``reference`` design (fabric settings: system, nodes, topology, ...); see the
    module docstring for each family's knob. ``design``: the sized design's own fields (its system, nodes,
    fabric, rail-optimisation, routing, and a dragonfly's p and a), the family's knob aside; default the
    reference's. ``prices``: a ``topologies.pricing.PriceBook`` (default: shipped)."""
    family = checks.choice("match.family", family, FAMILIES)
    by = checks.choice("match.by", by, MEASURES)
    _, _, reference_price = price_design(_settings(reference), prices, nic_cables=nic_cables)
    settings = _settings(reference if design is None else design)
    target = _value(reference_price, by)
    if target <= 0:
        raise ValueError(
            f"match_{by}: {reference_price.name} has no fabric to size against ({by} 0); expected a design "
            "with fabric switches (more than one node)"
        )
    knob, lines = _lines(family, settings)
    tried: dict[tuple, float] = {}  # (line, index) -> USD or W; inf where the family cannot build it
    refusals: list[str] = []  # why designs could not be built, the first kept for the message

    def value_at(fixed: dict[str, Any], values: list[Any], line: int, i: int) -> float:
        if (line, i) not in tried:
            try:
                _, _, price = price_design(settings | fixed | {knob: values[i]}, prices, nic_cables=nic_cables)
            except ValueError as exc:
                tried[(line, i)] = math.inf  # a design the family cannot build for these nodes
                refusals.append(str(exc))
            else:
                tried[(line, i)] = _value(price, by)
        return tried[(line, i)]

    best: tuple[float, float, dict[str, Any]] | None = None  # (capability, -value, settings)
    for line, (fixed, values) in enumerate(lines):
        # values run from the most to the least capable design and cost falls along them; the least capable
        # may not be buildable (a dragonfly with too few global links for its groups): skip those, then bisect
        # for the first design within the budget
        lo, hi = 0, len(values) - 1
        while hi >= 0 and value_at(fixed, values, line, hi) == math.inf:
            hi -= 1
        if hi < 0 or tried[(line, hi)] > target:
            continue
        while lo < hi:
            mid = (lo + hi) // 2
            if value_at(fixed, values, line, mid) <= target:
                hi = mid
            else:
                lo = mid + 1
        found = settings | fixed | {knob: values[lo]}
        if family == "dragonfly":  # the fewest global links per router that cable as many global links
            p, a, h, g = _shape(found)
            found[knob] = -(-(a * h // (g - 1)) * (g - 1) // a)
        candidate = (_capability(found), -tried[(line, lo)], found)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    if best is None:
        where = f"no {family} design for {settings['nodes']} nodes of {settings['system']}"
        built = [v for v in tried.values() if v != math.inf]
        if not built:
            raise ValueError(f"match_{by}: {where} can be built: {refusals[0] if refusals else 'no candidate'}")
        raise ValueError(
            f"match_{by}: {where} is within the {by} of {reference_price.name} ({target:,.0f}); the least it can be "
            f"built for is {min(built):,.0f}"
        )
    chosen = best[2]
    topology, _, price = price_design(chosen, prices, nic_cables=nic_cables)
    shown = ("dragonfly_p", "dragonfly_a", knob) if family == "dragonfly" else (knob,)
    return Sizing(
        family=family,
        by=by,
        target=target,
        reference=reference_price,
        settings=chosen,
        description=topology.description,
        price=price,
        knob=knob,
        fields={k: chosen[k] for k in FAMILY_FIELDS if chosen[k] is not None},
        tried=_tried_rows(tried, lines, knob, shown, chosen, _value(price, by)),
        shown=shown,
    )


def _tried_rows(
    tried: Mapping[tuple, float],
    lines: list[tuple[dict[str, Any], list[Any]]],
    knob: str,
    shown: tuple[str, ...],
    chosen: Mapping[str, Any],
    chosen_value: float,
) -> tuple[tuple[tuple[Any, ...], float], ...]:
    """Every design built (the chosen one included), as (values of the ``shown`` fields, USD or W), line by
    line from the most capable design of each."""
    rows: dict[tuple[Any, ...], float] = {}
    for (line, i), value in sorted(tried.items()):
        if value != math.inf:
            rows[tuple(({**lines[line][0], knob: lines[line][1][i]})[k] for k in shown)] = value
    rows[tuple(chosen[k] for k in shown)] = chosen_value
    sign = -1 if knob == "dragonfly_h" else 1  # the knob's last value is the most capable first: most h, least R
    return tuple(sorted(rows.items(), key=lambda item: (item[0][:-1], sign * item[0][-1])))
