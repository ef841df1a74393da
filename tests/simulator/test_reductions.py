"""simulator.studies.reductions: when each reduction applies and is exact, the automatic path against the full
simulation, and the extrapolation's worked number."""

from __future__ import annotations

import dataclasses
import time

import pytest

from simulator.config import LinkEvent, SimConfig
from simulator.placement import Placement
from simulator.studies.reductions import (
    Plan,
    Verdict,
    bound_note,
    bounding_fabric,
    extrapolate,
    notes,
    plan,
    replica_ranks,
    replica_verdict,
    steady_state_runs,
    tensor_verdict,
    uneven_experts,
)
from simulator.studies.training import StepOptions, simulate_step
from topologies.presets import build_system
from topologies.routing import RouteCache, Router
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt, model_preset
from workloads.training import StepCompute


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


def test_replica_ranks_and_the_notes_of_forced_reductions():
    spec = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=4, dp_overlap=False)
    # replica 0 is the ranks with data-parallel coordinate 0: t x p = 4 of the 8 (tp innermost, then dp)
    assert replica_ranks(spec) == (0, 1, 4, 5)
    forced = Plan(symmetric=True, passive=False, tensor_rank0_p2p=True, replica=None, tensor=None)
    assert forced.approximate and len(notes(spec, forced, steady=None)) == 2


# --------------------------------------------------------------------------------------------------
# verdicts: which reductions are exact for a step, and the automatic path against the full simulation
# --------------------------------------------------------------------------------------------------


def _tiny(layers: int = 4):
    return custom_gpt(layers=layers, hidden=64, heads=4, vocab=128, seq_len=32)


def _verdicts(spec, topo, placement=None, config=None):
    placement = placement or Placement.block(topo, nranks=spec.world_size)
    config = config or SimConfig()
    return (
        replica_verdict(spec, topo, placement, config, RouteCache()),
        tensor_verdict(spec, topo, placement, config, RouteCache()),
    )


SERIAL = dict(dp_overlap=False, bucket_bytes=None)  # gradients reduced after the pipeline, in one buffer


def test_replicas_on_their_own_rails_are_exact_and_overlapped_gradients_are_not():
    # tp 2 x dp 4 fills a DGX H100 per stage: replica d holds GPUs 2d, 2d + 1 of both servers, and its stage
    # transfers use rails 2d and 2d + 1, each NIC to NIC through one leaf (a fixed path, no other replica's)
    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    replica, tensor = _verdicts(spec, topo)
    assert replica == Verdict(True) and tensor.exact and tensor.links
    overlapped = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8)
    assert "dp_overlap" in _verdicts(overlapped, topo)[0].reason
    zero3 = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, zero=3, dp_overlap=False)
    assert "ZeRO-3" in _verdicts(zero3, topo)[0].reason
    events = SimConfig(link_events=(LinkEvent(time_s=0.1, link=0, scale=0.5),))
    assert all("link events" in v.reason for v in _verdicts(spec, topo, config=events))
    ugal = SimConfig(routing="adaptive")
    assert all("load" in v.reason for v in _verdicts(spec, topo, config=ugal))


def test_replicas_whose_transfers_cross_the_spines_are_not_exact():
    # 64 DGX H100 on a fat tree: servers 0 and 1 share edge switches, server 40 is in another pod, so stage
    # transfers 0 -> 40 have one path per aggregation switch (ECMP) and two replicas can collide unequally
    topo = build_system("dgx-h100", nodes=64, topology="fat-tree")
    spec = ParallelismSpec(pp=2, dp=2, global_batch=4, **SERIAL)  # ranks 0, 1: stage 0; 2, 3: stage 1
    placement = Placement.custom(topo, [0, 8, 8 * 40, 8 * 41])
    replica, _ = _verdicts(spec, topo, placement)
    assert not replica.exact and "several paths" in replica.reason


def test_a_failed_nic_link_breaks_the_replicas_likeness():
    # replica 1's stage-0 GPU (GPU 2) loses its NIC cable: its transfers leave through another NIC, over links
    # replica 0 does not have (or shares), so one replica no longer stands for the others
    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    router = Router(topo)
    nic_link = int(router.fixed_path(2, 10, pxn=False)[2])  # GPU -> PCIe switch -> NIC -> leaf: the NIC's cable
    assert "leaf" in topo.link_names[nic_link] or "nic" in topo.link_names[nic_link].lower()
    replica, _ = _verdicts(spec, topo, config=SimConfig(failed_links=frozenset({nic_link})))
    assert not replica.exact


def _pair(spec, topo, model, config=None, **forced):
    options = StepOptions(compute=StepCompute.uniform(layers=model.layers, forward_s=1e-3, backward_s=2e-3))
    options = dataclasses.replace(options, config=config)
    auto = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, **forced))
    full = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, exact=True))
    return auto, full


def _assert_bounded(auto, full):
    # an approximate reduction reports [low, high] (the reduced run, and the same run on the bounding fabric);
    # the full simulation falls inside, up to the round-off of a run that advances every rank on one clock
    assert auto.approximate and auto.step_time_low_s <= auto.step_time_s <= auto.step_time_high_s
    assert auto.step_time_low_s <= full.step_time_s * (1 + 1e-9)
    assert full.step_time_s <= auto.step_time_high_s * (1 + 1e-9)
    assert auto.exposed_comm_low_s <= full.exposed_comm_s + 1e-9 * full.step_time_s
    assert full.exposed_comm_s <= auto.exposed_comm_high_s + 1e-9 * full.step_time_s
    assert any(note.startswith("bound: step time in [") for note in auto.notes)


@pytest.mark.parametrize(
    "system, layers",
    [
        (dict(nodes=2), 4),
        (dict(nodes=2), 7),  # uneven stages: 4 and 3 layers
    ],
)
def test_the_automatic_path_equals_the_full_simulation_where_it_claims_exactness(system, layers):
    topo = build_system("dgx-h100", **system)
    model = _tiny(layers)
    spec = ParallelismSpec(tp=2, pp=2, dp=4 * topo.num_servers // 2, global_batch=16 * topo.num_servers, **SERIAL)
    auto, full = _pair(spec, topo, model)
    assert len(auto.phases) == 1 and "passive" in auto.notes[0]  # one replica's step, the others' members passive
    assert not auto.approximate and all("(exact)" in note for note in auto.notes)
    assert auto.step_time_low_s is None and auto.step_time_high_s is None  # exact: no bound
    # equal up to round-off: the full run advances every replica on one clock (float sums in another order)
    assert auto.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    assert auto.critical_path_s == pytest.approx(full.critical_path_s, rel=1e-12)
    assert auto.exposed_comm_s == pytest.approx(full.exposed_comm_s, rel=1e-6, abs=1e-12)
    # tensor rank 0's transfers stand for both tensor ranks': the links only they cross count twice
    for tier, nbytes in full.breakdown["link_tier_bytes"].items():
        assert auto.breakdown["link_tier_bytes"][tier] == pytest.approx(nbytes, rel=1e-12)
    for group, entry in full.breakdown["group"].items():
        assert (auto.breakdown["group"][group]["count"], auto.breakdown["group"][group]["nbytes"]) == (
            entry["count"],
            entry["nbytes"],
        )


# Llama-3 8B cut to 8 layers, and a GPT with 4096 hidden and 4096 tokens (32 MiB of activations a micro-batch at
# tp 2 cross each stage boundary, fp16 / bf16): with the compute model's times, the reductions and the sends are
# long enough that when a stage's gradient reduction starts (its own end, not the pipeline's) and what it meets
# (sends still in flight) show in the step time
def _llama(layers=8):
    return dataclasses.replace(model_preset("llama3-8b"), layers=layers)


def _gpt_4096():
    return custom_gpt(layers=4, hidden=4096, heads=32, vocab=32000, seq_len=4096)


@pytest.mark.parametrize(
    "model, system, pp, dp, why",
    [
        # a stage (tp 2 x dp 4) fills a server: gradients reduced over its NVLink, stage transfers on the rails,
        # no link shared; the 4 stages end at different times and their reductions start then, not together
        (_llama(), dict(nodes=4), 4, 4, ""),
        (_gpt_4096(), dict(nodes=2), 2, 4, ""),
        # a stage over 2 servers: its gradient ring leaves through the NICs the stage transfers use, and the
        # last stage's asynchronous send is still in flight when its reduction starts (measured: 0.3 % apart)
        (_llama(), dict(nodes=8), 4, 8, "the gradient reduction of stage 0"),
        (_gpt_4096(), dict(nodes=4), 2, 8, "the gradient reduction of stage 0"),
        # 2:1 oversubscribed fat tree, a stage over 4 servers (stage transfers ECMP-hashed)
        (_gpt_4096(), dict(nodes=16, topology="fat-tree", oversubscription=2.0), 2, 16, "the gradient reduction"),
    ],
)
def test_replicas_that_meet_after_the_pipeline_are_exact_only_where_nothing_runs_beside_their_reduction(
    model, system, pp, dp, why
):
    # gradients reduced after the pipeline: the automatic path equals the full simulation where the verdict says
    # exact; where it does not, the step is simulated in full (below FULL_SIMULATION_GPUS), and the reduction
    # forced reports a bound the full step falls in
    topo = build_system("dgx-h100", **system)
    spec = ParallelismSpec(tp=2, pp=pp, dp=dp, global_batch=4 * dp, seq_len=model.seq_len, **SERIAL)
    placement = Placement.block(topo, nranks=spec.world_size)
    verdict = replica_verdict(spec, topo, placement, SimConfig(), RouteCache(), tied_embeddings=model.tied_embeddings)
    assert verdict.exact is not why and why in verdict.reason
    auto = simulate_step(model, spec, system=topo)
    full = simulate_step(model, spec, system=topo, options=StepOptions(exact=True))
    # equal up to round-off: the full run advances every replica on one clock (float sums in another order)
    assert auto.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    assert auto.exposed_comm_s == pytest.approx(full.exposed_comm_s, rel=1e-6, abs=1e-12)
    if not why:
        assert auto.notes[0].startswith("symmetric replicas (exact)") and not auto.approximate
        return
    assert not auto.notes and not auto.approximate  # not exact: simulated in full
    forced = simulate_step(model, spec, system=topo, options=StepOptions(symmetric_replicas=True))
    assert "APPROXIMATE" in forced.notes[0]
    _assert_bounded(forced, full)


def test_a_forced_reduction_on_a_failed_link_is_labelled_approximate():
    topo = build_system("dgx-h100", nodes=2)
    model = _tiny(4)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    nic_link = int(Router(topo).fixed_path(2, 10, pxn=False)[2])
    config = SimConfig(failed_links=frozenset({nic_link}))
    auto, full = _pair(spec, topo, model, config)
    assert len(auto.phases) == 1 and not auto.approximate  # left to the step: simulated in full
    assert auto.step_time_s == full.step_time_s
    forced, _ = _pair(spec, topo, model, config, symmetric_replicas=True)
    assert forced.approximate and any("APPROXIMATE" in note for note in forced.notes)
    _assert_bounded(forced, full)


def test_exact_refuses_a_forced_reduction():
    with pytest.raises(ValueError, match="StepOptions.symmetric_replicas: True"):
        StepOptions(exact=True, symmetric_replicas=True)


def test_past_the_full_simulation_limit_inexact_reductions_are_used_and_labelled_unless_exact():
    # 130 DGX H100 (1,040 GPUs > FULL_SIMULATION_GPUS = 1,024), tp 8 x pp 2 x dp 65: stage 0 on servers 0-64,
    # stage 1 on 65-129, so stage transfers leave their leaves (ECMP): not exact, used as approximations
    topo = build_system("dgx-h100", nodes=130)
    spec = ParallelismSpec(tp=8, pp=2, dp=65, global_batch=130, **SERIAL)
    placement = Placement.block(topo, nranks=spec.world_size)

    def planned(layout=spec, exact=False):
        return plan(
            layout,
            topo,
            placement,
            SimConfig(),
            RouteCache(),
            symmetric_replicas=None,
            tensor_rank0_p2p=None,
            exact=exact,
        )

    auto = planned()
    assert auto.symmetric and auto.tensor_rank0_p2p and auto.approximate and "several paths" in auto.replica.reason
    assert not auto.scales_transfer_links  # not exact: the other tensor ranks' link bytes are not counted
    assert all("APPROXIMATE" in note for note in notes(spec, auto, steady=None))
    full = planned(exact=True)
    assert not (full.symmetric or full.tensor_rank0_p2p or full.approximate)
    # gradients reduced during the backward: one phase, the other replicas' data-parallel members passive
    overlapped = planned(dataclasses.replace(spec, dp_overlap=True))
    assert overlapped.symmetric and overlapped.passive and overlapped.approximate


def _moe(model):
    # every layer a mixture of 8 experts, 2 per token
    return dataclasses.replace(model, experts=8, top_k=2, expert_ffn_hidden=model.ffn_hidden)


@pytest.mark.parametrize(
    "layout, exact",
    [
        (dict(tp=8, dp=4), True),  # tensor groups fill a server, no stage transfers: the pipeline stays inside
        (dict(tp=8, dp=4, zero=3), True),  # FSDP's parameter gathers run between replicas, on the NICs only
        (dict(tp=2, pp=2, dp=8), False),  # gradient buckets and stage transfers share the GPUs' PCIe links
        (dict(tp=2, dp=16, ep=4, sequence_parallel=True), False),  # expert all-to-alls span 4 replicas
        # MoE parallel folding, etp 1: each all-to-all group of 8 crosses the tensor ranks of 4 replicas
        (dict(tp=2, dp=16, ep=8, etp=1, sequence_parallel=True), False),
    ],
)
def test_overlapped_traffic_between_replicas_runs_with_passive_members(layout, exact):
    # one replica's whole step, the other replicas' members of its data- and expert-parallel groups passive:
    # where the verdict is exact the step is the full simulation's; forced where it is not, it is labelled so
    topo = build_system("dgx-h100", nodes=4)
    model = custom_gpt(layers=4, hidden=128, heads=8, vocab=128, seq_len=32)
    if "ep" in layout:
        model = _moe(model)
    spec = ParallelismSpec(global_batch=2 * layout["dp"], bucket_bytes=4096, **layout)
    forced = {} if exact else {"symmetric_replicas": True}
    auto, full = _pair(spec, topo, model, **forced)
    assert len(auto.phases) == 1 and auto.notes and "passive" in auto.notes[0]
    assert auto.approximate is not exact
    if exact:
        assert auto.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
        assert auto.exposed_comm_s == pytest.approx(full.exposed_comm_s, rel=1e-6, abs=1e-12)
    else:  # with ep, the expert groups of replicas 4-15 are stood for: their all-to-alls are in the bound
        _assert_bounded(auto, full)
    for group, entry in full.breakdown["group"].items():  # counts and bytes hold either way
        assert (auto.breakdown["group"][group]["count"], auto.breakdown["group"][group]["nbytes"]) == (
            entry["count"],
            entry["nbytes"],
        )
    for tier, nbytes in full.breakdown["link_tier_bytes"].items():
        assert auto.breakdown["link_tier_bytes"][tier] == pytest.approx(nbytes, rel=1e-9)


def test_expert_groups_of_other_replicas_keep_a_replica_from_standing_exactly_for_all():
    # tp 8 x dp 4 x ep 2 on 4 DGX H100: expert groups pair replicas 0-1 and 2-3. Simulating replica 0 keeps
    # the groups of replicas 0 and 1 only; those of 2 and 3 are stood for, and their traffic could meet the
    # simulated one on any fabric link, so the verdict is not exact
    topo = build_system("dgx-h100", nodes=4)
    spec = ParallelismSpec(tp=8, dp=4, ep=2, sequence_parallel=True, global_batch=8)
    placement = Placement.block(topo, nranks=spec.world_size)
    verdict = replica_verdict(spec, topo, placement, SimConfig(), RouteCache())
    assert not verdict.exact and "stood for" in verdict.reason
    # cp 2 x dp 3 x ep 3: expert groups of 3 ranks cover replica 0 and half of replica 1, or the other half and
    # replica 2: one replica stands for no other, so symmetric replicas are refused even when forced
    uneven = ParallelismSpec(cp=2, dp=3, ep=3, global_batch=6, seq_len=64)
    assert uneven_experts(uneven)
    model = dataclasses.replace(_tiny(4), experts=6, top_k=2, expert_ffn_hidden=256)
    with pytest.raises(ValueError, match="symmetric_replicas: True is not allowed here"):
        simulate_step(
            model, uneven, system=build_system("dgx-h100", nodes=1), options=StepOptions(symmetric_replicas=True)
        )


# --------------------------------------------------------------------------------------------------
# context ranks: context rank 0 stands for the c context ranks, the other members of its rings passive
# --------------------------------------------------------------------------------------------------


def _cp_model():
    # 8 heads for t = 8; seq_len 64 over c = 2: 32 tokens a context rank
    return custom_gpt(layers=4, hidden=128, heads=8, vocab=128, seq_len=64)


def _assert_same_step(auto, full):
    # equal up to round-off: the full run advances every rank on one clock (float sums in another order)
    assert auto.step_time_s == pytest.approx(full.step_time_s, rel=1e-9)
    assert auto.critical_path_s == pytest.approx(full.critical_path_s, rel=1e-12)
    assert auto.exposed_comm_s == pytest.approx(full.exposed_comm_s, rel=1e-9, abs=1e-12)
    assert auto.breakdown["group"].keys() == full.breakdown["group"].keys()
    for group, entry in full.breakdown["group"].items():
        mine = auto.breakdown["group"][group]
        assert (mine["count"], mine["nbytes"]) == (entry["count"], entry["nbytes"])
        assert mine["time_s"] == pytest.approx(entry["time_s"], rel=1e-9, abs=1e-12)
        assert mine["exposed_s"] == pytest.approx(entry["exposed_s"], rel=1e-9, abs=1e-12)
    for tier, nbytes in full.breakdown["link_tier_bytes"].items():
        assert auto.breakdown["link_tier_bytes"][tier] == pytest.approx(nbytes, rel=1e-12)


def test_context_ranks_across_servers_stand_exactly_for_each_other():
    # tp 8 x cp 2 x dp 2 on 4 DGX H100 (order tp-cp-dp: server 2d + j holds context rank j of replica d): each
    # ring pairs GPU k of two servers through rail k's leaf (a fixed path on the NICs), the tensor groups stay
    # on NVLink, so context rank 0 of replica 0 (8 ranks) stands for the 32 with its rings' other members
    # passive, and tensor rank 0's ring for the 8 of its server
    topo = build_system("dgx-h100", nodes=4)
    spec = ParallelismSpec(tp=8, cp=2, dp=2, global_batch=8, **SERIAL)
    placement = Placement.block(topo, nranks=spec.world_size)
    used = plan(
        spec, topo, placement, SimConfig(), RouteCache(), symmetric_replicas=None, tensor_rank0_p2p=None, exact=False
    )
    assert used.symmetric and used.context and used.passive and used.tensor_rank0_p2p and not used.approximate
    auto, full = _pair(spec, topo, _cp_model())
    assert len(auto.phases) == 1 and len(auto.phases[0].training.workload.programs[0]) > 0
    assert [note.split(" (")[0] for note in auto.notes] == [
        "symmetric replicas",
        "context ranks",
        "representative transfers",
    ]
    assert all("(exact)" in note for note in auto.notes) and not auto.approximate
    # 8 programs (context rank 0 of replica 0) of the 32 ranks; the other members of its groups passive
    workload = auto.phases[0].training.workload
    assert workload.nranks - len(workload.passive) == 8
    _assert_same_step(auto, full)


def test_context_ranks_on_their_own_servers_with_stages_inside_them():
    # tp 2 x cp 2 x pp 2 x dp 2, placed so that context rank c of replica d sits on server 2c + d: rank
    # (t, c, d, p) on GPU 16c + 8d + 2p + t. Rings and gradient reductions cross the rails (GPU g of one server
    # to GPU g of another), stage transfers and tensor groups stay on NVLink: context ranks and replicas stand
    # exactly for each other (no send in flight shares a link with a reduction after the pipeline); tensor ranks
    # do not (stage transfers share the GPUs' NVLink ports with tensor-parallel traffic)
    topo = build_system("dgx-h100", nodes=4)
    spec = ParallelismSpec(tp=2, cp=2, pp=2, dp=2, global_batch=8, **SERIAL)
    gpus = []
    for r in range(spec.world_size):
        x = spec.coords(r)
        gpus.append(16 * x.cp + 8 * x.dp + 2 * x.pp + x.tp)
    placement = Placement.custom(topo, gpus)
    used = plan(
        spec, topo, placement, SimConfig(), RouteCache(), symmetric_replicas=None, tensor_rank0_p2p=None, exact=False
    )
    assert used.symmetric and used.context and used.context_verdict.exact and not used.tensor_rank0_p2p
    assert "tensor-parallel traffic" in used.tensor.reason
    model = _cp_model()
    options = StepOptions(
        compute=StepCompute.uniform(layers=model.layers, forward_s=1e-3, backward_s=2e-3), placement=placement
    )
    auto = simulate_step(model, spec, system=topo, options=options)
    full = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, exact=True))
    assert not auto.approximate and len(auto.notes) == 2
    _assert_same_step(auto, full)


def test_context_rings_through_the_ports_of_tensor_groups_are_not_exact():
    # tp 2 x cp 2 x pp 2 x dp 2 in Megatron order on 2 DGX H100: a ring pairs GPUs 0 and 2 over NVLink, whose
    # ports GPU 0's tensor group (GPUs 0, 1) uses too: context rank 1's tensor traffic, dropped by the
    # reduction, would meet the ring. Left to the step on 16 GPUs, it is not used; forced, it is labelled
    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, cp=2, pp=2, dp=2, global_batch=8, **SERIAL)
    placement = Placement.block(topo, nranks=spec.world_size)
    verdict = plan(
        spec, topo, placement, SimConfig(), RouteCache(), symmetric_replicas=None, tensor_rank0_p2p=None, exact=False
    ).context_verdict
    assert not verdict.exact and "context rings share link" in verdict.reason
    auto, full = _pair(spec, topo, _cp_model())
    assert not any(note.startswith("context ranks") for note in auto.notes)
    forced, _ = _pair(spec, topo, _cp_model(), symmetric_context=True)
    assert forced.approximate and any(note.startswith("context ranks (APPROXIMATE") for note in forced.notes)
    _assert_bounded(forced, full)
    for group, entry in full.breakdown["group"].items():  # counts and bytes hold either way
        assert (forced.breakdown["group"][group]["count"], forced.breakdown["group"][group]["nbytes"]) == (
            entry["count"],
            entry["nbytes"],
        )


# --------------------------------------------------------------------------------------------------
# the bound of an approximate reduction: the full simulation falls inside [low, high]
# --------------------------------------------------------------------------------------------------


def _across_pods(topo, spec):
    # replica d's stage 0 on GPU 0 of server 2d, its stage 1 on GPU 0 of server 40 + 2d (another pod of the 64-node
    # fat tree): every stage transfer has one path per aggregation switch (ECMP)
    gpus = [
        8 * (40 + 2 * spec.coords(r).dp if spec.coords(r).pp else 2 * spec.coords(r).dp) for r in range(spec.world_size)
    ]
    return Placement.custom(topo, gpus)


def _degraded(topo, link, factor):
    capacity = topo.link_capacity_bytes_per_s.copy()
    capacity[link] *= factor
    capacity.setflags(write=False)
    return dataclasses.replace(topo, link_capacity_bytes_per_s=capacity)


def _bounded_cases():
    fat = build_system("dgx-h100", nodes=64, topology="fat-tree")
    oversubscribed = build_system("dgx-h100", nodes=64, topology="fat-tree", oversubscription=4.0)
    two = build_system("dgx-h100", nodes=2)
    nic_link = int(Router(two).fixed_path(2, 10, pxn=False)[2])  # replica 1's stage-0 NIC cable (GPU 2)
    dragonfly = build_system("dgx-h100", nodes=8, topology="dragonfly")
    serial = ParallelismSpec(pp=2, dp=4, global_batch=32, **SERIAL)
    rails = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=32, **SERIAL)
    return {
        "fat-tree ECMP": (fat, serial, 4, _across_pods, None),
        "oversubscribed fat-tree ECMP, overlapped gradients": (
            oversubscribed,
            ParallelismSpec(pp=2, dp=4, global_batch=32, bucket_bytes=1 << 22),
            4,
            _across_pods,
            None,
        ),
        "uneven stages (4 and 3 layers)": (fat, serial, 7, _across_pods, None),
        "failed NIC cable": (two, rails, 4, None, SimConfig(failed_links=frozenset({nic_link}))),
        "degraded NIC cable": (_degraded(two, nic_link, 0.25), rails, 4, None, None),
        "dragonfly": (dragonfly, ParallelismSpec(tp=8, pp=2, dp=4, global_batch=32, **SERIAL), 4, None, None),
        "dragonfly, overlapped gradients": (
            dragonfly,
            ParallelismSpec(tp=8, pp=2, dp=4, global_batch=32, bucket_bytes=1 << 22),
            4,
            None,
            None,
        ),
    }


@pytest.mark.parametrize("case", list(_bounded_cases()))
def test_the_full_simulation_falls_inside_the_bound_of_a_forced_replica_reduction(case):
    # 32 MiB activations a micro-batch (seq 4096 x hidden 4096 x 2 bytes) against 1 + 2 ms of compute a layer: the
    # network matters, and where replicas share links or stand for unlike ones (a failed or slower NIC cable, a
    # dragonfly's longer paths) the reduced step differs from the full one
    topo, spec, layers, place, config = _bounded_cases()[case]
    model = custom_gpt(layers=layers, hidden=4096, heads=8, vocab=128, seq_len=4096)
    options = StepOptions(
        compute=StepCompute.uniform(layers=layers, forward_s=1e-3, backward_s=2e-3),
        placement=place(topo, spec) if place else None,
        config=config,
    )
    auto = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, symmetric_replicas=True))
    full = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, exact=True))
    _assert_bounded(auto, full)


def _experts_across_servers(topo, spec):
    # rank r alone on GPU 0 of a server: replica d's stage 0 on server 2d, its stage 1 on server 40 + 2d (another pod
    # of the 64-node fat tree), so every expert all-to-all, expert gradient reduction and stage transfer crosses the
    # NICs, and those between servers of different leaves have one path per aggregation (and core) switch (ECMP)
    servers = [40 * spec.coords(r).pp + 2 * spec.coords(r).dp for r in range(spec.world_size)]
    return Placement.custom(topo, [8 * server for server in servers])


@pytest.mark.parametrize("oversubscription", [1.0, 4.0])
def test_the_full_simulation_falls_inside_the_bound_of_replicas_standing_for_other_expert_groups(oversubscription):
    # tp 1, pp 2, dp 8, ep 4: each stage's expert groups are replicas 0-3 and 4-7. Replica 0 simulated, the
    # all-to-alls of replicas 4-7's groups (and the expert gradient reductions of the groups without a member in
    # replica 0) are missing traffic: the bound counts them on every link they may cross, each simulated pair no
    # faster than the pair of the missing group it stands with. 4 MiB dispatched a rank (seq 4096 x top-2 x hidden
    # 256 x 2 bytes) against 1 + 2 ms of compute a layer: the all-to-alls matter (measured: 0.021767 s reduced,
    # 0.021813 s in full, bound [0.021767, 0.031085] s; 4:1 oversubscribed 0.021767, 0.021771, [0.021767, 0.037921])
    topo = build_system("dgx-h100", nodes=64, topology="fat-tree", oversubscription=oversubscription)
    model = _moe(custom_gpt(layers=4, hidden=256, heads=8, vocab=128, seq_len=4096))
    spec = ParallelismSpec(pp=2, dp=8, ep=4, global_batch=16, bucket_bytes=1 << 20)
    options = StepOptions(
        compute=StepCompute.uniform(layers=model.layers, forward_s=1e-3, backward_s=2e-3),
        placement=_experts_across_servers(topo, spec),
    )
    auto = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, symmetric_replicas=True))
    full = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, exact=True))
    assert "the ep groups of other replicas are stood for" in auto.notes[0]
    _assert_bounded(auto, full)
    assert auto.step_time_low_s < full.step_time_s  # the missing all-to-alls slow the full step


def test_no_bound_where_flows_couple_beyond_their_links_or_paths_are_not_enumerated():
    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    placement = Placement.block(topo, nranks=spec.world_size)
    forced = Plan(symmetric=True, passive=False, tensor_rank0_p2p=False, replica=None, tensor=None)
    for config, why in (
        (SimConfig(routing="adaptive"), "load of every flow"),
        (SimConfig(routing="valiant"), "not enumerated"),
    ):
        fabric, reason = bounding_fabric(spec, topo, placement, config, RouteCache(), forced)
        assert fabric is None and why in reason
    assert bound_note(None, None, 0.0, reason).startswith("no bound on the approximation: routing 'valiant'")
    # replicas on their own rails share nothing: on the bounding fabric each of the replica's paths keeps its
    # bottleneck (links beside it may be lowered to it) and its latency
    fabric, reason = bounding_fabric(spec, topo, placement, SimConfig(), RouteCache(), forced)
    replica = [placement.rank_gpu[r] for r in replica_ranks(spec)]
    assert reason == ""
    for path in (Router(topo).path(a, b) for a in replica for b in replica if a != b):
        assert fabric.link_capacity_bytes_per_s[path].min() == topo.link_capacity_bytes_per_s[path].min()
        assert fabric.link_latency_s[path].sum() == topo.link_latency_s[path].sum()


def test_the_bound_reaches_every_output_of_a_step():
    # the failed-NIC step with replicas forced: its bound in the table, the JSON (as_dict), the summary frame, and
    # through a pickle (a process pool returns results so)
    import pickle

    from simulator.cli.step import format_step

    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    nic_link = int(Router(topo).fixed_path(2, 10, pxn=False)[2])
    forced, _ = _pair(spec, topo, _tiny(4), SimConfig(failed_links=frozenset({nic_link})), symmetric_replicas=True)
    low, high = forced.step_time_low_s, forced.step_time_high_s
    assert f"step time in [{low:.4f}, {high:.4f}] s" in format_step(forced, topo)
    data = forced.as_dict()
    assert (data["step_time_low_s"], data["step_time_high_s"]) == (low, high)
    assert data["exposed_comm_high_s"] == forced.exposed_comm_high_s == max(high - forced.critical_path_s, 0.0)
    row = forced.frame("summary").iloc[0]
    assert (row["step_time_low_s"], row["exposed_comm_low_s"]) == (low, forced.exposed_comm_low_s)
    back = pickle.loads(pickle.dumps(forced))
    assert (back.step_time_low_s, back.step_time_high_s, back.notes) == (low, high, forced.notes)


def test_the_bound_run_beside_the_reduced_one_gives_the_same_numbers_as_one_after_the_other(monkeypatch):
    # StepOptions.bound_process: the high side runs in a forked process (forced here, whatever threads other tests
    # left running); the result (every field, every note) is the serial one, bit for bit
    from simulator.studies import training

    forked = []
    monkeypatch.setattr(training, "_beside", lambda work: forked.append(1) or training._Beside(work))
    topo, spec, layers, _, _ = _bounded_cases()["dragonfly, overlapped gradients"]
    model = custom_gpt(layers=layers, hidden=4096, heads=8, vocab=128, seq_len=4096)
    options = StepOptions(
        compute=StepCompute.uniform(layers=layers, forward_s=1e-3, backward_s=2e-3), symmetric_replicas=True
    )
    beside = simulate_step(model, spec, system=topo, options=options)
    serial = simulate_step(model, spec, system=topo, options=dataclasses.replace(options, bound_process=False))
    assert forked == [1] and beside.step_time_high_s is not None and beside.step_time_high_s > beside.step_time_low_s
    assert beside.as_dict() == serial.as_dict()


def test_the_bound_child_returns_its_value_and_is_stopped_when_the_step_fails():
    import threading

    from simulator.studies.training import _Beside, _beside

    child = _Beside(lambda: 2.5)
    assert child.result() == 2.5
    slow = _Beside(lambda: time.sleep(60) or 1.0)
    slow.cancel()  # what simulate_step does when the reduced run raises or is interrupted
    assert not slow._process.is_alive()
    # never forked beside another thread (a lock it holds would stay held in the child): one after the other
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert _beside(lambda: 1.0) is None
    finally:
        stop.set()
        other.join()


def test_a_step_without_its_bound_keeps_the_reduced_run_and_says_so():
    # the failed-NIC step with replicas forced, once with its bound and once without (StepOptions.bound False)
    topo = build_system("dgx-h100", nodes=2)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, **SERIAL)
    nic_link = int(Router(topo).fixed_path(2, 10, pxn=False)[2])
    config = SimConfig(failed_links=frozenset({nic_link}))
    bounded, _ = _pair(spec, topo, _tiny(4), config, symmetric_replicas=True)
    bare, _ = _pair(spec, topo, _tiny(4), config, symmetric_replicas=True, bound=False)
    assert bare.approximate and bare.step_time_s == bounded.step_time_s == bounded.step_time_low_s
    assert bare.step_time_low_s is None and bare.step_time_high_s is None
    assert any("not computed (StepOptions.bound False)" in note for note in bare.notes)
