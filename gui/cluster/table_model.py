"""The cluster's nodes as a Qt table model: a thin adapter over a list of node records.

The model holds no state of its own beyond the list it shows. Changes arrive as
notifications (``add``, ``update``, ``remove``, ``reset``) and become the matching
``beginInsertRows``/``dataChanged``/``beginRemoveRows`` calls, like napari's
``_base_item_model``. The Cluster pane feeds it from a ``core.cluster.registry.Registry`` (psygnal
signals fired on discovery's or a probe's thread) through the bridge, so the view updates
row by row on the GUI thread.

What a row says about a node (its probe state in words, the action it needs, its RDMA
badge) is computed here by small pure functions over the record, so the delegates only
paint and the tests can read every word through ``data()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt

from core import units
from core.cluster.rdma import RdmaVerdict, enable_guide, node_verdict
from core.cluster.states import ProbeState

if TYPE_CHECKING:
    from psygnal import SignalInstance

    from core.cluster.registry import Node

Index = QModelIndex | QPersistentModelIndex
COLUMNS = ("Name", "Chip", "Memory", "macOS", "RDMA")
NAME, CHIP, MEMORY, MACOS, RDMA = range(len(COLUMNS))
NodeRole = Qt.ItemDataRole.UserRole + 1  # the record itself
RdmaRole = Qt.ItemDataRole.UserRole + 2  # True, False or None (unknown)
StateRole = Qt.ItemDataRole.UserRole + 3  # the probe state's value ("ready", "probing"...)
StatusRole = Qt.ItemDataRole.UserRole + 4  # Status: what a node that is not ready needs
BadgeRole = Qt.ItemDataRole.UserRole + 5  # RdmaBadge: the RDMA pill and its guide
HintRole = Qt.ItemDataRole.UserRole + 6  # "this Mac", "Linux · ring only" or ""

# Row actions: what a click on the status's link does.
TRUST, ACCESS, RETRY, DETAILS = "trust", "access", "retry", "details"

# What a row says for each probe state but READY: headline, the detail when the probe
# gave no message, the action it needs and its link's words, the headline's colour.
STATUS_WORDS: dict[ProbeState, tuple[str, str, str | None, str, str]] = {
    ProbeState.NEW: ("Waiting to be checked…", "", None, "", "muted"),
    ProbeState.PROBING: ("Probing…", "Reading its chip, memory and cables", None, "", "muted"),
    ProbeState.NEEDS_HOST_KEY: (
        "New Mac: check its identity",
        "Check its fingerprint once, then MacMesh remembers it.",
        TRUST,
        "Trust…",
        "warning",
    ),
    ProbeState.NEEDS_ACCESS: (
        "MacMesh cannot log in yet",
        "Set up access once with this Mac's password.",
        ACCESS,
        "Set up access…",
        "warning",
    ),
    ProbeState.HOST_KEY_CHANGED: (
        "Identity changed: connection refused",
        "Its host key is not the one remembered.",
        DETAILS,
        "Details…",
        "danger",
    ),
    ProbeState.UNREACHABLE: ("Unreachable", "It did not answer.", RETRY, "Retry", "danger"),
}


@dataclass(frozen=True)
class Status:
    """A node that is not ready: a headline, the reason in words, the action it needs."""

    state: ProbeState
    title: str
    detail: str = ""
    action: str | None = None  # TRUST, ACCESS, RETRY, DETAILS
    action_label: str = ""
    kind: str = "muted"  # muted, warning, danger: the colour of the headline

    @property
    def busy(self) -> bool:
        return self.state.busy


@dataclass(frozen=True)
class RdmaBadge:
    """The RDMA pill: its words, colour (a gui.widgets badge kind), why, and the guide
    page (``core.cluster.rdma.GUIDES`` key) a click opens, when there is one."""

    text: str
    kind: str
    reason: str
    guide: str | None = None
    rdma: bool | None = None


def probe_state(node: Node) -> ProbeState:
    return node.probe_state


def status(node: Node) -> Status | None:
    """What a row says instead of its facts while the node is not ready (None: ready)."""
    state = probe_state(node)
    if state is ProbeState.READY:
        return None
    title, detail, action, action_label, kind = STATUS_WORDS[state]
    message = node.probe_message
    return Status(state, title, message or detail, action, action_label, kind)


def hint(node: Node) -> str:
    """The short note after a node's name."""
    facts = node.facts
    linux = node.is_mac is False or (facts is not None and facts.is_macos is False)
    if node.is_self:
        return "this computer" if linux else "this Mac"
    if linux:
        return "Linux · ring only"
    return ""


def rdma_badge(node: Node) -> RdmaBadge:
    """The RDMA pill from the node's facts (``core.cluster.rdma.node_verdict``)."""
    facts = node.facts
    if facts is None:
        return RdmaBadge("unknown", "muted", "MacMesh could not tell whether RDMA is on.")
    return _badge_of(node_verdict(facts), enable_guide(facts))


_GUIDE_BADGES = {  # guide → (pill text, kind)
    "rdma-macos27": ("RDMA off", "warning"),
    "rdma-recovery": ("RDMA off", "warning"),
    "rdma-update-macos": ("Update macOS", "warning"),
    "rdma-restart": ("Restart needed", "warning"),
    "thunderbolt-bridge": ("Bridge on", "danger"),
    "thunderbolt4": ("Thunderbolt 4", "muted"),
}


def _badge_of(verdict: RdmaVerdict, enable: str | None) -> RdmaBadge:
    if verdict.on:
        return RdmaBadge("RDMA on", "success", verdict.reason, rdma=True)
    if verdict.guide in _GUIDE_BADGES:
        text, kind = _GUIDE_BADGES[verdict.guide]
        return RdmaBadge(text, kind, verdict.reason, verdict.guide, rdma=False)
    if verdict.state == "off":
        return RdmaBadge("RDMA off", "warning", verdict.reason, enable, rdma=False)
    return RdmaBadge("unknown", "muted", verdict.reason, enable)


class NodeTableModel(QAbstractTableModel):
    def __init__(self, nodes: Sequence[Node] = (), parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._nodes: list[Node] = list(nodes)

    # -- notifications ------------------------------------------------------------

    def reset(self, nodes: Sequence[Node]) -> None:
        self.beginResetModel()
        self._nodes = list(nodes)
        self.endResetModel()

    def add(self, node: Node, row: int | None = None) -> None:
        """A node appeared; an existing name is an update instead."""
        if self.row_of(node.name) is not None:
            self.update(node)
            return
        row = len(self._nodes) if row is None else max(0, min(row, len(self._nodes)))
        self.beginInsertRows(QModelIndex(), row, row)
        self._nodes.insert(row, node)
        self.endInsertRows()

    def update(self, node: Node) -> None:
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
        self,
        added: SignalInstance,
        updated: SignalInstance,
        removed: SignalInstance,
        run_on_main: Callable[[Callable[[], None]], None],
    ) -> None:
        """Follow a registry's psygnal signals (any thread) through ``run_on_main``."""
        added.connect(lambda node: run_on_main(lambda: self.add(node)))
        updated.connect(lambda node: run_on_main(lambda: self.update(node)))
        removed.connect(lambda name: run_on_main(lambda: self.remove(name)))

    # -- reading --------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def row_of(self, name: str) -> int | None:
        return next((i for i, node in enumerate(self._nodes) if node.name == name), None)

    def node(self, row: int) -> Node | None:
        return self._nodes[row] if 0 <= row < len(self._nodes) else None

    # -- QAbstractTableModel ------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 (Qt's signature)
        return 0 if parent.isValid() else len(self._nodes)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
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

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
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
            return rdma_badge(node).rdma
        if role == StateRole:
            return probe_state(node).value
        if role == StatusRole:
            return status(node)
        if role == BadgeRole:
            return rdma_badge(node)
        if role == HintRole:
            return hint(node)
        return None


def rdma_text(rdma: bool | None) -> str:
    return {True: "RDMA on", False: "RDMA off", None: "unknown"}[rdma]


def _display(node: Node, column: int) -> str | None:
    if column == NAME:
        return node.name
    current = status(node)
    if column == CHIP:
        return current.title if current else node.chip.removeprefix("Apple ")
    if column == MEMORY:
        return units.size(node.memory_bytes) if node.memory_bytes else ""
    if column == MACOS:
        return node.macos
    if column == RDMA:
        return rdma_badge(node).text
    return None


def _tooltip(node: Node, column: int) -> str | None:
    current = status(node)
    if current is not None and column != NAME:
        return f"{current.title}. {current.detail}".strip()
    if column == RDMA:
        badge = rdma_badge(node)
        return badge.reason + (" Click for how to fix it." if badge.guide else "")
    if column == MEMORY:
        if not node.memory_bytes:
            return None
        return f"{units.size(node.memory_bytes)} unified memory ({units.BYTES_NOTE})"
    if column == NAME:
        state = "Ready" if current is None else current.title
        note = hint(node)
        return f"{node.name}{f' ({note})' if note else ''}: {state}"
    return f"{node.name}: {node.chip}, macOS {node.macos}"


def _alignment(column: int) -> int:
    if column == MEMORY:
        return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
