"""A kept run's plots: tokens/s over time and each link's bytes/s (a chat), the two runs'
tokens/s (a compare), or bytes/s by message size per link (a link test).

A chat's lines are shaped as the live plots shape them (``gui.run.plot_data``): tokens/s
held at zero between answers, each link at zero across idle time, so neither the History
nor an exported PNG draws a ramp across a pause. The y axis fits the part of the run the
view shows (zoom in on one answer: its KB/s fill the plot).

``export_png`` writes them as shown, with pyqtgraph's own ImageExporter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter
from PySide6.QtWidgets import QVBoxLayout, QWidget

from core.run.measure.history import RunRecord
from gui import style
from gui.plot_style import GRID_ALPHA, theme_plot
from gui.run.plot_data import hold_zero, zero_idle
from gui.style import Theme
from gui.widgets import section


def _plot(y_label: str, units: str | None, x_label: str = "", x_units: str | None = "s") -> Any:
    widget = pg.PlotWidget()
    item = widget.getPlotItem()
    item.showGrid(x=True, y=True, alpha=GRID_ALPHA)
    item.hideButtons()
    item.setMenuEnabled(False)
    item.setLabel("left", y_label, units=units)
    item.setLabel("bottom", x_label, units=x_units)
    box = item.getViewBox()
    box.setMouseEnabled(x=True, y=False)  # zoom in time; the y axis follows (next line)
    box.setAutoVisible(y=True)  # y fits what the x range shows
    return widget


def _link_name(series: str, nodes: list[str]) -> str:
    """ "link 0↔1 bytes_per_s" → "Studio A ↔ Studio B" (the run's nodes, rank order)."""
    link = series.removeprefix("link ").removesuffix(" bytes_per_s")
    ranks = link.split("↔")
    if len(ranks) == 2 and all(r.isdigit() and int(r) < len(nodes) for r in ranks):
        return " ↔ ".join(nodes[int(r)] for r in ranks)
    return link


class RunPlots(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.top_title = section("Tokens per second")
        self.bottom_title = section("Link bandwidth")
        self.top = _plot("tokens/s", None, "time")
        self.bottom = _plot("", "B/s", "time")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.top_title)
        layout.addWidget(self.top, 1)
        layout.addWidget(self.bottom_title)
        layout.addWidget(self.bottom, 1)
        self.curves: dict[str, pg.GraphicsObject] = {}
        style.notifier().changed.connect(self.apply_theme)
        self.apply_theme(style.current())

    def clear(self) -> None:
        for widget in (self.top, self.bottom):
            widget.getPlotItem().clear()
            legend = widget.getPlotItem().legend
            if legend is not None:
                legend.clear()
        self.curves = {}

    def show_record(self, record: RunRecord) -> None:
        self.clear()
        theme = style.current()
        colors = theme.series
        top, bottom = self.top.getPlotItem(), self.bottom.getPlotItem()
        for item in (top, bottom):
            if item.legend is None:
                item.addLegend(offset=(10, 10))
            item.enableAutoRange()  # a new run: the whole of it, whatever was zoomed before
        bottom.setLogMode(x=False, y=False)
        if record.kind == "linktest":
            self.top_title.setText("ONE WAY LATENCY BY MESSAGE SIZE")
            self.bottom_title.setText("BANDWIDTH BY MESSAGE SIZE")
            top.setLabel("left", "latency", units="s")
            bottom.setLabel("bottom", "message", units="B")
            top.setLabel("bottom", "message", units="B")
            for i, link in enumerate(record.figures.get("links", [])):
                points = link.get("points", [])
                x = np.array([p["bytes"] for p in points], dtype=float)
                name = " ↔ ".join(link.get("nodes", []))
                pen = pg.mkPen(colors[i % len(colors)], width=2)
                self.curves[f"latency {name}"] = top.plot(
                    x, [p["seconds"] for p in points], pen=pen, symbol="o", name=name
                )
                self.curves[f"bandwidth {name}"] = bottom.plot(
                    x, [p["bytes_per_s"] for p in points], pen=pen, symbol="o", name=name
                )
            top.setLogMode(x=True, y=True)
            bottom.setLogMode(x=True, y=False)
            return
        top.setLogMode(x=False, y=False)
        if record.kind == "compare":
            self.top_title.setText("GENERATION TOKENS PER SECOND")
            self.bottom_title.setText("MEMORY PER NODE")
            top.setLabel("left", "tokens/s", units=None)
            top.setLabel("bottom", "")
            runs = [record.figures.get(k) for k in ("single", "cluster")]
            shown = [r for r in runs if r]
            bars = pg.BarGraphItem(
                x=np.arange(len(shown)),
                height=[r.get("generation_tps", 0) for r in shown],
                width=0.5,
                brush=theme.accent,
            )
            top.addItem(bars)
            self.curves["generation_tps"] = bars
            top.getAxis("bottom").setTicks(
                [[(float(i), str(r.get("label", ""))) for i, r in enumerate(shown)], []]
            )
            memory = [
                (f"{r.get('label')}: {node}", b)
                for r in shown
                for node, b in r.get("memory_bytes", {}).items()
            ]
            mem = pg.BarGraphItem(
                x=np.arange(len(memory)),
                height=[b for _, b in memory],
                width=0.5,
                brush=colors[1 % len(colors)],
            )
            bottom.addItem(mem)
            self.curves["memory"] = mem
            bottom.setLabel("left", "", units="B")
            bottom.setLabel("bottom", "")
            bottom.getAxis("bottom").setTicks(
                [[(float(i), name) for i, (name, _) in enumerate(memory)], []]
            )
            return
        self.top_title.setText("TOKENS PER SECOND")
        self.bottom_title.setText("LINK BANDWIDTH · BYTES MOVED BY MLX COLLECTIVES")
        top.setLabel("left", "tokens/s", units=None)
        top.setLabel("bottom", "time", units="s")
        bottom.setLabel("left", "", units="B/s")
        bottom.setLabel("bottom", "time", units="s")
        for axis in (top.getAxis("bottom"), bottom.getAxis("bottom")):
            axis.setTicks(None)
        links = 0
        for name, points in record.series.items():
            shape = hold_zero if name == "tokens_per_s" else zero_idle
            times, values = shape(
                np.array([t for t, _ in points], dtype=float),
                np.array([v for _, v in points], dtype=float),
            )
            if name == "tokens_per_s":
                pen = pg.mkPen(theme.accent, width=2.5)
                self.curves[name] = top.plot(times, values, pen=pen)
            else:
                link = _link_name(name, record.nodes)
                links += 1
                pen = pg.mkPen(colors[links % len(colors)], width=2)
                self.curves[name] = bottom.plot(times, values, pen=pen, name=link)

    def export_png(self, folder: Path, stem: str) -> list[Path]:
        """Both plots as PNG, as shown; the files written."""
        written = []
        for suffix, widget in (("top", self.top), ("bottom", self.bottom)):
            path = folder / f"{stem}-{suffix}.png"
            widget.getPlotItem().getViewBox().updateAutoRange()  # as fitted for a paint
            exporter = ImageExporter(widget.getPlotItem())
            exporter.parameters()["width"] = max(800, widget.width())
            exporter.export(str(path))
            written.append(path)
        return written

    def apply_theme(self, theme: Theme) -> None:
        for widget in (self.top, self.bottom):
            theme_plot(widget, theme)
