"""Choose algorithm, protocol and channel count per collective and size, the way NCCL does.

NCCL's environment variables map onto a :class:`CollectivePolicy` (``from_environment``), so a
user can replay a tuned run as it was launched.

NCCL evaluates ``time = L + nbytes / algbw`` for every enabled (algorithm, protocol) pair and
takes the smallest (src/graph/tuning.cc, src/enqueue.cc). The tuner does the same with each
algorithm's ``estimate`` (NCCL's latencies; bandwidth from the topology's links, shared equally
by the collective's own flows). Users can force any part, as with NCCL_ALGO / NCCL_PROTO /
NCCL_MIN_NCHANNELS: a forced choice that cannot run is an error naming the value.

Channel count: NCCL's topology search gives about two ring channels per NIC on DGX/HGX-class
servers (16 with 8 NICs) and 2 on PCIe-only boxes; that is the default here (an approximation
of the search, which also depends on per-channel speed candidates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from workloads.collectives import Collective

from . import ALGORITHMS
from . import nccl_model
from .base import MAX_CHANNELS, LoweringContext, ring_channels


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectivePolicy:
    """User overrides; None = choose automatically."""

    algorithm: str | None = None
    protocol: str | None = None
    nchannels: int | None = None
    nvls: bool = True          # NCCL_NVLS_ENABLE
    collnet: bool = False      # NCCL_COLLNET_ENABLE (SHARP in-network reduction)
    qps_per_connection: int = 1   # NCCL_IB_QPS_PER_CONNECTION
    min_channels: int = 1      # NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS
    max_channels: int = MAX_CHANNELS   # NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS

    def __post_init__(self) -> None:
        if self.algorithm is not None and self.algorithm.lower() not in ALGORITHMS:
            raise ValueError(f"algorithm: {self.algorithm!r} is not known; expected one of {', '.join(ALGORITHMS)}")
        if self.protocol is not None and self.protocol not in nccl_model.PROTOCOLS:
            raise ValueError(f"protocol: {self.protocol!r} is not known; expected one of {', '.join(nccl_model.PROTOCOLS)}")
        if not isinstance(self.qps_per_connection, int) or not 1 <= self.qps_per_connection <= 128:
            raise ValueError(f"qps_per_connection: {self.qps_per_connection!r} is not allowed; expected 1 to 128")
        for name in ("min_channels", "max_channels"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= MAX_CHANNELS:
                raise ValueError(f"{name}: {value!r} is not allowed; expected an integer from 1 to {MAX_CHANNELS}")
        if self.min_channels > self.max_channels:
            raise ValueError(f"min_channels: {self.min_channels} is above max_channels ({self.max_channels})")
        if self.nchannels is not None and (not isinstance(self.nchannels, int) or not 1 <= self.nchannels <= MAX_CHANNELS):
            raise ValueError(f"channels: {self.nchannels!r} is not allowed; expected an integer from 1 to {MAX_CHANNELS}")


    @classmethod
    def from_environment(cls, env: Mapping[str, str], **overrides) -> "CollectivePolicy":
        """The policy NCCL's environment variables describe (NCCL_ALGO, NCCL_PROTO,
        NCCL_NVLS_ENABLE, NCCL_MIN/MAX_NCHANNELS, NCCL_MIN/MAX_CTAS, NCCL_IB_QPS_PER_CONNECTION);
        keyword ``overrides`` (command-line options) win over the environment."""
        def integer(name: str) -> int | None:
            text = env.get(name)
            if text is None or text == "":
                return None
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{name}: {text!r} is not an integer") from None

        fields: dict = {}
        algo = env.get("NCCL_ALGO")
        if algo:
            names = [a.strip().lower() for a in algo.split(",") if a.strip()]
            if algo.startswith("^") or len(names) != 1:
                raise ValueError(f"NCCL_ALGO: {algo!r} is not supported here; expected one algorithm name "
                                 f"({', '.join(ALGORITHMS)})")
            fields["algorithm"] = names[0]
        proto = env.get("NCCL_PROTO")
        if proto:
            names = {p.lower(): p for p in nccl_model.PROTOCOLS}
            if proto.lower() not in names:
                raise ValueError(f"NCCL_PROTO: {proto!r} is not supported here; expected one of "
                                 f"{', '.join(nccl_model.PROTOCOLS)}")
            fields["protocol"] = names[proto.lower()]
        nvls = integer("NCCL_NVLS_ENABLE")
        if nvls is not None:
            fields["nvls"] = nvls != 0
        collnet = integer("NCCL_COLLNET_ENABLE")
        if collnet is not None:
            fields["collnet"] = collnet != 0
        lows = [v for v in (integer("NCCL_MIN_NCHANNELS"), integer("NCCL_MIN_CTAS")) if v is not None]
        highs = [v for v in (integer("NCCL_MAX_NCHANNELS"), integer("NCCL_MAX_CTAS")) if v is not None]
        if lows:
            fields["min_channels"] = max(lows)
        if highs:
            fields["max_channels"] = min(highs)
        qps = integer("NCCL_IB_QPS_PER_CONNECTION")
        if qps is not None:
            fields["qps_per_connection"] = qps
        fields.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    algorithm: str
    protocol: str
    nchannels: int
    predicted_s: float


def choose(collective: Collective, ctx: LoweringContext, policy: CollectivePolicy = CollectivePolicy()) -> Choice:
    layout = ctx.layout(collective.group)
    comm_channels = ring_channels(layout)
    forced = policy.algorithm.lower() if policy.algorithm is not None else None
    enabled = nccl_model.protocols_enabled(intra=layout.intra)
    if policy.protocol is not None and policy.protocol not in enabled:
        raise ValueError(f"protocol: {policy.protocol!r} is not available on this system (enabled: {', '.join(enabled)})")
    best: Choice | None = None
    for algorithm in ALGORITHMS.values():
        if collective.kind not in algorithm.kinds or (forced is not None and algorithm.name != forced):
            continue
        if forced is None and not getattr(algorithm, "auto", True):
            continue
        if algorithm.name == "collnet" and not policy.collnet and forced is None:
            continue                # NCCL_COLLNET_ENABLE is off by default (and then holds no SHARP tree)
        reason = algorithm.supported(collective, ctx)
        if reason is None and algorithm.name.startswith("nvls") and not policy.nvls:
            reason = "disabled (NCCL_NVLS_ENABLE=0)"
        if reason is not None:
            if forced is not None:
                raise ValueError(f"algorithm {algorithm.name}: {reason}")
            continue
        # NVLS algorithms run on their own channel count (nvlsChannels), the others on the ring's;
        # NCCL_MIN/MAX_CTAS clamp both, --channels forces both
        own = getattr(algorithm, "channels", None)
        nchannels = policy.nchannels or min(policy.max_channels, max(
            policy.min_channels, own(collective, ctx) if own is not None else comm_channels))
        protocols = [p for p in enabled if p in algorithm.protocols]
        if policy.protocol is not None:
            if policy.protocol not in algorithm.protocols:
                if forced is not None:
                    raise ValueError(f"protocol: {algorithm.name} runs with {', '.join(algorithm.protocols)}, "
                                     f"not {policy.protocol!r}")
                continue
            protocols = [policy.protocol]
        for protocol in protocols:
            latency, algbw = algorithm.estimate(collective, ctx, protocol=protocol, nchannels=nchannels)
            if algbw <= 0 and policy.protocol is None:
                continue
            predicted = latency + (collective.nbytes / algbw if algbw > 0 else math.inf)
            if best is None or predicted < best.predicted_s:
                best = Choice(algorithm=algorithm.name, protocol=protocol, nchannels=nchannels, predicted_s=predicted)
    if best is None:
        if forced is not None and collective.kind not in ALGORITHMS[forced].kinds:
            raise ValueError(f"algorithm: {forced!r} cannot run {collective.kind.value}")
        raise ValueError(f"no algorithm/protocol can run {collective.kind.value} of {collective.nbytes} B here")
    return best
