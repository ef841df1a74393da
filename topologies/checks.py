"""The one argument-checking helper: every check at an edge of fabricsim (CLI, TOML, CSV, logs, Python API).

Standard library only, and it imports nothing of fabricsim, so every package may use it (workloads may import
this module and nothing else of topologies). Every check returns the value in its canonical form (an ``int``
for a numpy integer, a float, an enum member, a tuple, a Path) or raises the ValueError of :func:`reject`,
whose one-line message names the field, the bad value and what is allowed:

>>> str(reject("ModelSpec.layers", 0, "an integer >= 1"))
'ModelSpec.layers: 0 is not allowed; expected an integer >= 1'
>>> integer("nodes", 2), size_bytes("minbytes", "64M"), flag("gdr", True)
(2, 67108864, True)
>>> size_bytes("minbytes", "8.5")
Traceback (most recent call last):
...
ValueError: minbytes: '8.5' is not allowed; expected a whole number of bytes
"""

from __future__ import annotations

import enum
import math
import numbers
import os
import re
from pathlib import Path
from typing import TypeGuard

__all__ = (
    "MAX_BYTES",
    "Unreachable",
    "Option",
    "reject",
    "is_int",
    "integer",
    "int_at_least",
    "choice",
    "option",
    "finite_nonnegative",
    "finite",
    "positive_finite",
    "size_bytes",
    "flag",
    "int_tuple",
    "instance",
    "readable_file",
    "read_text",
    "output_file",
    "output_dir",
)

# the largest byte count an edge accepts: 1 PiB, far above any one collective or buffer, and exact in a float
MAX_BYTES = 1 << 50
_MAX_REPR = 60  # a value's repr longer than this is shortened in messages (one line, readable)


class Option(enum.StrEnum):
    """Base of fabricsim's option enums: a member equals its name as a string (``Protocol.LL == "LL"``), prints
    as it and has its repr, so messages and tables read the same whether a user gave the member or the name.

    >>> class Color(Option):
    ...     RED = "red"
    >>> Color.RED == "red", f"{Color.RED}", repr(Color.RED)
    (True, 'red', "'red'")
    """

    def __repr__(self) -> str:
        return repr(self.value)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_REPR else f"{text[: _MAX_REPR - 15]}...{text[-12:]}"


def reject(field: str, value: object, expected: str) -> ValueError:
    """The error for ``field`` holding ``value``; the caller raises it."""
    return ValueError(f"{field}: {_shown(value)} is not allowed; expected {expected}")


def is_int(value: object) -> TypeGuard[int]:
    """An integer (numpy integers included), not a bool. Typed as a guard for ``int``: a numpy integer supports
    the same comparisons, arithmetic and ``int()``."""
    # the exact-type test answers the common case without the (slow) abstract-base-class check
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def integer(
    field: str, value: object, *, low: int | None = None, high: int | None = None, expected: str | None = None
) -> int:
    """``value`` (an int or numpy integer, not a bool) as an int, in [low, high] where given."""
    if not is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        if expected is None:
            expected = "an integer" + (
                f" from {low} to {high}"
                if low is not None and high is not None
                else f" >= {low}"
                if low is not None
                else f" <= {high}"
                if high is not None
                else ""
            )
        raise reject(field, value, expected)
    return int(value)


def int_at_least(field: str, value: object, low: int) -> int:
    return integer(field, value, low=low)


def choice(field: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed`` (strings; an unhashable value is simply not one of them)."""
    if not isinstance(value, str) or value not in allowed:
        raise reject(field, value, f"one of {', '.join(map(repr, allowed))}")
    return value


def option(field: str, value: object, kind: type[enum.Enum]) -> enum.Enum:
    """The member of the enum ``kind`` (a StrEnum of options) that ``value`` names: a member, its value, or its
    value in another case when only one member matches."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
        folded = [m for m in kind if str(m.value).lower() == value.lower()]
        if len(folded) == 1:
            return folded[0]
    raise reject(field, value, f"one of {', '.join(repr(m.value) for m in kind)}")


def _real(value: object) -> TypeGuard[float]:
    # the exact-type test answers the common case without the (slow) abstract-base-class check
    return (
        type(value) is float or type(value) is int or (isinstance(value, numbers.Real) and not isinstance(value, bool))
    )


def finite(
    field: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    expected: str | None = None,
) -> float:
    """``value`` (a real number, not a bool) as a finite float within the bounds; -0.0 becomes 0.0."""
    number = math.nan  # not a real number, or an int too large for a float: rejected below as not finite
    if _real(value):
        try:
            number = float(value)
        except OverflowError:
            pass
    ok = math.isfinite(number)
    ok = ok and (low is None or (number > low if low_open else number >= low))
    ok = ok and (high is None or (number < high if high_open else number <= high))
    if not ok:
        if expected is None:
            bounds = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
            bounds += [f"{'<' if high_open else '<='} {high:g}"] if high is not None else []
            expected = "a finite number" + (f" {' and '.join(bounds)}" if bounds else "")
        raise reject(field, value, expected)
    return number + 0.0


def finite_nonnegative(field: str, value: object, expected: str = "a finite number of seconds >= 0") -> float:
    """``value`` as a float; -0.0 becomes 0.0 (equal values then have one bit pattern)."""
    return finite(field, value, low=0.0, expected=expected)


def positive_finite(field: str, value: object, expected: str = "a finite number > 0") -> float:
    return finite(field, value, low=0.0, low_open=True, expected=expected)


_SIZE_RE = re.compile(r"^\s*(\d{1,30})(?:\.(\d{1,30}))?\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)
_SIZE_SHIFT = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50}
SIZE_EXPECTED = "a byte count from 0 to 1P such as 8, 1K, 64M, 8G (K, M, G, T, P: binary multiples)"


def size_bytes(field: str, value: object, *, low: int = 0) -> int:
    """A byte count: an integer (numpy integers included) or nccl-tests' text ("8", "1K", "64M", "8G"), whole,
    from ``low`` to MAX_BYTES; computed exactly (no float), so 400 digits are an error, not an overflow."""
    expected = SIZE_EXPECTED if low == 0 else SIZE_EXPECTED.replace("from 0", f"from {low}")
    if is_int(value):
        nbytes = int(value)
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        if not match:
            raise reject(field, value, expected)
        whole, fraction, suffix = match.groups()
        scaled = int(whole + (fraction or "")) << _SIZE_SHIFT[suffix.upper()]
        denominator = 10 ** len(fraction or "")
        if scaled % denominator:
            raise reject(field, value, "a whole number of bytes")
        nbytes = scaled // denominator
    else:
        raise reject(field, value, expected)
    if not low <= nbytes <= MAX_BYTES:
        raise reject(field, value, expected)
    return nbytes


def flag(field: str, value: object) -> bool:
    """A bool (numpy's included): not 1, not "no" (which would be true)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise reject(field, value, "True or False")


def int_ranges(field: str, text: object, *, low: int = 0, high: int | None = None, expected: str) -> tuple[int, ...]:
    """Comma-separated integers and ascending ranges, as typed on a command line: "1-5,7" -> (1, 2, 3, 4, 5, 7);
    each within [low, high]; anything else is the error naming ``field``, ``text`` and ``expected``."""
    if not isinstance(text, str):
        raise reject(field, text, expected)
    out: list[int] = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        if not (first.isdigit() and (last.isdigit() if sep else True)):
            raise reject(field, text, expected)
        lo, hi = int(first), int(last) if sep else int(first)
        if hi < lo or lo < low or (high is not None and hi > high):
            raise reject(field, text, expected)
        out.extend(range(lo, hi + 1))
    return tuple(out)


def int_tuple(
    field: str,
    value: object,
    *,
    low: int | None = 0,
    distinct: bool = False,
    nonempty: bool = False,
    expected: str | None = None,
) -> tuple[int, ...]:
    """A tuple, list, range or numpy array of integers (numpy integers included) as a tuple of ints, each
    >= ``low``; ``distinct`` and ``nonempty`` where asked."""

    def refused() -> ValueError:
        wanted = expected or (
            "a tuple of "
            + ("distinct " if distinct else "")
            + "integers"
            + (f" >= {low}" if low is not None else "")
            + (", at least one" if nonempty else "")
        )
        return reject(field, value, wanted)

    result: tuple[int, ...]
    if type(value) is tuple and all(type(v) is int for v in value) and (low is None or not value or min(value) >= low):
        result = value  # already a tuple of ints in range (the common case: collectives built by the program)
    else:
        items = value.tolist() if hasattr(value, "tolist") and hasattr(value, "ndim") and value.ndim == 1 else value
        if not isinstance(items, (tuple, list, range)):
            raise refused()
        ints = [v for v in items if is_int(v) and (low is None or v >= low)]
        if len(ints) != len(items):
            raise refused()
        result = tuple(int(v) for v in ints)
    if (nonempty and not result) or (distinct and len(set(result)) != len(result)):
        raise refused()
    return result


def instance(field: str, value: object, kind: type | tuple[type, ...], expected: str) -> object:
    """``value`` if it is an instance of ``kind`` (bools are no numbers here)."""
    if not isinstance(value, kind) or (
        isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        raise reject(field, value, expected)
    return value


def _path(field: str, value: object) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise reject(field, value, "a file name")
    return Path(value)


def readable_file(field: str, value: object) -> Path:
    """An existing regular file's path (the message names the file when it is not one)."""
    path = _path(field, value)
    if not path.is_file():
        raise ValueError(
            f"{field}: {str(path)!r} is not allowed; expected an existing file "
            f"({'a directory' if path.is_dir() else 'no such file'})"
        )
    return path


def read_text(field: str, value: object, *, encoding: str = "utf-8-sig") -> str:
    """A text file's contents (UTF-8; a byte-order mark as Excel writes one is dropped), or one error naming the
    file: missing, unreadable, or not UTF-8 (binary, Latin-1)."""
    path = readable_file(field, value)
    try:
        return path.read_text(encoding=encoding)
    except OSError as exc:
        raise ValueError(f"{field}: {str(path)!r} cannot be read ({exc.strerror}); expected a readable file") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{field}: {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); expected a UTF-8 text file"
        ) from None


def output_file(field: str, value: object) -> Path:
    """A file to write (replaced if it exists): not a directory, in a directory that exists."""
    path = _path(field, value)
    if path.is_dir():
        raise ValueError(f"{field}: {str(path)!r} is not allowed; expected a file name (it is a directory)")
    if not path.absolute().parent.is_dir():
        raise ValueError(f"{field}: {str(path)!r} is not allowed; expected a file in an existing directory")
    return path


def output_dir(field: str, value: object) -> Path:
    """A directory to write into: an existing directory, or a path that does not exist yet (created later)."""
    path = _path(field, value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{field}: {str(path)!r} is not allowed; expected a directory (it is an existing file)")
    return path


class Unreachable(ValueError):
    """No route is left between two endpoints (failed links, or a fabric that does not join them): raised by the
    router and by the engine when a failed link leaves a transfer no path."""
