"""Failures and goodput (simulator/studies/goodput.py): hand-derived runs of the closed form, the Llama 3 rates on
a 16,384-GPU design against the paper's effective training time, and the study end to end on a small fabric."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle

import pytest

from simulator.cli import main
from simulator.studies.goodput import (
    LLAMA3_CAUSES,
    LLAMA3_HOURS,
    LLAMA3_UNITS,
    Checkpoint,
    Exposure,
    FailureCause,
    GoodputResult,
    Recovery,
    _cable_chain,
    checkpoint_bytes,
    exposure_units,
    failure_in_step,
    goodput,
    goodput_of,
    monte_carlo,
)
from simulator.studies.scenario import prepare_step, run_step, step_settings
from topologies.presets import build_system

ONE = {kind: 1.0 for kind in LLAMA3_UNITS}  # a reference cluster of one unit of each kind


def exposure(**changes) -> Exposure:
    """Two GPUs, one step a second, one token a step; no cables unless given."""
    fields = dict(
        units={kind: 2.0 for kind in LLAMA3_UNITS},
        cables={},
        ranks=2,
        step_time_s=1.0,
        tokens_per_step=1.0,
    )
    return Exposure(**(fields | changes))


def test_no_failure_leaves_the_checkpoint_stalls_alone():
    # no cause: wall = T x (tau + C) / tau, so ETTR = tau / (tau + C) = 600 / 606 exactly; C = 600 B / 100 B/s
    run = goodput_of(
        exposure(),
        tokens=36000.0,
        causes=(),
        reference_units=ONE,
        checkpoint=Checkpoint(interval_s=600.0, nbytes=600.0, write_bytes_per_s=100.0),
    )
    assert run.productive_s == 36000.0  # 36,000 tokens at one token a second
    assert run.ettr == 600.0 / 606.0
    assert run.wall_s == 36000.0 * 606.0 / 600.0
    assert run.lost_s == {"checkpoint stalls": 36000.0 * 6.0 / 600.0}
    assert math.isinf(run.mtbf_s) and math.isinf(run.suggested_interval_s)
    # and with no checkpoint to write either, nothing is lost: the run is the healthy steps, exactly
    bare = goodput_of(exposure(), tokens=36000.0, causes=(), reference_units=ONE)
    assert bare.ettr == 1.0 and bare.wall_s == 36000.0


def test_one_interrupting_cause_costs_what_the_formula_derives():
    # one GPU failure an hour per GPU in the reference (1 h, 1 GPU); the design has 2 GPUs: lambda = 2 / 3600 s.
    # Each: detection 4.096 us x 2^20 x (7 + 1) = 34.359738368 s, abort 0, restart 60 s, read 1,000 B at 1,000 B/s
    # = 1 s, re-creation 0.5 s x 2 ranks = 1 s, lost work (tau + C) / 2 = (100 + 10) / 2 = 55 s.
    cause = FailureCause(name="gpu", kind="gpu", count=1.0)
    recovery = Recovery(restart_s=60.0, init_s_per_rank=0.5, abort_s=0.0)
    ckpt = Checkpoint(interval_s=100.0, nbytes=1000.0, write_bytes_per_s=100.0, read_bytes_per_s=1000.0)
    run = goodput_of(
        exposure(),
        tokens=3600.0,
        causes=(cause,),
        reference_units=ONE,
        reference_hours=1.0,
        recovery=recovery,
        checkpoint=ckpt,
    )
    rate = 2.0 / 3600.0
    cost = 4.096e-6 * 2**20 * 8 + 0.0 + 60.0 + 1.0 + 1.0 + 55.0
    wall = 3600.0 * (110.0 / 100.0) / (1.0 - rate * cost)
    assert run.wall_s == pytest.approx(wall, rel=1e-12)
    assert run.ettr == pytest.approx(3600.0 / wall, rel=1e-12)
    assert run.lost_s["gpu"] == pytest.approx(wall * rate * cost, rel=1e-12)
    assert run.lost_by_phase_s["lost work"] == pytest.approx(wall * rate * 55.0, rel=1e-12)
    assert run.events["gpu"] == pytest.approx(wall * rate, rel=1e-12)
    # the parts add up to the wall time: productive + stalls + every cause's loss
    assert run.productive_s + sum(run.lost_s.values()) == pytest.approx(run.wall_s, rel=1e-12)
    assert sum(run.lost_by_phase_s.values()) == pytest.approx(sum(run.lost_s.values()), rel=1e-12)
    # Young/Daly: sqrt(2 x 10 s x 1800 s) = 189.7 s
    assert run.suggested_interval_s == pytest.approx(math.sqrt(2 * 10.0 * 1800.0), rel=1e-12)
    assert run.mtbf_s == pytest.approx(1800.0, rel=1e-12)


def test_a_surviving_cable_is_charged_its_slowdown_until_repaired():
    # one cable failure per cable-hour in the reference; the design has 3 fabric_1 cables and 1 NIC cable.
    # fabric_1 survives at 1.25 s a step (healthy 1 s): pause 4.096 us x 2^20 = 4.294967296 s, then 1,000 s of
    # repair at 1 / 1.25 of the progress: 1,000 x (1 - 1 / 1.25) = 200 s, less than a planned stop (restart 300 s;
    # no checkpoint bytes, so no stall or read). The NIC tier stops the job: detection 34.36 s + restart 300 +
    # lost work tau / 2 = 50 s.
    cause = FailureCause(name="cable", kind="cable", count=1.0)
    ex = exposure(cables={"nic": 1.0, "fabric_1": 3.0}, degraded_step_s={"nic": None, "fabric_1": 1.25})
    inputs = dict(
        tokens=7200.0,
        causes=(cause,),
        reference_units=ONE,
        reference_hours=1.0,
        checkpoint=Checkpoint(interval_s=100.0, nbytes=1e-30, write_bytes_per_s=1.0, read_bytes_per_s=1.0),
    )
    run = goodput_of(ex, recovery=Recovery(restart_s=300.0, init_s_per_rank=0.0, repair_s=1000.0), **inputs)
    pause = 4.294967296
    degraded = pause + 200.0
    stopped = pause * 8 + 300.0 + 50.0
    wall = 7200.0 / (1.0 - 3.0 / 3600.0 * degraded - 1.0 / 3600.0 * stopped)
    assert run.wall_s == pytest.approx(wall, rel=1e-9)
    assert run.lost_s["cable [fabric_1]"] == pytest.approx(wall * 3.0 / 3600.0 * degraded, rel=1e-9)
    assert run.lost_by_phase_s["degraded"] == pytest.approx(wall * 3.0 / 3600.0 * 200.0, rel=1e-9)
    assert run.mtbf_s == pytest.approx(3600.0)  # only the NIC tier interrupts
    # a restart of 100 s loses less than 200 s of slow steps: the degraded job is drained onto a spare instead
    drained = goodput_of(ex, recovery=Recovery(restart_s=100.0, init_s_per_rank=0.0, repair_s=1000.0), **inputs)
    per_event = drained.lost_s["cable [fabric_1]"] / drained.events["cable [fabric_1]"]
    assert per_event == pytest.approx(pause + 100.0, rel=1e-9)
    assert drained.lost_by_phase_s["degraded"] == 0.0
    # a degraded step faster than the healthy one (load-dependent routing) costs its pause only
    faster = goodput_of(
        exposure(cables={"fabric_1": 3.0}, degraded_step_s={"fabric_1": 0.9}),
        recovery=Recovery(restart_s=300.0, init_s_per_rank=0.0, repair_s=1000.0),
        **inputs,
    )
    assert faster.lost_s["cable [fabric_1]"] / faster.events["cable [fabric_1]"] == pytest.approx(pause, rel=1e-12)


def test_asynchronous_checkpoints_stall_for_the_host_copy_and_lose_the_write():
    # 800 B over 2 ranks at 100 B/s to host: a 4 s stall; the write 800 B / 20 B/s = 40 s runs beside the next
    # interval (tau 100 s): lost work (100 + 4) / 2 + 40 = 92 s per failure; no failure: ETTR = 100 / 104
    ckpt = Checkpoint(interval_s=100.0, nbytes=800.0, write_bytes_per_s=20.0, mode="async", host_copy_bytes_per_s=100.0)
    quiet = goodput_of(exposure(), tokens=1000.0, causes=(), reference_units=ONE, checkpoint=ckpt)
    assert quiet.checkpoint_stall_s == 4.0 and quiet.ettr == 100.0 / 104.0
    cause = FailureCause(name="gpu", kind="gpu", count=1.0, detection="watchdog")
    recovery = Recovery(watchdog_s=600.0, restart_s=0.0, init_s_per_rank=0.0)
    run = goodput_of(
        exposure(),
        tokens=1000.0,
        causes=(cause,),
        reference_units=ONE,
        reference_hours=1.0,
        recovery=recovery,
        checkpoint=dataclasses.replace(ckpt, read_bytes_per_s=800.0),
    )
    per_failure = 600.0 + 1.0 + 92.0  # watchdog, read 800 B at 800 B/s, lost work
    assert run.lost_s["gpu"] == pytest.approx(run.wall_s * 2.0 / 3600.0 * per_failure, rel=1e-12)
    with pytest.raises(ValueError, match="checkpoint.interval_s: 10.0 is not allowed"):
        goodput_of(exposure(), causes=(), reference_units=ONE, checkpoint=dataclasses.replace(ckpt, interval_s=10.0))


def test_the_monte_carlo_draws_agree_with_the_closed_form():
    # recovery costs ~0 (ib_timeout 1: 8 x 8.2 us), so no failure falls in a recovery: the draws differ from the
    # closed form by sampling error and by its first-order lost work only. One failure per 10 h (lambda = 1 / 36,000
    # s over 2 GPUs at 1 per 20 h each), tau 100 s + C 10 s: a failure in a cycle loses E[X | X < L] = L / 2 -
    # lambda L^2 / 12 + O(lambda^2) instead of L / 2, a bias of lambda L^2 / 12 = 0.028 s per failure.
    cause = FailureCause(name="gpu", kind="gpu", count=1.0)
    inputs = dict(
        tokens=1e6,
        causes=(cause,),
        reference_units=ONE,
        reference_hours=20.0,
        recovery=Recovery(ib_timeout=1, restart_s=0.0, init_s_per_rank=0.0),
        checkpoint=Checkpoint(interval_s=100.0, nbytes=1000.0, write_bytes_per_s=100.0, read_bytes_per_s=1e30),
    )
    closed = goodput_of(exposure(), **inputs)
    walls = monte_carlo(exposure(), runs=400, seed=7, **inputs)
    assert (monte_carlo(exposure(), runs=400, seed=7, **inputs) == walls).all()  # seeded: bit-identical
    assert not (monte_carlo(exposure(), runs=400, seed=8, **inputs) == walls).all()
    sampling = walls.std() / math.sqrt(len(walls))
    bias = closed.events["gpu"] * (1 / 36000) * 110.0**2 / 12
    assert abs(walls.mean() - closed.wall_s) < 4 * sampling + bias
    # with no failure the draws are the closed form exactly: T (tau + C) / tau
    quiet = monte_carlo(exposure(), runs=3, **(inputs | {"causes": ()}))
    assert (quiet == 1e6 * 110.0 / 100.0).all()


def test_the_llama3_rates_give_back_the_papers_counts():
    # the per-unit rates times the reference cluster's units over 54 days: the 419 unexpected + 47 planned
    ex = Exposure(
        units=dict(LLAMA3_UNITS),
        cables={"nic": 16384.0, "fabric_1": 16384.0, "fabric_2": 16384.0},
        ranks=16384,
        step_time_s=1.0,
        tokens_per_step=1.0,
    )
    run = goodput_of(ex, tokens=1e6, checkpoint=Checkpoint(interval_s=600.0))
    per_hour = sum(run.events.values()) / (run.wall_s / 3600.0)
    assert per_hour * LLAMA3_HOURS == pytest.approx(466.0, rel=1e-12)
    assert sum(c.count for c in LLAMA3_CAUSES if c.kind != "planned") == 419


def test_16k_h100_fat_tree_keeps_the_llama3_effective_training_time():
    # Measured data: the Llama 3 paper reports > 90 % effective training time for 466 interruptions in 54 days
    # on 16,384 H100. The design: 2,048 DGX H100 on a RoCE 400G fat-tree; its step (10.53 s) is fabricsim's own
    # for the 405B layout (fabricsim step --model llama3-405b --fabric roce-400g --topology fat-tree --tp 8 --pp 16
    # --nodes 2048 --seq-len 8192 --global-batch 2048); a NIC cable stops the job, a fabric cable slows a step
    # by a little (the goodput study simulates it; its value barely moves the ratio).
    topology = build_system("dgx-h100", nodes=2048, fabric="roce-400g", topology="fat-tree")
    units, cables = exposure_units(topology)
    assert units["cable"] == LLAMA3_UNITS["cable"]  # the reference cable count is this fabric's
    ex = Exposure(
        units=units,
        cables=cables,
        ranks=16384,
        step_time_s=10.53,
        tokens_per_step=2048 * 8192.0,
        degraded_step_s={"nic": None, "fabric_1": 10.53, "fabric_2": 10.53},
        checkpoint_bytes=checkpoint_bytes(405.9e9),
    )
    run = goodput_of(ex)
    assert 0.90 < run.ettr < 1.0
    causes = sorted(run.lost_s, key=run.lost_s.get, reverse=True)
    assert causes[0] == "faulty GPU"  # the paper's first cause is the first loss
    assert run.mtbf_s / 3600 == pytest.approx(54 * 24 / (466 - 35 * 2 / 3), rel=1e-9)  # 2 of 3 cable tiers survive
    frame = GoodputResult(designs=(run,)).frame("causes")
    assert frame["lost_s"].sum() + run.productive_s == pytest.approx(run.wall_s, rel=1e-12)


SMALL = {
    "system": "dgx-h100",
    "nodes": 4,
    "tokens": 1e9,
    "designs": {
        "leaf-spine": {"topology": "leaf-spine"},
        "2 planes": {"topology": "fat-tree", "planes": 2, "nic_failover": True},
    },
    "monte_carlo": {"runs": 20, "seed": 3},
    "workload": {
        "model": "gpt",
        "layers": 2,
        "hidden": 1024,
        "heads": 8,
        "tp": 2,
        "pp": 2,
        "global_batch": 16,
        "seq_len": 1024,
    },
}


@pytest.fixture(scope="module")
def small():
    return goodput(SMALL)


def test_the_study_runs_todays_step_and_the_degraded_ones(small):
    # off = today's result: the healthy step is the step `fabricsim step` gives for the same settings
    for design, fields in SMALL["designs"].items():
        own = {k: v for k, v in fields.items() if k != "nic_failover"}
        settings = step_settings(
            {k: v for k, v in SMALL.items() if k not in ("designs", "workload", "tokens", "monte_carlo")}
            | SMALL["workload"]
            | own
        )
        step = run_step(prepare_step(settings, environ={}))
        run = next(d for d in small.designs if d.design == design)
        assert run.step_time_s == step.step_time_s
    plain, planes = small.designs
    assert plain.degraded_step_s["nic"] is None  # one plane, no failover: the job stops
    assert planes.degraded_step_s["nic"] > planes.step_time_s  # the other plane's NIC carries two GPUs' traffic
    assert "network switch/cable [nic]" in plain.events and plain.lost_by_phase_s["degraded"] >= 0


def test_the_study_is_deterministic_and_its_results_are_data(small):
    again = goodput(SMALL)
    assert again.as_dict() == small.as_dict()
    copy = pickle.loads(pickle.dumps(small))
    assert copy.as_dict() == small.as_dict()
    summary = small.frame("summary")
    assert list(summary["design"]) == ["leaf-spine", "2 planes"] and (summary["ettr"] < 1).all()
    assert (summary["monte_carlo_runs"] == 20).all() and (summary["monte_carlo_ettr_mean"] <= 1).all()
    phases = small.frame("phases")
    assert set(phases["phase"]) >= {"detection", "restart", "re-creation", "lost work", "checkpoint stalls"}
    with pytest.raises(ValueError, match="view: 'designs' is not allowed"):
        small.frame("designs")


def test_goodput_command_writes_json_and_csv(tmp_path, capsys):
    spec = tmp_path / "g.toml"
    spec.write_text(
        'system = "dgx-h100"\nnodes = 2\ntokens = 1e9\n[designs.a]\ntopology = "leaf-spine"\n'
        '[workload]\nmodel = "gpt"\nlayers = 2\nhidden = 1024\nheads = 8\ntp = 2\npp = 1\nglobal_batch = 8\n'
        "seq_len = 1024\n[checkpoint]\ninterval_s = 600\n"
    )
    out = tmp_path / "causes.csv"
    assert main(["goodput", str(spec), "--format", "json", "--quiet", "--out", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["designs"][0]["checkpoint_interval_s"] == 600.0
    assert out.read_text().startswith("design,cause,events,lost_s,share")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[recovery]\nib_timeout = 32\n", "recovery.ib_timeout: 32 is not allowed; expected an integer from 1 to 31"),
        ("[checkpoint]\nmode = 'lazy'\n", "checkpoint.mode: 'lazy' is not allowed"),
        ("[checkpoint]\nwrite_GBps = 2\n", "checkpoint.write_GBps: 2 is not allowed; expected a field of [checkpoint]"),
        ("[failures.GPU]\nkind = 'rack'\ncount = 1\n", "failures.GPU.kind: 'rack' is not allowed"),
        ("[failures.'faulty GPU']\ncount = -1\n", "failures.faulty GPU.count: -1 is not allowed"),
        ("[reference]\nunits = { rack = 3 }\n", "reference.units: 'rack' is not allowed"),
        ("[designs.b]\nhops = 3\n", "designs.b.hops: 3 is not allowed"),
        ("[monte_carlo]\nruns = -1\n", "monte_carlo.runs: -1 is not allowed"),
        # a design that cannot be built is refused before any design's step runs
        ("[designs.b]\ntopology = 'fat-tree'\nplanes = 3\n", "designs.b: fat_tree.planes: 3 is not allowed"),
    ],
)
def test_bad_goodput_input_is_one_line(tmp_path, capsys, table, message):
    spec = tmp_path / "bad.toml"
    spec.write_text('system = "dgx-h100"\nnodes = 2\n[designs.a]\ntopology = "leaf-spine"\n' + table)
    assert main(["goodput", str(spec), "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err


PLANES = {
    "system": "dgx-h100",
    "nodes": 4,
    "topology": "fat-tree",
    "planes": 2,
    "model": "gpt",
    "layers": 2,
    "hidden": 1024,
    "heads": 8,
    "tp": 2,
    "pp": 2,
    "global_batch": 16,
    "seq_len": 1024,
}


def test_a_cable_failing_inside_a_step():
    settings = step_settings(PLANES)
    # no NIC failover: the QPs run out of retransmissions, 4.096 us x 2^20 x 8 = 34.359738368 s after the failure
    stopped = failure_in_step(settings, tier="nic", at_s=0.001)
    assert stopped.interrupted and stopped.step_time_s is None
    assert stopped.wasted_s == 0.001 + 4.096e-6 * 2**20 * 8
    # with failover, at 0 s: the step with the cable failed from the start (the engine moves no flow: none began)
    first = failure_in_step(settings, tier="nic", at_s=0.0, nic_failover=True)
    setup = prepare_step(settings, environ={})
    links = frozenset(_cable_chain(setup.topology)["nic"])
    failed = run_step(setup, config=dataclasses.replace(setup.config, failed_links=links)).step_time_s
    assert not first.interrupted and first.step_time_s == failed
    # halfway: the flows caught by the failure move; the step ends later than the healthy one, and its waste is
    # the extra time plus one retransmission timeout's pause (4.096 us x 2^20)
    half = failure_in_step(settings, tier="nic", at_s=first.healthy_step_s / 2, nic_failover=True)
    assert half.step_time_s > half.healthy_step_s
    assert half.wasted_s == half.step_time_s - half.healthy_step_s + 4.096e-6 * 2**20
    with pytest.raises(ValueError, match="tier: 'fabric_2' is not allowed; expected a cable tier of this design"):
        failure_in_step(settings, tier="fabric_2", at_s=0.0)
