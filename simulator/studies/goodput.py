"""Failures and goodput: what a fabric design keeps of a training run's time, not only its best step.

A failure follows NCCL's path. It is **detected** (a peer gone or a cable cut: the NIC's retransmissions run out,
``4.096 us x 2^NCCL_IB_TIMEOUT`` per attempt, ``NCCL_IB_RETRY_CNT + 1`` attempts; a hang: PyTorch's
ProcessGroupNCCL watchdog), the communicators are **aborted** (ncclCommAbort), the job is **restarted** (scheduler,
processes, the last checkpoint read back), the communicators are **re-created** (ncclCommInitRank's bootstrap,
growing with the ranks) and the work since the last durable checkpoint is **lost**. Fabrics that survive a cable
with less bandwidth (a fabric link with other paths; a NIC cable where the design fails over to another NIC)
**degrade** instead: the job pauses one IB retransmission timeout while the fabric re-routes, then runs its
steps slower (the step simulated with the cable failed, ``SimConfig.failed_links``) until the cable is repaired.

Formulas (per design; all times in seconds; rates per second, cluster-wide for the design):

* rate of a cause c: ``lambda_c = n_c / (H x U_kind(reference)) x U_kind(design)`` with ``n_c`` its interruptions
  in the reference run of H hours on a cluster with ``U_kind`` units of its component kind (defaults: the Llama 3
  paper's 54-day snapshot on 16,384 H100, its Table 5);
* checkpoint: cycle ``L = tau + s`` with ``tau`` the compute between checkpoints and ``s`` the stall per
  checkpoint (blocking: the whole write ``C = bytes / write bandwidth``; asynchronous: the copy of a GPU's share to
  host memory, ``bytes / GPUs / PCIe bandwidth``, the write ``C`` then running beside the next interval);
* an interruption costs ``F_c = detection_c + abort + restart + C_read + init(n) + lost``, with ``init(n)``
  linear in the ranks n, ``C_read = bytes / read bandwidth`` and, for a failure uniform over the cycle, the
  expected work lost since the last durable checkpoint ``lost = L / 2`` (blocking) or ``L / 2 + C`` (async: the
  previous checkpoint is durable C after its interval ends; requires C <= L); a planned interruption (drained after
  a checkpoint) has no detection and loses nothing, and pays one checkpoint stall instead;
* a degradation costs ``pause + min(R x (1 - t / t_d), D)``: ``pause`` one IB retransmission timeout, then
  ``R`` seconds of repair at ``t / t_d`` of the healthy progress (t the healthy step, t_d the step with the cable
  failed), or, when that loses more, a planned stop D (checkpoint stall, abort, restart, read, re-creation) onto
  a spare;
* wall time ``W = T x (L / tau) / (1 - sum_c lambda_c F_c)`` for T seconds of failure-free training (T = tokens /
  tokens per second of the healthy step): failures arrive over the whole wall time, each costs its F_c;
* effective training time ratio ``ETTR = T / W``; time to train = W; lost time of cause c = ``W lambda_c F_c``,
  checkpoint stalls ``T s / tau``; T + stalls + the causes' lost time = W exactly;
* the suggested interval (Young 1974, Daly 2006 first order): ``tau* = sqrt(2 s M)``, M = 1 / the sum of the
  rates of the failures that lose work (planned stops lose none).

Captures: per-cause rates scaled by each design's own counts of GPUs, hosts, NICs and cables per tier; which
cable failures a design survives (a route must remain: the router's own answer) and the slower step it then runs;
NCCL's detection timeouts; checkpoint stalls, the read-back and the re-creation growing with ranks.
Ignores: failures during recovery restarting it (first order in lambda F), correlated failures, a switch failure
as many cables at once (the paper counts switches and cables together: all are charged per cable), the
checkpoint's storage traffic on the training fabric (Meta runs GPU training on its own "backend" network,
Gangidi et al., SIGCOMM 2024, and Llama 3 checkpoints to Tectonic beside it: the write is bounded by the storage's
bandwidth alone), stragglers before a failure is detected, re-routing time beyond one retransmission timeout.

Beside the closed form: :func:`monte_carlo` draws the failures (seeded) and rolls the work back exactly, and
:func:`failure_in_step` replays one step with a cable failing inside it (``SimConfig.link_events``).

Worked number: 2,048 DGX H100 on a RoCE fat-tree with the Llama 3 rates (466 interruptions in 54 days: one per
2.78 h) and a 405B checkpoint of 5.68 TB written at 2 TB/s (2.84 s): Young/Daly's interval 4.3 min and an ETTR of
about 0.94 (``fabricsim goodput``; the tests check > 0.90, the paper's ">90% effective training time").
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topologies import checks
from topologies.routing import Unreachable
from topologies.topology import LinkTier, Topology

__all__ = (
    "CABLE_TIERS",
    "COMPONENTS",
    "DEFAULT_GOODPUT",
    "DETECTIONS",
    "LLAMA3_CAUSES",
    "LLAMA3_HOURS",
    "LLAMA3_UNITS",
    "Checkpoint",
    "DesignGoodput",
    "Exposure",
    "FailureCause",
    "GoodputResult",
    "Recovery",
    "checkpoint_bytes",
    "exposure_units",
    "goodput",
    "goodput_of",
    "monte_carlo",
    "failure_in_step",
    "StepFailure",
)

DEFAULT_GOODPUT = Path(__file__).with_name("designs") / "goodput-16k.toml"

# Component kinds a cause is charged to, each counted in a design: GPUs, servers (hosts), NICs, cables (one
# rate for every cable; a design's cables split by tier, see CABLE_TIERS), processes (one per GPU: software),
# and planned maintenance (per host).
COMPONENTS = ("gpu", "host", "nic", "cable", "process", "planned")
# How a failure is detected: "transport" (a peer's process died or a cable is cut: the NIC's retransmissions run
# out), "watchdog" (a hang: PyTorch's ProcessGroupNCCL watchdog fires), "drained" (planned: none, the job
# checkpoints and stops)
DETECTIONS = ("transport", "watchdog", "drained")
# the cable tiers a design may survive: the NIC cable (if the design fails over to another NIC of the server)
# and the fabric's own links (if another path remains)
CABLE_TIERS = {"nic": LinkTier.NIC, "fabric_1": LinkTier.FABRIC_1, "fabric_2": LinkTier.FABRIC_2}

# The Llama 3 paper (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.4 and Table 5): a 54-day
# snapshot of the 405B pre-training on 16,384 H100 had 466 job interruptions, 47 planned (automated maintenance,
# firmware upgrades, configuration or dataset updates) and 419 unexpected, ~78% confirmed or suspected hardware.
LLAMA3_HOURS = 54 * 24.0
# The reference cluster's units: 2,048 Grand Teton servers of 8 H100 and 8 400 Gb/s NICs (one per GPU; section
# 3.3.1); cables: 3 per NIC port in a non-blocking 3-tier Clos (NIC-leaf, leaf-spine, spine-core: 49,152, as
# fabricsim's own 2,048-server RoCE fat-tree counts them). ASSUMPTION: the paper's RoCE cluster is 1:7
# oversubscribed above its 3,072-GPU zones; counting it non-blocking charges each cable a rate at most ~1.3x low.
LLAMA3_UNITS = {"gpu": 16384, "host": 2048, "nic": 16384, "cable": 3 * 16384, "process": 16384, "planned": 2048}


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureCause:
    """One root cause: its ``count`` of interruptions in the reference run, the component ``kind`` it is charged
    to (COMPONENTS) and how it is detected (DETECTIONS)."""

    name: str
    kind: str
    count: float
    detection: str = "transport"

    def __post_init__(self) -> None:
        where = f"failures.{self.name}"
        checks.choice(f"{where}.kind", self.kind, COMPONENTS)
        object.__setattr__(self, "count", checks.finite(f"{where}.count", self.count, low=0))
        checks.choice(f"{where}.detection", self.detection, DETECTIONS)
        if (self.kind == "planned") != (self.detection == "drained"):
            raise checks.reject(f"{where}.detection", self.detection, "'drained' for kind 'planned' and only for it")


# Table 5 of the Llama 3 paper: the counts (they add up to the 419 unexpected interruptions; the table's
# percentages do not all match them, e.g. 148 faulty-GPU interruptions are printed as 30.1 %, so the counts are
# used). A GPU, host or software fault ends its process (CUDA error, crash, host down): its peers' NICs run out
# of retransmissions ("transport"). "NCCL watchdog timeouts" and silent data corruption are hangs or found late:
# the watchdog's timeout (ASSUMPTION for silent data corruption, which no NCCL timer sees).
LLAMA3_CAUSES = (
    FailureCause(name="faulty GPU", kind="gpu", count=148),
    FailureCause(name="GPU HBM3 memory", kind="gpu", count=72),
    FailureCause(name="software bug", kind="process", count=54),
    FailureCause(name="network switch/cable", kind="cable", count=35),
    FailureCause(name="host maintenance (unplanned)", kind="host", count=32),
    FailureCause(name="GPU SRAM memory", kind="gpu", count=19),
    FailureCause(name="GPU system processor", kind="gpu", count=17),
    FailureCause(name="NIC", kind="nic", count=7),
    FailureCause(name="NCCL watchdog timeouts", kind="process", count=7, detection="watchdog"),
    FailureCause(name="silent data corruption", kind="gpu", count=6, detection="watchdog"),
    FailureCause(name="GPU thermal interface + sensor", kind="gpu", count=6),
    FailureCause(name="SSD", kind="host", count=3),
    FailureCause(name="power supply", kind="host", count=3),
    FailureCause(name="server chassis", kind="host", count=2),
    FailureCause(name="IO expansion board", kind="host", count=2),
    FailureCause(name="dependency", kind="process", count=2),
    FailureCause(name="CPU", kind="host", count=2),
    FailureCause(name="system memory", kind="host", count=2),
    FailureCause(name="planned maintenance", kind="planned", count=47, detection="drained"),
)

# NCCL's InfiniBand/RoCE transport (src/transport/net_ib, NCCL_PARAM IbTimeout 20 and IbRetryCnt 7 in recent
# releases, IbTimeout 18 and 14 in older ones): the QP's local ACK timeout is 4.096 us x 2^timeout (the
# InfiniBand QP attribute, as NCCL's environment-variable docs give it)
IB_TIMEOUT = 20
IB_RETRY_CNT = 7
IB_TIMEOUT_UNIT_S = 4.096e-6
# PyTorch ProcessGroupNCCL's default timeout since 2.2 (pytorch/pytorch#110947: 30 min -> 10 min)
WATCHDOG_S = 600.0
# ncclCommInitRank at scale: Meta's NCCLX paper (Si et al. 2025, arXiv:2510.20171) reports ~265 s to initialise
# stock NCCL at 96k GPUs (98,304 ranks). ASSUMPTION: linear in ranks through that point (bootstrap's ring
# all-gather of peer addresses and the connection set-up grow with the ranks), 2.7 ms a rank: 44 s at 16,384.
INIT_S_PER_RANK = 265.0 / 98304
# ASSUMPTION: ncclCommAbort once the proxy threads stop: well under a second, no published figure: 0 s (the
# processes' teardown is in RESTART_S).
ABORT_S = 0.0
# ASSUMPTION: scheduler re-allocation from a pool of spare hosts, container and process start, CUDA and Python
# initialisation across 2,048 hosts: 5 min (the Llama 3 paper says it cut job start-up time without a figure).
RESTART_S = 300.0
# ASSUMPTION: a failed cable or transceiver is swapped within 4 h (one on-call technician visit); no published
# figure for these clusters.
REPAIR_S = 4 * 3600.0
# Llama 3 section 3.3.1: Tectonic serves 2 TB/s sustained (7 TB/s peak) to the 16k-GPU job's checkpoints
STORAGE_BYTES_PER_S = 2e12
# Megatron-LM's mixed-precision checkpoint with Adam: bf16 weights (2 B) + fp32 main weights, Adam m and v (12 B)
# per parameter (ZeRO paper, Rajbhandari et al. 2020, section 3.1: the 12 B of fp32 optimizer state)
CHECKPOINT_BYTES_PER_PARAM = 14
# Llama 3 405B pre-training length: 15.6T tokens (Llama 3 paper, section 3.4)
LLAMA3_TOKENS = 15.6e12


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    """How a failure is detected and recovered from (module docstring; every default with its source above)."""

    ib_timeout: int = IB_TIMEOUT
    ib_retry_cnt: int = IB_RETRY_CNT
    watchdog_s: float = WATCHDOG_S
    abort_s: float = ABORT_S
    restart_s: float = RESTART_S
    init_s_per_rank: float = INIT_S_PER_RANK
    repair_s: float = REPAIR_S

    def __post_init__(self) -> None:
        # NCCL takes NCCL_IB_TIMEOUT 1-31 (the 5-bit QP field) and NCCL_IB_RETRY_CNT 0-7 (3-bit)
        object.__setattr__(self, "ib_timeout", checks.integer("recovery.ib_timeout", self.ib_timeout, low=1, high=31))
        object.__setattr__(
            self, "ib_retry_cnt", checks.integer("recovery.ib_retry_cnt", self.ib_retry_cnt, low=0, high=7)
        )
        for name in ("watchdog_s", "abort_s", "restart_s", "init_s_per_rank", "repair_s"):
            object.__setattr__(self, name, checks.finite_nonnegative(f"recovery.{name}", getattr(self, name)))

    @property
    def transport_s(self) -> float:
        """Seconds until a QP reports its peer or path gone: every attempt (the first and NCCL_IB_RETRY_CNT
        retries) waits the local ACK timeout. 4.096 us x 2^20 x 8 = 34.4 s by default."""
        return self.retransmission_s * (self.ib_retry_cnt + 1)

    @property
    def retransmission_s(self) -> float:
        """One local ACK timeout, 4.096 us x 2^NCCL_IB_TIMEOUT (4.29 s by default): a degraded fabric's pause."""
        return IB_TIMEOUT_UNIT_S * 2.0**self.ib_timeout

    def detection_s(self, detection: str) -> float:
        return {"transport": self.transport_s, "watchdog": self.watchdog_s, "drained": 0.0}[detection]


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """``interval_s``: compute between checkpoints (None: Young/Daly's suggestion); ``nbytes`` (None: the
    model's parameters x 14 B); write and read bandwidth of the storage; ``mode`` blocking or async;
    ``host_copy_bytes_per_s`` a GPU's copy to host memory in async mode (None: the design's PCIe link)."""

    interval_s: float | None = None
    nbytes: float | None = None
    write_bytes_per_s: float = STORAGE_BYTES_PER_S
    read_bytes_per_s: float = STORAGE_BYTES_PER_S
    mode: str = "blocking"
    host_copy_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("interval_s", "nbytes", "host_copy_bytes_per_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, checks.positive_finite(f"checkpoint.{name}", getattr(self, name)))
        for name in ("write_bytes_per_s", "read_bytes_per_s"):
            object.__setattr__(self, name, checks.positive_finite(f"checkpoint.{name}", getattr(self, name)))
        checks.choice("checkpoint.mode", self.mode, ("blocking", "async"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Exposure:
    """What a design exposes to failures: its units per component kind (COMPONENTS), cables per tier, ranks, the
    healthy step and, per cable tier, the step with one cable failed (None: the job stops, no route or no NIC
    failover), the checkpoint's bytes and a GPU's host-copy bandwidth."""

    units: Mapping[str, float]
    cables: Mapping[str, float]  # tier name (CABLE_TIERS) -> cables
    ranks: int
    step_time_s: float
    tokens_per_step: float
    degraded_step_s: Mapping[str, float | None] = field(default_factory=dict)
    checkpoint_bytes: float = 0.0
    host_copy_bytes_per_s: float = math.inf

    def __post_init__(self) -> None:
        checks.positive_finite("exposure.step_time_s", self.step_time_s)
        checks.positive_finite("exposure.tokens_per_step", self.tokens_per_step)
        checks.integer("exposure.ranks", self.ranks, low=1)
        for kind in COMPONENTS:
            if kind not in self.units:
                raise checks.reject("exposure.units", dict(self.units), f"a count for each of {', '.join(COMPONENTS)}")
        for tier, step in self.degraded_step_s.items():
            checks.choice("exposure.degraded_step_s", tier, tuple(CABLE_TIERS))
            if step is not None:
                checks.positive_finite(f"exposure.degraded_step_s.{tier}", step)


@dataclass(frozen=True, slots=True, kw_only=True)
class DesignGoodput:
    """One design's run: ``ettr`` (productive / wall), ``time_to_train_s`` (wall), ``lost_s`` per cause (a
    cable cause per tier: "NAME [tier]"), ``lost_by_phase_s`` (detection, abort, restart, checkpoint read,
    re-creation, lost work, degraded, checkpoint stalls), expected ``events`` per cause, and whether each cable
    tier ``degrades`` or stops the job."""

    design: str
    step_time_s: float
    degraded_step_s: Mapping[str, float | None]
    tokens: float
    productive_s: float
    wall_s: float
    ettr: float
    checkpoint_interval_s: float
    suggested_interval_s: float
    checkpoint_write_s: float
    checkpoint_stall_s: float
    mtbf_s: float  # mean time between interruptions (degradations excluded)
    lost_s: Mapping[str, float]
    lost_by_phase_s: Mapping[str, float]
    events: Mapping[str, float]
    # the seeded Monte Carlo's wall times, when asked (runs, seed, wall_mean_s, wall_p10_s, wall_p90_s, ettr_mean)
    monte_carlo: Mapping[str, float] = field(default_factory=dict)

    @property
    def time_to_train_s(self) -> float:
        return self.wall_s

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return out | {"time_to_train_days": self.wall_s / 86400}


@dataclass(frozen=True, slots=True, kw_only=True)
class GoodputResult:
    """The designs' runs side by side."""

    designs: tuple[DesignGoodput, ...]
    notes: tuple[str, ...] = ()

    def frame(self, view: str = "summary") -> Any:
        """``"summary"``: one row per design (step, degraded steps, ETTR, time to train, interval);
        ``"causes"``: one row per design and cause (events, lost_s, share of wall); ``"phases"``: per design and
        phase (lost_s)."""
        import pandas as pd

        if view == "summary":
            rows = []
            for d in self.designs:
                row = {
                    "design": d.design,
                    "step_time_s": d.step_time_s,
                    **{f"degraded_{tier}_step_s": step for tier, step in d.degraded_step_s.items()},
                    "ettr": d.ettr,
                    "time_to_train_days": d.wall_s / 86400,
                    "productive_days": d.productive_s / 86400,
                    "mtbf_h": d.mtbf_s / 3600,
                    "checkpoint_interval_s": d.checkpoint_interval_s,
                    "suggested_interval_s": d.suggested_interval_s,
                    "checkpoint_write_s": d.checkpoint_write_s,
                    **{f"monte_carlo_{k}": v for k, v in d.monte_carlo.items()},
                }
                rows.append(row)
            return pd.DataFrame(rows)
        if view == "causes":
            rows = [
                {"design": d.design, "cause": c, "events": d.events.get(c, 0.0), "lost_s": s, "share": s / d.wall_s}
                for d in self.designs
                for c, s in d.lost_s.items()
            ]
            return pd.DataFrame(rows)
        if view == "phases":
            rows = [
                {"design": d.design, "phase": p, "lost_s": s}
                for d in self.designs
                for p, s in d.lost_by_phase_s.items()
            ]
            return pd.DataFrame(rows)
        raise checks.reject("view", view, "one of 'summary', 'causes', 'phases'")

    def as_dict(self) -> dict[str, Any]:
        return {"designs": [d.as_dict() for d in self.designs], "notes": list(self.notes)}

    def format(self) -> str:
        """The report as text: a summary line per design, then its lost time by cause and by phase."""
        lines = [f"# fabricsim goodput: {len(self.designs)} design(s)"]
        for d in self.designs:
            degraded = ", ".join(
                f"{tier} cable: " + ("stops the job" if step is None else f"{step:.3f} s")
                for tier, step in d.degraded_step_s.items()
            )
            lines += [
                "",
                f"{d.design}: step {d.step_time_s:.3f} s; ETTR {d.ettr:.4f}; time to train {d.wall_s / 86400:.2f} days "
                f"({d.productive_s / 86400:.2f} failure-free); one interruption per {d.mtbf_s / 3600:.2f} h",
                f"  checkpoint every {d.checkpoint_interval_s:.0f} s of compute (Young/Daly suggests "
                f"{d.suggested_interval_s:.0f} s), write {d.checkpoint_write_s:.1f} s, "
                f"stall {d.checkpoint_stall_s:.2f} s",
                f"  with one cable failed: {degraded or 'no fabric cables'}",
                "  lost time by cause (hours, share of wall time, expected events):",
            ]
            for cause, lost in sorted(d.lost_s.items(), key=lambda kv: -kv[1]):
                events = d.events.get(cause)
                count = f", {events:.1f} events" if events is not None else ""
                lines.append(f"    {cause}: {lost / 3600:.2f} h ({lost / d.wall_s:.2%}{count})")
            if d.monte_carlo:
                mc = d.monte_carlo
                lines.append(
                    f"  Monte Carlo ({mc['runs']:.0f} runs, seed {mc['seed']:.0f}): ETTR {mc['ettr_mean']:.4f}, "
                    f"time to train {mc['wall_mean_s'] / 86400:.2f} days (p10 {mc['wall_p10_s'] / 86400:.2f}, "
                    f"p90 {mc['wall_p90_s'] / 86400:.2f})"
                )
            lines.append(
                "  by phase (hours): " + ", ".join(f"{p} {s / 3600:.2f}" for p, s in d.lost_by_phase_s.items())
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def exposure_units(topology: Topology) -> tuple[dict[str, float], dict[str, float]]:
    """(units per component kind, cables per tier) of a design: GPUs, servers, NICs, processes (one per GPU),
    planned maintenance per host; cables are duplex links (two directed link ids each) of the NIC and fabric tiers."""
    gpus = float(topology.num_gpus)
    hosts = float(topology.num_servers)
    nics = float(sum(len(s.nics) for s in topology.servers))
    cables = {name: float(np.count_nonzero(topology.link_tier == tier)) / 2 for name, tier in CABLE_TIERS.items()}
    cables = {name: n for name, n in cables.items() if n > 0}
    units = {"gpu": gpus, "host": hosts, "nic": nics, "cable": sum(cables.values()), "process": gpus, "planned": hosts}
    return units, cables


def checkpoint_bytes(parameters: float) -> float:
    """A mixed-precision Adam checkpoint of ``parameters`` weights: 14 B each (bf16 weights, fp32 main weights,
    Adam m and v). Llama 3 405B: 405.9e9 x 14 = 5.68 TB."""
    return float(parameters) * CHECKPOINT_BYTES_PER_PARAM


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """A design's run before its wall time: failure-free time, checkpoint cycle, each cause's rate and cost by
    phase, and which causes stop the job (``drained`` for planned stops, None for degradations)."""

    productive_s: float
    tau_s: float
    stall_s: float
    write_s: float
    asynchronous: bool
    suggested_s: float
    mtbf_s: float
    rates: dict[str, float]
    costs: dict[str, dict[str, float]]
    detection: dict[str, str | None]


PHASES = ("detection", "abort", "restart", "checkpoint read", "re-creation", "lost work", "degraded")


def _plan(
    exposure: Exposure,
    *,
    tokens: float,
    causes: tuple[FailureCause, ...],
    reference_units: Mapping[str, float],
    reference_hours: float,
    recovery: Recovery,
    checkpoint: Checkpoint,
) -> _Plan:
    checks.positive_finite("tokens", tokens)
    checks.positive_finite("reference_hours", reference_hours)
    for kind in COMPONENTS:
        checks.positive_finite(f"reference_units.{kind}", reference_units.get(kind))
    productive = tokens / exposure.tokens_per_step * exposure.step_time_s
    nbytes = checkpoint.nbytes if checkpoint.nbytes is not None else exposure.checkpoint_bytes
    write_s = nbytes / checkpoint.write_bytes_per_s
    read_s = nbytes / checkpoint.read_bytes_per_s
    if checkpoint.mode == "blocking":
        stall = write_s
    else:
        copy = checkpoint.host_copy_bytes_per_s or exposure.host_copy_bytes_per_s
        stall = nbytes / exposure.ranks / copy
    init_s = recovery.init_s_per_rank * exposure.ranks
    # (cause label, rate per second, detection or None for a degradation, slower step for a degradation)
    entries: list[tuple[str, float, str | None, float]] = []
    for cause in causes:
        per_unit = cause.count / (reference_hours * 3600.0 * reference_units[cause.kind])
        if cause.kind != "cable":
            entries.append((cause.name, per_unit * exposure.units[cause.kind], cause.detection, 0.0))
            continue
        for tier, n in exposure.cables.items():
            slower = exposure.degraded_step_s.get(tier)
            label = f"{cause.name} [{tier}]"
            entries.append((label, per_unit * n, None if slower is not None else cause.detection, slower or 0.0))
    interrupting = sum(rate for _, rate, detection, _ in entries if detection is not None)
    mtbf = 1.0 / interrupting if interrupting > 0 else math.inf
    losing = sum(rate for _, rate, detection, _ in entries if detection not in (None, "drained"))
    suggested = math.sqrt(2.0 * stall / losing) if stall > 0 and losing > 0 else math.inf
    tau = checkpoint.interval_s if checkpoint.interval_s is not None else suggested
    if not math.isfinite(tau):
        tau = productive  # no failure and no stall: one checkpoint at the end
    cycle = tau + stall
    asynchronous = checkpoint.mode == "async"
    if asynchronous and write_s > cycle:
        raise checks.reject(
            "checkpoint.interval_s",
            tau,
            f"an interval whose cycle ({cycle:.3g} s) is at least the asynchronous "
            f"write ({write_s:.3g} s), else checkpoints pile up",
        )
    lost_work = cycle / 2 + (write_s if asynchronous else 0.0)
    costs: dict[str, dict[str, float]] = {}
    rates: dict[str, float] = {}
    detections: dict[str, str | None] = {}
    # a planned stop: the job checkpoints (one stall), stops and restarts on spares, losing no work
    drain = {
        "abort": recovery.abort_s,
        "restart": recovery.restart_s,
        "checkpoint read": read_s,
        "re-creation": init_s,
        "lost work": stall,
    }
    for label, rate, detection, slower in entries:
        if detection is None:  # degraded: a retransmission timeout's pause, then slower steps until repaired ...
            part = {"detection": recovery.retransmission_s}
            # (a degraded step no slower than the healthy one, as load-dependent routing may find, costs nothing)
            slowdown = recovery.repair_s * max(0.0, 1.0 - exposure.step_time_s / slower)
            if slowdown <= sum(drain.values()):
                part["degraded"] = slowdown
            else:  # ... or drained and restarted on a spare, whichever loses less
                part |= drain
                detection = "drained"
        elif detection == "drained":
            part = dict(drain)
        else:
            part = {
                "detection": recovery.detection_s(detection),
                "abort": recovery.abort_s,
                "restart": recovery.restart_s,
                "checkpoint read": read_s,
                "re-creation": init_s,
                "lost work": lost_work,
            }
        costs[label] = {p: part.get(p, 0.0) for p in PHASES}
        rates[label] = rate
        detections[label] = detection
    return _Plan(
        productive_s=productive,
        tau_s=tau,
        stall_s=stall,
        write_s=write_s,
        asynchronous=asynchronous,
        suggested_s=suggested,
        mtbf_s=mtbf,
        rates=rates,
        costs=costs,
        detection=detections,
    )


def goodput_of(
    exposure: Exposure,
    *,
    design: str = "design",
    tokens: float = LLAMA3_TOKENS,
    causes: tuple[FailureCause, ...] = LLAMA3_CAUSES,
    reference_units: Mapping[str, float] = LLAMA3_UNITS,
    reference_hours: float = LLAMA3_HOURS,
    recovery: Recovery = Recovery(),
    checkpoint: Checkpoint = Checkpoint(),
) -> DesignGoodput:
    """A design's run in closed form (module docstring): failure rates from ``causes`` over the reference run,
    scaled by the design's units; each interruption's cost by phase; the checkpoint cycle; the wall time."""
    plan = _plan(
        exposure,
        tokens=tokens,
        causes=causes,
        reference_units=reference_units,
        reference_hours=reference_hours,
        recovery=recovery,
        checkpoint=checkpoint,
    )
    rates, costs, tau, stall, productive = plan.rates, plan.costs, plan.tau_s, plan.stall_s, plan.productive_s
    burden = sum(rates[c] * sum(costs[c].values()) for c in costs)
    if burden >= 1:
        raise ValueError(
            f"failures: the failures cost {burden:.3g} s per second of wall time (>= 1): the run never finishes; "
            "expected lower rates or faster recovery"
        )
    wall = productive * ((tau + stall) / tau) / (1.0 - burden)
    lost = {c: wall * rates[c] * sum(costs[c].values()) for c in costs}
    stalls = productive * stall / tau
    lost["checkpoint stalls"] = stalls
    by_phase = {p: sum(wall * rates[c] * costs[c][p] for c in costs) for p in PHASES}
    by_phase["checkpoint stalls"] = stalls
    return DesignGoodput(
        design=design,
        step_time_s=exposure.step_time_s,
        degraded_step_s=dict(exposure.degraded_step_s),
        tokens=float(tokens),
        productive_s=productive,
        wall_s=wall,
        ettr=productive / wall,
        checkpoint_interval_s=tau,
        suggested_interval_s=plan.suggested_s,
        checkpoint_write_s=plan.write_s,
        checkpoint_stall_s=stall,
        mtbf_s=plan.mtbf_s,
        lost_s=lost,
        lost_by_phase_s=by_phase,
        events={c: wall * rates[c] for c in costs},
    )


def monte_carlo(
    exposure: Exposure,
    *,
    runs: int = 100,
    seed: int = 0,
    tokens: float = LLAMA3_TOKENS,
    causes: tuple[FailureCause, ...] = LLAMA3_CAUSES,
    reference_units: Mapping[str, float] = LLAMA3_UNITS,
    reference_hours: float = LLAMA3_HOURS,
    recovery: Recovery = Recovery(),
    checkpoint: Checkpoint = Checkpoint(),
) -> np.ndarray:
    """The wall time of ``runs`` seeded runs (seconds, one per run), failures drawn instead of expected.

    Failures arrive as a Poisson process over the wall time (rate: the sum of the causes'), each of one cause
    drawn by its rate. The run computes ``tau`` then stalls ``s`` per checkpoint (the last at the end, as the
    closed form counts them); a checkpoint is durable at the end of its stall (blocking) or ``C`` after it
    (async). An interrupting failure rolls the work back to the last durable checkpoint, exactly, and costs its
    fixed phases (all but the lost work); a planned stop costs its fixed phases and one stall and loses nothing;
    a degradation costs its pause and slowdown, work kept. A failure during a recovery adds its own cost after
    it (the closed form's first-order assumption is the mean of this process but for the lost work of such
    failures). Same inputs and seed, same times."""
    plan = _plan(
        exposure,
        tokens=tokens,
        causes=causes,
        reference_units=reference_units,
        reference_hours=reference_hours,
        recovery=recovery,
        checkpoint=checkpoint,
    )
    runs = checks.integer("runs", runs, low=1, high=100_000)
    rng = np.random.default_rng(checks.integer("seed", seed, low=0))
    labels = list(plan.rates)
    rates = np.array([plan.rates[c] for c in labels], dtype=float)
    total = float(rates.sum())
    cumulative = np.cumsum(rates)

    def draw() -> int:  # a cause, by its share of the rate
        return min(int(np.searchsorted(cumulative, rng.random() * total, side="right")), len(labels) - 1)

    fixed = [sum(v for k, v in plan.costs[c].items() if k != "lost work") for c in labels]
    planned = [plan.detection[c] == "drained" for c in labels]
    degrades = [plan.detection[c] is None for c in labels]
    tau, stall, goal = plan.tau_s, plan.stall_s, plan.productive_s
    delay = plan.write_s if plan.asynchronous else 0.0  # a checkpoint is durable this long after its stall ends
    cycle = tau + stall
    walls = np.empty(runs)
    for r in range(runs):
        t = done = 0.0
        durable = [(0.0, 0.0)]  # (work, wall time from which it is durable): the last durable and any pending
        next_failure = rng.exponential(1.0 / total) if total > 0 else math.inf
        while done < goal:
            # whole cycles before the next failure, but the last (its checkpoints may still be pending): at once
            whole = math.floor((goal - done) / tau) - 1
            if math.isfinite(next_failure):
                whole = min(whole, math.floor((next_failure - t) / cycle) - 1)
            if whole > 0:
                t += whole * cycle
                done += whole * tau
                durable = [(done - tau, t - cycle + delay), (done, t + delay)]
            work = min(tau, goal - done)  # the compute to the next checkpoint
            if next_failure >= t + work + stall:  # the segment completes
                t += work + stall
                done += work
                durable.append((done, t + delay))
                continue
            done_at = done + min(next_failure - t, work)  # a failure inside the segment
            t = next_failure
            k = draw()
            if degrades[k]:
                done = done_at
            elif planned[k]:  # drained: a checkpoint of the work done, then the stop
                done = done_at
                durable = [(done, t + stall)]
                t += stall
            else:  # back to the last checkpoint durable now; pending writes are lost
                durable = [(w, ready) for w, ready in durable if ready <= t][-1:]
                done = durable[0][0]
            t += fixed[k]
            next_failure += rng.exponential(1.0 / total)
            while next_failure < t:  # failures during the recovery: each adds its own cost after it
                k = draw()
                t += fixed[k] + (stall if planned[k] else 0.0)
                next_failure += rng.exponential(1.0 / total)
        walls[r] = t
    return walls


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFailure:
    """One cable failing ``at_s`` into a step: ``interrupted`` (the job stops: ``wasted_s`` = the step's time so
    far + NCCL's detection, the step's work lost with it) or survived (``step_time_s`` the step with the failure
    replayed, ``wasted_s`` its extra time + one retransmission timeout's pause)."""

    tier: str
    at_s: float
    healthy_step_s: float
    interrupted: bool
    step_time_s: float | None
    wasted_s: float


def failure_in_step(
    settings: Mapping[str, Any],
    *,
    tier: str,
    at_s: float,
    nic_failover: bool = False,
    recovery: Recovery = Recovery(),
) -> StepFailure:
    """A cable of ``tier`` (CABLE_TIERS: the one on GPU 0's way out) fails ``at_s`` seconds into the step that
    step ``settings`` describe (``scenario.step_settings``), replayed by the event engine (``SimConfig.link_events``:
    running flows move to the paths left). A NIC cable without ``nic_failover``, or a cable with no path left,
    stops the job instead: NCCL's QPs run out of retransmissions (``Recovery.transport_s``) and the communicator
    is aborted. A failure at 0 s is the step with the cable failed from the start (``failed_links``)."""
    from simulator.config import LinkEvent

    from .scenario import prepare_step, run_step

    checks.choice("tier", tier, tuple(CABLE_TIERS))
    at_s = checks.finite_nonnegative("at_s", at_s)
    setup = prepare_step(settings, environ={})
    healthy = run_step(setup).step_time_s
    chain = _cable_chain(setup.topology)
    if tier not in chain:
        raise checks.reject("tier", tier, f"a cable tier of this design: {', '.join(chain) or 'none'}")
    stopped = StepFailure(
        tier=tier,
        at_s=at_s,
        healthy_step_s=healthy,
        interrupted=True,
        step_time_s=None,
        wasted_s=min(at_s, healthy) + recovery.transport_s,
    )
    if at_s >= healthy:
        raise checks.reject("at_s", at_s, f"a time inside the step, < {healthy:.6g} s")
    if tier == "nic" and not nic_failover:
        return stopped
    events = tuple(LinkEvent(time_s=at_s, link=link, scale=0.0) for link in chain[tier])
    try:
        step = run_step(setup, config=dataclasses.replace(setup.config, link_events=events)).step_time_s
    except Unreachable:
        return stopped
    return StepFailure(
        tier=tier,
        at_s=at_s,
        healthy_step_s=healthy,
        interrupted=False,
        step_time_s=step,
        wasted_s=step - healthy + recovery.retransmission_s,
    )


# a goodput file's own tables and fields (the rest of its top level: step and fabric fields every design shares)
SPEC_TABLES = ("designs", "workload", "checkpoint", "recovery", "failures", "reference", "monte_carlo")
SPEC_FIELDS = ("tokens",)
DESIGN_FIELDS = ("nic_failover",)  # a design's own field beyond the fabric's


def _table(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = spec.get(name, {})
    if not isinstance(value, Mapping):
        raise checks.reject(name, value, f"a table ([{name}])")
    return value


def _built(name: str, kind: type, fields: Mapping[str, Any]) -> Any:
    """``kind(**fields)`` with an unknown field refused by name."""
    known = {f.name for f in dataclasses.fields(kind)}
    for key in fields:
        if key not in known:
            raise checks.reject(f"{name}.{key}", fields[key], f"a field of [{name}]: one of {', '.join(sorted(known))}")
    return kind(**fields)


def _causes(table: Mapping[str, Any]) -> tuple[FailureCause, ...]:
    """LLAMA3_CAUSES with each ``[failures.NAME]`` table replacing the cause of that name (a new name adds one)."""
    causes = {c.name: c for c in LLAMA3_CAUSES}
    for name, fields in table.items():
        if not isinstance(fields, Mapping):
            raise checks.reject(f"failures.{name}", fields, "a table (kind, count, detection)")
        base = causes.get(name)
        given = {"kind": base.kind, "count": base.count, "detection": base.detection} if base else {}
        causes[name] = _built(f"failures.{name}", FailureCause, {"name": name} | given | dict(fields))
    return tuple(causes.values())


def _cable_chain(topology: Topology) -> dict[str, tuple[int, ...]]:
    """One cable per tier on GPU 0's way out (both directions' link ids): its NIC's cable, the first uplink of
    that switch, and the first link of the next tier from the switch it reaches."""
    src, dst, tiers = topology.link_src, topology.link_dst, topology.link_tier
    server = topology.servers[0]
    nic = server.nics[server.nic_of_gpu[0]] if server.nics and server.nic_of_gpu[0] >= 0 else None
    out: dict[str, tuple[int, ...]] = {}
    if nic is None or nic not in topology.nic_leaf_link:
        return out
    link = topology.nic_leaf_link[nic]
    for name, tier in CABLE_TIERS.items():
        if tier != LinkTier.NIC:
            candidates = np.flatnonzero((src == dst[link]) & (tiers == tier))
            if not len(candidates):
                break
            link = int(candidates[0])
        back = np.flatnonzero((src == dst[link]) & (dst == src[link]) & (tiers == tier))
        out[name] = (int(link),) + ((int(back[0]),) if len(back) else ())
    return out


def _exposure(
    setup: Any, nic_failover: bool, progress: Callable[[str], None] | None, name: str, approximate: list[str]
) -> Exposure:
    """Simulate a design's healthy step (``setup``: ``scenario.prepare_step``'s) and its step with one cable of
    each tier failed. Only their step times are used, so an approximate reduction's bound is not run (its second
    simulation); the runs that were approximate are appended to ``approximate``."""
    from .scenario import run_step

    say = progress or (lambda text: None)
    say(f"{name}: healthy step")
    healthy = run_step(setup, bound=False)
    if healthy.approximate:
        approximate.append(f"{name}, healthy")
    units, cables = exposure_units(setup.topology)
    degraded: dict[str, float | None] = {}
    chain = _cable_chain(setup.topology)
    for tier in cables:
        if tier not in chain or (tier == "nic" and not nic_failover):
            degraded[tier] = None  # no NIC failover: the QP's error ends the communicator
            continue
        say(f"{name}: step with a {tier} cable failed")
        config = dataclasses.replace(setup.config, failed_links=frozenset(chain[tier]))
        try:
            step = run_step(setup, config=config, bound=False)
        except Unreachable:
            degraded[tier] = None  # no path left: the job stops
            continue
        degraded[tier] = step.step_time_s
        if step.approximate:
            approximate.append(f"{name}, {tier} cable failed")
    pcie = setup.topology.link_capacity_bytes_per_s[setup.topology.link_tier == LinkTier.PCIE]
    layout = setup.parallelism
    assert layout.seq_len is not None  # a step's layout always has one (step_settings' default)
    return Exposure(
        units=units,
        cables=cables,
        ranks=setup.topology.num_gpus,
        step_time_s=healthy.step_time_s,
        tokens_per_step=float(layout.global_batch * layout.seq_len),
        degraded_step_s=degraded,
        checkpoint_bytes=checkpoint_bytes(setup.model.total_parameters()),
        host_copy_bytes_per_s=float(pcie.max()) if len(pcie) else math.inf,
    )


def goodput(
    spec: Mapping[str, Any] | str | os.PathLike | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> GoodputResult:
    """Run a goodput study: a spec (dict), a goodput TOML file, or None for :data:`DEFAULT_GOODPUT`.

    The file: shared step and fabric fields at the top level (system, nodes, fabric, ...) and ``tokens`` (the
    run's length, default Llama 3 405B's 15.6T); ``[designs.NAME]`` fabric fields and ``nic_failover`` (a NIC
    cable's failure degrades instead of stopping the job); ``[workload]`` step fields; ``[checkpoint]``
    (Checkpoint's fields), ``[recovery]`` (Recovery's), ``[failures.NAME]`` (kind, count, detection: replacing
    or adding to LLAMA3_CAUSES), ``[reference]`` (``hours`` and ``units.KIND``: the run the counts come from),
    ``[monte_carlo]`` (``runs``, default 0: none, and ``seed``: the seeded draws of :func:`monte_carlo` beside
    the closed form).
    Every table is checked before any step runs."""
    from .scenario import FABRIC_DEFAULTS, NETWORK_DEFAULTS, prepare_step, step_settings
    from .sweep import load_grid

    if spec is None or isinstance(spec, (str, os.PathLike)):
        spec = load_grid(DEFAULT_GOODPUT if spec is None else spec)
    if not isinstance(spec, Mapping):
        raise checks.reject("goodput", spec, "a table of fields")
    designs = spec.get("designs")
    if not isinstance(designs, Mapping) or not designs or any(not isinstance(v, Mapping) for v in designs.values()):
        raise checks.reject("designs", designs, "a table of named tables ([designs.NAME]), at least one")
    workload = _table(spec, "workload")
    fabric = set(FABRIC_DEFAULTS) | set(NETWORK_DEFAULTS) | {"system"}
    for key in workload:
        if str(key).replace("-", "_") in fabric:
            raise checks.reject(
                f"workload.{key}", workload[key], "no fabric field (the designs and the top level set them)"
            )
    checkpoint = _built("checkpoint", Checkpoint, _table(spec, "checkpoint"))
    recovery = _built("recovery", Recovery, _table(spec, "recovery"))
    causes = _causes(_table(spec, "failures"))
    reference = _table(spec, "reference")
    for key in reference:
        if key not in ("hours", "units"):
            raise checks.reject(f"reference.{key}", reference[key], "a field of [reference]: hours or units")
    hours = checks.positive_finite("reference.hours", reference.get("hours", LLAMA3_HOURS))
    units_given = reference.get("units", {})
    if not isinstance(units_given, Mapping):
        raise checks.reject("reference.units", units_given, f"a table of counts for {', '.join(COMPONENTS)}")
    for kind in units_given:
        checks.choice("reference.units", kind, COMPONENTS)
    reference_units = {
        k: checks.positive_finite(f"reference.units.{k}", v) for k, v in (LLAMA3_UNITS | dict(units_given)).items()
    }
    tokens = checks.positive_finite("tokens", spec.get("tokens", LLAMA3_TOKENS))
    draws = _table(spec, "monte_carlo")
    for key in draws:
        if key not in ("runs", "seed"):
            raise checks.reject(f"monte_carlo.{key}", draws[key], "a field of [monte_carlo]: runs or seed")
    runs = checks.integer("monte_carlo.runs", draws.get("runs", 0), low=0, high=100_000)
    seed = checks.integer("monte_carlo.seed", draws.get("seed", 0), low=0)
    shared = {k: v for k, v in spec.items() if k not in SPEC_TABLES and k not in SPEC_FIELDS}
    plans = []
    for name, fields in designs.items():
        own = {str(k).replace("-", "_"): v for k, v in fields.items()}
        for key in own:
            if key not in fabric and key not in DESIGN_FIELDS:
                raise checks.reject(f"designs.{name}.{key}", own[key], f"a fabric field or {', '.join(DESIGN_FIELDS)}")
        failover = checks.flag(f"designs.{name}.nic_failover", own.pop("nic_failover", False))
        try:  # every design's step built (model, layout, fabric) before any runs
            setup = prepare_step(step_settings(shared | dict(workload) | own), environ={})
        except ValueError as exc:
            raise ValueError(f"designs.{name}: {exc}") from None
        plans.append((str(name), setup, failover))
    results = []
    approximate: list[str] = []
    for name, setup, failover in plans:
        exposure = _exposure(setup, failover, progress, name, approximate)
        inputs = dict(
            tokens=tokens,
            causes=causes,
            reference_units=reference_units,
            reference_hours=hours,
            recovery=recovery,
            checkpoint=checkpoint,
        )
        run = goodput_of(exposure, design=name, **inputs)
        if runs:
            walls = monte_carlo(exposure, runs=runs, seed=seed, **inputs)
            drawn = {
                "runs": float(runs),
                "seed": float(seed),
                "wall_mean_s": float(walls.mean()),
                "wall_p10_s": float(np.percentile(walls, 10)),
                "wall_p90_s": float(np.percentile(walls, 90)),
                "ettr_mean": run.productive_s / float(walls.mean()),
            }
            run = dataclasses.replace(run, monte_carlo=drawn)
        results.append(run)
    notes = (
        "rates: the Llama 3 paper's 54-day snapshot (466 interruptions on 16,384 H100) per unit of each component "
        "kind, times each design's units; cable failures charged per cable of each tier",
        f"detection {recovery.transport_s:.1f} s (IB retries) or {recovery.watchdog_s:.0f} s (watchdog); restart "
        f"{recovery.restart_s:.0f} s; re-creation {recovery.init_s_per_rank * 1e3:.2f} ms per rank; cable repair "
        f"{recovery.repair_s / 3600:.1f} h (see docs/models.md, Failures and goodput)",
    ) + (
        (
            "APPROXIMATE steps (a reduction that is not exact for them, its bound not run: `fabricsim step` on the "
            "design gives it): " + "; ".join(approximate),
        )
        if approximate
        else ()
    )
    return GoodputResult(designs=tuple(results), notes=notes)
