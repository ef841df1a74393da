"""Results as flat pandas tables: one row per entry, the same numbers as the nested breakdowns."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.studies.training import StepOptions, simulate_step
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import model_preset
from workloads.tasks import Workload


@pytest.fixture(scope="module")
def step():
    layout = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=8, seq_len=1024)
    return simulate_step(model_preset("llama3-8b"), layout, options=StepOptions(granularity="chunk"))


def test_step_frames_flatten_the_breakdowns(step):
    groups = step.frame("group").set_index("group")
    assert set(groups.index) == set(step.breakdown["group"])
    for name, entry in step.breakdown["group"].items():
        assert groups.loc[name, "nbytes"] == entry["nbytes"] and groups.loc[name, "time_s"] == entry["time_s"]
    algorithms = step.frame("algorithm")
    # each group's rows add up to the group's count and bytes (the tuner's choices split them)
    assert algorithms.groupby("group")["count"].sum().to_dict() == groups["count"].to_dict()
    assert set(algorithms["protocol"]) <= {"LL", "LL128", "Simple"}
    tiers = step.frame("link_tier").set_index("tier")["bytes"]
    assert tiers.to_dict() == dict(step.breakdown["link_tier_bytes"])
    summary = step.frame("summary")
    assert len(summary) == 1 and summary.loc[0, "step_time_s"] == step.step_time_s
    assert step.frame("memory").set_index("part")["bytes"].to_dict() == dict(step.memory)
    with pytest.raises(ValueError, match="view: 'groups' is not allowed"):
        step.frame("groups")


def test_sim_result_frames():
    topo = build_system("dgx-h100", nodes=2)
    coll = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(16)))
    result = simulate(topo, Workload.sequence([coll, coll], nranks=16))
    table = result.frame("collectives")
    assert list(table["index"]) == [0, 1] and (table["time_s"] == [r.time_s for r in result.collectives]).all()
    assert list(table["busbw_GBps"]) == [r.busbw_bytes_per_s / 1e9 for r in result.collectives]  # unit-suffixed
    links = result.frame("links")
    assert len(links) == topo.num_links and links["bytes"].sum() == result.link_bytes.sum()
