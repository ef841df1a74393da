"""Training-step programs share per-stage results between ranks; these tests check that sharing is exact:

* ranks of one stage (same tensor, context and expert coordinate where it matters) run the same program up to
  the relabelling of ranks and collectives;
* the order in which ranks are built (which one fills the shared per-stage results first) changes nothing;
* what is shared is what each rank would compute alone: programs against each rank built alone, gradient
  buckets against a direct derivation from the public parameter counts.
"""

from __future__ import annotations

import inspect
import itertools

import pytest

from tests.workloads.shapes import gpt, llama, moe
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.tasks import CommTask, ComputeTask
from workloads.training import STREAM_COMPUTE, STREAM_DP, StepCompute, resolve, training_step
from workloads.training.program import _Builder, _RankProgram


def varied_times(model: ModelSpec, spec: ParallelismSpec) -> StepCompute:
    """Different seconds per layer and per stage, so that a task shared with the wrong stage shows."""
    n = model.layers
    return StepCompute(
        layer_forward_s=tuple(1e-3 * (1 + 0.1 * i) for i in range(n)),
        layer_backward_s=tuple(2.1e-3 * (1 + 0.07 * i) for i in range(n)),
        embedding_forward_s=3e-4,
        embedding_backward_s=5e-4,
        logits_forward_s=7e-4,
        logits_backward_s=1.1e-3,
        optimizer_s=tuple(1e-4 * (j + 1) for j in range(spec.pp)),
        overlap_slowdown=0.25,
    )


# (model, layout): dense and MoE; tp, pp, dp, cp, ep; ZeRO 0-3 and FSDP; 1F1B, GPipe, interleaved; buckets on
# and off, reduced during or after the backward; uneven stages (7 layers on 3 stages, 5 on 2)
LAYOUTS = [
    (gpt(4), dict(tp=2, pp=2, dp=2, global_batch=6, bucket_bytes=16 * 1024)),
    (gpt(4), dict(tp=2, pp=2, dp=4, global_batch=8, dp_overlap=False, bucket_bytes=None)),
    (gpt(4), dict(tp=2, pp=2, dp=2, global_batch=4, sequence_parallel=True, zero=1, dtype="fp16")),
    (gpt(4), dict(tp=2, pp=2, dp=2, global_batch=4, zero=2, dp_overlap=False, bucket_bytes=8 * 1024)),
    (gpt(4), dict(tp=2, pp=2, dp=2, global_batch=4, zero=3)),
    (gpt(4), dict(pp=2, dp=4, global_batch=8, fsdp=True, dtype="fp8")),
    (gpt(8), dict(tp=2, pp=2, dp=2, vp=2, schedule="interleaved", global_batch=4, bucket_bytes=16 * 1024)),
    (gpt(8), dict(pp=4, dp=2, schedule="gpipe", global_batch=6)),
    (gpt(7), dict(pp=3, dp=2, global_batch=6, bucket_bytes=20 * 1024)),
    (llama(5), dict(tp=2, pp=2, cp=2, dp=2, global_batch=4, sequence_parallel=True, bucket_bytes=8 * 1024)),
    (llama(8), dict(tp=2, pp=2, cp=2, dp=2, vp=2, schedule="interleaved", global_batch=4, zero=1, order="tp-dp-cp-pp")),
    (moe(4), dict(dp=4, ep=2, ep_imbalance=0.3, global_batch=8, bucket_bytes=4096)),
    (moe(4), dict(tp=2, pp=2, dp=2, ep=2, sequence_parallel=True, global_batch=4, dp_overlap=False)),
    (moe(4), dict(cp=2, dp=2, ep=4, order="tp-ep-dp-cp-pp", zero=1)),
    (
        moe(6, first_dense_layers=1, moe_layer_freq=2, shared_experts=1, expert_ffn_hidden=64),
        dict(pp=2, vp=3, schedule="interleaved", dp=2, ep=2, global_batch=4, fsdp=True),
    ),
]
OPTIONS = [dict(), dict(granularity="chunk", tensor_rank0_p2p=True), dict(recompute="full", granularity="chunk")]
CASES = [
    pytest.param(model, layout, opts, id=f"{i}-{j}")
    for i, (model, layout) in enumerate(LAYOUTS)
    for j, opts in enumerate(OPTIONS)
]
# training_step's keyword options and their defaults, as _Builder takes them
STEP_DEFAULTS = {
    name: p.default for name, p in inspect.signature(training_step).parameters.items() if p.kind is p.KEYWORD_ONLY
}


def parts(spec: ParallelismSpec) -> list[tuple[str, tuple[int, ...]]]:
    """The parts simulate_step builds: the whole step, and for ZeRO < 3 one replica's pipeline (all ranks
    when expert groups span replicas) and the reduction of every rank."""
    world = tuple(range(spec.world_size))
    out = [("all", world)]
    if spec.zero_stage < 3:
        replica = tuple(r for r in world if spec.coords(r).dp == 0) if spec.ep == 1 else world
        out += [("pipeline", replica), ("reduction", world)]
    return out


def collective_seen_by(tw, index: int, rank: int) -> tuple:
    """Collective ``index`` without rank ids: what ``rank`` (local id) sends and receives in it, and the rest."""
    c = tw.workload.collectives[index]
    me = c.group.index(rank)
    view = None if c.splits is None else (c.splits[me], tuple(row[me] for row in c.splits))
    return (
        c.kind,
        c.nbytes,
        c.dtype,
        c.op,
        c.root,
        len(c.group),
        view,
        tw.group_kinds[index],
        tw.collective_names[index],
        tw.collective_weights[index],
    )


def up_to_relabelling(tw, rank: int) -> tuple:
    """Program ``rank`` (local id) with every collective index replaced by its order of first use in the program
    and its rank-free description (two uses of one collective stay recognisable as one)."""
    first_use: dict[int, int] = {}
    out = []
    for task in tw.workload.programs[rank]:
        if isinstance(task, CommTask):
            label = first_use.setdefault(task.index, len(first_use))
            out.append(("comm", task.name, task.stream, task.after, label, collective_seen_by(tw, task.index, rank)))
        else:
            out.append(("compute", task.name, task.stream, task.after, repr(task.duration_s)))
    return tuple(out)


def with_global_ranks(tw, local: int) -> tuple:
    """Program of local rank ``local`` with every collective written out in global rank ids."""
    out = []
    for task in tw.workload.programs[local]:
        if isinstance(task, CommTask):
            c = tw.workload.collectives[task.index]
            group = tuple(tw.ranks[r] for r in c.group)
            out.append(
                (
                    task.name,
                    task.stream,
                    task.after,
                    c.kind,
                    c.nbytes,
                    group,
                    c.dtype,
                    c.splits,
                    tw.group_kinds[task.index],
                    tw.collective_names[task.index],
                    tw.collective_weights[task.index],
                )
            )
        else:
            out.append((task.name, task.stream, task.after, repr(task.duration_s)))
    return tuple(out)


def sharing_class(spec: ParallelismSpec, rank: int, tensor_rank0_p2p: bool) -> tuple:
    """Ranks that must run the same program up to relabelling: one stage; with representative transfers one
    tensor coordinate (tensor rank 0 moves the pipeline tensors); with experts one position in the expert group
    (the busiest member of a layer is a fixed position)."""
    c = spec.coords(rank)
    return (c.pp, c.tp if tensor_rank0_p2p and spec.tp > 1 else None, c.ep_rank if spec.ep > 1 else None)


# --------------------------------------------------------------------------------------------------
# invariants
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model, layout, opts", CASES)
def test_ranks_of_one_stage_run_one_program_up_to_relabelling(model, layout, opts):
    spec = ParallelismSpec(**layout)
    compute = varied_times(model, spec)
    for part, ranks in parts(spec):
        tw = training_step(model, spec, compute, part=part, ranks=ranks, **opts)
        classes: dict[tuple, set] = {}
        for local, rank in enumerate(tw.ranks):
            classes.setdefault(sharing_class(spec, rank, opts.get("tensor_rank0_p2p", False)), set()).add(
                up_to_relabelling(tw, local)
            )
        assert all(len(programs) == 1 for programs in classes.values()), part
        # and the stages' programs differ (task names carry the stage): nothing leaked from one stage to another
        assert len({key[0] for key in classes}) == spec.pp
        assert len({programs.pop() for programs in classes.values()}) >= spec.pp


@pytest.mark.parametrize("model, layout, opts", CASES)
def test_build_order_does_not_matter(model, layout, opts):
    """The first rank built fills the shared per-stage results; building the ranks backwards, or odd ranks first,
    gives every rank the same program and the same collectives."""
    spec = ParallelismSpec(**layout)
    compute = varied_times(model, spec)
    for part, ranks in parts(spec):
        forward = training_step(model, spec, compute, part=part, ranks=ranks, **opts)
        expected = {rank: with_global_ranks(forward, local) for local, rank in enumerate(forward.ranks)}
        for order in (tuple(reversed(ranks)), ranks[1::2] + ranks[0::2]):
            other = training_step(model, spec, compute, part=part, ranks=order, **opts)
            assert other.ranks == order
            assert len(other.workload.collectives) == len(forward.workload.collectives)
            for local, rank in enumerate(other.ranks):
                assert with_global_ranks(other, local) == expected[rank], (part, rank)


# the first two layouts with every option, and the MoE layout with imbalanced all-to-alls (default options)
IMBALANCED = next(i for i, (_, layout) in enumerate(LAYOUTS) if layout.get("ep_imbalance"))


@pytest.mark.parametrize("model, layout, opts", CASES[: 2 * len(OPTIONS)] + [CASES[IMBALANCED * len(OPTIONS)]])
def test_building_twice_gives_equal_workloads(model, layout, opts):
    spec = ParallelismSpec(**layout)
    compute = varied_times(model, spec)
    first = training_step(model, spec, compute, **opts)
    assert training_step(model, spec, compute, **opts) == first


@pytest.mark.parametrize("model, layout, opts", CASES)
def test_shared_programs_are_the_programs_each_rank_builds_alone(model, layout, opts):
    """training_step gives a rank whose answers about itself (stage, groups, tensor rank 0) match an earlier
    rank's that rank's program without building it; building every rank's program (private _RankProgram, in
    rank order, no program reused; the builder's per-stage caches are still shared) gives the same programs,
    collectives and labels (before durations are resolved: the programs carry work), and resolving them gives
    what training_step gives with the compute times."""
    spec = ParallelismSpec(**layout)
    compute = varied_times(model, spec)
    for part, ranks in parts(spec):
        tw = training_step(model, spec, part=part, ranks=ranks, **opts)
        builder = _Builder(model, spec, **{**STEP_DEFAULTS, **opts, "part": part, "ranks": ranks})
        alone = tuple(_RankProgram(builder, rank).build() for rank in ranks)
        assert tw.workload.programs == alone, part
        assert resolve(tw, compute) == training_step(model, spec, compute, part=part, ranks=ranks, **opts)
        assert tw.workload.collectives == tuple(builder.collectives)
        assert (tw.group_kinds, tw.collective_names, tw.collective_weights) == (
            tuple(builder.kinds),
            tuple(builder.names),
            tuple(builder.weights),
        )


def test_a_wide_reduction_is_one_all_reduce_per_data_parallel_group_and_one_program_object_per_group():
    # 256 ranks (t 2, p 4, d 32) with one gradient buffer reduced after the pipeline, as the scale benchmark:
    # every rank all-reduces its stage's gradients once, then runs its stage's optimizer. A rank asks only its
    # stage and its data-parallel group, so the d members of each of the t p = 8 groups share one program object
    model = llama(8)
    spec = ParallelismSpec(tp=2, pp=4, dp=32, global_batch=32, dp_overlap=False, bucket_bytes=None)
    tw = training_step(model, spec, varied_times(model, spec), part="reduction", granularity="chunk")
    assert len(tw.workload.collectives) == 2 * 4  # one per data-parallel group (t p of them)
    objects: dict[int, set] = {}
    for rank, program in enumerate(tw.workload.programs):
        stage = spec.coords(rank).pp
        bucket, optimizer = program
        assert isinstance(bucket, CommTask) and bucket.stream == STREAM_DP and bucket.after == ()
        assert tw.workload.collectives[bucket.index].group == spec.group_of("dp_cp", rank)
        assert tw.workload.collectives[bucket.index].nbytes == model.stage_parameters(stage, tp=2, pp=4) * 4
        assert isinstance(optimizer, ComputeTask) and optimizer.after == (0,)
        assert optimizer.duration_s == 1e-4 * (stage + 1) and optimizer.name == f"optimizer stage{stage}"
        objects.setdefault(id(program), set()).add(spec.group_of("dp_cp", rank))
    assert len(objects) == 8 and all(len(groups) == 1 for groups in objects.values())


def test_a_replica_pipeline_is_one_program_object_per_stage_and_tensor_rank_0_or_not():
    # one replica's pipeline (d coordinate 0) with representative transfers: tensor rank 0 of a stage asks its
    # pipeline group (its peers), tensor ranks 1..3 only their stage and tensor group: 4 stages x 2 objects
    model = gpt(4)
    spec = ParallelismSpec(tp=4, pp=4, dp=2, global_batch=8, dp_overlap=False, bucket_bytes=None)
    replica = tuple(r for r in range(spec.world_size) if spec.coords(r).dp == 0)
    tw = training_step(
        model,
        spec,
        varied_times(model, spec),
        part="pipeline",
        ranks=replica,
        granularity="chunk",
        tensor_rank0_p2p=True,
    )
    objects: dict[int, set] = {}
    for local, rank in enumerate(replica):
        c = spec.coords(rank)
        objects.setdefault(id(tw.workload.programs[local]), set()).add((c.pp, c.tp == 0))
    assert len(objects) == 4 * 2 and all(len(kinds) == 1 for kinds in objects.values())


def test_buckets_close_at_the_backward_task_that_completes_them():
    """With per-layer tasks and buckets reduced during the backward (DDP), a bucket waits for the backward task
    after which the running sum of gradients, in backward order, first reaches the bucket's end (the direct
    definition, re-derived here from the public parameter counts)."""
    model = gpt(7)
    bucket_bytes = 20 * 1024
    spec = ParallelismSpec(pp=3, dp=2, global_batch=6, bucket_bytes=bucket_bytes)  # layers 3, 2, 2
    tw = training_step(model, spec, varied_times(model, spec))
    cap = bucket_bytes // 4  # bf16: fp32 grads
    for rank in range(spec.world_size):
        stage = spec.coords(rank).pp
        layers = model.stage_layers(pp=3)[stage]
        units = [] if stage < 2 else [model.final_norm_parameters() + model.vocab * model.hidden]
        units += [model.layer_parameters(layer) for layer in reversed(layers)]
        units += [model.embedding_parameters()] if stage == 0 else []
        assert sum(units) == model.stage_parameters(stage, pp=3)
        running = list(itertools.accumulate(units))
        ends = list(range(cap, running[-1], cap)) + [running[-1]]
        program = tw.workload.programs[rank]
        # the backward tasks of the last micro-batch, one per unit (logits/output, layers, embedding)
        last_mb = [
            i
            for i, t in enumerate(program)
            if isinstance(t, ComputeTask)
            and t.stream == STREAM_COMPUTE
            and t.name.startswith(f"bwd mb{spec.microbatches - 1} ")
        ]
        assert len(last_mb) == len(units)
        buckets = [
            t for t in program if isinstance(t, CommTask) and t.stream == STREAM_DP and tw.group_kinds[t.index] == "dp"
        ]
        assert len(buckets) == len(ends)
        for task, end in zip(buckets, ends):
            done = next(k for k, total in enumerate(running) if total >= end)
            assert task.after == (last_mb[done],)
