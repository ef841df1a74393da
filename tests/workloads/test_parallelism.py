"""ParallelismSpec: invariants of the process groups first, then hand-derived ranks, then bad layouts."""

from __future__ import annotations

import itertools

import pytest

from tests.workloads.shapes import moe
from workloads.parallelism import DDP_BUCKET_BYTES, GROUP_KINDS, MCORE_BUCKETS, ParallelismSpec
from workloads.presets import custom_gpt

LAYOUTS = [
    dict(tp=2, pp=2, dp=2),
    dict(tp=2, cp=2, dp=3, pp=2),
    dict(tp=4, pp=3, dp=2, order="tp-pp-dp-cp"),
    dict(tp=2, cp=2, dp=4, pp=2, ep=4),
    dict(tp=1, cp=1, dp=6, pp=1, ep=3, order="tp-cp-dp-ep-pp"),
]
# MoE parallel folding (etp != tp): Megatron-Core's expert RankGenerator regroups each stage's t c d ranks
FOLDED = [
    dict(tp=2, dp=4, ep=8, etp=1),
    dict(tp=4, cp=2, dp=2, pp=2, ep=4, etp=2),
    dict(tp=2, cp=2, dp=2, pp=2, ep=2, etp=4),
]


# --------------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS + FOLDED)
def test_groups_partition_the_world(layout):
    spec = ParallelismSpec(**layout)
    sizes = {
        "tp": spec.tp,
        "cp": spec.cp,
        "dp": spec.dp,
        "pp": spec.pp,
        "dp_cp": spec.dp * spec.cp,
        "ep": spec.ep,
        "edp": spec.tp * spec.dp * spec.cp // (spec.expert_tp * spec.ep),
        "etp": spec.expert_tp,
    }
    for kind in GROUP_KINDS:
        groups = spec.groups(kind)
        members = sorted(r for g in groups for r in g)
        assert members == list(range(spec.world_size)), kind  # every rank exactly once
        assert {len(g) for g in groups} == {sizes[kind]}, kind
        assert len(groups) == spec.world_size // sizes[kind]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_coordinates_round_trip_and_groups_vary_one_dimension(layout):
    spec = ParallelismSpec(**layout)
    for rank in range(spec.world_size):
        c = spec.coords(rank)
        assert spec.rank_of(tp=c.tp, cp=c.cp, dp=c.dp, pp=c.pp) == rank
        for kind in ("tp", "cp", "dp", "pp"):
            group = spec.group_of(kind, rank)
            others = [d for d in ("tp", "cp", "dp", "pp") if d != kind]
            # the members share every other coordinate and take each value of their own exactly once
            assert {tuple(getattr(spec.coords(r), d) for d in others) for r in group} == {
                tuple(getattr(c, d) for d in others)
            }
            assert sorted(getattr(spec.coords(r), kind) for r in group) == list(range(len(group)))
        # expert groups stay inside the ranks that hold the same tensor shard of the same stage
        for kind in ("ep", "edp", "dp_cp"):
            assert {(spec.coords(r).tp, spec.coords(r).pp) for r in spec.group_of(kind, rank)} == {(c.tp, c.pp)}
        assert spec.group_of("ep", rank)[c.ep_rank] == rank


@pytest.mark.parametrize("layout", FOLDED)
def test_folded_expert_groups_stay_in_one_stage_and_cross_once(layout):
    spec = ParallelismSpec(**layout)
    for rank in range(spec.world_size):
        c = spec.coords(rank)
        for kind in ("ep", "edp", "etp"):  # the MoE layers regroup the ranks of one pipeline stage
            assert {spec.coords(r).pp for r in spec.group_of(kind, rank)} == {c.pp}
        assert spec.group_of("ep", rank)[c.ep_rank] == rank
        assert spec.group_of("edp", rank)[c.ep] == rank
    # groups of two different expert dimensions share at most one rank (an (etp, ep, edp, pp) coordinate names
    # one rank), and an ep group meets e groups of either other kind
    for e in spec.groups("ep"):
        for kind in ("etp", "edp"):
            common = [len(set(e) & set(g)) for g in spec.groups(kind)]
            assert max(common) == 1 and sum(common) == spec.ep


def test_default_etp_is_tp_and_keeps_the_groups():
    # etp None = tp (parallel_state.initialize_model_parallel); an explicit etp = tp gives the same groups,
    # the expert tensor group being the tensor group
    for layout in LAYOUTS:
        spec = ParallelismSpec(**layout)
        same = ParallelismSpec(**layout, etp=spec.tp)
        assert spec.expert_tp == spec.tp and not spec.folded and not same.folded
        for kind in GROUP_KINDS:
            assert spec.groups(kind) == same.groups(kind), (layout, kind)
        assert spec.groups("etp") == spec.groups("tp")
        assert spec.edp == spec.dp * spec.cp // spec.ep


def test_folded_groups_by_hand():
    # t 2, d 4, p 1, e 8, etp 1: edp = t d / (etp e) = 8 / 8 = 1. The expert generator numbers
    # rank = i_etp + etp (i_ep + e (i_edp + edp i_pp)) = i_ep: the one expert-parallel group is 0..7, crossing
    # both tensor ranks of every replica (dense: rank = i_tp + 2 i_dp); expert-TP and expert-DP groups are single
    spec = ParallelismSpec(tp=2, dp=4, ep=8, etp=1)
    assert spec.edp == 1 and spec.folded
    assert spec.groups("ep") == [tuple(range(8))]
    assert spec.groups("etp") == spec.groups("edp") == [(r,) for r in range(8)]
    assert spec.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]  # the dense layers keep theirs
    # t 4, c 2, d 2, p 2, e 4, etp 2: edp = 4 x 2 x 2 / (2 x 4) = 2; rank = i_etp + 2 (i_ep + 4 (i_edp + 2 i_pp)):
    # ep stride 2, edp stride 8, pp stride 16 (= t c d, the dense pipeline stride)
    spec = ParallelismSpec(tp=4, cp=2, dp=2, pp=2, ep=4, etp=2)
    assert spec.edp == 2
    assert spec.group_of("ep", 0) == (0, 2, 4, 6) and spec.group_of("ep", 9) == (9, 11, 13, 15)
    assert spec.group_of("etp", 0) == (0, 1) and spec.group_of("etp", 6) == (6, 7)
    assert spec.group_of("edp", 0) == (0, 8) and spec.group_of("edp", 23) == (23, 31)
    assert spec.group_of("pp", 0) == (0, 16)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        # etp x ep must divide t c d = 8
        (dict(tp=2, dp=4, ep=16, etp=1), ["ParallelismSpec.etp", "1", "etp x ep dividing tp x cp x dp", "8"]),
        (dict(tp=2, dp=4, ep=4, etp=4), ["ParallelismSpec.etp", "4", "etp x ep"]),
        (dict(tp=2, dp=4, etp=0), ["ParallelismSpec.etp", "0", "None or an integer"]),
        (dict(tp=2, dp=4, etp=1.5), ["ParallelismSpec.etp", "1.5"]),
        (dict(tp=2, dp=4, ep=8), ["ParallelismSpec.ep", "8", "dp x cp", "etp"]),
        # a folded layout's order must keep the pipeline groups (pp outermost here: pp stride t d = 8 dense, but
        # the expert generator of "tp-pp-dp-cp" strides pp by etp = 1)
        (dict(tp=2, dp=4, pp=2, ep=4, etp=1, order="tp-pp-dp-cp"), ["ParallelismSpec.order", "ep"]),
        # Megatron-Core: an order not ending in pp needs edp = d at p > 1 (edp = 2 x 4 / 4 = 2, d = 4)
        (
            dict(tp=2, dp=4, pp=2, ep=4, etp=1, order="tp-ep-pp-dp-cp"),
            ["ParallelismSpec.order", "ending in pp", "edp 2"],
        ),
        # edp = 2 x 2 x 2 / (2 x 2) = 2 = d, but the dense order tp-cp-pp-dp strides pp by t c = 4 and the expert
        # generator's tp-pp-ep-dp (cp dropped) by etp = 2
        (dict(tp=2, cp=2, dp=2, pp=2, ep=2, order="tp-cp-pp-ep-dp"), ["ParallelismSpec.order", "pipeline groups"]),
    ],
)
def test_bad_etp_is_rejected_by_name(kwargs, words):
    with pytest.raises(ValueError) as err:
        ParallelismSpec(**kwargs)
    for word in words:
        assert word in str(err.value)


def test_etp_that_does_not_fit_the_model():
    # etp must divide the expert ffn hidden (128 in tests.workloads.shapes.moe; 5 does not): t c d = 10 = etp x ep
    model = moe()
    fe = model.expert_ffn_hidden
    bad = next(e for e in (5, 7, 9, 11) if fe % e)
    spec = ParallelismSpec(tp=1, dp=bad * 2, ep=2, etp=bad)
    with pytest.raises(
        ValueError,
        match=f"ParallelismSpec.etp: {bad} is not allowed; expected a divisor of the "
        f"model's expert_ffn_hidden \\({fe}\\)",
    ):
        spec.check(model)
    with pytest.raises(
        ValueError, match="ParallelismSpec.etp: 2 is not allowed; expected None or tp \\(1\\) for the dense"
    ):
        ParallelismSpec(dp=4, etp=2).check(custom_gpt(layers=4, hidden=64, heads=4))


def test_ep_and_edp_groups_cross_once():
    # an expert group and an expert-data-parallel group of the same block share exactly one rank
    spec = ParallelismSpec(tp=2, cp=2, dp=4, pp=2, ep=4)
    for e, d in itertools.product(spec.groups("ep"), spec.groups("edp")):
        common = set(e) & set(d)
        same_block = spec.coords(e[0]).tp == spec.coords(d[0]).tp and spec.coords(e[0]).pp == spec.coords(d[0]).pp
        assert len(common) == (1 if same_block else 0)


def test_default_order_puts_tensor_groups_on_consecutive_ranks():
    # Megatron order tp-cp-ep-dp-pp: tp innermost, so a tensor group of 8 is one DGX server
    spec = ParallelismSpec(tp=8, pp=4, gpus=256)
    assert all(g == tuple(range(g[0], g[0] + 8)) for g in spec.groups("tp"))
    assert spec.dp == 256 // 32


# --------------------------------------------------------------------------------------------------
# hand-derived numbers
# --------------------------------------------------------------------------------------------------


def test_sc21_gpt_145b_worked_number():
    # 1536 GPUs, t 8, p 8 -> d = 1536 / 64 = 24; B 2304, b 2 -> m = 2304 / (24 x 2) = 48.
    spec = ParallelismSpec(tp=8, pp=8, gpus=1536, micro_batch=2, global_batch=2304, vp=2, schedule="interleaved")
    assert (spec.dp, spec.microbatches, spec.virtual_stages) == (24, 48, 16)
    # rank 100 = 4 + 8 x 12: tensor rank 4, data-parallel rank 12, stage 0
    c = spec.coords(100)
    assert (c.tp, c.cp, c.dp, c.pp) == (4, 0, 12, 0)
    assert spec.group_of("tp", 100) == tuple(range(96, 104))
    # pipeline stride t x d = 192
    assert spec.group_of("pp", 100) == tuple(100 + 192 * j for j in range(8))
    assert spec.group_of("dp", 100) == tuple(4 + 8 * j for j in range(24))


def test_context_and_expert_groups_by_hand():
    # t 2, c 2, d 4, p 2: rank = i_tp + 2 (i_cp + 2 (i_dp + 4 i_pp)).
    spec = ParallelismSpec(tp=2, cp=2, dp=4, pp=2, ep=4)
    assert spec.group_of("cp", 0) == (0, 2)  # i_cp 0, 1 at stride t = 2
    assert spec.group_of("dp", 0) == (0, 4, 8, 12)  # stride t c = 4
    assert spec.group_of("pp", 0) == (0, 16)  # stride t c d = 16
    assert spec.group_of("dp_cp", 1) == (1, 3, 5, 7, 9, 11, 13, 15)
    # among the 8 ranks of (tp 0, pp 0), sorted: 0 2 4 ... 14; expert groups are consecutive blocks of 4
    assert spec.group_of("ep", 0) == (0, 2, 4, 6) and spec.group_of("ep", 8) == (8, 10, 12, 14)
    assert spec.group_of("edp", 0) == (0, 8) and spec.group_of("edp", 6) == (6, 14)


def test_other_order_moves_the_pipeline_inside():
    # order tp-pp-dp-cp: rank = i_tp + 4 (i_pp + 3 (i_dp + 2 i_cp)); pipeline stride = t = 4
    spec = ParallelismSpec(tp=4, pp=3, dp=2, order="tp-pp-dp-cp")
    assert spec.group_of("pp", 1) == (1, 5, 9)
    assert spec.group_of("dp", 1) == (1, 13)


def test_defaults():
    spec = ParallelismSpec(dp=4)
    # Megatron-Core's buckets: max(40e6, 1e6 x 4) = 40e6 parameters; one micro-batch per replica when B is not given
    assert spec.bucket_bytes == MCORE_BUCKETS and spec.bucket_elements(0, 4) == 40_000_000
    assert DDP_BUCKET_BYTES == 26_214_400  # PyTorch DDP bucket_cap_mb = 25 -> 25 x 1024 x 1024 bytes
    assert (spec.global_batch, spec.microbatches, spec.world_size) == (4, 1, 4)
    assert ParallelismSpec(dp=2, fsdp=True).zero_stage == 3
    assert not ParallelismSpec(dp=2, sequence_parallel=True).sp  # no effect without tp > 1


# --------------------------------------------------------------------------------------------------
# bad layouts
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(tp=2, pp=2, dp=2, gpus=16), ["gpus", "16", "tp x cp x dp x pp", "8"]),
        (dict(tp=3, pp=2, gpus=16), ["gpus", "16", "multiple of tp x cp x pp", "6"]),
        (dict(tp=1), ["dp", "gpus="]),
        (dict(dp=4, micro_batch=2, global_batch=12), ["global_batch", "12", "dp x micro_batch", "8"]),
        (dict(dp=2, ep=4), ["ep", "4", "dp x cp"]),
        (dict(dp=2, pp=2, schedule="interleaved"), ["vp", "1", ">= 2"]),
        (dict(dp=2, pp=2, vp=2), ["vp", "2", "interleaved"]),
        (dict(dp=2, pp=4, vp=2, schedule="interleaved", global_batch=12), ["global_batch", "12", "divisible by pp"]),
        (dict(dp=2, order="tp-dp-pp"), ["order", "tp-dp-pp", "permutation"]),
        (dict(dp=2, zero=4), ["zero", "4", "0, 1, 2 or 3"]),
        (dict(dp=2, zero=1, fsdp=True), ["zero", "1", "fsdp"]),
        (dict(dp=2, schedule="zb"), ["schedule", "'zb'", "1f1b"]),
        (dict(dp=2, dtype="fp32"), ["dtype", "'fp32'", "bf16"]),
        (dict(dp=0), ["dp", "0", "None or an integer from 1 to 16777216"]),
        (dict(tp=0, dp=1), ["tp", "0", "integer from 1 to 16777216"]),
        (dict(dp=2, ep_imbalance=-0.5), ["ep_imbalance", "-0.5", ">= 0"]),
    ],
)
def test_bad_layouts_are_rejected_by_name(kwargs, words):
    with pytest.raises(ValueError) as err:
        ParallelismSpec(**kwargs)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    "model, kwargs, words",
    [
        (custom_gpt(layers=24, hidden=2304, heads=24), dict(tp=16, dp=1), ["tp", "16", "heads (24)"]),
        (custom_gpt(layers=6, hidden=3072, heads=32), dict(pp=8, dp=1), ["pp", "layers (6)", "pp x vp"]),
        (
            custom_gpt(layers=12, hidden=2304, heads=24),
            dict(pp=4, vp=4, dp=1, schedule="interleaved", global_batch=4),
            ["pp", "layers (12)", "16"],
        ),
        (custom_gpt(layers=4, hidden=64, heads=4, seq_len=100), dict(cp=8, dp=1), ["cp", "8", "seq_len (100)"]),
        (custom_gpt(layers=4, hidden=64, heads=4), dict(ep=2, dp=2), ["ep", "2", "dense model"]),
        (moe(experts=6), dict(ep=4, dp=4), ["ep", "4", "experts (6)"]),
        (moe(), dict(tp=2, dp=1), ["sequence_parallel", "MoE"]),
    ],
)
def test_layouts_that_do_not_fit_the_model(model, kwargs, words):
    spec = ParallelismSpec(**kwargs)
    with pytest.raises(ValueError) as err:
        spec.check(model)
    for word in words:
        assert word in str(err.value)


def test_bad_rank_queries():
    spec = ParallelismSpec(tp=2, dp=2)
    with pytest.raises(ValueError, match="rank: 4 is not allowed"):
        spec.coords(4)
    with pytest.raises(ValueError, match="rank_of.tp: 2 is not allowed"):
        spec.rank_of(tp=2)
    with pytest.raises(ValueError, match="groups.kind: 'xp' is not known"):
        spec.groups("xp")


def test_module_doctests_pass():
    import doctest

    import workloads.parallelism as module

    assert doctest.testmod(module).failed == 0


def test_expert_groups_follow_megatrons_generator_in_any_order():
    # world 16, t 2, e 2, etp None (= t), order tp-cp-dp-ep-pp: Megatron's expert generator drops cp (size 1) and
    # numbers rank = i_etp + 2 (i_edp + 4 i_ep) (edp = 16 / (2 x 2) = 4), so ep strides 8 and edp 2
    spec = ParallelismSpec(tp=2, dp=8, ep=2, order="tp-cp-dp-ep-pp")
    assert spec.group_of("ep", 0) == (0, 8) and spec.group_of("ep", 3) == (3, 11)
    assert spec.group_of("edp", 0) == (0, 2, 4, 6) and spec.group_of("edp", 9) == (9, 11, 13, 15)
    # an order without ep is completed with ep (size 1) as RankGenerator does: etp 1 folds t 2 x d 4 into edp 8
    spec = ParallelismSpec(tp=2, dp=4, ep=1, etp=1, order="tp-cp-dp-pp")
    assert spec.groups("edp") == [tuple(range(8))] and spec.groups("ep") == [(r,) for r in range(8)]

    # the expert tensor group is the expert generator's too: order cp-tp-ep-dp-pp, t 2, c 2, d 2, e 2 (etp = t):
    # dense rank = i_cp + 2 i_tp + 4 i_dp, so the dense tensor group of rank 0 is (0, 2); the expert generator drops
    # cp and numbers i_etp + 2 (i_ep + 2 i_edp), so its tensor group of rank 0 is (0, 1) (Megatron-Core's
    # get_expert_tensor_parallel_group)
    spec = ParallelismSpec(tp=2, cp=2, dp=2, ep=2, order="cp-tp-ep-dp-pp")
    assert spec.group_of("tp", 0) == (0, 2) and spec.group_of("etp", 0) == (0, 1)
