"""Choose algorithm, protocol and channel count per collective and size, the way NCCL does.

NCCL's environment variables map onto a :class:`CollectivePolicy` (``from_environment``), so a
user can replay a tuned run as it was launched. NCCL_ALGO and NCCL_PROTO take NCCL's own syntax
(2.24 and later; :func:`parse_selection`): a comma-separated list of names, case-insensitive, that
allows only those, or ``^`` and a list that excludes them, then optionally ``function:list`` parts
that replace the list for one function (``NCCL_ALGO="ring,tree;allgather:^nvls"``). As in NCCL they
restrict the tuner's choice for the five collectives it tunes (broadcast, reduce, all_gather,
reduce_scatter, all_reduce) and do not touch point-to-point traffic (sendrecv, alltoall), whose
protocol NCCL picks by size; a function left with nothing that can run is an error, as in NCCL since
2.24. An NCCL_PROTO that leaves LL128 allowed turns it on even where NCCL keeps it off by default (no
NVLink, an older release), as NCCL does. Lenient where NCCL is strict: spaces around names are ignored, and "collnet"
(the name before 2.15) means CollNetDirect. ``--algo``/``--proto`` force one algorithm or protocol
for any collective and win over the environment: an option given replaces the variables it overrides
(``OVERRIDES``), which are then not read at all.

NCCL evaluates ``time = L + nbytes / algbw`` for every enabled (algorithm, protocol) pair and
takes the smallest (src/graph/tuning.cc, src/enqueue.cc). The tuner does the same with each
algorithm's ``estimate`` (NCCL's latencies; bandwidth from the topology's links, shared equally
by the collective's own flows). A forced choice (``--algo``, ``--proto``, ``--channels``) that cannot
run is an error naming the value.

Release: ``CollectivePolicy.nccl_version`` (``--nccl-version``; default ``nccl_model.DEFAULT_NCCL_VERSION``,
2.30, the release of the constants) chooses what NCCL enables by default (LL128 per compute capability, path and
release; PAT from 2.23; NVLS all_gather/reduce_scatter from 2.19; Blackwell from 2.25) and that release's Tree
Simple latency in the estimate (nccl_model's docstring). An algorithm a release lacks is skipped "by
--nccl-version", or an error when forced.

Channel count: NCCL's topology search gives about two ring channels per NIC on DGX/HGX-class
servers (16 with 8 NICs) and 2 on PCIe-only boxes; that is the default here (an approximation
of the search, which also depends on per-channel speed candidates).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from topologies.checks import flag, instance, integer, option, reject
from workloads.collectives import Collective, CollectiveKind

from . import ALGORITHMS, nccl_model
from .base import MAX_CHANNELS, LoweringContext, ring_channels

# NCCL's algorithm names in NCCL_ALGO (ncclAlgoStr in src/graph/tuning.cc; "collnet", the name before
# 2.15, means both CollNet algorithms) -> the algorithms modelled here; CollNetChain is not modelled
NCCL_ALGORITHM_NAMES = MappingProxyType(
    {
        "ring": ("ring",),
        "tree": ("tree",),
        "nvls": ("nvls",),
        "nvlstree": ("nvlstree",),
        "pat": ("pat",),
        "collnetdirect": ("collnet",),
        "collnetchain": (),
        "collnet": ("collnet",),
    }
)
NCCL_PROTOCOL_NAMES = MappingProxyType({name.lower(): (name,) for name in nccl_model.PROTOCOLS})
# the functions NCCL's tuner chooses for (ncclFuncStr), as named in the per-function syntax
NCCL_FUNCTIONS = MappingProxyType(
    {
        "broadcast": CollectiveKind.BROADCAST,
        "reduce": CollectiveKind.REDUCE,
        "allgather": CollectiveKind.ALL_GATHER,
        "reducescatter": CollectiveKind.REDUCE_SCATTER,
        "allreduce": CollectiveKind.ALL_REDUCE,
    }
)
NCCL_ENVIRONMENT = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVLS_ENABLE",
    "NCCL_COLLNET_ENABLE",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_IB_QPS_PER_CONNECTION",
)
# the variables each CollectivePolicy option overrides when given (from_environment's overrides)
OVERRIDES = MappingProxyType(
    {
        "algorithm": ("NCCL_ALGO",),
        "protocol": ("NCCL_PROTO",),
        "nchannels": ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS"),
        "qps_per_connection": ("NCCL_IB_QPS_PER_CONNECTION",),
        "collnet": ("NCCL_COLLNET_ENABLE",),
    }
)


def applied_settings(env: Mapping[str, str], **overrides) -> dict[str, str]:
    """The variables of ``NCCL_ENVIRONMENT`` set in ``env`` that ``from_environment(env, **overrides)`` uses:
    those no given (not None) override replaces, by name."""
    replaced = {name for option, value in overrides.items() if value is not None for name in OVERRIDES.get(option, ())}
    return {name: env[name] for name in NCCL_ENVIRONMENT if env.get(name, "").strip() and name not in replaced}


def describe_settings(settings: Mapping[str, str]) -> str:
    """``NCCL_ALGO=Ring NCCL_PROTO=Simple``: settings as a launch line would set them."""
    return " ".join(f"{name}={value}" for name, value in settings.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """NCCL_ALGO or NCCL_PROTO as NCCL reads it: per tuned function, the names allowed."""

    variable: str  # "NCCL_ALGO" or "NCCL_PROTO"
    text: str  # the value as given
    allowed: tuple[tuple[CollectiveKind, frozenset[str]], ...]

    def names(self, kind: CollectiveKind) -> frozenset[str] | None:
        """The names allowed for ``kind``; None (no restriction) for what NCCL does not tune (p2p)."""
        return dict(self.allowed).get(kind)


def parse_selection(variable: str, text: str) -> Selection:
    """``NCCL_ALGO`` / ``NCCL_PROTO`` in NCCL's syntax: ``[list][;function:list]...``, a list being names
    separated by commas, or ``^`` and the names to exclude (``^`` alone excludes nothing); case-insensitive;
    a function's part replaces the first list for that function, and only the first part may lack one."""
    names = NCCL_ALGORITHM_NAMES if variable == "NCCL_ALGO" else NCCL_PROTOCOL_NAMES
    every = frozenset(m for mapped in names.values() for m in mapped)
    allowed = dict.fromkeys(NCCL_FUNCTIONS.values(), every)
    for index, part in enumerate(p.strip() for p in text.split(";")):
        if not part:
            continue
        function, _, listed = part.rpartition(":")
        kinds = list(NCCL_FUNCTIONS.values())
        if not function and index > 0:
            raise ValueError(
                f"{variable}: {part!r} in {text!r} is not allowed; expected every part after the "
                "first to name its function (allreduce:ring,tree)"
            )
        if function:
            if function.strip().lower() not in NCCL_FUNCTIONS:
                raise ValueError(
                    f"{variable}: function {function.strip()!r} in {text!r} is not known; expected one "
                    "of Broadcast, Reduce, AllGather, ReduceScatter, AllReduce (any case)"
                )
            kinds = [NCCL_FUNCTIONS[function.strip().lower()]]
        listed = listed.strip()
        exclude = listed.startswith("^")
        tokens = [t.strip().lower() for t in listed.lstrip("^").split(",") if t.strip()]
        unknown = [t for t in tokens if t not in names]
        if unknown or not (tokens or exclude):
            raise ValueError(
                f"{variable}: {unknown[0] if unknown else listed!r} in {text!r} is not allowed; "
                f"expected names among {', '.join(names)} (any case), or ^ and names to exclude"
            )
        chosen = frozenset(m for t in tokens for m in names[t])
        for kind in kinds:
            allowed[kind] = every - chosen if exclude else chosen
    return Selection(variable=variable, text=text, allowed=tuple(allowed.items()))


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectivePolicy:
    """User overrides; None = choose automatically."""

    algorithm: str | None = None  # --algo: this algorithm, for every collective
    protocol: str | None = None  # --proto: this protocol
    algorithms: Selection | None = None  # NCCL_ALGO: the algorithms the tuner may take, per function
    protocols: Selection | None = None  # NCCL_PROTO: the protocols it may take, per function
    nchannels: int | None = None
    nvls: bool = True  # NCCL_NVLS_ENABLE
    collnet: bool = False  # NCCL_COLLNET_ENABLE (SHARP in-network reduction)
    qps_per_connection: int = 1  # NCCL_IB_QPS_PER_CONNECTION
    min_channels: int = 1  # NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS
    max_channels: int = MAX_CHANNELS  # NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS
    # the NCCL release whose default enablement (LL128, PAT, NVLS for all_gather/reduce_scatter) the tuner
    # follows: "2.MINOR" (a "2.MINOR.PATCH" is kept as its minor); nccl_model.NCCL_VERSIONS
    nccl_version: str = nccl_model.DEFAULT_NCCL_VERSION

    def __post_init__(self) -> None:
        # every field checked here, at the edge (checks: one message naming the field); numpy integers become
        # ints and a protocol name its Protocol member
        if self.algorithm is not None and (
            not isinstance(self.algorithm, str) or self.algorithm.lower() not in ALGORITHMS
        ):
            raise reject("algorithm", self.algorithm, f"None or one of {', '.join(ALGORITHMS)}")
        if self.protocol is not None:
            object.__setattr__(self, "protocol", option("protocol", self.protocol, nccl_model.Protocol))
        for name in ("algorithms", "protocols"):
            instance(name, getattr(self, name), (Selection, type(None)), "None or a Selection (parse_selection)")
        for name in ("nvls", "collnet"):
            object.__setattr__(self, name, flag(name, getattr(self, name)))
        object.__setattr__(
            self, "qps_per_connection", integer("qps_per_connection", self.qps_per_connection, low=1, high=128)
        )
        for name in ("min_channels", "max_channels"):
            object.__setattr__(self, name, integer(name, getattr(self, name), low=1, high=MAX_CHANNELS))
        if self.min_channels > self.max_channels:
            raise ValueError(f"min_channels: {self.min_channels} is above max_channels ({self.max_channels})")
        if self.nchannels is not None:
            object.__setattr__(self, "nchannels", integer("channels", self.nchannels, low=1, high=MAX_CHANNELS))
        object.__setattr__(self, "nccl_version", f"2.{nccl_model.nccl_minor(self.nccl_version)}")

    @property
    def nccl_minor(self) -> int:
        """The minor number of ``nccl_version`` (26 for "2.26")."""
        return int(self.nccl_version.split(".")[1])

    @classmethod
    def from_environment(cls, env: Mapping[str, str], **overrides) -> CollectivePolicy:
        """The policy NCCL's environment variables describe (NCCL_ALGO, NCCL_PROTO,
        NCCL_NVLS_ENABLE, NCCL_MIN/MAX_NCHANNELS, NCCL_MIN/MAX_CTAS, NCCL_IB_QPS_PER_CONNECTION);
        keyword ``overrides`` (command-line options) win over the environment: the variables an option
        replaces (``OVERRIDES``) are not read."""
        env = applied_settings(env, **overrides)

        def integer(name: str) -> int | None:
            text = env.get(name)
            if text is None or text == "":
                return None
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{name}: {text!r} is not an integer") from None

        fields: dict = {}
        for variable, name in (("NCCL_ALGO", "algorithms"), ("NCCL_PROTO", "protocols")):
            if env.get(variable, "").strip():
                fields[name] = parse_selection(variable, env[variable])
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One algorithm (and protocol) the tuner looked at for a collective: NCCL's estimate
    ``predicted_s = latency_s + nbytes / algbw_bytes_per_s``, or why it was left out (``skipped``; then the
    protocol and figures are None when it was left out before its protocols were looked at), and
    ``skipped_by`` the variable or option that left it out, if one did."""

    algorithm: str
    protocol: str | None
    nchannels: int | None
    latency_s: float | None
    algbw_bytes_per_s: float | None
    predicted_s: float | None
    skipped: str | None = None
    skipped_by: str | None = None  # the variable or option that left it out (NCCL_ALGO, --proto, ...)


def _skipped(algorithm: str, reason: str, by: str | None = None, protocol: str | None = None) -> Candidate:
    """A candidate left out for ``reason`` (by the variable or option ``by``), before its figures."""
    return Candidate(
        algorithm=algorithm,
        protocol=protocol,
        nchannels=None,
        latency_s=None,
        algbw_bytes_per_s=None,
        predicted_s=None,
        skipped=reason,
        skipped_by=by,
    )


def candidates(
    collective: Collective, ctx: LoweringContext, policy: CollectivePolicy = CollectivePolicy()
) -> Iterator[Candidate]:
    """Every algorithm that runs ``collective``'s kind, in ``ALGORITHMS`` order, with each protocol it may
    use here and NCCL's estimate, or the reason it is left out (what NCCL_DEBUG_SUBSYS=TUNING shows)."""
    layout = ctx.layout(collective.group)
    comm_channels = ring_channels(layout)
    forced = policy.algorithm.lower() if policy.algorithm is not None else None
    # NCCL_ALGO / NCCL_PROTO: what the tuner may take for this function (None: anything)
    algo_sel, proto_sel = policy.algorithms, policy.protocols
    algos = None if algo_sel is None else algo_sel.names(collective.kind)
    protos = None if proto_sel is None else proto_sel.names(collective.kind)
    minor = policy.nccl_minor
    if ctx.nccl_minor != minor:  # the release's rules where a mechanism reads it (p2p.uses_ll)
        ctx = replace(ctx, nccl_minor=minor)
    if layout.arch == "blackwell" and minor < nccl_model.BLACKWELL_MINOR:
        raise ValueError(
            f"nccl_version: {policy.nccl_version!r} cannot run Blackwell GPUs (NCCL builds sm100 kernels from "
            f"2.{nccl_model.BLACKWELL_MINOR}); expected 2.{nccl_model.BLACKWELL_MINOR} or later"
        )
    enabled = nccl_model.protocols_enabled(
        intra=layout.intra, minor=minor, sm_version=layout.sm_version, nnodes=layout.nnodes, nic_path=layout.nic_path
    )
    if protos is not None and "LL128" in protos:
        enabled = nccl_model.PROTOCOLS  # NCCL_PROTO naming LL128 skips NCCL's platform check for it
    if policy.protocol is not None and policy.protocol not in enabled:
        raise ValueError(
            f"protocol: {policy.protocol!r} is not available on this system (enabled: {', '.join(enabled)})"
        )
    for algorithm in ALGORITHMS.values():
        if collective.kind not in algorithm.kinds:
            continue
        reason, by = None, None
        if forced is not None and algorithm.name != forced:
            reason, by = f"--algo {forced}", "--algo"
        elif forced is None and not algorithm.auto:
            reason = "not an automatic choice (--algo only)"
        elif forced is None and algo_sel is not None and algos is not None and algorithm.name not in algos:
            reason, by = f"{algo_sel.variable}={algo_sel.text}", algo_sel.variable
        elif algorithm.name == "collnet" and not policy.collnet and forced is None:
            # off by default (and then holds no SHARP tree)
            reason, by = "NCCL_COLLNET_ENABLE is off", "NCCL_COLLNET_ENABLE"
        elif (missing := nccl_model.algorithm_missing(algorithm.name, collective.kind.value, minor)) is not None:
            reason, by = missing, "--nccl-version"
            if forced is not None:
                raise ValueError(f"algorithm {algorithm.name}: {missing}")
        else:
            reason = algorithm.supported(collective, ctx)
            if reason is None and algorithm.name.startswith("nvls") and not policy.nvls:
                reason, by = "disabled (NCCL_NVLS_ENABLE=0)", "NCCL_NVLS_ENABLE"
            if reason is not None and forced is not None:
                raise ValueError(f"algorithm {algorithm.name}: {reason}")
        if reason is not None:
            yield _skipped(algorithm.name, reason, by)
            continue
        # an algorithm with its own channel count runs on it (NVLS: nvlsChannels; sendrecv, alltoall:
        # p2pnChannels), the others on the ring's; NCCL_MIN/MAX_CTAS clamp both, --channels forces both
        own = algorithm.channels(collective, ctx)
        nchannels = policy.nchannels or min(
            policy.max_channels, max(policy.min_channels, own if own is not None else comm_channels)
        )
        protocols = [p for p in enabled if p in algorithm.protocols]
        if policy.protocol is not None:
            if policy.protocol not in algorithm.protocols:
                if forced is not None:
                    raise ValueError(
                        f"protocol: {algorithm.name} runs with {', '.join(algorithm.protocols)}, "
                        f"not {policy.protocol!r}"
                    )
                yield _skipped(algorithm.name, f"--proto {policy.protocol}", "--proto")
                continue
            protocols = [policy.protocol]
        for protocol in protocols:
            if proto_sel is not None and protos is not None and protocol not in protos and policy.protocol is None:
                yield _skipped(algorithm.name, f"{proto_sel.variable}={proto_sel.text}", proto_sel.variable, protocol)
                continue
            latency, algbw = algorithm.estimate(collective, ctx, protocol=protocol, nchannels=nchannels)
            if minor != nccl_model.nccl_minor(nccl_model.DEFAULT_NCCL_VERSION):  # the release's own estimate
                latency += nccl_model.estimate_latency_delta_s(
                    algorithm=algorithm.name,
                    kind_value=collective.kind.value,
                    protocol=protocol,
                    minor=minor,
                    nnodes=layout.nnodes,
                    ppn=layout.ppn,
                    intra=layout.intra,
                    nranks=collective.nranks,
                )
            if algbw <= 0 and policy.protocol is None:
                yield Candidate(
                    algorithm=algorithm.name,
                    protocol=protocol,
                    nchannels=nchannels,
                    latency_s=latency,
                    algbw_bytes_per_s=algbw,
                    predicted_s=None,
                    skipped="no bandwidth in NCCL's model (not used for this size or protocol)",
                )
                continue
            predicted = latency + (collective.nbytes / algbw if algbw > 0 else math.inf)
            yield Candidate(
                algorithm=algorithm.name,
                protocol=protocol,
                nchannels=nchannels,
                latency_s=latency,
                algbw_bytes_per_s=algbw,
                predicted_s=predicted,
            )


def choose(collective: Collective, ctx: LoweringContext, policy: CollectivePolicy = CollectivePolicy()) -> Choice:
    """The candidate with the smallest estimate (the first of equal ones), as NCCL's tuner takes it."""
    best: Choice | None = None
    for candidate in candidates(collective, ctx, policy):
        if candidate.skipped is not None:
            continue
        protocol, nchannels, predicted = candidate.protocol, candidate.nchannels, candidate.predicted_s
        assert protocol is not None and nchannels is not None and predicted is not None  # set unless skipped
        if best is None or predicted < best.predicted_s:
            best = Choice(algorithm=candidate.algorithm, protocol=protocol, nchannels=nchannels, predicted_s=predicted)
    if best is None:
        if policy.algorithm is not None and collective.kind not in ALGORITHMS[policy.algorithm.lower()].kinds:
            raise ValueError(f"algorithm: {policy.algorithm.lower()!r} cannot run {collective.kind.value}")
        left_out_by = {c.skipped_by for c in candidates(collective, ctx, policy)}
        for sel in (policy.algorithms, policy.protocols):
            if sel is not None and sel.variable in left_out_by:  # it left something out
                names = sel.names(collective.kind) or frozenset()  # not None: it left something out
                raise ValueError(
                    f"{sel.variable}: {sel.text!r} leaves {collective.kind.value} of {collective.nbytes} "
                    f"B only {', '.join(sorted(names)) or 'nothing'}, which cannot run here; expected "
                    "a value that allows an algorithm and protocol this collective can use"
                )
        raise ValueError(f"no algorithm/protocol can run {collective.kind.value} of {collective.nbytes} B here")
    return best
