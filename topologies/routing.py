"""Routing: GPU-to-GPU paths as int64 arrays of link ids, under several routing policies.

A path is built in three parts:

1. inside the source server, from the GPU to the NIC that will send (``ServerInfo`` routes);
   with PXN (NCCL's default since 2.12) a GPU sends through the NIC on the *destination's rail*,
   reaching it over NVLink via the GPU local to that NIC, so rail-optimised fabrics keep
   same-rail traffic under one leaf;
2. across the fabric, from the sending NIC's switch to the receiving NIC's switch, as the
   routing policy decides (below);
3. inside the destination server, from the receiving NIC to the GPU (``ServerInfo`` routes: GPUDirect
   RDMA, or through host memory on a server without it).

GPUs of the same server use the server's intra routes (NVSwitch, PCIe P2P or host staging).

Partitioned fabrics (rail-only, multi-plane) and NIC choice: when the preferred sending NIC's
switch cannot reach the receiving NIC's switch, the sender relays inside its server (NVLink when
it has an NVSwitch, else PCIe) to another of its NICs that can, as NCCL's PXN does, trying in
order: the preferred NIC (``nic_for``), the NIC on the destination GPU's rail, the GPU's own NIC,
then the others by index. The receiver uses its own NIC unless no sending NIC reaches it (or its
cable failed); then its server's other NICs by index. When no pair works the error names both
GPUs.

Policies (``ROUTING_POLICIES``) for part 2. ``flow_hash = mix64(seed, src server, src local GPU,
dst server, dst local GPU, flow_key)`` identifies a flow (switches hash the 5-tuple; different QPs
of one connection have different ``flow_key``); ``dist(x)`` is the hop count from switch x to the
destination switch in the surviving switch graph; the *next hops* at switch x are its links to
switches y with ``dist(y) = dist(x) - 1`` (parallel cables count separately).

* ``ecmp`` (default): at each switch x take next hop number ``mix64(flow_hash, x) mod n`` of its n
  next hops. Paths have the fewest hops, as a min-hop subnet manager's tables give; on a
  dragonfly that includes global, global paths through a third group where they are shorter
  than local, global, local.
* ``minimal``: the same hash choice over *hierarchically* minimal paths: on a fabric whose
  switches carry a ``group`` attribute (``dragonfly.py``) the fewest links between groups, then
  the fewest hops (MIN of Kim et al.: local, global, local, at most 3 hops, one global), i.e. hop
  costs 1 for a link inside a group and ``1 + B`` for one between groups, with ``B`` = number of
  switches + 1 (more than any simple path's hops, so the order is lexicographic). Without groups
  it is ``ecmp``. It is the minimal candidate of UGAL and the metric of Valiant's two legs.
* ``valiant`` (Valiant and Brebner 1981; on dragonfly as in Kim et al., ISCA 2008): minimal (as
  above) to an intermediate, then minimal to the destination. On a fabric whose switches all carry
  a ``group`` attribute (``dragonfly.py``) the intermediate is a group other than the source's and
  the destination's, number ``mix64(flow_hash, VALIANT_SALT) mod n`` of the n eligible groups in
  increasing order, entered at its nearest router: at most local, global, local, global, local =
  5 switch-to-switch hops. Elsewhere it is a switch of the top tier (largest ``tier`` attribute;
  every switch when none has one) other than the two end switches. When the hashed candidate
  cannot reach both ends (failed links) the next one in order is taken; with no candidate the
  route is minimal.
* ``ugal`` (UGAL with the load the router itself has assigned, after Kim et al.): per flow, the
  minimal path M or the Valiant path V, whichever has the smaller ``H(P) x q(P)``, ties to M,
  where ``H`` = number of switch-to-switch links and
  ``q(P) = max over links l of P of (L_l + n_l w) / c_l``: ``L_l`` bytes already assigned to link l,
  ``w`` this flow's bytes (``nbytes``), ``n_l`` how often P crosses l, ``c_l`` its capacity: the
  time the busiest link of P needs to carry what it has been given plus this flow.
  Worked number: links of capacity c, w = 1: on an empty fabric M (3 hops) costs 3 x 1/c and V
  (5 hops) 5 x 1/c, so M; once one flow is on M, M costs 3 x 2/c = 6/c > 5/c and the next flow
  of the pair takes a V that is still empty.
* ``adaptive`` (InfiniBand adaptive routing): at each switch, among its next hops, the link with
  the least ``L_l / c_l`` so far; ties by the ECMP hash. Deterministic for a given order of calls.
* ``spray`` (packet spraying): the flow splits evenly over all next hops (fewest hops, as ECMP's)
  at every switch, so a switch carrying fraction f of the flow sends f / n over each of its n.
  ``weighted_path`` returns every link with the fraction of the flow's bytes crossing it (1 on the
  parts inside the servers and the NIC cables); the weights leaving each distance level sum to 1
  and each switch forwards what it receives. ``weighted_path`` works under every policy (weights
  1 elsewhere). Under ``spray``, ``path()`` returns the flow's ECMP path, one of those it sprays
  over (same hop count), for callers that need a single walk (latency, the tuner's estimates);
  it assigns no load: the bytes move as ``weighted_path`` says.

Load (``assigned_bytes``): every distinct flow (source GPU, destination GPU, ``flow_key``,
``pxn``) is routed once, at its first request, and pinned (a QP's route stays put while it lives);
its ``nbytes`` (default 1, i.e. counting flows) times its link weights are then added to the
per-link counter that ``adaptive`` and ``ugal`` read. Later requests for the same flow return the
pinned path and add nothing. ``reset_load()`` forgets counters and pins.

Failures: ``failed_links`` (directed link ids; a cut cable is both of its directions) are never
used. Fabric routes are shortest in the surviving switch graph; a NIC whose cable failed is
skipped as above; routes inside a server are fixed, so one crossing a failed link is an error.
A pair left without a route raises ValueError naming both GPUs. Degraded (slower, not cut) links
are a topology matter: ``Topology.with_link_scale`` scales the capacity of every link of a kind.

Switch-level paths (``switch_path``, ``gpu_to_node``, ``node_to_gpu``: in-network reduction trees)
are ECMP under every policy.

Cost, and what Routers share. With S fabric switches and E switch-to-switch links, the hop table
to one destination switch is a breadth-first search backwards from it, level by level over a CSR
of the links into each switch: O(S + E) numpy work, once per destination. Hierarchical tables are
Dijkstra, O(E log S). Next hops are derived once per (table, switch). Reachability of two switches
(the NIC choice above) is one comparison of connected-component labels when every surviving
switch link has its reverse (then reaching is being in one component), else a table lookup. These
depend on the topology and ``failed_links`` only, so every Router of one topology shares them (kept
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

Bulk requests (``paths``, ``weighted_paths``) are the loop of single calls in one call: same paths,
pinned flows, pending load in the same order, same errors at the same flow (those before it routed).
The GPUs are checked with numpy up to the first bad flow; each flow before it skips the per-call
checks and argument handling.

Module-level caches: ``_SHARED`` (the structure above, weakly keyed by the topology's graph) and
``_ones`` (read-only unit weights) are the exception to the project's no-module-level-state rule:
they hold pure derived data, go with their topology, and results are identical warm or cold.

What is ignored: per-packet dynamics (adaptive and UGAL decide per flow from assigned load, not
from instantaneous queue occupancy), reordering costs of spraying, and the deadlock-avoidance
virtual channels real dragonfly routers need. Everything is deterministic for a given ``seed``
and order of calls.
"""

from __future__ import annotations

import functools
import heapq
import math
import weakref
from collections import OrderedDict
from typing import Callable, Iterable

import numpy as np

from .topology import NodeKind, Topology

ROUTING_POLICIES = ("ecmp", "minimal", "valiant", "ugal", "adaptive", "spray")

VALIANT_SALT = 0x56414C49414E54   # "VALIANT": separates the intermediate's hash from per-switch hashes

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15     # splitmix64's increment, also mix64's starting state

_Option = tuple[int, int]          # (link id, next switch)

#: Failure sets whose fabric tables are kept per topology (least recently used first out); a bound
#: on memory for failure sweeps, not a model parameter.
_FAILURE_SETS_KEPT = 8


def _absorb(h: int, v: int) -> int:
    """One round of :func:`mix64`: the state ``h`` after some values, with ``v`` added (xor, then
    splitmix64's increment and finaliser). Lets the router hash a flow's fixed prefix once."""
    h = ((h ^ (v & _MASK64)) + _GOLDEN64) & _MASK64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def mix64(*values: int) -> int:
    """Deterministic 64-bit hash of integers: :func:`_absorb` folded over the values from ``_GOLDEN64``
    (splitmix64 finaliser chained over them)."""
    return functools.reduce(_absorb, map(int, values), _GOLDEN64)


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@functools.lru_cache(maxsize=64)      # one entry per path length; a path has at most a few tens of links
def _ones(length: int) -> np.ndarray:
    """A read-only array of ``length`` ones (unit weights of an unsplit path), shared: a new array per
    flow would double the time of ``weighted_paths`` over flows inside servers under ``spray``."""
    return _readonly(np.ones(length))


# ---- static structure, shared by every Router of a topology ---------------------------------------

class _Table:
    """Costs to a target set (``dist``: switch -> hops or hierarchical cost, reachable switches
    only) and the next hops already derived from them (``hops``: switch -> options)."""

    __slots__ = ("dist", "hops", "minimal")

    def __init__(self, dist: dict[int, int], minimal: bool):
        self.dist = dist
        self.hops: dict[int, list[_Option]] = {}
        self.minimal = minimal


class _Wiring:
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
        self.index = {n: i for i, n in enumerate(switches)}          # switch -> compact index
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
        self.switch_links = np.flatnonzero(np.isin(src, switch_ids) & np.isin(dst, switch_ids))   # increasing
        self.switch_src = src[self.switch_links]
        self.switch_dst = dst[self.switch_links]
        self.switch_src_index = np.searchsorted(switch_ids, self.switch_src)
        self.switch_dst_index = np.searchsorted(switch_ids, self.switch_dst)
        if self.group:
            # hierarchical ("minimal") hop costs: 1 inside a group, 1 + B between groups (module docstring)
            between = len(switches) + 1
            group = np.asarray([self.group[n] for n in switches], dtype=np.int64)
            self.switch_link_cost = np.where(group[self.switch_src_index] == group[self.switch_dst_index],
                                             1, 1 + between)
        else:
            self.switch_link_cost = None
        # NIC cabling: the switch each NIC's uplink enters, and every link from that switch back to the NIC
        self.nic_leaf = {nic: int(dst[up]) for nic, up in topology.nic_leaf_link.items()}
        down = sorted(link for nic, leaf in self.nic_leaf.items()
                      for link in graph.get_edge_data(leaf, nic, default={}))    # edge keys are link ids
        self.nic_down_links = np.asarray(down, dtype=np.int64)        # increasing link ids
        self.nic_down_nic = dst[self.nic_down_links]
        self.fabrics: OrderedDict[frozenset[int], _Fabric] = OrderedDict()

    @staticmethod
    def _refs(topology: Topology) -> tuple:
        """The topology's arrays and tables the wiring is derived from (compared by identity)."""
        return (topology.link_src, topology.link_dst, topology.nic_leaf_link, topology.servers,
                topology.gpu_server, topology.gpu_local)

    def matches(self, topology: Topology) -> bool:
        return (all(a is b for a, b in zip(self.refs, self._refs(topology)))
                and self.num_nodes == topology.graph.number_of_nodes())

    def fabric(self, failed: frozenset[int]) -> _Fabric:
        fabric = self.fabrics.get(failed)
        if fabric is None:
            fabric = _Fabric(self, failed)
            self.fabrics[failed] = fabric
            while len(self.fabrics) > _FAILURE_SETS_KEPT:
                self.fabrics.popitem(last=False)
        else:
            self.fabrics.move_to_end(failed)
        return fabric


class _Fabric:
    """The surviving switch graph of a topology under one set of failed links: adjacency lists,
    receiving NIC links, hierarchical link costs, connected components (when every surviving
    switch link has its reverse, reachability is "same component"), and caches of distance tables
    and sprayed splits, filled on demand (pure functions of the above)."""

    def __init__(self, wiring: _Wiring, failed: frozenset[int]):
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
        self.switch_out = self._adjacency(links, src, dst)       # switch -> [(link, next switch)], increasing link
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
        order = np.argsort(key, kind="stable")                    # keeps increasing link ids per switch
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
        while True:                                              # minimum-label propagation
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
            edges = np.repeat(first - ends + count, count) + np.arange(ends[-1])   # every link into the frontier
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
        if self._switch_back is None:                          # switch -> [(link, previous switch)]
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


#: Graph of a topology -> its static routing structure. Weak keys: an entry goes with its topology.
#: A Topology (frozen, slotted, holding arrays) can be neither hashed nor weakly referenced; its graph
#: can, and the entry checks the topology's arrays by identity (``with_link_scale`` copies share them).
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _wiring_of(topology: Topology) -> _Wiring:
    wiring = _SHARED.get(topology.graph)
    if wiring is None or not wiring.matches(topology):
        wiring = _Wiring(topology)
        _SHARED[topology.graph] = wiring
    return wiring


class _Pair:
    """A GPU pair's flow-independent part: the routes inside both servers, the two NICs' switches,
    either the whole path when it is fixed (``fixed``; ``prefix`` 0) or mix64's state after
    (seed, servers, local GPUs) (``prefix``; ``fixed`` None), and its sprayed links and weights once
    found (``sprayed``). A fixed pair also holds what its flows share: ``route`` (links, weights None)
    and ``load``, the pending load of a flow of 1 byte (both None when the path is not fixed); sharing
    them, rather than building them per flow, saves ~30 MB on the 16,384-GPU 405B step.
    ``pinned`` maps 2 flow_key + representative to the route pinned for that flow."""

    __slots__ = ("head", "tail", "leaf_src", "leaf_dst", "prefix", "fixed", "sprayed", "route", "load", "pinned")

    def __init__(self, head: tuple[int, ...], tail: tuple[int, ...], leaf_src: int, leaf_dst: int,
                 prefix: int, fixed: np.ndarray | None):
        self.head, self.tail, self.leaf_src, self.leaf_dst = head, tail, leaf_src, leaf_dst
        self.prefix, self.fixed = prefix, fixed
        self.sprayed: tuple[np.ndarray, np.ndarray] | None = None
        self.route = None if fixed is None else (fixed, None)
        self.load = None if fixed is None else (fixed, None, 1.0)
        self.pinned: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}


class Router:
    """Computes link-id paths between GPUs of ``topology`` under a routing ``policy``.

    One Router per simulation; it keeps the per-link load it has assigned and the pinned flows
    (instance state). Structure derived from the topology and ``failed_links`` alone (switch
    adjacency, NIC cabling, distance tables) is shared by every Router of the same topology.
    """

    def __init__(self, topology: Topology, *, policy: str = "ecmp", seed: int = 0, pxn: bool = True,
                 failed_links: Iterable[int] = frozenset()):
        if policy not in ROUTING_POLICIES:
            raise ValueError(f"routing policy: {policy!r} is not supported; "
                             f"expected one of {', '.join(ROUTING_POLICIES)}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"routing seed: {seed!r} is not allowed; expected an integer")
        self.topology = topology
        self.policy = policy
        self.seed = seed
        self.pxn = pxn
        self.failed_links = self._check_failed(topology, failed_links)
        self._w = _wiring_of(topology)
        self._f = self._w.fabric(self.failed_links)
        self._spraying = policy == "spray"
        self._seed_state = _absorb(_GOLDEN64, seed)
        self._capacity = topology.link_capacity_bytes_per_s
        self._load = np.zeros(topology.num_links)
        self._pending: list[tuple[np.ndarray, np.ndarray | None, float]] = []   # load not yet in _load
        self._cache: dict[tuple[int, int, int, bool], np.ndarray] = {}
        self._pairs: dict[int, _Pair] = {}       # (src GPU x GPUs + dst GPU) x 2 + pxn -> pair and its pins

    @property
    def spraying(self) -> bool:
        """Whether flows between servers are split over equal-cost paths (policy ``spray``), so
        :meth:`weighted_paths`, not :meth:`paths`, gives where their bytes go."""
        return self._spraying

    def failing(self, links: Iterable[int]) -> Router:
        """A fresh Router of the same topology, policy, seed and PXN default that also avoids ``links``
        (no assigned load, no pinned flows): what routes after a link fails mid-run."""
        return Router(self.topology, policy=self.policy, seed=self.seed, pxn=self.pxn,
                      failed_links=self.failed_links | self._check_failed(self.topology, links))

    @staticmethod
    def _check_failed(topology: Topology, failed_links: Iterable[int]) -> frozenset[int]:
        if isinstance(failed_links, (str, bytes)) or not isinstance(failed_links, Iterable):
            raise ValueError(f"Router.failed_links: {failed_links!r} is not allowed; expected a set of link ids")
        out = set()
        for link in failed_links:
            if (not isinstance(link, (int, np.integer)) or isinstance(link, bool)
                    or not 0 <= int(link) < topology.num_links):
                raise ValueError(f"Router.failed_links: {link!r} is not allowed; expected link ids in "
                                 f"0..{topology.num_links - 1} ({topology.name!r} has {topology.num_links} links)")
            out.add(int(link))
        return frozenset(out)

    # ---- GPU to GPU ----------------------------------------------------------------------------
    def path(self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None,
             nbytes: float = 1.0) -> np.ndarray:
        """Link ids from GPU ``src_gpu`` to GPU ``dst_gpu`` (global GPU indices), a contiguous walk.

        ``pxn`` overrides the router's default for this path: True sends inter-server traffic
        through the NIC on the destination's rail (relaying over NVLink), False through the
        sending GPU's own NIC (what NCCL's rings do: their graphs name each GPU's local NIC).
        ``nbytes`` weighs the flow in the assigned load (first request of a flow only).
        Under ``spray`` this is the flow's ECMP path, one of those :meth:`weighted_path` splits
        the flow over, and it assigns no load.
        """
        return self._route(src_gpu, dst_gpu, flow_key, pxn, nbytes, walk=True)[0]

    def weighted_path(self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None,
                      nbytes: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Links (int64) and the fraction of the flow's bytes crossing each (float64).

        Under ``spray`` the fabric links carry fractions (each link once); under every other
        policy this is :meth:`path` with weights 1.
        """
        links, weights = self._route(src_gpu, dst_gpu, flow_key, pxn, nbytes, walk=False)
        if weights is None:
            weights = _ones(links.shape[0])
        return links, weights

    def paths(self, src_gpus, dst_gpus, *, flow_keys, pxn: bool | None = None) -> list[np.ndarray]:
        """:meth:`path` of many flows at once: ``[self.path(s, d, flow_key=k, pxn=pxn) for s, d, k in
        zip(src_gpus, dst_gpus, flow_keys)]``, with the same paths, pinned flows, assigned load (same
        additions in the same order) and errors (raised at the first bad flow, after those before it
        are routed), without the per-flow checks (module docstring).

        ``src_gpus``, ``dst_gpus``: integer sequences or 1-d arrays of one length; ``flow_keys`` one
        more, or a single integer for every flow. Each new flow weighs ``nbytes=1``. Flows with the
        same path may share one read-only array.

        >>> from topologies.presets import build_system
        >>> router = Router(build_system("dgx-h100", nodes=2))
        >>> [p.tolist() == router.path(s, d).tolist() for p, s, d in
        ...  zip(router.paths([0, 0, 9], [1, 8, 0], flow_keys=0), [0, 0, 9], [1, 8, 0])]
        [True, True, True]
        """
        return [links for links, _ in self._bulk_route(src_gpus, dst_gpus, flow_keys, pxn, walk=True,
                                                       method="paths")]

    def weighted_paths(self, src_gpus, dst_gpus, *, flow_keys, pxn: bool | None = None
                       ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """:meth:`weighted_path` of many flows at once, as :meth:`paths` is :meth:`path`'s: the
        list of links and the list of weights."""
        routes = self._bulk_route(src_gpus, dst_gpus, flow_keys, pxn, walk=False, method="weighted_paths")
        return [links for links, _ in routes], [_ones(len(links)) if w is None else w for links, w in routes]

    @property
    def assigned_bytes(self) -> np.ndarray:
        """Bytes (or flows, with the default ``nbytes=1``) assigned to each link so far (a copy)."""
        return _readonly(self._loads().copy())

    def reset_load(self) -> None:
        """Forget the assigned load and the pinned routes of every flow."""
        self._pending.clear()
        self._load[:] = 0.0
        self._pairs.clear()

    def _loads(self) -> np.ndarray:
        """The per-link load, after adding the flows routed since the last call: one ``np.add.at``
        over them in routing order, the same additions in the same order as one per flow."""
        pending = self._pending
        if pending:
            lengths = np.fromiter((p[0].shape[0] for p in pending), dtype=np.int64, count=len(pending))
            values = np.repeat(np.fromiter((p[2] for p in pending), dtype=np.float64, count=len(pending)), lengths)
            weighted = [i for i, p in enumerate(pending) if p[1] is not None]
            if weighted:
                ends = np.cumsum(lengths).tolist()
                for i in weighted:
                    links, weights, nbytes = pending[i]
                    values[ends[i] - links.shape[0]:ends[i]] = nbytes * weights
            np.add.at(self._load, np.concatenate([p[0] for p in pending]), values)
            pending.clear()
        return self._load

    def _route(self, src_gpu: int, dst_gpu: int, flow_key: int, pxn: bool | None, nbytes: float,
               *, walk: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """(links, weights or None for all ones); ``walk`` asks for a single path (ECMP under spray)."""
        num_gpus = self._w.num_gpus
        if not (0 <= src_gpu < num_gpus and 0 <= dst_gpu < num_gpus):
            for name, gpu in (("src_gpu", src_gpu), ("dst_gpu", dst_gpu)):
                if not 0 <= gpu < num_gpus:
                    raise ValueError(f"route: {name}={gpu} out of range; the topology has {num_gpus} GPUs")
        if src_gpu == dst_gpu:
            raise ValueError(f"route: source and destination are the same GPU ({src_gpu})")
        if type(flow_key) is not int:
            if not isinstance(flow_key, (int, np.integer)) or isinstance(flow_key, bool):
                raise ValueError(f"route: flow_key={flow_key!r} is not allowed; expected an integer")
            flow_key = int(flow_key)
        if not (type(nbytes) is float and 0.0 < nbytes < math.inf):       # the common case first
            if not (isinstance(nbytes, (int, float, np.floating, np.integer)) and not isinstance(nbytes, bool)
                    and math.isfinite(nbytes) and nbytes > 0):
                raise ValueError(f"route: nbytes={nbytes!r} is not allowed; expected a finite number > 0")
            nbytes = float(nbytes)
        return self._routed(src_gpu, dst_gpu, flow_key, self.pxn if pxn is None else pxn, nbytes,
                            walk and self._spraying)

    def _routed(self, src_gpu: int, dst_gpu: int, flow_key: int, pxn: bool, nbytes: float,
                representative: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`_route` of a flow between two valid, distinct GPUs: the pinned route of a flow seen
        before, else its route, pinned and its load pending (``representative``: the single walk of
        a sprayed flow, not the flow's own routing, so no load)."""
        key = (src_gpu * self._w.num_gpus + dst_gpu) * 2 + (1 if pxn else 0)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = self._pair(src_gpu, dst_gpu, pxn)
        hit = pair.pinned.get(2 * flow_key + representative)
        return self._pin(pair, flow_key, nbytes, representative) if hit is None else hit

    def _pin(self, pair: _Pair, flow_key: int, nbytes: float, representative: bool
             ) -> tuple[np.ndarray, np.ndarray | None]:
        """Route a flow of ``pair`` not seen before, pin it and add its load to the pending."""
        if self._spraying and not representative and pair.leaf_src >= 0:     # a sprayed inter-server flow
            result = self._sprayed(pair)
        elif pair.fixed is not None:                           # inside a server, or both NICs on one switch
            result = pair.route
        else:
            result = (self._hashed_path(pair, flow_key, nbytes), None)
        if not representative:
            self._pending.append(pair.load if result is pair.route and nbytes == 1.0
                                 else (result[0], result[1], nbytes))
        pair.pinned[2 * flow_key + representative] = result
        return result

    def _sprayed(self, pair: _Pair) -> tuple[np.ndarray, np.ndarray]:
        """Links and weights of a sprayed flow between servers (the same for every flow of ``pair``,
        kept on it)."""
        if pair.sprayed is None:
            fabric, fractions = self._spray(pair.leaf_src, pair.leaf_dst)
            out = _readonly(np.asarray(pair.head + fabric + pair.tail, dtype=np.int64))
            weights = _readonly(np.asarray([1.0] * len(pair.head) + list(fractions) + [1.0] * len(pair.tail),
                                           dtype=np.float64))
            pair.sprayed = (out, weights)
        return pair.sprayed

    def _hashed_path(self, pair: _Pair, flow_key: int, nbytes: float) -> np.ndarray:
        """Links of a flow of ``pair`` whose fabric part the policy chooses from the flow's hash."""
        flow_hash = _absorb(pair.prefix, int(flow_key))
        fabric = self._fabric_route(pair.leaf_src, pair.leaf_dst, flow_hash, nbytes)
        return _readonly(np.asarray(pair.head + fabric + pair.tail, dtype=np.int64))

    def _bulk_route(self, src_gpus, dst_gpus, flow_keys, pxn: bool | None, *, walk: bool, method: str
                    ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """``_route`` of each flow in turn (``nbytes=1``), same results and side effects in the same
        order: the flows before the first with a bad GPU (checked with numpy) go straight to
        :meth:`_routed`, then ``_route`` raises the loop's error at that flow."""
        src = self._int_array(src_gpus, "src_gpus", method)
        dst = self._int_array(dst_gpus, "dst_gpus", method)
        count = src.shape[0]
        if dst.shape[0] != count:
            raise ValueError(f"Router.{method}: dst_gpus has {dst.shape[0]} entries and src_gpus {count}; "
                             "expected one destination per source")
        if isinstance(flow_keys, (int, np.integer)) and not isinstance(flow_keys, bool):
            keys = [int(flow_keys)] * count
        else:
            keys = self._int_array(flow_keys, "flow_keys", method).tolist()     # Python ints, as _route makes them
            if len(keys) != count:
                raise ValueError(f"Router.{method}: flow_keys has {len(keys)} entries and src_gpus {count}; "
                                 "expected one flow key per source, or a single integer")
        pxn = self.pxn if pxn is None else pxn
        n = self._w.num_gpus
        bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n) | (src == dst))
        limit = int(bad[0]) if bad.size else count
        s_list, d_list = src.tolist(), dst.tolist()
        routed, representative = self._routed, walk and self._spraying
        routes = [routed(s, d, k, pxn, 1.0, representative)
                  for s, d, k in zip(s_list[:limit], d_list[:limit], keys[:limit])]
        if limit < count:                                      # raises the loop's error at that flow
            self._route(s_list[limit], d_list[limit], keys[limit], pxn, 1.0, walk=walk)
        return routes

    @staticmethod
    def _int_array(values, name: str, method: str) -> np.ndarray:
        array = np.asarray(values)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            shown = repr(values) if len(repr(values)) <= 60 else repr(values)[:57] + "..."
            raise ValueError(f"Router.{method}: {name}={shown} is not allowed; expected a sequence or 1-d array "
                             "of integers")
        return array

    def _pair(self, src_gpu: int, dst_gpu: int, pxn: bool) -> _Pair:
        """The flow-independent part of routes from ``src_gpu`` to ``dst_gpu`` (:meth:`_routed` memoises it)."""
        w, topo = self._w, self.topology
        s, t = w.gpu_server[src_gpu], w.gpu_server[dst_gpu]
        a, b = w.gpu_local[src_gpu], w.gpu_local[dst_gpu]
        if s == t:
            links = topo.servers[s].intra_routes[(a, b)]
            self._check_alive(links, f"GPU {a} -> GPU {b} of {topo.servers[s].name}")
            return _Pair(links, (), -1, -1, 0, _readonly(np.asarray(links, dtype=np.int64)))   # no switch: -1
        src_info, dst_info = topo.servers[s], topo.servers[t]
        if not src_info.nics or not dst_info.nics:
            raise ValueError(f"route: server {src_info.name if not src_info.nics else dst_info.name} has no "
                             f"NIC, so GPU {a} of {src_info.name} cannot reach GPU {b} of {dst_info.name}")
        j_src, j_dst = self._nic_pair(s, a, t, b, pxn)
        nic_src, nic_dst = src_info.nics[j_src], dst_info.nics[j_dst]
        leaf_src, leaf_dst = w.nic_leaf[nic_src], w.nic_leaf[nic_dst]
        head = src_info.gpu_to_nic_routes[(a, j_src)] + (topo.nic_leaf_link[nic_src],)
        tail = (self._f.nic_down[nic_dst],) + dst_info.nic_to_gpu_routes[(j_dst, b)]
        fixed = _readonly(np.asarray(head + tail, dtype=np.int64)) if leaf_src == leaf_dst else None
        prefix = 0 if fixed is not None else functools.reduce(_absorb, (s, a, t, b), self._seed_state)
        return _Pair(head, tail, leaf_src, leaf_dst, prefix, fixed)

    def nic_for(self, server: int, local_gpu: int, dst_server: int, dst_local: int, *, pxn: bool) -> int:
        """Index of the NIC that server ``server`` prefers for sending from local GPU to the
        destination (before any reachability fallback: see the module docstring)."""
        src_info, dst_info = self.topology.servers[server], self.topology.servers[dst_server]
        dst_nic = dst_info.nic_of_gpu[dst_local]
        if pxn and src_info.nvswitch >= 0 and dst_nic < len(src_info.nics):
            return dst_nic
        return src_info.nic_of_gpu[local_gpu]

    def _reaches(self, src_switch: int, dst_switch: int) -> bool:
        """Whether ``src_switch`` can reach ``dst_switch`` over surviving switch links."""
        labels = self._f.labels
        if labels is None:
            return src_switch in self._distances_to((dst_switch,)).dist
        label = labels.get(src_switch)
        return src_switch == dst_switch if label is None else label == labels.get(dst_switch)

    def _nic_pair(self, s: int, a: int, t: int, b: int, pxn: bool) -> tuple[int, int]:
        """(sending NIC index, receiving NIC index): the first pair, in preference order, whose
        NICs are usable and whose switches are connected."""
        topo = self.topology
        src_info, dst_info = topo.servers[s], topo.servers[t]
        nic_leaf, nic_down = self._w.nic_leaf, self._f.nic_down
        rail = dst_info.nic_of_gpu[b]
        first = self.nic_for(s, a, t, b, pxn=pxn)
        if not self.failed_links and first >= 0 and rail >= 0:      # the common case: the preferred pair works
            send_nic, recv_nic = src_info.nics[first], dst_info.nics[rail]
            if (send_nic in nic_leaf and recv_nic in nic_down
                    and self._reaches(nic_leaf[send_nic], nic_leaf[recv_nic])):
                return first, rail
        senders = [first] + ([rail] if 0 <= rail < len(src_info.nics) else [])
        senders = list(dict.fromkeys(senders + [src_info.nic_of_gpu[a]] + list(range(len(src_info.nics)))))
        receivers = list(dict.fromkeys([rail] + list(range(len(dst_info.nics)))))
        usable = [j for j in senders if j >= 0 and self._can_send(src_info.nics[j], src_info.gpu_to_nic_routes[(a, j)])]
        for jd in receivers:
            nic = dst_info.nics[jd]
            if not self._can_receive(nic, dst_info.nic_to_gpu_routes[(jd, b)]):
                continue
            for js in usable:
                if self._reaches(nic_leaf[src_info.nics[js]], nic_leaf[nic]):
                    return js, jd
        failed = " (with failed links)" if self.failed_links else ""
        raise ValueError(f"route: GPU {a} of {src_info.name} (GPU {src_info.first_gpu + a}) cannot reach GPU {b} of "
                         f"{dst_info.name} (GPU {dst_info.first_gpu + b}): no NIC of {src_info.name} is connected "
                         f"through the fabric{failed} to a NIC of {dst_info.name}")

    def _can_send(self, nic: int, inside: tuple[int, ...]) -> bool:
        if nic not in self._w.nic_leaf:
            return False
        return not self.failed_links or (self.topology.nic_leaf_link[nic] not in self.failed_links
                                         and self.failed_links.isdisjoint(inside))

    def _can_receive(self, nic: int, inside: tuple[int, ...]) -> bool:
        return nic in self._f.nic_down and self.failed_links.isdisjoint(inside)

    def _check_alive(self, links: tuple[int, ...], what: str) -> None:
        if self.failed_links and not self.failed_links.isdisjoint(links):
            bad = next(link for link in links if link in self.failed_links)
            raise ValueError(f"route: {what} crosses failed link {self.topology.link_names[bad]!r} (id {bad}); "
                             "routes inside a server are fixed, so this pair is unreachable")

    # ---- Valiant intermediates ------------------------------------------------------------------
    def valiant_intermediate(self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0,
                             pxn: bool | None = None) -> tuple[int, ...]:
        """Switches (a dragonfly group's routers, or one top-tier switch) that Valiant routing
        sends this flow through; empty when it has none (same server, same switch, or no
        eligible intermediate). Independent of the router's policy."""
        topo = self.topology
        pxn = self.pxn if pxn is None else pxn
        s, t = int(topo.gpu_server[src_gpu]), int(topo.gpu_server[dst_gpu])
        if s == t:
            return ()
        a, b = int(topo.gpu_local[src_gpu]), int(topo.gpu_local[dst_gpu])
        j_src, j_dst = self._nic_pair(s, a, t, b, pxn)
        leaf_src = self._w.nic_leaf[topo.servers[s].nics[j_src]]
        leaf_dst = self._w.nic_leaf[topo.servers[t].nics[j_dst]]
        if leaf_src == leaf_dst:
            return ()
        found = self._valiant(leaf_src, leaf_dst, mix64(self.seed, s, a, t, b, flow_key))
        return () if found is None else found[1]

    def _candidates(self, src: int, dst: int) -> list[tuple[int, ...]]:
        w = self._w
        if w.groups:
            ends = (w.group[src], w.group[dst])
            return [members for g, members in w.groups_sorted if g not in ends]
        return [(n,) for n in w.top if n != src and n != dst]

    def _valiant(self, src: int, dst: int, flow_hash: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(fabric links, intermediate) of the Valiant route, or None without a usable intermediate."""
        candidates = self._candidates(src, dst)
        n = len(candidates)
        if n == 0:
            return None
        start = mix64(flow_hash, VALIANT_SALT) % n
        to_dst = self._distances_to((dst,), minimal=True)
        for i in range(n):
            via = candidates[(start + i) % n]
            to_via = self._distances_to(via, minimal=True)
            if src not in to_via.dist or not any(m in to_dst.dist for m in via):
                continue
            first, middle = self._walk(src, to_via, self._hashed(flow_hash))
            if middle not in to_dst.dist:
                continue
            second, _ = self._walk(middle, to_dst, self._hashed(flow_hash))
            return first + second, via
        return None

    # ---- fabric part ---------------------------------------------------------------------------
    def _fabric_route(self, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        if src == dst:
            return ()
        policy = self.policy
        if policy == "ecmp" or policy == "spray":              # spray: its representative single path
            return self._fabric_path(src, dst, flow_hash)
        if policy == "adaptive":
            return self._walk(src, self._distances_to((dst,)), self._least_loaded(flow_hash))[0]
        minimal = self._walk(src, self._distances_to((dst,), minimal=True), self._hashed(flow_hash))[0]
        if policy == "minimal":
            return minimal
        detour = self._valiant(src, dst, flow_hash)
        if detour is None:
            return minimal
        if policy == "valiant":
            return detour[0]
        # ugal
        return minimal if self._ugal_cost(minimal, nbytes) <= self._ugal_cost(detour[0], nbytes) else detour[0]

    def _ugal_cost(self, links: tuple[int, ...], nbytes: float) -> float:
        if not links:
            return 0.0
        unique, count = np.unique(np.asarray(links, dtype=np.int64), return_counts=True)
        load = self._loads()
        return len(links) * float(np.max((load[unique] + count * nbytes) / self._capacity[unique]))

    @staticmethod
    def _hashed(flow_hash: int) -> Callable[[list[_Option], int], _Option]:
        state = _absorb(_GOLDEN64, flow_hash)          # mix64(flow_hash, here) == _absorb(state, here)

        def choose(options: list[_Option], here: int) -> _Option:
            n = len(options)
            return options[_absorb(state, here) % n] if n > 1 else options[0]
        return choose

    def _least_loaded(self, flow_hash: int) -> Callable[[list[_Option], int], _Option]:
        state = _absorb(_GOLDEN64, flow_hash)
        load, capacity = self._loads(), self._capacity

        def choose(options: list[_Option], here: int) -> _Option:
            use = [load[link] / capacity[link] for link, _ in options]
            least = min(use)
            ties = [option for option, u in zip(options, use) if u == least]
            return ties[_absorb(state, here) % len(ties)] if len(ties) > 1 else ties[0]
        return choose

    def _next_hops(self, here: int, table: _Table) -> list[_Option]:
        """Links from ``here`` one step down ``table``'s costs (memoised in the table)."""
        options = table.hops.get(here)
        if options is None:
            dist = table.dist
            d = dist[here]
            cost = self._f.link_cost if table.minimal else {}        # hop counts: each link costs 1
            options = [(link, v) for link, v in self._f.switch_out.get(here, ())
                       if dist.get(v, -1) == d - cost.get(link, 1)]
            table.hops[here] = options
        return options

    def _walk(self, src: int, table: _Table, choose: Callable[[list[_Option], int], _Option]
              ) -> tuple[tuple[int, ...], int]:
        """Follow ``table``'s costs (hop counts, or hierarchical costs) down to a target from
        ``src`` (which must be in it); returns the links and the target reached."""
        dist = table.dist
        links = []
        here = src
        while dist[here] > 0:
            link, here = choose(self._next_hops(here, table), here)
            links.append(link)
        return tuple(links), here

    def _spray(self, src: int, dst: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Links of all shortest src -> dst paths and the fraction of the flow on each, splitting
        evenly over the next hops at every switch (level by level, each link once)."""
        key = (src, dst)
        hit = self._f.sprays.get(key)
        if hit is not None:
            return hit
        table = self._distances_to((dst,))
        weight: dict[int, float] = {}
        level = {src: 1.0}
        while dst not in level:
            following: dict[int, float] = {}
            for here in sorted(level):
                options = self._next_hops(here, table)
                share = level[here] / len(options)
                for link, v in options:
                    weight[link] = weight.get(link, 0.0) + share
                    following[v] = following.get(v, 0.0) + share
            level = following
        out = (tuple(weight), tuple(weight.values()))
        self._f.sprays[key] = out
        return out

    def _distances_to(self, targets: tuple[int, ...], *, minimal: bool = False) -> _Table:
        """Cost from every switch that can reach one of ``targets`` to the nearest of them: hops,
        or with ``minimal`` the hierarchical cost (Dijkstra; plain hops on a fabric without groups).
        Shared by every Router of the topology with the same failed links."""
        fabric = self._f
        minimal = minimal and bool(fabric.link_cost)
        key = (minimal, targets)
        table = fabric.tables.get(key)
        if table is None:
            table = _Table(fabric.costs_to(targets) if minimal else fabric.hops_to(targets), minimal)
            fabric.tables[key] = table
        return table

    def _fabric_path(self, src_switch: int, dst_switch: int, flow_hash: int) -> tuple[int, ...]:
        table = self._distances_to((dst_switch,))
        if src_switch not in table.dist:
            failed = " (with failed links)" if self.failed_links else ""
            raise ValueError(f"route: switch {self.topology.node_name(src_switch)} cannot reach "
                             f"{self.topology.node_name(dst_switch)}{failed}")
        return self._walk(src_switch, table, self._hashed(flow_hash))[0]

    # ---- switch-level paths (in-network reduction) -----------------------------------------------
    def gpu_to_node(self, gpu: int, node: int) -> np.ndarray:
        """Links from GPU ``gpu`` up to in-network device ``node``: its server's NVSwitch, or a
        fabric switch reached through the GPU's own NIC (SHARP)."""
        return self._switch_path(gpu, node, up=True)

    def node_to_gpu(self, node: int, gpu: int) -> np.ndarray:
        """Links from in-network device ``node`` down to GPU ``gpu`` (the reverse route)."""
        return self._switch_path(gpu, node, up=False)

    def _switch_path(self, gpu: int, node: int, *, up: bool) -> np.ndarray:
        key = (gpu, -1 - node, 0, up)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        topo = self.topology
        info = topo.servers[int(topo.gpu_server[gpu])]
        local = int(topo.gpu_local[gpu])
        g = int(topo.gpu_nodes[gpu])
        if node == info.nvswitch:
            u, v = (g, node) if up else (node, g)
            links = (min(topo.graph.get_edge_data(u, v)),)
        elif node in self._w.index:
            j = info.nic_of_gpu[local]
            if j < 0:
                raise ValueError(f"route: GPU {gpu} has no NIC to reach {topo.node_name(node)}")
            nic = info.nics[j]
            leaf = self._w.nic_leaf[nic]
            flow_hash = mix64(self.seed, gpu, node)
            if up:
                links = (info.gpu_to_nic_routes[(local, j)] + (topo.nic_leaf_link[nic],)
                         + self._fabric_path(leaf, node, flow_hash))
            else:
                if nic not in self._f.nic_down:
                    raise ValueError(f"route: every link into NIC {topo.node_name(nic)} of GPU {gpu} has failed")
                links = (self._fabric_path(node, leaf, flow_hash) + (self._f.nic_down[nic],)
                         + info.nic_to_gpu_routes[(j, local)])
        else:
            raise ValueError(f"route: {topo.node_name(node)} is neither GPU {gpu}'s NVSwitch nor a fabric switch")
        self._check_alive(links, f"GPU {gpu} {'->' if up else '<-'} {topo.node_name(node)}")
        out = _readonly(np.asarray(links, dtype=np.int64))
        self._cache[key] = out
        return out

    def switch_path(self, src_switch: int, dst_switch: int, *, flow_key: int = 0) -> np.ndarray:
        """Links between two fabric switches (ECMP over shortest paths); empty for the same one."""
        if src_switch == dst_switch:
            return np.zeros(0, dtype=np.int64)
        links = self._fabric_path(src_switch, dst_switch, mix64(self.seed, src_switch, dst_switch, flow_key))
        return np.asarray(links, dtype=np.int64)

    def leaf_of(self, gpu: int) -> int:
        """The fabric switch the GPU's own NIC is cabled to."""
        topo = self.topology
        info = topo.servers[int(topo.gpu_server[gpu])]
        return self._w.nic_leaf[info.nics[info.nic_of_gpu[int(topo.gpu_local[gpu])]]]

    def spines_above(self, leaf: int) -> list[int]:
        """Switches one hop up from ``leaf`` (sorted): its neighbours of a higher ``tier`` when the
        switches carry tiers (none on a dragonfly, whose routers share one tier), else all."""
        above = {v for _, v in self._f.switch_out.get(leaf, ())}
        tier = self._w.tier.get(leaf)
        if tier is not None:
            above = {v for v in above if self._w.tier.get(v, tier + 1) > tier}
        return sorted(above)
