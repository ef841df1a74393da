"""Every algorithm computes the collective it claims (nccl-tests' #wrong == 0), and the timed
flows carry exactly the bytes the verified program moves between each pair of ranks."""

from __future__ import annotations

import pytest

from simulator.collectives import ALGORITHMS, LoweringContext
from simulator.placement import Placement
from simulator.verify import count_wrong, wire_mismatch
from topologies.presets import build_system
from topologies.routing import Router
from workloads.collectives import Collective, CollectiveKind


def context(system, nodes, gpn):
    topo = build_system(system, nodes=nodes)
    placement = Placement.block(topo, nranks=nodes * gpn, gpus_per_node=gpn)
    return LoweringContext(topology=topo, router=Router(topo), rank_gpu=placement.rank_gpu)


LAYOUTS = [
    ("dgx-h100", 1, 1),
    ("dgx-h100", 1, 2),
    ("dgx-h100", 1, 3),
    ("dgx-h100", 1, 8),
    ("dgx-h100", 2, 3),
    ("dgx-h100", 3, 1),
    ("dgx-h100", 4, 1),
    ("dgx-h100", 3, 2),
    ("dgx-a100", 2, 8),
    ("pcie-rtx4090", 1, 5),
]
CASES = [(name, kind) for name, algo in ALGORITHMS.items() for kind in sorted(algo.kinds, key=lambda k: k.value)]


@pytest.mark.parametrize("system,nodes,gpn", LAYOUTS)
@pytest.mark.parametrize("algorithm,kind", CASES, ids=[f"{a}-{k.value}" for a, k in CASES])
@pytest.mark.parametrize("nchannels", [1, 3])
@pytest.mark.parametrize("uneven", [True, False])
def test_schedule_computes_its_collective(system, nodes, gpn, algorithm, kind, nchannels, uneven):
    ctx = context(system, nodes, gpn)
    n = nodes * gpn
    algo = ALGORITHMS[algorithm]
    if kind is CollectiveKind.SENDRECV and n < 2:
        pytest.skip("sendrecv needs two ranks")
    # 4-byte elements, n pieces of 37 elements; uneven: + 5n + 1 more elements where the
    # collective allows a size that does not split into n equal pieces
    even = kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL)
    size = 4 * n * 37 + (0 if even or not uneven else 4 * 5 * n + 4)
    coll = Collective(kind=kind, nbytes=size, group=tuple(range(n)), root=min(1, n - 1))
    if algo.supported(coll, ctx):
        pytest.skip(algo.supported(coll, ctx))
    program = algo.program(coll, ctx, nchannels=nchannels)
    assert count_wrong(coll, program) == 0
    # ring and tree launch fewer channels for small sizes (NCCL's per-size launch): their schedule on
    # exactly these channels, and what lower() launches against the program on its channel count
    exact = getattr(algo, "lower_on", None)
    schedule = (
        exact(coll, ctx, protocol="Simple", nchannels=nchannels, comm_channels=nchannels)
        if exact
        else algo.lower(coll, ctx, protocol="Simple", nchannels=nchannels)
    )
    assert wire_mismatch(coll, program, schedule) == {}
    launched = algo.lower(coll, ctx, protocol="Simple", nchannels=nchannels)
    assert wire_mismatch(coll, algo.program(coll, ctx, nchannels=launched.nchannels), launched) == {}


def test_a_broken_program_is_caught():
    # drop the last step of a ring all_reduce: some ranks miss a chunk of the sum -> #wrong > 0
    ctx = context("dgx-h100", 1, 4)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=4 * 64, group=(0, 1, 2, 3))
    program = ALGORITHMS["ring"].program(coll, ctx, nchannels=2)
    assert count_wrong(coll, program[:-1]) > 0
    schedule = ALGORITHMS["ring"].lower(coll, ctx, protocol="Simple", nchannels=2)
    assert wire_mismatch(coll, program[:-1], schedule) != {}


def test_collnet_over_several_leaves_aggregates_at_a_spine():
    # 3 small servers (2 GPUs, 2 NICs) on SHARP-capable radix-4 switches, one server per leaf:
    # each rail's leaves differ, so the SHARP tree goes leaf -> spine (root) -> leaf
    from dataclasses import replace

    from topologies import devices, links
    from topologies.fat_tree import leaf_spine
    from topologies.node import dgx_h100

    server = replace(dgx_h100(), gpus=2, nics=2, pcie_switches=2)
    switch = replace(devices.QUANTUM2_NDR, name="tiny_sharp", radix=4)
    topo = leaf_spine(server=server, servers=3, switch=switch, fabric_link=links.IB_NDR, rail_optimised=False)
    ctx = LoweringContext(topology=topo, router=Router(topo), rank_gpu=tuple(range(6)))
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=4 * 6 * 37 + 8, group=tuple(range(6)))
    algo = ALGORITHMS["collnet"]
    assert algo.supported(coll, ctx) is None
    trees = [algo._tree(coll, ctx, q) for q, _, _ in algo._plan(coll, ctx, 2)]
    assert all(len(set(tree.leaves)) == 3 and tree.root not in tree.leaves for tree in trees)
    program = algo.program(coll, ctx, nchannels=2)
    assert count_wrong(coll, program) == 0
    assert wire_mismatch(coll, program, algo.lower(coll, ctx, protocol="Simple", nchannels=2)) == {}
