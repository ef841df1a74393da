"""`fabricsim bench|step --system FILE`: an imported server runs wherever a preset name does, with the fabric
options, and predicts as the matching preset does (the round trip of topologies.io)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main

DATA = Path(__file__).parent.parent / "topologies" / "data"


def run(capsys, *argv: object) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "options",
    [
        ("all_reduce", "-b", "1M", "-e", "1G", "-f", "32", "--nodes", "2"),
        ("alltoall", "-b", "16M", "-e", "16M", "--nodes", "2", "--fabric", "roce-400g"),
    ],
)
def test_dgx_h100_topo_matrix_benches_as_the_preset(capsys, options):
    # the imported DGX H100 differs from the preset only in its PCIe switches (8 of one GPU + NIC against 4 of
    # two), which no route with GPUDirect RDMA crosses upwards: the same table, to the last digit
    imported = run(
        capsys, "bench", *options, "--format", "csv", "--system", DATA / "dgx_h100_topo.txt", "--gpu", "h100"
    )
    preset = run(capsys, "bench", *options, "--format", "csv", "--system", "dgx-h100")
    assert imported == preset and imported.count("\n") >= 2


def test_nccl_xml_steps(capsys):
    out = run(
        capsys,
        "step",
        "--system",
        DATA / "a100_roce_nccl_topo.xml",
        "--nodes",
        "2",
        "--tp",
        "8",
        "--pp",
        "1",
        "--global-batch",
        "16",
        "--format",
        "json",
    )
    result = json.loads(out)
    assert result["topology"].endswith("a100_roce_nccl_topo.xml x2")


def test_missing_gpu_is_one_line(capsys):
    code = main(["bench", "all_reduce", "--system", str(DATA / "dgx_h100_topo.txt")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("fabricsim: error: gpu: None is not allowed for ") and "expected --gpu NAME" in err


def test_sweep_cache_key_follows_the_system_file(tmp_path):
    from simulator.studies.sweep import scenario_key

    path = tmp_path / "topo.txt"
    path.write_text((DATA / "dgx_h100_topo.txt").read_text())
    scenario = {"kind": "bench", "system": str(path), "gpu": "h100"}
    before = scenario_key(scenario)
    path.write_text((DATA / "dgx_h100_topo.txt").read_text().replace("NIC0\tPXB", "NIC0\tNODE", 1))
    assert scenario_key(scenario) != before  # an edited file is another scenario


def test_custom_fabric_file_benches_as_the_preset_it_matches(capsys, tmp_path):
    # roce_200g cables on a Tomahawk 4 split into 128 x 200G ports: the roce-200g preset's technology, so the same
    # numbers (only the switch's name differs, which the csv does not show)
    path = tmp_path / "fabric.toml"
    path.write_text('link = "roce_200g"\nswitch = "tomahawk_4"\n')
    options = ("bench", "all_reduce", "-b", "64M", "-e", "64M", "--nodes", "4", "--format", "csv")
    assert run(capsys, *options, "--fabric", path) == run(capsys, *options, "--fabric", "roce-200g")


def test_step_scenario_with_a_fabric_table(capsys, tmp_path):
    path = tmp_path / "scenario.toml"
    path.write_text(
        "nodes = 2\ntp = 8\npp = 1\nglobal_batch = 16\noversubscription = 2.0\n"
        '[fabric]\nname = "eth-r32"\nlink = "roce_400g"\nswitch = "spectrum_4"\nradix = 32\n'
    )
    out = run(capsys, "step", path, "--format", "json")
    assert json.loads(out)["topology"] == "dgx-h100 x2 eth-r32"
    assert "leaf-spine of spectrum_4_roce_400g_custom" in run(capsys, "step", path).splitlines()[0]
