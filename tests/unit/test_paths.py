"""MacMesh's folders: a MACMESH_*_DIR that cannot be used is one line naming the variable
and what to do (every command prints it and exits 2: tests/e2e/test_cli_bad_input.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from core import paths
from core.paths import FolderError

FOLDERS: dict[str, Callable[[], Path]] = {
    "MACMESH_CACHE_DIR": paths.cache_dir,
    "MACMESH_CONFIG_DIR": paths.config_dir,
    "MACMESH_LOG_DIR": paths.log_dir,
    "MACMESH_DATA_DIR": paths.data_dir,
}


@pytest.mark.parametrize("variable", FOLDERS)
def test_a_variable_names_the_folder_and_it_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, str(tmp_path / "a" / "b"))
    assert FOLDERS[variable]() == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()


@pytest.mark.parametrize("variable", FOLDERS)
@pytest.mark.parametrize(
    ("where", "says"),
    [("file", "is a file, not a folder"), ("file/below", "cannot be created (Not a directory)")],
)
def test_a_variable_pointing_at_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, where: str, says: str
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(variable, str(tmp_path / where))
    with pytest.raises(FolderError) as raised:
        FOLDERS[variable]()
    message = str(raised.value)
    assert message.startswith(f"{variable}={tmp_path / where} {says}")
    assert message.endswith(f"Point {variable} at a folder MacMesh can write to, or unset it.")


@pytest.mark.parametrize("variable", FOLDERS)
def test_an_unwritable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str):
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o500)
    if os.access(folder, os.W_OK):  # root writes anywhere: use a folder nobody can write
        if not Path("/proc/1").is_dir():
            pytest.skip("running as root without Linux's /proc")
        folder = Path("/proc/1")
    monkeypatch.setenv(variable, str(folder))
    with pytest.raises(FolderError, match=f"{variable}={folder} is not writable. Point"):
        FOLDERS[variable]()


def test_the_default_folder_names_the_variable_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.delenv("MACMESH_LOG_DIR")
    monkeypatch.setattr(paths.platformdirs, "user_log_path", lambda *a, **k: tmp_path / "file")
    with pytest.raises(FolderError, match="set MACMESH_LOG_DIR to a folder MacMesh can write"):
        paths.log_dir()
