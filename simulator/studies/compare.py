"""Fabric designs side by side: the same workloads on each design, as one sweep (``studies.sweep``), with what
each design is made of (``topologies.cost``) and, for every workload, why the designs tie or differ.

A comparison file (TOML; ``fabricsim compare`` without one runs the shipped ``designs/h100-4096.toml``) names
the fields every scenario shares at its top level (system, nodes), one table per design under ``designs``
(its fabric fields: topology, oversubscription, planes, dragonfly shape, routing, fabric, ...) and one per
workload under ``workloads`` (a bench scenario, one collective at one size, or a training step: the fields
of ``fabricsim step``). ``baseline`` names the design the others are measured against (default the first).

Why a design ties or differs, for a workload (:func:`explain`):

* a collective: its bus bandwidth against the baseline's, and NCCL's choice when it differs;
* a step within 0.2 % of the baseline, with no byte above the leaves: every group stayed under one leaf per
  rail (tensor groups inside a server, the others relayed to the rail NIC by PXN), so the upper tiers that
  tell the designs apart carry nothing;
* a step within 0.2 % with traffic above the leaves: that traffic is hidden behind compute (no group's
  exposed time changes);
* otherwise: the change of time in the network and the group whose exposed time moves most, with the bytes
  above the leaves on both designs.

What a design costs is given as hardware counts (switches, switch ports, cables and optical transceivers per
GPU); prices and power are not part of fabricsim yet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topologies import checks

from .scenario import FABRIC_DEFAULTS, NETWORK_DEFAULTS, STEP_DEFAULTS, build_topology
from .sweep import load_grid, sweep

__all__ = ("DEFAULT_DESIGNS", "Comparison", "compare", "explain", "load_designs")

DEFAULT_DESIGNS = Path(__file__).with_name("designs") / "h100-4096.toml"
TIE = 0.002  # a step within 0.2 % of the baseline's time ties with it
GROUPS = ("tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """A comparison's results: ``table`` (the sweep's rows, one per design and workload, with ``design`` and
    ``workload`` columns), ``hardware`` (one row per design) and the ``baseline`` design."""

    designs: tuple[str, ...]
    workloads: tuple[str, ...]
    baseline: str
    table: Any  # pandas DataFrame
    hardware: Any  # pandas DataFrame, index: design

    def summary(self) -> Any:
        """One row per design: each collective's busbw and NCCL's choice, each step's time and time in network."""
        import pandas as pd

        columns: dict[str, Any] = {}
        for workload in self.workloads:
            rows = self.table[self.table["workload"] == workload].set_index("design")
            if rows["kind"].iloc[0] == "bench":
                columns[f"{workload}: busbw GB/s"] = rows["busbw_GBps"]
                columns[f"{workload}: algorithm"] = rows["algorithm"] + " " + rows["protocol"]
            else:
                columns[f"{workload}: step s"] = rows["step_time_s"]
                columns[f"{workload}: in network s"] = rows["exposed_comm_s"]
        return pd.DataFrame(columns).loc[list(self.designs)]

    def format(self) -> str:
        """The report as text: hardware, the side-by-side table, and why each design ties or differs."""
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 50, "display.max_colwidth", 60):
            hardware = self.hardware.drop(columns="wiring").round(3).to_string()
            summary = self.summary().round(4).to_string()
        lines = [f"# fabricsim compare: {len(self.designs)} designs x {len(self.workloads)} workloads", "", hardware]
        lines += ["", summary, ""]
        for workload in self.workloads:
            lines.append(f"{workload}:")
            lines += [f"  {line}" for line in explain(self, workload)]
        return "\n".join(lines) + "\n"


def load_designs(path: str | os.PathLike) -> dict:
    """A comparison file (see the module docstring) as a dict."""
    return load_grid(path)


def _scenarios(spec: Mapping[str, Any]) -> tuple[list[dict], tuple[str, ...], tuple[str, ...], str]:
    """(scenarios, designs, workloads, baseline) of a comparison spec."""
    shared = {k: v for k, v in spec.items() if k not in ("designs", "workloads", "baseline")}
    designs, workloads = spec.get("designs"), spec.get("workloads")
    for name, value in (("designs", designs), ("workloads", workloads)):
        if not isinstance(value, Mapping) or not value or any(not isinstance(v, Mapping) for v in value.values()):
            raise checks.reject(name, value, f"a table of named tables ([{name}.NAME]), at least one")
    assert isinstance(designs, Mapping) and isinstance(workloads, Mapping)
    fabric = set(FABRIC_DEFAULTS) | set(NETWORK_DEFAULTS) | {"system"}
    for table, named in (("designs", designs), ("workloads", workloads)):
        for name, fields in named.items():
            if "|" in name:
                raise checks.reject(f"{table}.{name}", name, "a name without '|' (it joins workload and design)")
            keys = {str(k).replace("-", "_"): k for k in fields}
            wrong = sorted(set(keys) - fabric) if table == "designs" else sorted(set(keys) & fabric)
            if wrong:
                key = keys[wrong[0]]
                if table == "designs":
                    expected = f"a fabric field: {', '.join(sorted(fabric))}"
                else:
                    expected = "no fabric field (the designs set them; the shared fields set system and nodes)"
                raise checks.reject(f"{table}.{name}.{key}", fields[key], expected)
    baseline = spec.get("baseline", next(iter(designs)))
    if baseline not in designs:
        raise checks.reject("baseline", baseline, f"one of the designs: {', '.join(designs)}")
    scenarios = [
        {"name": f"{workload} | {design}"} | shared | dict(fields) | dict(work)
        for workload, work in workloads.items()
        for design, fields in designs.items()
    ]
    return scenarios, tuple(designs), tuple(workloads), str(baseline)


def compare(spec: Mapping[str, Any] | str | os.PathLike | None = None, **sweep_options: Any) -> Comparison:
    """Run a comparison (a spec, a comparison file, or None for :data:`DEFAULT_DESIGNS`) as one sweep;
    ``sweep_options`` go to :func:`studies.sweep.sweep` (scheduler, workers, cache, progress, ...). A scenario
    that fails is an error row; a design whose every scenario failed is still listed, with its errors."""
    import pandas as pd

    from topologies.cost import cost_summary

    if spec is None or isinstance(spec, (str, os.PathLike)):
        spec = load_designs(DEFAULT_DESIGNS if spec is None else spec)
    scenarios, designs, workloads, baseline = _scenarios(spec)
    hardware = []  # each design built first: one that cannot be built is refused before anything runs
    shared = {k: v for k, v in spec.items() if k not in ("designs", "workloads", "baseline")}
    for design in designs:
        fields = {str(k).replace("-", "_"): v for k, v in (shared | dict(spec["designs"][design])).items()}
        try:
            topology = build_topology(STEP_DEFAULTS | {"nodes": FABRIC_DEFAULTS["nodes"]} | fields)
        except ValueError as exc:
            raise ValueError(f"designs.{design}: {exc}") from None
        cost = cost_summary(topology)
        hardware.append(
            {
                "design": design,
                "switches": cost.switches,
                "switch ports per GPU": cost.switch_ports_per_gpu,
                "cables per GPU": cost.cables_per_gpu,
                "transceivers per GPU": cost.transceivers_per_gpu,
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
    )


def explain(comparison: Comparison, workload: str) -> list[str]:
    """One sentence per design: its result for ``workload`` against the baseline's and the mechanism behind the
    difference or the tie (module docstring)."""
    import math

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
        out.append(f"{design}: {text}")
    return out
