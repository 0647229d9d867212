"""`macmesh history` leads each run with the line the History window leads with."""

from __future__ import annotations

import io

from core.cli.history import describe, history_cli
from core.run.measure.history import History, RunRecord

LEAD = "Estimate for the real Macs: 1.6× faster on 2 Macs"
SIMULATED = "1.1× faster on 2 Macs"


def _compare() -> RunRecord:
    return RunRecord(
        kind="compare",
        model="SmolLM2-135M-Instruct",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        split=[18, 12],
        versions={"macmesh": "0.1.0"},
        figures={
            "headline": SIMULATED,
            "lead": LEAD,
            "measured": f"Measured on simulated Macs: {SIMULATED}",
        },
        series={},
        started=1_700_000_000.0,
    )


def test_a_demo_compare_is_listed_with_the_estimate_lead_as_in_the_window() -> None:
    record = _compare()
    line = describe(record)
    assert line.endswith(f"; {LEAD}") and SIMULATED not in line.removesuffix(LEAD)
    assert line.endswith(record.headline())  # the History window's "Headline" row


def test_macmesh_history_prints_that_line() -> None:
    History().add(_compare())
    out = io.StringIO()
    assert history_cli([], out) == 0
    assert out.getvalue().strip().endswith(LEAD)
