"""The History view: the window's chats are kept, runs listed newest first, a run's
figures and plots shown, Export writes CSV, JSON and PNG."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage
from pytestqt.qtbot import QtBot

from core.run.measure.history import History, RunKind, RunRecord, telemetry_series
from core.run.measure.telemetry import Telemetry
from core.run.states import RunState
from gui.bridge import Bridge
from gui.history.view import KIND_WORDS, HistoryView
from gui.main_window import MainWindow
from gui.model.drop_zone import LOADED
from tests.gui.fakes import fake_factory
from tests.gui.helpers import drop_paths


def _chat(started: float) -> RunRecord:
    return RunRecord(
        kind="chat",
        model="SmolLM2-135M",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        split=[18, 12],
        figures={"generation_tps": 41.5, "avg_tps": 40.0, "prompt_tps": 300.0, "ttft_s": 0.2},
        series={
            "tokens_per_s": [(0.1 * i, 30.0 + i) for i in range(20)],
            "link 0↔1 bytes_per_s": [(0.5 * i, 1000.0 * i) for i in range(5)],
        },
        started=started,
    )


def _compare(started: float) -> RunRecord:
    run = {"nodes": ["Studio A"], "generation_tps": 20.0, "memory_bytes": {"Studio A": 1 << 28}}
    return RunRecord(
        kind="compare",
        model="SmolLM2-135M",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        figures={
            "headline": "2.1× faster on 2 Macs",
            "single": {**run, "label": "one Mac"},
            "cluster": {
                **run,
                "label": "cluster",
                "generation_tps": 42.0,
                "nodes": ["Studio A", "Studio B"],
            },
        },
        started=started,
    )


def _linktest(started: float) -> RunRecord:
    points = [
        {"bytes": 4096.0 * 4**k, "seconds": 1e-5 * 4**k, "bytes_per_s": 400 * 2**20}
        for k in range(3)
    ]
    link = {
        "nodes": ["Studio A", "Studio B"],
        "bytes_per_s": 400 * 2**20,
        "latency_us": 10.0,
        "share": 0.93,
        "nominal": "loopback TCP",
        "points": points,
    }
    return RunRecord(
        kind="linktest",
        model="SmolLM2-135M",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        figures={"nodes": ["Studio A", "Studio B"], "links": [link]},
        started=started,
    )


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    path = tmp_path / "history.sqlite3"
    history = History(path)
    history.add(_chat(1000.0))
    history.add(_linktest(3000.0))
    history.add(_compare(2000.0))
    return path


def _view(qtbot: QtBot, path: Path) -> HistoryView:
    bridge = Bridge()
    view = HistoryView(bridge, path)
    qtbot.addWidget(view, before_close_func=lambda _w: bridge.close())
    view.resize(900, 800)
    view.show()
    return view


def _cell(view: HistoryView, row: int, column: int) -> str:
    item = view.table.item(row, column)
    return item.text() if item else ""


def test_runs_newest_first_with_their_headline(qtbot: QtBot, kept: Path) -> None:
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.shown, timeout=10_000) as shown:
        view.refresh()
    assert view.table.rowCount() == 3
    assert [_cell(view, r, 1) for r in range(3)] == ["Link test", "Compare", "Chat"]
    assert _cell(view, 0, 5) == "400 MB/s (93 % of loopback TCP), 1 link(s)"
    assert _cell(view, 1, 5) == "2.1× faster on 2 Macs"
    assert _cell(view, 2, 5).endswith("tokens/s") and _cell(view, 2, 5).startswith("40")
    assert shown.args[0].kind == "linktest"  # the newest is selected and drawn
    assert "latency 10 µs" in view.figures.text()
    assert set(view.plots.curves) == {
        "latency Studio A ↔ Studio B",
        "bandwidth Studio A ↔ Studio B",
    }


def test_a_chat_shows_its_series_and_exports_csv_json_png(
    qtbot: QtBot, kept: Path, tmp_path: Path
) -> None:
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.loaded, timeout=10_000):
        view.refresh()
    with qtbot.waitSignal(view.shown, timeout=10_000) as shown:
        view.table.selectRow(2)
    record = shown.args[0]
    assert record.kind == "chat"
    assert set(view.plots.curves) == {"tokens_per_s", "link 0↔1 bytes_per_s"}
    key = view.plots.bottom_key.text()  # the key, in the plot's heading
    assert "Studio A ↔ Studio B" in key and key.count("▬") == 1
    x, y = view.plots.curves["tokens_per_s"].getData()
    assert len(x) == 20 and y[-1] == pytest.approx(49.0)
    files = view.export(tmp_path / "out")
    names = sorted(p.name for p in files)
    stem = f"macmesh-run-{record.id}-chat"
    assert names == sorted([f"{stem}.csv", f"{stem}.json", f"{stem}.png"])
    rows = list(csv.DictReader((tmp_path / "out" / f"{stem}.csv").open()))
    assert len(rows) == 25 and {r["series"] for r in rows} == {
        "tokens_per_s",
        "link 0↔1 bytes_per_s",
    }
    document = json.loads((tmp_path / "out" / f"{stem}.json").read_text())
    assert document["runs"][0]["split"] == [18, 12]
    assert len(document["runs"][0]["series"]["tokens_per_s"]) == 20
    image = QImage(str(tmp_path / "out" / f"{stem}.png"))  # one image, for a slide
    assert not image.isNull() and (image.width(), image.height()) >= (1600, 900)
    assert image.height() >= 900
    assert f"Exported 3 files to {tmp_path / 'out'}" == view.status.text()


def test_a_compare_shows_both_runs(qtbot: QtBot, kept: Path) -> None:
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.loaded, timeout=10_000):
        view.refresh()
    with qtbot.waitSignal(view.shown, timeout=10_000):
        view.table.selectRow(1)
    bars = view.plots.curves["generation_tps"]
    assert list(bars.opts["height"]) == [20.0, 42.0]
    assert "one Mac" in view.figures.text() and "42.0 tokens/s" in view.figures.text()


def test_a_run_kept_meanwhile_leaves_the_selection_on_the_run_shown(
    qtbot: QtBot, kept: Path
) -> None:
    """A new run at the top shifts the rows: the highlight follows the run drawn, never
    left on a row that now names another run (seen in the History screenshot)."""
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.loaded, timeout=10_000):
        view.refresh()
    with qtbot.waitSignal(view.shown, timeout=10_000) as shown:
        view.table.selectRow(2)
    chat = shown.args[0]
    assert chat.kind == "chat"
    History(kept).add(_chat(4000.0))  # kept while the view shows the older chat
    with qtbot.waitSignal(view.loaded, timeout=10_000):
        view.refresh()
    assert [_cell(view, r, 1) for r in range(4)] == ["Chat", "Link test", "Compare", "Chat"]
    qtbot.waitUntil(lambda: {i.row() for i in view.table.selectedIndexes()} == {3})
    assert view.current is not None and view.current.id == chat.id


def test_export_to_a_folder_that_cannot_be_made_is_one_line(
    qtbot: QtBot, kept: Path, tmp_path: Path
) -> None:
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.shown, timeout=10_000):
        view.refresh()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert view.export(blocker / "out") == []
    assert view.status.text().startswith("Not exported:")
    assert "\n" not in view.status.text()


def test_the_windows_answer_is_kept_as_a_chat_run(qtbot: QtBot, demo_model: Path) -> None:
    window = MainWindow(demo=True, job_factory=fake_factory())
    qtbot.addWidget(window)
    window.show()
    drop_paths(window.model.drop_zone, demo_model)
    qtbot.waitUntil(lambda: window.model.drop_zone.state == LOADED, timeout=20_000)
    window.model.select_strategy("pipeline")
    history_window = window.show_history()
    view = history_window.view
    qtbot.waitUntil(lambda: "No runs yet" in view.status.text(), timeout=10_000)
    window.run.start()
    qtbot.waitUntil(lambda: window.run.controller.state == RunState.READY, timeout=10_000)
    with qtbot.waitSignal(view.loaded, timeout=10_000) as loaded:
        window.run.ask("What is the capital of France?")
    assert loaded.args == [1]
    record = History().runs()[0]
    assert (record.kind, record.nodes, record.strategy) == (
        "chat",
        ["Studio A", "Studio B"],
        "pipeline",
    )
    assert record.split == [18, 12]
    assert record.figures["generation_tokens"] == 7  # six words and the end-of-sequence token
    assert record.figures["text"] == "The capital of France is Paris."
    assert History().get(record.id).series["tokens_per_s"]  # the plotted series, kept
    assert _cell(view, 0, 1) == "Chat"
    window.run.stop()
    qtbot.waitUntil(lambda: not window.run.busy, timeout=10_000)


def test_a_kept_runs_lines_hold_zero_across_idle_time_also_in_the_png(
    qtbot: QtBot, tmp_path: Path
) -> None:
    """Two answers 60 s apart (issue 25, item 2): neither line ramps across the pause, in
    the view or in the exported PNG (the same plot), and the y axis fits the part shown."""
    from gui.history.run_plots import RunPlots

    record = RunRecord(
        kind="chat",
        model="SmolLM2-135M",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        figures={},
        series={
            "tokens_per_s": [(1.0, 9.0), (2.0, 10.0), (3.0, 0.0), (63.0, 11.0), (64.0, 0.0)],
            "link 0↔1 bytes_per_s": [
                *((1.0 + 0.5 * i, 2e9) for i in range(4)),  # a link test at GB/s
                (5.0, 0.0),
                *((63.0 + 0.5 * i, 8e3) for i in range(3)),  # a chat answer at KB/s
            ],
        },
    )
    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(800, 600)
    plots.show()
    plots.show_record(record)
    tx, ty = plots.curves["tokens_per_s"].getData()
    lx, ly = plots.curves["link 0↔1 bytes_per_s"].getData()
    assert np.interp(40.0, tx, ty) == 0.0 and np.interp(62.9, tx, ty) == 0.0
    assert np.interp(40.0, lx, ly) == 0.0 and np.interp(62.4, lx, ly) == 0.0
    box = plots.bottom.getPlotItem().getViewBox()
    plots.grab()  # laid out and painted, as on screen
    box.updateAutoRange()  # (offscreen, a paint may come before the layout has settled)
    assert box.viewRange()[1][1] >= 2e9  # the whole run: the link test's GB/s
    box.setXRange(60.0, 66.0, padding=0)  # zoomed in on the chat answer
    plots.grab()
    box.updateAutoRange()
    assert 8e3 <= box.viewRange()[1][1] < 1e5  # its KB/s fill the plot, not a flat line
    written = plots.export_png(tmp_path, "run")
    assert len(written) == 1 and QImage(str(written[0])).width() >= 1600


def _fed_telemetry() -> Telemetry:
    """A real job's events (times from a 2-rank demo job, seconds from its Start): the
    join's bytes while loading, a heartbeat that forgets the quiet sender 1.3 s before the
    first answer's first report, an answer, 10 s idle, a second answer."""
    telemetry = Telemetry(clock=None)

    def traffic(rank: int, t: float, sent: dict[str, int]) -> None:
        telemetry.feed(
            {
                "event": "traffic",
                "rank": rank,
                "t": t,
                "interval_s": 0.5,
                "sent": sent,
                "received": {},
            }
        )

    def tokens(request: str, start: float, n: int) -> None:
        for i in range(n):
            telemetry.feed(
                {
                    "event": "token",
                    "rank": 0,
                    "t": start + 0.07 * i,
                    "request": request,
                    "index": i,
                    "token": 1,
                    "text": "x",
                }
            )
        telemetry.feed(
            {
                "event": "done",
                "rank": 0,
                "t": start + 0.07 * n,
                "request": request,
                "prompt_tokens": 3,
                "prompt_tps": 30.0,
                "generation_tokens": n,
                "generation_tps": 14.0,
                "ttft_s": None,
                "finish_reason": "length",
                "peak_memory_bytes": 1,
                "text": "x" * n,
            }
        )

    traffic(0, 9.5, {"1": 4})
    traffic(0, 10.0, {})
    telemetry.feed({"event": "heartbeat", "rank": 1, "t": 11.6})  # expires rank 0: 0 at 11.6
    traffic(1, 12.87, {"0": 86_819})
    traffic(0, 12.89, {"1": 100})
    tokens("r1", 12.93, 8)
    traffic(1, 13.39, {"0": 16_000})
    traffic(0, 13.41, {})
    traffic(1, 13.89, {})
    for beat in range(15, 24):  # idle: heartbeats only
        telemetry.feed({"event": "heartbeat", "rank": beat % 2, "t": float(beat)})
    traffic(1, 24.53, {"0": 18_400})
    tokens("r2", 24.9, 4)
    traffic(0, 25.03, {"1": 80})
    traffic(1, 25.06, {"0": 9_400})
    traffic(1, 25.56, {})
    traffic(0, 25.58, {})
    return telemetry


def test_a_kept_runs_link_never_ramps_across_quiet_time(qtbot: QtBot, tmp_path: Path) -> None:
    """What History hands pyqtgraph for a run read back from the history store: each
    link at 0 through every quiet stretch, up to where the report that ends it began
    (half a second before it), and the same in the exported PNG's plot. The screenshot
    drew a ramp from the last zero (a heartbeat's, 1.3 s before) to the first answer's
    first report: quiet shorter than the idle gap the plot looked for."""
    from gui.history.run_plots import RunPlots

    telemetry = _fed_telemetry()
    record = _chat(1000.0)
    record.series = telemetry_series(telemetry, origin=0.0)
    path = tmp_path / "history.sqlite3"
    run = History(path).add(record)
    loaded = History(path).get(run)
    assert loaded is not None
    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.resize(900, 600)
    plots.show_record(loaded)
    x, y = plots.curves["link 0↔1 bytes_per_s"].getData()
    quiet = np.concatenate((np.linspace(10.0, 12.37, 50), np.linspace(14.4, 24.03, 50)))
    assert np.interp(quiet, x, y).max() == 0.0  # no ramp into either answer
    assert np.interp(12.87, x, y) > 1e5 and np.interp(24.53, x, y) > 3e4
    tx, ty = plots.curves["tokens_per_s"].getData()
    assert np.interp(np.linspace(13.6, 24.9, 50), tx, ty).max() == 0.0
    written = plots.export_png(tmp_path, "run")  # the PNG is this record, drawn
    assert len(written) == 1 and QImage(str(written[0])).height() >= 900


def test_a_kept_fine_tune_shows_its_loss_as_measured(qtbot: QtBot, tmp_path: Path) -> None:
    """A fine-tune's loss is a loss (not a link's bytes/s) and never falls to 0 between
    reports seconds apart: nothing is held at zero in training."""
    from gui.history.run_plots import RunPlots

    record = _chat(1000.0)
    record.kind = RunKind.FINETUNE
    record.series = {
        "train_loss": [(2.0 + 4 * i, 4.2 - 0.4 * i) for i in range(8)],
        "tokens_per_s": [(2.0 + 4 * i, 300.0) for i in range(8)],
        "val_loss": [(14.0, 3.1), (30.0, 1.5)],
    }
    path = tmp_path / "history.sqlite3"
    loaded = History(path).get(History(path).add(record))
    assert loaded is not None
    plots = RunPlots()
    qtbot.addWidget(plots)
    plots.show_record(loaded)
    assert plots.bottom_title.text() == "LOSS"
    x, y = plots.curves["train_loss"].getData()
    assert list(x) == [2.0 + 4 * i for i in range(8)]  # as measured, nothing inserted
    assert np.interp(np.linspace(2.0, 30.0, 60), x, y).min() > 1.0
    assert "validation" in plots.bottom_key.text() and "training" in plots.bottom_key.text()
    assert set(plots.curves) == {"train_loss", "val_loss", "tokens_per_s"}


def test_a_damaged_history_is_said_and_kept_in_place(qtbot: QtBot, tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.write_bytes(b"not a database" * 100)
    view = _view(qtbot, path)
    with qtbot.waitSignal(view.loaded, timeout=10_000):
        view.refresh()
    status = view.status.text()
    assert status.startswith(f"The run history {path} could not be read (file is not a database)")
    assert "none of its runs could be read; the file is kept as it is." in status
    assert status.endswith("No runs yet: an answer, a compare or a link test is kept here.")
    assert [p.name for p in tmp_path.iterdir()] == ["history.sqlite3"]


def test_export_never_follows_a_planted_link_and_asks_before_replacing(
    qtbot: QtBot, kept: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, "Why" 7: a planted macmesh-run-<id>-<kind>.csv symlink got its target
    overwritten, and exports were 0644 while the history is 0600."""
    view = _view(qtbot, kept)
    with qtbot.waitSignal(view.shown, timeout=10_000) as shown:
        view.refresh()
    record = shown.args[0]
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    planted = out / f"macmesh-run-{record.id}-{record.kind}.csv"
    planted.symlink_to(target)
    asked: list[list[str]] = []
    monkeypatch.setattr(
        view, "confirm_replace", lambda paths: asked.append([p.name for p in paths])
    )
    assert view.export(out) == []  # declined (the dialog's None: not yes)
    assert asked == [[planted.name]] and planted.is_symlink()
    assert view.status.text() == f"Not exported: {planted.name} is already in {out}"
    monkeypatch.setattr(view, "confirm_replace", lambda paths: True)
    written = view.export(out)
    assert len(written) == 3 and target.read_text() == "keep me\n"
    assert not planted.is_symlink() and planted.read_text().startswith("run,started")
    assert {p.stat().st_mode & 0o777 for p in written} == {0o600}


def test_every_kind_of_run_has_its_words() -> None:
    """The list says each kind in words (a kind without them would show its wire value)."""
    assert set(KIND_WORDS) == set(RunKind)
