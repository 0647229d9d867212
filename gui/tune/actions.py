"""What the Fine-tune view does with a finished adapter, off the GUI thread:

- Compare with base: ``core.run.tasks.compare.compare_adapter`` (the same question to the base
  model, then to base + adapter, on the same Macs; two whole sessions);
- Fuse: ``core.tune.fuse.fuse_adapter`` (mlx-lm's fuse in a subprocess, into a model
  folder the library lists).

Both run on one serial queue of the bridge; Stop cancels the session running (compare)
or the fuse's subprocess. A failure is one line (``failed``), never a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from gui.bridge import Bridge
from gui.session_stopper import SessionStopper
from gui.tune.controller import one_line

if TYPE_CHECKING:
    from core.model.info import ModelInfo
    from core.run.session import Host, Session

COMPARE_WORDS = {
    "base": "Compare 1/2: the base model answers…",
    "adapter": "Compare 2/2: the base model with the adapter answers…",
}


class ActionStopped(Exception):
    """Stop was pressed during a compare or a fuse."""


class AdapterActions(QObject):
    progress = Signal(str)
    compared = Signal(object)  # core.run.tasks.compare.AdapterComparison
    fused = Signal(object)  # core.tune.fuse.Fused
    failed = Signal(str)
    busy_changed = Signal(bool)

    def __init__(self, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._bridge = bridge
        self._queue = bridge.serial_queue()
        self.busy = False
        self._stopper = SessionStopper(bridge, ActionStopped)

    def compare(
        self,
        info: ModelInfo,
        hosts: Sequence[Host],
        adapter: Path,
        question: str,
        max_tokens: int = 48,
        job_factory: Any = None,
    ) -> bool:
        if self.busy:
            return False
        from core.run.tasks.compare import compare_adapter
        from core.tune.fit import tune_strategy

        strategy = tune_strategy(len(hosts))
        self._begin("Compare: starting the base model…")

        def on_session(session: Session, what: str) -> None:
            self._stopper.hold(session)
            words = COMPARE_WORDS.get(what, what)
            self._bridge.run_on_main(lambda: self.progress.emit(words))

        def work() -> Any:
            result = compare_adapter(
                info,
                list(hosts),
                strategy,
                question,
                max_tokens,
                adapter,
                watch=on_session,
                job_factory=job_factory,
            )
            if self._stopper.stopped:
                raise ActionStopped
            return result

        self._bridge.run_in_background(
            work, lambda result: self._done(self.compared, result), self._failed, queue=self._queue
        )
        return True

    def fuse(self, model: Path, adapter: Path) -> bool:
        if self.busy:
            return False
        from core.tune.fuse import fuse_adapter

        self._begin("Fusing the adapter into a copy of the model…")
        cancel = self._stopper.cancel
        self._bridge.run_in_background(
            lambda: fuse_adapter(model, adapter, cancel=cancel),
            lambda fused: self._done(self.fused, fused),
            self._failed,
            queue=self._queue,
        )
        return True

    def stop(self) -> None:
        if not self.busy:
            return
        self.progress.emit("Stopping…")
        self._stopper.stop()

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self.stop()
        self._queue.waitForDone(int(timeout_s * 1000))

    # -- internals ----------------------------------------------------------------------

    def _begin(self, words: str) -> None:
        self._stopper.reset()
        self._set_busy(True)
        self.progress.emit(words)

    def _done(self, signal: Any, result: Any) -> None:
        self._set_busy(False)
        signal.emit(result)

    def _failed(self, error: BaseException) -> None:
        self._set_busy(False)
        if isinstance(error, ActionStopped) or self._stopper.stopped:
            self.failed.emit("Stopped.")
        else:
            self.failed.emit(one_line(error))

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        if not busy:
            self._stopper.release()
        self.busy_changed.emit(busy)
