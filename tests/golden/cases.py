"""End-to-end golden outputs: what the user-facing commands print, kept in ``tests/golden/*.txt``.

Each case is a function returning text; ``tests/golden/test_golden.py`` compares it with the committed
file byte for byte. Floats are printed with ``repr`` (or the commands' own full-precision JSON), so a
refactor that changes any result by one ulp shows. A change of result is its own commit, with its reason,
and rewrites the files:

    python -m tests.golden.cases --write            # every case
    python -m tests.golden.cases --write step_json  # only the named ones

Timings (wall seconds) are left out: they are not results.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).parent

# (case name, (argv of `fabricsim`), slow?)
CLI_CASES: list[tuple[str, tuple[str, ...], bool]] = [
    ("validate_table", ("validate",), False),
    ("validate_json", ("validate", "--format", "json"), False),
    ("step_table", ("step",), False),
    ("step_json", ("step", "--format", "json"), False),
    (
        "step_analytical_chunk_json",
        ("step", "--net-model", "analytical", "--granularity", "chunk", "--format", "json"),
        False,
    ),
    (
        "bench_dragonfly_ugal",
        (
            "bench",
            "alltoall",
            "--nodes",
            "16",
            "--topology",
            "dragonfly",
            "--routing",
            "ugal",
            "--seed",
            "3",
            "-b",
            "64K",
            "-e",
            "64M",
            "-f",
            "32",
            "--format",
            "json",
        ),
        False,
    ),
    (
        "bench_fat_tree_spray",
        (
            "bench",
            "all_reduce",
            "--nodes",
            "16",
            "--topology",
            "fat-tree",
            "--fabric",
            "roce-400g",
            "--routing",
            "spray",
            "-b",
            "1M",
            "-e",
            "256M",
            "-f",
            "16",
            "--format",
            "json",
        ),
        False,
    ),
    (
        "bench_oversubscribed_dcqcn",
        (
            "bench",
            "all_gather",
            "--nodes",
            "8",
            "--fabric",
            "roce-400g",
            "--oversubscription",
            "4",
            "--congestion",
            "dcqcn",
            "pfc",
            "-b",
            "1M",
            "-e",
            "64M",
            "-f",
            "8",
            "--format",
            "json",
        ),
        False,
    ),
    (
        "bench_sharp",
        (
            "bench",
            "all_reduce",
            "--system",
            "dgx-a100",
            "--nodes",
            "4",
            "--sharp",
            "-b",
            "64K",
            "-e",
            "1G",
            "-f",
            "16",
            "--format",
            "json",
        ),
        False,
    ),
    (
        "bench_explain",
        ("bench", "all_reduce", "--nodes", "4", "-b", "1M", "-e", "1G", "-f", "32", "--explain", "--format", "json"),
        False,
    ),
    (
        "bench_a100_table",
        ("bench", "all_reduce", "--system", "dgx-a100", "--nodes", "2", "-b", "8", "-e", "1G", "-f", "4"),
        False,
    ),
    ("topo_fat_tree", ("topo", "--nodes", "64", "--topology", "fat-tree"), False),
]

# one bench per algorithm x collective on two 4-GPU DGX H100 servers (NVLS-capable, so every algorithm can run)
ALGORITHM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall")
ALGORITHM_NAMES = (
    "ring",
    "tree",
    "nvls",
    "nvlstree",
    "collnet",
    "hd",
    "pat",
    "hierarchical",
    "sendrecv",
    "pairwise",
    "direct",
)


def cli_output(argv: tuple[str, ...]) -> str:
    """What `fabricsim ARGV` prints on stdout (stderr and the exit code too when it fails)."""
    from simulator.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code
    text = out.getvalue()
    if code:
        text += f"[exit {code}] {err.getvalue()}"
    return text


def algorithm_benches() -> str:
    """Every algorithm forced on every collective it runs, 3 sizes, full precision: on two DGX H100 servers
    using 4 GPUs each, or where the algorithm needs otherwise, on one server (NVLS) or one GPU on each of
    four servers (PAT)."""
    from simulator.collectives import ALGORITHMS
    from simulator.collectives.tuner import CollectivePolicy
    from simulator.config import SimConfig
    from simulator.studies.nccl_tests import run_bench
    from topologies.presets import build_system

    layouts = [(build_system("dgx-h100", nodes=n), n, g) for n, g in ((2, 4), (1, 8), (4, 1))]
    lines = []
    for name, algorithm in ALGORITHMS.items():
        for kind in ALGORITHM_KINDS:
            if kind not in {k.value for k in algorithm.kinds}:
                continue
            config = SimConfig(collectives=CollectivePolicy(algorithm=name, collnet=name == "collnet"))
            for topology, nodes, gpn in layouts:
                try:
                    rows = run_bench(
                        kind, system=topology, gpus_per_node=gpn, sizes=[4096, 1 << 20, 64 << 20], config=config
                    )
                except ValueError:
                    continue
                for r in rows:
                    lines.append(
                        f"{name} {kind} {nodes}x{gpn} {r.size_bytes} {r.time_us!r} {r.busbw_GBps!r} "
                        f"{r.algorithm} {r.protocol} {r.channels}"
                    )
                break
            else:
                lines.append(f"{name} {kind}: runs on none of the layouts")
    return "\n".join(lines) + "\n"


def link_failure() -> str:
    """A 64-GPU all_reduce on a top-of-rack fabric whose busiest uplink fails half-way, and one degraded."""
    import numpy as np

    from simulator.api import simulate
    from simulator.config import LinkEvent, SimConfig
    from topologies.presets import build_system
    from topologies.topology import LinkTier
    from workloads.collectives import Collective, CollectiveKind
    from workloads.tasks import Workload

    topo = build_system("dgx-h100", nodes=8, rail_optimised=False)
    work = Workload.sequence(
        [Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=256 << 20, group=tuple(range(64)))], nranks=64
    )
    healthy = simulate(topo, work)
    fabric = np.flatnonzero(np.asarray(topo.link_tier) > LinkTier.NIC)
    busiest = int(fabric[np.argmax(healthy.link_bytes[fabric])])
    half = healthy.collectives[0].start_s + healthy.collectives[0].time_s / 2
    lines = [f"healthy {healthy.collectives[0].time_s!r} busiest link {busiest} {topo.link_names[busiest]}"]
    for scale in (0.0, 0.25):
        for model in ("flow", "analytical"):
            config = SimConfig(network_model=model, link_events=(LinkEvent(time_s=half, link=busiest, scale=scale),))
            r = simulate(topo, work, config=config)
            moved = r.link_bytes
            lines.append(
                f"scale {scale} {model}: time {r.collectives[0].time_s!r} busiest moved "
                f"{float(moved[busiest])!r} total {float(moved.sum())!r} rerates {r.network_rerates}"
            )
    return "\n".join(lines) + "\n"


def _step_figures(result) -> str:
    data = result.as_dict()
    return json.dumps(data, indent=1, default=str, sort_keys=True) + "\n"


def scale_405b() -> str:
    """`fabricsim perf --step`'s scenario: Llama-3 405B on 16,384 H100 with the symmetric-layout reductions."""
    from simulator.cli.perf import scale_step, scale_step_topology

    topology = scale_step_topology()
    return "".join(f"# {net}\n" + _step_figures(scale_step(topology, net)) for net in ("analytical", "flow"))


def sc21_table() -> str:
    """Megatron SC21 Table 1 as `python -m simulator.validation.sc21` computes it, full precision, no wall times."""
    from simulator.validation.sc21 import sc21_check

    lines = []
    for r in sc21_check():
        lines.append(
            f"{r.model} {r.gpus} {r.tp} {r.pp} {r.dp} {r.vp} {r.micro_batch} {r.microbatches} "
            f"step {r.step_time_s!r} exposed {r.exposed_comm_s!r} bubble {r.bubble_s!r} "
            f"pred {r.predicted_tflops!r} meas {r.measured_tflops!r}"
        )
    return "\n".join(lines) + "\n"


def cases() -> dict[str, tuple[Callable[[], str], bool]]:
    """name -> (function producing the text, slow?)."""
    out: dict[str, tuple[Callable[[], str], bool]] = {}
    for name, argv, slow in CLI_CASES:
        out[name] = ((lambda argv=argv: cli_output(argv)), slow)
    out["algorithm_benches"] = (algorithm_benches, False)
    out["link_failure"] = (link_failure, False)
    out["scale_405b"] = (scale_405b, True)
    out["sc21_table"] = (sc21_table, True)
    return out


def path(name: str) -> Path:
    return HERE / f"{name}.txt"


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "--write":
        print(__doc__)
        return 2
    wanted = argv[1:] or list(cases())
    table = cases()
    unknown = [n for n in wanted if n not in table]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}; expected some of {', '.join(table)}", file=sys.stderr)
        return 2
    for name in wanted:
        path(name).write_text(table[name][0]())
        print(f"wrote {path(name).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
