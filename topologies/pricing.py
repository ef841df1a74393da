"""What a fabric costs and draws: its parts (``cost.cost_summary``) priced and powered from a price book.

A price book (:func:`load_prices`) gives, per part, a price in USD and a power in W, each with its public source
and kind (``topologies/prices.toml``: vendor datasheets for power, reseller and analyst figures for prices,
estimates named as such). A user's TOML file in the same layout overrides it figure by figure; a figure given
without a source is sourced to that file. Parts:

* ``[switch.NAME]``: a switch system by switch preset name (``devices.SWITCH_PRESETS``): ``usd``, ``watts``
  (typical, passive cables: optics are counted apart).
* ``[nic.NAME]``: a NIC card by NIC preset name, one per NIC on the fabric.
* ``[optic.GBPS]``: one end of an optical cable at a port of that line rate (its transceiver, or its share of a
  twin-port module, and half the fibre): ``usd``, ``switch_watts`` at a switch port, ``nic_watts`` at a NIC.
* ``[copper.GBPS]``: a passive copper cable (both ends): ``usd``, ``watts``.

:func:`fabric_price` prices a ``FabricCost``. A part the book does not price (or power) is listed as such in
``unpriced`` (``unpowered``) and left out of the totals, never counted as free; the text report names it.

Worked number: 4 DGX H100 on a rail-optimised Quantum-2 leaf-spine (``cost`` module docstring: 12 switches,
32 NICs, 64 optical cables of which 32 end at a NIC): 12 x $36,000 + 32 x $1,599 + 128 ends x $640 =
$565,088; power 12 x 747 + 32 x 24.9 + 96 x 8.5 + 32 x 9 = 8,964 + 796.8 + 816 + 288 = 10,864.8 W.

>>> from topologies.cost import cost_summary
>>> from topologies.presets import build_system
>>> price = fabric_price(cost_summary(build_system("dgx-h100", nodes=4)))
>>> price.capex_usd, round(price.power_w, 1), price.unpriced
(565088.0, 10864.8, ())
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from . import checks
from .cost import FabricCost
from .devices import NIC_PRESETS, SWITCH_PRESETS

__all__ = ("DEFAULT_PRICES", "PriceBook", "PriceLine", "FabricPrice", "load_prices", "fabric_price")

DEFAULT_PRICES = Path(__file__).with_name("prices.toml")
KINDS = ("vendor", "reseller", "analyst", "estimate")  # what a shipped source says it is, before its colon

# the figures each section's entries may give (each with an optional "<figure>_source")
_FIGURES = {
    "switch": ("usd", "watts"),
    "nic": ("usd", "watts"),
    "optic": ("usd", "switch_watts", "nic_watts"),
    "copper": ("usd", "watts"),
}


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Figures per part: ``entries[section][key][figure] = (value, source)``; see the module docstring."""

    entries: Mapping[str, Mapping[str, Mapping[str, tuple[float, str]]]]

    def figure(self, section: str, key: str, figure: str) -> tuple[float, str] | None:
        """(value, source) of one figure, or None when the book does not give it."""
        return self.entries.get(section, {}).get(key, {}).get(figure)


def _parse(data: Mapping[str, Any], origin: str) -> dict[str, dict[str, dict[str, tuple[float, str]]]]:
    """A price file's tables as ``entries`` (see PriceBook), checked: one clear line on the first wrong field."""
    out: dict[str, dict[str, dict[str, tuple[float, str]]]] = {}
    for section, table in data.items():
        if section not in _FIGURES:
            raise checks.reject(f"prices.{section}", section, f"a section of {', '.join(_FIGURES)}")
        if not isinstance(table, Mapping):
            raise checks.reject(f"prices.{section}", table, "a table of parts ([section.NAME])")
        for key, fields in table.items():
            where = f"prices.{section}.{key}"
            key = str(key)
            if section in ("optic", "copper"):
                if not (key.isascii() and key.isdigit()) or key != str(int(key)):
                    raise checks.reject(where, key, "a port line rate in Gb/s, e.g. [optic.400]")
            else:
                presets = SWITCH_PRESETS if section == "switch" else NIC_PRESETS
                checks.choice(where, key, tuple(presets))
            if not isinstance(fields, Mapping):
                raise checks.reject(where, fields, "a table of figures")
            allowed = set(_FIGURES[section]) | {f"{f}_source" for f in _FIGURES[section]}
            for name in fields:
                if name not in allowed:
                    raise checks.reject(f"{where}.{name}", fields[name], f"one of {', '.join(sorted(allowed))}")
            entry = {}
            for figure in _FIGURES[section]:
                if figure in fields:
                    value = checks.finite(f"{where}.{figure}", fields[figure], low=0.0, expected="a number >= 0")
                    source = fields.get(f"{figure}_source", f"user: {origin}")
                    if not isinstance(source, str) or not source.strip():
                        raise checks.reject(f"{where}.{figure}_source", source, "a non-empty string")
                    entry[figure] = (float(value), source)
            out.setdefault(section, {})[key] = entry
    return out


@cache
def _defaults() -> dict[str, dict[str, dict[str, tuple[float, str]]]]:
    with DEFAULT_PRICES.open("rb") as f:
        return _parse(tomllib.load(f), DEFAULT_PRICES.name)


def load_prices(path: str | os.PathLike | None = None) -> PriceBook:
    """The shipped price book, with the figures of the TOML file at ``path`` (if any) replacing its own."""
    entries = {section: {k: dict(v) for k, v in table.items()} for section, table in _defaults().items()}
    if path is not None:
        path = checks.readable_file("prices", path)
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"prices: {str(path)!r} is not valid TOML ({exc})") from None
        for section, table in _parse(data, path.name).items():
            for key, figures in table.items():
                entries.setdefault(section, {}).setdefault(key, {}).update(figures)
    return PriceBook(entries)


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceLine:
    """One kind of part in a fabric: how many, at what unit price and power (None: not in the book)."""

    part: str
    count: int
    unit_usd: float | None
    unit_watts: float | None
    usd_source: str
    watts_source: str

    @property
    def usd(self) -> float | None:
        return None if self.unit_usd is None else self.count * self.unit_usd

    @property
    def watts(self) -> float | None:
        return None if self.unit_watts is None else self.count * self.unit_watts


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricPrice:
    """A fabric's capex and power, per part and in total (priced parts only; see ``unpriced``/``unpowered``)."""

    name: str
    gpus: int
    lines: tuple[PriceLine, ...]

    @property
    def capex_usd(self) -> float:
        return math.fsum(line.usd for line in self.lines if line.usd is not None)

    @property
    def power_w(self) -> float:
        return math.fsum(line.watts for line in self.lines if line.watts is not None)

    @property
    def unpriced(self) -> tuple[str, ...]:
        """Parts the book gives no price for (left out of ``capex_usd``)."""
        return tuple(line.part for line in self.lines if line.unit_usd is None)

    @property
    def unpowered(self) -> tuple[str, ...]:
        """Parts the book gives no power for (left out of ``power_w``)."""
        return tuple(line.part for line in self.lines if line.unit_watts is None)

    @property
    def capex_per_gpu_usd(self) -> float:
        return self.capex_usd / self.gpus

    @property
    def power_per_gpu_w(self) -> float:
        return self.power_w / self.gpus

    def sources(self) -> list[str]:
        """Each distinct source the priced and powered figures come from."""
        seen: dict[str, None] = {}
        for line in self.lines:
            for unit, source in ((line.unit_usd, line.usd_source), (line.unit_watts, line.watts_source)):
                if unit is not None:
                    seen.setdefault(source)
        return list(seen)

    def format(self) -> str:
        """A text table: parts, counts, unit and total price and power, totals, per GPU, what is not counted."""

        def money(value: float | None) -> str:
            return "?" if value is None else f"{value:,.0f}"

        def power(value: float | None, digits: int) -> str:
            return "?" if value is None else f"{value:,.{digits}f}"

        lines = [
            f"fabric capex and power: {self.name}",
            f"{'part':<34}{'count':>8}{'USD each':>12}{'USD':>15}{'W each':>9}{'kW':>10}",
        ]
        for line in self.lines:
            kw = None if line.watts is None else line.watts / 1e3
            lines.append(
                f"{line.part:<34}{line.count:>8}{money(line.unit_usd):>12}{money(line.usd):>15}"
                f"{power(line.unit_watts, 1):>9}{power(kw, 1):>10}"
            )
        lines.append(f"{'total':<34}{'':>20}{money(self.capex_usd):>15}{'':>9}{self.power_w / 1e3:>10,.1f}")
        lines.append(
            f"per GPU: {money(self.capex_per_gpu_usd)} USD, {self.power_per_gpu_w:.1f} W "
            "(switches, NICs, optics and cables; no racks, installation or cooling)"
        )
        if self.unpriced:
            lines.append(f"not priced (left out of the total; give them with --prices): {', '.join(self.unpriced)}")
        if self.unpowered:
            lines.append(f"no power figure (left out of the total): {', '.join(self.unpowered)}")
        kinds = sorted({s.split(":", 1)[0] if s.split(":", 1)[0] in KINDS else "user" for s in self.sources()})
        lines.append(f"figures: {', '.join(kinds)} (each with its source in the price book; fabric_price().lines)")
        return "\n".join(lines)


def _line(book: PriceBook, part: str, count: int, section: str, key: str, usd: str, watts: str) -> PriceLine:
    price, power = book.figure(section, key, usd), book.figure(section, key, watts)
    return PriceLine(
        part=part,
        count=count,
        unit_usd=None if price is None else price[0],
        unit_watts=None if power is None else power[0],
        usd_source="" if price is None else price[1],
        watts_source="" if power is None else power[1],
    )


def fabric_price(cost: FabricCost, prices: PriceBook | None = None) -> FabricPrice:
    """``cost``'s parts priced and powered from ``prices`` (default: the shipped book, :func:`load_prices`)."""
    checks.instance("fabric_price.cost", cost, FabricCost, "a FabricCost (topologies.cost.cost_summary)")
    if prices is not None:
        checks.instance("fabric_price.prices", prices, PriceBook, "a PriceBook (topologies.pricing.load_prices)")
    book = load_prices() if prices is None else prices
    lines = [_line(book, f"switch {model}", n, "switch", model, "usd", "watts") for model, n in cost.switch_models]
    lines += [_line(book, f"NIC {model}", n, "nic", model, "usd", "watts") for model, n in cost.nic_models]
    optics: dict[tuple[str, str], int] = {}  # (rate, "switch" | "nic") -> optical cable ends
    copper: dict[str, int] = {}  # rate -> copper cables
    for tier in cost.link_tiers:
        rate = "?" if tier.rate_gbps is None else str(tier.rate_gbps)
        if tier.media == "optical":
            optics[(rate, "switch")] = optics.get((rate, "switch"), 0) + 2 * tier.cables - tier.nic_ends
            optics[(rate, "nic")] = optics.get((rate, "nic"), 0) + tier.nic_ends
        else:
            copper[rate] = copper.get(rate, 0) + tier.cables
    for (rate, end), n in sorted(optics.items()):
        if n:
            part = f"optic {rate}G at a {'switch port' if end == 'switch' else 'NIC'}"
            lines.append(_line(book, part, n, "optic", rate, "usd", f"{end}_watts"))
    lines += [_line(book, f"copper cable {rate}G", n, "copper", rate, "usd", "watts") for rate, n in copper.items()]
    return FabricPrice(name=cost.name, gpus=cost.gpus, lines=tuple(lines))
