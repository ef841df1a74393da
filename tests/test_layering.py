"""The layering rules of the design, checked by reading every module's imports (ast).

* topologies imports stdlib, numpy, networkx; workloads imports stdlib, numpy; neither imports
  simulator, topologies never imports workloads, and workloads imports of topologies only the one
  validation helper, topologies.checks (itself stdlib only, importing nothing of fabricsim).
* simpy only in simulator/engine/; numba only in simulator/kernels/, which only
  simulator/network/ imports; matplotlib only in simulator/plotting.py.
* simulator/collectives/ never imports simulator/network/ or simulator/engine/ (the rate model the
  algorithms' estimates share with the analytical network is simulator/rates.py, and the connection
  rules simulator/flows.py, both outside them).
* simulator/engine/ imports neither simulator.collectives nor topologies.routing: it receives routed
  arrays (simulator.flows.NetworkFlows) and a reroute callback; simulator/flows.py (which routes) never
  imports simulator.collectives; simulator/api.py wires them.
* simulator's core (everything but studies/, validation/ and cli/) never imports studies, validation or the
  CLI; studies never import validation or the CLI; validation never imports the CLI.
* nothing imports the verification oracle (simulator.verify) but the tests.

Also the style rule every module and test keeps: lines of at most 120 characters.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topologies", "workloads", "simulator")
STDLIB = set(sys.stdlib_module_names)


def modules():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def imports_of(path: Path) -> set[str]:
    return imports_in(path.read_text(), path.relative_to(ROOT))


def imports_in(source: str, rel: Path) -> set[str]:
    """Absolute dotted names a module imports (relative imports resolved against its package)."""
    tree = ast.parse(source)
    package_parts = list(rel.parts[:-1])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    names.update(f"{module}.{alias.name}" for alias in node.names)
                else:
                    names.add(module)
            else:
                names.add(node.module)
    return names


def top(name: str) -> str:
    return name.split(".")[0]


def area(path: Path) -> str:
    return "/".join(path.relative_to(ROOT).parts)


ALL = [(area(p), imports_of(p)) for p in modules()]


def test_modules_found():
    # the three packages exist and each has modules; a silent empty scan would pass everything
    assert {a.split("/")[0] for a, _ in ALL} == set(PACKAGES)


@pytest.mark.parametrize("where,names", ALL, ids=[a for a, _ in ALL])
def test_layering(where, names):
    roots = {top(n) for n in names}
    third_party = roots - STDLIB - set(PACKAGES) - {"__future__"}
    if where.startswith("topologies/"):
        assert third_party <= {"numpy", "networkx"}, third_party
        assert not roots & {"workloads", "simulator"}
    if where.startswith("workloads/"):
        assert third_party <= {"numpy"}, third_party
        assert "simulator" not in roots
        assert {n for n in names if top(n) == "topologies"} <= {"topologies.checks"}, names
    if where == "topologies/checks.py":
        assert roots <= STDLIB | {"__future__"}, roots
    if "simpy" in roots:
        assert where.startswith("simulator/engine/"), f"{where} imports simpy"
    if "numba" in roots:
        assert where.startswith("simulator/kernels/"), f"{where} imports numba"
    if "matplotlib" in roots:
        assert where == "simulator/plotting.py", f"{where} imports matplotlib"
    if any(n.startswith("simulator.kernels") for n in names):
        assert where.startswith(("simulator/network/", "simulator/kernels/")), f"{where} imports the kernels"
    if where.startswith("simulator/collectives/"):
        assert not any(n.startswith(("simulator.network", "simulator.engine")) for n in names), where
    if where.startswith("simulator/engine/"):
        routing = sorted(n for n in names if n.startswith(("simulator.collectives", "topologies.routing")))
        assert not routing, f"{where} imports {routing}: the engine gets routed arrays, not algorithms or a router"
    if where == "simulator/flows.py":
        assert not any(n.startswith("simulator.collectives") for n in names), where
    if where.startswith("simulator/") and layer(where) is not None:
        above = LAYERS[LAYERS.index(layer(where)) + 1 :]
        upward = sorted(n for n in names if n.startswith(tuple(f"simulator.{a}" for a in above)))
        assert not upward, f"{where} ({layer(where)}) imports a layer above it: {upward}"
    if where != "simulator/verify.py":
        assert "simulator.verify" not in names, f"{where} imports the verification oracle"


# simulator's layers, lowest first: each may import those before it, never those after it
LAYERS = ("core", "studies", "validation", "cli")


def layer(where: str) -> str | None:
    """The layer of a simulator module (``simulator/x.py`` and its subpackages other than the three
    upper layers are the core)."""
    parts = where.split("/")
    if parts[0] != "simulator":
        return None
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS[1:] else "core"


def test_layer_of_a_module():
    assert [
        layer(w)
        for w in (
            "simulator/api.py",
            "simulator/engine/replay.py",
            "simulator/studies/jobs.py",
            "simulator/validation/sc21.py",
            "simulator/cli/step.py",
            "workloads/tasks.py",
        )
    ] == ["core", "core", "studies", "validation", "cli", None]


def test_import_reader_resolves_relative_imports():
    # a collectives module doing `from ..network import flow` imports simulator.network: caught
    names = imports_in(
        "from ..network import flow\nfrom . import ring\nimport simpy\n", Path("simulator/collectives/probe.py")
    )
    assert {"simulator.network", "simulator.collectives.ring", "simpy"} <= names
    # an engine module importing the router or an algorithm is caught
    names = imports_in(
        "from topologies.routing import Router\nfrom ..collectives.base import edge_path\n",
        Path("simulator/engine/probe.py"),
    )
    assert {"topologies.routing", "simulator.collectives.base"} <= names


MAX_LINE = 120  # README.md, Layout: lines of at most 120 characters


def test_python_lines_are_at_most_120_characters():
    paths = [*modules(), *sorted((ROOT / "tests").rglob("*.py"))]
    long = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in paths
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if len(line) > MAX_LINE
    ]
    assert paths and not long, f"lines over {MAX_LINE} characters: {', '.join(long)}"
