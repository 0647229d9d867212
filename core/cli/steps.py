"""A session's steps said on the terminal, as they begin: the command line's view of
``core.run.session.Session``'s signals (the window has its own, ``gui/run``).

``follow(stage, err)`` is the command line's one ``core.run.tasks.watch.Watch``, and all
a command needs: every task (run, demo, serve, linktest, compare, finetune) hands it each
session as it begins, and it says each step's line on stderr (on real Macs the probe,
the plan's reason, every check with its fix, each node's copy at each tenth) and keeps
the ``Stage`` naming the step, so a Ctrl-C says what it interrupted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, TextIO

from core.run.checks.report import format_report
from core.run.job.rank_status import starting_ranks
from core.run.states import Step
from core.run.tasks.adapter_payload import AdapterPayload
from core.run.tasks.watch import Phase, Watch
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


def follow(stage: Stage, err: TextIO) -> Watch:
    """The command line's one ``Watch`` (every command passes it to its task, or calls it
    with the session it made): each session's steps said on ``err`` as they run (on real
    Macs the probe, the plan's reason, every check with its fix, each node's copy at each
    tenth), a comparison's runs named as each begins, and ``stage`` kept on them, so a
    Ctrl-C says what it interrupted and stops the session running."""
    lock = threading.Lock()
    followed: list[Session] = []  # a session is connected once (compare names one twice)

    def write(text: str) -> None:
        with lock:
            err.write(text)
            err.flush()

    show_copy = progress_printer(write)

    def watch(session: Session, phase: Phase) -> None:
        stage.session = session
        if phase.compares:
            doing, said = _run_words(session, phase)
            stage(doing)
            write(said)
        if any(s is session for s in followed):
            return
        followed.append(session)
        session.step_started.connect(partial(_started, session, stage, write))
        session.checked.connect(lambda report: write(format_report(report)))
        session.copy_progress.connect(show_copy)

    return watch


def _started(session: Session, stage: Stage, write: Callable[[str], None], value: str) -> None:
    step = Step(value)
    stage(DOING[step])
    if session.demo:
        return
    if step is Step.PROBE:
        write(f"Probing {len(session.hosts)} host(s)…\n")
    elif step is Step.PREFLIGHT:
        reason = f"{session.plan.reason}\n" if session.plan is not None else ""
        write(f"{reason}Checking the nodes…\n")


def _run_words(session: Session, phase: Phase) -> tuple[str, str]:
    """A comparison's run as it begins: what the stage says, and its line."""
    names = ", ".join(h.name for h in session.hosts)
    if phase in (Phase.BASE, Phase.ADAPTER):
        which = "the base model" if phase is Phase.BASE else f"base + {_adapter_name(session)}"
        return f"running {which}", f"{which[0].upper()}{which[1:]} on {names}…\n"
    where = "one Mac" if phase is Phase.ONE_MAC else "the cluster"
    return f"running on {where}", f"On {where} ({names})…\n"


def _adapter_name(session: Session) -> str:
    use = session.payload_of(AdapterPayload)
    return use.name if use is not None else ""


def starting(nodes: Sequence[str]) -> str:
    """The one line every command says as its ranks start: how many, on which Macs."""
    return starting_ranks(len(nodes), nodes) + "\n"


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
