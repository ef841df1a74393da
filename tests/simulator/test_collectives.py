"""Collective schedules and NCCL's model: ring bytes per rank (closed forms), NCCL latencies, tuner
choices, NVLSTree's ceiling and start-up, point-to-point channels (sendrecv, all-to-all)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.api import simulate
from simulator.collectives import ALGORITHMS, Algorithm, LoweringContext, nccl_model
from simulator.collectives.base import ring_channels, search_ring_channels
from simulator.collectives.nvls_tree import tree_network_hops
from simulator.collectives.p2p import comm_p2p_channels, op_channels, pxn_relayed
from simulator.collectives.tuner import NCCL_FUNCTIONS, CollectivePolicy, choose, parse_selection
from simulator.config import SimConfig
from simulator.placement import Placement
from simulator.studies.nccl_tests import run_bench
from topologies.presets import build_system
from topologies.routing import Router
from topologies.topology import LinkTier
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import CommTask, Workload

RING = ALGORITHMS["ring"]


def context(system="dgx-h100", nodes=1, gpus_per_node=None):
    topo = build_system(system, nodes=nodes)
    gpn = gpus_per_node or len(topo.servers[0].gpus)
    placement = Placement.block(topo, nranks=gpn * nodes, gpus_per_node=gpn)
    return LoweringContext(topology=topo, router=Router(topo), rank_gpu=placement.rank_gpu)


CASES = [(1, 2), (1, 3), (1, 8), (2, 8), (3, 5)]  # (nodes, gpus per node): includes odd rank counts


def test_every_registered_algorithm_has_the_whole_interface():
    # the tuner, simulate() and the verifier call these on every registered algorithm, never via getattr;
    # Hierarchical, HalvingDoubling and Pairwise are NCCL-foreign (forced only), the rest NCCL's choices
    for name, algorithm in ALGORITHMS.items():
        assert isinstance(algorithm, Algorithm), name
    manual = {name for name, a in ALGORITHMS.items() if not a.auto}
    assert manual == {"hierarchical", "halving_doubling", "pairwise"}
    # own channel counts: NVLS's nvlsChannels and the point-to-point p2pnChannels; the others run on the ring's
    topo = build_system("dgx-h100", nodes=2)
    ctx = LoweringContext(topology=topo, router=Router(topo), rank_gpu=tuple(range(16)))
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(16)))
    assert ALGORITHMS["ring"].channels(coll, ctx) is None and ALGORITHMS["tree"].channels(coll, ctx) is None
    assert ALGORITHMS["nvlstree"].channels(coll, ctx) is not None


@pytest.mark.parametrize("nodes,gpn", CASES)
@pytest.mark.parametrize("nchannels", [1, 4, 16])
def test_ring_all_reduce_sends_2_n_minus_1_over_n(nodes, gpn, nchannels):
    ctx = context(nodes=nodes, gpus_per_node=gpn)
    n = nodes * gpn
    # S divisible by n * nchannels * 4 B so every chunk is equal: each rank sends exactly 2(n-1)/n S;
    # S >= nchannels x 32 KiB (512 Simple threads x 64 B) so NCCL launches every channel
    size = n * nchannels * 4 * 10000
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=size, group=tuple(range(n)))
    schedule = RING.lower(coll, ctx, protocol="Simple", nchannels=nchannels)
    expected = 2 * (n - 1) * size // n
    assert set(schedule.bytes_sent_per_rank().values()) == {expected}
    assert set(schedule.bytes_received_per_rank().values()) == {expected}


@pytest.mark.parametrize("kind", [CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER])
@pytest.mark.parametrize("nodes,gpn", CASES)
def test_ring_all_gather_reduce_scatter_send_n_minus_1_over_n(kind, nodes, gpn):
    ctx = context(nodes=nodes, gpus_per_node=gpn)
    n = nodes * gpn
    size = n * 16 * 4 * 333
    coll = Collective(kind=kind, nbytes=size, group=tuple(range(n)))
    schedule = RING.lower(coll, ctx, protocol="Simple", nchannels=16)
    assert set(schedule.bytes_sent_per_rank().values()) == {(n - 1) * size // n}


@pytest.mark.parametrize("kind", [CollectiveKind.BROADCAST, CollectiveKind.REDUCE])
@pytest.mark.parametrize("root", [0, 3])
def test_ring_rooted_pipeline(kind, root):
    # a pipeline of n-1 edges carrying S each: the last rank (broadcast) / the root (reduce) sends nothing
    ctx = context(nodes=1)
    size = 8 * 1024 * 1024
    coll = Collective(kind=kind, nbytes=size, group=tuple(range(8)), root=root)
    sent = RING.lower(coll, ctx, protocol="Simple", nchannels=4).bytes_sent_per_rank()
    assert sum(sent.values()) == 7 * size
    silent = [r for r, b in sent.items() if b == 0]
    assert len(silent) == 1
    if kind is CollectiveKind.REDUCE:
        assert silent == [root]
    received = RING.lower(coll, ctx, protocol="Simple", nchannels=4).bytes_received_per_rank()
    if kind is CollectiveKind.BROADCAST:
        assert received[root] == 0


def test_uneven_sizes_conserve_bytes():
    # 7 ranks, a size that splits unevenly: every byte of every chunk still moves 2(n-1) times in total
    ctx = context(nodes=1, gpus_per_node=7)
    size = 4 * 1_000_003
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=size, group=tuple(range(7)))
    schedule = RING.lower(coll, ctx, protocol="Simple", nchannels=3)
    assert schedule.total_bytes == 2 * (7 - 1) * size


def test_rings_are_rail_aligned_between_servers():
    # on every channel, each inter-server edge except the wrap-around joins GPUs on the same rail
    ctx = context(nodes=4)
    orders = RING.orders(tuple(range(32)), ctx, 16)
    for ring in orders:
        for a, b in zip(ring[:-1], ring[1:]):
            if ctx.server(a) != ctx.server(b):
                assert ctx.local(a) == ctx.local(b)
    # channels spread over NICs: on server 0 each of the 8 entry GPUs is used by 2 of 16 channels
    entries = [ring[0] for ring in orders]
    assert sorted(entries) == sorted(list(range(8)) * 2)


def test_nccl_latency_worked_examples():
    # NCCL model worked numbers (tuning.cc constants):
    # 8 GPUs one node, ring LL: 6.6 + 14 x 0.6 = 15.0 us; ring Simple: 8.4 + 14 x 3.4 = 56.0 us
    assert nccl_model.ring_latency_s(
        kind_value="all_reduce",
        protocol="LL",
        nranks=8,
        nnodes=1,
        ppn=8,
        intra="nvlink",
        cpu_vendor="intel",
        nbytes=8,
        nchannels=16,
    ) == pytest.approx(15.0e-6)
    assert nccl_model.ring_latency_s(
        kind_value="all_reduce",
        protocol="Simple",
        nranks=8,
        nnodes=1,
        ppn=8,
        intra="nvlink",
        cpu_vendor="intel",
        nbytes=8,
        nchannels=16,
    ) == pytest.approx(56.0e-6)
    # 16 ranks on 2 Intel nodes, ring LL: 6.6 + 28 x max(0.6, 1.0) + 2 x 2.7 = 40.0 us
    assert nccl_model.ring_latency_s(
        kind_value="all_reduce",
        protocol="LL",
        nranks=16,
        nnodes=2,
        ppn=8,
        intra="nvlink",
        cpu_vendor="intel",
        nbytes=8,
        nchannels=16,
    ) == pytest.approx(40.0e-6)
    # same in Simple with a large message: (8.4 + 28 x max(3.4, 3 x 1.0) + 2 x 14) x 1.4 = 184.24 us
    assert nccl_model.ring_latency_s(
        kind_value="all_reduce",
        protocol="Simple",
        nranks=16,
        nnodes=2,
        ppn=8,
        intra="nvlink",
        cpu_vendor="intel",
        nbytes=1 << 30,
        nchannels=16,
    ) == pytest.approx(184.24e-6)


def test_tree_latency_counts_nccls_integer_tree_depth():
    # NCCL's log2i (log2 rounded down): 3 servers -> 1, 5 and 7 -> 2, 192 -> 7
    assert [nccl_model.log2i(n) for n in (1, 2, 3, 4, 5, 7, 8, 192)] == [0, 1, 1, 2, 2, 2, 3, 7]
    # Tree LL all_reduce (tuning.cc): 6.8 + 2 (7 x 0.6 + log2i(nNodes) x 5.0) us on servers of 8 H100:
    # 25.2 us on 2 servers and on 3 (log2i(3) = 1), 35.2 us on 4 and on 5 (log2i(5) = 2)
    for nodes, expected_us in ((2, 25.2), (3, 25.2), (4, 35.2), (5, 35.2)):
        ctx = context(nodes=nodes)
        coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 10, group=tuple(range(8 * nodes)))
        latency_s, _ = ALGORITHMS["tree"].estimate(coll, ctx, protocol="LL", nchannels=16)
        assert latency_s == pytest.approx(expected_us * 1e-6, rel=1e-12)


def test_alltoall_latency_sums_peers_under_ll_and_overlaps_them_under_simple():
    ctx = context(nodes=2)  # 2x DGX H100: NCCL's table holds on Hopper (no platform hop extra)
    pairwise = ALGORITHMS["pairwise"]
    for nranks, nodes in ((8, 1), (16, 2)):
        c = Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=nranks * 1024, group=tuple(range(nranks)))
        ll = pairwise.estimate(c, ctx, protocol="LL", nchannels=16)[0]
        simple = pairwise.estimate(c, ctx, protocol="Simple", nchannels=16)[0]
        if nodes == 1:
            # LL 6.6 + 7 peers x 0.6 = 10.8 us; Simple 8.4 + the slowest peer's 3.4 = 11.8 us
            assert (ll, simple) == (pytest.approx(10.8e-6), pytest.approx(11.8e-6))
        else:
            # 8 peers across the network: LL 6.6 + 8 x 2.7 + 7 x 0.6 = 32.4 us; Simple 8.4 + 14 = 22.4 us
            assert (ll, simple) == (pytest.approx(32.4e-6), pytest.approx(22.4e-6))


def test_tuner_picks_ll_small_simple_large_and_obeys_overrides():
    ctx = context(nodes=1)
    small = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=tuple(range(8)))
    large = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8 << 30, group=tuple(range(8)))
    assert choose(small, ctx).protocol == "LL"
    assert choose(large, ctx).protocol == "Simple"
    forced = choose(small, ctx, CollectivePolicy(protocol="Simple", nchannels=4))
    assert (forced.protocol, forced.nchannels) == ("Simple", 4)
    pcie = context(system="pcie-rtx4090")
    with pytest.raises(ValueError, match="LL128"):
        choose(small, pcie, CollectivePolicy(protocol="LL128"))
    with pytest.raises(ValueError, match="algorithm"):
        CollectivePolicy(algorithm="bogus")
    with pytest.raises(ValueError, match="channels"):
        CollectivePolicy(nchannels=0)


def test_nccl_environment_maps_to_policy():
    env = {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "simple",
        "NCCL_NVLS_ENABLE": "0",
        "NCCL_MIN_CTAS": "24",
        "NCCL_IB_QPS_PER_CONNECTION": "2",
        "NCCL_MAX_NCHANNELS": "32",
    }
    policy = CollectivePolicy.from_environment(env)
    assert (policy.nvls, policy.min_channels, policy.max_channels, policy.qps_per_connection) == (False, 24, 32, 2)
    assert {policy.algorithms.names(kind) for kind in NCCL_FUNCTIONS.values()} == {frozenset({"ring"})}
    assert {policy.protocols.names(kind) for kind in NCCL_FUNCTIONS.values()} == {frozenset({"Simple"})}
    # a command-line option wins over the environment
    assert CollectivePolicy.from_environment(env, protocol="LL").protocol == "LL"
    # NCCL_MIN_CTAS=24 raises the default 16 channels of a DGX H100 to 24
    ctx = context(nodes=2)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 30, group=tuple(range(16)))
    assert choose(coll, ctx, CollectivePolicy.from_environment({"NCCL_MIN_CTAS": "24"})).nchannels == 24
    assert CollectivePolicy.from_environment({"NCCL_COLLNET_ENABLE": "1"}).collnet
    for bad in (
        {"NCCL_ALGO": "Ring,Hypercube"},
        {"NCCL_ALGO": "allgatherv:ring"},
        {"NCCL_PROTO": "LL256"},
        {"NCCL_ALGO": "ring;tree"},
        {"NCCL_MIN_NCHANNELS": "many"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CollectivePolicy.from_environment(bad)


def test_nccl_algo_and_proto_lists_exclusions_and_functions():
    # NCCL's syntax (2.24+): a default list, then function:list parts that override it for one function
    sel = parse_selection("NCCL_ALGO", "Ring,TREE;allgather:^nvls;AllReduce:nvls")
    assert sel.names(CollectiveKind.BROADCAST) == {"ring", "tree"}
    assert sel.names(CollectiveKind.ALL_GATHER) == {"ring", "tree", "nvlstree", "pat", "collnet"}
    assert sel.names(CollectiveKind.ALL_REDUCE) == {"nvls"}
    # NCCL does not tune point-to-point operations, so NCCL_ALGO leaves them alone
    assert sel.names(CollectiveKind.ALL_TO_ALL) is None and sel.names(CollectiveKind.SENDRECV) is None
    # CollNetDirect is the CollNet modelled here; CollNetChain is not modelled, so it allows nothing
    assert parse_selection("NCCL_ALGO", "collnetchain").names(CollectiveKind.ALL_REDUCE) == frozenset()
    assert parse_selection("NCCL_PROTO", "^LL128").names(CollectiveKind.REDUCE) == {"LL", "Simple"}
    # "^" alone excludes nothing (NCCL starts from everything enabled)
    assert parse_selection("NCCL_PROTO", "allreduce:^").names(CollectiveKind.ALL_REDUCE) == {"LL", "LL128", "Simple"}


def test_nccl_algo_and_proto_restrict_the_tuner_as_in_nccl():
    ctx = context()
    big = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8 << 30, group=tuple(range(8)))
    env = CollectivePolicy.from_environment
    # one DGX H100: NVLS by default; excluding it leaves what NCCL_NVLS_ENABLE=0 leaves (NVLSTree needs servers)
    assert choose(big, ctx).algorithm == "nvls"
    assert choose(big, ctx, env({"NCCL_ALGO": "^NVLS"})) == choose(big, ctx, CollectivePolicy(nvls=False))
    assert choose(big, ctx, env({"NCCL_ALGO": "allgather:^nvls"})).algorithm == "nvls"  # another function's
    # excluding LL128 leaves the cheaper of LL and Simple at every size
    for nbytes in (4 << 10, 1 << 20, 4 << 20, 64 << 20):
        coll = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=nbytes, group=tuple(range(8)))
        got = choose(coll, ctx, env({"NCCL_PROTO": "^LL128"}))
        each = [choose(coll, ctx, CollectivePolicy(protocol=p)) for p in ("LL", "Simple")]
        assert got == min(each, key=lambda c: c.predicted_s)
    # an alltoall is point-to-point: NCCL_ALGO=Tree does not touch it, but leaves all_gather nothing
    a2a = Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=1 << 20, group=tuple(range(8)))
    assert choose(a2a, ctx, env({"NCCL_ALGO": "Tree"})) == choose(a2a, ctx)
    coll = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=1 << 20, group=tuple(range(8)))
    with pytest.raises(ValueError, match="NCCL_ALGO: 'Tree' leaves all_gather of 1048576 B only tree"):
        choose(coll, ctx, env({"NCCL_ALGO": "Tree"}))
    # --algo / --proto win over the environment
    assert choose(coll, ctx, env({"NCCL_ALGO": "Tree"}, algorithm="ring")).algorithm == "ring"
    assert choose(big, ctx, env({"NCCL_PROTO": "LL"}, protocol="Simple")).protocol == "Simple"
    # NCCL_PROTO naming LL128 turns it on where NCCL keeps it off by default (PCIe only: LL and Simple)
    pcie = context(system="pcie-rtx4090")
    small = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(8)))
    assert choose(small, pcie).protocol != "LL128"
    assert choose(small, pcie, env({"NCCL_PROTO": "LL128"})).protocol == "LL128"


def test_an_option_replaces_the_variables_it_overrides():
    # --proto replaces NCCL_PROTO (tuner.OVERRIDES), which is then not read: NCCL_PROTO=^LL leaves LL128
    # allowed, but cannot turn it on for --proto LL128 where NCCL keeps it off (PCIe: LL and Simple)
    policy = CollectivePolicy.from_environment({"NCCL_PROTO": "^LL"}, protocol="LL128")
    assert policy.protocols is None and policy.protocol == "LL128"
    small = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(8)))
    with pytest.raises(ValueError, match="protocol: 'LL128' is not available on this system"):
        choose(small, context(system="pcie-rtx4090"), policy)


def test_explained_bench_rows_show_the_tuners_minimum():
    # each row's choice is the candidate with the smallest estimate, time = latency + size / algbw
    config = SimConfig(collectives=CollectivePolicy(nvls=False))
    rows = run_bench("all_reduce", nodes=2, minbytes="4K", maxbytes="1G", stepfactor=64, config=config, explain=True)
    for row in rows:
        weighed = [c for c in row.candidates if c.skipped is None]
        best = min(weighed, key=lambda c: c.predicted_s)
        # (the estimate uses the communicator's channels; small sizes then launch fewer, as NCCL's enqueue does)
        assert (best.algorithm, best.protocol) == (row.algorithm, row.protocol) and best.nchannels >= row.channels
        reasons = {c.algorithm: c.skipped for c in row.candidates if c.protocol is None}
        assert reasons["nvlstree"] == "disabled (NCCL_NVLS_ENABLE=0)" and "COLLNET" in reasons["collnet"]
    plain = run_bench("all_reduce", nodes=2, minbytes="4K", maxbytes="1G", stepfactor=64, config=config)
    assert [r.candidates for r in plain] == [()] * len(rows)
    assert [replace(r, candidates=()) for r in rows] == plain


def test_pat_is_considered_by_the_tuner_without_error():
    """One GPU per server on 4 servers: PAT runs all_gather there, so the tuner estimates it (NCCL's
    latency view) next to ring; the choice must come back whatever it is."""
    ctx = context(nodes=4, gpus_per_node=1)
    for size in (1 << 10, 1 << 26):
        choice = choose(Collective(kind=CollectiveKind.ALL_GATHER, nbytes=size, group=(0, 1, 2, 3)), ctx)
        assert choice.algorithm in ("ring", "pat") and choice.predicted_s > 0
    # NCCL's PAT latency (tuning.cc): 8.0 + log2i(nNodes) x NET/tree/Simple 14 / 3.5 + 2.8 x nRanks
    # = 8.0 + 2 x 4.0 + 2.8 x 4 = 27.2 us; on 3 servers (log2i(3) = 1) 8.0 + 4.0 + 2.8 x 3 = 20.4 us
    coll = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=1 << 20, group=(0, 1, 2, 3))
    latency_s, _ = ALGORITHMS["pat"].estimate(coll, ctx, protocol="Simple", nchannels=1)
    assert latency_s == pytest.approx(27.2e-6, rel=1e-12)
    coll = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=3 << 20, group=(0, 1, 2))
    latency_s, _ = ALGORITHMS["pat"].estimate(coll, context(nodes=3, gpus_per_node=1), protocol="Simple", nchannels=1)
    assert latency_s == pytest.approx(20.4e-6, rel=1e-12)


# ---- channels NCCL launches per size (enqueue.cc "Ring/Tree channel tuning") -------------------


def _nccl_channel_loop(nbytes, nchannels, threads, threshold):
    """NCCL's loop, restated: drop a channel while nbytes < channels x threads x threshold."""
    nc = nchannels
    while nbytes < nc * threads * threshold and nc >= 2:
        nc -= 1
    return nc


def test_launched_channels_by_hand():
    # ring LL on 8 ranks: 8 B x 8 ranks per thread x 512 threads = 32 KiB per channel
    ring_ll = dict(algorithm="ring", protocol="LL", nchannels=16, nranks=8)
    assert nccl_model.launched_channels(nbytes=64 << 10, **ring_ll) == 2
    assert nccl_model.launched_channels(nbytes=48 << 10, **ring_ll) == 1  # 48 KiB < 2 x 32 KiB
    assert nccl_model.launched_channels(nbytes=8, **ring_ll) == 1
    assert nccl_model.launched_channels(nbytes=1 << 20, **ring_ll) == 16  # 32 x 32 KiB: capped at 16
    # tree LL128: 8 B x 640 threads = 5 KiB per channel (no x nRanks): 64 KiB -> 12 channels
    assert (
        nccl_model.launched_channels(algorithm="tree", protocol="LL128", nbytes=64 << 10, nchannels=16, nranks=16) == 12
    )
    # Simple: 64 B x 512 threads = 32 KiB per channel, whatever the algorithm and rank count
    for algorithm in ("ring", "tree"):
        assert (
            nccl_model.launched_channels(
                algorithm=algorithm, protocol="Simple", nbytes=96 << 10, nchannels=16, nranks=32
            )
            == 3
        )


def test_launched_channels_is_nccls_loop():
    rng = np.random.default_rng(5)
    for _ in range(300):
        protocol = ("LL", "LL128", "Simple")[int(rng.integers(3))]
        algorithm = ("ring", "tree")[int(rng.integers(2))]
        nranks, nchannels = int(rng.integers(2, 65)), int(rng.integers(1, 33))
        nbytes = int(2 ** rng.uniform(0, 24))
        threshold = nccl_model.THREAD_THRESHOLD_BYTES[protocol] * (
            nranks if (algorithm, protocol) == ("ring", "LL") else 1
        )
        assert nccl_model.launched_channels(
            algorithm=algorithm, protocol=protocol, nbytes=nbytes, nchannels=nchannels, nranks=nranks
        ) == _nccl_channel_loop(nbytes, nchannels, nccl_model.MAX_THREADS[protocol], threshold)


def test_a_small_ring_runs_on_fewer_channels_at_the_communicators_per_channel_ceiling():
    # 64 KiB LL all_reduce on one DGX H100 (16 channels): 2 chains, each capped at llMaxBw / 16 (one
    # SM's LL throughput does not grow because fewer SMs run), so the LL data moves at 2/16 of llMaxBw
    ctx = context(nodes=1)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 10, group=tuple(range(8)))
    schedule = RING.lower(coll, ctx, protocol="LL", nchannels=16)
    assert schedule.nchannels == 2
    assert set(schedule.steps[0].chain.tolist()) == {0, 1}
    ll_max = nccl_model.ll_max_bw_bytes_per_s(arch="hopper", cpu_vendor="intel", nnodes=1)
    assert schedule.chain_rate_cap_bytes_per_s == pytest.approx(ll_max / 16, rel=1e-12)
    # with every channel the same cap per channel: 16 chains
    assert (
        RING.lower_on(coll, ctx, protocol="LL", nchannels=16, comm_channels=16).chain_rate_cap_bytes_per_s
        == schedule.chain_rate_cap_bytes_per_s
    )


# ---- NVLS: NCCL's nvlsEfficiency of NCCL's NVLink figure -------------------------------------------


def test_nvls_on_b200_keeps_nccls_throughput_on_the_measured_links():
    # 8x B200, all_reduce: each GPU's switch link carries 9 shard chains (8 reduce, 1 multicast) at
    # 1/efficiency wire bytes each, so a chain runs at B_eff / 9 and algbw = 8 x B_eff / 9; busbw =
    # algbw x 2 x 7/8 = B_eff x 14/9 with B_eff = nvlsEfficiency 0.74 x NCCL's 18 x 40.1 GB/s = 534.1 GB/s
    # (830.9 GB/s busbw), although the model's NVLink5 runs at the measured 18 x 37.9 GB/s
    ctx = context("hgx-b200")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8 << 30, group=tuple(range(8)))
    _, algbw = ALGORITHMS["nvls"].estimate(coll, ctx, protocol="Simple", nchannels=24)
    assert algbw * coll.busbw_factor == pytest.approx(0.74 * 18 * 40.1e9 * 14 / 9, rel=1e-9)
    # the lowered schedule's switch legs run at 0.74 x 40.1 / 37.9 of the modelled links (chunk penalty
    # 1 at 8 GiB: NCCL's largest chunk)
    schedule = ALGORITHMS["nvls"].lower(coll, ctx, protocol="Simple", nchannels=24)
    assert 1 / schedule.steps[0].wire_scale.max() == pytest.approx(0.74 * 40.1 / 37.9, rel=1e-9)


# ---- NVLSTree: NCCL's per-head model and ceiling --------------------------------------------------


def _nvlstree_case(nodes: int, nbytes: int = 8 << 30):
    ctx = context(nodes=nodes)
    return ctx, Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=nbytes, group=tuple(range(8 * nodes)))


@pytest.mark.parametrize("nodes, ceiling_gbps", [(2, 57.7), (4, 45.5)])
def test_nvlstree_estimate_is_nccls_per_head_model(nodes, ceiling_gbps):
    # 8 heads (a NIC per GPU); per head min(bwIntra x 0.85 x 7/8 x 2, NIC (x2 on 2 servers), ceiling) with
    # bwIntra = 18 x 20.6 / 8 = 46.4 GB/s: intra 69.0 GB/s, NIC 49.7 GB/s, so the ceiling binds on 2 servers
    # (57.7 < 69.0, 99.4) and from 4 (45.5 < 49.7): busbw = 8 x ceiling
    ctx, coll = _nvlstree_case(nodes)
    _, algbw = ALGORITHMS["nvlstree"].estimate(coll, ctx, protocol="Simple", nchannels=16)
    assert algbw * coll.busbw_factor == pytest.approx(8 * ceiling_gbps * 1e9)


@pytest.mark.parametrize("nodes, expected", [(2, "nvlstree"), (3, "ring"), (4, "ring"), (8, "ring")])
def test_tuner_prefers_ring_over_nvlstree_from_three_servers(nodes, expected):
    # NCCL's view of the ring: 8 NICs x 49.7 GB/s = 398 GB/s busbw, above NVLSTree's 8 x 45.5 = 364 from
    # 3 servers (NCCL's ">= 3 nodes" column; the NIC's x2 holds only up to 2) and below its 8 x 57.7 = 462
    # on 2 (measured on H100 + 8x NDR, nccl-tests issue 309: 467-469 GB/s on 2 servers, ring-like
    # 321-325 GB/s on 4 and 8 of one cluster)
    ctx, coll = _nvlstree_case(nodes)
    assert choose(coll, ctx).algorithm == expected


def test_nvlstree_runs_at_nccls_ceiling_on_two_servers():
    # 2x 8 H100: the NVLink bound (algbw 0.85 x 370.8 x 8/9 = 280 GB/s, busbw x 1.875 = 525 GB/s) is above
    # NCCL's NVLSTree ceiling 8 x 57.7 = 461.6 GB/s, which paces each of the 16 sub-shard chains at
    # 461.6 / 1.875 / 16 = 15.4 GB/s; 8 GiB then take 8 GiB / 246.2 GB/s + 66.8 us of latency
    # (tuning.cc: NVLS 25 us + 2 x log2(2 servers) x 20.9 us NET NVLSTree Simple = 66.8 us), plus the
    # pipeline fill: 2 tree hops x one loop of 16 channels x 8 heads x 128 KiB chunks at the same rate
    (row,) = run_bench("all_reduce", system="dgx-h100", nodes=2, minbytes="8G", maxbytes="8G")
    assert row.algorithm == "nvlstree"
    algbw = 461.6e9 / 1.875
    assert row.time_us == pytest.approx(((8 << 30) + 2 * 16 * 8 * (128 << 10)) / algbw * 1e6 + 66.8, rel=1e-3)


def test_nvlstree_fill_is_two_tree_hops_per_level_of_one_loop():
    # 8 servers: log2(8) = 3 levels, 6 hops; from 4 servers NCCL's NVLSTree chunk is at most 64 KiB and
    # 64 MiB >= 4 x (16 channels x 8 heads) x 64 KiB keeps it there; one loop = 16 x 8 x 64 KiB = 8 MiB,
    # carried by 16 sub-shard chains: 6 x 8 MiB / 16 = 3 MiB of start-up per chain
    ctx, coll = _nvlstree_case(8, nbytes=64 << 20)
    (step,) = ALGORITHMS["nvlstree"].lower(coll, ctx, protocol="Simple", nchannels=16).steps
    assert set(step.fill_bytes.tolist()) == {6 * (8 << 20) / 16}


def test_nvlstree_hops_are_nccls_integer_tree_depth():
    # 2 log2i(nNodes): a balanced binary tree of 3 servers has depth 1, of 5-7 depth 2, of 8 depth 3
    assert [tree_network_hops(n) for n in (2, 3, 4, 5, 7, 8)] == [2, 2, 4, 4, 4, 6]


# ---- point-to-point channels (sendrecv, alltoall) -------------------------------------------------


def test_p2p_channels_follow_nccls_split():
    one = context("hgx-b200", nodes=1)
    layout = one.layout(tuple(range(8)))
    assert comm_p2p_channels(layout) == 32
    # 8 ranks on 32 channels: 4 a peer until a channel's part passes 32 NVLink chunks (16 MiB), then
    # doubling up to all 32; below 4 x 64 KiB (chunk / 8) fewer channels
    assert [op_channels(n << 20, layout, 8, 32) for n in (8, 64, 128, 256, 512, 1024)] == [4, 4, 8, 16, 32, 32]
    assert op_channels(128 << 10, layout, 8, 32) == 2
    two = context("hgx-b200", nodes=2)
    layout = two.layout(tuple(range(16)))
    # 2 servers: 16 channels (2 per NIC); 2 a peer across the network sets every peer's maximum, and a send
    # starts on 1 (2 x 16 ranks > 16 channels), doubled once its part would pass one 128 KiB network chunk
    assert comm_p2p_channels(layout) == 16
    sizes = (32 << 10, 128 << 10, (128 << 10) + 1, 1 << 20, 1 << 30)
    assert [op_channels(n, layout, 16, 16) for n in sizes] == [1, 1, 2, 2, 2]
    # 64 ranks on 16 channels: 2 x 64 > 4 x 16, so one channel to a network peer
    assert op_channels(1 << 30, layout, 64, 16) == 1


def test_a_communicator_across_servers_runs_on_the_channels_nccls_search_finds_over_its_nics():
    # NCCL's ring search finds one channel a NIC at the fastest search speed the port carries (NDR 49.7 GB/s:
    # 48; HDR 24.8 GB/s: 24). ncclTopoDupChannels doubles them at >= 25 GB/s a channel unless sm > 80 has more
    # than 4 channels under 50 GB/s; ncclTopoPostset doubles them again, and sm >= 90 once more under 16 channels
    # of > 45 GB/s. One NDR NIC (sm90): 1 at 48 -> 2 at 24 -> 4. Eight: 8 at 48 (8 > 4, no dup) -> 16 (not < 16).
    # Four: 4 at 48 -> 8 at 24 -> 16. HDR (sm80): 24 < 25, no dup -> 2 a NIC.
    assert [search_ring_channels(n, 49.68, 90) for n in (1, 2, 4, 8)] == [4, 8, 16, 16]
    assert [search_ring_channels(n, 24.84, 80) for n in (1, 8)] == [2, 16]
    # sm100 with an NDR NIC picks 48 from its own array (96, 86, 80 above the port), as sm90
    assert search_ring_channels(1, 49.68, 100) == 4
    three = context("dgx-h100", nodes=3)
    # a data-parallel group of one GPU a server (tensor-parallel 8): one NIC a server -> 4; every GPU: 16
    assert ring_channels(three.layout((0, 8, 16))) == 4
    assert ring_channels(three.layout(tuple(range(24)))) == 16
    assert ring_channels(three.layout((0, 1, 8, 9))) == 8
    # the earlier model (two a NIC of the server, whatever the group uses) as an ablation; one server unchanged
    earlier = LoweringContext(
        topology=three.topology, router=three.router, rank_gpu=three.rank_gpu, search_channels=False
    )
    assert ring_channels(earlier.layout((0, 8, 16))) == 16
    assert ring_channels(three.layout((0, 1))) == 16
    # the switch changes a context's cached layouts too (replace shares the per-simulation cache)
    assert ring_channels(replace(three, search_channels=False).layout((0, 8, 16))) == 16
    # sm89 dedups as sm90 (ccMin > 80): 8 NDR NICs at 48, more than 4 under 50 -> no dup -> 16
    assert search_ring_channels(8, 49.68, 89) == 16
    # one XDR NIC on sm100 (96 from its array): 1 at 96 -> 2 at 48 -> 4 (the trees' set) -> 8 (48 > 45, copies)
    assert (search_ring_channels(1, 99.37, 100), search_ring_channels(1, 99.37, 100, tree_set=True)) == (8, 4)


def test_a_pipeline_transfer_shares_its_nic_with_an_all_gathers_channels():
    # Rank 0 (GPU 0, server 0) sends a Nemotron-4 340B stage transfer (s h D / t = 4096 x 18432 x 2 / 8 B) to
    # rank 16 (GPU 0, server 2) while its data-parallel group (0, 8) all-gathers 1 GiB on stream 1: both leave
    # through NIC 0 (49.68 GB/s; the transfer, one network connection, is capped at 20 GB/s alone). Max-min over
    # the NIC's flows gives the transfer 49.68 / (4 + 1) = 9.94 GB/s beside the all-gather's 4 channels, and
    # 49.68 / (16 + 1) = 2.92 GB/s beside the 16 the earlier model gave a one-GPU-a-server communicator.
    topo = build_system("dgx-h100", nodes=3)
    nbytes = 4096 * 18432 * 2 // 8
    gather = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=1 << 30, group=(0, 8))
    stage = Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=nbytes, group=(0, 16), splits=((0, nbytes), (0, 0)))
    programs: list[tuple[CommTask, ...]] = [()] * 24
    programs[0] = (CommTask(index=0, stream=1), CommTask(index=1, stream=0))
    programs[8], programs[16] = (CommTask(index=0, stream=1),), (CommTask(index=1, stream=0),)
    workload = Workload(nranks=24, collectives=(gather, stage), programs=tuple(programs))
    nic = topo.link_capacity_bytes_per_s[
        [k for k in np.nonzero(topo.link_src == topo.servers[0].nics[0])[0] if topo.link_tier[k] == LinkTier.NIC][0]
    ]
    for search, channels in ((True, 4), (False, 16)):
        ag, transfer = simulate(topo, workload, config=SimConfig(search_channels=search)).collectives
        assert ag.nchannels == channels and ag.end_s > transfer.end_s  # the gather outlasts the transfer
        rate = nbytes / (transfer.time_s - transfer.latency_s)
        assert rate == pytest.approx(nic / (channels + 1), rel=5e-3)


def test_sendrecv_on_one_b200_server_runs_at_nccls_channel_count():
    # 8 ranks: 32 MiB and 64 MiB go on 4 channels of 21.7 GB/s, 128 MiB on 8: doubling from 64 to 128 MiB
    # costs nothing, and 32 -> 64 MiB costs 32 MiB / (4 x 21.7 GB/s) = 386.5 us (measured 386.7 us)
    rows = run_bench("sendrecv", system="hgx-b200", nodes=1, minbytes="32M", maxbytes="128M")
    t32, t64, t128 = (r.time_us for r in rows)
    assert t128 == pytest.approx(t64, rel=1e-9)
    assert t64 - t32 == pytest.approx((32 << 20) / (4 * 21.7e9) * 1e6, rel=1e-6)


def test_ll_sends_split_on_lls_step_at_an_ll_channels_rate():
    # NCCL 2.28 sends up to 16 KiB x 32 channels a peer = 512 KiB with LL on one server. LL's step (64 KiB of
    # lines) makes parts of at least 8 KiB, so 256 and 512 KiB both go on the 4 channels a peer (8 ranks on 32
    # channels), 64 and 128 KiB a channel; each streams at 5.0 GB/s: the extra 64 KiB a channel costs
    # 65536 / 5e9 = 13.1072 us (measured 35.09 - 22.50 = 12.59 us). Switched off: Simple's 512 KiB chunk (64 KiB
    # parts, also 4 channels here) at llMaxBw / 32 channels = 282 / 32 = 8.8125 GB/s: 65536 / 8.8125e9 = 7.4367 us
    assert [
        op_channels(n << 10, context("hgx-b200", nodes=1).layout(tuple(range(8))), 8, 32, protocol="LL")
        for n in (8, 16, 24, 256)
    ] == [1, 2, 3, 4]
    for on, extra_us in ((True, 13.1072), (False, 7.4367)):
        config = SimConfig(p2p_ll=on, collectives=CollectivePolicy(nccl_version="2.28"))
        rows = run_bench("sendrecv", system="hgx-b200", nodes=1, minbytes="256K", maxbytes="512K", config=config)
        assert [r.protocol for r in rows] == ["LL", "LL"]
        assert rows[1].time_us - rows[0].time_us == pytest.approx(extra_us, abs=1e-3)


def test_alltoall_pieces_to_one_remote_gpu_share_one_pxn_connection():
    # 2x HGX B200, 16 ranks: the NIC on a remote GPU's rail carries the 8 pieces its server sends to that
    # GPU over one 20 GB/s connection, so each GPU's 8 remote pieces (half its buffer) move at 20 GB/s:
    # algbw 2 x 20 = 40 GB/s; a NIC-bound exchange would reach 2 x 49.7 GB/s
    (row,) = run_bench("alltoall", system="hgx-b200", nodes=2, minbytes="4G", maxbytes="4G")
    assert row.algorithm == "direct"
    assert row.algbw_GBps == pytest.approx(40.0, rel=0.01)
    ctx = context("hgx-b200", nodes=2)
    coll = Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=4 << 30, group=tuple(range(16)))
    _, algbw = ALGORITHMS["direct"].estimate(coll, ctx, protocol="Simple", nchannels=16)
    assert algbw == pytest.approx(40e9, rel=1e-6)


def test_pairwise_alltoall_runs_rounds_one_after_the_other():
    # one server of 8 B200: each of the 7 rounds sends one 1/8 piece per rank on 4 channels, pacing
    # 4 x 21.7 GB/s per rank; direct runs all 7 peers at once (28 channels, under NVLink's 682 GB/s)
    (direct,) = run_bench("alltoall", system="hgx-b200", nodes=1, minbytes="256M", maxbytes="256M")
    (pairwise,) = run_bench(
        "alltoall",
        system="hgx-b200",
        nodes=1,
        minbytes="256M",
        maxbytes="256M",
        config=SimConfig(collectives=CollectivePolicy(algorithm="pairwise")),
    )
    piece = (256 << 20) / 8
    assert direct.algorithm == "direct" and pairwise.algorithm == "pairwise"
    assert pairwise.time_us - direct.time_us == pytest.approx((7 - 1) * piece / (4 * 21.7e9) * 1e6, rel=1e-6)


def test_uneven_alltoall_estimate_matches_the_simulation():
    # 2x H100 with 4 NICs a server, uneven pieces: links and shared PXN connections are split by bytes in
    # the estimate, so every flow through a bottleneck ends with it, as the engine's max-min sharing has
    # them; H100 has no platform hop latency, so NCCL's estimate and the simulated time are the same sum
    topo = build_system("dgx-h100", nodes=2, nics_per_node=4)
    n = topo.num_gpus
    splits = tuple(tuple(((p * 7 + q * 3) % 5 + 1) * (256 << 10) for q in range(n)) for p in range(n))
    coll = Collective(
        kind=CollectiveKind.ALL_TO_ALL, nbytes=max(sum(r) for r in splits), group=tuple(range(n)), splits=splits
    )
    (record,) = simulate(topo, Workload.sequence([coll], nranks=n), config=SimConfig(pxn_hop=False)).collectives
    assert record.algorithm == "direct"
    assert record.predicted_s == pytest.approx(record.end_s - record.start_s, rel=1e-6)
    # the PXN relay hop is in the simulated time only: Simple's slowest peer, relayed, takes NCCL's Simple
    # NVLink hop more, 3.4 us
    (relayed,) = simulate(topo, Workload.sequence([coll], nranks=n)).collectives
    assert (relayed.end_s - relayed.start_s) - (record.end_s - record.start_s) == pytest.approx(3.4e-6, rel=1e-6)


def test_the_tuner_sees_the_nics_not_the_fabric_behind_them():
    # NCCL's topology ends at the NIC: the same servers on a non-blocking and on a 4:1 top-of-rack fabric get
    # the same algorithm, protocol and channels at every size (only the simulated time differs)
    sizes = [1 << k for k in range(16, 31, 2)]
    rows = {
        over: run_bench(
            "all_reduce",
            system=build_system("dgx-h100", nodes=8, rail_optimised=False, oversubscription=over),
            nodes=8,
            sizes=sizes,
        )
        for over in (1.0, 4.0)
    }
    choices = {over: [(r.algorithm, r.protocol, r.channels) for r in rs] for over, rs in rows.items()}
    assert choices[1.0] == choices[4.0]
    assert any(slow.time_us > fast.time_us for slow, fast in zip(rows[4.0], rows[1.0]))


def test_gb200_nvl72_all_reduce_runs_nvls_inside_the_rack_and_nvlstree_across_racks():
    from simulator.studies.nccl_tests import run_bench

    # one NVLink domain of 72 GPUs: NCCL's MNNVL clique is one node, NVLS on NVLS_NCHANNELS_SM100_NVL = 24
    # channels (src/transport/nvls.cc); two racks: NVLSTree on NVLS_NCHANNELS_SM100 = 32
    (one,) = run_bench("all_reduce", system="gb200-nvl72", minbytes="1G", maxbytes="1G")
    assert (one.algorithm, one.channels) == ("nvls", 24)
    # NVLS moves S (n+1)/n up and down each GPU's links (nvls.py): busbw never exceeds the ring ceiling it
    # saves on, NVLink 18 x 40.1 GB/s (NCCL's figure) x nvlsEfficiency 0.74 x 2 (n-1)/(n+1) = 1039 GB/s for n = 72
    assert 0.5 * 1039 < one.busbw_GBps <= 1039
    topo = build_system("gb200-nvl72", nodes=2, topology="fat-tree")
    (two,) = run_bench("all_reduce", system=topo, minbytes="1G", maxbytes="1G")
    assert (two.algorithm, two.channels) == ("nvlstree", 32)


def test_pxn_relayed_sends_pay_the_nvlink_hop_into_the_relay_gpu():
    # 2x HGX B200: GPU 7 -> GPU 8 (local 0 of server 1) leaves through NIC 0 of server 0 under PXN, reached
    # over NVLink from GPU 7; GPU 0 -> GPU 8 is on its own rail, and nothing is relayed without PXN
    ctx = replace(context("hgx-b200", nodes=2), pxn_hop=True)
    assert pxn_relayed(ctx, 7, 8) and not pxn_relayed(ctx, 0, 8) and not pxn_relayed(ctx, 0, 1)
    assert not pxn_relayed(replace(ctx, pxn_hop=False), 7, 8)
    # nccl-tests sendrecv (r -> r + 1): 7 -> 8 and 15 -> 0 are relayed, so the simulated latency takes one
    # NVLink hop more: NCCL's LL NVLink hop 0.6 us plus B200's platform hop 0.7 us; NCCL's estimate does not
    coll = Collective(kind=CollectiveKind.SENDRECV, nbytes=1024, group=tuple(range(16)))
    sendrecv = ALGORITHMS["p2p"]
    on = sendrecv.lower(coll, ctx, protocol="LL", nchannels=16).steps[0].latency_s
    off = sendrecv.lower(coll, replace(ctx, pxn_hop=False), protocol="LL", nchannels=16).steps[0].latency_s
    assert on - off == pytest.approx((0.6 + 0.7) * 1e-6)
    assert sendrecv.estimate(coll, ctx, protocol="LL", nchannels=16) == sendrecv.estimate(
        coll, replace(ctx, pxn_hop=False), protocol="LL", nchannels=16
    )
    # all-to-all, LL: a GPU's 8 remote peers, 7 of them off its rail, each one NVLink hop more: 7 x 0.6 us
    coll = Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=16 * 1024, group=tuple(range(16)))
    direct = ALGORITHMS["direct"]
    on = direct.lower(coll, ctx, protocol="LL", nchannels=16).steps[0].latency_s
    off = direct.lower(coll, replace(ctx, pxn_hop=False), protocol="LL", nchannels=16).steps[0].latency_s
    assert on - off == pytest.approx(7 * 0.6e-6)


def test_simple_rings_between_sm80_gpus_pay_each_p2p_read_slice():
    # NCCL reads (P2P read) only between two sm80 GPUs on NVLink, and only for Simple (paths.cc, p2p.cc)
    assert nccl_model.p2p_read(sm_version=80, intra="nvlink")
    assert not nccl_model.p2p_read(sm_version=90, intra="nvlink") and not nccl_model.p2p_read(
        sm_version=80, intra="pcie"
    )
    # 8x A100, all_reduce of 32 MiB on 16 channels: one loop (16 x 8 x 2 MiB = 256 MiB > 32 MiB) of 2 x 7 = 14
    # steps, 2 slices each: 28 slices at P2P_READ_SLICE_US each, over the same ring with the mechanism off
    ctx = context("dgx-a100")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=32 << 20, group=tuple(range(8)))
    on = RING.lower(coll, ctx, protocol="Simple", nchannels=16).steps[0].latency_s
    off = RING.lower(coll, replace(ctx, p2p_read=False), protocol="Simple", nchannels=16).steps[0].latency_s
    assert on - off == pytest.approx(28 * nccl_model.P2P_READ_SLICE_US * 1e-6)
    # 512 MiB: two loops, 56 slices; LL128 and Hopper's (write) rings pay none; the tuner's estimate neither
    big = replace(coll, nbytes=512 << 20)
    on = RING.lower(big, ctx, protocol="Simple", nchannels=16).steps[0].latency_s
    off = RING.lower(big, replace(ctx, p2p_read=False), protocol="Simple", nchannels=16).steps[0].latency_s
    assert on - off == pytest.approx(56 * nccl_model.P2P_READ_SLICE_US * 1e-6)
    for protocol in ("LL", "LL128"):
        on = RING.lower(coll, ctx, protocol=protocol, nchannels=16).steps[0].latency_s
        assert on == RING.lower(coll, replace(ctx, p2p_read=False), protocol=protocol, nchannels=16).steps[0].latency_s
    h100 = context("dgx-h100")
    on = RING.lower(coll, h100, protocol="Simple", nchannels=16).steps[0].latency_s
    assert on == RING.lower(coll, replace(h100, p2p_read=False), protocol="Simple", nchannels=16).steps[0].latency_s
    assert RING.estimate(coll, ctx, protocol="Simple", nchannels=16) == RING.estimate(
        coll, replace(ctx, p2p_read=False), protocol="Simple", nchannels=16
    )


def test_ampere_ll_and_ll128_channels_run_at_their_own_rate_on_one_nvlink_server():
    # between A100s on one NVLink server a channel's LL and LL128 caps are the fitted per-channel rates, whatever
    # the communicator's channels; NCCL's own figures stay for the tuner, for Hopper and across servers
    def cap(**kw):
        base = dict(arch="ampere", cpu_vendor="intel", nnodes=1, nchannels=16, intra="nvlink")
        return nccl_model.simulated_cap_bytes_per_s(**{**base, **kw})

    assert cap(protocol="LL") == nccl_model.LL_CHANNEL_GBPS_AMPERE * 1e9 == cap(protocol="LL", nchannels=4)
    assert cap(protocol="LL128") == nccl_model.LL128_CHANNEL_GBPS_AMPERE * 1e9
    assert cap(protocol="LL", ll_channel=False) == 87.7e9 / 16  # NCCL's llMaxBw over the channels
    assert cap(protocol="LL128", ll128_channel=False) == 20.0e9  # NCCL's perChMaxRingLL128Bw for Ampere
    # across servers the llMaxBw row is the CPU vendor's (Intel, 2 nodes: 39.0 GB/s)
    assert cap(protocol="LL", nnodes=2) == 39.0e9 / 16 and cap(protocol="LL", arch="hopper") == 141.0e9 / 16
    assert cap(protocol="Simple") == float("inf")
    # 8x A100, ring LL all_reduce of 128 KiB: 4 channels launched (128 KiB / (512 x 8 x 8 B)), each edge carries
    # 2 x 7/8 x 32 KiB = 57,344 B; at the Ampere rate instead of 87.7 / 16 GB/s the time drops by
    # 57,344 / 5.48125 GB/s - 57,344 / LL_CHANNEL_GBPS_AMPERE (the 4 channels' NVLink share, 60 GB/s of wire, 30 of
    # LL payload, binds neither)
    on, off = (
        run_bench("all_reduce", system="dgx-a100", minbytes="128K", maxbytes="128K", config=SimConfig(ll_channel=flag))[
            0
        ]
        for flag in (True, False)
    )
    assert on.channels == off.channels == 4
    saved_us = 57344 / 5.48125e3 - 57344 / (nccl_model.LL_CHANNEL_GBPS_AMPERE * 1e3)
    assert off.time_us - on.time_us == pytest.approx(saved_us, rel=1e-6)


def test_ll_across_servers_shares_the_hosts_llmaxbw_over_the_launched_channels():
    # across servers NCCL's llMaxBw is the host's row (Intel, 2 nodes: 39 GB/s) for the whole collective: the channels
    # it launches share it, each at most the GPU's own LL rate (Blackwell's one-server 282 GB/s over 16 channels)
    def cap(launched, **kw):
        base = dict(protocol="LL", arch="blackwell", cpu_vendor="intel", nnodes=2, nchannels=16, intra="nvlink")
        return nccl_model.simulated_cap_bytes_per_s(**{**base, "ll_net_share": True, **kw}, launched=launched)

    assert cap(1) == 282.0e9 / 16 and cap(4) == 39.0e9 / 4 and cap(16) == 39.0e9 / 16
    assert cap(1, ll_net_share=False) == 39.0e9 / 16  # NCCL's figure: llMaxBw over the communicator's channels
    assert cap(1, nnodes=1) == 282.0e9 / 16 == cap(16, nnodes=1)  # one server: NCCL's figure, as before
    assert cap(1, protocol="LL128") == nccl_model.LL128_MAX_BW_PER_CHANNEL_GBPS["blackwell"] * 1e9
    # 2x HGX B200, ring LL all_gather of 64 KiB on 1 launched channel: each inter-server edge carries 15/16 x 64 KiB
    # = 61,440 B of payload; NCCL's figure moves it at 39 / 16 = 2.4375 GB/s, the shared one at the connection's
    # 20 GB/s of LL wire (10 GB/s of payload, below the GPU's 17.625): 25.206 - 6.144 = 19.062 us saved
    on, off = (
        run_bench(
            "all_gather",
            system="hgx-b200",
            nodes=2,
            minbytes="64K",
            maxbytes="64K",
            config=SimConfig(ll_net_share=flag, collectives=CollectivePolicy(nccl_version="2.28")),
        )[0]
        for flag in (True, False)
    )
    assert on.channels == off.channels == 1 and on.protocol == "LL"
    assert off.time_us - on.time_us == pytest.approx(61440 / 2.4375e3 - 61440 / 10e3, rel=1e-6)


def test_ring_latency_pays_every_network_crossing_of_its_chain():
    # 2 servers of 8: the last rank of an all_gather waits on 15 consecutive ring edges, both network edges among
    # them (NCCL counts 1); all_reduce's 30 edges cross 4 (NCCL 2); one GPU a server: every edge, as NCCL counts
    assert [nccl_model.ring_chain_crossings(k, 16, 2) for k in ("all_gather", "reduce_scatter", "all_reduce")] == [
        2,
        2,
        4,
    ]
    assert nccl_model.ring_chain_crossings("all_reduce", 8, 4) == 7  # ppn 2: 14 hops cross ceil(14 / 2)
    assert nccl_model.ring_chain_crossings("all_gather", 4, 4) == 3 == nccl_model.ring_steps("all_gather", 4, 4)[1]
    assert nccl_model.ring_chain_crossings("broadcast", 16, 2) == 1  # from the root, which starts a server
    # each extra crossing replaces an intra-server hop: + (NET ring LL 2.7 - max(NVLink 0.6 + B200's 0.7, 1.0)) us
    ctx = context("hgx-b200", nodes=2)
    for kind, extra in ((CollectiveKind.ALL_GATHER, 1), (CollectiveKind.ALL_REDUCE, 2)):
        coll = Collective(kind=kind, nbytes=4096, group=tuple(range(16)))
        on = RING.lower(coll, ctx, protocol="LL", nchannels=16).steps[0].latency_s
        off = RING.lower(coll, replace(ctx, ring_crossings=False), protocol="LL", nchannels=16).steps[0].latency_s
        assert (on - off) * 1e6 == pytest.approx(extra * (2.7 - 1.3), abs=1e-9)
        # NCCL's estimate (the choice) keeps its own count
        assert RING.estimate(coll, ctx, protocol="LL", nchannels=16) == RING.estimate(
            coll, replace(ctx, ring_crossings=False), protocol="LL", nchannels=16
        )
    with pytest.raises(ValueError, match="ring_crossings"):
        SimConfig(ring_crossings="on")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ll_net_share"):
        SimConfig(ll_net_share=1.5)  # type: ignore[arg-type]
