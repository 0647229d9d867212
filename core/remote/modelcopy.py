"""Copy a model to a node over SSH: only the files it lacks, resumable, verified, atomic.

Where the model goes on the node and what it already has there: ``core.remote.modelcheck``.

A file is streamed into ``.partial``, its SHA-256 computed *on the node* (by the node's
Python as it writes; else ``sha256sum``, or ``shasum -a 256`` on macOS) and compared with
the manifest; only when every file a node needs is verified are they moved (``mv``,
atomic within a file system) into the folder, and the marker is written last. So a
half-copied model never passes ``check``: its files are missing from the folder, or the
hash check fails. The marker also records each file's size and mtime as the node saw
them, so a later check can tell a file rewritten since; a file MacMesh wrote whose hash
no longer matches is copied again (repaired).

A folder whose files differ from the manifest is refused with ``DifferentModel``, naming
the folder to remove: MacMesh never overwrites files it did not write (our call: a person
may have put them there on purpose).

Resuming: a restarted copy keeps the folder's verified files, hashes ``.partial`` files
that are complete, and continues shorter ones from their size on the node, so it re-sends
only what never arrived (the final hash covers the resumed prefix; if that fails the file
is sent once more from the start).

How the bytes travel: ``core.remote.transport``; why (measured): ``docs/copy-transport.md``.

Threads: ``copy_model`` blocks; run it in an executor (one per node). ``progress`` is
called on the copying thread; ``cancel`` is polled between chunks.
"""

from __future__ import annotations

import contextlib
import shlex
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from core.model.manifest import FileEntry, Manifest, ManifestError
from core.remote.modelcheck import (
    Evaluation,
    RemoteState,
    evaluate,
    node_session,
    remote_model_dir,
    remote_state,
    verdict,
)
from core.remote.ssh import Connection
from core.remote.targets import Target
from core.remote.transport import (
    CopyCancelled,
    EarlyReceiver,
    ModelCopyError,
    commit_on_node,
    commit_payload,
    hash_on_node,
    send_files,
)

__all__ = [
    "CopyCancelled",
    "CopyProgress",
    "CopyResult",
    "DifferentModel",
    "ModelCopyError",
    "copy_model",
]

PROGRESS_EVERY_S = 0.1
RATE_HALF_LIFE_S = 2.0  # the ETA's rate forgets half its past every 2 s
MIN_RATE_WINDOW_S = 0.5  # no ETA before half a second of transfer

Phase = Literal["copying", "verifying", "verified"]
Cancel = threading.Event | Callable[[], bool] | None


class DifferentModel(ModelCopyError):
    """The node's folder holds files other than the manifest's: refused, never overwritten."""


@dataclass(frozen=True)
class CopyProgress:
    """One node's copy. ``rate`` (bytes/s, smoothed) and ``eta_s`` are None until there
    is enough data to say; ``bytes_done`` never decreases."""

    node: str
    phase: Phase
    bytes_done: int
    bytes_total: int
    rate: float | None = None
    eta_s: float | None = None
    file: str | None = None

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 1.0


@dataclass(frozen=True)
class CopyResult:
    node: str
    folder: str
    sent_bytes: int  # over the network in this call
    reused_bytes: int  # already verified on the node (folder, or complete in .partial)
    resumed_bytes: int  # partial files continued from their size
    files_copied: tuple[str, ...]
    seconds: float


# -- the copy --------------------------------------------------------------------------------


def copy_model(
    target: Target,
    manifest: Manifest,
    model_dir: Path | str,
    progress: Callable[[CopyProgress], None] | None = None,
    cancel: Cancel = None,
    connection: Connection | None = None,
    damaged: Collection[str] = (),
) -> CopyResult:
    """Put ``manifest``'s files from ``model_dir`` on ``target``, verified. Returns what
    was sent. ``damaged``: files a check found changed on the node (``CheckResult``):
    sent again without hashing them once more. Raises ``CopyCancelled`` (resumable),
    ``DifferentModel`` (refused), ``ModelCopyError`` or ``SSHError`` (the node; run again
    to resume)."""
    source = Path(model_dir).expanduser()
    started = time.monotonic()
    stopped = _cancel_check(cancel)
    for entry in manifest.files:
        path = source / entry.name
        if not path.is_file() or path.stat().st_size != entry.size:
            raise ModelCopyError(
                f"{path} is not the file the manifest describes: the model folder changed "
                "since it was read. Read it again (choose the model again)."
            )
    early = None
    if target.cache_root and not target.local:  # the folder is known without asking
        early = EarlyReceiver(target, remote_model_dir(target, manifest) + ".partial")
    try:
        return _copy(
            target, manifest, source, progress, stopped, connection, early, started, damaged
        )
    finally:
        if early is not None:
            early.discard()


@dataclass(frozen=True)
class TransferPlan:
    """What one copy sends and commits, decided from what the node has before a byte moves.

    ``sends``: (file, offset) in manifest order. A file continues from what ``.partial``
    holds, or restarts from 0 when that is longer than the file (not ours to continue);
    offset == size: complete in ``.partial``, only hashed. ``moved``: what the commit moves
    into the folder; ``marker``: what it writes last. ``commit_needed``: nothing to send,
    but the folder still lacks a marker vouching for files it already holds."""

    sends: tuple[tuple[FileEntry, int], ...]
    moved: tuple[str, ...]
    marker: Manifest
    reused_bytes: int  # verified in the folder, or complete in .partial
    resumed_bytes: int  # partial files continued from their size
    commit_needed: bool

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry, _ in self.sends)

    @property
    def done_bytes(self) -> int:
        return sum(offset for _, offset in self.sends)

    @property
    def complete(self) -> tuple[str, ...]:
        """Files complete in ``.partial``: hashed on the node before the others are sent,
        so the receiver can commit right after them."""
        return tuple(e.name for e, offset in self.sends if offset == e.size and e.size)

    def again(self, bad: Sequence[FileEntry]) -> TransferPlan:
        """The same plan with only ``bad`` to send once more, from 0 (a bad resumed prefix,
        or bytes damaged on the way)."""
        return replace(self, sends=tuple((entry, 0) for entry in bad))


def plan_transfer(manifest: Manifest, state: RemoteState, result: Evaluation) -> TransferPlan:
    """Pure: the transfer for ``manifest`` to a node in ``state`` that ``evaluate`` found
    ``result`` in (no ``different`` files: those are refused before)."""
    todo = [e for e in manifest.files if e.name in result.missing]
    sends = []
    for entry in todo:
        have = state.partial.get(entry.name, 0)
        sends.append((entry, have if have <= entry.size else 0))
    complete = sum(e.size for e, offset in sends if offset == e.size)
    return TransferPlan(
        sends=tuple(sends),
        moved=tuple(e.name for e in todo),
        marker=_marker(manifest, state.marker),
        reused_bytes=manifest.total_bytes - sum(e.size for e in todo) + complete,
        resumed_bytes=sum(offset for e, offset in sends if 0 < offset < e.size),
        commit_needed=bool(todo) or state.marker is None or bool(result.to_hash),
    )


def _copy(
    target: Target,
    manifest: Manifest,
    source: Path,
    progress: Callable[[CopyProgress], None] | None,
    stopped: Callable[[], bool],
    connection: Connection | None,
    early: EarlyReceiver | None,
    started: float,
    damaged: Collection[str] = (),
) -> CopyResult:
    with node_session(target, connection) as conn:
        folder = remote_model_dir(target, manifest, conn)
        staging = folder + ".partial"
        state = remote_state(conn, target, folder, manifest.names)
        result = evaluate(manifest, state, damaged=damaged)
        hashed = {}
        if result.to_hash and not result.different:
            hashed = hash_on_node(conn, target, folder, manifest, result.to_hash)
        found = verdict(target.name, folder, manifest, result, hashed, state)
        if found.status == "different":
            raise DifferentModel(
                f"{found.reason} MacMesh will not overwrite it. If you do not need those "
                f"files, remove the folder on {target.name} (`rm -rf {shlex.quote(folder)}`) "
                "and copy again."
            )
        if found.damaged:  # changed since MacMesh wrote them: sent again
            result = replace(result, missing=found.missing)
        plan = plan_transfer(manifest, state, result)
        meter = _Meter(target.name, progress)
        sent, committed = 0, False
        if plan.sends:
            python = target.interpreter if state.python else None
            try:
                sent, committed = _send(
                    conn, target, manifest, source, folder, plan, meter, stopped, python, early
                )
            except CopyCancelled:
                raise _cancelled(target, manifest) from None
        else:
            meter.total = meter.done = 0
        if plan.commit_needed and not committed:
            commit_on_node(conn, folder, staging, plan.moved, plan.marker)
        meter.emit("verified", force=True)
        elapsed = time.monotonic() - started
        return CopyResult(
            target.name, folder, sent, plan.reused_bytes, plan.resumed_bytes, plan.moved, elapsed
        )


def _send(
    conn: Connection,
    target: Target,
    manifest: Manifest,
    source: Path,
    folder: str,
    plan: TransferPlan,
    meter: _Meter,
    stopped: Callable[[], bool],
    python: str | None,
    early: EarlyReceiver | None,
) -> tuple[int, bool]:
    """Carry out ``plan``'s sends, every file verified by its SHA-256 on the node; a file
    that arrives damaged is sent once more from 0. (bytes sent, whether the receiver
    committed.)"""
    staging = folder + ".partial"
    expected = {entry.name: entry.sha256 for entry, _ in plan.sends}
    payload = commit_payload(folder, staging, plan.moved, plan.marker)
    meter.total, meter.done = plan.total_bytes, plan.done_bytes
    meter.start()
    known: dict[str, str] = {}

    def commit(streamed: dict[str, str]) -> bytes | None:
        """The receiver commits only if every hash agrees."""
        digests = known | streamed
        return payload if all(digests.get(n) == expected[n] for n in plan.moved) else None

    if plan.complete:
        meter.emit("verifying", force=True)
        known = hash_on_node(conn, target, staging, manifest, plan.complete)
    sent, todo = 0, plan
    while True:
        receiver = early if todo is plan else None  # a started receiver serves the first
        count, streamed, committed = send_files(
            conn, target, source, staging, todo.sends, meter.add, stopped, python, receiver, commit
        )
        sent += count
        digests = known | streamed
        unhashed = [e.name for e, _ in todo.sends if e.name not in digests]
        if unhashed:  # received without Python on the node: hashed now
            meter.emit("verifying", force=True)
            digests |= hash_on_node(conn, target, staging, manifest, unhashed)
        bad = [e for e, _ in todo.sends if digests.get(e.name) != e.sha256]
        if not bad:
            return sent, committed
        if todo is not plan:
            raise ModelCopyError(
                f"{bad[0].name} arrived damaged on {target.name} twice (its SHA-256 does "
                "not match). Check that node's disk and network, then copy again."
            )
        # The total grows by the files sent again, so bytes done never go back.
        known = {n: d for n, d in digests.items() if d == expected.get(n)}
        meter.total += sum(e.size for e in bad)
        todo = todo.again(bad)


class _Meter:
    """Bytes done/total, a smoothed rate and an honest ETA, reported at most every 0.1 s."""

    def __init__(self, node: str, report: Callable[[CopyProgress], None] | None) -> None:
        self.node, self.report = node, report
        self.total = self.done = 0
        self.rate: float | None = None
        self._began = self._last_sample = self._last_emit = 0.0
        self._sample_done = 0

    def start(self) -> None:
        self._began = self._last_sample = time.monotonic()
        self._sample_done = self.done
        self.emit("copying", force=True)

    def add(self, count: int, file: str) -> None:
        self.done += count
        now = time.monotonic()
        dt = now - self._last_sample
        if dt >= PROGRESS_EVERY_S:
            instant = (self.done - self._sample_done) / dt
            if now - self._began >= MIN_RATE_WINDOW_S:
                weight = 1 - 0.5 ** (dt / RATE_HALF_LIFE_S)
                self.rate = (
                    instant if self.rate is None else self.rate + weight * (instant - self.rate)
                )
            self._last_sample, self._sample_done = now, self.done
        self.emit("copying", file)

    def emit(self, phase: Phase, file: str | None = None, force: bool = False) -> None:
        if self.report is None:
            return
        now = time.monotonic()
        if not force and now - self._last_emit < PROGRESS_EVERY_S:
            return
        self._last_emit = now
        done = self.total if phase == "verified" else min(self.done, self.total)
        eta = None
        if self.rate and phase == "copying":
            eta = max(0.0, (self.total - done) / self.rate)
        elif phase == "verified":
            eta = 0.0
        self.report(CopyProgress(self.node, phase, done, self.total, self.rate, eta, file))


def _cancelled(target: Target, manifest: Manifest) -> CopyCancelled:
    return CopyCancelled(
        f"Copy of {manifest.name} to {target.name} stopped; what arrived is kept and the "
        "next copy continues from there."
    )


def _marker(manifest: Manifest, old_marker: str | None) -> Manifest:
    """What the folder holds verified once this copy is in: the old marker's files of
    this model plus this manifest's."""
    files = {entry.name: entry for entry in manifest.files}
    if old_marker is not None:
        with contextlib.suppress(ManifestError):
            previous = Manifest.from_json(old_marker)
            if previous.model_id == manifest.model_id:
                files = {entry.name: entry for entry in previous.files} | files
    return Manifest(manifest.name, tuple(files.values()), manifest.model_id)


def _cancel_check(cancel: Cancel) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return cancel
