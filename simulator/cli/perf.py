"""``fabricsim perf``: benchmarks of the kernels, a bench sweep, scale runs and the 405B step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.studies.training import StepResult
    from topologies.routing import RouteCache
    from topologies.topology import Topology


def add_parser(sub) -> None:
    perf = sub.add_parser("perf", help="benchmarks: max-min kernel and a 16-node bench sweep (prints figures)")
    perf.add_argument("--quick", action="store_true", help="smaller instances")
    perf.add_argument(
        "--quiet", action="store_true", help="no progress display on stderr (there is none when it is not a terminal)"
    )
    perf.add_argument(
        "--scale",
        action="store_true",
        help="also: 1 GiB ring all_reduce on 4,096 and 16,384 GPUs (DGX H100, 3-tier fat-tree)",
    )
    perf.add_argument(
        "--commands",
        action="store_true",
        help="also: the `fabricsim step` commands users type at scale (default step, Llama-3 405B on 16,384 H100 "
        "with 1F1B, interleaved and sequence parallelism, CP 16, DeepSeek-V3-like EP 64 on 2,048 GPUs, 405B on "
        "98,304 H100, a Llama-3 70B trace on 256 and 16,384 H100), each in its own process: wall time, its own "
        "peak RSS, what it reported, the trace's size",
    )
    perf.add_argument(
        "--step",
        action="store_true",
        help="also: one Llama-3 405B step on 16,384 H100 (TP 8, PP 16, DP 128, 8192 tokens) on a "
        "RoCE 400G fat-tree, flow and analytical network models, then the same as `fabricsim step` runs it",
    )


def run(args) -> str:
    from .common import progress_display

    with progress_display("fabricsim perf", quiet=bool(args.quiet)) as progress:
        return _run(args, progress or (lambda _stage: None))


def _run(args, progress) -> str:
    from simulator.network.perf import bench_maxmin, format_report
    from simulator.studies.nccl_tests import run_bench

    lines = []
    progress("max-min kernel")
    flows, links = (20_000, 4_000) if args.quick else (100_000, 20_000)
    lines.append("max-min kernel: " + format_report(bench_maxmin(nflows=flows, nlinks=links)))
    nodes = 2 if args.quick else 16
    progress(f"bench all_reduce on {nodes} nodes")
    run_bench("all_reduce", system="dgx-h100", nodes=nodes, minbytes=8, maxbytes="8K")  # warm caches
    start = time.perf_counter()
    rows = run_bench("all_reduce", system="dgx-h100", nodes=nodes, minbytes=8, maxbytes="8G", stepfactor=2)
    wall = time.perf_counter() - start
    lines.append(
        f"bench all_reduce dgx-h100 --nodes {nodes} -b 8 -e 8G -f 2: {len(rows)} rows in {wall:.2f} s "
        f"(in-process, numba cache warm)"
    )
    if args.scale:
        from simulator.collectives.tuner import CollectivePolicy
        from simulator.config import SimConfig
        from topologies.presets import build_system

        for servers in (512, 2048):
            progress(f"ring all_reduce on {8 * servers} GPUs")
            start = time.perf_counter()
            topology = build_system("dgx-h100", nodes=servers, topology="fat-tree")
            built = time.perf_counter()
            (row,) = run_bench(
                "all_reduce",
                system=topology,
                minbytes="1G",
                maxbytes="1G",
                config=SimConfig(collectives=CollectivePolicy(algorithm="ring")),
            )
            done = time.perf_counter()
            lines.append(
                f"ring all_reduce 1 GiB on {topology.num_gpus} GPUs (dgx-h100 x {servers}, 3-tier fat-tree, "
                f"flow model): {done - start:.1f} s wall (build {built - start:.1f} s, simulate "
                f"{done - built:.1f} s); {row.time_us / 1e3:.1f} ms, busbw {row.busbw_GBps:.1f} GB/s "
                f"({row.protocol}, {row.channels} channels)"
            )
    if args.step:
        lines += _perf_step(progress)
    if args.commands:
        lines += _perf_commands(progress)
    return "\n".join(lines) + "\n"


_405B = "--model llama3-405b --fabric roce-400g --topology fat-tree --tp 8 --pp 16 --micro-batch 1"
# (name, `fabricsim step` arguments, seconds it may take before it is stopped)
COMMANDS = (
    ("default step", "", 120),
    ("405B, 16,384 H100, 1F1B", f"{_405B} --nodes 2048 --seq-len 8192 --global-batch 2048", 600),
    (
        "405B, 16,384 H100, interleaved vp 8",
        f"{_405B} --nodes 2048 --seq-len 8192 --global-batch 2048 --schedule interleaved --vp 8 "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split",
        600,
    ),
    (
        "405B, 16,384 H100, sequence parallel",
        f"{_405B} --nodes 2048 --seq-len 8192 --global-batch 2048 --sequence-parallel",
        600,
    ),
    (
        "405B, 16,384 H100, CP 16 (131,072 tokens)",
        f"{_405B} --nodes 2048 --cp 16 --seq-len 131072 --global-batch 128",
        300,
    ),
    (
        "DeepSeek-V3-like, 2,048 H100, EP 64",
        "--model deepseek-v3-like --nodes 256 --fabric roce-400g --topology fat-tree --tp 1 --ep 64 --pp 16 "
        "--global-batch 512 --seq-len 4096",
        600,
    ),
    ("405B, 98,304 H100, 1F1B", f"{_405B} --nodes 12288 --seq-len 8192 --global-batch 3072", 900),
    # a step's Perfetto trace ({trace}: a file in a temporary folder, whose size is reported)
    (
        "70B trace, 256 H100",
        "--model llama3-70b --nodes 32 --tp 8 --pp 4 --seq-len 8192 --global-batch 256 --trace {trace}",
        600,
    ),
    (
        "70B trace, 16,384 H100",
        "--model llama3-70b --nodes 2048 --topology fat-tree --tp 8 --pp 4 --seq-len 8192 --global-batch 2048 "
        "--trace {trace}",
        600,
    ),
)


# the command line in a process of its own, which says its peak resident memory last on stderr (Linux: KiB)
_MEASURED = (
    "import resource, sys; from simulator.cli import main; code = main(sys.argv[1:]); "
    "print('peak RSS KiB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(code)"
)


def _perf_commands(progress) -> list[str]:
    """Each of COMMANDS as a user types it (``fabricsim step ... --format json``), in a process of its own so
    that the peak RSS it reports is its own; stopped, and said so, past its time."""
    import tempfile

    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fabricsim-perf-") as folder:
        for name, arguments, limit in COMMANDS:
            progress(f"fabricsim step: {name}")
            lines.append(_perf_command(name, arguments, limit, Path(folder) / "trace.json"))
    return lines


def _perf_command(name: str, arguments: str, limit: float, trace: Path) -> str:
    """One of COMMANDS (``{trace}`` in its arguments: ``trace``) run and measured in a process of its own."""
    import json
    import subprocess
    import sys

    traced = "{trace}" in arguments
    argv = [sys.executable, "-c", _MEASURED, "step"]
    argv += [str(trace) if word == "{trace}" else word for word in arguments.split()]
    argv += ["--format", "json", "--quiet"]
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return f"{name}: stopped after {limit} s (fabricsim step {arguments})"
    wall = time.perf_counter() - start
    said = [line for line in err.splitlines() if line.strip()]
    marks = [line for line in said if line.startswith("peak RSS KiB ")]
    if child.returncode != 0 or not marks:
        others = [line for line in said if not line.startswith("peak RSS KiB ")]
        return f"{name}: failed ({others[-1] if others else child.returncode})"
    rss = int(marks[-1].removeprefix("peak RSS KiB ")) / 2**20
    result = json.loads(out)
    used = "; ".join(note.split(" (")[0] for note in result["notes"]) or "none"
    return (
        f"{name}: {wall:.1f} s wall, peak RSS {rss:.2f} GiB; step {result['step_time_s']:.3f} s, "
        f"{result['tflops_per_gpu']:.0f} TFLOP/s per GPU; reductions: {used}"
        + (" (approximate)" if result["approximate"] else "")
        + (f"; trace {trace.stat().st_size / 1e6:.1f} MB" if traced else "")
    )


def _perf_step(progress) -> list[str]:
    """The scale scenario: Llama-3 405B on 16,384 H100, 2,048 sequences of 8,192 tokens, micro-batch 1
    (16 micro-batches per replica), gradients reduced after the pipeline in one buffer, with
    simulate_step's reductions for symmetric layouts (one replica's step, tensor rank 0's
    transfers, steady state extrapolated from 4 and 8 micro-batches). The analytical model runs
    first on the freshly built fabric (its routing tables are built during the run: "cold"), then
    the flow model, then the analytical model again with the routing tables the first runs built
    ("warm", what each further run of a sweep on the same fabric costs: the three runs share one
    ``RouteCache``, as a sweep passes one to every run). Each run starts after a
    full garbage collection, so that none pays for collecting what the runs before it left (as
    ``timeit`` keeps the collector out of its timings)."""
    import gc
    import resource

    from topologies.routing import RouteCache

    lines = []
    start = time.perf_counter()
    topology = scale_step_topology()
    built = time.perf_counter()
    cache = RouteCache()  # the fabric's routing tables: built by the first run, then reused
    for net, label in (("analytical", "analytical, cold"), ("flow", "flow"), ("analytical", "analytical, warm")):
        progress(f"llama3-405b step on 16384 GPUs ({label})")
        gc.collect()
        t0 = time.perf_counter()
        result = scale_step(topology, net, route_cache=cache)
        wall = time.perf_counter() - t0
        rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB
        lines.append(
            f"llama3-405b step on 16384 H100 (roce-400g fat-tree, {label}): {wall:.2f} s wall "
            f"(+ {built - start:.1f} s building the fabric), peak RSS {rss_gib:.2f} GiB; step "
            f"{result.step_time_s:.2f} s, {result.tflops_per_gpu:.0f} TFLOP/s per GPU, time in network "
            f"{result.exposed_comm_s:.2f} s"
        )
    # what `fabricsim step` with this layout and every default gives: the reductions the step chooses itself
    progress("llama3-405b step on 16384 GPUs as fabricsim step runs it")
    gc.collect()
    t0 = time.perf_counter()
    plain = scale_step(topology, "flow", route_cache=cache, plain=True)
    wall = time.perf_counter() - t0
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    used = "; ".join(note.split(" (")[0] for note in plain.notes) or "none"
    lines.append(
        f"llama3-405b step on 16384 H100 (roce-400g fat-tree, flow, every default as `fabricsim step`: overlapped "
        f"Megatron-Core buckets, layer tasks): {wall:.2f} s wall, peak RSS {rss_gib:.2f} GiB; step "
        f"{plain.step_time_s:.2f} s; reductions: {used}" + (" (approximate)" if plain.approximate else "")
    )
    return lines


def scale_step_topology() -> Topology:
    """The scale scenario's fabric: 2,048 DGX H100 on a RoCE 400G 3-tier fat-tree."""
    from topologies.presets import build_system

    return build_system("dgx-h100", nodes=2048, fabric="roce-400g", topology="fat-tree")


def scale_step(
    topology: Topology, network_model: str, *, route_cache: RouteCache | None = None, plain: bool = False
) -> StepResult:
    """The scale scenario's step on ``topology`` (:func:`scale_step_topology`) with ``network_model``; ``plain``:
    with every default of ``fabricsim step`` (overlapped buckets, per-layer tasks, the reductions the step
    chooses itself) instead of the reductions forced here."""
    import dataclasses

    from simulator.config import SimConfig
    from simulator.studies.training import StepOptions, simulate_step
    from workloads.parallelism import ParallelismSpec
    from workloads.presets import model_preset

    layout = ParallelismSpec(tp=8, pp=16, dp=128, gpus=16384, micro_batch=1, global_batch=2048, seq_len=8192)
    if plain:
        options = StepOptions(config=SimConfig(network_model=network_model), route_cache=route_cache)
        return simulate_step(model_preset("llama3-405b"), layout, system=topology, options=options)
    layout = dataclasses.replace(layout, dp_overlap=False, bucket_bytes=None)
    options = StepOptions(
        config=SimConfig(network_model=network_model),
        granularity="chunk",
        symmetric_replicas=True,
        tensor_rank0_p2p=True,
        steady_state_microbatches=4,
        route_cache=route_cache,
    )
    return simulate_step(model_preset("llama3-405b"), layout, system=topology, options=options)
