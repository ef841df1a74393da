"""SimConfig: how to simulate (network model, routing, algorithm policy, seed). Frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from topologies.checks import Option, finite, flag, instance, integer, is_int, option
from topologies.routing import ROUTING_POLICIES

from .collectives.tuner import CollectivePolicy
from .traffic import StorageStream, TrafficPolicy


class NetworkModel(Option):
    """The network models (network/): a member equals its name as a string (``NetworkModel.FLOW == "flow"``)."""

    FLOW = "flow"  # max-min fair sharing over every link (the default)
    ANALYTICAL = "analytical"  # congestion-unaware alpha-beta


NETWORK_MODEL_NAMES = tuple(m.value for m in NetworkModel)
CONGESTION_NAMES = ("dcqcn", "pfc", "ib-credit")  # refinements of the flow model (network/congestion.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkEvent:
    """At ``time_s`` link ``link`` starts running at ``scale`` x its capacity: 0 < scale < 1 degrades
    it, 0 fails it (routes avoid it from then on and running flows across it are rerouted)."""

    time_s: float
    link: int
    scale: float = 0.0

    def __post_init__(self) -> None:
        finite("LinkEvent.time_s", self.time_s, low=0)
        integer("LinkEvent.link", self.link, low=0, expected="a link id >= 0")
        finite("LinkEvent.scale", self.scale, low=0, high=1, expected="a number in [0, 1]")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    network_model: str = "flow"
    routing: str = "ecmp"
    seed: int = 0
    pxn: bool = True  # NCCL PXN: send through the destination rail's NIC over NVLink
    launch_overhead_s: float = 0.0  # host-side cost paid once per collective before it starts
    collectives: CollectivePolicy = field(default_factory=CollectivePolicy)
    failed_links: frozenset[int] = frozenset()  # link ids that carry nothing (routes avoid them)
    congestion: tuple[str, ...] = ()  # flow-model refinements: any of "dcqcn", "pfc", "ib-credit"
    task_ranks: tuple[int, ...] | None = ()  # ranks whose per-task start/end times are kept (None: all)
    link_events: tuple[LinkEvent, ...] = ()  # links degraded or failed during the run
    # NCCL's network proxy: one host thread per GPU serves its network connections step by step, a floor on
    # each collective step (collectives/nccl_model.py); False leaves it out (ablation). proxy_step_us: the
    # host cost of one step on one connection, Intel host, LL/LL128 (None: nccl_model.PROXY_STEP_US_INTEL)
    net_proxy: bool = True
    proxy_step_us: float | None = None
    # floor of a multi-server ring (collectives/nccl_model.py ring_net_step_s): "connection", each network
    # connection's steps one round trip apart, the first loop's transfer after its round trips; "round_trip",
    # the round trips alone; "proxy", the busiest GPU's serial proxy work (both for ablation)
    ring_net_floor: Literal["connection", "round_trip", "proxy"] = "connection"
    # chains of a tree all_reduce (collectives/tree.py): "channel", one a channel, half the channels on each tree
    # (NCCL's connect.cc); "pair", two a channel, one on each tree (the earlier model, for ablation)
    tree_chains: Literal["channel", "pair"] = "channel"
    # channels NCCL_MIN_CTAS / NCCL_MIN_NCHANNELS adds past the search's doubled set are copies of the first ones
    # (NCCL connect.cc ncclTopoPostset, copyChannels): same tree and NIC, sharing the search's tree bandwidth
    # (collectives/tree.py); False: half the channels on each tree, each with a quarter of a channel's ceiling
    tree_copies: bool = True
    # a multi-server tree's chunks pipelined through its network crossings, each a step round trip
    # (collectives/nccl_model.py tree_net_floor_s); False leaves it out (ablation)
    tree_net_floor: bool = True
    # a communicator across servers runs on the channels NCCL's ring search finds over the NICs its GPUs use
    # (collectives/base.py search_ring_channels: 4 for one GPU a DGX H100 server, 16 for all 8); False: two per NIC
    # of the server whatever the communicator uses (the earlier model, ablation)
    search_channels: bool = True
    # a point-to-point send relayed under PXN pays the NVLink hop into the relay GPU's buffer
    # (collectives/p2p.py pxn_relayed); False leaves it out (ablation)
    pxn_hop: bool = True
    # a point-to-point LL send split on LL's step, at an LL p2p channel's throughput (collectives/p2p.py
    # pair_flows); False: Simple's chunk, capped at llMaxBw / channels (ablation)
    p2p_ll: bool = True
    # Simple rings between sm80 GPUs over NVLink (P2P read) pay a cost per slice a CTA reads
    # (collectives/nccl_model.py ring_read_slices_s); False leaves it out (ablation)
    p2p_read: bool = True
    # LL rings between Ampere GPUs on one NVLink server move at a channel's measured rate (trees keep NCCL's)
    # (collectives/nccl_model.py simulated_cap_bytes_per_s); False: NCCL's llMaxBw / channels (ablation)
    ll_channel: bool = True
    # LL128 likewise (nccl_model.LL128_CHANNEL_GBPS_AMPERE); False: NCCL's perChMaxRingLL128Bw (ablation)
    ll128_channel: bool = True
    # LL rings (and other collectives lowered per channel, not trees) across servers: NCCL's llMaxBw for the host
    # (its CPU-vendor row) shared by the channels a collective launches, each at most NCCL's one-server LL rate
    # (collectives/nccl_model.py ll_net_share_cap_bytes_per_s); False: llMaxBw / the communicator's channels,
    # NCCL's figure (ablation)
    ll_net_share: bool = True
    # a multi-server ring's latency pays the network on every crossing of its dependency chain, N for
    # all_gather/reduce_scatter, 2N for all_reduce (collectives/nccl_model.py ring_chain_crossings); False: NCCL's
    # N - 1 and 2 (N - 1) (ablation)
    ring_crossings: bool = True
    # record each link tier's throughput over time (SimResult.tier_rates; an event replay only, for traces)
    tier_rates: bool = False
    # traffic classes (simulator/traffic.py): how switches schedule the classes of the collectives (by their group)
    # and of the storage streams; None: one class, plain max-min. storage: bulk transfers beside the collectives
    traffic: TrafficPolicy | None = None
    storage: tuple[StorageStream, ...] = ()

    def __post_init__(self) -> None:
        # every field checked here, at the edge (checks: one message naming the field)
        object.__setattr__(self, "network_model", option("network_model", self.network_model, NetworkModel))
        if not isinstance(self.routing, str) or self.routing not in ROUTING_POLICIES:
            raise ValueError(f"routing: {self.routing!r} is not known; expected one of {', '.join(ROUTING_POLICIES)}")
        object.__setattr__(self, "seed", integer("seed", self.seed))
        object.__setattr__(self, "pxn", flag("pxn", self.pxn))
        object.__setattr__(self, "tier_rates", flag("tier_rates", self.tier_rates))
        object.__setattr__(self, "net_proxy", flag("net_proxy", self.net_proxy))
        object.__setattr__(self, "pxn_hop", flag("pxn_hop", self.pxn_hop))
        object.__setattr__(self, "p2p_ll", flag("p2p_ll", self.p2p_ll))
        object.__setattr__(self, "tree_net_floor", flag("tree_net_floor", self.tree_net_floor))
        object.__setattr__(self, "tree_copies", flag("tree_copies", self.tree_copies))
        object.__setattr__(self, "p2p_read", flag("p2p_read", self.p2p_read))
        object.__setattr__(self, "search_channels", flag("search_channels", self.search_channels))
        object.__setattr__(self, "ll_channel", flag("ll_channel", self.ll_channel))
        object.__setattr__(self, "ll128_channel", flag("ll128_channel", self.ll128_channel))
        object.__setattr__(self, "ll_net_share", flag("ll_net_share", self.ll_net_share))
        object.__setattr__(self, "ring_crossings", flag("ring_crossings", self.ring_crossings))
        if self.ring_net_floor not in ("connection", "round_trip", "proxy"):
            raise ValueError(
                f"ring_net_floor: {self.ring_net_floor!r} is not known; expected 'connection', 'round_trip' or 'proxy'"
            )
        if self.tree_chains not in ("channel", "pair"):
            raise ValueError(f"tree_chains: {self.tree_chains!r} is not known; expected 'channel' or 'pair'")
        if self.proxy_step_us is not None:
            object.__setattr__(
                self,
                "proxy_step_us",
                finite("proxy_step_us", self.proxy_step_us, low=0, high=1000, expected="None or 0 <= us <= 1000"),
            )
        object.__setattr__(
            self,
            "launch_overhead_s",
            finite("launch_overhead_s", self.launch_overhead_s, low=0, high=1, high_open=True, expected="0 <= s < 1"),
        )
        if not isinstance(self.failed_links, frozenset) or any(not is_int(k) or k < 0 for k in self.failed_links):
            raise ValueError(
                f"failed_links: {self.failed_links!r} is not allowed; expected a frozenset of link ids >= 0"
            )
        if (
            not isinstance(self.congestion, tuple)
            or any(c not in CONGESTION_NAMES for c in self.congestion)
            or len(set(self.congestion)) != len(self.congestion)
        ):
            raise ValueError(
                f"congestion: {self.congestion!r} is not allowed; expected a tuple of distinct names "
                f"from {', '.join(CONGESTION_NAMES)}"
            )
        if self.congestion and self.network_model == "analytical":
            raise ValueError(
                f"congestion: {self.congestion!r} is not allowed with network_model 'analytical'; "
                "expected () or network_model 'flow'"
            )
        if self.task_ranks is not None and (
            not isinstance(self.task_ranks, tuple) or any(not is_int(r) or r < 0 for r in self.task_ranks)
        ):
            raise ValueError(
                f"task_ranks: {self.task_ranks!r} is not allowed; expected None (all ranks) or a tuple "
                "of rank indices >= 0"
            )
        if not isinstance(self.link_events, tuple) or any(not isinstance(e, LinkEvent) for e in self.link_events):
            raise ValueError(f"link_events: {self.link_events!r} is not allowed; expected a tuple of LinkEvent")
        instance("collectives", self.collectives, CollectivePolicy, "a CollectivePolicy")
        instance("traffic", self.traffic, (TrafficPolicy, type(None)), "a TrafficPolicy or None")
        if not isinstance(self.storage, tuple) or any(not isinstance(s, StorageStream) for s in self.storage):
            raise ValueError(f"storage: {self.storage!r} is not allowed; expected a tuple of StorageStream")
        for name, value in (("traffic", self.traffic), ("storage", self.storage)):
            if value and self.network_model != "flow":
                raise ValueError(
                    f"{name}: {value!r} is not allowed with network_model {self.network_model!r}; expected "
                    "network_model 'flow' (the analytical model ignores contention)"
                )
            if value and self.congestion:
                raise ValueError(
                    f"{name}: {value!r} is not allowed with congestion {self.congestion!r}; expected congestion () "
                    "(the congestion refinements do not schedule classes)"
                )
        if self.storage and any(e.scale <= 0 for e in self.link_events):
            raise ValueError(
                "storage: storage streams are not allowed with link failures (link_events with scale 0); expected "
                "one or the other (a storage stream is not rerouted)"
            )
