"""Collect a node's facts in one round trip (docs/design.md, Probing).

``script`` builds the POSIX sh script, ``sections`` splits its output, ``parsers`` and
``profiler`` read each command, ``facts`` assembles a ``NodeFacts``. No imports here:
importing one of them must not load the others.
"""
