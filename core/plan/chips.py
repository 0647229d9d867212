"""Apple silicon chips and their memory bandwidth, from Apple's published specifications.

Decoding a token reads every active weight once, so a chip's memory bandwidth bounds its
tokens/s; the estimate (``core/plan/estimate.py``) starts from these figures. They are
Apple's tech-spec numbers in GB/s (10^9 bytes a second); ``docs/estimate.md`` lists them
with their sources. Two Max chips come in two bins with different buses and Apple sold
each bin with its own memory sizes, so the node's memory tells them apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.units import GIB

__all__ = ["CHIPS", "ChipSpec", "chip_spec", "normalise_chip"]


@dataclass(frozen=True)
class ChipSpec:
    """A chip as the estimate needs it: its name and its memory bandwidth."""

    name: str
    bandwidth_gbs: float  # GB/s, 10^9 bytes a second, as Apple publishes it

    @property
    def bandwidth_bytes(self) -> float:
        return self.bandwidth_gbs * 1e9


CHIPS: dict[str, ChipSpec] = {
    spec.name: spec
    for spec in (
        ChipSpec("M1", 68.25),
        ChipSpec("M1 Pro", 200),
        ChipSpec("M1 Max", 400),
        ChipSpec("M1 Ultra", 800),
        ChipSpec("M2", 100),
        ChipSpec("M2 Pro", 200),
        ChipSpec("M2 Max", 400),
        ChipSpec("M2 Ultra", 800),
        ChipSpec("M3", 100),
        ChipSpec("M3 Pro", 150),
        ChipSpec("M3 Max", 400),  # 16-core CPU, 40-core GPU
        ChipSpec("M3 Max 30-core GPU", 300),  # 14-core CPU: sold with 36 or 96 GB
        ChipSpec("M3 Ultra", 819),
        ChipSpec("M4", 120),
        ChipSpec("M4 Pro", 273),
        ChipSpec("M4 Max", 546),  # 16-core CPU, 40-core GPU
        ChipSpec("M4 Max 32-core GPU", 410),  # 14-core CPU: sold with 36 GB only
        ChipSpec("M5", 153),
    )
}

# The lower bin of a Max chip, and the memory sizes (GB) Apple sold only with it.
_BINNED = {"M3 Max": ("M3 Max 30-core GPU", {36, 96}), "M4 Max": ("M4 Max 32-core GPU", {36})}
_KEYS = {re.sub(r"[^a-z0-9]", "", name.lower()): name for name in CHIPS}


def normalise_chip(text: str) -> str | None:
    """ "Apple M3 Ultra", "m3-ultra", "M3Ultra" → "M3 Ultra"; None for a chip not in the
    table (an Intel Mac, a Linux host, a typo)."""
    key = re.sub(r"[^a-z0-9]", "", text.lower())
    key = key.removeprefix("apple")
    return _KEYS.get(key)


def chip_spec(chip: str | None, memory_bytes: int | None = None) -> ChipSpec | None:
    """The chip's spec, or None when it is unknown. A Max chip named without its bin is
    the lower bin when its memory is a size only that bin was sold with."""
    name = normalise_chip(chip) if chip else None
    if name is None:
        return None
    binned = _BINNED.get(name)
    if binned and memory_bytes is not None and round(memory_bytes / GIB) in binned[1]:
        name = binned[0]
    return CHIPS[name]
