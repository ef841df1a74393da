"""mix64: the deterministic 64-bit hash that identifies flows and chooses among next hops.

``mix64(v1, ..., vn)`` folds splitmix64's finaliser over the values, starting from splitmix64's
increment (``_GOLDEN64``): ``h <- finalise(h xor v + golden)`` per value. :func:`_absorb` is one
round, so a router hashes a flow's fixed prefix (seed, servers, local GPUs) once and each flow key
and each hop with one more round.
"""

from __future__ import annotations

import functools

_MASK64 = (1 << 64) - 1
_GOLDEN64 = 0x9E3779B97F4A7C15  # splitmix64's increment, also mix64's starting state


def _absorb(h: int, v: int) -> int:
    """One round of :func:`mix64`: the state ``h`` after some values, with ``v`` added (xor, then
    splitmix64's increment and finaliser). Lets the router hash a flow's fixed prefix once."""
    h = ((h ^ (v & _MASK64)) + _GOLDEN64) & _MASK64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
    return h ^ (h >> 31)


def mix64(*values: int) -> int:
    """Deterministic 64-bit hash of integers: :func:`_absorb` folded over the values from ``_GOLDEN64``
    (splitmix64 finaliser chained over them)."""
    return functools.reduce(_absorb, map(int, values), _GOLDEN64)
