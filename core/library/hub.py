"""Hugging Face through ``huggingface_hub``: search, and a model's facts from its headers.

Planning needs no weights: ``config.json`` plus every safetensors header (a few kB per
file; ``get_sharded_safetensors_metadata`` fetches them all in one request on the Hub,
``get_safetensors_metadata`` reads each file's header with range requests elsewhere) are
written as a header-only copy of the model in MacMesh's cache and read by the same
``read_model_info`` as a dropped folder, so the planner sees exactly what it would see
after the download.

Every failure is ``HubError`` (a ``ModelError``: one line saying what to do): offline mode,
a gated or private repo (accept the licence, or sign in), a missing repo, the Hub's rate
limit, the network, a malformed or unsafe answer (garbage JSON, wrong types, a redirect
loop, a bad safetensors header, a commit or file name that is not one). Every call has
timeouts and a total deadline (``core.worker.hubblob``'s client), and on the main thread
a Ctrl-C ends it at once; a ``user:password@`` in ``HF_ENDPOINT`` is never printed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from core import paths
from core.library.entries import not_mlx_reason
from core.model.info import INDEX_NAME, ModelError, ModelInfo, read_model_info
from core.worker.hubblob import (
    HubAnswerError,
    check_commit,
    check_file_name,
    check_revision,
    deadline,
    install_client,
    last_request,
    redact,
)

DEFAULT_AUTHOR = "mlx-community"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
_URL = re.compile(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/([^/?#\s]+/[^/?#\s]+)")
_TRUE = {"1", "on", "yes", "true"}
T = TypeVar("T")


class HubError(ModelError):
    """Hugging Face cannot answer; the message says why and what to do, in one line."""


@dataclass(frozen=True)
class HubModel:
    """One search result."""

    repo_id: str
    downloads: int
    likes: int
    parameters: int | None
    size_bytes: int | None
    gated: bool
    mlx: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.repo_id,
            "downloads": self.downloads,
            "likes": self.likes,
            "parameters": self.parameters,
            "size_bytes": self.size_bytes,
            "gated": self.gated,
            "mlx": self.mlx,
        }


def repo_id_of(text: str) -> str | None:
    """``ORG/NAME`` from ``hf:ORG/NAME``, ``ORG/NAME`` or a huggingface.co link; else None."""
    text = text.strip()
    if text.startswith("hf:"):
        text = text[3:]
    match = _URL.match(text)
    if match:
        text = match.group(1)
    return text if _REPO_ID.fullmatch(text) else None


def check_repo_id(repo_id: object) -> str:
    """``repo_id`` when it is ORG/NAME (so a folder name inside the cache), else HubError:
    a name from the Hub's own listing is checked like a typed one."""
    if isinstance(repo_id, str) and _REPO_ID.fullmatch(repo_id):
        return repo_id
    shown = repr(repo_id)[:80]
    raise HubError(f"Hugging Face named a model {shown}: not a model name (ORG/NAME).")


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set now, or was when huggingface_hub
    was imported (it reads the variable once)."""
    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    if env.strip().lower() in _TRUE:
        return True
    if "huggingface_hub.constants" in __import__("sys").modules:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    return False


OFFLINE_MESSAGE = (
    "Hugging Face is in offline mode (HF_HUB_OFFLINE is set): unset HF_HUB_OFFLINE to "
    "search or download; the models already on this Mac still work."
)


def endpoint_url(endpoint: str | None = None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def shown_endpoint(endpoint: str | None = None) -> str:
    """The endpoint as printed: without a ``user:password@``."""
    return redact(endpoint_url(endpoint))


def revision_of(text: str | None) -> str | None:
    """A revision a person typed, checked (HubError, one line, when it is not a branch,
    tag or commit name); None stays None (main)."""
    if text is None:
        return None
    try:
        return check_revision(text)
    except ValueError as error:
        raise HubError(f"--revision {error}.") from None


def check_online() -> None:
    if offline():
        raise HubError(OFFLINE_MESSAGE)


@contextmanager
def hub_errors(repo_id: str | None, endpoint: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub's and the network's exceptions into one-line HubErrors."""
    import httpx2
    from huggingface_hub import errors

    where = shown_endpoint(endpoint)
    page = f"{where}/{repo_id}" if repo_id else where
    try:
        yield
    except HubError:
        raise
    except errors.OfflineModeIsEnabled:
        raise HubError(OFFLINE_MESSAGE) from None
    except errors.GatedRepoError:
        raise HubError(_gated(repo_id, page)) from None
    except errors.RevisionNotFoundError:
        raise HubError(f"{repo_id} has no such revision on Hugging Face ({page}).") from None
    except errors.RemoteEntryNotFoundError as error:
        raise HubError(f"{repo_id}: a file is missing on Hugging Face ({_short(error)}).") from None
    except errors.RepositoryNotFoundError as error:
        if _status(error) == 401 and _has_token():
            raise HubError(_gated(repo_id, page)) from None
        raise HubError(
            f"{repo_id} is not on Hugging Face, or it is private: check the name (ORG/NAME, "
            f"as on {where}), or sign in (`hf auth login`) if it is yours."
        ) from None
    except errors.NotASafetensorsRepoError:
        raise HubError(
            f"{repo_id} has no safetensors weights: not an MLX model. Look for an MLX "
            "version of it, e.g. on mlx-community."
        ) from None
    except errors.HfHubHTTPError as error:
        status = _status(error)
        if status in (401, 403):
            raise HubError(_gated(repo_id, page)) from None
        if status == 429:
            raise HubError(_RATE_LIMITED) from None
        raise HubError(
            f"Hugging Face answered HTTP {status} for {repo_id or _url_of(error, where)}: "
            "try again later."
        ) from None
    except errors.LocalEntryNotFoundError as error:  # the HEAD failed, nothing cached
        cause = error.__cause__ or error
        if _status(cause) == 429:
            raise HubError(_RATE_LIMITED) from None
        if isinstance(cause, HubAnswerError):
            raise HubError(_malformed(repo_id, where, cause)) from None
        raise HubError(_unreachable(where, cause)) from None
    except HubAnswerError as error:  # unsafe or too slow, said by core.worker.hubblob
        raise HubError(_malformed(repo_id, where, error)) from None
    except httpx2.TooManyRedirects:
        raise HubError(
            f"Hugging Face at {where} sent a redirect loop for {repo_id or 'the search'}: "
            "check HF_ENDPOINT, or try again later."
        ) from None
    except httpx2.TransportError as error:
        raise HubError(_unreachable(where, error)) from None
    except httpx2.HTTPError as error:  # a malformed URL or answer below HTTP
        raise HubError(_malformed(repo_id, where, error)) from None
    except errors.SafetensorsParsingError as error:
        raise HubError(_malformed(repo_id, where, error)) from None
    except OSError as error:  # a disk error, a file that arrived short
        if _network_oserror(error):
            raise HubError(_unreachable(where, error)) from None
        raise HubError(f"{repo_id or 'Hugging Face'}: {_short(error)}") from None
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as error:
        # garbage JSON (UnicodeDecodeError, JSONDecodeError), fields of the wrong type,
        # a name huggingface_hub refuses (HFValidationError)
        raise HubError(_malformed(repo_id, where, error)) from None


def _malformed(repo_id: str | None, where: str, error: BaseException) -> str:
    what = f"for {repo_id}" if repo_id else "to the search"
    text = _short(error)
    if isinstance(error, HubAnswerError):
        return f"{text} ({what} at {where}): check HF_ENDPOINT, or try again later."
    asked = last_request()
    at = f" at {asked}" if asked else f" at {where}"
    return (
        f"Hugging Face sent a malformed answer {what}{at} ({type(error).__name__}: "
        f"{text}): check HF_ENDPOINT, or try again later."
    )


def _url_of(error: BaseException, where: str) -> str:
    request = getattr(getattr(error, "response", None), "request", None)
    url = getattr(request, "url", None)
    if url is None:
        return where
    return redact(f"{url.scheme}://{url.host}{':' + str(url.port) if url.port else ''}{url.path}")


_RATE_LIMITED = (
    "Hugging Face is limiting requests (HTTP 429, rate limit): wait a minute and try "
    "again; signing in (`hf auth login`) raises the limit."
)


def _unreachable(where: str, error: BaseException) -> str:
    return (
        f"Cannot reach Hugging Face at {where} ({network_reason(error)}): check the "
        "network connection and try again."
    )


_NAME_LOOKUP = re.compile(
    r"name or service not known|nodename nor servname|name resolution|getaddrinfo", re.I
)
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*")


def network_reason(error: BaseException) -> str:
    """What went wrong on the network, in words: "[Errno -2] Name or service not known"
    says nothing to a person (the exception and its causes are looked through)."""
    seen: BaseException | None = error
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, socket.gaierror) or _NAME_LOOKUP.search(text):
            return "its name could not be looked up: is this computer offline?"
        if isinstance(seen, ConnectionRefusedError) or "connection refused" in text:
            return "the connection was refused"
        if isinstance(seen, TimeoutError) or "timed out" in text:
            return "it did not answer in time"
        seen = seen.__cause__ or seen.__context__
    return _ERRNO.sub("", _short(error)) or type(error).__name__


def _gated(repo_id: str | None, page: str) -> str:
    signed = "your Hugging Face token has no access" if _has_token() else "you are not signed in"
    return (
        f"{repo_id} is gated or private and {signed}: accept its licence on {page} and "
        "sign in (`hf auth login`, or set HF_TOKEN)."
    )


def _has_token() -> bool:
    from huggingface_hub import get_token

    return bool(get_token())


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _network_oserror(error: OSError) -> bool:
    network = ConnectionError | TimeoutError | socket.gaierror  # gaierror: a name lookup
    return isinstance(error, network) or error.errno in (101, 110, 111, 113)


def _short(error: BaseException) -> str:
    text = redact(" ".join(str(error).split())) or type(error).__name__
    return text[:160]


def _hub_logs_once() -> None:
    """huggingface_hub writes its warnings (a line per retry) through a stderr handler of
    its own AND hands them on to the root logger: each came out twice. Without its handler
    the root logger's (stderr, the app's log file; Python's last resort when there are
    none) say each once."""
    hub_logger = logging.getLogger("huggingface_hub")
    for handler in list(hub_logger.handlers):
        if type(handler) is logging.StreamHandler:
            hub_logger.removeHandler(handler)


def _api(endpoint: str | None) -> Any:
    from huggingface_hub import HfApi
    from huggingface_hub.utils.tqdm import disable_progress_bars

    disable_progress_bars()  # MacMesh shows its own progress; no tqdm bars on stderr
    install_client()  # timeouts, a deadline, answers checked before the library uses them
    _hub_logs_once()

    return HfApi(endpoint=endpoint_url(endpoint))


def call(repo_id: str | None, endpoint: str | None, fn: Callable[[], T]) -> T:
    """``fn``'s Hub requests under one total deadline, its failures as HubError. On the
    main thread ``fn`` runs on a helper thread, so a Ctrl-C (KeyboardInterrupt) ends the
    wait at once, whatever the network is doing."""
    check_online()

    def bounded() -> T:
        with deadline(), hub_errors(repo_id, endpoint):
            return fn()

    if threading.current_thread() is not threading.main_thread():
        return bounded()
    return interruptible(bounded)


def interruptible(fn: Callable[[], T]) -> T:
    """``fn()`` on a daemon thread while this one waits in short steps: a KeyboardInterrupt
    here is raised at once (the helper is left to end by its own deadline)."""
    result: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as error:  # handed to the caller's thread
            failure.append(error)

    helper = threading.Thread(target=run, name="hub-call", daemon=True)
    helper.start()
    while helper.is_alive():
        helper.join(0.1)
    if failure:
        raise failure[0]
    return result[0]


# -- search ------------------------------------------------------------------------------------


def search_models(
    query: str, *, author: str | None = DEFAULT_AUTHOR, limit: int = 20, endpoint: str | None = None
) -> list[HubModel]:
    """Hugging Face models whose name holds ``query``, by downloads (``HfApi.list_models``)."""
    api = _api(endpoint)

    def search() -> list[HubModel]:
        found = api.list_models(
            search=query or None,
            author=author or None,
            sort="downloads",
            limit=limit,
            expand=["downloads", "likes", "safetensors", "usedStorage", "gated", "tags"],
        )
        return [_hub_model(model) for model in found]

    return call(None, endpoint, search)


def _hub_model(model: Any) -> HubModel:
    """One search result, each field checked: the name is what a terminal prints and a
    folder is named after, so it must be ORG/NAME; counts must be counts."""
    safetensors = getattr(model, "safetensors", None)
    tags = model.tags or []
    if not isinstance(tags, list):
        raise HubAnswerError(f"Hugging Face sent a model's tags as {type(tags).__name__}")
    repo_id = model.id
    if not (isinstance(repo_id, str) and _REPO_ID.fullmatch(repo_id)):
        raise HubAnswerError(
            f"Hugging Face named a model {repr(repo_id)[:80]}: not a model name (ORG/NAME)"
        )
    return HubModel(
        repo_id=repo_id,
        downloads=_count(model.downloads, "downloads"),
        likes=_count(model.likes, "likes"),
        parameters=_count(safetensors.total, "parameters") if safetensors else None,
        size_bytes=_count(getattr(model, "used_storage", None), "size") or None,
        gated=bool(model.gated),
        mlx="mlx" in tags or getattr(model, "library_name", None) == "mlx",
    )


def _count(value: object, what: str) -> int:
    """A count from the Hub (None is 0); HubAnswerError naming ``what`` otherwise."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HubAnswerError(f"Hugging Face sent a model's {what} as {repr(value)[:40]}")
    return value


# -- a model's facts from its headers -------------------------------------------------------------


def hub_model_info(
    repo_id: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    cache: Path | None = None,
) -> ModelInfo:
    """The model's ModelInfo from config.json and its safetensors headers; no weights."""
    return read_header_copy(
        *header_copy(repo_id, revision=revision, endpoint=endpoint, cache=cache)
    )


def read_header_copy(repo_id: str, folder: Path, size_bytes: int) -> ModelInfo:
    """``header_copy``'s folder read like a dropped one. Call it on the main (or GUI)
    thread: it may import mlx-lm's model module, and MLX wants that off worker threads."""
    model = read_model_info(folder, check_data=False)
    return replace(model, name=repo_id, bytes_on_disk=size_bytes or model.bytes_on_disk)


def header_copy(
    repo_id: str,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    cache: Path | None = None,
) -> tuple[str, Path, int]:
    """(repo_id, a header-only copy of the model, its size on the Hub): config.json, the
    index and every safetensors header, in ``cache`` (default MacMesh's cache folder,
    ``hub-headers/``) by commit, so asking again costs one small request. Network only:
    safe on any thread."""
    check_repo_id(repo_id)
    revision = revision_of(revision)
    api = _api(endpoint)
    root = cache or header_copies()

    def fetch() -> tuple[str, Path, int]:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        sha = check_commit(info.sha)
        siblings = _siblings(info)
        names = [name for name, _ in siblings]
        reason = not_mlx_reason(names)
        if reason:
            raise HubError(f"{repo_id}: {reason}.")
        if "config.json" not in names:
            raise HubError(f"{repo_id} has no config.json: it is not a model MLX can run.")
        folder = root / repo_id.replace("/", "--") / sha
        if not (folder / "config.json").is_file():
            main = revision in (None, "main")
            config_size = dict(siblings)["config.json"]
            _write_header_copy(
                api, repo_id, sha, names, folder, all_at_once=main, config_size=config_size
            )
        size = sum(size for _, size in siblings)
        return repo_id, folder, size

    return call(repo_id, endpoint, fetch)


def header_copies() -> Path:
    """Where ``header_copy`` keeps the Hub's headers: ``ORG--NAME/COMMIT/`` in it."""
    return paths.cache_dir() / "hub-headers"


def repo_of_header_copy(folder: Path) -> str | None:
    """ORG/NAME when ``folder`` is one of ``header_copy``'s (``ORG--NAME/COMMIT``)."""
    try:
        inside = folder.resolve().relative_to(header_copies().resolve())
    except (OSError, ValueError):
        return None
    if len(inside.parts) != 2 or "--" not in inside.parts[0]:
        return None
    repo_id = inside.parts[0].replace("--", "/", 1)
    return repo_id if _REPO_ID.fullmatch(repo_id) else None


def _siblings(info: Any) -> list[tuple[str, int]]:
    """(name, size) of every file of a ``model_info`` answer, each checked: a name inside
    the repo, a size that is a number (HubAnswerError otherwise)."""
    siblings = info.siblings or []
    if not isinstance(siblings, list):
        raise HubAnswerError(f"Hugging Face sent the file list as {type(siblings).__name__}")
    files = []
    for sibling in siblings:
        size = sibling.size or 0
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise HubAnswerError(f"Hugging Face sent a file's size as {repr(size)[:40]}")
        files.append((check_file_name(sibling.rfilename), size))
    return files


def _write_header_copy(
    api: Any,
    repo_id: str,
    sha: str,
    names: list[str],
    folder: Path,
    *,
    all_at_once: bool,
    config_size: int | None = None,
) -> None:
    """config.json, the index and header-only safetensors files, written atomically."""
    import shutil
    import tempfile

    from huggingface_hub import errors

    from core.worker.hubblob import download_file

    config = download_file(
        repo_id,
        "config.json",
        sha,
        folder.parent.parent / ".downloads",
        size=config_size,
        endpoint=api.endpoint,
    )
    metadata = None
    if all_at_once and INDEX_NAME in names and "model.safetensors" not in names:
        try:  # every header in one request (the Hub's own route; main only)
            metadata = api.get_sharded_safetensors_metadata(repo_id)
        except (errors.HfHubHTTPError, KeyError, ValueError):
            metadata = None
    if metadata is None:
        metadata = api.get_safetensors_metadata(repo_id, revision=sha)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".headers-", dir=folder.parent))
    try:
        shutil.copyfile(config, staging / "config.json")
        weight_map = dict(metadata.weight_map)
        if metadata.sharded:
            index = {"metadata": metadata.metadata or {}, "weight_map": weight_map}
            (staging / INDEX_NAME).write_text(json.dumps(index))
        for file_name, file_metadata in metadata.files_metadata.items():
            target = staging / check_file_name(file_name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_header_bytes(file_metadata))
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _header_bytes(file_metadata: Any) -> bytes:
    header: dict[str, Any] = {"__metadata__": file_metadata.metadata or {}}
    for name, tensor in file_metadata.tensors.items():
        header[name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": list(tensor.data_offsets),
        }
    raw = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(raw)) + raw
