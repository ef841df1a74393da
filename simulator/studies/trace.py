"""A training step (``StepResult``) as a Chrome trace (``chrome://tracing``, Perfetto): one process per
rank, one thread per stream, a complete ("X") event per task, times in microseconds.
"""

from __future__ import annotations

from workloads.tasks import CommTask
from workloads.training import STREAM_NAMES, PassWork

__all__ = ("chrome_trace",)


def chrome_trace(step_result) -> dict:
    """Chrome trace-event JSON (a dict; ``json.dump`` it) of a ``StepResult``: process = rank, thread =
    stream, one "X" event per task; collectives carry their group kind, bytes, group size and the algorithm,
    protocol and channels NCCL's tuner chose (as NCCL_DEBUG=INFO prints per collective); compute tasks carry
    their work (``workloads.training.PassWork``: phase, layers, matrix FLOPs, whether it ran beside
    communication)."""
    events: list[dict] = []
    named: set[tuple[int, int]] = set()
    for phase in step_result.phases:
        training, timeline, offset = phase.training, phase.timeline, phase.offset_s
        workload = training.workload
        for local, program in enumerate(workload.programs):
            pid = training.ranks[local]
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
