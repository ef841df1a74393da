"""Validation against measured nccl-tests tables shipped in ``simulator/data/calibration``.

Each :class:`Series` names a table, the rows it takes (by substrings of the table's own
columns) and the settings of the measurement: the system preset follows from the table's
``gpu`` column, nodes and GPUs per node from ``nnodes`` and ``nranks``, and the algorithm and
channel count are forced only where the measurement forced them (NCCL_ALGO, NCCL_MIN_CTAS,
NCCL_NVLS_ENABLE=0). Nothing here is tuned per row: a series only says how the measurement ran.

Error of a row: ``t_pred / t_meas - 1`` (tables that give only busbw have t_meas derived from
it: t = size / (busbw / busbw_factor)).
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from importlib import resources

from workloads.collectives import CollectiveKind

from .collectives.tuner import CollectivePolicy
from .config import SimConfig
from .nccl_tests import collective_for_size, run_bench

LATENCY_REGIME_MAX_BYTES = 64 * 1024          # < 64 KiB
BANDWIDTH_REGIME_MIN_BYTES = 64 * 1024 * 1024  # >= 64 MiB

# GPU named in a table's `gpu` column -> system preset with that GPU and its usual wiring
GPU_SYSTEMS = (("RTX 4090", "pcie-rtx4090"), ("A100", "dgx-a100"), ("H100", "dgx-h100"), ("H200", "hgx-h200"),
               ("B200", "hgx-b200"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    name: str
    file: str
    where: tuple[tuple[str, str], ...] = ()      # (column, substring) that every row must match
    collectives: tuple[str, ...] = ()            # restrict to these collectives (empty: all)
    nnodes: int | None = None
    algorithm: str | None = None
    nchannels: int | None = None
    gpus_per_process: int = 1                    # nccl-tests -g
    ring_only: bool = True                       # every row was measured with NCCL's Ring algorithm
    settings: str = ""                           # how the measurement ran, in words


SERIES = (
    Series(name="H100 8 GPU reduce_scatter, NCCL_ALGO=Ring", file="h100_8gpu_reducescatter_ring_issue1047.csv",
           algorithm="ring", settings="NCCL_ALGO=Ring, one node"),
    Series(name="H200 8 GPU 16 GiB, Ring (NVLS off / AG / RS)", file="h200_8gpu_16GiB_collectives_mleng.csv",
           where=(("interconnect", "algo Ring"),), algorithm="ring", gpus_per_process=8,
           settings="NCCL_NVLS_ENABLE=0 for all_reduce; all_gather/reduce_scatter default (Ring)"),
    Series(name="H200/B200 all_reduce 8 GiB by GPU count, NVLS off", file="nvls_vs_ring_gpucount_h200_b200_mleng.csv",
           where=(("interconnect", "NCCL_NVLS_ENABLE=0"),), algorithm="ring", settings="NCCL_NVLS_ENABLE=0"),
    Series(name="A100 8 GPU all_reduce, one process -g 8", file="a100_sxm4_80gb_1node_8gpu.csv",
           where=(("source", "run 1"),), gpus_per_process=8, settings="-g 8; default NCCL choice; no NVLS on A100"),
    Series(name="A100 8 GPU all_reduce, mpirun -np 8", file="a100_sxm4_80gb_1node_8gpu.csv",
           where=(("source", "run 2"),), settings="default NCCL choice; no NVLS on A100"),
    Series(name="2x DGX A100 HDR all_reduce", file="a100_dgx_2node_ib_hdr_k8s_deepops.csv",
           settings="default NCCL choice, 8x HDR per node"),
    Series(name="2x H100 NDR all_reduce, Ring + MIN_CTAS=24 + QPS=2", file="h100_ib_ndr_multinode_issue309.csv",
           where=(("notes", "NCCL_ALGO=Ring NCCL_MIN_CTAS=24"),), algorithm="ring", nchannels=24,
           settings="NCCL_ALGO=Ring NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2"),
    Series(name="B200 1 node all_gather/reduce_scatter", file="b200_vultr_hgx_1node_2node_allcoll.csv",
           collectives=("all_gather", "reduce_scatter"), nnodes=1, algorithm="ring",
           settings="default (Ring for AG/RS on one node)"),
    Series(name="2x B200 NDR all_gather/reduce_scatter", file="b200_vultr_hgx_1node_2node_allcoll.csv",
           collectives=("all_gather", "reduce_scatter"), nnodes=2, algorithm="ring",
           settings="default (Ring: multi-node NVLS/CollNet AG/RS need SHARP, PAT needs 1 GPU per node)"),
    Series(name="8x RTX 4090 PCIe all_reduce, P2P off", file="rtx4090_8gpu_pcie_p2p_off_on.csv",
           where=(("interconnect", "stock driver"),), gpus_per_process=8,
           settings="stock driver, P2P off (through host), -g 8"),
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
    algorithm: str
    protocol: str
    source: str

    @property
    def error(self) -> float:
        return self.t_pred_us / self.t_meas_us - 1.0

    @property
    def regime(self) -> str:
        if self.size_bytes < LATENCY_REGIME_MAX_BYTES:
            return "latency"
        if self.size_bytes >= BANDWIDTH_REGIME_MIN_BYTES:
            return "bandwidth"
        return "middle"


def read_table(file: str) -> list[dict[str, str]]:
    """Rows of a shipped calibration table (with their source column)."""
    path = resources.files("simulator") / "data" / "calibration" / file
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def system_for_gpu(gpu: str) -> str:
    for needle, system in GPU_SYSTEMS:
        if needle in gpu:
            return system
    raise ValueError(f"calibration row: GPU {gpu!r} has no system preset; expected one of "
                     f"{', '.join(n for n, _ in GPU_SYSTEMS)}")


def _rows(series: Series) -> list[dict[str, str]]:
    rows = [r for r in read_table(series.file)
            if all(text in r[column] for column, text in series.where)
            and (not series.collectives or r["collective"] in series.collectives)
            and (series.nnodes is None or int(r["nnodes"]) == series.nnodes)]
    if not rows:
        raise ValueError(f"series {series.name!r}: no row of {series.file} matches")
    return rows


def measured_time_us(row: dict[str, str], factor: float) -> float:
    if row["time_us"].strip():
        return float(row["time_us"])
    algbw = float(row["busbw_GBps"]) / factor
    return int(row["size_bytes"]) / (algbw * 1e9) * 1e6


def compare(series: Series, *, net_model: str = "flow") -> list[Comparison]:
    """Simulate every row of ``series`` with the measurement's settings."""
    groups: dict[tuple, list[dict[str, str]]] = {}
    for row in _rows(series):
        key = (row["collective"], int(row["nranks"]), int(row["nnodes"]), row["gpu"])
        groups.setdefault(key, []).append(row)
    out = []
    config = SimConfig(network_model=net_model,
                       collectives=CollectivePolicy(algorithm=series.algorithm, nchannels=series.nchannels))
    for (collective, nranks, nnodes, gpu), rows in groups.items():
        kind = CollectiveKind.parse(collective)
        sizes = sorted({int(r["size_bytes"]) for r in rows})
        gpn = nranks // nnodes
        results = {}
        for size in sizes:   # one simulation per distinct size keeps nccl-tests' exact sizes
            rows_pred = run_bench(kind, system=system_for_gpu(gpu), nodes=nnodes, gpus_per_node=gpn,
                                  minbytes=size, maxbytes=size, gpus_per_process=series.gpus_per_process,
                                  config=config)
            results[size] = rows_pred[0]
        for row in rows:
            size = int(row["size_bytes"])
            pred = results[size]
            factor = collective_for_size(kind, size, nranks=nranks, dtype="float", op="sum", root=0).busbw_factor
            t_meas = measured_time_us(row, factor)
            if pred.size_bytes != size or t_meas <= 0:
                continue      # nccl-tests rounded this size away (0-byte rows): nothing to compare
            out.append(Comparison(
                series=series.name, collective=collective, gpu=gpu, nranks=nranks, nnodes=nnodes, size_bytes=size,
                t_meas_us=t_meas, t_pred_us=pred.time_us, busbw_meas_GBps=size / t_meas * 1e-3 * factor,
                busbw_pred_GBps=pred.busbw_GBps, algorithm=pred.algorithm, protocol=pred.protocol,
                source=row["source"]))
    return out


def summarise(comparisons: list[Comparison]) -> dict[str, dict[str, float]]:
    """median and p90 of |error| per regime (latency, bandwidth, all)."""
    def stats(values: list[float]) -> dict[str, float]:
        if not values:
            return {"n": 0, "median": float("nan"), "p90": float("nan")}
        ordered = sorted(values)
        return {"n": len(values), "median": statistics.median(ordered),
                "p90": ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]}
    errors = [abs(c.error) for c in comparisons]
    return {
        "latency": stats([abs(c.error) for c in comparisons if c.regime == "latency"]),
        "bandwidth": stats([abs(c.error) for c in comparisons if c.regime == "bandwidth"]),
        "all": stats(errors),
    }
