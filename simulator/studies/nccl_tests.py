"""nccl-tests, simulated: size sweeps, the workload they run, and their table.

``run_bench(kind, system=..., nodes=..., ...)`` builds the system, runs one simulation in which
every rank performs the collective once per size (sizes from ``minbytes`` to ``maxbytes``,
multiplied by ``stepfactor``, or increased by ``stepbytes``, exactly as nccl-tests' -b/-e/-f/-i),
and returns one :class:`BenchRow` per size with nccl-tests' out-of-place columns.

Sizes follow nccl-tests' rounding: a size is a whole number of elements; for all_gather,
reduce_scatter and alltoall each rank's piece is rounded down to a multiple of 16 bytes (so tiny
sizes become 0, as in nccl-tests' own output).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from topologies.checks import finite, flag, instance, integer, is_int, reject, size_bytes
from topologies.presets import build_system
from topologies.routing import RouteCache
from topologies.topology import LinkTier, Topology
from workloads.collectives import DTYPE_BYTES, REDUCE_OPS, Collective, CollectiveKind
from workloads.tasks import Workload

from ..api import simulate, tuner_candidates
from ..collectives.tuner import Candidate
from ..config import SimConfig
from ..placement import Placement

# nccl-tests' -d names -> our dtype names
NCCL_TESTS_TYPES = {
    "int8": "int8",
    "uint8": "uint8",
    "half": "half",
    "float16": "half",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int": "int32",
    "float": "float",
    "float32": "float",
    "int64": "int64",
    "double": "double",
    "float64": "double",
}
CSV_HEADER = (
    "size_bytes",
    "count",
    "type",
    "redop",
    "root",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "algorithm",
    "protocol",
    "channels",
)
MAX_SIZES = 10_000

# nccl-tests -g N: one thread drives N GPUs and launches their N kernels one after the other
# (ncclGroupStart/End), so every collective starts after N-1 extra kernel launches. Per launch:
# 2.8 us, from the measured 8x A100 table (one process -g 8: 40.1 us at 8 B; 8 MPI ranks:
# 20.3 us; (40.1 - 20.3) / 7 = 2.8 us), in line with CUDA's usual few-microsecond launch cost.
HOST_LAUNCH_S_PER_GPU = 2.8e-6


# the collectives nccl-tests has a binary for (all_reduce_perf, ...)
BENCH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall")


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclTestsRow:
    """The columns every nccl-tests result row has (out-of-place half)."""

    size_bytes: int
    count: int
    type: str
    redop: str
    root: int
    time_us: float


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchRow(NcclTestsRow):
    """One predicted row: nccl-tests' columns plus the choice that produced it."""

    algbw_GBps: float
    busbw_GBps: float
    algorithm: str
    protocol: str
    channels: int
    candidates: tuple[Candidate, ...] = ()  # with ``explain``: what the tuner weighed (tuner.candidates)
    # with ``links`` (one size): bytes per link tier, and the busiest link (name, tier, share of its capacity
    # over the collective's time)
    tier_bytes: Mapping[str, float] = field(default_factory=dict)
    busiest_link: tuple[str, str, float] | None = None


def sweep_sizes(
    minbytes: int | str, maxbytes: int | str, *, stepfactor: float | None = 2, stepbytes: int | str | None = None
) -> list[int]:
    """nccl-tests' size sweep: min, min*f, ... <= max (or min, min+i, ... with stepbytes)."""
    lo, hi = size_bytes("minbytes", minbytes), size_bytes("maxbytes", maxbytes)
    if lo > hi:
        raise ValueError(f"minbytes: {lo} is larger than maxbytes ({hi}); expected minbytes <= maxbytes")
    sizes: list[int] = []
    if stepbytes is not None:
        step = size_bytes("stepbytes", stepbytes, low=1)
        size = lo
        while size <= hi and len(sizes) <= MAX_SIZES:
            sizes.append(size)
            size += step
    else:
        factor = finite("stepfactor", stepfactor, low=1, low_open=True)
        if lo == 0:
            raise ValueError("minbytes: 0 cannot grow by a step factor; expected minbytes >= 1 (or a step in bytes)")
        size = lo
        while size <= hi and len(sizes) <= MAX_SIZES:
            sizes.append(size)
            grown = size * factor  # a float: inf when the factor is huge, which ends the sweep
            if grown > hi:
                break
            if int(grown) == size:
                raise reject(
                    "stepfactor",
                    stepfactor,
                    f"a factor that grows {size} B by a whole byte (nccl-tests would repeat that size forever)",
                )
            size = int(grown)
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"size sweep: more than {MAX_SIZES} sizes; use a larger step")
    return sizes


def collective_for_size(kind: CollectiveKind, size: int, *, nranks: int, dtype: str, op: str, root: int) -> Collective:
    """nccl-tests' rounding of a requested size into the collective it actually runs."""
    elt = DTYPE_BYTES[dtype]
    count = size // elt
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
        per_rank = (count // nranks) & -max(1, 16 // elt)
        nbytes = per_rank * nranks * elt
    else:
        nbytes = count * elt
    return Collective(
        kind=kind,
        nbytes=nbytes,
        group=tuple(range(nranks)),
        dtype=dtype,
        op=op if kind.reduces else "sum",
        root=root if kind.rooted else 0,
    )


def run_bench(
    kind: CollectiveKind | str,
    *,
    system: str | Topology = "dgx-h100",
    nodes: int = 1,
    gpus_per_node: int | None = None,
    minbytes: int | str = "32M",
    maxbytes: int | str = "32M",
    stepfactor: float | None = 2,
    stepbytes: int | str | None = None,
    dtype: str = "float",
    op: str = "sum",
    root: int = 0,
    gpus_per_process: int = 1,
    config: SimConfig | None = None,
    sizes: Sequence[int | str] | None = None,
    explain: bool = False,
    route_cache: RouteCache | None = None,
    progress: Callable[[str], None] | None = None,
    links: bool = False,
) -> list[BenchRow]:
    """Simulate nccl-tests for ``kind``; ``gpus_per_process`` is nccl-tests' -g (launch mode); ``explain``
    adds to each row the tuner's estimate for every algorithm and protocol (``BenchRow.candidates``).

    ``sizes`` (optional) lists the sizes to run, in order, instead of the -b/-e/-f/-i sweep (for
    replaying a measured table whose sizes are not one sweep). Collectives run one after the other in
    lockstep, so each one's time does not depend on the others. ``route_cache``: as ``simulate``'s (one
    is made for the sweep when None). ``progress``: called with what the sweep is doing, for a progress display.
    ``links`` (one size only): each row also says how many bytes each link tier carried and which link was the
    busiest (``BenchRow.tier_bytes``, ``busiest_link``).
    """
    kind = kind if isinstance(kind, CollectiveKind) else CollectiveKind.parse(kind)
    instance("system", system, (str, Topology), "a system preset name (see `fabricsim systems`) or a Topology")
    instance("config", config, (SimConfig, type(None)), "a SimConfig or None")
    explain = flag("explain", explain)
    root = integer("root", root, low=0)
    if not isinstance(dtype, str) or dtype not in NCCL_TESTS_TYPES:
        raise ValueError(f"datatype: {dtype!r} is not known; expected one of {', '.join(NCCL_TESTS_TYPES)}")
    dtype = NCCL_TESTS_TYPES[dtype]
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise ValueError(f"op: {op!r} is not known; expected one of {', '.join(REDUCE_OPS)}")
    topology = build_system(system, nodes=nodes) if isinstance(system, str) else system
    gpn = gpus_per_node if gpus_per_node is not None else len(topology.servers[0].gpus)
    most = min(len(s.gpus) for s in topology.servers)
    gpn = integer("gpus_per_node", gpn, low=1, high=most)
    placement = Placement.block(topology, nranks=gpn * topology.num_servers, gpus_per_node=gpn)
    nranks = placement.nranks
    if kind.rooted and not 0 <= root < nranks:
        raise ValueError(f"root: {root} is out of range; expected 0 to {nranks - 1}")
    if kind is CollectiveKind.SENDRECV and nranks < 2:
        raise ValueError(
            f"collective: sendrecv needs at least 2 GPUs, not {nranks}; expected more GPUs per node or more nodes"
        )
    if not is_int(gpus_per_process) or gpus_per_process < 1 or gpn % gpus_per_process:
        divisors = ", ".join(str(d) for d in range(1, gpn + 1) if gpn % d == 0)
        raise ValueError(
            f"gpus_per_process (-g): {gpus_per_process!r} is not allowed; expected a divisor of the "
            f"{gpn} GPUs per node ({divisors}): each process drives that many GPUs of one node"
        )
    config = config or SimConfig()
    if gpus_per_process > 1:
        config = replace(
            config, launch_overhead_s=config.launch_overhead_s + (gpus_per_process - 1) * HOST_LAUNCH_S_PER_GPU
        )
    if sizes is None:
        byte_counts = sweep_sizes(minbytes, maxbytes, stepfactor=stepfactor, stepbytes=stepbytes)
    else:
        if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__"):
            raise reject("sizes", sizes, "a list of byte counts")
        byte_counts = [size_bytes("sizes", s) for s in sizes]
        if not 1 <= len(byte_counts) <= MAX_SIZES:
            raise ValueError(f"sizes: {len(byte_counts)} sizes are not allowed; expected 1 to {MAX_SIZES}")
    collectives = [collective_for_size(kind, s, nranks=nranks, dtype=dtype, op=op, root=root) for s in byte_counts]
    if flag("links", links) and len(collectives) != 1:
        raise ValueError(f"links: True is not allowed with {len(collectives)} sizes; expected one size")
    route_cache = RouteCache() if route_cache is None else route_cache
    if progress is not None:
        progress(f"simulating {len(collectives)} sizes of {kind.value} on {nranks} GPUs")
    result = simulate(
        topology, Workload.sequence(collectives, nranks=nranks), placement, config, route_cache=route_cache
    )
    link_report: dict[str, Any] = {}
    if links:
        link_report = _link_report(topology, result.link_bytes, result.collectives[0].time_s)
    rows = []
    if explain and progress is not None:
        progress("the tuner's estimates for every size")
    for record in result.collectives:
        c = record.collective
        time_s = record.time_s
        rows.append(
            BenchRow(
                size_bytes=c.nbytes,
                count=c.count,
                type=dtype,
                redop=c.op if c.kind.reduces else "none",
                root=c.root if c.kind.rooted else -1,
                time_us=time_s * 1e6,
                algbw_GBps=c.algbw_bytes_per_s(time_s) / 1e9,
                busbw_GBps=c.busbw_bytes_per_s(time_s) / 1e9,
                algorithm=record.algorithm,
                protocol=record.protocol,
                channels=record.nchannels,
                candidates=tuple(tuner_candidates(topology, c, placement, config, route_cache=route_cache))
                if explain
                else (),
                **link_report,
            )
        )
    return rows


def _link_report(topology: Topology, link_bytes: np.ndarray, time_s: float) -> dict[str, Any]:
    """Bytes per link tier and the busiest link (name, tier, bytes / (capacity x time)) of one collective."""
    from simulator.analysis import link_class_bytes

    tiers = link_class_bytes(topology, link_bytes)["tier"]
    moved = np.asarray(link_bytes, dtype=np.float64)
    if time_s <= 0 or not moved.any():  # nothing moved (one rank, no bytes): no busiest link
        return {"tier_bytes": tiers, "busiest_link": None}
    share = moved / (topology.link_capacity_bytes_per_s * time_s)
    busiest = int(np.argmax(share))
    tier = LinkTier(int(topology.link_tier[busiest])).name.lower()
    return {"tier_bytes": tiers, "busiest_link": (topology.link_names[busiest], tier, float(share[busiest]))}


def format_table(rows: list[BenchRow], *, title: str = "") -> str:
    """nccl-tests' out-of-place table (plus the algorithm, protocol and channels chosen)."""
    out = io.StringIO()
    if title:
        out.write(f"# {title}\n#\n")
    out.write("#                                                              out-of-place\n")
    out.write(
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>9}  {'algbw':>7}  "
        f"{'busbw':>7}  {'algo':>8}  {'proto':>6}  {'nch':>3}\n"
    )
    out.write(
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>9}  {'(GB/s)':>7}  {'(GB/s)':>7}\n"
    )
    for r in rows:
        out.write(
            f"  {r.size_bytes:>10}  {r.count:>12}  {r.type:>8}  {r.redop:>6}  {r.root:>6}  {r.time_us:>9.2f}  "
            f"{r.algbw_GBps:>7.2f}  {r.busbw_GBps:>7.2f}  {r.algorithm:>8}  {r.protocol:>6}  {r.channels:>3}\n"
        )
    if rows:
        out.write(f"# Avg bus bandwidth    : {sum(r.busbw_GBps for r in rows) / len(rows):.4g}\n")
    if any(r.candidates for r in rows):
        out.write(
            "#\n# tuner: NCCL's estimate, time = latency + size / algbw, for every algorithm and protocol, on "
            "the communicator's channels (small sizes then launch fewer); * = chosen\n"
        )
        out.write(
            f"# {'size':>10}    {'algo':<16} {'proto':<6} {'nch':>3}  {'latency':>9}  {'algbw':>8}  {'time':>10}\n"
        )
        out.write(f"# {'(B)':>10}    {'':<16} {'':<6} {'':>3}  {'(us)':>9}  {'(GB/s)':>8}  {'(us)':>10}\n")
        for r in rows:
            for i, c in enumerate(r.candidates):
                size = f"{r.size_bytes:>10}" if i == 0 else " " * 10
                if c.skipped is not None:
                    out.write(f"# {size}    {c.algorithm:<16} {c.protocol or '-':<6}  left out: {c.skipped}\n")
                    continue
                mark = "*" if (c.algorithm, c.protocol) == (r.algorithm, r.protocol) else " "
                latency, algbw, predicted = c.latency_s, c.algbw_bytes_per_s, c.predicted_s
                assert latency is not None and algbw is not None and predicted is not None  # set unless skipped
                out.write(
                    f"# {size}  {mark} {c.algorithm:<16} {c.protocol:<6} {c.nchannels:>3}  "
                    f"{latency * 1e6:>9.2f}  {algbw / 1e9:>8.2f}  {predicted * 1e6:>10.2f}\n"
                )
    return out.getvalue()


def format_csv(rows: list[BenchRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    for r in rows:
        writer.writerow(
            [
                r.size_bytes,
                r.count,
                r.type,
                r.redop,
                r.root,
                f"{r.time_us:.3f}",
                f"{r.algbw_GBps:.4f}",
                f"{r.busbw_GBps:.4f}",
                r.algorithm,
                r.protocol,
                r.channels,
            ]
        )
    return out.getvalue()


def format_json(rows: list[BenchRow], **meta) -> str:
    """The rows and ``meta``; a row's ``candidates`` only when explained (an estimate of no bandwidth, an
    infinite time, as null)."""

    def row(r: BenchRow) -> dict:
        data = asdict(r)
        if r.busiest_link is None:  # no link report asked for
            del data["tier_bytes"], data["busiest_link"]
        if not r.candidates:
            del data["candidates"]
            return data
        data["candidates"] = [
            {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in c.items()}
            for c in data["candidates"]
        ]
        return data

    return json.dumps({**meta, "rows": [row(r) for r in rows]}, indent=1, allow_nan=False)
