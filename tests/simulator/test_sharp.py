"""SHARP trees and resources: trees are valid trees rooted at the lowest common tier, fat-tree
groups spanning pods aggregate through a core switch, CollNet busbw is min(NIC, aggregation) x
the all_reduce factor, exhausted SHARP resources make later communicators fall back, and CollNet
still computes its all_reduce on real buffers over every tree shape."""

from __future__ import annotations

import math
from dataclasses import replace

import networkx as nx
import pytest

from simulator.api import simulate
from simulator.collectives import ALGORITHMS, LoweringContext
from simulator.collectives.collnet import sharp_pool
from simulator.collectives.sharp import SharpPool
from simulator.collectives.tuner import CollectivePolicy, choose
from simulator.config import SimConfig
from simulator.placement import Placement
from simulator.verify import count_wrong, wire_mismatch
from topologies import devices, links
from topologies.fat_tree import fat_tree, leaf_spine, rail_only
from topologies.node import dgx_h100
from topologies.presets import build_system
from topologies.routing import Router
from topologies.topology import NodeKind
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import Workload

COLLNET = ALGORITHMS["collnet"]


def small_server(gpus: int = 2, nics: int = 2, *, connection_limit: bool = True):
    """A DGX H100 cut down to ``gpus`` GPUs and NDR NICs (NIC i next to GPU i)."""
    server = replace(dgx_h100(), gpus=gpus, nics=nics, pcie_switches=2)
    if not connection_limit:  # no per-QP ceiling: the NIC link itself is the network limit
        server = replace(server, nic=replace(server.nic, connection_bytes_per_s=math.inf))
    return server


def small_switch(radix: int = 4, **sharp):
    return replace(devices.QUANTUM2_NDR, name="tiny_sharp", radix=radix, **sharp)


def context(topo, *, seed: int = 0) -> LoweringContext:
    """Rank r = GPU r."""
    return LoweringContext(topology=topo, router=Router(topo, seed=seed), rank_gpu=tuple(range(topo.num_gpus)))


def all_reduce(group, nbytes: int | None = None) -> Collective:
    group = tuple(group)
    return Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=nbytes or 4 * len(group) * 37 + 8, group=group)


def trees_of(ctx, coll):
    allocation = sharp_pool(ctx).allocation(coll.group)
    assert allocation is not None and not isinstance(allocation, str), allocation
    return allocation.trees


def lowest_common_ancestors(topo, leaves) -> set[int]:
    """Independent of sharp.py: switches reachable from every leaf by tier-increasing links, of the lowest tier."""
    g, common = topo.graph, None
    for leaf in leaves:
        up = nx.subgraph_view(
            g,
            filter_edge=lambda u, v, k: (
                g.nodes[u].get("tier", 0) < g.nodes[v].get("tier", 0) and g.nodes[v]["kind"] == NodeKind.FABRIC_SWITCH
            ),
        )
        reach = nx.descendants(up, leaf) | {leaf}
        common = reach if common is None else common & reach
    lowest = min(g.nodes[s]["tier"] for s in common)
    return {s for s in common if g.nodes[s]["tier"] == lowest}


def assert_valid_tree(topo, tree):
    g = topo.graph
    # every NIC of the rail hangs off the leaf the tree lists for it
    for nic, leaf in zip(tree.nics, tree.leaves):
        assert int(topo.link_dst[topo.nic_leaf_link[nic]]) == leaf
    # every leaf reaches the root along parent links, each a cable to a higher tier, without a cycle
    visited = set()
    for leaf in tree.leaves:
        node, seen = leaf, {leaf}
        while node != tree.root:
            up = tree.parent[node]
            assert g.has_edge(node, up) and g.nodes[up]["tier"] > g.nodes[node]["tier"]
            assert up not in seen
            seen.add(up)
            node = up
        visited |= seen
    # no switch hangs in the tree without a leaf below it
    assert visited == set(tree.switches)
    # the root sits at the lowest tier holding a common ancestor of all the leaves
    assert tree.root in lowest_common_ancestors(topo, set(tree.leaves))
    assert all(g.nodes[s]["sharp"] for s in tree.switches)


# ------------------------------------------------------------------------------------------------
# trees
# ------------------------------------------------------------------------------------------------

FABRICS = {
    "leaf-spine rail-optimised": lambda: leaf_spine(
        server=small_server(), servers=4, switch=small_switch(), fabric_link=links.IB_NDR
    ),
    "leaf-spine ToR": lambda: leaf_spine(
        server=small_server(), servers=3, switch=small_switch(), fabric_link=links.IB_NDR, rail_optimised=False
    ),
    "leaf-spine 2 planes": lambda: leaf_spine(
        server=small_server(), servers=4, switch=small_switch(), fabric_link=links.IB_NDR, planes=2
    ),
    "fat-tree 4 pods": lambda: fat_tree(
        server=small_server(), servers=8, switch=small_switch(), fabric_link=links.IB_NDR
    ),
    "fat-tree 2 planes": lambda: fat_tree(
        server=small_server(), servers=8, switch=small_switch(), fabric_link=links.IB_NDR, planes=2
    ),
    "rail-only": lambda: rail_only(server=small_server(), servers=6, switch=small_switch(), fabric_link=links.IB_NDR),
    "dgx-a100 x60 fat-tree (rail 6 spans 2 pods)": lambda: build_system("dgx-a100", nodes=60, topology="fat-tree"),
}


@pytest.mark.parametrize("fabric", list(FABRICS))
def test_every_rail_gets_a_valid_tree_rooted_at_the_lowest_common_tier(fabric):
    topo = FABRICS[fabric]()
    ctx = context(topo)
    coll = all_reduce(range(topo.num_gpus))
    assert COLLNET.supported(coll, ctx) is None
    trees = trees_of(ctx, coll)
    gpn = len(topo.servers[0].gpus)
    assert len(trees) == gpn  # one tree per rail (every GPU has its own NIC here)
    for tree in trees:
        assert_valid_tree(topo, tree)
        # a plane's tree stays in its plane (no link joins planes)
        assert len({topo.graph.nodes[s]["plane"] for s in tree.switches}) == 1


def test_fat_tree_group_spanning_pods_aggregates_through_one_aggregation_switch_per_pod_to_a_core():
    # 8 servers, 2 NICs, k = 4: 2 servers per edge, rail 0 = edges 0..3 = pods 0 and 1
    topo = fat_tree(server=small_server(), servers=8, switch=small_switch(), fabric_link=links.IB_NDR)
    g = topo.graph
    ctx = context(topo)
    coll = all_reduce(range(0, 16, 2))  # GPU 0 of every server: rail 0
    assert COLLNET.supported(coll, ctx) is None
    (tree,) = trees_of(ctx, coll)
    assert_valid_tree(topo, tree)
    assert g.nodes[tree.root]["tier"] == 3  # a core switch
    aggs = {tree.parent[leaf] for leaf in tree.leaves}
    assert {g.nodes[a]["tier"] for a in aggs} == {2}
    assert sorted(g.nodes[a]["pod"] for a in aggs) == [0, 1]  # one per pod, each the parent of its pod's edges
    assert all(g.nodes[tree.parent[leaf]]["pod"] == g.nodes[leaf]["pod"] for leaf in tree.leaves)
    assert {tree.parent[a] for a in aggs} == {tree.root} and tree.height == 2

    # the servers of one pod (0..3 on rail 0: edges 0 and 1) meet at an aggregation switch, no core
    ctx = context(topo)
    coll = all_reduce([0, 2, 4, 6])
    assert COLLNET.supported(coll, ctx) is None
    (tree,) = trees_of(ctx, coll)
    assert_valid_tree(topo, tree)
    assert g.nodes[tree.root]["tier"] == 2 and tree.height == 1


def test_preset_fat_tree_mixes_aggregation_and_core_roots():
    # 60 DGX A100 on a 40-ary Quantum HDR fat-tree: 20 servers per edge, 3 full edges per rail,
    # rail-major, 20 edges per pod: rail 0 = edges 0..2 (pod 0, root an aggregation switch), rail 6 =
    # edges 18..20 (pods 0 and 1, root a core switch)
    topo = build_system("dgx-a100", nodes=60, topology="fat-tree")
    ctx = context(topo)
    coll = all_reduce(range(topo.num_gpus))
    assert COLLNET.supported(coll, ctx) is None
    trees = trees_of(ctx, coll)
    tiers = [topo.graph.nodes[t.root]["tier"] for t in trees]
    assert tiers[0] == 2 and tiers[6] == 3
    # Quantum HDR holds one streaming tree per switch: the 8 trees share no switch
    switches = [s for t in trees for s in t.switches]
    assert len(switches) == len(set(switches))


def test_a_partly_filled_edge_funnels_every_rail_through_one_switch():
    # 41 DGX A100 on the 40-ary Quantum HDR fat-tree: each rail's third edge holds server 40 alone,
    # so it has ceil(1 / 1) = 1 uplink, to agg0.0; every rail's tree must pass agg0.0, which holds
    # one streaming tree (Quantum HDR): rail 0 gets it, rail 1 cannot, the communicator falls back
    topo = build_system("dgx-a100", nodes=41, topology="fat-tree")
    reason = COLLNET.supported(all_reduce(range(topo.num_gpus)), context(topo))
    assert "agg0.0" in reason and "sharp_max_trees is 1" in reason and "rail of NIC s0.nic1" in reason


def test_root_choice_is_seeded_and_deterministic():
    # one rail over two leaves: both spines are candidate roots; the seeded hash picks one
    topo = leaf_spine(server=small_server(), servers=4, switch=small_switch(), fabric_link=links.IB_NDR)
    coll = all_reduce(range(0, 8, 2))

    def root(seed):
        ctx = context(topo, seed=seed)
        assert COLLNET.supported(coll, ctx) is None
        return trees_of(ctx, coll)[0].root

    roots = [root(seed) for seed in range(16)]
    assert roots == [root(seed) for seed in range(16)]  # same seed, same tree
    assert len(set(roots)) == 2  # the seed matters: both spines occur
    # asking again returns the communicator's trees, it does not take new ones
    ctx = context(topo)
    COLLNET.supported(coll, ctx)
    held = dict(sharp_pool(ctx).held)
    COLLNET.supported(coll, ctx)
    COLLNET.lower(coll, ctx, protocol="Simple", nchannels=2)
    assert dict(sharp_pool(ctx).held) == held and sum(held.values()) == 3  # leaf0, leaf1, one spine


def test_trees_avoid_failed_cables():
    # cut leaf0 <-> spine0 (both directions): a rail-0 tree over leaf0 and leaf1 can only root at spine1
    topo = leaf_spine(server=small_server(), servers=4, switch=small_switch(), fabric_link=links.IB_NDR)
    names = {topo.node_name(n): n for n in topo.graph.nodes}
    leaf0, spine0 = names["leaf0"], names["spine0"]
    cut = frozenset(topo.graph.get_edge_data(leaf0, spine0)) | frozenset(topo.graph.get_edge_data(spine0, leaf0))
    for seed in range(8):
        ctx = LoweringContext(
            topology=topo, router=Router(topo, seed=seed, failed_links=cut), rank_gpu=tuple(range(topo.num_gpus))
        )
        coll = all_reduce(RAIL0_ALL)
        assert COLLNET.supported(coll, ctx) is None
        assert trees_of(ctx, coll)[0].root == names["spine1"]
        program = COLLNET.program(coll, ctx, nchannels=2)
        assert count_wrong(coll, program) == 0


def test_node_attributes_carry_the_switch_sharp_limits():
    switch = small_switch(sharp_max_trees=3, sharp_max_jobs=5, sharp_aggregation_bytes_per_s=7e9)
    topo = leaf_spine(server=small_server(), servers=4, switch=switch, fabric_link=links.IB_NDR)
    fabric = [n for n in topo.graph.nodes if topo.graph.nodes[n]["kind"] == NodeKind.FABRIC_SWITCH]
    assert fabric
    for n in fabric:
        attrs = topo.graph.nodes[n]
        assert (attrs["sharp_max_trees"], attrs["sharp_max_jobs"], attrs["sharp_max_trees_per_port"]) == (3, 5, 1)
        assert attrs["sharp_aggregation_bytes_per_s"] == 7e9
    # without a stated rate the node carries the port rate (50 GB/s for NDR)
    topo = leaf_spine(server=small_server(), servers=4, switch=small_switch(), fabric_link=links.IB_NDR)
    assert {topo.graph.nodes[n]["sharp_aggregation_bytes_per_s"] for n in fabric} == {50e9}


# ------------------------------------------------------------------------------------------------
# bandwidth
# ------------------------------------------------------------------------------------------------


def collnet_algbw(topo, group, nchannels):
    """Slope of time over size (latencies cancel): bytes per second of the bandwidth part."""
    times = []
    for size in (2**27, 2**28):
        work = Workload.sequence([all_reduce(group, size)], nranks=len(group))
        config = SimConfig(collectives=CollectivePolicy(algorithm="collnet", nchannels=nchannels))
        record = simulate(topo, work, config=config).collectives[0]
        assert record.algorithm == "collnet"
        times.append(record.end_s - record.start_s)
    return 2**27 / (times[1] - times[0])


@pytest.mark.parametrize("nchannels", [2, 4])
@pytest.mark.parametrize("aggregation", [20e9, None])
def test_collnet_busbw_is_min_of_nic_and_aggregation_times_the_all_reduce_factor(aggregation, nchannels):
    # 4 servers x 2 GPUs, rail-optimised leaf-spine, 2 servers per leaf: each rail's tree is 2 leaves
    # -> 1 spine. Sub-shards: nshards = ppn x max(1, nchannels // ppn) = 2 (nchannels 2) or 4, i.e.
    # C = 1 or 2 chains per rail tree, each moving S / nshards. The C chains of a rail share its
    # NIC links (capacity B_nic each) and the tree's aggregation rate A (cap A / C per chain), so a
    # rail moves S / ppn at min(B_nic, A): T = (S / 2) / min(B_nic, A), algbw = 2 min(B_nic, A),
    # busbw = algbw x 2 (n - 1) / n with n = 8 ranks. Every other leg (NVLink 370 GB/s, PCIe Gen5
    # 57.6 GB/s, leaf-spine cables = B_nic, one chain each) is no tighter.
    switch = small_switch(sharp_aggregation_bytes_per_s=aggregation)
    topo = leaf_spine(server=small_server(connection_limit=False), servers=4, switch=switch, fabric_link=links.IB_NDR)
    b_nic = topo.link_capacity_bytes_per_s[topo.nic_leaf_link[topo.servers[0].nics[0]]]
    assert b_nic == pytest.approx(49.68e9, rel=1e-3)  # NDR: 50 GB/s x 0.9937
    rate = aggregation if aggregation is not None else switch.port_rate_bytes_per_s  # None -> 50 GB/s
    algbw = collnet_algbw(topo, range(8), nchannels)
    assert algbw == pytest.approx(2 * min(b_nic, rate), rel=1e-9)
    busbw = algbw * all_reduce(range(8)).busbw_factor
    assert busbw == pytest.approx(2 * min(b_nic, rate) * 2 * 7 / 8, rel=1e-9)
    if aggregation == 20e9:
        assert busbw == pytest.approx(70e9, rel=1e-9)  # collnet.py worked number
    # the tuner's estimate uses the same bound
    ctx = context(topo)
    _, estimate = COLLNET.estimate(all_reduce(range(8)), ctx, protocol="Simple", nchannels=nchannels)
    assert estimate == pytest.approx(2 * min(b_nic, rate), rel=1e-9)


# ------------------------------------------------------------------------------------------------
# resources and fallback
# ------------------------------------------------------------------------------------------------

# 4 servers x 2 GPUs on a rail-optimised radix-4 leaf-spine: rail 0 = leaf0 (servers 0, 1) and
# leaf1 (servers 2, 3), rail 1 = leaf2 and leaf3, 2 spines. GPU g = 2 x server + local.
RAIL0_ALL, RAIL0_SOME = (0, 2, 4, 6), (0, 4)  # both need leaf0 and leaf1
RAIL1_ALL, RAIL1_ONE_LEAF = (1, 3, 5, 7), (1, 3)  # leaf2 + leaf3; leaf2 only


def limited_fabric(**limits):
    switch = small_switch(sharp_max_trees=None, sharp_max_trees_per_port=None, sharp_max_jobs=None)
    return leaf_spine(
        server=small_server(connection_limit=False),
        servers=4,
        switch=replace(switch, **limits),
        fabric_link=links.IB_NDR,
    )


def test_exhausted_trees_make_later_communicators_fall_back_to_ncclS_next_choice():
    # one streaming tree per switch (Quantum HDR): RAIL0_ALL takes leaf0, leaf1 and a spine; RAIL0_SOME
    # needs leaf0 again -> falls back; RAIL1_ALL takes leaf2, leaf3 and the other spine; RAIL1_ONE_LEAF
    # needs leaf2 -> falls back
    topo = limited_fabric(sharp_max_trees=1)
    groups = [RAIL0_ALL, RAIL0_SOME, RAIL1_ALL, RAIL1_ONE_LEAF]
    collectives = [all_reduce(g, 2**26) for g in groups]
    work = Workload.sequence(collectives, nranks=8)
    result = simulate(topo, work, config=SimConfig(collectives=CollectivePolicy(collnet=True)))
    chosen = [r.algorithm for r in result.collectives]
    assert chosen[0] == "collnet" and chosen[2] == "collnet"
    assert chosen[1] != "collnet" and chosen[3] != "collnet"
    # the fallback is what NCCL would pick without CollNet
    for i in (1, 3):
        ctx = LoweringContext(topology=topo, router=Router(topo), rank_gpu=Placement.block(topo, nranks=8).rank_gpu)
        assert chosen[i] == choose(collectives[i], ctx, CollectivePolicy(collnet=False)).algorithm

    # the reason names the switch and the limit; forcing CollNet is an error that says so
    ctx = context(topo)
    assert COLLNET.supported(collectives[0], ctx) is None
    reason = COLLNET.supported(collectives[1], ctx)
    assert "leaf0" in reason and "sharp_max_trees is 1" in reason
    with pytest.raises(ValueError, match="sharp_max_trees"):
        choose(collectives[1], ctx, CollectivePolicy(algorithm="collnet"))
    with pytest.raises(ValueError, match="sharp_max_trees"):
        simulate(topo, work, config=SimConfig(collectives=CollectivePolicy(algorithm="collnet")))


def test_the_job_limit_is_a_limit_of_its_own():
    # no tree limit, one SHARP job per aggregation node: the second communicator on leaf0 falls back
    topo = limited_fabric(sharp_max_jobs=1)
    ctx = context(topo)
    assert COLLNET.supported(all_reduce(RAIL0_ALL), ctx) is None
    reason = COLLNET.supported(all_reduce(RAIL0_SOME), ctx)
    assert "leaf0" in reason and "sharp_max_jobs is 1" in reason
    # with two jobs per node it fits (on the other spine: leaf0 and leaf1 then hold 2 each)
    ctx = context(limited_fabric(sharp_max_jobs=2))
    assert COLLNET.supported(all_reduce(RAIL0_ALL), ctx) is None
    assert COLLNET.supported(all_reduce(RAIL0_SOME), ctx) is None
    first, second = (trees_of(ctx, all_reduce(g))[0] for g in (RAIL0_ALL, RAIL0_SOME))
    assert first.root != second.root  # least-loaded spine first


def test_one_tree_per_port_lets_disjoint_servers_share_switches_but_not_nics():
    # Quantum-2: no switch-wide limit, one tree per port. Servers 0, 2 and servers 1, 3 use
    # different NIC ports of leaf0 / leaf1; their uplinks must differ, so the second takes the other
    # spine. Servers 0 and 3 then find s0's NIC port taken.
    topo = limited_fabric(sharp_max_trees_per_port=1)
    ctx = context(topo)
    first, second, third = all_reduce((0, 4)), all_reduce((2, 6)), all_reduce((0, 6))
    assert COLLNET.supported(first, ctx) is None and COLLNET.supported(second, ctx) is None
    a, b = trees_of(ctx, first)[0], trees_of(ctx, second)[0]
    assert a.leaves == b.leaves and a.root != b.root
    reason = COLLNET.supported(third, ctx)
    assert "leaf0 to s0.nic0" in reason and "sharp_max_trees_per_port is 1" in reason
    # a communicator is all or nothing: after a failure nothing of it is held
    held = sum(sharp_pool(ctx).held.values())
    assert held == 6  # 2 trees x (2 leaves + 1 spine)


def test_a_communicator_gets_trees_for_all_rails_or_none():
    # rail 0 fits, rail 1 does not (leaf2 is full): the partial rail-0 tree is not kept
    topo = limited_fabric(sharp_max_trees=1)
    ctx = context(topo)
    assert COLLNET.supported(all_reduce(RAIL1_ONE_LEAF), ctx) is None  # takes leaf2
    assert COLLNET.supported(all_reduce(range(8)), ctx) is not None  # rails 0 and 1
    pool = sharp_pool(ctx)
    assert sum(pool.held.values()) == 1 and pool.held[trees_of(ctx, all_reduce(RAIL1_ONE_LEAF))[0].root] == 1
    assert COLLNET.supported(all_reduce(RAIL0_ALL), ctx) is None  # leaf0, leaf1 still free


def test_pool_is_per_simulation():
    # a fresh LoweringContext (a new simulate() call) starts with every switch free
    topo = limited_fabric(sharp_max_trees=1)
    for _ in range(2):
        ctx = context(topo)
        assert isinstance(sharp_pool(ctx), SharpPool) and not sharp_pool(ctx).held
        assert COLLNET.supported(all_reduce(RAIL0_ALL), ctx) is None
        assert COLLNET.supported(all_reduce(RAIL0_SOME), ctx) is not None


# ------------------------------------------------------------------------------------------------
# verification on buffers
# ------------------------------------------------------------------------------------------------

VERIFY = {
    "fat-tree across pods": (
        lambda: fat_tree(server=small_server(), servers=8, switch=small_switch(), fabric_link=links.IB_NDR),
        tuple(range(16)),
    ),
    "fat-tree, 2 planes": (
        lambda: fat_tree(server=small_server(), servers=8, switch=small_switch(), fabric_link=links.IB_NDR, planes=2),
        tuple(range(16)),
    ),
    # 2 servers x 4 GPUs on one leaf per rail; rank q of server 1 is GPU 0 then GPU 2: local index 0
    # pairs the two GPU 0s (one leaf, a tree of height 0), index 1 pairs GPU 1 with GPU 2 (rails 1
    # and 2: two leaves under a spine, height 1) - trees of different heights in one schedule
    "mixed heights": (
        lambda: leaf_spine(
            server=small_server(gpus=4, nics=4), servers=2, switch=small_switch(radix=8), fabric_link=links.IB_NDR
        ),
        (0, 1, 4, 6),
    ),
    "dgx-a100 x60 fat-tree": (lambda: build_system("dgx-a100", nodes=60, topology="fat-tree"), None),
}


@pytest.mark.parametrize("case", list(VERIFY))
@pytest.mark.parametrize("nchannels", [1, 3])
def test_collnet_computes_its_all_reduce_on_every_tree_shape(case, nchannels):
    build, group = VERIFY[case]
    topo = build()
    group = group or tuple(range(topo.num_gpus))
    ctx = context(topo)
    coll = all_reduce(group)
    assert COLLNET.supported(coll, ctx) is None
    heights = {t.height for t in trees_of(ctx, coll)}
    if case == "mixed heights":
        assert heights == {0, 1}
    program = COLLNET.program(coll, ctx, nchannels=nchannels)
    assert count_wrong(coll, program) == 0
    assert wire_mismatch(coll, program, COLLNET.lower(coll, ctx, protocol="Simple", nchannels=nchannels)) == {}
