"""Collect a node's facts in one round trip (DESIGN.md section 5).

``script`` builds the POSIX sh script, ``sections`` splits its output, ``parsers`` and
``profiler`` read each command, ``facts`` assembles a ``NodeFacts``.
"""

from core.cluster.probe.facts import (
    NodeFacts,
    ThunderboltPort,
    local_runner,
    parse_probe,
    run_local_probe,
)
from core.cluster.probe.script import build_probe_script
from core.cluster.probe.sections import Unknown

__all__ = [
    "NodeFacts",
    "ThunderboltPort",
    "Unknown",
    "build_probe_script",
    "local_runner",
    "parse_probe",
    "run_local_probe",
]
