"""What the cable map writes on a cable: a link test's result ("1.9 GB/s · 93 % of
Thunderbolt 5", latency in the tooltip) or the live traffic of a running job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from core import units
from gui.cluster.topology_scene import Measured

if TYPE_CHECKING:
    from core.run.measure.links import LinkResult
    from core.run.tasks.linktest import LinkTest


def share_words(result: LinkResult) -> str:
    """ "93 % of Thunderbolt 5", or "" when the link's rate is not known."""
    share = result.share
    return "" if share is None else f"{share * 100:.0f} % of {result.nominal.label}"


def tested_captions(tested: LinkTest) -> dict[frozenset[str], Measured]:
    captions = {}
    for result in tested.results:
        share = share_words(result)
        caption = units.bytes_per_s(result.bytes_per_s) + (f" · {share}" if share else "")
        tooltip = (
            f"Link test: {result.describe()} (one way: {units.bytes_per_s(result.bytes_per_s)} "
            f"for 64 MiB messages, latency {result.latency_s * 1e6:.0f} µs for 4 KiB)"
        )
        captions[frozenset(result.nodes)] = Measured(caption, tooltip)
    return captions


def traffic_captions(
    link_bytes_per_s: Mapping[str, float], names: Mapping[int, str]
) -> dict[frozenset[str], Measured]:
    """Live traffic per link ("0↔1" → bytes/s, as ``Telemetry.current`` has it) on the
    cables of the Macs those ranks run on."""
    captions: dict[frozenset[str], Measured] = {}
    for link, rate in link_bytes_per_s.items():
        a, _, b = link.partition("↔")
        if not (a.isdigit() and b.isdigit()):
            continue
        first, second = names.get(int(a)), names.get(int(b))
        if first is None or second is None:
            continue
        text = f"{units.bytes_per_s(rate)} now"
        captions[frozenset((first, second))] = Measured(
            text, f"Live: {text}, bytes moved by MLX collectives"
        )
    return captions
