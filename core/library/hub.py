"""Hugging Face through ``huggingface_hub``: search, and a model's facts from its headers.

Planning needs no weights: ``config.json`` plus every safetensors header (a few kB per
file; ``get_sharded_safetensors_metadata`` fetches them all in one request on the Hub,
``get_safetensors_metadata`` reads each file's header with range requests elsewhere) are
written as a header-only copy of the model in MacMesh's cache and read by the same
``read_model_info`` as a dropped folder, so the planner sees exactly what it would see
after the download.

Every failure is ``HubError`` (a ``ModelError``: one line saying what to do): offline mode,
a gated or private repo (accept the licence, or sign in), a missing repo, the Hub's rate
limit, the network.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from core import paths
from core.library.entries import not_mlx_reason
from core.model.info import INDEX_NAME, ModelError, ModelInfo, read_model_info

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
    return text if _REPO_ID.match(text) else None


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


def check_online() -> None:
    if offline():
        raise HubError(OFFLINE_MESSAGE)


@contextmanager
def hub_errors(repo_id: str | None, endpoint: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub's and the network's exceptions into one-line HubErrors."""
    import httpx2
    from huggingface_hub import errors

    where = endpoint_url(endpoint)
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
            f"Hugging Face answered HTTP {status} for {repo_id}: try again later."
        ) from None
    except errors.LocalEntryNotFoundError as error:  # the HEAD failed, nothing cached
        if _status(error.__cause__ or error) == 429:
            raise HubError(_RATE_LIMITED) from None
        raise HubError(_unreachable(where, error.__cause__ or error)) from None
    except httpx2.TransportError as error:
        raise HubError(_unreachable(where, error)) from None
    except OSError as error:  # a disk error, a file that arrived short
        if _network_oserror(error):
            raise HubError(_unreachable(where, error)) from None
        raise HubError(f"{repo_id or 'Hugging Face'}: {_short(error)}") from None


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
    text = " ".join(str(error).split()) or type(error).__name__
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
    _hub_logs_once()

    return HfApi(endpoint=endpoint_url(endpoint))


def call(repo_id: str | None, endpoint: str | None, fn: Callable[[], T]) -> T:
    check_online()
    with hub_errors(repo_id, endpoint):
        return fn()


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
    safetensors = getattr(model, "safetensors", None)
    tags = model.tags or []
    return HubModel(
        repo_id=model.id,
        downloads=int(model.downloads or 0),
        likes=int(model.likes or 0),
        parameters=int(safetensors.total) if safetensors else None,
        size_bytes=getattr(model, "used_storage", None),
        gated=bool(model.gated),
        mlx="mlx" in tags or getattr(model, "library_name", None) == "mlx",
    )


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
    api = _api(endpoint)
    root = cache or paths.cache_dir() / "hub-headers"

    def fetch() -> tuple[str, Path, int]:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        names = [s.rfilename for s in info.siblings or []]
        reason = not_mlx_reason(names)
        if reason:
            raise HubError(f"{repo_id}: {reason}.")
        if "config.json" not in names:
            raise HubError(f"{repo_id} has no config.json: it is not a model MLX can run.")
        folder = root / repo_id.replace("/", "--") / str(info.sha)
        if not (folder / "config.json").is_file():
            main = revision in (None, "main")
            _write_header_copy(api, repo_id, str(info.sha), names, folder, all_at_once=main)
        size = sum(s.size or 0 for s in info.siblings or [])
        return repo_id, folder, size

    return call(repo_id, endpoint, fetch)


def _write_header_copy(
    api: Any, repo_id: str, sha: str, names: list[str], folder: Path, *, all_at_once: bool
) -> None:
    """config.json, the index and header-only safetensors files, written atomically."""
    import shutil
    import tempfile

    from huggingface_hub import errors

    config = api.hf_hub_download(
        repo_id, "config.json", revision=sha, cache_dir=folder.parent.parent / ".downloads"
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
            target = staging / file_name
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
