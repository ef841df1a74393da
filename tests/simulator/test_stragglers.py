"""Stragglers and jitter (simulator.studies.stragglers): a slowed GPU in a data-parallel ring stretches the step as
derived, the critical path names it, the draws follow their documented streams, off is today's step, and bad
input gives one line."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.collectives.tuner import CollectivePolicy
from simulator.config import LinkEvent, SimConfig
from simulator.studies.stragglers import ComputeNoise, Stragglers, critical_path, simulate_steps
from simulator.studies.training import StepOptions, simulate_step
from topologies.presets import build_system
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt
from workloads.tasks import ComputeTask
from workloads.training import StepCompute, resolve, training_step

# 2 layers; every layer 1 ms forward and 2 ms backward per micro-batch, no embedding, logits or optimizer time
MODEL = custom_gpt(layers=2, hidden=512, heads=8, seq_len=256, vocab=1024)
COMPUTE = StepCompute.uniform(layers=2, forward_s=1e-3, backward_s=2e-3)
# a data-parallel ring of n = 8 ranks: 32 sequences, micro-batch 1, so m = 32 / 8 = 4 micro-batches per rank and
# C = m x layers x (forward + backward) = 4 x 2 x 3 ms = 24 ms of compute on every rank
N, C_S = 8, 4 * 2 * 3e-3
RING = SimConfig(collectives=CollectivePolicy(algorithm="ring"))
SLOW, S = 3, 1.3  # GPU 3's compute 1.3 x longer


@pytest.fixture(scope="module")
def dgx():
    return build_system("dgx-h100", nodes=1)


def layout(overlap: bool) -> ParallelismSpec:
    return ParallelismSpec(dp=N, global_batch=32, dp_overlap=overlap, bucket_bytes=2 * 1024 * 1024)


def options(**kw) -> StepOptions:
    return StepOptions(compute=COMPUTE, config=RING, **kw)


@pytest.mark.parametrize("overlap", [False, True])
def test_one_slowed_gpu_stretches_the_ring_step_as_derived_and_is_named(dgx, overlap):
    slowed = simulate_steps(
        MODEL, layout(overlap), system=dgx, options=options(), stragglers=Stragglers(factors=((SLOW, S),))
    )
    base = simulate_steps(MODEL, layout(overlap), system=dgx, options=options())
    assert base.step_time_s[0] - C_S > 0  # the reduction takes time
    # every gradient bucket's ring starts when its last member, GPU 3, has produced it. Without overlap all
    # buckets wait for the backward's end: step = s C + A, A the buckets' times back to back. With overlap the
    # buckets of the last micro-batch's backward start as GPU 3 produces them; each ends before GPU 3's next is
    # ready (41 us rings against 2.6 ms layers), so only those produced by its last task are exposed: step = s C +
    # the times of the collectives that start once GPU 3's compute (s C) is done.
    (phase,) = slowed.first.phases
    after = [r.time_s for r in phase.sim.collectives if r.start_s >= S * C_S * (1 - 1e-12)]
    if not overlap:
        assert len(after) == len(phase.sim.collectives)  # all of them
    assert slowed.step_time_s[0] == pytest.approx(S * C_S + math.fsum(after), rel=1e-9)
    # the exposed reduction is the same as without the straggler: the slowed GPU stretches compute alone, so the
    # step grows by (s - 1) C exactly
    assert slowed.step_time_s[0] - S * C_S == pytest.approx(base.step_time_s[0] - C_S, rel=1e-9)
    assert slowed.step_time_s[0] - base.step_time_s[0] == pytest.approx((S - 1) * C_S, rel=1e-9)
    # the critical path: GPU 3's whole compute (s C) and the buckets it released
    top = slowed.ranks[0]
    assert top["rank"] == SLOW and top["critical_s"] == pytest.approx(S * C_S, rel=1e-12) and top["released"] >= 1
    assert top["share"] == pytest.approx(S * C_S / slowed.step_time_s[0], rel=1e-12)
    assert all(row["critical_s"] == 0 for row in slowed.ranks[1:])
    # the ring's links are alike: its bottleneck is one of GPU 3's group's NVLink ports, the time of the
    # collectives on the path
    (link,) = slowed.links
    assert link["collectives"] == len(after) and link["critical_s"] == pytest.approx(math.fsum(after), rel=1e-9)
    assert "nvswitch" in link["name"]
    assert any("symmetric replicas" in note for note in slowed.notes)


def test_spread_and_jitter_delay_the_ring_by_the_slowest_rank(dgx):
    # gradients reduced after the backward, pp = tp = 1: each rank's compute tasks run back to back on its compute
    # stream, so rank r ends its compute at f_r C + sum of its J (module docstring), the buckets start when the
    # slowest has, and the reduction A is the one measured without noise (the buckets' rings meet nothing else)
    s = Stragglers(sigma=0.05, jitter_s=50e-6)
    run = simulate_steps(MODEL, layout(False), system=dgx, options=options(), stragglers=s, seed=11)
    base = simulate_steps(MODEL, layout(False), system=dgx, options=options())
    reduction = base.step_time_s[0] - C_S
    f = s.factors_of(N, step=0, seed=11)
    running = sum(
        1
        for t in resolve(training_step(MODEL, layout(False)), COMPUTE).workload.programs[0]
        if isinstance(t, ComputeTask) and t.duration_s
    )
    # a forward and a backward per layer and micro-batch (the embedding, logits and optimizer tasks take 0 s here)
    assert running == 4 * 2 * 2
    ends = [
        f[r] * C_S + float(np.random.default_rng([11, 0, 1, r]).exponential(50e-6, running).sum()) for r in range(N)
    ]
    assert run.step_time_s[0] == pytest.approx(max(ends) + reduction, rel=1e-9)
    assert run.ranks[0]["rank"] == int(np.argmax(ends))
    assert run.ranks[0]["critical_s"] == pytest.approx(max(ends), rel=1e-9)


def test_a_degraded_link_is_named_on_the_critical_path(dgx):
    # GPU 5's NVLink port into the switch at a quarter of its capacity from the start (SimConfig.link_events): the
    # ring's bytes are alike on every port, so that port takes 4 x longer than any other at line rate and is the
    # bottleneck of every bucket; the step is longer than with the port whole
    port = dgx.link_names.index("s0.gpu5->s0.nvswitch")
    degraded = dataclasses.replace(RING, link_events=(LinkEvent(time_s=0.0, link=port, scale=0.25),))
    run = simulate_steps(MODEL, layout(False), system=dgx, options=StepOptions(compute=COMPUTE, config=degraded))
    base = simulate_steps(MODEL, layout(False), system=dgx, options=options())
    (phase,) = run.first.phases
    assert [row["name"] for row in run.links] == ["s0.gpu5->s0.nvswitch"]
    assert run.links[0]["collectives"] == len(phase.sim.collectives)
    assert run.step_time_s[0] > base.step_time_s[0]


def test_the_critical_path_adds_up_to_the_step(dgx):
    # with one straggler the path is its compute then the ring's buckets, with no idle gap: the parts sum to the step
    slowed = simulate_steps(
        MODEL, layout(False), system=dgx, options=options(), stragglers=Stragglers(factors=((SLOW, S),))
    )
    (phase,) = slowed.first.phases
    parts = critical_path(phase)
    assert math.fsum(p.time_s for p in parts) == pytest.approx(slowed.step_time_s[0], rel=1e-12)
    assert {p.rank for p in parts if p.collective < 0 and p.time_s > 0} == {SLOW}


def test_off_is_todays_step_to_the_bit(dgx):
    for overlap in (False, True):
        today = simulate_step(MODEL, layout(overlap), system=dgx, options=options())
        run = simulate_steps(MODEL, layout(overlap), system=dgx, options=options(), steps=3)
        assert run.first.as_dict() == today.as_dict()
        assert run.step_time_s == (today.step_time_s,) * 3 and run.p50_s == run.p99_s == today.step_time_s
        assert run.notes[0] == "no straggler or jitter: the 3 steps are alike, simulated once"
    # the default step on a preset name, with its own kernel times and reductions
    layout2 = ParallelismSpec(tp=2, dp=4, global_batch=8, seq_len=1024)
    today = simulate_step(MODEL, layout2, options=StepOptions(granularity="chunk"))
    run = simulate_steps(MODEL, layout2, options=StepOptions(granularity="chunk"))
    assert run.first.as_dict() == today.as_dict()


def test_the_dropped_reduction_was_exact_here(dgx):
    # equivalence: symmetric replicas are exact on this layout (the default run uses them, not approximate); the
    # straggler run simulates every rank; with every factor 1 it must find the reduced step's time
    base = simulate_step(MODEL, layout(True), system=dgx, options=options())
    assert any(note.startswith("symmetric replicas") for note in base.notes) and not base.approximate
    ones = Stragglers(factors=tuple((r, 1.0) for r in range(N)))
    full = simulate_steps(MODEL, layout(True), system=dgx, options=options(), stragglers=ones)
    assert full.step_time_s[0] == pytest.approx(base.step_time_s, rel=1e-9)
    assert full.first.exposed_comm_s == pytest.approx(base.exposed_comm_s, rel=1e-9)
    assert full.notes[0].startswith("reductions not used: symmetric replicas")


def test_draws_follow_their_streams_and_are_deterministic(dgx):
    p = layout(False)
    training = resolve(training_step(MODEL, p), COMPUTE)
    s = Stragglers(factors=((5, 2.0),), sigma=0.1, jitter_s=3e-6)
    out = ComputeNoise(stragglers=s, step=2, seed=7)(training)
    # f_r = s_r exp(sigma Z_r), Z from default_rng([seed, step, 0]); J from default_rng([seed, step, 1, rank])
    f = np.exp(0.1 * np.random.default_rng([7, 2, 0]).standard_normal(N))
    f[5] *= 2.0
    for r in (0, 5):
        before = [t.duration_s for t in training.workload.programs[r] if isinstance(t, ComputeTask) and t.duration_s]
        after = [t.duration_s for t in out.workload.programs[r] if isinstance(t, ComputeTask) and t.duration_s]
        jitter = np.random.default_rng([7, 2, 1, r]).exponential(3e-6, len(before))
        assert after == [d * f[r] + float(j) for d, j in zip(before, jitter)]
    runs = [
        simulate_steps(MODEL, p, system=dgx, options=options(), steps=3, stragglers=s, seed=seed) for seed in (7, 7, 8)
    ]
    assert runs[0].step_time_s == runs[1].step_time_s and runs[0].ranks == runs[1].ranks
    assert runs[0].step_time_s != runs[2].step_time_s
    times = np.array(runs[0].step_time_s)
    assert runs[0].p50_s == float(np.median(times)) and runs[0].min_s <= runs[0].p50_s <= runs[0].p99_s
    assert runs[0].p99_s <= runs[0].max_s == float(times.max())


def test_fixed_factors_keep_the_other_ranks_programs_shared():
    training = resolve(training_step(MODEL, layout(False)), COMPUTE)
    out = ComputeNoise(stragglers=Stragglers(factors=((SLOW, S),)))(training)
    programs = out.workload.programs
    assert all(programs[r] is training.workload.programs[r] for r in range(N) if r != SLOW)
    assert programs[SLOW] is not training.workload.programs[SLOW]


def test_result_frames_and_pickle(dgx):
    run = simulate_steps(
        MODEL, layout(False), system=dgx, options=options(), steps=2, stragglers=Stragglers(factors=((SLOW, S),))
    )
    assert list(run.frame("steps")["step_time_s"]) == list(run.step_time_s)
    assert run.frame("ranks")["rank"].iloc[0] == SLOW
    assert run.frame("links")["collectives"].sum() == sum(row["collectives"] for row in run.links)
    assert run.frame("summary")["p50_s"].iloc[0] == run.p50_s
    assert set(run.frame("notes")["kind"]) <= {"note", "warning"}
    back = pickle.loads(pickle.dumps(run))
    assert back.as_dict() == run.as_dict() and back.first.step_time_s == run.first.step_time_s
    with pytest.raises(ValueError, match="view"):
        run.frame("nope")


# ---- the command line ----------------------------------------------------------------------------------------

SMALL = ("step", "--model", "gpt", "--layers", "2", "--hidden", "512", "--heads", "8", "--vocab", "1024")
SMALL += ("--nodes", "1", "--tp", "2", "--pp", "1", "--global-batch", "8", "--seq-len", "256", "--quiet")


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_one_step_without_straggler_is_todays_output(capsys):
    for fmt in ("table", "json", "csv"):
        today = cli(capsys, *SMALL, "--format", fmt)
        assert cli(capsys, *SMALL, "--format", fmt, "--steps", "1") == today
        assert cli(capsys, *SMALL, "--format", fmt, "--jitter-us", "0") == today


def test_cli_steps_with_a_straggler(capsys):
    code, out, err = cli(capsys, *SMALL, "--steps", "2", "--straggler", "rank=5:1.5", "--straggler", "lognormal:0.02")
    assert code == 0, err
    assert "step time p50" in out and "step time p99" in out and "GPU 5 x 1.5" in out
    first_rank = out.split("released\n", 1)[1].split()[0]
    assert first_rank == "5"  # half again as slow as a 2 % spread: GPU 5 is on the critical path most
    code, text, err = cli(capsys, *SMALL, "--steps", "2", "--straggler", "rank=5:1.5", "--format", "json")
    import json

    data = json.loads(text)
    assert code == 0 and len(data["step_time_s"]) == 2 and data["critical_ranks"][0]["rank"] == 5
    code, text, err = cli(capsys, *SMALL, "--steps", "2", "--straggler", "rank=5:1.5", "--format", "csv")
    assert code == 0 and text.startswith("section,name,field,value\n") and "\nrank,5,critical_s," in text


@pytest.mark.parametrize(
    "extra, field",
    [
        (("--straggler", "rank=3:0"), "straggler: 'rank=3:0' is not allowed"),
        (("--straggler", "rank=3:-1.2"), "straggler: 'rank=3:-1.2' is not allowed"),
        (("--straggler", "rank=16:1.2"), "straggler: 'rank=16' is not allowed; expected a rank from 0 to 7"),
        (("--straggler", "slow"), "straggler: 'slow' is not allowed; expected rank=R:S"),
        (("--straggler", "lognormal:-0.1"), "straggler: 'lognormal:-0.1' is not allowed"),
        (("--straggler", "rank=1:1.1", "--straggler", "rank=1:1.2"), "straggler: 'rank=1 twice' is not allowed"),
        (("--steps", "0"), "steps: '0' is not allowed; expected an integer >= 1"),
        (("--jitter-us", "-1"), "jitter-us: '-1' is not allowed"),
        (("--steps", "2", "--trace", "t.json"), "trace: 't.json' is not allowed; expected no --trace with --steps"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, extra, field):
    code, out, err = cli(capsys, *SMALL, *extra)
    # an option's own type check is prefixed by argparse with "argument --NAME: "
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("fabricsim: error: "), err
    message = err.removeprefix("fabricsim: error: ")
    if message.startswith("argument --"):
        message = message.split(": ", 1)[1]
    assert message.startswith(field), err


def test_python_bad_input(dgx):
    with pytest.raises(ValueError, match=r"^Stragglers.factors factor: -1.0 is not allowed"):
        Stragglers(factors=((1, -1.0),))
    with pytest.raises(ValueError, match=r"^Stragglers.sigma: -0.1 is not allowed"):
        Stragglers(sigma=-0.1)
    with pytest.raises(ValueError, match=r"^steps: 0 is not allowed; expected an integer >= 1"):
        simulate_steps(MODEL, layout(False), system=dgx, steps=0)
    with pytest.raises(ValueError, match=r"^straggler: 'rank=8' is not allowed; expected a rank from 0 to 7"):
        simulate_steps(MODEL, layout(False), system=dgx, stragglers=Stragglers(factors=((8, 1.5),)))
    forced = dataclasses.replace(options(), symmetric_replicas=True)
    with pytest.raises(ValueError, match=r"^StepOptions.symmetric_replicas: True is not allowed"):
        simulate_steps(MODEL, layout(False), system=dgx, options=forced, stragglers=Stragglers(sigma=0.1))
    with pytest.raises(ValueError, match=r"^StepOptions.exact: False is not allowed; expected True with perturb"):
        StepOptions(perturb=ComputeNoise(stragglers=Stragglers(sigma=0.1)))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=12),
            st.builds(
                lambda r, s: f"rank={r}:{s}", st.sampled_from(["0", "-1", "x", "3", "9" * 30]), st.text(max_size=6)
            ),
            st.builds(lambda s: f"lognormal:{s}", st.sampled_from(["0", "0.05", "-1", "nan", "inf", "", "1e308"])),
        ),
        max_size=3,
    )
)
def test_any_spec_parses_or_names_the_field(specs):
    # any text: a Stragglers, or one ValueError naming the field
    try:
        s = Stragglers.parse(specs)
    except ValueError as exc:
        assert str(exc).startswith("straggler: ") and "\n" not in str(exc)
    else:
        assert all(f > 0 and math.isfinite(f) for _, f in s.factors) and math.isfinite(s.sigma) and s.sigma >= 0


def test_steps_time_the_kernels_with_the_options_attention_kernel(dgx):
    """simulate_steps times the kernels once with the options' attention kernel, then replays those times: each
    kernel gives the step simulate_step gives with it (the kernel is spent on the times, not refused beside them)."""
    p = layout(False)
    times = {}
    for kernel in ("fa2", "cudnn"):
        o = StepOptions(config=RING, attention_kernel=kernel)
        times[kernel] = simulate_steps(MODEL, p, system=dgx, options=o).step_time_s[0]
        assert times[kernel] == simulate_step(MODEL, p, system=dgx, options=o).step_time_s
    assert times["fa2"] > times["cudnn"]  # FlashAttention-2 is the slower kernel on H100 (FA-3 paper figs. 5-6)
