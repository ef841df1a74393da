"""Devices: GPUs, NICs and switches, with every constant traced to a source.

The maths
---------
A device contributes bandwidth through the links it owns and latency through its traversal time:

* GPU scale-up bandwidth, effective, one direction::

      nvlink_bandwidth_bytes_per_s = nvlink_count x link.line_rate x link.encoding x link.protocol

  H100: 18 x 25 GB/s x 1.0 x 0.824 = 370.8 GB/s - NCCL's ring ceiling on an 8x H100 node
  (S. Jeaugey, NVIDIA: "NCCL can get an effective NVLink bandwidth of 370GB/s",
  github.com/NVIDIA/nccl-tests/issues/212).
* NIC throughput, one direction: ``min(port effective, host PCIe effective)``.
  ConnectX-7 NDR: min(49.68, 57.61) = 49.68 GB/s (NVIDIA observes 46-49 GB/s per NIC in nccl-tests).
* Switch capacity, one direction: ``radix x port_rate_bytes_per_s`` (InfiniBand datasheets quote it
  bidirectionally, x2; Ethernet datasheets quote the sum of port rates): QM9700 64 x 50 GB/s =
  3.2 TB/s = 25.6 Tb/s per direction = 51.2 Tb/s bidirectional.
* A switch adds ``latency_s`` (port-to-port, cut-through) per traversal; a NIC adds ``latency_s`` on
  each side of a network transfer. Link latency is counted separately (``links.LinkSpec.latency_s``).

>>> round(H100_SXM5_80GB.nvlink_bandwidth_bytes_per_s / 1e9, 1)
370.8
>>> round(CONNECTX7_NDR.bandwidth_bytes_per_s / 1e9, 2)
49.68
>>> QUANTUM2_NDR.radix * QUANTUM2_NDR.port_rate_bytes_per_s * 2 * 8 / 1e12   # Tb/s, bidirectional
51.2

* SHARP resources of an InfiniBand switch (used by ``simulator/collectives/sharp.py``): one
  streaming-aggregation (SAT) tree's reduced stream runs through a switch at up to
  ``sharp_aggregation_bytes_per_s`` (None: the port rate, SAT being designed to reduce at
  point-to-point bandwidth); a switch holds at most ``sharp_max_trees`` trees, a port carries at most
  ``sharp_max_trees_per_port`` of them and an aggregation node holds at most ``sharp_max_jobs``
  SHARP jobs (None: no such limit). A switch's total aggregation throughput is therefore at most
  ``sharp_max_trees x sharp_aggregation_bytes_per_s``: Quantum HDR 1 x 25 GB/s.
  SHARP aggregation-manager default quota: a SAT job takes 3 % of an aggregation node: 100 // 3 = 33 jobs.

>>> QUANTUM_HDR.sharp_max_trees, QUANTUM2_NDR.sharp_max_trees_per_port, QUANTUM2_NDR.sharp_max_jobs
(1, 1, 33)
>>> QUANTUM2_NDR.sharp_aggregation_rate_bytes_per_s == QUANTUM2_NDR.port_rate_bytes_per_s
True

What is ignored here: clock throttling (FLOP/s are datasheet peaks), HBM efficiency (bandwidth is
the datasheet peak), NIC message-rate limits, switch buffer sizes, SHARP low-latency (LLT) trees
and the per-operation SHARP buffers (OSTs) - only the streaming trees NCCL's CollNet holds are counted.

Memory capacities use NVIDIA's marketed figure read as binary GiB, which matches what the driver
reports to within ~1 % (A100 80GB: 81920 MiB = 80 GiB; H200: 143771 MiB vs 141 GiB =
144384 MiB, github.com/NVIDIA/cuda-samples/issues/311; B200: 178.35 GiB reported vs 180 GiB,
github.com/pytorch/ao/pull/4002).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass

from topologies.links import (
    IB_HDR,
    IB_NDR,
    IB_XDR,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    NVLINK_C2C_GB200,
    PCIE_GEN4_X16,
    PCIE_GEN5_X16,
    PCIE_GEN6_X16,
    ROCE_100G,
    ROCE_200G,
    ROCE_400G,
    ROCE_800G,
    LinkKind,
    LinkSpec,
    _fraction,
    _int_at_least,
    _nonempty_name,
    _nonnegative_finite,
    _positive_finite,
    _reject,
)
from topologies.units import GiB, gbyte_per_s, ns, tflop_per_s

from .checks import finite, flag, integer, is_int

__all__ = (
    "GpuSpec",
    "NicSpec",
    "SwitchSpec",
    "GPU_ARCH_SM_VERSIONS",
    "SWITCH_KINDS",
    "GPU_PRESETS",
    "NIC_PRESETS",
    "SWITCH_PRESETS",
    "A100_SXM4_80GB",
    "H100_SXM5_80GB",
    "H200_SXM",
    "B200",
    "GB200",
    "RTX_4090",
    "L40S",
    "CONNECTX6_HDR",
    "CONNECTX7_NDR",
    "CONNECTX8_XDR",
    "CONNECTX6DX_100G",
    "CONNECTX6DX_200G",
    "CONNECTX7_400GBE",
    "CONNECTX8_800GBE",
    "NVSWITCH_GEN2",
    "NVSWITCH_GEN3",
    "NVSWITCH_GEN4",
    "PCIE_SWITCH_GEN4",
    "PCIE_SWITCH_GEN5",
    "QUANTUM_HDR",
    "QUANTUM2_NDR",
    "QUANTUM_X800_XDR",
    "SPECTRUM_4",
    "SPECTRUM_4_400G",
    "TOMAHAWK_4",
    "TOMAHAWK_4_200G",
    "TOMAHAWK_4_100G",
)

GPU_ARCH_SM_VERSIONS: Mapping[str, tuple[int, ...]] = types.MappingProxyType(
    {
        # CUDA compute capabilities x 10 (NVIDIA CUDA C++ Programming Guide, compute capabilities table).
        "ampere": (80, 86, 87),
        "ada": (89,),
        "hopper": (90,),
        "blackwell": (100, 103, 120, 121),
    }
)
"""Allowed ``GpuSpec.sm_version`` values per ``GpuSpec.arch``."""

SWITCH_KINDS: tuple[str, ...] = ("nvswitch", "pcie", "infiniband", "ethernet")
_IN_NETWORK_REDUCTION_KINDS = ("nvswitch", "infiniband")  # NVLink SHARP (NVLS) and IB SHARP


# --------------------------------------------------------------------------------------------------
# GpuSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """A GPU as the network sees it: its links, memory and peak math rate.

    ``hbm_bandwidth_bytes_per_s`` is the device-memory bandwidth (HBM or GDDR). ``nvlink`` is ONE
    NVLink link (``None`` for PCIe-only GPUs) and ``nvlink_count`` how many of them the GPU has. ``pcie`` is the
    GPU's host link: PCIe, or NVLink-C2C to its Grace CPU on a Grace-Blackwell superchip.
    """

    name: str
    arch: str
    sm_version: int
    nvlink: LinkSpec | None
    nvlink_count: int
    pcie: LinkSpec
    hbm_bandwidth_bytes_per_s: float
    memory_bytes: int
    dense_bf16_flop_per_s: float
    dense_fp8_flop_per_s: float | None

    def __post_init__(self) -> None:
        owner = "GpuSpec"
        _nonempty_name(owner, "name", self.name)
        if self.arch not in GPU_ARCH_SM_VERSIONS:
            raise _reject(owner, "arch", self.arch, f"one of {', '.join(map(repr, GPU_ARCH_SM_VERSIONS))}")
        allowed_sm = GPU_ARCH_SM_VERSIONS[self.arch]
        if not is_int(self.sm_version) or self.sm_version not in allowed_sm:
            raise _reject(owner, "sm_version", self.sm_version, f"one of {allowed_sm} for arch {self.arch!r}")
        # integers are stored as Python ints (numpy integers are accepted)
        object.__setattr__(self, "sm_version", int(self.sm_version))
        object.__setattr__(self, "nvlink_count", _int_at_least(owner, "nvlink_count", self.nvlink_count, 0))
        if self.nvlink is not None:
            if not isinstance(self.nvlink, LinkSpec) or self.nvlink.kind is not LinkKind.NVLINK:
                raise _reject(owner, "nvlink", self.nvlink, "None or a LinkSpec of kind NVLINK")
            if self.nvlink_count == 0:
                raise _reject(
                    owner, "nvlink_count", self.nvlink_count, f"an integer >= 1 because nvlink is {self.nvlink.name!r}"
                )
        elif self.nvlink_count != 0:
            raise _reject(owner, "nvlink_count", self.nvlink_count, "0 because nvlink is None")
        if not isinstance(self.pcie, LinkSpec) or self.pcie.kind not in (LinkKind.PCIE, LinkKind.CPU_INTERCONNECT):
            raise _reject(owner, "pcie", self.pcie, "a LinkSpec of kind PCIE (or CPU_INTERCONNECT: NVLink-C2C)")
        object.__setattr__(
            self,
            "hbm_bandwidth_bytes_per_s",
            _positive_finite(owner, "hbm_bandwidth_bytes_per_s", self.hbm_bandwidth_bytes_per_s),
        )
        object.__setattr__(self, "memory_bytes", _int_at_least(owner, "memory_bytes", self.memory_bytes, 1))
        object.__setattr__(
            self, "dense_bf16_flop_per_s", _positive_finite(owner, "dense_bf16_flop_per_s", self.dense_bf16_flop_per_s)
        )
        if self.dense_fp8_flop_per_s is not None:
            fp8 = finite(
                f"{owner}.dense_fp8_flop_per_s",
                self.dense_fp8_flop_per_s,
                low=0.0,
                low_open=True,
                expected="None or a finite number > 0",
            )
            object.__setattr__(self, "dense_fp8_flop_per_s", fp8)

    @property
    def nvlink_bandwidth_bytes_per_s(self) -> float:
        """Effective NVLink bandwidth of all links, one direction (0.0 for PCIe-only GPUs)."""
        if self.nvlink is None:
            return 0.0
        return self.nvlink.bandwidth_bytes_per_s * self.nvlink_count


# --------------------------------------------------------------------------------------------------
# NicSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class NicSpec:
    """A network adapter: its network port, its host PCIe link, and its one-side traversal latency."""

    name: str
    port: LinkSpec
    pcie: LinkSpec
    latency_s: float
    # Most one NCCL network connection (one channel's QP) streams; inf = only the port limits it.
    connection_bytes_per_s: float = float("inf")

    def __post_init__(self) -> None:
        owner = "NicSpec"
        rate = self.connection_bytes_per_s
        if not (isinstance(rate, float) and rate == math.inf):  # inf: only the port limits a connection
            # checked, not stored: the value is kept as given
            finite(
                f"{owner}.connection_bytes_per_s", rate, low=0.0, low_open=True, expected="a number > 0 (inf allowed)"
            )
        _nonempty_name(owner, "name", self.name)
        if not isinstance(self.port, LinkSpec) or self.port.kind not in (LinkKind.INFINIBAND, LinkKind.ROCE):
            raise _reject(owner, "port", self.port, "a LinkSpec of kind INFINIBAND or ROCE")
        if not isinstance(self.pcie, LinkSpec) or self.pcie.kind is not LinkKind.PCIE:
            raise _reject(owner, "pcie", self.pcie, "a LinkSpec of kind PCIE")
        object.__setattr__(self, "latency_s", _nonnegative_finite(owner, "latency_s", self.latency_s))

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Throughput ceiling of the adapter, one direction: the slower of its port and its PCIe link."""
        return min(self.port.bandwidth_bytes_per_s, self.pcie.bandwidth_bytes_per_s)


# --------------------------------------------------------------------------------------------------
# SwitchSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchSpec:
    """A switch ASIC/system: ``radix`` ports at ``port_rate_bytes_per_s`` (line rate, one direction)."""

    name: str
    kind: str
    radix: int
    port_rate_bytes_per_s: float
    latency_s: float
    sharp: bool = False
    # Fraction of a port's bandwidth that in-network reduction / multicast traffic sustains
    # (SHARP aggregation; NVLS multimem operations: NCCL's nvlsEfficiency, a fraction of NCCL's NVLink
    # figure ``links.NCCL_NVLINK_BYTES_PER_S``); 1.0 for switches without it.
    reduction_efficiency: float = 1.0
    # SHARP resources of an InfiniBand switch (read only when ``sharp`` is True; module docstring).
    # Reduced stream of ONE aggregation tree through this switch, bytes/s; None = the port rate.
    sharp_aggregation_bytes_per_s: float | None = None
    sharp_max_trees: int | None = None  # streaming-aggregation trees held at once; None = no limit
    sharp_max_trees_per_port: int | None = None  # trees one port may carry at once; None = no limit
    sharp_max_jobs: int | None = None  # SHARP jobs an aggregation node holds at once; None = no limit

    def __post_init__(self) -> None:
        owner = "SwitchSpec"
        _nonempty_name(owner, "name", self.name)
        if self.kind not in SWITCH_KINDS:
            raise _reject(owner, "kind", self.kind, f"one of {', '.join(map(repr, SWITCH_KINDS))}")
        _int_at_least(owner, "radix", self.radix, 2)
        object.__setattr__(
            self, "port_rate_bytes_per_s", _positive_finite(owner, "port_rate_bytes_per_s", self.port_rate_bytes_per_s)
        )
        object.__setattr__(self, "latency_s", _nonnegative_finite(owner, "latency_s", self.latency_s))
        object.__setattr__(self, "sharp", flag(f"{owner}.sharp", self.sharp))
        # checked, not stored: the value is kept as given
        _fraction(owner, "reduction_efficiency", self.reduction_efficiency)
        if self.sharp and self.kind not in _IN_NETWORK_REDUCTION_KINDS:
            raise _reject(
                owner,
                "sharp",
                self.sharp,
                f"False for kind {self.kind!r} (in-network reduction exists only on "
                f"{' and '.join(_IN_NETWORK_REDUCTION_KINDS)} switches)",
            )
        if self.sharp_aggregation_bytes_per_s is not None:
            object.__setattr__(
                self,
                "sharp_aggregation_bytes_per_s",
                _positive_finite(owner, "sharp_aggregation_bytes_per_s", self.sharp_aggregation_bytes_per_s),
            )
        for name in ("sharp_max_trees", "sharp_max_trees_per_port", "sharp_max_jobs"):
            value = getattr(self, name)
            if value is not None:
                limit = integer(f"{owner}.{name}", value, low=1, expected="None (no limit) or an integer >= 1")
                object.__setattr__(self, name, limit)

    @property
    def capacity_bytes_per_s(self) -> float:
        """Switching capacity, one direction: radix x port rate."""
        return self.radix * self.port_rate_bytes_per_s

    @property
    def sharp_aggregation_rate_bytes_per_s(self) -> float:
        """Most one SHARP aggregation tree's reduced stream runs at through this switch."""
        if self.sharp_aggregation_bytes_per_s is None:
            return self.port_rate_bytes_per_s
        return self.sharp_aggregation_bytes_per_s


# ==================================================================================================
# GPU presets
# ==================================================================================================
# Peak dense (non-sparse) tensor rates. Datasheets print sparse figures with an asterisk; dense = half.

A100_SXM4_80GB = GpuSpec(
    name="a100_sxm4_80gb",
    arch="ampere",
    sm_version=80,  # CUDA compute capability 8.0
    nvlink=NVLINK3,
    nvlink_count=12,  # NVIDIA A100 datasheet: NVLink 600 GB/s = 12 x 50 GB/s bidir.
    pcie=PCIE_GEN4_X16,  # NVIDIA A100 datasheet: PCIe Gen4 64 GB/s (32 + 32)
    hbm_bandwidth_bytes_per_s=gbyte_per_s(2039),  # NVIDIA A100 datasheet, 80GB SXM: 2,039 GB/s HBM2e
    memory_bytes=80 * GiB,  # NVIDIA A100 datasheet: 80GB HBM2e (5 x 16 GiB stacks)
    dense_bf16_flop_per_s=tflop_per_s(312),  # NVIDIA A100 datasheet BF16 312 (624 sparse); Megatron SC21 sec 5
    dense_fp8_flop_per_s=None,  # Ampere has no FP8 tensor cores
)
H100_SXM5_80GB = GpuSpec(
    name="h100_sxm5_80gb",
    arch="hopper",
    sm_version=90,
    nvlink=NVLINK4,
    nvlink_count=18,  # NVIDIA dgxc-benchmarking README:
    #   "NVLink4 900 GB/s per GPU, 18 links"
    pcie=PCIE_GEN5_X16,  # NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (64 + 64)
    hbm_bandwidth_bytes_per_s=gbyte_per_s(3350),  # NVIDIA H100 datasheet, SXM: 3.35 TB/s HBM3
    memory_bytes=80 * GiB,  # NVIDIA H100 datasheet: 80GB
    dense_bf16_flop_per_s=tflop_per_s(989),  # NVIDIA dgxc-benchmarking README (MFU peak); datasheet 1,979 sparse
    dense_fp8_flop_per_s=tflop_per_s(1979),  # NVIDIA dgxc-benchmarking README; datasheet 3,958 sparse
)
H200_SXM = GpuSpec(
    name="h200_sxm",
    arch="hopper",
    sm_version=90,
    nvlink=NVLINK4,
    nvlink_count=18,  # NVIDIA H200 datasheet: NVLink 900 GB/s (same NVLink4 as H100)
    pcie=PCIE_GEN5_X16,  # NVIDIA H200 datasheet: PCIe Gen5 128 GB/s; MLPerf inference v4.1
    #   NVIDIA H200-SXM-141GBx8 system json: "PCIe Gen5 x16"
    hbm_bandwidth_bytes_per_s=gbyte_per_s(4800),  # NVIDIA H200 datasheet: 4.8 TB/s HBM3e
    memory_bytes=141 * GiB,  # NVIDIA H200 datasheet: 141GB HBM3e
    dense_bf16_flop_per_s=tflop_per_s(989),  # same GH100 compute as H100 (H200 datasheet: 1,979 sparse)
    dense_fp8_flop_per_s=tflop_per_s(1979),  # H200 datasheet: 3,958 sparse
)
B200 = GpuSpec(
    name="b200",
    arch="blackwell",
    sm_version=100,
    nvlink=NVLINK5,
    nvlink_count=18,  # NVIDIA dgxc-benchmarking README:
    #   "NVLink5 1.8 TB/s per GPU, 18 links"
    pcie=PCIE_GEN5_X16,  # Host link as deployed in HGX/DGX B200: the x86 hosts
    #   (e.g. Xeon 8570) stop at Gen5, so the link trains at Gen5 x16
    #   even though the Blackwell GPU itself advertises Gen6.
    hbm_bandwidth_bytes_per_s=gbyte_per_s(7700),  # NVIDIA dgxc-benchmarking README: 7.7 TB/s (7680-bit bus x 3996 MHz
    #   x 2 = 7.67 TB/s, github.com/pytorch/ao/pull/4002);
    #   marketed 8 TB/s
    memory_bytes=180 * GiB,  # NVIDIA dgxc-benchmarking README / DGX B200 datasheet:
    #   180 GB per GPU
    dense_bf16_flop_per_s=tflop_per_s(2250),  # NVIDIA dgxc-benchmarking README (HGX B200, 1000 W)
    dense_fp8_flop_per_s=tflop_per_s(4500),  # NVIDIA dgxc-benchmarking README
)
GB200 = GpuSpec(  # the Blackwell GPU of a GB200 superchip (GB200 NVL72); same die as B200, 1200 W instead of 1000 W
    name="gb200",
    arch="blackwell",
    sm_version=100,
    nvlink=NVLINK5,
    nvlink_count=18,  # NVIDIA GB200 NVL72 / DGX SuperPOD GB200 RA: 18 NVLink5 links per GPU, one to each of the
    #   rack's 18 NVLink Switch chips, 1.8 TB/s per GPU (dgxc-benchmarking README: "NVLink5 1.8 TB/s per GPU (NVL72)")
    pcie=NVLINK_C2C_GB200,  # host link: NVLink-C2C to its Grace CPU (GB200 datasheet: 900 GB/s per superchip)
    hbm_bandwidth_bytes_per_s=gbyte_per_s(8000),  # NVIDIA dgxc-benchmarking README, GB200: "186 GB HBM3e; 8 TB/s"
    memory_bytes=186 * GiB,  # same source: 186 GB HBM3e per GPU
    dense_bf16_flop_per_s=tflop_per_s(2450),  # NVIDIA dgxc-benchmarking README (MFU peak), GB200 at 1200 W
    #   (HGX B200 at 1000 W: 2250)
    dense_fp8_flop_per_s=tflop_per_s(4900),  # NVIDIA dgxc-benchmarking README (MFU peak), GB200 (B200: 4500)
)
RTX_4090 = GpuSpec(
    name="rtx_4090",
    arch="ada",
    sm_version=89,
    nvlink=None,  # GeForce RTX 40 series has no NVLink
    nvlink_count=0,
    pcie=PCIE_GEN4_X16,  # NVIDIA Ada GPU architecture whitepaper: PCIe Gen4 x16
    hbm_bandwidth_bytes_per_s=gbyte_per_s(1008),  # Ada whitepaper, RTX 4090: 384-bit GDDR6X at 21 Gbps = 1008 GB/s
    memory_bytes=24 * GiB,  # Ada whitepaper, RTX 4090: 24 GB GDDR6X
    dense_bf16_flop_per_s=tflop_per_s(165.2),  # Ada whitepaper appendix, RTX 4090: BF16 tensor, FP32 accumulate,
    #   165.2 dense / 330.4 sparse (training uses FP32 accumulate)
    dense_fp8_flop_per_s=tflop_per_s(330.3),  # Ada whitepaper appendix, RTX 4090: FP8 tensor, FP32 accumulate,
    #   330.3 dense (660.6 with FP16 accumulate)
)
L40S = GpuSpec(
    name="l40s",
    arch="ada",
    sm_version=89,
    nvlink=None,  # NVIDIA L40S datasheet: no NVLink
    nvlink_count=0,
    pcie=PCIE_GEN4_X16,  # NVIDIA L40S datasheet: PCIe Gen4 x16, 64 GB/s bidirectional
    hbm_bandwidth_bytes_per_s=gbyte_per_s(864),  # NVIDIA L40S datasheet: 864 GB/s GDDR6
    memory_bytes=48 * GiB,  # NVIDIA L40S datasheet: 48 GB GDDR6 with ECC
    dense_bf16_flop_per_s=tflop_per_s(362.05),  # NVIDIA L40S datasheet: BF16 tensor 362.05 (733 sparse; the
    #   datasheet's own sparse/dense pair is 1.2 % inconsistent)
    dense_fp8_flop_per_s=tflop_per_s(733),  # NVIDIA L40S datasheet: FP8 tensor 733 (1,466 sparse)
)

# ==================================================================================================
# NIC presets
# ==================================================================================================
# Latency: NVIDIA ConnectX-6 VPI (InfiniBand) user manual, Introduction: "sub-600ns latency";
# ConnectX-6 EN (Ethernet) product brief: "sub 0.8usec latency". Read as one adapter's traversal
# (an upper bound). ESTIMATE for ConnectX-6 Dx, -7 and -8: no per-adapter latency is published in
# their manuals, so each reuses the ConnectX-6 figure of its protocol (same pipeline class).
_CX_IB_LATENCY_S = ns(600)
_CX_ETH_LATENCY_S = ns(800)

# Throughput of one NCCL network connection (a channel's send/receive pair over one QP), from
# measurements: 8 nodes of 8x H100 with 8x NDR each reach 320.7 GB/s ring all_reduce busbw with
# NCCL's 16 default channels, 16 x 20.0 GB/s, well under the 8 x 49.7 GB/s the NICs carry, and
# 391 GB/s (NIC-bound) once NCCL_MIN_CTAS=24 and 2 QPs per connection add streams (nccl-tests
# issue 309); the same ~20 GB/s shows on another system as 19.6 GB/s for one sendrecv connection
# and 308/16 = 19.3 GB/s per ring channel (2x HGX B200, NDR). The limit is the per-connection
# pipeline (proxy thread, NCCL_STEPS slots in flight), not the port, so it is the same figure for
# every ConnectX generation here (an assumption for HDR/XDR and Ethernet, where no table shows it).
_NCCL_CONNECTION_BYTES_PER_S = 20.0e9

CONNECTX6_HDR = NicSpec(
    name="connectx6_hdr",
    port=IB_HDR,  # ConnectX-6 VPI user manual: HDR 200 Gb/s
    pcie=PCIE_GEN4_X16,  # ConnectX-6 user manual: "up to 200GbE in a PCIe Gen 4.0 slot" (x16)
    latency_s=_CX_IB_LATENCY_S,  # ConnectX-6 VPI user manual: sub-600 ns
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX7_NDR = NicSpec(
    name="connectx7_ndr",
    port=IB_NDR,  # ConnectX-7 user manual: single-port OSFP NDR 400 Gb/s
    pcie=PCIE_GEN5_X16,  # ConnectX-7 user manual: PCIe Gen 5.0 x16
    latency_s=_CX_IB_LATENCY_S,  # ESTIMATE (ConnectX-6 figure reused, see above)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX8_XDR = NicSpec(
    name="connectx8_xdr",
    port=IB_XDR,  # NVIDIA Quantum-X800 platform: ConnectX-8 SuperNIC, 800 Gb/s end to end
    pcie=PCIE_GEN6_X16,  # ConnectX-8 SuperNIC: PCIe Gen6 host interface
    #   (Gen5 x16 = 57.6 GB/s could not feed 800G)
    latency_s=_CX_IB_LATENCY_S,  # ESTIMATE (ConnectX-6 figure reused, see above)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX6DX_100G = NicSpec(
    name="connectx6dx_100g",
    port=ROCE_100G,  # ConnectX-6 Dx user manual: 10/25/40/50/100 Gb/s Ethernet
    pcie=PCIE_GEN4_X16,  # ConnectX-6 Dx user manual: PCIe Gen 3.0/4.0 x16
    latency_s=_CX_ETH_LATENCY_S,  # ESTIMATE (ConnectX-6 EN "sub 0.8 usec" reused)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX6DX_200G = NicSpec(
    name="connectx6dx_200g",
    port=ROCE_200G,  # ConnectX-6 Dx user manual: single-port 200GbE OPNs
    pcie=PCIE_GEN4_X16,  # ConnectX-6 Dx user manual: PCIe Gen 3.0/4.0 x16
    latency_s=_CX_ETH_LATENCY_S,  # ESTIMATE (ConnectX-6 EN "sub 0.8 usec" reused)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX7_400GBE = NicSpec(
    name="connectx7_400gbe",
    port=ROCE_400G,  # ConnectX-7 user manual: single-port OSFP 400GbE
    pcie=PCIE_GEN5_X16,  # ConnectX-7 user manual: PCIe Gen 5.0 x16
    latency_s=_CX_ETH_LATENCY_S,  # ESTIMATE (ConnectX-6 EN "sub 0.8 usec" reused)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)
CONNECTX8_800GBE = NicSpec(
    name="connectx8_800gbe",
    port=ROCE_800G,  # ConnectX-8 SuperNIC: 800 Gb/s Ethernet (Spectrum-X)
    pcie=PCIE_GEN6_X16,  # ConnectX-8 SuperNIC: PCIe Gen6
    latency_s=_CX_ETH_LATENCY_S,  # ESTIMATE (ConnectX-6 EN "sub 0.8 usec" reused)
    connection_bytes_per_s=_NCCL_CONNECTION_BYTES_PER_S,
)

# ==================================================================================================
# Switch presets
# ==================================================================================================
# port_rate_bytes_per_s is the line rate of the port's link preset, so a switch and the cables
# plugged into it always agree.
#
# NVSwitch latency - ESTIMATE: NVIDIA publishes no port-to-port figure for any NVSwitch generation.
# We take the published cut-through latency of NVIDIA's InfiniBand switch ASIC of the same era
# (Quantum HDR, 130 ns, below) as the order of magnitude for a single-chip crossbar.
_NVSWITCH_LATENCY_S = ns(130)

NVSWITCH_GEN2 = SwitchSpec(  # HGX/DGX A100 (6 chips per board)
    name="nvswitch_gen2",
    kind="nvswitch",
    radix=36,  # NVIDIA A100 architecture whitepaper, NVSwitch section: 36 NVLink3 ports per chip
    port_rate_bytes_per_s=NVLINK3.line_rate_bytes_per_s,  # one port = one NVLink3 link, 25 GB/s per direction
    latency_s=_NVSWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=False,  # NVLink SHARP arrived with third-generation NVSwitch (Hopper)
)
NVSWITCH_GEN3 = SwitchSpec(  # HGX/DGX H100 and H200 (4 chips per board)
    name="nvswitch_gen3",
    kind="nvswitch",
    radix=64,  # NVIDIA Hopper architecture in-depth (third-gen NVSwitch: 64 NVLink4 ports)
    port_rate_bytes_per_s=NVLINK4.line_rate_bytes_per_s,  # 25 GB/s per direction per port
    latency_s=_NVSWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=True,  # NVLS: ~480 GB/s all_reduce busbw on 8x H100
    #   (nccl-tests issue 212, NCCL issue 2140)
    reduction_efficiency=0.85,  # NCCL nvlsEfficiency[Hopper] (src/graph/tuning.cc, 2.28+)
)
NVSWITCH_GEN4 = SwitchSpec(  # HGX/DGX B200 (2 chips per board), GB200 NVL72 (18 chips)
    name="nvswitch_gen4",
    kind="nvswitch",
    radix=72,  # GB200 NVL72: 72 GPUs x 18 NVLink5 links over 18 NVLink Switch chips
    #   = 72 ports/chip (HGX B200: 8 x 18 = 144 links over 2 chips = 72 ports/chip)
    port_rate_bytes_per_s=NVLINK5.line_rate_bytes_per_s,  # 50 GB/s per direction per port
    latency_s=_NVSWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=True,  # NVIDIA NVLink/NVLink Switch page: SHARP engines in each NVLink Switch
    reduction_efficiency=0.74,  # NCCL nvlsEfficiency[Blackwell] (src/graph/tuning.cc, 2.28+)
)
PCIE_SWITCH_GEN4 = SwitchSpec(  # Broadcom PEX88096 class (4 per DGX A100)
    name="pcie_switch_gen4",
    kind="pcie",
    radix=6,  # PEX88096: 96 Gen4 lanes = 6 x16 ports (Linley Group newsletter, 2019-09-24)
    port_rate_bytes_per_s=PCIE_GEN4_X16.line_rate_bytes_per_s,
    latency_s=ns(105),  # Broadcom claim, PEX88000: 105 ns cut-through between x16 ports
    #   (Linley, 2019-09-24)
)
PCIE_SWITCH_GEN5 = SwitchSpec(  # Broadcom PEX89144 class
    name="pcie_switch_gen5",
    kind="pcie",
    radix=9,  # PEX89144: 144 Gen5 lanes = 9 x16 ports (Broadcom PEX89000 family product brief)
    port_rate_bytes_per_s=PCIE_GEN5_X16.line_rate_bytes_per_s,
    latency_s=ns(115),  # Broadcom PEX89000 product brief (as quoted in secondary spec pages): 115 ns
)
# SHARP jobs one aggregation node holds: the aggregation manager gives each streaming (SAT) job 3 % of an
# aggregation node's quota (OSTs, buffers, groups) per tree by default (sharp_am per_prio_default_sat_quota = 3,
# NVIDIA SHARP Rev 3.0.0 release notes), so 100 // 3 = 33 SAT jobs fit. NCCL's SHARP plugin opens one job per
# communicator and NIC (nccl-rdma-sharp-plugins sharp_plugin.c: every collective connection calls
# sharp_coll_init with its own job id), locked at communicator init (SHARP_COLL_LOCK_ON_COMM_INIT=1).
_SHARP_AM_MAX_SAT_JOBS = 100 // 3

QUANTUM_HDR = SwitchSpec(  # NVIDIA (Mellanox) Quantum QM8700 / QM8790
    name="quantum_hdr",
    kind="infiniband",
    radix=40,  # QM87xx user manual: 40 QSFP56 ports at HDR 200 Gb/s (16 Tb/s bidirectional)
    port_rate_bytes_per_s=IB_HDR.line_rate_bytes_per_s,
    latency_s=ns(130),  # QM8700 product brief / QM87xx user manual Introduction: 130 ns port to port
    sharp=True,  # Quantum firmware release notes: SHARP (LLT/SAT) GA on Quantum
    # SHARPv2. Aggregation rate: port rate (None) - Graham et al., "SHARP Streaming-Aggregation Hardware
    #   Design and Evaluation", ISC 2020: SAT is designed to reduce at point-to-point bandwidth; MPI_Allreduce
    #   reaches ~95 % of HDR network bandwidth.
    sharp_max_trees=1,  # NVIDIA SHARP docs (Rev 3.13 General Information): "The number of SHARP
    #   streaming aggregation operations is limited to one active tree per switch"
    #   (SHARP 2.6.1: 2 simultaneous flows only with a support-enabled setting)
    sharp_max_trees_per_port=1,  # implied by one tree per switch
    sharp_max_jobs=_SHARP_AM_MAX_SAT_JOBS,
)
QUANTUM2_NDR = SwitchSpec(  # NVIDIA Quantum-2 QM9700 / QM9790
    name="quantum2_ndr",
    kind="infiniband",
    radix=64,  # QM97xx user manual: 32 OSFP cages x 2 NDR ports = 64 x 400 Gb/s
    #   (51.2 Tb/s bidir.)
    port_rate_bytes_per_s=IB_NDR.line_rate_bytes_per_s,
    latency_s=ns(200),  # ESTIMATE: NVIDIA publishes no Quantum-2 port-to-port figure; secondary sources
    #   quote <150 ns to ~330 ns; Quantum HDR is 130 ns. 0.2 us sits inside that range.
    sharp=True,  # SHARPv3 (NVIDIA SHARP 3.x docs: Quantum-2 supported)
    # Aggregation rate: port rate (None), as Quantum (no Quantum-2 figure is published).
    sharp_max_trees=None,  # NVIDIA SHARP docs (Rev 3.13 General Information): "Multiple SHARP streaming
    #   aggregation operations can be operated in parallel by a single Quantum-2
    #   switch. The limit is one active tree per port." - no switch-wide limit
    sharp_max_trees_per_port=1,  # same source
    sharp_max_jobs=_SHARP_AM_MAX_SAT_JOBS,
)
QUANTUM_X800_XDR = SwitchSpec(  # NVIDIA Quantum-X800 Q3400
    name="quantum_x800_xdr",
    kind="infiniband",
    radix=144,  # Q3400: 144 ports at 800 Gb/s
    #   (NVIDIA Quantum-X800 platform; Q32xx/Q34xx user manual)
    port_rate_bytes_per_s=IB_XDR.line_rate_bytes_per_s,
    latency_s=ns(200),  # ESTIMATE: no published figure; same reasoning as Quantum-2
    sharp=True,  # Quantum-X800: SHARPv4
    # ESTIMATE: NVIDIA's SHARP docs list SAT limits only for Quantum and Quantum-2; Quantum-2's are reused.
    sharp_max_trees=None,
    sharp_max_trees_per_port=1,
    sharp_max_jobs=_SHARP_AM_MAX_SAT_JOBS,
)
# Ethernet switch latency - ESTIMATE: neither NVIDIA (Spectrum-4) nor Broadcom (Tomahawk 4) publish a
# port-to-port figure. Tomahawk/Trident-class cut-through forwarding is quoted around 450 ns for
# 100GbE ports; 400/800G PAM4 ports add RS(544,514) FEC decode (~100 ns). We take 0.6 us.
_ETHERNET_SWITCH_LATENCY_S = ns(600)

SPECTRUM_4 = SwitchSpec(  # NVIDIA Spectrum-4 SN5600 (Spectrum-X), native 800G ports
    name="spectrum_4",
    kind="ethernet",
    radix=64,  # NVIDIA SN5000 user manual: SN5600 64 x 800GbE (100 Gb/s per lane), 51.2 Tb/s
    port_rate_bytes_per_s=ROCE_800G.line_rate_bytes_per_s,
    latency_s=_ETHERNET_SWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=False,  # no in-network reduction on Spectrum Ethernet
)
SPECTRUM_4_400G = SwitchSpec(  # same ASIC, every 800G port split 2 x 400G (Spectrum-X with 400G SuperNICs)
    name="spectrum_4_400g",
    kind="ethernet",
    radix=128,  # NVIDIA SN5000 user manual: SN5600 128 x 400GbE in breakout mode
    port_rate_bytes_per_s=ROCE_400G.line_rate_bytes_per_s,
    latency_s=_ETHERNET_SWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=False,
)
TOMAHAWK_4 = SwitchSpec(  # Broadcom BCM56990 class, 25.6 Tb/s (e.g. ByteDance MegaScale ToR/spine)
    name="tomahawk_4",
    kind="ethernet",
    radix=64,  # Broadcom Tomahawk 4: 64 x 400GbE
    #   (Linley Group newsletter 2019-12-17; MegaScale sec 3.6)
    port_rate_bytes_per_s=ROCE_400G.line_rate_bytes_per_s,
    latency_s=_ETHERNET_SWITCH_LATENCY_S,  # ESTIMATE (see above)
    sharp=False,
)


def _split_ports(asic: SwitchSpec, port: LinkSpec, name: str) -> SwitchSpec:
    """``asic`` with each port split into lower-rate ones: same switching capacity, radix x (rate / port rate)."""
    radix = round(asic.radix * asic.port_rate_bytes_per_s / port.line_rate_bytes_per_s)
    return dataclasses.replace(asic, name=name, radix=radix, port_rate_bytes_per_s=port.line_rate_bytes_per_s)


# Broadcom BCM56990: up to 128 x 200GbE or 256 x 100GbE (Linley Group newsletter 2019-12-17)
TOMAHAWK_4_200G = _split_ports(TOMAHAWK_4, ROCE_200G, "tomahawk_4_200g")  # 200GbE RoCE fabrics
TOMAHAWK_4_100G = _split_ports(TOMAHAWK_4, ROCE_100G, "tomahawk_4_100g")  # 100GbE RoCE fabrics

# ==================================================================================================
# Preset mappings (read-only), keyed by lower-case name
# ==================================================================================================

GPU_PRESETS: Mapping[str, GpuSpec] = types.MappingProxyType(
    {g.name: g for g in (A100_SXM4_80GB, H100_SXM5_80GB, H200_SXM, B200, GB200, RTX_4090, L40S)}
)
NIC_PRESETS: Mapping[str, NicSpec] = types.MappingProxyType(
    {
        n.name: n
        for n in (
            CONNECTX6_HDR,
            CONNECTX7_NDR,
            CONNECTX8_XDR,
            CONNECTX6DX_100G,
            CONNECTX6DX_200G,
            CONNECTX7_400GBE,
            CONNECTX8_800GBE,
        )
    }
)
SWITCH_PRESETS: Mapping[str, SwitchSpec] = types.MappingProxyType(
    {
        s.name: s
        for s in (
            NVSWITCH_GEN2,
            NVSWITCH_GEN3,
            NVSWITCH_GEN4,
            PCIE_SWITCH_GEN4,
            PCIE_SWITCH_GEN5,
            QUANTUM_HDR,
            QUANTUM2_NDR,
            QUANTUM_X800_XDR,
            SPECTRUM_4,
            SPECTRUM_4_400G,
            TOMAHAWK_4,
            TOMAHAWK_4_200G,
            TOMAHAWK_4_100G,
        )
    }
)
