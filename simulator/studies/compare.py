"""Fabric designs side by side: the same workloads on each design, as one sweep (``studies.sweep``), with what
each design is made of (``topologies.cost``) and, for every workload, why the designs tie or differ.

A comparison file (TOML; ``fabricsim compare`` without one runs the shipped ``designs/h100-4096.toml``) names
the fields every scenario shares at its top level (system, nodes), one table per design under ``designs``
(its fabric fields: topology, oversubscription, planes, dragonfly shape, routing, fabric, ...) and one per
workload under ``workloads`` (a bench scenario, one collective at one size, or a training step: the fields
of ``fabricsim step``). ``baseline`` names the design the others are measured against (default the first).

Why a design ties or differs, for a workload (:func:`explain`):

* a collective: its bus bandwidth against the baseline's, NCCL's choice when it differs, and its busiest link
  (which tier: NIC cable, leaf uplink, a dragonfly's local or global link) with the share of the collective's
  time it is busy;
* a step within 0.2 % of the baseline, with no byte above the leaves: every group stayed under one leaf per
  rail (tensor groups inside a server, the others relayed to the rail NIC by PXN), so the upper tiers that
  tell the designs apart carry nothing;
* a step within 0.2 % with traffic above the leaves: that traffic is hidden behind compute (no group's
  exposed time changes);
* a step within 0.2 % simulated with a reduction that does not hold exactly on that design (its ``approximate``
  flag): a tie as simulated only, since the replicas it stands for would contend on the upper tiers;
* otherwise: the change of time in the network and the group whose exposed time moves most, with the bytes
  above the leaves on both designs.

What a design is made of and what it costs: hardware counts (switches, switch ports, cables and optical
transceivers per GPU), capex and power from ``topologies.pricing`` (a top-level ``prices = "FILE.toml"``
replaces the shipped figures), and per workload the capex per unit of throughput (USD per GB/s of bus
bandwidth, USD per token/s of a step).

A design can be sized to another's cost or power: ``match_cost = "OTHER"`` (or ``match_power``) in its table
sizes its family (its topology; a fat-tree with ``planes`` > 1 is the multi-plane family) with
``studies.sizing.match``: the most capable design of the family within OTHER's capex, e.g. the least
oversubscribed fat-tree, or the dragonfly with the most global links.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topologies import checks

from .scenario import FABRIC_DEFAULTS, NETWORK_DEFAULTS, STEP_DEFAULTS, build_topology
from .sizing import match, price_design
from .sweep import load_grid, sweep

__all__ = ("DEFAULT_DESIGNS", "Comparison", "compare", "explain", "load_designs")

DEFAULT_DESIGNS = Path(__file__).with_name("designs") / "h100-4096.toml"
TIE = 0.002  # a step within 0.2 % of the baseline's time ties with it
GROUPS = ("tp", "cp", "ep", "pp", "dp")
MATCH_FIELDS = ("match_cost", "match_power")
SPEC_FIELDS = ("designs", "workloads", "baseline", "prices")  # a comparison's own fields, not a scenario's


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """A comparison's results: ``table`` (the sweep's rows, one per design and workload, with ``design`` and
    ``workload`` columns), ``hardware`` (one row per design) and the ``baseline`` design."""

    designs: tuple[str, ...]
    workloads: tuple[str, ...]
    baseline: str
    table: Any  # pandas DataFrame
    hardware: Any  # pandas DataFrame, index: design
    sized: Mapping[str, str]  # design -> how it was sized to another's cost or power (match_cost / match_power)

    def summary(self) -> Any:
        """One row per design: each collective's busbw, NCCL's choice and capex per GB/s of busbw, each step's time,
        time in network and capex per token/s (NaN where a part has no price)."""
        import pandas as pd

        columns: dict[str, Any] = {}
        for workload in self.workloads:
            rows = self.table[self.table["workload"] == workload].set_index("design")
            capex = self.hardware["capex USD"].reindex(rows.index)
            if rows["kind"].iloc[0] == "bench":
                columns[f"{workload}: busbw GB/s"] = rows["busbw_GBps"]
                columns[f"{workload}: algorithm"] = rows["algorithm"] + " " + rows["protocol"]
                columns[f"{workload}: USD per GB/s"] = capex / rows["busbw_GBps"]
            else:
                columns[f"{workload}: step s"] = rows["step_time_s"]
                columns[f"{workload}: in network s"] = rows["exposed_comm_s"]
                columns[f"{workload}: USD per token/s"] = capex / rows["tokens_per_s"]
        return pd.DataFrame(columns).loc[list(self.designs)]

    def format(self) -> str:
        """The report as text: hardware, the side-by-side table, and why each design ties or differs."""
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
            hardware = self.hardware.drop(columns="wiring").round(3).to_string()
            summary = self.summary().round(4).to_string()
        lines = [f"# fabricsim compare: {len(self.designs)} designs x {len(self.workloads)} workloads", "", hardware]
        lines += [f"{design}: {how}" for design, how in self.sized.items()]
        lines += [
            "capex and power: switches, NICs, optics and cables (no racks, installation or cooling); figures and "
            "their sources in topologies/prices.toml",
            "",
            summary,
            "",
        ]
        for workload in self.workloads:
            lines.append(f"{workload}:")
            lines += [f"  {line}" for line in explain(self, workload)]
        return "\n".join(lines) + "\n"


def load_designs(path: str | os.PathLike) -> dict:
    """A comparison file (see the module docstring) as a dict."""
    return load_grid(path)


def _scenarios(spec: Mapping[str, Any]) -> tuple[list[dict], tuple[str, ...], tuple[str, ...], str]:
    """(scenarios, designs, workloads, baseline) of a comparison spec."""
    shared = {k: v for k, v in spec.items() if k not in SPEC_FIELDS}
    designs, workloads = spec.get("designs"), spec.get("workloads")
    for name, value in (("designs", designs), ("workloads", workloads)):
        if not isinstance(value, Mapping) or not value or any(not isinstance(v, Mapping) for v in value.values()):
            raise checks.reject(name, value, f"a table of named tables ([{name}.NAME]), at least one")
    assert isinstance(designs, Mapping) and isinstance(workloads, Mapping)
    for name in MATCH_FIELDS:
        if name in _normal(shared):
            raise checks.reject(
                name, _normal(shared)[name], f"no value at the top level (a design's own {name} names another)"
            )
    fabric = set(FABRIC_DEFAULTS) | set(NETWORK_DEFAULTS) | {"system"}
    for table, named in (("designs", designs), ("workloads", workloads)):
        for name, fields in named.items():
            if "|" in name:
                raise checks.reject(f"{table}.{name}", name, "a name without '|' (it joins workload and design)")
            keys = {str(k).replace("-", "_"): k for k in fields}
            wrong = sorted(set(keys) - fabric - set(MATCH_FIELDS)) if table == "designs" else sorted(set(keys) & fabric)
            if wrong:
                key = keys[wrong[0]]
                if table == "designs":
                    expected = f"a fabric field ({', '.join(sorted(fabric))}) or {' or '.join(MATCH_FIELDS)}"
                else:
                    expected = "no fabric field (the designs set them; the shared fields set system and nodes)"
                raise checks.reject(f"{table}.{name}.{key}", fields[key], expected)
    baseline = spec.get("baseline", next(iter(designs)))
    if baseline not in designs:
        raise checks.reject("baseline", baseline, f"one of the designs: {', '.join(designs)}")
    scenarios = [
        {"name": f"{workload} | {design}"}
        | shared
        | {k: v for k, v in _normal(fields).items() if k not in MATCH_FIELDS}
        | dict(work)
        for workload, work in workloads.items()
        for design, fields in designs.items()
    ]
    return scenarios, tuple(designs), tuple(workloads), str(baseline)


def compare(spec: Mapping[str, Any] | str | os.PathLike | None = None, **sweep_options: Any) -> Comparison:
    """Run a comparison (a spec, a comparison file, or None for :data:`DEFAULT_DESIGNS`) as one sweep;
    ``sweep_options`` go to :func:`studies.sweep.sweep` (scheduler, workers, cache, progress, ...). A scenario
    that fails is an error row; a design whose every scenario failed is still listed, with its errors."""
    import pandas as pd

    from topologies.pricing import load_prices

    if spec is None or isinstance(spec, (str, os.PathLike)):
        path = Path(DEFAULT_DESIGNS if spec is None else spec)
        spec = load_designs(path)
        if isinstance(spec.get("prices"), str):  # a price file named in a comparison file is found beside it
            spec["prices"] = str(path.parent / spec["prices"])
    _scenarios(spec)  # checked before any design is sized or built
    prices = load_prices(spec.get("prices"))
    spec, sized = _sized(spec, prices)
    scenarios, designs, workloads, baseline = _scenarios(spec)
    hardware = []  # each design built first: one that cannot be built is refused before anything runs
    for design in designs:
        try:
            topology, cost, price = price_design(_fields(spec, design), prices)
        except ValueError as exc:
            raise ValueError(f"designs.{design}: {exc}") from None
        hardware.append(
            {
                "design": design,
                "switches": cost.switches,
                "switch ports per GPU": cost.switch_ports_per_gpu,
                "cables per GPU": cost.cables_per_gpu,
                "transceivers per GPU": cost.transceivers_per_gpu,
                # a total missing a part is no total: NaN, and the parts named
                "capex USD": math.nan if price.unpriced else price.capex_usd,
                "capex per GPU USD": math.nan if price.unpriced else price.capex_per_gpu_usd,
                "power kW": math.nan if price.unpowered else price.power_w / 1e3,
                "power per GPU W": math.nan if price.unpowered else price.power_per_gpu_w,
                "unpriced": ", ".join(price.unpriced),
                "unpowered": ", ".join(price.unpowered),
                "wiring": topology.description,
            }
        )
    table = sweep(scenarios, **sweep_options)
    parts = table["name"].str.split(" | ", n=1, regex=False)
    table["workload"], table["design"] = parts.str[0], parts.str[1]
    tiers = [c for c in ("fabric_1_bytes", "fabric_2_bytes", "fabric_3_bytes") if c in table]
    table["above_leaves_GB"] = table[tiers].sum(axis=1) / 1e9 if tiers else 0.0
    return Comparison(
        designs=designs,
        workloads=workloads,
        baseline=baseline,
        table=table,
        hardware=pd.DataFrame(hardware).set_index("design"),
        sized=sized,
    )


def _normal(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Fields with their names as settings spell them (dashes as underscores)."""
    return {str(k).replace("-", "_"): v for k, v in fields.items()}


def _fields(spec: Mapping[str, Any], design: str) -> dict[str, Any]:
    """A design's fabric settings: the step defaults, the spec's shared fields, then the design's own."""
    shared = {k: v for k, v in spec.items() if k not in SPEC_FIELDS}
    own = _normal(shared | dict(spec["designs"][design]))
    return STEP_DEFAULTS | {"nodes": FABRIC_DEFAULTS["nodes"]} | {k: v for k, v in own.items() if k not in MATCH_FIELDS}


def _family(where: str, fields: Mapping[str, Any]) -> str:
    """The sizing family (``sizing.FAMILIES``) of a design's fields: its topology, a fat-tree on several planes
    being the multi-plane family (other topologies have one plane)."""
    planes = checks.integer(f"{where}.planes", fields["planes"], low=1)
    if fields["topology"] == "fat-tree" and planes > 1:
        return "multi-plane"
    if planes > 1:
        raise checks.reject(f"{where}.planes", planes, f"1 for a {fields['topology']} sized to another design")
    return str(fields["topology"])


def _sized(spec: Mapping[str, Any], prices) -> tuple[dict, dict[str, str]]:
    """``spec`` with each design that names ``match_cost`` / ``match_power`` sized to that design, and a line
    per sized design saying how."""
    designs = dict(spec["designs"])
    sized: dict[str, str] = {}
    for design, table in spec["designs"].items():
        given = _normal(table)
        asked = [m for m in MATCH_FIELDS if m in given]
        if not asked:
            continue
        where = f"designs.{design}.{asked[0]}"
        if len(asked) > 1:
            raise checks.reject(where, given[asked[0]], f"one of {' or '.join(MATCH_FIELDS)}, not both")
        others = tuple(d for d in designs if d != design and not set(MATCH_FIELDS) & set(_normal(designs[d])))
        other = checks.choice(where, given[asked[0]], others)  # another design, not itself sized to another
        fields = _fields(spec, design)
        try:
            build_topology(_fields(spec, other))
        except ValueError as exc:
            raise ValueError(f"designs.{other}: {exc}") from None
        family = _family(f"designs.{design}", fields)
        try:
            sizing = match(
                _fields(spec, other),
                family,
                design=fields,
                by=asked[0][len("match_") :],
                prices=prices,
            )
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        own = {k: v for k, v in _normal(table).items() if k not in MATCH_FIELDS and k not in sizing.fields}
        designs[design] = own | sizing.fields
        shown = ", ".join(f"{k} {sizing.settings[k]:g}" for k in sizing.shown)
        sized[design] = (
            f"sized to the {sizing.by} of {other!r}: {shown} "
            f"({sizing.value / sizing.target:.1%} of its {'capex' if sizing.by == 'cost' else 'power'})"
        )
    return dict(spec) | {"designs": designs}, sized


def _tier_words(row: Mapping[str, Any]) -> str:
    """What a link tier is in a design's wiring (a dragonfly's fabric tiers are local and global links)."""
    tier = row["busiest_link_tier"]
    if "dragonfly" in str(row.get("topology_description", "")):
        words = {"fabric_1": "a local link inside a group", "fabric_2": "a global link between groups"}
    else:
        words = {"fabric_1": "a leaf uplink", "fabric_2": "an aggregation-core link"}
    words |= {"nic": "a NIC cable", "nvlink": "an NVLink", "pcie": "a PCIe link"}
    return words.get(tier, f"a {tier} link")


def explain(comparison: Comparison, workload: str) -> list[str]:
    """One sentence per design: its result for ``workload`` against the baseline's and the mechanism behind the
    difference or the tie (module docstring)."""
    rows = comparison.table[comparison.table["workload"] == workload].set_index("design")
    base = rows.loc[comparison.baseline]
    out = []
    for design in comparison.designs:
        r = rows.loc[design]
        if r["status"] != "ok" or base["status"] != "ok":
            out.append(f"{design}: no comparison ({r['error'] or base['error']})")
            continue
        if r["kind"] == "bench":
            change = r["busbw_GBps"] / base["busbw_GBps"] - 1
            choice = f"{r['algorithm']} {r['protocol']}"
            text = f"{r['busbw_GBps']:.0f} GB/s bus bandwidth ({change:+.1%}), NCCL's choice {choice}"
            if design != comparison.baseline and (r["algorithm"], r["protocol"]) != (
                base["algorithm"],
                base["protocol"],
            ):
                text += f" (the baseline's: {base['algorithm']} {base['protocol']})"
            if isinstance(r.get("busiest_link"), str) and r["busiest_link"]:  # empty when nothing moved
                text += (
                    f"; its busiest link is {_tier_words(r)} ({r['busiest_link']}), busy "
                    f"{r['busiest_link_share']:.0%} of the collective's time"
                )
            out.append(f"{design}: {text}")
            continue
        change = r["step_time_s"] / base["step_time_s"] - 1
        text = f"{r['step_time_s']:.3f} s ({change:+.2%}), {r['exposed_comm_s']:.3f} s in the network"
        if design == comparison.baseline:
            text += f"; {r['above_leaves_GB']:.0f} GB of its traffic climbs above the leaves"
        elif abs(change) < TIE and r["above_leaves_GB"] < 0.5:
            text += (
                ": a tie. No byte climbs above the leaves: every group stays under one leaf per rail (tensor groups "
                "inside a server, the others relayed to the rail NIC by PXN), so the upper tiers that tell the "
                "designs apart carry nothing"
            )
        elif abs(change) < TIE and r.get("approximate"):
            text += (
                f": a tie as simulated, with {r['above_leaves_GB']:.0f} GB above the leaves against "
                f"{base['above_leaves_GB']:.0f} GB; the step was reduced (one data-parallel replica for all), so "
                "contention between replicas on the upper tiers is not seen: run it with exact = true to tell"
            )
        elif abs(change) < TIE:
            text += (
                f": a tie. {r['above_leaves_GB']:.0f} GB climb above the leaves, yet no group's exposed time changes: "
                "that traffic (data-parallel buckets during the backward) is hidden behind compute"
            )
        else:
            moved = {
                g: r[f"{g}_exposed_s"] - base[f"{g}_exposed_s"]
                for g in GROUPS
                if f"{g}_exposed_s" in rows
                and not (math.isnan(r[f"{g}_exposed_s"]) or math.isnan(base[f"{g}_exposed_s"]))
            }
            more = r["exposed_comm_s"] - base["exposed_comm_s"]
            text += f": {more * 1e3:+.0f} ms in the network"
            if moved:
                worst = max(moved, key=lambda g: abs(moved[g]))
                text += (
                    f"; of the groups, {worst}'s exposed time moves most ({moved[worst] * 1e3:+.1f} ms; groups "
                    "overlap, so theirs do not add up to the step's)"
                )
            text += f", with {r['above_leaves_GB']:.0f} GB above the leaves against {base['above_leaves_GB']:.0f} GB"
        if r.get("approximate"):
            text += " [APPROXIMATE: a reduction that does not hold exactly here; the notes column says which]"
        out.append(f"{design}: {text}")
    return out
