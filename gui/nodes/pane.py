"""The Cluster pane: the Macs MacMesh will use, or a one-click demo cluster when none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QThread, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QStackedWidget,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from gui.bridge import Bridge
from gui.nodes.badge_delegate import BadgeDelegate
from gui.nodes.table_model import COLUMNS, NAME, RDMA, NodeRecord, NodeTableModel
from gui.style import set_role
from gui.widgets import Badge, Card, Segmented, label

if TYPE_CHECKING:
    from core.registry import Registry

ROW_HEIGHT = 34
MAX_DEMO_NODES = 4  # core.demo.MAX_DEMO_NODES (not imported at startup: it loads numpy)
DEFAULT_DEMO_NODES = 2


class ClusterPane(Card):
    """Shows the registry's nodes; offers the demo cluster while no real Mac is found.

    The table model follows a ``core.registry.Registry`` (its added/updated/removed
    signals, through the bridge when they come from another thread). Today only the demo
    cluster feeds it; discovery and hand-added hosts plug into the same registry.
    """

    nodes_changed = Signal(list)  # list[NodeRecord]
    demo_size_changed = Signal(int)

    def __init__(self, bridge: Bridge | None = None, parent: QWidget | None = None) -> None:
        super().__init__("Cluster", parent)
        self._bridge = bridge
        self._registry: Registry | None = None
        self.model = NodeTableModel(parent=self)
        self.demo_badge = Badge("Demo cluster", "accent")
        self.demo_badge.hide()
        self.header.addWidget(self.demo_badge)
        self.pages = QStackedWidget()
        self.pages.addWidget(self._empty_page())
        self.pages.addWidget(self._table_page())
        self.body.addWidget(self.pages)
        self._demo = False
        # One nodes_changed per burst of registry changes (a demo start is several).
        self._announce = QTimer(self)
        self._announce.setSingleShot(True)
        self._announce.setInterval(0)
        self._announce.timeout.connect(lambda: self.nodes_changed.emit(self.model.nodes()))
        self.model.modelReset.connect(self._nodes_changed)
        self.model.rowsInserted.connect(self._nodes_changed)
        self.model.rowsRemoved.connect(self._nodes_changed)
        self.model.dataChanged.connect(self._nodes_changed)

    # -- pages ----------------------------------------------------------------------

    def _empty_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 4, 0, 4)
        layout.setSpacing(8)
        layout.addWidget(label("No other Mac found yet", "model-name"))
        layout.addWidget(
            label(
                "MacMesh looks for Macs on this network that have Remote Login on. "
                "None has answered so far.",
                "secondary",
                wrap=True,
            )
        )
        row = QHBoxLayout()
        self.demo_button = QPushButton("Try the demo cluster")
        set_role(self.demo_button, "primary")
        self.demo_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.demo_button.clicked.connect(lambda: self.start_demo())
        row.addWidget(self.demo_button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(
            label(
                f"{DEFAULT_DEMO_NODES} simulated Mac Studios whose MLX ranks run as processes on "
                "this computer: a real distributed job, no extra hardware.",
                "hint",
                wrap=True,
            )
        )
        return page

    def _table_page(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setItemDelegateForColumn(RDMA, BadgeDelegate(self.table))
        self.table.setAlternatingRowColors(True)
        self.table.setShowGrid(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(ROW_HEIGHT)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.table.horizontalHeader()
        header.setHighlightSections(False)
        for column in range(len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.table)
        footer = QHBoxLayout()
        footer.addWidget(label("Simulated Macs", "secondary"))
        self.size_box = Segmented(list(range(1, MAX_DEMO_NODES + 1)))
        self.size_box.set_value(DEFAULT_DEMO_NODES)
        self.size_box.setToolTip("How many simulated Macs the demo cluster has")
        self.size_box.changed.connect(self._resize_demo)
        footer.addWidget(self.size_box)
        footer.addStretch(1)
        self.leave_button = QPushButton("Leave the demo")
        set_role(self.leave_button, "link")
        self.leave_button.clicked.connect(self.leave_demo)
        footer.addWidget(self.leave_button)
        layout.addLayout(footer)
        return page

    # -- actions ----------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The registry the table shows (made on first use: it imports discovery)."""
        if self._registry is None:
            from core.registry import Registry

            self._registry = Registry()
            self.model.connect_registry(
                self._registry.added,
                self._registry.updated,
                self._registry.removed,
                self._on_gui_thread,
            )
        return self._registry

    def start_demo(self, count: int | None = None) -> None:
        """Show the demo cluster's simulated Macs (count defaults to the segment's)."""
        count = count or int(self.size_box.value() or DEFAULT_DEMO_NODES)
        self._demo = True
        self.size_box.set_value(count)
        self._set_demo_macs(count)
        self.demo_badge.show()
        self.pages.setCurrentIndex(1)

    def leave_demo(self) -> None:
        self._demo = False
        self.registry.set_demo_nodes([])
        self.demo_badge.hide()
        self.pages.setCurrentIndex(0)

    def _set_demo_macs(self, count: int) -> None:
        """The demo Macs as registry nodes; their facts are what a probe would report."""
        from core.demo import demo_macs
        from core.registry import Node, Source

        macs = demo_macs(count)
        registry = self.registry
        registry.set_demo_nodes(
            [
                Node(mac.name, model_id=mac.model_id, is_mac=True, sources=frozenset({Source.DEMO}))
                for mac in macs
            ]
        )
        for mac in macs:
            registry.set_facts(mac.name, mac)

    def _on_gui_thread(self, change: Callable[[], None]) -> None:
        """Apply a registry change now when it happens on the GUI thread, else queue it."""
        if QThread.currentThread() is self.thread():
            change()
        elif self._bridge is not None:
            self._bridge.run_on_main(change)
        else:
            QTimer.singleShot(0, self, change)

    def set_locked(self, locked: bool) -> None:
        """While a job runs its nodes cannot change."""
        self.size_box.setEnabled(not locked)
        self.leave_button.setEnabled(not locked)
        self.demo_button.setEnabled(not locked)

    def nodes(self) -> list[NodeRecord]:
        return self.model.nodes()

    @property
    def is_demo(self) -> bool:
        return self._demo

    def set_demo_size(self, count: int) -> None:
        """As if the person clicked ``count`` in "Simulated Macs"."""
        self.size_box.set_value(count)
        self._resize_demo(count)

    def _resize_demo(self, count: int) -> None:
        if self._demo:
            self._set_demo_macs(count)
            self.demo_size_changed.emit(count)

    def _nodes_changed(self, *_args: object) -> None:
        rows = self.model.rowCount()
        header = self.table.horizontalHeader().sizeHint().height()
        self.table.setFixedHeight(header + max(rows, 1) * ROW_HEIGHT + 2)
        self._announce.start()
