"""The routing policies: how a flow crosses the fabric (part 2 of a path), one small object each.

Policies (``POLICIES``, a registry name -> policy object; ``ROUTING_POLICIES``, its names) for
part 2. ``flow_hash = mix64(seed, src server, src local GPU, dst server, dst local GPU, flow_key)``
identifies a flow (switches hash the 5-tuple; different QPs of one connection have different
``flow_key``); ``dist(x)`` is the hop count from switch x to the destination switch in the
surviving switch graph; the *next hops* at switch x are its links to switches y with
``dist(y) = dist(x) - 1`` (parallel cables count separately).

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

A policy is an object with ``name``, ``sprays`` (its flows between servers split over equal-cost
paths: :meth:`Router.weighted_path` gives their bytes) and ``fabric_route(router, src, dst,
flow_hash, nbytes)``: the links from switch ``src`` to switch ``dst`` (different switches) of the
flow with ``flow_hash``, composed from the router's walks over distance tables and its assigned load.
Policies are stateless (the load they read is the Router's) and use the Router's package-internal
helpers: ``_distances_to`` (a hop or hierarchical-cost table to a target set, from the shared
wiring), ``_walk`` (follow a table down, choosing among next hops), ``_hashed`` (ECMP's choice),
``_fabric_path`` (the ECMP walk), ``_loads()`` and ``_capacity``. A new policy is one more class
and one more entry in ``POLICIES``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .hashing import _GOLDEN64, _absorb, mix64

if TYPE_CHECKING:
    from .router import Router
    from .wiring import _Option

VALIANT_SALT = 0x56414C49414E54  # "VALIANT": separates the intermediate's hash from per-switch hashes


class RoutingPolicy(Protocol):
    name: str
    sprays: bool

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]: ...


class Ecmp:
    """Fewest hops, next hop chosen by the flow's hash at each switch."""

    name = "ecmp"
    sprays = False

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        return router._fabric_path(src, dst, flow_hash)


class Spray(Ecmp):
    """ECMP's next hops, all of them: the flow splits evenly at every switch (``Router._spray``).
    ``fabric_route`` is the flow's ECMP path, its representative single walk."""

    name = "spray"
    sprays = True


class Minimal:
    """Hierarchically minimal paths (at most one global link on a dragonfly), chosen by the hash."""

    name = "minimal"
    sprays = False

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        return minimal_route(router, src, dst, flow_hash)


class Valiant:
    """Minimal to a hashed intermediate (a group, or a top-tier switch), then minimal on; minimal without one."""

    name = "valiant"
    sprays = False

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        minimal = minimal_route(router, src, dst, flow_hash)
        detour = valiant_route(router, src, dst, flow_hash)
        return minimal if detour is None else detour[0]


class Ugal:
    """Minimal or Valiant per flow, whichever has the smaller ``H(P) x q(P)`` on the assigned load; ties to minimal."""

    name = "ugal"
    sprays = False

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        minimal = minimal_route(router, src, dst, flow_hash)
        detour = valiant_route(router, src, dst, flow_hash)
        if detour is None:
            return minimal
        return minimal if self.cost(router, minimal, nbytes) <= self.cost(router, detour[0], nbytes) else detour[0]

    @staticmethod
    def cost(router: Router, links: tuple[int, ...], nbytes: float) -> float:
        """``H(P) x max_l (L_l + n_l w) / c_l`` of the fabric links ``links`` (module docstring)."""
        if not links:
            return 0.0
        unique, count = np.unique(np.asarray(links, dtype=np.int64), return_counts=True)
        load = router._loads()
        return len(links) * float(np.max((load[unique] + count * nbytes) / router._capacity[unique]))


class Adaptive:
    """Fewest hops, next hop the least loaded (``L_l / c_l``) at each switch; ties by the hash."""

    name = "adaptive"
    sprays = False

    def fabric_route(self, router: Router, src: int, dst: int, flow_hash: int, nbytes: float) -> tuple[int, ...]:
        return router._walk(src, router._distances_to((dst,)), self.least_loaded(router, flow_hash))[0]

    @staticmethod
    def least_loaded(router: Router, flow_hash: int) -> Callable[[list[_Option], int], _Option]:
        state = _absorb(_GOLDEN64, flow_hash)
        load, capacity = router._loads(), router._capacity

        def choose(options: list[_Option], here: int) -> _Option:
            use = [load[link] / capacity[link] for link, _ in options]
            least = min(use)
            ties = [option for option, u in zip(options, use) if u == least]
            return ties[_absorb(state, here) % len(ties)] if len(ties) > 1 else ties[0]

        return choose


#: The routing policies by name (read-only): what ``Router(policy=...)`` and ``SimConfig.routing`` accept.
POLICIES: MappingProxyType[str, RoutingPolicy] = MappingProxyType(
    {policy.name: policy for policy in (Ecmp(), Minimal(), Valiant(), Ugal(), Adaptive(), Spray())}
)

ROUTING_POLICIES = tuple(POLICIES)


def minimal_route(router: Router, src: int, dst: int, flow_hash: int) -> tuple[int, ...]:
    """The hashed walk down the hierarchical (``minimal``) costs from switch ``src`` to ``dst``."""
    return router._walk(src, router._distances_to((dst,), minimal=True), router._hashed(flow_hash))[0]


def _candidates(router: Router, src: int, dst: int) -> list[tuple[int, ...]]:
    w = router._w
    if w.groups:
        ends = (w.group[src], w.group[dst])
        return [members for g, members in w.groups_sorted if g not in ends]
    return [(n,) for n in w.top if n != src and n != dst]


def valiant_route(router: Router, src: int, dst: int, flow_hash: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(fabric links, intermediate) of the Valiant route, or None without a usable intermediate."""
    candidates = _candidates(router, src, dst)
    n = len(candidates)
    if n == 0:
        return None
    start = mix64(flow_hash, VALIANT_SALT) % n
    to_dst = router._distances_to((dst,), minimal=True)
    for i in range(n):
        via = candidates[(start + i) % n]
        to_via = router._distances_to(via, minimal=True)
        if src not in to_via.dist or not any(m in to_dst.dist for m in via):
            continue
        first, middle = router._walk(src, to_via, router._hashed(flow_hash))
        if middle not in to_dst.dist:
            continue
        second, _ = router._walk(middle, to_dst, router._hashed(flow_hash))
        return first + second, via
    return None
