"""Verification on real buffers: does a schedule compute the collective it claims?

The analogue of nccl-tests' ``#wrong`` column. Every rank gets a working buffer of float64
(values are small integers, so sums are exact), filled with distinct data per rank; the
algorithm's ``program`` (its logical data steps) is executed on those buffers; the result is
compared with the collective's definition:

* all_reduce: every rank ends with the element-wise sum of all inputs;
* reduce_scatter: rank q ends with piece q of that sum (its own 1/n of the buffer);
* all_gather: rank q starts with only its piece; every rank ends with all pieces;
* broadcast / reduce: every rank ends with the root's data / the root ends with the sum;
* alltoall: buffer = send half then receive half; piece p of rank q's receive half must be
  what rank p put in piece q of its send half (uneven splits use the collective's split matrix);
* sendrecv: rank q's receive half must be rank q-1's send half.

``wire_mismatch`` also checks that the timed schedule moves exactly the bytes the program moves
between every pair of ranks, so the flows that are timed are the data that is verified.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from workloads.collectives import DTYPE_BYTES, Collective, CollectiveKind

from .schedule import DataStep, Schedule, alltoall_counts, alltoall_offsets

_TWO_REGION = (CollectiveKind.ALL_TO_ALL, CollectiveKind.SENDRECV)


def _elements(collective: Collective) -> int:
    return collective.nbytes // DTYPE_BYTES[collective.dtype]


def _data(q: int, size: int) -> np.ndarray:
    """Distinct, exactly summable values for group member q."""
    return (q + 1) * 1000.0 + (np.arange(size) % 997)


def buffer_size(collective: Collective) -> int:
    if collective.kind is CollectiveKind.ALL_TO_ALL:
        counts = alltoall_counts(collective)
        return int(max(counts.sum(axis=1).max(), counts.sum(axis=0).max())) * 2
    if collective.kind is CollectiveKind.SENDRECV:
        return 2 * _elements(collective)
    return _elements(collective)


def initial_buffers(collective: Collective) -> dict[int, np.ndarray]:
    n, size, kind = collective.nranks, buffer_size(collective), collective.kind
    piece = _elements(collective) // n if n else 0
    buffers = {}
    for q, rank in enumerate(collective.group):
        buf = np.full(size, np.nan)
        if kind is CollectiveKind.ALL_GATHER:
            buf[q * piece : (q + 1) * piece] = _data(q, piece)
        elif kind is CollectiveKind.BROADCAST:
            if q == collective.root:
                buf[:] = _data(q, size)
        elif kind is CollectiveKind.ALL_TO_ALL:
            counts = alltoall_counts(collective)
            total = int(counts[q].sum())
            buf[:total] = _data(q, total)
        elif kind is CollectiveKind.SENDRECV:
            buf[: size // 2] = _data(q, size // 2)
        else:
            buf[:] = _data(q, size)
        buffers[rank] = buf
    return buffers


def expected_buffers(collective: Collective) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per rank: (expected values, mask of the elements the definition fixes)."""
    n, size, kind = collective.nranks, buffer_size(collective), collective.kind
    piece = _elements(collective) // n if n else 0
    total = sum(_data(q, size) for q in range(n)) if kind.reduces else None
    out = {}
    for q, rank in enumerate(collective.group):
        want, mask = np.zeros(size), np.zeros(size, dtype=bool)
        if kind is CollectiveKind.ALL_REDUCE or (kind is CollectiveKind.REDUCE and q == collective.root):
            want[:], mask[:] = total, True
        elif kind is CollectiveKind.REDUCE_SCATTER:
            assert isinstance(total, np.ndarray)  # the sum of n >= 1 ranks' data
            want[q * piece : (q + 1) * piece] = total[q * piece : (q + 1) * piece]
            mask[q * piece : (q + 1) * piece] = True
        elif kind is CollectiveKind.ALL_GATHER:
            for p in range(n):
                want[p * piece : (p + 1) * piece] = _data(p, piece)
            mask[: n * piece] = True
        elif kind is CollectiveKind.BROADCAST:
            want[:], mask[:] = _data(collective.root, size), True
        elif kind is CollectiveKind.ALL_TO_ALL:
            counts = alltoall_counts(collective)
            send, recv = alltoall_offsets(counts)
            for p in range(n):
                c = int(counts[p, q])
                sent = _data(p, int(counts[p].sum()))[send[p, q] : send[p, q] + c]
                want[recv[q, p] : recv[q, p] + c] = sent
                mask[recv[q, p] : recv[q, p] + c] = True
        elif kind is CollectiveKind.SENDRECV:
            half = size // 2
            want[half:] = _data((q - 1) % n, half)
            mask[half:] = True
        out[rank] = (want, mask)
    return out


def execute(program: tuple[DataStep, ...], buffers: dict[int, np.ndarray], size: int) -> dict[int, np.ndarray]:
    """Run a program; in-network buffers (negative ids) start empty (zeros, reduce targets)."""
    bufs = {k: v.copy() for k, v in buffers.items()}
    for step in program:
        reads = []
        for s, d, so, do, c, red in zip(
            step.src.tolist(),
            step.dst.tolist(),
            step.src_offset.tolist(),
            step.dst_offset.tolist(),
            step.count.tolist(),
            step.reduce.tolist(),
        ):
            for buf_id in (s, d):
                if buf_id not in bufs:
                    if buf_id >= 0:
                        raise ValueError(f"program: buffer {buf_id} is not a rank of the group")
                    bufs[buf_id] = np.zeros(size)
            reads.append((d, do, bufs[s][so : so + c].copy(), red))
        for d, do, values, red in reads:
            target = bufs[d][do : do + values.shape[0]]
            if red:
                target += values
            else:
                target[:] = values
    return bufs


def count_wrong(collective: Collective, program: tuple[DataStep, ...]) -> int:
    """nccl-tests' #wrong: elements whose final value differs from the definition."""
    final = execute(program, initial_buffers(collective), buffer_size(collective))
    wrong = 0
    for rank, (want, mask) in expected_buffers(collective).items():
        got = final[rank]
        wrong += int(np.count_nonzero(mask & ~(got == want)))
    return wrong


def wire_mismatch(collective: Collective, program: tuple[DataStep, ...], schedule: Schedule) -> dict:
    """{(src, dst): (program bytes, schedule bytes)} for every rank pair where they differ."""
    elt = DTYPE_BYTES[collective.dtype]
    prog: dict[tuple[int, int], int] = defaultdict(int)
    for step in program:
        for s, d, c in zip(step.src.tolist(), step.dst.tolist(), step.count.tolist()):
            if s != d:
                prog[(s, d)] += c * elt
    sched: dict[tuple[int, int], int] = defaultdict(int)
    for sched_step in schedule.steps:
        for s, d, b in zip(sched_step.src.tolist(), sched_step.dst.tolist(), sched_step.nbytes.tolist()):
            sched[(s, d)] += b
    keys = {k for k, v in prog.items() if v} | {k for k, v in sched.items() if v}
    return {k: (prog.get(k, 0), sched.get(k, 0)) for k in keys if prog.get(k, 0) != sched.get(k, 0)}
