"""The network proxy model (nccl_model, Step.proxy_s): NCCL's chunking, the busiest proxy's steps, the
floor it puts on a step in both engines, and its ablation switch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.collectives import ALGORITHMS, LoweringContext, nccl_model
from simulator.config import SimConfig
from simulator.placement import Placement
from simulator.studies.nccl_tests import run_bench
from topologies.presets import build_system
from topologies.routing import Router
from workloads.collectives import Collective, CollectiveKind

MIB = 1 << 20


def context(system: str, nodes: int) -> LoweringContext:
    topo = build_system(system, nodes=nodes)
    gpn = len(topo.servers[0].gpus)
    placement = Placement.block(topo, nranks=gpn * nodes, gpus_per_node=gpn)
    return LoweringContext(topology=topo, router=Router(topo), rank_gpu=placement.rank_gpu)


def test_chunk_and_step_counts_follow_nccls_chunking():
    # LL 512 KiB / 8 steps / 2 = 32 KiB; LL128 4,915,200 / 8 x 15/16 = 576,000; Simple 4 MiB / 8 = 512 KiB
    assert [nccl_model.step_payload_bytes(p) for p in ("LL", "LL128", "Simple")] == [32768, 576000, 524288]
    # tree LL128, 2 x 8 ranks, 32 channels, 4 MiB: 576,000 halves to 72,000 (first loop stops at 128 KiB);
    # 4 MiB / (32 x 72,000) = 1 < 2.8 x 16 / 8 = 5.6, so 36,000, then 3 < 5.6, so 18,000; grain 1,920: 17,280
    assert nccl_model.tree_chunk_bytes(protocol="LL128", nbytes=4 * MIB, nchannels=32, nnodes=2, ppn=8) == 17280
    # a large enough tree keeps the whole step: 1 GiB / (32 x 576,000) = 58 >= 22.4
    assert nccl_model.tree_chunk_bytes(protocol="LL128", nbytes=1 << 30, nchannels=32, nnodes=2, ppn=8) == 576000
    # ring Simple all_reduce, 16 ranks, 16 channels: a loop moves 16 x 16 x 2 MiB = 512 MiB in 30 steps of
    # 2 slices; 1 GiB takes 2 loops: 30 x 2 x 2 = 120 sends a connection
    steps = nccl_model.ring_proxy_steps(
        kind_value="all_reduce", protocol="Simple", nbytes=1 << 30, nchannels=16, nranks=16
    )
    assert steps == 120
    # broadcast: one step a loop of 16 x 512 KiB
    steps = nccl_model.ring_proxy_steps(
        kind_value="broadcast", protocol="Simple", nbytes=16 * MIB, nchannels=16, nranks=16
    )
    assert steps == 2


def test_busiest_proxy_of_a_ring_and_a_tree():
    step_s = nccl_model.proxy_step_s(protocol="LL128", cpu_vendor="intel")
    # 2x HGX B200 ring all_gather, LL128, 16 channels, 2 MiB: one loop, 15 steps a network connection, each
    # at least one round trip (ring_net_step_s), whatever the connections a GPU has
    ctx = context("hgx-b200", 2)
    gather = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=2 * MIB, group=tuple(range(16)))
    schedule = ALGORITHMS["ring"].lower_on(gather, ctx, protocol="LL128", nchannels=16, comm_channels=16)
    round_trip_s = nccl_model.ring_net_step_s(protocol="LL128", cpu_vendor="intel")
    assert round_trip_s == pytest.approx(nccl_model.NET_STEP_US_LL128 * 1e-6)
    # one loop: the round trips, then the connection's transfer: 2 MiB / 16 channels = 131,072 B a channel,
    # 15/16 of it (122,880 B) a connection, 131,072 B on the wire (LL128 x 128/120) at 20 GB/s = 6.5536 us
    assert schedule.steps[0].proxy_s == pytest.approx(15 * round_trip_s + 131072 / 20e9)
    # the round trips alone (the earlier model, ring_net_floor="round_trip")
    bare = ALGORITHMS["ring"].lower_on(
        gather, replace(ctx, ring_net_floor="round_trip"), protocol="LL128", nchannels=16, comm_channels=16
    )
    assert bare.steps[0].proxy_s == pytest.approx(15 * round_trip_s)
    # two QPs a connection halve the transfer's part (NCCL_IB_QPS_PER_CONNECTION)
    two = ALGORITHMS["ring"].lower_on(
        gather, replace(ctx, qps_per_connection=2), protocol="LL128", nchannels=16, comm_channels=16
    )
    assert two.steps[0].proxy_s == pytest.approx(15 * round_trip_s + 131072 / 40e9)
    # LL: no floor beyond NCCL's latency (host-memory send buffer polled by the proxy, netOverhead per step)
    schedule = ALGORITHMS["ring"].lower_on(gather, ctx, protocol="LL", nchannels=16, comm_channels=16)
    assert schedule.steps[0].proxy_s == 0
    # the earlier model (ring_net_floor="proxy"): each GPU enters 2 channels and leaves 2 across servers
    # (4 connections), 15 steps each; the latency pays one connection's 15: 45 steps of the proxy beyond
    serial = replace(ctx, ring_net_floor="proxy")
    schedule = ALGORITHMS["ring"].lower_on(gather, serial, protocol="LL128", nchannels=16, comm_channels=16)
    assert schedule.steps[0].proxy_s == pytest.approx(45 * step_s)
    # 2x DGX A100 (AMD hosts: x2) tree LL128 all_reduce of 2 MiB on 16 channels, one chain a channel (channels
    # 0-7 on tree 0, 8-15 on tree 1, channel c on rail c mod 8): each GPU heads 2 chains, 2 network connections
    # each (4); chunk on 16 channels: 576,000 -> 72,000 (2 MiB / (16 x 144,000) = 0.9 < 22.4, then 128 KiB
    # stops it), 1.8 < 5.6 -> 36,000, 3.6 < 5.6 -> 18,000; grain 1,920: 17,280 B. 128 KiB a chain: 8 steps a
    # connection, the latency pays the first: 4 x 7 = 28 steps of 2 x 1.0 us = 56 us (the busiest proxy)
    ctx = context("dgx-a100", 2)
    reduce = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=2 * MIB, group=tuple(range(16)))
    busy = replace(ctx, tree_net_floor=False)
    schedule = ALGORITHMS["tree"].lower_on(reduce, busy, protocol="LL128", nchannels=16, comm_channels=16)
    amd_step_s = nccl_model.proxy_step_s(protocol="LL128", cpu_vendor="amd")
    assert amd_step_s == pytest.approx(2 * step_s)
    assert schedule.steps[0].proxy_s == pytest.approx(28 * amd_step_s)
    # the chunks' pipeline through the 2 crossings (up, down) is longer: round trip 2 x 3.5 = 7 us (AMD), a
    # chunk's 17,280 B of payload at the chain's payload cap 20 / 4 = 5 GB/s (Ampere perChMaxTreeLL128Bw)
    # 3.456 us: 2 x (7 + 3.456) + 7 x 7 = 69.912 us
    schedule = ALGORITHMS["tree"].lower_on(reduce, ctx, protocol="LL128", nchannels=16, comm_channels=16)
    assert schedule.steps[0].proxy_s == pytest.approx(69.912e-6)
    # the earlier model (tree_chains="pair", no pipeline floor): 32 chains, 4 headed by each GPU (8 connections);
    # on 32 channels the chunk is 17,280 B too (0.9 < 5.6 at 36,000), 64 KiB a chain: 4 steps, 8 x 3 = 24 steps
    pair = replace(busy, tree_chains="pair")
    schedule = ALGORITHMS["tree"].lower_on(reduce, pair, protocol="LL128", nchannels=16, comm_channels=16)
    assert schedule.steps[0].proxy_s == pytest.approx(24 * amd_step_s)
    # one server: no network connection, no proxy
    ctx = context("dgx-a100", 1)
    local = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=2 * MIB, group=tuple(range(8)))
    assert (
        ALGORITHMS["ring"].lower_on(local, ctx, protocol="LL128", nchannels=16, comm_channels=16).steps[0].proxy_s == 0
    )
    # the switch off: none anywhere
    ctx = replace(context("dgx-a100", 2), net_proxy=False)
    assert (
        ALGORITHMS["tree"].lower_on(reduce, ctx, protocol="LL128", nchannels=16, comm_channels=16).steps[0].proxy_s == 0
    )


@pytest.mark.parametrize("network_model", ["flow", "analytical"])
def test_the_floor_replaces_the_transfer_when_the_proxy_is_slower(network_model):
    def time_us(size: str, **fields: object) -> float:
        config = SimConfig(network_model=network_model, **fields)
        return run_bench("all_reduce", system="dgx-a100", nodes=2, minbytes=size, maxbytes=size, config=config)[
            0
        ].time_us

    # 2 MiB tree LL128 (the choice either way: the tuner does not see the proxy), the busiest proxy alone
    # (tree_net_floor off): its 28 x 2.0 us = 56 us outlasts the transfer (128 KiB a chain at 5 GB/s, 28 us), so
    # the step is latency + path + 56 us: the floor less the transfer it hides is the difference, whatever it is
    on, off = time_us("2M", tree_net_floor=False), time_us("2M", net_proxy=False)
    assert on > off
    # doubling the step cost (1.0 -> 2.0 us, Intel) doubles the 56 us floor: the time grows by exactly 56 us
    assert time_us("2M", tree_net_floor=False, proxy_step_us=2.0) - on == pytest.approx(56.0, abs=1e-6)
    # the chunks' pipeline (69.912 us, test above) is longer still: 13.912 us more
    assert time_us("2M") - on == pytest.approx(69.912 - 56.0, abs=1e-6)
    # a one-chunk tree (8 B) is LL: no round trip floor, nothing beyond the latency, the same time
    assert time_us("8") == time_us("8", net_proxy=False)


def test_config_checks_the_proxy_fields():
    with pytest.raises(ValueError, match="net_proxy"):
        SimConfig(net_proxy="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="proxy_step_us"):
        SimConfig(proxy_step_us=-1.0)
    with pytest.raises(ValueError, match="ring_net_floor"):
        SimConfig(ring_net_floor="busiest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tree_chains"):
        SimConfig(tree_chains="double")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tree_net_floor"):
        SimConfig(tree_net_floor="on")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tree_copies"):
        SimConfig(tree_copies="on")  # type: ignore[arg-type]


def test_tree_pipeline_floor_by_hand():
    # Intel host, LL128: round trip 3.5 us. 4 servers: the double binary tree is 2 deep, 4 crossings. 3 chunks
    # of 72,000 B of payload at 7.25 GB/s: t = 9.931 us > 3.5, so 4 x (3.5 + t) + 2 x t
    t = 72000 / 7.25e9
    floor = nccl_model.tree_net_floor_s(
        protocol="LL128",
        cpu_vendor="intel",
        chain_bytes=3 * 72000,
        chunk_bytes=72000,
        crossings=4,
        chain_bytes_per_s=7.25e9,
    )
    assert floor == pytest.approx(4 * (3.5e-6 + t) + 2 * t)
    # a chain smaller than a chunk writes only its own bytes: 1 chunk of 9,600 B at 5 GB/s, 2 crossings:
    # 2 x (3.5 + 1.92) = 10.84 us
    assert nccl_model.tree_net_floor_s(
        protocol="LL128", cpu_vendor="intel", chain_bytes=9600, chunk_bytes=72000, crossings=2, chain_bytes_per_s=5e9
    ) == pytest.approx(10.84e-6)
    # LL and Simple keep no round trip (ring_net_step_s): no floor
    for protocol in ("LL", "Simple"):
        assert (
            nccl_model.tree_net_floor_s(
                protocol=protocol,
                cpu_vendor="intel",
                chain_bytes=1 << 20,
                chunk_bytes=1 << 15,
                crossings=2,
                chain_bytes_per_s=5e9,
            )
            == 0.0
        )


def test_tree_chains_follow_nccls_channel_duplication():
    # 16 channels on 2 DGX A100: one chain a channel; channels 0-7 on tree 0 (root server 0), 8-15 on tree 1
    # (root server 1). Each chain crosses twice (up to its root, back down): 32 crossings, 16 from server 0 (8 up
    # on tree 1, 8 down on tree 0)
    ctx = context("dgx-a100", 2)
    reduce = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=2 * MIB, group=tuple(range(16)))
    tree = ALGORITHMS["tree"]
    layout = ctx.layout(reduce.group)
    assert [tree._tree_rail(ctx, layout, k, 16)[0] for k in range(16)] == [0] * 8 + [1] * 8
    step = tree.lower_on(reduce, ctx, protocol="LL128", nchannels=16, comm_channels=16).steps[0]
    crossing = (step.src < 8) != (step.dst < 8)
    assert int(crossing.sum()) == 32  # 16 chains x (up + down)
    assert int((crossing & (step.src < 8)).sum()) == 16
    # a launch of 4 of the 16 channels runs tree 0 alone (channels 0-3)
    assert {tree._tree_rail(ctx, layout, k, 16)[0] for k in range(4)} == {0}
    # the earlier model: 2 chains a channel, alternating trees
    pair = replace(ctx, tree_chains="pair")
    assert [tree._tree_rail(pair, layout, k, 16) for k in range(4)] == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_min_ctas_channels_copy_the_first_ones():
    # NCCL_MIN_CTAS=24 on 8 DGX H100 (8 NICs): the search's 8 channels doubled into 16 (0-7 tree 0, 8-15 tree 1),
    # then channels 16-23 copied from 0-7 (connect.cc copyChannels): 16 chains on tree 0 and 8 on tree 1, channel
    # c on NIC c mod 8
    ctx = context("dgx-h100", 8)
    reduce = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=32 * MIB, group=tuple(range(64)))
    tree = ALGORITHMS["tree"]
    layout = ctx.layout(reduce.group)
    assert [tree._tree_rail(ctx, layout, k, 24) for k in range(24)] == (
        [(0, g) for g in range(8)] + [(1, g) for g in range(8, 16)] + [(0, g) for g in range(8)]
    )
    # the earlier model: halves of the 24, 12 a tree
    even = replace(ctx, tree_copies=False)
    assert [tree._tree_rail(even, layout, k, 24)[0] for k in range(24)] == [0] * 12 + [1] * 12
    # the copies share the search's tree ceiling (tuning.cc: graphs[TREE]->nChannels, 8): 24 chains at 16/24 of
    # the 16 chains' quarter, the same sum; without copies each of the 24 keeps its quarter
    cap16 = tree._chain_cap(ctx, reduce, "LL128", 16)
    assert tree._chain_cap(ctx, reduce, "LL128", 24) * 24 == pytest.approx(cap16 * 16)
    assert tree._chain_cap(even, reduce, "LL128", 24) == pytest.approx(cap16)
    # fewer channels than the doubled set (NCCL_MAX_CTAS=8) keep a quarter each, and run tree 0 alone
    assert tree._chain_cap(ctx, reduce, "LL128", 8) == pytest.approx(cap16)
    assert {tree._tree_rail(ctx, layout, k, 8)[0] for k in range(8)} == {0}
