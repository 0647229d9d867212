"""``macmesh keys``: the window's key store from a terminal: a new key printed once, listed
by id and label (never the key), revoked by id; a gate over the store (as ``macmesh
serve``'s) accepts each key with its own owner, and a revoked one no more."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from core.cli.keys import keys_cli
from core.serve.keys import Gate, KeyStore


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = keys_cli(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_new_prints_the_key_once_and_the_store_is_the_windows(data_dir: Path) -> None:
    code, out, err = _run("new", "Ana's laptop")
    key = out.strip()
    assert code == 0 and key.startswith("mm-") and "shown this once" in err
    [info] = KeyStore().keys()  # the store the window reads
    assert info.label == "Ana's laptop" and key.startswith(info.start)
    stored = (data_dir / "api-keys.json").read_text()
    assert key not in stored and oct((data_dir / "api-keys.json").stat().st_mode & 0o777) == "0o600"
    code, listed, _ = _run("list")
    assert code == 0 and info.id in listed and "Ana's laptop" in listed and key not in listed
    code, listed, _ = _run("list", "--json")
    assert json.loads(listed)[0]["id"] == info.id


def test_the_gate_serve_uses_accepts_each_store_key_as_its_own_owner_until_revoked() -> None:
    _, first, _ = _run("new", "a")
    _, second, _ = _run("new", "b")
    gate = Gate(key="mm-the-key-file-key-0000", store=KeyStore())
    one, two = gate.identify(first.strip()), gate.identify(second.strip())
    assert one is not None and two is not None and one[1] != two[1]
    assert gate.identify("mm-the-key-file-key-0000") == ("key file", "key-file")
    code, out, _ = _run("revoke", one[1])
    assert code == 0 and "revoked" in out
    assert gate.identify(first.strip()) is None and gate.identify(second.strip()) is not None


def test_revoking_an_unknown_id_and_a_bad_label_say_so_in_one_line() -> None:
    code, _, err = _run("revoke", "key_nothere")
    assert code == 1 and "no key 'key_nothere'" in err and len(err.splitlines()) == 1
    code, _, err = _run("new", "\x1b[31m")
    assert code == 2 and "label" in err
    code, out, _ = _run("list")
    assert code == 0 and "No keys yet" in out
