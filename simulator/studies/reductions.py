"""The five reductions that keep huge training-step layouts tractable (``StepOptions``), and when each is exact.

Two are on request (``granularity="chunk"``, ``steady_state_microbatches``); ``simulate_step`` chooses the other
three itself (:func:`plan`): where :func:`replica_verdict` / :func:`context_verdict` / :func:`tensor_verdict`
find them exact for the step, and past ``FULL_SIMULATION_GPUS`` also where they are not (approximations, named
with their reason in the result's notes and its ``approximate`` flag). ``exact=True`` simulates every rank: no
replica, context-rank or tensor-rank reduction, no extrapolation (task merging stays the ``granularity`` the
caller chose).

**When replicas (tensor ranks) stand exactly for each other.** Nothing couples their flows beyond the links they
share (no link events, congestion control or load-dependent routing), the traffic between them (gradient reductions,
parameter gathers, expert all-to-alls) crosses no link of their own traffic that can run at the same time, and every
pair of GPUs that may talk inside a replica (every pair of a tensor or context group, neighbouring stages both ways,
first and last stage for tied embeddings) has a *fixed* path (``Router.fixed_path``: inside a server, or both NICs
on one switch, so no ECMP hash can make two replicas collide unequally), the paths of different replicas share no
link, and each replica's paths are the same up to renaming links of equal capacity, latency, per-connection cap,
kind and tier. Then every replica replays the same timeline in the full simulation, which the reduced one reproduces
up to round-off: the full run advances all replicas on one clock, so its float sums run in another order (tests
compare at 1e-9, not bit for bit).

* ``granularity="chunk"`` (task merging): one compute task and one collective per (group, kind) per model-chunk
  pass, whose nbytes is the sum of the per-layer collectives. Bytes and compute time are conserved; what
  changes is that per-collective latencies are paid once per pass instead of once per layer. The backward of
  the last micro-batch keeps per-layer tasks when gradients are reduced during it, so buckets still overlap
  it (``workloads.training.program``).
* ``tensor_rank0_p2p`` (representative transfers): tensor rank 0 alone makes each pipeline transfer and runs
  each context-parallel ring step, standing for the t alike ones (``TrainingWorkload.collective_weights``);
  tensor-parallel collectives re-synchronise the tensor group in every layer. Exact when each tensor rank's
  transfers and rings have fixed paths, disjoint from the other tensor ranks' and from tensor-parallel traffic,
  on alike links, with no data-parallel traffic inside the pipeline and none after it on their links (a stage's
  reduction starts while its last sends may be in flight). Left to the step it is used with symmetric replicas
  or context ranks only: its transfers and rings are then routed t - 1 more times for their link bytes
  (``api.collective_link_bytes``); where it is not exact the other t - 1 transfers' link bytes are not counted
  (``workloads.training.pipeline``, ``workloads.training.context_parallel``).
* ``symmetric_replicas``: data-parallel replicas run the same pipeline, so ONE replica (its t c p ranks on the GPUs
  they occupy, :func:`replica_ranks`) stands for all d. The replica's whole step is simulated, its collectives
  keeping every member: the other replicas' members are passive ranks (``Workload.passive``: no program, they take
  part without arriving, so a collective starts when the replica's member arrives, as it would with every replica in
  step) and their flows move. Each collective counts d / (replicas its group spans) times (a data-parallel bucket
  once, an expert all-to-all spanning e replicas d / e times, a replica's own d times), and the link bytes of those
  it stands for are added by routing them once more (``api.collective_link_bytes``: bytes do not depend on timing).
  Exact when, besides the conditions above, the traffic between replicas (its ends inside the servers and on the NIC
  cables, ``Router.ends``) crosses none of the links of the replicas' own traffic that can run beside it: when
  replicas meet inside the pipeline (overlapped gradient buckets, ZeRO-3/FSDP gathers, expert-parallel groups across
  replicas), every such link; when they meet only after it (``dp_overlap`` off, ZeRO < 3, EP 1), those of the stage
  transfers (a stage's last send is asynchronous, still in flight when its reduction starts), of the embedding
  all-reduce and of the other stages' tensor and context groups: each stage's reduction starts when its own part of
  the pipeline ends, while the other stages still run theirs (1F1B: the last stage ends first). Then every replica
  meets it alike. Where it does not (data-parallel buckets and stage transfers through one GPU's PCIe link and NIC,
  the usual layout with a stage over several servers), the other replicas' traffic that would share those links is
  missing: an approximation (the default ``fabricsim step`` forced so: 3.7737 s against 3.7763 s in full; tp 2, pp
  2, dp 8 of a 4096-hidden GPT with gradients reduced after the pipeline on 4 DGX H100 is not exact, the stage-0
  ring and the last stage's send sharing GPU 0's PCIe link: ``tests/simulator/test_reductions.py``). A step
  simulated as the pipeline of one replica, then every rank's reduction after a barrier, would not be exact even
  where this is: its stages' reductions would all start with the last stage's end and meet no send in flight.
* ``symmetric_context`` (context ranks): the c context ranks of a stage run the same program, so context rank 0 (of
  each simulated replica) stands for all c: the other members of its context rings are passive (they move their ring
  steps and arrive when it does, as they would in step), its tensor-parallel collectives and pipeline transfers
  count c times, the data-parallel buckets (over d x c ranks) keep every member, passive where not simulated. With
  symmetric replicas the step simulates t p ranks instead of t c p. Exact when, besides nothing coupling flows
  beyond shared links, each context rank's own traffic (tensor-parallel pairs, stage transfers, the embedding
  all-reduce) has fixed paths, disjoint from the other context ranks' and alike, and none of those links carries a
  ring (every pair of a context group, fixed paths) or gradient buckets that can run beside that traffic (inside the
  pipeline; after it, as for replicas, beside sends in flight and other stages): then the rings and buckets meet
  every context rank's traffic alike, and the traffic dropped with the other context ranks meets nothing simulated.
  Typical exact case: tensor groups on NVLink and rings across servers on the rails, no stage transfer through the
  NICs the rings use; a ring and a stage transfer through one GPU's NIC (the usual Megatron layout with t = 8) is an
  approximation. Not with expert parallelism (its groups span context ranks).
* ``steady_state_microbatches=k``: a pipeline step is affine in the number of micro-batches once the schedule
  is in steady state (1F1B: (m + p - 1)(f + b)), so the step is simulated with k and 2k micro-batches (k
  rounded up to a multiple of p for the interleaved schedule, :func:`steady_state_runs`) and every additive
  measurement extrapolated linearly to m (:func:`extrapolate`): T(m) = T(k) + (m - k)(T(2k) - T(k))/k. Exact
  for the compute critical path; with communication, GPT-145.6B of SC21 Table 1 (m = 48) gives the same step
  time to 1e-14 with k = 16 and to 0.09 % with k = 8.

Worked number: 1F1B on p = 4 stages, f + b = 30 ms per micro-batch and stage, m = 9, k = 2: T(2) = (2 + 3) 30 =
150 ms, T(4) = (4 + 3) 30 = 210 ms, so T(9) = 150 + (9 - 2)(210 - 150)/2 = 360 ms = (9 + 3) 30 ms, exactly.

**The bound of an approximate reduction** (replicas, context ranks or tensor ranks used where not exact;
``StepResult.step_time_low_s`` / ``step_time_high_s``, ``exposed_comm_low_s`` / ``exposed_comm_high_s`` = the step's
minus its critical path; a note). The reduced run lacks the *missing traffic*: the pipeline traffic (every pair
of :func:`_pipeline_pairs`) of the ranks it stands for. A *unit* is what one simulated rank set stands for (a
replica, a context rank, a tensor rank's transfers), and each missing GPU pair x has a *representative*, the
simulated pair i with its unit's coordinates 0 (:func:`_pair_units`).

* Low: the reduced run (missing traffic only adds contention).
* High: the reduced run on a *bounding fabric* (:func:`bounding_fabric`). C(x): the links pair x
  may cross (a stage transfer under ECMP: the path of each of its network connections as the step hashes it;
  anything else: every fewest-hop path, with and without PXN). With n(l) the missing pairs whose C holds link l
  and n_u(l) the pairs of units other than u (on a switch-to-switch link, every pair but x):
  capacity'(l) = min(c(l) / (1 + n(l)), min over simulated pairs i with l in C(i) of R(i)), R(i) = min over the
  pairs x that i stands for of min over l in C(x) of c(l) / (1 + n_u(l)); and each simulated pair's network
  links gain latency until its fastest path is as slow as the slowest path of a pair it stands for. In max-min
  sharing a flow gets at least c(l) / (flows on l) of its bottleneck link l, so every flow of the full step is
  at least as fast as its representative on the bounding fabric, and a step is monotone in its transfers'
  durations: the full step is no longer than the high run.
* Holds when: nothing couples flows beyond shared links (no link events or congestion control; no bound
  otherwise, the note says why), routing is ``ecmp`` or ``spray`` (fewest-hop paths, enumerated; ``minimal``,
  ``valiant``, ``ugal``, ``adaptive``: no bound), each missing GPU pair puts no more flows on a shared link than
  its representative does (true for stage transfers, one network connection a pair; a ring with several
  channels through a link it shares with a simulated flow may exceed it), and adding flows does not speed up
  another (max-min sharing can, in corner cases; NCCL's tuner choosing another algorithm on the slower fabric
  too). Not covered: the steady-state extrapolation (its own approximation).
* Expert parallelism (symmetric replicas): the expert-parallel groups without a member in the simulated replica
  (their dispatch and combine all-to-alls) and the expert-data-parallel ones (the experts' gradient reductions)
  are missing traffic too (:func:`_expert_pairs`): each ordered member pair may cross every fewest-hop path, and
  stands with the pair of the same member positions in the simulated group of its (tensor, pipeline) block, group g
  with group g mod P where the simulated groups are the block's first P (``_measure`` counts each of those for
  d / (replicas it spans)); each such group is a unit of its own. Where the groups do not repeat so: no bound.
  Loose where thousands of simulated flows cross a link whose capacity falls to one pair's share (the 64-member
  all-to-alls across servers of a DeepSeek-V3-like step on 2,048 H100: [4.754, 9591] s, 4.843 s in full), so
  such steps are left to the full simulation up to FULL_SIMULATION_GPUS_EXPERTS GPUs.
* Cost: the bounding fabric (a route per GPU pair of the pipeline; 1.9 s of CPU for the 16,384-GPU 405B layout's
  145,408 pairs, 6.0 s for its CP 16 layout's 391,168) and one more reduced run, of which only the step time is
  taken. Checked against the full simulation on small layouts (forced reductions: an ECMP fat tree, oversubscribed,
  uneven stages, a failed and a slower NIC cable, a dragonfly with longer paths for some replicas, expert groups
  across servers on a plain and an oversubscribed fat tree; ``tests/simulator/test_reductions.py``). Worked
  number: on the default step's layout on a dragonfly of 8 DGX H100 (tp 2, pp 2, dp 16, overlapped buckets),
  replicas forced: 3.8857 s reduced, 3.9378 s in full, bound [3.8857, 4.6695] s (time in network 0.4335 reduced,
  0.4857 in full, bound [0.4335, 1.2173] s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from topologies.routing import RouteCache, Router
from topologies.topology import LinkTier, Topology
from workloads.model import ceil_div
from workloads.parallelism import GROUP_KINDS, ParallelismSpec

from ..collectives.p2p import NET_CONNECTIONS_PER_PEER
from ..config import SimConfig
from ..placement import Placement

__all__ = (
    "Plan",
    "Verdict",
    "plan",
    "replica_ranks",
    "simulated_ranks",
    "context_verdict",
    "replica_verdict",
    "tensor_verdict",
    "uneven_experts",
    "steady_state_runs",
    "extrapolate",
    "notes",
    "bounding_fabric",
    "bound_note",
)

#: the largest step ``simulate_step`` simulates in full when a reduction it would need is not exact; past it, the
#: reduction runs as an approximation named in the result's notes (``StepOptions(exact=True)`` simulates in full)
FULL_SIMULATION_GPUS = 1024

#: the same with expert-parallel groups across replicas: their bound is loose (each bounding-fabric link is shared
#: by every all-to-all pair that may cross it: [4.754, 9591] s on the DeepSeek-V3-like EP 64 step of ``fabricsim
#: perf --commands``, 2,048 H100, whose full simulation gives 4.843 s in about 20 s of CPU), so they are
#: simulated in full up to this size
FULL_SIMULATION_GPUS_EXPERTS = 4096

#: routing policies whose routes do not depend on the load other flows put on the fabric
_LOAD_FREE_ROUTING = ("ecmp", "minimal", "valiant", "spray")


def replica_ranks(p: ParallelismSpec, d: int = 0, *, context: bool = False) -> tuple[int, ...]:
    """The ranks of data-parallel replica ``d``: those with data-parallel coordinate d, in increasing order;
    with ``context``, only its context rank 0 (context coordinate 0)."""
    ranks = sorted(group[d] for group in p.groups("dp"))
    return tuple(r for r in ranks if p.coords(r).cp == 0) if context else tuple(ranks)


def simulated_ranks(p: ParallelismSpec, *, symmetric: bool, context: bool) -> tuple[int, ...] | None:
    """The ranks a step simulates with programs (None: all): data-parallel replica 0 with ``symmetric``, and of
    those only context rank 0 with ``context`` (the other members of their groups join as passive ranks)."""
    if symmetric:
        return replica_ranks(p, context=context)
    if context:
        return tuple(r for r in range(p.world_size) if p.coords(r).cp == 0)
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a reduction is exact for a step, and why not (``reason``, empty when exact); ``links``: the links
    only the reduced traffic crosses (tensor rank 0's pipeline transfers), whose bytes count for every unit."""

    exact: bool
    reason: str = ""
    links: tuple[int, ...] = ()


def _pipeline_pairs(p: ParallelismSpec, ranks: Sequence[int], *, embedding: bool = False) -> list[tuple[int, int]]:
    """The ordered pairs of ``ranks`` (global ranks, e.g. one data-parallel replica) that may exchange bytes
    inside a replica, as indices into ``ranks``: every pair of a tensor or context group, and neighbouring
    stages of a pipeline group both ways (the interleaved schedule also wraps from the last stage to the first),
    both ends in ``ranks``; with ``embedding`` (tied embeddings) also the first and last stage of a pipeline
    group both ways (the embedding all-reduce after the pipeline). A superset of what any algorithm sends."""
    local = {r: i for i, r in enumerate(ranks)}
    pairs: set[tuple[int, int]] = set()
    for kind in ("tp", "cp"):
        for group in p.groups(kind):
            inside = [r for r in group if r in local]
            pairs.update((local[a], local[b]) for a in inside for b in inside if a != b)
    for group in p.groups("pp"):
        hops = _stage_hops(p, group) + ([(group[0], group[-1])] if embedding and len(group) > 1 else [])
        for a, b in hops:
            if a in local and b in local:
                pairs.update(((local[a], local[b]), (local[b], local[a])))
    return sorted(pairs)


def _context_pairs(p: ParallelismSpec, ranks: Sequence[int]) -> list[tuple[int, int]]:
    """The ordered pairs (global ranks) of every context group with a member in ``ranks``: what their rings
    may send, whether or not all members are simulated."""
    members = set(ranks)
    return [(a, b) for group in p.groups("cp") if members.intersection(group) for a in group for b in group if a != b]


def _stage_hops(p: ParallelismSpec, group: tuple[int, ...]) -> list[tuple[int, int]]:
    """The neighbouring stages of a pipeline group, first to last (the interleaved schedule also wraps from the
    last stage to the first)."""
    hops = list(zip(group, group[1:]))
    if p.schedule == "interleaved" and len(group) > 2:
        hops.append((group[-1], group[0]))
    return hops


def _router(topology: Topology, config: SimConfig, route_cache: RouteCache) -> Router:
    """A router as the step's simulation builds one (policy, seed, failed links), for fixed paths only."""
    return Router(
        topology, policy=config.routing, seed=config.seed, failed_links=config.failed_links, cache=route_cache
    )


def _footprints(
    units: Sequence[Sequence[tuple[int, int]]], router: Router, what: str
) -> tuple[list[np.ndarray], Verdict]:
    """The links of each unit's GPU pairs (``units[u]``: (source GPU, destination GPU) in one canonical order,
    routed with and without PXN) and whether the units are independent and alike: every pair's path fixed
    (no ECMP choice that could differ between units), no link used by two units, and the same paths up to a
    renaming of links with equal capacity, latency, per-connection cap and tier (every unit then sees the same
    fabric). ``what`` names a unit in the reason."""
    topo = router.topology
    attributes = np.column_stack(
        (
            topo.link_capacity_bytes_per_s,
            topo.link_latency_s,
            topo.link_flow_cap_bytes_per_s,
            topo.link_kind.astype(np.float64),
            topo.link_tier.astype(np.float64),
        )
    )
    owner: dict[int, int] = {}
    shapes: list[tuple] = []
    links_of: list[np.ndarray] = []
    server = topo.gpu_server
    for u, pairs in enumerate(units):
        canonical: dict[int, int] = {}
        shape = []
        used = []
        for a, b in pairs:
            for pxn in (False, True):
                path = router.fixed_path(a, b, pxn=pxn)
                if path is None:
                    return [], Verdict(
                        False,
                        f"traffic between GPUs {a} and {b} has several paths through the fabric (ECMP), so "
                        f"{what}s can collide unequally",
                    )
                for link in path.tolist():
                    seen = owner.setdefault(link, u)
                    if seen != u:
                        return [], Verdict(False, f"{what}s {seen} and {u} share link {topo.link_names[link]!r}")
                    shape.append(canonical.setdefault(link, len(canonical)))
                used.append(path)
                if server[a] == server[b]:
                    break  # inside a server PXN changes nothing
        key = tuple(shape), attributes[list(canonical)].tobytes()
        if shapes and key != shapes[0]:
            return [], Verdict(False, f"{what} {u} sees a fabric unlike {what} 0's (other links or link speeds)")
        shapes.append(key)
        links_of.append(np.unique(np.concatenate(used)) if used else np.zeros(0, dtype=np.int64))
    return links_of, Verdict(True)


def _coupling(config: SimConfig) -> str:
    """Why flows of separate units could still interact whatever their links (empty when they cannot)."""
    if config.link_events:
        return "link events change the fabric during the step"
    if config.congestion:
        return f"congestion control ({', '.join(config.congestion)}) couples flows beyond the links they share"
    if config.routing not in _LOAD_FREE_ROUTING:
        return f"routing {config.routing!r} chooses paths from the load of every flow"
    return ""


def _inside_pipeline(p: ParallelismSpec) -> str:
    """Why data-parallel or expert-parallel traffic runs during the pipeline (empty when none does)."""
    if p.dp * p.cp > 1 and p.dp_overlap:  # buckets are reduced over dp x cp ranks (data_parallel.py)
        gathers = " and parameters gathered before the forward (overlap_param_gather)" if p.overlap_param_gather else ""
        return f"gradients are reduced during the backward (dp_overlap){gathers}, inside the pipeline"
    if p.dp * p.cp > 1 and p.zero_stage >= 3:
        return "ZeRO-3/FSDP gathers parameters inside the pipeline"
    if p.ep > 1:
        return "expert-parallel groups span data-parallel replicas"
    return ""


def replica_verdict(
    p: ParallelismSpec,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    *,
    tied_embeddings: bool = False,
) -> Verdict:
    """Whether one data-parallel replica, simulated for its whole step with the other replicas' members of its
    data- and expert-parallel groups passive, stands exactly for all of them: nothing couples flows beyond
    shared links, the replicas' own traffic (pipeline, and with ``tied_embeddings`` the embedding all-reduce
    between first and last stage) has fixed, disjoint paths on alike links (:func:`_footprints`), and the
    traffic between replicas crosses none of the links of the replicas' traffic that can run beside it
    (``Router.ends``), so every replica meets it alike: when it runs inside the pipeline (overlapped gradient
    reduction, ZeRO-3 gathers, expert-parallel groups), every link of the replicas' traffic; when it runs after
    the pipeline, a stage's gradient reduction starts when that stage's part of the pipeline ends, beside the
    other stages' work, the stage transfers still in flight (a send is asynchronous) and the embedding
    all-reduce: every link but those of the tensor and context groups of its own stage (:func:`_after_pipeline`)."""
    why = _coupling(config)
    if why:
        return Verdict(False, why)
    inside = _inside_pipeline(p)
    if inside and config.failed_links:
        return Verdict(False, f"failed links, and {inside}")
    if p.ep > 1:
        # expert groups without a member in replica 0 are stood for, not simulated: their traffic could meet
        # the simulated one anywhere in the fabric
        replica0 = set(replica_ranks(p))
        for kind in ("ep", "edp"):
            if not all(replica0.intersection(group) for group in p.groups(kind)):
                return Verdict(False, f"{inside}, and the {kind} groups of other replicas are stood for")
    replicas = [replica_ranks(p, d) for d in range(p.dp)]
    pairs = _pipeline_pairs(p, replicas[0], embedding=tied_embeddings)
    gpu = placement.rank_gpu
    units = [[(gpu[ranks[a]], gpu[ranks[b]]) for a, b in pairs] for ranks in replicas]
    router = _router(topology, config, route_cache)
    links, verdict = _footprints(units, router, "replica")
    if not verdict.exact:
        return verdict
    if not inside:
        own = [(ranks[a], ranks[b]) for ranks in replicas for a, b in pairs]
        return _after_pipeline(p, own, router, gpu, "the replicas'")
    pipeline = set(np.concatenate(links).tolist()) if links else set()
    for kind in ("dp_cp",) + (("ep", "edp") if p.ep > 1 else ()):
        for group in p.groups(kind):
            shared = pipeline.intersection(_group_ends([gpu[r] for r in group], router))
            if shared:
                name = topology.link_names[min(shared)]
                return Verdict(False, f"{inside}, and that traffic shares link {name!r} with the pipeline's")
    return verdict


def _after_pipeline(
    p: ParallelismSpec, pairs: Sequence[tuple[int, int]], router: Router, gpu: Sequence[int], whose: str
) -> Verdict:
    """Whether the gradient reductions after the pipeline (data-parallel groups, ZeRO-1/2 gathers; ``dp_overlap``
    off) meet the units' own traffic ``pairs`` (global ranks, fixed paths: every unit's, simulated or not)
    alike: a stage's reduction starts when its part of the pipeline ends, while the other stages still run
    theirs, its own last sends may still be in flight and the embedding all-reduce may run, so the reduction
    of stage s may share no link with a pair between stages or a tensor or context pair of another stage
    (those of stage s ended with it)."""
    stage_of = [p.coords(r).pp for r in range(p.world_size)]
    between: set[int] = set()
    within: dict[int, set[int]] = {}
    server = router.topology.gpu_server
    for a, b in pairs:
        into = between if stage_of[a] != stage_of[b] else within.setdefault(stage_of[a], set())
        for pxn in (False, True):
            path = router.fixed_path(gpu[a], gpu[b], pxn=pxn)
            assert path is not None  # _footprints found every path fixed
            into.update(path.tolist())
            if server[gpu[a]] == server[gpu[b]]:
                break  # inside a server PXN changes nothing
    tails: dict[int, set[int]] = {}
    for group in p.groups("dp_cp"):
        s = stage_of[group[0]]
        tail = tails.get(s)
        if tail is None:
            tail = tails[s] = between.union(*(links for t, links in within.items() if t != s))
        shared = tail.intersection(_group_ends([gpu[r] for r in group], router))
        if shared:
            name = router.topology.link_names[min(shared)]
            return Verdict(
                False,
                f"the gradient reduction of stage {s} (after its part of the pipeline) shares link {name!r} with "
                f"{whose} traffic that can still run then (stage transfers in flight, other stages)",
            )
    return Verdict(True)


def uneven_experts(p: ParallelismSpec) -> str:
    """Why expert-parallel groups keep one replica from standing for the others (empty when they do not): a
    group whose members are spread unevenly over the replicas it spans, or spans a number of replicas that does
    not divide d (with context parallelism, when c and e do not divide one another)."""
    if p.ep == 1:
        return ""
    for kind in ("ep", "edp"):
        for group in p.groups(kind):
            per: dict[int, int] = {}
            for r in group:
                d = p.coords(r).dp
                per[d] = per.get(d, 0) + 1
            if len(set(per.values())) > 1 or p.dp % len(per):
                return f"{kind} group {group[:4]}... spreads unevenly over data-parallel replicas"
    return ""


def _group_ends(gpus: Sequence[int], router: Router) -> set[int]:
    """Every link a flow between two of ``gpus`` may cross inside the servers or on a NIC's cable, whatever
    its hash (``Router.ends``): per member, its sends to one member of each other rail in other servers (the
    NIC PXN picks is on the destination's rail) and one receive, with and without PXN; whole paths inside a
    server."""
    server, local = router.topology.gpu_server, router.topology.gpu_local
    out: set[int] = set()
    for a in gpus:
        peers: dict[int, int] = {}
        for b in gpus:
            if b == a:
                continue
            if server[b] == server[a]:
                out.update(router.ends(a, b).tolist())
            else:
                peers.setdefault(int(local[b]), b)
        for b in peers.values():
            for pxn in (False, True):
                out.update(router.ends(a, b, pxn=pxn).tolist())
                out.update(router.ends(b, a, pxn=pxn).tolist())
    return out


def _fixed_paths(pairs: Sequence[tuple[int, int]], router: Router, why: str) -> tuple[set[int], Verdict]:
    """The links of the fixed paths of GPU ``pairs`` (with and without PXN), or a verdict saying which pair has
    several (ECMP); ``why`` ends that reason."""
    out: set[int] = set()
    for a, b in pairs:
        for pxn in (False, True):
            path = router.fixed_path(a, b, pxn=pxn)
            if path is None:
                return out, Verdict(
                    False, f"traffic between GPUs {a} and {b} has several paths through the fabric (ECMP), {why}"
                )
            out.update(path.tolist())
    return out, Verdict(True)


def tensor_verdict(
    p: ParallelismSpec,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    *,
    ranks: Sequence[int] | None = None,
) -> Verdict:
    """Whether tensor rank 0's pipeline transfers and context-parallel rings stand exactly for the t of each
    stage boundary and context group among ``ranks`` (the simulated ranks; default all; a ring counts with
    all its members): no data- or expert-parallel traffic during the pipeline, nothing coupling flows beyond
    shared links, and each tensor rank's transfers and rings on fixed paths, disjoint from the other tensor
    ranks' and from every tensor-parallel pair's paths, on alike links (:func:`_footprints`), and none of their links
    that can still carry bytes when a stage's gradient reduction runs after the pipeline (transfers in flight,
    other stages' rings) crossed by it (:func:`_after_pipeline`). (Tensor-parallel collectives re-synchronise the
    t ranks in every pass.)"""
    why = _inside_pipeline(p) or _coupling(config)
    if why:
        return Verdict(False, why)
    router = _router(topology, config, route_cache)
    gpu = placement.rank_gpu
    ranks = tuple(range(p.world_size)) if ranks is None else tuple(ranks)
    members = set(ranks)
    hops_of: list[list[tuple[int, int]]] = [[] for _ in range(p.tp)]
    stood: list[tuple[int, int]] = []  # the same pairs as ranks
    for group in p.groups("pp"):
        for a, b in _stage_hops(p, group):
            if a in members and b in members:
                hops_of[p.coords(a).tp] += [(gpu[a], gpu[b]), (gpu[b], gpu[a])]
                stood += [(a, b), (b, a)]
    rings = p.cp_comm_type == "p2p"  # other exchanges are every tensor rank's own collectives, not stood for
    for a, b in _context_pairs(p, ranks) if rings else ():
        hops_of[p.coords(a).tp].append((gpu[a], gpu[b]))
        stood.append((a, b))
    links, verdict = _footprints(hops_of, router, "tensor rank")
    if not verdict.exact:
        return verdict
    transfers = set(np.concatenate(links).tolist())
    for a, b in _pipeline_pairs(p, ranks):
        ra, rb = ranks[a], ranks[b]
        if p.coords(ra).pp == p.coords(rb).pp and p.coords(ra).cp == p.coords(rb).cp:  # tensor-parallel
            used, verdict = _fixed_paths(
                [(gpu[ra], gpu[rb])], router, "which the pipeline transfers and rings may meet unequally"
            )
            if not verdict.exact:
                return verdict
            shared = transfers.intersection(used)
            if shared:
                link = topology.link_names[min(shared)]
                return Verdict(
                    False, f"pipeline transfers or context rings share link {link!r} with tensor-parallel traffic"
                )
    after = _after_pipeline(p, stood, router, gpu, "the tensor ranks' transfers or rings")
    if not after.exact:
        return after
    return Verdict(True, links=tuple(links[0].tolist()))


def context_verdict(
    p: ParallelismSpec,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    *,
    ranks: Sequence[int] | None = None,
    tied_embeddings: bool = False,
) -> Verdict:
    """Whether context rank 0 stands exactly for the c context ranks of ``ranks`` (default all; data-parallel
    replica 0 with symmetric replicas), the other members of its rings passive: nothing couples flows beyond
    shared links, each context rank's own traffic (tensor-parallel pairs, stage transfers, with
    ``tied_embeddings`` the embedding all-reduce) has fixed paths, disjoint from the other context ranks' and
    alike (:func:`_footprints`), and none of those links carries the rings (every pair of a context group, fixed
    paths) or the gradient buckets and parameter gathers between them (``Router.ends``): when they run inside
    the pipeline, none at all; after it, none of the traffic that can still run beside a stage's reduction
    (:func:`_after_pipeline`). Then every context rank's traffic meets the rings and buckets alike, and dropping
    the others' own traffic changes nothing the simulated one meets."""
    why = _coupling(config)
    if why:
        return Verdict(False, why)
    if p.ep > 1:
        return Verdict(False, "expert-parallel groups span context ranks")
    router = _router(topology, config, route_cache)
    gpu = placement.rank_gpu
    ranks = tuple(range(p.world_size)) if ranks is None else tuple(ranks)
    units = []
    own_pairs: list[tuple[int, int]] = []
    for j in range(p.cp):
        unit = tuple(r for r in ranks if p.coords(r).cp == j)
        pairs = [(unit[a], unit[b]) for a, b in _pipeline_pairs(p, unit, embedding=tied_embeddings)]
        own_pairs += pairs
        units.append([(gpu[a], gpu[b]) for a, b in pairs])
    links, verdict = _footprints(units, router, "context rank")
    if not verdict.exact:
        return verdict
    own = set(np.concatenate(links).tolist()) if links else set()
    ring, verdict = _fixed_paths(
        [(gpu[a], gpu[b]) for a, b in _context_pairs(p, ranks)], router, "which context ranks may meet unequally"
    )
    if not verdict.exact:
        return verdict
    shared = own.intersection(ring)
    if shared:
        name = topology.link_names[min(shared)]
        return Verdict(False, f"context rings share link {name!r} with the context ranks' own traffic")
    inside = _inside_pipeline(p)
    if inside:
        members = set(ranks)
        for group in p.groups("dp_cp"):
            if members.intersection(group):
                shared = own.intersection(_group_ends([gpu[r] for r in group], router))
                if shared:
                    name = topology.link_names[min(shared)]
                    return Verdict(False, f"{inside}, and that traffic shares link {name!r} with a context rank's")
        return Verdict(True)
    return _after_pipeline(p, own_pairs, router, gpu, "the context ranks'")


def steady_state_runs(p: ParallelismSpec, k: int | None) -> tuple[int, ParallelismSpec, ParallelismSpec] | None:
    """(k, the layout with k micro-batches, the layout with 2k) when the extrapolation applies (m > 2k), else
    None; k is rounded up to a multiple of p for the interleaved schedule."""
    if k is None:
        return None
    if p.schedule == "interleaved":
        k = ceil_div(k, p.pp) * p.pp
    if p.microbatches <= 2 * k:
        return None
    few = dataclasses.replace(p, global_batch=k * p.dp * p.micro_batch)
    more = dataclasses.replace(p, global_batch=2 * k * p.dp * p.micro_batch)
    return k, few, more


def lerp(a, b, x: float):
    """a + x (b - a) for numbers and (nested) dicts of numbers; a key missing on one side counts 0."""
    if isinstance(a, dict):
        return {
            key: lerp(
                a.get(key, 0 if not isinstance(b.get(key), dict) else {}),
                b.get(key, 0 if not isinstance(a.get(key), dict) else {}),
                x,
            )
            for key in {**a, **b}
        }
    return a + x * (b - a)


def extrapolate(a, b, *, m: int, k: int):
    """The measurement at m micro-batches from those at k (``a``) and 2k (``b``): a + (m - k)/k (b - a)."""
    return lerp(a, b, (m - k) / k)


@dataclass(frozen=True, slots=True)
class Plan:
    """The reductions a step uses (``symmetric``, ``context``, ``tensor_rank0_p2p``) and, for each, its verdict."""

    symmetric: bool
    passive: bool  # the members of cross-replica (or context-parallel) groups not simulated passive (reduced)
    tensor_rank0_p2p: bool
    replica: Verdict | None  # None: not applicable (one replica) or not examined
    tensor: Verdict | None
    context: bool = False  # context rank 0 stands for the c context ranks, the others passive in its rings
    context_verdict: Verdict | None = None

    @property
    def scales_transfer_links(self) -> bool:
        """Whether tensor rank 0's transfers and rings stand exactly for the t alike ones (an exact verdict, with
        symmetric replicas or context ranks), so their link bytes count t times."""
        return (self.symmetric or self.context) and self.tensor_rank0_p2p and _exact(self.tensor)

    @property
    def approximate(self) -> bool:
        """Whether a reduction in use is not exact."""
        return (
            (self.symmetric and not _exact(self.replica))
            or (self.tensor_rank0_p2p and not _exact(self.tensor))
            or (self.context and not _exact(self.context_verdict))
        )


def _exact(verdict: Verdict | None) -> bool:
    return verdict is not None and verdict.exact


def plan(
    p: ParallelismSpec,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    *,
    symmetric_replicas: bool | None,
    tensor_rank0_p2p: bool | None,
    exact: bool,
    symmetric_context: bool | None = None,
    tied_embeddings: bool = False,
) -> Plan:
    """Which reductions the step uses: those forced (True) whatever their verdict; those left to the step (None) where
    :func:`replica_verdict` / :func:`context_verdict` / :func:`tensor_verdict` find them exact, and on more than
    FULL_SIMULATION_GPUS GPUs (FULL_SIMULATION_GPUS_EXPERTS with expert parallelism) also where they are not
    (approximations, named in the notes with the reason); none with ``exact``. Symmetric replicas are refused, even
    forced, where expert groups span replicas unevenly (:func:`uneven_experts`): one replica then stands for no
    other; context ranks where expert parallelism is used. A reduced step is one phase: the simulated ranks' whole
    step, the other members of their data-, expert- and context-parallel groups passive. ``tied_embeddings``: the
    model's embedding all-reduce joins the first and last stage of each replica."""
    if exact:
        return Plan(symmetric=False, passive=False, tensor_rank0_p2p=False, replica=None, tensor=None)
    uneven = uneven_experts(p)
    if uneven and symmetric_replicas:
        raise ValueError(f"symmetric_replicas: True is not allowed here: {uneven}; expected None or False")
    if uneven:
        symmetric_replicas = False
    if p.ep > 1 and symmetric_context:
        raise ValueError(
            "symmetric_context: True is not allowed here: expert-parallel groups span context ranks; "
            "expected None or False"
        )
    replica = tensor = cverdict = None
    if p.dp > 1 and symmetric_replicas is not False:
        replica = replica_verdict(p, topology, placement, config, route_cache, tied_embeddings=tied_embeddings)
    # past FULL_SIMULATION_GPUS a reduction left to the step is used even where it is not exact (an
    # approximation the notes name)
    large = p.world_size > (FULL_SIMULATION_GPUS_EXPERTS if p.ep > 1 else FULL_SIMULATION_GPUS)
    symmetric = p.dp > 1 and (symmetric_replicas is True or (symmetric_replicas is None and (_exact(replica) or large)))
    if p.cp > 1 and p.ep == 1 and symmetric_context is not False:
        base = replica_ranks(p) if symmetric else None
        cverdict = context_verdict(
            p, topology, placement, config, route_cache, ranks=base, tied_embeddings=tied_embeddings
        )
    context = (
        p.cp > 1
        and p.ep == 1
        and (symmetric_context is True or (symmetric_context is None and (_exact(cverdict) or large)))
    )
    # left to the step, representative transfers need a reduced step (symmetric replicas or context ranks): their
    # link bytes then count t times where the verdict is exact
    # tensor rank 0 has transfers or rings to stand for
    carries = p.tp > 1 and (p.pp > 1 or (p.cp > 1 and p.cp_comm_type == "p2p"))
    if carries and (tensor_rank0_p2p or (tensor_rank0_p2p is None and (symmetric or context))):
        ranks = simulated_ranks(p, symmetric=symmetric, context=context)  # the ranks simulated with the transfers
        tensor = tensor_verdict(p, topology, placement, config, route_cache, ranks=ranks)
    reduced = symmetric or context
    return Plan(
        symmetric=symmetric,
        passive=reduced,
        tensor_rank0_p2p=carries
        and (tensor_rank0_p2p is True or (tensor_rank0_p2p is None and reduced and (_exact(tensor) or large))),
        replica=replica,
        tensor=tensor,
        context=context,
        context_verdict=cverdict,
    )


def _pair_units(
    p: ParallelismSpec, plan: Plan, *, embedding: bool = False
) -> tuple[list[tuple[int, int]], np.ndarray, np.ndarray, np.ndarray]:
    """The ordered rank pairs that may exchange bytes in the pipeline of the full step (:func:`_pipeline_pairs`
    over every rank), the unit of each (an index; 0: the simulated one, that of pairs the reduced run moves)
    and the index of the pair of the simulated unit that stands for it (its representative). A pair's unit is
    the coordinates the reductions in use stand for: data-parallel with symmetric replicas, context with context
    ranks, tensor with representative transfers; a ring pair keeps its context coordinate (passive members move
    their ring steps), a tensor-parallel pair its tensor one (tensor-parallel collectives keep every member).
    Last, whether each pair is a stage transfer (with ``embedding``, the pairs of the embedding all-reduce, first
    and last stage, are pairs too, not transfers unless those stages are neighbours)."""
    pairs = _pipeline_pairs(p, range(p.world_size), embedding=embedding)
    hops = {pair for group in p.groups("pp") for a, b in _stage_hops(p, group) for pair in ((a, b), (b, a))}
    coords = [p.coords(r) for r in range(p.world_size)]
    rank = {(c.tp, c.cp, c.dp, c.pp): r for r, c in enumerate(coords)}
    index = {pair: i for i, pair in enumerate(pairs)}
    units: dict[tuple[int, ...], int] = {(0, 0, 0): 0}
    unit = np.empty(len(pairs), dtype=np.int64)
    reps = np.empty(len(pairs), dtype=np.int64)
    hop = np.zeros(len(pairs), dtype=bool)
    for i, (a, b) in enumerate(pairs):
        ca, cb = coords[a], coords[b]
        hop[i] = (a, b) in hops
        dp = plan.symmetric
        cp = plan.context and not (ca.pp == cb.pp and ca.cp != cb.cp)  # not a ring pair
        tp = plan.tensor_rank0_p2p and not (ca.pp == cb.pp and ca.cp == cb.cp)  # not a tensor-parallel pair
        key = (ca.dp if dp else 0, ca.cp if cp else 0, ca.tp if tp else 0)
        unit[i] = units.setdefault(key, len(units))
        ra = rank[(0 if tp else ca.tp, 0 if cp else ca.cp, 0 if dp else ca.dp, ca.pp)]
        rb = rank[(0 if tp else cb.tp, 0 if cp else cb.cp, 0 if dp else cb.dp, cb.pp)]
        reps[i] = index[ra, rb]
    if plan.symmetric and p.ep > 1:  # the expert groups' traffic, the groups without a member in replica 0 missing
        experts, owners, twins, _ = _expert_pairs(p)
        base = len(pairs)
        at = {pair: base + i for i, pair in enumerate(experts) if not owners[i]}  # the simulated groups' pairs
        keys = [units.setdefault((-1, *owner), len(units)) if owner else 0 for owner in owners]
        pairs = pairs + experts
        unit = np.concatenate((unit, np.asarray(keys, dtype=np.int64)))
        reps = np.concatenate((reps, np.asarray([at[twin] for twin in twins], dtype=np.int64)))
        hop = np.concatenate((hop, np.zeros(len(experts), dtype=bool)))
    return pairs, unit, reps, hop


def _expert_pairs(
    p: ParallelismSpec,
) -> tuple[list[tuple[int, int]], list[tuple[int, ...]], list[tuple[int, int]], str]:
    """With symmetric replicas and expert parallelism, the ordered member pairs of every expert-parallel group
    (its dispatch and combine all-to-alls) and expert-data-parallel group (the experts' gradient reductions), as
    global ranks: for each, its unit (the simulated groups, those with a member in data-parallel replica 0,
    are unit ``()``; every other group a unit of its own, named by its kind and members) and its representative,
    the pair of the same member positions in the simulated group that stands for its group (``_measure`` counts
    each simulated group for d / (replicas it spans) groups); last, why no such mapping exists (empty when it
    does). Per kind and (tensor, pipeline) block the simulated groups must be the first P of the block, group g
    standing with group g mod P, and their members must share tensor, context and pipeline coordinates
    position by position (true of every layout :func:`uneven_experts` accepts; checked)."""
    replica0 = set(replica_ranks(p))
    coords = [p.coords(r) for r in range(p.world_size)]
    pairs: list[tuple[int, int]] = []
    units: list[tuple[int, ...]] = []
    reps: list[tuple[int, int]] = []
    for kind in ("ep", "edp"):
        blocks: dict[tuple[int, int], list[tuple[int, ...]]] = {}
        for group in p.groups(kind):  # in increasing first member: within a block, in the order Megatron makes them
            first = coords[group[0]]
            blocks.setdefault((first.tp, first.pp), []).append(group)
        for groups in blocks.values():
            simulated = [g for g, group in enumerate(groups) if replica0.intersection(group)]
            period = len(simulated)
            if simulated != list(range(period)) or len(groups) % period:
                return [], [], [], f"the {kind} groups of other replicas do not repeat those of replica 0"
            for g, group in enumerate(groups):
                twin = groups[g % period]
                alike = len(twin) == len(group) and all(
                    (coords[a].tp, coords[a].cp, coords[a].pp) == (coords[b].tp, coords[b].cp, coords[b].pp)
                    for a, b in zip(group, twin)
                )
                if not alike:
                    return [], [], [], f"the {kind} group {group[:4]}... is unlike the one of replica 0 it stands with"
                unit = () if g < period else (GROUP_KINDS.index(kind), *group)
                for i, a in enumerate(group):
                    for j, b in enumerate(group):
                        if i != j:
                            pairs.append((a, b))
                            units.append(unit)
                            reps.append((twin[i], twin[j]))
    return pairs, units, reps, ""


def _latency_sums(latency: np.ndarray, parts: Sequence[tuple[int, ...]]) -> np.ndarray:
    """``float(latency[np.asarray(part)].sum())`` of each of ``parts``: the parts of one length as the rows of one
    array, summed along them (numpy sums a row of a C-ordered array as it sums that row alone)."""
    out = np.zeros(len(parts))
    if not parts:
        return out
    lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    flat = np.fromiter(chain.from_iterable(parts), dtype=np.int64, count=int(lengths.sum()))
    order = np.argsort(lengths, kind="stable")
    starts = np.concatenate(([0], np.cumsum(lengths)))
    for k in np.unique(lengths).tolist():
        if k:
            rows = order[lengths[order] == k]
            at = starts[rows][:, None] + np.arange(k)
            out[rows] = latency[flat[at]].sum(axis=1)
    return out


def _pair_paths(
    router: Router, src: np.ndarray, dst: np.ndarray, hashed: np.ndarray, config: SimConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """The links the flows of each GPU pair ``src[i] -> dst[i]`` may cross: with ``hashed[i]`` (a stage transfer
    under ECMP) the path of each of its network connections as the step routes it (flow keys 0 to
    ``NET_CONNECTIONS_PER_PEER`` - 1, ``config.pxn``: ``simulator.collectives.p2p``), else every fewest-hop path
    (``router`` sprays), with and without PXN. Returned: those outside the fabric (pair i's ``count[i]``
    consecutive entries of ``ends``, repeats possible) and the fabric's, ``fabric[span[i]]`` (``span`` -1 inside
    a server; pairs between the same switches share one), and the largest and smallest latency of those paths
    (the links outside the fabric plus h fabric hops at the slowest / fastest fabric link)."""
    topo = router.topology
    latency = topo.link_latency_s
    between = topo.link_tier >= int(LinkTier.FABRIC_1)  # switch to switch
    n = len(src)
    outside: list[tuple[int, ...]] = [()] * n
    span = np.full(n, -1, dtype=np.int64)
    high, low = np.zeros(n), np.full(n, np.inf)
    inside = topo.gpu_server[src] == topo.gpu_server[dst]
    server, local = topo.gpu_server, topo.gpu_local
    within = np.flatnonzero(inside)
    for i in within.tolist():  # the server's fixed route (Router's, without its per-pair state)
        outside[i] = tuple(topo.servers[server[src[i]]].intra_routes[int(local[src[i]]), int(local[dst[i]])])
    high[within] = low[within] = _latency_sums(latency, [outside[i] for i in within.tolist()])
    walks: dict[bytes, tuple[np.ndarray, float, float]] = {}  # fabric links -> them, h hops at slowest, fastest
    leaves: dict[tuple[int, int], bytes] = {}  # a sprayed walk's key by the switches it joins
    both: list[list[bytes]] = [[] for _ in range(n)]
    step = Router(
        topo, policy="ecmp", seed=config.seed, pxn=config.pxn, failed_links=config.failed_links, cache=router.cache
    )
    routed = [(step, False, k, config.pxn) for k in range(NET_CONNECTIONS_PER_PEER)]
    for how, every, key_, pxn in [(router, True, 0, False), (router, True, 0, True)] + routed:
        at = np.flatnonzero(~inside & (hashed != every))
        if every:  # every fewest-hop path: the links outside the fabric, and the sprayed walk between its switches
            parts, enter, leave = how.fabric_ends(src[at], dst[at], pxn=pxn)
            keys: list[bytes] = []
            for j, ends in enumerate(zip(enter.tolist(), leave.tolist())):
                known = leaves.get(ends)
                if known is None:
                    i = int(at[j])
                    path = how.weighted_paths(src[i : i + 1], dst[i : i + 1], flow_keys=0, pxn=pxn)[0][0]
                    crossing = between[path]
                    known = leaves[ends] = path[crossing].tobytes()
                    if known not in walks:  # h hops at the slowest and the fastest of these links: every walk has h
                        speed = latency[path[crossing]]
                        h = int(between[how.path(int(src[i]), int(dst[i]), pxn=pxn)].sum())
                        hops = (h * float(speed.max()), h * float(speed.min())) if h else (0, 0)
                        walks[known] = (path[crossing], *hops)
                keys.append(known)
            sums = _latency_sums(latency, parts)
            high[at] = np.maximum(high[at], sums + np.array([walks[key][1] for key in keys], dtype=np.float64))
            low[at] = np.minimum(low[at], sums + np.array([walks[key][2] for key in keys], dtype=np.float64))
            for i, part, key in zip(at.tolist(), parts, keys):
                outside[i] += part
                both[i].append(key)
            continue
        for i, path in zip(at.tolist(), how.paths(src[at], dst[at], flow_keys=key_, pxn=pxn)):
            crossing = between[path]
            key = path[crossing].tobytes() + b"path"
            walk = walks.get(key)
            if walk is None:
                speed = latency[path[crossing]]
                walk = walks[key] = (path[crossing], float(speed.sum()), float(speed.sum()))
            base = float(latency[path[~crossing]].sum())
            high[i] = max(high[i], base + walk[1])
            low[i] = min(low[i], base + walk[2])
            outside[i] += tuple(path[~crossing].tolist())
            both[i].append(key)
    spans: dict[tuple[bytes, ...], int] = {}
    fabric: list[np.ndarray] = []
    for i in np.flatnonzero(~inside).tolist():
        union = tuple(sorted(set(both[i])))
        seen = spans.get(union)
        if seen is None:
            seen = spans[union] = len(fabric)
            fabric.append(np.unique(np.concatenate([walks[k][0] for k in union])))
        span[i] = seen
    count = np.fromiter(map(len, outside), dtype=np.int64, count=n)
    ends_flat = np.fromiter(chain.from_iterable(outside), dtype=np.int64, count=int(count.sum()))
    return ends_flat, count, span, fabric, high, low


def bounding_fabric(
    p: ParallelismSpec,
    topology: Topology,
    placement: Placement,
    config: SimConfig,
    route_cache: RouteCache,
    plan: Plan,
    *,
    tied_embeddings: bool = False,
) -> tuple[Topology | None, str]:
    """The fabric of the high side of the bound (:func:`bound_note`): the topology with link capacities and
    latencies on which the reduced run is no faster than any unit of the full step; or None and why no bound is
    given (flows coupled beyond shared links, :func:`_coupling`, or a routing policy other than ``ecmp`` and
    ``spray``, whose possible paths, the fewest-hop ones, are enumerated here).

    With C(x) the links GPU pair x may cross (every fewest-hop path, with and without PXN), n_u(l) the pairs of
    units other than u whose C holds link l (on a fabric link, every pair but x) and n(l) those of the units not
    simulated: capacity'(l) = min(c(l) / (1 + n(l)), min over the simulated pairs i with l in C(i) of R(i)),
    R(i) = min over the pairs x that i stands for (every unit's) of min over l in C(x) of c(l) / (1 + n_u(l));
    each simulated pair's network links (or all of them inside a server) gain latency until its fastest path is
    as slow as the slowest path of a pair it stands for."""
    why = _coupling(config)
    if why:
        return None, why
    if config.routing not in ("ecmp", "spray"):
        return None, f"routing {config.routing!r}: its possible paths are not enumerated for a bound"
    if plan.symmetric and p.ep > 1:
        why = _expert_pairs(p)[3]
        if why:
            return None, f"{why}, so their all-to-alls are not bounded"
    router = Router(topology, policy="spray", seed=config.seed, failed_links=config.failed_links, cache=route_cache)
    gpu = np.asarray(placement.rank_gpu, dtype=np.int64)
    pairs, unit, rep, hop = _pair_units(p, plan, embedding=tied_embeddings)
    ranks = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    hashed = hop & (config.routing == "ecmp")
    ends, count, span, fabric, slow, fast = _pair_paths(router, gpu[ranks[:, 0]], gpu[ranks[:, 1]], hashed, config)
    n, nlinks = len(pairs), topology.num_links
    capacity = topology.link_capacity_bytes_per_s
    # the links outside the fabric: (pair, link) once each, in pair order; how many pairs, and of each unit
    entries = np.sort(np.repeat(np.arange(n), count) * nlinks + ends)
    entries = entries[np.concatenate(([True], entries[1:] != entries[:-1]))] if entries.size else entries
    pair, link = entries // nlinks, entries % nlinks
    total = np.bincount(link, minlength=nlinks)
    simulated = np.bincount(link[unit[pair] == 0], minlength=nlinks)
    _, inverse, counts = np.unique(unit[pair] * nlinks + link, return_inverse=True, return_counts=True)
    worst = np.full(n, np.inf)
    np.minimum.at(worst, pair, capacity[link] / (1 + total[link] - counts[inverse.ravel()]))
    # the fabric links: the pairs of each span, added once per span
    leaves = span >= 0
    per_span = np.bincount(span[leaves], minlength=len(fabric))
    per_span_simulated = np.bincount(span[leaves & (unit == 0)], minlength=len(fabric))
    for j, links in enumerate(fabric):
        total[links] += per_span[j]
        simulated[links] += per_span_simulated[j]
    span_worst = np.array([np.min(capacity[links] / total[links], initial=np.inf) for links in fabric] + [np.inf])
    worst = np.minimum(worst, span_worst[span])  # span -1: inside a server, the last, inf
    # per simulated pair, the least share and the slowest path of the pairs it stands for
    share = np.full(n, np.inf)
    np.minimum.at(share, rep, worst)
    slowest = np.zeros(n)
    np.maximum.at(slowest, rep, slow)
    new_capacity = capacity / (1 + total - simulated)
    added = np.zeros(nlinks)
    network = topology.link_tier >= int(LinkTier.NIC)
    first = np.concatenate(([0], np.cumsum(count)))
    for i in np.flatnonzero(rep == np.arange(n)).tolist():
        outside = ends[first[i] : first[i + 1]]
        own = np.concatenate((outside, fabric[span[i]])) if leaves[i] else outside
        np.minimum.at(new_capacity, own, share[i])
        deficit = slowest[i] - fast[i]
        if deficit > 0:
            late = own[network[own]] if leaves[i] else own
            np.maximum.at(added, late, deficit)
    new_capacity.setflags(write=False)
    latency = topology.link_latency_s + added
    latency.setflags(write=False)
    return dataclasses.replace(topology, link_capacity_bytes_per_s=new_capacity, link_latency_s=latency), ""


def bound_note(low_s: float | None, high_s: float | None, critical_s: float, why: str) -> str:
    """The note of the bound on an approximate reduction's step time (or why none is given)."""
    if why or low_s is None or high_s is None:
        return f"no bound on the approximation: {why}; exact=True (--exact) simulates every rank"
    return (
        f"bound: step time in [{low_s:.6g}, {high_s:.6g}] s, time in network in [{max(low_s - critical_s, 0.0):.6g}, "
        f"{max(high_s - critical_s, 0.0):.6g}] s (low: the reduced run, without the traffic of the ranks it stands "
        "for; high: the same run on links shared by all the traffic that may cross them, no faster than any of "
        "those ranks)"
    )


def notes(p: ParallelismSpec, plan: Plan, *, steady: tuple | None) -> list[str]:
    """What the result's ``notes`` say about the reductions used, in the order they apply; each says whether it
    is exact for this step or, if not, why it is an approximation."""

    def how(verdict: Verdict | None) -> str:
        if _exact(verdict):
            return "exact"
        return f"APPROXIMATE: {verdict.reason if verdict else 'forced'}; exact=True (--exact) simulates every rank"

    out = []
    if plan.symmetric:
        out.append(
            f"symmetric replicas ({how(plan.replica)}): 1 of {p.dp} data-parallel replicas simulated, the other "
            "replicas' members of its data- and expert-parallel groups passive (they move their bytes and arrive "
            "when it does)"
        )
    if plan.context:
        out.append(
            f"context ranks ({how(plan.context_verdict)}): context rank 0 of {p.cp} simulated, the other members "
            "of its context rings passive (they move their ring steps and arrive when it does); its tensor-parallel "
            "collectives and pipeline transfers stand for theirs"
        )
    if plan.tensor_rank0_p2p:
        counted = (
            f"the links they cross count {p.tp} times"
            if plan.scales_transfer_links
            else "link bytes of the other tensor ranks' transfers not counted"
        )
        out.append(
            f"representative transfers ({how(plan.tensor)}): pipeline transfers"
            + (" and context rings" if p.cp > 1 and p.cp_comm_type == "p2p" else "")
            + f" simulated for tensor rank 0, standing for all {p.tp} ({counted})"
        )
    if steady is not None:
        k = steady[0]
        out.append(
            f"steady state (APPROXIMATE unless the schedule is periodic by then): simulated {k} and {2 * k} "
            f"micro-batches, extrapolated linearly to {p.microbatches}; phases (traces) are those of the "
            f"{2 * k}-micro-batch run"
        )
    return out
