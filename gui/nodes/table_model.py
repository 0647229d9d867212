"""The cluster's nodes as a Qt table model: a thin adapter over a list of node records.

The model holds no state of its own beyond the list it shows. Changes arrive as
notifications (``add``, ``update``, ``remove``, ``reset``) and become the matching
``beginInsertRows``/``dataChanged``/``beginRemoveRows`` calls, like napari's
``_base_item_model``. Today the demo cluster calls ``reset``; the core registry (psygnal
signals fired on discovery's thread) plugs in with ``connect_registry`` through the bridge,
so the view updates row by row on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

from core.plan_memory import GIB

Index = QModelIndex | QPersistentModelIndex
COLUMNS = ("Name", "Chip", "Memory", "macOS", "RDMA")
NAME, CHIP, MEMORY, MACOS, RDMA = range(len(COLUMNS))
NodeRole = Qt.ItemDataRole.UserRole + 1  # the record itself
RdmaRole = Qt.ItemDataRole.UserRole + 2  # True, False or None (unknown)


class NodeRecord(Protocol):
    """What a row shows; ``core.demo.DemoMac`` has it, and so will the registry's nodes."""

    name: str
    chip: str
    memory_bytes: int
    macos: str
    rdma: bool | None


class NodeTableModel(QAbstractTableModel):
    def __init__(self, nodes: Sequence[NodeRecord] = (), parent: Any = None) -> None:
        super().__init__(parent)
        self._nodes: list[NodeRecord] = list(nodes)

    # -- notifications ------------------------------------------------------------

    def reset(self, nodes: Sequence[NodeRecord]) -> None:
        self.beginResetModel()
        self._nodes = list(nodes)
        self.endResetModel()

    def add(self, node: NodeRecord, row: int | None = None) -> None:
        """A node appeared; an existing name is an update instead."""
        if self.row_of(node.name) is not None:
            self.update(node)
            return
        row = len(self._nodes) if row is None else max(0, min(row, len(self._nodes)))
        self.beginInsertRows(QModelIndex(), row, row)
        self._nodes.insert(row, node)
        self.endInsertRows()

    def update(self, node: NodeRecord) -> None:
        row = self.row_of(node.name)
        if row is None:
            self.add(node)
            return
        self._nodes[row] = node
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def remove(self, name: str) -> None:
        row = self.row_of(name)
        if row is None:
            return
        self.beginRemoveRows(QModelIndex(), row, row)
        del self._nodes[row]
        self.endRemoveRows()

    def connect_registry(
        self, added: Any, updated: Any, removed: Any, run_on_main: Callable[[Callable], None]
    ) -> None:
        """Follow a registry's psygnal signals (any thread) through ``run_on_main``."""
        added.connect(lambda node: run_on_main(lambda: self.add(node)))
        updated.connect(lambda node: run_on_main(lambda: self.update(node)))
        removed.connect(lambda name: run_on_main(lambda: self.remove(name)))

    # -- reading --------------------------------------------------------------------

    def nodes(self) -> list[NodeRecord]:
        return list(self._nodes)

    def row_of(self, name: str) -> int | None:
        return next((i for i, node in enumerate(self._nodes) if node.name == name), None)

    # -- QAbstractTableModel ------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self._nodes)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal and 0 <= section < len(COLUMNS):
            if role == Qt.ItemDataRole.DisplayRole:
                return COLUMNS[section]
            if role == Qt.ItemDataRole.TextAlignmentRole:
                return _alignment(section)
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._nodes):
            return None
        node, column = self._nodes[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return _display(node, column)
        if role == Qt.ItemDataRole.ToolTipRole:
            return _tooltip(node, column)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return _alignment(column)
        if role == NodeRole:
            return node
        if role == RdmaRole:
            return node.rdma
        return None


def rdma_text(rdma: bool | None) -> str:
    return {True: "RDMA on", False: "RDMA off", None: "unknown"}[rdma]


def _display(node: NodeRecord, column: int) -> str | None:
    if column == NAME:
        return node.name
    if column == CHIP:
        return node.chip.removeprefix("Apple ")
    if column == MEMORY:
        return f"{node.memory_bytes / GIB:.0f} GB"
    if column == MACOS:
        return node.macos
    if column == RDMA:
        return rdma_text(node.rdma)
    return None


def _tooltip(node: NodeRecord, column: int) -> str | None:
    if column == RDMA:
        if node.rdma:
            return "RDMA over Thunderbolt is enabled on this Mac."
        if node.rdma is False:
            return (
                "RDMA over Thunderbolt is off. Turn it on in System Settings > Privacy & "
                "Security > Developer Tools (macOS 27), or with rdma_ctl enable in "
                "Recovery (macOS 26.2+), then restart."
            )
        return "MacMesh could not tell whether RDMA is on."
    if column == MEMORY:
        return f"{node.memory_bytes / GIB:.0f} GB unified memory"
    return f"{node.name}: {node.chip}, macOS {node.macos}"


def _alignment(column: int) -> int:
    if column == MEMORY:
        return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
