"""workloads.training.expert_parallel: dispatch and combine all-to-alls, imbalance, and the module's worked number."""

from __future__ import annotations

from tests.workloads.shapes import moe
from tests.workloads.training.helpers import build, colls
from workloads.parallelism import ParallelismSpec


def test_expert_imbalance_splits():
    model = moe()
    spec = ParallelismSpec(dp=4, ep=4, ep_imbalance=0.5)
    tw = build(model, spec)
    a2a = [c for _, c in colls(tw, 0, "ep")]
    # dispatch + combine forward and backward per MoE layer
    assert len(a2a) == 4 * model.layers
    send = model.ep_alltoall_bytes(micro_batch=1)  # T k h D = 32 x 2 x 64 x 2 = 8192
    assert send == 8192
    dispatch, combine = a2a[0], a2a[1]
    # layer 0: member 0 is the busiest; it receives 1.5 x 8192 / 4 = 3072 bytes from every sender
    assert [row[0] for row in dispatch.splits] == [3072] * 4
    assert all(sum(row) == send for row in dispatch.splits) and dispatch.nbytes == send
    assert combine.splits == tuple(zip(*dispatch.splits)) and combine.nbytes == 4 * 3072
    even = build(model, ParallelismSpec(dp=4, ep=4))
    assert {c.splits for _, c in colls(even, 0, "ep")} == {None}
    assert {c.nbytes for _, c in colls(even, 0, "ep")} == {send}


def test_worked_number_imbalanced_row():
    # T k h D = 8,192 B = 4,096 bf16 elements per rank, e 4, x 0.5: the busiest member (layer 0 % 4 = member 0)
    # gets round(1.5 x 4,096 / 4) = 1,536 elements; the other three share 2,560 = 3 x 853 + 1: 854, 853, 853
    model = moe()
    tw = build(model, ParallelismSpec(dp=4, ep=4, ep_imbalance=0.5))
    dispatch = colls(tw, 0, "ep")[0][1]
    assert dispatch.splits == ((3072, 1708, 1706, 1706),) * 4
