"""Slow reference twins of the numba kernels and of the timeline analysis.

Each function here has the same signature and semantics as one kernel in
``simulator/kernels/`` (or one function of ``simulator.analysis``), written to be obviously
correct rather than fast: small dense matrices, one full recomputation per step, no
incremental bookkeeping, every rank walked on its own. Tests compare the fast code against
these twins on random instances. One section per kernel, after the dense flow-by-link matrix
they share, then the task-time and breakdown twins.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from simulator.analysis import union_length_s
from simulator.engine.timeline import Timeline
from workloads.tasks import CommTask, ComputeTask, Workload


def _dense(flow_ptr, flow_links, flow_weights, n_links):
    """A[l, f] = total weight of flow f on link l (repeated entries add up); shared by the twins."""
    n_flows = len(flow_ptr) - 1
    A = np.zeros((n_links, n_flows))
    for f in range(n_flows):
        for j in range(flow_ptr[f], flow_ptr[f + 1]):
            A[flow_links[j], f] += flow_weights[j]
    return A


# ============================================================================================
# maxmin: weighted max-min fair rates (twin of simulator.kernels.maxmin.maxmin_rates)
# ============================================================================================


def maxmin_rates_naive(flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap):
    """Progressive filling, recomputed from scratch at every step.

    Loop: for each link still carrying an unfrozen flow, the level at which it saturates is
    (capacity - traffic of frozen flows) / (weight of unfrozen flows). The next level is the
    smallest of these and of the unfrozen flows' caps (never below the previous level).
    Flows whose cap is reached freeze at their cap; the remaining unfrozen flows on links that
    saturate freeze at the level. Active flows left with neither links nor cap get ``inf``.
    """
    flow_ptr = np.asarray(flow_ptr, dtype=np.int64)
    active = np.asarray(active, dtype=bool)
    link_capacity = np.asarray(link_capacity, dtype=np.float64)
    flow_cap = np.asarray(flow_cap, dtype=np.float64)
    n_flows = len(active)
    n_links = len(link_capacity)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)

    rates = np.zeros(n_flows)
    unfrozen = active.copy()
    level = 0.0
    while unfrozen.any():
        frozen_traffic = A @ np.where(unfrozen, 0.0, rates)
        unfrozen_weight = A @ unfrozen.astype(float)
        carries_unfrozen = (A[:, unfrozen] > 0).any(axis=1)
        link_level = np.full(n_links, np.inf)
        link_level[carries_unfrozen] = (
            link_capacity[carries_unfrozen] - frozen_traffic[carries_unfrozen]
        ) / unfrozen_weight[carries_unfrozen]
        cap_level = np.where(unfrozen, flow_cap, np.inf)

        next_level = min(link_level.min(initial=np.inf), cap_level.min(initial=np.inf))
        if next_level == np.inf:
            rates[unfrozen] = np.inf  # unbounded: no link and no cap
            break
        level = max(level, next_level)

        at_cap = unfrozen & (flow_cap <= level)
        rates[at_cap] = flow_cap[at_cap]
        unfrozen &= ~at_cap

        saturated = link_level <= level
        on_saturated = (A[saturated] > 0).any(axis=0)
        hit = unfrozen & on_saturated
        rates[hit] = level
        unfrozen &= ~hit
    return rates


# ============================================================================================
# classes: traffic classes (twin of simulator.kernels.classes.class_rates)
# ============================================================================================


def _split_naive(capacity, weights, demands):
    """One link's weighted water-filling: (shares, limited) of its classes (one class: the whole link)."""
    k = len(weights)
    if k == 1:
        return [capacity], [False]
    if all(d != np.inf for d in demands) and sum(demands) <= capacity:
        extra = capacity - sum(demands)
        return [d + extra * w / sum(weights) for d, w in zip(demands, weights)], [True] * k
    shares, limited, fixed, left = [0.0] * k, [False] * k, [False] * k, capacity
    while True:
        theta = left / sum(w for w, f in zip(weights, fixed) if not f)
        newly = [i for i in range(k) if not fixed[i] and demands[i] < theta * weights[i]]
        if not newly:
            for i in range(k):
                if not fixed[i]:
                    shares[i] = theta * weights[i]
            return shares, limited
        for i in newly:
            fixed[i], limited[i], shares[i] = True, True, demands[i]
            left -= demands[i]


def _advertised_naive(capacity, classes, demand, k, members, rates):
    """The rate an unbounded flow of class ``k`` gets on a link: its class's share with its demand unbounded, then
    the max-min level of that share among the class's ``members`` ((flow, weight) pairs) at their ``rates``."""
    weights = [w for _, w in classes]
    share = _split_naive(capacity, weights, [np.inf if j == k else demand[j] for j, _ in classes])[0]
    share = share[[j for j, _ in classes].index(k)]
    held = []  # members held below the level, removed one by one from the slowest
    while True:
        free = [(f, w) for f, w in members if (f, w) not in held]
        level = (share - sum(w * rates[f] for f, w in held)) / sum(w for _, w in free)
        slowest = min(free, key=lambda m: rates[m[0]])
        if rates[slowest[0]] >= level or len(free) == 1:
            return max(level, 0.0)
        held.append(slowest)


def class_rates_naive(
    flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap, flow_class, class_level, class_weight
):
    """Levels in order on the residual capacities. Within a level, from all rates 0: each flow moves half way to
    the smallest rate the links on its path advertise for its class (``_advertised_naive``) and its cap, until no
    rate moves by more than 1e-12 of itself; then each class is rated by max-min on its use of each shared link
    (plus the link's spare capacity by weight), and the leftover of every link goes by max-min to the flows."""
    flow_ptr = np.asarray(flow_ptr, dtype=np.int64)
    active = np.asarray(active, dtype=bool)
    flow_cap = np.asarray(flow_cap, dtype=float)
    n_flows, n_links = len(active), len(link_capacity)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)
    flow_class = np.asarray(flow_class)
    if len(set(flow_class[active].tolist())) <= 1:
        return maxmin_rates_naive(flow_ptr, flow_links, flow_weights, active, link_capacity, flow_cap)
    rates = np.zeros(n_flows)
    residual = np.asarray(link_capacity, dtype=float).copy()
    level_of = np.asarray(class_level)[flow_class]
    for level in sorted(set(level_of[active].tolist())):
        chosen = active & (level_of == level)
        flows = np.flatnonzero(chosen)
        members = {
            (l, k): [(f, A[l, f]) for f in flows if flow_class[f] == k and A[l, f] > 0]
            for l in range(n_links)
            for k in set(flow_class[flows].tolist())
        }
        members = {pair: m for pair, m in members.items() if m}
        on = {l: sorted(k for (m, k) in members if m == l) for l in range(n_links)}
        r = np.zeros(n_flows)
        for _ in range(500):
            demand = {pair: sum(w * r[f] for f, w in m) for pair, m in members.items()}
            advertised = {
                (l, k): _advertised_naive(
                    residual[l], [(j, class_weight[j]) for j in on[l]], {j: demand[(l, j)] for j in on[l]}, k, m, r
                )
                for (l, k), m in members.items()
            }
            new = r.copy()
            for f in flows:
                target = min([flow_cap[f]] + [advertised[(l, flow_class[f])] for l in range(n_links) if A[l, f] > 0])
                new[f] = 0.5 * (r[f] + target)
            done = np.allclose(new, r, rtol=1e-12, atol=0.0)
            r = new
            if done:
                break
        shares = {}
        for l, ks in on.items():
            if len(ks) == 1:
                shares[(l, ks[0])] = residual[l]
            elif ks:
                used = {k: sum(w * r[f] for f, w in members[(l, k)]) for k in ks}
                total = sum(used.values())
                scale = max(total / residual[l], 1.0) if residual[l] > 0 else 1.0
                spare = max(residual[l] - total, 0.0)
                wsum = sum(class_weight[k] for k in ks)
                shares.update({(l, k): used[k] / scale + spare * class_weight[k] / wsum for k in ks})
        r = np.zeros(n_flows)
        for k in set(flow_class[flows].tolist()):
            mine = chosen & (flow_class == k)
            capacity = np.array([shares.get((l, k), 0.0) for l in range(n_links)])
            r[mine] = maxmin_rates_naive(flow_ptr, flow_links, flow_weights, mine, capacity, flow_cap)[mine]
        left = np.maximum(residual - A[:, chosen] @ r[chosen], 0.0)
        more = maxmin_rates_naive(flow_ptr, flow_links, flow_weights, chosen, left, np.maximum(flow_cap - r, 0.0))
        r[chosen] += more[chosen]
        rates[chosen] = r[chosen]
        residual = np.maximum(residual - A[:, chosen] @ r[chosen], 0.0)
    return rates


# ============================================================================================
# dcqcn: DCQCN fluid model (twin of simulator.kernels.dcqcn.dcqcn_rates)
# ============================================================================================


def _water_level(rates, weights, capacity):
    """Level lam with sum_f w_f min(r_f, lam) = capacity, by repeated freezing (inf if not full)."""
    if np.sum(weights * rates) <= capacity:
        return np.inf
    below = np.zeros(len(rates), dtype=bool)
    while True:
        lam = (capacity - np.sum(weights[below] * rates[below])) / np.sum(weights[~below])
        newly = ~below & (rates < lam)
        if not newly.any():
            return lam
        below |= newly


def dcqcn_rates_naive(
    flow_ptr,
    flow_links,
    flow_weights,
    controlled,
    link_capacity,
    marking,
    is_port,
    rate_max,
    rate_init,
    params,
    *,
    dt_s,
    warmup_s,
    block_s,
    horizon_s,
    settle_tol,
):
    """The DCQCN fluid model stepped with whole-array numpy operations.

    Every step: port levels (water-filling each port among its flows' R_C), sending rates, link
    loads A @ s, queues, RED marking, per-flow ln(1-p) as a weighted sum over its marking links,
    then the reaction-point update of every flow at once. Same block/settle rule as the kernel.
    """
    controlled = np.asarray(controlled, dtype=bool)
    cap = np.asarray(link_capacity, dtype=float)
    n_links = len(cap)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)[:, controlled]
    port = np.asarray(is_port, dtype=bool)
    mark = np.asarray(marking, dtype=bool) & ~port
    kmin, kmax, pmax, g, tau_alpha, tau_cnp, r_ai, r_hai, timer, byte_counter, threshold, r_min, mtu = params
    rmax = np.asarray(rate_max, dtype=float)[controlled]
    rc = np.clip(np.asarray(rate_init, dtype=float)[controlled], r_min, None)
    rc = np.minimum(rc, rmax)
    rt = rc.copy()
    alpha = np.zeros(len(rc))
    q = np.zeros(n_links)
    slots = int(round(dt_s / tau_cnp))
    warmup = int(round(warmup_s / dt_s))
    block = max(1, int(round(block_s / dt_s)))
    max_steps = max(warmup + block, int(round(horizon_s / dt_s)))
    ports = np.flatnonzero(port & (A > 0).any(axis=1))
    n_bytes = byte_counter / mtu
    sums, block_sum, q_sum = np.zeros(len(rc)), np.zeros(len(rc)), np.zeros(n_links)
    prev, blocks, steps = np.zeros(len(rc)), 0, 0
    while steps < max_steps:
        s = rc.copy()
        for p in ports:
            on = A[p] > 0
            s[on] = np.minimum(s[on], _water_level(rc[on], A[p, on], cap[p]))
        load = A @ s
        q = np.where(mark, np.maximum(0.0, q + (load - cap) * dt_s), 0.0)
        p_link = np.where(q <= kmin, 0.0, np.where(q <= kmax, pmax * (q - kmin) / (kmax - kmin), 1.0))
        full = mark & (p_link >= 1.0)
        keep = np.zeros(n_links)
        partial = mark & (p_link > 0.0) & (p_link < 1.0)
        keep[partial] = np.log1p(-p_link[partial])
        lf = A.T @ keep
        lf[(A[full] > 0).any(axis=0)] = -np.inf
        pkts = s / mtu
        quiet = lf == 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            pf = -np.expm1(lf)
            p_alpha = np.where(quiet, 0.0, -np.expm1(pkts * tau_alpha * lf))
            p_cnp = np.where(quiet, 0.0, -np.expm1(pkts * tau_cnp * lf))
            w_bytes = np.expm1(n_bytes * lf)
            w_timer = np.expm1(pkts * timer * lf)
            marked_events = pkts * ((1 + w_bytes) * (pf / -w_bytes) + (1 + w_timer) * (pf / -w_timer))
        events = np.where(quiet, pkts / n_bytes + 1.0 / timer, marked_events)
        hyper = np.where(quiet, 1.0, (1.0 + w_timer) ** threshold)
        recovering = np.where(quiet, 0.0, 1.0 - (1.0 + w_bytes) ** threshold)
        delta = (1.0 - recovering) * ((1.0 - hyper) * r_ai + hyper * r_hai)
        alpha = p_alpha + (alpha - p_alpha) * (1.0 - g) ** (dt_s / tau_alpha)
        for _ in range(slots):
            rt = rt - (rt - rc) * p_cnp
            rc = rc * (1.0 - 0.5 * alpha * p_cnp)
        rt = np.minimum(rmax, rt + delta * events * dt_s)
        rc = rt - (rt - rc) * np.exp(-events * dt_s * np.log(2.0))
        rc = np.minimum(np.maximum(rc, r_min), rmax)
        block_sum += s
        steps += 1
        if steps <= warmup:
            if steps == warmup:
                block_sum[:] = 0.0
            continue
        q_sum += q
        if (steps - warmup) % block == 0:
            blocks += 1
            sums += block_sum
            block_sum[:] = 0.0
            running = sums / (blocks * block)
            moved = np.max(np.abs(running - prev) / rmax, initial=0.0)
            prev = running
            if blocks >= 2 and moved <= settle_tol:
                break
    averaged = max(1, steps - warmup)
    out = np.zeros(len(controlled))
    out[controlled] = (sums + block_sum) / averaged
    return out, q_sum / averaged, steps * dt_s


# ============================================================================================
# lossless: PFC / credit back-pressure (twin of simulator.kernels.lossless.lossless_throttle)
# ============================================================================================


def lossless_throttle_naive(
    flow_ptr, flow_links, flow_weights, participant, link_capacity, demand, lossless, link_src, link_dst
):
    """Congestion-tree progressive filling, recomputed from scratch at every event.

    Loop: for every link still carrying an unfrozen participating flow, the throttle level at
    which it fills is (capacity - traffic of frozen flows) / (offered traffic of unfrozen flows);
    take the smallest (ties: lowest link id). At or above 1, every unfrozen flow keeps its full
    demand. Otherwise the link's tree is itself plus, repeatedly, every lossless link some flow
    crosses right before a tree link (the next hop of entry j is the first run of later entries
    leaving the node entry j enters); unfrozen flows on tree links freeze at the level, and tree
    links other than the first are paused 1 - level.
    """
    participant = np.asarray(participant, dtype=bool)
    cap = np.asarray(link_capacity, dtype=float)
    demand = np.where(participant, np.asarray(demand, dtype=float), 0.0)
    n_links, n_flows = len(cap), len(participant)
    A = _dense(flow_ptr, flow_links, flow_weights, n_links)
    A[:, ~participant] = 0.0
    on = np.zeros((n_links, n_flows), dtype=bool)
    for f in np.flatnonzero(participant):
        on[flow_links[flow_ptr[f] : flow_ptr[f + 1]], f] = True
    feeds = {}
    for f in np.flatnonzero(participant):
        path = flow_links[flow_ptr[f] : flow_ptr[f + 1]]
        for j in range(len(path)):
            k = j + 1
            while k < len(path) and link_src[path[k]] != link_dst[path[j]]:
                k += 1
            while k < len(path) and link_src[path[k]] == link_dst[path[j]]:
                if lossless[path[j]]:
                    feeds.setdefault(int(path[k]), set()).add(int(path[j]))
                k += 1
    m = np.ones(n_flows)
    unfrozen = participant.copy()
    pause = np.zeros(n_links)
    tree_level = np.full(n_links, np.inf)
    in_tree = np.zeros(n_links, dtype=bool)
    level = 0.0
    while unfrozen.any():
        used = A @ np.where(unfrozen, 0.0, demand * m)
        offered = A @ np.where(unfrozen, demand, 0.0)
        carries = (on & unfrozen).any(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(carries & (offered > 0), (cap - used) / offered, np.inf)
        e = int(np.argmin(key))
        if not key[e] < 1.0:
            break
        level = max(level, key[e])
        tree, todo = [e], [e]
        in_tree[e] = True
        tree_level[e] = level
        while todo:
            x = todo.pop()
            for i in sorted(feeds.get(x, ())):
                if not in_tree[i]:
                    in_tree[i] = True
                    tree_level[i] = level
                    pause[i] = 1.0 - level
                    tree.append(i)
                    todo.append(i)
        hit = unfrozen & on[tree].any(axis=0)
        m[hit] = level
        unfrozen &= ~hit
    return m, pause, tree_level


# ============================================================================================
# drain: fluid flows between changes (twins of simulator.kernels.drain.drain and soonest_end)
# ============================================================================================


def drain_naive(rate, remaining, fill, active, dt_s, done, data_moved):
    """The whole-array numpy expressions: every active flow moves min(rate dt, remaining), its fill first; done:
    at most a nanosecond of transfer left."""
    idx = np.flatnonzero(active)
    if dt_s > 0:
        moved = np.minimum(rate[idx] * dt_s, remaining[idx])
        filling = np.minimum(moved, fill[idx])
        fill[idx] -= filling
        remaining[idx] -= moved
        if data_moved.shape[0]:
            data_moved[idx] = moved - filling
    finished = idx[remaining[idx] <= rate[idx] * 1e-9 + 1e-9]
    done[: finished.shape[0]] = finished
    return finished.shape[0]


def count_link_bytes_naive(flow_ptr, flow_links, flow_weights, slots, nbytes, link_bytes):
    """The whole-array numpy expressions: each link's sum over the flows' entries (bincount), added to its bytes;
    returns the entries' positions and their links."""
    entries = np.concatenate([np.arange(flow_ptr[s], flow_ptr[s + 1]) for s in slots] + [np.zeros(0, np.int64)])
    values = np.repeat(nbytes, flow_ptr[slots + 1] - flow_ptr[slots]) * flow_weights[entries]
    link_bytes += np.bincount(flow_links[entries], weights=values, minlength=link_bytes.shape[0])
    return entries, flow_links[entries]


def soonest_end_naive(rate, remaining, active):
    moving = active & (rate > 0)
    return float((remaining[moving] / rate[moving]).min()) if moving.any() else np.inf


# ============================================================================================
# task times and breakdown (twins of simulator.analysis.task_times and interval_breakdown)
# ============================================================================================


def task_times_naive(workload: Workload, collective_time_s=None) -> Timeline:
    """``task_times`` as a work queue over (rank, stream) keys, for valid input (no validation): the max-plus
    recurrence of simulator.analysis, rank by rank and stream by stream, with no sharing of programs."""
    ncoll = len(workload.collectives)
    durations = np.zeros(ncoll) if collective_time_s is None else np.asarray(collective_time_s, dtype=np.float64)
    programs = workload.programs
    start: list[list] = [[None] * len(p) for p in programs]
    end: list[list] = [[None] * len(p) for p in programs]
    arrival: list[list] = [[None] * len(p) for p in programs]
    streams: list[dict[int, list[int]]] = []
    for program in programs:
        table: dict[int, list[int]] = {}
        for position, task in enumerate(program):
            table.setdefault(task.stream, []).append(position)
        streams.append(table)
    pointer = {(r, s): 0 for r, table in enumerate(streams) for s in table}
    members: list[list[tuple[int, int, int]]] = [[] for _ in range(ncoll)]  # (rank, stream, position)
    arrived = np.zeros(ncoll, dtype=np.int64)
    latest = [0.0] * ncoll
    durations_list = durations.tolist()
    c_start, c_end = np.full(ncoll, np.nan), np.full(ncoll, np.nan)
    waiters: dict[tuple[int, int], list[tuple[int, int]]] = {}
    queue = deque(pointer)
    queued = set(pointer)

    def finish(rank: int, position: int) -> None:
        for key in waiters.pop((rank, position), ()):
            if key not in queued:
                queued.add(key)
                queue.append(key)

    while queue:
        key = queue.popleft()
        queued.discard(key)
        rank, stream = key
        order = streams[rank][stream]
        program, s_rank, e_rank = programs[rank], start[rank], end[rank]
        while pointer[key] < len(order):
            k = pointer[key]
            position = order[k]
            task = program[position]
            if s_rank[position] is not None and isinstance(task, CommTask):
                break  # arrived, waiting for the rest of its group
            blocked = next((a for a in task.after if e_rank[a] is None), None)
            if blocked is not None:
                waiters.setdefault((rank, blocked), []).append(key)
                break
            ready = e_rank[order[k - 1]] if k else 0.0
            for a in task.after:
                ready = max(ready, e_rank[a])
            arrival[rank][position] = ready
            if isinstance(task, ComputeTask):
                s_rank[position] = ready
                e_rank[position] = ready + task.duration_s
                pointer[key] = k + 1
                finish(rank, position)
                continue
            i = task.index
            s_rank[position] = ready  # arrival; replaced by the collective's start below
            members[i].append((rank, stream, position))
            arrived[i] += 1
            latest[i] = max(latest[i], ready)
            if arrived[i] < workload.collectives[i].nranks:
                break
            t0, t1 = latest[i], latest[i] + durations_list[i]
            c_start[i], c_end[i] = t0, t1
            for r, st, pos in members[i]:
                start[r][pos], end[r][pos] = t0, t1
                pointer[(r, st)] += 1
                finish(r, pos)
                if (r, st) != key and (r, st) not in queued:
                    queued.add((r, st))
                    queue.append((r, st))
    stuck = [(r, s) for (r, s), k in pointer.items() if k < len(streams[r][s])]
    if stuck:
        r, s = stuck[0]
        task = programs[r][streams[r][s][pointer[(r, s)]]]
        raise RuntimeError(
            f"task_times: rank {r} stream {s} never finishes task {task.name!r} (deadlock in the "
            f"programs; {len(stuck)} stream(s) stuck)"
        )
    return Timeline(
        start_s=tuple(np.asarray(s, dtype=np.float64) for s in start),
        end_s=tuple(np.asarray(e, dtype=np.float64) for e in end),
        arrival_s=tuple(np.asarray(a, dtype=np.float64) for a in arrival),
        collective_start_s=c_start,
        collective_end_s=c_end,
    )


def interval_breakdown_naive(workload: Workload, timeline: Timeline, labels, *, focus_rank=None, weights=None) -> dict:
    """``interval_breakdown`` rank by rank from its definition: per label, the largest per-rank union of the
    label's [start, end] intervals, and on ``focus_rank`` that union minus the union of its compute tasks."""
    weights = [1] * len(labels) if weights is None else list(weights)
    out: dict = {}
    for i, label in enumerate(labels):
        entry = out.setdefault(label, {"count": 0, "nbytes": 0, "time_s": 0.0, "exposed_s": 0.0})
        entry["count"] += weights[i]
        entry["nbytes"] += int(workload.collectives[i].nbytes) * weights[i]
    for rank, program in enumerate(workload.programs):
        start, end = timeline.start_s[rank], timeline.end_s[rank]
        spans: dict = {}
        for p, t in enumerate(program):
            if isinstance(t, CommTask):
                spans.setdefault(labels[t.index], []).append((start[p], end[p]))
        for label, rank_spans in spans.items():
            out[label]["time_s"] = max(out[label]["time_s"], union_length_s(rank_spans))
        if rank == focus_rank:
            compute = [(start[p], end[p]) for p, t in enumerate(program) if isinstance(t, ComputeTask)]
            for label, entry in out.items():
                both = union_length_s(spans.get(label, []) + compute)
                entry["exposed_s"] = both - union_length_s(compute)
    return out
