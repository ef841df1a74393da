"""workloads.training.expert_parallel: dispatch and combine all-to-alls, imbalance, and the module's worked number."""

from __future__ import annotations

from tests.workloads.shapes import moe
from tests.workloads.training.helpers import build, colls
from workloads.collectives import CollectiveKind
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


# --------------------------------------------------------------------------------------------------
# expert tensor parallelism and MoE parallel folding (ParallelismSpec.etp)
# --------------------------------------------------------------------------------------------------


def test_folded_alltoall_crosses_tensor_ranks_and_has_no_expert_tp_collectives():
    # t 2, d 4, e 8, etp 1 (moe(): 8 experts, h 64, s 32, k 2, expert ffn 128): the one ep group is ranks 0..7
    # (ParallelismSpec.groups), so rank 0's all-to-alls include its tensor peer 1; each tensor rank dispatches its
    # sequence-parallel shard, T k h D = (32 / 2) x 2 x 64 x 2 = 4096 B; etp 1: no all-gather or reduce-scatter
    model = moe()
    tw = build(model, ParallelismSpec(tp=2, dp=4, ep=8, etp=1, sequence_parallel=True))
    a2a = colls(tw, 0, "ep")
    assert len(a2a) == 4 * model.layers  # dispatch + combine, forward and backward
    assert {c.group for _, c in a2a} == {tuple(range(8))}
    assert {c.nbytes for _, c in a2a} == {4096} and {c.kind for _, c in a2a} == {CollectiveKind.ALL_TO_ALL}
    # expert gradients: edp = t d / (etp e) = 1, nothing to reduce; the dense ones over d = 4
    assert {c.group for _, c in colls(tw, 0, "dp")} == {(0, 2, 4, 6)}


def test_expert_tp_gathers_and_scatters_around_the_experts():
    # t 2, d 4, e 4, etp 2 (= t, the default): per layer and pass, dispatch all-to-all, all-gather of the received
    # tokens over the expert-TP group (the tensor group (0, 1)), reduce-scatter, combine all-to-all
    # (token_dispatcher.py); all-gather and reduce-scatter carry etp x T k h D = 2 x 4096 = 8192 B
    model = moe()
    for etp in (None, 2):
        tw = build(model, ParallelismSpec(tp=2, dp=4, ep=4, etp=etp, sequence_parallel=True))
        ep = colls(tw, 0, "ep")
        kinds = [c.kind for _, c in ep[:4]]
        assert kinds == [
            CollectiveKind.ALL_TO_ALL,
            CollectiveKind.ALL_GATHER,
            CollectiveKind.REDUCE_SCATTER,
            CollectiveKind.ALL_TO_ALL,
        ]
        assert len(ep) == 8 * model.layers
        gathers = [c for _, c in ep if c.kind is not CollectiveKind.ALL_TO_ALL]
        assert {c.group for c in gathers} == {(0, 1)} and {c.nbytes for c in gathers} == {8192}
        assert {c.group for _, c in ep if c.kind is CollectiveKind.ALL_TO_ALL} == {(0, 2, 4, 6)}


def test_default_etp_builds_the_same_step_as_etp_equal_to_tp():
    model = moe()
    spec = dict(tp=2, dp=4, ep=2, sequence_parallel=True)
    a, b = build(model, ParallelismSpec(**spec)), build(model, ParallelismSpec(**spec, etp=2))
    assert a.workload == b.workload and a.group_kinds == b.group_kinds and a.collective_names == b.collective_names


def test_expert_gradients_reduce_over_the_expert_data_parallel_group():
    # t 2, d 4, e 2, etp 1: edp = 8 / 2 = 4; rank = i_ep + 2 (i_edp): rank 0's edp group is 0, 2, 4, 6 -- here the
    # same ranks as its dense data-parallel group, but holding full experts: 8 / 2 = 4 experts of
    # 3 x 64 x 128 = 24,576 weights each, 98,304 per MoE layer, against 4 x 24,576 / 2 = 49,152 with etp 2
    model = moe()
    folded = ParallelismSpec(tp=2, dp=4, ep=2, etp=1, sequence_parallel=True)
    assert folded.group_of("edp", 0) == (0, 2, 4, 6) and folded.group_of("ep", 0) == (0, 1)
    assert model.routed_expert_parameters(0, ep=2, etp=1) == 98_304
    assert model.routed_expert_parameters(0, ep=2, etp=2) == 49_152
    tw = build(model, folded)
    expert = [c for i, c in colls(tw, 0, "dp") if "experts" in tw.collective_names[i]]
    dense = [c for i, c in colls(tw, 0, "dp") if "experts" not in tw.collective_names[i]]
    assert expert and dense and {c.group for c in expert} == {(0, 2, 4, 6)}
    # the expert buckets carry every expert weight of the 4 MoE layers once, fp32 gradients
    assert sum(c.nbytes for c in expert) == 4 * 98_304 * 4
