"""A rank as the launcher follows it, and the words a person reads when one fails.

``RankStatus`` is one rank's state (stage, activity, exit, error, log tail); the
launcher (``core.run.job.launcher``) updates it from the rank's events and exit. When ranks
fail, ``blame_order`` picks the cause over the echoes of a peer's loss, and
``exit_message`` / ``silence_message`` say what happened: which rank, on which node,
doing what, and its last log lines.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.worker import protocol as p
from core.worker.vocab import LoadingStage

LOG_TAIL = 200
# Where a failure message turns from what happened to the rank's own last log lines.
LOG_LINES = "Last log lines:"


def starting_ranks(count: int, nodes: Sequence[str] = ()) -> str:
    """The one "Starting N ranks" line, whoever says it (the job's state, the command
    line): how many ranks, and on which Macs when they are known."""
    ranks = f"{count} rank" if count == 1 else f"{count} ranks"
    return f"Starting {ranks} on {', '.join(nodes)}…" if nodes else f"Starting {ranks}…"


@dataclass
class RankStatus:
    rank: int
    node: str | None = None  # the target's name, for a job placed on targets
    pid: int | None = None  # a remote rank's: its process group on its node
    stage: LoadingStage = LoadingStage.STARTING
    loaded: bool = False
    loaded_event: p.Loaded | None = None  # what it said once loaded (memory, device)
    activity: str | None = None  # once loaded: what the job had asked of it ("generating", ...)
    last_seen: float = field(default_factory=time.monotonic)
    exit_code: int | None = None
    exited_at: float | None = None
    error: str | None = None
    ended: bool = False  # it said ``stopped``: it is exiting cleanly
    log: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL))

    def tail(self, lines: int = 8) -> list[str]:
        return list(self.log)[-lines:]

    def named(self) -> str:
        """The rank as people read it: "Rank 1", or "Rank 1 on Studio B" when placed."""
        return f"Rank {self.rank} on {self.node}" if self.node else f"Rank {self.rank}"

    @property
    def doing(self) -> str:
        """What the rank was doing, for the failure messages below."""
        if self.loaded:
            return self.activity or "loaded"
        return DOING.get(self.stage, self.stage.value)


# The launcher's own failure messages ("... while reading the model") are for people;
# the progress words a front end shows are its own (gui/run/progress.py).
DOING = {
    LoadingStage.STARTING: "starting",
    LoadingStage.JOINING: "joining the cluster",
    LoadingStage.READING: "reading the model",
    LoadingStage.SLICING: "slicing every layer",
    LoadingStage.PLACING: "placing layers",
    LoadingStage.WEIGHTS: "loading weights",
    LoadingStage.SYNCHRONISING: "waiting for the other ranks",
}
# What a loaded rank is doing: answering a request, or waiting between them.
GENERATING, TESTING_LINKS, SERVING = "generating", "testing the links", "serving requests"
TRAINING = "training"


# What a rank says when a peer it talks to went away: never the cause, only its echo.
KNOCK_ON = ("connection to a peer was lost", "Connection reset by peer", "Broken pipe")


def knocked_on(status: RankStatus) -> bool:
    """The rank failed because a peer did (its error or last log lines say the peer went
    away), not for a reason of its own."""
    text = " ".join([status.error or "", *status.tail()])
    return any(sign in text for sign in KNOCK_ON)


def blame_order(status: RankStatus) -> tuple[bool, bool, bool, float, int]:
    """Which exited rank caused a failure comes first: one killed by a signal, then one
    failing for a reason of its own (a peer's loss is an echo, whichever exited first),
    then a silent crash before a reported error, then the earliest, then the lowest."""
    return (
        status.exit_code is not None and status.exit_code >= 0,
        knocked_on(status),
        status.error is not None,
        status.exited_at if status.exited_at is not None else float("inf"),
        status.rank,
    )


def exit_message(status: RankStatus) -> str:
    """Why ``status``'s rank ended, for people: its own error, or the signal or exit code
    and what it was doing, then its last log lines."""
    code = status.exit_code
    rank = status.named()
    if status.error:
        what = status.error
    elif code == -1:  # a remote rank ended by a signal ssh does not name
        what = f"{rank} was killed while {status.doing}"
    elif code is not None and code < 0:
        what = f"{rank} was killed (signal {-code}) while {status.doing}" + _signal_hint(-code)
    else:
        what = f"{rank} exited with code {code} while {status.doing}"
    if not what.lower().startswith("rank"):
        what = f"Rank {status.rank}: {what}"
    return what + _tail(status)


# The signals a rank that ran out of memory dies of: the kernel's OOM killer sends
# SIGKILL; MLX's CPU backend crashes with SIGSEGV when an allocation fails.
_MEMORY_SIGNALS = {
    signal.SIGKILL: "if nobody stopped it, its system may have ended it for want of memory",
    signal.SIGSEGV: "MLX crashes this way when memory runs out",
}


def _signal_hint(number: int) -> str:
    """A line after "was killed (signal 9) while ...": what that signal usually means,
    and what to try; nothing for other signals (a hang-up, a Stop from elsewhere)."""
    hint = _MEMORY_SIGNALS.get(number)  # type: ignore[call-overload]
    if hint is None:
        return ""
    return f"\n{hint[0].upper()}{hint[1:]}: try a smaller model, a shorter context or more nodes."


def loading_stage(value: str | None, current: LoadingStage) -> LoadingStage:
    """A ``loading`` event's stage (or a heartbeat's, when it has one); one this version
    does not know keeps the last."""
    if value is None:
        return current
    try:
        return LoadingStage(value)
    except ValueError:
        return current


def silence_message(status: RankStatus, silent_s: float) -> str:
    """A rank that stopped sending heartbeats for ``silent_s`` seconds."""
    return (
        f"{status.named()} stopped responding: no sign of life for "
        f"{silent_s:.0f} s while {status.doing}{_tail(status)}"
    )


def _tail(status: RankStatus) -> str:
    lines = [line for line in status.tail() if line.strip()]
    return (f"\n{LOG_LINES}\n  " + "\n  ".join(lines)) if lines else ""
