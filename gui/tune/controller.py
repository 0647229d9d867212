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
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from core.run.states import RunState
from gui.bridge import Bridge

if TYPE_CHECKING:
    from core.model.info import ModelInfo
    from core.run.session import Host
    from core.tune.settings import TuneSettings

log = logging.getLogger(__name__)

Factory = Callable[..., Any]  # FineTune(info, hosts, data, settings, name)


def one_line(error: BaseException) -> str:
    """An error as one line for people: its own message (the core's errors are written
    for people), the type's name only when the message is empty."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    return text.splitlines()[0]


class TuneController(QObject):
    state_changed = Signal(str, str)  # RunState value, detail
    report = Signal(object)  # core.run.tasks.finetune.TrainReport
    validated = Signal(int, float)  # iteration, validation loss
    checkpoint = Signal(int, str)  # iteration, path
    finished = Signal(object)  # core.tune.adapters.Adapter, or None
    start_failed = Signal(str)  # why the fine-tune could not start, in one line

    def __init__(
        self, bridge: Bridge, factory: Factory | None = None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._queue = bridge.serial_queue()
        self._factory = factory
        self.tune: Any = None
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
        self._bridge.run_in_background(
            tune.start, None, lambda error: self._start_error(tune, error), queue=self._queue
        )
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
        self._bridge.run_in_background(
            tune.stop, None, lambda error: self._stop_failed(tune, error), queue=self._queue
        )

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

    def _connect(self, tune: Any) -> None:
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

    def _finished(self, adapter: Any) -> None:
        self.finished.emit(adapter)

    def _start_error(self, tune: Any, error: BaseException) -> None:
        if tune is not self.tune:
            return
        if self.state == RunState.STOPPING:
            self._set_state(RunState.STOPPED, "Stopped before training started.")
            return
        self._refused(error)

    def _refused(self, error: BaseException) -> None:
        line = one_line(error)
        log.info("the fine-tune did not start: %s", line)
        self._set_state(RunState.NOT_READY, line)
        self.start_failed.emit(line)

    def _stop_failed(self, tune: Any, error: BaseException) -> None:
        if tune is self.tune and self.state != RunState.FAILED:
            self._set_state(RunState.STOPPED, f"Stopped, with a problem: {one_line(error)}")

    def _set_state(self, state: RunState, detail: str) -> None:
        self.state = state
        self.state_changed.emit(state.value, detail)
