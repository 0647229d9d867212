"""One weight file from the Hugging Face Hub into a Hugging Face cache, resumable across runs,
and the checks that keep a hostile or broken Hub from writing outside that cache.

``hf_hub_download`` (huggingface_hub 2.4) writes to a temporary name unique to the call
and deletes it on any failure, so a download stopped half way (a cancel, a cut that
outlasts the library's own retries, a killed process) starts again from zero. Here the
file is fetched with the library's own pieces (``get_hf_file_metadata`` for the etag and
the CDN location, ``http_get`` with ``resume_size``, the cache's ``WeakFileLock``) into
the blob ``hf_hub_download`` would have written, through ``blobs/<etag>.incomplete``,
which the next run continues with a range request. ``hf_hub_download`` then finds the
blob, links the snapshot and records the ref. Xet-stored files (with ``hf_xet``
installed) are left to ``hf_hub_download``: Xet keeps its own chunk cache.

Nothing the Hub says becomes a path unchecked. huggingface_hub builds paths from the
Hub's answers (``blobs/<etag>``, ``snapshots/<X-Repo-Commit>``, ``refs/<revision>``), so:

- ``install_client`` gives huggingface_hub an HTTP client whose transport refuses, before
  the library reads them, a Hub answer whose ``X-Repo-Commit`` is not a commit (40 hex)
  or whose ``ETag``/``X-Linked-Etag`` is not a git or LFS object id (40 or 64 hex); it
  also bounds every request: connect and read timeouts, and a deadline for the whole
  answer (a body sent a byte a second ends), and for a whole operation (``deadline``);
- ``check_commit``, ``check_revision``, ``check_etag`` and ``check_file_name`` check the
  same things where MacMesh reads them itself (a model's ``sha``, a typed revision);
- a file's body is cut at the size the listing and its headers promised (``capped``):
  a body that never ends is refused, its partial file removed; and ``check_space`` makes
  sure the disk holds the file before it starts.

Shared by this Mac's downloads (``core.library.download``) and a node's own download of
its shard (``core.remote.hubfetch`` sends this file's source to the node's Python, which
has huggingface_hub as mlx-lm's dependency). So: the standard library at the top,
huggingface_hub (and its HTTP client) imported where used, and nothing else of MacMesh.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# Files above this are fetched resumably; smaller ones are not worth a second request.
RESUMABLE_BYTES = 1 << 20

# The bounds of every request to the Hub, each overridable by its environment variable.
ENV_CONNECT_TIMEOUT = "MACMESH_HUB_CONNECT_TIMEOUT_S"  # to open a connection
ENV_READ_TIMEOUT = "MACMESH_HUB_READ_TIMEOUT_S"  # between two reads
ENV_DEADLINE = "MACMESH_HUB_DEADLINE_S"  # a whole answer, or a whole question (search, plan)
ENV_MIN_RATE = "MACMESH_HUB_MIN_RATE"  # bytes/s a file's body is given on top of the deadline
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
DEADLINE_S = 120.0
MIN_RATE = 50_000.0
# A JSON answer (``/api/...``) is never this large: a body that goes on is not read whole.
MAX_API_BYTES = 256 << 20
_SLACK_S = 0.05  # a timeout this close to the deadline is the deadline

_COMMIT = re.compile(r"[0-9a-f]{40}")
_ETAG = re.compile(r'(?:W/)?"?([0-9a-f]{40}|[0-9a-f]{64})"?')
# A branch or tag as git allows it (slashes inside), or a commit; never "..", "//", a
# leading "/" or "-", a component starting with ".", a backslash or a control character.
_REVISION = re.compile(r"(?![-/])(?!.*\.\.)(?!.*//)(?!.*/\.)(?!\.)[\w.\-/+@]{1,255}(?<![/.])")
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")


class HubAnswerError(Exception):
    """The Hub's answer is malformed or unsafe to use (a path-like commit or etag, a body
    longer than promised, too slow): the message says what, in one line."""


class DiskFull(OSError):
    """The disk cannot hold the file: nothing was fetched."""


class HubTimeout(HubAnswerError):
    """The Hub took longer than its deadline (connect, read, or the whole answer)."""


def redact(text: str) -> str:
    """``text`` with any ``user:password@`` of a URL in it removed: never printed."""
    return _USERINFO.sub("", text)


def _setting(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < math.inf else default


def limits() -> tuple[float, float, float, float]:
    """(connect timeout, read timeout, deadline, minimum rate) from the environment."""
    return (
        _setting(ENV_CONNECT_TIMEOUT, CONNECT_TIMEOUT_S),
        _setting(ENV_READ_TIMEOUT, READ_TIMEOUT_S),
        _setting(ENV_DEADLINE, DEADLINE_S),
        _setting(ENV_MIN_RATE, MIN_RATE),
    )


# -- what the Hub says, checked -------------------------------------------------------------


def check_commit(value: object, what: str = "the model's commit") -> str:
    """``value`` when it is a commit id (40 lowercase hex), else HubAnswerError."""
    if isinstance(value, str) and _COMMIT.fullmatch(value):
        return value
    raise HubAnswerError(f"Hugging Face sent {what} as {_shown(value)}, not a commit id (40 hex)")


def check_etag(value: object) -> str:
    """The object id in an ETag header (a git blob sha1 or an LFS sha256, quoted, maybe
    weak), else HubAnswerError."""
    match = _ETAG.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise HubAnswerError(
            f"Hugging Face sent a file's ETag as {_shown(value)}, not an object id (40 or 64 hex)"
        )
    return match.group(1)


def check_revision(value: str) -> str:
    """A branch, tag or commit a person typed; ValueError (one line) for anything that
    would name a path outside the cache's ``refs/``."""
    if _REVISION.fullmatch(value):
        return value
    raise ValueError(
        f"{_shown(value)} is not a branch, tag or commit name (letters, digits, . _ - / "
        "and no '..')"
    )


def check_file_name(value: object) -> str:
    """A file's name in a repo: relative, inside the repo (no '..', no absolute path)."""
    if isinstance(value, str) and value and "\\" not in value and "\0" not in value:
        parts = value.split("/")
        if all(part not in ("", ".", "..") for part in parts):
            return value
    raise HubAnswerError(f"Hugging Face named a file {_shown(value)}: not a name inside the repo")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_answer(headers: Any) -> None:
    """A Hub answer's headers that huggingface_hub turns into paths: the commit it names
    (``X-Repo-Commit``) and the object's etag (``X-Linked-Etag``, else ``ETag``)."""
    commit = headers.get("X-Repo-Commit")
    if commit is None:
        return  # not a file's answer (the API, a CDN): huggingface_hub makes no path of it
    check_commit(commit, "a file's commit (X-Repo-Commit)")
    etag = headers.get("X-Linked-Etag") or headers.get("ETag")
    if etag is not None:
        check_etag(etag)
    for name in ("X-Linked-Size", "Content-Length"):
        size = headers.get(name)
        if size is not None and not size.strip().isdecimal():
            raise HubAnswerError(f"Hugging Face sent {name} as {_shown(size)}, not a size")


# -- deadlines and the HTTP client -----------------------------------------------------------

_local = threading.local()


@contextlib.contextmanager
def deadline(seconds: float | None = None) -> Iterator[None]:
    """Within: every Hub request on this thread ends by ``seconds`` from now (default the
    deadline setting), retries included: a question to the Hub has a total deadline."""
    seconds = limits()[2] if seconds is None else seconds
    before = getattr(_local, "at", None)
    if before is None:
        _local.last_url = _local.last_error = None  # a new question: nothing asked yet
    at = time.monotonic() + seconds
    _local.at = at if before is None else min(before, at)
    try:
        yield
    finally:
        _local.at = before


def last_request() -> str | None:
    """The address (without a password or query) this thread last asked the Hub: what a
    message about a malformed answer names."""
    url: str | None = getattr(_local, "last_url", None)
    return url


def install_client() -> bool:
    """huggingface_hub's HTTP client through ``_Transport`` (timeouts, deadline, answers
    checked). False when this huggingface_hub has no such hook (an old one, on a node)."""
    try:
        import httpx2 as httpx  # huggingface_hub 2.x
        from huggingface_hub import set_client_factory
        from huggingface_hub.utils._http import default_client_factory
    except ImportError:
        return False
    if getattr(set_client_factory, "_macmesh", False):
        return True
    transport_class = _transport_class(httpx)

    def factory() -> Any:
        base = default_client_factory()
        hooks = base.event_hooks
        base.close()
        connect, read, _, _ = limits()
        inner = httpx.HTTPTransport()
        _bound_every_read(inner)
        return httpx.Client(
            transport=transport_class(inner),
            event_hooks=hooks,
            follow_redirects=True,
            max_redirects=10,
            timeout=httpx.Timeout(read, connect=connect),
        )

    set_client_factory(factory)
    set_client_factory._macmesh = True  # type: ignore[attr-defined]  # once per process
    for name in ("huggingface_hub", "huggingface_hub.utils._http", "huggingface_hub.file_download"):
        logging.getLogger(name).addFilter(_Redacting())  # where the record is made
    for handler in logging.getLogger("huggingface_hub").handlers:
        handler.addFilter(_Redacting())  # and the library's own stderr handler
    return True


class _Redacting:
    """A logging filter: huggingface_hub's warnings name the URL they retry, password
    included; the record keeps its text without it."""

    def filter(self, record: Any) -> bool:
        message = record.getMessage()
        if "@" in message:
            record.msg, record.args = redact(message), ()
        return True


def _bound_every_read(transport: Any) -> None:
    """Every socket read and write of ``transport`` within the thread's deadline, so an
    answer whose headers come a byte a second ends too (a read timeout alone waits per
    byte). Through the connection pool's network backend, which httpx's transport does
    not let one pass: when this httpx keeps it elsewhere, the deadline of a whole
    question (``core.library.hub.call``) still holds."""
    pool: Any = getattr(transport, "_pool", None)
    backend: Any = getattr(pool, "_network_backend", None)
    try:
        import httpcore2 as httpcore
    except ImportError:
        return
    if pool is None or backend is None or not hasattr(backend, "connect_tcp"):
        return

    def within(timeout: float | None) -> float | None:
        at: float | None = getattr(_local, "at", None)
        if at is None:
            return timeout
        left = at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the deadline passed")
        return left if timeout is None else min(timeout, left)

    class Stream:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            data: bytes = self.inner.read(max_bytes, within(timeout))
            return data

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.inner.write(buffer, within(timeout))

        def close(self) -> None:
            self.inner.close()

        def start_tls(self, *args: Any, **kwargs: Any) -> Stream:
            return Stream(self.inner.start_tls(*args, **kwargs))

        def get_extra_info(self, info: str) -> Any:
            return self.inner.get_extra_info(info)

    class Backend:
        def connect_tcp(self, *args: Any, **kwargs: Any) -> Stream:
            return Stream(backend.connect_tcp(*args, **kwargs))

        def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Stream:
            return Stream(backend.connect_unix_socket(*args, **kwargs))

        def sleep(self, seconds: float) -> None:
            backend.sleep(seconds)

    pool._network_backend = Backend()


def _transport_class(httpx: Any) -> Any:
    class Bounded(httpx.SyncByteStream):  # type: ignore[misc]
        """A response body that ends by its deadline and, for the API, its size."""

        def __init__(self, inner: Any, at: float, limit: int | None, url: str) -> None:
            self.inner, self.at, self.limit, self.url = inner, at, limit, url

        def __iter__(self) -> Iterator[bytes]:
            received = 0
            chunks = iter(self.inner)
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return
                except httpx.TimeoutException:
                    if time.monotonic() >= self.at - _SLACK_S:
                        raise HubTimeout(
                            f"Hugging Face sent too slowly ({received:,} bytes from "
                            f"{self.url}, then nothing before the deadline; {ENV_DEADLINE} "
                            "sets it)"
                        ) from None
                    raise
                received += len(chunk)
                if time.monotonic() > self.at:
                    raise HubTimeout(
                        f"Hugging Face sent too slowly ({received:,} bytes from "
                        f"{self.url} before the deadline; {ENV_DEADLINE} sets it)"
                    )
                if self.limit is not None and received > self.limit:
                    raise HubAnswerError(
                        f"Hugging Face sent more than the {self.limit:,} bytes asked of {self.url}"
                    )
                yield chunk

        def close(self) -> None:
            self.inner.close()

    class Transport(httpx.BaseTransport):  # type: ignore[misc]
        """Clamps each request's timeouts to the settings and the thread's deadline,
        checks the answer's headers, bounds its body."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def handle_request(self, request: Any) -> Any:
            connect, read, whole, rate = limits()
            now = time.monotonic()
            at = getattr(_local, "at", None)
            port = f":{request.url.port}" if request.url.port else ""
            url = redact(f"{request.url.scheme}://{request.url.host}{port}{request.url.path}")
            _local.last_url = url
            if at is not None and at <= now:
                last = getattr(_local, "last_error", None)
                said = f"; it last answered {last}" if last else ""
                raise HubTimeout(
                    f"Hugging Face did not answer in time ({url}{said}; {ENV_DEADLINE} sets "
                    "the deadline)"
                )
            left = (at - now) if at is not None else whole
            asked = dict(request.extensions.get("timeout") or {})

            def bound(key: str, most: float) -> float:
                value = asked.get(key)
                return min(most, left) if value is None else min(value, most, left)

            request.extensions["timeout"] = {
                "connect": bound("connect", connect),
                "read": bound("read", read),
                "write": bound("write", read),
                "pool": bound("pool", connect),
            }
            try:
                response = self.inner.handle_request(request)
            except httpx.TimeoutException as error:
                if at is not None and time.monotonic() >= at - _SLACK_S:
                    raise HubTimeout(
                        f"Hugging Face did not answer in time ({url}: {type(error).__name__}; "
                        f"{ENV_DEADLINE} sets the deadline)"
                    ) from None
                raise
            _local.last_error = (
                f"HTTP {response.status_code}" if response.status_code >= 400 else None
            )
            try:
                check_answer(response.headers)
            except HubAnswerError:
                response.close()
                raise
            length = response.headers.get("Content-Length", "")
            size = int(length) if length.strip().isdecimal() else None
            end = at if at is not None else now + whole + (size or 0) / rate
            limit = _range_length(request.headers.get("Range"))
            if limit is None and size is None and "/api/" in request.url.path:
                limit = MAX_API_BYTES
            response.stream = Bounded(response.stream, end, limit, url)
            return response

        def close(self) -> None:
            self.inner.close()

    return Transport


_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


def _range_length(header: str | None) -> int | None:
    """How many bytes a ``Range: bytes=A-B`` request asks for: an answer never holds more."""
    match = _RANGE.fullmatch(header.strip()) if header else None
    return int(match.group(2)) - int(match.group(1)) + 1 if match else None


# -- a file's body, bounded -------------------------------------------------------------------


def check_space(folder: str | Path, needed: int, what: str) -> None:
    """DiskFull when ``folder``'s disk has less than ``needed`` bytes free."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed > free:
        raise DiskFull(
            f"Not enough disk space for {what}: it needs {needed:,} bytes and {probe} has "
            f"{free:,} free. Free some space, or set HF_HOME to a larger disk"
        )


def capped(tqdm_class: Any, limit: int, what: str) -> Any:
    """A progress class for huggingface_hub's ``tqdm_class`` that passes every update to
    ``tqdm_class`` (if any) and raises HubAnswerError as soon as the body passes ``limit``
    bytes: the chunk is not written, and the library removes its partial file."""

    class Capped:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.n = int(kwargs.get("initial") or 0)
            self.total = kwargs.get("total")
            self.inner = tqdm_class(*args, **kwargs) if tqdm_class is not None else None

        def update(self, n: float | None = 1) -> None:
            self.n += int(n or 0)
            if self.n > limit:
                raise HubAnswerError(
                    f"Hugging Face sent more than the {limit:,} bytes it promised for {what}: "
                    "refused"
                )
            if self.inner is not None:
                self.inner.update(n)

        def __enter__(self) -> Capped:
            return self

        def __exit__(self, *exc: object) -> None:
            if self.inner is not None and hasattr(self.inner, "__exit__"):
                self.inner.__exit__(*exc)

        def close(self) -> None:
            if self.inner is not None and hasattr(self.inner, "close"):
                self.inner.close()

        def __getattr__(self, name: str) -> Any:
            inner = self.__dict__.get("inner")
            if inner is None:
                if name.startswith("set_") or name == "refresh":
                    return lambda *args, **kwargs: None
                raise AttributeError(name)
            return getattr(inner, name)

    return Capped


def checked_metadata(
    repo_id: str, filename: str, revision: str, *, endpoint: str | None = None
) -> Any:
    """``get_hf_file_metadata`` of the file, its commit, etag and size checked."""
    # lazy (here and below): huggingface_hub only where a download happens; this module's
    # checks and names are imported by the controller's start-up and by nodes without it
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    meta = get_hf_file_metadata(hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint))
    check_commit(meta.commit_hash, "a file's commit (X-Repo-Commit)")
    if meta.etag is not None:
        check_etag(meta.etag)
    if meta.size is not None and (not isinstance(meta.size, int) or meta.size < 0):
        raise HubAnswerError(f"Hugging Face sent {filename}'s size as {_shown(meta.size)}")
    return meta


def download_file(
    repo_id: str,
    filename: str,
    revision: str,
    cache_dir: str | Path,
    *,
    size: int | None = None,
    endpoint: str | None = None,
    tqdm_class: Any = None,
) -> str:
    """``filename`` of ``repo_id`` into the cache, checked and bounded: its name, the
    Hub's answer about it, the disk's free space, and a body cut at ``size`` (the
    listing's) or the size its headers promised. Weight files above ``RESUMABLE_BYTES``
    go through ``fetch_blob`` (resumable); ``hf_hub_download`` then links the snapshot.
    Returns the snapshot path."""
    from huggingface_hub import hf_hub_download

    check_file_name(filename)
    installed = install_client()
    _, _, whole, rate = limits()
    with deadline(whole + (size or 0) / rate):
        meta = None
        if not installed or (size is not None and size > RESUMABLE_BYTES):
            meta = checked_metadata(repo_id, filename, revision, endpoint=endpoint)
        limit = _limit(size, meta.size if meta is not None else None)
        if limit is not None:
            check_space(cache_dir, limit, filename)
        if size is not None and size > RESUMABLE_BYTES:
            fetch_blob(
                repo_id,
                filename,
                revision,
                cache_dir,
                endpoint=endpoint,
                tqdm_class=tqdm_class,
                limit=limit,
                meta=meta,
            )
        bar = tqdm_class if limit is None else capped(tqdm_class, limit, filename)
        path = hf_hub_download(
            repo_id,
            filename,
            revision=revision,
            cache_dir=cache_dir,
            endpoint=endpoint,
            tqdm_class=bar,
        )
    return str(path)


def _limit(*sizes: int | None) -> int | None:
    known = [s for s in sizes if s is not None]
    return min(known) if known else None


def fetch_blob(
    repo_id: str,
    filename: str,
    revision: str,
    cache_dir: str | Path,
    *,
    endpoint: str | None = None,
    tqdm_class: Any = None,
    limit: int | None = None,
    meta: Any = None,
) -> None:
    """Fill ``blobs/<etag>`` of ``repo_id`` in ``cache_dir`` from ``blobs/<etag>.incomplete``,
    resuming what an earlier run left there. Nothing when the blob is there already or
    the file is Xet-stored with ``hf_xet`` installed, or a node's huggingface_hub is too
    old for these pieces (``hf_hub_download`` then fetches it, resuming only within its
    call). The etag and commit are checked first (HubAnswerError); a body longer than
    ``limit`` or its headers' size is refused and its ``.incomplete`` file removed.
    huggingface_hub's other exceptions pass through; what arrived stays in the
    ``.incomplete`` file."""

    try:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.file_download import http_get, repo_folder_name
        from huggingface_hub.utils import WeakFileLock, build_hf_headers  # type: ignore[attr-defined]
        from huggingface_hub.utils._runtime import is_xet_available
    except ImportError:
        return
    if "tqdm_class" not in inspect.signature(http_get).parameters:
        return

    check_file_name(filename)
    url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
    meta = meta or checked_metadata(repo_id, filename, revision, endpoint=endpoint)
    xet = getattr(meta, "xet_file_data", None) is not None and is_xet_available()
    if meta.etag is None or xet:
        return
    etag = check_etag(meta.etag)
    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    blob = Path(cache_dir) / folder / "blobs" / etag
    if blob.exists():
        return
    limit = _limit(limit, meta.size)
    partial = blob.with_name(blob.name + ".incomplete")
    lock = Path(cache_dir) / ".locks" / folder / f"{etag}.lock"
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    headers = build_hf_headers()
    if urlparse(meta.location).netloc != urlparse(url).netloc:
        headers.pop("authorization", None)  # a signed CDN address: no token to a third party
    with WeakFileLock(str(lock)):
        if blob.exists():
            return
        if limit is not None and partial.exists() and partial.stat().st_size > limit:
            partial.unlink()  # not a prefix of this file: start again
        have = partial.stat().st_size if partial.exists() else 0
        if limit is not None:
            check_space(blob.parent, limit - have, filename)
        bar = tqdm_class if limit is None else capped(tqdm_class, limit, filename)
        try:
            with partial.open("ab") as out:
                http_get(
                    meta.location,
                    out,
                    resume_size=out.tell(),
                    headers=headers,
                    expected_size=meta.size,
                    displayed_filename=filename,
                    tqdm_class=bar,
                )
        except HubAnswerError as error:
            if not isinstance(error, HubTimeout):
                partial.unlink(missing_ok=True)  # a body longer than promised: nothing kept
            raise
        finally:
            if partial.exists() and partial.stat().st_size == 0:
                partial.unlink()  # nothing arrived: no unfinished download to show
        os.replace(partial, blob)
