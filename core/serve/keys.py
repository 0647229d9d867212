"""API keys: made here, shown once, kept as hashes in a 0600 file, revocable.

``KeyStore`` is the window's keys (``api-keys.json`` in the user data folder): each key is
kept as its SHA-256 with an id, a label and the first characters to recognise it by; the
key itself is returned once, by ``create``. ``key_file`` is the headless form: the key in
a file the person names (made 0600 with a new key when it does not exist yet). A
``Gate`` is what the server asks: is this key one of ours, and whose?
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import paths
from core.jsonfile import FileProblem, read_capped, read_json, write_json_atomic

log = logging.getLogger(__name__)

PREFIX = "mm-"
SHOWN = 7  # characters of a key kept in clear, to tell keys apart in a list
STORE_NAME = "api-keys.json"
STORE_CAP = 4 << 20  # the key store: thousands of keys
KEY_FILE_CAP = 4096  # a key file: one line


class KeyFileError(Exception):
    """A key file that cannot be used; the message says what to do."""


def new_key() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    id: str
    label: str
    created: float
    start: str  # the key's first characters

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "created": self.created, "start": self.start}


class KeyStore:
    """The keys this Mac accepts, in ``path`` (default: the user data folder), 0600."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._keys: list[dict[str, Any]] = []

    @property
    def path(self) -> Path:
        """Worked out when first needed: a data folder that cannot be used fails the
        key's use (FolderError, one line), not the window that holds the store."""
        if self._path is None:
            self._path = paths.data_dir() / STORE_NAME
        return self._path

    def create(self, label: str = "") -> tuple[KeyInfo, str]:
        """A new key: its record, and the key itself (shown once, never stored)."""
        key = new_key()
        record = {
            "id": "key_" + secrets.token_hex(4),
            "label": label,
            "created": time.time(),
            "start": key[:SHOWN],
            "sha256": _hash(key),
        }
        with self._lock:
            self._load()
            self._keys.append(record)
            self._save()
        return _info(record), key

    def revoke(self, key_id: str) -> bool:
        """Forget a key: requests with it are refused from now on. False: no such key."""
        with self._lock:
            self._load()
            kept = [k for k in self._keys if k["id"] != key_id]
            if len(kept) == len(self._keys):
                return False
            self._keys = kept
            self._save()
            return True

    def keys(self) -> list[KeyInfo]:
        with self._lock:
            self._load()
            return [_info(k) for k in self._keys]

    def check(self, key: str) -> KeyInfo | None:
        """The key's record when it is one of ours (a revoke by another process counts)."""
        digest = _hash(key)
        with self._lock:
            self._load()
            for record in self._keys:
                if hmac.compare_digest(record["sha256"], digest):
                    return _info(record)
        return None

    def _load(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._keys, self._seen = [], None
            return
        seen = (st.st_mtime, st.st_size)
        if seen == self._seen:
            return
        try:
            data = read_json(self.path, STORE_CAP)
            keys = [k for k in data.get("keys", []) if isinstance(k, dict) and "sha256" in k]
        except FileProblem as problem:  # a FIFO, a huge file: refused at once, said once
            log.warning("%s; no key of that store is accepted", problem)
            keys = []
        except (OSError, ValueError, AttributeError):
            keys = []  # a damaged file accepts no key
        self._keys, self._seen = keys, seen

    def _save(self) -> None:
        write_json_atomic(self.path, {"version": 1, "keys": self._keys})  # mkstemp: 0600
        os.chmod(self.path, 0o600)
        st = self.path.stat()
        self._seen = (st.st_mtime, st.st_size)


def _info(record: dict[str, Any]) -> KeyInfo:
    return KeyInfo(
        str(record["id"]),
        str(record.get("label", "")),
        float(record.get("created", 0)),
        str(record.get("start", "")),
    )


def key_file(path: Path) -> tuple[str, bool]:
    """The key in ``path``, or a new one written there (0600, created exclusively);
    (key, made). KeyFileError when the file cannot be used, saying what to do."""
    path = path.expanduser()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key_file(path), False
    except OSError as error:
        raise KeyFileError(
            f"Cannot create the key file {path}: {error.strerror}. Name a file in a folder "
            "you can write to."
        ) from None
    key = new_key()
    with os.fdopen(fd, "w") as file:
        file.write(key + "\n")
    return key, True


def _read_key_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise KeyFileError(f"The key file {path} is not a file. Name a file for the key.")
        if mode & 0o077:
            raise KeyFileError(
                f"The key file {path} can be read by others (mode {stat.S_IMODE(mode):04o}): "
                f"run `chmod 600 {path}`, or name a new file and MacMesh makes one."
            )
        text = read_capped(path, KEY_FILE_CAP).decode("utf-8").strip()
    except FileProblem as problem:
        raise KeyFileError(f"Cannot read the key file {problem}.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"Cannot read the key file {path}: {error}.") from None
    if len(text) < 16 or any(c.isspace() for c in text):
        raise KeyFileError(
            f"The key file {path} does not hold a key (one line of at least 16 characters). "
            "Delete it and MacMesh writes a new one."
        )
    return text


class Gate:
    """Which keys open the API: one key (a key file), a store's, or (``open``) none
    needed (loopback only, when the person turned keys off)."""

    def __init__(
        self, key: str | None = None, store: KeyStore | None = None, open_: bool = False
    ) -> None:
        self._key, self._store, self.open = key, store, open_

    def client(self, key: str | None) -> str | None:
        """Who asks: a label for the log and the chat ("key_ab12cd: label"), or None when
        the key opens nothing."""
        who = self.identify(key)
        return who[0] if who is not None else None

    def identify(self, key: str | None) -> tuple[str, str] | None:
        """Who asks, as (label, owner): the label for the log and the chat, the owner an
        id that is the key's alone (its store id, "key-file", or "anyone" with no key
        needed): its prompt cache tenant and its fair share. None: the key opens nothing."""
        if key:
            if self._key is not None and hmac.compare_digest(key.encode(), self._key.encode()):
                return "key file", "key-file"
            if self._store is not None:
                info = self._store.check(key)
                if info is not None:
                    return info.label or info.id, info.id
        return ("anyone", "anyone") if self.open else None
