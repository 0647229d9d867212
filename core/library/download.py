"""Download a model into the Hugging Face cache, with ``huggingface_hub.hf_hub_download``.

The cache is the one other tools read (``HF_HUB_CACHE`` / ``HF_HOME``), so mlx_lm and LM
Studio see the model too. Before a byte moves: offline mode, the file list (an MLX model:
config.json and safetensors, not GGUF or PyTorch only) and free disk space for what is
missing. Then every file, a few at a time, through huggingface_hub, which:

- skips files already in the cache (a rerun after a stop fetches only what is missing);
- resumes a file whose connection drops with a range request (nothing re-fetched);
- retries a 429 (honouring ``Retry-After``) and network errors with backoff.

A weight file that stops half way (a cancel, or a cut that outlasts the library's own
retries) is kept as ``blobs/<etag>.incomplete`` and resumed by the next download with a
range request. ``hf_hub_download`` (2.4) cannot do that across calls, so a weight file
is first fetched by ``core.worker.hubblob.fetch_blob`` (huggingface_hub's own pieces,
shared with a node's own download in ``core.remote.hubfetch``) into the blob
``hf_hub_download`` would have written; ``hf_hub_download`` then only links the
snapshot and records the ref.

MacMesh's part: progress (bytes, rate, ETA) from the library's own ``tqdm_class`` hook,
a cancel that stops every transfer at its next chunk, the retries and resumes named
plainly in the progress notes, one more round of retries with backoff when the library
gives up on the network or the rate limit, and every failure as one ``HubError`` line.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.library.entries import not_mlx_reason
from core.library.hub import (
    HubError,
    _api,
    _siblings,
    call,
    check_online,
    check_repo_id,
    endpoint_url,
    hub_errors,
    revision_of,
)
from core.library.local import hub_cache_dir
from core.units import size
from core.worker.hubblob import check_commit, download_file

# Kept free beyond the model's bytes: a full disk breaks more than the download.
DISK_MARGIN = 1 << 30
RETRIES = 3  # rounds after huggingface_hub's own retries give up
BACKOFF_S = 2.0
_REPORT_EVERY_S = 0.1
# huggingface_hub hands out 10 MB chunks (``constants.DOWNLOAD_CHUNK_SIZE``, passed to
# httpx's ``iter_bytes``), gathered from what its HTTP client reads at a time (64 kB
# with its default transport): a copy of every byte into a buffer, and a
# cancel acting only every 10 MB. None, httpx's "as they arrive", hands on each read as
# it is: no regathering, a cancel within one read, and a cut connection resumes from the
# last read.
CHUNK_BYTES: int | None = None


class DownloadCancelled(Exception):
    """The person stopped the download; what finished stays in the cache."""


@dataclass(frozen=True)
class DownloadProgress:
    repo_id: str
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    rate: float | None  # bytes/s over the last seconds
    eta_s: float | None
    note: str | None = None  # a retry, a resume, a rate limit: said plainly

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 1.0


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(frozen=True)
class RepoFile:
    name: str
    size: int


def plan_download(
    repo_id: str,
    revision: str | None = None,
    *,
    endpoint: str | None = None,
    cache: Path | None = None,
) -> tuple[str, list[RepoFile], list[RepoFile]]:
    """(commit, every file, the files not yet in the cache); HubError if it is not an
    MLX model, or the Hub's answer is not one (a commit, names and sizes: checked)."""
    check_repo_id(repo_id)
    revision = revision_of(revision)
    api = _api(endpoint)
    cache = cache or hub_cache_dir()

    def listing() -> tuple[str, list[RepoFile], list[RepoFile]]:
        from huggingface_hub import try_to_load_from_cache

        info = api.model_info(repo_id, revision=revision, files_metadata=True)
        sha = check_commit(info.sha)  # a path in the cache (snapshots/<sha>): checked first
        files = [RepoFile(name, file_size) for name, file_size in _siblings(info)]
        reason = not_mlx_reason([f.name for f in files])
        if reason:
            raise HubError(f"{repo_id}: {reason}.")
        if "config.json" not in {f.name for f in files} or not any(
            f.name.endswith(".safetensors") for f in files
        ):
            raise HubError(
                f"{repo_id} has no config.json with safetensors weights: not a model MLX can run."
            )
        missing = [
            f
            for f in files
            if not isinstance(
                try_to_load_from_cache(repo_id, f.name, cache_dir=cache, revision=sha), str
            )
        ]
        return sha, files, missing

    return call(repo_id, endpoint, listing)


def check_disk(needed: int, cache: Path) -> None:
    """HubError when the cache's volume lacks ``needed`` bytes plus a margin."""
    probe = cache
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed + DISK_MARGIN > free:
        raise HubError(
            f"Not enough disk space: the download needs {size(needed)} (and {size(DISK_MARGIN)} "
            f"kept free) but {probe} has {size(free)} free. Free some space, or set HF_HOME "
            "to a larger disk."
        )


def download_model(
    repo_id: str,
    revision: str | None = None,
    *,
    endpoint: str | None = None,
    cache: Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    workers: int = 4,
) -> Path:
    """Download ``repo_id`` into the Hugging Face cache; returns its snapshot folder.

    Raises ``DownloadCancelled`` when ``cancel`` is set (from any thread), ``HubError``
    for anything a person must act on.
    """
    check_online()
    revision = revision_of(revision)
    from huggingface_hub import constants

    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_BYTES  # type: ignore[assignment]
    cache = cache or hub_cache_dir()
    cancel = cancel or threading.Event()
    sha, files, missing = plan_download(repo_id, revision, endpoint=endpoint, cache=cache)
    check_disk(sum(f.size for f in missing), cache)
    tracker = _Tracker(repo_id, files, missing, progress, cancel)
    tracker.report(force=True)
    config = next((f for f in missing if f.name == "config.json"), None)
    rest = [f for f in missing if f.name != "config.json"]

    def fetch(file: RepoFile, rev: str, counted: bool = True) -> None:
        _fetch_with_retries(repo_id, file, rev, endpoint, cache, tracker, counted)

    with _LibraryNotes(tracker):
        # config.json by the name asked for: huggingface_hub then records refs/<revision>.
        fetch(config or RepoFile("config.json", -1), revision or "main", counted=bool(config))
        if rest:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                futures = [pool.submit(fetch, file, sha) for file in rest]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                errors = [e for e in (f.exception() for f in done) if e is not None]
                if errors:
                    by_person = cancel.is_set()
                    cancel.set()  # stop the other files at their next chunk
                    wait(futures)
                    if by_person:
                        raise DownloadCancelled(tracker.cancel_message()) from None
                    raise next(e for e in errors if not isinstance(e, DownloadCancelled))
    tracker.report(force=True)
    return cache / ("models--" + repo_id.replace("/", "--")) / "snapshots" / sha


def _fetch_with_retries(
    repo_id: str,
    file: RepoFile,
    revision: str,
    endpoint: str | None,
    cache: Path,
    tracker: _Tracker,
    counted: bool,
) -> None:
    for attempt in range(RETRIES + 1):
        tracker.check()
        try:
            with hub_errors(repo_id, endpoint):
                download_file(
                    repo_id,
                    file.name,
                    revision,
                    cache,
                    size=file.size if file.size >= 0 else None,  # -1: config.json, cached
                    endpoint=endpoint_url(endpoint),
                    tqdm_class=tracker.bar_class(file),
                )
        except HubError as error:
            tracker.forget(file)
            retryable = "429" in str(error) or "Cannot reach" in str(error)
            if not retryable or attempt == RETRIES:
                raise
            wait_s = BACKOFF_S * 2**attempt
            tracker.report(note=f"{error} Retrying in {wait_s:g} s.", force=True)
            if tracker.cancel.wait(wait_s):
                tracker.check()
        except DownloadCancelled:
            tracker.forget(file)
            raise
        else:
            if counted:
                tracker.finished(file)
            return


class _Tracker:
    """Bytes from every file's bar, the rate over the last seconds, ETA; the cancel check."""

    def __init__(
        self,
        repo_id: str,
        files: list[RepoFile],
        missing: list[RepoFile],
        callback: ProgressCallback | None,
        cancel: threading.Event,
    ) -> None:
        self.repo_id = repo_id
        self.cancel = cancel
        self.callback = callback
        self.total = sum(f.size for f in files)
        self.files_total = len(files)
        self._lock = threading.RLock()  # also orders the callbacks: never a stale one last
        self._kept = self.total - sum(f.size for f in missing)
        self._files_done = len(files) - len(missing)
        self._current: dict[str, int] = {}
        self._samples: list[tuple[float, int]] = []
        self._last_report = 0.0
        self._note: str | None = None

    def check(self) -> None:
        if self.cancel.is_set():
            raise DownloadCancelled(self.cancel_message())

    def cancel_message(self) -> str:
        return (
            f"Download of {self.repo_id} stopped: {self._files_done} of {self.files_total} "
            "files are in the cache; run the download again to fetch the rest."
        )

    def bar_class(self, file: RepoFile) -> type:
        tracker = self

        class Bar:
            """The tqdm interface huggingface_hub drives: ``update(n)`` per chunk."""

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                self.n = int(kwargs.get("initial") or 0)
                self.total = kwargs.get("total")
                tracker._set(file.name, self.n)

            def update(self, n: float | None = 1) -> None:
                tracker.check()
                self.n += int(n or 0)
                tracker._set(file.name, self.n)

            def __enter__(self) -> Bar:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def close(self) -> None:
                pass

            def refresh(self) -> None:
                pass

            def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
                pass

            def set_description(self, *args: Any, **kwargs: Any) -> None:
                pass

            set_description_str = set_description

        return Bar

    def _set(self, name: str, n: int) -> None:
        # Per chunk (64 kB), so kept cheap: one dict store, atomic under the GIL (report
        # sums under the lock), and no lock at all between two reports.
        self._current[name] = n
        self.report()

    def forget(self, file: RepoFile) -> None:
        with self._lock:
            self._current.pop(file.name, None)

    def finished(self, file: RepoFile) -> None:
        with self._lock:
            self._current.pop(file.name, None)
            self._kept += file.size
            self._files_done += 1
        self.report(force=True)

    def note(self, text: str) -> None:
        self.report(note=text, force=True)

    def report(self, note: str | None = None, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < _REPORT_EVERY_S:
            return  # read without the lock: at worst a report a chunk early or late
        with self._lock:
            if not force and now - self._last_report < _REPORT_EVERY_S:
                return
            self._last_report = now
            done = min(self.total, self._kept + sum(self._current.values()))
            self._samples.append((now, done))
            while len(self._samples) > 2 and now - self._samples[0][0] > 5:
                self._samples.pop(0)
            (t0, b0) = self._samples[0]
            rate = (done - b0) / (now - t0) if now - t0 > 0.2 and done > b0 else None
            eta = (self.total - done) / rate if rate else None
            progress = DownloadProgress(
                self.repo_id,
                done,
                self.total,
                self._files_done,
                self.files_total,
                rate,
                eta,
                note,
            )
            self.callback(progress)


class _LibraryNotes(logging.Handler):
    """huggingface_hub's own retries, said plainly: it logs a warning before each. Its
    own stderr handler is set aside meanwhile (the notes say the same in one line)."""

    def __init__(self, tracker: _Tracker) -> None:
        super().__init__(logging.WARNING)
        self.tracker = tracker
        self.logger = logging.getLogger("huggingface_hub")
        self.saved: list[logging.Handler] = []

    def __enter__(self) -> _LibraryNotes:
        self.saved = list(self.logger.handlers)
        for handler in self.saved:
            self.logger.removeHandler(handler)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self)
        for handler in self.saved:
            self.logger.addHandler(handler)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Rate limited" in message or "HTTP Error 429" in message:
            self.tracker.note(
                "Hugging Face is limiting requests (HTTP 429, rate limit): waiting as it "
                "asks, then retrying."
            )
        elif "Trying to resume download" in message:
            self.tracker.note("The connection dropped: resuming where it stopped.")
        elif "Retrying in" in message:
            self.tracker.note("Hugging Face did not answer: retrying with backoff.")
