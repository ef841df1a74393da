"""Dragonfly fabrics (Kim, Dally, Scott, Abts, ISCA 2008) joining servers' NICs.

Structure, with Kim et al.'s parameters:

* ``p`` terminal (NIC) ports per router, ``a`` routers per group, ``h`` global ports per router,
  ``g`` groups. A router uses ``p + (a - 1) + h`` ports, which must fit the switch's radix.
* Inside a group the ``a`` routers are fully connected by *local* links (``LinkTier.FABRIC_1``).
* Between groups run *global* links (``LinkTier.FABRIC_2``): a group has ``a * h`` global ports and
  every pair of groups is joined by ``m = floor(a * h / (g - 1))`` global cables, so
  ``g <= a * h + 1``; the balanced (largest) size ``g = a * h + 1`` has exactly one cable per pair
  of groups and is the default. Ports left over when ``g - 1`` does not divide ``a * h`` stay unused.
* Terminals: a group has ``a * p`` NIC ports and holds ``S = a * p / K`` servers of ``K`` NICs
  (``a * p`` must be a multiple of K). Ports are numbered *rail-major*: NIC j of the group's server
  s takes port ``q = j * S + s`` on router ``q // p``. So a server's NICs spread over the routers of
  its group, and when ``p`` is a multiple of ``S`` every router holds whole rails (NIC j of every
  server of its group), which keeps same-rail traffic inside one router as a rail-optimised
  leaf does. With single-NIC servers (K = 1) router r holds servers ``r*p .. r*p + p - 1``.

Closed forms (checked by the tests):

* routers ``= a * g``; NIC ports (hosts) ``= a * p * g``; servers ``= a * p * g / K``;
* local cables ``= g * a * (a - 1) / 2``;
* global cables ``= m * g * (g - 1) / 2``, which is ``g * a * h / 2`` when ``g = a * h + 1`` (m = 1);
* every link is two directed links (full duplex); the router graph has diameter 3 (local,
  global, local), so a minimal route crosses at most 3 router-to-router links.

Worked number: p = 4, a = 8, h = 4 (radix 4 + 7 + 4 = 15) gives g = 33 groups, 264 routers,
1056 NIC ports, 33 * 28 = 924 local cables and 33 * 8 * 4 / 2 = 528 global cables (one per pair
of groups: 33 * 32 / 2 = 528).

Global-link arrangements (Hastings et al., "Comparing global link arrangements for Dragonfly
networks", IEEE Cluster 2015; Camarero, Vallejo, Beivide, ACM TACO 2014). Global port k of a group
sits on router ``k // h``. Let ``v = k mod (g - 1)`` (the port's slot among the other groups) and
``c = k div (g - 1)`` (which copy of that pair's cables it carries, when m > 1). Port k of group i
leads to group

* ``absolute``: ``v`` if ``v < i`` else ``v + 1`` (the other groups in increasing order);
* ``relative``: ``(i + v + 1) mod g`` (the group ``v + 1`` steps ahead);
* ``circulant``: ``(i + v/2 + 1) mod g`` for even v, ``(i - (v-1)/2 - 1) mod g`` for odd v
  (offsets +1, -1, +2, -2, ...; a cable at offset +d from group i is at offset -d from its far end).

Each rule reaches every other group exactly once per copy; the c-th port of group i leading to
group j is cabled to the c-th port of group j leading to group i.

What is captured: the wiring, per-link capacity and latency (local and global links may have
different ``LinkSpec``s, e.g. copper inside a group and optics between groups). What is ignored:
cable lengths beyond the ``LinkSpec``'s latency, virtual channels and deadlock avoidance (the
fluid model has no buffers), and SHARP trees (routers are marked ``sharp=False``: in-network
reduction trees are built over leaf-spine spines only). Routing policies (minimal, Valiant, UGAL)
live in ``routing/policies.py``; routers carry node attributes ``group`` and ``router`` for them.

>>> from topologies import devices as dv, links as lk
>>> from topologies.node import ServerSpec
>>> box = ServerSpec(name="box", gpu=dv.H100_SXM5_80GB, gpus=1, nic=dv.CONNECTX7_NDR, nics=1, sockets=1)
>>> topo = dragonfly(server=box, servers_per_router=2, routers_per_group=4, global_links_per_router=2,
...                  switch=dv.QUANTUM2_NDR, fabric_link=lk.IB_NDR)
>>> topo.num_servers            # a * p * g = 4 * 2 * 9
72
"""

from __future__ import annotations

from .checks import choice, instance, integer, reject
from .devices import SwitchSpec
from .fat_tree import add_servers
from .links import LinkSpec
from .node import ServerSpec
from .topology import LinkTier, NodeKind, Topology, TopologyBuilder

ARRANGEMENTS = ("absolute", "relative", "circulant")


def _positive_int(field: str, value: object, minimum: int = 1) -> int:
    return integer(f"dragonfly.{field}", value, low=minimum)


def global_port_target(arrangement: str, group: int, port: int, groups: int) -> int:
    """Group reached by global port ``port`` of group ``group`` (see the module docstring).

    >>> [global_port_target("absolute", 2, k, 5) for k in range(4)]
    [0, 1, 3, 4]
    >>> [global_port_target("relative", 2, k, 5) for k in range(4)]
    [3, 4, 0, 1]
    >>> [global_port_target("circulant", 2, k, 5) for k in range(4)]
    [3, 1, 4, 0]
    """
    v = port % (groups - 1)
    if arrangement == "absolute":
        return v if v < group else v + 1
    if arrangement == "relative":
        return (group + v + 1) % groups
    if arrangement == "circulant":
        step = v // 2 + 1
        return (group + step) % groups if v % 2 == 0 else (group - step) % groups
    raise reject("dragonfly.arrangement", arrangement, f"one of {', '.join(map(repr, ARRANGEMENTS))}")


def dragonfly(
    *,
    server: ServerSpec,
    servers_per_router: int,
    routers_per_group: int,
    global_links_per_router: int,
    groups: int | None = None,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    global_link: LinkSpec | None = None,
    arrangement: str = "absolute",
    name: str | None = None,
) -> Topology:
    """Servers on a dragonfly of ``switch`` routers: p = ``servers_per_router`` NIC ports per router
    (servers per router for single-NIC servers), a = ``routers_per_group``, h =
    ``global_links_per_router``, g = ``groups`` (default a * h + 1). Local links use
    ``fabric_link``, global links ``global_link`` (default ``fabric_link``). Deterministic."""
    p = _positive_int("servers_per_router", servers_per_router)
    a = _positive_int("routers_per_group", routers_per_group)
    h = _positive_int("global_links_per_router", global_links_per_router)
    g_max = a * h + 1
    g = integer(
        "dragonfly.groups",
        g_max if groups is None else groups,
        low=2,
        high=g_max,
        expected=f"an integer in 2..{g_max} (a * h + 1 = {a} * {h} + 1: a group has only {a * h} global ports, "
        "one per other group at least, so more groups cannot be fully connected)",
    )
    choice("dragonfly.arrangement", arrangement, ARRANGEMENTS)
    for field, spec in (("fabric_link", fabric_link), ("global_link", global_link)):
        if spec is not None:
            instance(f"dragonfly.{field}", spec, LinkSpec, "a LinkSpec")
    instance("dragonfly.switch", switch, SwitchSpec, "a SwitchSpec")
    instance("dragonfly.server", server, ServerSpec, "a ServerSpec")
    k_nics = server.nics
    if k_nics == 0:
        raise ValueError(f"dragonfly.server: {server.name} has no NIC; expected a server with NICs")
    if (a * p) % k_nics:
        raise ValueError(
            f"dragonfly.servers_per_router: {p} is not allowed with routers_per_group={a}: a group has "
            f"a * p = {a * p} NIC ports, not a multiple of the {k_nics} NICs of a {server.name}; "
            f"expected a * p divisible by {k_nics}"
        )
    ports = p + (a - 1) + h
    if ports > switch.radix:
        raise ValueError(
            f"dragonfly: a router needs p + (a - 1) + h = {p} + {a - 1} + {h} = {ports} ports but a "
            f"{switch.name} has radix {switch.radix}; expected p + a - 1 + h <= {switch.radix}"
        )
    glink = fabric_link if global_link is None else global_link
    per_group = a * p // k_nics  # servers per group
    copies = a * h // (g - 1)  # global cables per pair of groups

    builder = TopologyBuilder(name or f"dragonfly(p={p}, a={a}, h={h}, g={g}) of {server.name}")
    infos = add_servers(builder, server, g * per_group)
    routers = [
        [
            builder.add_node(
                NodeKind.FABRIC_SWITCH,
                f"g{i}.r{r}",
                latency_s=switch.latency_s,
                tier=1,
                group=i,
                router=r,
                switch=switch.name,
                sharp=False,
                reduction_efficiency=switch.reduction_efficiency,
            )
            for r in range(a)
        ]
        for i in range(g)
    ]
    for i in range(g):
        for s in range(per_group):
            info = infos[i * per_group + s]
            for j, nic in enumerate(info.nics):
                assert server.nic is not None  # a NIC id comes from a server with a NicSpec (ServerSpec checks it)
                router = routers[i][(j * per_group + s) // p]
                up, _ = builder.add_link(
                    nic, router, fabric_link, tier=LinkTier.NIC, flow_cap_bytes_per_s=server.nic.connection_bytes_per_s
                )
                builder.nic_leaf_link[nic] = up
        for r in range(a):
            for q in range(r + 1, a):
                builder.add_link(routers[i][r], routers[i][q], fabric_link, tier=LinkTier.FABRIC_1)
    # the c-th port of group i leading to group j <-> the c-th port of group j leading to group i
    toward: dict[tuple[int, int], list[int]] = {}
    for i in range(g):
        for k in range(copies * (g - 1)):
            toward.setdefault((i, global_port_target(arrangement, i, k, g)), []).append(k)
    for i in range(g):
        for j in range(i + 1, g):
            for k_i, k_j in zip(toward[(i, j)], toward[(j, i)]):
                builder.add_link(routers[i][k_i // h], routers[j][k_j // h], glink, tier=LinkTier.FABRIC_2)
    return builder.build(
        description=f"{g * per_group}x {server.name}, dragonfly p={p} a={a} h={h} g={g} ({arrangement}) of "
        f"{switch.name}, {copies} global link(s) per pair of groups"
    )
