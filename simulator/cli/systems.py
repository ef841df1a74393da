"""``fabricsim systems``: the system presets, one line each."""

from __future__ import annotations

from topologies.presets import SYSTEMS


def add_parser(sub) -> None:
    sub.add_parser("systems", help="list system presets, one line each")


def run(args) -> str:
    return "".join(f"{name:<14} {preset.description}\n" for name, preset in SYSTEMS.items())
