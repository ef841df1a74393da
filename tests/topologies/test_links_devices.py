"""Tests for topologies.links and topologies.devices: invariants, hand-derived numbers, validation."""

from __future__ import annotations

import dataclasses
import math
import re
import types

import pytest

from topologies import devices, links
from topologies.devices import (
    GPU_PRESETS,
    NIC_PRESETS,
    SWITCH_PRESETS,
    GpuSpec,
    NicSpec,
    SwitchSpec,
)
from topologies.links import LINK_PRESETS, LinkKind, LinkSpec

GB = 1e9


def _module_presets(module, cls):
    return {name: value for name, value in vars(module).items() if isinstance(value, cls) and name.isupper()}


def _link(**overrides) -> LinkSpec:
    fields = dict(
        name="toy",
        kind=LinkKind.INFINIBAND,
        line_rate_bytes_per_s=50e9,
        encoding_efficiency=1.0,
        protocol_efficiency=0.99,
        latency_s=1e-7,
    )
    fields.update(overrides)
    return LinkSpec(**fields)


def _gpu(**overrides) -> GpuSpec:
    fields = {f.name: getattr(devices.H100_SXM5_80GB, f.name) for f in dataclasses.fields(GpuSpec)}
    fields.update(overrides)
    return GpuSpec(**fields)


# ------------------------------------------------------------------------------------------------
# Invariants over every preset
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", list(LINK_PRESETS.values()), ids=list(LINK_PRESETS))
def test_link_bandwidth_is_line_times_encoding_times_protocol(spec):
    expected = spec.line_rate_bytes_per_s * spec.encoding_efficiency * spec.protocol_efficiency
    assert spec.bandwidth_bytes_per_s == pytest.approx(expected, rel=1e-12)
    assert 0 < spec.bandwidth_bytes_per_s <= spec.line_rate_bytes_per_s
    assert isinstance(spec.kind, LinkKind)
    assert math.isfinite(spec.latency_s) and spec.latency_s >= 0


@pytest.mark.parametrize("spec", list(GPU_PRESETS.values()), ids=list(GPU_PRESETS))
def test_gpu_nvlink_bandwidth_is_count_times_link(spec):
    if spec.nvlink is None:
        assert spec.nvlink_count == 0
        assert spec.nvlink_bandwidth_bytes_per_s == 0.0
    else:
        link = spec.nvlink
        expected = spec.nvlink_count * link.line_rate_bytes_per_s * link.encoding_efficiency * link.protocol_efficiency
        assert spec.nvlink_bandwidth_bytes_per_s == pytest.approx(expected, rel=1e-12)
        # the same number through the bundling helper
        assert link.aggregated(spec.nvlink_count).bandwidth_bytes_per_s == pytest.approx(expected, rel=1e-12)
    # the host link: PCIe, or NVLink-C2C to the Grace CPU on a Grace-Blackwell superchip
    assert spec.pcie.kind is (LinkKind.CPU_INTERCONNECT if spec.name == "gb200" else LinkKind.PCIE)


@pytest.mark.parametrize("spec", list(NIC_PRESETS.values()), ids=list(NIC_PRESETS))
def test_nic_bandwidth_is_min_of_port_and_pcie(spec):
    assert spec.bandwidth_bytes_per_s == min(spec.port.bandwidth_bytes_per_s, spec.pcie.bandwidth_bytes_per_s)
    # every preset NIC sits in a slot fast enough for its port (otherwise it is a mis-configured preset)
    assert spec.pcie.bandwidth_bytes_per_s >= spec.port.bandwidth_bytes_per_s


@pytest.mark.parametrize("spec", list(SWITCH_PRESETS.values()), ids=list(SWITCH_PRESETS))
def test_switch_capacity_and_port_rate_match_a_link_preset(spec):
    assert spec.capacity_bytes_per_s == spec.radix * spec.port_rate_bytes_per_s
    # the port rate of every switch preset is the line rate of some link preset (switch and cable agree)
    assert spec.port_rate_bytes_per_s in {link.line_rate_bytes_per_s for link in LINK_PRESETS.values()}


@pytest.mark.parametrize(
    ("module", "cls", "mapping"),
    [
        (links, LinkSpec, LINK_PRESETS),
        (devices, GpuSpec, GPU_PRESETS),
        (devices, NicSpec, NIC_PRESETS),
        (devices, SwitchSpec, SWITCH_PRESETS),
    ],
)
def test_every_preset_is_reachable_from_its_read_only_mapping(module, cls, mapping):
    assert isinstance(mapping, types.MappingProxyType)
    presets = _module_presets(module, cls)
    assert presets, "no presets found"
    assert {id(v) for v in presets.values()} == {id(v) for v in mapping.values()}
    for key, spec in mapping.items():
        assert key == spec.name == key.lower()
        assert getattr(module, key.upper()) is spec
    with pytest.raises(TypeError):
        mapping["new"] = next(iter(mapping.values()))  # type: ignore[index]


def test_every_module_preset_is_listed_in_all():
    for module, classes in ((links, (LinkSpec,)), (devices, (GpuSpec, NicSpec, SwitchSpec))):
        for cls in classes:
            for name in _module_presets(module, cls):
                assert name in module.__all__


# ------------------------------------------------------------------------------------------------
# Hand-derived numbers
# ------------------------------------------------------------------------------------------------


def test_nvlink4_x18_is_nccls_h100_ring_ceiling():
    # 18 links x 25 GB/s x (20.6 / 25) = 18 x 20.6 = 370.8 GB/s: NCCL's effective NVLink bandwidth on
    # H100 (Jeaugey, nccl-tests #212: "450GB/s is the line rate ... 370GB/s"), and the measured ring
    # busbw ceiling (~360-370 GB/s) on 8x H100.
    assert devices.H100_SXM5_80GB.nvlink_bandwidth_bytes_per_s == pytest.approx(370.8 * GB)
    assert links.NVLINK4.aggregated(18).line_rate_bytes_per_s == pytest.approx(450 * GB)  # 900 GB/s bidirectional
    # A100: 12 x 20.0 = 240 GB/s; B200: 18 x 37.9 = 682.2 GB/s (the measured ring plateau, not NCCL's 40.1)
    assert devices.A100_SXM4_80GB.nvlink_bandwidth_bytes_per_s == pytest.approx(240.0 * GB)
    assert devices.B200.nvlink_bandwidth_bytes_per_s == pytest.approx(682.2 * GB)
    # protocol efficiencies: NCCL topo.h figures / line rate; NVLink5 the measured 37.9 / 50
    assert links.NVLINK3.protocol_efficiency == pytest.approx(0.800)
    assert links.NVLINK4.protocol_efficiency == pytest.approx(0.824)
    assert links.NVLINK5.protocol_efficiency == pytest.approx(0.758)
    # NVLink3/4 run at NCCL's own per-link figures (topo.h); B200's measured NVLink5 is below NCCL's
    assert links.NVLINK3.bandwidth_bytes_per_s == pytest.approx(links.NCCL_NVLINK_BYTES_PER_S["ampere"], rel=1e-12)
    assert links.NVLINK4.bandwidth_bytes_per_s == pytest.approx(links.NCCL_NVLINK_BYTES_PER_S["hopper"], rel=1e-12)
    assert links.NVLINK5.bandwidth_bytes_per_s < links.NCCL_NVLINK_BYTES_PER_S["blackwell"]
    # NVSwitch reduction efficiencies are NCCL's nvlsEfficiency (a fraction of NCCL's NVLink figure;
    # that NVLS on B200 keeps NCCL's throughput is checked in tests/simulator/test_collectives.py)
    assert devices.NVSWITCH_GEN3.reduction_efficiency == 0.85
    assert devices.NVSWITCH_GEN4.reduction_efficiency == 0.74


def test_pcie_gen4_x16_numbers():
    # line = 16 GT/s x 16 lanes / 8 = 32 GB/s; after 128b/130b = 31.508 GB/s ("31.5 GB/s")
    link = links.PCIE_GEN4_X16
    assert link.line_rate_bytes_per_s == pytest.approx(32.0 * GB)
    assert link.line_rate_bytes_per_s * link.encoding_efficiency == pytest.approx(31.5077 * GB, rel=1e-4)
    # TLP: 256 B payload per 256 + 24 B (framing 2 + sequence 2 + 4DW header 16 + LCRC 4) -> 28.807 GB/s
    assert link.protocol_efficiency == pytest.approx(256 / 280)
    assert link.bandwidth_bytes_per_s == pytest.approx(28.807 * GB, rel=1e-4)
    # each generation doubles the line rate up to Gen5; Gen6 doubles it again but pays FLIT overhead
    assert links.PCIE_GEN5_X16.bandwidth_bytes_per_s == pytest.approx(2 * link.bandwidth_bytes_per_s)
    assert links.PCIE_GEN3_X16.bandwidth_bytes_per_s == pytest.approx(link.bandwidth_bytes_per_s / 2)
    # Gen6: 128 GB/s x 236/256 x 256/272 = 111.06 GB/s
    assert links.PCIE_GEN6_X16.bandwidth_bytes_per_s == pytest.approx(111.059 * GB, rel=1e-4)
    # NCCL's PCI_BW (12 GB/s for Gen3 x16) is below our Gen3 figure of 14.4 GB/s - NCCL is conservative
    assert links.PCIE_GEN3_X16.bandwidth_bytes_per_s > 12.0 * GB


def test_infiniband_port_bandwidths():
    # NDR: 400 Gb/s = 50 GB/s x 4096/(4096 + 26) = 49.68 GB/s. NVIDIA observes 46-48 (up to 48-49) GB/s
    # per CX-7 NIC in nccl-tests (#290, #267): the port figure must sit just above that, the remainder
    # being NIC/PCIe-side losses, so it lies between 48 and 50 GB/s.
    ndr = links.IB_NDR.bandwidth_bytes_per_s
    assert 48 * GB < ndr < 50 * GB
    assert ndr == pytest.approx(49.685 * GB, rel=1e-4)
    assert links.IB_HDR.bandwidth_bytes_per_s == pytest.approx(ndr / 2)
    assert links.IB_XDR.bandwidth_bytes_per_s == pytest.approx(ndr * 2)
    # DGX A100 2 nodes x 8 HDR: 188.5 GB/s all_reduce busbw measured ("94.27% of theoretical"). Our
    # 8 x 24.84 = 198.7 GB/s ceiling must be above the measurement and within ~10 % of it.
    eight_hdr = 8 * devices.CONNECTX6_HDR.bandwidth_bytes_per_s
    assert 188.5 * GB < eight_hdr < 188.5 * GB / 0.9


def test_roce_protocol_overhead():
    # 4096 B payload + 82 B (preamble/SFD 8, IFG 12, Eth 14, FCS 4, IPv4 20, UDP 8, BTH 12, ICRC 4)
    assert links.ROCE_400G.protocol_efficiency == pytest.approx(4096 / 4178)
    assert links.ROCE_400G.bandwidth_bytes_per_s == pytest.approx(50 * GB * 4096 / 4178)
    # RoCE pays more per packet than native IB at the same MTU
    assert links.ROCE_400G.bandwidth_bytes_per_s < links.IB_NDR.bandwidth_bytes_per_s


def test_cpu_links_and_host_staging():
    # NCCL topo.h achievable P2P figures used directly: SKL 10, SRP 22, ERP 40, AMD 16 GB/s
    assert links.UPI_INTEL.bandwidth_bytes_per_s == pytest.approx(10 * GB)
    assert links.UPI_INTEL_SPR.bandwidth_bytes_per_s == pytest.approx(22 * GB)
    assert links.UPI_INTEL_EMR.bandwidth_bytes_per_s == pytest.approx(40 * GB)
    assert links.XGMI_AMD.bandwidth_bytes_per_s == pytest.approx(16 * GB)
    # 8 x DDR4-3200 = 8 x 25.6 = 204.8 GB/s; each staged byte written + read -> 102.4 GB/s of payload
    assert links.HOST_MEMORY_STAGING.line_rate_bytes_per_s == pytest.approx(204.8 * GB)
    assert links.HOST_MEMORY_STAGING.bandwidth_bytes_per_s == pytest.approx(102.4 * GB)
    assert links.HOST_MEMORY_STAGING.kind is LinkKind.HOST_MEMORY


def test_gpu_datasheet_numbers():
    assert devices.H100_SXM5_80GB.dense_bf16_flop_per_s == pytest.approx(989e12)
    assert devices.A100_SXM4_80GB.dense_bf16_flop_per_s == pytest.approx(312e12)
    assert devices.B200.dense_bf16_flop_per_s == pytest.approx(2250e12)
    assert devices.A100_SXM4_80GB.dense_fp8_flop_per_s is None
    # FP8 is twice BF16 on every FP8-capable preset (datasheet ratios). 2 % slack: the L40S datasheet
    # itself prints BF16 362.05 dense but 733 sparse and FP8 733 dense (733 / 724.1 = 1.012).
    for gpu in GPU_PRESETS.values():
        if gpu.dense_fp8_flop_per_s is not None:
            assert gpu.dense_fp8_flop_per_s == pytest.approx(2 * gpu.dense_bf16_flop_per_s, rel=0.02)
    # H200 = H100 compute, more and faster memory
    assert devices.H200_SXM.dense_bf16_flop_per_s == devices.H100_SXM5_80GB.dense_bf16_flop_per_s
    assert devices.H200_SXM.hbm_bandwidth_bytes_per_s > devices.H100_SXM5_80GB.hbm_bandwidth_bytes_per_s
    # marketed GB read as GiB: A100 80GB = 81920 MiB as reported by nvidia-smi
    assert devices.A100_SXM4_80GB.memory_bytes == 81920 * 1024**2
    # PCIe-only GPUs
    assert devices.RTX_4090.nvlink is None and devices.L40S.nvlink is None


def test_switch_datasheet_capacities():
    tbit = 1e12 / 8  # bytes/s per Tb/s
    # InfiniBand datasheets quote bidirectional capacity: 2 x radix x port rate
    assert 2 * devices.QUANTUM_HDR.capacity_bytes_per_s == pytest.approx(16.0 * tbit)  # QM8700 16 Tb/s
    assert 2 * devices.QUANTUM2_NDR.capacity_bytes_per_s == pytest.approx(51.2 * tbit)  # QM9700 51.2 Tb/s
    # Ethernet (and the Q3400 figure) quote the sum of port rates
    assert devices.QUANTUM_X800_XDR.capacity_bytes_per_s == pytest.approx(115.2 * tbit)  # 144 x 800G
    assert devices.SPECTRUM_4.capacity_bytes_per_s == pytest.approx(51.2 * tbit)  # 64 x 800G
    assert devices.SPECTRUM_4_400G.capacity_bytes_per_s == pytest.approx(51.2 * tbit)  # 128 x 400G
    assert devices.TOMAHAWK_4.capacity_bytes_per_s == pytest.approx(25.6 * tbit)  # 64 x 400G
    # an HGX H100 has 4 NVSwitch gen3 chips and uses 8 x 18 = 144 of their 4 x 64 ports
    assert 8 * devices.H100_SXM5_80GB.nvlink_count <= 4 * devices.NVSWITCH_GEN3.radix
    # an HGX B200 has 2 NVSwitch gen4 chips: 8 x 18 = 144 = 2 x 72 ports
    assert 8 * devices.B200.nvlink_count == 2 * devices.NVSWITCH_GEN4.radix
    # in-network reduction only where it exists
    assert devices.NVSWITCH_GEN3.sharp and devices.QUANTUM2_NDR.sharp
    assert not devices.NVSWITCH_GEN2.sharp and not devices.SPECTRUM_4.sharp and not devices.TOMAHAWK_4.sharp


def test_latency_ordering_is_physical():
    # a cut-through switch hop is below a NIC traversal; Ethernet switches are slower than IB ones
    assert devices.QUANTUM_HDR.latency_s < devices.CONNECTX6_HDR.latency_s
    assert devices.QUANTUM2_NDR.latency_s < devices.SPECTRUM_4.latency_s
    for spec in list(LINK_PRESETS.values()) + list(NIC_PRESETS.values()) + list(SWITCH_PRESETS.values()):
        assert 0 <= spec.latency_s < 1e-6, spec.name


# ------------------------------------------------------------------------------------------------
# aggregated()
# ------------------------------------------------------------------------------------------------


def test_aggregated_multiplies_line_rate_and_keeps_the_rest():
    base = links.NVLINK4
    bundle = base.aggregated(18)
    assert bundle.line_rate_bytes_per_s == pytest.approx(18 * base.line_rate_bytes_per_s)
    assert bundle.bandwidth_bytes_per_s == pytest.approx(18 * base.bandwidth_bytes_per_s)
    assert bundle.encoding_efficiency == base.encoding_efficiency
    assert bundle.protocol_efficiency == base.protocol_efficiency
    assert bundle.latency_s == base.latency_s
    assert bundle.kind is base.kind
    assert bundle.name == "nvlink4_x18"
    assert base.aggregated(2, name="pair").name == "pair"
    assert base.aggregated(1) == base.aggregated(1)  # value semantics
    assert base.line_rate_bytes_per_s == pytest.approx(25 * GB)  # the preset itself is untouched


@pytest.mark.parametrize("count", [0, -3, 2.5, True, "4"])
def test_aggregated_rejects_bad_counts(count):
    with pytest.raises(ValueError, match="count"):
        links.NVLINK4.aggregated(count)


# ------------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------------


def test_link_error_message_names_field_value_and_rule():
    with pytest.raises(ValueError) as info:
        _link(line_rate_bytes_per_s=-1.0)
    assert str(info.value) == ("LinkSpec.line_rate_bytes_per_s: -1.0 is not allowed; expected a finite number > 0")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", ""),
        ("name", "   "),
        ("name", None),
        ("kind", 2),
        ("kind", "INFINIBAND"),
        ("line_rate_bytes_per_s", -1.0),
        ("line_rate_bytes_per_s", 0),
        ("line_rate_bytes_per_s", float("inf")),
        ("line_rate_bytes_per_s", float("nan")),
        ("line_rate_bytes_per_s", True),
        ("line_rate_bytes_per_s", "50e9"),
        ("encoding_efficiency", 0.0),
        ("encoding_efficiency", 1.01),
        ("protocol_efficiency", -0.5),
        ("protocol_efficiency", float("nan")),
        ("latency_s", -1e-9),
        ("latency_s", float("inf")),
    ],
)
def test_link_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        _link(**{field: value})


def test_link_accepts_boundaries_and_coerces_to_float():
    spec = _link(line_rate_bytes_per_s=10, encoding_efficiency=1, protocol_efficiency=1, latency_s=0)
    assert isinstance(spec.line_rate_bytes_per_s, float) and spec.latency_s == 0.0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(name=""), "name"),
        (dict(arch="volta"), "arch"),
        (dict(sm_version=80), "sm_version"),  # 80 is not a Hopper SM
        (dict(nvlink_count=0), "nvlink_count"),  # nvlink given but no links
        (dict(nvlink=None), "nvlink_count"),  # no nvlink but 18 links
        (dict(nvlink=links.PCIE_GEN5_X16), "nvlink"),  # wrong kind
        (dict(nvlink_count=-1), "nvlink_count"),
        (dict(pcie=links.NVLINK4), "pcie"),
        (dict(hbm_bandwidth_bytes_per_s=0.0), "hbm_bandwidth_bytes_per_s"),
        (dict(memory_bytes=0), "memory_bytes"),
        (dict(memory_bytes=80e9), "memory_bytes"),  # must be an int
        (dict(dense_bf16_flop_per_s=-1.0), "dense_bf16_flop_per_s"),
        (dict(dense_fp8_flop_per_s=0.0), "dense_fp8_flop_per_s"),
        (dict(dense_fp8_flop_per_s="fast"), "dense_fp8_flop_per_s"),
    ],
)
def test_gpu_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _gpu(**overrides)


def test_gpu_without_nvlink_is_valid():
    gpu = _gpu(name="pcie_h100", nvlink=None, nvlink_count=0, dense_fp8_flop_per_s=None)
    assert gpu.nvlink_bandwidth_bytes_per_s == 0.0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(name=""), "name"),
        (dict(port=links.PCIE_GEN5_X16), "port"),
        (dict(port=links.NVLINK4), "port"),
        (dict(pcie=links.IB_NDR), "pcie"),
        (dict(latency_s=-1e-9), "latency_s"),
        (dict(latency_s=float("nan")), "latency_s"),
    ],
)
def test_nic_validation_names_the_field(overrides, field):
    fields = dict(name="nic", port=links.IB_NDR, pcie=links.PCIE_GEN5_X16, latency_s=6e-7)
    fields.update(overrides)
    with pytest.raises(ValueError, match=field):
        NicSpec(**fields)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(name=""), "name"),
        (dict(kind="token-ring"), "kind"),
        (dict(radix=1), "radix"),
        (dict(radix=64.0), "radix"),
        (dict(port_rate_bytes_per_s=0), "port_rate_bytes_per_s"),
        (dict(latency_s=-1.0), "latency_s"),
        (dict(sharp=1), "sharp"),
        (dict(kind="ethernet", sharp=True), "sharp"),
        (dict(kind="pcie", sharp=True), "sharp"),
    ],
)
def test_switch_validation_names_the_field(overrides, field):
    fields = dict(name="sw", kind="infiniband", radix=64, port_rate_bytes_per_s=50e9, latency_s=2e-7, sharp=True)
    fields.update(overrides)
    with pytest.raises(ValueError, match=field):
        SwitchSpec(**fields)


@pytest.mark.parametrize(
    ("overrides", "field", "allowed"),
    [
        (dict(sharp_aggregation_bytes_per_s=0), "sharp_aggregation_bytes_per_s", "a finite number > 0"),
        (dict(sharp_aggregation_bytes_per_s=-1e9), "sharp_aggregation_bytes_per_s", "a finite number > 0"),
        (dict(sharp_aggregation_bytes_per_s=float("inf")), "sharp_aggregation_bytes_per_s", "a finite number > 0"),
        (dict(sharp_aggregation_bytes_per_s=float("nan")), "sharp_aggregation_bytes_per_s", "a finite number > 0"),
        (dict(sharp_aggregation_bytes_per_s="50e9"), "sharp_aggregation_bytes_per_s", "a finite number > 0"),
        (dict(sharp_max_trees=0), "sharp_max_trees", "None \\(no limit\\) or an integer >= 1"),
        (dict(sharp_max_trees=1.5), "sharp_max_trees", "an integer >= 1"),
        (dict(sharp_max_trees=True), "sharp_max_trees", "an integer >= 1"),
        (dict(sharp_max_trees_per_port=-1), "sharp_max_trees_per_port", "an integer >= 1"),
        (dict(sharp_max_jobs=0), "sharp_max_jobs", "an integer >= 1"),
        (dict(sharp_max_jobs="33"), "sharp_max_jobs", "an integer >= 1"),
    ],
)
def test_switch_sharp_limits_validation_names_field_value_and_allowed(overrides, field, allowed):
    fields = dict(name="sw", kind="infiniband", radix=64, port_rate_bytes_per_s=50e9, latency_s=2e-7, sharp=True)
    fields.update(overrides)
    value = next(iter(overrides.values()))
    with pytest.raises(
        ValueError, match=f"SwitchSpec.{field}: {re.escape(repr(value))} is not allowed; expected .*{allowed}"
    ):
        SwitchSpec(**fields)


def test_switch_sharp_limits_defaults_and_presets():
    # defaults: no limit, and the aggregation engine runs one tree at the port rate
    plain = SwitchSpec(name="sw", kind="infiniband", radix=64, port_rate_bytes_per_s=50e9, latency_s=2e-7, sharp=True)
    assert (plain.sharp_max_trees, plain.sharp_max_trees_per_port, plain.sharp_max_jobs) == (None, None, None)
    assert plain.sharp_aggregation_bytes_per_s is None and plain.sharp_aggregation_rate_bytes_per_s == 50e9
    assert dataclasses.replace(plain, sharp_aggregation_bytes_per_s=1e9).sharp_aggregation_rate_bytes_per_s == 1e9
    # a stated rate follows no later port-rate change; an unstated one does
    assert dataclasses.replace(plain, port_rate_bytes_per_s=25e9).sharp_aggregation_rate_bytes_per_s == 25e9
    # SHARP docs: Quantum holds one streaming tree per switch, Quantum-2 one per port (no switch-wide limit);
    # aggregation manager quota 3 % per SAT job -> 100 // 3 = 33 jobs per aggregation node
    assert (devices.QUANTUM_HDR.sharp_max_trees, devices.QUANTUM_HDR.sharp_max_trees_per_port) == (1, 1)
    assert (devices.QUANTUM2_NDR.sharp_max_trees, devices.QUANTUM2_NDR.sharp_max_trees_per_port) == (None, 1)
    for spec in (devices.QUANTUM_HDR, devices.QUANTUM2_NDR, devices.QUANTUM_X800_XDR):
        assert spec.sharp_max_jobs == 33
        assert spec.sharp_aggregation_rate_bytes_per_s == spec.port_rate_bytes_per_s
    # HDR: one tree at 200 Gb/s = 25 GB/s is the whole switch's aggregation throughput
    assert devices.QUANTUM_HDR.sharp_max_trees * devices.QUANTUM_HDR.sharp_aggregation_rate_bytes_per_s == 25e9
    # every preset still builds and validates (limits are None or >= 1)
    for spec in SWITCH_PRESETS.values():
        assert dataclasses.replace(spec) == spec
        for name in ("sharp_max_trees", "sharp_max_trees_per_port", "sharp_max_jobs"):
            assert getattr(spec, name) is None or getattr(spec, name) >= 1


# ------------------------------------------------------------------------------------------------
# Immutability
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        (links.IB_NDR, "line_rate_bytes_per_s", 1.0),
        (links.NVLINK4, "protocol_efficiency", 1.0),
        (devices.H100_SXM5_80GB, "nvlink_count", 1),
        (devices.CONNECTX7_NDR, "latency_s", 0.0),
        (devices.QUANTUM2_NDR, "radix", 2),
    ],
)
def test_presets_are_frozen(spec, field, value):
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(spec, field, value)
    assert not hasattr(spec, "__dict__")  # slots: no per-instance attribute dict


def test_specs_are_hashable_values():
    assert hash(links.IB_NDR) == hash(dataclasses.replace(links.IB_NDR))
    assert dataclasses.replace(links.IB_NDR) == links.IB_NDR
    assert len({*LINK_PRESETS.values()}) == len(LINK_PRESETS)
