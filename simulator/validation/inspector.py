"""NCCL's profiler plugin "inspector" output as measurements, for ``calibrate`` and ``validate --data``.

The inspector (NVIDIA/nccl, ext-profiler/inspector from 2.28.3, plugins/profiler/inspector from 2.30; its
README.md and inspector_json.cc) writes, per process, one JSON object per completed collective and
communicator, one object a line (``NCCL_INSPECTOR_DUMP_VERBOSE=1`` adds the per-channel kernel events)::

    {"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "hostname": "node1", ...},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                   "coll_algobw_gbs": 277.2, "coll_busbw_gbs": 485.1,
                   "event_trace_sn": {"kernel_events": [{"channel_id": 0, ...}, ...]}}}

(2.30 adds ``comm_name`` to the header and ``p2p_perf`` objects for send/recv.) What each field becomes:

* ``coll`` (ncclFuncToString: AllReduce, AllGather, ReduceScatter, Broadcast, Reduce) -> the collective;
  point-to-point objects (``p2p_perf``) and other functions (AllGatherV, ...) are skipped and counted;
* ``coll_msg_size_bytes`` is count x type size of the call: the whole buffer for AllReduce, Broadcast and
  Reduce, one rank's share for AllGather and ReduceScatter (the inspector's own bandwidth multiplies it by
  n_ranks: inspectorComputeOpBw), so the nccl-tests size is msg x n_ranks for those two, msg for the others;
* ``coll_exec_time_us`` (whole microseconds) is the longest channel's kernel time on that rank, measured on
  the GPU (``kernel_gpu``) unless the plugin fell back to CPU timestamps: it leaves out the launch that
  nccl-tests' wall time includes, so small collectives read faster than in nccl-tests; 0 us records (below
  the clock's resolution) are skipped and counted;
* ``header.n_ranks`` and ``header.nnodes`` give the communicator's size and servers;
* the number of ``kernel_events`` (verbose output) is the channels NCCL launched for that call.

The JSON holds neither the algorithm nor the protocol NCCL chose (only the Prometheus output, a text format
with sizes in buckets, labels them), so the choice it records is the launched channel count.

Rows: records are grouped by (collective, n_ranks, nnodes, nccl-tests size), pooling every rank, every call
and every communicator of that shape; a row's time is the **median** of its records (robust to the first,
cold calls and to one slow rank), its channel count the most frequent one (the smallest of equals). The GPU
is not in the file: the system preset is given by the user (``--system``).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass

from topologies.checks import reject

#: the inspector's function names (ncclFuncToString) -> the collectives compared here
INSPECTOR_COLLECTIVES = {
    "AllReduce": "all_reduce",
    "AllGather": "all_gather",
    "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast",
    "Reduce": "reduce",
}
#: NCCL functions the inspector may report that have no nccl-tests row here: skipped (counted)
SKIPPED_FUNCTIONS = ("AllGatherV", "SendRecv", "Send", "Recv", "All2All", "AllToAll", "Gather", "Scatter", "Invalid")
#: collectives whose coll_msg_size_bytes is one rank's share (x n_ranks = the nccl-tests size)
PER_RANK_SIZE = ("all_gather", "reduce_scatter")
TIMING_SOURCES = ("kernel_gpu", "kernel_cpu", "collective_cpu")
_EXAMPLE = '{"header": {"n_ranks": 8, "nnodes": 1, ...}, "coll_perf": {"coll": "AllReduce", ...}}'


@dataclass(frozen=True, slots=True, kw_only=True)
class InspectorRecord:
    """One collective call on one rank, as the inspector wrote it (``line``: where its object starts)."""

    line: int
    collective: str  # "all_reduce", ...
    nranks: int
    nnodes: int
    size_bytes: int  # nccl-tests' size (msg x n_ranks for all_gather / reduce_scatter)
    time_us: float
    channels: int | None  # kernel_events in verbose output, else None
    timing_source: str | None
    host: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class InspectorRow:
    """The records of one (collective, nranks, nnodes, size): their median time and most frequent channel count."""

    collective: str
    nranks: int
    nnodes: int
    size_bytes: int
    time_us: float
    channels: int | None
    records: int
    lines: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class InspectorTrace:
    name: str
    records: tuple[InspectorRecord, ...]
    skipped: tuple[tuple[str, int], ...]  # (what, count): p2p objects, other functions, 0 us records
    format_versions: tuple[str, ...]

    def rows(self) -> tuple[InspectorRow, ...]:
        """One row per (collective, nranks, nnodes, size), in that order (see the module's docstring)."""
        groups: dict[tuple[str, int, int, int], list[InspectorRecord]] = {}
        for r in self.records:
            groups.setdefault((r.collective, r.nranks, r.nnodes, r.size_bytes), []).append(r)
        out = []
        for (collective, nranks, nnodes, size), records in sorted(groups.items()):
            counts = Counter(r.channels for r in records if r.channels is not None)
            channels = min(counts, key=lambda c: (-counts[c], c)) if counts else None
            out.append(
                InspectorRow(
                    collective=collective,
                    nranks=nranks,
                    nnodes=nnodes,
                    size_bytes=size,
                    time_us=statistics.median(r.time_us for r in records),
                    channels=channels,
                    records=len(records),
                    lines=tuple(r.line for r in records),
                )
            )
        return tuple(out)

    def shapes(self) -> tuple[tuple[str, int, int], ...]:
        """The distinct (collective, nranks, nnodes) of the rows, sorted."""
        return tuple(sorted({(r.collective, r.nranks, r.nnodes) for r in self.records}))


def is_inspector_json(text: str) -> bool:
    """Whether ``text`` is inspector output rather than nccl-tests' stdout or a CSV table: it opens with a JSON
    object (nccl-tests' output opens with '#' comments or launcher lines, a table with its header)."""
    return text.lstrip("\ufeff \t\r\n").startswith("{")


def _integer(value: object, *, where: str, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise reject(f"{where}: {field}", value, f"an integer >= {low}")
    return value


def _record(data: object, *, where: str, line: int, skipped: Counter) -> InspectorRecord | None:
    if not isinstance(data, dict):
        raise reject(f"{where}", type(data).__name__, f"a JSON object such as {_EXAMPLE}")
    header = data.get("header")
    if not isinstance(header, dict):
        raise reject(f"{where}: header", header, "an object with n_ranks and nnodes")
    if "p2p_perf" in data and "coll_perf" not in data:
        skipped["point-to-point (p2p_perf) records"] += 1
        return None
    perf = data.get("coll_perf")
    if not isinstance(perf, dict):
        raise reject(f"{where}: coll_perf", perf, "an object with coll, coll_msg_size_bytes and coll_exec_time_us")
    nranks = _integer(header.get("n_ranks"), where=where, field="header.n_ranks", low=1)
    nnodes = _integer(header.get("nnodes"), where=where, field="header.nnodes", low=1)
    if nnodes > nranks:
        raise reject(f"{where}: header.nnodes", nnodes, f"at most n_ranks ({nranks})")
    coll = perf.get("coll")
    if coll in SKIPPED_FUNCTIONS:
        skipped[f"{coll} records"] += 1
        return None
    if coll not in INSPECTOR_COLLECTIVES:
        raise reject(f"{where}: coll_perf.coll", coll, f"one of {', '.join(INSPECTOR_COLLECTIVES)}")
    collective = INSPECTOR_COLLECTIVES[coll]
    msg = _integer(perf.get("coll_msg_size_bytes"), where=where, field="coll_perf.coll_msg_size_bytes", low=0)
    time_us = perf.get("coll_exec_time_us")
    if isinstance(time_us, bool) or not isinstance(time_us, int | float) or not 0 <= time_us < float("inf"):
        raise reject(f"{where}: coll_perf.coll_exec_time_us", time_us, "a number of microseconds >= 0")
    source = perf.get("coll_timing_source")
    if source is not None and source not in TIMING_SOURCES:
        raise reject(f"{where}: coll_perf.coll_timing_source", source, f"one of {', '.join(TIMING_SOURCES)}")
    if time_us == 0 or msg == 0:
        skipped["records of 0 us or 0 bytes"] += 1
        return None
    channels = None
    trace = perf.get("event_trace_sn")
    if trace is not None:
        events = trace.get("kernel_events") if isinstance(trace, dict) else None
        if not isinstance(events, list) or not all(isinstance(e, dict) and "channel_id" in e for e in events):
            raise reject(f"{where}: coll_perf.event_trace_sn.kernel_events", events, "a list of {channel_id: ...}")
        channels = len({e["channel_id"] for e in events}) or None
    metadata = data.get("metadata")
    host = metadata.get("hostname") if isinstance(metadata, dict) else None
    return InspectorRecord(
        line=line,
        collective=collective,
        nranks=nranks,
        nnodes=nnodes,
        size_bytes=msg * nranks if collective in PER_RANK_SIZE else msg,
        time_us=float(time_us),
        channels=channels,
        timing_source=source,
        host=host if isinstance(host, str) else None,
    )


def parse_inspector_json(text: str, *, name: str = "<inspector>") -> InspectorTrace:
    """Read the inspector's output: JSON objects one after the other (one a line as the plugin writes them,
    pretty-printed, or several files concatenated); errors name the line and the field."""
    decoder = json.JSONDecoder()
    records, versions = [], []
    skipped: Counter = Counter()
    position, line = 0, 1
    text = text.lstrip("\ufeff")
    while True:
        start = position
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        line += text.count("\n", start, position)
        if position >= len(text):
            break
        where = f"{name} line {line}"
        try:
            data, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{name} line {exc.lineno}: not JSON ({exc.msg}); expected the inspector's objects, one a line, "
                f"such as {_EXAMPLE}"
            ) from None
        record = _record(data, where=where, line=line, skipped=skipped)
        if record is not None:
            records.append(record)
            meta = data.get("metadata")
            version = meta.get("inspector_output_format_version") if isinstance(meta, dict) else None
            if isinstance(version, str) and version not in versions:
                versions.append(version)
        line += text.count("\n", position, end)
        position = end
    if not records:
        raise ValueError(
            f"{name}: no collective records (coll_perf) to compare"
            + (f" ({', '.join(f'{n} {what}' for what, n in skipped.items())} skipped)" if skipped else "")
            + f"; expected the inspector's output, such as {_EXAMPLE}"
        )
    return InspectorTrace(
        name=name, records=tuple(records), skipped=tuple(sorted(skipped.items())), format_versions=tuple(versions)
    )
