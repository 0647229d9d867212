"""Bytes, rates, counts and durations for people: the one place MacMesh formats them.

The rule, decided once: **every byte quantity is counted in binary units and labelled the
way macOS labels memory**: 1 KB = 2^10 bytes, 1 MB = 2^20, 1 GB = 2^30, 1 TB = 2^40. A
"64 GB" Mac has 64 x 2^30 bytes, and the whole point of MacMesh is to compare a model's
bytes with a Mac's memory, so model files, copies, transfer rates and memory all use the
same unit and can be compared by eye. (Finder shows files in decimal units, so a model
Finder calls 4.3 GB shows here as 4 GB; ``BYTES_NOTE`` says so where it matters.)

Sizes show three significant digits with trailing zeros dropped ("4.25 GB", "41.3 GB",
"512 GB", "64 GB"), moving to the next unit before a number would reach four digits
("0.98 GB", never "1000 MB"). Counts (parameters) are plain numbers in decimal steps as
model cards write them ("135M", "7.6B"). Durations: ``seconds`` for latencies ("350 ms",
"2.41 s"), ``duration`` for time left ("1 min 35 s").

Standard library only and nothing heavy: the GUI imports it at the top.
"""

from __future__ import annotations

import re

__all__ = [
    "BYTES_NOTE",
    "GIB",
    "KIB",
    "MIB",
    "TIB",
    "bytes_per_s",
    "bytes_per_s_parts",
    "count",
    "duration",
    "parse_size",
    "rate",
    "seconds",
    "size",
    "size_parts",
]

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

BYTES_NOTE = "1 GB = 2^30 bytes, as macOS counts memory"
NONE = "–"  # a value not known yet

_SIZE_UNITS = (("B", 1), ("KB", KIB), ("MB", MIB), ("GB", GIB), ("TB", TIB))
_COUNT_UNITS = (("", 1), ("K", 10**3), ("M", 10**6), ("B", 10**9), ("T", 10**12))
_SIZE_TEXT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB)\s*", re.IGNORECASE)


def _trimmed(value: float, decimals: int) -> str:
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if decimals else text


# (decimals, while the rounded number is below): three significant digits for sizes; counts
# keep one decimal under 10 only, as model cards write them ("7.6B", "70B", "135M").
_SIZE_PRECISION = ((2, 10), (1, 100), (0, 1000))
_COUNT_PRECISION = ((1, 10), (0, 1000))


def _scaled(
    n: float, units: tuple[tuple[str, int], ...], precision: tuple[tuple[int, int], ...]
) -> tuple[str, str]:
    """(number, unit) in the first unit whose number stays under 1000 once rounded, trailing
    zeros dropped.

    Rounding is checked before the unit is chosen, so 999.96 MB is "0.98 GB", never
    "1000 MB"; the last unit takes whatever is left ("1536 TB")."""
    sign, n = ("-", -n) if n < 0 else ("", n)
    for unit, scale in units:
        value = n / scale
        for decimals, below in precision:
            if round(value, decimals) < below:
                return sign + _trimmed(value, decimals), unit
    unit, scale = units[-1]
    return sign + f"{n / scale:.0f}", unit


def size_parts(n: float) -> tuple[str, str]:
    """(number, unit) of a byte count: ("41.3", "GB"); whole bytes below 1000 ("512", "B")."""
    if round(abs(n)) < 1000:
        return f"{n:.0f}", "B"
    return _scaled(n, _SIZE_UNITS[1:], _SIZE_PRECISION)


def size(n: float) -> str:
    """A byte count for people: "4.25 GB", "135 MB", "512 B" (binary units, see above)."""
    return " ".join(size_parts(n))


def bytes_per_s_parts(value: float | None) -> tuple[str, str]:
    """(number, unit) of a transfer rate: ("21.5", "KB/s"); ("–", "B/s") when unknown."""
    if value is None:
        return NONE, "B/s"
    number, unit = size_parts(value)
    return number, f"{unit}/s"


def bytes_per_s(value: float | None) -> str:
    """A transfer rate: "80 MB/s"; "–" when unknown."""
    number, unit = bytes_per_s_parts(value)
    return number if value is None else f"{number} {unit}"


def parse_size(text: str) -> int:
    """ "512 GB" → 549755813888: a size as macOS or ``size`` writes it, back to bytes.

    ValueError when the text is not a number and one of B, KB, MB, GB, TB."""
    match = _SIZE_TEXT.fullmatch(text or "")
    if match is None:
        raise ValueError(f"{text!r} is not a size such as '512 GB'")
    scale = dict((u, s) for u, s in _SIZE_UNITS)[match[2].upper()]
    return round(float(match[1]) * scale)


def count(n: int) -> str:
    """135M, 7.6B: parameters as model cards write them (decimal steps, no unit)."""
    if n < 1000:
        return str(n)
    number, unit = _scaled(n, _COUNT_UNITS[1:], _COUNT_PRECISION)
    return number + unit


def rate(value: float | None) -> str:
    """Tokens/s with the precision that stays readable: 2.41, 24.1, 241; "–" when unknown."""
    if value is None:
        return NONE
    if round(value, 2) < 10:
        return f"{value:.2f}"
    if round(value, 1) < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def seconds(value: float | None) -> str:
    """A latency: "350 ms", "2.41 s", "12.3 s"; "–" when unknown."""
    if value is None:
        return NONE
    if round(value * 1000) < 1000:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if round(value, 2) < 10 else f"{value:.1f} s"


def duration(value: float) -> str:
    """Time left, to the second: "35 s", "1 min 35 s", "2 h 05 min"."""
    total = max(0, round(value))
    if total < 60:
        return f"{total} s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
