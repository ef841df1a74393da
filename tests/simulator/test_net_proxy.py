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
    # 2x DGX A100 (AMD hosts: x2) tree LL128 all_reduce of 2 MiB on 16 channels = 32 (tree, channel) chains,
    # 4 headed by each GPU, 2 network connections each (8); chunk 17,280 B (as above, 2 MiB: 1 < 5.6),
    # 64 KiB a chain: 4 steps a connection, the latency pays the first: 8 x 3 = 24 steps of 2 x 1.0 us
    ctx = context("dgx-a100", 2)
    reduce = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=2 * MIB, group=tuple(range(16)))
    schedule = ALGORITHMS["tree"].lower_on(reduce, ctx, protocol="LL128", nchannels=16, comm_channels=16)
    amd_step_s = nccl_model.proxy_step_s(protocol="LL128", cpu_vendor="amd")
    assert amd_step_s == pytest.approx(2 * step_s)
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

    # 2 MiB tree LL128 (the choice either way: the tuner does not see the proxy): the busiest proxy's
    # 24 x 2.0 us = 48 us outlasts the transfer, so the step is latency + path + 48 us: the floor less the
    # transfer it hides is the difference, whatever the transfer
    on, off = time_us("2M"), time_us("2M", net_proxy=False)
    assert on > off
    # doubling the step cost (1.0 -> 2.0 us, Intel) doubles the 48 us floor: the time grows by exactly 48 us
    assert time_us("2M", proxy_step_us=2.0) - on == pytest.approx(48.0, abs=1e-6)
    # a one-chunk tree (8 B): nothing beyond the latency, the same time
    assert time_us("8") == time_us("8", net_proxy=False)


def test_config_checks_the_proxy_fields():
    with pytest.raises(ValueError, match="net_proxy"):
        SimConfig(net_proxy="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="proxy_step_us"):
        SimConfig(proxy_step_us=-1.0)
    with pytest.raises(ValueError, match="ring_net_floor"):
        SimConfig(ring_net_floor="busiest")  # type: ignore[arg-type]
