"""The Cluster pane and its item model."""

from __future__ import annotations

import threading
from dataclasses import replace

from psygnal import Signal
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from core.cluster.registry import Node
from core.cluster.states import ProbeState
from core.run.demo import demo_nodes
from gui.bridge import Bridge
from gui.cluster.pane import ClusterPane
from gui.cluster.table_model import (
    CHIP,
    MEMORY,
    NAME,
    RDMA,
    STATUS_WORDS,
    NodeRole,
    NodeTableModel,
    RdmaRole,
    StateRole,
    status,
)

DEMO_MACS = demo_nodes(4)


def rdma_off(node: Node) -> Node:
    """The same demo Mac with RDMA turned off, as its probe would read."""
    assert node.facts is not None
    return replace(node, facts=replace(node.facts, rdma_ctl="disabled"))


def test_node_model_passes_qtmodeltester(qtmodeltester) -> None:
    model = NodeTableModel(demo_nodes(2))
    qtmodeltester.check(model, force_py=True)
    model.add(DEMO_MACS[2])
    model.remove("Studio A")
    model.update(rdma_off(DEMO_MACS[1]))
    model.reset(demo_nodes(4))
    qtmodeltester.check(model, force_py=True)


def test_node_model_rows_and_roles() -> None:
    model = NodeTableModel(DEMO_MACS[:2])
    assert model.rowCount() == 2 and model.columnCount() == 5
    assert model.index(0, NAME).data() == "Studio A"
    assert model.index(0, MEMORY).data() == "96 GB"
    assert model.index(1, RDMA).data() == "RDMA on"
    assert model.index(1, RDMA).data(RdmaRole) is True
    assert model.index(0, NAME).data(NodeRole) is DEMO_MACS[0]
    assert "Thunderbolt" in model.index(0, RDMA).data(Qt.ItemDataRole.ToolTipRole)


def test_node_model_notifications_are_row_level(qtbot: QtBot) -> None:
    model = NodeTableModel(demo_nodes(1))
    with qtbot.waitSignal(model.rowsInserted) as inserted:
        model.add(DEMO_MACS[1])
    assert inserted.args[1:] == [1, 1]
    with qtbot.waitSignal(model.dataChanged):
        model.update(rdma_off(DEMO_MACS[1]))
    assert model.index(1, RDMA).data() == "RDMA off"
    with qtbot.waitSignal(model.rowsRemoved) as removed:
        model.remove("Studio A")
    assert removed.args[1:] == [0, 0]
    model.remove("nobody")  # unknown names are ignored
    assert [n.name for n in model.nodes()] == ["Studio B"]


class _Registry:
    added = Signal(object)
    updated = Signal(object)
    removed = Signal(str)


def test_a_registry_on_another_thread_updates_rows_on_the_gui_thread(qtbot: QtBot) -> None:
    bridge = Bridge()
    model = NodeTableModel()
    registry = _Registry()
    model.connect_registry(registry.added, registry.updated, registry.removed, bridge.run_on_main)

    def discover() -> None:
        registry.added.emit(DEMO_MACS[0])
        registry.added.emit(DEMO_MACS[1])
        registry.removed.emit("Studio A")

    thread = threading.Thread(target=discover)
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: [n.name for n in model.nodes()] == ["Studio B"], timeout=5000)
    bridge.close()
    bridge.deleteLater()


def test_empty_cluster_offers_the_demo_in_one_click(qtbot: QtBot) -> None:
    pane = ClusterPane()
    qtbot.addWidget(pane)
    pane.show()
    assert pane.pages.currentIndex() == 0
    assert pane.demo_button.isVisible()
    with qtbot.waitSignal(pane.nodes_changed) as changed:
        qtbot.mouseClick(pane.demo_button, Qt.MouseButton.LeftButton)
    assert [n.name for n in changed.args[0]] == ["Studio A", "Studio B"]
    assert pane.table.isVisible() and pane.demo_badge.isVisible()
    assert pane.is_demo


def test_demo_size_and_leaving(qtbot: QtBot) -> None:
    pane = ClusterPane()
    qtbot.addWidget(pane)
    pane.start_demo(2)
    with qtbot.waitSignal(pane.demo_size_changed) as resized:
        qtbot.mouseClick(pane.size_box.buttons[3], Qt.MouseButton.LeftButton)
    assert resized.args == [3]
    assert len(pane.nodes()) == 3
    pane.set_locked(True)
    assert not pane.size_box.isEnabled() and not pane.leave_button.isEnabled()
    pane.set_locked(False)
    pane.leave_demo()
    assert pane.nodes() == [] and pane.pages.currentIndex() == 0


def test_the_table_follows_the_core_registry_and_never_mixes_demo_and_real_macs(
    qtbot: QtBot,
) -> None:
    from core.cluster.hosts import ManualHost

    pane = ClusterPane()
    qtbot.addWidget(pane)
    pane.start_demo(2)
    assert [n.name for n in pane.registry.nodes()] == ["Studio A", "Studio B"]
    assert pane.model.index(0, CHIP).data() == "M3 Ultra"  # from the node's facts
    assert pane.model.index(1, RDMA).data(RdmaRole) is True
    pane.registry.set_manual_hosts([ManualHost("mini.local")])  # a real host, not probed yet
    assert [n.name for n in pane.nodes()] == ["Studio A", "Studio B"]  # plans stay demo-only
    assert pane.leave_button.text() == "Leave the demo (1 Mac found)"
    pane.set_demo_size(1)
    assert [n.name for n in pane.nodes()] == ["Studio A"]
    with qtbot.waitSignal(pane.nodes_changed) as changed:
        pane.leave_demo()
    assert [n.name for n in changed.args[0]] == ["mini.local"]
    assert pane.pages.currentIndex() == 1  # a real Mac: the table, not the empty page
    assert pane.model.index(0, CHIP).data() == "Waiting to be checked…"
    assert pane.model.index(0, MEMORY).data() == ""  # unknown, not "0 GB"
    assert pane.model.index(0, RDMA).data() == "unknown"


def test_the_demo_cluster_has_a_plausible_cable_map(qtbot: QtBot) -> None:
    pane = ClusterPane()
    qtbot.addWidget(pane)
    pane.show()
    pane.start_demo(3)
    qtbot.waitUntil(lambda: pane.view_box.isVisible(), timeout=5000)
    qtbot.mouseClick(pane.view_box.buttons["cables"], Qt.MouseButton.LeftButton)
    scene = pane.topology.scene
    assert scene is not None and scene.headline == "Full mesh"
    assert [b.name for b in scene.boxes] == ["Studio A", "Studio B", "Studio C"]
    assert sorted(line.label for line in scene.cables()) == [
        "port 1 ↔ port 1 · 80 Gb/s",
        "port 2 ↔ port 1 · 80 Gb/s",
        "port 2 ↔ port 2 · 80 Gb/s",
    ]
    assert pane.views.height() == pane.topology.height()  # the stack fits the map
    pane.set_demo_size(1)  # one Mac: no cables to show, back to the table
    qtbot.waitUntil(lambda: not pane.view_box.isVisible(), timeout=5000)
    assert pane.views.currentWidget() is pane.table
    # A demo Mac's RDMA is on: its badge opens no guide.
    assert pane.actions.show_guide("Studio A") is None and pane.actions.dialog is None


def test_the_fourth_demo_mac_has_rdma_off_and_its_badge_opens_the_guide(qtbot: QtBot) -> None:
    """Issue 25 item 13: presenters need the RDMA guide in the demo."""
    from gui.cluster.dialogs import GuideDialog
    from tests.gui.cluster_helpers import row_data

    pane = ClusterPane()
    qtbot.addWidget(pane)
    pane.show()
    pane.start_demo(4)
    qtbot.waitUntil(lambda: len(pane.nodes()) == 4, timeout=5000)
    assert [row_data(pane, n, RDMA) for n in ("Studio A", "Studio B", "Studio C")] == [
        "RDMA on"
    ] * 3
    assert row_data(pane, "Studio D", RDMA) == "RDMA off"
    index = pane.model.index(pane.model.row_of("Studio D"), RDMA)
    rect = pane.table.visualRect(index)
    qtbot.mouseClick(pane.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    dialog = pane.actions.dialog
    assert isinstance(dialog, GuideDialog) and dialog.guide
    assert "rdma_ctl enable" in dialog.page.toPlainText()  # macOS 26.2: from Recovery
    dialog.close()


def test_every_probe_state_has_words_and_only_ready_shows_facts() -> None:
    assert set(STATUS_WORDS) == set(ProbeState) - {ProbeState.READY}
    model = NodeTableModel([Node(f"n-{state}", probe_state=state) for state in ProbeState])
    for row, state in enumerate(ProbeState):
        node = Node("n", probe_state=state)
        said = status(node)
        assert model.index(row, NAME).data(StateRole) == state.value
        if state is ProbeState.READY:
            assert said is None
            continue
        assert said is not None and said.state is state and said.title
        assert said.busy == (state in (ProbeState.NEW, ProbeState.PROBING))
        assert status(replace(node, probe_message="Because.")).detail == "Because."
    # A record without a probe state (a demo Mac) is ready.
    assert status(DEMO_MACS[0]) is None
