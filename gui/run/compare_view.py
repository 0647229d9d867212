"""Compare in the window: one Mac, then the cluster, side by side, the headline large.

``CompareRunner`` runs ``core.run.tasks.compare.compare`` on a bridge thread (two whole
sessions, one after the other) and keeps the result as a "compare" run; Stop cancels the
session running and skips the rest. ``CompareView`` shows a ``Comparison``: generation
tokens/s, prompt tokens/s, time to first token and memory per node for each run, and
beside them the **estimate** for the real Macs each run names (its basis in the cell's
tooltip). On the demo the headline leads with that estimate, labelled as one, its basis
in the headline's tooltip, and the measured figure follows in smaller type, said plainly
to be the simulated Macs': they share this machine's cores and loopback, so what they
measure says nothing about real Macs (``core.run.tasks.compare.headlines``, the CLI's
words too). On real Macs the measured result leads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from core import units
from core.worker.vocab import Strategy
from gui import style
from gui.bridge import Bridge
from gui.style import set_role
from gui.task_runner import TaskRunner
from gui.widgets import clear_layout, label, section

if TYPE_CHECKING:
    from core.model.info import ModelInfo
    from core.plan.planner import Plan
    from core.run.job.launcher import Job, JobSpec
    from core.run.planning import EstimateBeside
    from core.run.session import Host, Session
    from core.run.tasks.compare import Comparison, RunFigures
    from core.run.tasks.watch import Phase

WHAT_WORDS = {
    "probing": "Compare: looking at the Macs…",
    "one Mac": "Compare 1/2: the model on one Mac ({nodes})…",
    "cluster": "Compare 2/2: the model on the cluster ({nodes})…",
}


def rows(result: Comparison, beside: EstimateBeside | None = None) -> list[tuple[str, list[str]]]:
    """The side-by-side table: a row per figure, a column per run; the estimate for the
    real Macs last (before memory) when there is one."""
    runs: list[RunFigures] = [r for r in (result.single, result.cluster) if r is not None]
    table = [
        ("", [f"{r.label[:1].upper() + r.label[1:]} · {', '.join(r.nodes)}" for r in runs]),
        ("Generation", [f"{units.rate(r.generation_tps)} tokens/s" for r in runs]),
        ("Prompt", [f"{units.rate(r.prompt_tps)} tokens/s" for r in runs]),
        ("First token", [units.seconds(r.ttft_s) if r.ttft_s is not None else "–" for r in runs]),
        (
            "Memory",
            ["\n".join(f"{n}: {units.size(b)}" for n, b in r.memory_bytes.items()) for r in runs],
        ),
    ]
    if beside is not None and beside.estimates:
        from core.run.planning import estimate_cell

        cells = [estimate_cell(beside.estimates.get(r.label)) for r in runs]
        table.insert(len(table) - 1, ("Estimate, real Macs", cells))
    return table


def basis(result: Comparison, beside: EstimateBeside | None, column: int) -> str:
    """The tooltip of a run's estimate: where its number comes from."""
    runs = [r for r in (result.single, result.cluster) if r is not None]
    estimate = beside.estimates.get(runs[column].label) if beside is not None else None
    return estimate.basis() if estimate is not None else ""


class CompareRunner(TaskRunner["Comparison"]):
    """Compare on the bridge (``TaskRunner``): each run's session watched (its checks
    with their fixes, its copies), Stop cancels the session running."""

    def __init__(
        self,
        bridge: Bridge,
        job_factory: Callable[[JobSpec], Job] | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(bridge, "Compare stopped.", "Compare failed: {error}", parent)
        self._job_factory = job_factory
        self.beside: EstimateBeside | None = None  # the last result's estimates
        self.finished.connect(self._kept)

    def start(
        self,
        info: ModelInfo,
        plan: Plan,
        hosts: Sequence[Host] | None,
        prompt: str,
        max_tokens: int,
    ) -> bool:
        from core.run.session import Host
        from core.run.tasks.compare import compare

        chosen = list(hosts) if hosts is not None else [Host(n) for n in plan.nodes_used]
        split = plan.split if plan.strategy == Strategy.PIPELINE else None
        factory = self._job_factory
        return self.run(
            lambda watch: compare(
                info,
                chosen,
                plan.strategy,
                prompt,
                max_tokens,
                watch=watch,
                split=split,
                job_factory=factory,
            ),
            WHAT_WORDS["probing"],
            phase_words,
        )

    def stop(self, words: str = "Stopping the comparison…") -> None:
        super().stop(words)

    def _kept(self, result: Comparison) -> None:
        self.beside = result.beside
        if result.not_kept:
            self._bridge.failed.emit(result.not_kept)


def phase_words(session: Session, phase: Phase) -> str:
    """What the window says as each run of a comparison begins."""
    nodes = ", ".join(h.name for h in session.hosts)
    return WHAT_WORDS.get(phase, str(phase)).format(nodes=nodes)


class CompareView(QFrame):
    """A comparison's result: the headline in large type, then the two runs."""

    closed = Signal()

    def __init__(
        self, parent: QWidget | None = None, headline_px: int = 30, compact: bool = False
    ) -> None:
        super().__init__(parent)
        self.compact = compact  # no memory row: presentation mode's room is the headline's
        set_role(self, "subcard")
        self.result: Comparison | None = None
        self.beside: EstimateBeside | None = None
        self.headline = label("", None, wrap=True)
        self.headline.setFont(style.number_font(headline_px))
        # Its own style sheet: the theme's label rules would set a smaller size.
        self.headline.setStyleSheet(f"font-size: {headline_px}px; font-weight: 600;")
        self.measured = label("", "secondary", wrap=True)  # the demo's measured figure
        self.measured.setContentsMargins(0, 0, 0, 6)
        self.close_button = QPushButton("Close")
        set_role(self.close_button, "link")
        self.close_button.clicked.connect(self._close)
        self.grid = QGridLayout()
        self.grid.setHorizontalSpacing(18)
        self.grid.setVerticalSpacing(4)
        self.notes = label("", "hint", wrap=True)
        head = QHBoxLayout()
        head.addWidget(section("Compare · one Mac vs the cluster"))
        head.addStretch(1)
        head.addWidget(self.close_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.addLayout(head)
        layout.addWidget(self.headline)
        layout.addWidget(self.measured)
        layout.addLayout(self.grid)
        layout.addWidget(self.notes)
        layout.addStretch(1)  # room to spare goes below, not between the lines
        self.cells: dict[tuple[int, int], str] = {}
        self.tooltips: dict[tuple[int, int], str] = {}  # the estimate cells' basis

    def show_result(self, result: Comparison, beside: EstimateBeside | None = None) -> None:
        """The result, with the estimate for the real Macs beside it when there is one."""
        from core.run.tasks.compare import headlines

        self.result, self.beside = result, beside
        said = headlines(result, beside)
        self.headline.setText(said.lead)
        self.headline.setToolTip(said.basis)
        self.measured.setText(said.measured)
        self.measured.setVisible(bool(said.measured))
        clear_layout(self.grid)
        self.cells = {}
        shown = rows(result, beside)
        self.tooltips = {}
        for r, (name, cells) in enumerate(shown[:-1] if self.compact else shown):
            self.grid.addWidget(label(name, "secondary"), r, 0, Qt.AlignmentFlag.AlignTop)
            for c, text in enumerate(cells):
                cell = label(text, "fact-value" if r else "fact-name")
                if name.startswith("Estimate"):  # both numbers: wrapped, never wider
                    cell.setWordWrap(True)  # than the pane (a 1280×800 window's)
                    cell.setToolTip(basis(result, beside, c))
                    self.tooltips[(r, c)] = cell.toolTip()
                self.grid.addWidget(cell, r, c + 1, Qt.AlignmentFlag.AlignTop)
                self.cells[(r, c)] = text
        notes = list(result.notes)
        self.notes.setText(" ".join(notes))
        self.notes.setVisible(bool(notes))
        self.show()

    def _close(self) -> None:
        self.hide()
        self.closed.emit()
