"""SI conversions at the edges.

Inside fabricsim every quantity is SI: bytes, seconds, bytes per second, FLOP per second.
These helpers convert the units people write (Gb/s on a cable, GB/s on a datasheet, us in a
log, "64M" on an nccl-tests command line) into SI, so the conversion happens once, where a
number enters the program.

>>> gbit_per_s(400)          # one NDR port, bytes per second
50000000000.0
>>> gbyte_per_s(20.6)        # NCCL's per-NVLink figure for H100
20600000000.0
>>> parse_size("64M"), parse_size("8G"), parse_size("1K"), parse_size("8")
(67108864, 8589934592, 1024, 8)
"""

from __future__ import annotations

from .checks import size_bytes

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4


def gbit_per_s(value: float) -> float:
    """Gigabits per second (10^9 bit/s, as line rates are quoted) -> bytes per second."""
    return float(value) * 1e9 / 8.0


def gbyte_per_s(value: float) -> float:
    """Gigabytes per second (10^9 B/s, as nccl-tests and datasheets quote) -> bytes per second."""
    return float(value) * 1e9


def tflop_per_s(value: float) -> float:
    """TFLOP/s -> FLOP/s."""
    return float(value) * 1e12


def us(value: float) -> float:
    """Microseconds -> seconds."""
    return float(value) * 1e-6


def ns(value: float) -> float:
    """Nanoseconds -> seconds."""
    return float(value) * 1e-9


def parse_size(text: str | int, *, field: str = "size") -> int:
    """Parse an nccl-tests size ("8", "1K", "64M", "8G"; binary multiples) into bytes, exactly.

    Raises ValueError naming ``field`` when the text is not a size from 0 to 1 PiB (checks.size_bytes).
    """
    return size_bytes(field, text)


def format_size(nbytes: int) -> str:
    """Inverse of parse_size for exact multiples: 67108864 -> '64M'."""
    for suffix, mult in (("T", TiB), ("G", GiB), ("M", MiB), ("K", KiB)):
        if nbytes >= mult and nbytes % mult == 0:
            return f"{nbytes // mult}{suffix}"
    return str(nbytes)
