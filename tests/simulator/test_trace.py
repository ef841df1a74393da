"""simulator.studies.trace: pipeline transfers as sends and receives with flow arrows, and link-tier counter
tracks whose means conserve the bytes the simulation moved."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from simulator.config import SimConfig
from simulator.studies.trace import COUNTER_BINS, chrome_trace
from simulator.studies.training import StepOptions, simulate_step
from topologies.presets import build_system
from topologies.topology import LinkTier
from workloads.parallelism import ParallelismSpec
from workloads.presets import custom_gpt


@pytest.fixture(scope="module")
def traced():
    """A 16-GPU step (tp 2 x pp 2 x dp 4 on two DGX H100) with and without the tier recording."""
    system = build_system("dgx-h100", nodes=2)
    model = custom_gpt(layers=4, hidden=1024, heads=16, seq_len=1024, vocab=1024)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8)
    plain = simulate_step(model, spec, system=system, options=StepOptions(exact=True))
    recorded = simulate_step(
        model, spec, system=system, options=StepOptions(exact=True, config=SimConfig(tier_rates=True))
    )
    return system, spec, plain, recorded


def test_recording_tiers_changes_nothing(traced):
    _, _, plain, recorded = traced
    assert recorded.step_time_s == plain.step_time_s
    assert all(p.sim.tier_rates is None for p in plain.phases)
    assert all(p.sim.tier_rates is not None for p in recorded.phases)


def test_tier_rates_conserve_the_link_bytes(traced):
    system, _, _, recorded = traced
    for phase in recorded.phases:
        rates = phase.sim.tier_rates
        moved = (rates.bytes_per_s[:-1] * np.diff(rates.times_s)[:, None]).sum(axis=0)
        for j, tier in enumerate(rates.tiers):
            on_tier = system.link_tier == LinkTier[tier.upper()]
            assert moved[j] == pytest.approx(phase.sim.link_bytes[on_tier].sum(), rel=1e-9, abs=1.0)
            assert rates.capacity_bytes_per_s[j] == pytest.approx(system.link_capacity_bytes_per_s[on_tier].sum())
        assert (rates.utilisation <= 1 + 1e-9).all() and not rates.bytes_per_s[-1].any()  # nothing moves at the end


def test_counter_tracks_hold_each_tiers_mean_utilisation(traced):
    system, _, _, recorded = traced
    (phase,) = recorded.phases
    rates = phase.sim.tier_rates
    events = chrome_trace(recorded)["traceEvents"]
    counters = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            counters[e["name"]].append((e["ts"], *e["args"].values()))
    busy = [t for j, t in enumerate(rates.tiers) if phase.sim.link_bytes[system.link_tier == LinkTier[t.upper()]].any()]
    assert busy and {f"{t} utilisation" for t in busy} <= set(counters)
    span_us = rates.times_s[-1] * 1e6
    for j, tier in enumerate(rates.tiers):
        samples = counters.get(f"{tier} utilisation")
        if samples is None:
            continue
        ts, values = np.array(samples).T
        assert len(samples) <= COUNTER_BINS + 1 and values[-1] == 0.0
        # a counter holds its value until the next sample: its integral is the tier's bytes / capacity
        integral_us = float((values[:-1] * np.diff(ts)).sum())
        exact_us = phase.sim.link_bytes[system.link_tier == LinkTier[tier.upper()]].sum()
        exact_us *= 1e6 / rates.capacity_bytes_per_s[j]
        # each bin mean is rounded to 4 decimals: at most 5e-5 of the span off
        assert integral_us == pytest.approx(exact_us, abs=5e-5 * span_us + 1e-9)


def test_pipeline_transfers_are_sends_and_receives_with_arrows(traced):
    _, spec, _, recorded = traced
    events = chrome_trace(recorded, ranks=None)["traceEvents"]
    transfers = [e for e in events if e["ph"] == "X" and e["name"].startswith("pp ") and "gather" not in e["name"]]
    assert transfers
    for e in transfers:
        peer = int(e["name"].rsplit(" ", 1)[1])
        sending = " send " in e["name"]
        assert e["name"].split()[1] == ("send" if sending else "recv")
        assert (" to rank " if sending else " from rank ") in e["name"]
        me, other = spec.coords(e["pid"]), spec.coords(peer)
        assert abs(me.pp - other.pp) == 1 and (me.tp, me.dp) == (other.tp, other.dp)
    flows = collections.defaultdict(dict)
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e["ph"] not in flows[e["id"]]  # one start and one end per arrow
            flows[e["id"]][e["ph"]] = e
    # one arrow per stage transfer (exact=True: every tensor rank moves its own)
    assert len(flows) == sum(" send " in e["name"] for e in transfers)
    for arrow in flows.values():
        start, end = arrow["s"], arrow["f"]
        assert start["pid"] != end["pid"] and start["ts"] <= end["ts"] and end["bp"] == "e"
    # a trace of one rank has its transfers but no arrows (the peer is not in it)
    alone = chrome_trace(recorded, ranks=[0])["traceEvents"]
    assert any(e["ph"] == "X" and " send " in e["name"] for e in alone)
    assert not any(e["ph"] in ("s", "f") for e in alone)


def test_a_reduced_step_traces_unique_arrows_and_says_whose_traffic_it_counts():
    # gradients reduced after the pipeline: one replica's step (standing for 4), the other replicas' members of
    # its data-parallel groups passive; arrows keep distinct ids, and the counters say they count the simulated
    # ranks' traffic (one replica's and its passive members'), not the fabric's
    system = build_system("dgx-h100", nodes=2)
    model = custom_gpt(layers=4, hidden=1024, heads=16, seq_len=1024, vocab=1024)
    spec = ParallelismSpec(tp=2, pp=2, dp=4, global_batch=8, dp_overlap=False, zero=1)
    r = simulate_step(model, spec, system=system, options=StepOptions(config=SimConfig(tier_rates=True)))
    assert len(r.phases) == 1 and len(r.phases[0].training.workload.passive) == 12  # 3 replicas x t p = 4
    events = chrome_trace(r)["traceEvents"]
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["pid"] == spec.world_size]
    assert names == ["link tiers (share of capacity in use by the simulated ranks)"]
    starts = [e["id"] for e in events if e["ph"] == "s"]
    assert starts and len(starts) == len(set(starts))
    # a collective whose task name does not say its kind carries it ("dp bucket 0" is a reduce_scatter)
    buckets = [e for e in events if e["ph"] == "X" and e["name"].startswith("dp bucket")]
    assert buckets and all(e["args"]["kind"] == "reduce_scatter" for e in buckets)
    assert all("kind" not in e["args"] for e in events if e["ph"] == "X" and e["name"].startswith("tp allreduce"))
