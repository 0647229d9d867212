"""core/units.py: one rule for bytes (binary, labelled as macOS labels memory), counts,
rates and durations; round trips, monotonicity and the rounding boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core import units
from core.units import GIB, KIB, MIB, TIB

BYTES = st.integers(0, 1 << 52)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (999, "999 B"),
        (1000, "0.98 KB"),  # never four digits
        (1024, "1 KB"),
        (5000, "4.88 KB"),
        (48 * MIB, "48 MB"),
        (int(999.96 * MIB), "0.98 GB"),
        (1023 * MIB, "1 GB"),
        (int(4.25 * GIB), "4.25 GB"),
        (int(41.3 * GIB), "41.3 GB"),
        (64 * GIB, "64 GB"),  # a "64 GB" Mac, as macOS says it
        (512 * GIB, "512 GB"),
        (int(1.5 * TIB), "1.5 TB"),
        (2000 * TIB, "2000 TB"),  # the last unit takes what is left
        (-3 * GIB, "-3 GB"),
    ],
)
def test_sizes(n: int, text: str) -> None:
    assert units.size(n) == text


def test_the_rule_is_binary_everywhere() -> None:
    """Decimal gigabytes (a model file as Finder counts it) show in binary GB."""
    assert units.size(40 * 10**9) == "37.3 GB"
    assert units.bytes_per_s(80 * MIB) == "80 MB/s"
    assert units.bytes_per_s_parts(21.5 * KIB) == ("21.5", "KB/s")
    assert units.bytes_per_s_parts(None) == ("–", "B/s") and units.bytes_per_s(None) == "–"
    assert "2^30" in units.BYTES_NOTE


@given(BYTES)
def test_size_round_trips_within_its_precision(n: int) -> None:
    back = units.parse_size(units.size(n))
    assert abs(back - n) <= max(0.5, n * 0.006)  # three significant digits (0.98 at worst)


@given(BYTES)
def test_size_never_shows_four_digits_before_the_last_unit(n: int) -> None:
    number, unit = units.size_parts(n)
    assert unit in {"B", "KB", "MB", "GB", "TB"}
    assert unit == "TB" or float(number) < 1000
    assert len(number.replace(".", "").lstrip("0")) <= 3 or unit == "TB"
    assert not number.endswith(".") and not ("." in number and number.endswith("0"))


@given(BYTES, BYTES)
def test_size_is_monotonic(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert units.parse_size(units.size(low)) <= units.parse_size(units.size(high))


@pytest.mark.parametrize("text", ["512 GB", "16 GB", "1.5 TB", "48 MB", "0.98 KB", "7 B"])
def test_parse_size_reads_what_size_writes(text: str) -> None:
    assert units.size(units.parse_size(text)) == text


def test_parse_size_reads_macos_memory_and_refuses_the_rest() -> None:
    assert units.parse_size("512 GB") == 512 * GIB
    assert units.parse_size("16GB") == 16 * GIB
    assert units.parse_size("8192 MB") == 8 * GIB
    for bad in ["", "GB", "12 parsecs", "twelve GB"]:
        with pytest.raises(ValueError):
            units.parse_size(bad)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0"),
        (999, "999"),
        (1000, "1K"),
        (999_400, "999K"),
        (999_960, "1M"),  # 999.96K rounds up: the next unit
        (135_000_000, "135M"),
        (7_000_000_000, "7B"),
        (7_600_000_000, "7.6B"),
        (71_000_000_000, "71B"),
        (10**15, "1000T"),
    ],
)
def test_counts(n: int, text: str) -> None:
    assert units.count(n) == text


@given(st.integers(0, 10**16), st.integers(0, 10**16))
def test_counts_are_monotonic(a: int, b: int) -> None:
    scale = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}

    def back(text: str) -> float:
        unit = text[-1] if text[-1].isalpha() else ""
        return float(text.removesuffix(unit)) * scale[unit]

    low, high = sorted((a, b))
    assert back(units.count(low)) <= back(units.count(high))
    assert abs(back(units.count(low)) - low) <= max(0.5, low * 0.05)


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "–"), (2.414, "2.41"), (9.996, "10.0"), (24.1, "24.1"), (99.96, "100"), (241, "241")],
)
def test_token_rates(value: float | None, text: str) -> None:
    assert units.rate(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "–"), (0.35, "350 ms"), (0.9996, "1.00 s"), (2.414, "2.41 s"), (9.999, "10.0 s")],
)
def test_latencies(value: float | None, text: str) -> None:
    assert units.seconds(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(-1, "0 s"), (0.45, "0 s"), (35, "35 s"), (95, "1 min 35 s"), (7500, "2 h 05 min")],
)
def test_durations(value: float, text: str) -> None:
    assert units.duration(value) == text


@given(st.floats(0, 10**6), st.floats(0, 10**6))
def test_durations_are_monotonic(a: float, b: float) -> None:
    def back(text: str) -> int:
        total, words = 0, text.split()
        for number, unit in zip(words[::2], words[1::2], strict=True):
            total += int(number) * {"s": 1, "min": 60, "h": 3600}[unit]
        return total

    low, high = sorted((a, b))
    assert back(units.duration(low)) <= back(units.duration(high))
