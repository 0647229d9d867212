"""A kept run's plots: tokens/s over time and each link's bytes/s (a chat), the two runs'
tokens/s (a compare), bytes/s by message size per link (a link test), or the loss and
tokens/s over time (a fine-tune).

A chat's lines are shaped as the live plots shape them (``gui.run.plot_data``): tokens/s
held at zero between answers, each link at zero across idle time, so neither the History
nor an exported PNG draws a ramp across a pause. The y axis fits the part of the run the
view shows (zoom in on one answer: its KB/s fill the plot). A fine-tune's loss and
tokens/s are drawn as they were measured (training has no idle time to hold at zero).
The keys sit in each plot's heading, as in the live plots: never over the lines.

``png_bytes`` draws a record as one PNG for a slide (1600×900: a title with the model,
the Macs, the strategy and the date, its headline figures, both plots with their axes,
units and keys). A chat or API answer's plots cover that answer's span, from its send to
its end, in seconds (milliseconds for a short one), with its own tokens/s (and, for an
API answer served with others, the cluster's, all answers together). The History view
makes the file from those bytes: exclusively, with the history's mode; ``export_png``
does the same for a folder of one's own.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
from PySide6.QtGui import QImage, QImageWriter
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget

from core import units
from core.jsonfile import create_exclusive
from core.run.measure.history import RunKind, RunRecord
from gui import style
from gui.plot_style import GRID_ALPHA, key_html, plot_header, theme_plot
from gui.run.plot_data import hold_zero, zero_idle
from gui.style import Theme
from gui.widgets import label


def _plot(
    y_label: str, units: str | None, x_label: str = "", x_units: str | None = "s"
) -> pg.PlotWidget:
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


SHORT_S = 2.0  # an answer shorter than this is plotted in milliseconds
TOKEN_SERIES = {"tokens_per_s": "this answer", "cluster tokens_per_s": "cluster (all answers)"}


def answer_span(record: RunRecord) -> float | None:
    """An answer's span in seconds (its figures' ``span_s``: from its send to its end),
    None for a record without one (a run kept before answers carried their span)."""
    span = record.figures.get("span_s")
    return float(span) if isinstance(span, int | float) and span > 0 else None


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
        self.top_key = label("", "hint")
        self.bottom_key = label("", "hint")
        self.top_heading = plot_header("Tokens per second", self.top_key)
        self.bottom_heading = plot_header("Link bandwidth", self.bottom_key)
        self.top_title, self.bottom_title = self.top_heading.title, self.bottom_heading.title
        self.top = _plot("tokens/s", None, "time")
        self.bottom = _plot("", "B/s", "time")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.top_heading)
        layout.addWidget(self.top, 1)
        layout.addWidget(self.bottom_heading)
        layout.addWidget(self.bottom, 1)
        self.curves: dict[str, pg.GraphicsObject] = {}
        self.record: RunRecord | None = None
        # Each key's entries: (the theme's series colour index, or -1 for its accent; name).
        self._keys: tuple[list[tuple[int, str]], list[tuple[int, str]]] = ([], [])
        style.notifier().changed.connect(self.apply_theme)
        self.apply_theme(style.current())

    def clear(self) -> None:
        for widget in (self.top, self.bottom):
            widget.getPlotItem().clear()
        self.curves = {}
        self._keys = ([], [])
        self._show_keys(style.current())

    def show_record(self, record: RunRecord) -> None:
        self.clear()
        self.record = record
        theme = style.current()
        colors = theme.series
        top, bottom = self.top.getPlotItem(), self.bottom.getPlotItem()
        for item in (top, bottom):
            item.enableAutoRange()  # a new run: the whole of it, whatever was zoomed before
            item.getAxis("bottom").setTicks(None)  # (a compare's names, until it sets them)
        bottom.setLogMode(x=False, y=False)
        if record.kind == RunKind.LINKTEST:
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
                    x, [p["seconds"] for p in points], pen=pen, symbol="o"
                )
                self.curves[f"bandwidth {name}"] = bottom.plot(
                    x, [p["bytes_per_s"] for p in points], pen=pen, symbol="o"
                )
                for key in self._keys:
                    key.append((i % len(colors), name))
            top.setLogMode(x=True, y=True)
            bottom.setLogMode(x=True, y=False)
            self._show_keys(theme)
            return
        top.setLogMode(x=False, y=False)
        if record.kind == RunKind.COMPARE:
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
        if record.kind == RunKind.FINETUNE:
            self._show_training(record, theme)
            return
        self.top_title.setText("TOKENS PER SECOND")
        self.bottom_title.setText("LINK BANDWIDTH · BYTES MOVED BY MLX COLLECTIVES")
        # The answer's own span (from its send to its end) in seconds, or in ms when it
        # is short: never pyqtgraph's "ks" of a job's whole series.
        span = answer_span(record)
        scale, unit = (1000.0, "ms") if span is not None and span < SHORT_S else (1.0, "s")
        top.setLabel("left", "tokens/s", units=None)
        bottom.setLabel("left", "", units="B/s")
        for item in (top, bottom):
            item.setLabel("bottom", f"time since the question ({unit})", units=None)
            item.getAxis("bottom").enableAutoSIPrefix(False)
        links = 0
        for name, points in record.series.items():
            shape = hold_zero if name in TOKEN_SERIES else zero_idle
            times, values = shape(*_arrays(points))
            times = times * scale
            if name in TOKEN_SERIES:
                own = name == "tokens_per_s"
                color = -1 if own else 3 % len(colors)
                pen = pg.mkPen(
                    theme.accent if own else colors[color],
                    width=2.5 if own else 2,
                    style=Qt.PenStyle.SolidLine if own else Qt.PenStyle.DotLine,
                )
                self.curves[name] = top.plot(times, values, pen=pen)
                self._keys[0].append((color, TOKEN_SERIES[name]))
            else:
                links += 1
                pen = pg.mkPen(colors[links % len(colors)], width=2)
                self.curves[name] = bottom.plot(times, values, pen=pen)
                self._keys[1].append((links % len(colors), _link_name(name, record.nodes)))
        if span is not None:
            for item in (top, bottom):
                item.setXRange(0.0, span * scale, padding=0.02)
        self._show_keys(theme)

    def _show_training(self, record: RunRecord, theme: Theme) -> None:
        """A fine-tune: tokens/s trained and the loss (validation as points), over time,
        as measured: no zero held between reports, which come every few steps."""
        top, bottom = self.top.getPlotItem(), self.bottom.getPlotItem()
        self.top_title.setText("TRAINED TOKENS PER SECOND")
        self.bottom_title.setText("LOSS")
        top.setLabel("left", "tokens/s", units=None)
        bottom.setLabel("left", "loss", units=None)
        for item in (top, bottom):
            item.setLabel("bottom", "time", units="s")
        colors = theme.series
        rate = record.series.get("tokens_per_s", [])
        if rate:
            pen = pg.mkPen(colors[1 % len(colors)], width=2)
            self.curves["tokens_per_s"] = top.plot(*_arrays(rate), pen=pen)
        train, valid = record.series.get("train_loss", []), record.series.get("val_loss", [])
        if train:
            pen = pg.mkPen(theme.accent, width=2.5)
            self.curves["train_loss"] = bottom.plot(*_arrays(train), pen=pen)
            self._keys[1].append((-1, "training"))
        if valid:
            color = colors[2 % len(colors)]
            self.curves["val_loss"] = bottom.plot(
                *_arrays(valid), pen=None, symbol="o", symbolSize=7, symbolBrush=color
            )
            self._keys[1].append((2 % len(colors), "validation"))
        self._show_keys(theme)

    def _show_keys(self, theme: Theme) -> None:
        for key, entries in zip((self.top_key, self.bottom_key), self._keys, strict=True):
            key.setText(
                key_html(
                    [(theme.accent if i < 0 else theme.series[i], name) for i, name in entries],
                    theme,
                )
            )

    def export_png(self, folder: Path, stem: str) -> list[Path]:
        """The record as one PNG in ``folder``, made anew (0600, never through a link:
        FileExistsError where one is there); the file written (none without a record)."""
        written = []
        for name, data in self.png_bytes(stem).items():
            with create_exclusive(folder / name) as out:
                out.write(data)
            written.append(folder / name)
        return written

    @staticmethod
    def png_names(stem: str) -> list[str]:
        return [f"{stem}.png"]

    def png_bytes(self, stem: str) -> dict[str, bytes]:
        """The record as one PNG a person can paste into a slide (``EXPORT_SIZE``): a
        title (model, Macs, strategy, date), its headline figures, both plots with their
        axes, units and keys; file name → bytes (the caller makes the file; nothing
        without a record)."""
        if self.record is None:
            return {}
        card = ExportCard(self.record)
        try:
            image = card.picture()
        finally:
            card.deleteLater()
        buffer = QBuffer()
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        # QImageWriter with a QByteArray format: QImage.save's stubs and its run time
        # disagree on the format's type (bytes vs str).
        if not QImageWriter(buffer, QByteArray(b"PNG")).write(image):
            raise OSError("could not draw the record as PNG")
        return {self.png_names(stem)[0]: bytes(buffer.data().data())}

    def apply_theme(self, theme: Theme) -> None:
        for widget in (self.top, self.bottom):
            theme_plot(widget, theme)
        if self.record is not None:  # the lines and keys in the theme's colours
            self.show_record(self.record)


EXPORT_SIZE = (1600, 900)


def export_title(record: RunRecord) -> str:
    """ "SmolLM2-135M-Instruct-mlx-q4 on Studio A, Studio B · pipeline · 2026-12-06 21:40"."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.started))
    return f"{record.model} on {', '.join(record.nodes)} · {record.strategy} · {when}"


def export_figures(record: RunRecord) -> str:
    """The record's headline figures in a line."""
    f = record.figures
    parts = [record.headline()]
    if record.kind in (RunKind.CHAT, RunKind.API):
        if f.get("ttft_s") is not None:
            parts.append(f"first token {units.seconds(f['ttft_s'])}")
        if f.get("generation_tokens") is not None:
            parts.append(f"{f['generation_tokens']} tokens")
        span = answer_span(record)
        if span is not None:
            parts.append(f"answered in {units.seconds(span)}")
        batch = f.get("batch")
        if isinstance(batch, dict) and batch.get("tokens_per_s"):
            parts.append(
                f"cluster {units.rate(batch['tokens_per_s'])} tokens/s "
                f"({batch.get('answers')} answers at once)"
            )
    return " · ".join(p for p in parts if p)


class ExportCard(QWidget):
    """A record drawn for a slide, off screen, at ``EXPORT_SIZE``."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(None)
        self.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
        self.setObjectName("export-card")
        theme = style.current()
        self.setStyleSheet(f"#export-card {{ background: {theme.window}; }}")
        self.title = label(export_title(record), "model-name", wrap=True)
        self.title.setStyleSheet("font-size: 26px; font-weight: 700;")
        self.figures = label(export_figures(record), "secondary", wrap=True)
        self.figures.setStyleSheet("font-size: 20px;")
        self.plots = RunPlots()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(36, 28, 36, 28)
        layout.setSpacing(12)
        layout.addWidget(self.title)
        layout.addWidget(self.figures)
        layout.addWidget(self.plots, 1)
        self.resize(*EXPORT_SIZE)
        self.plots.show_record(record)

    def picture(self) -> QImage:
        self.show()  # laid out and polished, never on screen (WA_DontShowOnScreen)
        QApplication.processEvents()
        for widget in (self.plots.top, self.plots.bottom):
            widget.getPlotItem().getViewBox().updateMatrix()
        image = self.grab().toImage()
        self.hide()
        return image


def _arrays(points: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """A kept series' (t, value) pairs as two arrays."""
    return (
        np.array([t for t, _ in points], dtype=float),
        np.array([v for _, v in points], dtype=float),
    )
