"""Validation against measured nccl-tests tables shipped in ``simulator/validation/data``.

Each :class:`Series` names a table, the rows it takes (by substrings of the table's own
columns) and the settings of the measurement: the system preset follows from the table's
``gpu`` column, nodes and GPUs per node from ``nnodes`` and ``nranks``, and the algorithm and
channel count are forced only where the measurement forced them (NCCL_ALGO, NCCL_MIN_CTAS,
NCCL_NVLS_ENABLE=0). Nothing here is tuned per row: a series only says how the measurement ran.

Error of a row: ``t_pred / t_meas - 1`` (tables that give only busbw have t_meas derived from
it: t = size / (busbw / busbw_factor)).

``run_validation()`` replays every series (``select_series("A100")`` picks some) and
``format_report`` prints median and p90 of |error| per series and regime (``REGIMES``: latency
< 64 KiB, mid 64 KiB to 64 MiB, bandwidth >= 64 MiB, all sizes) as a table, CSV or JSON: ``fabricsim
validate``. ``rows_frame`` (a pandas DataFrame) and ``format_rows`` (CSV or JSON) give every compared
row: measured and predicted time and busbw, the algorithm, protocol and channels of the prediction,
and the signed error (``fabricsim validate --rows FILE``). Your own table, in the shipped tables'
columns (``TABLE_COLUMNS``), goes through ``data_series(path, system=..., ...)``: ``fabricsim validate
--data FILE.csv``; its rows are checked and errors name the file, line and field.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TextIO, overload

from topologies.checks import read_text, readable_file, reject
from topologies.presets import SYSTEMS
from workloads.collectives import CollectiveKind

from ..collectives.nccl_model import DEFAULT_NCCL_VERSION, launched_channels
from ..collectives.tuner import CollectivePolicy
from ..config import SimConfig
from ..studies.nccl_tests import collective_for_size, run_bench
from .inspector import is_inspector_json, parse_inspector_json

LATENCY_REGIME_MAX_BYTES = 64 * 1024  # < 64 KiB
BANDWIDTH_REGIME_MIN_BYTES = 64 * 1024 * 1024  # >= 64 MiB
# the size regimes of a report, each with its label: the three a row falls in (``regime``), then every row
REGIMES = (
    ("latency", f"latency (< {LATENCY_REGIME_MAX_BYTES >> 10} KiB)"),
    ("mid", f"mid ({LATENCY_REGIME_MAX_BYTES >> 10} KiB - {BANDWIDTH_REGIME_MIN_BYTES >> 20} MiB)"),
    ("bandwidth", f"bandwidth (>= {BANDWIDTH_REGIME_MIN_BYTES >> 20} MiB)"),
    ("all", "all sizes"),
)
# the columns of every table (shipped or yours); time_us may be empty when busbw_GBps is given
TABLE_COLUMNS = (
    "collective",
    "nranks",
    "nnodes",
    "gpu",
    "interconnect",
    "size_bytes",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "source",
    "notes",
)

# GPU named in a table's `gpu` column -> system preset with that GPU and its usual wiring
GPU_SYSTEMS = (
    ("RTX 4090", "pcie-rtx4090"),
    ("A100", "dgx-a100"),
    ("H100", "dgx-h100"),
    ("H200", "hgx-h200"),
    ("B200", "hgx-b200"),
)


# The NCCL release of the HGX B200 tables (b200_vultr_hgx_1node_2node_allcoll.csv), which do not state it: their
# point-to-point rows switch from LL to Simple between 512 KiB and 1 MiB a peer on one server (sendrecv 35.1 us at
# 512 KiB, 27.3 us at 1 MiB; all-to-all 38.8 us at 4 MiB, 512 KiB a peer, 34.6 us at 8 MiB) and between 32 and
# 64 KiB across two: NCCL_P2P_LL_THRESHOLD x the per-peer channel maximum, the rule of 2.22-2.28 (p2p.uses_ll);
# Blackwell runs from 2.25. Every release from 2.25 to 2.28 enables the same for these servers.
B200_VULTR_NCCL_VERSION = "2.28"


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    name: str
    file: str | os.PathLike  # a shipped table's name, or a path to your own table
    where: tuple[tuple[str, str], ...] = ()  # (column, substring) that every row must match
    collectives: tuple[str, ...] = ()  # restrict to these collectives (empty: all)
    nnodes: int | None = None
    algorithm: str | None = None
    nchannels: int | None = None
    gpus_per_process: int = 1  # nccl-tests -g
    ring_only: bool = True  # every row was measured with NCCL's Ring algorithm
    settings: str = ""  # how the measurement ran, in words
    system: str | None = None  # system preset (None: from each row's gpu column)
    protocol: str | None = None  # forced protocol (NCCL_PROTO), None: NCCL's choice
    nvls: bool = True  # NCCL_NVLS_ENABLE
    qps_per_connection: int = 1  # NCCL_IB_QPS_PER_CONNECTION
    nccl_version: str | None = None  # the NCCL release whose enablement the tuner follows (None: the default)


SERIES = (
    Series(
        name="H100 8 GPU reduce_scatter, NCCL_ALGO=Ring",
        file="h100_8gpu_reducescatter_ring_issue1047.csv",
        algorithm="ring",
        settings="NCCL_ALGO=Ring, one node",
    ),
    Series(
        name="H200 8 GPU 16 GiB, Ring (NVLS off / AG / RS)",
        file="h200_8gpu_16GiB_collectives_mleng.csv",
        where=(("interconnect", "algo Ring"),),
        algorithm="ring",
        gpus_per_process=8,
        settings="NCCL_NVLS_ENABLE=0 for all_reduce; all_gather/reduce_scatter default (Ring)",
    ),
    Series(
        name="H200/B200 all_reduce 8 GiB by GPU count, NVLS off",
        file="nvls_vs_ring_gpucount_h200_b200_mleng.csv",
        where=(("interconnect", "NCCL_NVLS_ENABLE=0"),),
        nvls=False,
        settings="NCCL_NVLS_ENABLE=0",
    ),
    Series(
        name="A100 8 GPU all_reduce, one process -g 8",
        file="a100_sxm4_80gb_1node_8gpu.csv",
        where=(("source", "run 1"),),
        gpus_per_process=8,
        settings="-g 8; default NCCL choice; no NVLS on A100",
    ),
    Series(
        name="A100 8 GPU all_reduce, mpirun -np 8",
        file="a100_sxm4_80gb_1node_8gpu.csv",
        where=(("source", "run 2"),),
        settings="default NCCL choice; no NVLS on A100",
    ),
    # the deepops commit that added this table also added its job (NCCL_ALGO=RING) and image (NCCL 2.11.4): most
    # likely rings at every size, replayed here with NCCL's default choice (docs/models.md section 15, "What the
    # 2x DGX A100 table ran")
    Series(
        name="2x DGX A100 HDR all_reduce",
        file="a100_dgx_2node_ib_hdr_k8s_deepops.csv",
        settings="default NCCL choice, 8x HDR per node (the source's job: NCCL_ALGO=RING, NCCL 2.11.4)",
    ),
    Series(
        name="2x H100 NDR all_reduce, Ring + MIN_CTAS=24 + QPS=2",
        file="h100_ib_ndr_multinode_issue309.csv",
        where=(("notes", "NCCL_ALGO=Ring NCCL_MIN_CTAS=24"),),
        algorithm="ring",
        nchannels=24,
        qps_per_connection=2,
        settings="NCCL_ALGO=Ring NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2",
    ),
    Series(
        name="B200 1 node all_gather/reduce_scatter",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("all_gather", "reduce_scatter"),
        nnodes=1,
        algorithm="ring",
        settings="default (Ring for AG/RS on one node)",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="2x B200 NDR all_gather/reduce_scatter",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("all_gather", "reduce_scatter"),
        nnodes=2,
        algorithm="ring",
        settings="default (Ring: multi-node NVLS/CollNet AG/RS need SHARP, PAT needs 1 GPU per node)",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="8x RTX 4090 PCIe all_reduce, P2P off",
        file="rtx4090_8gpu_pcie_p2p_off_on.csv",
        where=(("interconnect", "stock driver"),),
        gpus_per_process=8,
        settings="stock driver, P2P off (through host), -g 8",
    ),
    # ---- NCCL's default choice (NVLS, NVLSTree, alltoall, point-to-point) -------------------------
    Series(
        name="DGX H100 all_reduce, default (NVLS)",
        file="h100_dgx_1node_nvdgxc.csv",
        ring_only=False,
        settings="NVIDIA dgxc recipe, default NCCL choice",
    ),
    Series(
        name="H200 8 GPU all_reduce 16 GiB, NVLS",
        file="h200_8gpu_16GiB_collectives_mleng.csv",
        where=(("interconnect", "algo NVLS"),),
        gpus_per_process=8,
        ring_only=False,
        settings="NCCL_NVLS_ENABLE=1",
    ),
    Series(
        name="H200/B200 all_reduce 8 GiB by GPU count, default",
        file="nvls_vs_ring_gpucount_h200_b200_mleng.csv",
        where=(("interconnect", "NVLS default"),),
        ring_only=False,
        settings="default (NVLS allowed)",
    ),
    Series(
        name="B200 1 node all_reduce, default (NVLS)",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("all_reduce",),
        nnodes=1,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="B200 1 node alltoall",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("alltoall",),
        nnodes=1,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="B200 1 node sendrecv",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("sendrecv",),
        nnodes=1,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="2x B200 NDR all_reduce, default (NVLSTree)",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("all_reduce",),
        nnodes=2,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="2x B200 NDR alltoall",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("alltoall",),
        nnodes=2,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="2x B200 NDR sendrecv",
        file="b200_vultr_hgx_1node_2node_allcoll.csv",
        collectives=("sendrecv",),
        nnodes=2,
        ring_only=False,
        settings="default",
        nccl_version=B200_VULTR_NCCL_VERSION,
    ),
    Series(
        name="H100 NDR 2 and 4 nodes all_reduce, default (XE9680)",
        file="h100_ib_ndr_multinode_issue309.csv",
        where=(("notes", "default algo"),),
        ring_only=False,
        settings="default NCCL 2.26.2",
    ),
    Series(
        name="H100 NDR 2/4/8 nodes all_reduce, default",
        file="h100_ib_ndr_multinode_issue309.csv",
        where=(("notes", "default env"),),
        ring_only=False,
        settings="default",
    ),
    Series(
        name="8x H100 NDR all_reduce, MIN_CTAS=24 + QPS=2",
        file="h100_ib_ndr_multinode_issue309.csv",
        where=(("notes", "NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2"),),
        nnodes=8,
        nchannels=24,
        qps_per_connection=2,
        ring_only=False,
        settings="NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    series: str
    collective: str
    gpu: str
    nranks: int
    nnodes: int
    size_bytes: int
    t_meas_us: float
    t_pred_us: float
    busbw_meas_GBps: float
    busbw_pred_GBps: float
    algorithm: str  # the prediction's choice (NCCL's, or what the measurement forced)
    protocol: str
    channels: int
    source: str
    launched_channels: int | None = None  # channels the prediction launches at this size (ring and tree)
    nccl_channels: int | None = None  # channels NCCL launched, where the measurement records it (inspector)

    @property
    def error(self) -> float:
        """Signed: negative when the model is too fast."""
        return self.t_pred_us / self.t_meas_us - 1.0

    @property
    def regime(self) -> str:
        return regime(self.size_bytes)


def regime(size_bytes: int) -> str:
    """The size regime of a message: "latency" below 64 KiB, "bandwidth" from 64 MiB, "mid" between.

    >>> [regime(s) for s in (65535, 65536, 64 * 2**20 - 1, 64 * 2**20)]
    ['latency', 'mid', 'mid', 'bandwidth']
    """
    if size_bytes < LATENCY_REGIME_MAX_BYTES:
        return "latency"
    if size_bytes >= BANDWIDTH_REGIME_MIN_BYTES:
        return "bandwidth"
    return "mid"


def _open_table(file: str | os.PathLike) -> TextIO:
    """A shipped table by name (``"a100_sxm4_80gb_1node_8gpu.csv"``) or any CSV file by path.

    A ``pathlib.Path`` (any os.PathLike) or a string with a directory part is a path; a bare name
    is a shipped table if one has that name, else a file in the working directory.
    """
    if not isinstance(file, os.PathLike) and "/" not in file and os.sep not in file:
        shipped = resources.files("simulator.validation") / "data" / file
        if shipped.is_file():
            return io.TextIOWrapper(shipped.open("rb"), encoding="utf-8", newline="")  # as Path.open(newline="")
    path = readable_file("table", file) if not str(file).strip() else Path(file)
    if not path.is_file():
        raise ValueError(
            f"table {str(file)!r}: no such file (and no shipped table of that name); expected a CSV "
            f"file with the columns {','.join(TABLE_COLUMNS)}"
        )
    # UTF-8, and a byte-order mark as Excel writes one is no part of the first column's name
    return io.StringIO(read_text("table", path), newline="")


def _inspector_lines(text: str, name: str) -> list[tuple[int, dict[str, str]]]:
    """NCCL inspector JSON (``inspector``) as table rows: one per collective, communicator shape and size, its
    median time, the channels NCCL launched in ``nccl_channels``; no GPU (the system is given)."""
    trace = parse_inspector_json(text, name=name)
    return [
        (
            r.lines[0],
            {
                "collective": r.collective,
                "nranks": str(r.nranks),
                "nnodes": str(r.nnodes),
                "gpu": "",
                "interconnect": "",
                "size_bytes": str(r.size_bytes),
                "time_us": repr(r.time_us),
                "algbw_GBps": "",
                "busbw_GBps": "",
                "source": f"{name}: median of {r.records} inspector record(s), first at line {r.lines[0]}",
                "notes": "NCCL inspector, kernel time",
                "nccl_channels": "" if r.channels is None else str(r.channels),
            },
        )
        for r in trace.rows()
    ]


def _read_lines(file: str | os.PathLike) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) of every data row of a table, after checking its header; NCCL inspector JSON (told by
    its content) gives one row per collective, communicator shape and size (``_inspector_lines``)."""
    with _open_table(file) as handle:
        text = handle.read()
    if is_inspector_json(text):
        return _inspector_lines(text, str(file))
    with io.StringIO(text, newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or ()
        missing = [c for c in TABLE_COLUMNS if c not in header]
        if missing:
            raise ValueError(
                f"{file} line 1: column(s) {', '.join(missing)} missing; expected the columns {','.join(TABLE_COLUMNS)}"
            )
        rows = []
        for row in reader:
            if None in row:
                raise ValueError(
                    f"{file} line {reader.line_num}: {len(row) - 1 + len(row[None])} fields; "
                    f"expected {len(header)} (as the header)"
                )
            rows.append((reader.line_num, row))
    if not rows:
        raise ValueError(f"{file}: no data rows; expected one row per measured size")
    return rows


def read_table(file: str | os.PathLike) -> list[dict[str, str]]:
    """Rows of a calibration table: a shipped one by name, or your own CSV by path (same columns)."""
    return [row for _, row in _read_lines(file)]


@overload
def _number(
    row: dict[str, str],
    field: str,
    where: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    strict: bool = False,
    empty_ok: Literal[False] = False,
) -> float: ...


@overload
def _number(
    row: dict[str, str],
    field: str,
    where: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    strict: bool = False,
    empty_ok: bool,
) -> float | None: ...


def _number(
    row: dict[str, str],
    field: str,
    where: str,
    *,
    integer: bool = False,
    minimum: float = 0.0,
    strict: bool = False,
    empty_ok: bool = False,
) -> float | None:
    text = (row[field] or "").strip()
    if not text and empty_ok:
        return None
    kind = "an integer" if integer else "a number"
    bound = f"{'>' if strict else '>='} {minimum:g}"
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise ValueError(f"{where}: {field}: {text!r} is not {kind}; expected {kind} {bound}") from None
    if value != value or value in (float("inf"), float("-inf")) or value < minimum or (strict and value == minimum):
        raise ValueError(f"{where}: {field}: {text!r} is not allowed; expected {kind} {bound}")
    return value


def check_row(row: dict[str, str], *, where: str, system: str | None = None) -> None:
    """Raise ValueError naming ``where`` (file and line) and the field when a table row cannot be replayed."""
    try:
        CollectiveKind.parse(row["collective"])
    except ValueError:
        raise ValueError(
            f"{where}: collective: {row['collective']!r} is not known; expected one of "
            f"{', '.join(k.value for k in CollectiveKind)}"
        ) from None
    nranks = _number(row, "nranks", where, integer=True, minimum=1)
    nnodes = _number(row, "nnodes", where, integer=True, minimum=1)
    if nranks % nnodes:
        raise ValueError(
            f"{where}: nranks: {nranks} is not a multiple of nnodes ({nnodes}); expected the same "
            "number of GPUs on every node"
        )
    _number(row, "size_bytes", where, integer=True, minimum=0)
    time_us = _number(row, "time_us", where, minimum=0, strict=True, empty_ok=True)
    _number(row, "algbw_GBps", where, minimum=0, empty_ok=True)
    try:
        _number(row, "busbw_GBps", where, minimum=0, strict=time_us is None, empty_ok=time_us is not None)
    except ValueError as exc:
        if time_us is None:
            raise ValueError(f"{exc} (time_us is empty, so busbw_GBps must give the time)") from None
        raise
    if system is None:
        try:
            system_for_gpu(row["gpu"])
        except ValueError:
            raise ValueError(
                f"{where}: gpu: {row['gpu']!r} names no GPU with a system preset; expected a name "
                f"containing one of {', '.join(n for n, _ in GPU_SYSTEMS)} (or give the system)"
            ) from None


def system_for_gpu(gpu: str) -> str:
    for needle, system in GPU_SYSTEMS:
        if needle in gpu:
            return system
    raise ValueError(
        f"calibration row: GPU {gpu!r} has no system preset; expected one of {', '.join(n for n, _ in GPU_SYSTEMS)}"
    )


def _rows(series: Series) -> list[tuple[int, dict[str, str]]]:
    """(line, row) of the rows ``series`` takes, each checked (errors name the file and line)."""
    rows = [
        (line, r)
        for line, r in _read_lines(series.file)
        if all(text in r[column] for column, text in series.where)
        and (not series.collectives or r["collective"] in series.collectives)
    ]
    for line, r in rows:
        check_row(r, where=f"{series.file} line {line}", system=series.system)
    rows = [(line, r) for line, r in rows if series.nnodes is None or int(r["nnodes"]) == series.nnodes]
    if not rows:
        raise ValueError(f"series {series.name!r}: no row of {series.file} matches")
    return rows


def measured_time_us(row: dict[str, str], factor: float) -> float:
    if row["time_us"].strip():
        return float(row["time_us"])
    algbw = float(row["busbw_GBps"]) / factor
    return int(row["size_bytes"]) / (algbw * 1e9) * 1e6


def compare(
    series: Series, *, net_model: str = "flow", net_proxy: bool = True, proxy_step_us: float | None = None
) -> list[Comparison]:
    """Simulate every row of ``series`` with the measurement's settings (``net_proxy``, ``proxy_step_us``:
    SimConfig's network proxy model, for its ablation and its fit)."""
    groups: dict[tuple, list[dict[str, str]]] = {}
    first_line: dict[tuple, int] = {}
    for line, row in _rows(series):
        key = (row["collective"], int(row["nranks"]), int(row["nnodes"]), row["gpu"])
        groups.setdefault(key, []).append(row)
        first_line.setdefault(key, line)
    out = []
    config = SimConfig(
        network_model=net_model,
        net_proxy=net_proxy,
        proxy_step_us=proxy_step_us,
        collectives=CollectivePolicy(
            algorithm=series.algorithm,
            protocol=series.protocol,
            nchannels=series.nchannels,
            nvls=series.nvls,
            qps_per_connection=series.qps_per_connection,
            nccl_version=series.nccl_version or DEFAULT_NCCL_VERSION,
        ),
    )
    for (collective, nranks, nnodes, gpu), rows in groups.items():
        kind = CollectiveKind.parse(collective)
        sizes = sorted({int(r["size_bytes"]) for r in rows})
        gpn = nranks // nnodes
        results = {}
        for size in sizes:  # one simulation per distinct size keeps nccl-tests' exact sizes
            try:
                rows_pred = run_bench(
                    kind,
                    system=series.system or system_for_gpu(gpu),
                    nodes=nnodes,
                    gpus_per_node=gpn,
                    minbytes=size,
                    maxbytes=size,
                    gpus_per_process=series.gpus_per_process,
                    config=config,
                )
            except ValueError as exc:
                raise ValueError(
                    f"{series.file} line {first_line[(collective, nranks, nnodes, gpu)]}: "
                    f"{collective} on {nnodes} node(s) x {gpn} GPUs: {exc}"
                ) from None
            results[size] = rows_pred[0]
        for row in rows:
            size = int(row["size_bytes"])
            pred = results[size]
            factor = collective_for_size(kind, size, nranks=nranks, dtype="float", op="sum", root=0).busbw_factor
            t_meas = measured_time_us(row, factor)
            if pred.size_bytes != size or t_meas <= 0:
                continue  # nccl-tests rounded this size away (0-byte rows): nothing to compare
            out.append(
                Comparison(
                    series=series.name,
                    collective=collective,
                    gpu=gpu,
                    nranks=nranks,
                    nnodes=nnodes,
                    size_bytes=size,
                    t_meas_us=t_meas,
                    t_pred_us=pred.time_us,
                    busbw_meas_GBps=size / t_meas * 1e-3 * factor,
                    busbw_pred_GBps=pred.busbw_GBps,
                    algorithm=pred.algorithm,
                    protocol=pred.protocol,
                    channels=pred.channels,
                    source=row["source"],
                    launched_channels=(
                        launched_channels(
                            algorithm=pred.algorithm,
                            protocol=pred.protocol,
                            nbytes=size,
                            nchannels=pred.channels,
                            nranks=nranks,
                        )
                        if pred.algorithm in ("ring", "tree")
                        else pred.channels
                    ),
                    nccl_channels=int(row["nccl_channels"]) if row.get("nccl_channels") else None,
                )
            )
    return out


def summarise(comparisons: list[Comparison]) -> dict[str, dict[str, float]]:
    """Row count ``n``, median and p90 of |error| per regime (``REGIMES``: latency, mid, bandwidth, all); p90 is
    the sorted value at index round(0.9 (n - 1)). No row: n 0, median and p90 NaN."""

    def stats(values: list[float]) -> dict[str, float]:
        if not values:
            return {"n": 0, "median": float("nan"), "p90": float("nan")}
        ordered = sorted(values)
        return {
            "n": len(values),
            "median": statistics.median(ordered),
            "p90": ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))],
        }

    return {
        name: stats([abs(c.error) for c in comparisons if name == "all" or c.regime == name]) for name, _ in REGIMES
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesReport:
    """One series replayed: its rows compared, and their error summary (``summarise``)."""

    series: Series
    comparisons: tuple[Comparison, ...]

    @property
    def summary(self) -> dict[str, dict[str, float]]:
        return summarise(list(self.comparisons))


def select_series(substring: str | None = None, series: tuple[Series, ...] | None = None) -> tuple[Series, ...]:
    """The series whose name contains ``substring`` (case-insensitive); all of them for None."""
    pool = SERIES if series is None else series
    if substring is None:
        return tuple(pool)
    if not isinstance(substring, str) or not substring.strip():
        raise reject("series", substring, "a part of a series' name (or no --series for all of them)")
    chosen = tuple(s for s in pool if substring.lower() in s.name.lower())
    if not chosen:
        raise ValueError(
            f"series: {substring!r} matches no series; expected a part of one of: " + "; ".join(s.name for s in pool)
        )
    return chosen


def data_series(
    path: str | os.PathLike,
    *,
    system: str | None = None,
    algorithm: str | None = None,
    protocol: str | None = None,
    nchannels: int | None = None,
    gpus_per_process: int = 1,
) -> Series:
    """A series of every row of your own table at ``path`` (the shipped tables' columns), measured with
    the given settings (None: NCCL's own choice; system None: from each row's ``gpu`` column)."""
    if system is not None and system not in SYSTEMS:
        raise ValueError(f"system: {system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    if system is None and Path(path).is_file() and is_inspector_json(read_text("table", Path(path))):
        raise ValueError(
            f"system: not given and {path} is NCCL inspector JSON, which names no GPU; expected a preset "
            f"(--system), one of {', '.join(SYSTEMS)}"
        )
    CollectivePolicy(algorithm=algorithm, protocol=protocol, nchannels=nchannels)  # checks the names
    settings = ", ".join(
        part
        for part in (
            f"system {system}" if system else "system from the gpu column",
            f"NCCL_ALGO={algorithm}" if algorithm else "",
            f"NCCL_PROTO={protocol}" if protocol else "",
            f"{nchannels} channels" if nchannels else "",
            f"-g {gpus_per_process}" if gpus_per_process > 1 else "",
        )
        if part
    )
    return Series(
        name=Path(path).name,
        file=Path(path),
        system=system,
        algorithm=algorithm,
        protocol=protocol,
        nchannels=nchannels,
        gpus_per_process=gpus_per_process,
        ring_only=False,
        settings=settings,
    )


def run_validation(
    series: tuple[Series, ...] | None = None,
    *,
    net_model: str = "flow",
    progress: Callable[[str], None] | None = None,
    net_proxy: bool = True,
    proxy_step_us: float | None = None,
) -> tuple[SeriesReport, ...]:
    """Replay each series (all of ``SERIES`` by default) and compare it with its measurement; ``progress`` (if
    given) is told which table is being replayed ("3/22 H100 ...")."""
    chosen = SERIES if series is None else series
    reports = []
    for i, s in enumerate(chosen, start=1):
        if progress is not None:
            progress(f"{i}/{len(chosen)} {s.name}")
        comparisons = compare(s, net_model=net_model, net_proxy=net_proxy, proxy_step_us=proxy_step_us)
        reports.append(SeriesReport(series=s, comparisons=tuple(comparisons)))
    return tuple(reports)


REPORT_FORMATS = ("table", "csv", "json")
ALL_TABLES = "all tables"


def _report_rows(reports: tuple[SeriesReport, ...]) -> list[tuple[str, dict[str, dict[str, float]]]]:
    pooled = [c for r in reports for c in r.comparisons]
    return [(r.series.name, r.summary) for r in reports] + [(ALL_TABLES, summarise(pooled))]


def format_report(reports: tuple[SeriesReport, ...], *, format: str = "table", net_model: str = "flow") -> str:
    """Per series ("table"): rows, median and p90 of |t_pred / t_meas - 1| per regime (latency, mid, bandwidth,
    all sizes), then all tables pooled."""
    if format not in REPORT_FORMATS:
        raise ValueError(f"format: {format!r} is not known; expected one of {', '.join(REPORT_FORMATS)}")
    rows = _report_rows(reports)
    if format == "json":

        def clean(stats: dict[str, float]) -> dict[str, float | None]:
            return {k: (None if v != v else v) for k, v in stats.items()}

        by_name = {r.series.name: r.series for r in reports}
        return (
            json.dumps(
                {
                    "net_model": net_model,
                    "error": "|t_pred / t_meas - 1|",
                    "latency_max_bytes": LATENCY_REGIME_MAX_BYTES,
                    "bandwidth_min_bytes": BANDWIDTH_REGIME_MIN_BYTES,
                    "tables": [
                        {
                            "name": name,
                            "file": str(by_name[name].file),
                            "settings": by_name[name].settings,
                            **{regime: clean(summary[regime]) for regime, _ in REGIMES},
                        }
                        for name, summary in rows[:-1]
                    ],
                    ALL_TABLES.replace(" ", "_"): {regime: clean(rows[-1][1][regime]) for regime, _ in REGIMES},
                },
                indent=1,
            )
            + "\n"
        )
    if format == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["table"] + [f"{regime}_{stat}" for regime, _ in REGIMES for stat in ("n", "median", "p90")])
        for name, summary in rows:
            cells: list[str | float] = [name]
            for regime, _ in REGIMES:
                s = summary[regime]
                cells += [s["n"]] + ["" if s[k] != s[k] else f"{s[k]:.6g}" for k in ("median", "p90")]
            writer.writerow(cells)
        return out.getvalue()
    width = max(len(name) for name, _ in rows)

    def pct(value: float) -> str:
        return "-" if value != value else f"{value:.1%}"

    group = 5 + 8 + 8
    lines = [
        f"# fabricsim validate: |t_pred / t_meas - 1| against measured nccl-tests tables (network model {net_model})",
        f"{'':{width}}" + "".join(f"  {label:^{group}}" for _, label in REGIMES),
        f"{'table':{width}}" + f"  {'n':>5}{'median':>8}{'p90':>8}" * len(REGIMES),
    ]
    rule = "-" * len(lines[-1])
    lines.append(rule)
    for i, (name, summary) in enumerate(rows):
        if i == len(rows) - 1:
            lines.append(rule)
        lines.append(
            f"{name:{width}}"
            + "".join(
                f"  {summary[r]['n']:>5}{pct(summary[r]['median']):>8}{pct(summary[r]['p90']):>8}" for r, _ in REGIMES
            )
        )
    return "\n".join(line.rstrip() for line in lines) + "\n"


def recorded_choice(reports: tuple[SeriesReport, ...]) -> str | None:
    """How often the prediction launches the channels NCCL launched, over the rows whose measurement records
    it (NCCL inspector JSON): one line, or None when no row does."""
    recorded = [c for r in reports for c in r.comparisons if c.nccl_channels is not None]
    if not recorded:
        return None
    same = sum(c.launched_channels == c.nccl_channels for c in recorded)
    return (
        f"# NCCL's recorded choice: the prediction launches NCCL's channel count in {same} of {len(recorded)} "
        "row(s) that record it (launched_channels, nccl_channels in --rows; the inspector's JSON does not say "
        "which algorithm and protocol NCCL took)"
    )


# one row per compared measurement: the table and the measurement, what the model predicted and chose, the error
ROW_COLUMNS = (
    "table",  # the series' name (a table of yours: its file name)
    "collective",
    "gpu",  # the table's gpu column
    "system",  # the system preset the prediction ran on
    "nranks",
    "nnodes",
    "size_bytes",
    "regime",  # latency, mid or bandwidth (REGIMES)
    "t_meas_us",
    "busbw_meas_GBps",
    "t_pred_us",
    "busbw_pred_GBps",
    "algorithm",  # the prediction's algorithm, protocol and channel count
    "protocol",
    "channels",
    "launched_channels",  # the channels the prediction launches at this size (fewer than channels when small)
    "nccl_channels",  # the channels NCCL launched, where the measurement records it (inspector JSON); else empty
    "error",  # t_pred / t_meas - 1, signed: negative when the model is too fast
    "error_pct",  # the same in percent
    "source",  # the row's source column
)
ROW_FORMATS = ("csv", "json")


def comparison_rows(reports: tuple[SeriesReport, ...]) -> list[dict[str, str | int | float]]:
    """Every compared row of ``reports``, in order, as a dict of ``ROW_COLUMNS``."""
    return [
        {
            "table": r.series.name,
            "collective": c.collective,
            "gpu": c.gpu,
            "system": r.series.system or system_for_gpu(c.gpu),
            "nranks": c.nranks,
            "nnodes": c.nnodes,
            "size_bytes": c.size_bytes,
            "regime": c.regime,
            "t_meas_us": c.t_meas_us,
            "busbw_meas_GBps": c.busbw_meas_GBps,
            "t_pred_us": c.t_pred_us,
            "busbw_pred_GBps": c.busbw_pred_GBps,
            "algorithm": c.algorithm,
            "protocol": c.protocol,
            "channels": c.channels,
            "launched_channels": "" if c.launched_channels is None else c.launched_channels,
            "nccl_channels": "" if c.nccl_channels is None else c.nccl_channels,
            "error": c.error,
            "error_pct": 100.0 * c.error,
            "source": c.source,
        }
        for r in reports
        for c in r.comparisons
    ]


def rows_frame(reports: tuple[SeriesReport, ...]) -> Any:
    """Every compared row of ``reports`` as a pandas DataFrame, one column per ``ROW_COLUMNS`` entry:

    ``rows_frame(run_validation()).groupby(["table", "regime"])["error"].median()`` is the signed median error per
    table and regime; ``rows_frame(run_validation((data_series("mine.csv"),)))`` the same for a table of yours."""
    import pandas as pd

    return pd.DataFrame(comparison_rows(reports), columns=list(ROW_COLUMNS))


def format_rows(reports: tuple[SeriesReport, ...], *, format: str = "csv") -> str:
    """``comparison_rows`` as CSV (a header of ``ROW_COLUMNS``, then one line per row) or JSON (a list of objects);
    floats to the last digit."""
    if format not in ROW_FORMATS:
        raise ValueError(f"format: {format!r} is not known; expected one of {', '.join(ROW_FORMATS)}")
    rows = comparison_rows(reports)
    if format == "json":
        return json.dumps(rows, indent=1) + "\n"
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(ROW_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
