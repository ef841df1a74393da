"""Tests for simulator.placement (job placement policies) and simulator.studies.jobs (several jobs on one
fabric): placement invariants and hand-derived layouts, merging, splitting, interference on
non-blocking and oversubscribed fabrics, determinism and error messages."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from simulator import placement as placement_module
from simulator.api import simulate
from simulator.collectives import nccl_model
from simulator.collectives.tuner import CollectivePolicy
from simulator.config import SimConfig
from simulator.placement import PLACEMENT_POLICIES, Placement
from simulator.studies.jobs import interference, merge_jobs, simulate_jobs
from tests.topologies.fabrics import BOX, toy_switch  # BOX: 1 GPU, 1 NIC, so every ring edge crosses the network
from topologies import devices as dv
from topologies import links as lk
from topologies.fat_tree import leaf_spine
from topologies.presets import build_system
from topologies.topology import LinkTier, Topology
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import CommTask, ComputeTask, Workload

NDR = lk.IB_NDR.bandwidth_bytes_per_s  # 49.68 GB/s per direction (links.py)
CONNECTION = dv.CONNECTX7_NDR.connection_bytes_per_s  # 20 GB/s: most one NCCL connection streams
# Ring, Simple protocol, 2 channels: fixed so that the hand derivations below do not depend on the tuner.
RING2 = CollectivePolicy(algorithm="ring", protocol="Simple", nchannels=2)
MiB = 1 << 20


@pytest.fixture(scope="module")
def nonblocking() -> Topology:
    # radix 8, R = 1: d = floor(8 x 1 / 2) = 4 NICs per leaf, 4 uplinks each -> 8 servers on 2 leaves, 4 spines
    return leaf_spine(server=BOX, servers=8, switch=toy_switch(8), fabric_link=lk.IB_NDR, oversubscription=1.0)


@pytest.fixture(scope="module")
def oversubscribed() -> Topology:
    # radix 5, R = 4: d = floor(5 x 4 / 5) = 4 NICs per leaf, ceil(4 / 4) = 1 uplink -> 2 leaves, 1 spine
    return leaf_spine(server=BOX, servers=8, switch=toy_switch(5), fabric_link=lk.IB_NDR, oversubscription=4.0)


@pytest.fixture(scope="module")
def dgx() -> Topology:
    return build_system("dgx-h100", nodes=8)


def _all_reduce(nranks: int, nbytes: int = 64 * MiB) -> Workload:
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=nbytes, group=tuple(range(nranks)))
    return Workload.sequence([c], nranks=nranks)


def _fabric_links(topology: Topology, link_bytes: np.ndarray) -> set[int]:
    """Links above the NIC cables (leaf <-> spine) that carried bytes."""
    used = np.flatnonzero((link_bytes > 0) & (topology.link_tier >= LinkTier.FABRIC_1))
    return set(used.tolist())


# ================================================================================================
# Placement policies
# ================================================================================================


@pytest.mark.parametrize("policy", PLACEMENT_POLICIES)
@pytest.mark.parametrize("jobs", [[8], [16, 16], [12, 8, 20], [8] * 8, [1, 2, 3]])
def test_for_jobs_gives_disjoint_whole_servers(dgx, policy, jobs):
    placements = Placement.for_jobs(dgx, jobs=jobs, policy=policy, seed=3)
    assert [p.nranks for p in placements] == jobs
    gpus = [g for p in placements for g in p.rank_gpu]
    assert len(gpus) == len(set(gpus))  # no GPU used twice
    owners = [set(p.servers(dgx)) for p in placements]
    for i in range(len(owners)):
        for j in range(i + 1, len(owners)):
            assert not owners[i] & owners[j]  # no server shared by two jobs
    for p, n in zip(placements, jobs):
        assert len(p.servers(dgx)) == -(-n // 8)  # ceil(n / 8) whole servers
        # ranks fill each server from local GPU 0, 8 per server, in increasing server order
        assert [int(dgx.gpu_local[g]) for g in p.rank_gpu] == [r % 8 for r in range(n)]
        assert list(p.servers(dgx)) == sorted(p.servers(dgx))


def test_contiguous_policy_layout(dgx):
    # jobs of 12 and 16 ranks need ceil(12/8) + ceil(16/8) = 2 + 2 servers: 0-1 and 2-3; ranks 8-11 of
    # job 0 sit on GPUs 0-3 of server 1 (global GPUs 8-11), GPUs 12-15 stay idle
    first, second = Placement.for_jobs(dgx, jobs=[12, 16], policy="contiguous")
    assert first.rank_gpu == tuple(range(12))
    assert second.rank_gpu == tuple(range(16, 32))
    assert first == Placement.block(dgx, nranks=12) == Placement.contiguous(dgx, nranks=12)
    assert Placement.contiguous(dgx, nranks=16, first_server=5).servers(dgx) == (5, 6)


def test_strided_policy_deals_servers_round_robin(dgx):
    # need [2, 1, 2] servers; round 1 deals 0, 1, 2 to jobs 0, 1, 2; round 2 deals 3 to job 0 and 4
    # to job 2 (job 1 is full)
    placements = Placement.for_jobs(dgx, jobs=[16, 8, 16], policy="strided")
    assert [p.servers(dgx) for p in placements] == [(0, 3), (1,), (2, 4)]


def test_fragmented_single_job(dgx):
    # stride 2 from position 1 of the sorted free list [1, 2, 4, 5, 7]: positions 1, 3 -> servers 2, 5
    p = Placement.fragmented(dgx, nranks=16, stride=2, offset=1, free_servers=[7, 1, 4, 2, 5])
    assert p.servers(dgx) == (2, 5)
    # seeded draw: from the free servers only, sorted, the same for the same seed
    free = [0, 3, 4, 6, 7]
    drawn = [Placement.fragmented(dgx, nranks=24, seed=s, free_servers=free) for s in range(8)]
    for p in drawn:
        assert set(p.servers(dgx)) <= set(free) and len(p.servers(dgx)) == 3
    assert drawn[5] == Placement.fragmented(dgx, nranks=24, seed=5, free_servers=free)
    # C(5, 3) = 10 possible sets: eight seeds that all drew the same one would mean the seed is ignored
    assert len({p.servers(dgx) for p in drawn}) > 1


def test_fragmented_jobs_depend_on_seed_only(dgx):
    a = Placement.for_jobs(dgx, jobs=[16, 24], policy="fragmented", seed=11)
    assert a == Placement.for_jobs(dgx, jobs=[16, 24], policy="fragmented", seed=11)
    layouts = {
        tuple(p.servers(dgx) for p in Placement.for_jobs(dgx, jobs=[16, 24], policy="fragmented", seed=s))
        for s in range(8)
    }
    assert len(layouts) > 1


def test_placement_errors_name_the_field(dgx):
    with pytest.raises(ValueError, match=r"jobs: \[40, 40\] need 5 \+ 5 = 10 whole servers .* has 8"):
        Placement.for_jobs(dgx, jobs=[40, 40])
    with pytest.raises(ValueError, match="policy: 'scattered' is not known; expected one of contiguous"):
        Placement.for_jobs(dgx, jobs=[8], policy="scattered")
    with pytest.raises(ValueError, match=r"jobs: \[8, 0\] is not allowed; expected a non-empty list"):
        Placement.for_jobs(dgx, jobs=[8, 0])
    with pytest.raises(ValueError, match=r"jobs: \[\] is not allowed"):
        Placement.for_jobs(dgx, jobs=[])
    with pytest.raises(ValueError, match="seed: 1.5 is not allowed"):
        Placement.for_jobs(dgx, jobs=[8], seed=1.5)
    with pytest.raises(ValueError, match="first_server: 7 is not allowed; 16 ranks need 2 servers .* from 0 to 6"):
        Placement.contiguous(dgx, nranks=16, first_server=7)
    with pytest.raises(ValueError, match="stride: 4 from free position 0 reaches 2 of the 8 free servers"):
        Placement.fragmented(dgx, nranks=24, stride=4)
    with pytest.raises(ValueError, match="nranks: 24 needs 3 servers of 8 GPUs but only 2 are free"):
        Placement.fragmented(dgx, nranks=24, free_servers=[0, 1])
    with pytest.raises(ValueError, match="free_servers: .* expected distinct server indices from 0 to 7"):
        Placement.fragmented(dgx, nranks=8, free_servers=[0, 8])
    with pytest.raises(ValueError, match="gpus_per_node: 9 is not allowed; expected an integer from 1 to 8"):
        Placement.for_jobs(dgx, jobs=[8], gpus_per_node=9)
    with pytest.raises(ValueError, match="nranks: 65 is not allowed; expected an integer from 1 to 64"):
        Placement.block(dgx, nranks=65)
    with pytest.raises(ValueError, match="servers: .* lists a server twice"):
        Placement.on_servers(dgx, servers=[1, 1], nranks=8)


def test_placement_doctests_pass():
    assert doctest.testmod(placement_module).failed == 0


# ================================================================================================
# Merging and splitting
# ================================================================================================


def test_merge_offsets_ranks_collectives_and_groups(dgx):
    c0 = Collective(kind=CollectiveKind.ALL_GATHER, nbytes=4096, group=(0, 1))
    c1 = Collective(kind=CollectiveKind.BROADCAST, nbytes=4096, group=(1, 2, 0), root=1)
    first = Workload(
        nranks=3,
        collectives=(c0, c1),
        programs=(
            (ComputeTask(duration_s=1e-6), CommTask(index=0), CommTask(index=1, stream=1, after=(0,))),
            (CommTask(index=0), CommTask(index=1)),
            (CommTask(index=1),),
        ),
    )
    second = _all_reduce(2)
    p0 = Placement.custom(dgx, [0, 1, 2])
    p1 = Placement.custom(dgx, [8, 9])
    merged, placement = merge_jobs(dgx, [(first, p0), (second, p1)])
    assert merged.nranks == 5 and placement.rank_gpu == (0, 1, 2, 8, 9)
    # job 1's collective 0 is global collective 2, its group (0, 1) becomes (3, 4); job 0's are unchanged
    assert merged.collectives[:2] == (c0, c1)
    assert merged.collectives[2].group == (3, 4)
    assert merged.collectives[1].root == 1  # an index into the group: unchanged
    assert merged.programs[:3] == first.programs
    assert merged.programs[3] == (CommTask(index=2, name="all_reduce"),)


def test_one_job_is_exactly_simulate(dgx):
    work = _all_reduce(16)
    place = Placement.contiguous(dgx, nranks=16, first_server=2)
    alone = simulate(dgx, work, place)
    together = simulate_jobs(dgx, [(work, place)])
    assert together.result.collectives == alone.collectives
    assert together.result.rank_end_s == alone.rank_end_s
    assert np.array_equal(together.result.link_bytes, alone.link_bytes)
    assert together.jobs[0].collectives == alone.collectives


def test_split_gives_each_job_its_own_records(dgx):
    # job 1 computes 1 ms before its collective; all jobs start at t = 0
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=MiB, group=(0, 1))
    late = Workload(
        nranks=2, collectives=(c,), programs=tuple((ComputeTask(duration_s=1e-3), CommTask(index=0)) for _ in range(2))
    )
    early = _all_reduce(8, MiB)
    p0, p1 = Placement.for_jobs(dgx, jobs=[8, 2])
    out = simulate_jobs(dgx, [(early, p0), (late, p1)])
    assert [j.placement for j in out.jobs] == [p0, p1]
    assert out.jobs[1].collectives[0].collective == c  # the job's own group (0, 1), not (8, 9)
    assert out.jobs[1].collectives[0].index == 0
    assert out.jobs[1].collectives[0].start_s == 1e-3
    assert out.jobs[0].collectives[0].start_s == 0.0
    assert len(out.jobs[0].rank_end_s) == 8 and len(out.jobs[1].rank_end_s) == 2
    assert out.makespan_s == max(j.makespan_s for j in out.jobs)
    assert out.jobs[1].makespan_s == out.jobs[1].collectives[0].end_s


def test_job_errors_name_the_job(dgx):
    work = _all_reduce(8)
    p0, p1 = Placement.for_jobs(dgx, jobs=[8, 8])
    with pytest.raises(ValueError, match=r"jobs\[1\]: GPU 0 is also used by jobs\[0\]; expected jobs on disjoint"):
        simulate_jobs(dgx, [(work, p0), (work, p0)])
    with pytest.raises(ValueError, match=r"jobs\[1\]: the placement places 16 ranks but the workload has 8"):
        simulate_jobs(dgx, [(work, p0), (work, Placement.contiguous(dgx, nranks=16, first_server=1))])
    with pytest.raises(ValueError, match=r"jobs\[0\]: 'list' is not allowed; expected a \(Workload, Placement\) pair"):
        simulate_jobs(dgx, [[work, p0]])
    with pytest.raises(ValueError, match="jobs: .* expected a non-empty list"):
        interference(dgx, [])
    result = interference(dgx, [(work, p0), (work, p1)])
    with pytest.raises(ValueError, match="job: 2 is not allowed; expected an integer from 0 to 1"):
        result.collective_slowdowns(2)


# ================================================================================================
# Interference
# ================================================================================================


@pytest.mark.parametrize("policy", PLACEMENT_POLICIES)
def test_no_interference_on_a_nonblocking_sprayed_fabric(nonblocking, policy):
    # Why the slowdown is 1: each leaf has 4 NIC ports and 4 uplinks, one per spine, and spraying
    # sends 1/4 of every cross-leaf flow up each uplink (and 1/4 down each spine's downlink to the
    # destination leaf). An uplink therefore carries 1/4 of what the leaf's 4 NIC cables send across,
    # at most 4 x C / 4 = C: it is never tighter than the NIC cables, which the jobs do not share
    # (disjoint servers). So every flow's max-min rate is set by links and caps of its own job alone,
    # and the times are those alone, up to round-off of the other job's interleaved event times.
    work = _all_reduce(4)
    placements = Placement.for_jobs(nonblocking, jobs=[4, 4], policy=policy, seed=1)
    result = interference(nonblocking, [(work, p) for p in placements], SimConfig(routing="spray", collectives=RING2))
    assert result.slowdowns == pytest.approx((1.0, 1.0), rel=1e-12, abs=0)
    for job in range(2):
        assert result.collective_slowdowns(job) == pytest.approx([1.0], rel=1e-12, abs=0)


def test_jobs_that_share_no_link_do_not_interfere(nonblocking):
    # ECMP on a non-blocking fabric hashes each job's cross-leaf ring edges onto some spine; when the
    # two jobs' alone runs use disjoint fabric links, no link is shared (their NIC cables are their own)
    # and max-min gives every flow its alone rate: slowdown 1. One channel per ring, so that both
    # outcomes (disjoint or not) occur over these seeds.
    work = _all_reduce(4)
    ring1 = CollectivePolicy(algorithm="ring", protocol="Simple", nchannels=1)
    disjoint = 0
    for seed in range(8):
        placements = Placement.for_jobs(nonblocking, jobs=[4, 4], policy="fragmented", seed=seed)
        config = SimConfig(routing="ecmp", seed=seed, collectives=ring1)
        used = [_fabric_links(nonblocking, simulate(nonblocking, work, p, config).link_bytes) for p in placements]
        assert used[0] and used[1]  # both jobs cross between the leaves
        if not used[0] & used[1]:
            disjoint += 1
            result = interference(nonblocking, [(work, p) for p in placements], config)
            assert result.slowdowns == pytest.approx((1.0, 1.0), rel=1e-12, abs=0)
    assert disjoint > 0


def test_contiguous_interferes_less_than_fragmented_when_oversubscribed(oversubscribed):
    # The case: 2 leaves of 4 single-GPU servers, one uplink per leaf (4:1), two 4-rank jobs each
    # running one 64 MiB ring all_reduce on 2 channels.
    # * contiguous: job 0 on servers 0-3 (leaf 0), job 1 on 4-7 (leaf 1): no traffic leaves a leaf, no
    #   link is shared, slowdown 1.
    # * fragmented (seed 1) and strided: each job has servers under both leaves, so its ring crosses
    #   between the leaves once in each direction; each leaf's single uplink carries one ring edge of
    #   each job on each of 2 channels: 4 chains on one link.
    work = _all_reduce(4)
    config = SimConfig(collectives=RING2)
    results = {}
    for policy in PLACEMENT_POLICIES:
        placements = Placement.for_jobs(oversubscribed, jobs=[4, 4], policy=policy, seed=1)
        results[policy] = interference(oversubscribed, [(work, p) for p in placements], config)
    assert results["contiguous"].slowdowns == pytest.approx((1.0, 1.0), rel=1e-12, abs=0)
    # Alone a chain streams at 20 GB/s: its bytes, 1.5 x 32 MiB of data plus one 1 MiB Simple slice of pipeline
    # fill (ring.py), take B = 49 MiB / 20 GB/s = 2.57 ms, 95 % of the 2.70 ms alone; the rest is NCCL's ring
    # latency. Together a chain runs at C / 4, r = 20 / 12.42 = 1.61 times slower (next test), and the latency
    # does not change, so the slowdown is (alone + (r - 1) B) / alone = 1 + 0.95 (r - 1) = 1.58 (4.27 ms
    # together, simulator.studies.jobs docstring).
    r = CONNECTION / (NDR / 4)
    bandwidth_s = (1.5 * 32 * MiB + nccl_model.SIMPLE_SLICE_BYTES) / CONNECTION
    for policy in ("fragmented", "strided"):
        for alone, slowdown in zip(results[policy].alone, results[policy].slowdowns):
            assert slowdown == pytest.approx(1 + (r - 1) * bandwidth_s / alone.times_s[0], rel=1e-12)
    assert max(results["contiguous"].slowdowns) < min(results["fragmented"].slowdowns)


def test_oversubscribed_uplink_rate_is_shared_by_both_jobs(oversubscribed):
    # Strided: job 0 on servers 0, 2, 4, 6, job 1 on 1, 3, 5, 7 (ring edges 2 -> 4, 6 -> 0 and 3 -> 5,
    # 7 -> 1 cross the leaves). A ring channel is one chain whose rate its tightest link sets.
    # Alone: the 2 channels of a NIC cable get C / 2 = 24.8 GB/s each, above the 20 GB/s one NCCL
    # connection streams, so each chain runs at 20 GB/s (the uplink, one chain per channel, is not
    # tighter). Together: the uplink carries 2 channels x 2 jobs = 4 chains, C / 4 = 12.4 GB/s each.
    # The latency part of the time does not change, so between two sizes S/2 and S the time grows
    # by (2(n-1)/n x S/2 / 2 channels) / rate: 1.5 x 32 MiB / 2 / 20 GB/s = 1.2583 ms alone, and
    # the ratio together / alone is 20 / 12.42 = 1.6102.
    placements = Placement.for_jobs(oversubscribed, jobs=[4, 4], policy="strided")
    config = SimConfig(collectives=RING2)
    times = {}
    for nbytes in (32 * MiB, 64 * MiB):
        work = _all_reduce(4, nbytes)
        result = interference(oversubscribed, [(work, p) for p in placements], config)
        times[nbytes] = (result.alone[0].times_s[0], result.together.jobs[0].times_s[0])
        assert result.slowdowns[0] == pytest.approx(result.slowdowns[1], rel=1e-12)
    alone_growth = times[64 * MiB][0] - times[32 * MiB][0]
    together_growth = times[64 * MiB][1] - times[32 * MiB][1]
    assert alone_growth == pytest.approx(1.5 * 32 * MiB / 2 / CONNECTION, rel=1e-9)
    assert together_growth / alone_growth == pytest.approx(CONNECTION / (NDR / 4), rel=1e-9)


def test_interference_is_deterministic(oversubscribed):
    work = _all_reduce(4)
    runs = []
    for _ in range(2):
        placements = Placement.for_jobs(oversubscribed, jobs=[4, 4], policy="fragmented", seed=7)
        runs.append(
            interference(
                oversubscribed,
                [(work, p) for p in placements],
                SimConfig(routing="adaptive", seed=7, collectives=RING2),
            )
        )
    a, b = runs
    assert a.slowdowns == b.slowdowns
    assert np.array_equal(a.together.result.link_bytes, b.together.result.link_bytes)
    assert a.together.result.rank_end_s == b.together.result.rank_end_s
    assert [j.placement for j in a.together.jobs] == [j.placement for j in b.together.jobs]
    text = a.format()
    assert len(text.splitlines()) == 3 and "slowdown" in text
