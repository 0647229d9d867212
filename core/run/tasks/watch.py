"""One way to watch a task: every task (chat, compare, link test, fine-tune, serve) hands
each session it begins to one ``Watch`` callback with the ``Phase`` it is in, and the
front end connects to that session's signals there (its state, its checks with their
fixes, each copy's progress). The command line's ``Watch`` is ``core.cli.steps.follow``;
the window's is ``gui.task_runner.TaskRunner``'s.

A task with one session says ``RUN``; compare says ``PROBE`` (the cluster probed and
planned before one Mac runs), then ``ONE_MAC`` and ``CLUSTER`` (the cluster's session
again: a watch connects to a session once), or ``BASE`` and ``ADAPTER``; a fine-tune
says ``TRAIN``. The values are the words the tasks always used, so they also compare
equal to those strings.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from core.run.session import Session


class Phase(StrEnum):
    """Which of a task's sessions begins."""

    RUN = "run"  # the one session of a chat, a link test, the API
    PROBE = "probing"  # compare: the cluster probed and planned first
    ONE_MAC = "one Mac"
    CLUSTER = "cluster"
    BASE = "base"  # compare with an adapter: the base model
    ADAPTER = "adapter"  # then base + the adapter
    TRAIN = "train"  # a fine-tune

    @property
    def compares(self) -> bool:
        """One of a comparison's runs (its own line on the terminal)."""
        return self in (Phase.ONE_MAC, Phase.CLUSTER, Phase.BASE, Phase.ADAPTER)


#: Called on the task's thread as each session begins (before its first step), and
#: again when a task goes on with a session it named before (compare's cluster).
Watch: TypeAlias = Callable[["Session", Phase], None]


def watched(watch: Watch | None, session: Session, phase: Phase) -> Session:
    """Tell ``watch`` (if any) that ``session`` begins ``phase``; the session."""
    if watch is not None:
        watch(session, phase)
    return session
