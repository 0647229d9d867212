"""The Cluster pane: the Macs MacMesh finds, live, or a one-click demo cluster when none.

Two modes over one ``core.cluster.registry.Registry``. With a ``Scanner``
(``core.cluster.scanner``: Bonjour, hand-added hosts, probes) the table shows
the real nodes as they appear, change state
and leave; every row that is not ready says why and offers the one action it needs
(Trust…, Set up access…, Retry, Details…). The demo cluster shows simulated Macs instead;
the two never mix in the table, so a plan never spans demo and real Macs.

The pane holds no cluster state: rows follow the registry's signals through the bridge;
what the person decides goes back to the scanner (``accept_host_key``, ``set_up_access``
off the GUI thread, ``add_host``...). "Cables" shows the Thunderbolt map of the ready
Macs (``topology_view``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtCore import QPoint, Qt, QThread, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QMenu,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from core.settings import MAX_DEMO_NODES
from gui.bridge import Bridge
from gui.cluster.actions import NodeActions, is_demo
from gui.cluster.link_test_bar import LinkTestBar
from gui.cluster.node_table import NodeTable
from gui.cluster.table_model import NodeTableModel, status
from gui.cluster.topology_diagram import Diagram, cluster_diagram
from gui.cluster.topology_view import TopologyView
from gui.style import set_role
from gui.widgets import Badge, Card, ElidedButton, Segmented, label

if TYPE_CHECKING:
    from core.cluster.registry import Node, Registry
    from core.cluster.scanner import Scanner
    from core.remote.ssh import UnknownHostKey
    from gui.cluster.doctor_view import DoctorDialog

DEFAULT_DEMO_NODES = 2
MACS, CABLES = "macs", "cables"


class ClusterPane(Card):
    """Shows the registry's nodes; offers the demo cluster while no real Mac is found.

    ``scanner`` (a ``core.cluster.scanner.Scanner``, or a test double with its surface) turns on
    real mode. ``open_url`` opens System Settings (QDesktopServices by default; tests
    record the URL); ``host_is_mac`` says whether this computer can open it.
    """

    nodes_changed = Signal(list)  # list[core.cluster.registry.Node]
    demo_size_changed = Signal(int)
    demo_shown = Signal(bool)  # the demo cluster shown (True) or left (False)
    # What the rows' buttons and menus do. The name hides QWidget.actions() (the pane has no
    # QAction); the tests reach the node actions by it.
    actions: NodeActions  # type: ignore[assignment]  # hides QWidget.actions on purpose

    def __init__(
        self,
        bridge: Bridge | None = None,
        parent: QWidget | None = None,
        *,
        scanner: Scanner | None = None,
        open_url: Callable[[str], object] | None = None,
        host_is_mac: bool | None = None,
    ) -> None:
        super().__init__("Cluster", parent)
        self.bridge = bridge
        self.scanner: Scanner | None = None
        self._registry: Registry | None = None
        self._demo = False
        self._replay = False  # the demo's place holds a capture's Macs
        self.demo_rdma = True  # False: the demo without RDMA (``set_demo_rdma``)
        self.actions = NodeActions(self, open_url, host_is_mac)
        self.model = NodeTableModel(parent=self)
        self.demo_badge = Badge("Demo cluster", "accent")
        self.demo_badge.hide()
        self.header.addWidget(self.demo_badge)
        self.view_box = Segmented([MACS, CABLES], ["Macs", "Cables"])
        self.view_box.set_value(MACS)
        self.view_box.setToolTip("The Macs, or the Thunderbolt cables between them")
        self.view_box.changed.connect(self.show_view)
        self.view_box.hide()
        self.header.addWidget(self.view_box)
        self.pages = QStackedWidget()
        self.pages.addWidget(self._empty_page())
        self.pages.addWidget(self._table_page())
        self.body.addWidget(self.pages)
        self.notice = label("", "error-text", wrap=True, selectable=True)
        self.notice.hide()
        self.body.addWidget(self.notice)
        self.check_button = QPushButton("Check my Macs…")
        set_role(self.check_button, "link")
        self.check_button.setToolTip("Every setup problem of the Macs shown, each with its fix")
        self.check_button.clicked.connect(lambda: self.check_macs())
        check_row = QHBoxLayout()
        check_row.addStretch(1)
        check_row.addWidget(self.check_button)
        self.body.addLayout(check_row)
        # One nodes_changed (and one topology) per burst of registry changes.
        self._announce = QTimer(self)
        self._announce.setSingleShot(True)
        self._announce.setInterval(0)
        self._announce.timeout.connect(self._settled)
        self.model.modelReset.connect(self._nodes_changed)
        self.model.rowsInserted.connect(self._nodes_changed)
        self.model.rowsRemoved.connect(self._nodes_changed)
        self.model.dataChanged.connect(self._nodes_changed)
        if scanner is not None:
            self.set_scanner(scanner)

    def set_scanner(self, scanner: Scanner) -> None:
        """Real mode: show the scanner's nodes (the app attaches it after the first paint;
        a registry the pane already made, for the demo, must be the scanner's)."""
        if self._registry is None:
            self._follow(scanner.registry)
        elif scanner.registry is not self._registry:
            raise ValueError("the scanner must use the pane's registry")
        self.scanner = scanner
        scanner.host_key_needed.connect(self._host_key_needed)
        self.add_button.show()
        self._refresh_rows()
        self._announce.start()

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
        self.add_button = QPushButton("Or add a Mac by name or address…")
        set_role(self.add_button, "link")
        self.add_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.add_button.clicked.connect(lambda: self.actions.show_add_host())
        self.add_button.hide()  # until there is a scanner to add it to
        add_row = QHBoxLayout()
        add_row.setContentsMargins(0, 0, 0, 0)
        add_row.addWidget(self.add_button)
        add_row.addStretch(1)
        layout.addLayout(add_row)
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
        self.table = NodeTable(self.model)
        self.table.action_requested.connect(lambda n, a: self.actions.run_action(n, a))
        self.table.guide_requested.connect(lambda name: self.actions.show_guide(name))
        self.table.menu_requested.connect(self._context_menu)
        self.topology = TopologyView()
        self.views = QStackedWidget()
        self.views.addWidget(self.table)
        self.views.addWidget(self.topology)
        layout.addWidget(self.views)
        self.link_bar = LinkTestBar(self.topology, lambda: self.is_demo)
        layout.addWidget(self.link_bar)
        self._demo_footer = QWidget()
        footer = QHBoxLayout(self._demo_footer)
        footer.setContentsMargins(0, 0, 0, 0)
        footer.addWidget(label("Simulated Macs", "secondary"))
        self.size_box = Segmented(list(range(1, MAX_DEMO_NODES + 1)))
        self.size_box.set_value(DEFAULT_DEMO_NODES)
        self.size_box.setToolTip("How many simulated Macs the demo cluster has")
        self.size_box.changed.connect(self._resize_demo)
        footer.addWidget(self.size_box)
        footer.addStretch(1)
        self.leave_button = ElidedButton("Leave the demo")  # "(3 Macs found)" may not fit
        set_role(self.leave_button, "link")
        self.leave_button.clicked.connect(self.leave_demo)
        footer.addWidget(self.leave_button)
        layout.addWidget(self._demo_footer)
        self._real_footer = QWidget()
        footer = QHBoxLayout(self._real_footer)
        footer.setContentsMargins(0, 0, 0, 0)
        self.summary = label("", "secondary")
        footer.addWidget(self.summary)
        footer.addStretch(1)
        self.add_link = QPushButton("Add a Mac…")
        set_role(self.add_link, "link")
        self.add_link.setToolTip("Add a Mac by name or address (remembered)")
        self.add_link.clicked.connect(lambda: self.actions.show_add_host())
        footer.addWidget(self.add_link)
        layout.addWidget(self._real_footer)
        self._real_footer.hide()
        self.show_view(MACS)
        return page

    def show_view(self, which: object) -> None:
        """ "Macs" (the table) or "Cables" (the map); the stack takes the shown one's height."""
        index = 1 if which == CABLES else 0
        self.view_box.set_value(CABLES if index else MACS)
        self.views.setCurrentIndex(index)
        self.link_bar.setVisible(bool(index))
        self._fit_views()

    def _fit_views(self) -> None:
        """The stack is as high as the view it shows (both have fixed heights)."""
        shown = self.views.currentWidget()
        self.views.setFixedHeight(max(shown.minimumHeight() if shown is not None else 0, 1))

    # -- following the registry --------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The registry the table shows: the scanner's, else one made on first use (it
        imports discovery, which the window does not wait for)."""
        if self._registry is None:
            from core.cluster.registry import Registry

            self._follow(Registry())
        assert self._registry is not None
        return self._registry

    def _follow(self, registry: Registry) -> None:
        self._registry = registry
        registry.added.connect(lambda node: self._on_gui_thread(lambda: self._apply(node)))
        registry.updated.connect(lambda node: self._on_gui_thread(lambda: self._apply(node)))
        registry.removed.connect(lambda name: self._on_gui_thread(lambda: self.model.remove(name)))
        for node in registry.nodes():
            self._apply(node)

    def _wanted(self, node: Node) -> bool:
        return is_demo(node) == self._demo

    def _apply(self, node: Node) -> None:
        if self._wanted(node):
            self.model.add(node, 0 if node.is_self else None)  # this Mac first
        else:
            self.model.remove(node.name)
            self._update_summary()  # "Leave the demo (2 Macs found)"

    def _reload(self) -> None:
        if self._registry is not None:
            self.model.reset([n for n in self._registry.nodes() if self._wanted(n)])

    def _on_gui_thread(self, change: Callable[[], None]) -> None:
        """Apply a change now when it happens on the GUI thread, else queue it (the
        registry may outlive the pane: a change for a deleted pane is dropped)."""

        def guarded() -> None:
            if shiboken6.isValid(self):
                change()

        if not shiboken6.isValid(self):
            return
        if QThread.currentThread() is self.thread():
            change()
        elif self.bridge is not None:
            self.bridge.run_on_main(guarded)
        else:
            QTimer.singleShot(0, self, guarded)

    def _host_key_needed(self, name: str, key: UnknownHostKey) -> None:
        """On a probe's thread: remember the key until the person clicks Trust…."""
        self._on_gui_thread(lambda: self.actions.pending_keys.__setitem__(name, key))

    # -- demo -------------------------------------------------------------------------

    def start_demo(self, count: int | None = None) -> None:
        """Show the demo cluster's simulated Macs (count defaults to the segment's)."""
        chosen = self.size_box.value()
        count = count or (chosen if isinstance(chosen, int) else DEFAULT_DEMO_NODES)
        self._demo, self._replay = True, False
        self.size_box.set_value(count)
        self._reload()
        self._set_demo_macs(count)
        self.demo_badge.set("Demo cluster", "accent")
        self.demo_badge.show()
        self.size_box.show()
        self._update_page()
        self.demo_shown.emit(True)  # remembered: the next launch shows it again

    def show_replay(self, nodes: list[Node]) -> None:
        """A replayed capture's Macs (``core.run.demo.replay_nodes``) in the demo's place:
        shown, planned and run as its simulated Macs; their number is the capture's, their
        cables the captured ones."""
        self._demo, self._replay = True, True
        self._reload()
        self.registry.set_demo_nodes(nodes)
        self.demo_badge.set("Replayed capture", "accent")
        self.demo_badge.show()
        self.size_box.hide()
        self._update_page()

    def leave_demo(self) -> None:
        self._demo = self._replay = False
        self.registry.set_demo_nodes([])
        self._reload()
        self.demo_badge.hide()
        self._update_page()
        self.demo_shown.emit(False)

    def _set_demo_macs(self, count: int) -> None:
        """The demo Macs as registry nodes; their facts are what a probe would report."""
        from core.run.demo import demo_nodes

        self.registry.set_demo_nodes(demo_nodes(count, rdma=self.demo_rdma))

    def set_demo_rdma(self, on: bool) -> None:
        """The demo with RDMA as described (``core.run.demo``) or without it on any Mac
        (a presenter shows the RDMA guide); the demo shown is simulated anew."""
        if on == self.demo_rdma:
            return
        self.demo_rdma = on
        if self._demo and not self._replay:
            self._set_demo_macs(self.demo_size())

    def demo_size(self) -> int:
        """How many simulated Macs the demo cluster has (or would have, once shown)."""
        chosen = self.size_box.value()
        return chosen if isinstance(chosen, int) else DEFAULT_DEMO_NODES

    def set_demo_size(self, count: int) -> None:
        """As if the person clicked ``count`` in "Simulated Macs"."""
        self.size_box.set_value(count)
        self._resize_demo(count)

    def _resize_demo(self, count: int) -> None:
        if self._demo:
            self._set_demo_macs(count)
            self.demo_size_changed.emit(count)

    # -- actions ------------------------------------------------------------------------

    def notify(self, text: str) -> None:
        """A problem to show under the table (empty: none)."""
        self.notice.setText(text)
        self.notice.setVisible(bool(text))

    def check_macs(self, *, try_links: bool = True) -> DoctorDialog:
        """ "Check my Macs": ``macmesh doctor``'s report over the Macs shown, in a dialog."""
        from gui.cluster.doctor_view import check_macs

        if self.bridge is None:
            self.bridge = Bridge(self)
        return check_macs(self, self.bridge, self.window(), try_links=try_links)

    def _context_menu(self, name: str, where: QPoint) -> None:
        actions = self.actions.context_actions(name)
        if not actions:
            return
        menu = QMenu(self.table)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        for text, run in actions:
            menu.addAction(text).triggered.connect(lambda _=False, run=run: run())
        menu.popup(where)

    # -- state ----------------------------------------------------------------------------

    def set_locked(self, locked: bool) -> None:
        """While a job runs its nodes cannot change."""
        self.size_box.setEnabled(not locked)
        self.leave_button.setEnabled(not locked)
        self.demo_button.setEnabled(not locked)

    def nodes(self) -> list[Node]:
        return self.model.nodes()

    @property
    def is_demo(self) -> bool:
        return self._demo

    def diagram(self) -> Diagram | None:
        """The Thunderbolt map of the nodes shown (None: fewer than two)."""
        return cluster_diagram(self.model.nodes(), self._demo and not self._replay)

    def _nodes_changed(self, *_args: object) -> None:
        self._refresh_rows()
        self._announce.start()

    def _refresh_rows(self) -> None:
        self.table.refresh_rows()
        self._fit_views()
        self._update_page()

    def _settled(self) -> None:
        diagram = self.diagram()
        self.topology.set_diagram(diagram)
        self._fit_views()
        self.view_box.setVisible(diagram is not None and self.pages.currentIndex() == 1)
        if diagram is None and self.views.currentIndex() == 1:
            self.show_view(MACS)
        self._update_summary()
        self.nodes_changed.emit(self.model.nodes())

    def _update_summary(self) -> None:
        nodes = self.model.nodes()
        ready = sum(status(n) is None for n in nodes)
        waiting = sum(1 for n in nodes if (s := status(n)) is not None and s.action)
        words = [f"{len(nodes)} Mac{'s' * (len(nodes) != 1)}", f"{ready} ready"]
        if waiting:
            words.append(f"{waiting} need{'s' * (waiting == 1)} you")
        self.summary.setText(" · ".join(words))
        if self._demo and self._registry is not None:
            real = sum(1 for n in self._registry.nodes() if not is_demo(n) and not n.is_self)
            self.leave_button.setText(
                f"Leave the demo ({real} Mac{'s' * (real != 1)} found)"
                if real
                else "Leave the demo"
            )

    def _update_page(self) -> None:
        real_nodes = any(not n.is_self for n in self.model.nodes())
        table = self._demo or real_nodes
        self.pages.setCurrentIndex(1 if table else 0)
        self._demo_footer.setVisible(self._demo)
        self._real_footer.setVisible(not self._demo and self.scanner is not None)
        if not table:
            self.view_box.hide()
