r"""DCQCN fluid model: per-flow rate dynamics driven by ECN marking at switch queues (numba kernel).

The maths
---------
A fluid model in the form of Zhu et al., "ECN or Delay" (CoNEXT 2016), of the DCQCN algorithm
(Zhu et al., SIGCOMM 2015), over many links and flows. Flow ``f`` (one RoCE queue pair) has a
current rate :math:`R_C`, a target rate :math:`R_T` and a congestion estimate :math:`\alpha`;
marking link ``l`` (a switch egress) has a queue :math:`q_l`; ``w_fl`` is the flow's weight on the
link (bytes on the link per flow byte).

* Sending rate: a NIC port (a *port* link) serves its queue pairs max-min fairly up to each
  one's :math:`R_C`: :math:`s_f = \min(R_C, \lambda_P)` with
  :math:`\sum_f w_{fP} \min(R_{C,f}, \lambda_P) = c_P` (:math:`\lambda_P = \infty` when the port
  is not full).
* Queues: :math:`\dot q_l = \sum_f w_{fl} s_f - c_l`, :math:`q_l \ge 0`.
* Marking (RED on the instantaneous queue): :math:`p_l = 0` for :math:`q \le K_{min}`,
  :math:`P_{max}(q - K_{min})/(K_{max} - K_{min})` up to :math:`K_{max}`, 1 above. A packet of flow
  ``f`` is marked with :math:`p_f = 1 - \prod_l (1 - p_l)^{w_{fl}}`; :math:`L_f = \ln(1 - p_f)`.
* Packets in a time ``T``: :math:`n(T) = s_f T / MTU`; no mark among them: :math:`e^{n(T) L_f}`.
* CNPs: at most one per interval :math:`\tau`, sent when a packet of the interval was marked, with
  probability :math:`P_\tau = 1 - e^{n(\tau) L_f}`. Each CNP sets :math:`R_T \leftarrow R_C`,
  :math:`R_C \leftarrow R_C (1 - \alpha/2)`.
* :math:`\alpha` is updated every :math:`\tau_\alpha`: :math:`(1-g)\alpha + g` with a CNP in the
  period, :math:`(1-g)\alpha` without; in expectation it relaxes towards
  :math:`P_\alpha = 1 - e^{n(\tau_\alpha) L_f}`.
* Rate-increase events, byte counter ``B`` and timer ``T`` (CoNEXT'16 eq. 4-5), at the rate
  :math:`e = \frac{s_f}{MTU}\left(\frac{p_f}{(1-p_f)^{-B/MTU} - 1} + \frac{p_f}{(1-p_f)^{-n(T)} - 1}\right)`
  (:math:`s_f/B + 1/T` without marking). Each sets :math:`R_C \leftarrow (R_T + R_C)/2` and raises
  :math:`R_T` by :math:`\delta = (1 - \varphi)\,[(1 - P_H) R_{AI} + P_H R_{HAI}]`, where
  :math:`\varphi = 1 - e^{F (B/MTU) L_f}` is the chance that a CNP fell within the last ``F``
  byte-counter periods (fast recovery: :math:`R_T` unchanged) and :math:`P_H = e^{F n(T) L_f}` the
  chance of no CNP for ``F`` timer periods (hyper increase, its multiplier ``i`` taken as 1).
  These two stage weights extend the CoNEXT'16 model, which applies :math:`R_{AI}` to every event.
* :math:`R_{min} \le R_C \le R_{max}`, :math:`R_T \le R_{max}` (:math:`R_{max}`: the flow's line
  rate).

Integration: a fixed step ``dt`` of ``k`` whole CNP intervals, with updates exact for the expected
number of events in the step, so the step is stable at any size:
:math:`\alpha \leftarrow P_\alpha + (\alpha - P_\alpha)(1-g)^{dt/\tau_\alpha}`; ``k`` times
:math:`R_T \leftarrow R_T - (R_T - R_C) P_\tau`, :math:`R_C \leftarrow R_C (1 - P_\tau \alpha/2)`;
:math:`R_T \leftarrow \min(R_{max}, R_T + \delta e\,dt)`;
:math:`R_C \leftarrow R_T - (R_T - R_C)\,2^{-e\,dt}`; :math:`q \leftarrow \max(0, q + (load - c)\,dt)`.
A link whose flows cannot over-fill it even at line rate (:math:`\sum_f w_{fl} R_{max,f} \le c_l`)
never queues and is left out. The first ``warmup`` steps are discarded; then the sending rates are
averaged over blocks of ``block`` steps, and the run stops once the running mean since the warm-up
moved by at most ``settle_tol`` x :math:`R_{max}` for every flow over the last block (after at least
two blocks), or at ``max_steps``. The result is the mean over everything after the warm-up (rates
and queues). ``settle_tol = 0`` runs the whole horizon.

What it captures: unfairness and under-utilisation against max-min (a flow marked on two congested
hops gets CNPs more often and less bandwidth; a queue that empties in the oscillation idles its
link), the standing queue at each congested egress, and the sharing of a NIC port by its queue
pairs. What it ignores: packets and their random marking (expectations only), the CNP feedback
delay, the growth of the hyper-increase multiplier, drops (lossy RoCE), PFC (a separate refinement)
and the start-up from line rate: the caller starts each flow from a given rate (the max-min share),
so the result is the settled regime.

Worked number (defaults of ``simulator.network.congestion.Dcqcn``): two flows through one
49.02 GB/s RoCE 400G egress, started at 24.51 GB/s each, oscillate around the fair share (period
about 0.6 ms, +-3 %), the queue emptying part of each cycle: 24.43 GB/s each on average, the egress
99.7 % busy, mean queue 78 kB (K_min is 150 kB), settled after 1.5 ms of simulated time.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numba import njit

from .maxmin import flow_csr

__all__ = ["dcqcn_rates", "DCQCN_PARAM_NAMES"]

#: Order of the physical parameters in the ``params`` array given to ``dcqcn_rates``.
DCQCN_PARAM_NAMES = (
    "kmin_bytes",
    "kmax_bytes",
    "pmax",
    "g",
    "alpha_update_period_s",
    "cnp_interval_s",
    "rate_ai_bytes_per_s",
    "rate_hai_bytes_per_s",
    "timer_s",
    "byte_counter_bytes",
    "threshold",
    "rate_min_bytes_per_s",
    "mtu_bytes",
)
_LN2 = math.log(2.0)


@njit(cache=True)
def _red(q: float, kmin: float, kmax: float, pmax: float) -> float:
    if q <= kmin:
        return 0.0
    if q <= kmax:
        return pmax * (q - kmin) / (kmax - kmin)
    return 1.0


@njit(cache=True)
def _port_levels(
    port_ptr: np.ndarray,
    port_flows: np.ndarray,
    port_w: np.ndarray,
    port_cap: np.ndarray,
    rc: np.ndarray,
    level: np.ndarray,
    scratch_r: np.ndarray,
    scratch_w: np.ndarray,
) -> None:
    """Water level of each port among its flows' current rates (inf when the port is not full)."""
    for k in range(port_cap.shape[0]):
        lo, hi = port_ptr[k], port_ptr[k + 1]
        total = 0.0
        for j in range(lo, hi):
            total += port_w[j] * rc[port_flows[j]]
        cap = port_cap[k]
        if total <= cap:
            level[k] = np.inf
            continue
        n = 0
        for j in range(lo, hi):  # insertion sort by rate (ports hold few queue pairs)
            r, w = rc[port_flows[j]], port_w[j]
            i = n
            while i > 0 and scratch_r[i - 1] > r:
                scratch_r[i] = scratch_r[i - 1]
                scratch_w[i] = scratch_w[i - 1]
                i -= 1
            scratch_r[i] = r
            scratch_w[i] = w
            n += 1
        wsum = 0.0
        for j in range(n):
            wsum += scratch_w[j]
        used = 0.0
        lam = cap / wsum
        for j in range(n):
            if scratch_r[j] * wsum + used >= cap:
                lam = (cap - used) / wsum
                break
            used += scratch_w[j] * scratch_r[j]
            wsum -= scratch_w[j]
        level[k] = lam


@njit(cache=True)
def _dcqcn_kernel(
    flows: np.ndarray,
    link_ptr: np.ndarray,
    link_entry_flow: np.ndarray,
    link_entry_w: np.ndarray,
    marking_links: np.ndarray,
    link_capacity: np.ndarray,
    port_ptr: np.ndarray,
    port_flows: np.ndarray,
    port_w: np.ndarray,
    port_cap: np.ndarray,
    flow_port_ptr: np.ndarray,
    flow_port_idx: np.ndarray,
    rate_max: np.ndarray,
    rate_init: np.ndarray,
    params: np.ndarray,
    dt: float,
    warmup_steps: int,
    block_steps: int,
    max_steps: int,
    settle_tol: float,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``flows``: controlled flow ids. ``marking_links[k]`` carries the entries
    ``link_ptr[k]:link_ptr[k+1]`` of ``link_entry_flow`` (index into ``flows``) with weights ``link_entry_w``."""
    n = flows.shape[0]
    n_links = link_capacity.shape[0]
    n_mark = marking_links.shape[0]
    kmin, kmax, pmax, g = params[0], params[1], params[2], params[3]
    tau_alpha, tau_cnp, r_ai, r_hai = params[4], params[5], params[6], params[7]
    timer, byte_counter, threshold, r_min, mtu = params[8], params[9], params[10], params[11], params[12]
    alpha_decay = (1.0 - g) ** (dt / tau_alpha)
    n_bytes = byte_counter / mtu
    gap_per_event = -dt * _LN2
    slots = int(round(dt / tau_cnp))

    rc = np.empty(n)
    rt = np.empty(n)
    rmax = np.empty(n)
    alpha = np.zeros(n)
    s = np.zeros(n)
    lf_sum = np.zeros(n)
    for i in range(n):
        f = flows[i]
        rmax[i] = rate_max[f]
        rc[i] = min(max(rate_init[f], r_min), rmax[i])
        rt[i] = rc[i]
    q = np.zeros(n_mark)
    n_ports = port_cap.shape[0]
    level = np.full(n_ports, np.inf)
    widest = 0
    for k in range(n_ports):
        widest = max(widest, port_ptr[k + 1] - port_ptr[k])
    scratch_r = np.empty(widest)
    scratch_w = np.empty(widest)

    block_sum = np.zeros(n)
    total_sum = np.zeros(n)
    total_q = np.zeros(n_mark)
    prev_running = np.zeros(n)
    blocks = 0
    steps = 0
    while steps < max_steps:
        # --- sending rates: a NIC port shares itself among its queue pairs up to their R_C
        _port_levels(port_ptr, port_flows, port_w, port_cap, rc, level, scratch_r, scratch_w)
        for i in range(n):
            r = rc[i]
            for j in range(flow_port_ptr[i], flow_port_ptr[i + 1]):
                r = min(r, level[flow_port_idx[j]])
            s[i] = r
        # --- queues; marking spreads ln(1 - p_l) over the flows of each link above K_min
        for k in range(n_mark):
            load = 0.0
            for j in range(link_ptr[k], link_ptr[k + 1]):
                load += link_entry_w[j] * s[link_entry_flow[j]]
            q[k] = max(0.0, q[k] + (load - link_capacity[marking_links[k]]) * dt)
            if q[k] > kmin:
                p = _red(q[k], kmin, kmax, pmax)
                keep = math.log1p(-p) if p < 1.0 else -np.inf
                for j in range(link_ptr[k], link_ptr[k + 1]):
                    lf_sum[link_entry_flow[j]] += link_entry_w[j] * keep
        # --- reaction points
        for i in range(n):
            lf = lf_sum[i]
            lf_sum[i] = 0.0
            sf = s[i]
            pkts = sf / mtu
            if lf == 0.0:  # no marking on the path: no CNP, increase events at s/B + 1/T, hyper stage
                alpha[i] *= alpha_decay
                events = pkts / n_bytes + 1.0 / timer
                delta = r_hai
            else:
                # one expm1 per counter gives both its expiry rate and its stage weight:
                # (1-p)^-n - 1 = -w / (1 + w) with w = (1-p)^n - 1
                pf = -math.expm1(lf)
                p_alpha = -math.expm1(pkts * tau_alpha * lf)
                p_cnp = -math.expm1(pkts * tau_cnp * lf)
                w_bytes = math.expm1(n_bytes * lf)
                w_timer = math.expm1(pkts * timer * lf)
                events = pkts * ((1.0 + w_bytes) * (pf / -w_bytes) + (1.0 + w_timer) * (pf / -w_timer))
                if threshold == 1.0:
                    hyper = 1.0 + w_timer
                    recovering = -w_bytes
                else:
                    hyper = (1.0 + w_timer) ** threshold
                    recovering = 1.0 - (1.0 + w_bytes) ** threshold
                delta = (1.0 - recovering) * ((1.0 - hyper) * r_ai + hyper * r_hai)
                alpha[i] = p_alpha + (alpha[i] - p_alpha) * alpha_decay
                # slots of one CNP interval: a CNP with probability p_cnp sets R_T = R_C and cuts R_C
                for _ in range(slots):
                    rt[i] -= (rt[i] - rc[i]) * p_cnp
                    rc[i] *= 1.0 - 0.5 * alpha[i] * p_cnp
            rt[i] = min(rmax[i], rt[i] + delta * events * dt)
            if rt[i] != rc[i]:
                rc[i] = rt[i] - (rt[i] - rc[i]) * math.exp(events * gap_per_event)
                rc[i] = min(max(rc[i], r_min), rmax[i])
            block_sum[i] += sf
        steps += 1
        if steps <= warmup_steps:
            if steps == warmup_steps:
                block_sum[:] = 0.0
            continue
        for k in range(n_mark):
            total_q[k] += q[k]
        if (steps - warmup_steps) % block_steps == 0:
            # settled when the running mean since the warm-up moved by <= settle_tol x R_max in the last block
            blocks += 1
            moved = 0.0
            for i in range(n):
                total_sum[i] += block_sum[i]
                block_sum[i] = 0.0
                running = total_sum[i] / (blocks * block_steps)
                moved = max(moved, abs(running - prev_running[i]) / rmax[i])
                prev_running[i] = running
            if blocks >= 2 and moved <= settle_tol:
                break

    averaged = max(1, steps - warmup_steps)
    out = np.zeros(rate_max.shape[0])
    for i in range(n):
        out[flows[i]] = (total_sum[i] + block_sum[i]) / averaged
    q_out = np.zeros(n_links)
    for k in range(n_mark):
        q_out[marking_links[k]] = total_q[k] / averaged
    return out, q_out, steps


@njit(cache=True)
def _prepare(
    flow_ptr: np.ndarray,
    flow_links: np.ndarray,
    flow_weights: np.ndarray,
    controlled: np.ndarray,
    marking: np.ndarray,
    is_port: np.ndarray,
    link_capacity: np.ndarray,
    rate_max: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Controlled flow ids; marking link -> (flow index, weight) CSR restricted to links whose flows
    could overfill them (sum of w x R_max above capacity; the others never queue); port -> (flow
    index, weight) CSR; flow index -> port index CSR."""
    n_flows = controlled.shape[0]
    n_links = marking.shape[0]
    n = 0
    for f in range(n_flows):
        if controlled[f]:
            n += 1
    flows = np.empty(n, dtype=np.int64)
    flow_port_ptr = np.zeros(n + 1, dtype=np.int64)
    port_count = np.zeros(n_links, dtype=np.int64)
    mark_count = np.zeros(n_links, dtype=np.int64)
    peak = np.zeros(n_links)
    i = 0
    for f in range(n_flows):
        if controlled[f]:
            flows[i] = f
            for j in range(flow_ptr[f], flow_ptr[f + 1]):
                l = flow_links[j]
                if is_port[l]:
                    port_count[l] += 1
                    flow_port_ptr[i + 1] += 1
                elif marking[l]:
                    mark_count[l] += 1
                    peak[l] += flow_weights[j] * rate_max[f]
            i += 1
    for i in range(n):
        flow_port_ptr[i + 1] += flow_port_ptr[i]
    mark_index = np.full(n_links, -1, dtype=np.int64)
    n_mark = 0
    for l in range(n_links):
        if mark_count[l] > 0 and peak[l] > link_capacity[l]:
            mark_index[l] = n_mark
            n_mark += 1
    marking_links = np.empty(n_mark, dtype=np.int64)
    link_ptr = np.zeros(n_mark + 1, dtype=np.int64)
    for l in range(n_links):
        k = mark_index[l]
        if k >= 0:
            marking_links[k] = l
            link_ptr[k + 1] = mark_count[l]
    for k in range(n_mark):
        link_ptr[k + 1] += link_ptr[k]
    port_index = np.full(n_links, -1, dtype=np.int64)
    n_ports = 0
    for l in range(n_links):
        if port_count[l] > 0:
            port_index[l] = n_ports
            n_ports += 1
    port_cap = np.empty(n_ports)
    port_ptr = np.zeros(n_ports + 1, dtype=np.int64)
    for l in range(n_links):
        if port_index[l] >= 0:
            port_cap[port_index[l]] = link_capacity[l]
            port_ptr[port_index[l] + 1] = port_count[l]
    for k in range(n_ports):
        port_ptr[k + 1] += port_ptr[k]
    port_cursor = port_ptr[:-1].copy()
    link_cursor = link_ptr[:-1].copy()
    port_flows = np.empty(port_ptr[n_ports], dtype=np.int64)
    port_w = np.empty(port_ptr[n_ports], dtype=np.float64)
    flow_port_idx = np.empty(flow_port_ptr[n], dtype=np.int64)
    link_entry_flow = np.empty(link_ptr[n_mark], dtype=np.int64)
    link_entry_w = np.empty(link_ptr[n_mark], dtype=np.float64)
    for i in range(n):
        f = flows[i]
        a = flow_port_ptr[i]
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            l = flow_links[j]
            if is_port[l]:
                p = port_index[l]
                port_flows[port_cursor[p]] = i
                port_w[port_cursor[p]] = flow_weights[j]
                port_cursor[p] += 1
                flow_port_idx[a] = p
                a += 1
            elif mark_index[l] >= 0:
                k = mark_index[l]
                link_entry_flow[link_cursor[k]] = i
                link_entry_w[link_cursor[k]] = flow_weights[j]
                link_cursor[k] += 1
    return (
        flows,
        link_ptr,
        link_entry_flow,
        link_entry_w,
        marking_links,
        port_ptr,
        port_flows,
        port_w,
        port_cap,
        flow_port_ptr,
        flow_port_idx,
    )


def dcqcn_rates(
    flow_ptr: npt.ArrayLike,
    flow_links: npt.ArrayLike,
    flow_weights: npt.ArrayLike,
    controlled: npt.ArrayLike,
    link_capacity: npt.ArrayLike,
    marking: npt.ArrayLike,
    is_port: npt.ArrayLike,
    rate_max: npt.ArrayLike,
    rate_init: npt.ArrayLike,
    params: npt.ArrayLike,
    *,
    dt_s: float,
    warmup_s: float,
    block_s: float,
    horizon_s: float,
    settle_tol: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Settled (time-averaged) DCQCN sending rates of the ``controlled`` flows.

    Parameters
    ----------
    flow_ptr, flow_links, flow_weights : CSR of the flows' links (as ``maxmin_rates``).
    controlled : bool[F]
        Flows under DCQCN (active RoCE queue pairs); the others are ignored and get 0.
    link_capacity : float64[L]
        Bytes/s.
    marking : bool[L]
        Links with an ECN-marking queue (switch egresses).
    is_port : bool[L]
        NIC ports: shared by their flows up to each flow's current rate; never marking.
    rate_max, rate_init : float64[F]
        Line rate of each flow (``R_max``) and its starting rate (``R_C = R_T``), bytes/s.
    params : float64[13]
        Physical constants in the order of ``DCQCN_PARAM_NAMES``.
    dt_s, warmup_s, block_s, horizon_s, settle_tol : integration step, time discarded before
        averaging, averaging block, longest simulated time and settling tolerance (see the module
        docstring). Not checked here: ``network.congestion.Dcqcn`` validates them (``dt_s`` a whole
        number of CNP intervals, ``block_s >= dt_s``, ...).

    Returns ``(rates float64[F], mean_queue_bytes float64[L], simulated_s)``.
    """
    flow_ptr, flow_links, flow_weights = flow_csr(flow_ptr, flow_links, flow_weights)
    controlled = np.ascontiguousarray(controlled, dtype=np.bool_)
    link_capacity = np.ascontiguousarray(link_capacity, dtype=np.float64)
    marking = np.ascontiguousarray(marking, dtype=np.bool_)
    is_port = np.ascontiguousarray(is_port, dtype=np.bool_)
    rate_max = np.ascontiguousarray(rate_max, dtype=np.float64)
    rate_init = np.ascontiguousarray(rate_init, dtype=np.float64)
    params = np.ascontiguousarray(params, dtype=np.float64)
    n_flows, n_links = controlled.shape[0], link_capacity.shape[0]
    if flow_ptr.shape[0] != n_flows + 1 or rate_max.shape[0] != n_flows or rate_init.shape[0] != n_flows:
        raise ValueError(
            f"shape mismatch: flow_ptr {flow_ptr.shape[0]} (want F+1), controlled {n_flows}, "
            f"rate_max {rate_max.shape[0]}, rate_init {rate_init.shape[0]}"
        )
    if marking.shape[0] != n_links or is_port.shape[0] != n_links:
        raise ValueError(
            f"shape mismatch: link_capacity {n_links}, marking {marking.shape[0]}, is_port {is_port.shape[0]}"
        )
    if params.shape[0] != len(DCQCN_PARAM_NAMES):
        raise ValueError(
            f"params: {params.shape[0]} values; expected {len(DCQCN_PARAM_NAMES)} ({', '.join(DCQCN_PARAM_NAMES)})"
        )
    if np.any(controlled & ~(rate_max > 0)) or not np.all(np.isfinite(rate_max[controlled])):
        raise ValueError("rate_max: every controlled flow needs a finite line rate > 0")
    warmup_steps = int(round(warmup_s / dt_s))
    block_steps = max(1, int(round(block_s / dt_s)))
    max_steps = max(warmup_steps + block_steps, int(round(horizon_s / dt_s)))
    prepared: tuple[np.ndarray, ...] = _prepare(
        flow_ptr, flow_links, flow_weights, controlled, marking & ~is_port, is_port, link_capacity, rate_max
    )
    flows, link_ptr, entry_flow, entry_w, marking_links, port_ptr, port_flows, port_w, port_cap = prepared[:9]
    out: tuple[np.ndarray, np.ndarray, int] = _dcqcn_kernel(
        flows,
        link_ptr,
        entry_flow,
        entry_w,
        marking_links,
        link_capacity,
        port_ptr,
        port_flows,
        port_w,
        port_cap,
        prepared[9],
        prepared[10],
        rate_max,
        rate_init,
        params,
        float(dt_s),
        warmup_steps,
        block_steps,
        max_steps,
        float(settle_tol),
    )
    rates, queue, steps = out
    return rates, queue, steps * dt_s
