"""Bad input at every edge (issue "One house", part 6): one line naming the field, the value and what is allowed,
raised before any model runs; never a traceback, never a silent acceptance. And the inputs that look bad but are
not (0-byte pieces, numpy integers, a byte-order mark) give their result.

CLI cases: exit status 2, nothing on stdout, exactly one stderr line starting ``fabricsim: error:``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from simulator.api import simulate
from simulator.cli import main
from simulator.collectives.tuner import CollectivePolicy
from simulator.config import SimConfig
from simulator.studies.nccl_tests import run_bench
from simulator.validation.calibration import parse_nccl_tests_log
from tests.simulator.nccl_logs import a100_mpirun_rows, render_nccl_tests_log
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind
from workloads.tasks import Workload

CSV_HEADER = "collective,nranks,nnodes,gpu,interconnect,size_bytes,time_us,algbw_GBps,busbw_GBps,source,notes\n"


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_error(capsys, *argv) -> str:
    """The one error line of a command that must fail cleanly."""
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1 and err.startswith("fabricsim: error: ") and "Traceback" not in err, err
    return err.strip()


@pytest.fixture(scope="module")
def topo():
    return build_system("dgx-h100", nodes=1)


@pytest.fixture(scope="module")
def workload():
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1024, group=tuple(range(8)))
    return Workload.sequence([c], nranks=8)


# ---- zero-byte pieces: nccl-tests runs these sizes; they cost the latency -------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "all_gather", "-b", "8", "-e", "1K", "-f", "2"),  # dgx-h100 (the default)
        ("bench", "all_gather", "-b", "8", "-e", "1K", "-f", "2", "--system", "hgx-b200"),
        ("bench", "reduce_scatter", "-b", "8", "-e", "64", "-f", "2"),
        ("bench", "all_reduce", "-b", "0", "-e", "64", "-i", "8"),
    ],
)
def test_zero_byte_pieces_run(capsys, argv):
    code, out, err = cli(capsys, *argv)
    assert code == 0 and err == ""
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    zero = [r for r in rows if r[0] == "0"]
    assert zero and all(10 < float(r[5]) < 30 for r in zero)  # the latency: tens of microseconds


def test_zero_bytes_in_python():
    rows = run_bench("all_reduce", sizes=[0])
    assert rows[0].size_bytes == 0 and 0 < rows[0].time_us < 100


def test_validate_row_of_eight_bytes(capsys, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text(CSV_HEADER + "all_reduce,8,1,H100,nv,8,15.0,0,0,me,\nall_gather,8,1,H100,nv,8,15.0,0,0,me,\n")
    code, out, err = cli(capsys, "validate", "--data", table)
    assert code == 0 and err == "" and "t.csv" in out


# ---- overflow --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("-f", "inf"), "stepfactor: 'inf' is not allowed; expected a finite number > 1"),
        (("-f", "nan"), "stepfactor: 'nan' is not allowed"),
        (("-b", "9" * 400), "minbytes: '99999"),
        (("-b", "99999999999999999999"), "minbytes: '99999999999999999999' is not allowed; expected a byte count"),
        (("-e", "2P"), "maxbytes: '2P' is not allowed; expected a byte count from 0 to 1P"),
        (("-b", "8", "-e", "64", "-i", "-8"), "stepbytes: '-8' is not allowed"),
        (("-b", "8", "-e", "64", "-f", "1.01"), "stepfactor: 1.01 is not allowed; expected a factor that grows 8 B"),
    ],
)
def test_bench_overflow(capsys, argv, needle):
    err = cli_error(capsys, "bench", "all_reduce", *argv)
    assert needle in err and len(err) < 300


def test_huge_step_factor_ends_the_sweep(capsys):
    code, out, _ = cli(capsys, "bench", "all_reduce", "-b", "8", "-e", "64", "-f", "1e308")
    assert code == 0 and len([line for line in out.splitlines() if not line.startswith("#")]) == 1


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e-300"])
def test_bucket_mb_on_the_command_line(capsys, value):
    assert "bucket" in cli_error(capsys, "step", "--bucket-mb", value)


@pytest.mark.parametrize(
    "line,needle",
    [
        ("bucket_mb = inf", "bucket_mb: inf is not allowed; expected a finite number > 0"),
        ("bucket_mb = true", "bucket_mb: True is not allowed; expected a finite number > 0"),
        ("congestion = 5", "congestion: 5 is not allowed; expected a list of distinct names from dcqcn, pfc"),
        ('congestion = "dcqcn"', "congestion: 'dcqcn' is not allowed; expected a list of distinct names"),
        ('congestion = ["dcqcn", "dcqcn"]', "congestion: ['dcqcn', 'dcqcn'] is not allowed"),
        ('rail_optimised = "no"', "rail_optimised: 'no' is not allowed; expected True or False"),
        ("gdr = 0", "gdr: 0 is not allowed; expected True or False"),
        ("nodes = 1.5", "nodes: 1.5 is not allowed; expected an integer >= 1"),
        ("nodes = 0", "nodes: 0 is not allowed; expected an integer >= 1"),
        ("oversubscription = nan", "oversubscription: nan is not allowed"),
        ('dtype = "bf17"', "dtype: 'bf17' is not allowed; expected one of 'bf16', 'fp16', 'fp8'"),
        ('schedule = "zb"', "schedule: 'zb' is not allowed; expected one of '1f1b', 'gpipe', 'interleaved'"),
        ("recompute = 1", "recompute: 1 is not allowed"),
        ('granularity = "op"', "granularity: 'op' is not allowed; expected one of 'layer', 'chunk'"),
        ('net_model = "packet"', "net_model: 'packet' is not allowed; expected one of 'flow', 'analytical'"),
        ("seed = 1.5", "seed: 1.5 is not allowed; expected an integer"),
        ("zero = 4", "zero: 4 is not allowed; expected an integer from 0 to 3"),
        ("model = 5", "model: 5 is not allowed; expected a string"),
    ],
)
def test_step_scenario_types(capsys, tmp_path, line, needle):
    scenario = tmp_path / "s.toml"
    scenario.write_text(line + "\n")
    err = cli_error(capsys, "step", scenario)
    assert f"scenario: {scenario}: {needle}" in err


def test_calibrate_log_with_a_32_digit_size(tmp_path):
    text = render_nccl_tests_log(a100_mpirun_rows()[:3]).replace("         8             2", "9" * 32 + " 2", 1)
    assert "9" * 32 in text
    with pytest.raises(ValueError, match=r"^<log> line \d+: size: 9{32} is not allowed; expected a byte count"):
        parse_nccl_tests_log(text)


# ---- silent acceptances -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["bench all_reduce -b 8 -e 8", "topo", "step"])
def test_empty_system_is_an_error(capsys, command):
    err = cli_error(capsys, *command.split(), "--system", "")
    assert "system: '' is not a preset; expected one of dgx-a100" in err


@pytest.mark.parametrize("option", ["--layers", "--hidden", "--heads", "--vocab", "--ffn-hidden"])
def test_gpt_options_with_a_preset_model(capsys, option):
    err = cli_error(capsys, "step", "--model", "llama3-8b", option, "2")
    assert (
        f"{option[2:].replace('-', '_')}: 2 is not allowed with model 'llama3-8b', a preset; expected --model gpt"
        in err
    )


def test_gpt_fields_in_a_scenario_with_a_preset_model(capsys, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('model = "llama3-70b"\nlayers = 4\n')
    assert "layers: 4 is not allowed with model 'llama3-70b'" in cli_error(capsys, "step", scenario)


@pytest.fixture()
def a100_log(tmp_path):
    path = tmp_path / "a100.log"
    path.write_text(render_nccl_tests_log(a100_mpirun_rows()[:4]))
    return path


def test_calibrate_nranks_against_the_log(capsys, a100_log):
    err = cli_error(capsys, "calibrate", a100_log, "--nranks", "3")
    assert "nranks: 3 is not allowed" in err and "has 8 '#  Rank' lines; expected 8" in err


def test_calibrate_log_row_of_negative_size():
    text = render_nccl_tests_log(a100_mpirun_rows()[:3]).replace("         8             2", "        -8             2")
    with pytest.raises(ValueError, match=r"line \d+: size: -8 is not allowed; expected a byte count"):
        parse_nccl_tests_log(text)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(qps_per_connection=True), "qps_per_connection: True is not allowed; expected an integer from 1 to 128"),
        (dict(qps_per_connection=0), "qps_per_connection: 0 is not allowed"),
        (dict(algorithm=5), "algorithm: 5 is not allowed; expected None or one of ring"),
        (dict(algorithm="rong"), "algorithm: 'rong' is not allowed"),
        (dict(protocol="LL64"), "protocol: 'LL64' is not allowed; expected one of 'LL', 'LL128', 'Simple'"),
        (dict(protocol=1), "protocol: 1 is not allowed"),
        (dict(nchannels=2.0), "channels: 2.0 is not allowed; expected an integer from 1 to"),
        (dict(nvls=1), "nvls: 1 is not allowed; expected True or False"),
        (dict(collnet="yes"), "collnet: 'yes' is not allowed; expected True or False"),
        (dict(min_channels=np.float64(2)), "min_channels: "),
        (dict(algorithms="ring"), "algorithms: 'ring' is not allowed; expected None or a Selection"),
    ],
)
def test_collective_policy_fields(kwargs, needle):
    with pytest.raises(ValueError) as err:
        CollectivePolicy(**kwargs)
    assert needle in str(err.value)


def test_collective_policy_takes_numpy_integers_and_protocol_names():
    policy = CollectivePolicy(qps_per_connection=np.int64(2), nchannels=np.int32(4), protocol="ll128")
    assert policy.qps_per_connection == 2 and type(policy.qps_per_connection) is int
    assert type(policy.nchannels) is int and policy.protocol == "LL128"


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(network_model="packet"), "network_model: 'packet' is not allowed; expected one of 'flow', 'analytical'"),
        (dict(network_model=None), "network_model: None is not allowed"),
        (dict(routing=["ecmp"]), "routing: ['ecmp'] is not known"),
        (dict(seed="1"), "seed: '1' is not allowed; expected an integer"),
        (dict(pxn=1), "pxn: 1 is not allowed; expected True or False"),
        (dict(launch_overhead_s=float("nan")), "launch_overhead_s: nan is not allowed"),
        (dict(collectives={}), "collectives: {} is not allowed; expected a CollectivePolicy"),
        (dict(congestion=("dcqcn",), network_model="analytical"), "congestion: ('dcqcn',) is not allowed"),
    ],
)
def test_sim_config_fields(kwargs, needle):
    with pytest.raises(ValueError) as err:
        SimConfig(**kwargs)
    assert needle in str(err.value)


# ---- files -------------------------------------------------------------------------------------------------------


def test_validate_plot_naming_a_file(capsys, tmp_path):
    existing = tmp_path / "plots.png"
    existing.write_text("x")
    err = cli_error(capsys, "validate", "--series", "A100", "--plot", existing)
    assert f"plot: {str(existing)!r} is not allowed; expected a directory (it is an existing file)" in err


@pytest.mark.parametrize("content", [b'model = "caf\xe9"\n', bytes(range(256))])
def test_scenario_not_utf8_names_the_file(capsys, tmp_path, content):
    scenario = tmp_path / "latin1.toml"
    scenario.write_bytes(content)
    err = cli_error(capsys, "step", scenario)
    assert f"scenario: {str(scenario)!r} is not UTF-8 text" in err and "codec" not in err


def test_csv_not_utf8_names_the_file(capsys, tmp_path):
    table = tmp_path / "latin1.csv"
    table.write_bytes((CSV_HEADER + "all_reduce,8,1,H100,nv,1024,15.0,0,0,m\xe9,\n").encode("latin-1"))
    err = cli_error(capsys, "validate", "--data", table)
    assert f"table: {str(table)!r} is not UTF-8 text" in err and "codec" not in err


def test_csv_with_a_byte_order_mark_is_read(capsys, tmp_path):
    table = tmp_path / "excel.csv"
    table.write_bytes(("\ufeff" + CSV_HEADER + "all_reduce,8,1,H100,nv,1024,15.0,0,0,me,\n").encode("utf-8"))
    code, out, err = cli(capsys, "validate", "--data", table)
    assert code == 0 and err == "" and "excel.csv" in out


def test_calibration_with_a_huge_factor(capsys, tmp_path):
    path = tmp_path / "cal.json"
    path.write_text(
        '{"format": "fabricsim-calibration", "version": 1, "system": "dgx-h100", '
        '"link_scale": {"nvlink": 1e300}, "launch_overhead_s": 0}'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way to the error
        err = cli_error(capsys, "bench", "all_reduce", "-b", "8", "-e", "8", "--calibration", path)
    assert "link_scale.nvlink: 1e+300 is not allowed; expected a number > 0 and <= 100" in err
    assert "np.float64" not in err


def test_calibration_json_not_utf8(capsys, tmp_path):
    path = tmp_path / "cal.json"
    path.write_bytes(b'{"system": "\xff"}')
    err = cli_error(capsys, "bench", "all_reduce", "--calibration", path)
    assert f"calibration: {str(path)!r} is not UTF-8 text" in err


def test_log_not_utf8_names_the_file(capsys, tmp_path):
    path = tmp_path / "run.log"
    path.write_bytes(b"# Collective test starting: all_reduce_perf \xff\n")
    assert f"log: {str(path)!r} is not UTF-8 text" in cli_error(capsys, "calibrate", path)


# ---- the Python API ----------------------------------------------------------------------------------------------


def test_simulate_arguments(topo, workload):
    c = workload.collectives[0]
    for call, needle in [
        (lambda: simulate("dgx-h100", workload), "topology: 'dgx-h100' is not allowed; expected a Topology"),
        (lambda: simulate(topo, [c]), "workload: [Collective("),
        (
            lambda: simulate(topo, workload, config={"seed": 1}),
            "config: {'seed': 1} is not allowed; expected a SimConfig",
        ),
        (lambda: simulate(topo, workload, placement=3), "placement: 3 is not allowed"),
    ]:
        with pytest.raises(ValueError) as err:
            call()
        assert needle in str(err.value)


def test_workload_sequence_arguments():
    with pytest.raises(ValueError, match=r"Workload.sequence.collectives: \['all_reduce'\] is not allowed"):
        Workload.sequence(["all_reduce"], nranks=8)
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=8, group=(0, 1))
    with pytest.raises(ValueError, match="Workload.sequence.nranks: 2.0 is not allowed"):
        Workload.sequence([c], nranks=2.0)
    assert Workload.sequence([c], nranks=np.int64(2)).nranks == 2


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(system=42), "system: 42 is not allowed; expected a system preset name"),
        (dict(config="flow"), "config: 'flow' is not allowed; expected a SimConfig or None"),
        (dict(stepfactor="2"), "stepfactor: '2' is not allowed; expected a finite number > 1"),
        (dict(nodes=2.0), "nodes: 2.0 is not allowed; expected an integer >= 1"),
        (dict(root="0"), "root: '0' is not allowed; expected an integer >= 0"),
        (dict(sizes="8"), "sizes: '8' is not allowed; expected a list of byte counts"),
        (dict(sizes=[-8]), "sizes: -8 is not allowed; expected a byte count"),
        (dict(dtype=["float"]), "datatype: ['float'] is not known"),
        (dict(explain=1), "explain: 1 is not allowed; expected True or False"),
        (dict(minbytes=8.0), "minbytes: 8.0 is not allowed; expected a byte count"),
    ],
)
def test_run_bench_arguments(kwargs, needle):
    with pytest.raises(ValueError) as err:
        run_bench("all_reduce", **kwargs)
    assert needle in str(err.value)


def test_numpy_integers_are_integers():
    assert build_system("dgx-h100", nodes=np.int64(2)).num_servers == 2
    rows = run_bench("all_reduce", nodes=np.int64(2), gpus_per_node=np.int32(2), sizes=[np.int64(1024)])
    assert rows[0].size_bytes == 1024
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=np.int64(64), group=tuple(np.arange(16)))
    assert c.group == tuple(range(16)) and all(type(r) is int for r in c.group) and type(c.nbytes) is int
    assert Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64, group=np.arange(4)).group == (0, 1, 2, 3)


def test_collective_group_as_a_list_is_a_tuple(topo):
    c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64, group=[0, 1])
    assert c.group == (0, 1) and hash(c) == hash(Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=64, group=(0, 1)))
    assert simulate(topo, Workload.sequence([c], nranks=8)).collectives[0].time_s > 0


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(group=16), "Collective.group: 16 is not allowed; expected distinct ranks >= 0, at least one"),
        (dict(group=None), "Collective.group: None is not allowed"),
        (dict(group=(0, 0)), "Collective.group: (0, 0) is not allowed"),
        (dict(group=(0, -1)), "Collective.group: (0, -1) is not allowed"),
        (dict(group=(0, 1.0)), "Collective.group: (0, 1.0) is not allowed"),
        (dict(group="01"), "Collective.group: '01' is not allowed"),
        (dict(root=1.0), "Collective.root: 1.0 is not allowed; expected an integer >= 0"),
        (dict(root="0"), "Collective.root: '0' is not allowed"),
        (dict(root=2), "Collective.root: 2 is out of range for a group of 2 ranks"),
        (dict(nbytes=8.0), "Collective.nbytes: 8.0 is not allowed; expected an integer >= 0"),
        (dict(nbytes=True), "Collective.nbytes: True is not allowed"),
        (dict(kind="allreduse"), "Collective.kind: 'allreduse' is not allowed; expected a CollectiveKind or one of"),
        (dict(kind=3), "Collective.kind: 3 is not allowed"),
        (dict(dtype=["float"]), "Collective.dtype: ['float'] is not known"),
    ],
)
def test_collective_fields(kwargs, needle):
    base = dict(kind=CollectiveKind.BROADCAST, nbytes=8, group=(0, 1))
    with pytest.raises(ValueError) as err:
        Collective(**(base | kwargs))
    assert needle in str(err.value)


def test_collective_kind_by_name():
    assert Collective(kind="all-reduce", nbytes=8, group=(0, 1)).kind is CollectiveKind.ALL_REDUCE


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(nodes=np.float64(2)), "nodes: "),
        (dict(rail_optimised="no"), "rail_optimised: 'no' is not allowed; expected True or False"),
        (dict(oversubscription=float("inf")), "oversubscription: inf is not allowed"),
        (dict(planes=1.0), "planes: 1.0 is not allowed"),
        (dict(gdr=0), "gdr: 0 is not allowed"),
    ],
)
def test_build_system_fields(kwargs, needle):
    with pytest.raises(ValueError) as err:
        build_system("dgx-h100", **kwargs)
    assert needle in str(err.value)


# ---- found by tests/test_fuzz_inputs.py: sizes so large the simulation would run out of memory or time -------------

GPT = ("step", "--model", "gpt", "--layers", "2", "--hidden", "256", "--heads", "4", "--nodes", "1")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("--vocab", "9" * 40), "ModelSpec.vocab: 99999"),
        (("--global-batch", "9" * 40), "ParallelismSpec.global_batch: 99999"),
        (("--bucket-mb", "1e308"), "bucket_mb: 1e+308 is not allowed; expected a size in MiB"),
    ],
)
def test_step_sizes_beyond_any_model(capsys, argv, needle):
    assert needle in cli_error(capsys, *GPT, *argv)


def test_model_weights_beyond_a_pebibyte():
    from workloads.presets import custom_gpt

    with pytest.raises(ValueError, match=r"ModelSpec: 'big' has 6.76e\+15 bytes of weights; expected at most 1 PiB"):
        custom_gpt(layers=1 << 16, hidden=1 << 16, heads=16, name="big")


# ---- more of the same kind in the file and name options --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("calibrate", "LOG", "--collective", ""), "collective: '' is not allowed"),
        (("calibrate", "LOG", "--nodes", "2"), "nodes: 2 is not allowed; LOG names 1 host(s) in its '#  Rank' lines"),
        (("calibrate", "LOG", "--out", "DIR"), "out: 'DIR' is not allowed; expected a file name (it is a directory)"),
        (("calibrate", "LOG", "--out", "DIR/missing/cal.json"), "expected a file in an existing directory"),
        (("calibrate", ""), "log: '' is not allowed; expected a file name"),
        (("validate", "--series", ""), "series: '' is not allowed"),
        (("validate", "--data", ""), "data: '' is not allowed"),
        (("step", "--trace", "DIR"), "trace: 'DIR' is not allowed; expected a file name (it is a directory)"),
        (("step", "--trace", ""), "trace: '' is not allowed; expected a file name"),
        (("topo", "--draw", "DIR"), "draw: 'DIR' is not allowed; expected a file name (it is a directory)"),
        (("bench", "all_reduce", "--calibration", ""), "calibration: '' is not allowed; expected a file name"),
        (
            ("bench", "sendrecv", "-b", "8", "-e", "8", "--gpus-per-node", "1"),
            "collective: sendrecv needs at least 2 GPUs, not 1",
        ),
    ],
)
def test_file_and_name_options(capsys, a100_log, tmp_path, argv, needle):
    names = {"LOG": str(a100_log), "DIR": str(tmp_path)}
    argv = [names.get(a, a.replace("DIR", str(tmp_path))) for a in argv]
    err = cli_error(capsys, *argv)
    for key, value in names.items():
        needle = needle.replace(key, value)
    assert needle in err
