"""Per-rank replay: one SimPy process per rank walks its program.

* one process per (rank, stream) runs that stream's tasks in program order; a task first waits
  for the tasks of its rank named in its ``after`` (cross-stream dependencies);
* ComputeTask -> ``timeout(duration)``;
* a LinkEvent (``SimConfig.link_events``) at its time scales the link's capacity; a failure also
  swaps in a router that avoids the link, and the Fabric moves running flows that cross it onto
  their transfer's fresh paths (the same flows, routed again) with the bytes they have left.
* CommTask -> arrive at the collective's rendezvous; when the group's last rank arrives the
  collective's schedule runs (the launch overhead, then each step: ``Fabric.transfer`` of its flows,
  which waits the step's latency, below, and then moves them) and every member resumes when it ends.

Step flows become network flows here (``network_flows``): each flow's path comes from the
router (GPU of the source rank to GPU of the destination rank, ECMP key = channel, like one QP
per channel connection); the flows of a chain (one pipelined ring channel) merge into a single
network flow over the union of their links, each link weighted by its edge's share of the
chain's bytes; flows and chains that carry no bytes are dropped. Bytes become wire bytes with the
protocol's wire factor (and the step's per-flow wire scale); the protocol's payload cap becomes a
wire-rate cap (as does an independent flow's own ``Step.rate_cap_bytes_per_s``), and a flow that
leaves a server is also capped by what its network connections stream: each distinct (source,
destination, channel) of a step is one connection (per-QP limit x QPs per connection), so a chain's
edges to different peers through one NIC (a tree's parent and child) do not share one limit. Under PXN
(point-to-point schedules), the flows to one destination that leave through one NIC are one
connection (NCCL_NET_SHARED_COMMS), aggregated by that NIC's proxy, and share its limit in
proportion to their bytes. A step's latency is its protocol latency plus, unless
``Step.path_latency`` is off, the largest path latency of its flows'.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy

from topologies.routing import Router
from topologies.topology import Topology
from workloads.tasks import CommTask, ComputeTask, Workload

from ..collectives.base import SharedConnections, connection_caps_flat, edge_weighted_path
from ..schedule import Schedule, Step
from .fabric import Fabric


@dataclass(frozen=True, slots=True)
class NetworkFlows:
    """A step's network flows, flat: flow i crosses the ``counts[i]`` consecutive entries of
    ``links`` with the fractions ``link_weights`` of its bytes."""
    links: np.ndarray
    link_weights: np.ndarray
    counts: np.ndarray
    wire_bytes: np.ndarray
    caps_bytes_per_s: np.ndarray
    latency_s: float                   # the step's: its protocol latency (+ its flows' largest path latency)
    fill_bytes: np.ndarray


def network_flows(step: Step, schedule: Schedule, *, topology: Topology, router: Router,
                  rank_gpu: tuple[int, ...], qps_per_connection: int = 1) -> NetworkFlows:
    wire, cap = schedule.wire_factor, schedule.chain_rate_cap_bytes_per_s * schedule.wire_factor
    edge_w = None                           # None: every edge unsplit (weights 1)
    if schedule.innet_nodes:
        routed = [edge_weighted_path(router, rank_gpu, schedule.innet_nodes, s, d, flow_key=c, pxn=schedule.pxn)
                  for s, d, c in zip(step.src.tolist(), step.dst.tolist(), step.channel.tolist())]
        edge_paths = [links for links, _ in routed]
        edge_w = [w for _, w in routed]
    else:                                   # rank -> rank only: straight to the router, in bulk
        src, dst = [rank_gpu[s] for s in step.src.tolist()], [rank_gpu[d] for d in step.dst.tolist()]
        if router.spraying:
            edge_paths, edge_w = router.weighted_paths(src, dst, flow_keys=step.channel.tolist(), pxn=schedule.pxn)
        else:
            edge_paths = router.paths(src, dst, flow_keys=step.channel.tolist(), pxn=schedule.pxn)
    n_edges = len(edge_paths)
    lengths = np.fromiter(map(len, edge_paths), dtype=np.int64, count=n_edges)
    flat_links = np.concatenate(edge_paths) if n_edges else np.zeros(0, dtype=np.int64)
    flat_w = np.ones(flat_links.shape[0]) if edge_w is None else np.concatenate(edge_w)
    edge_of = np.repeat(np.arange(n_edges), lengths)          # the edge of each (edge, link) entry
    latency_s = step.latency_s
    if step.path_latency and n_edges:
        # a sprayed edge's latency is the byte-weighted mean over its paths (= path latency when unsplit)
        latency_s += float(np.bincount(edge_of, weights=topology.link_latency_s[flat_links] * flat_w,
                                     minlength=n_edges).max())
    scale = 1.0 if step.wire_scale is None else step.wire_scale
    wire_bytes = step.nbytes.astype(np.float64) * scale
    carries = wire_bytes > 0
    fill_wire = (np.zeros(step.num_flows) if step.fill_bytes is None else step.fill_bytes * wire_bytes
                 / np.maximum(step.nbytes, 1)) * wire
    # independent flows first (one per edge that carries bytes, in edge order), then one flow per chain
    # (by chain id)
    chained = step.chain >= 0
    alone = ~chained & carries
    independent = np.flatnonzero(alone)
    entries = [np.flatnonzero(alone[edge_of])]
    weights = [flat_w[entries[0]]]
    counts, nbytes, fills = [lengths[independent]], [wire_bytes[independent]], [fill_wire[independent]]
    members = np.flatnonzero(chained)
    if members.size:
        # a chain is one flow over its edges' links in edge order, each weighted by its edge's
        # share of the chain's largest edge; chains whose edges all carry nothing are dropped
        order = members[np.argsort(step.chain[members], kind="stable")]
        _, starts, dense = np.unique(step.chain[order], return_index=True, return_inverse=True)
        top = np.maximum.reduceat(wire_bytes[order], starts)
        fill_top = np.maximum.reduceat(np.where(carries[order], fill_wire[order], -np.inf), starts)
        kept = top > 0
        chain_index = np.zeros(step.num_flows, dtype=np.int64)          # each chained edge's chain, numbered 0, 1, ...
        chain_index[order] = dense.reshape(-1)
        entry = np.flatnonzero((chained & carries)[edge_of])   # entries of chained edges that carry bytes
        entry = entry[np.argsort(chain_index[edge_of[entry]], kind="stable")]   # chain by chain, in edge order
        entry_edge = edge_of[entry]
        entry_chain = chain_index[entry_edge]
        entries.append(entry)
        weights.append(flat_w[entry] * (wire_bytes[entry_edge] / top[entry_chain]))
        counts.append(np.bincount(entry_chain, minlength=starts.shape[0])[kept])
        nbytes.append(top[kept])
        fills.append(fill_top[kept])
    entry = np.concatenate(entries)
    links, link_weights, counts = flat_links[entry], np.concatenate(weights), np.concatenate(counts)
    if members.size:
        # each distinct (source, destination, channel) of the step is one connection (its own QPs)
        connections, shared = _connection_ids(step)[edge_of[entry]], None
    elif schedule.pxn:
        # PXN: the flows to one destination that leave through one NIC (the destination's rail) use one
        # connection, shared by channels and senders and aggregated by the proxy (NCCL_NET_SHARED_COMMS,
        # on by default); they share its limit in proportion to their bytes
        connections, shared = None, SharedConnections(destination=step.dst[independent], nbytes=nbytes[0])
    else:
        connections, shared = None, None       # every flow is one edge, so one connection
    caps = np.minimum(cap, connection_caps_flat(topology, links, counts, qps_per_connection, link_weights,
                                                connections=connections, shared=shared))
    if step.rate_cap_bytes_per_s is not None:       # per-flow payload caps (Step.check: no chains), as wire rates
        caps = np.minimum(caps, (step.rate_cap_bytes_per_s * wire * scale)[independent])
    return NetworkFlows(links=links, link_weights=link_weights, counts=counts, wire_bytes=np.concatenate(nbytes) * wire,
                        caps_bytes_per_s=caps, latency_s=latency_s, fill_bytes=np.concatenate(fills))


def _connection_ids(step: Step) -> np.ndarray:
    """Each flow's connection: distinct (source, destination, channel) get distinct ids 0, 1, ...
    (in that lexicographic order), from one integer key per flow (sources and destinations are
    negative for in-network buffers, so both are offset by the smallest)."""
    lo = min(int(step.src.min()), int(step.dst.min()))
    span = max(int(step.src.max()), int(step.dst.max())) - lo + 1
    channel_lo = int(step.channel.min())
    channel_span = int(step.channel.max()) - channel_lo + 1
    key = ((step.src - lo) * span + (step.dst - lo)) * channel_span + (step.channel - channel_lo)
    return np.unique(key, return_inverse=True)[1].reshape(-1)


@dataclass(slots=True)
class _Rendezvous:
    waiting: int
    done: simpy.Event
    start_s: float = 0.0
    end_s: float = 0.0


def run(*, network, workload: Workload, schedules: list[Schedule], topology: Topology, router: Router,
        rank_gpu: tuple[int, ...], launch_overhead_s: float = 0.0, qps_per_connection: int = 1,
        task_ranks: tuple[int, ...] | None = (), link_events=()) -> tuple[list[tuple[float, float]], list[float], dict]:
    """Replay ``workload`` on a fresh SimPy environment whose fabric drives ``network``.

    Returns per-collective (start_s, end_s), per-rank end times, and for the ranks in
    ``task_ranks`` (None: every rank) an array (tasks x 2) of each task's start and end time
    (start = when its stream and dependencies let it begin; a collective task then waits for its
    group, which is part of its time).
    """
    env = simpy.Environment()
    fabric = Fabric(env, network)
    meetings = [_Rendezvous(waiting=c.nranks, done=env.event()) for c in workload.collectives]
    rank_end = [0.0] * workload.nranks
    recorded = range(workload.nranks) if task_ranks is None else task_ranks
    task_times = {rank: np.full((len(workload.programs[rank]), 2), np.nan) for rank in recorded}

    lowered: dict[tuple[int, int], NetworkFlows] = {}    # (id of a shared schedule, step) -> flows
    routing = {"router": router}                         # replaced when a link fails

    def flows_of(step, schedule) -> NetworkFlows:
        return network_flows(step, schedule, topology=topology, router=routing["router"], rank_gpu=rank_gpu,
                             qps_per_connection=qps_per_connection)

    def rerouted(step, schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fresh paths of a step's flows (links, weights, counts), for a transfer caught by a link failure."""
        fresh = flows_of(step, schedule)
        return fresh.links, fresh.link_weights, fresh.counts

    def link_event(event):
        yield env.timeout(event.time_s)
        if event.scale > 0:
            fabric.scale_link(event.link, event.scale)
            return
        old = routing["router"]
        routing["router"] = Router(topology, policy=old.policy, seed=old.seed, pxn=old.pxn,
                                   failed_links=old.failed_links | {event.link})
        lowered.clear()
        fabric.fail_link(event.link)

    for event in sorted(link_events, key=lambda e: (e.time_s, e.link)):
        env.process(link_event(event))

    def execute(index: int):
        meeting = meetings[index]
        meeting.start_s = env.now
        schedule = schedules[index]
        if launch_overhead_s > 0:
            yield env.timeout(launch_overhead_s)
        for k, step in enumerate(schedule.steps):
            flows = lowered.get((id(schedule), k))
            if flows is None:
                flows = lowered[(id(schedule), k)] = flows_of(step, schedule)
            yield fabric.transfer(flows.links, flows.link_weights, flows.counts, flows.wire_bytes,
                                  flows.caps_bytes_per_s, flows.latency_s, fill_bytes=flows.fill_bytes,
                                  rebuild=partial(rerouted, step, schedule) if link_events else None)
        meeting.end_s = env.now
        meeting.done.succeed()

    def stream_process(rank: int, positions: list[int], done: list[simpy.Event]):
        program = workload.programs[rank]
        times = task_times.get(rank)
        for position in positions:
            task = program[position]
            waits = [done[a] for a in task.after if not done[a].triggered]
            if waits:
                yield waits[0] if len(waits) == 1 else env.all_of(waits)
            if times is not None:
                times[position, 0] = env.now
            if isinstance(task, ComputeTask):
                yield env.timeout(task.duration_s)
            elif isinstance(task, CommTask):
                meeting = meetings[task.index]
                meeting.waiting -= 1
                if meeting.waiting == 0:
                    env.process(execute(task.index))
                yield meeting.done
            done[position].succeed()
            if times is not None:
                times[position, 1] = env.now
            rank_end[rank] = max(rank_end[rank], env.now)

    for rank in range(workload.nranks):
        program = workload.programs[rank]
        done = [env.event() for _ in program]
        streams: dict[int, list[int]] = {}
        for position, task in enumerate(program):
            streams.setdefault(task.stream, []).append(position)
        for stream in sorted(streams):
            env.process(stream_process(rank, streams[stream], done))
    env.run()
    unfinished = [i for i, m in enumerate(meetings) if not m.done.triggered]
    if unfinished:
        i = unfinished[0]
        raise RuntimeError(f"collective {i} ({workload.collectives[i].kind.value}) never started: "
                           f"{meetings[i].waiting} rank(s) of its group never reached it (deadlock in the programs)")
    for times in task_times.values():
        times.setflags(write=False)
    return [(m.start_s, m.end_s) for m in meetings], rank_end, task_times
