"""Numbers for people: counts, sizes, rates and durations as the window shows them."""

from __future__ import annotations

from core.plan.memory import gb

__all__ = ["bytes_per_s", "count", "decimal_size", "gb", "rate", "seconds"]


def count(n: int) -> str:
    """135M, 7.6B: parameters as model cards write them."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return str(n)


def decimal_size(n: int) -> str:
    """Sizes on disk as Finder shows them (decimal units)."""
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} bytes"


def rate(value: float | None) -> str:
    """Tokens/s with the precision that stays readable: 2.41, 24.1, 241."""
    if value is None:
        return "–"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def bytes_per_s(value: float | None) -> tuple[str, str]:
    """(number, unit): 0.0 B/s, 21.5 kB/s, 3.2 GB/s."""
    if value is None:
        return "–", "B/s"
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
        if value >= scale:
            return f"{value / scale:.1f}", unit
    return f"{value:.0f}", "B/s"
