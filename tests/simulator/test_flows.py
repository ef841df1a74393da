"""Tests for simulator.flows: a lowered step routed into flat network flows (chains as one weighted flow,
connection caps per (source, destination, channel), PXN shared connections, per-flow caps in wire bytes)
and the Routes object the engine calls (memo, rerouting around a failed link)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.collectives import ALGORITHMS, LoweringContext
from simulator.flows import Routes, network_flows
from simulator.schedule import Schedule, Step
from topologies import devices as dv
from topologies.presets import build_system
from topologies.routing import Router
from topologies.topology import LinkTier
from workloads.collectives import Collective, CollectiveKind


def test_chain_becomes_one_flow_weighted_by_edge_bytes():
    topo = build_system("dgx-h100")
    router = Router(topo)
    ctx = LoweringContext(topology=topo, router=router, rank_gpu=tuple(range(8)))
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8 * 4 * 1001, group=tuple(range(8)))
    sched = ALGORITHMS["ring"].lower_on(coll, ctx, protocol="Simple", nchannels=2, comm_channels=2)  # 2 chains
    flows = network_flows(sched.steps[0], sched, router=router, rank_gpu=ctx.rank_gpu)
    assert flows.counts.shape == (2,)  # one network flow per channel
    # the busiest edge paces the chain: each flow's largest link weight is 1
    assert np.maximum.reduceat(flows.link_weights, [0, flows.counts[0]]).tolist() == [1.0, 1.0]
    # weight x chain bytes summed over the chain's links = sum over edges of edge bytes x path length
    total = float((flows.link_weights * np.repeat(flows.wire_bytes, flows.counts)).sum())
    per_edge = sum(
        float(b) * router.path(int(s), int(d), flow_key=int(k), pxn=False).shape[0]
        for s, d, b, k in zip(sched.steps[0].src, sched.steps[0].dst, sched.steps[0].nbytes, sched.steps[0].channel)
    )
    assert total == pytest.approx(per_edge)


CONNECTION = dv.CONNECTX7_NDR.connection_bytes_per_s  # 20 GB/s: most one NCCL connection streams


def _caps(topo, step: Step, *, pxn: bool = False, protocol: str = "Simple", wire_factor: float = 1.0) -> list[float]:
    """The network flows' rate caps of ``step`` alone, ranks placed on GPUs 0, 1, ..."""
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(topo.num_gpus)))
    sched = Schedule(
        collective=coll,
        algorithm="test",
        protocol=protocol,
        nchannels=1,
        steps=(step,),
        pxn=pxn,
        wire_factor=wire_factor,
    )
    flows = network_flows(step, sched, router=Router(topo), rank_gpu=tuple(range(topo.num_gpus)))
    return flows.caps_bytes_per_s.tolist()


def _fan_out(dst: tuple[int, ...]) -> Step:
    """One chain (channel 0) of 1 MiB edges from rank 0 to each of ``dst``."""
    n = len(dst)
    return Step.of(src=[0] * n, dst=list(dst), nbytes=[1 << 20] * n, chain=[0] * n, channel=[0] * n)


def test_each_connection_of_a_chain_streams_its_own_limit():
    # rank 0 (server 0, GPU 0) sends to GPU 0 of servers 1 and 2: both edges leave through GPU 0's
    # NIC, each over its own connection (one QP per peer), so each gets the 20 GB/s a connection
    # streams (topologies.devices) and the chain, paced by its busiest edge, streams 20 GB/s; two
    # edges to one peer on one channel are one connection and share it: 10 GB/s.
    topo = build_system("dgx-h100", nodes=3)
    limit = float(np.max(topo.link_flow_cap_bytes_per_s[np.isfinite(topo.link_flow_cap_bytes_per_s)]))
    assert limit == CONNECTION
    assert _caps(topo, _fan_out((8, 16))) == [limit]
    assert _caps(topo, _fan_out((8, 8))) == [limit / 2]


def test_pxn_flows_to_one_gpu_share_their_servers_connection():
    # independent flows under PXN: ranks 0 and 1 (server 0) both send to rank 8 (GPU 0 of server 1); both
    # leave through NIC 0 (rank 8's rail) as one aggregated connection: 10 GB/s each. Rank 16 (server 2)
    # sends to rank 8 over its own connection (20 GB/s), though it arrives through the same NIC; without
    # PXN every flow is its own connection.
    topo = build_system("dgx-h100", nodes=3)
    step = Step.of(src=[0, 1, 16], dst=[8, 8, 8], nbytes=[1 << 20] * 3)
    assert _caps(topo, step, pxn=True) == [CONNECTION / 2, CONNECTION / 2, CONNECTION]
    assert _caps(topo, step, pxn=False) == [CONNECTION] * 3


def test_a_shared_pxn_connection_is_split_by_bytes():
    # ranks 0 and 1 send 64 MiB and 1 MiB to rank 8 through one NIC's connection: 20 GB/s x 64/65 and
    # x 1/65, so both finish together, as 65 MiB over one connection would
    step = Step.of(src=[0, 1], dst=[8, 8], nbytes=[64 << 20, 1 << 20])
    caps = _caps(build_system("dgx-h100", nodes=2), step, pxn=True)
    assert caps == pytest.approx([CONNECTION * 64 / 65, CONNECTION / 65], rel=1e-12)


def test_flows_that_leave_through_different_nics_do_not_share_a_connection():
    # PCIe servers have no NVSwitch to relay over, so even under PXN each GPU sends through its own NIC:
    # ranks 0 and 4 (different NICs) to rank 8 are two connections, each with the whole per-connection limit
    topo = build_system("pcie-rtx4090", nodes=2, fabric="roce-400g", nics_per_node=2)
    nic = [topo.servers[0].nic_of_gpu[g] for g in (0, 4)]
    assert nic[0] != nic[1]
    limit = float(np.max(topo.link_flow_cap_bytes_per_s[np.isfinite(topo.link_flow_cap_bytes_per_s)]))
    step = Step.of(src=[0, 4], dst=[8, 8], nbytes=[1 << 20, 1 << 20])
    assert _caps(topo, step, pxn=True) == [limit, limit]


def test_a_flows_own_rate_cap_binds_in_wire_bytes():
    # a 5 GB/s payload cap under LL (2 wire bytes per payload byte) is a 10 GB/s wire cap; an infinite cap
    # leaves the flow uncapped
    step = Step.of(src=[0, 3], dst=[1, 4], nbytes=[1 << 20, 1 << 20], rate_cap_bytes_per_s=[5e9, np.inf])
    caps = _caps(build_system("dgx-h100"), step, protocol="LL", wire_factor=2.0)
    assert caps == [10e9, np.inf]
    # a per-flow cap is for independent flows only: chained flows with one are rejected
    with pytest.raises(ValueError, match=r"rate_cap_bytes_per_s.*chain.*\[0\].*chain == -1"):
        Step.of(
            src=[0, 1, 2, 5, 3],
            dst=[1, 2, 3, 6, 4],
            nbytes=[1 << 20, 1 << 20, 2 << 20, 0, 1 << 20],
            chain=[-1, 0, 0, 0, -1],
            rate_cap_bytes_per_s=[5e9, 2e9, 7e9, 1.0, np.inf],
        )
    with pytest.raises(ValueError, match="rate_cap_bytes_per_s"):
        Step.of(src=[0], dst=[1], nbytes=[1], rate_cap_bytes_per_s=[0.0])
    with pytest.raises(ValueError, match="rate_cap_bytes_per_s"):
        Step.of(src=[0], dst=[1], nbytes=[1], rate_cap_bytes_per_s=[1.0, 2.0])


# ---- Routes: what the engine calls ---------------------------------------------------------------


def _ring_schedule(topo, router):
    ctx = LoweringContext(topology=topo, router=router, rank_gpu=tuple(range(topo.num_gpus)))
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 24, group=tuple(range(topo.num_gpus)))
    return ctx, ALGORITHMS["ring"].lower_on(coll, ctx, protocol="Simple", nchannels=2, comm_channels=2)


def test_routes_memoise_per_schedule_and_step():
    topo = build_system("dgx-h100", nodes=2)
    router = Router(topo)
    ctx, sched = _ring_schedule(topo, router)
    routes = Routes(router, rank_gpu=ctx.rank_gpu)
    step = sched.steps[0]
    first = routes(step, sched)
    assert routes(step, sched) is first  # memoised
    fresh = routes.route(step, sched)  # the same routing, without the memo
    assert fresh is not first
    for name in ("links", "link_weights", "counts", "wire_bytes", "caps_bytes_per_s", "fill_bytes"):
        assert getattr(fresh, name).tobytes() == getattr(first, name).tobytes(), name
    assert fresh.latency_s == first.latency_s
    # the same as network_flows with the router alone
    alone = network_flows(step, sched, router=Router(topo), rank_gpu=ctx.rank_gpu)
    assert alone.links.tobytes() == first.links.tobytes()


def test_a_failed_link_is_avoided_by_later_routes():
    topo = build_system("dgx-h100", nodes=8, rail_optimised=False)
    router = Router(topo, policy="adaptive", seed=3, pxn=False)
    ctx, sched = _ring_schedule(topo, router)
    routes = Routes(router, rank_gpu=ctx.rank_gpu)
    step = sched.steps[0]
    before = routes(step, sched)
    fabric = [int(k) for k in np.unique(before.links) if topo.link_tier[k] == LinkTier.FABRIC_1]
    assert fabric  # the ring crosses switch-to-switch links
    routes.on_link_failed(fabric[0])
    after = routes(step, sched)
    assert after is not before and fabric[0] not in after.links.tolist()
    # the new router keeps the policy, seed and PXN default, and adds the failed link
    assert (routes.router.policy, routes.router.seed, routes.router.pxn) == ("adaptive", 3, False)
    assert routes.router.failed_links == {fabric[0]}
    # the bytes a link carries move elsewhere, none are lost
    assert float(np.sum(after.wire_bytes)) == float(np.sum(before.wire_bytes))


def test_a_step_routed_again_after_leaving_the_memo_gives_the_same_simulation(monkeypatch):
    # a memo of 1 byte keeps only the last routed step: every other step is routed again from its pins, and the
    # simulation is the same to the bit (ECMP across a fat-tree: the pins decide the paths)
    from simulator.studies.training import StepOptions, simulate_step
    from workloads.parallelism import ParallelismSpec
    from workloads.presets import custom_gpt

    system = build_system("dgx-h100", nodes=4, topology="fat-tree")
    model = custom_gpt(layers=4, hidden=1024, heads=16, seq_len=1024, vocab=1024)
    spec = ParallelismSpec(tp=2, pp=2, dp=8, global_batch=16)
    calls = []
    route = Routes.route
    monkeypatch.setattr(Routes, "route", lambda self, *a: calls.append(1) or route(self, *a))
    kept = simulate_step(model, spec, system=system, options=StepOptions(exact=True))
    routed = len(calls)
    monkeypatch.setattr("simulator.flows.MEMO_BYTES", 1)
    again = simulate_step(model, spec, system=system, options=StepOptions(exact=True))
    assert len(calls) - routed > routed  # steps were routed again
    assert again.step_time_s == kept.step_time_s
    assert (again.phases[0].sim.link_bytes == kept.phases[0].sim.link_bytes).all()
    assert [c.end_s for c in again.phases[0].sim.collectives] == [c.end_s for c in kept.phases[0].sim.collectives]
