"""The Run pane's models (issue 37): every model the server serves, loaded or not, with its
Macs, memory, idle time and requests running; **Unload** is one click; a model folder
dropped on the panel is added to the running cluster when the plan shows it fits beside
the loaded models (else the panel says why, and nothing loads).

Thin: what it shows and does is ``core.serve.models_control.ServedModels``'s (in the Run
pane, the API's now: ``core.serve.window_models.ServiceModels``), called on
the bridge's threads; the results come back on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.serve.window_models import ModelsControl
from core.units import size
from gui.bridge import Bridge
from gui.drop_frame import DropFrame
from gui.model.drop_zone import folder_from_urls

COLUMNS = ("Model", "State", "Macs", "Memory", "Idle", "Running", "")
REFRESH_MS = 1000
TABLE_MAX_PX = 120  # a header and about three models; more scroll


class _ModelDrop(DropFrame):
    """Takes a dropped model folder."""

    def __init__(self, dropped: Callable[[Path], None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._dropped = dropped
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(QLabel("Drop a model folder here to serve it beside the others"))

    def drop_action(self, mime: QMimeData) -> Callable[[], None] | None:
        folder = folder_from_urls(mime.urls()) if mime.hasUrls() else None
        if folder is None:
            return None
        return lambda: self._dropped(folder)


class ModelsPanel(QWidget):
    """The served models (see the module doc). ``changed`` fires once a list is shown."""

    changed = Signal()

    def __init__(self, models: ModelsControl, bridge: Bridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.models, self.bridge = models, bridge
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        for column in (0, 2):  # a long name or many Macs: cut, whole in its tooltip
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_height()
        self.drop = _ModelDrop(self.add_folder)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.hide()  # until it has something to say
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(6)
        layout.addWidget(self.table)  # the models first: in view at 1280x800
        below = QHBoxLayout()
        below.addWidget(self.drop, 1)
        below.addWidget(self.status, 1)
        layout.addLayout(below)
        self.shown: list[dict[str, Any]] = []
        self._asking = self._again = False
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.refresh)
        self.timer.start(REFRESH_MS)
        self.refresh()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.timer.stop()
        super().closeEvent(event)

    # -- the list --------------------------------------------------------------------------

    def refresh(self) -> None:
        if self._asking:  # asked again once this list is in: it may be from before a change
            self._again = True
            return
        self._again = False
        self._asking = True
        self.bridge.run_in_background(self.models.models, self._show, self._failed_list)

    def _failed_list(self, error: BaseException) -> None:
        self._asking = False
        self._say(f"The models cannot be listed: {error}")

    def _show(self, described: list[dict[str, Any]]) -> None:
        self._asking = False
        self.shown = described
        self.table.setRowCount(len(described))
        for row, model in enumerate(described):
            idle = model["idle_s"]
            cells = (
                model["name"],
                model["state"],
                ", ".join(model["nodes"]) or "—",
                size(model["memory_bytes"]) if model["memory_bytes"] else "—",
                f"{idle:.0f} s" if idle is not None else "—",
                str(model["running"] + model["waiting"]),
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(row, column, item)
            if model.get("pinned"):  # the Run pane's job: its Stop ends it
                self.table.removeCellWidget(row, len(COLUMNS) - 1)
                self.table.setItem(row, len(COLUMNS) - 1, QTableWidgetItem("Stop ends it"))
            elif model["state"] == "loaded":
                button = QPushButton("Unload")
                button.setToolTip(f"Unload {model['name']}: its ranks end, the others serve on")
                button.clicked.connect(lambda _=False, name=model["name"]: self.unload(name))
                self.table.setCellWidget(row, len(COLUMNS) - 1, button)
            else:
                self.table.removeCellWidget(row, len(COLUMNS) - 1)
        self._fit_height()
        self.changed.emit()
        if self._again:
            self.refresh()

    def _fit_height(self) -> None:
        """As tall as its rows, up to ``TABLE_MAX_PX`` (more scroll): the Run pane's room
        at 1280x800 is shared with the numbers, the chat and the plots."""
        table = self.table
        rows = sum(table.rowHeight(r) for r in range(table.rowCount()))
        rows = max(rows, table.verticalHeader().defaultSectionSize())
        height = table.horizontalHeader().sizeHint().height() + rows + 2 * table.frameWidth()
        table.setFixedHeight(min(height, TABLE_MAX_PX))

    # -- what a click or a drop does ---------------------------------------------------------

    def unload(self, name: str) -> None:
        self._say(f"Unloading {name}…")
        self.bridge.run_in_background(
            lambda: self.models.unload(name),
            lambda _done: self._said(f"{name} unloaded."),
            lambda error: self._said(f"{name} could not be unloaded: {error}"),
        )

    def add_folder(self, folder: Path) -> None:
        """Check the plan, then load the model when it fits beside the loaded ones."""
        self._say(f"Planning {folder.name} beside the loaded models…")

        def work() -> str:
            why = self.models.fits(folder)
            if why:
                return f"{folder.name} does not fit beside the loaded models: {why}"
            return f"{self.models.add(folder)} loaded."

        self.bridge.run_in_background(
            work, self._said, lambda error: self._said(f"{folder.name}: {error}")
        )

    def _say(self, text: str) -> None:
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def _said(self, text: str) -> None:
        self._say(text)
        self.refresh()
