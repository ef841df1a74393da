"""Congestion refinements of the flow model (DCQCN, PFC, InfiniBand credits, incast, ECN).

Invariants first (exact reduction to max-min when a refinement has nothing to act on; no link
above capacity, finite positive rates, every flow finishes), then hand-derived scenarios, then
the two kernels against their slow twins, then the wiring (build_network, simulate, errors).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.api import simulate
from simulator.config import CONGESTION_NAMES, NETWORK_MODEL_NAMES, SimConfig
from simulator.kernels import build_csr, dcqcn_rates, lossless_throttle, successor_pairs
from simulator.network import (
    NETWORK_MODELS,
    REFINEMENTS,
    CongestionNetwork,
    Dcqcn,
    Ecn,
    FlowNetwork,
    IbCredit,
    Pfc,
    build_network,
)
from tests.naive import dcqcn_rates_naive, lossless_throttle_naive
from topologies import devices as dev
from topologies import links as lk
from topologies.fat_tree import leaf_spine
from topologies.links import IB_NDR, ROCE_400G, LinkKind
from topologies.node import dgx_h100
from topologies.topology import LinkTier, NodeKind, TopologyBuilder
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import Workload

C = ROCE_400G.bandwidth_bytes_per_s  # 49.02 GB/s: RoCE 400G payload rate
ROCE, IB, NVLINK = int(LinkKind.ROCE), int(LinkKind.INFINIBAND), int(LinkKind.NVLINK)
COMBOS = (("dcqcn",), ("pfc",), ("ib-credit",), ("dcqcn", "pfc"), ("dcqcn", "pfc", "ib-credit"))


# --------------------------------------------------------------------------------------------------
# Fabrics as explicit link arrays
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Fabric:
    capacity: np.ndarray
    kind: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    from_switch: np.ndarray

    def network(self, refinements=(), **kw):
        return CongestionNetwork(
            self.capacity,
            refinements=refinements,
            link_kind=self.kind,
            link_src=self.src,
            link_dst=self.dst,
            link_from_switch=self.from_switch,
            **kw,
        )


def star(hosts: int, kind: int = ROCE, capacity: float = C) -> Fabric:
    """Hosts 0..n-1 on one switch (node n). Link i: host i -> switch; link n + i: switch -> host i."""
    n = hosts
    return Fabric(
        capacity=np.full(2 * n, capacity),
        kind=np.full(2 * n, kind),
        src=np.array(list(range(n)) + [n] * n),
        dst=np.array([n] * n + list(range(n))),
        from_switch=np.array([False] * n + [True] * n),
    )


def star_path(hosts: int, a: int, b: int) -> np.ndarray:
    return np.array([a, hosts + b])


def flat(paths):
    """Paths (lists of link ids) as the (links, weights, counts) that ``add`` takes, weight 1."""
    counts = np.array([len(p) for p in paths], dtype=np.int64)
    return np.concatenate([np.asarray(p, dtype=np.int64) for p in paths]), np.ones(int(counts.sum())), counts


def start(network, paths, caps=None, nbytes=None):
    """Add flows (weight 1) and return the rates of the first re-rating."""
    n = len(paths)
    network.add(
        *flat(paths),
        np.full(n, 1e9) if nbytes is None else np.asarray(nbytes, float),
        np.full(n, np.inf) if caps is None else np.asarray(caps, float),
    )
    network.next_completion_s()
    return network.rate.copy()


def random_fabric(seed: int, kinds=(ROCE,)):
    """Hosts on 1-3 leaves, 1-2 spines; capacities 10-50 GB/s; 2-15 flows (30 % capped) between
    random hosts, through a random spine when their leaves differ."""
    rng = np.random.default_rng(seed)
    hosts, leaves = int(rng.integers(3, 9)), int(rng.integers(1, 4))
    spines = int(rng.integers(1, 3)) if leaves > 1 else 0
    src, dst, up, down, ls, sl = [], [], {}, {}, {}, {}

    def link(u, v):
        src.append(u)
        dst.append(v)
        return len(src) - 1

    leaf = [hosts + h % leaves for h in range(hosts)]
    for h in range(hosts):
        up[h], down[h] = link(h, leaf[h]), link(leaf[h], h)
    for lf in range(leaves):
        for s in range(spines):
            ls[lf, s] = link(hosts + lf, hosts + leaves + s)
            sl[s, lf] = link(hosts + leaves + s, hosts + lf)
    n_links = len(src)
    kind = rng.choice(np.asarray(kinds), size=n_links)
    from_switch = np.array([u >= hosts for u in src])
    fabric = Fabric(
        capacity=rng.uniform(10e9, 50e9, size=n_links),
        kind=kind,
        src=np.array(src),
        dst=np.array(dst),
        from_switch=from_switch,
    )
    paths = []
    for _ in range(int(rng.integers(2, 16))):
        a, b = rng.choice(hosts, size=2, replace=False)
        la, lb = leaf[a] - hosts, leaf[b] - hosts
        mid = [] if la == lb else [ls[la, s := int(rng.integers(spines))], sl[s, lb]]
        paths.append(np.array([up[a], *mid, down[b]]))
    caps = np.where(rng.random(len(paths)) < 0.3, rng.uniform(2e9, 30e9, size=len(paths)), np.inf)
    nbytes = rng.uniform(1e6, 50e6, size=len(paths))
    return fabric, paths, caps, nbytes


def drain(network, paths, caps, nbytes, check=None):
    """Run flows to completion; ``check(network)`` after every re-rating. Returns finish times."""
    network.add(*flat(paths), nbytes, caps)
    t, finish = 0.0, {}
    for _ in range(10 * len(paths) + 10):
        dt = network.next_completion_s()
        if check is not None:
            check(network)
        if not np.isfinite(dt):
            return finish
        t += dt
        for fid in network.advance(dt).tolist():
            finish[fid] = t
    raise AssertionError("flows did not finish")


def link_load(network) -> np.ndarray:
    rows = np.repeat(np.arange(network.active.shape[0]), np.diff(network.flow_ptr))
    return np.bincount(
        network.flow_links,
        weights=network.flow_weights * network.rate[rows],
        minlength=network.capacity_bytes_per_s.shape[0],
    )


# --------------------------------------------------------------------------------------------------
# Reduction to max-min, bit for bit
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_without_refinements_or_link_metadata_it_is_the_flow_model(seed):
    # no refinement, or refinements but capacities only (no link has a kind): every re-rating of a
    # full run gives exactly the flow model's rates
    fabric, paths, caps, nbytes = random_fabric(seed)
    reference = []
    drain(FlowNetwork(fabric.capacity), paths, caps, nbytes, check=lambda n: reference.append(n.rate.tobytes()))
    models = [CongestionNetwork(fabric.capacity)]
    models += [CongestionNetwork(fabric.capacity, refinements=combo) for combo in COMBOS]
    for model in models:
        seen = []
        drain(model, paths, caps, nbytes, check=lambda n: seen.append(n.rate.tobytes()))
        assert seen == reference, model.name


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "kinds,refinements", [((NVLINK,), COMBOS[-1]), ((IB,), ("dcqcn", "pfc")), ((ROCE,), ("ib-credit",))]
)
def test_refinements_without_their_link_kind_are_the_flow_model(seed, kinds, refinements):
    # DCQCN and PFC act on RoCE links, credits on InfiniBand links: on other links they are off
    fabric, paths, caps, nbytes = random_fabric(seed, kinds)
    reference, seen = [], []
    drain(FlowNetwork(fabric.capacity), paths, caps, nbytes, check=lambda n: reference.append(n.rate.tobytes()))
    drain(fabric.network(refinements), paths, caps, nbytes, check=lambda n: seen.append(n.rate.tobytes()))
    assert seen == reference


@pytest.mark.parametrize("refinements", COMBOS)
def test_without_contention_every_refinement_is_the_flow_model(refinements):
    # a permutation on a star (host i -> host i+1), each host's uplink and downlink carry one flow:
    # no link can be over-filled even at line rate, so DCQCN never marks and nothing is paused
    hosts = 6
    fabric = star(hosts, ROCE) if "ib-credit" not in refinements else star(hosts, IB)
    paths = [star_path(hosts, i, (i + 1) % hosts) for i in range(hosts)]
    caps = np.array([np.inf, 5e9, np.inf, np.inf, 20e9, np.inf])
    flow = start(FlowNetwork(fabric.capacity), paths, caps)
    network = fabric.network(refinements)
    assert start(network, paths, caps).tobytes() == flow.tobytes()
    assert not network.link_pause_fraction.any() and not network.link_queue_bytes.any()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("refinements", COMBOS)
def test_invariants_on_random_fabrics(seed, refinements):
    # mixed RoCE / InfiniBand / NVLink fabrics, flows running to completion: after every
    # re-rating rates are finite, > 0 for active flows, 0 for finished ones, within caps, and no
    # link carries more than its capacity; pause fractions in [0, 1), queues >= 0; all finish
    fabric, paths, caps, nbytes = random_fabric(seed, (ROCE, IB, NVLINK))

    def check(n):
        assert np.all(np.isfinite(n.rate))
        assert np.all(n.rate[n.active] > 0) and np.all(n.rate[~n.active] == 0)
        assert np.all(n.rate <= n.cap * (1 + 1e-12))
        assert np.all(link_load(n) <= n.capacity_bytes_per_s * (1 + 1e-9))
        assert np.all((n.link_pause_fraction >= 0) & (n.link_pause_fraction < 1))
        assert np.all(np.isfinite(n.link_queue_bytes) & (n.link_queue_bytes >= 0))

    finish = drain(fabric.network(refinements), paths, caps, nbytes, check=check)
    assert sorted(finish) == list(range(len(paths)))


# --------------------------------------------------------------------------------------------------
# DCQCN
# --------------------------------------------------------------------------------------------------


def test_dcqcn_two_flows_settle_near_fair_share():
    # two hosts -> one receiver over one RoCE 400G egress. Max-min: C/2 each. DCQCN settles around
    # the same share; the fluid model oscillates (period ~0.6 ms, +-3 % of C around the mean, the
    # queue draining to empty for part of each cycle), so its time average over >= 1 ms is within
    # the settling tolerance (0.2 % of line rate) of the long-run mean and the egress is slightly
    # under-used. Tolerance: each flow within 1 % of C/2, the total within [0.98 C, C].
    network = star(3).network(("dcqcn",))
    rates = start(network, [star_path(3, 0, 2), star_path(3, 1, 2)])
    assert rates[0] == rates[1]  # symmetric flows, identical arithmetic
    assert abs(rates[0] - C / 2) <= 0.01 * C
    assert 0.98 * C <= rates.sum() <= C
    assert network.dcqcn_settled and network.dcqcn_simulated_s > 0
    assert network.link_queue_bytes[3 + 2] > 0  # the congested egress holds a standing queue


def test_dcqcn_two_congested_hops_get_less():
    # parking lot: flow 0 crosses egresses A and B, flow 1 only A, flow 2 only B (links 0-2: NIC
    # ports, 3 = A, 4 = B, all C). Max-min: C/2 each. DCQCN cuts a flow on every CNP, and a flow
    # marked on two hops gets CNPs more often: flow 0 < C/2 < flows 1, 2 (equal by symmetry). The
    # split keeps widening for tens of ms (0.38 / 0.62 C over the 4 ms horizon, not settled), so
    # only the direction and a margin of 0.05 C are asserted.
    fabric = Fabric(
        capacity=np.full(5, C),
        kind=np.full(5, ROCE),
        src=np.arange(5),
        dst=np.arange(5) + 10,
        from_switch=np.array([False, False, False, True, True]),
    )
    rates = start(fabric.network(("dcqcn",)), [[0, 3, 4], [1, 3], [2, 4]])
    assert rates[1] == rates[2]
    assert rates[0] < 0.45 * C and rates[1] > 0.55 * C
    assert rates[0] + rates[1] <= C * (1 + 1e-12)


@pytest.mark.parametrize("kmin", [10e3, 20e3])
def test_ecn_thresholds_set_the_standing_queue(kmin):
    # ECN marking starts at K_min. With a narrow, low band (K_max = 2 K_min, P_max = 1) the fluid
    # model reaches its fixed point (with K_min of 40 kB or more it oscillates instead and the queue
    # empties part of the time). At the fixed point the queue is constant, so the egress is full
    # (sum = C), and marking is > 0 (else the rates keep rising) but small (a decrease per CNP
    # balances the slow additive increase: p of order 1e-3), so the queue sits just above K_min:
    # K_min < q < K_min + 0.1 (K_max - K_min).
    spec = Dcqcn(ecn=Ecn(kmin_bytes=kmin, kmax_bytes=2 * kmin))
    network = star(3).network((spec,))
    rates = start(network, [star_path(3, 0, 2), star_path(3, 1, 2)])
    queue = network.link_queue_bytes[3 + 2]
    assert kmin < queue < kmin + 0.1 * kmin
    assert rates.sum() == pytest.approx(C, rel=1e-3)


# --------------------------------------------------------------------------------------------------
# PFC and InfiniBand credits
# --------------------------------------------------------------------------------------------------


def victim_rates(kind: int, refinements):
    # hosts A=0, B=1, C=2, D=3 on one switch. A->C, B->C, A->D (the victim).
    network = star(4, kind).network(refinements)
    return network, start(network, [star_path(4, 0, 2), star_path(4, 1, 2), star_path(4, 0, 3)])


@pytest.mark.parametrize("kind,refinements", [(ROCE, ("pfc",)), (IB, ("ib-credit",))])
def test_pfc_victim_slowed_by_the_pause_fraction(kind, refinements):
    # A's NIC shares its uplink: demand C/2 for A->C and A->D; B->C demands C. The egress to C is
    # offered 1.5 C: it pauses the uplinks of A and B a fraction (1.5C - C) / 1.5C = 1/3 of the time.
    # A->C: C/2 x 2/3 = C/3, B->C: 2C/3, and A->D, which never touches C's port, C/3 instead of the
    # C/2 of max-min (A's uplink: C/3 + C/3, paused 1/3). The egress to C stays full.
    network, rates = victim_rates(kind, refinements)
    np.testing.assert_allclose(rates, [C / 3, 2 * C / 3, C / 3], rtol=1e-12)
    np.testing.assert_allclose(network.link_pause_fraction, [1 / 3, 1 / 3, 0, 0, 0, 0, 0, 0], atol=1e-15)
    maxmin = start(FlowNetwork(star(4).capacity), [star_path(4, 0, 2), star_path(4, 1, 2), star_path(4, 0, 3)])
    np.testing.assert_allclose(maxmin, [C / 2, C / 2, C / 2], rtol=1e-12)


def test_pfc_victim_queue_and_delay():
    # behind each paused ingress the switch holds Xoff = 18,000 B: two paused uplinks feed the
    # egress to C, so its standing queue is 36,000 B and a packet waits 36,000 / C there
    network, _ = victim_rates(ROCE, ("pfc",))
    assert network.link_queue_bytes[4 + 2] == 2 * 18_000.0
    assert network.queueing_delay_s(np.array([0, 4 + 2])) == pytest.approx(36_000.0 / C, rel=1e-12)


def test_pfc_does_not_act_on_infiniband_nor_credits_on_roce():
    flow = victim_rates(ROCE, ())[1]
    assert victim_rates(IB, ("pfc",))[1].tobytes() == flow.tobytes()
    assert victim_rates(ROCE, ("ib-credit",))[1].tobytes() == flow.tobytes()


def test_pfc_congestion_spreads_up_the_tree():
    # nodes: hosts H1=0, H4=1, C=2, D=3; leaves L1=4, L2=5, L3=6; spine S=7. Links (all RoCE, C):
    # 0 H1->L1, 1 L1->S, 2 S->L2, 3 L2->C, 4 H4->L2, 5 S->L3, 6 L3->D.
    # F1: H1->C [0,1,2,3], F4: H4->C [4,3], V: H1->D [0,1,5,6]. H1's NIC: demand C/2 for F1 and V.
    # L2->C is offered C/2 + C = 1.5C and fills at 2/3. Its tree: L2->C, the links feeding it
    # (S->L2, H4->L2), then L1->S (feeds S->L2), then H1->L1 (feeds L1->S), each paused 1/3. V
    # crosses H1->L1 and L1->S, so it is throttled to 2/3 too: C/3, against C/2 in max-min, though
    # its own egresses S->L3, L3->D carry only C/3. F1: C/3, F4: 2C/3.
    fabric = Fabric(
        capacity=np.full(7, C),
        kind=np.full(7, ROCE),
        src=np.array([0, 4, 7, 5, 1, 7, 6]),
        dst=np.array([4, 7, 5, 2, 5, 6, 3]),
        from_switch=np.array([False, True, True, True, False, True, True]),
    )
    network = fabric.network(("pfc",))
    rates = start(network, [[0, 1, 2, 3], [4, 3], [0, 1, 5, 6]])
    np.testing.assert_allclose(rates, [C / 3, 2 * C / 3, C / 3], rtol=1e-12)
    np.testing.assert_allclose(network.link_pause_fraction, [1 / 3, 1 / 3, 1 / 3, 0, 1 / 3, 0, 0], atol=1e-15)


@pytest.mark.parametrize("senders", [2, 4, 7])
def test_incast_shares_the_downlink(senders):
    # N senders -> host N over its downlink. Max-min and PFC: C/N each, total C. PFC pauses every
    # sender's uplink 1 - 1/N of the time and the downlink's queue is N x Xoff. DCQCN: equal shares,
    # total within [0.98 C, C] (under-use from its oscillation).
    hosts = senders + 1
    paths = [star_path(hosts, i, senders) for i in range(senders)]
    pfc = star(hosts).network(("pfc",))
    rates = start(pfc, paths)
    np.testing.assert_allclose(rates, C / senders, rtol=1e-12)
    np.testing.assert_allclose(pfc.link_pause_fraction[:senders], 1 - 1 / senders, rtol=1e-12)
    assert pfc.link_queue_bytes[hosts + senders] == senders * 18_000.0
    dcqcn = start(star(hosts).network(("dcqcn",)), paths)
    assert np.all(dcqcn == dcqcn[0])
    assert 0.98 * C <= dcqcn.sum() <= C * (1 + 1e-12)


def test_dcqcn_keeps_pfc_from_pausing():
    # DCQCN brings what A->C and B->C offer down to the egress capacity (time-averaged), so
    # PFC has no excess to pause: no pause, and the victim A->D keeps (about) its share
    network, rates = victim_rates(ROCE, ("dcqcn", "pfc"))
    assert not network.link_pause_fraction.any()
    assert rates[2] > 0.45 * C
    assert rates[0] + rates[1] <= C * (1 + 1e-12)


def test_ib_credit_loop_bounds_a_long_link():
    # a 64 KiB VL buffer; each link's latency 0.79 us (100 m of fibre ~0.49 us + 0.3 us switch):
    # credit RTT = 2 x 0.79 us, bound = 65536 / 1.58e-6 = 41.48 GB/s < NDR's 49.68 GB/s. One flow
    # over two such links runs at the bound; without a buffer figure the bound is off.
    fabric = star(2, IB, IB_NDR.bandwidth_bytes_per_s)
    latency = np.full(4, 0.79e-6)
    bounded = fabric.network((IbCredit(vl_buffer_bytes=65536.0),), link_latency_s=latency)
    assert start(bounded, [star_path(2, 0, 1)])[0] == pytest.approx(65536.0 / 1.58e-6, rel=1e-12)
    unbounded = fabric.network(("ib-credit",), link_latency_s=latency)
    assert start(unbounded, [star_path(2, 0, 1)])[0] == IB_NDR.bandwidth_bytes_per_s


def star_topology(hosts: int, spec: lk.LinkSpec):
    """The same star as ``star`` built as a Topology: GPUs as hosts, one fabric switch."""
    builder = TopologyBuilder("star")
    gpus = [builder.add_gpu(f"g{i}", server=i, local=0) for i in range(hosts)]
    switch = builder.add_node(NodeKind.FABRIC_SWITCH, "sw")
    ups, downs = zip(*(builder.add_link(g, switch, spec, tier=LinkTier.NIC) for g in gpus))
    return builder.build(), np.array(ups), np.array(downs)


def test_topology_metadata_gives_the_same_victim():
    # the victim scenario on a Topology (kinds, ends and switch egresses read from it)
    topology, up, down = star_topology(4, ROCE_400G)
    network = CongestionNetwork(topology.link_capacity_bytes_per_s, refinements=("pfc",), topology=topology)
    rates = start(network, [[up[0], down[2]], [up[1], down[2]], [up[0], down[3]]])
    np.testing.assert_allclose(rates, [C / 3, 2 * C / 3, C / 3], rtol=1e-12)
    assert build_network("flow", topology, congestion=("dcqcn",)).name == "flow+dcqcn"


# --------------------------------------------------------------------------------------------------
# Kernels against their twins
# --------------------------------------------------------------------------------------------------


def random_dcqcn_instance(seed: int):
    """1-7 NIC ports, 1-9 marking links, 1-24 flows (one port + 0-3 marking links, weights 0.5-1.5),
    90 % controlled, capacities 10-50 GB/s, starting rates 20-100 % of line rate."""
    rng = np.random.default_rng(seed)
    ports, marks = int(rng.integers(1, 8)), int(rng.integers(1, 10))
    n_links = ports + marks
    paths = [
        np.concatenate([[rng.integers(ports)], rng.integers(ports, n_links, size=int(rng.integers(4)))])
        for _ in range(int(rng.integers(1, 25)))
    ]
    weights = [rng.uniform(0.5, 1.5, size=len(p)) for p in paths]
    flow_ptr, flow_links, flow_weights = build_csr(paths, weights)
    capacity = rng.uniform(10e9, 50e9, size=n_links)
    is_port = np.arange(n_links) < ports
    rate_max = np.array([np.min(capacity[p] / w) for p, w in zip(paths, weights)])
    controlled = rng.random(len(paths)) < 0.9
    rate_init = rate_max * rng.uniform(0.2, 1.0, size=len(paths))
    return flow_ptr, flow_links, flow_weights, controlled, capacity, ~is_port, is_port, rate_max, rate_init


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("threshold", [1, 5])
def test_dcqcn_kernel_matches_naive(seed, threshold):
    # threshold F = 1 (the NVIDIA default) takes the kernel's shortcut for the stage weights,
    # F = 5 their general form (1 + w)^F, which the twin always uses
    instance = random_dcqcn_instance(seed)
    params = Dcqcn(threshold=threshold).params()
    kw = dict(dt_s=4e-6, warmup_s=0.1e-3, block_s=0.1e-3, horizon_s=0.8e-3, settle_tol=0.0)
    rates, queue, simulated = dcqcn_rates(*instance, params, **kw)
    twin_rates, twin_queue, twin_simulated = dcqcn_rates_naive(*instance, params, **kw)
    assert simulated == twin_simulated
    np.testing.assert_allclose(rates, twin_rates, rtol=1e-9, atol=0.0)
    np.testing.assert_allclose(queue, twin_queue, rtol=1e-9, atol=1e-6)
    assert np.all(rates[~instance[3]] == 0) and np.all(np.isfinite(rates))
    again = dcqcn_rates(*instance, params, **kw)
    assert again[0].tobytes() == rates.tobytes()  # bit-identical on a rerun


def random_layered_instance(seed: int):
    """A layered graph (2-4 layers of 1-4 nodes, every node joined to every node of the next layer),
    1-29 flows walking down it from a random layer, 70 % of links lossless, 85 % of flows taking
    part, capacities 1-10, demands 0.5-8, weights 0.5-2."""
    rng = np.random.default_rng(seed)
    widths = [int(rng.integers(1, 5)) for _ in range(int(rng.integers(2, 5)) + 1)]
    firsts = np.concatenate([[0], np.cumsum(widths)])
    src, dst, out = [], [], {}
    for layer in range(len(widths) - 1):
        for u in range(firsts[layer], firsts[layer + 1]):
            for v in range(firsts[layer + 1], firsts[layer + 2]):
                out.setdefault(u, []).append(len(src))
                src.append(u)
                dst.append(v)
    paths = []
    for _ in range(int(rng.integers(1, 30))):
        first = int(rng.integers(len(widths) - 1))
        node, path = int(rng.integers(firsts[first], firsts[first + 1])), []
        for _ in range(first, int(rng.integers(first + 1, len(widths)))):
            path.append(int(rng.choice(out[node])))
            node = dst[path[-1]]
        paths.append(np.array(path))
    flow_ptr, flow_links, flow_weights = build_csr(paths, [rng.uniform(0.5, 2, size=len(p)) for p in paths])
    n_links, n_flows = len(src), len(paths)
    return (
        flow_ptr,
        flow_links,
        flow_weights,
        rng.random(n_flows) < 0.85,
        rng.uniform(1, 10, size=n_links),
        rng.uniform(0.5, 8, size=n_flows),
        rng.random(n_links) < 0.7,
        np.array(src),
        np.array(dst),
    )


@pytest.mark.parametrize("seed", range(60))
def test_lossless_kernel_matches_naive_and_is_feasible(seed):
    instance = random_layered_instance(seed)
    flow_ptr, flow_links, flow_weights, participant, capacity, demand, _, src, dst = instance
    ups, downs = successor_pairs(flow_ptr, flow_links, participant, src, dst)
    result = lossless_throttle(*instance[:7], ups, downs)
    for got, want in zip(result, lossless_throttle_naive(*instance)):
        assert np.array_equal(np.isfinite(got), np.isfinite(want))
        np.testing.assert_allclose(got[np.isfinite(want)], want[np.isfinite(want)], rtol=1e-12, atol=1e-14)
    throttle, pause, _ = result
    assert np.all((throttle > 0) & (throttle <= 1)) and np.all((pause >= 0) & (pause < 1))
    rows = np.repeat(np.arange(len(participant)), np.diff(flow_ptr))
    load = np.bincount(
        flow_links, weights=flow_weights * np.where(participant, demand * throttle, 0)[rows], minlength=len(capacity)
    )
    assert np.all(load <= capacity * (1 + 1e-12))


# --------------------------------------------------------------------------------------------------
# Wiring: build_network, simulate, errors
# --------------------------------------------------------------------------------------------------


def test_build_network_names_and_errors():
    topology, _, _ = star_topology(3, ROCE_400G)
    assert build_network("flow", topology).name == "flow"
    assert type(build_network("flow", topology)) is FlowNetwork
    assert build_network("flow", topology, congestion=("pfc", "dcqcn")).name == "flow+dcqcn+pfc"
    with pytest.raises(ValueError, match="network_model: 'flow\\+pfc' is not known"):
        build_network("flow+pfc", topology, congestion=("dcqcn",))  # refinements go in congestion=
    with pytest.raises(ValueError, match="congestion.*analytical"):
        build_network("analytical", topology, congestion=("pfc",))
    with pytest.raises(ValueError, match="network_model: 'flow\\+ecn' is not known"):
        build_network("flow+ecn", topology)


def test_config_names_are_the_registries_names():
    # SimConfig checks names without importing the network package (numba); its lists must stay the
    # registries' keys, in order
    assert CONGESTION_NAMES == tuple(REFINEMENTS)
    assert NETWORK_MODEL_NAMES == tuple(NETWORK_MODELS)


def test_bad_input_is_named():
    capacity = np.ones(3)
    with pytest.raises(ValueError, match=r"refinements: 'red' is not allowed; expected one of dcqcn, pfc, ib-credit"):
        CongestionNetwork(capacity, refinements=("red",))
    with pytest.raises(ValueError, match="refinements: 'pfc' is not allowed; expected each refinement at most once"):
        CongestionNetwork(capacity, refinements=("pfc", Pfc()))
    with pytest.raises(ValueError, match=r"Ecn.kmax_bytes: 1000.0 is not allowed; expected a finite number > kmin"):
        Ecn(kmin_bytes=2000.0, kmax_bytes=1000.0)
    with pytest.raises(ValueError, match=r"Ecn.pmax: 0 is not allowed; expected a number in \(0, 1\]"):
        Ecn(pmax=0)
    with pytest.raises(ValueError, match="Dcqcn.dt_s: 3e-06 is not allowed; expected a whole multiple of cnp_interval"):
        Dcqcn(dt_s=3e-6)
    with pytest.raises(ValueError, match="Dcqcn.threshold: 0 is not allowed; expected an integer >= 1"):
        Dcqcn(threshold=0)
    with pytest.raises(ValueError, match="IbCredit.vl_buffer_bytes: -1.0 is not allowed"):
        IbCredit(vl_buffer_bytes=-1.0)
    with pytest.raises(ValueError, match=r"link_kind: 'shape \(2,\)' is not allowed; expected shape \(3,\)"):
        CongestionNetwork(capacity, refinements=("pfc",), link_kind=np.full(2, ROCE))
    with pytest.raises(ValueError, match="pfc / ib-credit need link_src and link_dst"):
        CongestionNetwork(capacity, refinements=("pfc",), link_kind=np.full(3, ROCE))
    with pytest.raises(ValueError, match="dcqcn needs link_from_switch"):
        CongestionNetwork(capacity, refinements=("dcqcn",), link_kind=np.full(3, ROCE))


def test_simulate_on_an_oversubscribed_roce_fabric():
    # 4 DGX H100 with 400G RoCE NICs on a ToR leaf-spine of radix-16 switches at 3:1: an
    # all-to-all congests the leaf uplinks. Every model finishes, moves the same bytes over the
    # same links (paths do not depend on rates; a flow counts as done with up to 1 ns of transfer
    # left, a few bytes in 50 MB: rtol 1e-6), and none beats the flow model on this contended step
    # (DCQCN under-uses, PFC throttles port-wise).
    server = dataclasses.replace(dgx_h100(), nic=dev.CONNECTX7_400GBE)
    switch = dataclasses.replace(dev.SPECTRUM_4_400G, radix=16)
    topology = leaf_spine(
        server=server, servers=4, switch=switch, fabric_link=ROCE_400G, rail_optimised=False, oversubscription=3.0
    )
    work = Workload.sequence(
        [Collective(kind=CollectiveKind.ALL_TO_ALL, nbytes=64 << 20, group=tuple(range(32)))], nranks=32
    )
    results = {}
    for congestion in ((), ("dcqcn",), ("pfc",), ("dcqcn", "pfc")):
        model = "+".join(("flow",) + congestion)
        results[model] = simulate(topology, work, config=SimConfig(network_model="flow", congestion=congestion))
    flow = results["flow"]
    for model, result in results.items():
        np.testing.assert_allclose(result.link_bytes, flow.link_bytes, rtol=1e-6)
        end = result.collectives[0].end_s
        assert np.isfinite(end) and end >= flow.collectives[0].end_s * (1 - 1e-9), model
