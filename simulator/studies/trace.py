"""A training step (``StepResult``) as a Chrome trace (``chrome://tracing``, Perfetto): one process per
rank, one thread per stream, a complete ("X") event per task, times in microseconds.

A whole step at scale is millions of events (Llama-3 70B on 256 GPUs: 2.2 M, 555 MB of JSON), so a trace
holds the ranks asked for: by default one data-parallel replica (:func:`replica_ranks`: the ranks whose
data-parallel index is 0, i.e. t x c x p of them, every stage of one pipeline, whose timing the other
replicas repeat on a symmetric fabric), and :func:`write_trace` gzips it when the file name ends in ``.gz``
(Perfetto and ``chrome://tracing`` open ``.json.gz`` as they are).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

from topologies.checks import int_ranges, int_tuple, reject
from workloads.tasks import CommTask
from workloads.training import STREAM_NAMES, PassWork

from . import reductions

__all__ = ("chrome_trace", "replica_ranks", "parse_ranks", "write_trace")


def replica_ranks(step_result) -> tuple[int, ...]:
    """The ranks of data-parallel replica 0: every tensor, context and pipeline rank of one replica."""
    return reductions.replica_ranks(step_result.parallelism)


def parse_ranks(text: str, world: int) -> tuple[int, ...] | str | None:
    """``--trace-ranks``: "all" (None: every rank), "replica" (see :func:`replica_ranks`), or comma-separated
    ranks and ascending ranges ("0-7,64"), each below ``world``."""
    if text.strip() in ("all", "replica"):
        return None if text.strip() == "all" else "replica"
    expected = f'"all", "replica", or ranks and ranges in 0..{world - 1} such as 0-7,64'
    return tuple(sorted(set(int_ranges("trace_ranks", text, high=world - 1, expected=expected))))


def write_trace(step_result, path: str | Path, *, ranks: Iterable[int] | str | None = "replica") -> int:
    """Write the step's trace of ``ranks`` (None: all; "replica": one data-parallel replica, :func:`replica_ranks`)
    to ``path``, gzipped when it ends in ``.gz``. Returns the number of events written."""
    if isinstance(ranks, str) and ranks != "replica":
        raise reject("ranks", ranks, '"replica", None (every rank) or ranks')
    chosen = replica_ranks(step_result) if isinstance(ranks, str) else ranks
    trace = chrome_trace(step_result, ranks=chosen)
    data = json.dumps(trace).encode()
    target = Path(path)
    target.write_bytes(gzip.compress(data, mtime=0) if target.name.endswith(".gz") else data)
    return len(trace["traceEvents"])


def chrome_trace(step_result, *, ranks: Iterable[int] | None = None) -> dict:
    """Chrome trace-event JSON (a dict; ``json.dump`` it) of a ``StepResult``: process = rank, thread =
    stream, one "X" event per task; collectives carry their group kind, bytes, group size and the algorithm,
    protocol and channels NCCL's tuner chose (as NCCL_DEBUG=INFO prints per collective); compute tasks carry
    their work (``workloads.training.PassWork``: phase, layers, matrix FLOPs, whether it ran beside
    communication). ``ranks``: only these ranks' events (None: every rank)."""
    keep = None if ranks is None else frozenset(int_tuple("ranks", tuple(ranks)))
    events: list[dict] = []
    named: set[tuple[int, int]] = set()
    for phase in step_result.phases:
        training, timeline, offset = phase.training, phase.timeline, phase.offset_s
        workload = training.workload
        for local, program in enumerate(workload.programs):
            pid = training.ranks[local]
            if (keep is not None and pid not in keep) or local in workload.passive:
                continue  # a passive rank (a replica reduction's stand-in) ran nothing of its own
            if (pid, -1) not in named:
                named.add((pid, -1))
                stage = training.parallelism.coords(pid).pp
                events.append(
                    {
                        "ph": "M",
                        "name": "process_name",
                        "pid": pid,
                        "tid": 0,
                        "args": {"name": f"rank {pid} (stage {stage})"},
                    }
                )
            for position, task in enumerate(program):
                if (pid, task.stream) not in named:
                    named.add((pid, task.stream))
                    events.append(
                        {
                            "ph": "M",
                            "name": "thread_name",
                            "pid": pid,
                            "tid": task.stream,
                            "args": {"name": STREAM_NAMES.get(task.stream, f"stream {task.stream}")},
                        }
                    )
                t0 = float(timeline.start_s[local][position]) + offset
                t1 = float(timeline.end_s[local][position]) + offset
                event = {
                    "ph": "X",
                    "name": task.name,
                    "pid": pid,
                    "tid": task.stream,
                    "ts": t0 * 1e6,
                    "dur": max(t1 - t0, 0.0) * 1e6,
                }
                if isinstance(task, CommTask):
                    coll = workload.collectives[task.index]
                    event["cat"] = training.group_kinds[task.index]
                    record = phase.sim.collectives[task.index]
                    event["args"] = {
                        "collective": task.index,
                        "kind": coll.kind.value,
                        "nbytes": coll.nbytes,
                        "group_size": coll.nranks,
                        "algorithm": record.algorithm,
                        "protocol": record.protocol,
                        "channels": record.nchannels,
                    }
                else:
                    event["cat"] = "compute"
                    work = task.work
                    if isinstance(work, PassWork):
                        event["args"] = {
                            "phase": work.phase,
                            "layers": list(work.layers),
                            "flops": work.flops,
                            "beside_comm": work.beside_comm,
                        }
                events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}
