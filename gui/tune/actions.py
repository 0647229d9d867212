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
from typing import TYPE_CHECKING, Union

from PySide6.QtCore import QObject, Signal

from gui.bridge import Bridge
from gui.task_runner import TaskRunner

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.model.info import ModelInfo
    from core.run.job.launcher import Job, JobSpec
    from core.run.session import Host, Session
    from core.run.tasks.compare import AdapterComparison
    from core.run.tasks.watch import Phase
    from core.tune.fuse import Fused

COMPARE_WORDS = {
    "base": "Compare 1/2: the base model answers…",
    "adapter": "Compare 2/2: the base model with the adapter answers…",
}


class AdapterActions(TaskRunner[Union["AdapterComparison", "Fused"]]):
    """Compare with base and Fuse on the bridge (``TaskRunner``): one at a time, Stop
    cancels the session running (compare) or the fuse's subprocess."""

    compared = Signal(object)  # core.run.tasks.compare.AdapterComparison
    fused = Signal(object)  # core.tune.fuse.Fused

    def __init__(self, bridge: Bridge, parent: QObject | None = None) -> None:
        super().__init__(bridge, parent=parent)
        self.finished.connect(self._sort)

    def compare(
        self,
        info: ModelInfo,
        hosts: Sequence[Host],
        adapter: Path,
        question: str,
        max_tokens: int = 48,
        job_factory: Callable[[JobSpec], Job] | None = None,
    ) -> bool:
        if self.busy:
            return False
        from core.run.tasks.compare import compare_adapter
        from core.tune.fit import tune_strategy

        strategy = tune_strategy(len(hosts))
        return self.run(
            lambda watch: compare_adapter(
                info,
                list(hosts),
                strategy,
                question,
                max_tokens,
                adapter,
                watch=watch,
                job_factory=job_factory,
            ),
            "Compare: starting the base model…",
            phase_words,
        )

    def fuse(self, model: Path, adapter: Path) -> bool:
        if self.busy:
            return False
        from core.tune.fuse import fuse_adapter

        return self.run(
            lambda _watch: fuse_adapter(model, adapter, cancel=self.cancel),
            "Fusing the adapter into a copy of the model…",
        )

    def shutdown(self, timeout_s: float = 30.0) -> None:
        self.stop()
        self.wait(timeout_s)

    def _sort(self, result: AdapterComparison | Fused) -> None:
        from core.tune.fuse import Fused

        (self.fused if isinstance(result, Fused) else self.compared).emit(result)


def phase_words(_session: Session, phase: Phase) -> str:
    return COMPARE_WORDS.get(phase, str(phase))
