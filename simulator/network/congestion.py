r"""Congestion refinements of the ``flow`` model: DCQCN, PFC, InfiniBand credits, incast queues, ECN.

``CongestionNetwork(capacity, refinements=(...), topology=...)`` keeps the ``add`` /
``next_completion_s`` / ``advance`` interface of every network model and computes its rates, once
per batch of changes, in four stages:

1. **max-min** rates :math:`r_f` over every link (``kernels.maxmin_rates``), as the ``flow`` model.
2. **DCQCN** (``Dcqcn``): the flows that cross a RoCE link run the DCQCN fluid model
   (``kernels.dcqcn``: rate dynamics of Zhu et al. SIGCOMM 2015 in the fluid form of Zhu et al.
   CoNEXT 2016, driven by RED/ECN marking at every switch egress), started from :math:`r_f`; their
   settled, time-averaged sending rates :math:`\hat s_f` are what they offer.
3. **Lossless back-pressure** (``Pfc`` on RoCE links, ``IbCredit`` on InfiniBand links):
   the flows crossing a lossless link offer :math:`\hat s_f` (with DCQCN) or their *injection
   share* :math:`d_f` (without: the max-min rate over the links up to and including the flow's
   first lossless link, what its sender pushes when nothing downstream slows it); over-subscribed
   egresses pause their lossless ingress links and the pauses spread upstream
   (``kernels.lossless``: every flow of a congestion tree, victims included, gets the throttle at
   which its congested egress fills, :math:`c_e / \text{offered}_e` for a lone tree).
4. **Projection**: the final rates are max-min over every link with each refined flow capped at
   what stages 2-3 gave it, so no link is ever above capacity and flows outside the fabric (NVLink,
   PCIe) share what is left max-min fairly.

A stage with nothing to act on (no refinement of that kind, no link of its kind carrying an active
flow, no link that its flows could over-fill) is skipped, and when every stage is skipped the rates
are the max-min rates of stage 1, bit for bit: a network built from capacities alone, or on a
fabric without RoCE/IB links, *is* the ``flow`` model.

DCQCN (with ECN marking thresholds as its parameters)
------------------------------------------------------
Per flow: current rate :math:`R_C`, target :math:`R_T`, :math:`\alpha`; per switch egress: queue
:math:`q`, marking :math:`p = P_{max}(q - K_{min})/(K_{max} - K_{min})` between the thresholds (0
below, 1 above). A CNP (at most one per ``cnp_interval_s``, when a packet of the interval was
marked) sets :math:`R_T = R_C`, :math:`R_C \leftarrow R_C(1 - \alpha/2)`; byte-counter and timer
expiries without a CNP move :math:`R_C` half-way to :math:`R_T` and raise :math:`R_T` (fast
recovery, additive :math:`R_{AI}`, hyper :math:`R_{HAI}`). Equations, integration and settling in
``simulator.kernels.dcqcn``.
Captures: under-utilisation (queues that drain to empty in the oscillation), unfairness (a flow
marked on two congested hops gets less than one marked on one), the standing queue of an incast.
Ignores: packets, CNP delay, PFC interplay inside the dynamics (PFC acts on the settled rates), and
each flow's own start-up: flows are taken to be long compared with the settling time.
Worked number: two flows on one RoCE 400G egress (49.02 GB/s; max-min: 24.51 GB/s each) average
24.43 GB/s each: the egress is 99.7 % busy because the queue empties in part of each oscillation
(period ~0.6 ms), and the mean queue is 78 kB, about half of :math:`K_{min}`.
Settling: one bottleneck settles within 1.5 ms of simulated time. Behind several bottlenecks the
slowest flows move at the additive-increase pace (:math:`R_{AI}` per byte-counter expiry, about
1 GB/s per ms at 400 Gb/s) and may not settle within ``horizon_s``; the rates are then the average
over the horizon (what DCQCN delivers over the first milliseconds, starting from the max-min shares)
and ``dcqcn_settled`` is False. Parking lot (one flow across two congested egresses, one flow on
each): 0.38 / 0.62 of the egress rate averaged over 4 ms, drifting to 0.06 / 0.94 after 40 ms.

Defaults are the NVIDIA ConnectX firmware defaults (``mlxconfig -d <dev> query``, documented in
NVIDIA's "DCQCN CC Parameters" table) and the switch-side ECN defaults of NVIDIA's lossless RoCE
configuration (Cumulus Linux ``roce lossless`` traffic.conf; Onyx ``roce lossless``):

=============================  ================  ==========================================
parameter                      default           NVIDIA name / source
=============================  ================  ==========================================
``kmin_bytes``                 150 kB            ECN min_threshold_bytes 150000 (Cumulus)
``kmax_bytes``                 1.5 MB            ECN max_threshold_bytes 1500000 (Cumulus)
``pmax``                       1.0               ECN probability 100 (Cumulus)
``g``                          5 / 1024          DCE_TCP_G 1019: alpha = (1019 a + 5 [CNP]) / 1024
``alpha_update_period_s``      1 us              DCE_TCP_RTT 1
``cnp_interval_s``             4 us              MIN_TIME_BETWEEN_CNPS 4, RATE_REDUCE_MONITOR_PERIOD 4
``rate_ai_bytes_per_s``        5 Mb/s            RPG_AI_RATE 5
``rate_hai_bytes_per_s``       50 Mb/s           RPG_HAI_RATE 50
``timer_s``                    300 us            RPG_TIME_RESET 300
``byte_counter_bytes``         32767 B           RPG_BYTE_RESET 32767
``threshold``                  1                 RPG_THRESHOLD 1 (F)
``rate_min_bytes_per_s``       1 Mb/s            RPG_MIN_RATE 1
``mtu_bytes``                  4096 B            RoCE active MTU (``topologies.links``)
=============================  ================  ==========================================

RPG_GD 11 with a 10-bit alpha gives the decrease :math:`\alpha_{fixed} / 2^{11} = \alpha / 2`
(as in the DCQCN paper), never more than RPG_MIN_DEC_FAC = 50 %; INITIAL_ALPHA_VALUE (1023) only
matters for a flow's first CNP, which the settled model does not see. The DCQCN paper's own
values (K_min 5 kB, K_max 200 kB, P_max 1 %, g 1/256, 55 us timers, 10 MB byte counter) can be
given instead. ``dt_s``, ``warmup_s``, ``block_s``, ``horizon_s`` and ``settle_tolerance`` are
numerical, not physical: step (a whole number of CNP intervals), discarded start, averaging
block, longest integration and settling test.

PFC (RoCE) and InfiniBand credit-based flow control
---------------------------------------------------
Both stop a link's sender when the receiver's buffer for that ingress (PFC: per port and priority,
above Xoff; IB: per virtual lane, out of credits) is full, so both are modelled by the same
congestion-tree fixed point (``simulator.kernels.lossless``; its docstring states the
assumptions and the victim example): offered :math:`o_f`, throughput :math:`m_f o_f`, every flow of
a tree throttled to the level :math:`\lambda_e = c_e / \sum o` of its congested egress, each link
of the tree paused :math:`1 - \lambda_e` of the time.
What differs, and is modelled: (i) the links: PFC acts only on RoCE links (a configuration: a
lossless priority), credits on every InfiniBand link (mandatory in IB); (ii) the credit loop:
a virtual lane of ``vl_buffer_bytes`` can only have that many bytes in flight, so an IB link runs
at most at :math:`B_{VL} / RTT` with :math:`RTT = 2 \times` the link's latency (data out, credit
back), which bounds long links; PFC needs headroom instead and keeps line rate;
(iii) the standing queue behind a paused ingress: ``xoff_bytes`` (PFC) or the VL buffer (IB).
With one virtual lane (NCCL puts all its traffic on one service level: ``NCCL_IB_SL``, default 0)
the IB model is the PFC model without pause quanta and headroom, which the time-averaged model
does not see either.
Constants: ``Pfc.xoff_bytes`` = 18,000 B (Cumulus Linux ``roce lossless`` traffic.conf:
``pfc.ROCE_PFC.xoff_size = 18000``). ``IbCredit.vl_buffer_bytes`` has no default: NVIDIA does not
publish the per-VL buffer of its switches, so the credit bound is off unless given.
Worked number: for a 64 KiB VL buffer over a 100 m cable (0.49 us) into a switch port (0.3 us),
:math:`RTT = 2 \times 0.79` us and the bound is 65536 / 1.58 us = 41 GB/s, below NDR's 49.7 GB/s.
Captures: head-of-line blocking (victim flows), congestion spreading up the tree, port-level
(not flow-level) sharing of a congested egress. Ignores: pause quanta, headroom and Xon/Xoff
hysteresis, PFC deadlock and storms, several priorities or VLs.

Incast
------
An N-to-1 pattern at a receiver's downlink: max-min gives each sender c/N. With PFC/credits the
downlink's tree pauses every sender's uplink, so the senders' other flows are throttled with them
(HOL victims). Queueing delay: the standing queue of each link is kept in ``link_queue_bytes``
(DCQCN: the time-averaged fluid queue; PFC/credits: the Xoff threshold / VL buffer of each paused
ingress feeding a congested egress) and ``queueing_delay_s(links)`` = :math:`\sum_l q_l / c_l`.
That delay is a query only: the engine does not add it to any transfer's latency, and the rates
are unaffected (a standing queue delays the first byte, not the throughput).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import overload

import numpy as np
import numpy.typing as npt

from topologies.checks import finite, integer, reject
from topologies.links import LinkKind
from topologies.topology import NodeKind, Topology

from ..kernels import dcqcn_rates, lossless_throttle, maxmin_rates, successor_pairs
from .flow import FlowNetwork

__all__ = ["Ecn", "Dcqcn", "Pfc", "IbCredit", "REFINEMENTS", "CongestionNetwork", "parse_refinements"]


def _reject(owner: str, name: str, value: object, expected: str) -> ValueError:
    return reject(f"{owner}.{name}", value, expected)


def _real(
    owner: str,
    name: str,
    value: object,
    *,
    low: float = 0.0,
    low_open: bool = True,
    high: float = math.inf,
    high_open: bool = True,
    expected: str,
) -> float:
    return finite(
        f"{owner}.{name}",
        value,
        low=low,
        low_open=low_open,
        high=None if high == math.inf else high,
        high_open=high_open,
        expected=expected,
    )


# --------------------------------------------------------------------------------------------------
# Refinement specs
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Ecn:
    """RED/ECN marking of a switch egress queue (the congestion point of DCQCN)."""

    kmin_bytes: float = 150_000.0  # Cumulus Linux roce lossless: ecn min_threshold_bytes = 150000
    kmax_bytes: float = 1_500_000.0  # Cumulus Linux roce lossless: ecn max_threshold_bytes = 1500000
    pmax: float = 1.0  # Cumulus Linux roce lossless: ecn probability = 100 (%)

    def __post_init__(self) -> None:
        _real("Ecn", "kmin_bytes", self.kmin_bytes, low_open=False, expected="a finite number >= 0")
        _real(
            "Ecn",
            "kmax_bytes",
            self.kmax_bytes,
            low=self.kmin_bytes,
            expected=f"a finite number > kmin_bytes ({self.kmin_bytes!r})",
        )
        _real("Ecn", "pmax", self.pmax, high=1.0, high_open=False, expected="a number in (0, 1]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Dcqcn:
    """DCQCN reaction-point constants (NVIDIA ConnectX defaults, see the module docstring) and the
    numerical settings of the fluid integration."""

    ecn: Ecn = field(default_factory=Ecn)
    g: float = 5.0 / 1024.0  # DCE_TCP_G 1019: alpha <- (1019 alpha + 5 [CNP]) / 1024
    alpha_update_period_s: float = 1e-6  # DCE_TCP_RTT 1 us
    cnp_interval_s: float = 4e-6  # MIN_TIME_BETWEEN_CNPS 4 us = RATE_REDUCE_MONITOR_PERIOD 4 us
    rate_ai_bytes_per_s: float = 5e6 / 8  # RPG_AI_RATE 5 Mb/s
    rate_hai_bytes_per_s: float = 50e6 / 8  # RPG_HAI_RATE 50 Mb/s
    timer_s: float = 300e-6  # RPG_TIME_RESET 300 us
    byte_counter_bytes: float = 32767.0  # RPG_BYTE_RESET 32767 B
    threshold: int = 1  # RPG_THRESHOLD 1 (F: counter expiries before AI / HAI)
    rate_min_bytes_per_s: float = 1e6 / 8  # RPG_MIN_RATE 1 Mb/s
    mtu_bytes: float = 4096.0  # RoCE active MTU 4096 (topologies.links RoCE presets)
    dt_s: float = 4e-6  # numerical: one CNP interval per step
    warmup_s: float = 0.5e-3  # numerical: start-up discarded before averaging
    block_s: float = 0.5e-3  # numerical: averaging block (longer than an oscillation)
    horizon_s: float = 4e-3  # numerical: longest integration
    settle_tolerance: float = 2e-3  # numerical: running-mean change per block / line rate

    name = "dcqcn"

    def __post_init__(self) -> None:
        o = "Dcqcn"
        if not isinstance(self.ecn, Ecn):
            raise _reject(o, "ecn", self.ecn, "an Ecn")
        _real(o, "g", self.g, high=1.0, expected="a number in (0, 1)")
        for name in (
            "alpha_update_period_s",
            "cnp_interval_s",
            "rate_ai_bytes_per_s",
            "rate_hai_bytes_per_s",
            "timer_s",
            "byte_counter_bytes",
            "rate_min_bytes_per_s",
            "mtu_bytes",
            "warmup_s",
            "block_s",
            "horizon_s",
        ):
            _real(
                o,
                name,
                getattr(self, name),
                low_open=name != "warmup_s",
                expected="a finite number > 0" if name != "warmup_s" else "a finite number >= 0",
            )
        integer(f"{o}.threshold", self.threshold, low=1)  # checked; the value is kept as given
        steps = _real(o, "dt_s", self.dt_s, expected="a finite number > 0") / self.cnp_interval_s
        if round(steps) < 1 or abs(steps - round(steps)) > 1e-9 * steps:
            raise _reject(o, "dt_s", self.dt_s, f"a whole multiple of cnp_interval_s ({self.cnp_interval_s!r})")
        if self.block_s < self.dt_s:
            raise _reject(o, "block_s", self.block_s, f"at least dt_s ({self.dt_s!r})")
        if self.horizon_s < self.warmup_s + self.block_s:
            raise _reject(
                o, "horizon_s", self.horizon_s, f"at least warmup_s + block_s ({self.warmup_s + self.block_s!r})"
            )
        _real(o, "settle_tolerance", self.settle_tolerance, low_open=False, expected="a finite number >= 0")

    def params(self) -> np.ndarray:
        """The physical constants in the order of ``kernels.dcqcn.DCQCN_PARAM_NAMES``."""
        e = self.ecn
        return np.array(
            [
                e.kmin_bytes,
                e.kmax_bytes,
                e.pmax,
                self.g,
                self.alpha_update_period_s,
                self.cnp_interval_s,
                self.rate_ai_bytes_per_s,
                self.rate_hai_bytes_per_s,
                self.timer_s,
                self.byte_counter_bytes,
                float(self.threshold),
                self.rate_min_bytes_per_s,
                self.mtu_bytes,
            ]
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Pfc:
    """Priority flow control on RoCE links (one lossless priority carries the RDMA traffic)."""

    xoff_bytes: float = 18_000.0  # Cumulus Linux roce lossless traffic.conf: pfc xoff_size = 18000

    name = "pfc"
    link_kinds = (LinkKind.ROCE,)

    def __post_init__(self) -> None:
        _real("Pfc", "xoff_bytes", self.xoff_bytes, low_open=False, expected="a finite number >= 0")

    def buffer_bytes(self) -> float:
        return self.xoff_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class IbCredit:
    """Credit-based link-level flow control on InfiniBand links (one data VL carries NCCL traffic).

    ``vl_buffer_bytes``: receive buffer of the VL; None (default: no public figure) leaves the
    credit-loop bound and the queue estimate off."""

    vl_buffer_bytes: float | None = None

    name = "ib-credit"
    link_kinds = (LinkKind.INFINIBAND,)

    def __post_init__(self) -> None:
        if self.vl_buffer_bytes is not None:
            _real("IbCredit", "vl_buffer_bytes", self.vl_buffer_bytes, expected="None or a finite number > 0")

    def buffer_bytes(self) -> float:
        return 0.0 if self.vl_buffer_bytes is None else self.vl_buffer_bytes


#: A congestion refinement spec.
Refinement = Dcqcn | Pfc | IbCredit

#: Refinement names (for ``refinements=`` and ``SimConfig(congestion=...)``) -> spec class.
REFINEMENTS = MappingProxyType({"dcqcn": Dcqcn, "pfc": Pfc, "ib-credit": IbCredit})


def parse_refinements(refinements: str | Refinement | Iterable[str | Refinement]) -> tuple[Refinement, ...]:
    """Specs from names or spec instances; one of each kind at most."""
    if isinstance(refinements, (str, Dcqcn, Pfc, IbCredit)):
        refinements = (refinements,)
    try:
        items = tuple(refinements)
    except TypeError:
        raise _reject(
            "CongestionNetwork", "refinements", refinements, f"a tuple of names ({', '.join(REFINEMENTS)}) or specs"
        ) from None
    specs: list[Refinement] = []
    for item in items:
        if isinstance(item, str):
            if item not in REFINEMENTS:
                raise _reject("CongestionNetwork", "refinements", item, f"one of {', '.join(REFINEMENTS)}")
            item = REFINEMENTS[item]()
        if not isinstance(item, (Dcqcn, Pfc, IbCredit)):
            raise _reject(
                "CongestionNetwork",
                "refinements",
                item,
                f"a name ({', '.join(REFINEMENTS)}) or a Dcqcn, Pfc or IbCredit",
            )
        if any(type(s) is type(item) for s in specs):
            raise _reject("CongestionNetwork", "refinements", item.name, "each refinement at most once")
        specs.append(item)
    order = {cls: i for i, cls in enumerate(REFINEMENTS.values())}
    return tuple(sorted(specs, key=lambda s: order[type(s)]))


# --------------------------------------------------------------------------------------------------
# The network model
# --------------------------------------------------------------------------------------------------


class CongestionNetwork(FlowNetwork):
    """The ``flow`` model with switchable congestion refinements (see the module docstring).

    ``refinements``: names (``"dcqcn"``, ``"pfc"``, ``"ib-credit"``) or specs (``Dcqcn(...)``,
    ``Pfc(...)``, ``IbCredit(...)``). Link metadata comes from ``topology=`` or from the explicit
    arrays ``link_kind`` (LinkKind per link), ``link_src`` / ``link_dst`` (node ids; needed by PFC
    and credits), ``link_from_switch`` (bool: the link leaves a fabric switch, so its queue marks
    ECN; needed by DCQCN) and ``link_latency_s`` (for the credit bound). With capacities only, no
    link has a kind and the model is the plain max-min ``flow`` model.

    After each re-rating: ``link_queue_bytes`` and ``link_pause_fraction`` (per link),
    ``dcqcn_simulated_s`` and ``dcqcn_settled`` (last DCQCN integration; 0 / True if none ran).
    """

    incremental = False  # keeps no link lists: its ``_rerate`` rates every flow (the refinements couple flows)

    def __init__(
        self,
        capacity_bytes_per_s: np.ndarray,
        *,
        refinements: str | Refinement | Iterable[str | Refinement] = (),
        topology: Topology | None = None,
        link_kind: np.ndarray | None = None,
        link_src: np.ndarray | None = None,
        link_dst: np.ndarray | None = None,
        link_from_switch: np.ndarray | None = None,
        link_latency_s: np.ndarray | None = None,
    ) -> None:
        super().__init__(capacity_bytes_per_s)
        n_links = self.capacity_bytes_per_s.shape[0]
        self.refinements = parse_refinements(refinements)
        self.name = "+".join(["flow"] + [r.name for r in self.refinements])
        if topology is not None:
            if not isinstance(topology, Topology):
                raise _reject("CongestionNetwork", "topology", type(topology).__name__, "a Topology")
            if any(a is not None for a in (link_kind, link_src, link_dst, link_from_switch, link_latency_s)):
                raise ValueError("CongestionNetwork: give topology= or the link arrays, not both")
            if topology.num_links != n_links:
                raise _reject(
                    "CongestionNetwork", "topology", f"{topology.num_links} links", f"{n_links} links, one per capacity"
                )
            link_kind, link_src, link_dst = topology.link_kind, topology.link_src, topology.link_dst
            kinds = {n: topology.graph.nodes[n]["kind"] for n in topology.graph.nodes}
            link_from_switch = np.fromiter(
                (kinds[int(u)] == NodeKind.FABRIC_SWITCH for u in link_src), dtype=np.bool_, count=n_links
            )
            link_latency_s = topology.link_latency_s
        self._kind = self._link_array("link_kind", link_kind, np.int64, n_links, fill=-1)
        self._src = self._link_array("link_src", link_src, np.int64, n_links)
        self._dst = self._link_array("link_dst", link_dst, np.int64, n_links)
        self._from_switch = self._link_array("link_from_switch", link_from_switch, np.bool_, n_links)
        self._latency = self._link_array("link_latency_s", link_latency_s, np.float64, n_links)

        self._dcqcn = next((r for r in self.refinements if isinstance(r, Dcqcn)), None)
        self._lossless_specs = tuple(r for r in self.refinements if isinstance(r, (Pfc, IbCredit)))
        roce = self._kind == int(LinkKind.ROCE)
        self._roce = roce if self._dcqcn is not None else np.zeros(n_links, dtype=np.bool_)
        self._lossless = np.zeros(n_links, dtype=np.bool_)
        self._buffer_bytes = np.zeros(n_links)
        for spec in self._lossless_specs:
            mask = np.isin(self._kind, [int(k) for k in spec.link_kinds])
            self._lossless |= mask
            self._buffer_bytes[mask] = spec.buffer_bytes()
        if self._dcqcn is not None and self._roce.any() and self._from_switch is None:
            raise ValueError(
                "CongestionNetwork: dcqcn needs link_from_switch (or topology=) to tell switch "
                "egresses (ECN marking) from NIC ports"
            )
        if self._lossless.any() and (self._src is None or self._dst is None):
            raise ValueError("CongestionNetwork: pfc / ib-credit need link_src and link_dst (or topology=)")
        self._credit_cap = np.full(n_links, np.inf)  # the credit-loop bound B_VL / RTT (inf where none)
        for spec in self._lossless_specs:
            if isinstance(spec, IbCredit) and spec.vl_buffer_bytes is not None:
                if self._latency is None:
                    raise ValueError(
                        "CongestionNetwork: IbCredit(vl_buffer_bytes=...) needs link_latency_s (or topology=)"
                    )
                ib = (self._kind == int(LinkKind.INFINIBAND)) & (self._latency > 0)
                self._credit_cap[ib] = spec.vl_buffer_bytes / (2.0 * self._latency[ib])
        self._effective = np.minimum(self.capacity_bytes_per_s, self._credit_cap)
        self.link_queue_bytes = np.zeros(n_links)
        self.link_pause_fraction = np.zeros(n_links)
        self.dcqcn_simulated_s = 0.0
        self.dcqcn_settled = True

    @overload
    @staticmethod
    def _link_array(
        name: str, values: npt.ArrayLike | None, dtype: npt.DTypeLike, n_links: int, fill: None = None
    ) -> np.ndarray | None: ...

    @overload
    @staticmethod
    def _link_array(
        name: str, values: npt.ArrayLike | None, dtype: npt.DTypeLike, n_links: int, fill: int
    ) -> np.ndarray: ...

    @staticmethod
    def _link_array(
        name: str, values: npt.ArrayLike | None, dtype: npt.DTypeLike, n_links: int, fill: int | None = None
    ) -> np.ndarray | None:
        if values is None:
            return None if fill is None else np.full(n_links, fill, dtype=dtype)
        array = np.asarray(values).astype(dtype, copy=True)
        if array.shape != (n_links,):
            raise _reject("CongestionNetwork", name, f"shape {array.shape}", f"shape ({n_links},), one per link")
        return array

    # ---- queries ----------------------------------------------------------------------------------
    def queueing_delay_s(self, links: np.ndarray) -> float:
        """Standing-queue delay along ``links`` at the current rates: sum of queue / capacity."""
        links = np.asarray(links, dtype=np.int64)
        return float(np.sum(self.link_queue_bytes[links] / self._effective[links]))

    # ---- rates ------------------------------------------------------------------------------------
    def set_link_scale(self, link: int, scale: float) -> None:
        super().set_link_scale(link, scale)
        self._effective[link] = min(self.capacity_bytes_per_s[link], self._credit_cap[link])

    def _rerate(self) -> None:
        active = self.active
        ptr, links, weights = self.flow_ptr, self.flow_links, self.flow_weights
        rates = maxmin_rates(ptr, links, weights, active, self._effective, self.cap)
        rates[~active] = 0.0
        self.rate = rates
        self.link_queue_bytes = np.zeros(self._effective.shape[0])
        self.link_pause_fraction = np.zeros(self._effective.shape[0])
        self.dcqcn_simulated_s, self.dcqcn_settled = 0.0, True
        if not self.refinements or links.shape[0] == 0 or not active.any():
            return
        entry_flow = np.repeat(np.arange(active.shape[0]), np.diff(ptr))
        offered = np.full(active.shape[0], np.inf)
        refined = np.zeros(active.shape[0], dtype=np.bool_)

        roce_entry, lossless_entry = self._roce[links], self._lossless[links]
        if roce_entry.any():
            refined |= self._run_dcqcn(rates, entry_flow, roce_entry, offered)
        if lossless_entry.any():
            refined |= self._run_lossless(entry_flow, lossless_entry, offered)
        if refined.any():
            caps = self.cap.copy()
            caps[refined] = np.minimum(caps[refined], offered[refined])
            rates = maxmin_rates(ptr, links, weights, active, self._effective, caps)
            rates[~active] = 0.0
            self.rate = rates

    def _run_dcqcn(
        self, rates: np.ndarray, entry_flow: np.ndarray, roce_entry: np.ndarray, offered: np.ndarray
    ) -> np.ndarray:
        """Stage 2; returns the flows it refined (and writes their offered rates)."""
        ptr, links, weights = self.flow_ptr, self.flow_links, self.flow_weights
        n_flows = self.active.shape[0]
        on_roce = np.zeros(n_flows, dtype=np.bool_)
        on_roce[entry_flow[roce_entry]] = True
        controlled = self.active & on_roce
        # line rate of each queue pair: its cap and the slowest link up to its NIC port (weight-scaled)
        upstream = self._upto_first(entry_flow, roce_entry)
        rate_max = np.full(n_flows, np.inf)
        np.minimum.at(rate_max, entry_flow[upstream], self._effective[links[upstream]] / weights[upstream])
        rate_max = np.minimum(rate_max, self.cap)
        assert self._from_switch is not None  # the constructor requires it with DCQCN on RoCE links
        marking = self._roce & self._from_switch
        is_port = self._roce & ~self._from_switch
        peak = np.bincount(
            links,
            weights=np.where(controlled[entry_flow] & marking[links], weights * rate_max[entry_flow], 0.0),
            minlength=self._effective.shape[0],
        )
        if not np.any(peak > self._effective):
            return np.zeros(n_flows, dtype=np.bool_)  # no egress can queue: DCQCN stays at line rate
        spec = self._dcqcn
        assert spec is not None  # RoCE entries are refined only with DCQCN on
        s, queue, simulated = dcqcn_rates(
            ptr,
            links,
            weights,
            controlled,
            self._effective,
            marking,
            is_port,
            rate_max,
            rates,
            spec.params(),
            dt_s=spec.dt_s,
            warmup_s=spec.warmup_s,
            block_s=spec.block_s,
            horizon_s=spec.horizon_s,
            settle_tol=spec.settle_tolerance,
        )
        offered[controlled] = s[controlled]
        self.link_queue_bytes = np.maximum(self.link_queue_bytes, queue)
        self.dcqcn_simulated_s = simulated
        self.dcqcn_settled = simulated < spec.horizon_s - 0.5 * spec.dt_s
        return controlled

    def _run_lossless(self, entry_flow: np.ndarray, lossless_entry: np.ndarray, offered: np.ndarray) -> np.ndarray:
        """Stage 3; returns the flows it throttled (and writes their offered rates)."""
        ptr, links, weights = self.flow_ptr, self.flow_links, self.flow_weights
        n_flows = self.active.shape[0]
        crosses = np.zeros(n_flows, dtype=np.bool_)
        crosses[entry_flow[lossless_entry]] = True
        participant = self.active & crosses
        demand = offered.copy()
        need = participant & ~np.isfinite(offered)
        if need.any():
            demand[need] = self._injection_share(entry_flow, lossless_entry, participant)[need]
        demand[~participant] = 0.0
        assert self._src is not None and self._dst is not None  # the constructor requires them with PFC / credits
        ups, downs = successor_pairs(ptr, links, participant, self._src, self._dst)
        throttle, pause, tree_level = lossless_throttle(
            ptr, links, weights, participant, self._effective, demand, self._lossless, ups, downs
        )
        slowed = participant & (throttle < 1.0)
        if not slowed.any():
            return np.zeros(n_flows, dtype=np.bool_)
        offered[participant] = demand[participant] * throttle[participant]
        self.link_pause_fraction = pause
        # standing queue behind each paused ingress: its Xoff / VL buffer, at the egress it feeds
        hit = (pause[ups] > 0) & np.isfinite(tree_level[downs])
        if hit.any():
            pairs = np.unique(np.stack([ups[hit], downs[hit]]), axis=1)
            queue = np.bincount(pairs[1], weights=self._buffer_bytes[pairs[0]], minlength=pause.shape[0])
            self.link_queue_bytes = np.maximum(self.link_queue_bytes, queue)
        return participant

    def _upto_first(self, entry_flow: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Entries at or before their flow's first entry in ``mask`` (every entry of a flow with none)."""
        position = np.arange(entry_flow.shape[0]) - self.flow_ptr[:-1][entry_flow]
        first = np.full(self.active.shape[0], np.iinfo(np.int64).max)
        np.minimum.at(first, entry_flow[mask], position[mask])
        upto: np.ndarray = position <= first[entry_flow]
        return upto

    def _injection_share(
        self, entry_flow: np.ndarray, lossless_entry: np.ndarray, participant: np.ndarray
    ) -> np.ndarray:
        """Max-min rates over the entries up to each participant's first lossless link (all entries of
        the other flows): what senders push when nothing downstream of their NIC port slows them."""
        keep = ~participant[entry_flow] | self._upto_first(entry_flow, lossless_entry)
        sub_ptr = np.concatenate([[0], np.cumsum(np.bincount(entry_flow[keep], minlength=participant.shape[0]))])
        return maxmin_rates(
            sub_ptr, self.flow_links[keep], self.flow_weights[keep], self.active, self._effective, self.cap
        )
