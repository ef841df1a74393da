"""Collectives: what a group of ranks asks the communication library to do.

``Collective(kind, nbytes, group)`` follows nccl-tests' conventions so results line up with its
tables (nccl-tests doc/PERFORMANCE.md):

* ``nbytes`` is nccl-tests' *size* column: the whole buffer for all_gather / reduce_scatter /
  alltoall (n chunks of nbytes/n), the message for all_reduce, broadcast, reduce and sendrecv.
* algbw = nbytes / time; busbw = algbw x factor, with factor 2(n-1)/n for all_reduce, (n-1)/n
  for all_gather, reduce_scatter and alltoall, and 1 for broadcast, reduce and sendrecv: the
  factor makes busbw comparable to the hardware's link bandwidth whatever n is.
* Bytes each rank must send at least (lower bound, the "bytes on wire" closed forms):
  all_reduce 2(n-1)/n S, all_gather and reduce_scatter (n-1)/n S, alltoall (n-1)/n S,
  sendrecv S, broadcast S (per non-leaf rank of a pipeline/ring), reduce S.

>>> c = Collective(kind=CollectiveKind.ALL_REDUCE, nbytes=1 << 30, group=tuple(range(8)))
>>> c.busbw_factor
1.75
>>> c.count, c.min_bytes_sent_per_rank
(268435456, 1879048192.0)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from topologies.checks import int_tuple, integer, reject

DTYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "fp8": 1,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "int32": 4,
    "float": 4,
    "float32": 4,
    "int64": 8,
    "double": 8,
    "float64": 8,
}
REDUCE_OPS = ("sum", "prod", "max", "min", "avg")


class CollectiveKind(enum.Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SENDRECV = "sendrecv"
    ALL_TO_ALL = "alltoall"

    @classmethod
    def parse(cls, name: str) -> CollectiveKind:
        key = str(name).strip().lower().replace("-", "_")
        key = {
            "allreduce": "all_reduce",
            "allgather": "all_gather",
            "reducescatter": "reduce_scatter",
            "all_to_all": "alltoall",
            "send_recv": "sendrecv",
        }.get(key, key)
        for kind in cls:
            if kind.value == key:
                return kind
        raise ValueError(f"collective: {name!r} is not known; expected one of {', '.join(k.value for k in cls)}")

    @property
    def reduces(self) -> bool:
        return self in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER, CollectiveKind.REDUCE)

    @property
    def rooted(self) -> bool:
        return self in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)


_KIND_NAMES = frozenset(
    {k.value for k in CollectiveKind} | {"allreduce", "allgather", "reducescatter", "all_to_all", "send_recv"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    kind: CollectiveKind
    nbytes: int
    group: tuple[int, ...]
    root: int = 0
    dtype: str = "float32"
    op: str = "sum"
    splits: tuple[tuple[int, ...], ...] | None = None  # alltoall: bytes group member p sends to q

    def __post_init__(self) -> None:
        # numpy integers and lists are accepted and stored as ints and tuples (equal, hashable collectives)
        if not isinstance(self.kind, CollectiveKind):
            if not isinstance(self.kind, str) or self.kind.strip().lower().replace("-", "_") not in _KIND_NAMES:
                raise reject(
                    "Collective.kind",
                    self.kind,
                    f"a CollectiveKind or one of {', '.join(k.value for k in CollectiveKind)}",
                )
            object.__setattr__(self, "kind", CollectiveKind.parse(self.kind))
        object.__setattr__(self, "nbytes", integer("Collective.nbytes", self.nbytes, low=0))
        object.__setattr__(
            self,
            "group",
            int_tuple(
                "Collective.group",
                self.group,
                low=0,
                distinct=True,
                nonempty=True,
                expected="distinct ranks >= 0, at least one",
            ),
        )
        object.__setattr__(self, "root", integer("Collective.root", self.root, low=0))
        if not isinstance(self.dtype, str) or self.dtype not in DTYPE_BYTES:
            raise ValueError(f"Collective.dtype: {self.dtype!r} is not known; expected one of {', '.join(DTYPE_BYTES)}")
        if not isinstance(self.op, str) or self.op not in REDUCE_OPS:
            raise ValueError(f"Collective.op: {self.op!r} is not known; expected one of {', '.join(REDUCE_OPS)}")
        if self.kind.rooted and not 0 <= self.root < len(self.group):
            raise ValueError(f"Collective.root: {self.root!r} is out of range for a group of {len(self.group)} ranks")
        elt = DTYPE_BYTES[self.dtype]
        if self.nbytes % elt:
            raise ValueError(
                f"Collective.nbytes: {self.nbytes} is not a multiple of the {self.dtype} element size ({elt} B)"
            )
        if self.splits is not None:
            n = len(self.group)
            if self.kind is not CollectiveKind.ALL_TO_ALL:
                raise ValueError(f"Collective.splits: only alltoall takes a split matrix, not {self.kind.value}")
            if not isinstance(self.splits, (tuple, list)):
                raise reject("Collective.splits", self.splits, f"a {n}x{n} matrix of byte counts")
            object.__setattr__(
                self,
                "splits",
                tuple(
                    int_tuple("Collective.splits", row, low=None, expected=f"a {n}x{n} matrix of byte counts")
                    for row in self.splits
                ),
            )
            if len(self.splits) != n or any(len(row) != n for row in self.splits):
                raise ValueError(f"Collective.splits: expected a {n}x{n} matrix of byte counts")
            if any((not isinstance(b, int)) or b < 0 or b % elt for row in self.splits for b in row):
                raise ValueError(f"Collective.splits: entries must be non-negative multiples of {elt} B")
            if max(sum(row) for row in self.splits) != self.nbytes:
                raise ValueError(
                    f"Collective.nbytes: {self.nbytes} must equal the largest row sum of splits "
                    f"({max(sum(row) for row in self.splits)}), the biggest send buffer"
                )
        elif self.kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
            if self.nbytes % (elt * len(self.group)):
                raise ValueError(
                    f"Collective.nbytes: {self.nbytes} is not a multiple of nranks x element size "
                    f"({len(self.group)} x {elt} B): {self.kind.value} splits the buffer in equal pieces"
                )

    @property
    def nranks(self) -> int:
        return len(self.group)

    @property
    def count(self) -> int:
        """nccl-tests' *count* column: elements per rank's parameter (its paramcount).

        nbytes / element size, divided by n for all_gather, reduce_scatter and alltoall, whose
        size column is the whole buffer of n per-rank pieces.
        """
        elements = self.nbytes // DTYPE_BYTES[self.dtype]
        if self.kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
            return elements // self.nranks
        return elements

    @property
    def busbw_factor(self) -> float:
        n = self.nranks
        if self.kind is CollectiveKind.ALL_REDUCE:
            return 2.0 * (n - 1) / n
        if self.kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL):
            return (n - 1) / n
        return 1.0

    @property
    def min_bytes_sent_per_rank(self) -> float:
        """Bandwidth-optimal bytes each rank sends (busbw_factor x nbytes; S for rooted/p2p)."""
        return self.busbw_factor * self.nbytes

    def algbw_bytes_per_s(self, time_s: float) -> float:
        return self.nbytes / time_s if time_s > 0 else 0.0

    def busbw_bytes_per_s(self, time_s: float) -> float:
        return self.algbw_bytes_per_s(time_s) * self.busbw_factor
