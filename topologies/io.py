"""Importers: the user's own server, from ``nvidia-smi topo -m`` text or NCCL's topology XML; a custom fabric
technology from a TOML/JSON table (:func:`custom_fabric`, at the end of this module).

``import_system(path, gpu=None)`` reads either file and returns a :class:`~topologies.presets.SystemPreset`
that ``build_system`` (and ``fabricsim bench|step|topo --system FILE``) takes wherever it takes a preset name;
``resolve_system(value, gpu=None)`` is the one edge that tells a preset name from a file.

What a file gives, and what it becomes
---------------------------------------
Both files describe ONE server: its GPUs, its NICs, the PCIe tree they hang off and the NUMA nodes (CPU
sockets) of that tree. They become a :class:`~topologies.node.ServerSpec` as follows.

``nvidia-smi topo -m`` (the matrix, the NIC legend, the CPU and NUMA affinity columns):

* ``GPUn`` rows: one GPU each. The file does not name the GPU model: ``gpu=`` (``--gpu``, a GPU preset name
  or an unambiguous prefix such as ``h100``) gives it.
* ``NV#`` between two GPUs: # NVLinks. The same ``NV#`` between every pair of GPUs is an NVSwitch server
  whose GPUs each bring # links to the switch (NV18 on H100 SXM: 18 NVLink4 links; NV12 on A100 SXM4;
  NV8 on H800), so the GPU preset's ``nvlink_count`` is replaced by #. No ``NV#`` at all is a PCIe server
  (the GPU's NVLink is dropped). Anything else (NVLink bridges on some pairs, the hybrid cube mesh of a
  DGX-1) is refused: point-to-point NVLink is not modelled.
* ``PIX`` (at most one PCIe bridge) and ``PXB`` (several bridges, no host bridge) between two devices: they
  share a PCIe switch. The devices joined by PIX/PXB form one switch (a tree of bridges under one root port
  becomes one switch); a device with no PIX/PXB partner sits on a CPU root port.
* ``PHB`` (through the host bridge) and ``NODE`` (between host bridges of one NUMA node): same socket,
  through the CPU's root complex (the two are not told apart). ``SYS`` (``SOC`` in old drivers): across the
  SMP interconnect, another socket.
* ``NUMA Affinity``: the socket of each GPU, one socket per NUMA node (as NCCL makes one CPU node per
  NUMA node; a DGX A100 in NPS4 mode has four). When it is absent or ``N/A`` the sockets are the groups of
  devices joined by PIX/PXB/PHB/NODE. A NIC sits on the socket of its nearest GPU; a NIC that is SYS to
  every GPU sits on a socket of its own.
* ``NICn``/``mlx5_n`` rows: the NICs that are PIX or PXB to some GPU are the compute NICs (the rails: GPU i
  uses the NIC under its own switch); the others (storage and in-band management ports of a DGX, which
  are NODE/SYS to every GPU) are left out and named in the description. When no NIC is PIX/PXB to a GPU
  (a cloud VM whose NIC is PHB to the GPUs, a PCIe box), every NIC is a compute NIC.
* ``CPU Affinity`` and ``GPU NUMA ID`` are read and not used (core lists do not change the network).

The file gives no link rates, so they come from the system preset built on the same GPU (dgx-a100 for an
A100, dgx-h100 for an H100, hgx-h200, hgx-b200, pcie-rtx4090): the PCIe generation (the GPU preset's host
link, the preset's switch uplinks and PCIe switch), the NIC model, the socket interconnect and CPU vendor,
peer-to-peer and the fabric (cable and switch) that joins several servers; ``--fabric`` replaces the
latter as for a preset. A GPU without such a preset (L40S) is refused.

NCCL's topology XML (``NCCL_TOPO_DUMP_FILE``; the elements and attributes NCCL's src/graph/xml.cc writes
and src/graph/topo.cc reads):

* ``<cpu numaid vendor familyid modelid>``: one socket each. ``vendor`` gives the CPU vendor and, as NCCL's
  topo.cc does, the socket link: Intel family 6 model >= 0xCF Emerald Rapids (40 GB/s), >= 0x8F Sapphire
  Rapids (22), >= 0x55 Skylake class (10), older Broadwell (6); AMD 16 (``links.py``'s NCCL figures).
  Several ``host_hash`` values (a multi-node dump) are refused.
* ``<pci busid class link_speed link_width>``: the PCIe tree. A GPU or NIC whose ``<pci>`` hangs directly
  off the ``<cpu>`` sits on a root port; one deeper sits on the switch of its top-level ``<pci>``.
  ``link_speed`` (2.5 ... 64 GT/s) and ``link_width`` give the PCIe link (Gen3 to Gen6, scaled by width / 16;
  width 0 read as 16, as NCCL does): the GPU's (the slowest GPU's), the NIC's and the switch uplink's (the
  slowest top-level bridge's); a missing or unknown speed keeps the preset's.
* ``<gpu dev sm rank gdr>``: one GPU each, ordered by ``dev``. ``sm`` names the GPU when one preset has that
  compute capability (80: A100, 100: B200), else ``gpu=`` must pick one (90: H100 or H200) and must agree
  with it.
* ``<nvlink target count tclass>``: tclass 0x068000 (a bridge: NVSwitch) adds ``count`` links to the switch;
  every GPU must bring the same number. tclass 0x03.... (another GPU) and 0x068001 (a CPU, NVLink-C2C) are
  refused: point-to-point NVLink and Grace hosts are not modelled.
* ``<nic><net name speed port gdr>``: one NIC per ``<net>`` (each port of a multi-port card is a NIC with its
  own PCIe link, an approximation). ``speed`` (Mb/s) and the ``<pci>`` class (0x0207..: InfiniBand,
  0x0200..: Ethernet, RoCE) choose the NIC preset with that port; the fabric is the preset's if it uses
  that port, else the ``FABRICS`` entry whose NIC has it. Compute NICs are chosen as for topo -m (those
  under a switch shared with a GPU, else all). GPUDirect RDMA is on only when every GPU and compute NIC
  says ``gdr="1"``.
* Ignored: ``latency``, ``guid``, ``maxconn``, ``coll``, ``vendor``/``device`` ids, ``affinity``, ``<pcilink>``
  and ``<c2c>`` elements. A hand-written NCCL_TOPO_FILE without ``<gpu>`` elements (GPU-class ``<pci>``
  only) is refused: its NVLinks are unknown.

Round trip: the DGX H100 ``topo -m`` of tests/topologies/data imports to 8 GPUs on 8 PCIe switches (each
with its NIC, four per socket) where the dgx-h100 preset has 4 switches of two GPUs and two NICs; with
GPUDirect RDMA no collective route crosses a switch uplink, so ``fabricsim bench`` gives the same table.

>>> system = import_system("tests/topologies/data/dgx_h100_topo.txt", gpu="h100")
>>> spec = system.server()
>>> spec.gpus, spec.nics, spec.pcie_switches, spec.sockets, spec.gpu.nvlink_count
(8, 8, 8, 2, 18)
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import checks
from . import devices as dev
from . import links as lk
from .devices import GpuSpec, NicSpec, SwitchSpec
from .links import LinkKind, LinkSpec
from .node import PcieLayout, ServerSpec, even_layout
from .presets import FABRICS, SYSTEMS, FabricPreset, SystemPreset, as_fabric

__all__ = (
    "TopoMatrix",
    "parse_topo_matrix",
    "server_from_topo_matrix",
    "server_from_nccl_xml",
    "import_system",
    "resolve_system",
    "gpu_preset",
    "is_file",
    "custom_fabric",
    "resolve_fabric",
)

_NEAR = ("PIX", "PXB")  # share a PCIe switch
_SAME_SOCKET = ("PIX", "PXB", "PHB", "NODE")  # nearest first
_KINDS = (*_SAME_SOCKET, "SYS")
_CELL_EXPECTED = "X, NV# (# NVLinks), PIX, PXB, PHB, NODE or SYS"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


# ------------------------------------------------------------------------------------------------
# GPU names and the preset a GPU's host is taken from
# ------------------------------------------------------------------------------------------------


def _folded(name: str) -> str:
    return re.sub(r"[\s_-]", "", name.lower())


def gpu_preset(name: object) -> GpuSpec:
    """The GPU preset ``name`` names: its exact name or an unambiguous prefix, case, ``-`` and ``_`` aside.

    >>> gpu_preset("h100").name, gpu_preset("RTX-4090").name
    ('h100_sxm5_80gb', 'rtx_4090')
    """
    expected = f"a GPU preset: one of {', '.join(dev.GPU_PRESETS)} (or a prefix naming one, such as h100)"
    if not isinstance(name, str) or not name.strip():
        raise checks.reject("gpu", name, expected)
    if name in dev.GPU_PRESETS:
        return dev.GPU_PRESETS[name]
    matches = [g for key, g in dev.GPU_PRESETS.items() if _folded(key).startswith(_folded(name))]
    if len(matches) != 1:
        raise checks.reject("gpu", name, expected)
    return matches[0]


def _template(gpu: GpuSpec) -> SystemPreset:
    """The system preset built on ``gpu``, whose host, NICs and fabric an imported server takes."""
    for preset in SYSTEMS.values():
        if preset.server().gpu.name == gpu.name:
            return preset
    have = sorted({p.server().gpu.name for p in SYSTEMS.values()})
    raise checks.reject(
        "gpu", gpu.name, f"a GPU with a system preset to take its host, NICs and fabric from: {', '.join(have)}"
    )


# ------------------------------------------------------------------------------------------------
# nvidia-smi topo -m
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoMatrix:
    """``nvidia-smi topo -m`` as printed: the device columns (``GPU0``..., ``NIC0``... or ``mlx5_0``...), the
    cells (``cells[i][j]``, ``X`` on the diagonal), the NIC legend and each GPU's affinity columns."""

    devices: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    nic_names: Mapping[str, str]
    cpu_affinity: tuple[str, ...]
    numa_affinity: tuple[str, ...]

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.devices) if d.startswith("GPU"))

    @property
    def nics(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.devices) if not d.startswith("GPU"))

    def name(self, i: int) -> str:
        """Device ``i`` as the file names it (``NIC0 (mlx5_0)`` with a NIC legend)."""
        d = self.devices[i]
        return f"{d} ({self.nic_names[d]})" if d in self.nic_names else d


def _split(line: str) -> list[str]:
    # tab-separated output keeps empty cells (a missing CPU affinity); space-aligned output cannot
    return [c.strip() for c in line.split("\t")] if "\t" in line else line.split()


def parse_topo_matrix(text: str, *, source: str = "nvidia-smi topo -m") -> TopoMatrix:
    """The matrix of ``nvidia-smi topo -m`` output ``text`` (tab-separated or space-aligned; the header may
    carry terminal underlining); ``source`` names the file in errors."""
    lines = [_ANSI.sub("", line).strip() for line in text.splitlines()]
    header_at = next(
        (n for n, line in enumerate(lines) if re.match(r"^GPU0\b", line) and not re.match(r"^GPU0\s+X\b", line)),
        None,
    )
    if header_at is None:
        raise ValueError(f"{source}: no header line starting with GPU0; expected the output of `nvidia-smi topo -m`")
    header = lines[header_at].split()
    devices: list[str] = []
    for token in header:
        if token in ("CPU", "NUMA", "GPU") or token.startswith("Affinity"):
            break
        devices.append(token)
    if len(set(devices)) != len(devices):
        raise ValueError(f"{source}: line {header_at + 1}: a device column appears twice; expected distinct names")
    rows: dict[str, list[str]] = {}
    for n, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        fields = _split(line)
        if not fields or fields[0] not in devices:
            if line.startswith("Legend"):
                break
            continue
        name, rest = fields[0], fields[1:]
        if len(rest) < len(devices):
            raise ValueError(
                f"{source}: line {n}: row {name} has {len(rest)} cells; expected {len(devices)} (one per column)"
            )
        rows[name] = rest
    missing = [d for d in devices if d not in rows]
    if missing:
        raise ValueError(f"{source}: no row for {missing[0]}; expected one row per column of the header")
    legend = dict(re.findall(r"^[ \t]*(NIC\d+):[ \t]*(\S+)[ \t]*$", text, flags=re.MULTILINE))
    cells: list[tuple[str, ...]] = []
    for i, d in enumerate(devices):
        row = tuple("SYS" if c == "SOC" else c for c in rows[d][: len(devices)])  # SOC: SYS in old drivers
        for j, cell in enumerate(row):
            ok = cell == "X" if i == j else (cell in _KINDS or re.fullmatch(r"NV[1-9]\d*", cell) is not None)
            if not ok:
                raise checks.reject(f"{source}: {d}/{devices[j]}", cell, "X" if i == j else _CELL_EXPECTED)
        cells.append(row)
    for i, d in enumerate(devices):
        for j in range(i):
            if cells[i][j] != cells[j][i]:
                raise checks.reject(
                    f"{source}: {d}/{devices[j]}", cells[i][j], f"{cells[j][i]!r}, as {devices[j]}/{d} says"
                )
    affinity = [rows[d][len(devices) :] for d in devices if d.startswith("GPU")]
    return TopoMatrix(
        devices=tuple(devices),
        cells=tuple(cells),
        nic_names=legend,
        cpu_affinity=tuple(a[0] if a else "" for a in affinity),
        numa_affinity=tuple(a[1] if len(a) > 1 else "" for a in affinity),
    )


class _Groups:
    """Union-find over device indices."""

    def __init__(self, items: Iterable[int]) -> None:
        self.parent = {i: i for i in items}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            i = self.parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def server_from_topo_matrix(
    matrix: TopoMatrix, *, gpu: object, fabric: object = None, source: str = "nvidia-smi topo -m"
) -> SystemPreset:
    """The system ``matrix`` (:func:`parse_topo_matrix`) describes, with GPU preset ``gpu`` (the file names
    none); ``fabric`` (a FABRICS name) gives the NIC model when the GPU's system preset has none (a PCIe box);
    the mapping is the module docstring's."""
    if gpu is None:
        raise ValueError(
            f"gpu: None is not allowed for {source}; expected --gpu NAME (nvidia-smi topo -m does not name the GPU "
            f"model): one of {', '.join(dev.GPU_PRESETS)}"
        )
    spec = gpu_preset(gpu)
    template = _template(spec)
    m = matrix
    gpus, nics = m.gpus, m.nics
    cell = m.cells

    # NVLink: the same NV# between every pair (NVSwitch), or none
    pairs = [(a, b) for k, a in enumerate(gpus) for b in gpus[k + 1 :]]
    counts = {cell[a][b] for a, b in pairs}
    nv = {c for c in counts if c.startswith("NV")}
    if nv and (len(counts) > 1):
        a, b = next(p for p in pairs if cell[p[0]][p[1]].startswith("NV"))
        c, d = next(p for p in pairs if cell[p[0]][p[1]] != cell[a][b])
        raise ValueError(
            f"{source}: {m.name(a)}/{m.name(b)} is {cell[a][b]} while {m.name(c)}/{m.name(d)} is {cell[c][d]}; "
            "expected one NV# between every pair of GPUs (an NVSwitch server) or no NVLink (a PCIe server): "
            "point-to-point NVLink (bridged pairs, hybrid cube mesh) is not modelled"
        )
    nvlinks = int(next(iter(nv))[2:]) if nv else 0

    # compute NICs: PIX/PXB to some GPU; else every NIC
    near = [n for n in nics if any(cell[g][n] in _NEAR for g in gpus)]
    compute = near or list(nics)
    left_out = [n for n in nics if n not in compute]
    members = [*gpus, *compute]

    switches = _Groups(members)
    for k, a in enumerate(members):
        for b in members[k + 1 :]:
            if cell[a][b] in _NEAR:
                switches.join(a, b)

    # sockets: the NUMA Affinity column when every GPU gives one node, else the PIX/PXB/PHB/NODE groups
    socket_key: dict[int, object] = {}
    numa = [a.strip() for a in m.numa_affinity]
    if numa and all(re.fullmatch(r"\d+", a) for a in numa):
        for g, node in zip(gpus, numa):
            socket_key[g] = ("numa", int(node))
    else:
        local = _Groups(members)
        for k, a in enumerate(members):
            for b in members[k + 1 :]:
                if cell[a][b] in _SAME_SOCKET:
                    local.join(a, b)
        socket_key.update({g: ("group", local.find(g)) for g in gpus})
    nic_local = _Groups(compute)
    for k, a in enumerate(compute):
        for b in compute[k + 1 :]:
            if cell[a][b] in _SAME_SOCKET:
                nic_local.join(a, b)
    for n in compute:
        nearest = min(gpus, key=lambda g: (_KINDS.index(cell[g][n]), g))
        if cell[nearest][n] in _SAME_SOCKET:
            socket_key[n] = socket_key[nearest]
        else:
            socket_key[n] = ("nics", nic_local.find(n))
    where = {i: (switches.find(i) if _has_partner(i, members, cell) else None, socket_key[i]) for i in members}
    nvswitch = template.server().nvswitch if nvlinks else None
    if nvlinks and nvswitch is None:
        raise ValueError(
            f"{source}: NV{nvlinks} between every pair of GPUs, but gpu {spec.name} has no NVSwitch "
            "server preset; expected a GPU preset built on NVSwitch"
        )
    described = f"{len(gpus)}x {spec.name}" + (f", NVSwitch NV{nvlinks}" if nvlinks else ", PCIe only")
    if left_out:
        described += f"; left out (not PIX/PXB to a GPU): {', '.join(m.name(n) for n in left_out)}"
    nic = template.server().nic
    if compute and nic is None:
        if fabric is None:
            raise ValueError(
                f"fabric: None is not allowed for {source}: its {len(compute)} NICs need a model and {template.name}, "
                f"the preset of gpu {spec.name}, has none; expected --fabric NAME, one of {', '.join(FABRICS)}"
            )
        nic = as_fabric(resolve_fabric(fabric)).nic
    return _system(
        source=source,
        description=described,
        template=template,
        gpu=spec,
        nvlinks=nvlinks,
        gpu_where=[where[g] for g in gpus],
        nic_where=[where[n] for n in compute],
        names=[m.name(i) for i in members],
        nic=nic,
    )


def _has_partner(i: int, members: Sequence[int], cell: Sequence[Sequence[str]]) -> bool:
    return any(cell[i][j] in _NEAR for j in members if j != i)


# ------------------------------------------------------------------------------------------------
# NCCL topology XML
# ------------------------------------------------------------------------------------------------

_PCIE_GENERATIONS = {8.0: lk.PCIE_GEN3_X16, 16.0: lk.PCIE_GEN4_X16, 32.0: lk.PCIE_GEN5_X16, 64.0: lk.PCIE_GEN6_X16}
_NVSWITCH_CLASS = "0x068000"  # NCCL PCI_NVSWITCH_CLASS (src/graph/topo.cc kvDictPciClass)


def _pcie_link(element: ET.Element, source: str) -> LinkSpec | None:
    """The PCIe link a ``<pci>`` element reports (None when it reports none or an unknown speed)."""
    speed = element.get("link_speed")
    if speed is None:
        return None
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", speed)
    if match is None:
        return None  # "Unknown" in VMs; NCCL falls back to a default too
    base = _PCIE_GENERATIONS.get(float(match.group(1)))
    if base is None:
        raise checks.reject(
            f"{source}: pci {element.get('busid')} link_speed", speed, "8, 16, 32 or 64 GT/s (PCIe Gen3 to Gen6)"
        )
    width = checks.integer(
        f"{source}: pci {element.get('busid')} link_width", _int(element.get("link_width", "16"), 16), low=0, high=32
    )
    width = width or 16  # NCCL reads width 0 (not reported by /sys) as 16
    if width == 16:
        return base
    return dataclasses.replace(
        base, name=base.name.replace("x16", f"x{width}"), line_rate_bytes_per_s=base.line_rate_bytes_per_s * width / 16
    )


def _int(text: object, default: object = None) -> object:
    """``text`` as an int (decimal or 0x hex), else ``text`` itself (for the message), or ``default`` if None."""
    if text is None:
        return default
    try:
        return int(str(text), 0)
    except ValueError:
        return text


def _slowest(links: Iterable[LinkSpec | None]) -> LinkSpec | None:
    known = [link for link in links if link is not None]
    return min(known, key=lambda link: link.bandwidth_bytes_per_s) if known else None


def _socket_link(cpu: ET.Element, source: str) -> tuple[str, LinkSpec] | None:
    """(vendor, socket link) of a ``<cpu>``, as NCCL's topo.cc classifies it; None when it names no vendor."""
    vendor = cpu.get("vendor")
    if vendor is None:
        return None
    if vendor == "AuthenticAMD":
        return "amd", lk.XGMI_AMD
    if vendor == "GenuineIntel":
        family, model = _int(cpu.get("familyid"), 0), _int(cpu.get("modelid"), 0)
        if not isinstance(family, int) or not isinstance(model, int):
            raise checks.reject(f"{source}: cpu familyid/modelid", (family, model), "integers")
        if family == 6 and model >= 0xCF:
            return "intel", lk.UPI_INTEL_EMR
        if family == 6 and model >= 0x8F:
            return "intel", lk.UPI_INTEL_SPR
        if family == 6 and model >= 0x55:
            return "intel", lk.UPI_INTEL
        return "intel", lk.QPI_INTEL_BDW
    raise checks.reject(f"{source}: cpu vendor", vendor, "'GenuineIntel' or 'AuthenticAMD' (x86 hosts)")


def _nic_for(speed_mbps: object, kind: LinkKind, template: NicSpec | None, name: str, source: str) -> NicSpec:
    """The NIC preset whose port is ``kind`` at ``speed_mbps`` (the template's first)."""
    rate = speed_mbps * 1e6 / 8 if isinstance(speed_mbps, int) else None
    candidates = ([template] if template is not None else []) + list(dev.NIC_PRESETS.values())
    for nic in candidates:
        if rate is not None and nic.port.kind is kind and nic.port.line_rate_bytes_per_s == rate:
            return nic
    have = sorted(
        {f"{n.port.line_rate_bytes_per_s * 8 / 1e6:.0f}" for n in dev.NIC_PRESETS.values() if n.port.kind is kind}
    )
    raise checks.reject(
        f"{source}: net {name} speed",
        speed_mbps,
        f"a {kind.name} port speed in Mb/s with a NIC preset: {', '.join(have)}",
    )


def server_from_nccl_xml(text: str, *, gpu: object = None, source: str = "NCCL topology XML") -> SystemPreset:
    """The system NCCL topology XML ``text`` (an ``NCCL_TOPO_DUMP_FILE`` dump) describes; ``gpu`` (a GPU preset
    name) picks the GPU when its ``sm`` does not; the mapping is the module docstring's."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"{source}: not well-formed XML ({exc}); expected an NCCL topology dump") from None
    if root.tag != "system":
        raise checks.reject(f"{source}: root element", root.tag, "<system> (an NCCL topology dump)")
    cpus = root.findall("cpu")
    if not cpus:
        raise ValueError(f"{source}: no <cpu> element; expected an NCCL topology dump (NCCL_TOPO_DUMP_FILE)")
    hosts = {c.get("host_hash") for c in cpus}
    if len(hosts) > 1:
        raise checks.reject(f"{source}: cpu host_hash", sorted(h or "" for h in hosts), "one host (one server's dump)")

    found_gpus: list[tuple[ET.Element, ET.Element, ET.Element, int]] = []  # (gpu, its pci, top-level pci, socket)
    found_nics: list[tuple[ET.Element, ET.Element, ET.Element, int]] = []

    def walk(node: ET.Element, top: ET.Element, socket: int) -> None:
        if str(node.get("class", "")).startswith("0x03") and node.find("gpu") is None:
            raise ValueError(
                f"{source}: pci {node.get('busid')} is a GPU (class {node.get('class')}) without a <gpu> element; "
                "expected a dump written by NCCL_TOPO_DUMP_FILE (its <gpu> gives the NVLinks)"
            )
        for child in node:
            if child.tag == "gpu":
                found_gpus.append((child, node, top, socket))
            elif child.tag == "nic":
                found_nics.extend((net, node, top, socket) for net in child.findall("net"))
            elif child.tag == "pci":
                walk(child, top, socket)

    hosts_seen: list[tuple[str, LinkSpec]] = []
    for socket, cpu in enumerate(cpus):
        cpu_host = _socket_link(cpu, source)
        if cpu_host is not None:
            hosts_seen.append(cpu_host)
        for pci in cpu.findall("pci"):
            walk(pci, pci, socket)
    if not found_gpus:
        raise ValueError(f"{source}: no <gpu> element; expected an NCCL topology dump with the server's GPUs")
    devs = [checks.integer(f"{source}: gpu dev", _int(g.get("dev")), low=0) for g, *_ in found_gpus]
    if len(set(devs)) != len(devs):
        raise checks.reject(f"{source}: gpu dev", devs, "distinct CUDA device indices")
    found_gpus = [f for _, f in sorted(zip(devs, found_gpus), key=lambda pair: pair[0])]

    sms = {_int(g.get("sm")) for g, *_ in found_gpus}
    if len(sms) != 1 or not isinstance(next(iter(sms)), int):
        raise checks.reject(f"{source}: gpu sm", sorted(map(str, sms)), "one integer compute capability for every GPU")
    sm = next(iter(sms))
    if gpu is not None:
        spec = gpu_preset(gpu)
        if spec.sm_version != sm:
            raise checks.reject("gpu", gpu, f"a GPU of compute capability sm {sm}, as {source} says")
    else:
        # GPUs on a PCIe host link only: a Grace-hosted GPU of the same compute capability (GB200: sm 100, as
        # B200) is taken when named with gpu=
        matches = [g for g in dev.GPU_PRESETS.values() if g.sm_version == sm and g.pcie.kind is LinkKind.PCIE]
        if len(matches) != 1:
            names = ", ".join(g.name for g in matches) or "none"
            raise ValueError(
                f"gpu: None is not allowed for {source}: sm {sm} matches {names}; expected --gpu NAME, one of them"
            )
        spec = matches[0]
    template = _template(spec)
    host = template.server()

    counts = []
    for g, *_ in found_gpus:
        links = 0
        for nvl in g.findall("nvlink"):
            tclass = str(nvl.get("tclass", ""))
            if tclass != _NVSWITCH_CLASS:
                what = "another GPU" if tclass.startswith("0x03") else f"class {tclass}"
                raise ValueError(
                    f"{source}: gpu {g.get('dev')} has NVLink to {what} ({nvl.get('target')}); expected NVLink only "
                    "to NVSwitch (tclass 0x068000): point-to-point NVLink and NVLink-C2C hosts are not modelled"
                )
            count = _int(nvl.get("count"))
            if not isinstance(count, int) or count < 1:
                raise checks.reject(f"{source}: gpu {g.get('dev')} nvlink count", nvl.get("count"), "an integer >= 1")
            links += count
        counts.append(links)
    if len(set(counts)) != 1:
        raise checks.reject(f"{source}: NVSwitch links per GPU", counts, "the same count for every GPU")
    nvlinks = counts[0]

    tops_with_gpu = {id(top) for _, pci, top, _ in found_gpus if pci is not top}
    compute = [f for f in found_nics if f[1] is not f[2] and id(f[2]) in tops_with_gpu] or found_nics
    left_out = [f[0].get("name") for f in found_nics if f not in compute]

    nic = None
    if compute:
        kinds = {str(pci.get("class", "")) for _, pci, _, _ in compute}
        kind = host.nic.port.kind if host.nic is not None else LinkKind.INFINIBAND
        if all(k.startswith("0x0207") for k in kinds):
            kind = LinkKind.INFINIBAND
        elif all(k.startswith("0x0200") for k in kinds):
            kind = LinkKind.ROCE
        speeds = {_int(net.get("speed")) for net, *_ in compute}
        if len(speeds) != 1:
            raise checks.reject(f"{source}: net speed", sorted(map(str, speeds)), "one speed for every compute NIC")
        nic = _nic_for(next(iter(speeds)), kind, host.nic, str(compute[0][0].get("name")), source)
        nic_link = _slowest(_pcie_link(pci, source) for _, pci, _, _ in compute)
        if nic_link is not None and nic_link != nic.pcie:
            nic = dataclasses.replace(nic, pcie=nic_link)
    gdr = all(g.get("gdr", "1") == "1" for g, *_ in found_gpus) and all(n.get("gdr", "1") == "1" for n, *_ in compute)

    gpu_link = _slowest(_pcie_link(pci, source) for _, pci, _, _ in found_gpus)
    if gpu_link is not None and gpu_link != spec.pcie:
        spec = dataclasses.replace(spec, pcie=gpu_link)
    uplink = _slowest(_pcie_link(top, source) for _, pci, top, _ in (*found_gpus, *compute) if pci is not top)

    def where(pci: ET.Element, top: ET.Element, socket: int) -> tuple[object, object]:
        return (None if pci is top else id(top), socket)

    vendor, socket_link = hosts_seen[0] if hosts_seen else (host.cpu_vendor, host.socket_link)
    described = f"{len(found_gpus)}x {spec.name} (sm {sm})" + (f", NVSwitch x{nvlinks} links" if nvlinks else "")
    if left_out:
        described += f"; left out (not under a GPU's PCIe switch): {', '.join(map(str, left_out))}"
    if not gdr:
        described += "; GDR off (gdr=0 in the dump)"
    return _system(
        source=source,
        description=described,
        template=template,
        gpu=spec,
        nvlinks=nvlinks,
        gpu_where=[where(pci, top, s) for _, pci, top, s in found_gpus],
        nic_where=[where(pci, top, s) for _, pci, top, s in compute],
        names=[f"gpu {g.get('dev')}" for g, *_ in found_gpus] + [str(n.get("name")) for n, *_ in compute],
        nic=nic,
        gdr=gdr,
        uplink=uplink,
        cpu_vendor=vendor,
        socket_link=socket_link,
    )


# ------------------------------------------------------------------------------------------------
# From placements to a ServerSpec and a SystemPreset
# ------------------------------------------------------------------------------------------------


def _system(
    *,
    source: str,
    description: str,
    template: SystemPreset,
    gpu: GpuSpec,
    nvlinks: int,
    gpu_where: Sequence[tuple[object, object]],
    nic_where: Sequence[tuple[object, object]],
    names: Sequence[str],
    nic: NicSpec | None = None,
    gdr: bool = True,
    uplink: LinkSpec | None = None,
    cpu_vendor: str | None = None,
    socket_link: LinkSpec | None = None,
) -> SystemPreset:
    """The system whose GPUs and NICs sit at ``gpu_where``/``nic_where`` ((switch key or None, socket key) each,
    keys in any hashable form), the rest taken from ``template``'s server."""
    host = template.server()
    places = [*gpu_where, *nic_where]
    sockets: dict[object, int] = {}
    switches: dict[object, int] = {}
    switch_sockets: list[int] = []
    for (switch, socket), name in zip(places, names):
        s = sockets.setdefault(socket, len(sockets))
        if switch is not None and switch not in switches:
            switches[switch] = len(switches)
            switch_sockets.append(s)
        elif switch is not None and switch_sockets[switches[switch]] != s:
            raise ValueError(
                f"{source}: {name} shares a PCIe switch with devices of another NUMA node; expected the devices "
                "of one PCIe switch on one socket"
            )

    def place(where: Sequence[tuple[object, object]]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (
            tuple(-1 if w is None else switches[w] for w, _ in where),
            tuple(sockets[s] for _, s in where),
        )

    gpu_switches, gpu_sockets = place(gpu_where)
    nic_switches, nic_sockets = place(nic_where)
    if nvlinks == 0:
        gpu = dataclasses.replace(gpu, nvlink=None, nvlink_count=0)
    elif nvlinks != gpu.nvlink_count:
        gpu = dataclasses.replace(gpu, nvlink_count=nvlinks)
    nic = nic if nic is not None else host.nic
    if nic_where and nic is None:
        raise ValueError(f"{source}: NICs found, but {template.name} has no NIC preset to give their model")
    uplink = uplink if uplink is not None else host.pcie_uplink
    pcie_switch = host.pcie_switch
    if switches and pcie_switch is None:
        fast = uplink.line_rate_bytes_per_s >= lk.PCIE_GEN5_X16.line_rate_bytes_per_s
        pcie_switch = dev.PCIE_SWITCH_GEN5 if fast else dev.PCIE_SWITCH_GEN4
    layout = PcieLayout(
        switch_sockets=tuple(switch_sockets),
        gpu_switches=gpu_switches,
        gpu_sockets=gpu_sockets,
        nic_switches=nic_switches,
        nic_sockets=nic_sockets,
    )
    spec = ServerSpec(
        name=Path(source).name,
        gpu=gpu,
        gpus=len(gpu_where),
        nvswitch=host.nvswitch if nvlinks else None,
        nic=nic if nic_where else None,
        nics=len(nic_where),
        pcie_switch=pcie_switch if switches else None,
        pcie_switches=len(switches),
        pcie_uplink=uplink,
        sockets=max(len(sockets), 1),
        socket_link=socket_link if socket_link is not None else host.socket_link,
        host_memory=host.host_memory,
        p2p=host.p2p,
        gdr=gdr,
        cpu_vendor=cpu_vendor if cpu_vendor is not None else host.cpu_vendor,
        layout=layout,
    )
    spec = _even_if_possible(spec)
    link, switch = _fabric(spec.nic, template)
    fabric = f"; fabric {link.name} / {switch.name}" if link is not None and switch is not None else "; no fabric"
    shape = (
        f"{spec.nics} NICs ({spec.nic.name})" if spec.nic is not None else "no NIC"
    ) + f", {spec.pcie_switches} PCIe switches, {spec.sockets} sockets"
    return SystemPreset(
        name=str(source),
        description=f"imported from {Path(source).name}: {description}; {shape}{fabric} (host as {template.name})",
        server=functools.partial(dataclasses.replace, spec),
        fabric_link=link,
        switch=switch,
    )


def _even_if_possible(spec: ServerSpec) -> ServerSpec:
    """``spec`` without its explicit layout when the even spread (``node.even_layout``) places every device the
    same way, so an imported server that matches a preset's wiring rule is built - and scaled by nics_per_node -
    as the presets are."""
    assert spec.layout is not None
    try:
        even = dataclasses.replace(spec, layout=None)
    except ValueError:  # not evenly spreadable (counts do not divide)
        return spec
    return even if even_layout(even) == spec.layout or (spec.pcie_switches == 0 and _root_even(spec)) else spec


def _root_even(spec: ServerSpec) -> bool:
    """Whether a switchless server's devices sit where ``add_server`` puts them without a layout."""
    assert spec.layout is not None
    per_socket = -(-spec.gpus // spec.sockets)
    gpus = tuple(i // per_socket for i in range(spec.gpus))
    nics = tuple(j * spec.sockets // spec.nics for j in range(spec.nics)) if spec.nics else ()
    return spec.layout.gpu_sockets == gpus and spec.layout.nic_sockets == nics


def _fabric(nic: NicSpec | None, template: SystemPreset) -> tuple[LinkSpec | None, SwitchSpec | None]:
    """The cable and switch that join servers with ``nic``: the template's when it uses the same port, else the
    FABRICS entry whose NIC has that port; none without a NIC or such an entry."""
    if nic is None:
        return None, None
    if template.fabric_link is not None and template.fabric_link == nic.port:
        return template.fabric_link, template.switch
    for fabric in FABRICS.values():
        if fabric.nic.port == nic.port:
            return fabric.link, fabric.switch
    return None, None


# ------------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------------


def import_system(path: object, *, gpu: object = None, fabric: object = None) -> SystemPreset:
    """The system an ``nvidia-smi topo -m`` text file or an NCCL topology XML file at ``path`` describes (told
    apart by content); ``gpu`` names the GPU preset where the file does not, ``fabric`` the NIC model where
    neither the file nor the GPU's preset does."""
    text = checks.read_text("system", path)
    source = str(path)
    if text.lstrip().startswith("<"):
        return server_from_nccl_xml(text, gpu=gpu, source=source)
    if re.search(r"^\s*(\x1b\[[0-9;]*m)?GPU0\b", text, flags=re.MULTILINE):
        matrix = parse_topo_matrix(text, source=source)
        return server_from_topo_matrix(matrix, gpu=gpu, fabric=fabric, source=source)
    raise ValueError(
        f"system: {source!r} is not allowed; expected a system preset or a file with `nvidia-smi topo -m` output "
        "or an NCCL topology XML dump (NCCL_TOPO_DUMP_FILE)"
    )


def is_file(value: str | Path) -> bool:
    """Whether ``value`` names an existing regular file (a name the OS refuses, too long or with a NUL, names none)."""
    try:
        return Path(value).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no file of that name
        return False


def resolve_system(value: object, *, gpu: object = None, fabric: object = None) -> str | SystemPreset:
    """``value`` as ``build_system`` takes it: a preset name as is (``gpu`` must then be None: a preset names
    its GPU), an existing file imported (:func:`import_system`), anything else the error naming both kinds."""
    if isinstance(value, str) and value in SYSTEMS:
        if gpu is not None:
            raise checks.reject("gpu", gpu, f"no value with system preset {value!r} (it names its GPU)")
        return value
    if isinstance(value, (str, Path)) and is_file(value):
        return import_system(value, gpu=gpu, fabric=fabric)
    raise ValueError(
        f"system: {value!r} is not a preset; expected one of {', '.join(SYSTEMS)}, or an existing file "
        "(nvidia-smi topo -m output, an NCCL topology XML dump)"
    )


# ------------------------------------------------------------------------------------------------
# A custom fabric technology (TOML/JSON)
# ------------------------------------------------------------------------------------------------

FABRIC_FIELDS = ("name", "link", "switch", "nic", "radix", "switch_latency_us")
_PORT_KINDS = {LinkKind.INFINIBAND: "infiniband", LinkKind.ROCE: "ethernet"}


def custom_fabric(mapping: object, *, source: str = "fabric") -> FabricPreset:
    """The fabric technology a table describes, for wiring no ``FABRICS`` entry covers; the tiers, cabling and
    oversubscription stay the settings they are (``topology``, ``rail_optimised``, ``oversubscription``,
    ``planes``). Fields:

    * ``link``: the cable and port, a ``links.LINK_PRESETS`` name of kind InfiniBand or RoCE;
    * ``switch``: a ``devices.SWITCH_PRESETS`` name of the same family (infiniband, ethernet); ports faster than
      the link are split into link-rate ports of the same switching capacity (a 400G Tomahawk 4 as 128 x 200G);
    * ``nic``: a ``devices.NIC_PRESETS`` name whose port is the link (default: the first such preset);
    * ``radix``: the switch's port count at the link rate (default the switch's), e.g. a smaller chassis;
    * ``switch_latency_us``: the switch's port-to-port latency (default the switch's);
    * ``name``: what the label shows (default ``custom``).

    A switch that equals a preset once split (Tomahawk 4 at 200G is ``tomahawk_4_200g``) is that preset; one with
    its own radix or latency is named ``<switch>_custom``: ``fabricsim topo`` counts its ports but the price book
    (``topologies/prices.toml``, keyed by preset) has no figure for it, and its port rate shows as ``?``.

    >>> fabric = custom_fabric({"link": "roce_200g", "switch": "spectrum_4", "radix": 64})
    >>> fabric.switch.radix, fabric.switch.port_rate_bytes_per_s * 8 / 1e9, fabric.nic.name
    (64, 200.0, 'connectx6dx_200g')
    >>> custom_fabric({"link": "roce_200g", "switch": "tomahawk_4"}).switch.name
    'tomahawk_4_200g'

    """
    if not isinstance(mapping, Mapping):
        raise checks.reject(source, mapping, f"a table of {', '.join(FABRIC_FIELDS)}")
    unknown = sorted(str(k) for k in mapping if k not in FABRIC_FIELDS)
    if unknown:
        raise checks.reject(
            f"{source}.{unknown[0]}", mapping[unknown[0]], f"no such field; one of {', '.join(FABRIC_FIELDS)}"
        )
    ports = {n: link for n, link in lk.LINK_PRESETS.items() if link.kind in _PORT_KINDS}
    link_name = mapping.get("link")
    link = ports.get(link_name) if isinstance(link_name, str) else None
    if link is None:
        raise checks.reject(f"{source}.link", mapping.get("link"), f"one of {', '.join(ports)}")
    family = _PORT_KINDS[link.kind]
    switches = {n: sw for n, sw in dev.SWITCH_PRESETS.items() if sw.kind == family}
    switch_name = mapping.get("switch")
    switch = switches.get(switch_name) if isinstance(switch_name, str) else None
    if switch is None:
        raise checks.reject(
            f"{source}.switch", mapping.get("switch"), f"one of {', '.join(switches)} ({family}, as the link)"
        )
    ratio = switch.port_rate_bytes_per_s / link.line_rate_bytes_per_s
    if ratio < 1 or ratio != round(ratio):
        raise checks.reject(
            f"{source}.switch", switch.name, f"a switch whose ports run at a whole multiple of {link.name}'s rate"
        )
    if ratio > 1:
        switch = dev._split_ports(switch, link, f"{switch.name}_{link.name}")
    nics = {n: nic for n, nic in dev.NIC_PRESETS.items() if nic.port == link}
    name = mapping.get("nic", next(iter(nics), None))
    nic = nics.get(name) if isinstance(name, str) else None
    if nic is None:
        raise checks.reject(f"{source}.nic", name, f"a NIC preset with a {link.name} port: {', '.join(nics) or 'none'}")
    radix, latency_s = switch.radix, switch.latency_s
    if "radix" in mapping:
        radix = checks.integer(f"{source}.radix", mapping["radix"], low=2)
    if "switch_latency_us" in mapping:
        latency_s = (
            checks.finite_nonnegative(
                f"{source}.switch_latency_us",
                mapping["switch_latency_us"],
                expected="a finite number of microseconds >= 0",
            )
            * 1e-6
        )
    if (radix, latency_s) != (switch.radix, switch.latency_s):
        switch = dataclasses.replace(switch, name=f"{switch.name}_custom", radix=radix, latency_s=latency_s)
    # a switch equal to a preset but for its name is that preset: the cost tables and the price book know it
    switch = next((sw for sw in dev.SWITCH_PRESETS.values() if sw == dataclasses.replace(switch, name=sw.name)), switch)
    label = mapping.get("name", "custom")
    if not isinstance(label, str) or not label.strip():
        raise checks.reject(f"{source}.name", label, "a non-empty string")
    return FabricPreset(
        name=label,
        description=f"{link.name} cables, {switch.name} ({switch.radix} ports), {nic.name}",
        link=link,
        switch=switch,
        nic=nic,
    )


def resolve_fabric(value: object) -> str | FabricPreset | None:
    """``value`` as ``build_system``'s ``fabric=`` takes it: None, a ``FABRICS`` name or a FabricPreset as they
    are; a table (:func:`custom_fabric`); the name of a TOML or JSON file holding such a table (at its top level
    or as its ``[fabric]`` table)."""
    if value is None or isinstance(value, FabricPreset) or (isinstance(value, str) and value in FABRICS):
        return value
    if isinstance(value, Mapping):
        return custom_fabric(value)
    if isinstance(value, (str, Path)) and is_file(value):
        text = checks.read_text("fabric", value)
        try:
            data = json.loads(text) if str(value).endswith(".json") else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ValueError(
                f"fabric: {str(value)!r} is not valid {'JSON' if str(value).endswith('.json') else 'TOML'} "
                f"({exc}); expected a table of {', '.join(FABRIC_FIELDS)}"
            ) from None
        table = data.get("fabric", data) if isinstance(data, dict) and isinstance(data.get("fabric"), dict) else data
        return custom_fabric(table, source=f"fabric: {value}")
    raise ValueError(
        f"fabric: {value!r} is not a preset; expected one of {', '.join(FABRICS)}, a table of "
        f"{', '.join(FABRIC_FIELDS)}, or a TOML/JSON file holding one"
    )
