"""SHARP aggregation trees mapped onto a fabric, and the per-simulation pool of SHARP resources.

Trees
-----
NCCL's CollNet opens one SHARP connection per communicator and NIC, i.e. per *rail* (NVIDIA HPC-X
docs, NCCL-RDMA-SHARP plugins section: one streaming aggregation flow per HCA rail), and each gets
its own streaming-aggregation (SAT) tree. For one rail of a group:

* the **leaves** are the switches its NICs are cabled to;
* the **ancestors** of a switch x are x and every switch reached from x by links to a strictly
  higher ``tier`` (the fabric-switch attribute of ``topologies/fat_tree.py``);
* the **root** is a common ancestor of all the leaves of the lowest tier holding one: the leaf
  itself when there is a single leaf, a spine on a leaf-spine, an aggregation switch for a group
  inside one fat-tree pod, a core switch for a group spanning pods;
* below the root every leaf joins, tier by tier, through a down-neighbour of its parent that is
  one of its ancestors, taking one already in the tree when there is one, so the leaves of one
  fat-tree pod meet at one aggregation switch before the core (one stream per pod up to the core).

Several candidates (roots, intermediate switches) are ranked by the trees they already hold, so
trees spread over the candidates (the aggregation manager's own placement policy is not
published), then by the seeded hash ``mix64(seed, SALT, *group, rail, switch)``; the first root
whose whole tree fits the resources below is taken. Everything is deterministic for a given seed
and order of requests.

Resources (``SwitchSpec`` fields, on the switch nodes' attributes)
------------------------------------------------------------------
Each (communicator, rail) is one SHARP job (the plugin calls ``sharp_coll_init`` with its own job
id per connection) holding one tree, locked at communicator init (``SHARP_COLL_LOCK_ON_COMM_INIT=1``),
so every switch of the tree counts one more tree and one more job, and every switch port the tree
uses (to a child, to the parent, to a NIC) one more tree on that port:

* ``held(s) + 1 <= sharp_max_trees(s)``: Quantum HDR holds one streaming tree per switch;
* ``held(s) + 1 <= sharp_max_jobs(s)``: the aggregation manager's quota, 33 SAT jobs per node;
* ``held(s, port) + 1 <= sharp_max_trees_per_port(s) x cables``: Quantum-2 holds one per port.

A communicator gets trees for all its rails or none: when a rail's tree does not fit under any
candidate root, its CollNet setup fails and NCCL runs the communicator without CollNet (ring,
tree, ...), which is what ``CollNetAlgorithm.supported`` then reports, naming the switch and the
limit. Allocations are made in the order communicators first ask (the workload's order) and are
never released (a communicator holds its trees for the whole simulation, as NCCL does).

Worked number: 4 servers with 2 NICs on a rail-optimised leaf-spine of radix-4 Quantum HDR switches
(2 servers per leaf): rail 0 of the 4 servers has leaves leaf0 and leaf1, whose common ancestors
of lowest tier are both spines: the tree is leaf0, leaf1 -> spine (3 switches, 1 tree each). A
second communicator on rail 0 of servers 0 and 2 needs leaf0 again, which holds its one tree
(sharp_max_trees = 1): it falls back.

What is ignored: low-latency (LLT) trees and operations (NCCL's CollNet streams large messages,
the plugin enables SAT), per-operation buffers (OSTs), releasing trees when a communicator is
destroyed, SHARP reservations (tenants), and switches that are not tiered (dragonfly routers are
not SHARP capable here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from topologies.routing import mix64
from topologies.topology import NodeKind, Topology

SHARP_SALT = 0x5348415250  # "SHARP": separates tree choices from other uses of the seed


@dataclass(frozen=True, slots=True, kw_only=True)
class SharpTree:
    """One rail's aggregation tree: ``leaves[m]`` is the switch NIC ``nics[m]`` is cabled to."""

    nics: tuple[int, ...]
    leaves: tuple[int, ...]
    root: int
    parent: Mapping[int, int]  # every switch of the tree except the root -> its parent

    @property
    def switches(self) -> tuple[int, ...]:
        return (self.root, *sorted(self.parent))

    def depth(self, switch: int) -> int:
        """Links from ``switch`` up to the root (0 for the root)."""
        d = 0
        while switch != self.root:
            switch = self.parent[switch]
            d += 1
        return d

    @property
    def height(self) -> int:
        return max((self.depth(s) for s in self.parent), default=0)

    def ports(self) -> list[tuple[int, int]]:
        """(switch, neighbour) of every switch port the tree uses: to each NIC, to each child and parent."""
        out = [(leaf, nic) for leaf, nic in zip(self.leaves, self.nics)]
        for child, up in sorted(self.parent.items()):
            out += [(child, up), (up, child)]
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class SharpAllocation:
    """A communicator's trees: ``trees[rail_tree[i]]`` serves rail ``i`` of the request."""

    trees: tuple[SharpTree, ...]
    rail_tree: tuple[int, ...]


class SharpPool:
    """SHARP trees, jobs and port use of every switch in one simulation (instance state only)."""

    def __init__(self, topology: Topology, *, failed_links: frozenset[int] = frozenset(), seed: int = 0) -> None:
        self.topology = topology
        self.seed = seed
        graph = topology.graph
        self._attrs = {n: graph.nodes[n] for n in graph.nodes if graph.nodes[n]["kind"] == NodeKind.FABRIC_SWITCH}
        self._cables: Counter = Counter()  # (switch, neighbour switch) -> surviving cables
        for link in range(topology.num_links):
            u, v = int(topology.link_src[link]), int(topology.link_dst[link])
            if u in self._attrs and v in self._attrs and link not in failed_links:
                self._cables[(u, v)] += 1
        self._up: dict[int, list[int]] = {}
        self._down: dict[int, list[int]] = {}
        for u, v in sorted(self._cables):  # a tree edge needs a cable alive both ways
            tu, tv = self._attrs[u].get("tier"), self._attrs[v].get("tier")
            if tu is not None and tv is not None and tv > tu and self._cables[(v, u)]:
                self._up.setdefault(u, []).append(v)
                self._down.setdefault(v, []).append(u)
        self._leaf = {nic: int(topology.link_dst[link]) for nic, link in topology.nic_leaf_link.items()}
        self._ancestors: dict[int, frozenset[int]] = {}
        self.held: Counter = Counter()  # switch -> trees (= jobs) it holds
        self.port_held: Counter = Counter()  # (switch, neighbour) -> trees on that port
        self._allocations: dict[tuple[int, ...], SharpAllocation | str] = {}

    # ---- queries -------------------------------------------------------------------------------
    def allocation(self, group: tuple[int, ...]) -> SharpAllocation | str | None:
        """What an earlier :meth:`allocate` gave ``group`` (None if it never asked)."""
        return self._allocations.get(group)

    # ---- allocation ----------------------------------------------------------------------------
    def allocate(self, group: tuple[int, ...], rails: Sequence[tuple[int, ...]]) -> SharpAllocation | str:
        """Trees for every rail of ``group`` (each rail: its NIC nodes in server order), or the
        reason none can be given. Asking again for the same group returns the first answer."""
        known = self._allocations.get(group)
        if known is not None:
            return known
        result = self._allocate(group, rails)
        self._allocations[group] = result
        return result

    def _allocate(self, group: tuple[int, ...], rails: Sequence[tuple[int, ...]]) -> SharpAllocation | str:
        held, ports = Counter(self.held), Counter(self.port_held)
        distinct = list(dict.fromkeys(tuple(nics) for nics in rails))
        trees = []
        for rail, nics in enumerate(distinct):
            missing = [nic for nic in nics if nic not in self._leaf]
            if missing:
                return f"NIC {self.topology.node_name(missing[0])} is not cabled to a fabric switch"
            leaves = tuple(self._leaf[nic] for nic in nics)
            roots = self._roots(sorted(set(leaves)))
            if isinstance(roots, str):
                return roots
            salt = mix64(self.seed, SHARP_SALT, *group, rail)
            first_reason = None
            for root in sorted(roots, key=lambda s: (held[s], mix64(salt, s))):
                parent = self._attach(root, sorted(set(leaves)), salt, held)
                tree = SharpTree(nics=tuple(nics), leaves=leaves, root=root, parent=MappingProxyType(parent))
                why = self._check(tree, held, ports)
                if why is None:
                    trees.append(tree)
                    for s in tree.switches:
                        held[s] += 1
                    for port in tree.ports():
                        ports[port] += 1
                    break
                first_reason = first_reason or why
            else:
                return (
                    f"SHARP resources exhausted ({first_reason}), so the communicator's CollNet setup "
                    f"fails on the rail of NIC {self.topology.node_name(nics[0])} and NCCL runs it without "
                    "CollNet"
                )
        self.held, self.port_held = held, ports
        index = {nics: i for i, nics in enumerate(distinct)}
        return SharpAllocation(trees=tuple(trees), rail_tree=tuple(index[tuple(n)] for n in rails))

    def _ancestors_of(self, switch: int) -> frozenset[int]:
        found = self._ancestors.get(switch)
        if found is None:
            seen, frontier = {switch}, [switch]
            while frontier:
                frontier = [v for u in frontier for v in self._up.get(u, ()) if v not in seen]
                seen.update(frontier)
            found = self._ancestors[switch] = frozenset(seen)
        return found

    def _roots(self, leaves: list[int]) -> list[int] | str:
        """Common ancestors of ``leaves`` of the lowest tier (or why there are none)."""
        untiered = [s for s in leaves if self._attrs[s].get("tier") is None]
        if untiered and len(leaves) > 1:
            return (
                f"switch {self.topology.node_name(untiered[0])} has no tier, so no SHARP aggregation "
                "tree can be built above it"
            )
        common = frozenset.intersection(*(self._ancestors_of(s) for s in leaves))
        if not common:
            names = ", ".join(self.topology.node_name(s) for s in leaves[:4])
            return f"the leaves {names} share no switch above them to aggregate at"
        lowest = min(self._attrs[s].get("tier", 0) for s in common)
        return sorted(s for s in common if self._attrs[s].get("tier", 0) == lowest)

    def _attach(self, root: int, leaves: list[int], salt: int, held: Counter) -> dict[int, int]:
        """parent map of the tree from ``root`` down to ``leaves`` (module docstring)."""
        parent: dict[int, int] = {}
        pending = [(root, leaves)]
        while pending:
            node, below = pending.pop()
            groups: dict[int, list[int]] = {}
            for leaf in below:
                if leaf == node:
                    continue
                options = [c for c in self._down.get(node, ()) if c in self._ancestors_of(leaf)]
                taken = [c for c in options if c in groups]
                pick = min(taken or options, key=lambda c: (held[c], mix64(salt, c)))
                groups.setdefault(pick, []).append(leaf)
            for child in sorted(groups):
                parent[child] = node
                pending.append((child, groups[child]))
        return parent

    def _check(self, tree: SharpTree, held: Counter, ports: Counter) -> str | None:
        """Why ``tree`` does not fit next to the trees already ``held`` (None when it fits)."""
        name = self.topology.node_name
        for s in tree.switches:
            attrs = self._attrs[s]
            if not attrs.get("sharp", False):
                return f"switch {name(s)} does not support SHARP in-network reduction"
            for field, what in (("sharp_max_trees", "aggregation tree"), ("sharp_max_jobs", "SHARP job")):
                limit = attrs.get(field)
                if limit is not None and held[s] + 1 > limit:
                    return f"switch {name(s)} already holds {held[s]} {what}(s); its {field} is {limit}"
        for s, other in tree.ports():
            per_port = self._attrs[s].get("sharp_max_trees_per_port")
            if per_port is None:
                continue
            cables = self._cables[(s, other)] if other in self._attrs else 1
            if ports[(s, other)] + 1 > per_port * cables:
                return (
                    f"the port of switch {name(s)} to {name(other)} already carries {ports[(s, other)]} "
                    f"aggregation tree(s); its sharp_max_trees_per_port is {per_port}"
                )
        return None
