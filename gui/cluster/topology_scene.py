"""Where the Thunderbolt map's parts go in a given width: Macs as boxes on a polygon in
ring order (so a ring's cables are its outline and what a full mesh still needs crosses
it), lines clipped to the boxes' edges, parallel cables apart, a port tag at each end,
speed captions where they cover nothing. Geometry only: ``TopologyView`` paints it, and
tests read it instead of pixels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations

from PySide6.QtCore import QPointF, QRectF
from PySide6.QtGui import QFont, QFontMetrics

from gui import style
from gui.cluster.topology_diagram import (
    MISSING_COLOR,
    SHAPE_KINDS,
    SHAPE_WORDS,
    STATE_COLORS,
    STATE_WORDS,
    Diagram,
    DiagramCable,
    DiagramMissing,
)

HEADLINE_H, BOX_H, TAG_H, LINE_GAP = 24, 46, 16, 20
LEGEND_H, NOTE_H = 20, 18


@dataclass
class Box:
    name: str
    subtitle: str
    rect: QRectF
    is_self: bool = False


@dataclass
class Tag:
    text: str
    rect: QRectF


@dataclass
class Line:
    """One cable, or one missing cable (``dashed``)."""

    a: str
    b: str
    p1: QPointF
    p2: QPointF
    color: str  # a Theme attribute name
    dashed: bool
    label: str  # "port 2 ↔ port 1 · 80 Gb/s", or what to connect
    tooltip: str
    caption: str = ""  # painted along the line ("80 Gb/s")
    caption_rect: QRectF | None = None
    tags: list[Tag] = field(default_factory=list)
    state: str = ""
    measured: bool = False  # the caption is a measurement (link test, live traffic)


@dataclass(frozen=True)
class Measured:
    """What was measured on one pair's cable: its caption and a tooltip line."""

    caption: str
    tooltip: str


@dataclass
class Scene:
    width: float
    height: float
    headline: str  # "Full mesh", "Ring", "Incomplete"
    headline_kind: str
    summary: str  # "6 cables · RDMA on every cable"
    verdict: str
    boxes: list[Box]
    lines: list[Line]
    notes: list[str]  # how a ring runs (issue 18), then the cables a full mesh still needs
    legend: list[tuple[str, str, bool]]  # (words, colour, dashed)
    notes_top: float = 0.0
    # The notes as painted: (text, kind) lines fitting the width; kind "ring" (a solid
    # marker), "missing" (dashed), "more" (a note's next line, no marker).
    note_lines: list[tuple[str, str]] = field(default_factory=list)

    def box(self, name: str) -> Box:
        return next(b for b in self.boxes if b.name == name)

    def cables(self) -> list[Line]:
        return [line for line in self.lines if not line.dashed]

    def missing(self) -> list[Line]:
        return [line for line in self.lines if line.dashed]


def scene_fonts() -> dict[str, QFont]:
    return {
        "title": style.ui_font(12, QFont.Weight.DemiBold),
        "sub": style.ui_font(11),
        "tag": style.ui_font(10, QFont.Weight.DemiBold),
        "caption": style.ui_font(10, QFont.Weight.Medium),
        "measured": style.ui_font(10, QFont.Weight.Bold),
        "headline": style.ui_font(11, QFont.Weight.DemiBold),
        "note": style.ui_font(11),
    }


def _unit_positions(n: int) -> list[tuple[float, float]]:
    """A regular polygon, clockwise from the top, with a flat top edge when n is even."""
    start = -90.0 - (180.0 / n if n % 2 == 0 else 0.0)
    return [
        (
            math.cos(math.radians(start + 360.0 * i / n)),
            math.sin(math.radians(start + 360.0 * i / n)),
        )
        for i in range(n)
    ]


def _diagram_height(n: int) -> float:
    return {0: 0.0, 1: BOX_H + 8, 2: BOX_H + 36}.get(n, 220.0 if n <= 4 else 320.0)


def _border_point(rect: QRectF, toward: QPointF, start: QPointF) -> QPointF:
    """Where the segment from ``start`` (inside ``rect``) toward ``toward`` leaves it."""
    dx, dy = toward.x() - start.x(), toward.y() - start.y()
    ts = []
    if dx:
        ts += [(rect.right() - start.x()) / dx, (rect.left() - start.x()) / dx]
    if dy:
        ts += [(rect.bottom() - start.y()) / dy, (rect.top() - start.y()) / dy]
    t = min((t for t in ts if t > 0), default=0.0)
    return QPointF(start.x() + dx * t, start.y() + dy * t)


def _tag(text: str, at: QPointF, font: QFont) -> Tag:
    width = QFontMetrics(font).horizontalAdvance(text) + 10
    return Tag(text, QRectF(at.x() - width / 2, at.y() - TAG_H / 2, width, TAG_H))


def layout_scene(
    diagram: Diagram, width: float, measured: Mapping[frozenset[str], Measured] | None = None
) -> Scene:
    """Place ``diagram`` in ``width`` pixels; the height follows from the content.
    ``measured``: per pair of Macs, a caption for its cable ("1.9 GB/s · 93 % of
    Thunderbolt 5") and a line for its tooltip, from a link test or live traffic."""
    fonts = scene_fonts()
    n = len(diagram.nodes)
    width = max(width, 240.0)
    top = HEADLINE_H + 10
    area_h = _diagram_height(n)
    positions = _unit_positions(n) if n else []
    xs = [x for x, _ in positions] or [0.0]
    ys = [y for _, y in positions] or [0.0]

    def scale(value: float, low: float, high: float, lo_px: float, hi_px: float) -> float:
        if high - low < 1e-9:
            return (lo_px + hi_px) / 2
        return lo_px + (value - low) / (high - low) * (hi_px - lo_px)

    def place(box_w: float) -> list[Box]:
        boxes = []
        for node, (ux, uy) in zip(diagram.nodes, positions, strict=True):
            cx = scale(ux, min(xs), max(xs), box_w / 2 + 1, width - box_w / 2 - 1)
            cy = scale(uy, min(ys), max(ys), top + BOX_H / 2, top + area_h - BOX_H / 2)
            rect = QRectF(cx - box_w / 2, cy - BOX_H / 2, box_w, BOX_H)
            boxes.append(Box(node.name, node.subtitle, rect, node.is_self))
        return boxes

    # The widest boxes (up to 132 px) that keep 8 px apart: narrower as Macs are added.
    box_w = min(132.0, width / 2 - 12)
    boxes = place(box_w)
    while box_w > 64 and any(
        a.rect.adjusted(-4, -4, 4, 4).intersects(b.rect) for a, b in combinations(boxes, 2)
    ):
        box_w -= 4
        boxes = place(box_w)
    by_name = {box.name: box for box in boxes}

    lines: list[Line] = []
    pairs: dict[frozenset[str], list[DiagramCable | DiagramMissing]] = {}
    items: tuple[DiagramCable | DiagramMissing, ...] = (*diagram.cables, *diagram.missing)
    for item in items:
        if item.a in by_name and item.b in by_name:
            pairs.setdefault(frozenset((item.a, item.b)), []).append(item)
    for group in pairs.values():
        for i, item in enumerate(group):
            offset = (i - (len(group) - 1) / 2) * LINE_GAP
            line = _line(item, by_name[item.a], by_name[item.b], offset, fonts)
            seen = (measured or {}).get(frozenset((item.a, item.b)))
            if seen is not None and not line.dashed and i == 0:
                line.caption, line.measured = seen.caption, True
                line.tooltip += f"\n{seen.tooltip}"
            lines.append(line)
    _place_captions(lines, boxes, fonts, QRectF(0, top, width, area_h))

    notes = [*diagram.ring_paths, *(f"For a full mesh, {m.text}" for m in diagram.missing)]
    kinds = ["ring"] * len(diagram.ring_paths) + ["missing"] * len(diagram.missing)
    note_lines = _wrapped(notes, kinds, fonts["note"], width - 28)
    states = sorted({c.state for c in diagram.cables}, key=list(STATE_WORDS).index)
    legend = [(STATE_WORDS[s], STATE_COLORS[s], False) for s in states]
    if diagram.missing:
        legend.append(("Missing cable", MISSING_COLOR, True))
    notes_top = top + area_h + 12
    height = notes_top + len(note_lines) * NOTE_H + (LEGEND_H + 6 if legend else 0)
    return Scene(
        width=width,
        height=height,
        headline=SHAPE_WORDS.get(diagram.shape, diagram.shape.capitalize()),
        headline_kind=SHAPE_KINDS.get(diagram.shape, "muted"),
        summary=_summary(diagram),
        verdict=diagram.verdict,
        boxes=boxes,
        lines=lines,
        notes=notes,
        legend=legend,
        notes_top=notes_top,
        note_lines=note_lines,
    )


def _wrapped(
    notes: list[str], kinds: list[str], font: QFont, width: float
) -> list[tuple[str, str]]:
    """Each note in lines that fit ``width`` (at spaces): (text, kind), where a note's
    continuation lines have the kind "more" (painted without a marker)."""
    metrics = QFontMetrics(font)
    out: list[tuple[str, str]] = []
    for note, kind in zip(notes, kinds, strict=True):
        line = ""
        for word in note.split(" "):
            trial = f"{line} {word}" if line else word
            if line and metrics.horizontalAdvance(trial) > width:
                out.append((line, kind))
                kind, line = "more", word
            else:
                line = trial
        out.append((line, kind))
    return out


def _summary(diagram: Diagram) -> str:
    count = len(diagram.cables)
    parts = [f"{count} cable{'s' * (count != 1)}"] if len(diagram.nodes) > 1 else []
    if diagram.cables:
        on = sum(c.state == "on" for c in diagram.cables)
        parts.append(
            "RDMA on every cable"
            if on == count
            else f"RDMA on {on} of {count}"
            if on
            else "no RDMA"
        )
    if diagram.missing:
        more = len(diagram.missing)
        parts.append(f"{more} more for a full mesh")
    return " · ".join(parts)


def _line(
    item: DiagramCable | DiagramMissing, a: Box, b: Box, offset: float, fonts: dict[str, QFont]
) -> Line:
    ca, cb = a.rect.center(), b.rect.center()
    dx, dy = cb.x() - ca.x(), cb.y() - ca.y()
    length = math.hypot(dx, dy) or 1.0
    ux, uy = dx / length, dy / length
    shift = QPointF(-uy * offset, ux * offset)
    start, end = ca + shift, cb + shift
    p1 = _border_point(a.rect, end, start)
    p2 = _border_point(b.rect, start, end)
    reach = 12.0
    tag_a = p1 + QPointF(ux * reach, uy * reach)
    tag_b = p2 - QPointF(ux * reach, uy * reach)
    if isinstance(item, DiagramCable):
        tags = [_tag(item.a_port, tag_a, fonts["tag"]), _tag(item.b_port, tag_b, fonts["tag"])]
        tooltip = f"{item.a} port {item.a_port} ↔ {item.b} port {item.b_port} · {item.speed}"
        if item.reason:
            tooltip += f"\n{item.reason}"
        return Line(
            item.a, item.b, p1, p2, STATE_COLORS.get(item.state, "text3"), False,
            item.label, tooltip, item.speed, None, tags, item.state,
        )  # fmt: skip
    tags = [
        _tag(port, at, fonts["tag"])
        for port, at in ((item.a_port, tag_a), (item.b_port, tag_b))
        if port is not None
    ]
    return Line(
        item.a, item.b, p1, p2, MISSING_COLOR, True, item.text,
        f"Missing for a full mesh: {item.text}", "", None, tags, "missing",
    )  # fmt: skip


def _place_captions(
    lines: list[Line], boxes: list[Box], fonts: dict[str, QFont], area: QRectF
) -> None:
    """Each cable's caption at the first spot along it that covers no box, tag or caption."""
    taken = [box.rect.adjusted(-2, -2, 2, 2) for box in boxes]
    taken += [tag.rect for line in lines for tag in line.tags]
    for line in lines:
        if not line.caption:
            continue
        metrics = QFontMetrics(fonts["measured" if line.measured else "caption"])
        w, h = metrics.horizontalAdvance(line.caption) + 8, TAG_H
        spots = []
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.22, 0.78):
            x = line.p1.x() + (line.p2.x() - line.p1.x()) * t
            y = line.p1.y() + (line.p2.y() - line.p1.y()) * t
            rect = QRectF(x - w / 2, y - h / 2, w, h)
            rect.moveLeft(min(max(rect.left(), area.left()), area.right() - w))
            spots.append(rect)
        # The first free spot; if none is, the middle.
        best = next((r for r in spots if not any(r.intersects(o) for o in taken)), spots[0])
        line.caption_rect = best
        taken.append(best)
