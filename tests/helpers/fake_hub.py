"""A faithful fake Hugging Face Hub on 127.0.0.1: the real ``huggingface_hub`` talks to it.

Point ``HF_ENDPOINT`` (or ``endpoint=``) at ``FakeHub.url``. It serves the routes the
client really calls (read from huggingface_hub 2.4's sources):

- ``GET /api/models?search=&author=&sort=downloads&limit=`` — ``HfApi.list_models``
- ``GET /api/models/ORG/NAME[/revision/REV]`` (``?blobs=True`` adds sizes) — ``model_info``
- ``GET /api/models/ORG/NAME/tree/REV[/PATH]?recursive=`` — ``list_repo_tree``
- ``GET /api/models/ORG/NAME/safetensors-metadata/FILE`` — ``get_sharded_safetensors_metadata``
- ``HEAD|GET /ORG/NAME/resolve/REV/PATH`` — ``hf_hub_download``, ``get_hf_file_metadata``,
  ``file_exists``, ``parse_safetensors_file_metadata``: small files straight away with
  ``ETag`` (the git oid), ``X-Repo-Commit`` and ``Content-Length``; LFS files (weights)
  as the Hub does, a 302 to a CDN on another origin (a second server, another port) with
  ``X-Linked-Etag``, ``X-Linked-Size`` and ``X-Repo-Commit``;
- ``HEAD|GET /cdn/SHA256`` on the CDN, with ``Range`` (206, ``Content-Range``).

Faults, each armed by a test: a gated repo answers 401 ``X-Error-Code: GatedRepo`` for its
files until the right token is sent; an unknown repo 401 ``RepoNotFound``; ``rate_limit_once``
answers the next matching request 429 with ``Retry-After``; ``cut_once`` sends part of a
weight file then drops the connection. Every request is logged with the bytes of body sent,
so a test can prove what was (not) downloaded.

Hostile modes (issue 26), each armed for the requests whose path and query hold a
pattern (``hub.hostile[pattern] = mode``), written from the issue's descriptions:

- ``path_sha``: the model's ``sha`` and every ``X-Repo-Commit`` are ``hub.hostile_value``
  (a path such as ``../../../../tmp/x/victim.txt``); ``path_commit``: only the header;
- ``path_etag``: every ``ETag`` and ``X-Linked-Etag`` is ``hub.hostile_value``;
- ``endless``: a file's body never ends (no length, zeros until the client leaves);
- ``slow``: a file's (or JSON) body at one byte a second;
- ``slow_headers``: the status line, then a header at one byte a second, never ending;
- ``silent``: the request is read and never answered;
- ``garbage``: 200 with bytes that are neither UTF-8 nor JSON;
- ``wrong_types``: JSON of the right shape with fields of the wrong types;
- ``redirect_loop``: a 302 to the same address, forever;
- ``huge``: the listing and the headers claim 10^15 bytes, a GET ignores ``Range`` and
  sends zeros under that length;
- ``bad_header_length``: a safetensors file whose first 8 bytes claim a 2^40-byte header;
- ``error500``: HTTP 500 (``hub.error_status``) with an empty body.

Weight files may be *virtual*: a real safetensors header followed by zeros made on demand,
so a 400 GB model can be listed and planned without existing anywhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from core.model.safetensors_headers import DTYPE_BYTES

SETTLE_S = 5.0  # the longest ``served`` waits for answers in flight to be recorded

_LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
_CHUNK = 1 << 20
_DATE = "2026-11-30T12:00:00.000Z"


@dataclass
class FakeFile:
    """``prefix`` then zeros up to ``size`` bytes."""

    prefix: bytes
    size: int
    lfs: bool

    @classmethod
    def of(cls, name: str, data: bytes) -> FakeFile:
        return cls(data, len(data), name.lower().endswith(_LFS_SUFFIXES))

    @property
    def sha256(self) -> str:
        if self.size == len(self.prefix):
            return hashlib.sha256(self.prefix).hexdigest()
        return hashlib.sha256(self.prefix + str(self.size).encode()).hexdigest()

    @property
    def oid(self) -> str:
        return hashlib.sha1(b"blob %d\0" % self.size + self.prefix).hexdigest()

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) in chunks."""
        position = start
        while position < end:
            stop = min(end, position + _CHUNK)
            if position < len(self.prefix):
                piece = self.prefix[position : min(stop, len(self.prefix))]
            else:
                piece = bytes(stop - position)
            yield piece
            position += len(piece)


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, FakeFile]
    sha: str
    downloads: int = 0
    likes: int = 0
    gated: bool = False
    tags: tuple[str, ...] = ("mlx", "safetensors", "text-generation")
    sharded_route: bool = True  # /safetensors-metadata (the Hub has it; mirrors may not)

    @property
    def author(self) -> str:
        return self.repo_id.split("/")[0]

    def parameters(self) -> int:
        total = 0
        for name, file in self.files.items():
            if name.endswith(".safetensors"):
                header = _header_of(file)
                total += sum(
                    math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__"
                )
        return total

    def used_storage(self) -> int:
        return sum(f.size for f in self.files.values())


@dataclass
class Served:
    """One request as the fake Hub saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    range: str | None
    status: int
    body_bytes: int
    authorization: str | None


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    token: str = "hf_fake_token_for_tests"
    log: list[Served] = field(default_factory=list)
    rate_limit_once: list[str] = field(default_factory=list)  # path substrings
    cut_once: dict[str, float] = field(default_factory=dict)  # file name -> fraction sent
    retry_after_s: int = 1
    bandwidth: float | None = None  # bytes/s shared by every transfer: a link, not loopback
    hostile: dict[str, str] = field(default_factory=dict)  # pattern in path+query -> mode
    hostile_value: str = "../../../../tmp/x/victim.txt"
    error_status: int = 500  # the ``error500`` mode's status (501: not retried by the client)

    def __post_init__(self) -> None:
        # A condition: ``served`` waits on it for the answers still being recorded.
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        self._servers: list[ThreadingHTTPServer] = []
        self._link_free_at = 0.0
        self._active = 0  # requests being answered

    # -- content ---------------------------------------------------------------------------

    def add_folder(self, repo_id: str, folder: Path, **options: Any) -> FakeRepo:
        files = {p.name: FakeFile.of(p.name, p.read_bytes()) for p in sorted(folder.iterdir())}
        return self.add_files(repo_id, files, **options)

    def add_files(self, repo_id: str, files: dict[str, FakeFile], **options: Any) -> FakeRepo:
        sha = hashlib.sha1(repo_id.encode() + b"".join(f.oid.encode() for f in files.values()))
        repo = FakeRepo(repo_id, dict(files), sha.hexdigest(), **options)
        self.repos[repo_id] = repo
        return repo

    def add_virtual_model(
        self,
        repo_id: str,
        config: dict[str, Any],
        tensors: dict[str, tuple[str, tuple[int, ...]]],
        *,
        files: int = 2,
        **options: Any,
    ) -> FakeRepo:
        """A model whose weight files are real headers over virtual zeros (any size)."""
        from core.worker.shardfiles import LAYER_PATTERN

        layers = int(config["num_hidden_layers"])
        files = max(1, min(files, layers))
        names = [f"model-{i + 1:05d}-of-{files:05d}.safetensors" for i in range(files)]
        parts: list[dict[str, tuple[str, tuple[int, ...]]]] = [{} for _ in names]
        for name, spec in sorted(tensors.items()):
            match = LAYER_PATTERN.search(name)
            index = min(int(match.group(1)), layers - 1) * files // layers if match else 0
            parts[index][name] = spec
        content: dict[str, FakeFile] = {}
        weight_map: dict[str, str] = {}
        for file_name, part in zip(names, parts, strict=True):
            content[file_name] = virtual_safetensors(part)
            weight_map.update(dict.fromkeys(part, file_name))
        index = {"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}
        content["model.safetensors.index.json"] = FakeFile.of("i", json.dumps(index).encode())
        content["config.json"] = FakeFile.of("c", json.dumps(config, indent=2).encode())
        content["README.md"] = FakeFile.of("r", f"# {repo_id}\n".encode())
        return self.add_files(repo_id, content, **options)

    # -- what was served --------------------------------------------------------------------

    def served(self, pattern: str = "") -> list[Served]:
        """The requests answered whose path holds ``pattern``. A client has its whole answer
        before the server's thread records it, so the answers still being given are waited
        for first (up to ``SETTLE_S``: a silent or slow answer is never recorded before
        the hub stops)."""
        with self._lock:
            self._lock.wait_for(lambda: self._active == 0, timeout=SETTLE_S)
            return [s for s in self.log if pattern in s.path]

    def weight_bytes_served(self) -> int:
        """Body bytes sent for weight files, resolve and CDN together."""
        names = {
            sha: name
            for repo in self.repos.values()
            for name, f in repo.files.items()
            for sha in (f.sha256,)
            if f.lfs
        }
        total = 0
        for s in self.served():
            last = s.path.rsplit("/", 1)[-1]
            if s.path.endswith(_LFS_SUFFIXES) or last in names:
                total += s.body_bytes
        return total

    def wait_idle(self, timeout: float = 10) -> None:
        """Until no request is being answered (a client that stopped reading leaves the
        server writing until its socket fails): then the log holds every byte sent."""
        from tests.helpers.wait import wait_until

        wait_until(lambda: self._active == 0, timeout, "the fake Hub to finish its answers")

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    # -- server -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            handler = type(f"{role}Handler", (_Handler,), {"hub": self, "role": role})
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.daemon_threads = True
            self._servers.append(server)
            threading.Thread(target=server.serve_forever, name=f"fake-{role}", daemon=True).start()
        return self

    def mode(self, target: str) -> str | None:
        """The hostile mode armed for a request to ``target`` (path and query), if any."""
        return next((m for pattern, m in self.hostile.items() if pattern in target), None)

    def stop(self) -> None:
        self._stopping.set()  # silent and slow answers end
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, served: Served) -> None:
        with self._lock:
            self.log.append(served)
            self._active -= 1
            self._lock.notify_all()

    def _begin(self) -> None:
        with self._lock:
            self._active += 1

    def _take_rate_limit(self, path: str) -> bool:
        with self._lock:
            for pattern in self.rate_limit_once:
                if pattern in path:
                    self.rate_limit_once.remove(pattern)
                    return True
        return False

    def _pace(self, sent: int) -> None:
        """Hold the sender so all transfers together keep to ``bandwidth``."""
        if not self.bandwidth:
            return
        import time

        with self._lock:
            now = time.monotonic()
            self._link_free_at = max(now, self._link_free_at) + sent / self.bandwidth
            wait = self._link_free_at - now
        if wait > 0:
            time.sleep(wait)

    def _take_cut(self, name: str) -> float | None:
        with self._lock:
            return self.cut_once.pop(name, None)


HUGE = 10**15


def _wrong_types(body: object) -> object:
    """The same JSON with each field the client reads of another type."""
    if isinstance(body, list):
        return [_wrong_types(item) for item in body] or [{"id": 42}]
    if isinstance(body, dict):
        wrong: dict[str, Any] = dict(body)
        wrong.update(
            id=42, downloads="many", likes=[1], tags=7, siblings="all", sha=12, safetensors=3
        )
        return wrong
    return body


def virtual_safetensors(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> FakeFile:
    """A safetensors file of zeros: its real header, the data made on demand."""
    header: dict[str, object] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    prefix = struct.pack("<Q", len(raw)) + raw
    return FakeFile(prefix, len(prefix) + offset, True)


def _never_ending(handler: _Handler, headers: dict[str, str]) -> None:
    """``huge``: a length of 10^15; ``endless``: no length, the body ends at close."""
    if handler._mode == "huge":
        headers = {**headers, "Content-Length": str(HUGE)}
    else:
        headers = {k: v for k, v in headers.items() if k != "Content-Length"}
        headers["Connection"] = "close"
    handler.close_connection = True
    handler._headers(200, headers)
    if handler._method == "HEAD":
        return
    chunk = bytes(64 << 10)
    while not handler.hub._stopping.is_set():
        handler.wfile.write(chunk)
        handler._sent += len(chunk)


def _header_of(file: FakeFile) -> dict[str, Any]:
    (length,) = struct.unpack("<Q", file.prefix[:8])
    header: dict[str, Any] = json.loads(file.prefix[8 : 8 + length])
    return header


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    role: str
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as the Hub's servers and CDN set it. Without it a small file's body,
    # written after its headers, waits for the client's delayed ACK (~40 ms) on a
    # kept-alive connection: huggingface_hub's client reuses connections, urllib does not.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_GET(self) -> None:
        self._dispatch("GET")

    # -- plumbing -------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        self._method = method
        self._sent = 0
        self._status = 0
        url = urlparse(self.path)
        self._query = parse_qs(url.query)
        path = unquote(url.path)
        self._mode = self.hub.mode(self.path)
        self.hub._begin()
        try:
            if self._mode == "silent":
                self.hub._stopping.wait()
                self.close_connection = True
            elif self._mode == "slow_headers":
                self._status = 200
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                while not self.hub._stopping.wait(1.0):
                    self.wfile.write(b"a" if self._sent else b"X-Pad: ")
                    self.wfile.flush()
                    self._sent += 1
                self.close_connection = True
            elif self._mode == "redirect_loop":
                self._headers(302, {"Location": self.path, "Content-Length": "0"})
            elif self._mode == "error500":
                self._headers(self.hub.error_status, {"Content-Length": "0"})
            elif self._mode == "garbage":
                raw = b"\xff\xfe{not json at all\x00\x81"
                self._headers(
                    200, {"Content-Type": "application/json", "Content-Length": str(len(raw))}
                )
                if method != "HEAD":
                    self.wfile.write(raw)
                    self._sent += len(raw)
            elif self.hub._take_rate_limit(path):
                self._json(
                    429,
                    {"error": "rate limited"},
                    {"Retry-After": str(self.hub.retry_after_s)},
                )
            elif self.role == "cdn":
                self._cdn(path)
            elif path == "/api/models":
                self._list()
            elif path.startswith("/api/models/"):
                self._api(path[len("/api/models/") :])
            elif "/resolve/" in path:
                self._resolve(path)
            else:
                self._json(404, {"error": "not found"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub._record(
                Served(
                    self.role,
                    method,
                    path,
                    self.headers.get("Range"),
                    self._status,
                    self._sent,
                    self.headers.get("Authorization"),
                )
            )

    def _headers(self, status: int, headers: dict[str, str]) -> None:
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        if self._mode == "wrong_types" and status == 200:
            body = _wrong_types(body)
        raw = json.dumps(body).encode()
        extra = {"Content-Type": "application/json", "Content-Length": str(len(raw))}
        self._headers(status, {**extra, **(headers or {})})
        if self._method != "HEAD":
            self._write(raw)

    def _write(self, raw: bytes) -> None:
        """``raw`` to the client; at a byte a second in the ``slow`` mode."""
        if self._mode != "slow":
            self.wfile.write(raw)
            self._sent += len(raw)
            return
        for i in range(len(raw)):
            if self.hub._stopping.wait(1.0):
                return
            self.wfile.write(raw[i : i + 1])
            self.wfile.flush()
            self._sent += 1

    def _error(self, status: int, code: str, message: str) -> None:
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def _repo(self, repo_id: str) -> FakeRepo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
        return repo

    def _authorized(self, repo: FakeRepo) -> bool:
        if not repo.gated or self.headers.get("Authorization") == f"Bearer {self.hub.token}":
            return True
        self._error(
            401,
            "GatedRepo",
            f"Access to model {repo.repo_id} is restricted. You must have access to it "
            "and be authenticated to access it. Please log in.",
        )
        return False

    def _sha(self, repo: FakeRepo) -> str:
        return self.hub.hostile_value if self._mode == "path_sha" else repo.sha

    def _commit_header(self, repo: FakeRepo) -> str:
        hostile = self._mode in ("path_sha", "path_commit")
        return self.hub.hostile_value if hostile else repo.sha

    def _etag(self, value: str) -> str:
        return f'"{self.hub.hostile_value}"' if self._mode == "path_etag" else f'"{value}"'

    def _revision_ok(self, repo: FakeRepo, revision: str) -> bool:
        if revision in ("main", repo.sha, self._sha(repo), self._commit_header(repo)):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    # -- routes ---------------------------------------------------------------------------

    def _list(self) -> None:
        search = (self._query.get("search") or [""])[0].lower()
        author = (self._query.get("author") or [""])[0]
        limit = int((self._query.get("limit") or ["1000"])[0])
        repos = [
            r
            for r in self.hub.repos.values()
            if search in r.repo_id.lower() and (not author or r.author == author)
        ]
        if (self._query.get("sort") or [""])[0] == "downloads":
            repos.sort(key=lambda r: -r.downloads)
        self._json(200, [self._model(r, siblings=False) for r in repos[:limit]])

    def _model(self, repo: FakeRepo, *, siblings: bool, blobs: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "_id": repo.sha[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.author,
            "sha": self._sha(repo),
            "lastModified": _DATE,
            "createdAt": _DATE,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": repo.downloads,
            "likes": repo.likes,
            "library_name": "mlx" if "mlx" in repo.tags else "transformers",
            "tags": list(repo.tags),
            "pipeline_tag": "text-generation",
            "usedStorage": repo.used_storage(),
        }
        parameters = repo.parameters()
        if parameters:
            body["safetensors"] = {"parameters": {"BF16": parameters}, "total": parameters}
        if siblings:
            body["siblings"] = [
                {"rfilename": name, **(self._blob(f) if blobs else {})}
                for name, f in sorted(repo.files.items())
            ]
        return body

    def _size(self, file: FakeFile) -> int:
        return HUGE if self._mode == "huge" and file.lfs else file.size

    def _blob(self, file: FakeFile) -> dict[str, Any]:
        size = self._size(file)
        entry: dict[str, Any] = {"size": size, "blobId": file.oid}
        if file.lfs:
            entry["lfs"] = {"size": size, "sha256": file.sha256, "pointerSize": 134}
        return entry

    def _api(self, rest: str) -> None:
        parts = rest.split("/")
        if len(parts) < 2:
            self._json(404, {"error": "not found"})
            return
        repo = self._repo("/".join(parts[:2]))
        if repo is None:
            return
        tail = parts[2:]
        if not tail or tail[0] == "revision":
            if tail and not self._revision_ok(repo, "/".join(tail[1:])):
                return
            blobs = (self._query.get("blobs") or ["False"])[0].lower() == "true"
            self._json(200, self._model(repo, siblings=True, blobs=blobs))
        elif tail[0] == "tree" and len(tail) >= 2:
            if not self._revision_ok(repo, tail[1]):
                return
            prefix = "/".join(tail[2:])
            entries = [
                {"type": "file", "path": name, "size": f.size, "oid": f.oid}
                | ({"lfs": self._blob(f)["lfs"]} if f.lfs else {})
                for name, f in sorted(repo.files.items())
                if name.startswith(prefix)
            ]
            self._json(200, entries)
        elif tail[0] == "safetensors-metadata" and repo.sharded_route:
            if not self._authorized(repo):
                return
            index_name = "/".join(tail[1:])
            index = repo.files.get(index_name)
            if index is None:
                self._error(404, "EntryNotFound", f"{index_name} does not exist")
                return
            content = json.loads(index.prefix)
            shards = sorted(set(content["weight_map"].values()))
            headers = {shard: _header_of(repo.files[shard]) for shard in shards}
            self._json(
                200,
                {"index": {"metadata": content.get("metadata")}, "headers": headers},
            )
        else:
            self._json(404, {"error": "not found"})

    def _resolve(self, path: str) -> None:
        repo_id, _, rest = path.lstrip("/").partition("/resolve/")
        repo = self._repo(repo_id)
        if repo is None:
            return
        revision, _, name = rest.partition("/")
        if not self._revision_ok(repo, revision) or not self._authorized(repo):
            return
        file = repo.files.get(name)
        common = {"X-Repo-Commit": self._commit_header(repo), "Accept-Ranges": "bytes"}
        if file is None:
            self._json(
                404,
                {"error": "Entry not found"},
                {**common, "X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
            )
            return
        if file.lfs:
            location = f"{self.hub.cdn_url}/cdn/{file.sha256}?repo={repo.repo_id}&file={name}"
            self._headers(
                302,
                {
                    **common,
                    "Location": location,
                    "ETag": self._etag(file.oid),
                    "X-Linked-Etag": self._etag(file.sha256),
                    "X-Linked-Size": str(self._size(file)),
                    "Content-Length": "0",
                },
            )
            return
        self._body(file, name, {**common, "ETag": self._etag(file.oid)})

    def _cdn(self, path: str) -> None:
        sha = path.rsplit("/", 1)[-1]
        for repo in self.hub.repos.values():
            for name, file in repo.files.items():
                if file.lfs and file.sha256 == sha:
                    self._body(file, name, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes"})
                    return
        self._json(404, {"error": "no such object"})

    def _body(self, file: FakeFile, name: str, headers: dict[str, str]) -> None:
        if self._mode == "bad_header_length" and file.lfs:
            file = FakeFile(struct.pack("<Q", 1 << 40) + file.prefix[8:], file.size, True)
        never_ends = self._mode == "endless" or (self._mode == "huge" and file.lfs)
        if never_ends and self._method == "GET":
            _never_ending(self, headers)
            return
        start, end, status = 0, file.size, 200
        requested = self.headers.get("Range")
        match = _RANGE.match(requested.strip()) if requested else None
        if match and (match.group(1) or match.group(2)):
            if match.group(1):
                start = int(match.group(1))
                end = min(file.size, int(match.group(2)) + 1) if match.group(2) else file.size
            else:
                start = max(0, file.size - int(match.group(2)))
            if start >= file.size:
                self._headers(416, {"Content-Range": f"bytes */{file.size}", "Content-Length": "0"})
                return
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{file.size}"}
        self._headers(status, {**headers, "Content-Length": str(end - start)})
        if self._method == "HEAD":
            return
        cut = self.hub._take_cut(name) if self.role == "cdn" else None
        limit = end if cut is None else start + int((end - start) * cut)
        for chunk in file.chunks(start, limit):
            if self._mode == "slow":
                self._write(chunk)
                if self.hub._stopping.is_set():
                    break
                continue
            self.wfile.write(chunk)
            self._sent += len(chunk)
            self.hub._pace(len(chunk))
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True
