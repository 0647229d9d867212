"""A session that fails its checks after a copy, at the task/session boundary: what
every front end's ``Watch`` must show, whichever task began the session.

``failing_start(monkeypatch)`` replaces ``Session.start`` with a fake that emits on the
session's own signals what a real session emits as its steps run (each step beginning,
``checked`` with a report whose check on the last Mac failed, with its fix, and
``copy_progress`` for the first Mac's copy at 0, 40 and 100 %), then ends NOT_READY with
the failed check as its detail, as a real failed check does, and returns False. Nothing
is probed, checked, copied or started: only a front end's ``Watch`` turns those signals
into words, so a task or a command that stopped handing its session to it shows none.
"""

from __future__ import annotations

import pytest

from core.remote.modelcopy import CopyProgress
from core.run.checks.backend_choice import BackendChoice
from core.run.checks.report import Check, PreflightReport
from core.run.session import Session
from core.run.states import RunState, Step
from core.worker.vocab import Backend

MB = 1024 * 1024  # as core.units says it
COPIED = (0, 40 * MB, 100 * MB)  # each copy_progress's bytes done, of 100 MB


def failing(session: Session) -> str:
    """The Mac whose check fails: the session's last."""
    return session.hosts[-1].name


def copying(session: Session) -> str:
    """The Mac whose copy progresses: the session's first."""
    return session.hosts[0].name


def problem(session: Session) -> str:
    return f"{failing(session)}'s Python (mm-py) has no mlx or mlx-lm"


def fix(session: Session) -> str:
    return f"On {failing(session)} run `mm-py -m pip install mlx mlx-lm`"


def failing_start(monkeypatch: pytest.MonkeyPatch) -> list[Session]:
    """Patch ``Session.start`` (see the module doc); every session started, in order."""
    started: list[Session] = []

    def start(self: Session, until: Step = Step.LAUNCH, *, reprobe: bool = False) -> bool:
        started.append(self)
        self.step_started.emit(Step.PROBE.value)
        self._set(RunState.CHECKING)
        self.step_started.emit(Step.PREFLIGHT.value)
        report = PreflightReport(
            checks=(
                Check.ok(copying(self), "python", f"{copying(self)}'s Python has mlx and mlx-lm"),
                Check.fail(failing(self), "python", problem(self), fix(self)),
            ),
            backend=BackendChoice(Backend.RING, "ring over TCP"),
            copies_needed=(copying(self),),
        )
        self.report = report
        self.checked.emit(report)
        for done in COPIED:
            self.copy_progress.emit(
                CopyProgress(copying(self), "copying", done, 100 * MB, rate=20.0 * MB, eta_s=3.0)
            )
        self.error = report.failed_detail()
        self._set(RunState.NOT_READY, self.error)
        return False

    monkeypatch.setattr(Session, "start", start)
    return started
