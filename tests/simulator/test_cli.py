"""The `fabricsim` command: nccl-tests' vocabulary (and its -g launch model), table/csv/json, one-line
errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from simulator.cli import main
from simulator.studies.nccl_tests import CSV_HEADER, HOST_LAUNCH_S_PER_GPU, run_bench, sweep_sizes


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_bench_31_rows_8_to_8g(capsys):
    # 8 B x 2^k up to 8 GiB = 2^3 .. 2^33: 31 sizes
    code, out, err = run(capsys, "bench", "all_reduce", "--system", "dgx-h100", "-b", "8", "-e", "8G", "-f", "2")
    assert code == 0 and err == ""
    rows = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert len(rows) == 31
    assert rows[0].split()[0] == "8" and rows[-1].split()[0] == str(8 << 30)


def test_bench_csv_header_and_busbw_definition(capsys):
    code, out, _ = run(
        capsys, "bench", "all_gather", "--nodes", "2", "-b", "1M", "-e", "64M", "-f", "4", "--format", "csv"
    )
    assert code == 0
    reader = csv.DictReader(io.StringIO(out))
    assert tuple(reader.fieldnames[:8]) == CSV_HEADER[:8]
    rows = list(reader)
    assert [int(r["size_bytes"]) for r in rows] == [1 << 20, 1 << 22, 1 << 24, 1 << 26]
    for r in rows:
        # nccl-tests: algbw = size / time; all_gather busbw = algbw x (n-1)/n with n = 16
        algbw = int(r["size_bytes"]) / (float(r["time_us"]) * 1e-6) / 1e9
        assert float(r["algbw_GBps"]) == pytest.approx(algbw, rel=1e-3)
        assert float(r["busbw_GBps"]) == pytest.approx(algbw * 15 / 16, rel=1e-3)
        assert int(r["count"]) == int(r["size_bytes"]) // 4 // 16  # per-rank float count, as nccl-tests


def test_bench_json_and_other_collectives(capsys):
    for coll in ("broadcast", "reduce", "sendrecv", "reduce_scatter"):
        code, out, _ = run(
            capsys, "bench", coll, "-b", "1K", "-e", "1M", "-f", "32", "--format", "json", "--system", "hgx-b200"
        )
        assert code == 0
        data = json.loads(out)
        assert data["collective"] == coll and len(data["rows"]) == 3
        assert all(row["time_us"] > 0 for row in data["rows"])


def test_systems_lists_presets(capsys):
    code, out, _ = run(capsys, "systems")
    names = [line.split()[0] for line in out.splitlines()]
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "hgx-b200", "pcie-rtx4090"} <= set(names)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["bench", "allreduce_typo"], "collective"),
        (["bench", "all_reduce", "--system", "dgx-z900"], "system"),
        (["bench", "all_reduce", "-b", "12Q"], "minbytes"),
        (["bench", "all_reduce", "-b", "8G", "-e", "8"], "minbytes"),
        (["bench", "all_reduce", "-f", "1"], "stepfactor"),
        (["bench", "all_reduce", "--gpus-per-node", "0"], "gpus-per-node"),
        (["bench", "all_reduce", "--gpus-per-node", "9"], "gpus_per_node"),
        (["bench", "all_reduce", "--nodes", "0"], "nodes"),
        (["bench", "all_reduce", "--nodes", "100000"], "nodes"),
        (["bench", "all_reduce", "--system", "pcie-rtx4090", "--nodes", "2"], "nodes"),
        (["bench", "all_reduce", "--proto", "LL256"], "protocol"),
        (["bench", "broadcast", "-r", "99"], "root"),
        (["bench"], "collective"),
        (["frobnicate"], "frobnicate"),
        (["bench", "all_reduce", "--nodes", "2", "--topology", "torus"], "topology"),
        (["bench", "all_reduce", "--nodes", "2", "--fabric", "ib-qdr"], "fabric"),
        (["bench", "all_reduce", "--nodes", "2", "--routing", "random"], "routing"),
        (["bench", "all_reduce", "--nodes", "2", "--oversubscription", "0.5"], "oversubscription"),
        (["bench", "all_reduce", "--nodes", "4", "--topology", "dragonfly", "--oversubscription", "2"], "dragonfly"),
        (["topo", "--nodes", "2", "--nics-per-node", "3"], "nics"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("fabricsim: error:") and needle in lines[0]


def test_console_entry_point_runs_as_a_process():
    proc = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "bench", "all_reduce", "--nodes", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_bench_explain_prints_the_tuners_estimates(capsys):
    code, out, err = run(capsys, "bench", "all_reduce", "-b", "1K", "-e", "1G", "-f", "1024", "--explain")
    assert code == 0, err
    tuner = out[out.index("# tuner") :].splitlines()
    chosen = [line.split() for line in tuner if line.split()[1:2] == ["*"] or line.split()[2:3] == ["*"]]
    assert len(chosen) == 3  # one per size: 1K, 1M, 1G
    rows = [line.split() for line in out.splitlines() if line and not line.startswith("#")]
    assert [c[c.index("*") + 1 : c.index("*") + 3] for c in chosen] == [[r[8], r[9]] for r in rows]
    code, out, err = run(capsys, "bench", "all_reduce", "-b", "1K", "-e", "1K", "--explain", "--format", "json")
    assert code == 0, err
    candidates = json.loads(out)["rows"][0]["candidates"]
    assert {c["algorithm"] for c in candidates} >= {"ring", "nvls"}
    # LL forced on a 64 MiB alltoall, which NCCL's model gives no bandwidth: an infinite estimate, null in JSON
    code, out, err = run(
        capsys, "bench", "alltoall", "--proto", "LL", "-b", "64M", "-e", "64M", "--explain", "--format", "json"
    )
    assert code == 0, err
    (direct,) = [c for c in json.loads(out)["rows"][0]["candidates"] if c["algorithm"] == "direct"]
    assert direct["protocol"] == "LL" and direct["algbw_bytes_per_s"] == 0 and direct["predicted_s"] is None
    code, out, err = run(capsys, "bench", "all_reduce", "--explain", "--format", "csv")
    assert code != 0 and "explain: not available with --format csv" in err


def test_bench_takes_a_pasted_nccl_tests_command_line(capsys):
    # -n/-w/-c/-a change how nccl-tests measures, not what: the same table as without them
    code, plain, err = run(capsys, "bench", "all_reduce", "-b", "8", "-e", "1M", "-f", "32", "-g", "1")
    assert code == 0, err
    code, pasted, err = run(
        capsys,
        "bench",
        "all_reduce",
        "-b",
        "8",
        "-e",
        "1M",
        "-f",
        "32",
        "-g",
        "1",
        "-n",
        "20",
        "-w",
        "5",
        "-c",
        "1",
        "-a",
        "3",
    )
    assert code == 0 and pasted == plain, err


def test_one_process_per_node_launches_every_kernel_of_its_gpus():
    # nccl-tests -g 8: one thread launches the 8 GPUs' kernels one after the other, so every row starts
    # 7 launches of HOST_LAUNCH_S_PER_GPU later than with one process per GPU, at every size
    one = run_bench("all_reduce", system="dgx-a100", nodes=1, minbytes="8", maxbytes="1G", stepfactor=1 << 9)
    eight = run_bench(
        "all_reduce", system="dgx-a100", nodes=1, minbytes="8", maxbytes="1G", stepfactor=1 << 9, gpus_per_process=8
    )
    assert [r.size_bytes for r in eight] == [r.size_bytes for r in one] == [8, 4 << 10, 2 << 20, 1 << 30]
    for a, b in zip(one, eight):
        assert b.time_us - a.time_us == pytest.approx(7 * HOST_LAUNCH_S_PER_GPU * 1e6, rel=1e-6)
    divisors = r"expected a divisor of the 8 GPUs per node \(1, 2, 4, 8\)"
    with pytest.raises(ValueError, match=r"\(-g\): 3 is not allowed; " + divisors):
        run_bench("all_reduce", system="dgx-a100", nodes=1, minbytes="8", maxbytes="8", gpus_per_process=3)


def test_sweep_matches_nccl_tests():
    assert sweep_sizes("8", "64", stepfactor=2) == [8, 16, 32, 64]
    assert sweep_sizes("1K", "4K", stepbytes="1K") == [1024, 2048, 3072, 4096]


def test_bench_fabric_options_change_the_fabric(capsys):
    """2 DGX H100 ring all_gather at 1 GiB is NIC-bound: each rank's NIC carries (n-1)/n of the
    buffer per ring edge that leaves a server, so busbw follows the NIC rate: RoCE 200G (half of
    NDR 400G) must be slower, the rest of the command unchanged."""

    def busbw(*extra):
        code, out, _ = run(
            capsys,
            "bench",
            "all_gather",
            "--nodes",
            "2",
            "-b",
            "1G",
            "-e",
            "1G",
            "--algo",
            "ring",
            "--format",
            "json",
            *extra,
        )
        assert code == 0
        return json.loads(out)["rows"][0]["busbw_GBps"]

    ndr, roce200 = busbw(), busbw("--fabric", "roce-200g")
    assert roce200 < 0.75 * ndr
    for extra in (
        ("--topology", "fat-tree"),
        ("--routing", "spray"),
        ("--qps-per-connection", "2"),
        ("--no-rail-optimised",),
        ("--planes", "2"),
    ):
        assert busbw(*extra) > 0


def test_topo_prints_cost_and_draws(capsys, tmp_path):
    code, out, err = run(capsys, "topo", "--nodes", "64", "--topology", "fat-tree", "--draw", str(tmp_path / "ft.png"))
    assert code == 0 and err == ""
    assert "512 GPUs, 64 servers" in out and "per GPU" in out
    assert (tmp_path / "ft.png").read_bytes()[:4] == b"\x89PNG"


def test_bench_congestion_option_reaches_the_network_model(capsys):
    code, out, _ = run(
        capsys,
        "bench",
        "all_gather",
        "--nodes",
        "2",
        "--fabric",
        "roce-400g",
        "--congestion",
        "dcqcn",
        "pfc",
        "-b",
        "64M",
        "-e",
        "64M",
        "--format",
        "json",
    )
    assert code == 0 and json.loads(out)["rows"][0]["busbw_GBps"] > 0
    code, out, err = run(capsys, "bench", "all_reduce", "--net-model", "analytical", "--congestion", "pfc")
    assert code == 2 and "congestion" in err and "analytical" in err


# ---- fabricsim step ------------------------------------------------------------------------------

SMALL_STEP = [
    "--model",
    "gpt",
    "--layers",
    "4",
    "--hidden",
    "1024",
    "--heads",
    "16",
    "--nodes",
    "2",
    "--global-batch",
    "16",
    "--seq-len",
    "2048",
]


def test_step_json_keys_and_trace(capsys, tmp_path):
    trace = tmp_path / "step.json"
    code, out, err = run(capsys, "step", *SMALL_STEP, "--format", "json", "--trace", str(trace))
    assert code == 0, err
    data = json.loads(out)
    for key in (
        "step_time_s",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "compute_s",
        "comm_s",
        "exposed_comm_s",
        "breakdown",
    ):
        assert key in data
    # 2 DGX H100 = 16 GPUs; tp 2 x pp 2 (defaults) leaves dp = 16 / 4 = 4
    assert data["gpus"] == 16 and data["parallelism"]["dp"] == 4
    # tokens/s = global batch x sequence / step time
    assert data["tokens_per_s"] == pytest.approx(16 * 2048 / data["step_time_s"], rel=1e-12)
    assert data["step_time_s"] >= data["compute_s"] and 0 <= data["exposed_comm_s"] <= data["step_time_s"]
    events = json.loads(trace.read_text())["traceEvents"]
    assert events and all({"ph", "pid", "name"} <= set(e) for e in events)
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and "ts" in e and "tid" in e for e in spans)


def test_step_and_bench_apply_and_record_nccl_environment(capsys, monkeypatch):
    # NCCL_ALGO=^NVLS,NVLSTree and NCCL_NVLS_ENABLE=0 leave the tuner the same algorithms, so the step is the
    # same bit for bit; its tp 2 all-reduces inside a DGX H100 run NVLS by default, so it differs from that
    def step_json():
        code, out, err = run(capsys, "step", *SMALL_STEP, "--format", "json")
        assert code == 0, err
        return json.loads(out)

    default = step_json()
    assert "nccl_environment" not in default
    monkeypatch.setenv("NCCL_ALGO", "^NVLS,NVLSTree")
    excluded = step_json()
    assert excluded["nccl_environment"] == {"NCCL_ALGO": "^NVLS,NVLSTree"}
    monkeypatch.delenv("NCCL_ALGO")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    disabled = step_json()
    assert excluded["step_time_s"] == disabled["step_time_s"] != default["step_time_s"]
    code, out, err = run(capsys, "step", *SMALL_STEP)
    assert code == 0 and "NCCL_NVLS_ENABLE=0" in out.splitlines()[0]
    code, out, err = run(capsys, "bench", "all_reduce", "-b", "8G", "-e", "8G")
    assert code == 0 and "NCCL_NVLS_ENABLE=0" in out.splitlines()[0]
    monkeypatch.setenv("NCCL_PROTO", "LL")  # overridden by --proto: not applied, not recorded
    code, out, err = run(capsys, "bench", "all_reduce", "--proto", "Simple")
    assert code == 0 and "NCCL_PROTO" not in out.splitlines()[0] and out.splitlines()[-2].split()[-2] == "Simple"
    monkeypatch.delenv("NCCL_PROTO")
    assert out.splitlines()[-2].split()[-3] == "ring"  # the algo column: NVLS is off
    monkeypatch.setenv("NCCL_ALGO", "Ring,Bogus")
    code, out, err = run(capsys, "step", *SMALL_STEP)
    assert code != 0 and "NCCL_ALGO: 'bogus' in 'Ring,Bogus' is not allowed" in err and "Traceback" not in err


def test_step_scenario_file_and_command_line_override(capsys, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'model = "gpt"\nlayers = 4\nhidden = 1024\nheads = 16\nnodes = 2\nglobal_batch = 16\n'
        'seq_len = 2048\ntp = 4\npp = 1\nformat = "json"\n'
    )
    code, out, err = run(capsys, "step", str(scenario))
    assert code == 0, err
    assert json.loads(out)["parallelism"]["tp"] == 4 and json.loads(out)["parallelism"]["dp"] == 4
    code, out, err = run(capsys, "step", str(scenario), "--tp", "8")
    assert code == 0, err
    assert json.loads(out)["parallelism"]["tp"] == 8 and json.loads(out)["parallelism"]["dp"] == 2


def test_step_takes_expert_tensor_parallelism_from_scenario_and_command_line(capsys, tmp_path):
    # Mixtral on one DGX H100: t 2 x d 4, e 4; etp 1 folds the tensor ranks into the expert groups
    # (Megatron-Core --expert-tensor-parallel-size)
    scenario = tmp_path / "moe.toml"
    scenario.write_text(
        'model = "mixtral-8x7b"\nnodes = 1\ntp = 2\npp = 1\nep = 4\netp = 1\nsequence_parallel = true\n'
        'seq_len = 1024\nglobal_batch = 4\nnet_model = "analytical"\ngranularity = "chunk"\n'
    )
    code, out, err = run(capsys, "step", str(scenario), "--format", "json")
    assert code == 0, err
    folded = json.loads(out)
    assert (folded["parallelism"]["etp"], folded["parallelism"]["ep"]) == (1, 4)
    code, out, err = run(capsys, "step", str(scenario))
    assert code == 0, err
    assert "(ep 4, etp 1, vp 1)" in out  # the layout line names a folded layout's etp
    code, out, err = run(capsys, "step", str(scenario), "--etp", "2", "--format", "json")
    assert code == 0, err
    default = json.loads(out)
    assert default["parallelism"]["etp"] == 2
    # etp 2 (= tp) all-gathers and reduce-scatters the routed tokens in every MoE layer: more expert traffic
    assert default["breakdown"]["group"]["ep"]["nbytes"] > folded["breakdown"]["group"]["ep"]["nbytes"]
    code, out, err = run(capsys, "step", str(scenario), "--etp", "3")
    assert code == 2 and "ParallelismSpec.etp: 3 is not allowed" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv,needle",
    [
        ([*SMALL_STEP, "--tp", "3"], "tp"),
        ([*SMALL_STEP, "--dp", "3"], "dp"),
        ([*SMALL_STEP, "--model", "llama9-1t"], "llama9-1t"),
        (["--model", "gpt", "--layers", "2"], "--hidden"),
    ],
)
def test_step_bad_layouts_are_one_line_errors(capsys, argv, needle):
    code, out, err = run(capsys, "step", *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("fabricsim: error:") and needle in err and err.count("\n") == 1


def test_step_bad_scenario_field(capsys, tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text('modle = "gpt"\n')
    code, _, err = run(capsys, "step", str(scenario))
    assert code == 2 and "modle" in err


@pytest.mark.parametrize(
    "line,needle",
    [
        ('format = "xml"', "format: 'xml' is not allowed; expected one of 'table', 'json', 'csv'"),
        ("format = 1", "format: 1 is not allowed"),
        ("trace = 5", "trace: 5 is not allowed"),
    ],
)
def test_step_scenario_format_and_trace_are_checked(capsys, tmp_path, line, needle):
    scenario = tmp_path / "s.toml"
    scenario.write_text(line + "\n")
    code, out, err = run(capsys, "step", str(scenario))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert needle in err and "not a known field" not in err


def test_perf_quick_prints_its_figures(capsys, monkeypatch):
    # the benchmark command's output (timings are printed, never asserted), with stand-ins for the benchmarks
    # it times: the max-min kernel on 20,000 flows x 4,000 links and a 2-node bench sweep of 31 sizes
    # (8 B .. 8 GiB, factor 2: 2^3 .. 2^33), one row per size of the sweep it is asked for
    def bench_maxmin(*, nflows, nlinks):
        return {"nflows": nflows, "nlinks": nlinks, "nnz": 5 * nflows, "best_s": 1e-3, "median_s": 2e-3}

    def run_bench(kind, *, minbytes, maxbytes, stepfactor=2, **kw):
        assert kind == "all_reduce" and kw == {"system": "dgx-h100", "nodes": 2}
        return [None] * len(sweep_sizes(minbytes, maxbytes, stepfactor=stepfactor))

    monkeypatch.setattr("simulator.network.perf.bench_maxmin", bench_maxmin)
    monkeypatch.setattr("simulator.studies.nccl_tests.run_bench", run_bench)
    assert main(["perf", "--quick"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("max-min kernel: maxmin: 20,000 flows x 4,000 links")
    assert "bench all_reduce dgx-h100 --nodes 2 -b 8 -e 8G -f 2: 31 rows in" in out[1]


def test_step_trace_holds_one_replica_by_default_and_gzips(capsys, tmp_path):
    # SMALL_STEP: tp 2 x pp 2 x dp 4 on 16 GPUs; Megatron order puts tp innermost, then dp, then pp, so
    # data-parallel replica 0 is ranks 0, 1 (stage 0) and 8, 9 (stage 1): rank = tp + 2 dp + 8 pp
    import gzip

    trace = tmp_path / "step.json.gz"
    code, out, err = run(capsys, "step", *SMALL_STEP, "--trace", str(trace))
    assert code == 0, err
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    # the ranks' processes, then one more (pid 16, after the ranks) with the link tiers' counter tracks
    assert {e["pid"] for e in events} == {0, 1, 8, 9, 16}
    assert {e["pid"] for e in events if e["ph"] == "C"} == {16}
    assert "trace of data-parallel replica 0" in out
    everything = tmp_path / "all.json"
    code, out, err = run(capsys, "step", *SMALL_STEP, "--trace", str(everything), "--trace-ranks", "all")
    assert code == 0 and {e["pid"] for e in json.loads(everything.read_text())["traceEvents"]} == set(range(17))
    some = tmp_path / "some.json"
    code, out, err = run(capsys, "step", *SMALL_STEP, "--trace", str(some), "--trace-ranks", "3,5-6")
    assert code == 0 and {e["pid"] for e in json.loads(some.read_text())["traceEvents"]} == {3, 5, 6, 16}
    for bad in ("16", "5-4", "x"):
        code, out, err = run(capsys, "step", *SMALL_STEP, "--trace", str(some), "--trace-ranks", bad)
        assert code == 2 and err.startswith("fabricsim: error: trace_ranks:") and err.count("\n") == 1
    # the analytical model keeps no timeline of link rates: no counter track, and the output says so
    code, out, err = run(capsys, "step", *SMALL_STEP, "--trace", str(some), "--net-model", "analytical")
    assert code == 0 and not any(e["ph"] == "C" for e in json.loads(some.read_text())["traceEvents"])
    assert "# no link-tier counters in the trace: the analytical network model" in out


def test_long_commands_show_their_stage_on_a_terminal_only(capsys, monkeypatch):
    # not a terminal (pytest's capture): nothing on stderr; a terminal: the stage, unless --quiet
    code, out, err = run(capsys, "step", *SMALL_STEP)
    assert code == 0 and err == ""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    code, out, err = run(capsys, "step", *SMALL_STEP)
    assert code == 0 and "fabricsim step: timing the kernels" in err and "simulating the step" in err
    code, out, err = run(capsys, "step", *SMALL_STEP, "--quiet")
    assert code == 0 and err == ""
    code, out, err = run(capsys, "validate", "--series", "H100 8 GPU reduce_scatter")
    assert code == 0 and "fabricsim validate: 1/1 H100 8 GPU reduce_scatter" in err
    code, out, err = run(capsys, "bench", "all_reduce", "--nodes", "2", "-b", "8", "-e", "1K")
    assert code == 0 and "fabricsim bench: simulating 8 sizes of all_reduce on 16 GPUs" in err
    code, out, err = run(capsys, "bench", "all_reduce", "-b", "8", "-e", "1K", "--quiet")
    assert code == 0 and err == ""


def test_step_finds_its_exact_reductions_and_exact_turns_them_off(capsys, tmp_path):
    # SMALL_STEP with gradients reduced after the backward: each replica's and tensor rank's stage transfers
    # stay on their own rail through one leaf (fixed, disjoint paths), so both reductions are exact and the
    # step time is the full simulation's up to round-off (printed to 4 decimals: the same line)
    code, auto, err = run(capsys, "step", *SMALL_STEP, "--no-overlap-grad-reduce")
    assert code == 0, err
    assert "# note: symmetric replicas (exact)" in auto and "# note: representative transfers (exact)" in auto
    code, full, err = run(capsys, "step", *SMALL_STEP, "--no-overlap-grad-reduce", "--exact")
    assert code == 0 and "# note:" not in full
    line = next(x for x in auto.splitlines() if x.startswith("step time"))
    assert line in full.splitlines()
    trace = tmp_path / "all.json"  # a trace of every rank says the other replicas were stood for
    code, out, err = run(
        capsys, "step", *SMALL_STEP, "--no-overlap-grad-reduce", "--trace", str(trace), "--trace-ranks", "all"
    )
    assert code == 0 and "simulated data-parallel replica 0 for every replica" in out
    code, overlapped, err = run(capsys, "step", *SMALL_STEP)  # buckets during the backward: every rank simulated
    assert code == 0 and "# note:" not in overlapped and overlapped != auto


def test_dragonfly_shape_from_the_command_line_and_the_scenario_file(capsys, tmp_path):
    # 16 DGX H100 (8 NICs): a = 8 given, so p = 4, h = 4 (balanced), 8 x 4 / 8 = 4 servers per group: 4 groups
    code, out, err = run(capsys, "topo", "--nodes", "16", "--topology", "dragonfly", "--dragonfly-a", "8")
    assert code == 0 and "dragonfly p=4 a=8 h=4 g=4 (absolute)" in out, err
    scenario = tmp_path / "step.toml"
    scenario.write_text('topology = "dragonfly"\nnodes = 16\ndragonfly_a = 8\ndragonfly_arrangement = "relative"\n')
    code, out, err = run(capsys, "step", str(scenario), "--global-batch", "32", "--seq-len", "1024")
    assert code == 0 and "dragonfly p=4 a=8 h=4 g=4 (relative)" in out.splitlines()[0], err
    code, out, err = run(capsys, "topo", "--nodes", "16", "--dragonfly-p", "4")
    assert code == 2 and err.startswith("fabricsim: error: dragonfly_p: 4 is not allowed; expected no value")


def test_perf_commands_run_each_step_in_its_own_process(capsys, monkeypatch):
    # stand-in commands: a small step, one refused (its one-line error), one stopped at its time limit
    def bench_maxmin(*, nflows, nlinks):
        return {"nflows": nflows, "nlinks": nlinks, "nnz": 5 * nflows, "best_s": 1e-3, "median_s": 2e-3}

    monkeypatch.setattr("simulator.network.perf.bench_maxmin", bench_maxmin)
    monkeypatch.setattr("simulator.studies.nccl_tests.run_bench", lambda *a, **kw: [])
    small = " ".join(SMALL_STEP)
    commands = (
        ("small", small, 300),
        ("refused", "--nodes 0", 300),
        ("too slow", small, 0.01),
        ("traced", f"{small} --trace {{trace}}", 300),
    )
    monkeypatch.setattr("simulator.cli.perf.COMMANDS", commands)
    assert main(["perf", "--quick", "--commands"]) == 0
    out = capsys.readouterr().out.splitlines()[2:]
    expected = json.loads(run(capsys, "step", *SMALL_STEP, "--format", "json")[1])
    assert out[0].startswith("small: ") and "s wall, peak RSS " in out[0]
    assert f"; step {expected['step_time_s']:.3f} s" in out[0]
    assert out[3].startswith("traced: ") and out[3].endswith(" MB") and "; trace " in out[3]
    assert (
        out[1]
        == "refused: failed (fabricsim: error: argument --nodes: nodes: '0' is not allowed; expected an integer >= 1)"
    )
    assert out[2] == f"too slow: stopped after 0.01 s (fabricsim step {small})"
