"""A rank's own measure of its memory: the peak of a phase, its base, a fresh phase."""

from __future__ import annotations

import io
import json
import mmap
import sys

import pytest

from core.worker import protocol as p
from core.worker import residency
from core.worker.reporter import Reporter
from core.worker.residency import Meter

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="RssAnon and VmHWM are Linux's (a Mac reads its footprint)"
)
MIB = 1 << 20


def _touch(size: int) -> mmap.mmap:
    """``size`` bytes of fresh anonymous memory, every page written so it is resident (an
    mmap of its own: malloc could reuse pages a test freed, which would add nothing)."""
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for i in range(0, size, 4096):
        block[i] = 1
    return block


def test_linux_measures_anonymous_resident_memory() -> None:
    assert residency.measure_name() == residency.MEASURE_ANON


def test_a_transient_between_two_samples_is_in_the_peak() -> None:
    meter = Meter()
    before = meter.mark_base()
    assert before is not None and meter.base == before
    block = _touch(200 * MIB)
    del block  # never sampled while it lived: VmHWM still saw it
    peak = meter.peak()
    assert peak is not None and peak >= before + 190 * MIB


def test_the_next_phase_starts_from_what_is_held_now() -> None:
    meter = Meter()
    meter.mark_base()
    block = _touch(150 * MIB)
    del block
    load = meter.next_phase()
    assert load is not None
    now = meter.sample()
    generation = meter.peak()
    assert now is not None and generation is not None
    assert generation < load - 100 * MIB  # the load's transient is not the generation's
    kept = _touch(60 * MIB)
    assert (meter.peak() or 0) >= now + 55 * MIB
    del kept


def test_heartbeats_carry_the_peak() -> None:
    out = io.StringIO()
    Reporter(p.EventWriter(0, out)).beat()
    beat = json.loads(out.getvalue())
    assert beat["event"] == p.HEARTBEAT and beat["stage"] == "starting"
    assert isinstance(beat["peak_bytes"], int) and beat["peak_bytes"] > 0
