"""Server builders: NVSwitch servers (DGX/HGX A100, H100, H200, B200), the GB200 NVL72 rack and PCIe boxes.

A server is wired as the hardware is:

* GPUs reach each other through one logical NVSwitch when the server has one (the 4 NVSwitch
  chips of an HGX H100 board are aggregated: a GPU's 18 NVLinks become one bundle of 18 x 20.6
  GB/s = 370.8 GB/s per direction, because NCCL spreads its channels over all of them);
* each GPU and each NIC hangs off a PCIe switch (``pcie_switches`` of them, GPUs and NICs spread
  evenly, so GPU i and NIC i share a switch: that is the NIC affinity ``nvidia-smi topo -m``
  shows as PIX); PCIe switches hang off the CPU sockets, which are joined by the socket
  interconnect and each own their host memory;
* without PCIe switches (``pcie_switches=0``) every GPU sits on a CPU root port;
* an imported server (``topologies.io``: ``nvidia-smi topo -m``, NCCL's topology XML) that is not
  spread evenly gives its placement explicitly (``ServerSpec.layout``, a :class:`PcieLayout`): the
  socket of each PCIe switch, and the switch (or root port) and socket of each GPU and NIC.

Routes inside a server (link-id tuples, precomputed once per server):

* GPU -> GPU: over NVSwitch when present; else PCIe peer-to-peer (switch-local or through the
  root complex and, across sockets, the socket link); with P2P off, staged through host memory
  (GPU -> CPU -> DRAM -> CPU [-> other socket] -> GPU), as NCCL's SHM transport does.
* GPU -> NIC j: from the GPU local to NIC j straight down its PCIe switch; from any other GPU
  over NVLink to that GPU first (NCCL's PXN, on by default since NCCL 2.12) when the server has
  NVSwitch, else through PCIe/CPU.
* NIC j -> GPU: GPUDirect RDMA write through PCIe (the engine chooses the receiver's own NIC).
* Without GPUDirect RDMA (``gdr=False``, NCCL's "GDR 0") both GPU -> NIC and NIC -> GPU are staged
  through a bounce buffer in the GPU's socket memory.

Sockets are joined pairwise by the socket link (two sockets: one link), as NCCL joins every pair
of its CPU nodes with a SYS link; in a rack-scale NVLink domain (``sockets_per_host``: GB200 NVL72's 18
trays of 2 Grace CPUs) only the sockets of one host are, and a GPU reaches a NIC of another host over
NVLink through that NIC's own GPU.

Closed form: a server with G GPUs, K NICs, P PCIe switches and S sockets has
G + K + P + 2S (+1 NVSwitch) devices.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import NoReturn

import networkx as nx

from . import devices as dev
from . import links as lk
from .checks import flag, int_tuple, integer, is_int, reject
from .devices import GpuSpec, NicSpec, SwitchSpec
from .links import LinkSpec
from .topology import LinkTier, NodeKind, ServerInfo, TopologyBuilder, path_links


@dataclass(frozen=True, slots=True, kw_only=True)
class PcieLayout:
    """Where each PCIe switch, GPU and NIC of a server sits, for servers not spread evenly.

    ``switch_sockets[p]`` is the socket PCIe switch p hangs off; ``gpu_switches[i]`` the switch GPU i
    hangs off, or -1 for a root port of its socket ``gpu_sockets[i]``; likewise ``nic_switches`` and
    ``nic_sockets``. A device on a switch sits on that switch's socket.
    """

    switch_sockets: tuple[int, ...]
    gpu_switches: tuple[int, ...]
    gpu_sockets: tuple[int, ...]
    nic_switches: tuple[int, ...] = ()
    nic_sockets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("switch_sockets", "gpu_switches", "gpu_sockets", "nic_switches", "nic_sockets"):
            low = -1 if name.endswith("_switches") else 0
            object.__setattr__(self, name, int_tuple(f"PcieLayout.{name}", getattr(self, name), low=low))
        for kind in ("gpu", "nic"):
            switches, sockets = getattr(self, f"{kind}_switches"), getattr(self, f"{kind}_sockets")
            if len(switches) != len(sockets):
                raise reject(f"PcieLayout.{kind}_sockets", sockets, f"one socket per {kind} ({len(switches)})")
            for index, (switch, socket) in enumerate(zip(switches, sockets)):
                if switch >= len(self.switch_sockets):
                    raise reject(
                        f"PcieLayout.{kind}_switches[{index}]",
                        switch,
                        f"-1 (a root port) or a switch index below {len(self.switch_sockets)}",
                    )
                if switch >= 0 and self.switch_sockets[switch] != socket:
                    raise reject(
                        f"PcieLayout.{kind}_sockets[{index}]",
                        socket,
                        f"{self.switch_sockets[switch]}, the socket of its PCIe switch {switch}",
                    )

    @property
    def sockets(self) -> int:
        """How many sockets the layout uses (the highest index + 1)."""
        return 1 + max((*self.switch_sockets, *self.gpu_sockets, *self.nic_sockets), default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    """What one server contains. All counts per server."""

    name: str
    gpu: GpuSpec
    gpus: int = 8
    nvswitch: SwitchSpec | None = None
    nic: NicSpec | None = None
    nics: int = 0
    pcie_switch: SwitchSpec | None = None
    pcie_switches: int = 0
    pcie_uplink: LinkSpec = lk.PCIE_GEN4_X16  # PCIe switch <-> CPU root port
    sockets: int = 2
    socket_link: LinkSpec = lk.UPI_INTEL
    # sockets of one host (one OS instance), joined pairwise by socket_link; hosts share no CPU link. 0: all
    # sockets are one host. A rack-scale NVLink domain (GB200 NVL72: 18 trays of 2 Grace CPUs) has several.
    sockets_per_host: int = 0
    host_memory: LinkSpec = lk.HOST_MEMORY_STAGING
    p2p: bool = True
    gdr: bool = True  # GPUDirect RDMA: NICs read/write GPU memory; False stages through host memory
    cpu_vendor: str = "intel"  # "intel" | "amd": NCCL's latency and LL tables depend on it
    layout: PcieLayout | None = None  # explicit placement (imported servers); None: spread evenly

    def __post_init__(self) -> None:
        def bad(field: str, value: object, allowed: str) -> NoReturn:
            raise reject(f"ServerSpec.{field}", value, allowed)

        # numpy integers and bools are accepted and stored as Python ints and bools
        object.__setattr__(self, "gpus", integer("ServerSpec.gpus", self.gpus, low=1))
        object.__setattr__(self, "nics", integer("ServerSpec.nics", self.nics, low=0))
        if self.nics and self.nic is None:
            bad("nic", self.nic, "a NicSpec when nics > 0")
        object.__setattr__(self, "sockets", integer("ServerSpec.sockets", self.sockets, low=1))
        per_host = integer("ServerSpec.sockets_per_host", self.sockets_per_host, low=0)
        object.__setattr__(self, "sockets_per_host", per_host)
        if per_host and self.sockets % per_host:
            bad("sockets_per_host", per_host, f"0 or a divisor of sockets ({self.sockets})")
        if per_host and per_host < self.sockets and self.nvswitch is None:
            bad(
                "sockets_per_host",
                per_host,
                f"0 or sockets ({self.sockets}) without an NVSwitch: GPUs of different hosts reach each other only "
                "over NVLink",
            )
        pcie_switches = self.pcie_switches
        if not is_int(pcie_switches) or pcie_switches < 0 or (pcie_switches and self.pcie_switch is None):
            bad("pcie_switches", self.pcie_switches, "an integer >= 0, with a pcie_switch spec when > 0")
        object.__setattr__(self, "pcie_switches", int(self.pcie_switches))
        if self.layout is not None:
            layout = self.layout
            for field, have, want in (
                ("layout.gpu_switches", len(layout.gpu_switches), self.gpus),
                ("layout.nic_switches", len(layout.nic_switches), self.nics),
                ("layout.switch_sockets", len(layout.switch_sockets), self.pcie_switches),
            ):
                if have != want:
                    bad(field, have, f"{want} entries (one per {field.split('.')[1].split('_')[0]})")
            if layout.sockets > self.sockets:
                bad("layout", f"{layout.sockets} sockets", f"at most sockets ({self.sockets})")
        elif self.pcie_switches and self.pcie_switches % self.sockets:
            bad("pcie_switches", self.pcie_switches, f"a multiple of sockets ({self.sockets})")
        if (
            self.layout is None
            and self.pcie_switches
            and (self.gpus % self.pcie_switches or self.nics % self.pcie_switches)
        ):
            bad("pcie_switches", self.pcie_switches, f"a divisor of gpus ({self.gpus}) and nics ({self.nics})")
        object.__setattr__(self, "gdr", flag("ServerSpec.gdr", self.gdr))
        if self.cpu_vendor not in ("intel", "amd"):
            bad("cpu_vendor", self.cpu_vendor, "'intel' or 'amd'")
        if self.nvswitch is not None and (self.gpu.nvlink is None or self.gpu.nvlink_count == 0):
            bad("nvswitch", self.nvswitch.name, f"None: GPU {self.gpu.name} has no NVLink")


def even_layout(spec: ServerSpec) -> PcieLayout | None:
    """The layout of a server spread evenly over its PCIe switches (None without switches): switch p on socket
    p // (P / S), GPU i on switch i P / G, NIC j on switch j P / K - GPU i and NIC i share a switch.

    >>> even_layout(dgx_h100()).gpu_switches
    (0, 0, 1, 1, 2, 2, 3, 3)
    """
    if not spec.pcie_switches:
        return None
    per_socket = spec.pcie_switches // spec.sockets
    switch_sockets = tuple(p // per_socket for p in range(spec.pcie_switches))
    gpu_switches = tuple(i * spec.pcie_switches // spec.gpus for i in range(spec.gpus))
    nic_switches = tuple(j * spec.pcie_switches // spec.nics for j in range(spec.nics))
    return PcieLayout(
        switch_sockets=switch_sockets,
        gpu_switches=gpu_switches,
        gpu_sockets=tuple(switch_sockets[p] for p in gpu_switches),
        nic_switches=nic_switches,
        nic_sockets=tuple(switch_sockets[p] for p in nic_switches),
    )


def add_server(builder: TopologyBuilder, spec: ServerSpec, index: int) -> ServerInfo:
    """Add one server's devices and internal links to ``builder``; returns its ServerInfo."""
    prefix = f"s{index}"
    g = builder.graph
    cpus = [builder.add_node(NodeKind.CPU, f"{prefix}.cpu{k}", server=index) for k in range(spec.sockets)]
    mems = [builder.add_node(NodeKind.HOST_MEMORY, f"{prefix}.mem{k}", server=index) for k in range(spec.sockets)]
    for cpu, mem in zip(cpus, mems):
        builder.add_link(cpu, mem, spec.host_memory, tier=LinkTier.HOST)
    per_host = spec.sockets_per_host or spec.sockets
    for k in range(spec.sockets):  # every pair of sockets of a host joined (2-socket: one link)
        for m in range(k + 1, (k // per_host + 1) * per_host):
            builder.add_link(cpus[k], cpus[m], spec.socket_link, tier=LinkTier.HOST)

    layout = spec.layout if spec.layout is not None else even_layout(spec)
    if layout is not None:
        switches = []
        for p, socket in enumerate(layout.switch_sockets):
            assert spec.pcie_switch is not None  # ServerSpec requires it when pcie_switches > 0
            sw = builder.add_node(
                NodeKind.PCIE_SWITCH, f"{prefix}.pcie{p}", server=index, latency_s=spec.pcie_switch.latency_s
            )
            builder.add_link(sw, cpus[socket], spec.pcie_uplink, tier=LinkTier.PCIE)
            switches.append(sw)
        gpu_parent = [switches[p] if p >= 0 else cpus[k] for p, k in zip(layout.gpu_switches, layout.gpu_sockets)]
        nic_parent = [switches[p] if p >= 0 else cpus[k] for p, k in zip(layout.nic_switches, layout.nic_sockets)]
    else:
        per_socket_gpus = -(-spec.gpus // spec.sockets)
        gpu_parent = [cpus[i // per_socket_gpus] for i in range(spec.gpus)]
        nic_parent = [cpus[j * spec.sockets // spec.nics] for j in range(spec.nics)] if spec.nics else []

    first_gpu = builder.num_gpus
    gpus = []
    for i in range(spec.gpus):
        node = builder.add_gpu(f"{prefix}.gpu{i}", server=index, local=i, gpu=spec.gpu.name)
        builder.add_link(node, gpu_parent[i], spec.gpu.pcie, tier=LinkTier.PCIE)
        gpus.append(node)
    nics = []
    for j in range(spec.nics):
        assert spec.nic is not None  # ServerSpec requires it when nics > 0
        node = builder.add_node(
            NodeKind.NIC, f"{prefix}.nic{j}", server=index, latency_s=spec.nic.latency_s, nic=spec.nic.name
        )
        builder.add_link(nic_parent[j], node, spec.nic.pcie, tier=LinkTier.PCIE)
        nics.append(node)

    nvsw = -1
    if spec.nvswitch is not None:
        assert spec.gpu.nvlink is not None  # ServerSpec allows an NVSwitch only with NVLink GPUs
        nvsw = builder.add_node(
            NodeKind.NVSWITCH, f"{prefix}.nvswitch", server=index, latency_s=spec.nvswitch.latency_s
        )
        bundle = spec.gpu.nvlink.aggregated(
            spec.gpu.nvlink_count, name=f"{spec.gpu.nvlink.name}x{spec.gpu.nvlink_count}"
        )
        for node in gpus:
            builder.add_link(node, nvsw, bundle, tier=LinkTier.NVLINK)

    # NIC affinity: the NIC under the same parent (PCIe switch or socket) as the GPU.
    nic_of_gpu = []
    for i in range(spec.gpus):
        local = [j for j in range(spec.nics) if nic_parent[j] == gpu_parent[i]]
        nic_of_gpu.append(local[i % len(local)] if local else (i * spec.nics // spec.gpus if spec.nics else -1))
    gpu_of_nic = []
    for j in range(spec.nics):
        local = [i for i in range(spec.gpus) if gpu_parent[i] == nic_parent[j]]
        gpu_of_nic.append(local[j % len(local)] if local else j * spec.gpus // spec.nics)

    # PCIe/host subgraph for routes that do not use NVLink (host memory excluded: staging is explicit)
    server_nodes = [
        n
        for n, d in g.nodes(data=True)
        if d["server"] == index and d["kind"] != NodeKind.HOST_MEMORY and d["kind"] != NodeKind.NVSWITCH
    ]
    pcie_graph = nx.DiGraph()
    for u, v, key, _data in g.edges(server_nodes, keys=True, data=True):
        if v in server_nodes and (u, v) not in pcie_graph.edges:
            pcie_graph.add_edge(u, v, link=key)

    def pcie_route(a: int, b: int) -> tuple[int, ...]:
        # GPUs and NICs are end points, never transit devices
        def ok(n: int) -> bool:
            return n in (a, b) or g.nodes[n]["kind"] not in (NodeKind.GPU, NodeKind.NIC)

        sub = nx.subgraph_view(pcie_graph, filter_node=ok)
        return path_links(builder, nx.shortest_path(sub, a, b))

    host_of_cpu = {cpu: k // (spec.sockets_per_host or spec.sockets) for k, cpu in enumerate(cpus)}

    def host_of(parent: int) -> int:  # the host of a device under ``parent`` (a socket or a PCIe switch)
        return host_of_cpu[parent if parent in host_of_cpu else next(v for v in g.successors(parent) if v in cpus)]

    cpu_of: dict[int, int] = {}
    for i in range(spec.gpus):
        parent = gpu_parent[i]
        cpu_of[i] = parent if parent in cpus else next(v for v in g.successors(parent) if v in cpus)

    def staged(a: int, src: int, dst: int) -> tuple[int, ...]:
        # src -> GPU a's CPU -> its host memory -> back to that CPU -> dst (a bounce buffer in host memory)
        ca, mem = cpu_of[a], mems[cpus.index(cpu_of[a])]
        return pcie_route(src, ca) + path_links(builder, [ca, mem, ca]) + pcie_route(ca, dst)

    intra: dict[tuple[int, int], tuple[int, ...]] = {}
    for a in range(spec.gpus):
        for b in range(spec.gpus):
            if a == b:
                continue
            if nvsw >= 0:
                intra[(a, b)] = path_links(builder, [gpus[a], nvsw, gpus[b]])
            elif spec.p2p:
                intra[(a, b)] = pcie_route(gpus[a], gpus[b])
            else:
                intra[(a, b)] = staged(a, gpus[a], gpus[b])

    to_nic: dict[tuple[int, int], tuple[int, ...]] = {}
    from_nic: dict[tuple[int, int], tuple[int, ...]] = {}
    hosts = spec.sockets_per_host not in (0, spec.sockets)
    for j in range(spec.nics):
        home = gpu_of_nic[j]
        for a in range(spec.gpus):
            # a GPU on another host than NIC j (rack-scale NVLink domain) reaches it over NVLink through the
            # NIC's own GPU, as NCCL's PXN does; no PCIe or CPU link crosses hosts
            remote = hosts and host_of(gpu_parent[a]) != host_of(nic_parent[j])
            if not spec.gdr:
                # no GPUDirect RDMA (NCCL "GDR 0"): the GPU writes into a host bounce buffer in its
                # socket's memory, the NIC reads it from there (and the reverse on receive)
                if remote:
                    nvlink = path_links(builder, [gpus[a], nvsw, gpus[home]])
                    to_nic[(a, j)] = nvlink + staged(home, gpus[home], nics[j])
                    from_nic[(j, a)] = staged(home, nics[j], gpus[home]) + path_links(
                        builder, [gpus[home], nvsw, gpus[a]]
                    )
                    continue
                to_nic[(a, j)] = staged(a, gpus[a], nics[j])
                from_nic[(j, a)] = staged(a, nics[j], gpus[a])
                continue
            if nvsw >= 0 and a != home and nic_of_gpu[a] != j:
                to_nic[(a, j)] = path_links(builder, [gpus[a], nvsw, gpus[home]]) + pcie_route(gpus[home], nics[j])
            else:
                to_nic[(a, j)] = pcie_route(gpus[a], nics[j])
            if remote:
                from_nic[(j, a)] = pcie_route(nics[j], gpus[home]) + path_links(builder, [gpus[home], nvsw, gpus[a]])
            else:
                from_nic[(j, a)] = pcie_route(nics[j], gpus[a])

    info = ServerInfo(
        index=index,
        name=prefix,
        first_gpu=first_gpu,
        gpus=tuple(gpus),
        nics=tuple(nics),
        nic_of_gpu=tuple(nic_of_gpu),
        gpu_of_nic=tuple(gpu_of_nic),
        nvswitch=nvsw,
        p2p=spec.p2p,
        intra_routes=MappingProxyType(intra),
        gpu_to_nic_routes=MappingProxyType(to_nic),
        nic_to_gpu_routes=MappingProxyType(from_nic),
        gpu_arch=spec.gpu.arch,
        gpu_sm_version=spec.gpu.sm_version,
        cpu_vendor=spec.cpu_vendor,
        nvls_efficiency=(
            spec.nvswitch.reduction_efficiency if spec.nvswitch is not None and spec.nvswitch.sharp else 0.0
        ),
    )
    builder.servers.append(info)
    return info


# ---- server presets ---------------------------------------------------------------------------
# DGX A100: 8x A100 SXM4, 6 NVSwitch gen2 chips, 8x ConnectX-6 HDR compute NICs, 4 PCIe Gen4
# switches each with 2 GPUs + 2 NICs, 2x AMD EPYC 7742 (NVIDIA DGX A100 User Guide, "Hardware
# Overview"; DGX A100 system architecture whitepaper).
def dgx_a100() -> ServerSpec:
    return ServerSpec(
        name="DGX A100",
        gpu=dev.A100_SXM4_80GB,
        gpus=8,
        nvswitch=dev.NVSWITCH_GEN2,
        nic=dev.CONNECTX6_HDR,
        nics=8,
        pcie_switch=dev.PCIE_SWITCH_GEN4,
        pcie_switches=4,
        pcie_uplink=lk.PCIE_GEN4_X16,
        sockets=2,
        socket_link=lk.XGMI_AMD,
        cpu_vendor="amd",
    )


# DGX H100: 8x H100 SXM5, 4 NVSwitch gen3 chips, 8x ConnectX-7 NDR (OSFP, 400 Gb/s) compute
# NICs, PCIe Gen5 switches pairing GPUs with NICs, 2x Intel Xeon 8480C (Sapphire Rapids UPI) (NVIDIA DGX H100 User
# Guide, "Hardware Overview"; MLPerf v3.1 Eos system description).
def dgx_h100() -> ServerSpec:
    return ServerSpec(
        name="DGX H100",
        gpu=dev.H100_SXM5_80GB,
        gpus=8,
        nvswitch=dev.NVSWITCH_GEN3,
        nic=dev.CONNECTX7_NDR,
        nics=8,
        pcie_switch=dev.PCIE_SWITCH_GEN5,
        pcie_switches=4,
        pcie_uplink=lk.PCIE_GEN5_X16,
        sockets=2,
        socket_link=lk.UPI_INTEL_SPR,
    )


# HGX H200: same board wiring as HGX H100 with H200 GPUs (141 GB HBM3e); NDR NICs as in the
# reference H200 cluster designs.
def hgx_h200() -> ServerSpec:
    return ServerSpec(
        name="HGX H200",
        gpu=dev.H200_SXM,
        gpus=8,
        nvswitch=dev.NVSWITCH_GEN3,
        nic=dev.CONNECTX7_NDR,
        nics=8,
        pcie_switch=dev.PCIE_SWITCH_GEN5,
        pcie_switches=4,
        pcie_uplink=lk.PCIE_GEN5_X16,
        sockets=2,
        socket_link=lk.UPI_INTEL_SPR,
    )


# HGX B200: 8x B200, 2 NVSwitch gen4 chips (NVLink5, 1.8 TB/s per GPU), 8x ConnectX-7 NDR
# 400G per node as in the measured Vultr system (calibration table b200_vultr_hgx_*); Emerald
# Rapids hosts (HGX B200 reference design).
def hgx_b200() -> ServerSpec:
    return ServerSpec(
        name="HGX B200",
        gpu=dev.B200,
        gpus=8,
        nvswitch=dev.NVSWITCH_GEN4,
        nic=dev.CONNECTX7_NDR,
        nics=8,
        pcie_switch=dev.PCIE_SWITCH_GEN5,
        pcie_switches=4,
        pcie_uplink=lk.PCIE_GEN5_X16,
        sockets=2,
        socket_link=lk.UPI_INTEL_EMR,
    )


# GB200 NVL72: one rack, one 72-GPU NVLink domain, modelled as ONE server (NCCL does the same: with multi-node
# NVLink, MNNVL, the ranks of one NVLink clique form one "node" for its graph search, ring and NVLS). NVIDIA GB200
# NVL72 datasheet and DGX SuperPOD GB200 reference architecture (RA): 18 compute trays, each 2 GB200 superchips
# (1 Grace CPU + 2 Blackwell GPUs each, joined by NVLink-C2C); 9 NVLink switch trays of 2 NVLink Switch chips;
# every GPU has one NVLink5 link to each of the 18 chips, so the 18 chips act as one non-blocking switch and
# are aggregated into one logical NVSwitch as on HGX boards (a GPU's 18 links become one bundle). Scale-out:
# DGX GB200 has 4 ConnectX-7 NDR 400G InfiniBand NICs per compute tray, one per GPU (RA: "NVIDIA NDR (400 Gbps)
# InfiniBand" compute fabric; the dgxc-benchmarking GB200 rows ran on "GB200 NVL72", the DGX Cloud GB200
# system), each on a PCIe Gen5 x16 root port of its superchip's Grace, reached by the GPU over NVLink-C2C (NCCL
# path type C2C, NCCL_NET_GDR_C2C); NIC j serves GPU j. The two Graces of a tray are one host joined by C2C;
# different trays share no CPU link (sockets_per_host=2), so GPU traffic between trays is NVLink only.
def gb200_nvl72() -> ServerSpec:
    return ServerSpec(
        name="GB200 NVL72",
        gpu=dev.GB200,
        gpus=72,  # 18 compute trays x 4 GPUs (GB200 NVL72 datasheet)
        nvswitch=dev.NVSWITCH_GEN4,
        nic=dev.CONNECTX7_NDR,
        nics=72,  # 4 ConnectX-7 per compute tray (DGX SuperPOD GB200 RA, compute fabric)
        pcie_switches=0,  # NICs on Grace root ports
        pcie_uplink=lk.PCIE_GEN5_X16,  # Grace: PCIe Gen5 (NVIDIA Grace CPU datasheet)
        sockets=36,  # 36 Grace CPUs (GB200 NVL72 datasheet)
        sockets_per_host=2,  # one compute tray = one OS instance
        socket_link=lk.NVLINK_C2C_GB200,
        # ASSUMPTION: NCCL's latency tables know x86 vendors only here; Grace (Arm) takes the Intel entries
        cpu_vendor="intel",
    )


# 8x RTX 4090 PCIe box: GPUs on CPU root ports across two AMD sockets (bus ids 0x01-0xe1 in the
# measured system), no NVLink, no NIC; P2P off by default (GeForce driver default), so GPU
# traffic is staged through host memory.
def pcie_rtx4090(*, p2p: bool = False) -> ServerSpec:
    return ServerSpec(
        name="8x RTX 4090 (PCIe)",
        gpu=dev.RTX_4090,
        gpus=8,
        sockets=2,
        socket_link=lk.XGMI_AMD,
        p2p=p2p,
        cpu_vendor="amd",
    )


SERVER_PRESETS = MappingProxyType(
    {
        "dgx-a100": dgx_a100,
        "dgx-h100": dgx_h100,
        "hgx-h200": hgx_h200,
        "hgx-b200": hgx_b200,
        "gb200-nvl72": gb200_nvl72,
        "pcie-rtx4090": pcie_rtx4090,
    }
)
