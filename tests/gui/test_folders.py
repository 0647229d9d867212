"""File dialogs start in the person's Documents, then in the last folder they used: never
in the folder MacMesh was started from (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QStandardPaths
from PySide6.QtWidgets import QFileDialog
from pytestqt.qtbot import QtBot

from gui.model.drop_zone import DropZone
from gui.tune.data_box import DataBox


def test_the_first_dialog_starts_in_documents_then_where_the_last_one_ended(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    documents = tmp_path / "Documents"
    documents.mkdir()
    monkeypatch.setattr(
        QStandardPaths, "writableLocation", staticmethod(lambda _where: str(documents))
    )
    models = tmp_path / "models" / "tiny"
    models.mkdir(parents=True)
    asked: list[str] = []

    def pick(_parent: object, _caption: str, start: str = "") -> str:
        asked.append(start)
        return str(models)

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", staticmethod(pick))
    monkeypatch.chdir(tmp_path)  # the working folder is never where a dialog starts
    zone = DropZone()
    qtbot.addWidget(zone)
    with qtbot.waitSignal(zone.folder_chosen) as chosen:
        zone.choose_folder()
    assert chosen.args == [models]
    data = DataBox()
    qtbot.addWidget(data)
    data.choose_folder()  # another dialog: it starts where the last one ended
    assert asked == [str(documents), str(models)]


def test_a_home_without_documents_starts_at_home(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        QStandardPaths, "writableLocation", staticmethod(lambda _w: str(tmp_path / "none"))
    )
    asked: list[str] = []
    monkeypatch.setattr(
        QFileDialog,
        "getExistingDirectory",
        staticmethod(lambda _p, _c, start="": asked.append(start) or ""),
    )
    zone = DropZone()
    qtbot.addWidget(zone)
    zone.choose_folder()
    assert asked == [str(Path.home())]
