"""Link technologies: how fast one direction of a link moves payload, and how long one traversal takes.

The maths
---------
Every link is described by four numbers and one formula::

    bandwidth_bytes_per_s = line_rate_bytes_per_s x encoding_efficiency x protocol_efficiency

* ``line_rate_bytes_per_s`` - the marketed rate of ONE direction: 400 Gb/s for an NDR port,
  25 GB/s for one NVLink4 link, 16 GT/s x 16 lanes / 8 = 32 GB/s for PCIe Gen4 x16.
* ``encoding_efficiency`` - physical-layer coding that the quoted rate does NOT already exclude
  (PCIe Gen3-5: 128b/130b; PCIe Gen6: 236 TLP bytes per 256-byte FLIT). It is 1.0 when the quoted
  rate is already a data rate (InfiniBand 4x rates, Ethernet MAC rates, NVLink GB/s figures).
* ``protocol_efficiency`` - the payload fraction once per-packet headers, trailers and framing are
  paid at the usual packet size: payload / (payload + overhead bytes).
* ``latency_s`` - one traversal of the link (serdes + propagation over a typical length).
  Switch and NIC traversals are NOT included; they live in ``devices.SwitchSpec``/``NicSpec``.

Worked number (PCIe Gen4 x16)::

    16 GT/s x 16 lanes / 8       = 32.000 GB/s   line rate
    x 128/130                    = 31.508 GB/s   after 128b/130b
    x 256 / (256 + 24)           = 28.807 GB/s   after TLP overhead at 256-byte max payload

>>> round(PCIE_GEN4_X16.bandwidth_bytes_per_s / 1e9, 3)
28.807
>>> round(IB_NDR.bandwidth_bytes_per_s / 1e9, 2)      # 400 Gb/s x 4096/(4096+26)
49.68
>>> round(NVLINK4.aggregated(18).bandwidth_bytes_per_s / 1e9, 1)   # NCCL's H100 ring ceiling
370.8

What the model captures: sustained payload rate of one direction of one link, and its fixed
traversal delay. What it ignores: link-level flow-control and ACK traffic (PCIe DLLPs, IB credit
packets), retransmissions, small-packet effects (below the MTU the header share grows), per-message
extension headers (RDMA RETH on a message's first packet), and cable-length differences (use
``dataclasses.replace(spec, latency_s=...)`` for an unusually long cable). Congestion and sharing are
the network model's job, not this module's.

Sources are cited next to each constant. Where no public figure exists the constant is labelled an
ESTIMATE together with its reasoning.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Mapping
from dataclasses import dataclass

from topologies.units import gbit_per_s, gbyte_per_s, ns

from .checks import finite, int_at_least, positive_finite, reject

__all__ = (
    "LinkKind",
    "LinkSpec",
    "LINK_PRESETS",
    "NCCL_NVLINK_BYTES_PER_S",
    "NVLINK3",
    "NVLINK4",
    "NVLINK5",
    "PCIE_GEN3_X16",
    "PCIE_GEN4_X16",
    "PCIE_GEN5_X16",
    "PCIE_GEN6_X16",
    "IB_HDR",
    "IB_NDR",
    "IB_XDR",
    "ROCE_100G",
    "ROCE_200G",
    "ROCE_400G",
    "ROCE_800G",
    "QPI_INTEL_BDW",
    "UPI_INTEL",
    "UPI_INTEL_SPR",
    "UPI_INTEL_EMR",
    "XGMI_AMD",
    "NVLINK_C2C_GB200",
    "HOST_MEMORY_STAGING",
)


class LinkKind(enum.IntEnum):
    """Technology class of a link (an int so it can live in numpy arrays on the hot path)."""

    NVLINK = 0
    PCIE = 1
    INFINIBAND = 2
    ROCE = 3
    CPU_INTERCONNECT = 4
    HOST_MEMORY = 5


# --------------------------------------------------------------------------------------------------
# Validation helpers (shared with topologies.devices): topologies.checks with the field named owner.field.
# --------------------------------------------------------------------------------------------------


def _reject(owner: str, field: str, value: object, expected: str) -> ValueError:
    return reject(f"{owner}.{field}", value, expected)


def _positive_finite(owner: str, field: str, value: object) -> float:
    return positive_finite(f"{owner}.{field}", value)


def _nonnegative_finite(owner: str, field: str, value: object) -> float:
    return finite(f"{owner}.{field}", value, low=0.0, expected="a finite number >= 0")


def _fraction(owner: str, field: str, value: object) -> float:
    return finite(f"{owner}.{field}", value, low=0.0, low_open=True, high=1.0, expected="a number in (0, 1]")


def _nonempty_name(owner: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _reject(owner, field, value, "a non-empty string")
    return value


def _int_at_least(owner: str, field: str, value: object, minimum: int) -> int:
    return int_at_least(f"{owner}.{field}", value, minimum)


# --------------------------------------------------------------------------------------------------
# LinkSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One direction of one link technology. All rates per direction, SI units.

    >>> link = LinkSpec(name="toy", kind=LinkKind.ROCE, line_rate_bytes_per_s=100.0,
    ...                 encoding_efficiency=0.5, protocol_efficiency=0.5, latency_s=1e-6)
    >>> link.bandwidth_bytes_per_s
    25.0
    >>> link.aggregated(4).line_rate_bytes_per_s, link.aggregated(4).name
    (400.0, 'toy_x4')
    """

    name: str
    kind: LinkKind
    line_rate_bytes_per_s: float
    encoding_efficiency: float
    protocol_efficiency: float
    latency_s: float

    def __post_init__(self) -> None:
        owner = "LinkSpec"
        _nonempty_name(owner, "name", self.name)
        if not isinstance(self.kind, LinkKind):
            raise _reject(owner, "kind", self.kind, f"a LinkKind ({', '.join(k.name for k in LinkKind)})")
        # Store numbers as float so every preset is homogeneous (ints are accepted on input).
        object.__setattr__(
            self, "line_rate_bytes_per_s", _positive_finite(owner, "line_rate_bytes_per_s", self.line_rate_bytes_per_s)
        )
        object.__setattr__(
            self, "encoding_efficiency", _fraction(owner, "encoding_efficiency", self.encoding_efficiency)
        )
        object.__setattr__(
            self, "protocol_efficiency", _fraction(owner, "protocol_efficiency", self.protocol_efficiency)
        )
        object.__setattr__(self, "latency_s", _nonnegative_finite(owner, "latency_s", self.latency_s))

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Effective payload rate of one direction: line x encoding x protocol."""
        return self.line_rate_bytes_per_s * self.encoding_efficiency * self.protocol_efficiency

    def aggregated(self, count: int, *, name: str | None = None) -> LinkSpec:
        """``count`` identical links bundled as one (e.g. the 18 NVLink4 links of an H100).

        The line rate is multiplied by ``count``; efficiencies, kind and latency are unchanged.
        """
        count = _int_at_least("LinkSpec.aggregated", "count", count, 1)
        new_name = f"{self.name}_x{count}" if name is None else name
        return dataclasses.replace(self, name=new_name, line_rate_bytes_per_s=self.line_rate_bytes_per_s * count)


# --------------------------------------------------------------------------------------------------
# NVLink (one link, one direction)
# --------------------------------------------------------------------------------------------------
# Line rates: one NVLink3/4 link carries 25 GB/s per direction, one NVLink5 link 50 GB/s; per GPU
# this is marketed as 600 GB/s (A100, 12 links), 900 GB/s (H100/H200, 18 links) and 1.8 TB/s
# (B200, 18 links) bidirectional - NVIDIA A100/H100 datasheets, NVIDIA NVLink product page, and
# NVIDIA dgxc-benchmarking README (Peak Theoretical Throughput: "NVLink4 900 GB/s per GPU, 18 links",
# "NVLink5 1.8 TB/s per GPU, 18 links"). 12 x 25 x 2 = 600, 18 x 25 x 2 = 900, 18 x 50 x 2 = 1800.
#
# Efficiency: the GB/s figures are already data rates, so encoding_efficiency = 1.0 and everything
# else (flit headers, CRC, link-layer control) is folded into protocol_efficiency, set from NCCL's
# own per-link effective bandwidths in src/graph/topo.h (NCCL 2.30.7): SM80_NVLINK_BW 20.0,
# SM90_NVLINK_BW 20.6, SM100_NVLINK_BW 40.1 GB/s. NVIDIA's S. Jeaugey on H100: "450GB/s is the line
# rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s"
# (github.com/NVIDIA/nccl-tests/issues/212). 18 x 20.6 = 370.8 GB/s.
# B200 is the exception: every measured ring plateau sits ~6 % under NCCL's 18 x 40.1 = 722 GB/s.
# NVLink5 takes the measured figure: 8x B200 ring all_reduce at 8 GiB, NCCL_NVLS_ENABLE=0, 682.2 GB/s
# busbw (AWS p6-b200, NCCL 2.27.7; stas00/ml-engineering network/README.md, shipped calibration
# nvls_vs_ring_gpucount_h200_b200_mleng.csv) / 18 = 37.9 GB/s per link. An independent HGX B200
# (b200_vultr_hgx_1node_2node_allcoll.csv) agrees: all_gather 672, reduce_scatter 695, alltoall
# 673, sendrecv 664 GB/s at 16 GiB.
_NVLINK34_LINE_GBPS = 25.0  # GB/s per direction per NVLink3/NVLink4 link (see above)
_NVLINK5_LINE_GBPS = 50.0  # GB/s per direction per NVLink5 link (see above)
# NCCL src/graph/topo.h (v2.30.7): SM80_NVLINK_BW, SM90_NVLINK_BW, SM100_NVLINK_BW (GB/s), by GPU generation
_NCCL_NVLINK_GBPS = types.MappingProxyType({"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1})
NCCL_NVLINK_BYTES_PER_S: Mapping[str, float] = types.MappingProxyType(
    {arch: gbyte_per_s(gbps) for arch, gbps in _NCCL_NVLINK_GBPS.items()}
)
_B200_NVLINK_GBPS = 37.9  # measured 8x B200 ring plateau / 18 links (see above)
# ESTIMATE: NVIDIA publishes no per-hop NVLink latency (ASTRA-sim maintainers: "NVLink latency
# parameters are confidential and not public", github.com/astra-sim/astra-sim/issues/59). One
# traversal = serdes/FEC at both ends (tens of ns each for 50-100 Gb/s lanes) + < 1 m of board trace
# or cable (~5 ns). We take 0.1 us. End-to-end measurements (p2pBandwidthLatencyTest ~1.8-2.3 us over
# NVLink, github.com/NVIDIA/cuda-samples/issues/230) are dominated by software, not by this term.
_NVLINK_LATENCY_S = ns(100)

NVLINK3 = LinkSpec(  # A100 (SM80)
    name="nvlink3",
    kind=LinkKind.NVLINK,
    line_rate_bytes_per_s=gbyte_per_s(_NVLINK34_LINE_GBPS),
    encoding_efficiency=1.0,
    protocol_efficiency=_NCCL_NVLINK_GBPS["ampere"] / _NVLINK34_LINE_GBPS,  # 20.0 / 25 = 0.800
    latency_s=_NVLINK_LATENCY_S,
)
NVLINK4 = LinkSpec(  # H100 / H200 (SM90)
    name="nvlink4",
    kind=LinkKind.NVLINK,
    line_rate_bytes_per_s=gbyte_per_s(_NVLINK34_LINE_GBPS),
    encoding_efficiency=1.0,
    protocol_efficiency=_NCCL_NVLINK_GBPS["hopper"] / _NVLINK34_LINE_GBPS,  # 20.6 / 25 = 0.824
    latency_s=_NVLINK_LATENCY_S,
)
NVLINK5 = LinkSpec(  # B200 (SM100)
    name="nvlink5",
    kind=LinkKind.NVLINK,
    line_rate_bytes_per_s=gbyte_per_s(_NVLINK5_LINE_GBPS),
    encoding_efficiency=1.0,
    protocol_efficiency=_B200_NVLINK_GBPS / _NVLINK5_LINE_GBPS,  # 37.9 / 50 = 0.758
    latency_s=_NVLINK_LATENCY_S,
)

# --------------------------------------------------------------------------------------------------
# PCI Express x16 (one direction)
# --------------------------------------------------------------------------------------------------
# Line rate = transfer rate per lane x 16 lanes / 8 bits (PCI-SIG: Gen3 8 GT/s, Gen4 16 GT/s,
# Gen5 32 GT/s, Gen6 64 GT/s per lane).
# Encoding, Gen3-Gen5: 128b/130b (PCIe Base Spec 3.0+ physical layer).
# Encoding, Gen6 (FLIT mode): a 256-byte FLIT carries 236 bytes of TLP data plus 6 bytes DLLP,
# 8 bytes CRC and 6 bytes FEC (PCIe Base Spec 6.0 FLIT layout) -> 236/256; there is no 128b/130b.
# Protocol: payload / (payload + TLP overhead) at a 256-byte Max Payload Size (the common MPS on GPU
# servers; lspci shows "MaxPayload 256 bytes" on A100 SXM4, e.g. github.com/open-mpi/hwloc/issues/653).
# Non-flit TLP overhead = 6 DW = 24 bytes without ECRC (Intel AN 855 "PCI Express High Performance
# Reference Design", sec. 1.1.1 Protocol Overhead): start/end framing (2 B; Gen3+ STP token carries the
# sequence number) + sequence number (2 B) + 4-DW header for 64-bit addresses (16 B) + LCRC (4 B).
# In FLIT mode the per-TLP framing, sequence number and LCRC move into the FLIT (counted above), so
# only the 16-byte header remains per TLP.
_PCIE_MPS_BYTES = 256
_PCIE_TLP_OVERHEAD_BYTES = 2 + 2 + 16 + 4  # framing + sequence + 4DW header + LCRC = 24
_PCIE_FLIT_TLP_HEADER_BYTES = 16  # 4DW header, FLIT mode (Gen6)
_PCIE_128B130B = 128.0 / 130.0
_PCIE_GEN6_FLIT_EFFICIENCY = 236.0 / 256.0
# ESTIMATE: one PCIe link traversal (TX PHY + link layer + trace + RX PHY) ~0.1 us. Reasoning: a
# cut-through PCIe switch, which has to receive and re-transmit through two such port pipelines,
# measures 105-115 ns port to port (Broadcom PEX88000/PEX89000, see devices.py), so one link end-to-end
# is of the same order; board traces (< 0.5 m at ~6-7 ns/m) add only a few ns.
_PCIE_LATENCY_S = ns(100)


def _pcie_x16(name: str, gt_per_s: float, encoding: float, tlp_overhead_bytes: int) -> LinkSpec:
    return LinkSpec(
        name=name,
        kind=LinkKind.PCIE,
        line_rate_bytes_per_s=gt_per_s * 1e9 * 16 / 8.0,
        encoding_efficiency=encoding,
        protocol_efficiency=_PCIE_MPS_BYTES / (_PCIE_MPS_BYTES + tlp_overhead_bytes),
        latency_s=_PCIE_LATENCY_S,
    )


PCIE_GEN3_X16 = _pcie_x16("pcie_gen3_x16", 8.0, _PCIE_128B130B, _PCIE_TLP_OVERHEAD_BYTES)  # 14.40 GB/s
PCIE_GEN4_X16 = _pcie_x16("pcie_gen4_x16", 16.0, _PCIE_128B130B, _PCIE_TLP_OVERHEAD_BYTES)  # 28.81 GB/s
PCIE_GEN5_X16 = _pcie_x16("pcie_gen5_x16", 32.0, _PCIE_128B130B, _PCIE_TLP_OVERHEAD_BYTES)  # 57.61 GB/s
PCIE_GEN6_X16 = _pcie_x16(  # 111.06 GB/s
    "pcie_gen6_x16", 64.0, _PCIE_GEN6_FLIT_EFFICIENCY, _PCIE_FLIT_TLP_HEADER_BYTES
)

# --------------------------------------------------------------------------------------------------
# Cables between NICs and switches (InfiniBand, RoCE): shared latency reasoning
# --------------------------------------------------------------------------------------------------
# ESTIMATE: cable + serdes latency of one traversal = typical length x propagation delay + serdes/FEC.
# Propagation: c / n with group index n ~ 1.47 for silica fibre -> 4.9 ns/m (passive copper DAC is
# similar, ~0.7 c). Typical length 10 m (in-row leaf; leaf-spine runs are longer). Serdes/FEC for
# 50-200 Gb/s PAM4 lanes: ~50 ns (estimate; RS-FEC decode dominates).
_FIBRE_PROPAGATION_S_PER_M = 1.0 / (299_792_458.0 / 1.47)  # ~4.9 ns/m
_TYPICAL_CABLE_M = 10.0
_SERDES_FEC_S = ns(50)
_CABLE_LATENCY_S = _TYPICAL_CABLE_M * _FIBRE_PROPAGATION_S_PER_M + _SERDES_FEC_S  # ~0.099 us

# --------------------------------------------------------------------------------------------------
# InfiniBand 4x ports
# --------------------------------------------------------------------------------------------------
# Line rates are the IBTA 4x DATA rates: HDR 200, NDR 400, XDR 800 Gb/s (IBTA roadmap; NVIDIA
# QM87xx/QM97xx/Q3400 user manuals). The lane signalling and its coding are already excluded from
# these figures - e.g. "HDR100 ... each lane of a 2X port runs a bit rate of 53.125Gb/s with a 64b/66b
# encoding, resulting in an effective bandwidth of 100Gb/s" (NVIDIA ConnectX-6 user manual, Features)
# - so encoding_efficiency = 1.0.
# Protocol: 4096-byte MTU payload per packet (IB MTU is a payload size) plus LRH 8 + BTH 12 + ICRC 4 +
# VCRC 2 = 26 header/CRC bytes (IBTA Architecture Specification Vol. 1, rel. 1.3, ch. 5 and 7.8; no GRH
# inside one subnet). 4096 / 4122 = 0.99369.
_IB_MTU_BYTES = 4096
_IB_HEADER_BYTES = 8 + 12 + 4 + 2  # LRH + BTH + ICRC + VCRC = 26
_IB_PROTOCOL_EFFICIENCY = _IB_MTU_BYTES / (_IB_MTU_BYTES + _IB_HEADER_BYTES)


def _network_port(name: str, kind: LinkKind, gbit: float, protocol_efficiency: float) -> LinkSpec:
    """An IB or Ethernet port: the quoted rate is already a data rate, so encoding_efficiency = 1."""
    return LinkSpec(
        name=name,
        kind=kind,
        line_rate_bytes_per_s=gbit_per_s(gbit),
        encoding_efficiency=1.0,
        protocol_efficiency=protocol_efficiency,
        latency_s=_CABLE_LATENCY_S,
    )


IB_HDR = _network_port("ib_hdr", LinkKind.INFINIBAND, 200.0, _IB_PROTOCOL_EFFICIENCY)  # 24.84 GB/s
IB_NDR = _network_port("ib_ndr", LinkKind.INFINIBAND, 400.0, _IB_PROTOCOL_EFFICIENCY)  # 49.68 GB/s; NVIDIA observes
#   46-49 GB/s per CX-7 NIC
IB_XDR = _network_port("ib_xdr", LinkKind.INFINIBAND, 800.0, _IB_PROTOCOL_EFFICIENCY)  # 99.37 GB/s

# --------------------------------------------------------------------------------------------------
# RoCEv2 over Ethernet
# --------------------------------------------------------------------------------------------------
# Line rates are the IEEE 802.3 MAC data rates (100GbE, 200GbE, 400GbE, 800GbE); PCS 64b/66b or
# 256b/257b coding and RS-FEC run above the MAC rate on the wire, so encoding_efficiency = 1.0.
# Protocol: RoCEv2 packet with a 4096-byte payload (RoCE active MTU 4096 on a jumbo-frame fabric).
# Per-packet wire overhead: preamble+SFD 8 + inter-frame gap 12 + Ethernet header 14 + FCS 4 (IEEE 802.3)
# + IPv4 20 (RFC 791) + UDP 8 (RFC 768) + IB BTH 12 + ICRC 4 (IBTA RoCEv2 annex A17) = 82 bytes.
# 4096 / 4178 = 0.98037. Ignored: an 802.1Q VLAN tag (+4 B) when PCP-based PFC is used.
_ROCE_PAYLOAD_BYTES = 4096
_ROCE_OVERHEAD_BYTES = 8 + 12 + 14 + 4 + 20 + 8 + 12 + 4  # = 82
_ROCE_PROTOCOL_EFFICIENCY = _ROCE_PAYLOAD_BYTES / (_ROCE_PAYLOAD_BYTES + _ROCE_OVERHEAD_BYTES)


ROCE_100G = _network_port("roce_100g", LinkKind.ROCE, 100.0, _ROCE_PROTOCOL_EFFICIENCY)  # 12.25 GB/s
ROCE_200G = _network_port("roce_200g", LinkKind.ROCE, 200.0, _ROCE_PROTOCOL_EFFICIENCY)  # 24.51 GB/s
ROCE_400G = _network_port("roce_400g", LinkKind.ROCE, 400.0, _ROCE_PROTOCOL_EFFICIENCY)  # 49.02 GB/s
ROCE_800G = _network_port("roce_800g", LinkKind.ROCE, 800.0, _ROCE_PROTOCOL_EFFICIENCY)  # 98.04 GB/s

# --------------------------------------------------------------------------------------------------
# CPU socket interconnects, as seen by GPU peer-to-peer traffic crossing sockets
# --------------------------------------------------------------------------------------------------
# These are NOT the marketed socket-link rates. A Skylake-SP UPI link runs at 10.4 GT/s (~20.8 GB/s per
# direction, 2-3 links per socket; Intel Xeon Scalable specifications) and later UPI / AMD xGMI links
# are faster still, but GPU peer-to-peer writes crossing sockets are forwarded by the CPU's root
# complex and coherent fabric as small transactions (NCCL: "Intel CPU convert GPU P2P traffic into 64B
# PCI TLPs"), so the achievable rate is far below the line rate. NCCL encodes the achievable figure per
# CPU family in src/graph/topo.h (NCCL 2.30.7): BDW_QPI_BW 6.0, SKL_QPI_BW 10.0, SRP_QPI_BW 22.0, ERP_QPI_BW 40.0,
# AMD_BW 16.0 GB/s, and we use it directly as the line rate with both efficiencies 1.0. (Later NCCL
# sources split AMD by Zen generation: 16 / 24 / 32 GB/s for Zen1-2 / Zen3-4 / Zen5.)
# ESTIMATE latency: crossing the socket link adds on the order of 0.1 us (a remote-socket memory access
# costs tens of ns to ~100 ns more than a local one in Intel MLC-style idle-latency measurements).
_CPU_LINK_LATENCY_S = ns(100)


def _cpu_link(name: str, nccl_gbps: float) -> LinkSpec:
    return LinkSpec(
        name=name,
        kind=LinkKind.CPU_INTERCONNECT,
        line_rate_bytes_per_s=gbyte_per_s(nccl_gbps),
        encoding_efficiency=1.0,
        protocol_efficiency=1.0,
        latency_s=_CPU_LINK_LATENCY_S,
    )


QPI_INTEL_BDW = _cpu_link("qpi_intel_bdw", 6.0)  # Broadwell and older: NCCL BDW_QPI_BW
UPI_INTEL = _cpu_link("upi_intel", 10.0)  # Skylake/Cascade Lake class: NCCL SKL_QPI_BW
UPI_INTEL_SPR = _cpu_link("upi_intel_spr", 22.0)  # Sapphire Rapids: NCCL SRP_QPI_BW
UPI_INTEL_EMR = _cpu_link("upi_intel_emr", 40.0)  # Emerald Rapids: NCCL ERP_QPI_BW
XGMI_AMD = _cpu_link("xgmi_amd", 16.0)  # AMD EPYC: NCCL AMD_BW

# NVLink-C2C of a GB200 superchip: the coherent chip-to-chip link between one Grace CPU and its two Blackwell
# GPUs, 900 GB/s bidirectional per superchip (NVIDIA GB200 NVL72 product page and datasheet, "NVLink-C2C
# 900 GB/s"). Per GPU, one direction: 900 / 2 GPUs / 2 directions = 225 GB/s (ASSUMED: an even split between
# the two GPUs; NVIDIA does not print a per-GPU figure). It is the GPU's host link on GB200 (GPU -> Grace ->
# PCIe -> NIC: NCCL's C2C path type, NCCL_NET_GDR_C2C) and joins the two Grace CPUs of a compute tray (DGX
# GB200/GB300 SuperPOD reference architecture: "NVLink-C2C bridges the two Superchips"). Its efficiency is
# unpublished and never binding here (a CX-7 NIC moves 49.7 GB/s), so both efficiencies are 1.0; latency
# as the other CPU links (ESTIMATE above).
NVLINK_C2C_GB200 = _cpu_link("nvlink_c2c_gb200", 900.0 / 2 / 2)

# --------------------------------------------------------------------------------------------------
# Host-memory staging (GPU peer traffic bounced through pinned host DRAM when PCIe P2P is off)
# --------------------------------------------------------------------------------------------------
# Modelled as the host DRAM of one socket. Conservative line rate: 8 channels of DDR4-3200, the
# smallest current server configuration (AMD EPYC Rome/Milan, Intel Ice Lake-SP); one channel moves
# 3200 MT/s x 8 bytes = 25.6 GB/s (JEDEC JESD79-4 DDR4), so 8 x 25.6 = 204.8 GB/s. Newer sockets
# (12 x DDR5-4800 and up) are faster, which makes this conservative.
# protocol_efficiency = 0.5 is exact, not a fudge: every staged byte is written into the bounce buffer
# by the sender's DMA and read out again by the receiver's DMA, so DRAM carries 2 bytes per payload byte.
# Achievable-versus-peak DRAM efficiency is not applied (documented omission).
# ESTIMATE latency: one DRAM access, ~0.1 us (idle load-to-use latency of server DRAM is ~80-100 ns in
# Intel Memory Latency Checker-style measurements). The software cost of staging (driver/NCCL SHM
# protocol) belongs to the protocol model, not to this link.
_DDR4_3200_CHANNEL_BYTES_PER_S = 3200e6 * 8
_HOST_DRAM_CHANNELS = 8

HOST_MEMORY_STAGING = LinkSpec(
    name="host_memory_staging",
    kind=LinkKind.HOST_MEMORY,
    line_rate_bytes_per_s=_HOST_DRAM_CHANNELS * _DDR4_3200_CHANNEL_BYTES_PER_S,  # 204.8 GB/s
    encoding_efficiency=1.0,
    protocol_efficiency=0.5,  # write + read
    latency_s=ns(100),
)

LINK_PRESETS: Mapping[str, LinkSpec] = types.MappingProxyType(
    {
        spec.name: spec
        for spec in (
            NVLINK3,
            NVLINK4,
            NVLINK5,
            PCIE_GEN3_X16,
            PCIE_GEN4_X16,
            PCIE_GEN5_X16,
            PCIE_GEN6_X16,
            IB_HDR,
            IB_NDR,
            IB_XDR,
            ROCE_100G,
            ROCE_200G,
            ROCE_400G,
            ROCE_800G,
            QPI_INTEL_BDW,
            UPI_INTEL,
            UPI_INTEL_SPR,
            UPI_INTEL_EMR,
            XGMI_AMD,
            NVLINK_C2C_GB200,
            HOST_MEMORY_STAGING,
        )
    }
)
"""Every link preset by its lower-case name (read-only)."""
