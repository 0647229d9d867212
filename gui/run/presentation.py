"""Presentation mode: one full-screen view for a projector, readable from the back of a
room. The live tokens/s in large type, the tokens and link plots, the cable map with
each link's live traffic on its cable, and the last comparison when there is one.

It only reads what the window already has (the Run pane's controller and comparison,
the Cluster pane's map) on a timer while it is shown; Esc leaves it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QCloseEvent, QKeyEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from core import units
from core.run.states import RunState
from gui import style
from gui.cluster.link_captions import traffic_captions
from gui.cluster.topology_view import TopologyView
from gui.run.compare_view import CompareView
from gui.widgets import label, layout_widgets

if TYPE_CHECKING:
    from gui.cluster.topology_diagram import Diagram
    from gui.run.pane import RunPane

REDRAW_HZ = 5
NUMBER_PX, TICK_PX, TITLE_PX = 120, 18, 22


def _sized(widget: QLabel, px: int, weight: int = 400) -> QLabel:
    """A label in ``px`` type (its own style sheet wins over the theme's label rules)."""
    widget.setStyleSheet(f"font-size: {px}px; font-weight: {weight};")
    return widget


class PresentationView(QWidget):
    """Full screen over ``run`` (the Run pane) and the cluster's map (``diagram()``)."""

    def __init__(
        self, run: RunPane, diagram: Callable[[], Diagram | None], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("MacMesh · Presentation")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground)
        self.setObjectName("presentation")
        self.run = run
        self._diagram = diagram
        self._drawn = -1
        self.number = _sized(label("–"), NUMBER_PX, 700)
        self.number.setFont(style.number_font(NUMBER_PX))
        self.unit = _sized(label("tokens/s", "secondary"), TITLE_PX + 10)
        self.what = _sized(label("", "secondary", wrap=True), TITLE_PX)
        self.hint = _sized(label("Esc leaves presentation mode", "hint"), 15)
        from gui.run.plots import LivePlots

        self.plots = LivePlots()
        self._hide_memory()
        self.map = TopologyView()
        self.comparison = CompareView(headline_px=28, compact=True)
        self.comparison.close_button.hide()
        self.comparison.hide()
        top = QHBoxLayout()
        top.addWidget(self.number, 0, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.unit, 0, Qt.AlignmentFlag.AlignBottom)
        top.addSpacing(30)
        top.addWidget(self.what, 1, Qt.AlignmentFlag.AlignBottom)
        top.addWidget(self.hint, 0, Qt.AlignmentFlag.AlignTop)
        side = QVBoxLayout()
        side.addWidget(self.map)
        side.addWidget(self.comparison)
        side.addStretch(1)
        middle = QHBoxLayout()
        middle.setSpacing(30)
        middle.addWidget(self.plots, 3)
        middle.addLayout(side, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(40, 30, 40, 30)
        layout.setSpacing(20)
        layout.addLayout(top)
        layout.addLayout(middle, 1)
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.timer.timeout.connect(self.refresh)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.close)
        style.notifier().changed.connect(self._restyle)
        self._restyle(style.current())

    def _hide_memory(self) -> None:
        """Two plots only: tokens/s and the links (memory is the Model pane's story)."""
        layout = self.plots.layout()
        if layout is None:  # LivePlots always sets its column
            return
        for index in range(layout.count() - 2, layout.count()):
            item = layout.itemAt(index)
            if item is None:
                continue
            widget, inner = item.widget(), item.layout()
            widgets = [widget] if widget is not None else []
            if inner is not None:
                widgets += layout_widgets(inner)
            for each in widgets:
                each.hide()

    def _restyle(self, theme: style.Theme) -> None:
        self.setStyleSheet(f"#presentation {{ background: {theme.window}; }}")
        tick = style.ui_font(TICK_PX)
        for widget in (self.plots.tokens, self.plots.links):
            for name in ("left", "bottom"):
                widget.getPlotItem().getAxis(name).setStyle(tickFont=tick)

    # -- showing -----------------------------------------------------------------------

    def present(self) -> None:
        self.map.set_diagram(self._diagram())
        self.plots.clear()
        self._drawn = -1
        self.refresh(force=True)
        # The whole screen of the window it came from, with or without a window manager:
        # without one nobody honours the full-screen request, and the window stayed at
        # its own size (1000×530).
        parent = self.parentWidget()
        screen = (parent.screen() if parent is not None else None) or self.screen()
        self.setGeometry(screen.geometry())
        self.showFullScreen()
        self.timer.start()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.timer.stop()
        super().closeEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.close()
            return
        super().keyPressEvent(event)

    def refresh(self, force: bool = False) -> None:
        """The timer's tick: the number, the plots, the traffic on the cables."""
        c = self.run.controller
        result = self.run.comparison.result
        if result is not None and self.comparison.result is not result:
            self.comparison.show_result(result, self.run.comparison.beside)
        info, plan = self.run.shown_plan()
        self.what.setText(
            f"{info.name if info else ''} · {plan.strategy} on {len(plan.ranks)} "
            f"Mac{'s' * (len(plan.ranks) != 1)}"
            if plan is not None
            else "Start a job to see it live."
        )
        telemetry = c.telemetry
        if telemetry is None or (c.version == self._drawn and not force):
            return
        self._drawn = c.version
        headline = telemetry.current()
        generating = c.state == RunState.GENERATING and headline.tokens_per_s > 0
        tps = headline.tokens_per_s if generating else headline.last_avg_tps
        unit = "tokens/s" if generating or not tps else "tokens/s · last answer"
        if generating and headline.generating > 1:  # serving many: the cluster's, together
            tps = headline.aggregate_tps
            unit = f"tokens/s · {headline.generating} answers at once"
        self.number.setText(units.rate(tps) if tps else "–")
        # a figure that is not live says so: the last answer's average, not the present
        self.unit.setText(unit)
        self.plots.refresh(c)
        live = headline.link_bytes_per_s if c.state.active else {}
        self.map.set_measured(traffic_captions(live, c.rank_names()))
