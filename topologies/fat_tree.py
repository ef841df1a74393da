"""Leaf-spine (2-tier folded Clos) fabrics joining servers' NICs.

Wiring rules (``leaf_spine``):

* **Rail-optimised** (default): NIC j of every server plugs into the leaves of rail j, so
  traffic between GPUs of the same index on different servers crosses one leaf and no spine
  (the layout of NVIDIA's DGX SuperPOD reference architectures). Not rail-optimised: all NICs
  of a server go to the same top-of-rack leaf, ``floor(d / K)`` whole servers per leaf.
* A leaf has ``radix`` ports; with oversubscription ratio R = down/up it uses
  ``d = floor(radix * R / (R + 1))`` ports for NICs. A leaf with n NICs attached gets
  ``u = ceil(n / R)`` uplinks, one to each of u spines (spine i takes uplink i of every leaf),
  so every leaf-to-leaf pair has u equal-cost paths and the fabric is non-blocking at R = 1.
* Counts (closed forms, checked by tests): with N servers of K NICs, rail-optimised,
  ``leaves = K * ceil(N / d)`` (ToR: ``ceil(N / floor(d / K))``) and
  ``spines = max_leaf(ceil(n_leaf / R))`` when more than one
  leaf exists (a single leaf needs no spine).

A spine has ``radix`` ports too: more leaves than that needs a third tier (not built here): it is
an error naming the sizes.
"""

from __future__ import annotations

import math

from .devices import SwitchSpec
from .links import LinkSpec
from .node import ServerSpec, add_server
from .topology import LinkTier, NodeKind, Topology, TopologyBuilder


def leaf_spine(
    *,
    server: ServerSpec,
    servers: int,
    switch: SwitchSpec,
    fabric_link: LinkSpec,
    rail_optimised: bool = True,
    oversubscription: float = 1.0,
    name: str | None = None,
) -> Topology:
    """``servers`` copies of ``server`` whose NICs join a 2-tier leaf-spine of ``switch``."""
    if not isinstance(servers, int) or isinstance(servers, bool) or servers < 1:
        raise ValueError(f"leaf_spine.servers: {servers!r} is not allowed; expected an integer >= 1")
    if not (isinstance(oversubscription, (int, float)) and math.isfinite(oversubscription) and oversubscription >= 1):
        raise ValueError(f"leaf_spine.oversubscription: {oversubscription!r} is not allowed; expected a number >= 1")
    if servers > 1 and server.nics == 0:
        raise ValueError(f"leaf_spine.server: {server.name} has no NIC, so {servers} servers cannot be joined; "
                         "expected servers=1 or a server with NICs")
    builder = TopologyBuilder(name or f"{servers}x {server.name}")
    infos = [add_server(builder, server, s) for s in range(servers)]
    if servers == 1:
        return builder.build(description=f"1x {server.name}")

    radix = switch.radix
    down = max(1, int(radix * oversubscription // (oversubscription + 1)))
    # group NICs by leaf
    groups: list[list[int]] = []
    if rail_optimised:
        per_rail = math.ceil(servers / down)
        for rail in range(server.nics):
            for j in range(per_rail):
                members = [infos[s].nics[rail] for s in range(j * down, min(servers, (j + 1) * down))]
                groups.append(members)
    else:
        per_leaf = down // server.nics
        if per_leaf < 1:
            raise ValueError(f"leaf_spine: a {server.name} has {server.nics} NICs but a {switch.name} leaf has only "
                             f"{down} down ports at oversubscription {oversubscription:g}; use rail_optimised=True")
        groups = [[nic for info in infos[i:i + per_leaf] for nic in info.nics] for i in range(0, servers, per_leaf)]

    leaves = []
    for i, members in enumerate(groups):
        leaf = builder.add_node(NodeKind.FABRIC_SWITCH, f"leaf{i}", latency_s=switch.latency_s, tier=1,
                                switch=switch.name, sharp=switch.sharp,
                                reduction_efficiency=switch.reduction_efficiency)
        for nic in members:
            up, _ = builder.add_link(nic, leaf, fabric_link, tier=LinkTier.NIC,
                                     flow_cap_bytes_per_s=server.nic.connection_bytes_per_s)
            builder.nic_leaf_link[nic] = up
        leaves.append(leaf)
    if len(leaves) > 1:
        uplinks = [math.ceil(len(members) / oversubscription) for members in groups]
        nspines = max(uplinks)
        if len(leaves) > radix:
            raise ValueError(
                f"leaf_spine: {servers} servers x {server.nics} NICs need {len(leaves)} leaves, but a "
                f"{switch.name} spine has {radix} ports; use fewer servers or a 3-tier fat-tree"
            )
        spines = [builder.add_node(NodeKind.FABRIC_SWITCH, f"spine{k}", latency_s=switch.latency_s, tier=2,
                                   switch=switch.name, sharp=switch.sharp,
                                   reduction_efficiency=switch.reduction_efficiency) for k in range(nspines)]
        for leaf, u in zip(leaves, uplinks):
            for k in range(u):
                builder.add_link(leaf, spines[k], fabric_link, tier=LinkTier.FABRIC_1)
    kind = "rail-optimised" if rail_optimised else "ToR"
    return builder.build(
        description=f"{servers}x {server.name}, {kind} leaf-spine of {switch.name}, "
                    f"{len(leaves)} leaves, oversubscription {oversubscription:g}:1"
    )
