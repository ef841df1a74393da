"""What the Routers of one topology share: wiring tables, kept by a :class:`RouteCache` passed in.

Cost, and what Routers share. With S fabric switches and E switch-to-switch links, the hop table
to one destination switch is a breadth-first search backwards from it, level by level over a CSR
of the links into each switch: O(S + E) numpy work, once per destination. Hierarchical tables are
Dijkstra, O(E log S). Next hops are derived once per (table, switch). Reachability of two switches
(the NIC choice, ``router.py``) is one comparison of connected-component labels when every surviving
switch link has its reverse (then reaching is being in one component), else a table lookup. These
depend on the topology and ``failed_links`` only, so every Router given one cache shares them (kept
while the topology lives, for its last 8 failure sets). Per Router: each GPU pair's server routes
and NIC switches are found once, and a pair whose NICs share a switch has one path for all its
flows; ``mix64``'s state after (seed, servers, local GPUs) is computed once per pair, so a flow's
hash is one more round and each hop one round. The load of the flows routed is added in one
``np.add.at`` when it is next read (same additions, same order: bit-identical to one per flow).
Worked number: 2,048 DGX H100 on a RoCE 400G fat-tree (16,384 GPUs) have S = 640 and E = 65,536.
The ring estimates of a Llama-3 405B step route 262,144 flows: 128 data-parallel rings of 128 GPUs
x 16 channels, over 16,384 GPU pairs. A 128-port edge switch takes one rail of d = 64 servers
(``fat_tree.py``), so a ring of 128 consecutive servers changes edge switch twice: 128 x 2 = 256
pairs, 4,096 flows, walk the fabric, towards 256 distinct edge switches: 256 searches in all; the
other 16,128 pairs reuse one array for their 16 flows.

Caches are objects, not module state: a :class:`RouteCache` holds the wiring of the topologies it has
seen (weakly keyed by the topology's graph, so an entry goes with its topology) and each wiring its
last ``FAILURE_SETS_KEPT`` failure sets. ``Router(topology, cache=...)`` takes one (default: a fresh,
empty one, so a lone Router shares nothing); code that builds several Routers for one topology (a
simulation rerouting around a failed link, a training step simulated at two micro-batch counts, a
sweep) passes them one cache. Results are identical warm or cold: the tables are pure functions of
the topology and the failed links.
"""

from __future__ import annotations

import heapq
import weakref
from collections import OrderedDict

import numpy as np

from ..topology import NodeKind, Topology

_Option = tuple[int, int]  # (link id, next switch)

#: Failure sets whose fabric tables are kept per topology (least recently used first out); a bound
#: on memory for failure sweeps, not a model parameter.
FAILURE_SETS_KEPT = 8


class _Table:
    """Costs to a target set (``dist``: switch -> hops or hierarchical cost, reachable switches
    only) and the next hops already derived from them (``hops``: switch -> options)."""

    __slots__ = ("dist", "hops", "minimal")

    def __init__(self, dist: dict[int, int], minimal: bool):
        self.dist = dist
        self.hops: dict[int, list[_Option]] = {}
        self.minimal = minimal


class Wiring:
    """What a Router derives from a topology alone: switches (ids, compact index, tier, group),
    switch-to-switch links, NIC cabling, GPU -> server tables; plus its :class:`_Fabric` per failure
    set. Read-only once built, except the lazily filled caches of the fabrics."""

    def __init__(self, topology: Topology):
        graph = topology.graph
        self.refs = self._refs(topology)
        self.num_nodes = graph.number_of_nodes()
        self.num_links = topology.num_links
        self.num_gpus = topology.num_gpus
        self.gpu_server: list[int] = topology.gpu_server.tolist()
        self.gpu_local: list[int] = topology.gpu_local.tolist()
        switches = sorted(n for n, kind in graph.nodes(data="kind") if kind == NodeKind.FABRIC_SWITCH)
        self.switches = switches
        self.index = {n: i for i, n in enumerate(switches)}  # switch -> compact index
        self.tier = {n: graph.nodes[n]["tier"] for n in switches if "tier" in graph.nodes[n]}
        group_of = {n: graph.nodes[n].get("group") for n in switches}
        self.group: dict[int, int] = {}
        self.groups: dict[int, tuple[int, ...]] = {}
        if switches and all(g is not None for g in group_of.values()):
            self.group = {n: int(g) for n, g in group_of.items()}
            for n in switches:
                self.groups.setdefault(self.group[n], ())
                self.groups[self.group[n]] += (n,)
        self.groups_sorted = sorted(self.groups.items())
        top = max(self.tier.values(), default=None)
        self.top = tuple(n for n in switches if top is None or self.tier.get(n) == top)
        src, dst = topology.link_src, topology.link_dst
        self.switch_ids = switch_ids = np.asarray(switches, dtype=np.int64)
        self.switch_links = np.flatnonzero(np.isin(src, switch_ids) & np.isin(dst, switch_ids))  # increasing
        self.switch_src = src[self.switch_links]
        self.switch_dst = dst[self.switch_links]
        self.switch_src_index = np.searchsorted(switch_ids, self.switch_src)
        self.switch_dst_index = np.searchsorted(switch_ids, self.switch_dst)
        self.switch_link_cost: np.ndarray | None = None
        if self.group:
            # hierarchical ("minimal") hop costs: 1 inside a group, 1 + B between groups (module docstring)
            between = len(switches) + 1
            group = np.asarray([self.group[n] for n in switches], dtype=np.int64)
            self.switch_link_cost = np.where(
                group[self.switch_src_index] == group[self.switch_dst_index], 1, 1 + between
            )
        # NIC cabling: the switch each NIC's uplink enters, and every link from that switch back to the NIC
        self.nic_leaf = {nic: int(dst[up]) for nic, up in topology.nic_leaf_link.items()}
        down = sorted(
            link for nic, leaf in self.nic_leaf.items() for link in graph.get_edge_data(leaf, nic, default={})
        )  # edge keys are link ids
        self.nic_down_links = np.asarray(down, dtype=np.int64)  # increasing link ids
        self.nic_down_nic = dst[self.nic_down_links]
        self.fabrics: OrderedDict[frozenset[int], _Fabric] = OrderedDict()
        self._ones: dict[int, np.ndarray] = {}

    def ones(self, length: int) -> np.ndarray:
        """A read-only array of ``length`` ones (unit weights of an unsplit path), shared: a new array per
        flow would double the time of ``weighted_paths`` over flows inside servers under ``spray``."""
        ones = self._ones.get(length)
        if ones is None:
            ones = self._ones[length] = np.ones(length)
            ones.setflags(write=False)
        return ones

    @staticmethod
    def _refs(topology: Topology) -> tuple[object, ...]:
        """The topology's arrays and tables the wiring is derived from (compared by identity)."""
        return (
            topology.link_src,
            topology.link_dst,
            topology.nic_leaf_link,
            topology.servers,
            topology.gpu_server,
            topology.gpu_local,
        )

    def matches(self, topology: Topology) -> bool:
        return (
            all(a is b for a, b in zip(self.refs, self._refs(topology)))
            and self.num_nodes == topology.graph.number_of_nodes()
        )

    def fabric(self, failed: frozenset[int]) -> _Fabric:
        fabric = self.fabrics.get(failed)
        if fabric is None:
            fabric = _Fabric(self, failed)
            self.fabrics[failed] = fabric
            while len(self.fabrics) > FAILURE_SETS_KEPT:
                self.fabrics.popitem(last=False)
        else:
            self.fabrics.move_to_end(failed)
        return fabric


class _Fabric:
    """The surviving switch graph of a topology under one set of failed links: adjacency lists,
    receiving NIC links, hierarchical link costs, connected components (when every surviving
    switch link has its reverse, reachability is "same component"), and caches of distance tables
    and sprayed splits, filled on demand (pure functions of the above)."""

    def __init__(self, wiring: Wiring, failed: frozenset[int]):
        dead = np.zeros(wiring.num_links, dtype=bool)
        if failed:
            dead[np.fromiter(failed, dtype=np.int64, count=len(failed))] = True
        alive = ~dead[wiring.switch_links]
        links = wiring.switch_links[alive]
        src, dst = wiring.switch_src[alive], wiring.switch_dst[alive]
        self.src_index = wiring.switch_src_index[alive]
        self.dst_index = wiring.switch_dst_index[alive]
        self.num_switches = len(wiring.switches)
        self.switch_ids = wiring.switch_ids
        self.index = wiring.index
        self.links, self.src, self.dst = links, src, dst
        self.switch_out = self._adjacency(links, src, dst)  # switch -> [(link, next switch)], increasing link
        self._switch_back: dict[int, list[_Option]] | None = None
        # links into each switch (compact indices), for the breadth-first searches: CSR by head
        order = np.argsort(self.dst_index, kind="stable")
        self.in_tail = self.src_index[order]
        self.in_start = np.zeros(self.num_switches + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.dst_index, minlength=self.num_switches), out=self.in_start[1:])
        self.link_cost: dict[int, int] = {}
        if wiring.switch_link_cost is not None:
            self.link_cost = dict(zip(links.tolist(), wiring.switch_link_cost[alive].tolist()))
        down_alive = ~dead[wiring.nic_down_links]
        nic, first = np.unique(wiring.nic_down_nic[down_alive], return_index=True)
        self.nic_down = dict(zip(nic.tolist(), wiring.nic_down_links[down_alive][first].tolist()))
        self.labels = self._components()
        self.tables: dict[tuple[bool, tuple[int, ...]], _Table] = {}
        self.sprays: dict[tuple[int, int], tuple[tuple[int, ...], tuple[float, ...]]] = {}

    @staticmethod
    def _adjacency(links: np.ndarray, key: np.ndarray, other: np.ndarray) -> dict[int, list[_Option]]:
        order = np.argsort(key, kind="stable")  # keeps increasing link ids per switch
        keys = key[order]
        nodes, starts = np.unique(keys, return_index=True)
        options = list(zip(links[order].tolist(), other[order].tolist()))
        bounds = starts.tolist() + [len(options)]
        return {n: options[b0:b1] for n, b0, b1 in zip(nodes.tolist(), bounds, bounds[1:])}

    def _components(self) -> dict[int, int] | None:
        """Switch -> component label when every surviving switch link has its reverse (then a
        switch reaches another exactly when both have one label), else None."""
        n, u, v = self.num_switches, self.src_index, self.dst_index
        if not np.isin(v * n + u, u * n + v).all():
            return None
        label = np.arange(n)
        while True:  # minimum-label propagation
            following = label.copy()
            np.minimum.at(following, v, label[u])
            if np.array_equal(following, label):
                break
            label = following
        return dict(zip(self.switch_ids.tolist(), label.tolist()))

    def hops_to(self, targets: tuple[int, ...]) -> dict[int, int]:
        """Hop count from every switch that can reach one of ``targets`` to the nearest of them
        (level-synchronous breadth-first search backwards over the surviving switch links)."""
        n = self.num_switches
        dist = np.full(n, -1, dtype=np.int64)
        frontier = np.unique(np.asarray([self.index[t] for t in targets if t in self.index], dtype=np.int64))
        dist[frontier] = 0
        start, tail = self.in_start, self.in_tail
        level = 0
        while frontier.size:
            first, count = start[frontier], start[frontier + 1] - start[frontier]
            ends = np.cumsum(count)
            edges = np.repeat(first - ends + count, count) + np.arange(ends[-1])  # every link into the frontier
            fresh = np.zeros(n, dtype=bool)
            fresh[tail[edges]] = True
            fresh &= dist < 0
            frontier = np.flatnonzero(fresh)
            level += 1
            dist[frontier] = level
        found = np.flatnonzero(dist >= 0)
        out = {t: 0 for t in targets}
        out.update(zip(self.switch_ids[found].tolist(), dist[found].tolist()))
        return out

    def costs_to(self, targets: tuple[int, ...]) -> dict[int, int]:
        """Hierarchical cost from every switch that can reach one of ``targets`` (Dijkstra)."""
        if self._switch_back is None:  # switch -> [(link, previous switch)]
            self._switch_back = self._adjacency(self.links, self.dst, self.src)
        back = self._switch_back
        dist = {t: 0 for t in targets}
        heap = [(0, t) for t in sorted(targets)]
        done: set[int] = set()
        while heap:
            d, v = heapq.heappop(heap)
            if v in done:
                continue
            done.add(v)
            for link, u in back.get(v, ()):
                du = d + self.link_cost[link]
                if du < dist.get(u, du + 1):
                    dist[u] = du
                    heapq.heappush(heap, (du, u))
        return dist


class RouteCache:
    """Route tables derived from topologies alone (their :class:`Wiring`), shared by the Routers
    given this cache. A :class:`~topologies.topology.Topology` (frozen, slotted, holding arrays) can
    be neither hashed nor weakly referenced; its graph can: entries are weakly keyed by it and check
    the topology's arrays by identity (``with_link_scale`` copies share them, and their wiring)."""

    __slots__ = ("_wirings",)

    def __init__(self) -> None:
        self._wirings: weakref.WeakKeyDictionary[object, Wiring] = weakref.WeakKeyDictionary()

    def wiring(self, topology: Topology) -> Wiring:
        """The wiring of ``topology``: built at the first request, then the same object."""
        wiring = self._wirings.get(topology.graph)
        if wiring is None or not wiring.matches(topology):
            wiring = Wiring(topology)
            self._wirings[topology.graph] = wiring
        return wiring

    def __len__(self) -> int:
        """Number of topologies (graphs) whose wiring is kept."""
        return len(self._wirings)
