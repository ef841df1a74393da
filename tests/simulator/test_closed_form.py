"""Closed-form replay (``simulator.engine.closed_form``) of a context-free network model: the same
timeline, link bytes and per-task times as the event replay, which it replaces for the analytical
model when no link event needs the clock."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.api import simulate
from simulator.collectives.tuner import CollectivePolicy
from simulator.config import LinkEvent, SimConfig
from simulator.engine.closed_form import collective_times
from simulator.flows import Routes
from simulator.network import AnalyticalNetwork, FlowNetwork
from simulator.placement import Placement
from topologies.presets import build_system
from topologies.routing import Router
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import CommTask, ComputeTask, Workload


def _mixed_workload() -> Workload:
    """16 ranks on 2 servers: per-rank compute of different lengths on stream 0; two 8-rank
    all_reduces (one per server) on stream 1 waiting for it; a 16-rank all_gather; a 2-rank
    alltoall across the servers; a repeated collective (one schedule used twice)."""
    servers = [tuple(range(8)), tuple(range(8, 16))]
    colls = [
        Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=servers[0]),
        Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=servers[1]),
        Collective(kind=CollectiveKind.ALL_GATHER, nbytes=16 << 20, group=tuple(range(16))),
        Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=8 << 20, group=(3, 11)),
        Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=servers[0]),
    ]
    programs = []
    for rank in range(16):
        server = rank // 8
        program = [
            ComputeTask(duration_s=1e-4 * (1 + rank % 5)),
            CommTask(index=server if server == 0 else 1, stream=1, after=(0,)),
            ComputeTask(duration_s=3e-4),
            CommTask(index=2, stream=1, after=(2,)),
        ]
        if rank in (3, 11):
            program.append(CommTask(index=3))
        if server == 0:
            program.append(CommTask(index=4, stream=1))
        programs.append(tuple(program))
    return Workload(nranks=16, collectives=tuple(colls), programs=tuple(programs))


@pytest.fixture(scope="module")
def both():
    topo = build_system("dgx-h100", nodes=2)
    work = _mixed_workload()
    config = SimConfig(network_model="analytical", task_ranks=None, launch_overhead_s=5e-6)
    closed = simulate(topo, work, config=config)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AnalyticalNetwork, "context_free", False)  # force the event replay
        events = simulate(topo, work, config=config)
    return closed, events, work


def _engines_run(topo, work, config) -> list[str]:
    """Which engine ``simulate`` ran: the closed form (``collective_times``) or the event replay (``run``)."""
    import simulator.api as api

    ran = []
    with pytest.MonkeyPatch.context() as mp:
        for name in ("collective_times", "run"):

            def spy(*args, _name=name, _real=getattr(api, name), **kwargs):  # noqa: B008 (binds this name's function)
                ran.append(_name)
                return _real(*args, **kwargs)

            mp.setattr(api, name, spy)
        simulate(topo, work, config=config)
    return ran


def test_closed_form_is_what_the_analytical_model_runs(monkeypatch):
    topo, work, config = build_system("dgx-h100", nodes=2), _mixed_workload(), SimConfig(network_model="analytical")
    assert _engines_run(topo, work, config) == ["collective_times"]
    monkeypatch.setattr(AnalyticalNetwork, "context_free", False)  # as the ``both`` fixture's event replay
    assert _engines_run(topo, work, config) == ["run"]


def test_closed_form_equals_the_event_replay(both):
    closed, events, work = both
    for a, b in zip(closed.collectives, events.collectives):
        assert (a.algorithm, a.protocol, a.nchannels) == (b.algorithm, b.protocol, b.nchannels)
        assert a.start_s == pytest.approx(b.start_s, rel=1e-12, abs=1e-15)
        assert a.end_s == pytest.approx(b.end_s, rel=1e-12)
    assert closed.rank_end_s == pytest.approx(events.rank_end_s, rel=1e-12)
    assert set(closed.task_times) == set(events.task_times) == set(range(work.nranks))
    for rank in range(work.nranks):
        np.testing.assert_allclose(closed.task_times[rank], events.task_times[rank], rtol=1e-12, atol=1e-15)
        assert not closed.task_times[rank].flags.writeable
    np.testing.assert_allclose(closed.link_bytes, events.link_bytes, rtol=1e-9, atol=1e-3)
    assert not closed.link_bytes.flags.writeable


def test_a_collective_task_starts_when_its_rank_arrives(both):
    closed, _, work = both
    # rank 0 (compute 0.1 ms) reaches server 0's all_reduce before rank 4 (0.5 ms), the last of its
    # group: its task starts at 0.1 ms, the collective (and rank 4's task) at 0.5 ms
    first, last = closed.task_times[0][1], closed.task_times[4][1]
    assert first[0] == pytest.approx(1e-4, rel=1e-12)
    assert last[0] == pytest.approx(5e-4, rel=1e-12) == closed.collectives[0].start_s
    assert first[1] == last[1] == closed.collectives[0].end_s


def test_equal_collectives_share_one_timing_and_both_count_their_bytes(both):
    closed, _, work = both
    # collectives 0 and 4 are equal: one schedule, the same time
    assert closed.collectives[0].time_s == pytest.approx(closed.collectives[4].time_s, rel=1e-12)
    # link bytes count both runs: the two alone move twice what one moves, on every link
    topo, config = build_system("dgx-h100", nodes=2), SimConfig(network_model="analytical")
    once = simulate(topo, Workload.sequence([work.collectives[0]], nranks=16), config=config)
    twice = simulate(topo, Workload.sequence([work.collectives[0], work.collectives[4]], nranks=16), config=config)
    assert once.link_bytes.sum() > 0
    np.testing.assert_allclose(twice.link_bytes, 2 * once.link_bytes, rtol=1e-9)


def test_closed_form_time_of_a_lone_ring_by_hand():
    # as test_engine's lone-ring case: 8x H100, 1 GiB all_reduce, Simple, 16 channels, 18 x 20.6 GB/s
    # per GPU; NCCL's ring latency 8.4 + 14 x 3.4 = 56 us + path latency + one 1 MiB slice at a
    # chain's rate (370.8 / 16 GB/s); + 7 us launch overhead
    topo = build_system("dgx-h100")
    work = Workload.sequence(
        [Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 30, group=tuple(range(8)))], nranks=8
    )
    res = simulate(
        topo,
        work,
        config=SimConfig(
            network_model="analytical",
            launch_overhead_s=7e-6,
            collectives=CollectivePolicy(algorithm="ring", protocol="Simple", nchannels=16),
        ),
    )
    expected = (
        7e-6
        + 56e-6
        + topo.path_latency_s(Router(topo).path(0, 1))
        + (2 * 7 / 8 * (1 << 30)) / (18 * 20.6e9)
        + (1 << 20) / (18 * 20.6e9 / 16)
    )
    assert res.collectives[0].time_s == pytest.approx(expected, rel=1e-9)


def test_link_events_keep_the_event_replay():
    # a link event needs the clock: the analytical model then runs event by event
    topo = build_system("dgx-h100", nodes=2)
    work = Workload.sequence(
        [Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64 << 20, group=tuple(range(16)))], nranks=16
    )
    config = SimConfig(network_model="analytical", link_events=(LinkEvent(time_s=1e-5, link=0, scale=0.5),))
    assert _engines_run(topo, work, config) == ["run"]


def test_deadlock_is_reported_by_the_closed_form():
    topo = build_system("dgx-h100")
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=(0, 1))
    work = Workload(nranks=2, collectives=(coll,), programs=((CommTask(index=0),), ()))
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(topo, work, placement=Placement.block(topo, nranks=2), config=SimConfig(network_model="analytical"))


def test_collective_times_refuses_a_model_that_sees_other_flows():
    topo = build_system("dgx-h100")
    with pytest.raises(ValueError, match="not context-free"):
        collective_times(
            network=FlowNetwork(topo.link_capacity_bytes_per_s),
            schedules=[],
            route=Routes(Router(topo), rank_gpu=tuple(range(8))),
        )
