"""Topology: what hardware exists and how it is wired.

A Topology is a directed multigraph of devices (GPUs, NVSwitches, PCIe switches, CPUs, host
memory, NICs, fabric switches) joined by directed links; every physical cable or NVLink bundle
is two links, one per direction, each with its own capacity (full duplex).

Two views of the same data:

* ``graph``: a networkx ``MultiDiGraph`` for people (inspection, drawing, networkx algorithms).
  Nodes are integer ids with attributes ``kind``, ``name``, ``server``; edges carry ``key`` =
  link id and the link's attributes (an :class:`EdgeData`: read-only, ``link`` = its id, the rest shared by
  every link of the same spec, tier and latency, so that 100k-GPU graphs stay small; ``.copy()`` gives a
  plain dict).
* flat numpy arrays for the engine (``link_src``, ``link_dst``, ``link_capacity_bytes_per_s``,
  ``link_latency_s``, ``link_kind``, ``link_tier``), indexed by link id, read-only.

Link latency is the link's own latency plus the traversal latency of the device it enters when
that device forwards traffic (a switch or a NIC), so a path's latency is the sum of its links'.

Build one with :class:`TopologyBuilder` (used by ``node.py`` and ``fat_tree.py``), then
``build()``, which calls :meth:`Topology.validate`.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import networkx as nx
import numpy as np

from .links import LinkKind, LinkSpec


class NodeKind(enum.IntEnum):
    GPU = 0
    NVSWITCH = 1
    PCIE_SWITCH = 2
    CPU = 3
    HOST_MEMORY = 4
    NIC = 5
    FABRIC_SWITCH = 6


#: Device kinds that forward traffic (their traversal latency is charged on the links entering them).
_FORWARDING = frozenset({NodeKind.NVSWITCH, NodeKind.PCIE_SWITCH, NodeKind.NIC, NodeKind.FABRIC_SWITCH})


class LinkTier(enum.IntEnum):
    """Where a link sits, for per-link-class accounting (NVLink, PCIe, NIC, each fabric tier)."""

    NVLINK = 0
    PCIE = 1
    HOST = 2  # CPU socket interconnect and host memory
    NIC = 3  # NIC <-> first fabric switch
    FABRIC_1 = 4  # leaf <-> spine
    FABRIC_2 = 5  # spine <-> core (3-tier fabrics)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerInfo:
    """One server's devices as node ids, and its NIC affinity.

    ``nic_of_gpu[i]`` is the index into ``nics`` of the NIC closest to local GPU ``i`` (same PCIe
    switch), or -1 when the server has no NIC. ``gpu_of_nic[j]`` is the local GPU closest to NIC j.
    """

    index: int
    name: str
    first_gpu: int  # global index of local GPU 0 (servers number their GPUs contiguously)
    gpus: tuple[int, ...]
    nics: tuple[int, ...]
    nic_of_gpu: tuple[int, ...]
    gpu_of_nic: tuple[int, ...]
    nvswitch: int  # node id, -1 when the GPUs have no NVSwitch
    p2p: bool  # PCIe peer-to-peer enabled (False = staged through host memory)
    intra_routes: Mapping[tuple[int, int], tuple[int, ...]]  # (local gpu a, local gpu b) -> link ids
    gpu_to_nic_routes: Mapping[tuple[int, int], tuple[int, ...]]  # (local gpu, nic index) -> link ids
    nic_to_gpu_routes: Mapping[tuple[int, int], tuple[int, ...]]  # (nic index, local gpu) -> link ids
    gpu_arch: str = ""
    gpu_sm_version: int = 0  # CUDA compute capability x 10 (GpuSpec.sm_version); 0 when not known
    cpu_vendor: str = "intel"
    nvls_efficiency: float = 0.0  # NVSwitch reduction/multicast efficiency; 0 = no NVLS


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """A wired system: graph for people, arrays for the engine. Immutable once built."""

    name: str
    graph: nx.MultiDiGraph
    link_src: np.ndarray
    link_dst: np.ndarray
    link_capacity_bytes_per_s: np.ndarray
    link_latency_s: np.ndarray
    link_flow_cap_bytes_per_s: np.ndarray  # most one connection (QP) streams over this link; inf = none
    link_kind: np.ndarray
    link_tier: np.ndarray
    link_names: tuple[str, ...]
    gpu_nodes: np.ndarray  # global GPU index -> node id
    gpu_server: np.ndarray  # global GPU index -> server index
    gpu_local: np.ndarray  # global GPU index -> index inside its server
    servers: tuple[ServerInfo, ...]
    nic_leaf_link: Mapping[int, int] = field(default_factory=dict)  # NIC node id -> link id NIC->switch
    description: str = ""

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def num_links(self) -> int:
        return int(self.link_src.shape[0])

    @property
    def num_gpus(self) -> int:
        return int(self.gpu_nodes.shape[0])

    @property
    def num_servers(self) -> int:
        return len(self.servers)

    def node_kind(self, node: int) -> NodeKind:
        return NodeKind(self.graph.nodes[node]["kind"])

    def node_name(self, node: int) -> str:
        return str(self.graph.nodes[node]["name"])

    def gpu(self, server: int, local: int) -> int:
        """Global GPU index of local GPU ``local`` of server ``server``."""
        info = self.servers[server]
        if not 0 <= local < len(info.gpus):
            raise ValueError(f"local GPU index {local} out of range for server {server} ({len(info.gpus)} GPUs)")
        return info.first_gpu + local

    def path_latency_s(self, links: np.ndarray) -> float:
        return float(self.link_latency_s[links].sum())

    # ---- checks ------------------------------------------------------------------------------
    def validate(self) -> Topology:
        """Reject broken systems with a message naming what is wrong. Returns self."""
        ids = list(self.graph.nodes)
        if len(set(ids)) != len(ids):
            raise ValueError(f"topology {self.name!r}: duplicate node ids")
        names = [self.graph.nodes[n]["name"] for n in ids]
        dup = sorted(n for n, c in collections.Counter(names).items() if c > 1)
        if dup:
            raise ValueError(f"topology {self.name!r}: duplicate device names {dup[:5]}")
        if self.num_gpus == 0:
            raise ValueError(f"topology {self.name!r}: has no GPU")
        cap = self.link_capacity_bytes_per_s
        bad = np.flatnonzero(~np.isfinite(cap) | (cap <= 0))
        if bad.size:
            l = int(bad[0])
            raise ValueError(
                f"topology {self.name!r}: link {self.link_names[l]!r} has capacity {cap[l]!r} B/s; "
                "expected a finite number > 0"
            )
        lat = self.link_latency_s
        bad = np.flatnonzero(~np.isfinite(lat) | (lat < 0))
        if bad.size:
            l = int(bad[0])
            raise ValueError(
                f"topology {self.name!r}: link {self.link_names[l]!r} has latency {lat[l]!r} s; expected >= 0"
            )
        # every GPU reaches every other GPU, in both directions (links are directed)
        first = int(self.gpu_nodes[0])
        reach = nx.descendants(self.graph, first) | {first}
        reached_by = nx.ancestors(self.graph, first) | {first}
        for label, seen in (
            ("is disconnected: it cannot be reached from", reach),
            ("is disconnected: it cannot reach", reached_by),
        ):
            lost = [self.node_name(int(g)) for g in self.gpu_nodes if int(g) not in seen]
            if lost:
                raise ValueError(
                    f"topology {self.name!r}: GPU {lost[0]} {label} GPU {self.node_name(first)}"
                    + (f" (and {len(lost) - 1} more GPUs)" if len(lost) > 1 else "")
                    + "; every GPU must be connected"
                )
        return self

    def with_link_scale(self, scale_by_kind: Mapping[LinkKind, float], *, name: str | None = None) -> Topology:
        """A copy whose link capacities of each LinkKind are multiplied by ``scale_by_kind[kind]``
        (a calibrated efficiency correction). Kinds not named keep their capacity."""
        capacity = self.link_capacity_bytes_per_s.copy()
        for kind, factor in scale_by_kind.items():
            if not (isinstance(factor, (int, float)) and factor > 0 and factor == factor and factor != float("inf")):
                raise ValueError(
                    f"link scale for {LinkKind(kind).name.lower()}: {factor!r} is not allowed; "
                    "expected a finite number > 0"
                )
            capacity[self.link_kind == int(kind)] *= factor
        return replace(self, name=name or self.name, link_capacity_bytes_per_s=_readonly(capacity)).validate()

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for n in self.graph.nodes:
            k = NodeKind(self.graph.nodes[n]["kind"]).name.lower()
            kinds[k] = kinds.get(k, 0) + 1
        parts = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        return f"{self.name}: {self.num_servers} servers, {self.num_gpus} GPUs, {self.num_links} links ({parts})"


class EdgeData(Mapping[str, Any]):
    """A link's attributes on its graph edge: ``link`` (its id) and the attributes it shares with every link of
    the same spec, kind, tier, capacity and latency (one dict for them all). Read-only; ``copy()`` gives a
    plain dict (networkx's ``G.copy()`` calls it, so a copied graph has its own, mutable attributes)."""

    __slots__ = ("_link", "_shared")

    def __init__(self, link: int, shared: Mapping[str, Any]) -> None:
        self._link, self._shared = link, shared

    def __getitem__(self, key: str) -> Any:
        return self._link if key == "link" else self._shared[key]

    def __iter__(self) -> Iterator[str]:
        yield "link"
        yield from self._shared

    def __len__(self) -> int:
        return 1 + len(self._shared)

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __repr__(self) -> str:
        return repr(dict(self))


class TopologyBuilder:
    """Mutable helper that collects devices and links, then freezes them into a Topology."""

    def __init__(self, name: str):
        self.name = name
        self.graph = nx.MultiDiGraph()
        self._src: list[int] = []
        self._dst: list[int] = []
        self._cap: list[float] = []
        self._lat: list[float] = []
        self._flow_cap: list[float] = []
        self._kind: list[int] = []
        self._tier: list[int] = []
        self._names: list[str] = []
        self._edge_attributes: dict[tuple, dict[str, Any]] = {}  # one attribute dict per kind of link
        self._node_latency: dict[int, float] = {}
        self._gpus: list[int] = []
        self._gpu_server: list[int] = []
        self._gpu_local: list[int] = []
        self.servers: list[ServerInfo] = []
        self.nic_leaf_link: dict[int, int] = {}

    @property
    def num_links(self) -> int:
        """Directed links added so far (the next link's id)."""
        return len(self._src)

    @property
    def num_gpus(self) -> int:
        return len(self._gpus)

    def add_node(self, kind: NodeKind, name: str, *, server: int = -1, latency_s: float = 0.0, **attrs: Any) -> int:
        node: int = self.graph.number_of_nodes()
        self.graph.add_node(node, kind=int(kind), name=name, server=server, latency_s=latency_s, **attrs)
        self._node_latency[node] = latency_s
        return node

    def add_gpu(self, name: str, *, server: int, local: int, **attrs: Any) -> int:
        node = self.add_node(NodeKind.GPU, name, server=server, **attrs)
        self._gpus.append(node)
        self._gpu_server.append(server)
        self._gpu_local.append(local)
        return node

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
        """Join u and v with ``spec``; returns the link id(s) created (u->v first).

        ``flow_cap_bytes_per_s`` bounds what one connection can stream over the link (a NIC's
        per-QP limit); the link's capacity bounds the sum over connections.
        """
        ids = [self._add_directed(u, v, spec, tier, flow_cap_bytes_per_s)]
        if duplex:
            ids.append(self._add_directed(v, u, spec, tier, flow_cap_bytes_per_s))
        return tuple(ids)

    def _add_directed(self, u: int, v: int, spec: LinkSpec, tier: LinkTier, flow_cap: float) -> int:
        link = len(self._src)
        entering = NodeKind(self.graph.nodes[v]["kind"])
        latency = spec.latency_s + (self._node_latency[v] if entering in _FORWARDING else 0.0)
        name = f"{self.graph.nodes[u]['name']}->{self.graph.nodes[v]['name']}"
        self._src.append(u)
        self._dst.append(v)
        self._cap.append(spec.bandwidth_bytes_per_s)
        self._lat.append(latency)
        self._flow_cap.append(float(flow_cap))
        self._kind.append(int(spec.kind))
        self._tier.append(int(tier))
        self._names.append(name)
        shape = (spec.name, int(spec.kind), int(tier), self._cap[-1], latency)
        shared = self._edge_attributes.get(shape)
        if shared is None:
            shared = self._edge_attributes[shape] = {
                "spec": spec.name,
                "kind": LinkKind(spec.kind).name.lower(),
                "tier": LinkTier(tier).name.lower(),
                "capacity_bytes_per_s": self._cap[-1],
                "latency_s": latency,
            }
        self.graph.add_edge(u, v, key=link)
        # networkx keeps one key dict per (u, v) for both directions of its adjacency: replace the edge's data there
        self.graph._succ[u][v][link] = EdgeData(link, shared)
        return link

    def build(self, *, description: str = "") -> Topology:
        topo = Topology(
            name=self.name,
            graph=self.graph,
            link_src=_readonly(np.asarray(self._src, dtype=np.int64)),
            link_dst=_readonly(np.asarray(self._dst, dtype=np.int64)),
            link_capacity_bytes_per_s=_readonly(np.asarray(self._cap, dtype=np.float64)),
            link_latency_s=_readonly(np.asarray(self._lat, dtype=np.float64)),
            link_flow_cap_bytes_per_s=_readonly(np.asarray(self._flow_cap, dtype=np.float64)),
            link_kind=_readonly(np.asarray(self._kind, dtype=np.int8)),
            link_tier=_readonly(np.asarray(self._tier, dtype=np.int8)),
            link_names=tuple(self._names),
            gpu_nodes=_readonly(np.asarray(self._gpus, dtype=np.int64)),
            gpu_server=_readonly(np.asarray(self._gpu_server, dtype=np.int64)),
            gpu_local=_readonly(np.asarray(self._gpu_local, dtype=np.int64)),
            servers=tuple(self.servers),
            nic_leaf_link=MappingProxyType(dict(self.nic_leaf_link)),
            description=description,
        )
        return topo.validate()


def path_links(builder_or_graph: TopologyBuilder | nx.MultiDiGraph, nodes: list[int]) -> tuple[int, ...]:
    """Link ids along a node path (the lowest link id between consecutive nodes)."""
    graph = builder_or_graph.graph if isinstance(builder_or_graph, TopologyBuilder) else builder_or_graph
    out = []
    for u, v in zip(nodes[:-1], nodes[1:]):
        data = graph.get_edge_data(u, v)
        if not data:
            raise KeyError(f"no link {u} -> {v}")
        out.append(min(data))
    return tuple(out)
