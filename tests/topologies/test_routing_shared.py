"""Tests for what the Routers given one RouteCache share, and the other fast paths of topologies.routing:
the shared structure (same paths as a Router with nothing shared, failure sets kept apart, released
with the topology), the one-round hash against mix64, the numpy breadth-first search against a plain
one, and the deferred load against one ``np.add.at`` per flow. Invariants only: no timing."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections import Counter, deque

import numpy as np
import pytest

from tests.topologies.fabrics import BOX, DUO, TOY8, reverse
from topologies import links as lk
from topologies.dragonfly import dragonfly
from topologies.fat_tree import fat_tree
from topologies.routing import ROUTING_POLICIES, RouteCache, Router, hashing, mix64, wiring
from topologies.topology import NodeKind, Topology


def _fat8() -> Topology:
    # 24 DUO servers, rail-optimised 8-ary fat-tree: d = 4 NICs per edge, 2 rails x 6 groups = 12 edges,
    # pods = 12 / 4 = 3 of 4 edges + 4 aggregation switches, cores: floor(8 / 3) = 2 links per pod, so
    # 4 groups x ceil(4 / 2) = 8 cores; 32 switches, 48 GPUs
    return fat_tree(server=DUO, servers=24, switch=TOY8, fabric_link=lk.IB_NDR)


def _fly() -> Topology:
    # p = 1, a = 2, h = 1: g = 3 groups of 2 routers (hierarchical tables are Dijkstra), 6 GPUs
    return dragonfly(
        server=BOX,
        servers_per_router=1,
        routers_per_group=2,
        global_links_per_router=1,
        switch=TOY8,
        fabric_link=lk.IB_NDR,
    )


@pytest.fixture(scope="module")
def fat8() -> Topology:
    return _fat8()


def _switches(topo: Topology) -> list[int]:
    return sorted(n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH)


def _all_routes(router: Router, *, flow_keys: int = 2) -> list:
    """Every GPU pair's path and weighted path for ``flow_keys`` flows, both PXN settings, errors as text."""
    out = []
    n = router.topology.num_gpus
    for pxn in (True, False):
        for key in range(flow_keys):
            for a in range(n):
                for b in range(n):
                    if a == b:
                        continue
                    try:
                        links, weights = router.weighted_path(a, b, flow_key=key, pxn=pxn, nbytes=1.5)
                        out.append(
                            (router.path(a, b, flow_key=key, pxn=pxn).tolist(), links.tolist(), weights.tolist())
                        )
                    except ValueError as err:
                        out.append(str(err))
    return out + [router.assigned_bytes.tolist()]


def _plain_hops(topo: Topology, failed: frozenset[int], target: int) -> dict[int, int]:
    """Reference: hop counts to ``target`` by a queue-based search over surviving switch links."""
    switches = set(_switches(topo))
    into: dict[int, list[int]] = {}
    for link in range(topo.num_links):
        u, v = int(topo.link_src[link]), int(topo.link_dst[link])
        if u in switches and v in switches and link not in failed:
            into.setdefault(v, []).append(u)
    dist = {target: 0}
    queue = deque([target])
    while queue:
        v = queue.popleft()
        for u in into.get(v, ()):
            if u not in dist:
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


# ------------------------------------------------------------------------------------------------
# The hash
# ------------------------------------------------------------------------------------------------


def test_one_round_hash_equals_mix64_on_random_inputs():
    rng = np.random.default_rng(20240611)
    for _ in range(3000):
        count = int(rng.integers(1, 8))
        width = int(rng.choice([1, 5, 8, 9]))  # bytes: small ids up to beyond 64 bits
        values = [
            int.from_bytes(rng.bytes(width), "little") - (2 ** (8 * width - 1) if rng.random() < 0.3 else 0)
            for _ in range(count)
        ]  # some negative
        state = hashing._GOLDEN64
        for v in values:
            state = hashing._absorb(state, v)
        assert state == mix64(*values)
        assert 0 <= state < 2**64


def test_hashed_choice_is_mix64_of_flow_and_switch():
    options = [(10, 1), (11, 2), (12, 3)]
    for flow_hash in (0, 1, 2**63 + 5, mix64(7, 8)):
        for here in (0, 5, 1234):
            # ECMP at switch x: next hop number mix64(flow_hash, x) mod n (module docstring)
            assert Router._hashed(flow_hash)(options, here) == options[mix64(flow_hash, here) % 3]
            assert Router._hashed(flow_hash)(options[:1], here) == options[0]


# ------------------------------------------------------------------------------------------------
# Sharing across Routers
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
def test_router_after_another_routes_like_one_with_nothing_shared(fat8, policy):
    cache = RouteCache()
    first = Router(fat8, policy=policy, seed=3, cache=cache)
    warm = _all_routes(first)
    second = Router(fat8, policy=policy, seed=3, cache=cache)
    assert second._f is first._f  # the static structure is shared ...
    assert second._load is not first._load and second._pairs is not first._pairs  # ... the load is not
    assert Router(fat8, policy=policy, seed=3)._f is not first._f  # no cache given: a fresh one, nothing shared
    alone = Router(_fat8(), policy=policy, seed=3, cache=cache)  # an identical build: its own, empty structure
    assert alone._f is not first._f
    routes = _all_routes(second)
    assert routes == _all_routes(alone)
    assert routes == warm  # same calls in the same order, same results


def test_router_after_another_routes_like_one_with_nothing_shared_on_dragonfly():
    fly = _fly()
    cache = RouteCache()
    for policy in ("minimal", "valiant", "ugal"):
        first = _all_routes(Router(fly, policy=policy, seed=1, cache=cache))
        assert _all_routes(Router(fly, policy=policy, seed=1, cache=cache)) == first
        assert _all_routes(Router(_fly(), policy=policy, seed=1, cache=cache)) == first


def test_reverse_pairs_the_two_directions_of_each_parallel_cable(fat8):
    # the failure sets below cut cables through fabrics.reverse; fat8 joins each core to a pod by 2
    # parallel cables (floor(8 / 3) = 2), so reverse must pair them one to one, not all with the lowest
    src, dst = fat8.link_src.tolist(), fat8.link_dst.tolist()
    assert max(Counter(zip(src, dst)).values()) == 2
    back = [reverse(fat8, link) for link in range(fat8.num_links)]
    assert all((src[b], dst[b]) == (dst[link], src[link]) for link, b in enumerate(back))
    assert [back[b] for b in back] == list(range(fat8.num_links))


def _cut_used_spine_cable(topo: Topology, router: Router) -> frozenset[int]:
    """Both directions of the first edge -> aggregation link that some inter-pod path of ``router`` uses."""
    switches = set(_switches(topo))
    for b in range(1, topo.num_gpus):
        for link in router.path(0, b, pxn=False).tolist():
            u, v = int(topo.link_src[link]), int(topo.link_dst[link])
            if u in switches and v in switches and topo.graph.nodes[u]["tier"] == 1:
                return frozenset({link, reverse(topo, link)})
    raise AssertionError("no path crosses an edge uplink")


@pytest.mark.parametrize("policy", ["ecmp", "adaptive", "spray"])
def test_failure_sets_do_not_share_paths(fat8, policy):
    cache = RouteCache()
    healthy = Router(fat8, policy=policy, cache=cache)
    healthy_routes = _all_routes(healthy)
    cut = _cut_used_spine_cable(fat8, Router(fat8, cache=cache))
    assert any(cut & set(route[1]) for route in healthy_routes[:-1] if isinstance(route, tuple))
    broken = Router(fat8, policy=policy, failed_links=cut, cache=cache)  # after a healthy Router, same cache
    assert broken._f is not healthy._f
    assert healthy.failing(cut)._f is broken._f  # Router.failing keeps the cache
    broken_routes = _all_routes(broken)
    assert not any(cut & set(route[1]) for route in broken_routes[:-1] if isinstance(route, tuple))
    assert broken_routes == _all_routes(Router(_fat8(), policy=policy, failed_links=cut))
    # and back: a healthy Router after the broken one takes the healthy paths again
    assert _all_routes(Router(fat8, policy=policy, cache=cache)) == healthy_routes


def test_one_way_failure_disables_component_labels_and_routes_like_a_fresh_router(fat8):
    cut = _cut_used_spine_cable(fat8, Router(fat8))
    one_way = frozenset({min(cut)})
    router = Router(fat8, failed_links=one_way)
    assert router._f.labels is None  # not every surviving link has its reverse
    assert Router(fat8)._f.labels is not None
    assert _all_routes(router) == _all_routes(Router(_fat8(), failed_links=one_way))


def test_failure_sets_kept_are_bounded_and_evicted_ones_rebuild_identically(fat8):
    switches = set(_switches(fat8))
    switch_links = [
        link
        for link in range(fat8.num_links)
        if int(fat8.link_src[link]) in switches and int(fat8.link_dst[link]) in switches
    ]
    cables = [link for link in switch_links if link < reverse(fat8, link)]
    sets = [frozenset({link, reverse(fat8, link)}) for link in cables[: wiring.FAILURE_SETS_KEPT + 3]]
    cache = RouteCache()
    first = [Router(fat8, failed_links=cut, cache=cache).path(0, 47, pxn=False).tolist() for cut in sets]
    assert len(cache.wiring(fat8).fabrics) == wiring.FAILURE_SETS_KEPT
    assert sets[0] not in cache.wiring(fat8).fabrics  # least recently used first out
    again = [Router(fat8, failed_links=cut, cache=cache).path(0, 47, pxn=False).tolist() for cut in sets]
    assert again == first


def test_shared_structure_is_released_with_its_topology():
    topo = _fat8()
    cache = RouteCache()
    router = Router(topo, cache=cache)
    router.path(0, 47)
    graph = weakref.ref(topo.graph)
    assert len(cache) == 1 and cache.wiring(topo) is router._w
    del topo, router
    gc.collect()
    assert graph() is None  # the cache kept neither graph nor topology alive
    assert len(cache) == 0


def test_scaled_copy_shares_structure_but_a_changed_topology_does_not(fat8):
    scaled = fat8.with_link_scale({lk.LinkKind.INFINIBAND: 0.5})
    cache = RouteCache()
    assert cache.wiring(scaled) is cache.wiring(fat8)  # same graph and arrays, other capacities
    assert np.array_equal(Router(scaled).path(0, 47), Router(fat8).path(0, 47))
    assert Router(scaled, policy="adaptive")._capacity is scaled.link_capacity_bytes_per_s
    moved = dataclasses.replace(fat8, link_src=fat8.link_src.copy())
    assert cache.wiring(moved) is not cache.wiring(fat8)


# ------------------------------------------------------------------------------------------------
# Breadth-first search, reachability, load
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cut_cable", [False, True])
def test_numpy_search_equals_a_plain_search_for_every_target(fat8, cut_cable):
    failed = _cut_used_spine_cable(fat8, Router(fat8)) if cut_cable else frozenset()
    fabric = Router(fat8, failed_links=failed)._f
    for target in _switches(fat8):
        assert fabric.hops_to((target,)) == _plain_hops(fat8, failed, target)
    labels = fabric.labels
    for target in _switches(fat8)[::5]:
        reached = _plain_hops(fat8, failed, target)
        assert all((labels[s] == labels[target]) == (s in reached) for s in _switches(fat8))


def test_hop_counts_to_an_edge_switch_of_the_fat_tree(fat8):
    edge0 = min(n for n in _switches(fat8) if fat8.graph.nodes[n]["tier"] == 1)
    dist = Router(fat8)._f.hops_to((edge0,))
    # edge0 in pod 0: its 4 aggregation switches at 1; the 3 other edges of pod 0 (via an aggregation
    # switch) and the 8 cores (down to an aggregation switch of pod 0) at 2; the 8 aggregation switches
    # of pods 1-2 at 3 (up to a core); their 8 edges at 4: 1 + 4 + 11 + 8 + 8 = 32 switches
    assert sorted(dist.values()) == [0] + [1] * 4 + [2] * 11 + [3] * 8 + [4] * 8


@pytest.mark.parametrize("policy", ["ecmp", "adaptive", "ugal", "spray"])
def test_assigned_load_equals_one_add_at_per_distinct_flow(fat8, policy):
    rng = np.random.default_rng(5)
    router = Router(fat8, policy=policy, seed=2)
    expected = np.zeros(fat8.num_links)
    seen = set()
    for step in range(600):
        a, b = (int(x) for x in rng.choice(fat8.num_gpus, size=2, replace=False))
        key = int(rng.integers(0, 3))
        nbytes = float(rng.uniform(0.1, 1e6))  # not integers: the order of additions shows
        links, weights = router.weighted_path(a, b, flow_key=key, nbytes=nbytes)
        if (a, b, key) not in seen:  # a pinned flow adds nothing the second time
            seen.add((a, b, key))
            np.add.at(expected, links, nbytes * weights)
        if step % 97 == 0:  # reading the load mid-way changes nothing
            assert router.assigned_bytes.tobytes() == expected.tobytes()
    assert router.assigned_bytes.tobytes() == expected.tobytes()
    router.reset_load()
    assert not router.assigned_bytes.any()
