"""Routing: GPU-to-GPU paths as int64 arrays of link ids.

A path is built in three parts:

1. inside the source server, from the GPU to the NIC that will send (``ServerInfo`` routes);
   with PXN (NCCL's default since 2.12) a GPU sends through the NIC on the *destination's rail*,
   reaching it over NVLink via the GPU local to that NIC, so rail-optimised fabrics keep
   same-rail traffic under one leaf;
2. across the fabric, from the sending NIC's leaf to the receiving NIC's leaf, over shortest
   paths; where several next hops are equally short, ECMP picks one with a seeded hash of the
   flow's identity (source, destination, ``flow_key``) and the switch, as switches hash the
   5-tuple (different QPs of one connection have different keys, hence may take different paths);
3. inside the destination server, from the receiving GPU's own NIC to the GPU (GPUDirect RDMA).

GPUs of the same server use the server's intra routes (NVSwitch, PCIe P2P or host staging).
Everything is deterministic for a given ``seed``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .topology import NodeKind, Topology

ROUTING_POLICIES = ("ecmp",)

_MASK64 = (1 << 64) - 1


def mix64(*values: int) -> int:
    """Deterministic 64-bit hash of integers (splitmix64 finaliser chained over the values)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (int(v) & _MASK64)) & _MASK64
        h = (h + 0x9E3779B97F4A7C15) & _MASK64
        z = h
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        h = z ^ (z >> 31)
    return h


class Router:
    """Computes link-id paths between GPUs of ``topology`` under a routing ``policy``.

    One Router per simulation; it caches fabric distances and paths (instance state only).
    """

    def __init__(self, topology: Topology, *, policy: str = "ecmp", seed: int = 0, pxn: bool = True):
        if policy not in ROUTING_POLICIES:
            raise ValueError(f"routing policy: {policy!r} is not supported; expected one of {', '.join(ROUTING_POLICIES)}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"routing seed: {seed!r} is not allowed; expected an integer")
        self.topology = topology
        self.policy = policy
        self.seed = seed
        self.pxn = pxn
        graph = topology.graph
        self._is_switch = {n: graph.nodes[n]["kind"] == NodeKind.FABRIC_SWITCH for n in graph.nodes}
        self._switch_out: dict[int, list[tuple[int, int]]] = {}   # switch -> [(link, next switch)]
        self._switch_in: dict[int, list[int]] = {}
        for link in range(topology.num_links):
            u, v = int(topology.link_src[link]), int(topology.link_dst[link])
            if self._is_switch[u] and self._is_switch[v]:
                self._switch_out.setdefault(u, []).append((link, v))
                self._switch_in.setdefault(v, []).append(u)
        self._nic_down: dict[int, int] = {}
        self._nic_leaf: dict[int, int] = {}
        for nic, up in topology.nic_leaf_link.items():
            leaf = int(topology.link_dst[up])
            self._nic_leaf[nic] = leaf
            self._nic_down[nic] = min(graph.get_edge_data(leaf, nic))
        self._dist: dict[int, dict[int, int]] = {}
        self._cache: dict[tuple[int, int, int, bool], np.ndarray] = {}

    # ------------------------------------------------------------------------------------------
    def path(self, src_gpu: int, dst_gpu: int, *, flow_key: int = 0, pxn: bool | None = None) -> np.ndarray:
        """Link ids from GPU ``src_gpu`` to GPU ``dst_gpu`` (global GPU indices).

        ``pxn`` overrides the router's default for this path: True sends inter-server traffic
        through the NIC on the destination's rail (relaying over NVLink), False through the
        sending GPU's own NIC (what NCCL's rings do: their graphs name each GPU's local NIC).
        """
        pxn = self.pxn if pxn is None else pxn
        key = (src_gpu, dst_gpu, flow_key, pxn)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        topo = self.topology
        for name, gpu in (("src_gpu", src_gpu), ("dst_gpu", dst_gpu)):
            if not 0 <= gpu < topo.num_gpus:
                raise ValueError(f"route: {name}={gpu} out of range; the topology has {topo.num_gpus} GPUs")
        if src_gpu == dst_gpu:
            raise ValueError(f"route: source and destination are the same GPU ({src_gpu})")
        s, t = int(topo.gpu_server[src_gpu]), int(topo.gpu_server[dst_gpu])
        a, b = int(topo.gpu_local[src_gpu]), int(topo.gpu_local[dst_gpu])
        if s == t:
            links = topo.servers[s].intra_routes[(a, b)]
        else:
            links = self._inter_server(s, a, t, b, flow_key, pxn)
        out = np.asarray(links, dtype=np.int64)
        out.setflags(write=False)
        self._cache[key] = out
        return out

    def gpu_to_node(self, gpu: int, node: int) -> np.ndarray:
        """Links from GPU ``gpu`` up to in-network device ``node``: its server's NVSwitch, or a
        fabric switch reached through the GPU's own NIC (SHARP)."""
        return self._switch_path(gpu, node, up=True)

    def node_to_gpu(self, node: int, gpu: int) -> np.ndarray:
        """Links from in-network device ``node`` down to GPU ``gpu`` (the reverse route)."""
        return self._switch_path(gpu, node, up=False)

    def _switch_path(self, gpu: int, node: int, *, up: bool) -> np.ndarray:
        key = (gpu, -1 - node, 0, up)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        topo = self.topology
        info = topo.servers[int(topo.gpu_server[gpu])]
        local = int(topo.gpu_local[gpu])
        g = int(topo.gpu_nodes[gpu])
        if node == info.nvswitch:
            u, v = (g, node) if up else (node, g)
            links = (min(topo.graph.get_edge_data(u, v)),)
        elif self._is_switch.get(node, False):
            j = info.nic_of_gpu[local]
            if j < 0:
                raise ValueError(f"route: GPU {gpu} has no NIC to reach {topo.node_name(node)}")
            nic = info.nics[j]
            leaf = self._nic_leaf[nic]
            flow_hash = mix64(self.seed, gpu, node)
            if up:
                links = (info.gpu_to_nic_routes[(local, j)] + (topo.nic_leaf_link[nic],)
                         + self._fabric_path(leaf, node, flow_hash))
            else:
                links = (self._fabric_path(node, leaf, flow_hash) + (self._nic_down[nic],)
                         + info.nic_to_gpu_routes[(j, local)])
        else:
            raise ValueError(f"route: {topo.node_name(node)} is neither GPU {gpu}'s NVSwitch nor a fabric switch")
        out = np.asarray(links, dtype=np.int64)
        out.setflags(write=False)
        self._cache[key] = out
        return out

    def switch_path(self, src_switch: int, dst_switch: int, *, flow_key: int = 0) -> np.ndarray:
        """Links between two fabric switches (ECMP over shortest paths); empty for the same one."""
        links = () if src_switch == dst_switch else self._fabric_path(src_switch, dst_switch,
                                                                        mix64(self.seed, src_switch, dst_switch, flow_key))
        return np.asarray(links, dtype=np.int64)

    def leaf_of(self, gpu: int) -> int:
        """The fabric switch the GPU's own NIC is cabled to."""
        topo = self.topology
        info = topo.servers[int(topo.gpu_server[gpu])]
        return self._nic_leaf[info.nics[info.nic_of_gpu[int(topo.gpu_local[gpu])]]]

    def spines_above(self, leaf: int) -> list[int]:
        """Switches one hop up from ``leaf`` (sorted)."""
        return sorted({v for _, v in self._switch_out.get(leaf, ())})

    def nic_for(self, server: int, local_gpu: int, dst_server: int, dst_local: int, *, pxn: bool) -> int:
        """Index of the NIC that server ``server`` uses to send from local GPU to the destination."""
        src_info, dst_info = self.topology.servers[server], self.topology.servers[dst_server]
        dst_nic = dst_info.nic_of_gpu[dst_local]
        if pxn and src_info.nvswitch >= 0 and dst_nic < len(src_info.nics):
            return dst_nic
        return src_info.nic_of_gpu[local_gpu]

    def _inter_server(self, s: int, a: int, t: int, b: int, flow_key: int, pxn: bool) -> tuple[int, ...]:
        topo = self.topology
        src_info, dst_info = topo.servers[s], topo.servers[t]
        if not src_info.nics or not dst_info.nics:
            raise ValueError(f"route: server {src_info.name if not src_info.nics else dst_info.name} has no NIC, "
                             f"so GPU {a} of {src_info.name} cannot reach GPU {b} of {dst_info.name}")
        j_src = self.nic_for(s, a, t, b, pxn=pxn)
        j_dst = dst_info.nic_of_gpu[b]
        nic_src, nic_dst = src_info.nics[j_src], dst_info.nics[j_dst]
        if nic_src not in self._nic_leaf or nic_dst not in self._nic_leaf:
            raise ValueError(f"route: NIC {topo.node_name(nic_src)} or {topo.node_name(nic_dst)} is not cabled to a switch")
        fabric = self._fabric_path(self._nic_leaf[nic_src], self._nic_leaf[nic_dst],
                                   mix64(self.seed, s, a, t, b, flow_key))
        return (src_info.gpu_to_nic_routes[(a, j_src)] + (topo.nic_leaf_link[nic_src],) + fabric
                + (self._nic_down[nic_dst],) + dst_info.nic_to_gpu_routes[(j_dst, b)])

    def _distances(self, dst_switch: int) -> dict[int, int]:
        dist = self._dist.get(dst_switch)
        if dist is None:
            dist = {dst_switch: 0}
            queue = deque([dst_switch])
            while queue:
                v = queue.popleft()
                for u in self._switch_in.get(v, ()):
                    if u not in dist:
                        dist[u] = dist[v] + 1
                        queue.append(u)
            self._dist[dst_switch] = dist
        return dist

    def _fabric_path(self, src_switch: int, dst_switch: int, flow_hash: int) -> tuple[int, ...]:
        dist = self._distances(dst_switch)
        if src_switch not in dist:
            raise ValueError(f"route: switch {self.topology.node_name(src_switch)} cannot reach "
                             f"{self.topology.node_name(dst_switch)}")
        links = []
        here = src_switch
        while here != dst_switch:
            options = [(link, v) for link, v in self._switch_out[here] if dist.get(v, -1) == dist[here] - 1]
            link, here = options[mix64(flow_hash, here) % len(options)]
            links.append(link)
        return tuple(links)


def equal_share_rates(paths: list[np.ndarray], capacity_bytes_per_s: np.ndarray,
                      weights: list[np.ndarray] | None = None) -> np.ndarray:
    """Static equal-share rate of each path when all of them start together and never re-share.

    Each link's capacity is split among the paths crossing it in proportion to their weights
    (a path crossing a link twice counts twice); a path's rate is its tightest share:
    ``r_i = min_l c_l / sum_j w_jl`` over the links l of path i. This is the congestion-unaware
    alpha-beta view (no redistribution when a flow ends); it equals max-min fairness whenever
    the paths do not contend or are symmetric.
    """
    if not paths:
        return np.zeros(0)
    links = np.concatenate(paths)
    w = np.concatenate(weights) if weights is not None else np.ones(links.shape[0])
    load = np.bincount(links, weights=w, minlength=capacity_bytes_per_s.shape[0])
    rates = np.empty(len(paths))
    for i, path in enumerate(paths):
        rates[i] = np.min(capacity_bytes_per_s[path] / load[path]) if path.size else np.inf
    return rates
