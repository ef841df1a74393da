"""Tests for Router.paths / Router.weighted_paths: many flows in one call give exactly what the loop of
Router.path / Router.weighted_path calls gives (paths, weights, pinned flows, pending load and its
order, pair memo, assigned bytes, errors), on fat-tree, leaf-spine (rail-optimised and ToR),
rail-only and dragonfly fabrics, under every policy, with and without failed links, with and without
PXN. Then a few hand-derived numbers. No timing (the speed is measured by a benchmark, not here)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.topologies.fabrics import DUO, TOY8, reverse
from topologies import links as lk
from topologies.dragonfly import dragonfly
from topologies.fat_tree import fat_tree, leaf_spine, rail_only
from topologies.routing import ROUTING_POLICIES, Router
from topologies.topology import NodeKind, Topology

BUILDERS = {
    # 24 servers, rail-optimised 8-ary fat-tree: d = 4 NICs per edge, 12 edges in 3 pods, 32 switches, 48 GPUs
    "fat_tree": lambda: fat_tree(server=DUO, servers=24, switch=TOY8, fabric_link=lk.IB_NDR),
    # 8 servers, rail-optimised leaf-spine: d = 4, 2 rails x 2 groups = 4 leaves, 16 GPUs
    "leaf_spine_rail": lambda: leaf_spine(server=DUO, servers=8, switch=TOY8, fabric_link=lk.IB_NDR),
    # 6 servers, top-of-rack leaf-spine: floor(4 / 2) = 2 servers per leaf, 12 GPUs
    "leaf_spine_tor": lambda: leaf_spine(
        server=DUO, servers=6, switch=TOY8, fabric_link=lk.IB_NDR, rail_optimised=False
    ),
    # 12 servers, no link between rails (cross-rail flows relay over NVLink); per rail a leaf-spine of
    # 3 leaves (d = 4) and 2 spines, 24 GPUs
    "rail_only": lambda: rail_only(server=DUO, servers=12, switch=TOY8, fabric_link=lk.IB_NDR),
    # p = 2, a = 2, h = 1: 3 groups of 2 routers, one DUO per router, 12 GPUs
    "dragonfly": lambda: dragonfly(
        server=DUO,
        servers_per_router=2,
        routers_per_group=2,
        global_links_per_router=1,
        switch=TOY8,
        fabric_link=lk.IB_NDR,
    ),
}


@pytest.fixture(scope="module")
def fabrics() -> dict[str, Topology]:
    return {name: build() for name, build in BUILDERS.items()}


def _failure_set(topo: Topology, kind: str) -> frozenset[int]:
    """``none``; ``nic``: both directions of NIC 0's cable of server 1 (flows fall back to NIC 1);
    ``cable``: both directions of the first switch-to-switch link that GPU 0 -> last GPU uses."""
    if kind == "none":
        return frozenset()
    if kind == "nic":
        up = topo.nic_leaf_link[topo.servers[1].nics[0]]
        return frozenset({up, reverse(topo, up)})
    switches = {n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH}
    for link in Router(topo).path(0, topo.num_gpus - 1, pxn=False).tolist():
        if int(topo.link_src[link]) in switches and int(topo.link_dst[link]) in switches:
            return frozenset({link, reverse(topo, link)})
    raise AssertionError(f"{topo.name}: GPU 0 -> GPU {topo.num_gpus - 1} crosses no switch-to-switch link")


def _request(topo: Topology, seed: int, count: int = 300) -> tuple[list[int], list[int], list[int]]:
    """Random flows between distinct GPUs (same server, same switch and across the fabric all occur
    on these small fabrics), flow keys including a negative and a 41-bit one, then 60 of them again
    and one pair with eight keys, two of them repeated."""
    rng = np.random.default_rng(seed)
    n = topo.num_gpus
    src = rng.integers(0, n, count)
    dst = (src + rng.integers(1, n, count)) % n
    keys = rng.choice(np.array([0, 1, 2, 7, -3, 2**40]), count)
    again = rng.choice(count, 60)
    src_l = src.tolist() + src[again].tolist() + [0] * 8
    dst_l = dst.tolist() + dst[again].tolist() + [n - 1] * 8
    keys_l = keys.tolist() + keys[again].tolist() + [0, 1, 2, 3, 1, 4, 0, 5]
    return src_l, dst_l, keys_l


def _state(router: Router) -> tuple:
    """Everything a routing call leaves behind: pinned flows (pair by pair in memo order, each pair's
    pins in pinning order), pending load in order, the pair memo (with each pair's hash state), then
    the assigned load's bytes (this flushes pending)."""
    flows = [
        (key, code, links.tolist(), None if weights is None else weights.tolist())
        for key, p in router._pairs.items()
        for code, (links, weights) in p.pinned.items()
    ]
    pending = [
        (links.tolist(), None if weights is None else weights.tolist(), nbytes)
        for links, weights, nbytes in router._pending
    ]
    pairs = [
        (key, p.head, p.tail, p.leaf_src, p.leaf_dst, p.prefix, None if p.fixed is None else p.fixed.tolist())
        for key, p in router._pairs.items()
    ]
    return flows, pending, pairs, router.assigned_bytes.tobytes()


def _loop_paths(router: Router, src, dst, keys, pxn) -> list[np.ndarray]:
    return [router.path(s, d, flow_key=k, pxn=pxn) for s, d, k in zip(src, dst, keys)]


def _loop_weighted(router: Router, src, dst, keys, pxn) -> tuple[list[np.ndarray], list[np.ndarray]]:
    out = [router.weighted_path(s, d, flow_key=k, pxn=pxn) for s, d, k in zip(src, dst, keys)]
    return [links for links, _ in out], [weights for _, weights in out]


def _same(arrays: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    return len(arrays) == len(expected) and all(
        a.dtype == b.dtype and a.tolist() == b.tolist() for a, b in zip(arrays, expected)
    )


def _loop_until_error(call, src, dst, keys) -> str:
    """Run ``call`` flow by flow as a caller's loop would; the message of the error it stops at."""
    with pytest.raises(ValueError) as err:
        for s, d, k in zip(src, dst, keys):
            call(s, d, flow_key=k)
    return str(err.value)


# ------------------------------------------------------------------------------------------------
# The loop, in one call
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pxn", [True, False])
@pytest.mark.parametrize("failure", ["none", "nic", "cable"])
@pytest.mark.parametrize("policy", ["ecmp", "spray"])
@pytest.mark.parametrize("fabric", list(BUILDERS))
def test_bulk_equals_the_loop(fabrics, fabric, policy, failure, pxn):
    topo = fabrics[fabric]
    failed = _failure_set(topo, failure)
    src, dst, keys = _request(topo, seed=len(fabric) + 7 * len(failure))
    loop = Router(topo, policy=policy, seed=5, failed_links=failed)
    bulk = Router(topo, policy=policy, seed=5, failed_links=failed)
    # first request of every flow: paths (under spray the single ECMP walk, no load) ...
    assert _same(bulk.paths(src, dst, flow_keys=keys, pxn=pxn), _loop_paths(loop, src, dst, keys, pxn))
    assert _state(bulk) == _state(loop)
    # ... then weighted paths of the same flows (memo hits; under spray the sprayed flows are new)
    links, weights = bulk.weighted_paths(np.asarray(src), np.asarray(dst), flow_keys=np.asarray(keys), pxn=pxn)
    loop_links, loop_weights = _loop_weighted(loop, src, dst, keys, pxn)
    assert _same(links, loop_links) and _same(weights, loop_weights)
    assert _state(bulk) == _state(loop)
    # the request mixes the three kinds of pair: same server, both NICs on one switch, across the fabric
    kinds = {(p.leaf_src < 0, p.fixed is not None) for p in bulk._pairs.values()}
    assert kinds == {(True, True), (False, True), (False, False)}


@pytest.mark.parametrize("policy", [p for p in ROUTING_POLICIES if p not in ("ecmp", "spray")])
@pytest.mark.parametrize("fabric", ["fat_tree", "dragonfly"])
def test_bulk_equals_the_loop_under_load_dependent_and_hierarchical_policies(fabrics, fabric, policy):
    topo = fabrics[fabric]
    src, dst, keys = _request(topo, seed=11, count=150)
    for failed in (frozenset(), _failure_set(topo, "cable")):
        loop = Router(topo, policy=policy, seed=2, failed_links=failed)
        bulk = Router(topo, policy=policy, seed=2, failed_links=failed)
        assert _same(bulk.paths(src, dst, flow_keys=keys), _loop_paths(loop, src, dst, keys, None))
        links, weights = bulk.weighted_paths(src[::-1], dst[::-1], flow_keys=keys[::-1])
        loop_links, loop_weights = _loop_weighted(loop, src[::-1], dst[::-1], keys[::-1], None)
        assert _same(links, loop_links) and _same(weights, loop_weights)
        assert _state(bulk) == _state(loop)


@pytest.mark.parametrize("policy", ["ecmp", "spray", "adaptive"])
def test_bulk_and_single_calls_interleave_like_the_loop(fabrics, policy):
    topo = fabrics["fat_tree"]
    src, dst, keys = _request(topo, seed=3)
    one = Router(topo, policy=policy, seed=9)  # only single calls
    mixed = Router(topo, policy=policy, seed=9)  # bulk calls between single ones
    # single calls first, some with nbytes != 1: their flows are pinned with that weight
    for s, d, k in zip(src[:40], dst[:40], keys[:40]):
        assert np.array_equal(
            mixed.weighted_path(s, d, flow_key=k, nbytes=2.5)[0], one.weighted_path(s, d, flow_key=k, nbytes=2.5)[0]
        )
    # a bulk call overlapping them (hits) and extending them (new flows and pairs)
    assert _same(
        mixed.paths(src[20:200], dst[20:200], flow_keys=keys[20:200]),
        _loop_paths(one, src[20:200], dst[20:200], keys[20:200], None),
    )
    assert _state(mixed) == _state(one)  # reading the load mid-way changes nothing
    for s, d, k in zip(src[150:250], dst[150:250], keys[150:250]):
        assert np.array_equal(mixed.path(s, d, flow_key=k, pxn=False), one.path(s, d, flow_key=k, pxn=False))
    links, weights = mixed.weighted_paths(src, dst, flow_keys=keys)
    loop_links, loop_weights = _loop_weighted(one, src, dst, keys, None)
    assert _same(links, loop_links) and _same(weights, loop_weights)
    assert _state(mixed) == _state(one)
    # reset_load forgets the pairs with their pins, so every flow is new again
    mixed.reset_load()
    one.reset_load()
    assert not mixed._pairs
    assert _same(mixed.paths(src, dst, flow_keys=1, pxn=False), _loop_paths(one, src, dst, [1] * len(src), False))
    assert _state(mixed) == _state(one)


def test_a_single_flow_key_stands_for_every_flow(fabrics):
    topo = fabrics["fat_tree"]
    src, dst, _ = _request(topo, seed=4)
    a, b = Router(topo), Router(topo)
    assert _same(a.paths(src, dst, flow_keys=3), b.paths(src, dst, flow_keys=[3] * len(src)))
    assert _same(a.paths(src, dst, flow_keys=np.int64(5)), b.paths(src, dst, flow_keys=np.full(len(src), 5)))
    assert _state(a) == _state(b)


def test_numpy_integer_keys_in_a_list_pin_as_python_ints(fabrics):
    # the pin code is 2 flow_key + representative: for |flow_key| >= 2**62 it does not fit int64, so
    # numpy integers in a list must become Python ints first, as the loop's int(flow_key) makes them
    topo = fabrics["fat_tree"]
    src, dst, keys = _request(topo, seed=8)
    big = [np.int64(2**62 + k) if k >= 0 else np.int64(-(2**62) + k) for k in keys]
    loop, bulk = Router(topo), Router(topo)
    assert _same(bulk.paths(src, dst, flow_keys=big), _loop_paths(loop, src, dst, big, None))
    assert _state(bulk) == _state(loop)
    positive = [code for pair in bulk._pairs.values() for code in pair.pinned if code > 0]
    assert positive and all(code >= 2**63 for code in positive)  # wrapped int64 codes would be negative


def test_paths_are_read_only_int64_and_weights_float64(fabrics):
    topo = fabrics["fat_tree"]
    src, dst, keys = _request(topo, seed=6)
    router = Router(topo, policy="spray")
    for path in router.paths(src, dst, flow_keys=keys):
        assert path.dtype == np.int64 and not path.flags.writeable
    links, weights = router.weighted_paths(src, dst, flow_keys=keys)
    for path, weight in zip(links, weights):
        assert path.dtype == np.int64 and weight.dtype == np.float64 and path.shape == weight.shape
        assert not path.flags.writeable and not weight.flags.writeable


def test_an_empty_request_returns_empty_lists_and_routes_nothing(fabrics):
    router = Router(fabrics["fat_tree"])
    assert router.paths([], [], flow_keys=[]) == []
    assert router.paths(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), flow_keys=0) == []
    assert router.weighted_paths([], [], flow_keys=0, pxn=False) == ([], [])
    assert not router._pairs and not router._pending
    assert not router.assigned_bytes.any()


# ------------------------------------------------------------------------------------------------
# Errors: the loop's, at the loop's flow, after routing the flows before it
# ------------------------------------------------------------------------------------------------


def _bad_requests(topo: Topology) -> dict[str, tuple[list[int], list[int], list[int]]]:
    src, dst, keys = _request(topo, seed=8, count=120)
    n = topo.num_gpus
    out = {}
    for name, s, d in (("src out of range", -1, 0), ("dst out of range", 0, n), ("same GPU", 5, 5)):
        out[name] = (src[:90] + [s] + src[90:], dst[:90] + [d] + dst[90:], keys[:90] + [0] + keys[90:])
    return out


@pytest.mark.parametrize("policy", ["ecmp", "spray", "ugal"])
def test_bad_gpus_raise_the_loop_error_after_the_flows_before(fabrics, policy):
    topo = fabrics["fat_tree"]
    for name, (src, dst, keys) in _bad_requests(topo).items():
        for weighted in (False, True):
            loop, bulk = Router(topo, policy=policy), Router(topo, policy=policy)
            single = loop.weighted_path if weighted else loop.path
            message = _loop_until_error(single, src, dst, keys)
            many = bulk.weighted_paths if weighted else bulk.paths
            with pytest.raises(ValueError) as err:
                many(src, dst, flow_keys=keys)
            assert str(err.value) == message, name
            assert _state(bulk) == _state(loop), name


def test_an_unroutable_pair_raises_at_its_first_flow_after_the_flows_before(fabrics):
    topo = fabrics["fat_tree"]
    # every cable of server 1's two NICs cut: GPUs 2 and 3 reach no other server; inside server 1 they still talk
    failed = set()
    for nic in topo.servers[1].nics:
        up = topo.nic_leaf_link[nic]
        failed |= {up, reverse(topo, up)}
    src, dst, keys = _request(topo, seed=12, count=80)
    src = [0, 2, 3] + src + [2] + src  # 2 -> 3 stays inside server 1: routable
    dst = [1, 3, 2] + dst + [40] + dst
    keys = [0, 0, 1] + keys + [4] + keys
    for policy in ("ecmp", "spray", "adaptive"):
        loop = Router(topo, policy=policy, failed_links=failed)
        bulk = Router(topo, policy=policy, failed_links=failed)
        message = _loop_until_error(loop.path, src, dst, keys)
        assert "no NIC of" in message and ("(GPU 2)" in message or "(GPU 3)" in message)
        with pytest.raises(ValueError) as err:
            bulk.paths(src, dst, flow_keys=keys)
        assert str(err.value) == message
        assert _state(bulk) == _state(loop)


def test_a_failed_link_inside_a_server_raises_like_the_loop(fabrics):
    topo = fabrics["fat_tree"]
    route = topo.servers[0].intra_routes[(0, 1)]  # GPU 0 -> NVSwitch -> GPU 1 of server 0
    failed = {route[0], reverse(topo, route[0])}
    src, dst, keys = [4, 6, 0, 1, 0], [5, 8, 2, 0, 1], [0, 0, 0, 0, 0]
    loop, bulk = Router(topo, failed_links=failed), Router(topo, failed_links=failed)
    message = _loop_until_error(loop.path, src, dst, keys)
    assert "crosses failed link" in message
    with pytest.raises(ValueError, match="crosses failed link") as err:
        bulk.paths(src, dst, flow_keys=keys)
    assert str(err.value) == message
    assert _state(bulk) == _state(loop)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (([0, 1], [2], 0), "dst_gpus has 1 entries and src_gpus 2"),
        (([0, 1], [2, 3], [0, 1, 2]), "flow_keys has 3 entries and src_gpus 2"),
        (([[0, 1]], [[2, 3]], 0), "src_gpus: [[0, 1]] is not allowed"),
        (([0.0, 1.0], [2, 3], 0), "src_gpus: [0.0, 1.0] is not allowed"),
        (([0, 1], [True, False], 0), "dst_gpus: [True, False] is not allowed"),
        (([0, 1], [2, 3], "0"), "flow_keys: '0' is not allowed"),
        (([0, 1], [2, 3], [0.5, 1]), "flow_keys: [0.5, 1] is not allowed"),
    ],
)
def test_malformed_requests_name_the_field(fabrics, args, field):
    router = Router(fabrics["fat_tree"])
    for method in ("paths", "weighted_paths"):
        with pytest.raises(ValueError, match=rf"Router\.{method}: {re.escape(field)}"):
            getattr(router, method)(args[0], args[1], flow_keys=args[2])
    assert not router._pairs


# ------------------------------------------------------------------------------------------------
# Hand-derived numbers
# ------------------------------------------------------------------------------------------------


def test_flows_between_nics_of_one_switch_share_one_path_and_count_once_each(fabrics):
    topo = fabrics["fat_tree"]
    router = Router(topo)
    # GPU 0 (server 0) -> GPU 2 (server 1), own NICs: both NIC 0, on edge switch 0 (servers 0-3 of rail 0),
    # so one fixed path of 6 links: GPU -> PCIe switch -> NIC -> edge -> NIC -> PCIe switch -> GPU
    paths = router.paths([0] * 5, [2] * 5, flow_keys=[0, 1, 1, 2, 5], pxn=False)
    assert len(paths[0]) == 6
    assert all(path is paths[0] for path in paths)
    # 4 distinct flows (keys 0, 1, 2, 5; the repeated 1 is pinned and adds nothing), nbytes 1 each:
    # 4 on each of the 6 links, 24 in all
    load = router.assigned_bytes
    assert load[paths[0]].tolist() == [4.0] * 6
    assert load.sum() == 24.0


def test_a_sprayed_cross_pod_flow_carries_the_whole_flow_across_every_level(fabrics):
    topo = fabrics["fat_tree"]
    router = Router(topo, policy="spray")
    # GPU 0 (server 0, NIC 0: rail-0 edge 0, pod 0) -> GPU 47 (server 23 = group 5, local 1, NIC 1:
    # rail-1 edge 6 + 5 = 11, pod 2): edge -> aggregation -> core -> aggregation -> edge = 4 levels, each
    # carrying the whole flow, plus 3 links at each end with weight 1: weights sum to 3 + 4 + 3 = 10
    (links,), (weights,) = router.weighted_paths([0], [47], flow_keys=0, pxn=False)
    assert weights.sum() == pytest.approx(10.0, abs=1e-12)
    assert weights[:3].tolist() == [1.0] * 3 and weights[-3:].tolist() == [1.0] * 3
    # the first level splits evenly over edge 0's 4 uplinks (d = 4 NICs, R = 1: u = 4)
    assert weights[3:7].tolist() == [0.25] * 4
    assert router.assigned_bytes[links].tolist() == weights.tolist()  # each link once, nbytes 1


# ------------------------------------------------------------------------------------------------
# The workload the bulk call is for, at full size
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ring_edges_of_16384_gpus_bulk_equals_the_loop():
    from topologies.presets import build_system

    topo = build_system("dgx-h100", nodes=2048, fabric="roce-400g", topology="fat-tree")
    # 128 rings of 128 GPUs (local GPU k of 128 consecutive servers) x 16 channels = 262,144 flows
    src, dst, keys = [], [], []
    for block in range(16):
        for k in range(8):
            ring = [(block * 128 + g) * 8 + k for g in range(128)]
            for channel in range(16):
                src += ring
                dst += ring[1:] + ring[:1]
                keys += [channel] * 128
    loop, bulk = Router(topo), Router(topo)
    assert _same(bulk.paths(src, dst, flow_keys=keys, pxn=False), _loop_paths(loop, src, dst, keys, False))
    links, weights = bulk.weighted_paths(src, dst, flow_keys=keys, pxn=False)
    loop_links, loop_weights = _loop_weighted(loop, src, dst, keys, False)
    assert _same(links, loop_links) and _same(weights, loop_weights)
    assert _state(bulk) == _state(loop)
    # 128 x 2 = 256 pairs change edge switch (docstring of routing/wiring.py): 4,096 hashed flows
    assert sum(p.fixed is None for p in bulk._pairs.values()) == 256
