"""Where a Start stands: the session's state and its steps, as words-free enums.

Standard library only and light to import, so the window imports it at the top. The
front ends (``gui/run``, ``core/cli``) turn these into words.
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    """One Start's life (``core.run.session.Session.state``)."""

    IDLE = "idle"
    CHECKING = "checking"  # probing the hosts not probed lately, planning, the checks
    COPYING = "copying"  # the model to the Macs that lack it
    NOT_READY = "not-ready"  # a check (or the copy, or a step) failed: nothing was started
    LOADING = "loading"  # includes starting the ranks
    READY = "ready"
    GENERATING = "generating"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """A Start is under way and may still hold ranks."""
        return self in (
            RunState.CHECKING,
            RunState.COPYING,
            RunState.LOADING,
            RunState.READY,
            RunState.GENERATING,
            RunState.STOPPING,
        )


class Step(StrEnum):
    """The steps of a Start, in order (``Session.step`` says which one ran last)."""

    PROBE = "probe"
    PLAN = "plan"
    PREFLIGHT = "preflight"
    COPY = "copy"
    LAUNCH = "launch"
