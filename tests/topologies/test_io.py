"""Importers (topologies.io): real `nvidia-smi topo -m` outputs and an NCCL topology dump (tests/topologies/data,
each with its source in its first lines) parse, map to the servers they describe, and refuse bad input in one
line naming the field and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from topologies import devices as dev
from topologies import links as lk
from topologies.io import (
    custom_fabric,
    gpu_preset,
    import_system,
    parse_topo_matrix,
    resolve_fabric,
    resolve_system,
    server_from_nccl_xml,
)
from topologies.node import PcieLayout, ServerSpec, dgx_h100
from topologies.presets import FABRICS, SYSTEMS, build_system

DATA = Path(__file__).parent / "data"
H100 = DATA / "dgx_h100_topo.txt"
A100 = DATA / "dgx_a100_topo.txt"
RTX = DATA / "pcie_rtx4090_topo.txt"
VM = DATA / "lambda_4xh100_vm_topo.txt"
XML = DATA / "a100_roce_nccl_topo.xml"


def test_parse_dgx_h100_matrix():
    m = parse_topo_matrix(H100.read_text())
    # 8 GPU columns and 12 NIC columns (NIC0..NIC11, legend mlx5_0..mlx5_11)
    assert len(m.gpus) == 8 and len(m.nics) == 12
    assert m.nic_names["NIC11"] == "mlx5_11" and m.name(9) == "NIC1 (mlx5_1)"
    assert m.cells[0][1] == "NV18" and m.cells[0][8] == "PXB" and m.cells[9][10] == "PIX"
    assert m.numa_affinity == ("0",) * 4 + ("1",) * 4
    assert m.cpu_affinity[4] == "56-111,168-223"


def test_parse_space_aligned_matrix():
    m = parse_topo_matrix(A100.read_text())
    assert len(m.gpus) == 8 and len(m.nics) == 10
    assert m.numa_affinity == ("3", "3", "1", "1", "7", "7", "5", "5")


def test_dgx_h100_maps_to_the_preset_server_with_a_switch_per_gpu():
    spec = import_system(H100, gpu="h100").server()
    preset = dgx_h100()
    # GPU i is PXB to one NIC only (NIC0, 3, 4, 5, 6, 9, 10, 11) and NODE to the rest: 8 PCIe switches of one GPU
    # and one NIC, four per NUMA node; NIC1/2 and NIC7/8 (PIX pairs, NODE to every GPU) are storage ports
    assert (spec.gpus, spec.nics, spec.pcie_switches, spec.sockets) == (8, 8, 8, 2)
    assert spec.layout is None  # the even spread places every device as the file says
    same = ("gpu", "nvswitch", "nic", "pcie_switch", "pcie_uplink", "socket_link", "host_memory", "cpu_vendor", "p2p")
    assert all(getattr(spec, f) == getattr(preset, f) for f in same)
    system = import_system(H100, gpu="h100")
    assert system.fabric_link == lk.IB_NDR and system.switch == dev.QUANTUM2_NDR
    assert "NIC1 (mlx5_1), NIC2 (mlx5_2), NIC7 (mlx5_7), NIC8 (mlx5_8)" in system.description


def test_dgx_h100_import_builds_like_the_preset():
    imported = build_system(import_system(H100, gpu="h100"), nodes=2)
    preset = build_system("dgx-h100", nodes=2)
    assert imported.num_gpus == preset.num_gpus == 16
    # same rails: GPU i uses NIC i; 4 more PCIe switches (8 against 4 per server), each with its uplink
    assert imported.servers[0].nic_of_gpu == preset.servers[0].nic_of_gpu == tuple(range(8))
    assert imported.num_links - preset.num_links == 2 * 4 * 2  # 2 servers x 4 switches x 2 directions


def test_dgx_a100_nps4_gives_four_sockets():
    spec = import_system(A100, gpu="a100").server()
    # NUMA nodes 3, 1, 7, 5 each hold one PCIe switch of 2 GPUs + 2 NICs; NIC8/9 are SYS to every GPU
    assert (spec.gpus, spec.nics, spec.pcie_switches, spec.sockets) == (8, 8, 4, 4)
    assert spec.gpu.nvlink_count == 12 and spec.nvswitch == dev.NVSWITCH_GEN2 and spec.cpu_vendor == "amd"


def test_cloud_vm_with_four_gpus_and_a_nic_behind_the_host_bridge():
    system = import_system(VM, gpu="h100")
    spec = system.server()
    # NV18 between all 4 GPUs: NVSwitch; the one NIC is PHB to every GPU (no PIX/PXB): a compute NIC on a root port
    # of the one NUMA node (0), as are the GPUs (no PIX/PXB partner): no PCIe switch, the even root-port spread
    assert (spec.gpus, spec.nics, spec.pcie_switches, spec.sockets, spec.layout) == (4, 1, 0, 1, None)
    assert spec.nvswitch == dev.NVSWITCH_GEN3 and spec.nic == dev.CONNECTX7_NDR
    topo = build_system(system, nodes=2)
    assert topo.servers[0].nic_of_gpu == (0, 0, 0, 0)  # every GPU sends through the one NIC


def test_pcie_box_with_a_nic_behind_the_host_bridge():
    system = import_system(RTX, gpu="rtx4090", fabric="roce-100g")
    spec = system.server()
    # every GPU pair is SYS: no NVLink, every GPU on a root port of its NUMA node (0 for GPU0-3, 1 for GPU4-7);
    # the two NIC ports are PIX to each other (one switch) and PHB to GPU6 (socket 1); none is PIX/PXB to a GPU,
    # so both are compute NICs
    assert spec.gpu.nvlink is None and spec.nvswitch is None and spec.p2p is False
    assert spec.layout == PcieLayout(
        switch_sockets=(1,),
        gpu_switches=(-1,) * 8,
        gpu_sockets=(0,) * 4 + (1,) * 4,
        nic_switches=(0, 0),
        nic_sockets=(1, 1),
    )
    assert spec.nic == dev.CONNECTX6DX_100G
    topo = build_system(system, nodes=2)
    assert topo.num_gpus == 16


def test_nccl_xml_maps_switches_nics_and_host():
    system = server_from_nccl_xml(XML.read_text(), source=str(XML))
    spec = system.server()
    # sm 80 names the A100; 6 NVSwitch targets x 2 links; four top-level bridges each hold 2 GPUs and one bonded
    # 200G Ethernet NIC (class 0x020000: RoCE); mlx5_bond_0 sits on a root port and is left out
    assert spec.gpu.name == "a100_sxm4_80gb" and spec.gpu.nvlink_count == 12
    assert (spec.gpus, spec.nics, spec.pcie_switches, spec.sockets, spec.layout) == (8, 4, 4, 2, None)
    assert spec.nic == dev.CONNECTX6DX_200G and (system.fabric_link, system.switch) == tuple(FABRICS["roce-200g"])[:2]
    # Intel family 6 model 106 (0x6a, Ice Lake) is Skylake class for NCCL (>= 0x55, < 0x8f): 10 GB/s
    assert spec.socket_link == lk.UPI_INTEL and spec.cpu_vendor == "intel"
    assert spec.gpu.pcie == lk.PCIE_GEN4_X16 and spec.pcie_uplink == lk.PCIE_GEN4_X16  # "16 GT/s", x16
    assert "mlx5_bond_0" in system.description


def _xml(gpu_inner: str, *, width: str = "16", speed: str = "32.0 GT/s PCIe", vendor: str = "GenuineIntel") -> str:
    return (
        f'<system version="1"><cpu numaid="0" vendor="{vendor}" familyid="6" modelid="143">'
        f'<pci busid="0000:01:00.0" class="0x060400" link_speed="{speed}" link_width="16">'
        f'<pci busid="0000:02:00.0" class="0x030200" link_speed="{speed}" link_width="{width}">'
        f'<gpu dev="0" sm="90" rank="0" gdr="1">{gpu_inner}</gpu></pci>'
        f'<pci busid="0000:03:00.0" class="0x020700" link_speed="{speed}" link_width="16"><nic>'
        '<net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/></nic></pci></pci></cpu></system>'
    )


def test_nccl_xml_link_width_and_cpu_model():
    spec = server_from_nccl_xml(_xml("", width="8"), gpu="h100").server()
    # Gen5 x8: half the x16 line rate; model 143 (0x8f) is Sapphire Rapids: 22 GB/s
    assert spec.gpu.pcie.line_rate_bytes_per_s == lk.PCIE_GEN5_X16.line_rate_bytes_per_s / 2
    assert spec.socket_link == lk.UPI_INTEL_SPR and spec.nic == dev.CONNECTX7_NDR and spec.gpus == 1


def test_gpu_names():
    assert gpu_preset("h100") is dev.H100_SXM5_80GB and gpu_preset("b200") is dev.B200
    assert resolve_system("dgx-h100") == "dgx-h100"


def test_nics_per_node_on_an_uneven_import():
    system = import_system(RTX, gpu="rtx4090", fabric="roce-100g")
    with pytest.raises(ValueError, match=r"^nics_per_node: 1 is not allowed for .*pcie_rtx4090_topo.txt, whose NICs"):
        build_system(system, nodes=1, nics_per_node=1)


def _matrix(rows: dict[str, str]) -> str:
    names = list(rows)
    return (
        "\t"
        + "\t".join(names)
        + "\tCPU Affinity\tNUMA Affinity\n"
        + "\n".join(f"{n}\t{rows[n]}\t0-7\t0" for n in names)
    )


@pytest.mark.parametrize(
    ("text", "gpu", "message"),
    [
        (_matrix({"GPU0": "X\tFOO", "GPU1": "FOO\tX"}), "h100", r"GPU0/GPU1: 'FOO' is not allowed; expected X, NV#"),
        (_matrix({"GPU0": "X\tNV4", "GPU1": "PIX\tX"}), "h100", r"GPU1/GPU0: 'PIX' is not allowed; expected 'NV4'"),
        (
            _matrix({"GPU0": "X\tNV4\tSYS", "GPU1": "NV4\tX\tSYS", "GPU2": "SYS\tSYS\tX"}),
            "h100",
            r"GPU0/GPU1 is NV4 while GPU0/GPU2 is SYS; expected one NV# between every pair",
        ),
        (_matrix({"GPU0": "X\tNV18", "GPU1": "NV18\tX"}), None, r"^gpu: None is not allowed for .*; expected --gpu"),
        (_matrix({"GPU0": "X\tNV18", "GPU1": "NV18\tX"}), "v100", r"^gpu: 'v100' is not allowed; expected a GPU"),
        (_matrix({"GPU0": "X\tNV18", "GPU1": "NV18\tX"}), "l40s", r"^gpu: 'l40s' is not allowed; expected a GPU with"),
        ("GPU0\tGPU1\n", "h100", r"no row for GPU0"),
        ("hello\n", "h100", r"^system: .* is not allowed; expected a system preset or a file with"),
    ],
)
def test_bad_topo_matrix(tmp_path, text, gpu, message):
    path = tmp_path / "topo.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        import_system(path, gpu=gpu)


def test_pcie_box_nics_need_a_fabric():
    with pytest.raises(ValueError, match=r"^fabric: None is not allowed for .*: its 2 NICs need a model"):
        import_system(RTX, gpu="rtx4090")


@pytest.mark.parametrize(
    ("text", "gpu", "message"),
    [
        ("<system><cpu>", None, r"not well-formed XML"),
        ("<topology/>", None, r"root element: 'topology' is not allowed; expected <system>"),
        (
            _xml('<nvlink target="0000:05:00.0" count="4" tclass="0x030200"/>'),
            "h100",
            r"gpu 0 has NVLink to another GPU .*; expected NVLink only to NVSwitch",
        ),
        (_xml(""), None, r"^gpu: None is not allowed for .*: sm 90 matches h100_sxm5_80gb, h200_sxm; expected --gpu"),
        (_xml(""), "a100", r"^gpu: 'a100' is not allowed; expected a GPU of compute capability sm 90"),
        (_xml("", speed="4 GT/s"), "h100", r"link_speed: '4 GT/s' is not allowed; expected 8, 16, 32 or 64 GT/s"),
        (_xml("", vendor="IBM"), "h100", r"cpu vendor: 'IBM' is not allowed; expected 'GenuineIntel' or"),
        (
            '<system version="1"><cpu numaid="0"><pci busid="0001:00:00.0" class="0x030200"/></cpu></system>',
            "h100",
            r"is a GPU \(class 0x030200\) without a <gpu> element; expected a dump written by NCCL_TOPO_DUMP_FILE",
        ),
    ],
)
def test_bad_nccl_xml(text, gpu, message):
    with pytest.raises(ValueError, match=message):
        server_from_nccl_xml(text, gpu=gpu)


def test_resolve_system_refuses_gpu_with_a_preset_and_unknown_names():
    with pytest.raises(ValueError, match=r"^gpu: 'h100' is not allowed; expected no value with system preset"):
        resolve_system("dgx-h100", gpu="h100")
    for name in ("dgx-h1000", "a" * 5000, "x\0y"):  # the last two: no file name the OS accepts
        with pytest.raises(ValueError, match=r"^system: '.*' is not a preset; expected one of dgx-a100"):
            resolve_system(name)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (dict(gpu_switches=(0, 2)), r"PcieLayout.gpu_switches\[1\]: 2 is not allowed; expected -1 \(a root port\)"),
        (dict(gpu_sockets=(0, 1)), r"PcieLayout.gpu_sockets\[1\]: 1 is not allowed; expected 0, the socket of its"),
        (dict(gpu_sockets=(0,)), r"PcieLayout.gpu_sockets: \(0,\) is not allowed; expected one socket per gpu"),
    ],
)
def test_bad_layout(layout, message):
    base = dict(switch_sockets=(0,), gpu_switches=(0, 0), gpu_sockets=(0, 0))
    with pytest.raises(ValueError, match=message):
        PcieLayout(**(base | layout))


def test_layout_must_match_the_counts():
    layout = PcieLayout(switch_sockets=(0,), gpu_switches=(0, -1), gpu_sockets=(0, 1))
    with pytest.raises(ValueError, match=r"ServerSpec.layout.switch_sockets: 1 is not allowed; expected 0 entries"):
        ServerSpec(name="box", gpu=dev.H100_SXM5_80GB, gpus=2, sockets=2, layout=layout)
    spec = ServerSpec(
        name="box",
        gpu=dev.H100_SXM5_80GB,
        gpus=2,
        sockets=2,
        pcie_switch=dev.PCIE_SWITCH_GEN5,
        pcie_switches=1,
        layout=layout,
    )
    # one switch on socket 0 holding GPU0, GPU1 on a root port of socket 1: 2 GPUs + 1 switch + 2 CPUs + 2 memories
    assert build_system(spec).graph.number_of_nodes() == 7


def test_every_template_gpu_imports():
    # each system preset's GPU finds its own preset as host template
    for name, preset in SYSTEMS.items():
        server = preset.server()
        assert gpu_preset(server.gpu.name) is server.gpu, name


def test_custom_fabric_matching_a_preset_is_that_preset():
    # a 400G Tomahawk 4 (64 ports) split into 200G ports is the roce-200g preset's switch: 64 x 400 / 200 = 128
    fabric = custom_fabric({"link": "roce_200g", "switch": "tomahawk_4"})
    preset = FABRICS["roce-200g"]
    assert (fabric.link, fabric.switch, fabric.nic) == tuple(preset)


def test_custom_fabric_radix_and_latency(tmp_path):
    path = tmp_path / "fabric.json"
    path.write_text(
        '{"name": "small", "link": "ib_ndr", "switch": "quantum2_ndr", "radix": 32, "switch_latency_us": 0.3}'
    )
    fabric = resolve_fabric(str(path))
    assert fabric.name == "small" and fabric.switch.radix == 32 and fabric.switch.latency_s == pytest.approx(0.3e-6)
    # a leaf-spine of radix-32 switches: 32 leaves of 16 down ports, 16 spines: 32 x 16 / 8 NICs = 64 DGX H100
    assert SYSTEMS["dgx-h100"].max_nodes_for("leaf-spine", fabric=fabric) == 64
    assert resolve_fabric("ib-ndr") == "ib-ndr" and resolve_fabric(None) is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"link": "roce_400g", "switch": "spectrum_4", "ports": 3},
            r"fabric.ports: 3 is not allowed; expected no such",
        ),
        ({"link": "nvlink4", "switch": "spectrum_4"}, r"fabric.link: 'nvlink4' is not allowed; expected one of ib_hdr"),
        ({"link": "ib_ndr", "switch": "spectrum_4"}, r"fabric.switch: 'spectrum_4' is not allowed; expected one of q"),
        ({"link": "roce_400g", "switch": "tomahawk_4_100g"}, r"expected a switch whose ports run at a whole multiple"),
        ({"link": "roce_400g", "switch": "tomahawk_4", "nic": "connectx7_ndr"}, r"fabric.nic: 'connectx7_ndr' is not"),
        ({"link": "roce_400g", "switch": "tomahawk_4", "radix": 1}, r"fabric.radix: 1 is not allowed; expected an int"),
        ("roce-900g", r"^fabric: 'roce-900g' is not a preset; expected one of ib-hdr"),
    ],
)
def test_bad_custom_fabric(table, message):
    with pytest.raises(ValueError, match=message):
        resolve_fabric(table)
