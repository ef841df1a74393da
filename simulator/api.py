"""simulate(topology, workload, placement, config) -> SimResult. Wiring only: choose (the tuner) ->
lower (the algorithm) -> route (``flows.Routes`` over the one Router built here) -> run (the engine)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

import numpy as np

from topologies.checks import instance, is_int, reject
from topologies.routing import RouteCache, Router
from topologies.topology import LinkTier, Topology
from workloads.collectives import Collective
from workloads.tasks import Workload

from .collectives import ALGORITHMS, LoweringContext
from .collectives.tuner import Candidate, Choice, candidates, choose
from .config import SimConfig
from .engine.closed_form import collective_times
from .engine.replay import Background, run
from .engine.timeline import task_times
from .flows import Routes
from .network import build_network
from .placement import Placement
from .results import CollectiveRecord, SimResult, TierRates
from .schedule import Schedule


def simulate(
    topology: Topology,
    workload: Workload,
    placement: Placement | None = None,
    config: SimConfig | None = None,
    *,
    route_cache: RouteCache | None = None,
    groups: Sequence[str | None] | None = None,
) -> SimResult:
    """Simulate ``workload`` placed on ``topology`` (``placement``: block by default) as ``config`` says.

    ``route_cache`` (a ``topologies.routing.RouteCache``; default a fresh one) holds the routing tables
    derived from the topology alone; pass one cache to every call of a sweep on one fabric to build them
    once (results are the same with or without). ``groups`` (None: every collective unnamed) names the group
    of each collective (a step's "tp", "dp", ...; a job's name), which ``config.traffic`` maps to its traffic
    class (``simulator.traffic``); without a policy every flow is in one class."""
    _check_inputs(topology, workload, placement, config)
    instance("route_cache", route_cache, (RouteCache, type(None)), "a topologies.routing.RouteCache or None")
    config = config or SimConfig()
    route_cache = RouteCache() if route_cache is None else route_cache  # one for the storage and the collectives
    classes, background = _traffic(topology, workload, config, groups, route_cache)
    placement = placement or Placement.block(topology, nranks=workload.nranks)
    if placement.nranks != workload.nranks:
        raise ValueError(f"placement: places {placement.nranks} ranks but the workload has {workload.nranks}")
    if workload.unresolved:
        raise ValueError(
            f"workload: {workload.unresolved} compute tasks carry work but no duration; expected them "
            "resolved first (Workload.with_durations, e.g. workloads.training.resolve)"
        )
    ctx = _context(topology, placement, config, route_cache)
    routes = Routes(ctx.router, rank_gpu=placement.rank_gpu, qps_per_connection=ctx.qps_per_connection)
    # equal collectives (a training step repeats each TP all-reduce thousands of times) are chosen
    # and lowered once: Collective is frozen, and choice and schedule depend only on it and ctx
    planned: dict[Collective, tuple[Choice, Schedule]] = {}
    for c in workload.collectives:
        if c not in planned:
            planned[c] = _planned(c, ctx, config)
    choices = [planned[c][0] for c in workload.collectives]
    schedules = [planned[c][1] for c in workload.collectives]
    network = build_network(config.network_model, topology, congestion=config.congestion)
    if config.traffic is not None:
        network.set_traffic_classes(config.traffic.levels, config.traffic.weights)
    bad = [e.link for e in config.link_events if e.link >= topology.num_links]
    if bad:
        raise ValueError(f"link_events: link {bad[0]} does not exist; the topology has {topology.num_links} links")
    if config.task_ranks is not None and any(r >= workload.nranks for r in config.task_ranks):
        raise ValueError(f"task_ranks: {config.task_ranks!r} names a rank >= {workload.nranks} (the workload's ranks)")
    times: Iterable[tuple[float, float]]  # per collective (start_s, end_s)
    tier_rates = None
    recorded: dict[int, np.ndarray]
    if network.context_free and not config.link_events:
        # each collective's time ignores the rest: time each distinct schedule once, then the
        # timeline in closed form (engine.closed_form), with no event replay
        # (each distinct schedule is timed once, so its steps are routed once: no memo)
        durations, link_bytes, rerates = collective_times(
            network=network, schedules=schedules, route=routes.route, launch_overhead_s=config.launch_overhead_s
        )
        timeline = task_times(workload, durations)
        times = zip(timeline.collective_start_s.tolist(), timeline.collective_end_s.tolist())
        rank_end = timeline.rank_end_s.tolist()
        recorded = {}
        for rank in range(workload.nranks) if config.task_ranks is None else config.task_ranks:
            recorded[rank] = np.column_stack((timeline.arrival_s[rank], timeline.end_s[rank]))
            recorded[rank].setflags(write=False)
    else:
        tiers, tier_index = np.unique(topology.link_tier, return_inverse=True) if config.tier_rates else (None, None)
        times, rank_end, recorded, series = run(
            network=network,
            workload=workload,
            schedules=schedules,
            route=routes,
            on_link_failed=routes.on_link_failed,
            launch_overhead_s=config.launch_overhead_s,
            task_ranks=config.task_ranks,
            link_events=config.link_events,
            link_groups=tier_index if config.tier_rates else None,
            classes=classes,
            background=background,
        )
        link_bytes, rerates = network.link_bytes.copy(), network.rerates
        if tiers is not None and tier_index is not None:
            arrays = (
                np.array([t for t, _ in series], dtype=np.float64),
                np.array([r for _, r in series], dtype=np.float64).reshape(-1, len(tiers)),
                np.bincount(tier_index, weights=topology.link_capacity_bytes_per_s, minlength=len(tiers)),
            )
            for array in arrays:
                array.setflags(write=False)
            tier_rates = TierRates(
                tiers=tuple(LinkTier(int(t)).name.lower() for t in tiers),
                times_s=arrays[0],
                bytes_per_s=arrays[1],
                capacity_bytes_per_s=arrays[2],
            )
        # every task's times rebuilt from the collectives' (the same max-plus recurrence the replay ran)
        timeline = task_times(workload, [end - start for start, end in times])
    records = tuple(
        CollectiveRecord(
            index=i,
            collective=c,
            algorithm=ch.algorithm,
            protocol=ch.protocol,
            nchannels=s.nchannels,
            start_s=start,
            end_s=end,
            latency_s=s.latency_s,
            predicted_s=ch.predicted_s,
        )
        for i, (c, ch, s, (start, end)) in enumerate(zip(workload.collectives, choices, schedules, times))
    )
    link_bytes.setflags(write=False)
    return SimResult(
        config=config,
        topology_name=topology.name,
        collectives=records,
        rank_end_s=tuple(rank_end),
        link_bytes=link_bytes,
        link_names=topology.link_names,
        network_rerates=rerates,
        task_times=MappingProxyType(recorded),
        timeline=timeline,
        tier_rates=tier_rates,
    )


def collective_link_bytes(
    topology: Topology,
    workload: Workload,
    counts: Sequence[int],
    placement: Placement,
    config: SimConfig | None = None,
    *,
    route_cache: RouteCache | None = None,
) -> np.ndarray:
    """The wire bytes each link carries when collective i of ``workload`` runs ``counts[i]`` times, chosen,
    lowered and routed as :func:`simulate` does: link bytes do not depend on when the collectives run (a fluid
    network loses nothing), so no replay is needed. A training step that simulates one data-parallel replica
    adds what the collectives it stands for move (``simulator.studies.training``)."""
    _check_inputs(topology, workload, placement, config)
    instance("route_cache", route_cache, (RouteCache, type(None)), "a topologies.routing.RouteCache or None")
    config = config or SimConfig()
    if len(counts) != len(workload.collectives) or any(not is_int(n) or n < 0 for n in counts):
        raise reject(
            "counts", f"{len(counts)} values", f"one integer >= 0 per collective ({len(workload.collectives)})"
        )
    ctx = _context(topology, placement, config, route_cache)
    routes = Routes(ctx.router, rank_gpu=placement.rank_gpu, qps_per_connection=ctx.qps_per_connection)
    uses: dict[Collective, int] = {}
    for c, n in zip(workload.collectives, counts):
        if n:
            uses[c] = uses.get(c, 0) + n
    links: list[np.ndarray] = []
    moved: list[np.ndarray] = []
    for c, n in uses.items():
        _, schedule = _planned(c, ctx, config)
        for step in schedule.steps:
            flows = routes.route(step, schedule)
            links.append(flows.links)
            moved.append(np.repeat(flows.wire_bytes * n, flows.counts) * flows.link_weights)
    if not links:
        return np.zeros(topology.num_links)
    return np.bincount(np.concatenate(links), weights=np.concatenate(moved), minlength=topology.num_links)


def tuner_candidates(
    topology: Topology,
    collective: Collective,
    placement: Placement,
    config: SimConfig | None = None,
    *,
    route_cache: RouteCache | None = None,
) -> list[Candidate]:
    """What the tuner weighed for ``collective`` under ``simulate``'s context: each algorithm and protocol
    with NCCL's estimate, or why it was left out (``collectives.tuner.candidates``)."""
    instance("collective", collective, Collective, "a Collective")
    _check_inputs(topology, None, placement, config)
    config = config or SimConfig()
    return list(candidates(collective, _context(topology, placement, config, route_cache), config.collectives))


def _planned(c: Collective, ctx: LoweringContext, config: SimConfig) -> tuple[Choice, Schedule]:
    """What NCCL's tuner chooses for ``c`` and that algorithm's schedule (lowered on ``ctx``)."""
    choice = choose(c, ctx, config.collectives)
    return choice, ALGORITHMS[choice.algorithm].lower(c, ctx, protocol=choice.protocol, nchannels=choice.nchannels)


def _traffic(
    topology: Topology,
    workload: Workload,
    config: SimConfig,
    groups: Sequence[str | None] | None,
    route_cache: RouteCache | None,
) -> tuple[tuple[int, ...], tuple[Background, ...]]:
    """Each collective's traffic class index (empty without a policy) and the storage streams routed, checked
    before anything runs."""
    if groups is not None and (
        isinstance(groups, str)
        or len(groups) != len(workload.collectives)
        or not all(g is None or isinstance(g, str) for g in groups)
    ):
        raise reject("groups", groups, f"None or one group name (or None) per collective ({len(workload.collectives)})")
    policy = config.traffic
    classes: tuple[int, ...] = ()
    if policy is not None:
        names = [policy.class_of(g) for g in (groups or [None] * len(workload.collectives))]
        classes = tuple(policy.indices(names).tolist())
    if not config.storage:
        return classes, ()
    bad = [s for s in config.storage if max(s.src_gpu, s.dst_gpu) >= topology.num_gpus]
    if bad:
        raise reject("storage", bad[0], f"GPU ids below {topology.num_gpus} (the topology's GPUs)")
    # its own router (the collectives' routes stay as without it), one ECMP path, the sender's NIC (no PXN)
    router = Router(
        topology,
        policy=config.routing,
        seed=config.seed,
        pxn=False,
        failed_links=config.failed_links,
        cache=route_cache,
    )
    streams = []
    for s in config.storage:
        path = router.path(s.src_gpu, s.dst_gpu, flow_key=0)
        streams.append(
            Background(
                time_s=s.time_s,
                links=path,
                counts=np.array([path.shape[0]], dtype=np.int64),
                wire_bytes=np.array([float(s.nbytes)]),
                # no per-connection limit: a storage client stripes a write over many connections (NFS nconnect,
                # parallel file systems' stripes, GPUDirect Storage's queue pairs), so links alone bound it
                caps_bytes_per_s=np.array([np.inf]),
                traffic_class=0 if policy is None else int(policy.indices([policy.class_of(s.group)])[0]),
            )
        )
    return classes, tuple(streams)


def _check_inputs(topology: object, workload: object, placement: object, config: object) -> None:
    """The arguments' types, checked before anything runs (one clear error instead of one from deep inside)."""
    instance("topology", topology, Topology, "a Topology (topologies.presets.build_system(name, nodes=...))")
    if workload is not None:
        instance("workload", workload, Workload, "a Workload (Workload.sequence([collective, ...], nranks=n))")
    instance("placement", placement, (Placement, type(None)), "a Placement or None")
    instance("config", config, (SimConfig, type(None)), "a SimConfig or None")


def _context(
    topology: Topology, placement: Placement, config: SimConfig, route_cache: RouteCache | None
) -> LoweringContext:
    """The lowering context, with the one Router of the simulation (the algorithms' estimates and the
    flows' routes both use it)."""
    router = Router(
        topology,
        policy=config.routing,
        seed=config.seed,
        pxn=config.pxn,
        failed_links=config.failed_links,
        cache=route_cache,
    )
    return LoweringContext(
        topology=topology,
        router=router,
        rank_gpu=placement.rank_gpu,
        qps_per_connection=config.collectives.qps_per_connection,
        net_proxy=config.net_proxy,
        proxy_step_us=config.proxy_step_us,
        ring_net_floor=config.ring_net_floor,
        tree_chains=config.tree_chains,
        tree_copies=config.tree_copies,
        tree_net_floor=config.tree_net_floor,
        search_channels=config.search_channels,
        nccl_minor=config.collectives.nccl_minor,
        pxn_hop=config.pxn_hop,
        p2p_ll=config.p2p_ll,
        p2p_read=config.p2p_read,
        ll_channel=config.ll_channel,
        ll128_channel=config.ll128_channel,
        ll_net_share=config.ll_net_share,
        ring_crossings=config.ring_crossings,
    )
