"""Per node: what the plan puts on it against what it can give the model.

The planner's numbers (``RankPlan.need_bytes`` against ``usable_bytes``), one bar per
node of the cluster; a node the plan leaves out shows its usable memory and "not used".
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QFontMetrics, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from core import units
from core.plan.planner import Plan
from gui import style

ROW_H, BAR_H, NAME_W, GAP = 30, 8, 78, 10
MIN_FILL_PX = 3


@dataclass(frozen=True)
class Bar:
    node: str
    need: int | None  # None: the plan does not use this node
    usable: int
    detail: str = ""

    @property
    def fraction(self) -> float:
        return 0.0 if not self.need or self.usable <= 0 else self.need / self.usable

    @property
    def text(self) -> str:
        if self.need is None:
            return f"not used · {units.size(self.usable)} free"
        return f"{units.size(self.need)} of {units.size(self.usable)}"


def bars_for(plan: Plan | None) -> list[Bar]:
    if plan is None:
        return []
    ranks = {rank.node: rank for rank in plan.ranks}
    bars = []
    for budget in plan.budgets:
        rank = ranks.get(budget.node)
        if rank is None:
            bars.append(Bar(budget.node, None, budget.usable_bytes))
            continue
        detail = (
            f"rank {rank.rank}: weights {units.size(rank.weights_bytes)}, KV cache "
            f"{units.size(rank.kv_cache_bytes)}, prompt cache "
            f"{units.size(rank.prompt_cache_bytes)}, activations "
            f"{units.size(rank.activation_bytes)}; "
            f"{units.size(rank.usable_bytes)} usable after a {units.size(rank.margin_bytes)} margin"
        )
        bars.append(Bar(rank.node, rank.need_bytes, rank.usable_bytes, detail))
    return bars


class MemoryBars(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bars: list[Bar] = []
        self.empty_text = "Choose a model and Macs to see the memory each needs."
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        style.notifier().changed.connect(self.update)

    def show_plan(self, plan: Plan | None, empty_text: str | None = None) -> None:
        self.bars = bars_for(plan)
        if empty_text:
            self.empty_text = empty_text
        details = [f"{b.node}: {b.detail}" for b in self.bars if b.detail]
        self.setToolTip("\n".join([*details, units.BYTES_NOTE]) if details else "")
        self.updateGeometry()
        self.update()

    def show_bars(self, bars: list[Bar], empty_text: str | None = None) -> None:
        """Bars made elsewhere (the fine-tune's peak memory per node)."""
        self.bars = list(bars)
        if empty_text:
            self.empty_text = empty_text
        details = [f"{b.node}: {b.detail}" for b in self.bars if b.detail]
        self.setToolTip("\n".join(details))
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(320, max(1, len(self.bars)) * ROW_H)

    def minimumSizeHint(self) -> QSize:
        return self.sizeHint()

    def paintEvent(self, event: QPaintEvent) -> None:
        theme = style.current()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = style.ui_font(12)
        metrics = QFontMetrics(font)
        painter.setFont(font)
        if not self.bars:
            painter.setPen(theme.qcolor("text3"))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignVCenter, self.empty_text)
            return
        text_w = max(metrics.horizontalAdvance(b.text) for b in self.bars)
        bar_w = max(40, self.width() - NAME_W - text_w - 2 * GAP)
        for i, bar in enumerate(self.bars):
            top = i * ROW_H
            middle = top + ROW_H / 2
            painter.setPen(theme.qcolor("text"))
            name = metrics.elidedText(bar.node, Qt.TextElideMode.ElideRight, NAME_W - 6)
            painter.drawText(QRectF(0, top, NAME_W, ROW_H), Qt.AlignmentFlag.AlignVCenter, name)
            track = QRectF(NAME_W, middle - BAR_H / 2, bar_w, BAR_H)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(theme.qcolor("track"))
            painter.drawRoundedRect(track, BAR_H / 2, BAR_H / 2)
            if bar.need is not None:
                over = bar.fraction > 1
                width = max(MIN_FILL_PX, min(1.0, bar.fraction) * bar_w)
                painter.setBrush(theme.qcolor("danger" if over else "accent"))
                painter.drawRoundedRect(
                    QRectF(track.left(), track.top(), width, BAR_H), BAR_H / 2, BAR_H / 2
                )
            painter.setPen(theme.qcolor("danger" if bar.fraction > 1 else "text2"))
            painter.drawText(
                QRectF(NAME_W + bar_w + GAP, top, text_w + GAP, ROW_H),
                Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                bar.text,
            )
