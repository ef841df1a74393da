"""Stragglers and jitter: a run of N training steps with slowed GPUs and noisy hosts, its step-time distribution,
and the ranks and links on its critical path.

Three mechanisms perturb each step's resolved programs (``StepOptions.perturb``) before they run; a link's
degradation is the existing ``SimConfig.link_events`` (a scale on its capacity from a time on):

* **per-GPU compute slowdown.** Every compute task of rank r lasts ``f_r`` times its compute-model duration::

      f_r(k) = s_r x exp(sigma Z_r(k)),   Z_r(k) ~ N(0, 1) drawn per rank r and step k

  ``s_r``: a fixed factor (``rank=R:S``; 1 for the ranks not named), for a GPU throttling (power or thermal
  cap) or a slower part; ``sigma`` (``lognormal:SIGMA``; 0: none): a per-GPU, per-step lognormal spread with
  median 1, so half the GPUs run faster than the compute model's nominal one in a step and half slower.
  Sinha et al., "Not All GPUs Are Created Equal" (SC22, arXiv:2208.11035), measured an 8 % average (22 % at
  most) spread of the same kernel's time across the V100s of production clusters, outliers 1.5 x slower than the
  median: sigma of a few hundredths, a handful of named outliers. The spread's shape and whether it changes from
  step to step are ASSUMPTIONS: lognormal keeps every factor positive and multiplies; a fresh draw per step
  models power-management noise, not a GPU that is always slow (a fixed factor is that).
* **host jitter per kernel launch.** Each compute task that runs (duration > 0) starts ``J`` later::

      d' = f_r(k) d + J,   J ~ Exponential(mean = jitter_s), drawn per task, rank and step

  for the CPU thread that launches the kernels being preempted (OS noise, Python's garbage collector, the data
  loader). Beckman et al. ("The influence of operating systems on the performance of collective operations at
  extreme scale", CLUSTER 2006) and Hoefler, Schneider and Lumsdaine ("Characterizing the influence of system
  noise on large-scale applications by simulation", SC10) showed that collectives run at the pace of the largest
  delay among their members; neither gives a per-launch distribution for GPU training, so the mean is an
  ASSUMPTION the user sets (default 0 s: none) and the exponential (memoryless arrivals of short
  interruptions) the assumed shape. A compute task is one layer's pass of one micro-batch (``granularity``
  "layer"), or a model chunk's (``"chunk"``): one launch delay per task, not per CUDA kernel.

Each draw comes from its own seeded stream (``numpy.random.default_rng([seed, step, what, rank])``), so a rank's
draws do not depend on the world size or the other ranks, and equal inputs and seed give bit-identical runs.
Off (no factor, sigma 0, jitter 0) the programs are not touched: the step is today's.

What this captures: a collective starts when its last member arrives (``simulator.engine``), so a slowed rank
delays every group it belongs to and, through them, the whole step. With gradients reduced after the backward
(no overlap) and one GPU slowed by s in a data-parallel group of n ranks that each compute C, the step is
``s C + A`` (A: the reduction, which starts when the slow GPU arrives); with gradients reduced bucket by bucket
during the backward, each bucket starts when the slow GPU has produced it, and if every bucket ends before the
slow GPU's next one is ready the step is ``s C + A_last`` (the last bucket's reduction alone is exposed).
What it ignores: a slowed GPU's communication kernels (NCCL's SMs) run at full speed; memory-bound and
compute-bound kernels slow by one factor; jitter delays the GPU's kernels only, not its collectives' launches;
a slow GPU's extra power does not slow its neighbours.

**Symmetry.** The automatic reductions (``simulator.studies.reductions``: symmetric replicas, context ranks,
tensor rank 0's transfers, steady-state extrapolation) assume ranks that run alike; a straggler breaks that (a
gradient reduction joins every replica, so one slow replica delays all). With stragglers or jitter the step is
simulated in full (``exact=True``) and the notes name the reductions the same step would have used without them;
forcing one of them on is refused.

**Critical path** (:func:`critical_path`): from the task that ends last, walk back through what each task waited
for: a compute task's predecessor is the task whose end is its start (the previous task of its stream, or one of
its ``after`` tasks: the start is the largest of those ends, so one equals it exactly); a collective's is its
slowest member, the one whose arrival is the collective's start, then that member's predecessor. Ties go to the
rank the walk is on, then to the lowest rank; among a task's predecessors, to the previous task of its stream.
Each compute task on the path counts for its rank; each collective counts for its bottleneck link, the link whose
share of the collective's wire bytes takes longest at line rate (bytes / capacity, ``api.collective_link_bytes``,
the capacity scaled by the link events in effect at the collective's start: the busiest link, not a rate the flow
model measured; ties to the lowest link id), and for the member that released it.

Worked number: 8 data-parallel ranks of one layer, 4 micro-batches of 10 ms forward and 20 ms backward, C =
4 x 30 ms = 120 ms; GPU 3 slowed by 1.3 computes 156 ms, so a step with a 2 ms reduction after the backward takes
156 + 2 = 158 ms instead of 122 ms, and GPU 3 is on the critical path for its 156 ms.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from topologies.checks import finite, instance, integer, is_int, reject
from topologies.routing import RouteCache
from topologies.topology import Topology
from workloads.model import ModelSpec
from workloads.parallelism import ParallelismSpec
from workloads.tasks import CommTask, ComputeTask, Task, Workload
from workloads.training import TrainingWorkload

from ..api import collective_link_bytes
from ..config import SimConfig
from ..placement import Placement
from . import reductions
from .scenario import StepSetup
from .training import (
    StepOptions,
    StepPhase,
    StepResult,
    _build_topology,
    _compute_model_of,
    _gpu_of,
    _timed,
    simulate_step,
)

__all__ = (
    "Stragglers",
    "ComputeNoise",
    "PathPart",
    "StepsResult",
    "critical_path",
    "simulate_steps",
    "run_steps",
    "STRAGGLER_SPEC",
)

# the inputs' ranges: a GPU more than MAX_FACTOR x slower is a failure, not a straggler; a lognormal sigma of 1
# already puts one GPU in a thousand 22 x slower (e^3.1); a launch delay averaging a second is a stalled host
MAX_FACTOR, MAX_SIGMA, MAX_JITTER_S = 1000.0, 1.0, 1.0
# what one --straggler SPEC may be (the error message's "expected")
STRAGGLER_SPEC = (
    f"rank=R:S (GPU R's compute S times longer, 0 < S <= {MAX_FACTOR:g}, e.g. rank=17:1.3) or lognormal:SIGMA "
    f"(0 <= SIGMA <= {MAX_SIGMA:g})"
)
# StepsResult.frame's views
STEPS_VIEWS = ("summary", "steps", "ranks", "links", "notes")
# the draws' streams (numpy.random.default_rng([seed, step, what, rank]))
_FACTOR_STREAM, _JITTER_STREAM = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Stragglers:
    """What slows the step's GPUs (module docstring): ``factors``, (rank, s) pairs, GPU ``rank``'s compute s
    times its duration (s > 0; distinct ranks); ``sigma``, the lognormal per-GPU per-step spread (>= 0);
    ``jitter_s``, the mean launch delay added to each compute task (>= 0)."""

    factors: tuple[tuple[int, float], ...] = ()
    sigma: float = 0.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        expected = "a tuple of (rank >= 0, factor > 0) pairs, each rank once"
        if not isinstance(self.factors, tuple) or any(
            not isinstance(pair, tuple) or len(pair) != 2 for pair in self.factors
        ):
            raise reject("Stragglers.factors", self.factors, expected)
        pairs = []
        for rank, factor in self.factors:
            rank = integer("Stragglers.factors rank", rank, low=0)
            factor = finite("Stragglers.factors factor", factor, low=0.0, low_open=True, high=MAX_FACTOR)
            pairs.append((rank, factor))
        ranks = [r for r, _ in pairs]
        if len(set(ranks)) != len(ranks):
            twice = next(r for r in ranks if ranks.count(r) > 1)
            raise reject("Stragglers.factors", f"rank {twice} twice", expected)
        object.__setattr__(self, "factors", tuple(pairs))
        object.__setattr__(self, "sigma", finite("Stragglers.sigma", self.sigma, low=0.0, high=MAX_SIGMA))
        object.__setattr__(
            self,
            "jitter_s",
            finite(
                "Stragglers.jitter_s", self.jitter_s, low=0.0, high=MAX_JITTER_S, expected=f"0 to {MAX_JITTER_S:g} s"
            ),
        )

    @classmethod
    def parse(cls, specs: Sequence[str] = (), *, jitter_us: float = 0.0) -> Stragglers:
        """From ``fabricsim step --straggler SPEC`` texts (``STRAGGLER_SPEC``) and ``--jitter-us``.

        >>> Stragglers.parse(["rank=3:1.5", "lognormal:0.05"], jitter_us=2)
        Stragglers(factors=((3, 1.5),), sigma=0.05, jitter_s=2e-06)
        """
        factors: list[tuple[int, float]] = []
        sigma = None
        for text in specs:
            if not isinstance(text, str):
                raise reject("straggler", text, STRAGGLER_SPEC)
            kind, sep, value = text.strip().partition(":")
            try:
                if kind.startswith("rank=") and sep:
                    rank, factor = int(kind[len("rank=") :]), float(value)
                    if rank < 0 or not 0 < factor <= MAX_FACTOR:  # NaN fails it
                        raise ValueError
                    factors.append((rank, factor))
                elif kind == "lognormal" and sep and sigma is None:
                    sigma = float(value)
                    if not 0 <= sigma <= MAX_SIGMA:  # NaN fails it
                        raise ValueError
                else:
                    raise ValueError
            except ValueError:
                raise reject("straggler", text, STRAGGLER_SPEC + ", lognormal at most once") from None
        ranks = [r for r, _ in factors]
        if len(set(ranks)) != len(ranks):
            twice = next(r for r in ranks if ranks.count(r) > 1)
            raise reject("straggler", f"rank={twice} twice", "each rank named once")
        jitter = finite("jitter_us", jitter_us, low=0.0, high=MAX_JITTER_S * 1e6)
        return cls(factors=tuple(factors), sigma=0.0 if sigma is None else sigma, jitter_s=jitter * 1e-6)

    @property
    def on(self) -> bool:
        """Whether anything perturbs the step (a factor, even 1, a spread or a jitter)."""
        return bool(self.factors) or self.sigma > 0 or self.jitter_s > 0

    def check(self, world: int) -> Stragglers:
        """These stragglers if every rank they name is one of the step's ``world`` ranks."""
        for rank, _ in self.factors:
            if rank >= world:
                raise reject("straggler", f"rank={rank}", f"a rank from 0 to {world - 1} (the step's ranks)")
        return self

    def describe(self) -> str:
        parts = [f"GPU {r} x {s:g}" for r, s in self.factors]
        parts += [f"lognormal sigma {self.sigma:g} per GPU and step"] if self.sigma > 0 else []
        parts += [f"launch jitter mean {self.jitter_s * 1e6:g} us per compute task"] if self.jitter_s > 0 else []
        return "; ".join(parts) if parts else "none"

    def factors_of(self, world: int, *, step: int, seed: int) -> np.ndarray:
        """Each rank's compute factor f_r in step ``step`` (module docstring)."""
        f = np.ones(world)
        if self.sigma > 0:
            f = np.exp(self.sigma * _rng(seed, step, _FACTOR_STREAM).standard_normal(world))
        for rank, factor in self.factors:
            f[rank] *= factor
        return f


def _rng(seed: int, step: int, what: int, rank: int | None = None) -> np.random.Generator:
    """The seeded stream of one kind of draw (module docstring); any integer seed (taken modulo 2^64)."""
    key = [seed % 2**64, step, what] + ([] if rank is None else [rank])
    return np.random.default_rng(key)


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeNoise:
    """``StepOptions.perturb`` for step ``step``: every compute task of rank r lasts f_r d + J (module docstring).
    Ranks whose factor is 1 and that draw no jitter keep their (shared) program objects."""

    stragglers: Stragglers
    step: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        instance("ComputeNoise.stragglers", self.stragglers, Stragglers, "a Stragglers")
        integer("ComputeNoise.step", self.step, low=0)
        integer("ComputeNoise.seed", self.seed)

    def __call__(self, training: TrainingWorkload) -> TrainingWorkload:
        w = training.workload
        world = training.parallelism.world_size
        factors = self.stragglers.factors_of(world, step=self.step, seed=self.seed)
        jitter = self.stragglers.jitter_s
        scaled: dict[tuple[int, float], tuple[Task, ...]] = {}  # (program, factor) -> program, without jitter
        programs = list(w.programs)
        for r, program in enumerate(w.programs):
            g = training.ranks[r]
            factor = float(factors[g])
            if not program or (factor == 1.0 and jitter == 0):
                continue
            if jitter == 0:
                key = (id(program), factor)
                if key not in scaled:
                    scaled[key] = _scaled(program, factor, None)
                programs[r] = scaled[key]
                continue
            running = sum(1 for t in program if isinstance(t, ComputeTask) and t.duration_s)
            delays = _rng(self.seed, self.step, _JITTER_STREAM, g).exponential(jitter, running)
            programs[r] = _scaled(program, factor, delays)
        workload = Workload(nranks=w.nranks, collectives=w.collectives, programs=tuple(programs), passive=w.passive)
        return dataclasses.replace(training, workload=workload)


def _scaled(program: tuple[Task, ...], factor: float, delays: np.ndarray | None) -> tuple[Task, ...]:
    out: list[Task] = []
    k = 0
    for task in program:
        if isinstance(task, ComputeTask) and task.duration_s:
            duration = task.duration_s * factor
            if delays is not None:
                duration += float(delays[k])
                k += 1
            task = dataclasses.replace(task, duration_s=duration)
        out.append(task)
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# critical path
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PathPart:
    """One task on a step's critical path: ``rank``'s compute task (``collective`` -1) or collective
    ``collective`` (``rank``: the member that arrived last and released it), lasting ``time_s``."""

    rank: int
    collective: int
    time_s: float


def critical_path(phase: StepPhase) -> list[PathPart]:
    """The tasks on ``phase``'s critical path, from the last back to the first (module docstring); ranks are the
    step's global ranks (``TrainingWorkload.ranks``)."""
    training = phase.training
    w = training.workload
    tl = phase.timeline
    if not any(len(e) for e in tl.end_s):
        return []
    ends = tl.rank_end_s
    r = int(np.argmax(ends))
    row = tl.end_s[r]
    pos = int(np.flatnonzero(row == row.max())[-1])  # the last of the tasks ending last
    previous: dict[int, list[int]] = {}  # program id -> previous task of each task's stream (-1: first)
    position: dict[int, dict[int, int]] = {}  # program id -> collective index -> its task's position

    def prev_of(program: tuple[Task, ...]) -> list[int]:
        out = previous.get(id(program))
        if out is None:
            last: dict[int, int] = {}
            out = []
            for k, task in enumerate(program):
                out.append(last.get(task.stream, -1))
                last[task.stream] = k
            previous[id(program)] = out
        return out

    def place_of(program: tuple[Task, ...]) -> dict[int, int]:
        out = position.get(id(program))
        if out is None:
            out = position[id(program)] = {t.index: k for k, t in enumerate(program) if isinstance(t, CommTask)}
        return out

    parts: list[PathPart] = []
    for _ in range(sum(map(len, w.programs)) + 1):  # every task at most once
        program = w.programs[r]
        task = program[pos]
        if isinstance(task, ComputeTask):
            t = float(tl.start_s[r][pos])
            parts.append(PathPart(rank=training.ranks[r], collective=-1, time_s=float(tl.end_s[r][pos]) - t))
        else:
            i = task.index
            t = float(tl.collective_start_s[i])
            if float(tl.arrival_s[r][pos]) != t:  # another member arrived last: the lowest rank among them
                for m in w.collectives[i].group:
                    if m in w.passive:
                        continue
                    k = place_of(w.programs[m])[i]
                    if float(tl.arrival_s[m][k]) == t:
                        r, pos = m, k
                        break
            program = w.programs[r]
            task = program[pos]
            parts.append(PathPart(rank=training.ranks[r], collective=i, time_s=float(tl.collective_end_s[i]) - t))
        if t <= 0.0:
            break
        before = [prev_of(program)[pos], *task.after]
        found = [k for k in before if k >= 0 and float(tl.end_s[r][k]) == t]
        if not found:
            break
        pos = found[0]
    return parts


def _bottleneck_link(
    phase: StepPhase,
    index: int,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    cache: dict,
) -> int:
    """The link whose share of collective ``index``'s wire bytes takes longest at line rate (-1: none), each link's
    capacity scaled as the link events in effect when the collective starts say (``SimConfig.link_events``: the
    last one at or before it; a failed link is left out, its flows having moved to other paths)."""
    w = phase.training.workload
    collective = w.collectives[index]
    start = float(phase.timeline.collective_start_s[index])
    scales: dict[int, float] = {}
    for event in sorted(config.link_events, key=lambda e: e.time_s):
        if event.time_s <= start:
            scales[event.link] = event.scale
    key = (collective, tuple(placement.rank_gpu[r] for r in collective.group), tuple(sorted(scales.items())))
    link = cache.get(key)
    if link is None:
        counts = [0] * len(w.collectives)
        counts[index] = 1
        moved = collective_link_bytes(topology, w, counts, placement, config, route_cache=route_cache)
        capacity = topology.link_capacity_bytes_per_s.copy()
        for lid, scale in scales.items():
            capacity[lid] *= scale
            if scale == 0:
                moved[lid] = 0.0
        busy = np.divide(moved, capacity, out=np.zeros_like(moved), where=capacity > 0)
        link = cache[key] = int(np.argmax(busy)) if busy.size and busy.max() > 0 else -1
    return link


# --------------------------------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsResult:
    """N steps of one layout under ``stragglers`` (:func:`simulate_steps`).

    ``step_time_s`` (and ``compute_s``, ``exposed_comm_s``): one value per step; ``p50_s``, ``p99_s``: their
    percentiles (linear interpolation between the sorted steps, numpy's default: with fewer than 100 steps p99
    lies between the two slowest); ``ranks``: per rank on the critical path, the steps it was on it, its compute
    seconds on it per step (mean over the N steps) and the collectives on it that it released (the last member to
    arrive; all N steps), the most seconds first; ``links``: per bottleneck link of the critical path's collectives,
    the steps, the collectives' seconds per step and their count. ``first``: the first step's StepResult."""

    model: str
    topology_name: str
    gpus: int
    steps: int
    seed: int
    stragglers: Stragglers
    step_time_s: tuple[float, ...]
    compute_s: tuple[float, ...]
    exposed_comm_s: tuple[float, ...]
    p50_s: float
    p99_s: float
    mean_s: float
    min_s: float
    max_s: float
    ranks: tuple[Mapping[str, Any], ...]
    links: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    first: StepResult = field(repr=False)

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "topology": self.topology_name,
            "gpus": self.gpus,
            "steps": self.steps,
            "seed": self.seed,
            "stragglers": self.stragglers.describe(),
            "p50_s": self.p50_s,
            "p99_s": self.p99_s,
            "mean_s": self.mean_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
        }

    def frame(self, view: str = "summary") -> Any:
        """A flat pandas DataFrame: ``"summary"`` (one row: the distribution), ``"steps"`` (one row per step:
        step, step_time_s, compute_s, exposed_comm_s), ``"ranks"`` and ``"links"`` (the critical path's
        attribution, columns as :meth:`as_dict`), ``"notes"`` (kind "warning" or "note", text)."""
        import pandas as pd

        if view == "summary":
            return pd.DataFrame([self.summary()])
        if view == "steps":
            return pd.DataFrame(
                {
                    "step": np.arange(self.steps),
                    "step_time_s": self.step_time_s,
                    "compute_s": self.compute_s,
                    "exposed_comm_s": self.exposed_comm_s,
                }
            )
        if view == "ranks":
            return pd.DataFrame([dict(r) for r in self.ranks], columns=list(RANK_COLUMNS))
        if view == "links":
            return pd.DataFrame([dict(r) for r in self.links], columns=list(LINK_COLUMNS))
        if view == "notes":
            rows = [{"kind": "warning", "text": t} for t in self.warnings]
            rows += [{"kind": "note", "text": t} for t in self.notes]
            return pd.DataFrame(rows, columns=["kind", "text"])
        raise reject("view", view, f"one of {', '.join(map(repr, STEPS_VIEWS))}")

    def as_dict(self) -> dict:
        return self.summary() | {
            "step_time_s": list(self.step_time_s),
            "compute_s": list(self.compute_s),
            "exposed_comm_s": list(self.exposed_comm_s),
            "critical_ranks": [dict(r) for r in self.ranks],
            "critical_links": [dict(r) for r in self.links],
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }

    def to_json(self, **kw) -> str:
        return json.dumps(self.as_dict(), **kw)


RANK_COLUMNS = ("rank", "steps", "critical_s", "share", "released")
LINK_COLUMNS = ("link", "name", "steps", "critical_s", "share", "collectives")


# --------------------------------------------------------------------------------------------------
# simulate_steps
# --------------------------------------------------------------------------------------------------


def simulate_steps(
    model: ModelSpec,
    parallelism: ParallelismSpec,
    *,
    system: str | Topology = "dgx-h100",
    options: StepOptions | None = None,
    steps: int = 1,
    stragglers: Stragglers | None = None,
    seed: int = 0,
) -> StepsResult:
    """``steps`` training steps of ``model`` laid out as ``parallelism`` on ``system`` as ``options`` say
    (``simulate_step``'s arguments), each perturbed by ``stragglers`` with draws from ``seed`` (module docstring).
    Without stragglers every step is the same and is simulated once (with ``steady_state_microbatches``, the
    critical path is that of the longer of the two runs the step is extrapolated from)."""
    o = StepOptions() if options is None else options
    instance("options", o, StepOptions, "a StepOptions or None")
    instance("model", model, ModelSpec, "a workloads.model.ModelSpec")
    instance("parallelism", parallelism, ParallelismSpec, "a workloads.parallelism.ParallelismSpec")
    steps = integer("steps", steps, low=1)
    instance("stragglers", stragglers, (Stragglers, type(None)), "a Stragglers or None")
    if not is_int(seed):
        raise reject("seed", seed, "an integer")
    s = Stragglers() if stragglers is None else stragglers
    p = parallelism.check(model)
    world = p.world_size
    s.check(world)
    if o.perturb is not None:
        raise reject("StepOptions.perturb", o.perturb, "None (simulate_steps perturbs the steps itself)")
    if s.on:
        why = "None or False with stragglers or jitter (they make the ranks unalike)"
        for name in ("symmetric_replicas", "symmetric_context", "tensor_rank0_p2p"):
            if getattr(o, name):
                raise reject(f"StepOptions.{name}", True, why)
        if o.steady_state_microbatches is not None:
            raise reject(
                "StepOptions.steady_state_microbatches",
                o.steady_state_microbatches,
                "None with stragglers or jitter (they make the ranks unalike)",
            )
    if isinstance(system, Topology):
        topology = system
    elif isinstance(system, str):
        topology = _build_topology(system, o.nodes, world, o.wiring)
    else:
        raise reject("system", system, "a system preset name or a topologies.topology.Topology")
    if topology.num_gpus < world:
        raise ValueError(f"parallelism: needs {world} GPUs but topology {topology.name!r} has {topology.num_gpus}")
    config = o.config or SimConfig()
    route_cache = RouteCache() if o.route_cache is None else o.route_cache
    placement = o.placement or Placement.block(topology, nranks=world)
    compute = o.compute
    if compute is None:
        gpu = o.gpu or _gpu_of(topology)
        compute = _timed(model, p, o, gpu, _compute_model_of(o, gpu))
    # the kernel options are spent on ``compute`` (StepOptions refuses them beside given times)
    base = dataclasses.replace(
        o, compute=compute, route_cache=route_cache, attention_kernel=None, overlap_slowdown=None
    )
    notes: list[str] = []
    if s.on and not o.exact and not config.storage:  # storage streams alone make every rank simulated
        used = reductions.plan(
            p,
            topology,
            placement,
            config,
            route_cache,
            symmetric_replicas=o.symmetric_replicas,
            tensor_rank0_p2p=o.tensor_rank0_p2p,
            exact=False,
            symmetric_context=o.symmetric_context,
            tied_embeddings=model.tied_embeddings,
        )
        dropped = [name for name, on in _REDUCTIONS.items() if on(used)]
        if dropped:
            notes.append(
                f"reductions not used: {', '.join(dropped)} (stragglers and jitter make the ranks unalike, so "
                "every rank is simulated)"
            )
    elif not s.on and steps > 1:
        notes.append(f"no straggler or jitter: the {steps} steps are alike, simulated once")
    results: list[StepResult] = []
    link_cache: dict = {}
    rank_rows: dict[int, dict[str, Any]] = {}
    link_rows: dict[int, dict[str, Any]] = {}
    for k in range(steps if s.on else 1):
        if o.progress is not None and steps > 1:
            o.progress(f"step {k + 1} of {steps}")
        options_k = (
            dataclasses.replace(base, exact=True, perturb=ComputeNoise(stragglers=s, step=k, seed=seed))
            if s.on
            else base
        )
        result = simulate_step(model, p, system=topology, options=options_k)
        results.append(result)
        _attribute(result, topology, placement, config, route_cache, link_cache, rank_rows, link_rows)
    if not s.on:  # the steps are alike: the one simulated stands for all
        results *= steps
        for row in (*rank_rows.values(), *link_rows.values()):
            for name in ("steps", "critical_s", "released", "collectives"):
                if name in row:
                    row[name] *= steps
    times = np.array([r.step_time_s for r in results])
    mean = math.fsum(times.tolist()) / steps
    p50, p99 = (float(v) for v in np.percentile(times, [50, 99]))
    names = topology.link_names

    def finish(rows: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
        out = []
        for row in rows.values():
            row["critical_s"] = row["critical_s"] / steps
            row["share"] = row["critical_s"] / mean if mean > 0 else 0.0
            out.append(row)
        out.sort(key=lambda row: (-row["critical_s"], row.get("rank", row.get("link"))))
        return tuple(out)

    for link, row in link_rows.items():
        row["name"] = names[link]
    first = results[0]
    return StepsResult(
        model=first.model,
        topology_name=first.topology_name,
        gpus=first.gpus,
        steps=steps,
        seed=int(seed),
        stragglers=s,
        step_time_s=tuple(times.tolist()),
        compute_s=tuple(r.compute_s for r in results),
        exposed_comm_s=tuple(r.exposed_comm_s for r in results),
        p50_s=p50,
        p99_s=p99,
        mean_s=mean,
        min_s=float(times.min()),
        max_s=float(times.max()),
        ranks=tuple({c: row[c] for c in RANK_COLUMNS} for row in finish(rank_rows)),
        links=tuple({c: row[c] for c in LINK_COLUMNS} for row in finish(link_rows)),
        notes=tuple(notes) + first.notes,
        warnings=first.warnings,
        first=first,
    )


def run_steps(
    setup: StepSetup,
    *,
    steps: int,
    stragglers: Stragglers,
    system: Topology | None = None,
    config: SimConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> StepsResult:
    """:func:`simulate_steps` of ``setup``'s step (``scenario.run_step``'s arguments), the draws seeded by the
    setup's seed (``SimConfig.seed``, ECMP's too)."""
    config = setup.config if config is None else config
    result = simulate_steps(
        setup.model,
        setup.parallelism,
        system=setup.topology if system is None else system,
        options=StepOptions(
            config=config,
            recompute=setup.recompute,
            attention_kernel=setup.attention_kernel,
            granularity=setup.granularity,
            exact=setup.exact,
            progress=progress,
        ),
        steps=steps,
        stragglers=stragglers,
        seed=config.seed,
    )
    if setup.ignored:
        result = dataclasses.replace(result, warnings=result.warnings + setup.ignored)
    return result


# the reductions simulate_step chooses itself, by name, and whether a plan uses each
_REDUCTIONS: dict[str, Callable[[reductions.Plan], bool]] = {
    "symmetric replicas": lambda used: used.symmetric,
    "symmetric context ranks": lambda used: used.context,
    "tensor rank 0's transfers": lambda used: used.tensor_rank0_p2p,
}


def _attribute(
    result: StepResult,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    link_cache: dict,
    rank_rows: dict[int, dict[str, Any]],
    link_rows: dict[int, dict[str, Any]],
) -> None:
    """Add one step's critical path to the per-rank and per-link rows (seconds summed over the steps)."""
    seen_ranks: set[int] = set()
    seen_links: set[int] = set()
    for phase in result.phases:
        ranks = phase.training.ranks
        phase_placement = Placement.custom(topology, [placement.rank_gpu[r] for r in ranks])
        for part in critical_path(phase):
            row = rank_rows.setdefault(part.rank, {"rank": part.rank, "steps": 0, "critical_s": 0.0, "released": 0})
            if part.collective < 0:
                row["critical_s"] += part.time_s
                if part.time_s > 0 and part.rank not in seen_ranks:
                    seen_ranks.add(part.rank)
                    row["steps"] += 1
                continue
            row["released"] += 1
            link = _bottleneck_link(phase, part.collective, topology, phase_placement, config, route_cache, link_cache)
            if link < 0:
                continue
            entry = link_rows.setdefault(link, {"link": link, "steps": 0, "critical_s": 0.0, "collectives": 0})
            entry["critical_s"] += part.time_s
            entry["collectives"] += 1
            if link not in seen_links:
                seen_links.add(link)
                entry["steps"] += 1
