"""Traffic classes (simulator.traffic, simulator.kernels.classes): hand-derived shares on one link (strict priority,
weighted classes, redistribution), the kernel against plain max-min with one class (bit for bit) and against its
naive twin, invariants on random instances, the flow model and the engine with classes, jobs in classes, the
NCCL_IB_TC / NCCL_IB_SL marking, the step's settings and the refusals."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

from simulator.api import simulate
from simulator.collectives import nccl_model
from simulator.config import LinkEvent, SimConfig
from simulator.kernels import build_csr, class_rates, maxmin_rates
from simulator.kernels import classes as classes_module
from simulator.network import FlowNetwork, build_network
from simulator.placement import Placement
from simulator.studies.jobs import interference
from simulator.studies.scenario import prepare_step, step_settings
from simulator.traffic import StorageStream, TrafficClass, TrafficPolicy, checkpoint_streams
from tests.naive import class_rates_naive, maxmin_rates_naive
from tests.simulator.test_jobs import CONNECTION, NDR, RING2, MiB, _all_reduce
from tests.topologies.fabrics import BOX, toy_switch
from topologies import links as lk
from topologies.fat_tree import leaf_spine
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import Workload

LINK = 400e9 / 8  # one 400 Gb/s link: 50 GB/s
GB = 1e9


def test_doctests():
    import simulator.traffic

    for module in (classes_module, simulator.traffic):
        assert doctest.testmod(module).failed == 0


def _rates(paths, capacities, klass, levels, weights, caps=None):
    ptr, links, w = build_csr([np.array(p, dtype=np.int64) for p in paths])
    caps = np.full(len(paths), np.inf) if caps is None else np.array(caps, dtype=np.float64)
    args = (ptr, links, w, np.ones(len(paths), np.bool_), np.array(capacities), caps)
    fast = class_rates(*args, np.array(klass), np.array(levels), np.array(weights, dtype=np.float64))
    slow = class_rates_naive(*args, np.array(klass), np.array(levels), np.array(weights, dtype=np.float64))
    np.testing.assert_allclose(fast, slow, rtol=1e-12)
    return fast


# ================================================================================================
# Hand-derived shares on one 400 Gb/s link
# ================================================================================================


def test_strict_priority_high_class_takes_the_whole_link():
    # flow 0 in class 0 (level 0), flow 1 in class 1 (level 1), both on link 0 only: level 0 is rated first on the
    # whole link, max-min alone -> 50 GB/s; level 1 gets the residual 50 - 50 = 0 while flow 0 runs
    rates = _rates([[0], [0]], [LINK], [0, 1], [0, 1], [1.0, 1.0])
    assert rates.tolist() == [LINK, 0.0]


def test_strict_priority_low_class_gets_what_the_high_class_cannot_use():
    # the high flow also crosses link 1 of 100 Gb/s = 12.5 GB/s: its max-min share of the whole network is 12.5;
    # the low flow gets 400 - 100 = 300 Gb/s = 37.5 GB/s of link 0
    rates = _rates([[0, 1], [0]], [LINK, LINK / 4], [0, 1], [0, 1], [1.0, 1.0])
    assert rates.tolist() == [LINK / 4, 3 * LINK / 4]


def test_strict_priority_high_class_shares_max_min_within_itself():
    # two high flows and one low on link 0: the high class's max-min share of the whole link is 25 GB/s each,
    # the low class the rest, 0; with the second high flow held to 10 GB/s by a cap, the first takes 40 and
    # the low one still 0 (the high class fills the link)
    rates = _rates([[0], [0], [0]], [LINK], [0, 0, 1], [0, 1], [1.0, 1.0])
    assert rates.tolist() == [LINK / 2, LINK / 2, 0.0]
    rates = _rates([[0], [0], [0]], [LINK], [0, 0, 1], [0, 1], [1.0, 1.0], caps=[np.inf, 10 * GB, np.inf])
    assert rates.tolist() == [LINK - 10 * GB, 10 * GB, 0.0]


def test_weighted_classes_split_as_their_weights():
    # ETS 3:1 on one link, one flow each: 3/4 and 1/4 of 50 GB/s = 37.5 and 12.5 GB/s (300 and 100 Gb/s)
    rates = _rates([[0], [0]], [LINK], [0, 1], [8, 8], [3.0, 1.0])
    np.testing.assert_allclose(rates, [0.75 * LINK, 0.25 * LINK], rtol=1e-12)


def test_weighted_share_does_not_grow_with_a_class_flow_count():
    # equal weights, class 0 with three flows, class 1 with one: each class gets 25 GB/s, class 0's flows
    # 25 / 3 each (per-flow weights would give class 0 three quarters of the link instead)
    rates = _rates([[0], [0], [0], [0]], [LINK], [0, 0, 0, 1], [8, 8], [1.0, 1.0])
    np.testing.assert_allclose(rates, [LINK / 6] * 3 + [LINK / 2], rtol=1e-12)


def test_weighted_share_a_class_cannot_use_goes_to_the_others():
    # weights 3:1 but the weight-3 flow crosses a 100 Gb/s link too: it uses 12.5 GB/s of its 37.5 and the other
    # class takes the rest, 50 - 12.5 = 37.5 GB/s (work-conserving DWRR)
    rates = _rates([[0, 1], [0]], [LINK, LINK / 4], [0, 1], [8, 8], [3.0, 1.0])
    np.testing.assert_allclose(rates, [LINK / 4, 3 * LINK / 4], rtol=1e-12)


def test_weighted_classes_on_two_links_each_take_their_share_of_each():
    # flow 0 (class 0) crosses links 0 (50 GB/s) and 1 (12.5 GB/s); flow 1 (class 1) link 0, flow 2 (class 1)
    # link 1; equal weights. Link 1 splits 6.25 / 6.25, so flow 0 runs at 6.25 and on link 0 class 0 wants no
    # more: flow 1 takes 50 - 6.25 = 43.75
    rates = _rates([[0, 1], [0], [1]], [LINK, LINK / 4], [0, 1, 1], [8, 8], [1.0, 1.0])
    np.testing.assert_allclose(rates, [LINK / 8, 7 * LINK / 8, LINK / 8], rtol=1e-12)


def test_strict_level_then_weighted_classes_on_the_rest():
    # level 0 flow capped at 20 GB/s; level 8 classes 1:1 share the remaining 30 GB/s: 15 each
    rates = _rates([[0], [0], [0]], [LINK], [0, 1, 2], [0, 8, 8], [1.0, 1.0, 1.0], caps=[20 * GB, np.inf, np.inf])
    np.testing.assert_allclose(rates, [20 * GB, 15 * GB, 15 * GB], rtol=1e-12)


# ================================================================================================
# Random instances: one class is max-min bit for bit; several classes keep the invariants
# ================================================================================================


def _random_instance(rng, n_flows, n_links):
    paths = [rng.choice(n_links, size=rng.integers(1, min(4, n_links) + 1), replace=False) for _ in range(n_flows)]
    weights = [rng.uniform(0.5, 2.0, size=len(p)) for p in paths]
    ptr, links, w = build_csr(paths, weights)
    capacity = rng.uniform(1.0, 10.0, size=n_links) * GB
    caps = np.where(rng.random(n_flows) < 0.3, rng.uniform(0.2, 5.0, size=n_flows) * GB, np.inf)
    active = rng.random(n_flows) < 0.9
    return ptr, links, w, active, capacity, caps


@pytest.mark.parametrize("seed", range(20))
def test_one_class_is_max_min_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    ptr, links, w, active, capacity, caps = _random_instance(rng, 30, 12)
    plain = maxmin_rates(ptr, links, w, active, capacity, caps)
    klass = np.full(active.shape[0], int(rng.integers(0, 3)))  # every flow in one class, whichever
    ruled = class_rates(ptr, links, w, active, capacity, caps, klass, np.array([0, 1, 8]), np.array([1.0, 2.0, 3.0]))
    assert np.array_equal(plain, ruled)


@pytest.mark.parametrize("seed", range(20))
def test_classes_on_random_instances_match_the_naive_twin_and_keep_the_invariants(seed):
    rng = np.random.default_rng(100 + seed)
    ptr, links, w, active, capacity, caps = _random_instance(rng, 30, 10)
    klass = rng.integers(0, 4, size=active.shape[0])
    levels = np.array([0, 1, 1, 1]) if seed % 2 else np.array([0, 0, 0, 0])
    weights = rng.uniform(1.0, 5.0, size=4)
    rates = class_rates(ptr, links, w, active, capacity, caps, klass, levels, weights)
    twin = class_rates_naive(ptr, links, w, active, capacity, caps, klass, levels, weights)
    np.testing.assert_allclose(rates, twin, rtol=1e-9, atol=1e-3)
    assert (rates[~active] == 0).all() and (rates[active] <= caps[active] * (1 + 1e-12)).all()
    entry_flow = np.repeat(np.arange(active.shape[0]), np.diff(ptr))
    load = np.bincount(links, weights=w * rates[entry_flow], minlength=capacity.shape[0])
    assert (load <= capacity * (1 + 1e-9)).all()  # no link above capacity
    # work conservation: every active flow is at its cap or crosses a full link
    full = load >= capacity * (1 - 1e-9)
    for f in np.flatnonzero(active):
        assert rates[f] >= caps[f] * (1 - 1e-9) or full[links[ptr[f] : ptr[f + 1]]].any()
    if not seed % 2:  # one level: every flow has a fair bottleneck, the fixed point of the links' schedulers
        assert _unfair_flows(ptr, links, w, active, capacity, caps, klass, weights, rates) == []
    # strict priority: the first level's flows get their max-min rates as if alone
    first = active & (levels[klass] == levels[klass[active]].min())
    if np.unique(klass[first]).shape[0] == 1:
        alone = maxmin_rates(ptr, links, w, first, capacity, caps)
        assert np.array_equal(rates[first], alone[first])


def _unfair_flows(ptr, links, w, active, capacity, caps, klass, weights, rates, tol=1e-6):
    """The active flows with no fair bottleneck: neither at their cap nor on a full link where their class has the
    largest use per unit of weight (DWRR would give it no more) and they have the largest rate of their class
    (max-min within it would give them no more)."""
    entry_flow = np.repeat(np.arange(active.shape[0]), np.diff(ptr))
    on = active[entry_flow]
    use = np.zeros((capacity.shape[0], weights.shape[0]))
    np.add.at(use, (links, klass[entry_flow]), w * rates[entry_flow])
    present = np.zeros(use.shape, dtype=bool)
    present[links[on], klass[entry_flow][on]] = True
    per_weight = np.where(present, use / weights, -np.inf)
    top_rate = np.zeros(use.shape)
    np.maximum.at(top_rate, (links[on], klass[entry_flow][on]), rates[entry_flow][on])
    full = use.sum(axis=1) >= capacity * (1 - tol)
    unfair = []
    for f in np.flatnonzero(active):
        k = klass[f]
        fair = rates[f] >= caps[f] * (1 - tol) or any(
            full[l] and per_weight[l, k] >= per_weight[l].max() * (1 - tol) and rates[f] >= top_rate[l, k] * (1 - tol)
            for l in links[ptr[f] : ptr[f + 1]]
        )
        if not fair:
            unfair.append(int(f))
    return unfair


def test_inner_kernel_is_pluggable_with_the_naive_max_min():
    rng = np.random.default_rng(7)
    ptr, links, w, active, capacity, caps = _random_instance(rng, 25, 8)
    klass = rng.integers(0, 3, size=active.shape[0])
    levels, weights = np.array([0, 1, 1]), np.array([1.0, 2.0, 1.0])
    fast = class_rates(ptr, links, w, active, capacity, caps, klass, levels, weights)
    slow = class_rates(ptr, links, w, active, capacity, caps, klass, levels, weights, maxmin=maxmin_rates_naive)
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-3)


# ================================================================================================
# The flow model and the engine with classes
# ================================================================================================


def _drain(network):
    """(id, finish time) of every flow of ``network`` until none is left."""
    now, finished = 0.0, []
    while True:
        dt = network.next_completion_s()
        if not np.isfinite(dt):
            return finished
        now += dt
        finished.extend((int(i), now) for i in network.advance(dt))


@pytest.mark.parametrize(
    ("levels", "weights", "ends_ms"),
    [
        # strict: the high 1 GB flow alone at 50 GB/s ends at 20 ms; the low one then runs alone: 40 ms
        ([0, 1], [1.0, 1.0], [20.0, 40.0]),
        # 3:1: the first at 37.5 GB/s ends at 1 / 37.5 = 26.67 ms, the second has moved 12.5 x 26.67 ms = 1/3 GB
        # and sends its 2/3 GB at 50 GB/s in 13.33 ms more: 40 ms
        ([8, 8], [3.0, 1.0], [1e3 / 37.5, 40.0]),
    ],
)
def test_flow_network_finishes_flows_as_derived(levels, weights, ends_ms):
    network = FlowNetwork(np.array([LINK]))
    network.set_traffic_classes(np.array(levels), np.array(weights))
    two = np.array([1, 1])
    network.add(np.array([0, 0]), np.ones(2), two, np.array([GB, GB]), np.full(2, np.inf), None, np.array([0, 1]))
    ends = dict(_drain(network))
    np.testing.assert_allclose([ends[0] * 1e3, ends[1] * 1e3], ends_ms, rtol=1e-12)


def test_models_that_do_not_schedule_classes_refuse_them():
    topology = build_system("dgx-h100", nodes=1)
    for model, congestion in (("analytical", ()), ("flow", ("dcqcn",))):
        network = build_network(model, topology, congestion=congestion)
        with pytest.raises(ValueError, match="does not schedule them"):
            network.set_traffic_classes(np.array([0]), np.array([1.0]))


@pytest.fixture(scope="module")
def oversubscribed():
    # radix 5, R = 4: 2 leaves of 4 single-GPU servers, one uplink each (test_jobs's fabric)
    return leaf_spine(server=BOX, servers=8, switch=toy_switch(5), fabric_link=lk.IB_NDR, oversubscription=4.0)


def test_a_high_priority_job_runs_as_alone_and_the_low_one_pays(oversubscribed):
    # strided: each leaf's uplink carries 2 ring chains of each job (test_jobs). Plain max-min: 4 chains at C/4.
    # Job a in the high VL table: its 2 chains' max-min share of the whole uplink is C/2 = 24.8 GB/s, above
    # the 20 GB/s of one NCCL connection, so they run at 20 GB/s as alone: slowdown 1. Job b gets what is left,
    # C - 40 = 9.7 GB/s for its 2 chains while a runs, so it is slower than with plain max-min.
    placements = Placement.for_jobs(oversubscribed, jobs=[4, 4], policy="strided")
    jobs = [(_all_reduce(4), p) for p in placements]
    plain = interference(oversubscribed, jobs, SimConfig(collectives=RING2))
    policy = TrafficPolicy.parse("a=vl-high:1,b=vl-low:1")
    ruled = interference(oversubscribed, jobs, SimConfig(collectives=RING2, traffic=policy), names=["a", "b"])
    assert ruled.slowdowns[0] == pytest.approx(1.0, rel=1e-12)
    assert ruled.slowdowns[1] > plain.slowdowns[1] > 1.0
    assert 2 * CONNECTION < NDR  # the derivation's premise: a's two chains fit under the uplink
    # weights 3:1 in the low table: job a's class gets 3/4 of the uplink, C 3/8 = 18.6 GB/s per chain (below the
    # 20 GB/s connection cap) while b runs, and b, slower, runs longer: a's bandwidth time B (test_jobs: 1.5 x 32 MiB
    # plus one 1 MiB Simple slice at 20 GB/s alone) grows by r = 20 / 18.6, its latency does not
    weighted = TrafficPolicy.parse("a=vl-low:3,b=vl-low:1")
    split = interference(oversubscribed, jobs, SimConfig(collectives=RING2, traffic=weighted), names=["a", "b"])
    r = CONNECTION / (NDR * 3 / 8)
    bandwidth_s = (1.5 * 32 * MiB + nccl_model.SIMPLE_SLICE_BYTES) / CONNECTION
    alone_s = split.alone[0].times_s[0]
    assert split.slowdowns[0] == pytest.approx(1 + (r - 1) * bandwidth_s / alone_s, rel=1e-9)
    assert split.slowdowns[1] > plain.slowdowns[1]
    # equal weights in one table: each job gets C/2 of the uplink, 2 chains at C/4, as plain max-min gives
    even = TrafficPolicy.parse("a=vl-low:1,b=vl-low:1")
    same = interference(oversubscribed, jobs, SimConfig(collectives=RING2, traffic=even), names=["a", "b"])
    assert same.slowdowns == pytest.approx(plain.slowdowns, rel=1e-12)


def test_one_class_gives_today_s_results_exactly(oversubscribed):
    placements = Placement.for_jobs(oversubscribed, jobs=[4, 4], policy="strided")
    jobs = [(_all_reduce(4), p) for p in placements]
    plain = interference(oversubscribed, jobs, SimConfig(collectives=RING2))
    one = SimConfig(collectives=RING2, traffic=TrafficPolicy.parse("default=ets:1"))
    ruled = interference(oversubscribed, jobs, one, names=["a", "b"])
    assert [j.times_s.tolist() for j in ruled.together.jobs] == [j.times_s.tolist() for j in plain.together.jobs]
    assert np.array_equal(ruled.together.result.link_bytes, plain.together.result.link_bytes)


def test_storage_stream_moves_its_bytes_and_yields_to_a_high_class():
    topology = build_system("dgx-h100", nodes=2)
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 28, group=tuple(range(16)))
    work = Workload.sequence([c], nranks=16)
    streams = checkpoint_streams(topology, nbytes_per_server=10**9)
    base = simulate(topology, work, config=SimConfig())
    alone = simulate(topology, work, config=SimConfig(storage=streams))
    extra = alone.link_bytes - base.link_bytes
    # each stream's 1 GB crosses every link of its path once: the extra bytes are 1 GB per link of each path
    assert extra.sum() == pytest.approx(sum(10**9 * len(_path(topology, s)) for s in streams), rel=1e-9)
    policy = TrafficPolicy.parse("dp=prio:0,ckpt=prio:1")
    ruled = simulate(topology, work, config=SimConfig(storage=streams, traffic=policy), groups=["dp"])
    # the all-reduce in the high class is rated on the whole links as if the streams were not there
    assert ruled.collectives[0].time_s == pytest.approx(base.collectives[0].time_s, rel=1e-12)
    # with the streams above it, it gets what they leave on the NIC links they share, and takes longer
    above = TrafficPolicy.parse("dp=prio:1,ckpt=prio:0")
    yielded = simulate(topology, work, config=SimConfig(storage=streams, traffic=above), groups=["dp"])
    assert yielded.collectives[0].time_s > base.collectives[0].time_s * 1.01


def test_storage_stream_fills_its_nic_link():
    # a storage write is striped over many connections: no per-QP limit (20 GB/s on a ConnectX-7), only links
    topology = build_system("dgx-h100", nodes=2)
    work = Workload.sequence([Collective(kind=CollectiveKind.SENDRECV, nbytes=64 * MiB, group=(0, 8))], nranks=16)
    streams = checkpoint_streams(topology, nbytes_per_server=10**9)  # GPU 0 -> 8 and 8 -> 0: rail 0, as the send
    alone = simulate(topology, work).collectives[0].time_s
    above = TrafficPolicy.parse("ckpt=prio:0,pp=prio:1")
    below = simulate(topology, work, config=SimConfig(storage=streams, traffic=above), groups=["pp"])
    path = _path(topology, streams[0])
    assert np.isfinite(topology.link_flow_cap_bytes_per_s[path]).any()  # the NIC links do limit a QP
    drain = 10**9 / topology.link_capacity_bytes_per_s[path].min()  # the stream alone on its slowest link
    # the send gets nothing while the stream fills the NIC link, then runs as alone; only its start-up latency
    # overlaps the wait (a capped stream would have left the send 30 GB/s and it would take about 3.4 ms)
    assert drain + 0.99 * alone < below.collectives[0].time_s <= drain + alone


def _path(topology, stream):
    from topologies.routing import Router

    return Router(topology, pxn=False).path(stream.src_gpu, stream.dst_gpu)


# ================================================================================================
# Marking: NCCL_IB_TC (DSCP = TC >> 2) on Ethernet, NCCL_IB_SL on InfiniBand; groups; the step's settings
# ================================================================================================


def test_nccl_environment_marks_the_class():
    ethernet = "rt=prio:0/dscp:26,bulk=ets:1/dscp:10,default=ets:1"
    # NCCL_IB_TC=106: DSCP 106 >> 2 = 26 -> rt; 41 >> 2 = 10 -> bulk; 0 -> DSCP 0, no class lists it -> default
    for tc, expected in (("106", "rt"), ("41", "bulk"), ("0", "default")):
        assert TrafficPolicy.parse(ethernet, environ={"NCCL_IB_TC": tc}).class_of(None) == expected
    # an Ethernet policy does not read the service level
    assert TrafficPolicy.parse(ethernet, environ={"NCCL_IB_SL": "3"}).class_of(None) == "default"
    infiniband = "hi=vl-high:1/sl:1,lo=vl-low:1/sl:0"
    assert TrafficPolicy.parse(infiniband, environ={"NCCL_IB_SL": "1", "NCCL_IB_TC": "106"}).class_of(None) == "hi"
    # a communicator's own group wins over the environment (a per-communicator traffic class)
    assert TrafficPolicy.parse(infiniband, environ={"NCCL_IB_SL": "1"}).class_of("lo") == "lo"


def test_step_settings_carry_the_policy_and_honour_nccl_ib_tc():
    s = step_settings({"traffic_classes": "tp=prio:0,dp=ets:60/dscp:10,ckpt=ets:40", "nodes": 2, "checkpoint_gb": 2.0})
    setup = prepare_step(s, environ={"NCCL_IB_TC": "41"})
    assert setup.config.traffic is not None and setup.config.traffic.nccl_ib_tc == 41
    assert [x.nbytes for x in setup.config.storage] == [2 * 10**9] * 2
    assert not any("NCCL_IB_TC" in note for note in setup.ignored)  # honoured, not ignored
    plain = prepare_step(step_settings({"nodes": 2}), environ={"NCCL_IB_TC": "41"})
    assert plain.config.traffic is None
    assert any(note.startswith("NCCL_IB_TC=41 ignored (no --traffic-classes") for note in plain.ignored)


# ================================================================================================
# Refusals: one line naming the field, the value and what is allowed
# ================================================================================================


@pytest.mark.parametrize(
    ("spec", "environ", "message"),
    [
        ("tp", {}, r"^traffic_classes: 'tp' is not allowed; expected NAME=SCHEDULER:VALUE"),
        ("tp=wfq:1", {}, r"^TrafficClass.scheduler \(tp\): 'wfq' is not allowed; expected one of prio, ets"),
        ("tp=prio:9", {}, r"^TrafficClass.value \(tp\): 9 is not allowed; expected a strict level from 0 to 7"),
        ("tp=ets:0", {}, r"^TrafficClass.value \(tp\): 0.0 is not allowed; expected a weight > 0"),
        ("tp=ets:1,tp=ets:2", {}, r"^TrafficPolicy.classes: 'tp,tp' is not allowed; expected distinct class names"),
        ("tp=ets:1,dp=vl-low:1", {}, r"expected Ethernet schedulers \(prio, ets\) or InfiniBand ones"),
        ("tp=vl-low:1/dscp:3", {}, r"^TrafficClass.dscp \(tp\): 3 is not allowed; expected None for an InfiniBand"),
        ("tp=ets:1/color:3", {}, r"^traffic_classes \(tp\): 'color:3' is not allowed; expected /group:G"),
        ("tp=ets:1/dscp:3", {"NCCL_IB_TC": "41"}, r"^NCCL_IB_TC: 41 is not allowed; expected a TC whose DSCP"),
        ("tp=ets:1", {"NCCL_IB_TC": "high"}, r"^NCCL_IB_TC: 'high' is not allowed; expected an integer from 0 to 255"),
    ],
)
def test_bad_policies_are_refused_in_one_line(spec, environ, message):
    with pytest.raises(ValueError, match=message) as info:
        TrafficPolicy.parse(spec, environ=environ)
    assert "\n" not in str(info.value)


def test_bad_uses_are_refused_before_anything_runs():
    policy = TrafficPolicy.parse("tp=prio:0,dp=ets:1")
    with pytest.raises(ValueError, match=r"^traffic: .* is not allowed with network_model 'analytical'"):
        SimConfig(network_model="analytical", traffic=policy)
    with pytest.raises(ValueError, match=r"^traffic: .* is not allowed with congestion \('pfc',\)"):
        SimConfig(congestion=("pfc",), traffic=policy)
    stream = StorageStream(time_s=0.0, src_gpu=0, dst_gpu=8, nbytes=1)
    with pytest.raises(ValueError, match=r"^storage: storage streams are not allowed with link failures"):
        SimConfig(storage=(stream,), link_events=(LinkEvent(time_s=0.0, link=0),))
    with pytest.raises(ValueError, match=r"^StorageStream.dst_gpu: 0 is not allowed; expected a GPU other than"):
        StorageStream(time_s=0.0, src_gpu=0, dst_gpu=0, nbytes=1)
    topology = build_system("dgx-h100", nodes=1)
    work = _all_reduce(8)
    with pytest.raises(ValueError, match=r"^traffic_classes: 'ep' is not allowed; expected a group a class catches"):
        simulate(topology, work, config=SimConfig(traffic=policy), groups=["ep"])
    with pytest.raises(ValueError, match=r"^groups: .* is not allowed; expected None or one group name"):
        simulate(topology, work, config=SimConfig(traffic=policy), groups=["tp", "dp"])
    with pytest.raises(ValueError, match=r"^checkpoint: '1 server' is not allowed; expected a topology of at least"):
        checkpoint_streams(topology, nbytes_per_server=1)
    with pytest.raises(ValueError, match=r"^TrafficClass.sl \(tp\): 2 is not allowed; expected None for an Ethernet"):
        TrafficClass(name="tp", scheduler="ets", value=1.0, sl=2)


def test_the_commands_take_the_policy_and_refuse_an_unclassified_communicator(capsys, monkeypatch):
    from simulator.cli import main

    monkeypatch.setenv("NCCL_IB_TC", "41")  # DSCP 10: the class listing /dscp:10
    assert main(["bench", "all_reduce", "-b", "1M", "-e", "1M", "--traffic-classes", "dp=ets:1/dscp:10"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("; traffic class dp")
    monkeypatch.delenv("NCCL_IB_TC")
    assert main(["bench", "all_reduce", "-b", "1M", "-e", "1M", "--traffic-classes", "dp=ets:1/dscp:10"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("fabricsim: error: traffic_classes: 'a communicator of no group' is not allowed")
    argv = ["step", "--nodes", "2", "--tp", "8", "--pp", "1", "--global-batch", "16", "--quiet"]
    assert main([*argv, "--traffic-classes", "tp=prio:0,dp=prio:1", "--checkpoint-gb", "1"]) == 2
    assert capsys.readouterr().err.startswith("fabricsim: error: traffic_classes: 'ckpt' is not allowed")
    assert main([*argv, "--traffic-classes", "tp=prio:0,dp=prio:1,ckpt=prio:2", "--checkpoint-gb", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("; traffic classes tp=prio:0,dp=prio:1,ckpt=prio:2; checkpoint 1 GB per server at 0 s")
    assert any(line.startswith("dp [dp] ") for line in lines)  # each group's row names its class
    assert main([*argv, "--traffic-classes", "tp=prio:0,default=prio:1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["group_classes"] == {"tp": "tp", "dp": "default"}
    assert main([*argv, "--traffic-classes", "tp=prio:0", "--net-model", "analytical"]) == 2
    assert "is not allowed with network_model 'analytical'" in capsys.readouterr().err
