"""Router: GPU-to-GPU paths under a routing policy, with NIC choice, load, pins and failures.

Partitioned fabrics (rail-only, multi-plane) and NIC choice: when the preferred sending NIC's
switch cannot reach the receiving NIC's switch, the sender relays inside its server (NVLink when
it has an NVSwitch, else PCIe) to another of its NICs that can, as NCCL's PXN does, trying in
order: the preferred NIC (``nic_for``), the NIC on the destination GPU's rail, the GPU's own NIC,
then the others by index. The receiver uses its own NIC unless no sending NIC reaches it (or its
cable failed); then its server's other NICs by index. When no pair works the error names both
GPUs.

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

Bulk requests (``paths``, ``weighted_paths``) are the loop of single calls in one call: same paths,
pinned flows, pending load in the same order, same errors at the same flow (those before it routed).
The GPUs are checked with numpy up to the first bad flow; each flow before it skips the per-call
checks and argument handling.

Cost and what Routers share: ``wiring.py``. Per Router: each GPU pair's server routes and NIC switches
(``_Pair``), the pinned flows and the assigned load.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..checks import Unreachable, integer, is_int, positive_finite, reject
from ..topology import Topology
from .hashing import _GOLDEN64, _absorb, mix64
from .policies import POLICIES, ROUTING_POLICIES, valiant_route
from .wiring import RouteCache, _Option, _Table

#: GPU indices or flow keys of a bulk request: an integer sequence or a 1-d integer array
IntSequence = Sequence[int] | np.ndarray

_Route = tuple[np.ndarray, np.ndarray | None]  # links, weights (None: all ones)
_Load = tuple[np.ndarray, np.ndarray | None, float]  # links, weights, bytes


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


class _Pair:
    """A GPU pair's flow-independent part: the routes inside both servers, the two NICs' switches,
    either the whole path when it is fixed (``fixed``; ``prefix`` 0) or mix64's state after
    (seed, servers, local GPUs) (``prefix``; ``fixed`` None), and its sprayed links and weights once
    found (``sprayed``). A fixed pair also holds what its flows share: ``route`` (links, weights None)
    and ``load``, the pending load of a flow of 1 byte (both None when the path is not fixed); sharing
    them, rather than building them per flow, saves ~30 MB on the 16,384-GPU 405B step.
    ``pinned`` maps 2 flow_key + representative to the route pinned for that flow; ``routes`` holds one route
    per distinct fabric path the pair's flows took, which the pins share (a pair's flows take a few paths:
    sharing them saves ~0.3 GB of the 16,384-GPU 405B step's 1.3 million pins)."""

    __slots__ = (
        "head",
        "tail",
        "leaf_src",
        "leaf_dst",
        "prefix",
        "fixed",
        "sprayed",
        "route",
        "load",
        "pinned",
        "routes",
    )

    def __init__(
        self,
        head: tuple[int, ...],
        tail: tuple[int, ...],
        leaf_src: int,
        leaf_dst: int,
        prefix: int,
        fixed: np.ndarray | None,
    ):
        self.head, self.tail, self.leaf_src, self.leaf_dst = head, tail, leaf_src, leaf_dst
        self.prefix, self.fixed = prefix, fixed
        self.sprayed: tuple[np.ndarray, np.ndarray] | None = None
        self.route: _Route | None = None if fixed is None else (fixed, None)
        self.load: _Load | None = None if fixed is None else (fixed, None, 1.0)
        self.pinned: dict[int, _Route] = {}
        self.routes: dict[tuple[int, ...], _Route] = {}


class Router:
    """Computes link-id paths between GPUs of ``topology`` under a routing ``policy``.

    One Router per simulation; it keeps the per-link load it has assigned and the pinned flows
    (instance state). Structure derived from the topology and ``failed_links`` alone (switch
    adjacency, NIC cabling, distance tables) comes from ``cache`` (a :class:`RouteCache`; default a
    fresh one), shared by every Router given the same cache.
    """

    def __init__(
        self,
        topology: Topology,
        *,
        policy: str = "ecmp",
        seed: int = 0,
        pxn: bool = True,
        failed_links: Iterable[int] = frozenset(),
        cache: RouteCache | None = None,
    ):
        if policy not in POLICIES:
            raise ValueError(
                f"routing policy: {policy!r} is not supported; expected one of {', '.join(ROUTING_POLICIES)}"
            )
        seed = integer("routing seed", seed)
        self.topology = topology
        self.policy = policy
        self.seed = seed
        self.pxn = pxn
        self.failed_links = self._check_failed(topology, failed_links)
        self.cache = RouteCache() if cache is None else cache
        self._w = self.cache.wiring(topology)
        self._f = self._w.fabric(self.failed_links)
        self._policy = POLICIES[policy]
        self._spraying = self._policy.sprays
        self._seed_state = _absorb(_GOLDEN64, seed)
        self._capacity = topology.link_capacity_bytes_per_s
        self._load = np.zeros(topology.num_links)
        self._pending: list[_Load] = []  # load not yet in _load
        self._cache: dict[tuple[int, int, int, bool], np.ndarray] = {}
        self._pairs: dict[int, _Pair] = {}  # (src GPU x GPUs + dst GPU) x 2 + pxn -> pair and its pins

    @property
    def spraying(self) -> bool:
        """Whether flows between servers are split over equal-cost paths (policy ``spray``), so
        :meth:`weighted_paths`, not :meth:`paths`, gives where their bytes go."""
        return self._spraying

    def failing(self, links: Iterable[int]) -> Router:
        """A fresh Router of the same topology, policy, seed and PXN default that also avoids ``links``
        (no assigned load, no pinned flows; the same route cache): what routes after a link fails mid-run."""
        return Router(
            self.topology,
            policy=self.policy,
            seed=self.seed,
            pxn=self.pxn,
            failed_links=self.failed_links | self._check_failed(self.topology, links),
            cache=self.cache,
        )

    @staticmethod
    def _check_failed(topology: Topology, failed_links: Iterable[int]) -> frozenset[int]:
        if isinstance(failed_links, (str, bytes)) or not isinstance(failed_links, Iterable):
            raise reject("Router.failed_links", failed_links, "a set of link ids")
        last = topology.num_links - 1
        expected = f"link ids in 0..{last} ({topology.name!r} has {topology.num_links} links)"
        return frozenset(
            integer("Router.failed_links", link, low=0, high=last, expected=expected) for link in failed_links
        )

    # ---- GPU to GPU ----------------------------------------------------------------------------
    def path(
        self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None, nbytes: float = 1.0
    ) -> np.ndarray:
        """Link ids from GPU ``src_gpu`` to GPU ``dst_gpu`` (global GPU indices), a contiguous walk.

        ``pxn`` overrides the router's default for this path: True sends inter-server traffic
        through the NIC on the destination's rail (relaying over NVLink), False through the
        sending GPU's own NIC (what NCCL's rings do: their graphs name each GPU's local NIC).
        ``nbytes`` weighs the flow in the assigned load (first request of a flow only).
        Under ``spray`` this is the flow's ECMP path, one of those :meth:`weighted_path` splits
        the flow over, and it assigns no load.
        """
        return self._route(src_gpu, dst_gpu, flow_key, pxn, nbytes, walk=True)[0]

    def weighted_path(
        self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None, nbytes: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Links (int64) and the fraction of the flow's bytes crossing each (float64).

        Under ``spray`` the fabric links carry fractions (each link once); under every other
        policy this is :meth:`path` with weights 1.
        """
        links, weights = self._route(src_gpu, dst_gpu, flow_key, pxn, nbytes, walk=False)
        if weights is None:
            weights = self._w.ones(links.shape[0])
        return links, weights

    def fixed_path(self, src_gpu: int, dst_gpu: int, *, pxn: bool | None = None) -> np.ndarray | None:
        """The links every flow from GPU ``src_gpu`` to GPU ``dst_gpu`` takes whatever its hash and the load (inside
        one server, or both NICs on one switch), else None (the fabric offers a choice). Assigns no load.

        >>> from topologies.presets import build_system
        >>> router = Router(build_system("dgx-h100", nodes=64, topology="fat-tree"))
        >>> router.fixed_path(0, 1).tolist() == router.path(0, 1).tolist(), router.fixed_path(0, 8 * 63) is None
        (True, True)
        """
        return self._checked_pair(src_gpu, dst_gpu, pxn, "fixed_path").fixed

    def _checked_pair(self, src_gpu: int, dst_gpu: int, pxn: bool | None, method: str) -> _Pair:
        """The (memoised) pair of two valid, distinct GPUs, for ``method``'s errors."""
        for name, gpu in (("src_gpu", src_gpu), ("dst_gpu", dst_gpu)):
            integer(f"{method}: {name}", gpu, low=0, high=self._w.num_gpus - 1)
        if src_gpu == dst_gpu:
            raise ValueError(f"{method}: source and destination are the same GPU ({src_gpu})")
        pxn = self.pxn if pxn is None else pxn
        key = (src_gpu * self._w.num_gpus + dst_gpu) * 2 + (1 if pxn else 0)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = self._pair(src_gpu, dst_gpu, pxn)
        return pair

    def ends(self, src_gpu: int, dst_gpu: int, *, pxn: bool | None = None) -> np.ndarray:
        """The links every flow from GPU ``src_gpu`` to GPU ``dst_gpu`` crosses whatever its hash and the load:
        inside the servers and the two NICs' cables (the whole path inside one server). Assigns no load.

        >>> from topologies.presets import build_system
        >>> router = Router(build_system("dgx-h100", nodes=64, topology="fat-tree"))
        >>> set(router.ends(0, 8 * 63).tolist()) <= set(router.path(0, 8 * 63).tolist())
        True
        """
        pair = self._checked_pair(src_gpu, dst_gpu, pxn, "ends")
        return np.asarray(pair.head + pair.tail, dtype=np.int64)

    def fabric_ends(
        self, src_gpus: IntSequence, dst_gpus: IntSequence, *, pxn: bool | None = None
    ) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
        """:meth:`ends` of many flows at once, as tuples of link ids, and the switches where each flow enters and
        leaves the switch fabric (-1 for both inside a server; one switch when both NICs are on it): every path
        of flow i, whatever its hash, is its ends' head, a fewest-hop walk from ``enter[i]`` to ``leave[i]``, then
        the rest of its ends. Assigns no load.

        >>> from topologies.presets import build_system
        >>> router = Router(build_system("dgx-h100", nodes=64, topology="fat-tree"))
        >>> ends, enter, leave = router.fabric_ends([0, 0], [1, 8 * 63])
        >>> ends[1] == tuple(router.ends(0, 8 * 63).tolist()), enter.tolist()[0], enter.tolist()[1] != leave.tolist()[1]
        (True, -1, True)
        """
        src = self._int_array(src_gpus, "src_gpus", "fabric_ends").tolist()
        dst = self._int_array(dst_gpus, "dst_gpus", "fabric_ends").tolist()
        if len(dst) != len(src):
            raise ValueError(
                f"Router.fabric_ends: dst_gpus has {len(dst)} entries and src_gpus {len(src)}; "
                "expected one destination per source"
            )
        pxn = self.pxn if pxn is None else pxn
        n, pairs, make = self._w.num_gpus, self._pairs, self._pair
        ends: list[tuple[int, ...]] = []
        enter = np.empty(len(src), dtype=np.int64)
        leave = np.empty(len(src), dtype=np.int64)
        for i, (s, d) in enumerate(zip(src, dst)):
            if not (0 <= s < n and 0 <= d < n) or s == d:
                self._checked_pair(s, d, pxn, "Router.fabric_ends")  # raises the error naming the bad GPU
            key = (s * n + d) * 2 + (1 if pxn else 0)
            pair = pairs.get(key)
            if pair is None:
                pair = pairs[key] = make(s, d, pxn)
            ends.append(pair.head + pair.tail)
            enter[i], leave[i] = pair.leaf_src, pair.leaf_dst
        return ends, enter, leave

    def paths(
        self,
        src_gpus: IntSequence,
        dst_gpus: IntSequence,
        *,
        flow_keys: int | np.integer | IntSequence,
        pxn: bool | None = None,
    ) -> list[np.ndarray]:
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
        return [links for links, _ in self._bulk_route(src_gpus, dst_gpus, flow_keys, pxn, walk=True, method="paths")]

    def weighted_paths(
        self,
        src_gpus: IntSequence,
        dst_gpus: IntSequence,
        *,
        flow_keys: int | np.integer | IntSequence,
        pxn: bool | None = None,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """:meth:`weighted_path` of many flows at once, as :meth:`paths` is :meth:`path`'s: the
        list of links and the list of weights."""
        routes = self._bulk_route(src_gpus, dst_gpus, flow_keys, pxn, walk=False, method="weighted_paths")
        ones = self._w.ones
        return [links for links, _ in routes], [ones(len(links)) if w is None else w for links, w in routes]

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
                    assert weights is not None  # the flows in weighted have weights
                    values[ends[i] - links.shape[0] : ends[i]] = nbytes * weights
            np.add.at(self._load, np.concatenate([p[0] for p in pending]), values)
            pending.clear()
        return self._load

    def _route(
        self, src_gpu: int, dst_gpu: int, flow_key: int, pxn: bool | None, nbytes: float, *, walk: bool
    ) -> _Route:
        """(links, weights or None for all ones); ``walk`` asks for a single path (ECMP under spray)."""
        num_gpus = self._w.num_gpus
        if not (0 <= src_gpu < num_gpus and 0 <= dst_gpu < num_gpus):
            for name, gpu in (("src_gpu", src_gpu), ("dst_gpu", dst_gpu)):
                if not 0 <= gpu < num_gpus:
                    raise ValueError(f"route: {name}={gpu} out of range; the topology has {num_gpus} GPUs")
        if src_gpu == dst_gpu:
            raise ValueError(f"route: source and destination are the same GPU ({src_gpu})")
        if type(flow_key) is not int:  # the common case skips the helper
            flow_key = integer("route: flow_key", flow_key)
        if not (type(nbytes) is float and 0.0 < nbytes < math.inf):  # the common case first
            nbytes = positive_finite("route: nbytes", nbytes)
        return self._routed(
            src_gpu, dst_gpu, flow_key, self.pxn if pxn is None else pxn, nbytes, walk and self._spraying
        )

    def _routed(
        self, src_gpu: int, dst_gpu: int, flow_key: int, pxn: bool, nbytes: float, representative: bool
    ) -> _Route:
        """:meth:`_route` of a flow between two valid, distinct GPUs: the pinned route of a flow seen
        before, else its route, pinned and its load pending (``representative``: the single walk of
        a sprayed flow, not the flow's own routing, so no load)."""
        key = (src_gpu * self._w.num_gpus + dst_gpu) * 2 + (1 if pxn else 0)
        pair = self._pairs.get(key)
        if pair is None:
            pair = self._pairs[key] = self._pair(src_gpu, dst_gpu, pxn)
        hit = pair.pinned.get(2 * flow_key + representative)
        return self._pin(pair, flow_key, nbytes, representative) if hit is None else hit

    def _pin(self, pair: _Pair, flow_key: int, nbytes: float, representative: bool) -> _Route:
        """Route a flow of ``pair`` not seen before, pin it and add its load to the pending."""
        route, load = pair.route, pair.load  # not None exactly when the pair's path is fixed
        result: _Route
        if self._spraying and not representative and pair.leaf_src >= 0:  # a sprayed inter-server flow
            result = self._sprayed(pair)
        elif route is not None:  # inside a server, or both NICs on one switch
            result = route
        else:
            result = self._hashed_route(pair, flow_key, nbytes)
        if not representative:
            self._pending.append(
                load if load is not None and result is route and nbytes == 1.0 else (result[0], result[1], nbytes)
            )
        pair.pinned[2 * flow_key + representative] = result
        return result

    def _sprayed(self, pair: _Pair) -> tuple[np.ndarray, np.ndarray]:
        """Links and weights of a sprayed flow between servers (the same for every flow of ``pair``,
        kept on it)."""
        if pair.sprayed is None:
            fabric, fractions = self._spray(pair.leaf_src, pair.leaf_dst)
            out = _readonly(np.asarray(pair.head + fabric + pair.tail, dtype=np.int64))
            weights = _readonly(
                np.asarray([1.0] * len(pair.head) + list(fractions) + [1.0] * len(pair.tail), dtype=np.float64)
            )
            pair.sprayed = (out, weights)
        return pair.sprayed

    def _hashed_route(self, pair: _Pair, flow_key: int, nbytes: float) -> _Route:
        """The route of a flow of ``pair`` whose fabric part the policy chooses from the flow's hash (the pair's
        one route object for that path, shared by its flows)."""
        flow_hash = _absorb(pair.prefix, int(flow_key))
        fabric = tuple(self._fabric_route(pair.leaf_src, pair.leaf_dst, flow_hash, nbytes))
        route = pair.routes.get(fabric)
        if route is None:
            route = pair.routes[fabric] = (
                _readonly(np.asarray(pair.head + fabric + pair.tail, dtype=np.int64)),
                None,
            )
        return route

    def _bulk_route(
        self,
        src_gpus: IntSequence,
        dst_gpus: IntSequence,
        flow_keys: int | np.integer | IntSequence,
        pxn: bool | None,
        *,
        walk: bool,
        method: str,
    ) -> list[_Route]:
        """``_route`` of each flow in turn (``nbytes=1``), same results and side effects in the same
        order: the flows before the first with a bad GPU (checked with numpy) go straight to
        :meth:`_routed`, then ``_route`` raises the loop's error at that flow."""
        src = self._int_array(src_gpus, "src_gpus", method)
        dst = self._int_array(dst_gpus, "dst_gpus", method)
        count = src.shape[0]
        if dst.shape[0] != count:
            raise ValueError(
                f"Router.{method}: dst_gpus has {dst.shape[0]} entries and src_gpus {count}; "
                "expected one destination per source"
            )
        if is_int(flow_keys):
            keys = [int(flow_keys)] * count
        else:
            keys = self._int_array(flow_keys, "flow_keys", method).tolist()  # Python ints, as _route makes them
            if len(keys) != count:
                raise ValueError(
                    f"Router.{method}: flow_keys has {len(keys)} entries and src_gpus {count}; "
                    "expected one flow key per source, or a single integer"
                )
        pxn = self.pxn if pxn is None else pxn
        n = self._w.num_gpus
        bad = np.flatnonzero((src < 0) | (src >= n) | (dst < 0) | (dst >= n) | (src == dst))
        limit = int(bad[0]) if bad.size else count
        s_list, d_list = src.tolist(), dst.tolist()
        routed, representative = self._routed, walk and self._spraying
        routes = [
            routed(s, d, k, pxn, 1.0, representative) for s, d, k in zip(s_list[:limit], d_list[:limit], keys[:limit])
        ]
        if limit < count:  # raises the loop's error at that flow
            self._route(s_list[limit], d_list[limit], keys[limit], pxn, 1.0, walk=walk)
        return routes

    @staticmethod
    def _int_array(values: object, name: str, method: str) -> np.ndarray:
        array = np.asarray(values)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise reject(f"Router.{method}: {name}", values, "a sequence or 1-d array of integers")
        return array

    def _pair(self, src_gpu: int, dst_gpu: int, pxn: bool) -> _Pair:
        """The flow-independent part of routes from ``src_gpu`` to ``dst_gpu`` (:meth:`_routed` memoises it)."""
        w, topo = self._w, self.topology
        s, t = w.gpu_server[src_gpu], w.gpu_server[dst_gpu]
        a, b = w.gpu_local[src_gpu], w.gpu_local[dst_gpu]
        if s == t:
            links = topo.servers[s].intra_routes[(a, b)]
            self._check_alive(links, f"GPU {a} -> GPU {b} of {topo.servers[s].name}")
            return _Pair(links, (), -1, -1, 0, _readonly(np.asarray(links, dtype=np.int64)))  # no switch: -1
        src_info, dst_info = topo.servers[s], topo.servers[t]
        if not src_info.nics or not dst_info.nics:
            raise ValueError(
                f"route: server {src_info.name if not src_info.nics else dst_info.name} has no "
                f"NIC, so GPU {a} of {src_info.name} cannot reach GPU {b} of {dst_info.name}"
            )
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
        if not self.failed_links and first >= 0 and rail >= 0:  # the common case: the preferred pair works
            send_nic, recv_nic = src_info.nics[first], dst_info.nics[rail]
            if send_nic in nic_leaf and recv_nic in nic_down and self._reaches(nic_leaf[send_nic], nic_leaf[recv_nic]):
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
        raise Unreachable(
            f"route: GPU {a} of {src_info.name} (GPU {src_info.first_gpu + a}) cannot reach GPU {b} of "
            f"{dst_info.name} (GPU {dst_info.first_gpu + b}): no NIC of {src_info.name} is connected "
            f"through the fabric{failed} to a NIC of {dst_info.name}"
        )

    def _can_send(self, nic: int, inside: tuple[int, ...]) -> bool:
        if nic not in self._w.nic_leaf:
            return False
        return not self.failed_links or (
            self.topology.nic_leaf_link[nic] not in self.failed_links and self.failed_links.isdisjoint(inside)
        )

    def _can_receive(self, nic: int, inside: tuple[int, ...]) -> bool:
        return nic in self._f.nic_down and self.failed_links.isdisjoint(inside)

    def _check_alive(self, links: tuple[int, ...], what: str) -> None:
        if self.failed_links and not self.failed_links.isdisjoint(links):
            bad = next(link for link in links if link in self.failed_links)
            raise Unreachable(
                f"route: {what} crosses failed link {self.topology.link_names[bad]!r} (id {bad}); "
                "routes inside a server are fixed, so this pair is unreachable"
            )

    # ---- Valiant intermediates ------------------------------------------------------------------
    def valiant_intermediate(
        self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None
    ) -> tuple[int, ...]:
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
        found = valiant_route(self, leaf_src, leaf_dst, mix64(self.seed, s, a, t, b, flow_key))
        return () if found is None else found[1]

    # ---- fabric part ---------------------------------------------------------------------------
    def _fabric_route(self, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        """Links from switch ``src`` to switch ``dst`` of the flow with ``flow_hash``, as the policy routes it."""
        return () if src == dst else self._policy.fabric_route(self, src, dst, flow_hash, nbytes)

    @staticmethod
    def _hashed(flow_hash: int) -> Callable[[list[_Option], int], _Option]:
        state = _absorb(_GOLDEN64, flow_hash)  # mix64(flow_hash, here) == _absorb(state, here)

        def choose(options: list[_Option], here: int) -> _Option:
            n = len(options)
            return options[_absorb(state, here) % n] if n > 1 else options[0]

        return choose

    def _next_hops(self, here: int, table: _Table) -> list[_Option]:
        """Links from ``here`` one step down ``table``'s costs (memoised in the table)."""
        options = table.hops.get(here)
        if options is None:
            dist = table.dist
            d = dist[here]
            cost = self._f.link_cost if table.minimal else {}  # hop counts: each link costs 1
            options = [
                (link, v) for link, v in self._f.switch_out.get(here, ()) if dist.get(v, -1) == d - cost.get(link, 1)
            ]
            table.hops[here] = options
        return options

    def _walk(
        self, src: int, table: _Table, choose: Callable[[list[_Option], int], _Option]
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
            raise Unreachable(
                f"route: switch {self.topology.node_name(src_switch)} cannot reach "
                f"{self.topology.node_name(dst_switch)}{failed}"
            )
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
        links: tuple[int, ...]
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
                links = (
                    info.gpu_to_nic_routes[(local, j)]
                    + (topo.nic_leaf_link[nic],)
                    + self._fabric_path(leaf, node, flow_hash)
                )
            else:
                if nic not in self._f.nic_down:
                    raise ValueError(f"route: every link into NIC {topo.node_name(nic)} of GPU {gpu} has failed")
                links = (
                    self._fabric_path(node, leaf, flow_hash)
                    + (self._f.nic_down[nic],)
                    + info.nic_to_gpu_routes[(j, local)]
                )
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
