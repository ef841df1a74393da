"""Tests for topologies.dragonfly: closed-form counts, global-link arrangements, NIC placement, validation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.topologies.fabrics import BOX, DUO, toy_switch
from topologies import devices as dv
from topologies import links as lk
from topologies.dragonfly import ARRANGEMENTS, dragonfly, global_port_target
from topologies.node import ServerSpec
from topologies.topology import LinkTier, NodeKind, Topology


def _build(
    p: int,
    a: int,
    h: int,
    g: int | None = None,
    *,
    server: ServerSpec = BOX,
    arrangement: str = "absolute",
    radix: int = 64,
    global_link: lk.LinkSpec | None = None,
) -> Topology:
    return dragonfly(
        server=server,
        servers_per_router=p,
        routers_per_group=a,
        global_links_per_router=h,
        groups=g,
        switch=toy_switch(radix),
        fabric_link=lk.IB_NDR,
        global_link=global_link,
        arrangement=arrangement,
    )


def _routers(topo: Topology) -> list[int]:
    return [n for n in topo.graph.nodes if topo.node_kind(n) == NodeKind.FABRIC_SWITCH]


def _cables(topo: Topology, tier: LinkTier) -> list[tuple[int, int]]:
    """Directed links of ``tier`` as (u, v) node pairs."""
    mask = topo.link_tier == int(tier)
    return list(zip(topo.link_src[mask].tolist(), topo.link_dst[mask].tolist()))


def _group(topo: Topology, node: int) -> int:
    return topo.graph.nodes[node]["group"]


# ------------------------------------------------------------------------------------------------
# Closed forms (dragonfly.py docstring): routers a*g; NIC ports a*p*g; servers a*p*g/K; local cables
# g*a(a-1)/2; global cables m*g(g-1)/2 with m = floor(a*h/(g-1)), = g*a*h/2 when g = a*h+1.
# ------------------------------------------------------------------------------------------------
CASES = [
    # (p, a, h, g, server, g_built, m)
    pytest.param(2, 4, 2, None, BOX, 9, 1, id="p2a4h2-balanced"),  # g = 4*2+1 = 9, one cable per pair
    pytest.param(1, 2, 1, None, BOX, 3, 1, id="p1a2h1-balanced"),  # g = 2*1+1 = 3
    pytest.param(2, 4, 2, 5, BOX, 5, 2, id="p2a4h2-g5"),  # m = floor(8/4) = 2 cables per pair
    pytest.param(3, 4, 2, 4, BOX, 4, 2, id="p3a4h2-g4"),  # m = floor(8/3) = 2, 2 ports unused
    pytest.param(2, 2, 1, None, DUO, 3, 1, id="duo-p2a2h1"),  # K = 2: a*p/K = 2 servers per group
]


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("p, a, h, g, server, g_built, m", CASES)
def test_closed_form_counts(p, a, h, g, server, g_built, m, arrangement):
    topo = _build(p, a, h, g, server=server, arrangement=arrangement)
    routers = _routers(topo)
    assert len(routers) == a * g_built
    nics = [nic for info in topo.servers for nic in info.nics]
    assert len(nics) == len(topo.nic_leaf_link) == a * p * g_built
    assert topo.num_servers == a * p * g_built // server.nics
    local = _cables(topo, LinkTier.FABRIC_1)
    glob = _cables(topo, LinkTier.FABRIC_2)
    assert len(local) == 2 * g_built * a * (a - 1) // 2  # two directed links per cable
    assert len(glob) == 2 * m * g_built * (g_built - 1) // 2
    if g is None:  # balanced: g*a*h/2 cables
        assert len(glob) == 2 * g_built * a * h // 2


def test_docstring_worked_number():
    # p = 4, a = 8, h = 4: g = 33, routers 8 * 33 = 264, ports 4 * 264 = 1056, local cables
    # 33 * 8 * 7 / 2 = 924, global cables 33 * 8 * 4 / 2 = 528 = 33 * 32 / 2
    topo = _build(4, 8, 4)
    counts = (
        len(_routers(topo)),
        len(topo.nic_leaf_link),
        len(_cables(topo, LinkTier.FABRIC_1)) // 2,
        len(_cables(topo, LinkTier.FABRIC_2)) // 2,
    )
    assert counts == (264, 1056, 924, 528)


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("p, a, h, g, server, g_built, m", CASES)
def test_structure_invariants(p, a, h, g, server, g_built, m, arrangement):
    topo = _build(p, a, h, g, server=server, arrangement=arrangement)
    graph = topo.graph
    routers = _routers(topo)
    # local links join routers of one group, global links routers of different groups
    assert all(_group(topo, u) == _group(topo, v) for u, v in _cables(topo, LinkTier.FABRIC_1))
    assert all(_group(topo, u) != _group(topo, v) for u, v in _cables(topo, LinkTier.FABRIC_2))
    # each group is a clique; every pair of groups has exactly m cables (counted one direction)
    for r in routers:
        peers = {v for u, v in _cables(topo, LinkTier.FABRIC_1) if u == r}
        assert peers == {q for q in routers if q != r and _group(topo, q) == _group(topo, r)}
    pairs: dict[tuple[int, int], int] = {}
    for u, v in _cables(topo, LinkTier.FABRIC_2):
        key = (_group(topo, u), _group(topo, v))
        pairs[key] = pairs.get(key, 0) + 1
    assert pairs == {(i, j): m for i in range(g_built) for j in range(g_built) if i != j}
    # per router: p NIC ports, a-1 local, at most h global (exactly h when balanced)
    for r in routers:
        into = [topo.link_tier[link] for _, _, link in graph.in_edges(r, keys=True)]
        assert into.count(LinkTier.NIC) == p
        assert into.count(LinkTier.FABRIC_1) == a - 1
        assert into.count(LinkTier.FABRIC_2) <= h
        if g is None:
            assert into.count(LinkTier.FABRIC_2) == h
    # ports used p + (a - 1) + h never exceed the radix (64 here)
    assert p + a - 1 + h <= 64


@pytest.mark.parametrize(
    "arrangement, expected",
    [
        # g = 9, h = 2, router 1 of group 3 owns global ports k = 2, 3 (slots v = 2, 3):
        ("absolute", {2, 4}),  # v = 2 < 3 -> group 2; v = 3 >= 3 -> group 4
        ("relative", {6, 7}),  # (3 + v + 1) mod 9: 3 + 2 + 1 = 6, 3 + 3 + 1 = 7
        ("circulant", {5, 1}),  # v = 2 even -> +(2/2 + 1) = +2 -> 5; v = 3 odd -> -((3-1)/2 + 1) = -2 -> 1
    ],
)
def test_arrangement_hand_derived(arrangement, expected):
    topo = _build(2, 4, 2, arrangement=arrangement)
    router = next(n for n in _routers(topo) if topo.graph.nodes[n]["group"] == 3 and topo.graph.nodes[n]["router"] == 1)
    reached = {_group(topo, v) for u, v in _cables(topo, LinkTier.FABRIC_2) if u == router}
    assert reached == expected
    assert {global_port_target(arrangement, 3, k, 9) for k in (2, 3)} == expected


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("g", [3, 4, 7, 8, 9])
def test_every_arrangement_reaches_each_other_group_once_per_pass(arrangement, g):
    for i in range(g):
        targets = [global_port_target(arrangement, i, k, g) for k in range(g - 1)]
        assert sorted(targets) == [j for j in range(g) if j != i]


def test_rail_major_nic_placement():
    # DUO (K = 2), p = 2, a = 2: a*p = 4 ports, S = 2 servers per group; NIC j of server s takes
    # port q = 2j + s on router q // 2 = j: router 0 holds NIC 0 of both servers (a rail)
    topo = _build(2, 2, 1, server=DUO)
    for info in topo.servers:
        for j, nic in enumerate(info.nics):
            router = int(topo.link_dst[topo.nic_leaf_link[nic]])
            assert topo.graph.nodes[router]["router"] == j
            assert topo.graph.nodes[router]["group"] == info.index // 2
    # DUO, p = 1, a = 4: S = 4*1/2 = 2; q = 2j + s on router q: s0 -> r0, r2; s1 -> r1, r3
    topo = _build(1, 4, 1, server=DUO)
    placed = [
        [topo.graph.nodes[int(topo.link_dst[topo.nic_leaf_link[nic]])]["router"] for nic in info.nics]
        for info in topo.servers[:2]
    ]
    assert placed == [[0, 2], [1, 3]]


def test_link_specs_and_tiers():
    slow = lk.IB_HDR
    topo = _build(2, 4, 2, global_link=slow)
    tier = topo.link_tier
    cap = topo.link_capacity_bytes_per_s
    assert np.all(cap[tier == LinkTier.FABRIC_2] == slow.bandwidth_bytes_per_s)
    assert np.all(cap[tier == LinkTier.FABRIC_1] == lk.IB_NDR.bandwidth_bytes_per_s)
    nic_links = np.asarray(list(topo.nic_leaf_link.values()))
    assert np.all(tier[nic_links] == LinkTier.NIC)
    # the NIC cable caps what one connection streams (NicSpec.connection_bytes_per_s)
    assert np.all(topo.link_flow_cap_bytes_per_s[nic_links] == BOX.nic.connection_bytes_per_s)
    # routers are switches of tier 1 with group/router attributes, not SHARP-capable
    for r in _routers(topo):
        attrs = topo.graph.nodes[r]
        assert attrs["tier"] == 1 and attrs["sharp"] is False
        assert topo.node_name(r) == f"g{attrs['group']}.r{attrs['router']}"


def test_build_is_deterministic():
    one, two = _build(2, 4, 2, 5, arrangement="circulant"), _build(2, 4, 2, 5, arrangement="circulant")
    assert np.array_equal(one.link_src, two.link_src)
    assert np.array_equal(one.link_dst, two.link_dst)
    assert one.link_names == two.link_names


def test_arrangements_differ():
    wiring = {
        arr: set(zip(*(t.link_src.tolist(), t.link_dst.tolist())))
        for arr in ARRANGEMENTS
        for t in [_build(2, 4, 2, arrangement=arr)]
    }
    for x, y in itertools.combinations(ARRANGEMENTS, 2):
        assert wiring[x] != wiring[y]


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(p=0, a=4, h=2), r"dragonfly\.servers_per_router: 0 is not allowed; expected an integer >= 1"),
        (dict(p=2, a=0, h=2), r"dragonfly\.routers_per_group: 0 is not allowed"),
        (dict(p=2, a=4, h=True), r"dragonfly\.global_links_per_router: True is not allowed"),
        (dict(p=2, a=4, h=1.5), r"dragonfly\.global_links_per_router: 1\.5"),
        (dict(p=2, a=4, h=2, g=1), r"dragonfly\.groups: 1 is not allowed; expected an integer in 2\.\.9"),
        # a*h + 1 = 9 groups at most: a 10th cannot get a global link from every other group
        (dict(p=2, a=4, h=2, g=10), r"dragonfly\.groups: 10 .*2\.\.9.*cannot be fully connected"),
        (dict(p=2, a=4, h=2, arrangement="random"), r"dragonfly\.arrangement: 'random' is not allowed.*'absolute'"),
        # p + (a - 1) + h = 8 + 7 + 4 = 19 > 16
        (dict(p=8, a=8, h=4, radix=16), r"19 ports but a toy_radix16 has radix 16"),
        # DUO has 2 NICs; a*p = 3*1 = 3 ports per group is not a multiple of 2
        (dict(p=1, a=3, h=1, server=DUO), r"dragonfly\.servers_per_router: 1 .*a \* p = 3 NIC ports.*2 NICs"),
    ],
)
def test_bad_parameters_are_rejected(kwargs, pattern):
    kwargs = dict(kwargs)
    args = dict(p=kwargs.pop("p"), a=kwargs.pop("a"), h=kwargs.pop("h"), g=kwargs.pop("g", None))
    with pytest.raises(ValueError, match=pattern):
        _build(args["p"], args["a"], args["h"], args["g"], **kwargs)


def test_server_without_nic_is_rejected():
    bare = ServerSpec(name="bare", gpu=dv.H100_SXM5_80GB, gpus=1, sockets=1)
    with pytest.raises(ValueError, match=r"dragonfly\.server: bare has no NIC"):
        _build(1, 2, 1, server=bare)


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        dragonfly(BOX, 2, 4, 2)  # positional use must fail
