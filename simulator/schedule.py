"""Flow, Step, Schedule: what an algorithm lowers a collective into. Pure data.

A :class:`Schedule` is a sequence of :class:`Step` s executed one after the other. A step pays
its fixed ``latency_s`` (the protocol's per-step and launch costs, NCCL's latency model) plus,
unless ``path_latency`` is off, the physical latency of its flows' paths, and then moves its
flows through the network; it ends when its last flow has arrived.

Flows are stored column-wise (numpy arrays of equal length) because collectives on thousands of
ranks have tens of thousands of flows. Flow i goes from rank ``src[i]`` to rank ``dst[i]``
carrying ``nbytes[i]`` payload bytes on NCCL channel ``channel[i]``.

**Chains.** Flows of one step that share a ``chain`` id >= 0 are the edges of one pipelined
ring (one NCCL channel): data streams around the ring in small slices, so in steady state every
edge advances at one common rate, set by the ring's most loaded link. The engine turns a chain
into a single network flow over the union of its edges' links, each link weighted by the share
of the chain's bytes its edge carries, so a slow edge slows the whole ring (as in NCCL) and
link accounting stays exact. ``chain == -1`` marks an independent flow.

A step's optional ``wire_scale`` multiplies individual flows' wire bytes on top of that (NVLS
legs into and out of the NVSwitch run at the switch's reduction efficiency: scale 1/efficiency).
Its optional ``fill_bytes`` is pipeline start-up: a pipelined flow cannot finish before its last
slice has crossed one more hop, so it spends the time of ``fill_bytes`` at its rate without
moving data. Its optional ``rate_cap_bytes_per_s`` caps independent flows' rates where the
GPU-side channel moving them is the limit (a point-to-point channel, one CTA), in payload bytes
per second (before ``wire_scale`` and ``wire_factor``); it is not allowed on chained flows.

Its ``proxy_s`` is the work of the busiest NCCL network proxy thread (one per GPU, serving its
network connections one step at a time): that thread works while the data moves, so the step lasts
``latency_s`` plus the longer of its transfer and ``proxy_s`` (0: no network proxy work modelled).

``wire_factor`` converts payload to bytes on the wire for the protocol (LL sends 8-byte lines
holding 4 data bytes: 2.0; LL128 sends 128-byte lines holding 120: 128/120; Simple: 1.0).
``chain_rate_cap_bytes_per_s`` caps each chain's (or independent flow's) rate where the protocol's
GPU-side throughput, not the wire, is the limit; it is stated on the chain's largest edge (an
independent flow: the flow), in that edge's bytes after its ``wire_scale`` and before
``wire_factor``: under a 10 GB/s cap, a chain whose largest edge has wire scale 2 moves that
edge's payload at 5 GB/s (NVLSTree and CollNet state it on their switch legs; NVLSTree divides it
by the switch's efficiency for that reason). ``pxn`` says how inter-server flows leave a server:
through the sender's own NIC (rings) or, relayed over NVLink, through the NIC on the receiver's
rail (NCCL's PXN, used for point-to-point traffic). A negative ``src``/``dst`` is an in-network
buffer (a switch that reduces or multicasts, NVLS/SHARP): ``innet_nodes`` says which topology
node it lives on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from topologies.checks import finite_nonnegative
from workloads.collectives import DTYPE_BYTES, Collective


def _frozen_int_array(values: ArrayLike) -> np.ndarray:
    array = np.ascontiguousarray(values, dtype=np.int64)
    array.setflags(write=False)
    return array


def _frozen_float_array(values: ArrayLike) -> np.ndarray:
    array = np.ascontiguousarray(values, dtype=np.float64)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    channel: np.ndarray
    chain: np.ndarray
    latency_s: float = 0.0
    label: str = ""
    path_latency: bool = True  # also pay the flows' physical path latency (False: latency_s covers it)
    wire_scale: np.ndarray | None = None  # per-flow extra wire bytes per payload byte (None: all 1)
    fill_bytes: np.ndarray | None = None  # per-flow pipeline start-up, payload bytes (None: none)
    rate_cap_bytes_per_s: np.ndarray | None = None  # per-flow payload rate cap, independent flows only (None: none)
    proxy_s: float = 0.0  # busiest network proxy thread's work: the step lasts at least latency_s + proxy_s

    @classmethod
    def of(
        cls,
        *,
        src: Sequence[int] | np.ndarray,
        dst: ArrayLike,
        nbytes: ArrayLike,
        channel: ArrayLike | None = None,
        chain: ArrayLike | None = None,
        latency_s: float = 0.0,
        label: str = "",
        path_latency: bool = True,
        wire_scale: ArrayLike | None = None,
        fill_bytes: ArrayLike | None = None,
        rate_cap_bytes_per_s: ArrayLike | None = None,
        proxy_s: float = 0.0,
    ) -> Step:
        n = len(src)
        channel = np.zeros(n, dtype=np.int64) if channel is None else channel
        chain = np.full(n, -1, dtype=np.int64) if chain is None else chain
        step = cls(
            src=_frozen_int_array(src),
            dst=_frozen_int_array(dst),
            nbytes=_frozen_int_array(nbytes),
            channel=_frozen_int_array(channel),
            chain=_frozen_int_array(chain),
            latency_s=float(latency_s),
            label=label,
            path_latency=path_latency,
            wire_scale=None if wire_scale is None else _frozen_float_array(wire_scale),
            fill_bytes=None if fill_bytes is None else _frozen_float_array(fill_bytes),
            rate_cap_bytes_per_s=None if rate_cap_bytes_per_s is None else _frozen_float_array(rate_cap_bytes_per_s),
            proxy_s=float(proxy_s),
        )
        step.check()
        return step

    def check(self) -> None:
        n = self.src.shape[0]
        for name in ("dst", "nbytes", "channel", "chain", "wire_scale", "fill_bytes", "rate_cap_bytes_per_s"):
            value = getattr(self, name)
            if value is not None and value.shape != (n,):
                raise ValueError(f"Step.{name}: length {value.shape} differs from src ({n})")
        if self.rate_cap_bytes_per_s is not None and n and not (self.rate_cap_bytes_per_s > 0).all():
            raise ValueError("Step.rate_cap_bytes_per_s: every cap must be > 0 (inf for none)")
        if self.rate_cap_bytes_per_s is not None and (self.chain >= 0).any():
            raise ValueError(
                f"Step.rate_cap_bytes_per_s: given with chained flows (chain ids "
                f"{np.unique(self.chain[self.chain >= 0]).tolist()}); allowed only when every "
                "flow is independent (chain == -1)"
            )
        if n and (self.nbytes < 0).any():
            raise ValueError("Step.nbytes: negative byte count")
        if n and ((self.src == self.dst) & (self.src >= 0)).any():
            raise ValueError("Step: a flow has the same source and destination rank")
        latency_s = self.latency_s
        if not (type(latency_s) is float and 0.0 <= latency_s < math.inf):  # the common case skips the helper
            finite_nonnegative("Step.latency_s", latency_s, expected="a finite number >= 0")
        proxy_s = self.proxy_s
        if not (type(proxy_s) is float and 0.0 <= proxy_s < math.inf):
            finite_nonnegative("Step.proxy_s", proxy_s, expected="a finite number >= 0")

    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class DataStep:
    """One logical step of data movement, for verification on real buffers.

    Op i copies (or, with ``reduce``, adds) ``count[i]`` elements from buffer ``src[i]`` at
    ``src_offset[i]`` into buffer ``dst[i]`` at ``dst_offset[i]``. Buffers are ranks (>= 0) or
    in-network aggregation buffers (< 0: a switch that reduces, NVLS/SHARP). All ops of a step
    read the buffers as they were before the step; then the writes apply (reductions add up).
    """

    src: np.ndarray
    dst: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray
    count: np.ndarray
    reduce: np.ndarray

    @classmethod
    def of(cls, ops: Iterable[Sequence[int]], *, reduce: bool | None = None) -> DataStep:
        """From (src, dst, offset, count[, dst_offset[, reduce]]) tuples; dst_offset defaults to offset."""
        rows = [tuple(op) for op in ops]
        src = [r[0] for r in rows]
        dst = [r[1] for r in rows]
        src_offset = [r[2] for r in rows]
        count = [r[3] for r in rows]
        dst_offset = [r[4] if len(r) > 4 else r[2] for r in rows]
        red = [bool(r[5]) if len(r) > 5 else bool(reduce) for r in rows]
        arrays = [_frozen_int_array(v) for v in (src, dst, src_offset, dst_offset, count)]
        flags = np.asarray(red, dtype=np.bool_)
        flags.setflags(write=False)
        return cls(
            src=arrays[0], dst=arrays[1], src_offset=arrays[2], dst_offset=arrays[3], count=arrays[4], reduce=flags
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    collective: Collective
    algorithm: str
    protocol: str
    nchannels: int
    steps: tuple[Step, ...]
    wire_factor: float = 1.0
    chain_rate_cap_bytes_per_s: float = math.inf
    pxn: bool = False  # inter-server sends may relay over NVLink to the destination rail's NIC
    innet_nodes: Mapping[int, int] = field(default_factory=dict)  # in-network buffer id (< 0) -> topology node

    @property
    def latency_s(self) -> float:
        return float(sum(step.latency_s for step in self.steps))

    def bytes_sent_per_rank(self) -> dict[int, int]:
        """Payload bytes each rank sends over the whole schedule (wire overhead excluded)."""
        return self._per_rank("src")

    def bytes_received_per_rank(self) -> dict[int, int]:
        return self._per_rank("dst")

    def _per_rank(self, column: str) -> dict[int, int]:
        size = max(self.collective.group) + 1
        total = np.zeros(size, dtype=np.float64)
        for step in self.steps:
            total += np.bincount(getattr(step, column), weights=step.nbytes, minlength=size)[:size]
        return {rank: int(total[rank]) for rank in self.collective.group}

    @property
    def total_bytes(self) -> int:
        return int(sum(int(step.nbytes.sum()) for step in self.steps))


# the all-to-all buffer layout every all-to-all schedule and the verifier share


def alltoall_counts(collective: Collective) -> np.ndarray:
    """Elements rank p sends to rank q, shape (n, n): the split matrix, or equal pieces."""
    n = collective.nranks
    if collective.splits is not None:
        return np.asarray(collective.splits, dtype=np.int64) // DTYPE_BYTES[collective.dtype]
    return np.full((n, n), collective.nbytes // DTYPE_BYTES[collective.dtype] // n, dtype=np.int64)


def alltoall_offsets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(send_offset[p, q], recv_offset[q, p]) for the two-region alltoall buffer layout."""
    send = np.concatenate([np.zeros((counts.shape[0], 1), np.int64), np.cumsum(counts, axis=1)[:, :-1]], axis=1)
    recv_counts = counts.T  # rank q receives counts[p, q] from p
    region = int(counts.sum(axis=1).max()) if counts.size else 0
    recv = region + np.concatenate(
        [np.zeros((counts.shape[0], 1), np.int64), np.cumsum(recv_counts, axis=1)[:, :-1]], axis=1
    )
    return send, recv
