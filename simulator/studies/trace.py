"""A training step (``StepResult``) as a Chrome trace (``chrome://tracing``, Perfetto): one process per
rank, one thread per stream, a complete ("X") event per task, times in microseconds.

A whole step at scale is millions of events (Llama-3 70B on 256 GPUs: 2.2 M, 555 MB of JSON), so a trace
holds the ranks asked for: by default one data-parallel replica (:func:`replica_ranks`: the ranks whose
data-parallel index is 0, i.e. t x c x p of them, every stage of one pipeline, whose timing the other
replicas repeat on a symmetric fabric), and :func:`write_trace` gzips it when the file name ends in ``.gz``
(Perfetto and ``chrome://tracing`` open ``.json.gz`` as they are).

Pipeline transfers are named as the send (on the sending rank) and the receive (on the receiving one), each
naming its peer, with a flow arrow from the send to the receive when both ranks are in the trace. A step
simulated with ``SimConfig(tier_rates=True)`` (``fabricsim step --trace`` sets it) adds a "link tiers"
process with one counter track per link tier: the share of the tier's capacity in use, averaged over
``COUNTER_BINS`` equal bins of each phase (exact means of the simulated traffic; a step that simulated one
data-parallel replica shows that replica's traffic, with the passive ranks' data-parallel flows, and says so
in the process's name).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from topologies.checks import int_ranges, int_tuple, reject
from workloads.collectives import CollectiveKind
from workloads.tasks import CommTask
from workloads.training import STREAM_NAMES, PassWork

from . import reductions

__all__ = ("COUNTER_BINS", "chrome_trace", "replica_ranks", "parse_ranks", "write_trace")

COUNTER_BINS = 2000  # counter samples per phase and tier: a step's shape at 0.05% of its length, few events


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
    data = json.dumps(trace, separators=(",", ":")).encode()
    target = Path(path)
    target.write_bytes(gzip.compress(data, mtime=0) if target.name.endswith(".gz") else data)
    return len(trace["traceEvents"])


def chrome_trace(step_result, *, ranks: Iterable[int] | None = None) -> dict:
    """Chrome trace-event JSON (a dict; ``json.dump`` it) of a ``StepResult``: process = rank, thread =
    stream, one "X" event per task; collectives carry their group kind, bytes, group size and the algorithm,
    protocol and channels NCCL's tuner chose (as NCCL_DEBUG=INFO prints per collective); compute tasks carry
    their matrix FLOPs (``workloads.training.PassWork``; the phase, and a single layer, are in the task's name),
    the ``layers`` of a task of several and ``beside_comm`` when they ran beside communication. Times are
    microseconds to the nanosecond. ``ranks``: only these ranks' events (None: every rank)."""
    keep = None if ranks is None else frozenset(int_tuple("ranks", tuple(ranks)))
    events: list[dict] = []
    named: set[tuple[int, int]] = set()
    arrows = 0
    counters: list[dict] = []
    counter_pid = step_result.parallelism.world_size  # after every rank's process
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
                    "ts": _us(t0),
                    "dur": round(max(_us(t1) - _us(t0), 0.0), 3),  # ends where the next task on the stream starts
                }
                if isinstance(task, CommTask):
                    coll = workload.collectives[task.index]
                    event["cat"] = training.group_kinds[task.index]
                    ends = _p2p_ends(coll) if event["cat"] == "pp" else None
                    if ends is not None:  # a pipeline transfer: this rank's send or receive
                        src, dst = (training.ranks[r] for r in ends)
                        sending = pid == src
                        event["name"] = f"{task.name} {'to' if sending else 'from'} rank {dst if sending else src}"
                        if keep is None or (src in keep and dst in keep):
                            flow = {"cat": "p2p", "name": "pipeline transfer", "id": arrows + task.index}
                            flow |= {"pid": pid, "tid": task.stream}
                            if sending:
                                events.append({"ph": "s", "ts": _us(t0), **flow})
                            else:  # bound to the receive, which ends when the data has arrived
                                events.append({"ph": "f", "bp": "e", "ts": _us((t0 + t1) / 2), **flow})
                    record = phase.sim.collectives[task.index]
                    event["args"] = {
                        "collective": task.index,
                        # a pipeline transfer's name says send or receive; others may not say their kind
                        **({} if ends is not None or _names_its_kind(task.name, coll) else {"kind": coll.kind.value}),
                        "nbytes": coll.nbytes,
                        "group_size": coll.nranks,
                        "algorithm": record.algorithm,
                        "protocol": record.protocol,
                        "channels": record.nchannels,
                    }
                else:
                    event["cat"] = "compute"
                    work = task.work
                    if isinstance(work, PassWork):  # its phase, and a single layer, are in its name
                        event["args"] = {"flops": int(work.flops)}
                        if len(work.layers) > 1:
                            event["args"]["layers"] = list(work.layers)
                        if work.beside_comm:
                            event["args"]["beside_comm"] = True
                events.append(event)
        arrows += len(workload.collectives)  # flow ids of the next phase follow this phase's
        counters += _tier_counters(phase, pid=counter_pid)
    if counters:
        reduced = any(phase.replicas > 1 or phase.training.workload.passive for phase in step_result.phases)
        # a step that simulated one replica shows that replica's traffic (and its passive ranks'), not the fabric's
        name = {"name": "link tiers (share of capacity in use" + (" by the simulated ranks)" if reduced else ")")}
        events += [{"ph": "M", "name": "process_name", "pid": counter_pid, "tid": 0, "args": name}, *counters]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _us(seconds: float) -> float:
    """Seconds as the trace's microseconds, to the nanosecond (shorter JSON; finer than any task)."""
    return round(float(seconds) * 1e6, 3)


def _names_its_kind(name: str, coll) -> bool:
    """Whether a task's name says its collective's kind ("tp allreduce" does, "dp bucket 3" does not)."""
    return coll.kind.value.replace("_", "") in name.lower().replace(" ", "").replace("_", "").replace("-", "")


def _p2p_ends(coll) -> tuple[int, int] | None:
    """(sender, receiver) positions in the workload of a one-directional two-rank transfer, else None."""
    if coll.kind is not CollectiveKind.ALL_TO_ALL or coll.nranks != 2 or coll.splits is None:
        return None
    (_, forward), (backward, _) = coll.splits
    if forward > 0 and backward == 0:
        return coll.group[0], coll.group[1]
    if backward > 0 and forward == 0:
        return coll.group[1], coll.group[0]
    return None


def _tier_counters(phase, *, pid: int) -> list[dict]:
    """Counter events of each link tier's utilisation in ``phase`` (COUNTER_BINS bin means; none without
    ``SimResult.tier_rates``), on process ``pid``."""
    rates = phase.sim.tier_rates
    if rates is None or rates.times_s.size < 2:
        return []
    times, utilisation = rates.times_s, rates.utilisation
    if times[0] > 0:  # nothing moved before the first flow
        times = np.concatenate(([0.0], times))
        utilisation = np.vstack((np.zeros(utilisation.shape[1]), utilisation))
    span = float(times[-1])
    edges = np.linspace(0.0, span, COUNTER_BINS + 1)
    # the integral of each tier's utilisation at the bin edges (piecewise constant between times), differenced
    cumulative = np.vstack((np.zeros(utilisation.shape[1]), np.cumsum(utilisation[:-1] * np.diff(times)[:, None], 0)))
    at = np.searchsorted(times, edges, side="right") - 1
    integral = cumulative[at] + utilisation[at] * (edges - times[at])[:, None]
    means = np.diff(integral, axis=0) / np.diff(edges)[:, None]
    events: list[dict] = []
    offset = phase.offset_s
    for j, tier in enumerate(rates.tiers):
        if rates.capacity_bytes_per_s[j] <= 0:
            continue
        name = f"{tier} utilisation"
        for k in range(COUNTER_BINS):
            value = round(float(means[k, j]), 4)
            if k and value == round(float(means[k - 1, j]), 4):
                continue  # a counter holds its value until the next sample
            events.append({"ph": "C", "name": name, "pid": pid, "ts": _us(edges[k] + offset), "args": {tier: value}})
        events.append({"ph": "C", "name": name, "pid": pid, "ts": _us(span + offset), "args": {tier: 0.0}})
    return events
