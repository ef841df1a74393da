"""Results, topologies and workloads pickle (a process pool or a Dask worker returns them; a sweep stores them)
and come back equal, their read-only tables still read-only."""

from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

from simulator.api import simulate
from simulator.studies.nccl_tests import run_bench
from simulator.studies.training import StepOptions, simulate_step
from topologies.presets import build_system
from workloads.collectives import Collective, CollectiveKind
from workloads.parallelism import ParallelismSpec
from workloads.presets import model_preset
from workloads.tasks import Workload


def roundtrip(value):
    return pickle.loads(pickle.dumps(value))


def test_a_step_result_pickles_with_its_breakdown_and_phases():
    layout = ParallelismSpec(tp=2, pp=2, dp=2, global_batch=8, seq_len=1024)
    result = simulate_step(model_preset("llama3-8b"), layout, options=StepOptions(granularity="chunk"))
    back = roundtrip(result)
    assert back.step_time_s == result.step_time_s and back.exposed_comm_s == result.exposed_comm_s
    assert back.breakdown == result.breakdown and back.memory == result.memory
    assert isinstance(back.breakdown, types.MappingProxyType)
    with pytest.raises(TypeError):
        back.breakdown["group"] = {}  # still read-only
    assert [p.sim.makespan_s for p in back.phases] == [p.sim.makespan_s for p in result.phases]


def test_a_sim_result_and_its_topology_pickle():
    topo = build_system("dgx-h100", nodes=2)
    work = Workload.sequence(
        [Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=tuple(range(16)))], nranks=16
    )
    result = simulate(topo, work)
    back = roundtrip(result)
    assert back.collectives == result.collectives
    assert np.array_equal(back.link_bytes, result.link_bytes)
    again = roundtrip(topo)
    assert again.num_links == topo.num_links and again.link_names == topo.link_names
    # the unpickled topology simulates the same collective to the bit
    assert simulate(again, work).collectives[0].time_s == result.collectives[0].time_s


def test_bench_rows_pickle():
    rows = run_bench("all_reduce", sizes=[1 << 20])
    assert roundtrip(rows) == rows
