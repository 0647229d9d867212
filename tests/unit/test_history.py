"""Run history: kept in SQLite in the data folder, listed newest first, exported."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli.history import history_cli
from core.run.measure.history import CSV_COLUMNS, History, RunRecord, keep


def chat(started: float, tps: float = 5.0, **extra) -> RunRecord:
    return RunRecord(
        kind="chat",
        model="SmolLM2-135M-Instruct",
        nodes=["Studio A", "Studio B"],
        strategy="pipeline",
        backend="ring",
        split=[18, 12],
        versions={"macmesh": "0.1.0"},
        figures={"generation_tps": tps, "prompt_tps": 50.0, "link_bytes_per_s": {"0↔1": 9.5}},
        series={"tokens_per_s": [(0.0, 0.0), (0.5, tps)], "link 0↔1 bytes_per_s": [(0.5, 9.5)]},
        started=started,
        **extra,
    )


def test_runs_are_kept_listed_newest_first_and_read_back_whole(tmp_path: Path) -> None:
    history = History(tmp_path / "h.sqlite3")
    first = history.add(chat(1000.0, tps=4.0))
    second = history.add(chat(2000.0, tps=6.0))
    listed = history.runs()
    assert [r.id for r in listed] == [second, first]
    assert listed[0].series == {}  # the list stays light: series on request
    again = History(tmp_path / "h.sqlite3").get(first)
    assert again is not None
    assert again.figures["generation_tps"] == 4.0 and again.split == [18, 12]
    assert again.series["tokens_per_s"] == [(0.0, 0.0), (0.5, 4.0)]
    assert history.runs(limit=1)[0].id == second
    history.delete(first)
    assert [r.id for r in history.runs()] == [second]


def test_a_run_of_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="a run is one of chat, compare, linktest, api"):
        History(tmp_path / "h.sqlite3").add(_kind("x"))


def _kind(kind: str) -> RunRecord:
    record = chat(1.0)
    record.kind = kind
    return record


def test_csv_has_a_row_per_sample_and_json_everything(tmp_path: Path) -> None:
    history = History(tmp_path / "h.sqlite3")
    run = history.add(chat(1000.0))
    linktest = _kind("linktest")
    linktest.series = {}
    linktest.figures = {"links": [], "all_sum": [], "share": 0.93}
    history.add(linktest)
    text = io.StringIO()
    history.export_csv(text)
    rows = list(csv.reader(io.StringIO(text.getvalue())))
    assert tuple(rows[0]) == CSV_COLUMNS
    samples = [r for r in rows[1:] if r[0] == str(run)]
    assert [(r[6], r[7], r[8]) for r in samples] == [
        ("tokens_per_s", "0.000", "0.0"),
        ("tokens_per_s", "0.500", "5.0"),
        ("link 0↔1 bytes_per_s", "0.500", "9.5"),
    ]
    assert any(r[2] == "linktest" and r[6] == "share" and r[8] == "0.93" for r in rows)
    document = io.StringIO()
    history.export_json(document, [run])
    [kept] = json.loads(document.getvalue())["runs"]
    assert kept["nodes"] == ["Studio A", "Studio B"] and kept["series"]["tokens_per_s"][1] == [
        0.5,
        5.0,
    ]


def test_a_file_that_is_no_history_is_read_in_place_and_set_aside_by_a_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "h.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    history = History(path)
    assert history.runs() == []
    assert [p.name for p in tmp_path.iterdir()] == ["h.sqlite3"]  # a read moves nothing
    assert str(history.damage) == (
        f"The run history {path} could not be read (file is not a database): none of its "
        "runs could be read; the file is kept as it is."
    )
    history.add(chat(1.0))  # a write cannot use it: set aside, a new one begun
    assert [p.name.startswith("h.sqlite3.damaged-") for p in tmp_path.iterdir()].count(True) == 1
    assert len(history.runs()) == 1 and history.damage is None


def test_a_history_being_begun_reads_as_empty_and_is_not_set_aside(tmp_path: Path) -> None:
    """The first write makes the file (0600) before its tables: a reader on another thread
    in between (the History window while the API keeps its first answer) reads no runs,
    and the file is left to its writer (seen in a full run: "no such table: runs")."""
    path = tmp_path / "h.sqlite3"
    path.touch(0o600)
    history = History(path)
    assert history.runs() == [] and history.get(1) is None
    assert history.notice is None and [p.name for p in tmp_path.iterdir()] == ["h.sqlite3"]
    history.add(chat(1.0))
    assert len(History(path).runs()) == 1


def test_a_history_that_cannot_be_written_never_costs_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MACMESH_DATA_DIR", str(blocker))
    why = keep(chat(1.0))
    assert why is not None and why.startswith("the run was not kept in the history: ")
    assert "MACMESH_DATA_DIR" in why


def test_macmesh_history_lists_and_exports(tmp_path: Path) -> None:
    out = io.StringIO()
    assert history_cli([], out) == 0
    assert out.getvalue().startswith("No runs yet")
    History().add(chat(1_700_000_000.0))
    out = io.StringIO()
    assert history_cli([], out) == 0
    line = out.getvalue().strip()
    assert "chat" in line and "pipeline on Studio A, Studio B" in line and "5.00 tokens/s" in line
    out = io.StringIO()
    assert history_cli(["--csv"], out) == 0
    assert out.getvalue().splitlines()[0] == ",".join(CSV_COLUMNS)
    out = io.StringIO()
    assert history_cli(["--json", "--limit", "1"], out) == 0
    assert len(json.loads(out.getvalue())["runs"]) == 1


def test_a_huge_limit_lists_every_run(tmp_path: Path) -> None:
    History().add(chat(1.0))
    out = io.StringIO()
    assert history_cli(["--limit", "99999999999999999999"], out) == 0
    assert len(out.getvalue().splitlines()) == 1 and "chat" in out.getvalue()
    assert len(History().runs(limit=1 << 80)) == 1


def _truncated() -> None:
    """The history of many runs, cut to a third of its length (a disk full, a bad copy)."""
    history = History()
    for n in range(60):
        history.add(chat(float(n)))
    data = history.path.read_bytes()
    history.path.write_bytes(data[: len(data) // 3])


def test_a_truncated_history_is_read_around_kept_in_place_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _truncated()
    out = io.StringIO()
    assert history_cli([], out) == 0  # a list says what it could not read, and lists the rest
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"macmesh: The run history {History().path} could not be read (")
    assert "none of its runs could be read; the file is kept as it is" in err
    assert [p.name for p in History().path.parent.iterdir()] == ["history.sqlite3"]
    assert history_cli(["--json"], io.StringIO()) == 1  # an export with runs missing fails


def test_the_history_file_is_for_its_owner_only(tmp_path: Path) -> None:
    """It holds answers' text: made 0600, and an older, readable one is tightened."""
    history = History()
    assert not history.path.exists()  # reading makes nothing
    assert history.runs() == [] and not history.path.exists()
    history.add(chat(1.0))
    assert history.path.stat().st_mode & 0o777 == 0o600
    history.path.chmod(0o644)
    history.add(chat(2.0))
    assert history.path.stat().st_mode & 0o777 == 0o600


def _in_read_only(folder: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` run where ``folder`` cannot be written: a read-only bind mount of it in a
    mount namespace of its own when root (root writes through any mode), else mode 0555."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=120)
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("root without unshare and mount: no read-only folder can be made here")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    run = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(folder), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "mount:" in run.stderr or "unshare:" in run.stderr:
        pytest.skip(f"no read-only mount here: {run.stderr.strip()}")
    return run


def test_a_read_only_data_folder_is_read_and_only_writing_is_refused(tmp_path: Path) -> None:
    folder = Path(os.environ["MACMESH_DATA_DIR"])
    History().add(chat(1_700_000_000.0))
    listed = _in_read_only(folder, [sys.executable, "-m", "gui.cli", "history"])
    assert listed.returncode == 0, listed.stderr
    assert "pipeline on Studio A, Studio B" in listed.stdout and not listed.stderr
    write = (
        "from core.run.measure.history import RunRecord, keep; "
        "print(keep(RunRecord('chat', 'm', ['a'], 'single', 'single', {})))"
    )
    kept = _in_read_only(folder, [sys.executable, "-c", write])
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.startswith("the run was not kept in the history: ")
    assert "is not writable" in kept.stdout


def test_a_damaged_history_in_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    folder = Path(os.environ["MACMESH_DATA_DIR"])
    _truncated()
    run = _in_read_only(folder, [sys.executable, "-m", "gui.cli", "history"])
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("macmesh: ") and len(run.stderr.splitlines()) == 1
    assert f"The run history {History().path} could not be read" in run.stderr
    assert [p.name for p in folder.iterdir()] == ["history.sqlite3"]


def test_a_run_nested_deeper_than_json_goes_is_one_run_read_around(tmp_path: Path) -> None:
    """A planted row 100,000 levels deep makes json raise RecursionError: that run is
    counted as not read, the others are listed, and the file stays where it is."""
    history = History(tmp_path / "h.sqlite3")
    kept = history.add(chat(1000.0))
    planted = history.add(chat(2000.0))
    with sqlite3.connect(history.path) as db:
        db.execute(
            "UPDATE runs SET figures = ? WHERE id = ?", ("[" * 100_000 + "]" * 100_000, planted)
        )
    assert [r.id for r in history.runs()] == [kept]
    assert history.damage is not None and history.damage.missing == 1
    assert [p.name for p in tmp_path.iterdir()] == ["h.sqlite3"]
