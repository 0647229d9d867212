"""Every file MacMesh reads is opened only if it is a regular file, with a size cap
(issue 33, item 6): the API's settings (``api.json``), the key store and a key file, the
library's memo, the hash cache and a model's weight index, the hand-added hosts and a
library folder's ``config.json``. A FIFO there is refused at once (it used to hang the
reader), a huge file before it is read (it could exhaust memory); each says one line
naming the file, and the reader goes on with its defaults where it has them."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.cluster.hosts import HOSTS_CAP, load_hosts
from core.library.entries import CONFIG_CAP, Source, State, entry_for_folder
from core.library.memo import MEMO_CAP, Memo
from core.model.manifest import (
    INDEX_CAP,
    FileEntry,
    HashCache,
    Manifest,
    ManifestError,
    node_manifest,
)
from core.serve.keys import KEY_FILE_CAP, STORE_CAP, KeyFileError, KeyStore, key_file
from core.serve.service import SETTINGS_CAP, SETTINGS_NAME, ApiSettings, load_settings
from core.worker.shardfiles import INDEX_NAME

WITHIN_S = 30.0  # a reader that blocks on a FIFO never returns: anything below is a pass


def _bad(path: Path, kind: str, cap: int) -> Path:
    """``path`` made a FIFO, or a sparse regular file one byte over ``cap``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as file:
            file.truncate(cap + 1)
    return path


def _returns(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or its exception raised here; fails when it blocks."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(("ok", call()))
        except BaseException as error:  # handed to the test's thread
            result.append(("raised", error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WITHIN_S)
    assert not thread.is_alive(), "the reader blocked on the file"
    how, value = result[0]
    if how == "raised":
        raise value
    return value


def _one_line_naming(caplog: pytest.LogCaptureFixture, path: Path, kind: str) -> None:
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "\n" not in said[0], said
    assert str(path) in said[0]
    assert ("FIFO" in said[0]) if kind == "fifo" else ("more than the" in said[0])


KINDS = ["fifo", "huge"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_apis_settings_fall_back_to_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    monkeypatch.setenv("MACMESH_CONFIG_DIR", str(tmp_path))
    path = _bad(tmp_path / SETTINGS_NAME, kind, SETTINGS_CAP)
    with caplog.at_level(logging.WARNING):
        assert _returns(load_settings) == ApiSettings()
    _one_line_naming(caplog, path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_the_key_store_accepts_no_key_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    path = _bad(tmp_path / "api-keys.json", kind, STORE_CAP)
    store = KeyStore(path)
    with caplog.at_level(logging.WARNING):
        assert _returns(store.keys) == []
        assert _returns(lambda: store.check("mm-anything-at-all")) is None
    _one_line_naming(caplog, path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_file_is_one_line_naming_it(tmp_path: Path, kind: str) -> None:
    path = _bad(tmp_path / "api-key", kind, KEY_FILE_CAP)
    path.chmod(0o600)
    with pytest.raises(KeyFileError) as refused:
        _returns(lambda: key_file(path))
    said = str(refused.value)
    assert str(path) in said and "\n" not in said
    assert ("not a file" in said) if kind == "fifo" else ("more than the" in said)


@pytest.mark.parametrize("kind", KINDS)
def test_the_library_memo_is_read_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path))
    path = _bad(tmp_path / "library-index.json", kind, MEMO_CAP)
    with caplog.at_level(logging.WARNING):
        memo = _returns(Memo.load)
    assert memo.records == {}
    _one_line_naming(caplog, path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_the_hash_cache_hashes_anew(tmp_path: Path, kind: str) -> None:
    from core.model.manifest import HASH_CACHE_CAP

    path = _bad(tmp_path / "hashes.json", kind, HASH_CACHE_CAP)
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"x")
    assert _returns(lambda: HashCache(path).get(weights, weights.stat())) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_models_weight_index_is_one_line_naming_it(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "model"
    index = _bad(folder / INDEX_NAME, kind, INDEX_CAP)
    whole = Manifest("model", (FileEntry(INDEX_NAME, 1, "0" * 64),))
    with pytest.raises(ManifestError) as refused:
        _returns(lambda: node_manifest(folder, (0, 1), manifest=whole))
    said = str(refused.value)
    assert str(index) in said and "\n" not in said
    assert ("FIFO" in said) if kind == "fifo" else ("more than the" in said)


@pytest.mark.parametrize("kind", KINDS)
def test_the_hand_added_hosts_start_empty_and_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    path = _bad(tmp_path / "hosts.json", kind, HOSTS_CAP)
    with caplog.at_level(logging.WARNING):
        assert _returns(lambda: load_hosts(path)) == []
    _one_line_naming(caplog, path, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_a_library_folders_config_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "model"
    _bad(folder / "config.json", kind, CONFIG_CAP)
    (folder / "model.safetensors").write_bytes(b"")
    entry = _returns(
        lambda: entry_for_folder("m", Source.FOLDER, folder, size_bytes=1, checked=False)
    )
    assert entry.state != State.OK and entry.model_type is None
