"""One fine-tune as the window sees it: start, stop, and its news as Qt signals.

The work is a ``core.run.tasks.finetune.FineTune`` (the object behind ``macmesh finetune``).
Its psygnal signals fire on the job's threads; they reach this object only through the
bridge (``run_on_main``), and news of a fine-tune that is no longer the current one is
dropped. ``FineTune.start`` blocks (data checks, probe, fit, preflight, copy, launch), so
it runs on a serial queue of the bridge, and a Stop queued after it always finds the
ranks it started. A refusal from ``start`` becomes one line (``start_failed``), never a
traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal

from core.run.states import RunState
from gui.bridge import Bridge
from gui.task_runner import TaskRunner, one_line

if TYPE_CHECKING:
    from core.model.info import ModelInfo
    from core.run.session import Host
    from core.run.tasks.finetune import FineTune
    from core.tune.adapters import Adapter
    from core.tune.settings import TuneSettings

log = logging.getLogger(__name__)

Factory = Callable[..., "FineTune"]  # FineTune(info, hosts, data, settings, name)


class TuneController(QObject):
    state_changed = Signal(str, str)  # RunState value, detail
    report = Signal(object)  # core.run.tasks.finetune.TrainReport
    validated = Signal(int, float)  # iteration, validation loss
    checkpoint = Signal(int, str)  # iteration, path
    finished = Signal(object)  # core.tune.adapters.Adapter, or None
    start_failed = Signal(str)  # why the fine-tune could not start, in one line
    checked = Signal(object)  # core.run.checks.report.PreflightReport of its session
    copy_progress = Signal(object)  # core.remote.modelcopy.CopyProgress of its copies
    checks_failed = Signal(object)  # the PreflightReport whose failed check stopped it

    def __init__(
        self, bridge: Bridge, factory: Factory | None = None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._bridge = bridge
        # The start runs on a TaskRunner (its session's checks and copies crossing to
        # here); a Stop is queued on the same queue, after it.
        self._starter: TaskRunner[bool] = TaskRunner(bridge, parent=self)
        self._queue = self._starter.queue
        self._starter.checked.connect(self.checked)
        self._starter.copy_progress.connect(self.copy_progress)
        self._starter.finished.connect(self._started)
        self._starter.failed.connect(self._start_failed)
        self._factory = factory
        self.tune: FineTune | None = None
        self.state = RunState.IDLE

    @property
    def active(self) -> bool:
        return self.state.active

    def start(
        self,
        info: ModelInfo,
        hosts: Sequence[Host],
        data: Path,
        settings: TuneSettings,
        name: str | None = None,
    ) -> bool:
        """Start a fine-tune (off the GUI thread); False when one is under way, or when
        the fine-tune cannot even be made (``start_failed`` says why)."""
        if self.state.active:
            return False
        factory = self._factory
        if factory is None:
            from core.run.tasks.finetune import FineTune  # mlx, numpy...: at the first Start

            factory = FineTune
        try:
            tune = factory(info, list(hosts), Path(data), settings, name)
        except Exception as error:
            self._refused(error)
            return False
        self.tune = tune
        self._connect(tune)
        self._set_state(RunState.CHECKING, "Checking the data and the Macs…")
        self._starter.run(tune.start, "Checking the data and the Macs…")
        return True

    def stop(self) -> None:
        """Stop: before the ranks run the start's steps are cancelled; once they train,
        they agree to stop at the next report and the last checkpoint becomes the
        adapter. The work runs on the serial queue, after the start."""
        tune = self.tune
        if tune is None or not self.state.active or self.state == RunState.STOPPING:
            return
        if self.state in (RunState.CHECKING, RunState.COPYING):
            tune.cancel()
        self._set_state(
            RunState.STOPPING, "Stopping at the next step: the last checkpoint is kept…"
        )
        self._starter.stop_behind(tune.stop, lambda line: self._stop_failed(tune, line))

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Synchronous stop, for closing the window: every rank ends now (the last
        checkpoint is kept), a start under way included."""
        tune = self.tune
        if tune is None or not self.state.active:
            return
        tune.cancel()
        self._bridge.wait(timeout_s)  # a start under way returns...
        tune.cancel()  # ...and whatever it launched meanwhile ends too
        try:
            tune.wait(timeout_s)
        except Exception:
            log.warning("the fine-tune did not end cleanly", exc_info=True)
        self.state = RunState.STOPPED

    # -- the fine-tune's news (any thread → GUI thread) --------------------------------

    def _connect(self, tune: FineTune) -> None:
        def cross(closure: Callable[[], None]) -> None:
            self._bridge.run_on_main(lambda: closure() if tune is self.tune else None)

        tune.state_changed.connect(
            lambda state, detail: cross(lambda: self._on_state(str(state), str(detail)))
        )
        tune.report.connect(lambda report: cross(lambda: self.report.emit(report)))
        tune.validated.connect(
            lambda it, loss: cross(lambda: self.validated.emit(int(it), float(loss)))
        )
        tune.checkpoint.connect(
            lambda it, path: cross(lambda: self.checkpoint.emit(int(it), str(path)))
        )
        tune.finished.connect(lambda adapter: cross(lambda: self._finished(adapter)))

    def _on_state(self, value: str, detail: str) -> None:
        state = RunState(value)
        if state == RunState.IDLE:
            return  # a fine-tune being made: this object said CHECKING already
        if self.state == RunState.STOPPING and state not in (RunState.STOPPED, RunState.FAILED):
            return
        if not self.state.active and state.active:
            return  # late news of a start that already ended
        self._set_state(state, detail)

    def _finished(self, adapter: Adapter | None) -> None:
        self.finished.emit(adapter)

    def _started(self, started: bool) -> None:
        """The start returned: False when a check failed (the checks view shows each
        fix, as the Run pane's Start does) or it was cancelled."""
        report = self.tune.session.report if self.tune is not None else None
        if not started and report is not None and not report.ok:
            self.checks_failed.emit(report)

    def _start_failed(self, line: str) -> None:
        if self.state == RunState.STOPPING:
            self._set_state(RunState.STOPPED, "Stopped before training started.")
            return
        self._refused(line)

    def _refused(self, error: BaseException | str) -> None:
        line = error if isinstance(error, str) else one_line(error)
        log.info("the fine-tune did not start: %s", line)
        self._set_state(RunState.NOT_READY, line)
        self.start_failed.emit(line)

    def _stop_failed(self, tune: FineTune, line: str) -> None:
        if tune is self.tune and self.state != RunState.FAILED:
            self._set_state(RunState.STOPPED, f"Stopped, with a problem: {line}")

    def _set_state(self, state: RunState, detail: str) -> None:
        self.state = state
        self.state_changed.emit(state.value, detail)
