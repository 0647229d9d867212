"""A history with a damaged region (issue 33, "Why" 6): read around, kept in place, the
missing runs counted and their file named; an export with runs missing exits 1."""

from __future__ import annotations

import io
import json
import os
import sqlite3
from pathlib import Path

import pytest

from core.cli.history import history_cli
from core.run.measure.history import History, RunRecord

RUNS = 450


def _run(n: int) -> RunRecord:
    return RunRecord(
        kind="chat",
        model=f"model-{n:04d}",
        nodes=["Studio A"],
        strategy="single",
        backend="single",
        figures={"generation_tps": 5.0, "note": "x" * 200},
        started=1_700_000_000.0 + n,
    )


def _damaged_history() -> tuple[Path, int]:
    """The data folder's history of 450 runs with the page holding run 200 overwritten;
    the number of runs that page held."""
    history = History()
    for n in range(1, RUNS + 1):
        history.add(_run(n))
    path = history.path
    data = bytearray(path.read_bytes())
    page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    at = data.index(b"model-0200") // page * page
    held = data[at : at + page].count(b"model-")
    data[at : at + page] = os.urandom(page)
    path.write_bytes(bytes(data))
    return path, held


def test_a_damaged_region_is_read_around_and_the_file_kept(tmp_path: Path) -> None:
    path, held = _damaged_history()
    history = History()
    runs = history.runs()
    assert len(runs) == RUNS - held and held > 0
    assert history.damage is not None and history.damage.missing == held
    said = str(history.damage)
    assert said.startswith(f"{held} runs of the run history {path} could not be read (")
    assert said.endswith("the file is kept as it is.")
    assert [p.name for p in path.parent.iterdir()] == ["history.sqlite3"]
    assert len(History().runs()) == RUNS - held  # the next read finds the same, not "No runs"


@pytest.mark.parametrize("form", ["--json", "--csv"])
def test_an_export_with_runs_missing_exits_1_and_names_them(
    tmp_path: Path, form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, held = _damaged_history()
    out = io.StringIO()
    assert history_cli([form], out) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"macmesh: {held} runs of the run history {path} could not be read (database disk "
        "image is malformed); the file is kept as it is. The export holds every other run."
    )
    if form == "--json":
        assert len(json.loads(out.getvalue())["runs"]) == RUNS - held
    assert [p.name for p in path.parent.iterdir()] == ["history.sqlite3"]


def test_a_whole_history_exports_with_exit_0(tmp_path: Path) -> None:
    History().add(_run(1))
    assert history_cli(["--json"], io.StringIO()) == 0


def test_an_export_to_a_file_is_made_anew_with_the_historys_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    History().add(_run(1))
    out = tmp_path / "runs.json"
    assert history_cli(["--json", "--output", str(out)], io.StringIO()) == 0
    assert out.stat().st_mode & 0o777 == 0o600 and len(json.loads(out.read_text())["runs"]) == 1
    target = tmp_path / "precious"
    target.write_text("keep me")
    planted = tmp_path / "planted.csv"
    planted.symlink_to(target)
    for there in (out, planted):  # a file or a planted link already there: refused, untouched
        assert history_cli(["--csv", "-o", str(there)], io.StringIO()) == 2
        assert capsys.readouterr().err == (
            f"macmesh: {there} is already there: remove it, or choose another name\n"
        )
    assert target.read_text() == "keep me"


def test_history_errors_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33, "Why" 10: history errors named no file."""
    path = Path(os.environ["MACMESH_DATA_DIR"]) / "history.sqlite3"
    path.mkdir(parents=True)  # a folder where the history should be
    assert history_cli([], io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err == f"macmesh: the run history {path}: not a regular file, so not a run history\n"
    path.rmdir()
    path.write_bytes(b"not a database" * 100)
    assert history_cli(["--json"], io.StringIO()) == 1
    assert capsys.readouterr().err.startswith(f"macmesh: The run history {path} could not be read")
