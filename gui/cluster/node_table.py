"""The table of nodes: its delegates, and the rows' shapes.

A ready node shows its facts; a node that is not ready says why across the fact
columns (a span) with the action it needs; a name with a note ("this Mac") takes two
lines. Eight rows show, more scroll. While a node is probed its dot spins, from a timer
that runs only while some row is busy and the table is visible.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView, QWidget

from gui.cluster.badge_delegate import BadgeDelegate
from gui.cluster.delegates import NameDelegate, StatusDelegate
from gui.cluster.table_model import (
    CHIP,
    COLUMNS,
    NAME,
    RDMA,
    NodeTableModel,
    hint,
    rdma_badge,
    status,
)

ROW_HEIGHT = 34
STATUS_ROW_HEIGHT = 46  # a row that says why a node is not ready: headline and reason
HINT_ROW_HEIGHT = 42  # a name with a note under it ("this Mac")
MAX_VISIBLE_ROWS = 8  # a longer list scrolls inside the pane
SPINNER_MS = 80


class NodeTable(QTableView):
    """Rows of ``model``; a click on a ready row's RDMA badge asks for its guide."""

    action_requested = Signal(str, str)  # node name, table_model action (TRUST ...)
    guide_requested = Signal(str)  # node name
    menu_requested = Signal(str, QPoint)  # node name, where (global)

    def __init__(self, model: NodeTableModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setModel(model)
        self.nodes_model = model
        self.name_delegate = NameDelegate(self)
        self.status_delegate = StatusDelegate(self)
        self.status_delegate.action_requested.connect(self.action_requested)
        self.setItemDelegateForColumn(NAME, self.name_delegate)
        self.setItemDelegateForColumn(CHIP, self.status_delegate)
        self.setItemDelegateForColumn(RDMA, BadgeDelegate(self))
        self.setAlternatingRowColors(True)
        self.setShowGrid(False)
        self.setMouseTracking(True)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.customContextMenuRequested.connect(self._context_menu)
        self.clicked.connect(self._clicked)
        self.entered.connect(self._hovered)
        header = self.horizontalHeader()
        header.setHighlightSections(False)
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        # Qt fits columns to their content on layout changes only: a row turning ready
        # (its status gives way to its chip and RDMA badge) must refit them too.
        model.dataChanged.connect(lambda *_: header.resizeSections())
        self.spinner = QTimer(self)
        self.spinner.setInterval(SPINNER_MS)
        self.spinner.timeout.connect(self._spin)
        self._busy = False

    def refresh_rows(self) -> None:
        """Spans, row heights and the table's height, after any change of the rows."""
        self.clearSpans()
        shown = 0
        busy = False
        for row, node in enumerate(self.nodes_model.nodes()):
            current = status(node)
            height = HINT_ROW_HEIGHT if hint(node) else ROW_HEIGHT
            if current is not None:
                self.setSpan(row, CHIP, 1, len(COLUMNS) - CHIP)
                busy = busy or current.busy
                if current.detail:
                    height = STATUS_ROW_HEIGHT
            self.setRowHeight(row, height)
            shown += height if row < MAX_VISIBLE_ROWS else 0
        header = self.horizontalHeader().sizeHint().height()
        self.setFixedHeight(header + max(shown, ROW_HEIGHT) + 2)
        self._busy = busy
        self._sync_spinner()

    # -- clicks -------------------------------------------------------------------------

    def _name(self, index: QModelIndex) -> str:
        return str(index.siblingAtColumn(NAME).data())

    def _clicked(self, index: QModelIndex) -> None:
        node = self.nodes_model.node(index.row())
        if index.column() == RDMA and node is not None and status(node) is None:
            self.guide_requested.emit(self._name(index))

    def _hovered(self, index: QModelIndex) -> None:
        node = self.nodes_model.node(index.row())
        clickable = (
            node is not None
            and index.column() == RDMA
            and status(node) is None
            and rdma_badge(node).guide is not None
        )
        self.viewport().setCursor(
            Qt.CursorShape.PointingHandCursor if clickable else Qt.CursorShape.ArrowCursor
        )

    def _context_menu(self, point: QPoint) -> None:
        index = self.indexAt(point)
        if index.isValid():
            self.menu_requested.emit(self._name(index), self.viewport().mapToGlobal(point))

    # -- the spinner --------------------------------------------------------------------

    def _sync_spinner(self) -> None:
        if self._busy and self.isVisible():
            if not self.spinner.isActive():
                self.spinner.start()
        else:
            self.spinner.stop()

    def _spin(self) -> None:
        self.name_delegate.phase = (self.name_delegate.phase + 30.0) % 360.0
        self.viewport().update()

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self._sync_spinner()

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.spinner.stop()
