"""SimResult: what a simulation produced. Immutable data that holds the config that made it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from topologies.checks import reject
from workloads.collectives import Collective

from .config import SimConfig
from .engine.timeline import Timeline


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRecord:
    index: int
    collective: Collective
    algorithm: str
    protocol: str
    nchannels: int
    start_s: float  # last rank of the group arrived
    end_s: float  # data delivered everywhere
    latency_s: float  # fixed (protocol) part of the schedule
    predicted_s: float  # the tuner's NCCL-style estimate, for reference

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def algbw_bytes_per_s(self) -> float:
        return self.collective.algbw_bytes_per_s(self.time_s)

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.collective.busbw_bytes_per_s(self.time_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class TierRates:
    """Bytes/s each link tier carried over a simulation (``SimConfig.tier_rates``): ``bytes_per_s[k]`` from
    ``times_s[k]`` until the next time (zeros after the last); ``capacity_bytes_per_s`` each tier's links'
    summed capacity, so ``bytes_per_s / capacity_bytes_per_s`` is the tier's mean utilisation."""

    tiers: tuple[str, ...]
    times_s: np.ndarray  # (k,)
    bytes_per_s: np.ndarray  # (k, tiers)
    capacity_bytes_per_s: np.ndarray  # (tiers,)

    @property
    def utilisation(self) -> np.ndarray:
        """(k, tiers): the share of each tier's capacity in use from each time on."""
        return np.asarray(self.bytes_per_s / self.capacity_bytes_per_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    config: SimConfig
    topology_name: str
    collectives: tuple[CollectiveRecord, ...]
    rank_end_s: tuple[float, ...]
    link_bytes: np.ndarray  # bytes moved per link id (read-only)
    link_names: tuple[str, ...]
    network_rerates: int
    # every task's times (collective tasks from their group's start; analysis.task_times of the collectives' times)
    timeline: Timeline
    # rank -> (tasks x 2) read-only array of each task's start (a collective task: its rank's arrival) and end (s),
    # for SimConfig.task_ranks
    task_times: Mapping[int, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))
    tier_rates: TierRates | None = None  # with SimConfig.tier_rates, after an event replay

    @property
    def makespan_s(self) -> float:
        return max(self.rank_end_s) if self.rank_end_s else 0.0

    def frame(self, view: str = "collectives") -> Any:
        """A flat pandas DataFrame, unit-suffixed columns: ``"collectives"`` (one row per collective: kind,
        nbytes, group size, the algorithm, protocol and channels chosen, start, end, time, latency, the tuner's
        estimate, algbw and busbw) or ``"links"`` (one row per link: id, name, bytes moved)."""
        import pandas as pd

        if view == "collectives":
            return pd.DataFrame(
                [
                    {
                        "index": r.index,
                        "kind": r.collective.kind.value,
                        "nbytes": r.collective.nbytes,
                        "group_size": r.collective.nranks,
                        "algorithm": r.algorithm,
                        "protocol": str(r.protocol),
                        "nchannels": r.nchannels,
                        "start_s": r.start_s,
                        "end_s": r.end_s,
                        "time_s": r.time_s,
                        "latency_s": r.latency_s,
                        "predicted_s": r.predicted_s,
                        "algbw_GBps": r.algbw_bytes_per_s / 1e9,
                        "busbw_GBps": r.busbw_bytes_per_s / 1e9,
                    }
                    for r in self.collectives
                ]
            )
        if view == "links":
            return pd.DataFrame(
                {"link": np.arange(len(self.link_names)), "name": self.link_names, "bytes": self.link_bytes}
            )
        raise reject("view", view, "'collectives' or 'links'")
