"""API keys: made, shown once, stored hashed 0600, revocable (core/serve/keys.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from core import paths
from core.serve.keys import Gate, KeyFileError, KeyStore, key_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_key_is_shown_once_stored_as_a_hash_0600_and_revocable() -> None:
    store = KeyStore()
    assert store.path.parent == paths.data_dir()
    info, key = store.create("Zed editor")
    assert key.startswith("mm-") and len(key) > 40
    text = store.path.read_text()
    assert key not in text and info.start in text  # the key itself is never written
    assert _mode(store.path) == 0o600
    assert store.check(key) == info and store.check(key + "x") is None
    other = KeyStore(store.path)  # another process (the window and a CLI) sees it too
    assert other.check(key) is not None
    assert other.revoke(info.id) and not other.revoke(info.id)
    assert store.check(key) is None  # the revoke by the other reached this one
    assert store.keys() == []


def test_a_key_file_is_made_0600_when_missing_then_reused(tmp_path: Path) -> None:
    path = tmp_path / "key"
    key, made = key_file(path)
    assert made and _mode(path) == 0o600 and path.read_text().strip() == key
    assert key_file(path) == (key, False)


def test_a_key_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "key"
    key_file(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        key_file(path)


@pytest.mark.parametrize("content", ["", "short", "two words here and more"])
def test_a_key_file_without_a_key_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "key"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="does not hold a key"):
        key_file(path)


def test_a_key_file_in_a_missing_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="Cannot create"):
        key_file(tmp_path / "nope" / "key")


def test_the_gate_names_who_asks() -> None:
    store = KeyStore()
    _info, key = store.create("laptop")
    gate = Gate(key="k" * 20, store=store)
    assert gate.client("k" * 20) == "key file"
    assert gate.client(key) == "laptop"
    assert gate.client(None) is None and gate.client("wrong") is None
    assert Gate(open_=True).client(None) == "anyone"


def test_sharing_on_the_network_without_a_key_is_refused() -> None:
    from core.serve.server import APIServer, ServeError, ServerOptions, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    with pytest.raises(ServeError, match="always needs an API key"):
        APIServer(object(), "m", None, Gate(open_=True), ServerOptions("0.0.0.0", 0))  # type: ignore[arg-type]
