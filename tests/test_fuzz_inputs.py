"""Property: any input ends in a result or in one clear error (issue "One house", part 6).

Over the CLI's options (bench, step, topo argv built from valid values mixed with edge numbers, huge digit strings,
empty strings and unicode) and the public API's arguments (run_bench, Collective, CollectivePolicy, SimConfig,
build_system): the CLI exits 0, or 2 with exactly one stderr line starting ``fabricsim: error:`` and no traceback;
the API returns, or raises a ValueError whose message names one of the fields it was given. Never another exception.

Bounded for CI (small sizes, at most 2 nodes, a handful of layers) and derandomized, so the same examples run
every time; the whole module takes well under a minute on one core.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.collectives.tuner import CollectivePolicy
from simulator.config import SimConfig
from simulator.studies.nccl_tests import run_bench
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind

FUZZ = settings(
    max_examples=400, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# ---- values: valid ones mixed with the edge cases of their kind ------------------------------------------------

EDGE_TEXT = [
    "",
    " ",
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e308",
    "9" * 40,
    "9" * 400,
    "1.5",
    "0x10",
    "１",
    "é",
    "\u202e",
    "None",
    "true",
    "8K8",
    "1e3",
]
SMALL_SIZES = ["8", "1K", "64K", "1M", "4M", "0", "1024", "4MiB", "2.5K"]


@st.composite
def argv_of(draw, fixed: list[str], options: dict[str, list[str]], switches: list[list[str]]) -> list[str]:
    """``fixed``, then up to five of ``options`` with valid values, then up to two of them again (the last given
    wins) with edge values, then one of ``switches``: mostly runnable command lines, each with a few bad spots."""
    argv = list(fixed)
    for name in draw(st.lists(st.sampled_from(sorted(options)), unique=True, max_size=5)):
        argv += [name, draw(st.sampled_from(options[name]))]
    for name, text in draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(options)), st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=6))),
            max_size=2,
        )
    ):
        argv += [name, text]
    return argv + draw(st.sampled_from(switches))


SYSTEMS = ["dgx-h100", "dgx-a100", "hgx-b200", "hgx-h200", "pcie-rtx4090"]
FABRIC = {
    "--system": SYSTEMS,
    "--topology": ["leaf-spine", "fat-tree", "rail-only", "dragonfly"],
    "--fabric": ["ib-ndr", "roce-400g", "ib-hdr"],
    "--oversubscription": ["1", "2", "1.5"],
    "--planes": ["1", "2", "8"],
    "--nics-per-node": ["4", "8"],
}
FABRIC_SWITCHES = [[], ["--no-rail-optimised"], ["--no-gdr"]]

BENCH_ARGV = st.builds(
    lambda collective, rest: [collective, *rest],
    st.sampled_from(
        [
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "broadcast",
            "reduce",
            "sendrecv",
            "alltoall",
            "allreduce",
            "bogus",
            "",
        ]
    ),
    argv_of(
        ["-b", "8", "-e", "4M"],
        {
            **FABRIC,
            "--nodes": ["1", "2"],
            "-b": SMALL_SIZES,
            "-f": ["2", "4", "1.5", "1e308"],
            "-i": ["1M", "512K"],
            "-d": ["float", "half", "int8", "double"],
            "-o": ["sum", "max"],
            "-r": ["0", "1", "7"],
            "-g": ["1", "2", "8"],
            "--gpus-per-node": ["1", "2", "8"],
            "--routing": ["ecmp", "adaptive", "spray", "valiant", "ugal"],
            "--qps-per-connection": ["1", "4", "128"],
            "--congestion": ["dcqcn", "pfc", "ib-credit"],
            "--net-model": ["flow", "analytical"],
            "--algo": ["ring", "tree", "nvls", "nvlstree", "pat", "collnet"],
            "--proto": ["LL", "ll128", "Simple"],
            "--channels": ["1", "4", "32"],
            "--seed": ["0", "7", "-3"],
            "--format": ["table", "csv", "json"],
        },
        [s + x for s in FABRIC_SWITCHES for x in ([], ["--explain"], ["--sharp"])],
    ),
)

# a small custom GPT on one or two servers: every valid combination runs in well under a second
STEP_ARGV = argv_of(
    [
        "--model",
        "gpt",
        "--layers",
        "2",
        "--hidden",
        "256",
        "--heads",
        "4",
        "--seq-len",
        "256",
        "--granularity",
        "chunk",
        "--nodes",
        "1",
        "--global-batch",
        "8",
    ],
    {
        **FABRIC,
        "--nodes": ["1", "2"],
        "--tp": ["1", "2", "8"],
        "--pp": ["1", "2"],
        "--dp": ["1", "2", "4"],
        "--global-batch": ["8", "16"],
        "--micro-batch": ["1", "2"],
        "--bucket-mb": ["25", "0.5", "1e308"],
        "--dtype": ["bf16", "fp16", "fp8"],
        "--schedule": ["1f1b", "gpipe"],
        "--recompute": ["none", "selective", "full"],
        "--zero": ["0", "1", "3"],
        "--net-model": ["flow", "analytical"],
        "--vocab": ["1000", "50257"],
        "--format": ["table", "json"],
    },
    [s + x for s in FABRIC_SWITCHES for x in ([], ["--fsdp"], ["--sequence-parallel"])],
)

TOPO_ARGV = argv_of([], {**FABRIC, "--nodes": ["1", "2", "16"], "--nic-cables": ["optical", "copper"]}, FABRIC_SWITCHES)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def check_cli(argv: list[str]) -> None:
    code, out, err = run_cli(argv)
    if code == 0:
        assert err == "" and out, (argv, err)
        return
    assert code == 2, (argv, code, err)
    assert err.count("\n") == 1 and err.startswith("fabricsim: error:"), (argv, err)
    assert "Traceback" not in err and out == "", (argv, err)


@FUZZ
@given(BENCH_ARGV)
def test_fuzz_bench_argv(argv):
    check_cli(["bench", *argv])


@FUZZ
@given(STEP_ARGV)
def test_fuzz_step_argv(argv):
    check_cli(["step", *argv])


@settings(FUZZ, max_examples=150)
@given(TOPO_ARGV)
def test_fuzz_topo_argv(argv):
    check_cli(["topo", *argv])


# ---- the Python API ----------------------------------------------------------------------------------------------

EDGE_VALUES = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    2**64,
    1.5,
    float("nan"),
    float("inf"),
    1e308,
    "",
    "x",
    "８",
    [],
    {},
    [1, 2],
    (0,),
    np.int64(2),
    np.float64(2.0),
    np.bool_(True),
    b"8",
]


def arg(*valid) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(list(valid)), st.sampled_from(EDGE_VALUES))


def kwargs_of(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[dict]:
    """Any subset of ``fields``, each with a value of its strategy."""
    return st.fixed_dictionaries({}, optional=fields)


def check_api(
    call, kwargs: dict, names: dict[str, tuple[str, ...]] | None = None, *, also: tuple[str, ...] = ()
) -> None:
    """``call(**kwargs)`` returns, or raises a ValueError naming one of the given fields (``names`` maps a keyword to
    the other names its message may use; ``also``, names of positional arguments)."""
    try:
        call(**kwargs)
    except ValueError as exc:
        message = str(exc)
        allowed = {alias for key in kwargs for alias in (key, *(names or {}).get(key, ()))} | set(also)
        assert "\n" not in message, message
        assert any(name in message for name in allowed), (kwargs, message)


RUN_BENCH = kwargs_of(
    {
        "system": arg("dgx-h100", "hgx-b200", "pcie-rtx4090"),
        "nodes": arg(1, 2, np.int64(2)),
        "gpus_per_node": arg(1, 2, 8),
        "minbytes": arg(8, "1K", 0, "4M"),
        "maxbytes": arg("4M", 64),
        "stepfactor": arg(2, 1.5, 1e308),
        "stepbytes": arg(None, "1M"),
        "dtype": arg("float", "half", "int8"),
        "op": arg("sum", "max"),
        "root": arg(0, 1, 7),
        "gpus_per_process": arg(1, 2, 8),
        "sizes": arg(None, [8, 1024], [0], ["1K"], [np.int64(64)]),
        "explain": arg(False, True),
        "config": arg(None, SimConfig(), SimConfig(network_model="analytical")),
    }
)


@FUZZ
@given(st.sampled_from([k.value for k in CollectiveKind] + ["allreduce", "bogus", ""]), RUN_BENCH)
def test_fuzz_run_bench(kind, kwargs):
    kwargs = {"minbytes": 8, "maxbytes": 64, **kwargs}
    check_api(
        lambda **kw: run_bench(kind, **kw),
        kwargs,
        {
            "dtype": ("datatype",),
            "gpus_per_process": ("gpus_per_process",),
            "minbytes": ("maxbytes", "sizes"),
            "maxbytes": ("minbytes",),
            "nodes": ("nodes",),
            "gpus_per_node": ("collective", "sendrecv", "root"),
            "system": ("nodes",),
            "config": ("algorithm", "protocol", "channels"),
        },
        also=("collective",),
    )


@FUZZ
@given(
    kwargs_of(
        {
            "kind": arg(CollectiveKind.ALL_REDUCE, CollectiveKind.BROADCAST, CollectiveKind.ALL_TO_ALL, "all_gather"),
            "nbytes": arg(0, 8, 64, 1024),
            "group": arg((0, 1), [0, 1, 2, 3], tuple(np.arange(4)), range(2)),
            "root": arg(0, 1),
            "dtype": arg("float32", "half", "int8"),
            "op": arg("sum", "max"),
            "splits": arg(None, ((0, 8), (8, 0))),
        }
    )
)
def test_fuzz_collective(kwargs):
    kwargs = {"kind": CollectiveKind.ALL_REDUCE, "nbytes": 8, "group": (0, 1), **kwargs}
    check_api(
        Collective,
        kwargs,
        {
            "group": ("nbytes",),
            "dtype": ("nbytes",),
            "kind": ("nbytes", "splits"),
            "splits": ("nbytes",),
            "nbytes": ("splits",),
        },
    )


@FUZZ
@given(
    kwargs_of(
        {
            "algorithm": arg(None, "ring", "NVLS"),
            "protocol": arg(None, "LL", "simple"),
            "nchannels": arg(None, 1, 32),
            "nvls": arg(True, False),
            "collnet": arg(True, False),
            "qps_per_connection": arg(1, 4),
            "min_channels": arg(1, 2),
            "max_channels": arg(32, 64),
            "algorithms": arg(None),
            "protocols": arg(None),
        }
    )
)
def test_fuzz_collective_policy(kwargs):
    check_api(
        CollectivePolicy,
        kwargs,
        {"nchannels": ("channels",), "min_channels": ("max_channels",), "max_channels": ("min_channels",)},
    )


@FUZZ
@given(
    kwargs_of(
        {
            "network_model": arg("flow", "analytical"),
            "routing": arg("ecmp", "ugal"),
            "seed": arg(0, 7),
            "pxn": arg(True, False),
            "launch_overhead_s": arg(0.0, 1e-6),
            "failed_links": arg(frozenset()),
            "congestion": arg((), ("dcqcn",)),
            "task_ranks": arg(None, (), (0,)),
            "link_events": arg(()),
            "collectives": arg(CollectivePolicy()),
        }
    )
)
def test_fuzz_sim_config(kwargs):
    check_api(SimConfig, kwargs, {"network_model": ("congestion",)})


@FUZZ
@given(
    st.sampled_from(["dgx-h100", "pcie-rtx4090", "hgx-b200", "", "x"]),
    kwargs_of(
        {
            "nodes": arg(1, 2, np.int64(2)),
            "topology": arg("leaf-spine", "fat-tree", "rail-only", "dragonfly"),
            "fabric": arg(None, "ib-ndr", "roce-400g"),
            "oversubscription": arg(1.0, 2.0),
            "rail_optimised": arg(True, False),
            "nics_per_node": arg(None, 4, 8),
            "planes": arg(1, 2),
            "gdr": arg(True, False),
        }
    ),
)
def test_fuzz_build_system(name, kwargs):
    check_api(
        lambda **kw: build_system(name, **kw),
        kwargs,
        {"oversubscription": ("oversubscription/planes",), "planes": ("oversubscription/planes",)},
        also=("system",),
    )
