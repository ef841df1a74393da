"""Shared by the training-step tests: uniform compute times, a build with them, a rank's collectives."""

from __future__ import annotations

from workloads.model import ModelSpec
from workloads.training import StepCompute, training_step

# gpt() and moe() (tests/workloads/shapes.py): h 64, s 32; with b 1 and D 2 one activation is s b h D =
# 32 x 64 x 2 = 4096 bytes


def times(model: ModelSpec, **kw) -> StepCompute:
    return StepCompute.uniform(layers=model.layers, forward_s=1e-3, backward_s=2e-3, **kw)


def build(model, spec, **kw):
    return training_step(model, spec, times(model), **kw)


def colls(tw, rank, tag=None, kind=None):
    """Collectives of program ``rank`` (in program order), optionally of one group tag / kind."""
    out = []
    for i in tw.rank_collectives(rank):
        c = tw.workload.collectives[i]
        if (tag is None or tw.group_kinds[i] == tag) and (kind is None or c.kind is kind):
            out.append((i, c))
    return out
