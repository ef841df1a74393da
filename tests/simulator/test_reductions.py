"""simulator.studies.reductions: when each reduction applies, and the extrapolation's worked number."""

from __future__ import annotations

import pytest

from simulator.studies.reductions import (
    check_symmetric_replicas,
    extrapolate,
    notes,
    replica_ranks,
    steady_state_runs,
    uses_symmetric_replicas,
)
from workloads.parallelism import ParallelismSpec


def test_worked_number_of_the_extrapolation():
    # 1F1B, p 4, f + b = 30 ms: T(2) = 5 x 30 = 150 ms, T(4) = 7 x 30 = 210 ms -> T(9) = 150 + 7 x 60 / 2 = 360 ms
    assert extrapolate(0.150, 0.210, m=9, k=2) == pytest.approx((9 + 3) * 0.030, rel=1e-15)
    # nested measurements extrapolate key by key; a key missing on one side counts 0
    assert extrapolate({"a": {"x": 1.0}}, {"a": {"x": 2.0, "y": 4.0}}, m=6, k=2) == {"a": {"x": 3.0, "y": 8.0}}


def test_steady_state_runs_only_past_2k_and_whole_rounds_of_p_when_interleaved():
    spec = ParallelismSpec(pp=4, dp=2, global_batch=2 * 9)  # m = 9
    k, few, more = steady_state_runs(spec, 2)
    assert (k, few.microbatches, more.microbatches) == (2, 2, 4) and few.dp == more.dp == 2
    assert steady_state_runs(spec, 5) is None and steady_state_runs(spec, None) is None  # m <= 2k
    inter = ParallelismSpec(pp=4, dp=1, vp=2, schedule="interleaved", global_batch=32)  # m = 32
    assert steady_state_runs(inter, 3)[0] == 4  # 3 rounded up to p


def test_symmetric_replicas_need_a_pipeline_free_of_data_parallel_traffic():
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=4, dp_overlap=False)
    check_symmetric_replicas(spec, True)
    assert uses_symmetric_replicas(spec, True) and not uses_symmetric_replicas(spec, False)
    # replica 0 is the ranks with data-parallel coordinate 0: t x p = 4 of the 8 (tp innermost, then dp)
    assert replica_ranks(spec) == (0, 1, 4, 5)
    with pytest.raises(ValueError, match="symmetric_replicas: True is not allowed"):
        check_symmetric_replicas(ParallelismSpec(dp=2, global_batch=2), True)  # dp_overlap
    with pytest.raises(ValueError, match="symmetric_replicas: True is not allowed"):
        check_symmetric_replicas(ParallelismSpec(dp=2, global_batch=2, zero=3, dp_overlap=False), True)
    assert len(notes(spec, symmetric=True, tensor_rank0_p2p=True, steady=None)) == 2
