"""Calibrate a system preset against your own nccl-tests output.

``parse_nccl_tests_log(text)`` reads the stdout nccl-tests prints (header, ``#  Rank N ... device``
lines, the result rows); ``calibrate(log, system=...)`` fits two physical parameters of the preset
to it; ``apply_calibration(topology, config, calibration)`` applies them to any later simulation;
``fabricsim calibrate LOG --out cal.json`` and ``fabricsim bench ... --calibration cal.json`` do the
same from the shell. A log taken with NCCL_DEBUG=INFO also says which NCCL settings the run had
("NCCL INFO NCCL_ALGO set by environment to Ring"); those of ``tuner.NCCL_ENVIRONMENT`` are replayed
as the measurement ran (options given to ``calibrate`` win). The JSON NCCL's profiler plugin inspector writes
(``validation/inspector.py``: a training job's own collectives, median kernel time per size) is read as well,
told apart by content (``parse_measurements``, ``read_measurements``); one communicator shape at a time
(``inspector_log``: --collective, --nranks, --nodes pick it).

The two parameters, each fitted by least squares on e_i = ln(t_pred,i / t_meas,i):

* **link scale** s: the capacity of the links that bound the collective is multiplied by s
  (``Topology.with_link_scale``): NVLink on one node; the fabric (InfiniBand or RoCE) on several;
  PCIe and the CPU interconnect on a server without NVLink. It absorbs what the preset's line rate x
  encoding x protocol efficiency misses on this machine (firmware, clocks, NCCL's per-channel
  limits). Fitted on the **bandwidth plateau**: rows >= 1 MiB whose measured busbw is at least 90%
  of the log's highest, where time is bytes / bandwidth to within a few percent. Not simply all rows
  >= 64 MiB: measured busbw often still ramps up there (2x B200 all_gather: 128 MiB at 65% of its
  peak), and a bandwidth factor fitted to the ramp would spoil the plateau it is meant for. A log
  with no row >= 1 MiB leaves s = 1. Bounds [0.3, 1.5].
* **launch overhead** o (``SimConfig.launch_overhead_s``): a fixed cost paid once per collective
  before its first byte moves (host launch, proxy wake-up; what NCCL's latency constants do not carry
  on this machine). Fitted on the **latency regime**, rows < 64 KiB, where time is fixed costs.
  None there leaves o = 0. Bounds [0, 200 us]; o is added to what -g already models.

Each parameter is found by golden-section search over its bounds (the sum of e_i^2 is unimodal: t_pred
falls monotonically with s and rises with o), the bounds themselves also tried, the other parameter
held; two rounds (o, s, o, s), since s barely moves small messages and o moves large ones by < 2%.
Every evaluation is a real simulation of the fitted rows (~0.01-0.1 s each, ~2 s for a whole fit);
the before/after errors are full simulations of every row. Worked number: the shipped 8x A100
``mpirun -np 8`` table (rendered as nccl-tests output) gives s = 0.961 on NVLink (5 rows >= 256 MiB)
and o = 0 (13 rows < 64 KiB: the A100's NVLink hop latency already matches them); the median |error| over
its 30 rows falls from 7.5% to 7.0% (bandwidth regime 4.2% -> 0.9%).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from topologies.checks import finite, integer, read_text, readable_file, reject, size_bytes
from topologies.links import LinkKind
from topologies.presets import SYSTEMS, build_system
from topologies.topology import Topology
from topologies.units import format_size
from workloads.collectives import CollectiveKind

from ..collectives.tuner import NCCL_ENVIRONMENT, CollectivePolicy, applied_settings, describe_settings
from ..config import SimConfig
from ..studies.nccl_tests import NCCL_TESTS_TYPES, BenchRow, NcclTestsRow, collective_for_size, run_bench
from .collectives import (
    GPU_SYSTEMS,
    LATENCY_REGIME_MAX_BYTES,
    REGIMES,
    Comparison,
    summarise,
    system_for_gpu,
)
from .inspector import InspectorTrace, is_inspector_json, parse_inspector_json

SCALE_BOUNDS = (0.3, 1.5)
# a calibration file (perhaps edited by hand) may scale a link beyond SCALE_BOUNDS, but by no more than this: a
# factor of 1e300 is no calibration, and would overflow the capacities it multiplies
MAX_LINK_SCALE = 100.0
OVERHEAD_BOUNDS_S = (0.0, 200e-6)
SCALE_TOLERANCE = 1e-3  # golden-section stops when the bracket is this narrow
OVERHEAD_TOLERANCE_S = 0.05e-6
SCALE_FIT_MIN_BYTES = 1 << 20  # the link scale is fitted on rows >= 1 MiB ...
PLATEAU_FRACTION = 0.9  # ... whose measured busbw is >= 90% of the log's highest
ROUNDS = 2
CALIBRATION_FORMAT = "fabricsim-calibration"
CALIBRATION_VERSION = 1
LINK_KIND_NAMES = tuple(k.name.lower() for k in LinkKind)


# --------------------------------------------------------------------------------------------------
# nccl-tests stdout
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRow(NcclTestsRow):
    """One result row of nccl-tests' output (out-of-place columns; the in-place ones are not kept),
    with its line number in the log; the bandwidth columns may be unreadable (None)."""

    line: int
    algbw_GBps: float | None
    busbw_GBps: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclTestsLog:
    name: str  # where the text came from (file name), for messages
    collective: str | None  # "all_reduce" from "# Collective test starting: all_reduce_perf" or "..._perf"
    nranks: int | None  # number of "#  Rank N ... device ..." lines
    hosts: tuple[str, ...]  # distinct hosts of those lines, in order
    devices: tuple[str, ...]  # distinct device names of those lines ("NVIDIA A100-SXM4-80GB")
    gpus_per_thread: int | None  # "nGpus N" of the header: nccl-tests -g
    rows: tuple[LogRow, ...]
    environment: tuple[tuple[str, str], ...] = ()  # NCCL settings the run reported (NCCL_DEBUG=INFO), in order
    nodes: int | None = None  # servers, when the input says so itself (the inspector's header nnodes)


_STARTING_RE = re.compile(r"Collective test starting:\s*([A-Za-z0-9_]+?)(?:_perf)?\b")
_PERF_RE = re.compile(r"\b([a-z0-9_]+?)_perf\b")
_RANK_RE = re.compile(r"^#\s*Rank\s+(\d+)\b(.*)$")
_HOST_RE = re.compile(r"\bon\s+(\S+)")
_DEVICE_RE = re.compile(r"device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_NGPUS_RE = re.compile(r"#.*\bnGpus\s+(\d+)")
# NCCL_DEBUG=INFO: "host:pid:tid [0] NCCL INFO NCCL_ALGO set by environment to Ring" (integer parameters
# end with a period: "... NCCL_IB_QPS_PER_CONNECTION set by environment to 2.")
_ENV_RE = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?\s*$")
_INTEGER_RE = re.compile(r"^[-+]?\d+$")  # a result row starts with two integers (size, count)
_EXAMPLE_ROW = "134217728  33554432  float  sum  -1  1305.0  102.85  179.99  0  1301.2  103.15  180.52  0"


def _log_number(text: str, *, field: str, where: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(
            f"{where}: {field}: {text!r} is not a number; expected the out-of-place {field} "
            f"(a row such as '{_EXAMPLE_ROW}')"
        ) from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise reject(f"{where}: {field}", text, f"a number {'>' if positive else '>='} 0")
    return value


def parse_nccl_tests_log(text: str, *, name: str = "<log>") -> NcclTestsLog:
    """Read nccl-tests' stdout. Comment lines (``#``) give the test, ranks and -g; rows are the lines
    whose first two fields are integers (size, count); "NCCL INFO X set by environment to V" lines give
    the NCCL settings of ``tuner.NCCL_ENVIRONMENT`` the run had; anything else (other NCCL INFO, mpirun
    chatter) is skipped. The out-of-place time is used; in-place columns may be absent or ``N/A``.
    """
    started: list[str] = []
    perf: list[str] = []
    ranks: dict[int, tuple[str | None, str | None]] = {}
    ngpus = None
    rows = []
    environment: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{name} line {number}"
        stripped = line.strip()
        if not stripped:
            continue
        setting = _ENV_RE.search(stripped)
        if setting and setting.group(1) in NCCL_ENVIRONMENT:
            variable, value = setting.groups()
            if variable not in environment:  # every rank prints it: checked the first time
                try:
                    CollectivePolicy.from_environment({variable: value})
                except ValueError as exc:
                    raise ValueError(f"{where}: {exc}") from None
                environment[variable] = value
            elif environment[variable] != value:
                raise ValueError(
                    f"{where}: {variable} set to {value!r} here and {environment[variable]!r} before; "
                    "expected one run with one setting (calibrate each run's output on its own)"
                )
            continue
        started += _STARTING_RE.findall(line)
        perf += _PERF_RE.findall(line)
        if stripped.startswith("#"):
            rank = _RANK_RE.match(stripped)
            if rank:
                host = _HOST_RE.search(rank.group(2))
                device = _DEVICE_RE.search(rank.group(2))
                ranks.setdefault(
                    int(rank.group(1)), (host.group(1) if host else None, device.group(1) if device else None)
                )
            gpus = _NGPUS_RE.match(stripped)
            if gpus:
                ngpus = int(gpus.group(1))
            continue
        fields = stripped.split()
        if len(fields) < 2 or not (_INTEGER_RE.match(fields[0]) and _INTEGER_RE.match(fields[1])):
            continue
        size = size_bytes(f"{where}: size", int(fields[0]))  # a negative or absurd size is an error
        count = integer(f"{where}: count", int(fields[1]), low=0)
        if len(fields) < 6:
            raise ValueError(
                f"{where}: {len(fields)} fields; expected size, count, type, redop, root, time, "
                f"algbw, busbw, #wrong (e.g. '{_EXAMPLE_ROW}')"
            )
        dtype = fields[2]
        if dtype not in NCCL_TESTS_TYPES:
            raise ValueError(f"{where}: type: {dtype!r} is not known; expected one of {', '.join(NCCL_TESTS_TYPES)}")
        try:
            root = int(fields[4])
        except ValueError:
            raise ValueError(f"{where}: root: {fields[4]!r} is not an integer; expected -1 or a rank") from None
        time_text = fields[5]
        if time_text.upper() == "N/A" and len(fields) >= 10 and fields[9].upper() != "N/A":
            time_text = fields[9]  # out-of-place not run (N/A): the in-place time
        bw = [
            None
            if len(fields) <= i or fields[i].upper() == "N/A"
            else _log_number(fields[i], field=f, where=where, positive=False)
            for i, f in ((6, "algbw"), (7, "busbw"))
        ]
        rows.append(
            LogRow(
                line=number,
                size_bytes=size,
                count=count,
                type=dtype,
                redop=fields[3],
                root=root,
                time_us=_log_number(time_text, field="time", where=where, positive=True),
                algbw_GBps=bw[0],
                busbw_GBps=bw[1],
            )
        )
    if not rows:
        raise ValueError(
            f"{name}: no nccl-tests result rows; expected the table nccl-tests prints, with rows such "
            f"as '{_EXAMPLE_ROW}'"
        )
    names = list(dict.fromkeys(started or perf))
    if len(set(started)) > 1:
        raise ValueError(
            f"{name}: holds several collective tests ({', '.join(names)}); expected one: "
            "calibrate each test's output on its own"
        )
    hosts = tuple(dict.fromkeys(h for h, _ in ranks.values() if h))
    devices = tuple(dict.fromkeys(d for _, d in ranks.values() if d))
    return NcclTestsLog(
        name=name,
        collective=names[0] if len(names) == 1 else None,
        nranks=len(ranks) or None,
        hosts=hosts,
        devices=devices,
        gpus_per_thread=ngpus,
        rows=tuple(rows),
        environment=tuple(environment.items()),
    )


def read_nccl_tests_log(path: str | os.PathLike) -> NcclTestsLog:
    """``parse_nccl_tests_log`` of a saved nccl-tests stdout."""
    path = readable_file("log", path) if not str(path).strip() else Path(path)
    if not path.is_file():
        raise ValueError(f"log {str(path)!r}: no such file; expected the saved stdout of an nccl-tests run")
    return parse_nccl_tests_log(read_text("log", path), name=str(path))


def inspector_log(
    trace: InspectorTrace, *, collective: str | None = None, nranks: int | None = None, nodes: int | None = None
) -> NcclTestsLog:
    """The rows of one (collective, nranks, nodes) of an inspector trace (``inspector.InspectorTrace.rows``), as
    an ``NcclTestsLog``; ``collective``, ``nranks`` and ``nodes`` pick it when the trace holds several."""
    if collective is not None:
        collective = CollectiveKind.parse(collective).value  # "allreduce" as "all_reduce", as for nccl-tests logs
    shapes = [
        s
        for s in trace.shapes()
        if (collective is None or s[0] == collective)
        and (nranks is None or s[1] == nranks)
        and (nodes is None or s[2] == nodes)
    ]

    def listed(items: Sequence[tuple[str, int, int]]) -> str:
        return "; ".join(f"{c} on {n} ranks, {m} node(s)" for c, n, m in items)

    if len(shapes) != 1:
        raise ValueError(
            f"{trace.name}: {'no' if not shapes else len(shapes)} communicator shape(s) match"
            + (f" ({listed(shapes)})" if shapes else "")
            + f"; expected one: pick it with --collective, --nranks, --nodes among {listed(trace.shapes())}"
        )
    kind, ranks, servers = shapes[0]
    rows = [r for r in trace.rows() if (r.collective, r.nranks, r.nnodes) == shapes[0]]
    # float when every size holds whole float elements (per rank for all_gather / reduce_scatter), else bytes
    divisor = 4 * (ranks if kind in ("all_gather", "reduce_scatter") else 1)
    dtype = "float" if all(r.size_bytes % divisor == 0 for r in rows) else "int8"
    return NcclTestsLog(
        name=trace.name,
        collective=kind,
        nranks=ranks,
        hosts=(),
        devices=(),
        gpus_per_thread=None,
        rows=tuple(
            LogRow(
                line=r.lines[0],
                size_bytes=r.size_bytes,
                count=r.size_bytes // (4 if dtype == "float" else 1),
                type=dtype,
                redop="sum",
                root=0 if kind in ("broadcast", "reduce") else -1,
                time_us=r.time_us,
                algbw_GBps=r.size_bytes / r.time_us * 1e-3,
                busbw_GBps=None,
            )
            for r in rows
        ),
        nodes=servers,
    )


def parse_measurements(
    text: str,
    *,
    name: str = "<log>",
    collective: str | None = None,
    nranks: int | None = None,
    nodes: int | None = None,
) -> NcclTestsLog:
    """nccl-tests' stdout (with or without NCCL_DEBUG=INFO lines) or NCCL's inspector JSON, told apart by
    content (``inspector.is_inspector_json``); for the inspector, ``collective``, ``nranks`` and ``nodes`` pick
    one communicator shape (``inspector_log``)."""
    if is_inspector_json(text):
        return inspector_log(parse_inspector_json(text, name=name), collective=collective, nranks=nranks, nodes=nodes)
    return parse_nccl_tests_log(text, name=name)


def read_measurements(
    path: str | os.PathLike, *, collective: str | None = None, nranks: int | None = None, nodes: int | None = None
) -> NcclTestsLog:
    """``parse_measurements`` of a saved file (nccl-tests stdout or inspector JSON)."""
    path = readable_file("log", path) if not str(path).strip() else Path(path)
    if not path.is_file():
        raise ValueError(
            f"log {str(path)!r}: no such file; expected the saved stdout of an nccl-tests run or NCCL inspector JSON"
        )
    return parse_measurements(read_text("log", path), name=str(path), collective=collective, nranks=nranks, nodes=nodes)


# --------------------------------------------------------------------------------------------------
# The calibration and its file
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Fitted parameters of a system preset: link capacity factors and a per-collective overhead."""

    system: str
    link_scale: tuple[tuple[str, float], ...]  # (LinkKind name in lower case, capacity factor)
    launch_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.system not in SYSTEMS:
            raise ValueError(f"system: {self.system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
        for kind, factor in self.link_scale:
            if kind not in LINK_KIND_NAMES:
                raise ValueError(
                    f"link_scale: {kind!r} is not a link kind; expected one of {', '.join(LINK_KIND_NAMES)}"
                )
            finite(
                f"link_scale.{kind}",
                factor,
                low=0,
                low_open=True,
                high=MAX_LINK_SCALE,
                expected=f"a number > 0 and <= {MAX_LINK_SCALE:g}",
            )
        finite(
            "launch_overhead_s", self.launch_overhead_s, low=0, high=1, high_open=True, expected="seconds, 0 <= s < 1"
        )

    def describe(self) -> str:
        """'nvlink x0.940, +7.31 us per collective'."""
        parts = [f"{kind} x{factor:.3f}" for kind, factor in self.link_scale]
        return ", ".join(parts + [f"+{self.launch_overhead_s * 1e6:.2f} us per collective"])

    def to_dict(self) -> dict:
        return {
            "format": CALIBRATION_FORMAT,
            "version": CALIBRATION_VERSION,
            "system": self.system,
            "link_scale": dict(self.link_scale),
            "launch_overhead_s": self.launch_overhead_s,
        }

    @classmethod
    def from_dict(cls, data: object, *, source: str = "calibration") -> Calibration:
        """Check and read a calibration dict (a ``--out`` file); errors name ``source`` and the field."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object written by `fabricsim calibrate --out`")
        if data.get("format") != CALIBRATION_FORMAT or data.get("version") != CALIBRATION_VERSION:
            raise reject(
                f"{source}: format/version",
                (data.get("format"), data.get("version")),
                f"({CALIBRATION_FORMAT!r}, {CALIBRATION_VERSION})",
            )
        for key in ("system", "link_scale", "launch_overhead_s"):
            if key not in data:
                raise ValueError(f"{source}: {key}: missing; expected system, link_scale and launch_overhead_s")
        if not isinstance(data["link_scale"], dict):
            raise reject(f"{source}: link_scale", data["link_scale"], 'an object such as {"nvlink": 0.94}')
        try:
            return cls(
                system=data["system"],
                link_scale=tuple(data["link_scale"].items()),
                launch_overhead_s=data["launch_overhead_s"],
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibration:
        path = readable_file("calibration", path) if not str(path).strip() else Path(path)
        if not path.is_file():
            raise ValueError(
                f"calibration {str(path)!r}: no such file; expected a file written by "
                "`fabricsim calibrate LOG --out FILE.json`"
            )
        try:
            data = json.loads(read_text("calibration", path))
        except json.JSONDecodeError as exc:
            raise ValueError(f"calibration {str(path)!r}: not JSON ({exc})") from None
        return cls.from_dict(data, source=f"calibration {str(path)!r}")


def apply_calibration(
    topology: Topology, config: SimConfig | None, calibration: Calibration
) -> tuple[Topology, SimConfig]:
    """``topology`` with the calibrated link capacities and ``config`` with the overhead added."""
    config = config or SimConfig()
    scaled = topology.with_link_scale({LinkKind[kind.upper()]: factor for kind, factor in calibration.link_scale})
    return scaled, replace(config, launch_overhead_s=config.launch_overhead_s + calibration.launch_overhead_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationResult:
    calibration: Calibration
    log: str
    collective: str
    nranks: int
    nodes: int
    gpus_per_node: int
    gpus_per_process: int
    net_model: str
    algorithm: str | None  # what the measurement forced (None: NCCL's choice)
    protocol: str | None
    nchannels: int | None
    environment: tuple[tuple[str, str], ...]  # the NCCL settings of the log replayed (none an option replaced)
    scale_rows: int  # rows on the measured busbw plateau that fed the link-scale fit
    scale_min_bytes: int | None  # the smallest of their sizes (None: not fitted)
    plateau_busbw_GBps: float | None  # their busbw threshold: PLATEAU_FRACTION x the highest measured
    overhead_rows: int  # rows < 64 KiB fed the overhead fit
    before: tuple[Comparison, ...]  # every row with the preset as it is
    after: tuple[Comparison, ...]  # every row calibrated

    @property
    def summary_before(self) -> dict[str, dict[str, float]]:
        return summarise(list(self.before))

    @property
    def summary_after(self) -> dict[str, dict[str, float]]:
        return summarise(list(self.after))

    def to_dict(self) -> dict:
        """What ``--out`` writes: the calibration, what it was fitted on, and its errors."""

        def clean(summary: dict[str, dict[str, float]]) -> dict[str, dict[str, float | None]]:
            return {regime: {k: (None if v != v else v) for k, v in stats.items()} for regime, stats in summary.items()}

        return {
            **self.calibration.to_dict(),
            "fitted_on": {
                "log": self.log,
                "collective": self.collective,
                "nranks": self.nranks,
                "nodes": self.nodes,
                "gpus_per_node": self.gpus_per_node,
                "gpus_per_process": self.gpus_per_process,
                "net_model": self.net_model,
                "rows": len(self.before),
                "scale_rows": self.scale_rows,
                "scale_min_bytes": self.scale_min_bytes,
                "plateau_busbw_GBps": self.plateau_busbw_GBps,
                "overhead_rows": self.overhead_rows,
                "algorithm": self.algorithm,
                "protocol": self.protocol,
                "nchannels": self.nchannels,
                "nccl_environment": dict(self.environment),
            },
            "error_before": clean(self.summary_before),
            "error_after": clean(self.summary_after),
        }


# --------------------------------------------------------------------------------------------------
# The fit
# --------------------------------------------------------------------------------------------------


def scaled_link_kinds(topology: Topology, *, nodes: int) -> tuple[LinkKind, ...]:
    """The link kinds that bound a collective: the fabric on several nodes, NVLink on one, PCIe and the
    CPU interconnect on a server without NVLink."""
    present = {LinkKind(int(k)) for k in set(topology.link_kind.tolist())}
    kinds: tuple[LinkKind, ...]
    if nodes > 1:
        kinds = tuple(k for k in (LinkKind.INFINIBAND, LinkKind.ROCE) if k in present)
    elif LinkKind.NVLINK in present:
        kinds = (LinkKind.NVLINK,)
    else:
        kinds = tuple(k for k in (LinkKind.PCIE, LinkKind.CPU_INTERCONNECT) if k in present)
    if not kinds:
        raise ValueError(f"system {topology.name!r}: no link kind to calibrate for {nodes} node(s)")
    return kinds


def golden_section_min(f: Callable[[float], float], lo: float, hi: float, *, tol: float) -> float:
    """argmin of a unimodal ``f`` on [lo, hi] to within ``tol`` (the bounds are tried too)."""
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - inv_phi * (b - a), a + inv_phi * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = f(d)
    return min(((fc, c), (fd, d), (f(lo), lo), (f(hi), hi)))[1]


def _system_from_devices(devices: Sequence[str]) -> str | None:
    systems = set()
    for device in devices:
        try:
            systems.add(system_for_gpu(device))
        except ValueError:
            return None
    return systems.pop() if len(systems) == 1 else None


def calibrate(
    rows: NcclTestsLog | Sequence[LogRow],
    *,
    system: str | None = None,
    collective: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    nranks: int | None = None,
    gpus_per_process: int | None = None,
    algorithm: str | None = None,
    protocol: str | None = None,
    nchannels: int | None = None,
    net_model: str = "flow",
    nccl_version: str | None = None,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Fit the link scale and launch overhead of preset ``system`` to measured nccl-tests rows.

    ``rows`` is a parsed log (its collective, rank count, hosts, devices and -g fill the arguments
    left None) or a list of ``LogRow``. ``nodes`` defaults to the log's distinct hosts (else 1),
    ``gpus_per_node`` to nranks / nodes, ``gpus_per_process`` (nccl-tests -g) to the log's nGpus
    (else 1), ``system`` to the preset of the log's device names; ``nccl_version`` (None: the default) is
    the NCCL release whose enablement the tuner follows. The NCCL settings the log reports
    (``NcclTestsLog.environment``) are replayed; ``algorithm``, ``protocol`` and ``nchannels`` force an
    algorithm, protocol or channel count over them. ``progress``: called before each simulation of the fit
    (for a progress display).
    """
    log = rows if isinstance(rows, NcclTestsLog) else None
    data = list(rows.rows if isinstance(rows, NcclTestsLog) else rows)
    name = name or (log.name if log else "rows")
    if collective is not None and (not isinstance(collective, str) or not collective.strip()):
        raise reject("collective", collective, f"a collective such as all_reduce (or none: {name}'s own)")
    collective = collective or (log.collective if log else None)
    if collective is None:
        raise ValueError(
            f"collective: {name} does not say which test it ran (no 'Collective test starting' line "
            "or *_perf command); pass it (--collective all_reduce)"
        )
    try:
        kind = CollectiveKind.parse(collective)
    except ValueError:
        raise ValueError(
            f"collective: {collective!r} ({name}) is not known; expected one of "
            f"{', '.join(k.value for k in CollectiveKind)}"
        ) from None
    if system is None:
        system = _system_from_devices(log.devices) if log and log.devices else None
        if system is None:
            raise ValueError(
                f"system: not given and {name} names no GPU with a preset (nccl-tests' '#  Rank' lines; NCCL's "
                "inspector JSON names none); "
                f"pass one of {', '.join(SYSTEMS)} (GPUs known: {', '.join(n for n, _ in GPU_SYSTEMS)})"
            )
    if system not in SYSTEMS:
        raise ValueError(f"system: {system!r} is not a preset; expected one of {', '.join(SYSTEMS)}")
    if nodes is not None and log and log.nodes is not None and nodes != log.nodes:
        raise ValueError(
            f"nodes: {nodes!r} is not allowed; {name} says its communicator spans {log.nodes} node(s); expected "
            f"{log.nodes} (or no --nodes)"
        )
    if nodes is not None and log and log.hosts and nodes != len(log.hosts):
        raise ValueError(
            f"nodes: {nodes!r} is not allowed; {name} names {len(log.hosts)} host(s) in its '#  Rank' "
            f"lines; expected {len(log.hosts)} (or no --nodes)"
        )
    if nodes is None:
        nodes = log.nodes if log and log.nodes is not None else len(log.hosts) if log and log.hosts else 1
    if nranks is not None and log and log.nranks and nranks != log.nranks:
        raise ValueError(
            f"nranks: {nranks!r} is not allowed; {name} has {log.nranks} '#  Rank' lines; expected "
            f"{log.nranks} (or no --nranks)"
        )
    if nranks is None:
        nranks = log.nranks if log and log.nranks else None
    if nranks is None:
        if gpus_per_node is None:
            raise ValueError(
                f"nranks: {name} has no '#  Rank N ... device ...' lines to count; pass the rank count "
                "(--nranks) or --gpus-per-node"
            )
        nranks = nodes * gpus_per_node
    if gpus_per_node is None:
        if nranks % nodes:
            raise ValueError(
                f"nranks: {nranks} ranks do not fill {nodes} nodes evenly; expected a multiple of "
                f"{nodes} (or pass --nodes / --gpus-per-node)"
            )
        gpus_per_node = nranks // nodes
    if nodes * gpus_per_node != nranks:
        raise ValueError(
            f"nranks: {nranks} is not nodes x gpus-per-node ({nodes} x {gpus_per_node}); expected them to agree"
        )
    if gpus_per_process is None:
        gpus_per_process = log.gpus_per_thread if log and log.gpus_per_thread else 1
    types = sorted({r.type for r in data})
    if len(types) != 1:
        raise ValueError(f"type: {name} mixes data types ({', '.join(types)}); expected one")

    rows_by_size: dict[int, list[LogRow]] = {}
    for r in data:
        if r.size_bytes > 0:  # nccl-tests rounds tiny all_gather/reduce_scatter sizes to 0: nothing to compare
            rows_by_size.setdefault(r.size_bytes, []).append(r)
    if not rows_by_size:
        raise ValueError(f"{name}: every row has size 0; expected rows with bytes to compare")
    first = data[0]
    topology = build_system(system, nodes=nodes)
    kinds = scaled_link_kinds(topology, nodes=nodes)
    forced = dict(algorithm=algorithm, protocol=protocol, nchannels=nchannels)
    environment = applied_settings(dict(log.environment) if log else {}, **forced)
    base_config = SimConfig(
        network_model=net_model,
        collectives=CollectivePolicy.from_environment(environment, **forced, nccl_version=nccl_version),
    )

    evaluations = itertools.count(1)

    def predict(scale: float, overhead_s: float, sizes: Sequence[int]) -> dict[int, BenchRow]:
        number = next(evaluations)
        if progress is not None:
            progress(f"simulation {number} of the fit (link scale {scale:.3f}, overhead {overhead_s * 1e6:.1f} us)")
        calibration = Calibration(
            system=system, link_scale=tuple((k.name.lower(), scale) for k in kinds), launch_overhead_s=overhead_s
        )
        topo, config = apply_calibration(topology, base_config, calibration)
        out = run_bench(
            kind,
            system=topo,
            gpus_per_node=gpus_per_node,
            sizes=list(sizes),
            dtype=first.type,
            op=first.redop if kind.reduces else "sum",
            root=max(first.root, 0),
            gpus_per_process=gpus_per_process,
            config=config,
        )
        return {size: row for size, row in zip(sizes, out)}

    all_sizes = sorted(rows_by_size)
    before = predict(1.0, 0.0, all_sizes)
    usable = [s for s in all_sizes if before[s].size_bytes == s]  # sizes nccl-tests' rounding keeps
    if not usable:
        raise ValueError(f"{name}: no row's size is one nccl-tests runs for {kind.value} on {nranks} ranks")
    overhead_sizes = [s for s in usable if s < LATENCY_REGIME_MAX_BYTES]
    factor = {
        s: collective_for_size(
            kind, s, nranks=nranks, dtype=NCCL_TESTS_TYPES[first.type], op="sum", root=0
        ).busbw_factor
        for s in usable
    }
    busbw = {(s, r.line): s / r.time_us * 1e-3 * factor[s] for s in usable for r in rows_by_size[s]}
    big = [(s, r) for s in usable if s >= SCALE_FIT_MIN_BYTES for r in rows_by_size[s]]
    plateau = PLATEAU_FRACTION * max(busbw[s, r.line] for s, r in big) if big else None
    floor = math.inf if plateau is None else plateau  # (only compared when there are big rows)
    scale_sizes = sorted({s for s, r in big if busbw[s, r.line] >= floor})

    def cost(scale: float, overhead_s: float, sizes: list[int]) -> float:
        pred = predict(scale, overhead_s, sizes)
        return sum(
            math.log(pred[s].time_us / r.time_us) ** 2
            for s in sizes
            for r in rows_by_size[s]
            if s not in scale_set or busbw[s, r.line] >= floor
        )

    scale_set = set(scale_sizes)

    scale, overhead = 1.0, 0.0
    for _ in range(ROUNDS):
        if overhead_sizes:
            overhead = golden_section_min(
                lambda o: cost(scale, o, overhead_sizes), *OVERHEAD_BOUNDS_S, tol=OVERHEAD_TOLERANCE_S
            )
        if scale_sizes:
            scale = golden_section_min(lambda s: cost(s, overhead, scale_sizes), *SCALE_BOUNDS, tol=SCALE_TOLERANCE)
    scale, overhead = round(scale, 4), round(overhead, 9)
    calibration = Calibration(
        system=system, link_scale=tuple((k.name.lower(), scale) for k in kinds), launch_overhead_s=overhead
    )
    after = predict(scale, overhead, usable)

    def comparisons(pred: dict[int, BenchRow]) -> tuple[Comparison, ...]:
        out = []
        for size in usable:
            for r in rows_by_size[size]:
                p = pred[size]
                out.append(
                    Comparison(
                        series=name,
                        collective=kind.value,
                        gpu=system,
                        nranks=nranks,
                        nnodes=nodes,
                        size_bytes=size,
                        t_meas_us=r.time_us,
                        t_pred_us=p.time_us,
                        busbw_meas_GBps=busbw[size, r.line],
                        busbw_pred_GBps=p.busbw_GBps,
                        algorithm=p.algorithm,
                        protocol=p.protocol,
                        channels=p.channels,
                        source=f"{name} line {r.line}",
                    )
                )
        return tuple(out)

    return CalibrationResult(
        calibration=calibration,
        log=name,
        collective=kind.value,
        nranks=nranks,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpus_per_process=gpus_per_process,
        net_model=net_model,
        algorithm=algorithm,
        protocol=protocol,
        nchannels=nchannels,
        environment=tuple(environment.items()),
        scale_rows=sum(busbw[s, r.line] >= floor for s in scale_sizes for r in rows_by_size[s]),
        scale_min_bytes=scale_sizes[0] if scale_sizes else None,
        plateau_busbw_GBps=plateau,
        overhead_rows=sum(len(rows_by_size[s]) for s in overhead_sizes),
        before=comparisons(before),
        after=comparisons(after),
    )


def format_result(result: CalibrationResult, *, out: str | None = None) -> str:
    """The fitted values, |error| before/after per regime, and how to use them."""
    c = result.calibration
    lines = [
        f"# fabricsim calibrate {result.log}: {result.collective} on {c.system}, {result.nodes} node(s) x "
        f"{result.gpus_per_node} GPUs ({result.nranks} ranks, -g {result.gpus_per_process}), "
        f"{len(result.before)} rows, network model {result.net_model}"
    ]
    forced = ", ".join(
        f"{k} {v}"
        for k, v in (("algorithm", result.algorithm), ("protocol", result.protocol), ("channels", result.nchannels))
        if v is not None
    )
    if forced:
        lines[0] += f"; forced {forced}"
    if result.environment:
        lines[0] += "; as the log's run: " + describe_settings(dict(result.environment))
    fitted = (
        f"fitted on {result.scale_rows} rows >= {format_size(result.scale_min_bytes)} at >= "
        f"{PLATEAU_FRACTION:.0%} of the peak measured busbw ({result.plateau_busbw_GBps:.1f} GB/s)"
        if result.scale_min_bytes
        else f"not fitted: no row >= {format_size(SCALE_FIT_MIN_BYTES)}"
    )
    label = "/".join(kind for kind, _ in c.link_scale) + " bandwidth scale"
    lines.append(f"{label:<38}{c.link_scale[0][1]:>8.3f}     {fitted}")
    fitted = (
        f"fitted on {result.overhead_rows} rows < {format_size(LATENCY_REGIME_MAX_BYTES)}"
        if result.overhead_rows
        else f"not fitted: no row < {format_size(LATENCY_REGIME_MAX_BYTES)}"
    )
    lines.append(f"{'launch overhead per collective':<38}{c.launch_overhead_s * 1e6:>8.2f} us  {fitted}")
    lines.append("")
    before, after = result.summary_before, result.summary_after

    def pct(value: float) -> str:
        return "-" if value != value else f"{value:.1%}"

    lines.append(
        f"{'|t_pred / t_meas - 1|':<24}{'n':>5}{'median before':>16}{'after':>9}{'p90 before':>14}{'after':>9}"
    )
    labels = dict(REGIMES)
    for regime in ("latency", "bandwidth", "all"):
        label = labels[regime]
        b, a = before[regime], after[regime]
        lines.append(
            f"{label:<24}{b['n']:>5}{pct(b['median']):>16}{pct(a['median']):>9}{pct(b['p90']):>14}{pct(a['p90']):>9}"
        )
    lines.append("")
    bench = f"fabricsim bench {result.collective} --system {c.system} --nodes {result.nodes}"
    if out:
        lines.append(f"wrote {out}; use it with: {bench} --calibration {out}")
    else:
        lines.append(f"save it with --out FILE.json, then: {bench} --calibration FILE.json")
    lines.append(
        "from Python: topology, config = simulator.validation.calibration.apply_calibration(topology, config, "
        f"Calibration.load({(out or 'FILE.json')!r}))"
    )
    return "\n".join(lines) + "\n"
