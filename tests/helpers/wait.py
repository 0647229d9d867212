"""Waiting for a condition instead of sleeping for a guess.

A test that sleeps, then asserts, passes on the machine it was written on and fails on a
busy one (or wastes the sleep on a quiet one). ``wait_until`` polls the condition itself
and fails with what it waited for once a generous deadline has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Return as soon as ``predicate()`` is true; fail the test after ``timeout`` seconds,
    saying ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_S)
