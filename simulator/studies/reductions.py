"""The four exact reductions that keep huge training-step layouts tractable (``StepOptions``; all off by default).

* ``granularity="chunk"`` (task merging): one compute task and one collective per (group, kind) per model-chunk
  pass, whose nbytes is the sum of the per-layer collectives. Bytes and compute time are conserved; what
  changes is that per-collective latencies are paid once per pass instead of once per layer. The backward of
  the last micro-batch keeps per-layer tasks when gradients are reduced during it, so buckets still overlap
  it (``workloads.training.program``).
* ``tensor_rank0_p2p=True`` (representative transfers): tensor rank 0 alone makes each pipeline transfer,
  standing for the t identical ones (``TrainingWorkload.collective_weights``). Exact by symmetry when the t
  pairs use disjoint paths (tensor ranks inside a server, rail-optimised fabric: rank i's transfer uses rail
  i) and tensor-parallel collectives in every pass re-synchronise the tensor group (they do for t > 1); the
  other t - 1 transfers' link bytes are then not counted (``workloads.training.pipeline``).
* ``symmetric_replicas=True`` (requires ``dp_overlap=False`` and ZeRO < 3): data-parallel replicas run the
  same pipeline independently until the gradient reduction, so the step is simulated as two phases: the
  pipeline of ONE replica (its t c p ranks on the GPUs they occupy, :func:`replica_ranks`), then the
  reduction, embedding sync and optimizer of ALL ranks. Exact when replicas do not share network links
  during the pipeline (rail-optimised non-blocking fabrics with tensor groups inside servers: each GPU's
  pipeline traffic leaves through its own NIC); counts, bytes and link bytes of the pipeline phase are
  multiplied by d in the breakdown. The reduction phase does not depend on the batch, so the steady-state
  extrapolation simulates it once.
* ``steady_state_microbatches=k``: a pipeline step is affine in the number of micro-batches once the schedule
  is in steady state (1F1B: (m + p - 1)(f + b)), so the step is simulated with k and 2k micro-batches (k
  rounded up to a multiple of p for the interleaved schedule, :func:`steady_state_runs`) and every additive
  measurement extrapolated linearly to m (:func:`extrapolate`): T(m) = T(k) + (m - k)(T(2k) - T(k))/k. Exact
  for the compute critical path; with communication, GPT-145.6B of SC21 Table 1 (m = 48) gives the same step
  time to 1e-14 with k = 16 and to 0.09 % with k = 8.

Worked number: 1F1B on p = 4 stages, f + b = 30 ms per micro-batch and stage, m = 9, k = 2: T(2) = (2 + 3) 30 =
150 ms, T(4) = (4 + 3) 30 = 210 ms, so T(9) = 150 + (9 - 2)(210 - 150)/2 = 360 ms = (9 + 3) 30 ms, exactly.
"""

from __future__ import annotations

import dataclasses

from workloads.model import ceil_div
from workloads.parallelism import ParallelismSpec

__all__ = ("check_symmetric_replicas", "replica_ranks", "steady_state_runs", "extrapolate", "notes")


def check_symmetric_replicas(p: ParallelismSpec, symmetric_replicas: bool) -> None:
    """The error when symmetric replicas are asked for a layout whose replicas interact inside the pipeline."""
    if symmetric_replicas and p.dp > 1 and (p.dp_overlap or p.zero_stage >= 3):
        raise ValueError(
            "symmetric_replicas: True is not allowed with dp_overlap=True or ZeRO-3/FSDP, whose "
            "gradient or parameter traffic runs inside the pipeline; expected False"
        )


def uses_symmetric_replicas(p: ParallelismSpec, symmetric_replicas: bool) -> bool:
    """Whether the step is simulated as one replica's pipeline, then every rank's reduction."""
    return symmetric_replicas and p.dp > 1


def replica_ranks(p: ParallelismSpec) -> tuple[int, ...]:
    """The ranks of one data-parallel replica: those with data-parallel coordinate 0, in increasing order."""
    return tuple(sorted(group[0] for group in p.groups("dp")))


def steady_state_runs(p: ParallelismSpec, k: int | None) -> tuple[int, ParallelismSpec, ParallelismSpec] | None:
    """(k, the layout with k micro-batches, the layout with 2k) when the extrapolation applies (m > 2k), else
    None; k is rounded up to a multiple of p for the interleaved schedule."""
    if k is None:
        return None
    if p.schedule == "interleaved":
        k = ceil_div(k, p.pp) * p.pp
    if p.microbatches <= 2 * k:
        return None
    few = dataclasses.replace(p, global_batch=k * p.dp * p.micro_batch)
    more = dataclasses.replace(p, global_batch=2 * k * p.dp * p.micro_batch)
    return k, few, more


def lerp(a, b, x: float):
    """a + x (b - a) for numbers and (nested) dicts of numbers; a key missing on one side counts 0."""
    if isinstance(a, dict):
        return {
            key: lerp(
                a.get(key, 0 if not isinstance(b.get(key), dict) else {}),
                b.get(key, 0 if not isinstance(a.get(key), dict) else {}),
                x,
            )
            for key in {**a, **b}
        }
    return a + x * (b - a)


def extrapolate(a, b, *, m: int, k: int):
    """The measurement at m micro-batches from those at k (``a``) and 2k (``b``): a + (m - k)/k (b - a)."""
    return lerp(a, b, (m - k) / k)


def notes(p: ParallelismSpec, *, symmetric: bool, tensor_rank0_p2p: bool, steady: tuple | None) -> list[str]:
    """What the result's ``notes`` say about the reductions used, in the order they apply."""
    out = []
    if symmetric:
        out.append(f"symmetric replicas: pipeline of 1 of {p.dp} data-parallel replicas, then the reduction")
    if tensor_rank0_p2p and p.tp > 1 and p.pp > 1:
        out.append(
            f"pipeline transfers simulated for tensor rank 0, standing for all {p.tp} (link bytes of the "
            "other tensor ranks' transfers not counted)"
        )
    if steady is not None:
        k = steady[0]
        out.append(
            f"steady state: simulated {k} and {2 * k} micro-batches, extrapolated linearly to "
            f"{p.microbatches}; phases (traces) are those of the {2 * k}-micro-batch run"
        )
    return out
