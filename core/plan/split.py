"""Split a model's layers into contiguous pipeline stages that fit each stage's budget.

Pure integer arithmetic, O(stages × layers): planning 1,000 layers on 8 nodes takes
milliseconds. Segments here are in LAYER order (segment 0 holds the first layers); the
planner maps them onto ranks, where mlx-lm's rank 0 holds the last layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, pairwise


def proportional_counts(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` items over ``len(weights)`` bins in proportion to weights, each bin >= 1.

    Largest-remainder rounding in exact integers (no float drift, deterministic ties: the
    lower index wins). Negative weights count as zero; all-zero weights split evenly.
    """
    bins = len(weights)
    if bins == 0 or total < bins:
        raise ValueError(f"cannot give each of {bins} bins at least one of {total} items")
    clipped = [max(0, int(w)) for w in weights]
    if sum(clipped) == 0:
        clipped = [1] * bins
    whole = sum(clipped)
    counts = [max(1, total * w // whole) for w in clipped]
    remainders = [total * w % whole for w in clipped]
    by_remainder = sorted(range(bins), key=lambda i: (-remainders[i], i))
    diff = total - sum(counts)
    step = 0
    while diff > 0:
        counts[by_remainder[step % bins]] += 1
        diff -= 1
        step += 1
    for i in reversed(by_remainder):  # smallest remainders give back first
        while diff < 0 and counts[i] > 1:
            counts[i] -= 1
            diff += 1
    return counts


def segment_loads(costs: Sequence[int], counts: Sequence[int]) -> list[int]:
    """The summed cost of each contiguous segment of ``counts`` layers (layer order)."""
    prefix = [0, *accumulate(costs)]
    bounds = [0, *accumulate(counts)]
    return [prefix[b] - prefix[a] for a, b in pairwise(bounds)]


def fit_split(costs: Sequence[int], caps: Sequence[int], target: Sequence[int]) -> list[int] | None:
    """Segment sizes (layer order) with each segment's cost <= its cap, closest to ``target``.

    Returns ``target`` itself when it fits; otherwise repairs it: every boundary is moved as
    little as possible, under the guarantee that the remaining layers can still be placed.
    Returns None only when no contiguous split with a layer per segment fits at all.
    """
    layers, stages = len(costs), len(caps)
    if stages == 0 or layers < stages:
        return None
    if all(load <= cap for load, cap in zip(segment_loads(costs, target), caps, strict=True)):
        return list(target)
    prefix = [0, *accumulate(costs)]
    ends = [_max_ends(prefix, cap) for cap in caps]
    completes = _completable(ends, layers)
    if not completes[0][0]:
        return None
    goals = list(accumulate(target))
    split, start = [], 0
    for j in range(stages):
        end = _closest(completes[j + 1], start + 1, ends[j][start], goals[j])
        split.append(end - start)
        start = end
    return split


def _max_ends(prefix: Sequence[int], cap: int) -> list[int]:
    """For each start s, the furthest end e >= s with cost(s..e) <= cap (two pointers)."""
    layers = len(prefix) - 1
    out = [0] * (layers + 1)
    end = 0
    for start in range(layers + 1):
        end = max(end, start)
        while end < layers and prefix[end + 1] - prefix[start] <= cap:
            end += 1
        out[start] = end
    return out


def _completable(ends: list[list[int]], layers: int) -> list[list[bool]]:
    """``result[j][s]``: segments j.. can cover layers s.. with one layer or more each."""
    stages = len(ends)
    result: list[list[bool]] = [[False] * (layers + 1) for _ in range(stages + 1)]
    result[stages][layers] = True
    for j in reversed(range(stages)):
        after = [0, *accumulate(int(ok) for ok in result[j + 1])]  # after[x] = count in [0, x)
        row = result[j]
        for start in range(layers):
            hi = ends[j][start]
            row[start] = hi > start and after[hi + 1] - after[start + 1] > 0
    return result


def _closest(allowed: list[bool], low: int, high: int, goal: int) -> int:
    """The allowed position in [low, high] nearest ``goal`` (the lower one on a tie)."""
    goal = min(max(goal, low), high)
    for distance in range(high - low + 1):
        for candidate in (goal - distance, goal + distance):
            if low <= candidate <= high and allowed[candidate]:
                return candidate
    raise AssertionError("no allowed boundary although the split was proven feasible")


def parse_split(text: str) -> tuple[int, ...]:
    """``--split 50,30,20``: whole layer counts per Mac, in the plan's rank order.
    ValueError with the reason for anything else."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) < 2 or not all(part.isdecimal() and len(part) <= 7 for part in parts):
        raise ValueError(
            f"--split {text!r}: give whole layer counts, one per Mac in the plan's order, "
            "e.g. 18,12"
        )
    return tuple(int(part) for part in parts)
