"""The Thunderbolt map, from the fixture clusters' real parsed facts: what is drawn where,
in which colour and dash style, and that it paints."""

from __future__ import annotations

import math
from itertools import combinations
from types import SimpleNamespace

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from core.cluster.topology import build_topology
from gui import style
from gui.cluster.topology_diagram import MISSING_COLOR, demo_diagram, diagram_from_topology
from gui.cluster.topology_scene import Scene, layout_scene
from gui.cluster.topology_view import TopologyView
from tests.fixtures.macos.hosts import load_facts

WIDTH = 400


def scene_of(fixture_set: str, width: float = WIDTH) -> Scene:
    facts = load_facts(fixture_set)
    diagram = diagram_from_topology(build_topology(facts), {f.name: f for f in facts})
    return layout_scene(diagram, width)


def assert_tidy(scene: Scene) -> None:
    """Boxes inside the view and apart; every line starts and ends on its boxes' edges."""
    for box in scene.boxes:
        assert box.rect.left() >= 0 and box.rect.right() <= scene.width
        assert box.rect.bottom() <= scene.height
    for a, b in combinations(scene.boxes, 2):
        assert not a.rect.intersects(b.rect), (a.name, b.name)
    for line in scene.lines:
        for end, name in ((line.p1, line.a), (line.p2, line.b)):
            rect = scene.box(name).rect
            on_edge = (
                math.isclose(end.x(), rect.left(), abs_tol=0.5)
                or math.isclose(end.x(), rect.right(), abs_tol=0.5)
                or math.isclose(end.y(), rect.top(), abs_tol=0.5)
                or math.isclose(end.y(), rect.bottom(), abs_tol=0.5)
            )
            assert on_edge and rect.adjusted(-1, -1, 1, 1).contains(end), (line.label, name)
    captions = [line.caption_rect for line in scene.lines if line.caption_rect is not None]
    for a, b in combinations(captions, 2):
        assert not a.intersects(b)


def test_mesh4_is_a_full_mesh_of_six_rdma_cables_labelled_with_ports_and_speed() -> None:
    scene = scene_of("mesh4")
    assert scene.headline == "Full mesh" and scene.headline_kind == "success"
    assert scene.summary == "6 cables · RDMA on every cable"
    assert [b.name for b in scene.boxes] == ["studio-a", "studio-b", "studio-c", "studio-d"]
    assert scene.box("studio-a").subtitle == "M3 Ultra · 512 GB"
    assert len(scene.cables()) == 6 and scene.missing() == []
    labels = {(line.a, line.b): line.label for line in scene.cables()}
    assert labels[("studio-a", "studio-b")] == "port 2 ↔ port 1 · 80 Gb/s"
    assert labels[("studio-c", "studio-d")] == "port 3 ↔ port 3 · 80 Gb/s"
    ab = next(line for line in scene.cables() if (line.a, line.b) == ("studio-a", "studio-b"))
    assert [tag.text for tag in ab.tags] == ["2", "1"]  # each port beside its own Mac
    assert ab.tags[0].rect.center().x() < ab.tags[1].rect.center().x()
    assert all(line.color == "success" and not line.dashed for line in scene.lines)
    assert all(line.caption == "80 Gb/s" for line in scene.lines)
    assert scene.legend == [("RDMA on", "success", False)]
    assert scene.notes == []
    assert_tidy(scene)


def test_ring4_draws_the_ring_as_the_outline_and_the_missing_cables_dashed() -> None:
    scene = scene_of("ring4")
    assert scene.headline == "Ring"
    assert [b.name for b in scene.boxes] == ["ring-a", "ring-b", "ring-c", "ring-d"]
    missing = scene.missing()
    assert {(m.a, m.b) for m in missing} == {("ring-a", "ring-c"), ("ring-b", "ring-d")}
    assert all(m.dashed and m.color == MISSING_COLOR and m.caption == "" for m in missing)
    ac = next(m for m in missing if m.a == "ring-a")
    assert ac.tooltip == "Missing for a full mesh: connect ring-a port 4 to ring-c port 3"
    assert [tag.text for tag in ac.tags] == ["4", "3"]
    assert scene.notes == [
        "For a full mesh, connect ring-a port 4 to ring-c port 3",
        "For a full mesh, connect ring-b port 3 to ring-d port 3",
    ]
    assert ("Missing cable", MISSING_COLOR, True) in scene.legend
    # The missing cables are the diagonals: they cross the middle of the view.
    centre_y = (scene.box("ring-a").rect.center().y() + scene.box("ring-c").rect.center().y()) / 2
    for m in missing:
        assert min(m.p1.y(), m.p2.y()) < centre_y < max(m.p1.y(), m.p2.y())
    # ring-a and ring-b share two cables: two lines apart, each with its own tags.
    double = [c for c in scene.cables() if {c.a, c.b} == {"ring-a", "ring-b"}]
    assert len(double) == 2
    assert abs(double[0].p1.y() - double[1].p1.y()) >= 16
    assert not double[0].tags[0].rect.intersects(double[1].tags[0].rect)
    assert_tidy(scene)


def test_pair27_cable_is_off_because_one_mac_has_rdma_off() -> None:
    scene = scene_of("pair27")
    (cable,) = scene.cables()
    assert cable.state == "off" and cable.color == "warning"
    assert "studio-f" in cable.tooltip and "turned off" in cable.tooltip
    assert scene.summary == "1 cable · no RDMA"
    assert scene.legend == [("RDMA off", "warning", False)]
    assert scene.box("studio-e").rect.center().y() == scene.box("studio-f").rect.center().y()
    assert_tidy(scene)


def test_mini_tb4_cable_is_thunderbolt_4_and_cannot_carry_rdma() -> None:
    scene = scene_of("mini-tb4")
    (cable,) = scene.cables()
    assert cable.state == "unusable" and cable.color == "text3"
    assert cable.caption == "40 Gb/s" and cable.label == "port 1 ↔ port 1 · 40 Gb/s"
    assert scene.legend == [("No RDMA", "text3", False)]
    assert_tidy(scene)


@pytest.mark.parametrize("count", range(2, 9))
def test_two_to_eight_macs_fit_without_overlapping(count: int) -> None:
    nodes = [
        SimpleNamespace(name=f"Studio {chr(65 + i)}", chip="Apple M3 Ultra", memory_bytes=96 << 30)
        for i in range(count)
    ]
    diagram = demo_diagram(nodes)
    scene = layout_scene(diagram, WIDTH)
    assert len(scene.boxes) == count and len(scene.cables()) == count * (count - 1) // 2
    assert scene.headline == "Full mesh"
    assert_tidy_boxes(scene)


def test_the_demo_map_shows_the_cables_of_its_mac_with_rdma_off() -> None:
    """Issue 25 item 13: the demo's fourth Mac has RDMA off (its table row and the guide
    say so); its three cables say so too, never "RDMA on every cable"."""
    from core.run.demo import demo_nodes

    scene = layout_scene(demo_diagram(demo_nodes(4)), WIDTH)
    states = {frozenset((line.a, line.b)): line.state for line in scene.cables()}
    off = {pair for pair, state in states.items() if state == "off"}
    assert off == {frozenset(("Studio D", other)) for other in ("Studio A", "Studio B", "Studio C")}
    assert all(state == "on" for pair, state in states.items() if pair not in off)
    assert scene.summary == "6 cables · RDMA on 3 of 6"
    line = next(line for line in scene.cables() if frozenset((line.a, line.b)) in off)
    assert "turned off on Studio D" in line.tooltip
    three = layout_scene(demo_diagram(demo_nodes(3)), WIDTH)
    assert three.summary == "3 cables · RDMA on every cable"


def assert_tidy_boxes(scene: Scene) -> None:
    for box in scene.boxes:
        assert box.rect.left() >= 0 and box.rect.right() <= scene.width
    for a, b in combinations(scene.boxes, 2):
        assert not a.rect.intersects(b.rect), (a.name, b.name)


def _pixels(view: TopologyView, color: str) -> int:
    image = view.grab().toImage()
    wanted = QColor(color)
    count = 0
    for y in range(0, image.height(), 2):
        for x in range(0, image.width(), 2):
            pixel = image.pixelColor(x, y)
            if (
                abs(pixel.red() - wanted.red()) < 40
                and abs(pixel.green() - wanted.green()) < 40
                and abs(pixel.blue() - wanted.blue()) < 40
            ):
                count += 1
    return count


@pytest.mark.parametrize("theme", [style.LIGHT, style.DARK], ids=["light", "dark"])
def test_the_view_paints_the_cables_in_their_colours(qtbot: QtBot, theme: style.Theme) -> None:
    app = QApplication.instance()
    style.apply(app, theme)
    try:
        view = TopologyView()
        qtbot.addWidget(view)
        view.resize(WIDTH, 300)
        facts = load_facts("ring4")
        view.set_diagram(diagram_from_topology(build_topology(facts), {f.name: f for f in facts}))
        view.show()
        qtbot.waitExposed(view)
        assert view.scene is not None and view.height() == math.ceil(view.scene.height)
        assert _pixels(view, theme.success) > 100  # the ring's green cables
        assert _pixels(view, theme.card_alt) > 1000  # the Mac boxes
        missing = view.scene.missing()[0]
        middle = (missing.p1 + missing.p2) / 2
        assert view.item_at(middle) is not None
        assert view.item_at(view.scene.box("ring-a").rect.center()) == "ring-a\nM3 Ultra · 256 GB"
    finally:
        style.apply(app, style.LIGHT)


def test_an_empty_view_is_zero_high(qtbot: QtBot) -> None:
    view = TopologyView()
    qtbot.addWidget(view)
    view.set_diagram(None)
    assert view.height() == 0 and view.scene is None


def test_without_rdma_the_map_says_how_the_ring_runs_over_the_cables() -> None:
    """Issue 18: the map says plainly which path each ring link takes, and why."""
    scene = scene_of("tb-bridge")
    assert scene.headline == "Incomplete"
    assert scene.notes[:3] == [
        "mini-c → mini-a: ring over Wi-Fi (en1): no Thunderbolt path between mini-c and "
        "mini-a (no cable); no wired Ethernet shared by mini-c and mini-a.",
        "mini-a → mini-b: ring over Thunderbolt (bridge0).",
        "mini-b → mini-c: ring over Thunderbolt (bridge0).",
    ]
    assert scene.notes[3].startswith("For a full mesh, connect mini-a port")
    # Long notes wrap to the width instead of being cut: the first takes several lines.
    kinds = [kind for _, kind in scene.note_lines]
    assert kinds[:2] == ["ring", "more"] and kinds.count("missing") == 1
    assert scene.height >= scene.notes_top + len(scene.note_lines) * 18
    assert scene_of("tb-off").notes == [
        "Ring over Ethernet (en0) on every link: the Thunderbolt cable carries only IPv6 "
        "link-local addresses (MLX's ring backend takes IPv4 only)."
    ]
    assert_tidy(scene)


def test_the_ring_notes_paint(qtbot: QtBot) -> None:
    facts = load_facts("tb-mixed")
    view = TopologyView()
    qtbot.addWidget(view)
    view.resize(WIDTH, 300)
    view.set_diagram(diagram_from_topology(build_topology(facts), {f.name: f for f in facts}))
    assert view.scene is not None and len(view.scene.notes) == 2
    assert view.height() >= view.scene.notes_top + 2 * 18
    lines = view.scene.note_lines
    assert [kind for _, kind in lines][:1] == ["ring"]
    assert " ".join(text for text, _ in lines) == " ".join(view.scene.notes)  # wrapped, whole
    view.grab()  # paints without error
