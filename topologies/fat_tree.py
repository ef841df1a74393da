"""Folded-Clos fabrics joining servers' NICs: leaf-spine, k-ary 3-tier fat-tree, rail-only, multi-plane.

Notation: N servers of K NICs each, switches of ``radix`` ports, oversubscription ratio R = down:up
at the first tier (R >= 1), P planes. Every generator is keyword-only and deterministic (no random
choice is made anywhere: the same arguments give the same node and link ids).

Common rules
------------
* **Edge ports.** A first-tier switch (leaf/edge) of k usable ports gives ``d = floor(k R / (R + 1))``
  ports to NICs; one with n NICs attached gets ``u = ceil(n / R)`` uplinks, so down:up = R:1 and the
  fabric is non-blocking above the NICs at R = 1. Tiers above the first are never oversubscribed.
* **Rail-optimised** (default): NIC j of the servers of a group of d consecutive servers plugs into
  the edge switch of rail j (NVIDIA DGX SuperPOD reference architectures), so traffic between GPUs
  of the same index on different servers of a group crosses one edge switch. ``G = ceil(N / d)``
  groups, ``K G`` edges. **ToR** (``rail_optimised=False``): all NICs of a server go to one
  top-of-rack edge, ``floor(d / K)`` whole servers per edge, ``ceil(N / floor(d / K))`` edges.
* **Multi-plane** (``planes=P``, P dividing K): NIC j sits on plane ``j % P``; every plane is an
  independent copy of the fabric built for ``K_p = K / P`` NICs per server (no link joins two
  planes), the layout of multi-plane 800G designs. Every closed form below holds per plane with K
  replaced by K_p; switch counts are multiplied by P.

leaf_spine (2 tiers)
--------------------
``leaves = K ceil(N / d)`` (ToR: ``ceil(N / floor(d / K))``), ``spines = max over leaves of
ceil(n / R)`` when more than one leaf exists; spine i takes uplink i of every leaf, so a spine
needs one port per leaf: ``leaves <= radix`` (largest N, rail-optimised: ``floor(radix / K) d``).
DGX H100 (K = 8) on Quantum-2 (radix 64) at R = 1: d = 32, at most 8 x 32 = 256 servers.

fat_tree (k-ary 3-tier folded Clos; Al-Fares et al., SIGCOMM 2008)
-------------------------------------------------------------------
The full k-ary fat-tree has k pods of k/2 edge and k/2 aggregation switches and (k/2)^2 core
switches: ``k^3/4`` host ports and ``5 k^2 / 4`` switches (k = 64: 65,536 ports, 5,120 switches).
Here (k defaults to the switch radix, must be even):

* edges are numbered rail-major (all edges of rail 0, then rail 1, ...; ToR: in server order) and
  pod p holds edges ``p k/2 .. (p+1) k/2 - 1``, so a rail's edges are consecutive and same-rail
  traffic stays inside one pod whenever ``G`` divides k/2 (or k/2 divides G: a rail then spans whole
  pods). Only the pods the servers need are built: ``pods = ceil(E / (k/2))`` for E edges per plane
  (rail-optimised ``E = K ceil(N / d)``; ToR ``E = ceil(N / floor(d / K))``, which is
  ``ceil(N K / (k/2)^2)`` pods when K divides d = k/2); ``pods <= k``, so at most
  ``k (k/2) d`` NIC ports per plane (``k^3/4`` at R = 1).
* pod p holds E_p edges (k/2, except perhaps the last pod) and ``u_max`` aggregation switches
  (u_max: most uplinks of its edges, ``ceil(d / R)`` when an edge is full); edge uplink t goes to
  aggregation switch t, which keeps k/2 ports for edges and k/2 for the core. A partly filled last
  pod keeps all u_max aggregation switches, each with fewer links: merging them would cut the core
  groups it reaches and block traffic to it. Only a lone pod (no core) merges them: its
  aggregation switches take ``c = floor((k/2) / E)`` parallel links from each edge, so it has
  ``ceil(u_max / c)``. An aggregation switch with D downlinks gets D uplinks to the core
  (non-blocking above the edge).
* core: aggregation switches at position i of all pods form core group i. With ``pods`` pods a core
  switch takes ``c = floor(k / pods)`` links from each pod (parallel cables when c > 1: only the core
  ports the pods use are built), so group i has ``ceil(max_p D_{p,i} / c)`` core switches and uplink
  j of aggregation switch i goes to core switch ``j // c`` of group i. With one pod there is no core
  (a single pod is a leaf-spine whose spines keep half their ports for a future core); with one edge
  there is no aggregation tier either.
* closed forms when every edge is full (N a multiple of d), E edges and pods = ceil(E / (k/2)) > 1:
  ``aggs = pods ceil(d/R)``, ``cores = ceil(d/R) ceil(min(E, k/2) / floor(k / pods))`` =
  ``ceil(d/R) ceil((k/2) / floor(k / pods))``. One pod (E <= k/2):
  ``ceil(ceil(d/R) / floor((k/2) / E))`` aggregation switches and no core. Full tree (pods = k, R = 1):
  ``k^2/2`` edges + ``k^2/2`` aggs + ``k^2/4`` cores = ``5k^2/4``. A non-blocking 3-tier tree spends
  5 switch ports per NIC port (edge down + up, agg down + up, core), a 2-tier one 3.

Worked number: 512 DGX H100 (4,096 GPUs, K = 8) on Quantum-2 (k = 64), R = 1: d = 32, G = 16 groups,
E = 128 edges, 4 pods of 32 edges (two rails per pod), 4 x 32 = 128 aggregation switches,
c = 64 / 4 = 16, 32 groups x ceil(32 / 16) = 64 cores: 320 switches, 20,480 ports, all used.
2,048 servers: 512 edges, 16 pods, 512 aggs, c = 4, 32 x 8 = 256 cores (1,280 switches).

>>> from topologies import devices, links
>>> from topologies.node import dgx_h100
>>> fat_tree_max_servers(server=dgx_h100(), switch=devices.QUANTUM2_NDR)   # 64 pods x 32 edges / 8 rails x 32
8192
>>> leaf_spine_max_servers(server=dgx_h100(), switch=devices.QUANTUM2_NDR)
256

rail_only (Wang et al. 2023, "How to build low-cost networks for large language models")
----------------------------------------------------------------------------------------
Each rail j is its own fabric of the NICs j of all N servers and no switch joins two rails:
a single switch when ``N <= radix``, else a leaf-spine of ``L = ceil(N / d)`` leaves whose spines take
``c = floor(radix / L)`` parallel links from each leaf: ``ceil(ceil(d / R) / c)`` spines per rail
(``L <= radix``, so at most ``radix d`` servers). Traffic between different rails must cross
NVLink inside a server to a GPU on the destination's rail (NCCL PXN); a route that leaves through
a NIC of another rail cannot reach its destination. 512 DGX H100 on Quantum-2: per rail 16 leaves
and ceil(32 / 4) = 8 spines, 8 x 24 = 192 switches (3 ports per GPU instead of 5 for the fat-tree).

What is captured: which ports are cabled to which, per-link capacity and latency (from the
LinkSpec and the switch's traversal latency). What is ignored: physical placement (racks, cable
lengths beyond the link preset's typical length), management/storage fabrics, and switch
buffer sizes. Every fabric switch carries the node attributes ``tier`` (1 edge/leaf, 2
aggregation/spine, 3 core), ``switch`` (spec name), ``radix``, ``sharp``, ``reduction_efficiency``,
the SHARP resources ``sharp_aggregation_bytes_per_s`` (resolved: the port rate when the spec gives
none), ``sharp_max_trees``, ``sharp_max_trees_per_port`` and ``sharp_max_jobs`` (None: no limit),
``plane`` and ``rail`` (-1 when the switch serves every rail), and ``pod`` on fat-tree switches.

Servers are added with :func:`add_servers`, which builds the first server with
``node.add_server`` and stamps out the others from its recorded devices and links (identical
result, a small fraction of the time for thousands of servers).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

from .checks import finite, instance, integer, is_int, reject
from .devices import SwitchSpec
from .links import LinkSpec
from .node import ServerSpec, add_server
from .topology import LinkTier, NodeKind, ServerInfo, Topology, TopologyBuilder

__all__ = (
    "leaf_spine",
    "fat_tree",
    "rail_only",
    "leaf_spine_max_servers",
    "fat_tree_max_servers",
    "rail_only_max_servers",
    "add_servers",
)


# ------------------------------------------------------------------------------------------------
# Servers: build one, stamp out the rest
# ------------------------------------------------------------------------------------------------


class ShiftedRoutes(Mapping[tuple[int, int], tuple[int, ...]]):
    """A route table of a stamped server: the template's, every link id shifted by ``offset`` (a copy's links
    are the template's, added in the same order), computed as read, so 100k servers share one table."""

    __slots__ = ("_table", "_offset")

    def __init__(self, table: dict[tuple[int, int], tuple[int, ...]], offset: int) -> None:
        self._table, self._offset = table, offset

    def __getitem__(self, key: tuple[int, int]) -> tuple[int, ...]:
        return tuple(map(self._offset.__add__, self._table[key]))  # int addition, as link + offset

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"ShiftedRoutes({dict(self)!r})"


class _RecordingBuilder(TopologyBuilder):
    """A TopologyBuilder that also logs every device and link added, in order."""

    def __init__(self) -> None:
        super().__init__("template")
        # (kind, name, server, latency_s, gpu local index or None, attrs)
        self.node_log: list[tuple[NodeKind, str, int, float, int | None, dict[str, object]]] = []
        # (u, v, spec, tier, duplex, flow_cap, link ids)
        self.link_log: list[tuple[int, int, LinkSpec, LinkTier, bool, float, tuple[int, ...]]] = []
        self._recording_local: int | None = None

    def add_node(self, kind: NodeKind, name: str, *, server: int = -1, latency_s: float = 0.0, **attrs: Any) -> int:
        node = super().add_node(kind, name, server=server, latency_s=latency_s, **attrs)
        self.node_log.append((NodeKind(kind), name, server, latency_s, self._recording_local, dict(attrs)))
        return node

    def add_gpu(self, name: str, *, server: int, local: int, **attrs: Any) -> int:
        self._recording_local = local
        try:
            return super().add_gpu(name, server=server, local=local, **attrs)
        finally:
            self._recording_local = None

    def add_link(
        self,
        u: int,
        v: int,
        spec: LinkSpec,
        *,
        tier: LinkTier,
        duplex: bool = True,
        flow_cap_bytes_per_s: float = float("inf"),
    ) -> tuple[int, ...]:
        ids = super().add_link(u, v, spec, tier=tier, duplex=duplex, flow_cap_bytes_per_s=flow_cap_bytes_per_s)
        self.link_log.append((u, v, spec, tier, duplex, flow_cap_bytes_per_s, ids))
        return ids


def add_servers(builder: TopologyBuilder, spec: ServerSpec, count: int, *, first_index: int = 0) -> list[ServerInfo]:
    """Add ``count`` copies of server ``spec`` (indices ``first_index ...``) to ``builder``.

    Same devices, links, names, ids and ServerInfo as calling ``node.add_server`` for each index
    in turn: the first server is built by ``add_server`` into a recording builder, and every copy
    replays its devices and links with names re-prefixed and ids remapped.
    """
    template = _RecordingBuilder()
    info0 = add_server(template, spec, 0)
    prefix0 = "s0."
    stampable = (
        info0.index == 0
        and info0.name == "s0"
        and all(name.startswith(prefix0) and server == 0 for _, name, server, *_ in template.node_log)
    )
    if not stampable:  # a server layout this stamping does not understand: build each one for real
        return [add_server(builder, spec, first_index + s) for s in range(count)]
    # the template's route tables, shared by every copy (a copy shifts their link ids as it reads them)
    shared = {
        id(table): dict(table) for table in (info0.intra_routes, info0.gpu_to_nic_routes, info0.nic_to_gpu_routes)
    }
    infos = []
    for s in range(first_index, first_index + count):
        prefix = f"s{s}."
        first_gpu = builder.num_gpus
        node_map = []
        for kind, name, _, latency_s, local, attrs in template.node_log:
            new_name = prefix + name[len(prefix0) :]
            if local is not None:
                node = builder.add_gpu(new_name, server=s, local=local, latency_s=latency_s, **attrs)
            else:
                node = builder.add_node(kind, new_name, server=s, latency_s=latency_s, **attrs)
            node_map.append(node)
        first_link = builder.num_links
        for u, v, link_spec, tier, duplex, flow_cap, _ in template.link_log:
            builder.add_link(
                node_map[u], node_map[v], link_spec, tier=tier, duplex=duplex, flow_cap_bytes_per_s=flow_cap
            )

        def routes(table: Mapping[tuple[int, int], tuple[int, ...]]) -> Mapping[tuple[int, int], tuple[int, ...]]:
            # the copy's links are the template's, in the same order, from first_link on
            return ShiftedRoutes(shared[id(table)], first_link)

        info = dataclasses.replace(
            info0,
            index=s,
            name=f"s{s}",
            first_gpu=first_gpu,
            gpus=tuple(node_map[n] for n in info0.gpus),
            nics=tuple(node_map[n] for n in info0.nics),
            nvswitch=node_map[info0.nvswitch] if info0.nvswitch >= 0 else -1,
            intra_routes=routes(info0.intra_routes),
            gpu_to_nic_routes=routes(info0.gpu_to_nic_routes),
            nic_to_gpu_routes=routes(info0.nic_to_gpu_routes),
        )
        builder.servers.append(info)
        infos.append(info)
    return infos


# ------------------------------------------------------------------------------------------------
# Shared checks and wiring
# ------------------------------------------------------------------------------------------------


def _check_common(
    fn: str,
    *,
    server: ServerSpec,
    servers: object,
    switch: SwitchSpec | None,
    oversubscription: object,
    planes: object = 1,
) -> tuple[int, float, int]:
    """The checked (servers, oversubscription, planes): numpy numbers become an int, a float and an int."""
    instance(f"{fn}.server", server, ServerSpec, "a ServerSpec")
    servers = integer(f"{fn}.servers", servers, low=1)
    oversubscription = finite(f"{fn}.oversubscription", oversubscription, low=1.0, expected="a number >= 1")
    if servers > 1 and server.nics == 0:
        raise ValueError(
            f"{fn}.server: {server.name} has no NIC, so {servers} servers cannot be joined; "
            "expected servers=1 or a server with NICs"
        )
    if servers > 1:
        _check_switch(fn, switch)
    if not is_int(planes) or planes < 1 or (server.nics and server.nics % planes):
        divisors = [p for p in range(1, server.nics + 1) if server.nics % p == 0] or [1]
        raise reject(
            f"{fn}.planes",
            planes,
            f"a divisor of the {server.nics} NICs of a {server.name} ({', '.join(map(str, divisors))})",
        )
    return servers, oversubscription, int(planes)


def _check_switch(fn: str, switch: object) -> None:
    instance(f"{fn}.switch", switch, SwitchSpec, "a SwitchSpec")


def _down_ports(ports: int, oversubscription: float) -> int:
    """NIC ports of a first-tier switch with ``ports`` usable ports at down:up = R:1."""
    return max(1, int(ports * oversubscription // (oversubscription + 1)))


def _plane_rails(nics: int, planes: int, plane: int) -> list[int]:
    return [j for j in range(nics) if j % planes == plane]


def _edge_groups(
    fn: str,
    infos: list[ServerInfo],
    rails: list[int],
    down: int,
    rail_optimised: bool,
    *,
    server: ServerSpec,
    switch: SwitchSpec,
    oversubscription: float,
    planes: int,
) -> list[tuple[int, list[int]]]:
    """(rail or -1, NIC node ids) per first-tier switch, rail-major when rail-optimised."""
    n = len(infos)
    if rail_optimised:
        per_rail = math.ceil(n / down)
        return [
            (j, [infos[s].nics[j] for s in range(g * down, min(n, (g + 1) * down))])
            for j in rails
            for g in range(per_rail)
        ]
    per_leaf = down // len(rails)
    if per_leaf < 1:
        what = f"{len(rails)} NICs" + (" per plane" if planes > 1 else "")
        raise ValueError(
            f"{fn}: a {server.name} has {what} but a {switch.name} leaf has only {down} down ports "
            f"at oversubscription {oversubscription:g}; use rail_optimised=True"
        )
    return [(-1, [info.nics[j] for info in infos[i : i + per_leaf] for j in rails]) for i in range(0, n, per_leaf)]


def _add_switch(
    builder: TopologyBuilder, name: str, switch: SwitchSpec, *, tier: int, plane: int, rail: int = -1, **extra: Any
) -> int:
    return builder.add_node(
        NodeKind.FABRIC_SWITCH,
        name,
        latency_s=switch.latency_s,
        tier=tier,
        switch=switch.name,
        radix=switch.radix,
        sharp=switch.sharp,
        reduction_efficiency=switch.reduction_efficiency,
        sharp_aggregation_bytes_per_s=switch.sharp_aggregation_rate_bytes_per_s,
        sharp_max_trees=switch.sharp_max_trees,
        sharp_max_trees_per_port=switch.sharp_max_trees_per_port,
        sharp_max_jobs=switch.sharp_max_jobs,
        plane=plane,
        rail=rail,
        **extra,
    )


def _attach_nics(
    builder: TopologyBuilder, leaf: int, nics: list[int], fabric_link: LinkSpec, server: ServerSpec
) -> None:
    for nic in nics:
        assert server.nic is not None  # a NIC id comes from a server with a NicSpec (ServerSpec checks it)
        up, _ = builder.add_link(
            nic, leaf, fabric_link, tier=LinkTier.NIC, flow_cap_bytes_per_s=server.nic.connection_bytes_per_s
        )
        builder.nic_leaf_link[nic] = up


def _plane_prefix(planes: int, plane: int) -> str:
    return f"plane{plane}." if planes > 1 else ""


# ------------------------------------------------------------------------------------------------
# leaf-spine
# ------------------------------------------------------------------------------------------------


def leaf_spine(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec | None,
    fabric_link: LinkSpec | None,
    rail_optimised: bool = True,
    oversubscription: float = 1.0,
    planes: int = 1,
    name: str | None = None,
) -> Topology:
    """``servers`` copies of ``server`` whose NICs join a 2-tier leaf-spine of ``switch`` (per plane); a
    single server needs neither ``switch`` nor ``fabric_link``."""
    fn = "leaf_spine"
    servers, oversubscription, planes = _check_common(
        fn, server=server, servers=servers, switch=switch, oversubscription=oversubscription, planes=planes
    )
    builder = TopologyBuilder(name or f"{servers}x {server.name}")
    infos = add_servers(builder, server, servers)
    if servers == 1:
        return builder.build(description=f"1x {server.name}")
    assert switch is not None and fabric_link is not None  # _check_common rejects a missing switch

    radix = switch.radix
    down = _down_ports(radix, oversubscription)
    nleaves = 0
    for plane in range(planes):
        rails = _plane_rails(server.nics, planes, plane)
        groups = _edge_groups(
            fn,
            infos,
            rails,
            down,
            rail_optimised,
            server=server,
            switch=switch,
            oversubscription=oversubscription,
            planes=planes,
        )
        prefix = _plane_prefix(planes, plane)
        leaves = []
        for i, (rail, members) in enumerate(groups):
            leaf = _add_switch(builder, f"{prefix}leaf{i}", switch, tier=1, plane=plane, rail=rail)
            _attach_nics(builder, leaf, members, fabric_link, server)
            leaves.append(leaf)
        nleaves += len(leaves)
        if len(leaves) > 1:
            if len(leaves) > radix:
                per = " per plane" if planes > 1 else ""
                raise ValueError(
                    f"leaf_spine: {servers} servers x {server.nics} NICs need {len(leaves)} leaves{per}, but a "
                    f"{switch.name} spine has {radix} ports; use fewer servers or a 3-tier fat-tree"
                )
            uplinks = [math.ceil(len(members) / oversubscription) for _, members in groups]
            spines = [
                _add_switch(builder, f"{prefix}spine{k}", switch, tier=2, plane=plane) for k in range(max(uplinks))
            ]
            for leaf, u in zip(leaves, uplinks):
                for k in range(u):
                    builder.add_link(leaf, spines[k], fabric_link, tier=LinkTier.FABRIC_1)
    kind = "rail-optimised" if rail_optimised else "ToR"
    planes_text = f", {planes} planes" if planes > 1 else ""
    return builder.build(
        description=f"{servers}x {server.name}, {kind} leaf-spine of {switch.name}, "
        f"{nleaves} leaves, oversubscription {oversubscription:g}:1{planes_text}"
    )


def leaf_spine_max_servers(
    *,
    server: ServerSpec,
    switch: SwitchSpec,
    rail_optimised: bool = True,
    oversubscription: float = 1.0,
    planes: int = 1,
) -> int:
    """Largest server count :func:`leaf_spine` builds (a spine has one port per leaf of its plane)."""
    _check_switch("leaf_spine", switch)
    _, oversubscription, planes = _check_common(
        "leaf_spine", server=server, servers=1, switch=switch, oversubscription=oversubscription, planes=planes
    )
    if server.nics == 0:
        return 1
    nics = server.nics // planes
    down = _down_ports(switch.radix, oversubscription)
    if rail_optimised:
        return max(1, (switch.radix // nics) * down)
    return max(1, switch.radix * (down // nics))


# ------------------------------------------------------------------------------------------------
# k-ary 3-tier fat-tree
# ------------------------------------------------------------------------------------------------


def _check_k(k: object, switch: SwitchSpec) -> int:
    if k is None:
        k = switch.radix
    if not is_int(k) or k < 2 or k % 2 or k > switch.radix:
        raise reject("fat_tree.k", k, f"an even integer in 2..{switch.radix} (the {switch.name} radix)")
    return int(k)


def fat_tree(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    k: int | None = None,
    rail_optimised: bool = True,
    oversubscription: float = 1.0,
    planes: int = 1,
    name: str | None = None,
) -> Topology:
    """``servers`` copies of ``server`` on a k-ary 3-tier folded Clos of ``switch`` (per plane).

    Tiers: edge (``tier=1``, NIC links ``LinkTier.NIC``), aggregation (``tier=2``, edge links
    ``LinkTier.FABRIC_1``), core (``tier=3``, aggregation links ``LinkTier.FABRIC_2``). Counts
    follow the closed forms of the module docstring.
    """
    fn = "fat_tree"
    servers, oversubscription, planes = _check_common(
        fn, server=server, servers=servers, switch=switch, oversubscription=oversubscription, planes=planes
    )
    if servers > 1 or isinstance(switch, SwitchSpec):
        k = _check_k(k, switch)
    builder = TopologyBuilder(name or f"{servers}x {server.name}")
    infos = add_servers(builder, server, servers)
    if servers == 1:
        return builder.build(description=f"1x {server.name}")

    half = k // 2
    down = _down_ports(k, oversubscription)
    counts = [0, 0, 0]
    for plane in range(planes):
        rails = _plane_rails(server.nics, planes, plane)
        groups = _edge_groups(
            fn,
            infos,
            rails,
            down,
            rail_optimised,
            server=server,
            switch=switch,
            oversubscription=oversubscription,
            planes=planes,
        )
        npods = math.ceil(len(groups) / half)
        if npods > k:
            per = " per plane" if planes > 1 else ""
            most = fat_tree_max_servers(
                server=server,
                switch=switch,
                k=k,
                rail_optimised=rail_optimised,
                oversubscription=oversubscription,
                planes=planes,
            )
            raise ValueError(
                f"fat_tree: {servers} servers x {server.nics} NICs need {len(groups)} edge switches{per} = "
                f"{npods} pods of {half}, but a k={k} core switch has {k} ports (at most {k} pods, {most} "
                "servers); use fewer servers, a larger k or more oversubscription"
            )
        prefix = _plane_prefix(planes, plane)
        edges = []
        for i, (rail, members) in enumerate(groups):
            edge = _add_switch(builder, f"{prefix}edge{i}", switch, tier=1, plane=plane, rail=rail, pod=i // half)
            _attach_nics(builder, edge, members, fabric_link, server)
            edges.append(edge)
        counts[0] += len(edges)
        if len(edges) == 1:
            continue
        uplinks = [math.ceil(len(members) / oversubscription) for _, members in groups]
        aggs_down: list[list[int]] = []  # per pod, per aggregation switch: its downlink count
        agg_nodes: list[list[int]] = []
        for pod in range(npods):
            pod_edges = range(pod * half, min(len(edges), (pod + 1) * half))
            # links an aggregation switch takes from each edge: parallel cables only in a lone pod
            per_edge = half // len(pod_edges) if npods == 1 else 1
            naggs = math.ceil(max(uplinks[e] for e in pod_edges) / per_edge)
            aggs = [
                _add_switch(builder, f"{prefix}agg{pod}.{i}", switch, tier=2, plane=plane, pod=pod)
                for i in range(naggs)
            ]
            down_counts = [0] * naggs
            for e in pod_edges:
                for t in range(uplinks[e]):
                    builder.add_link(edges[e], aggs[t // per_edge], fabric_link, tier=LinkTier.FABRIC_1)
                    down_counts[t // per_edge] += 1
            aggs_down.append(down_counts)
            agg_nodes.append(aggs)
            counts[1] += naggs
        if npods == 1:
            continue
        per_pod = k // npods  # links a core switch takes from each pod
        for i in range(max(len(a) for a in agg_nodes)):
            widest = max(down_counts[i] for down_counts in aggs_down if i < len(down_counts))
            cores = [
                _add_switch(builder, f"{prefix}core{i}.{m}", switch, tier=3, plane=plane)
                for m in range(math.ceil(widest / per_pod))
            ]
            counts[2] += len(cores)
            for pod in range(npods):
                if i < len(agg_nodes[pod]):
                    for j in range(aggs_down[pod][i]):
                        builder.add_link(agg_nodes[pod][i], cores[j // per_pod], fabric_link, tier=LinkTier.FABRIC_2)
    kind = "rail-optimised" if rail_optimised else "ToR"
    planes_text = f", {planes} planes" if planes > 1 else ""
    return builder.build(
        description=f"{servers}x {server.name}, {kind} {k}-ary fat-tree of {switch.name}: {counts[0]} edge, "
        f"{counts[1]} aggregation, {counts[2]} core switches, oversubscription "
        f"{oversubscription:g}:1{planes_text}"
    )


def fat_tree_max_servers(
    *,
    server: ServerSpec,
    switch: SwitchSpec,
    k: int | None = None,
    rail_optimised: bool = True,
    oversubscription: float = 1.0,
    planes: int = 1,
) -> int:
    """Largest server count :func:`fat_tree` builds: k pods of k/2 edges per plane."""
    _check_switch("fat_tree", switch)
    _check_common("fat_tree", server=server, servers=1, switch=switch, oversubscription=oversubscription, planes=planes)
    k = _check_k(k, switch)
    if server.nics == 0:
        return 1
    nics = server.nics // planes
    down = _down_ports(k, oversubscription)
    edges = k * (k // 2)
    if rail_optimised:
        return max(1, (edges // nics) * down)
    return max(1, edges * (down // nics))


# ------------------------------------------------------------------------------------------------
# rail-only
# ------------------------------------------------------------------------------------------------


def rail_only(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    oversubscription: float = 1.0,
    name: str | None = None,
) -> Topology:
    """``servers`` copies of ``server`` whose NIC j joins rail j's own switch or leaf-spine; no
    switch joins two rails (Wang et al. 2023). ``oversubscription`` applies to the per-rail leaves
    when a rail needs more than one switch."""
    fn = "rail_only"
    _check_common(fn, server=server, servers=servers, switch=switch, oversubscription=oversubscription)
    builder = TopologyBuilder(name or f"{servers}x {server.name}")
    infos = add_servers(builder, server, servers)
    if servers == 1:
        return builder.build(description=f"1x {server.name}")

    radix = switch.radix
    down = radix if servers <= radix else _down_ports(radix, oversubscription)
    nleaves = math.ceil(servers / down)
    if nleaves > radix:
        raise ValueError(
            f"rail_only: {servers} servers need {nleaves} leaves per rail, but a {switch.name} spine has {radix} "
            f"ports (at most {rail_only_max_servers(server=server, switch=switch, oversubscription=oversubscription)}"
            " servers); use fewer servers or more oversubscription"
        )
    nswitches = 0
    for rail in range(server.nics):
        prefix = f"rail{rail}."
        leaves, uplinks = [], []
        for i in range(nleaves):
            members = [infos[s].nics[rail] for s in range(i * down, min(servers, (i + 1) * down))]
            leaf = _add_switch(builder, f"{prefix}leaf{i}", switch, tier=1, plane=rail, rail=rail)
            _attach_nics(builder, leaf, members, fabric_link, server)
            leaves.append(leaf)
            uplinks.append(math.ceil(len(members) / oversubscription))
        nswitches += nleaves
        if nleaves == 1:
            continue
        per_leaf = radix // nleaves  # parallel links a spine takes from each leaf
        spines = [
            _add_switch(builder, f"{prefix}spine{m}", switch, tier=2, plane=rail, rail=rail)
            for m in range(math.ceil(max(uplinks) / per_leaf))
        ]
        nswitches += len(spines)
        for leaf, u in zip(leaves, uplinks):
            for j in range(u):
                builder.add_link(leaf, spines[j // per_leaf], fabric_link, tier=LinkTier.FABRIC_1)
    return builder.build(
        description=f"{servers}x {server.name}, rail-only fabric of {switch.name}: {server.nics} rails, "
        f"{nswitches} switches, oversubscription {oversubscription:g}:1"
    )


def rail_only_max_servers(*, server: ServerSpec, switch: SwitchSpec, oversubscription: float = 1.0) -> int:
    """Largest server count :func:`rail_only` builds: ``radix`` leaves of d NICs per rail."""
    _check_switch("rail_only", switch)
    _check_common("rail_only", server=server, servers=1, switch=switch, oversubscription=oversubscription)
    if server.nics == 0:
        return 1
    return switch.radix * _down_ports(switch.radix, oversubscription)
