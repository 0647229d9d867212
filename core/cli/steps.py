"""A session's steps said on the terminal, as they begin: the command line's view of
``core.run.session.Session``'s signals (the window has its own, ``gui/run``).

``follow`` is all a command needs: each step's line on stderr (on real Macs the probe,
the plan's reason, every check with its fix, each node's copy at each tenth), and the
``Stage`` kept naming the step, so a Ctrl-C says what it interrupted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from core.run.checks.report import PreflightReport, format_report
from core.run.states import Step
from core.units import bytes_per_s, duration, size

if TYPE_CHECKING:
    from core.cli.interrupt import Stage
    from core.remote.modelcopy import CopyProgress
    from core.run.session import Session

# What a command is doing during each step (the interrupted line: "… while <doing>").
DOING = {
    Step.PROBE: "probing the hosts",
    Step.PLAN: "planning",
    Step.PREFLIGHT: "checking the nodes",
    Step.COPY: "copying the model",
    Step.LAUNCH: "loading the model",
}


def follow(session: Session, stage: Stage, err: TextIO) -> None:
    """Say ``session``'s steps on ``err`` as they run, and keep ``stage`` on them."""
    stage.session = session
    lock = threading.Lock()

    def write(text: str) -> None:
        with lock:
            err.write(text)
            err.flush()

    def started(value: str) -> None:
        step = Step(value)
        stage(DOING[step])
        if session.demo:
            return
        if step is Step.PROBE:
            write(f"Probing {len(session.hosts)} host(s)…\n")
        elif step is Step.PREFLIGHT:
            reason = f"{session.plan.reason}\n" if session.plan is not None else ""
            write(f"{reason}Checking the nodes…\n")

    def checked(report: PreflightReport) -> None:
        write(format_report(report))

    session.step_started.connect(started)
    session.checked.connect(checked)
    session.copy_progress.connect(progress_printer(write))


def progress_printer(write: Callable[[str], None]) -> Callable[[CopyProgress], None]:
    """Copy progress: a line per node at each tenth, and when verified."""
    shown: dict[str, tuple[str, int]] = {}
    lock = threading.Lock()

    def show(progress: CopyProgress) -> None:
        step = (progress.phase, int(progress.fraction * 10))
        with lock:
            if shown.get(progress.node) == step:
                return
            shown[progress.node] = step
        rate = f", {bytes_per_s(progress.rate)}" if progress.rate else ""
        eta = f", about {duration(progress.eta_s)} left" if progress.eta_s else ""
        write(
            f"Copying the model to {progress.node}: {progress.phase} "
            f"{size(progress.bytes_done)} of {size(progress.bytes_total)}{rate}{eta}\n"
        )

    return show
