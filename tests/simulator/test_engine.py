"""Engine and network models: hand-derived timings, flow == analytical without contention,
capacity never exceeded, bytes conserved, one re-rating per batch, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import simulate
from simulator.collectives import ALGORITHMS, LoweringContext
from simulator.collectives.tuner import CollectivePolicy, choose
from simulator.config import SimConfig
from simulator.network import AnalyticalNetwork, FlowNetwork
from simulator.placement import Placement
from topologies.presets import build_system
from topologies.routing import Router
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import CommTask, ComputeTask, Workload


def drain(network):
    """Run a network model alone until every flow is done: finish time of each flow id."""
    t, finish = 0.0, {}
    while True:
        dt = network.next_completion_s()
        if not np.isfinite(dt):
            return finish
        t += dt
        for fid in network.advance(dt).tolist():
            finish[fid] = t


def one_link(model):
    net = model(np.array([100.0]))
    net.add(np.array([0, 0]), np.ones(2), np.array([1, 1]), np.array([1.0, 2.0]), np.array([np.inf, np.inf]))
    return drain(net)


def test_flow_model_redistributes_and_analytical_does_not():
    # 1 B and 2 B on one 100 B/s link. flow: both at 50 until the 1 B flow ends at 0.02 s, then the
    # other at 100 B/s for its last 1 B: 0.03 s. analytical: shares fixed at 50 B/s: 0.02 s and 0.04 s.
    assert one_link(FlowNetwork) == pytest.approx({0: 0.02, 1: 0.03})
    assert one_link(AnalyticalNetwork) == pytest.approx({0: 0.02, 1: 0.04})


def test_models_agree_without_contention():
    # disjoint links: rates are the link capacities in both models (10 B over 5 B/s = 2 s, 9 B over 3 B/s = 3 s)
    for model in (FlowNetwork, AnalyticalNetwork):
        net = model(np.array([5.0, 3.0]))
        net.add(np.array([0, 1]), np.ones(2), np.array([1, 1]), np.array([10.0, 9.0]), np.array([np.inf, np.inf]))
        assert drain(net) == pytest.approx({0: 2.0, 1: 3.0})


def test_degraded_link_slows_running_flows_in_both_models():
    # one 100 B flow on a 10 B/s link, degraded to 0.1 x (1 B/s) at t = 1 s: 10 B moved by then, the
    # other 90 B at 1 B/s, so it finishes at 1 + 90 / 1 = 91 s (the analytical model re-rates its batch)
    for model in (FlowNetwork, AnalyticalNetwork):
        net = model(np.array([10.0]))
        net.add(np.array([0]), np.ones(1), np.array([1]), np.array([100.0]), np.array([np.inf]))
        assert net.next_completion_s() == pytest.approx(10.0)
        assert net.advance(1.0).size == 0
        net.set_link_scale(0, 0.1)
        assert 1.0 + drain(net)[0] == pytest.approx(91.0), model.name


def test_analytical_re_rating_never_hands_freed_bandwidth_on():
    # flow A (100 B) on links 0 and 1, flow B (10 B) on link 0, capacities 10 and 100 B/s: link 0's load
    # is 2, so both run at min(10 / 2, 100 / 1) = 5 B/s and B ends at t = 2 s; A keeps 5 B/s (90 B left:
    # 18 s more). At t = 3 s (85 B left) a link is degraded and A's batch is re-rated against its first
    # load: link 1 to 0.5 x 100 = 50 B/s leaves A at min(10 / 2, 50 / 1) = 5 B/s (not the 10 B/s it would
    # get alone), ending at 3 + 85 / 5 = 20 s; link 0 to 0.4 x 10 = 4 B/s gives min(4 / 2, 100) = 2 B/s,
    # ending at 3 + 85 / 2 = 45.5 s.
    def finish_s(link, scale):
        net = AnalyticalNetwork(np.array([10.0, 100.0]))
        net.add(np.array([0, 1, 0]), np.ones(3), np.array([2, 1]), np.array([100.0, 10.0]), np.array([np.inf, np.inf]))
        assert net.next_completion_s() == pytest.approx(2.0)
        assert net.advance(2.0).tolist() == [1]
        assert net.next_completion_s() == pytest.approx(18.0)
        assert net.advance(1.0).size == 0
        net.set_link_scale(link, scale)
        return 3.0 + drain(net)[0]

    assert finish_s(1, 0.5) == pytest.approx(20.0)
    assert finish_s(0, 0.4) == pytest.approx(45.5)


def bench_workload(kind, sizes, nranks):
    return Workload.sequence(
        [Collective(kind=kind, nbytes=s, group=tuple(range(nranks))) for s in sizes], nranks=nranks
    )


@pytest.mark.parametrize("system,nodes", [("dgx-h100", 1), ("dgx-h100", 2), ("dgx-a100", 2), ("pcie-rtx4090", 1)])
def test_flow_equals_analytical_for_a_lone_symmetric_collective(system, nodes):
    topo = build_system(system, nodes=nodes)
    n = topo.num_gpus
    work = bench_workload(CollectiveKind.ALL_REDUCE, [1 << 10, 1 << 20, 1 << 30], n)
    flow = simulate(topo, work, config=SimConfig(network_model="flow"))
    analytical = simulate(topo, work, config=SimConfig(network_model="analytical"))
    for a, b in zip(flow.collectives, analytical.collectives):
        assert a.time_s == pytest.approx(b.time_s, rel=1e-12)


def test_lone_ring_time_is_latency_plus_bytes_over_bottleneck():
    # 8x H100, 1 GiB all_reduce, Simple, 16 channels: all 16 chains share each GPU's NVLink bundle
    # (18 x 20.6 GB/s = 370.8 GB/s), so each edge moves 2*7/8 GiB at 370.8 GB/s, after NCCL's
    # Simple ring latency 8.4 + 14*3.4 = 56 us and the path latency (link + NVSwitch traversal),
    # plus one 1 MiB slice of pipeline start-up at one chain's rate (370.8 / 16 GB/s).
    topo = build_system("dgx-h100")
    work = bench_workload(CollectiveKind.ALL_REDUCE, [1 << 30], 8)
    res = simulate(
        topo, work, config=SimConfig(collectives=CollectivePolicy(algorithm="ring", protocol="Simple", nchannels=16))
    )
    path = Router(topo).path(0, 1)
    expected = (
        56e-6 + topo.path_latency_s(path) + (2 * 7 / 8 * (1 << 30)) / (18 * 20.6e9) + (1 << 20) / (18 * 20.6e9 / 16)
    )
    assert res.collectives[0].time_s == pytest.approx(expected, rel=1e-9)


class CheckedFlowNetwork(FlowNetwork):
    """Asserts, after every re-rating, that no link carries more than its capacity."""

    def _rerate(self):
        super()._rerate()
        idx = np.flatnonzero(self.active)
        load = np.zeros_like(self.capacity_bytes_per_s)
        for f in idx:
            links = self.flow_links[self.flow_ptr[f] : self.flow_ptr[f + 1]]
            w = self.flow_weights[self.flow_ptr[f] : self.flow_ptr[f + 1]]
            np.add.at(load, links, w * self.rate[f])
        assert np.all(load <= self.capacity_bytes_per_s * (1 + 1e-9))
        self.checked = getattr(self, "checked", 0) + 1


def test_concurrent_collectives_never_exceed_capacity_and_conserve_bytes(monkeypatch):
    # two groups (even and odd ranks of 2 servers) run all_reduce and all_gather at the same time,
    # staggered by compute, so flows of different collectives share NVLinks, NICs and the fabric.
    import simulator.api as api

    topo = build_system("dgx-h100", nodes=2)
    even, odd = tuple(range(0, 16, 2)), tuple(range(1, 16, 2))
    colls = (
        Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=even),
        Collective(kind=CollectiveKind.ALL_GATHER, nbytes=32 << 20, group=odd),
        Collective(kind=CollectiveKind.REDUCE_SCATTER, nbytes=48 << 20, group=even),
    )
    programs = tuple(
        ((CommTask(index=0), CommTask(index=2)) if r % 2 == 0 else (ComputeTask(duration_s=50e-6), CommTask(index=1)))
        for r in range(16)
    )
    work = Workload(nranks=16, collectives=colls, programs=programs)
    made = []

    def factory(model, topology, *, congestion=()):
        made.append(CheckedFlowNetwork(topology.link_capacity_bytes_per_s))
        return made[-1]

    monkeypatch.setattr(api, "build_network", factory)
    res = simulate(topo, work, config=SimConfig(collectives=CollectivePolicy(algorithm="ring", protocol="Simple")))
    assert made[0].checked >= 3
    # bytes conserved: every link moved exactly the wire bytes of the flows routed over it
    router = Router(topo)
    ctx = LoweringContext(topology=topo, router=router, rank_gpu=Placement.block(topo, nranks=16).rank_gpu)
    expected = np.zeros(topo.num_links)
    for c in colls:
        ch = choose(c, ctx, CollectivePolicy(algorithm="ring", protocol="Simple"))
        sched = ALGORITHMS[ch.algorithm].lower(c, ctx, protocol=ch.protocol, nchannels=ch.nchannels)
        for step in sched.steps:
            for s, d, b, k in zip(step.src, step.dst, step.nbytes, step.channel):
                np.add.at(
                    expected,
                    router.path(ctx.gpu(int(s)), ctx.gpu(int(d)), flow_key=int(k), pxn=sched.pxn),
                    float(b) * sched.wire_factor,
                )
    np.testing.assert_allclose(res.link_bytes, expected, rtol=1e-9, atol=1e-3)
    assert res.collectives[1].start_s == pytest.approx(50e-6)


def test_one_rerating_per_batch():
    # 5 sequential all_reduces on 4 servers (32 ranks, 16 chains each start together): the flow
    # model re-rates once when a collective's flows start and once when they all end.
    topo = build_system("dgx-h100", nodes=4)
    work = bench_workload(CollectiveKind.ALL_REDUCE, [1 << 20] * 5, 32)
    res = simulate(topo, work)
    assert res.network_rerates <= 2 * 5


def test_deterministic():
    topo = build_system("dgx-h100", nodes=3)
    work = bench_workload(CollectiveKind.ALL_GATHER, [96 << k for k in range(4, 24, 3)], 24)  # 24 x 4 B pieces
    a, b = simulate(topo, work, config=SimConfig(seed=7)), simulate(topo, work, config=SimConfig(seed=7))
    assert [r.end_s for r in a.collectives] == [r.end_s for r in b.collectives]
    assert a.link_bytes.tobytes() == b.link_bytes.tobytes()


def test_deadlock_is_reported():
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0, 1))
    # rank 1's program never reaches collective 0: the engine reports the stuck collective, no hang
    work = Workload(nranks=2, collectives=(coll,), programs=((CommTask(index=0),), ()))
    with pytest.raises(RuntimeError, match="never started"):
        simulate(build_system("dgx-h100"), work, placement=Placement.block(build_system("dgx-h100"), nranks=2))


# ---- streams and dependencies -------------------------------------------------------------------


def _streams_case(*, comm_stream: int, comm_after: tuple[int, ...], task_ranks=()):
    """Two ranks: a 1 ms compute on stream 0, then an all_reduce on ``comm_stream``."""
    topo = build_system("dgx-h100")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=256 << 20, group=(0, 1))
    program = (ComputeTask(duration_s=1e-3), CommTask(index=0, stream=comm_stream, after=comm_after))
    work = Workload(nranks=2, collectives=(coll,), programs=(program, program))
    return simulate(topo, work, placement=Placement.block(topo, nranks=2), config=SimConfig(task_ranks=task_ranks))


def test_streams_overlap_and_dependencies_serialise():
    alone = _streams_case(comm_stream=0, comm_after=())  # one stream: compute, then comm
    comm_s = alone.collectives[0].time_s
    assert alone.makespan_s == pytest.approx(1e-3 + comm_s, rel=1e-12)
    overlapped = _streams_case(comm_stream=1, comm_after=())  # comm on its own stream starts at 0
    assert overlapped.collectives[0].start_s == 0.0
    assert overlapped.makespan_s == pytest.approx(max(1e-3, comm_s), rel=1e-12)
    waited = _streams_case(comm_stream=1, comm_after=(0,))  # ... unless it waits for the compute
    assert waited.collectives[0].start_s == pytest.approx(1e-3, rel=1e-12)
    assert waited.makespan_s == pytest.approx(alone.makespan_s, rel=1e-12)


def test_task_times_are_recorded_for_the_chosen_ranks():
    res = _streams_case(comm_stream=1, comm_after=(0,), task_ranks=(1,))
    assert set(res.task_times) == {1}
    times = res.task_times[1]
    comm = res.collectives[0]
    # compute 0 .. 1 ms, then the all_reduce exactly as the collective record says
    assert times.tolist() == [[0.0, pytest.approx(1e-3, rel=1e-12)], [pytest.approx(comm.start_s), comm.end_s]]
    assert not times.flags.writeable
    assert set(_streams_case(comm_stream=0, comm_after=(), task_ranks=None).task_times) == {0, 1}
    assert _streams_case(comm_stream=0, comm_after=()).task_times == {}
    with pytest.raises(ValueError, match="task_ranks"):
        _streams_case(comm_stream=0, comm_after=(), task_ranks=(5,))


def test_after_must_name_an_earlier_task():
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0,))
    with pytest.raises(ValueError, match=r"programs\[0\]\[0\]\.after"):
        Workload(nranks=1, collectives=(coll,), programs=((CommTask(index=0, after=(0,)),),))
    with pytest.raises(ValueError, match="ComputeTask.stream"):
        ComputeTask(duration_s=1.0, stream=-1)


def test_spray_splits_every_flow_evenly_over_the_spines():
    """8 DGX H100 on a top-of-rack leaf-spine (4 servers a leaf), ring all_reduce: with ECMP each leaf->spine
    uplink carries whole flows (hash-dependent, uneven); with packet spraying every flow crossing a
    leaf splits 1/u over its u uplinks, so a leaf's uplinks carry equal bytes (rel 1e-9)."""
    from topologies.topology import LinkTier

    topo = build_system("dgx-h100", nodes=8, rail_optimised=False)  # ToR leaves: traffic crosses spines
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=tuple(range(64)))
    work = Workload.sequence([coll], nranks=64)
    policy = CollectivePolicy(algorithm="ring", protocol="Simple")
    sprayed = simulate(topo, work, config=SimConfig(routing="spray", collectives=policy))
    hashed = simulate(topo, work, config=SimConfig(routing="ecmp", collectives=policy))
    tier = {n: d.get("tier") for n, d in topo.graph.nodes(data=True)}
    up = [
        k
        for k in range(topo.num_links)
        if topo.link_tier[k] == LinkTier.FABRIC_1
        and tier[int(topo.link_src[k])] == 1
        and tier[int(topo.link_dst[k])] == 2
    ]
    by_leaf: dict[int, list[float]] = {}
    for k in up:
        by_leaf.setdefault(int(topo.link_src[k]), []).append(float(sprayed.link_bytes[k]))
    assert by_leaf and all(max(v) > 0 for v in by_leaf.values())
    for loads in by_leaf.values():
        assert max(loads) == pytest.approx(min(loads), rel=1e-9)
    # the same bytes cross the fabric tier either way
    assert sum(sprayed.link_bytes[up]) == pytest.approx(sum(hashed.link_bytes[up]), rel=1e-9)


def test_failed_links_carry_nothing_and_the_collective_still_completes():
    from topologies.topology import LinkTier

    topo = build_system("dgx-h100", nodes=8, rail_optimised=False)
    tier = {n: d.get("tier") for n, d in topo.graph.nodes(data=True)}
    up = [
        k
        for k in range(topo.num_links)
        if topo.link_tier[k] == LinkTier.FABRIC_1
        and tier[int(topo.link_src[k])] == 1
        and tier[int(topo.link_dst[k])] == 2
    ]
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=tuple(range(64)))
    work = Workload.sequence([coll], nranks=64)
    healthy = simulate(topo, work)
    busiest = max(up, key=lambda k: healthy.link_bytes[k])
    assert healthy.link_bytes[busiest] > 0
    degraded = simulate(topo, work, config=SimConfig(failed_links=frozenset({busiest})))
    assert degraded.link_bytes[busiest] == 0
    assert degraded.collectives[0].time_s >= healthy.collectives[0].time_s * (1 - 1e-12)
    with pytest.raises(ValueError, match="failed_links"):
        SimConfig(failed_links={1, 2})


def test_without_gpudirect_rdma_network_bytes_cross_host_memory_twice():
    """GDR off: each byte leaving a GPU for the network is written to host memory and read back by
    the NIC (cpu->mem, mem->cpu), and the same on the receiving server: 4 host-memory link
    crossings per byte sent; with GDR none."""
    from topologies.links import LinkKind

    coll = Collective(kind=CollectiveKind.SENDRECV, nbytes=64 << 20, group=(0, 1))
    work = Workload.sequence([coll], nranks=2)
    for gdr, crossings in ((True, 0), (False, 4)):
        topo = build_system("dgx-h100", nodes=2, gdr=gdr)
        res = simulate(topo, work, placement=Placement.block(topo, nranks=2, gpus_per_node=1))
        host = np.asarray(topo.link_kind) == LinkKind.HOST_MEMORY
        # sendrecv on 2 ranks: rank 0 -> 1 and 1 -> 0, 64 MiB each
        assert res.link_bytes[host].sum() == pytest.approx(crossings * 2 * (64 << 20), rel=1e-9)


# ---- links degraded or failed during a run ------------------------------------------------------


def _fabric_links(topo):
    from topologies.topology import LinkTier

    tier = {n: d.get("tier") for n, d in topo.graph.nodes(data=True)}
    return [
        k
        for k in range(topo.num_links)
        if topo.link_tier[k] == LinkTier.FABRIC_1
        and tier[int(topo.link_src[k])] == 1
        and tier[int(topo.link_dst[k])] == 2
    ]


def test_degraded_link_mid_transfer_slows_the_rest_by_hand():
    """2 ranks on 2 servers exchange S = 256 MiB each way (sendrecv). Healthy: time L + D at total
    rate r0 = S / D per direction (L, D from two sizes: T(S) = L + D, T(2S) = L + 2D). At t_e = L + D/2
    rank 0's NIC uplink drops to 5 % of its capacity C, below the flows' caps, so its direction moves
    its remaining S - r0 (t_e - L) bytes at 0.05 C: end = t_e + (S - r0 (t_e - L)) / (0.05 C)."""
    from simulator.config import LinkEvent

    topo = build_system("dgx-h100", nodes=2)
    place = Placement.block(topo, nranks=2, gpus_per_node=1)
    size = 256 << 20

    def run(nbytes, events=()):
        work = Workload.sequence([Collective(kind=CollectiveKind.SENDRECV, nbytes=nbytes, group=(0, 1))], nranks=2)
        return simulate(topo, work, placement=place, config=SimConfig(link_events=events))

    t1, t2 = run(size).collectives[0].time_s, run(2 * size).collectives[0].time_s
    d, lat = t2 - t1, 2 * t1 - t2
    info = topo.servers[0]
    uplink = topo.nic_leaf_link[info.nics[info.nic_of_gpu[0]]]
    t_event = lat + d / 2
    slow = run(size, (LinkEvent(time_s=t_event, link=uplink, scale=0.05),))
    assert slow.link_bytes[uplink] > 0
    expected = t_event + (size - size / d * (t_event - lat)) / (0.05 * topo.link_capacity_bytes_per_s[uplink])
    assert slow.collectives[0].end_s == pytest.approx(expected, rel=1e-9)


def test_failed_link_mid_run_reroutes_and_conserves_bytes():
    topo = build_system("dgx-h100", nodes=8, rail_optimised=False)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=256 << 20, group=tuple(range(64)))
    work = Workload.sequence([coll], nranks=64)
    healthy = simulate(topo, work)
    up = _fabric_links(topo)
    busiest = max(up, key=lambda k: healthy.link_bytes[k])
    from simulator.config import LinkEvent

    half = healthy.collectives[0].start_s + healthy.collectives[0].time_s / 2
    failed = simulate(topo, work, config=SimConfig(link_events=(LinkEvent(time_s=half, link=busiest),)))
    # it finishes; the failed link carried only what it moved before the failure
    assert 0 < failed.link_bytes[busiest] < healthy.link_bytes[busiest]
    assert failed.collectives[0].time_s >= healthy.collectives[0].time_s * (1 - 1e-12)
    # rerouting changes fabric paths only: every NIC link carries the same bytes as when healthy
    from topologies.topology import LinkTier

    nic = np.asarray(topo.link_tier) == LinkTier.NIC
    assert failed.link_bytes[nic] == pytest.approx(healthy.link_bytes[nic], rel=1e-9)
    assert failed.link_bytes[up].sum() == pytest.approx(healthy.link_bytes[up].sum(), rel=1e-9)


def test_link_event_errors():
    from simulator.config import LinkEvent

    with pytest.raises(ValueError, match="LinkEvent.scale"):
        LinkEvent(time_s=0.0, link=1, scale=1.5)
    with pytest.raises(ValueError, match="LinkEvent.time_s"):
        LinkEvent(time_s=-1.0, link=1)
    topo = build_system("dgx-h100")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0, 1))
    with pytest.raises(ValueError, match="link_events: link 999999"):
        simulate(
            topo,
            Workload.sequence([coll], nranks=2),
            config=SimConfig(link_events=(LinkEvent(time_s=0.0, link=999999),)),
        )


def test_the_engine_replays_routed_arrays_without_a_router():
    # the engine takes whatever route(step, schedule) gives: one flow of 1 GB over a lone 1 GB/s link
    # after 1 us of latency ends at 1 s + 1 us; a failure event needs the reroute callback
    from simulator.config import LinkEvent
    from simulator.engine.replay import run
    from simulator.flows import NetworkFlows
    from simulator.schedule import Schedule, Step

    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0, 1))
    step = Step.of(src=[0], dst=[1], nbytes=[1024])
    sched = Schedule(collective=coll, algorithm="test", protocol="Simple", nchannels=1, steps=(step,))
    flows = NetworkFlows(
        links=np.array([0]),
        link_weights=np.array([1.0]),
        counts=np.array([1]),
        wire_bytes=np.array([1e9]),
        caps_bytes_per_s=np.array([np.inf]),
        latency_s=1e-6,
        fill_bytes=np.array([0.0]),
    )
    calls = []

    def route(s, schedule):
        calls.append((s, schedule))
        return flows

    work = Workload.sequence([coll], nranks=2)
    times, _, _, _ = run(network=FlowNetwork(np.array([1e9])), workload=work, schedules=[sched], route=route)
    assert times == [(0.0, pytest.approx(1.0 + 1e-6, rel=1e-12))]
    assert calls == [(step, sched)]
    with pytest.raises(ValueError, match="on_link_failed"):
        run(
            network=FlowNetwork(np.array([1e9])),
            workload=work,
            schedules=[sched],
            route=route,
            link_events=(LinkEvent(time_s=0.5, link=0),),
        )


def test_a_route_cache_shared_between_runs_changes_no_result():
    # the routing tables of one fabric built once for several simulate calls (a sweep): same results, bit for bit
    from topologies.routing import RouteCache

    topo = build_system("dgx-h100", nodes=4, rail_optimised=False)
    work = bench_workload(CollectiveKind.ALL_REDUCE, [1 << 20, 64 << 20], 32)
    cache = RouteCache()
    for routing in ("ecmp", "adaptive", "spray"):
        config = SimConfig(routing=routing, seed=3)
        fresh = simulate(topo, work, config=config)
        shared = [simulate(topo, work, config=config, route_cache=cache) for _ in range(2)]
        for res in shared:
            assert [r.end_s for r in res.collectives] == [r.end_s for r in fresh.collectives]
            assert res.link_bytes.tobytes() == fresh.link_bytes.tobytes()
    assert len(cache) == 1  # one topology: one wiring, reused by every run


@pytest.mark.parametrize("network_model", ["flow", "analytical"])
def test_a_passive_rank_takes_part_without_arriving(network_model):
    # ranks 0 and 1 compute 1 ms and 2 ms, then all-reduce 64 MiB with ranks 2 and 3. Written out, ranks 2 and 3
    # compute 1 ms and 2 ms too (the same programs as 0 and 1): the collective starts at 2 ms. Passive, ranks
    # 2 and 3 have no program and the collective still starts at 2 ms, when ranks 0 and 1 have arrived, and
    # moves the same bytes: every time and every link's bytes are the same.
    topo = build_system("dgx-h100", nodes=2)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=(0, 1, 2, 3))
    program = [(ComputeTask(duration_s=d), CommTask(index=0)) for d in (1e-3, 2e-3)]
    placement = Placement.custom(topo, [0, 8, 1, 9])
    config = SimConfig(network_model=network_model)
    full = simulate(topo, Workload(nranks=4, collectives=(coll,), programs=(*program, *program)), placement, config)
    passive = Workload(nranks=4, collectives=(coll,), programs=(*program, (), ()), passive=frozenset({2, 3}))
    reduced = simulate(topo, passive, placement, config)
    (record,) = reduced.collectives
    assert record.start_s == 2e-3 and (record.start_s, record.end_s) == (
        full.collectives[0].start_s,
        full.collectives[0].end_s,
    )
    assert np.array_equal(reduced.link_bytes, full.link_bytes)
    assert reduced.rank_end_s[:2] == full.rank_end_s[:2]
    with pytest.raises(ValueError, match="rank 2 is passive"):
        Workload(nranks=4, collectives=(coll,), programs=(*program, *program), passive=frozenset({2}))
    lonely = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8, group=(2, 3))
    with pytest.raises(ValueError, match="every member is passive"):
        Workload(nranks=4, collectives=(lonely,), programs=((), (), (), ()), passive=frozenset({2, 3}))
