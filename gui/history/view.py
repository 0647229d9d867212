"""The History view: past runs (newest first), the selected run's figures and plots, and
Export (CSV of the series, JSON of everything, one PNG of the record for a slide).

The runs live in ``core.run.measure.history.History`` (SQLite in the user data folder); this
view reads it off the GUI thread and shows what it read. Nothing here computes a figure.
"""

from __future__ import annotations

import html
import io
import os
import time
from pathlib import Path
from typing import BinaryIO

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QMessageBox,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core import units
from core.jsonfile import create_exclusive
from core.run.measure.history import History, RunKind, RunRecord, history_mode
from gui.bridge import Bridge
from gui.folders import choose_folder
from gui.history.run_plots import RunPlots
from gui.widgets import Card, label

COLUMNS = ("When", "Kind", "Model", "Nodes", "Strategy", "Headline")
KIND_WORDS = {
    RunKind.CHAT: "Chat",
    RunKind.COMPARE: "Compare",
    RunKind.LINKTEST: "Link test",
    RunKind.API: "API",
    RunKind.FINETUNE: "Fine-tune",
}


def when(started: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(started))


def figures_html(record: RunRecord) -> str:
    """The selected run's figures as a short list for people."""
    f = record.figures
    rows: list[tuple[str, str]] = [
        ("Model", record.model),
        ("Nodes", ", ".join(record.nodes)),
        ("Strategy", record.strategy + (f" · split {record.split}" if record.split else "")),
        ("Backend", record.backend),
    ]
    simulated = f.get("simulated")
    if isinstance(simulated, dict) and simulated.get("summary"):  # the demo's hardware
        rows[-1] = ("Backend", f"{record.backend} over loopback (the demo's ranks)")
        rows.append(("Simulated Macs", f"{simulated.get('shape', '')} · {simulated['summary']}"))
    if record.kind in (RunKind.CHAT, RunKind.API):  # an API answer's figures are a chat's
        rows += [
            ("Generation", f"{units.rate(f.get('avg_tps') or f.get('generation_tps'))} tokens/s"),
            ("Prompt", f"{units.rate(f.get('prompt_tps'))} tokens/s"),
            ("First token", units.seconds(f.get("ttft_s"))),
            ("Tokens", str(f.get("generation_tokens", "–"))),
        ]
        batch = f.get("batch")
        if isinstance(batch, dict) and batch.get("tokens_per_s"):  # served with others
            rows.append(
                (
                    "Cluster",
                    f"{units.rate(batch['tokens_per_s'])} tokens/s, {batch.get('answers')} "
                    f"answers at once ({batch.get('tokens')} tokens in "
                    f"{units.seconds(batch.get('span_s'))})",
                )
            )
    elif record.kind == RunKind.COMPARE:
        rows.append(("Headline", record.headline()))
        if f.get("measured"):  # the demo's: what its simulated Macs measured, said so
            rows.append(("Measured", str(f["measured"])))
        for key in ("single", "cluster"):
            run = f.get(key)
            if run:
                rows.append(
                    (
                        str(run.get("label", key)),
                        f"{units.rate(run.get('generation_tps'))} tokens/s on "
                        f"{', '.join(run.get('nodes', []))}",
                    )
                )
    elif record.kind == RunKind.LINKTEST:
        for link in f.get("links", []):
            share = link.get("share")
            of = f" ({share:.0%} of {link.get('nominal')})".replace("%", " %") if share else ""
            rows.append(
                (
                    " ↔ ".join(link.get("nodes", [])),
                    f"{units.bytes_per_s(link.get('bytes_per_s'))}{of}, "
                    f"latency {link.get('latency_us', 0):.0f} µs",
                )
            )
    body = "".join(
        f"<tr><td style='padding-right:14px'><b>{html.escape(k)}</b></td>"
        f"<td>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table>{body}</table>"


class HistoryView(Card):
    """``loaded`` once the list is read; ``shown`` once a run's details are drawn;
    ``exported`` with the files written."""

    loaded = Signal(int)
    shown = Signal(object)
    exported = Signal(list)

    def __init__(
        self, bridge: Bridge, path: Path | None = None, parent: QWidget | None = None
    ) -> None:
        super().__init__("History", parent)
        self._bridge = bridge
        self._path = path
        self.records: list[RunRecord] = []
        self.current: RunRecord | None = None
        self._wanted: int | None = None
        self._reading: History | None = None  # the history the list was last read from
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip(
            "Write the selected run's series (CSV), everything (JSON) and its plots (PNG)"
        )
        self.export_button.clicked.connect(self.choose_export)
        self.export_button.setEnabled(False)
        self.header.addWidget(self.refresh_button)
        self.header.addWidget(self.export_button)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._selected)
        self.status = label("Reading the history…", "secondary", wrap=True)
        self.figures = label("", None, wrap=True, selectable=True)
        self.figures.setTextFormat(Qt.TextFormat.RichText)
        self.plots = RunPlots()
        details = QWidget()
        column = QVBoxLayout(details)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.figures)
        column.addWidget(self.plots, 1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(details)
        split.setSizes([260, 420])
        self.body.addWidget(self.status)
        self.body.addWidget(split, 1)

    def history(self) -> History:
        return History(self._path)

    # -- reading -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the list of runs off the GUI thread."""
        self.status.setText("Reading the history…")
        history = self._reading = self.history()
        self._bridge.run_in_background(history.runs, self._show_list, self._error)

    def _show_list(self, records: list[RunRecord]) -> None:
        self.records = records
        self.table.setRowCount(len(records))
        for row, record in enumerate(records):
            cells = (
                when(record.started),
                KIND_WORDS.get(record.kind, record.kind),
                record.model,
                ", ".join(record.nodes),
                record.strategy,
                record.headline(),
            )
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        count = len(records)
        said = (
            f"{count} run{'s' * (count != 1)} kept in {self.history().path}"
            if count
            else "No runs yet: an answer, a compare or a link test is kept here."
        )
        # Damage read around (or a damaged file set aside) is said, not passed off as an
        # empty history.
        reading = self._reading
        damage = reading.damage if reading is not None else None
        notice = str(damage) if damage is not None else reading.notice if reading else None
        self.status.setText(f"{notice}\n{said}" if notice else said)
        self.loaded.emit(count)
        # The row selected stays on the run shown: a run kept meanwhile shifts the rows,
        # and a highlight left on its old row would name another run than the one drawn.
        shown = [row for row, r in enumerate(records) if r.id is not None and r.id == self._wanted]
        if shown:
            self.table.selectRow(shown[0])
        elif records and not self.table.selectedItems():
            self.table.selectRow(0)

    def _selected(self) -> None:
        rows = {index.row() for index in self.table.selectedIndexes()}
        if not rows:
            return
        run = self.records[min(rows)].id
        if run is None:
            return
        self._wanted = run
        self._bridge.run_in_background(lambda: self.history().get(run), self.show_run, self._error)

    def show_run(self, record: RunRecord | None) -> None:
        if record is None or record.id != self._wanted:  # an older selection's answer
            return
        self.current = record
        self.figures.setText(figures_html(record))
        self.plots.show_record(record)
        self.export_button.setEnabled(True)
        self.shown.emit(record)

    def _error(self, error: BaseException) -> None:
        self.status.setText(f"The history could not be read: {error}")

    # -- export --------------------------------------------------------------------------

    def choose_export(self) -> None:
        folder = choose_folder(self, "Export the run to…")
        if folder is not None:
            self.export(folder)

    def confirm_replace(self, existing: list[Path]) -> bool:
        """Whether the person replaces the files ``existing`` (asked, default no)."""
        names = "\n".join(path.name for path in existing)
        answer = QMessageBox.question(
            self,
            "Replace the exported files?",
            f"{len(existing)} of the files are already in {existing[0].parent}:\n{names}\n\n"
            "Replace them?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.No,
        )
        return answer == QMessageBox.StandardButton.Yes

    def export(self, folder: Path) -> list[Path]:
        """The selected run as CSV (series), JSON (everything) and one PNG (the record
        for a slide: ``RunPlots.png_bytes``) in ``folder``; the files written. Each is
        made anew, with the history's own mode (0600), never through a link: files
        already there (a link among them) are replaced only when the person says so, the
        link itself then, not what it points to. A folder that cannot be written is one
        line in the status."""
        record = self.current
        if record is None or record.id is None:
            return []
        stem = f"macmesh-run-{record.id}-{record.kind}"
        names = [f"{stem}.csv", f"{stem}.json", *self.plots.png_names(stem)]
        existing = [folder / name for name in names if os.path.lexists(folder / name)]
        if existing and not self.confirm_replace(existing):
            self.status.setText(f"Not exported: {existing[0].name} is already in {folder}")
            return []
        written: list[Path] = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for path in existing:
                path.unlink()  # a link itself, never its target
            history = self.history()
            mode = history_mode(history.path)
            with _text(create_exclusive(folder / f"{stem}.csv", mode), newline="") as out:
                history.export_csv(out, [record.id])
            written.append(folder / f"{stem}.csv")
            with _text(create_exclusive(folder / f"{stem}.json", mode)) as out:
                history.export_json(out, [record.id])
            written.append(folder / f"{stem}.json")
            for name, data in self.plots.png_bytes(stem).items():
                with create_exclusive(folder / name, mode) as out:
                    out.write(data)
                written.append(folder / name)
        except OSError as error:
            self.status.setText(f"Not exported: {error.strerror or error} ({folder})")
            return written
        self.status.setText(f"Exported {len(written)} files to {folder}")
        self.exported.emit(written)
        return written


class HistoryWindow(QWidget):
    """The History view in a window of its own (a child of ``parent``: it closes with
    the main window)."""

    def __init__(self, bridge: Bridge, parent: QWidget, path: Path | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("MacMesh · History")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(14, 14, 14, 14)
        self.view = HistoryView(bridge, path)
        layout.addWidget(self.view)
        self.resize(1000, 760)


def _text(binary: BinaryIO, newline: str | None = None) -> io.TextIOWrapper:
    return io.TextIOWrapper(binary, encoding="utf-8", newline=newline)
