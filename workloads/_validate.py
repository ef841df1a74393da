"""Argument checks shared by the workloads modules (workloads may not import topologies, so these are local).

Every check raises the ValueError of :func:`reject`, whose message names the field, the bad value and what
is allowed: ``reject("ModelSpec.layers", 0, "an integer >= 1")`` reads
``ModelSpec.layers: 0 is not allowed; expected an integer >= 1``.
"""

from __future__ import annotations

import math
import numbers


def reject(field: str, value: object, expected: str) -> ValueError:
    """The error for ``field`` holding ``value``; the caller raises it."""
    return ValueError(f"{field}: {value!r} is not allowed; expected {expected}")


def is_int(value: object) -> bool:
    """An integer (numpy integers included), not a bool."""
    # the exact-type test answers the common case without the (slow) abstract-base-class check
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def int_at_least(field: str, value: object, low: int) -> int:
    if not is_int(value) or value < low:
        raise reject(field, value, f"an integer >= {low}")
    return int(value)


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise reject(field, value, f"one of {', '.join(map(repr, allowed))}")
    return value


def finite_nonnegative(field: str, value: object, expected: str = "a finite number of seconds >= 0") -> float:
    """``value`` as a float; -0.0 becomes 0.0 (equal values then have one bit pattern)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise reject(field, value, expected)
    return float(value) + 0.0
