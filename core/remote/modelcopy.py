"""Copy a model to a node over SSH: only the files it lacks, resumable, verified, atomic.

Layout on the node, under its cache root (``Target.cache_root``, else the node user's
``~/Library/Caches/MacMesh`` on macOS, ``~/.cache/macmesh`` elsewhere)::

    models/<name>-<model id[:12]>/           complete, verified files only
    models/<name>-<model id[:12]>/.macmesh-manifest.json   written last: "complete"
    models/<name>-<model id[:12]>.partial/   files on their way (resumed from their size)

A file is streamed into ``.partial``, its SHA-256 computed *on the node* (by the node's
Python as it writes; else ``sha256sum``, or ``shasum -a 256`` on macOS) and compared with
the manifest; only when every file a node needs is verified are they moved (``mv``,
atomic within a file system) into the folder, and the marker is written last. So a
half-copied model never passes ``check``: its files are missing from the folder, or the
hash check fails. The marker also records each file's size and mtime as the node saw
them: a file whose mtime changed since is hashed again by the cheap check, and a file
MacMesh wrote whose hash no longer matches is copied again (repaired); ``verify`` hashes
every file. Without that, a check says "present (size checked)", not "verified".

Different models never share a folder (the folder's name carries the model id). A folder
of that name whose files differ from the manifest (edited, corrupted, or a hash prefix
collision) is refused with ``DifferentModel``, naming the folder to remove: MacMesh never
overwrites files it did not write (our call: a person may have put them there on purpose).

Resuming: a restarted copy keeps the folder's verified files, hashes ``.partial`` files
that are complete, and continues shorter ones from their size on the node, so it re-sends
only what never arrived (the final hash covers the resumed prefix; if that fails the file
is sent once more from the start).

How the bytes travel: ``core.remote.transport``; why (measured): ``docs/copy-transport.md``.

Threads: ``copy_model`` and ``check`` block; run them in an executor (one per node).
``progress`` is called on the copying thread; ``cancel`` is polled between chunks.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from core import units
from core.model.manifest import FileEntry, Manifest, ManifestError
from core.remote.ssh import Connection, Result
from core.remote.targets import Target
from core.remote.transport import (
    MTIME_SH,
    CopyCancelled,
    EarlyReceiver,
    ModelCopyError,
    commit_on_node,
    commit_payload,
    hash_on_node,
    send_files,
)

__all__ = [
    "CheckResult",
    "CopyCancelled",
    "CopyProgress",
    "CopyResult",
    "DifferentModel",
    "ModelCopyError",
    "cache_root",
    "check",
    "copy_model",
    "describe",
    "folder_name",
    "remote_model_dir",
]

PROGRESS_EVERY_S = 0.1
RATE_HALF_LIFE_S = 2.0  # the ETA's rate forgets half its past every 2 s
MIN_RATE_WINDOW_S = 0.5  # no ETA before half a second of transfer

Status = Literal["present", "missing", "different"]
Phase = Literal["copying", "verifying", "verified"]
Cancel = threading.Event | Callable[[], bool] | None


class DifferentModel(ModelCopyError):
    """The node's folder holds files other than the manifest's: refused, never overwritten."""


@dataclass(frozen=True)
class CheckResult:
    """``present``: every needed file is there and verified. ``missing``: ``missing``
    lists what to copy. ``different``: ``reason`` says which file differs and how."""

    node: str
    status: Status
    folder: str
    missing: tuple[str, ...] = ()
    missing_bytes: int = 0
    reason: str = ""
    verified: bool = False  # every file's SHA-256 was computed on the node just now
    damaged: tuple[str, ...] = ()  # of ``missing``: files MacMesh wrote that changed since
    to_write_bytes: int = 0  # what the copy still writes there (``.partial`` counted)
    free_bytes: int | None = None  # free space at the folder (df), None when unknown

    @property
    def short_bytes(self) -> int:
        """How much more free space the copy needs there (0: enough, or unknown)."""
        if self.free_bytes is None:
            return 0
        return max(0, self.to_write_bytes - self.free_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "status": self.status,
            "folder": self.folder,
            "missing": list(self.missing),
            "missing_bytes": self.missing_bytes,
            "reason": self.reason,
            "verified": self.verified,
            "damaged": list(self.damaged),
            "to_write_bytes": self.to_write_bytes,
            "free_bytes": self.free_bytes,
        }


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


# -- where the model goes ------------------------------------------------------------------

_roots: dict[tuple[str, int, str | None], str] = {}
_roots_lock = threading.Lock()
_ROOT_SCRIPT = (
    'if [ "$(uname)" = Darwin ]; then echo "$HOME/Library/Caches/MacMesh"; '
    'else echo "${XDG_CACHE_HOME:-$HOME/.cache}/macmesh"; fi'
)


def folder_name(manifest: Manifest) -> str:
    """``<name>-<model id[:12]>``: a readable name that two different models never share."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", manifest.name).strip("._") or "model"
    return f"{safe}-{manifest.model_id[:12]}"


def cache_root(target: Target, connection: Connection | None = None) -> str:
    """The node's cache root: ``target.cache_root``, else asked once per node over SSH."""
    if target.cache_root:
        return target.cache_root.rstrip("/") or "/"
    key = (target.host, target.port, target.user)
    with _roots_lock:
        if key in _roots:
            return _roots[key]
    with _session(target, connection) as conn:
        result = conn.run(["/bin/sh", "-c", _ROOT_SCRIPT], timeout=30)
    root = result.stdout.strip()
    if result.rc != 0 or not root.startswith("/"):
        raise ModelCopyError(
            f"Could not find the cache folder on {target.name}: "
            f"{result.stderr.strip() or root or 'no answer'}. Set its cache folder by hand."
        )
    with _roots_lock:
        _roots[key] = root
    return root


def remote_model_dir(
    target: Target, manifest: Manifest, connection: Connection | None = None
) -> str:
    """The absolute folder on ``target`` where this model lives (for the worker's --model)."""
    return f"{cache_root(target, connection)}/models/{folder_name(manifest)}"


# -- what the node has -----------------------------------------------------------------------


@dataclass(frozen=True)
class RemoteState:
    """What one round trip saw on the node (pure data, for ``evaluate``)."""

    folder_exists: bool
    marker: str | None  # the marker's text
    have: Mapping[str, int] = field(default_factory=dict)  # folder file → size
    partial: Mapping[str, int] = field(default_factory=dict)  # .partial file → size
    odd: tuple[str, ...] = ()  # names that exist but are not regular files
    python: bool = False  # the node has the target's Python (the fast receiver and hasher)
    mtimes: Mapping[str, str] = field(default_factory=dict)  # folder file → mtime (MTIME_SH)
    free_bytes: int | None = None  # free space where the folder is (or would be)


_STATE_SCRIPT = (
    MTIME_SH
    + r"""
D=$1; S=$2; PY=$3; shift 3
[ -d "$D" ] && echo "@@dir"
command -v "$PY" >/dev/null 2>&1 && echo "@@python"
P=$D; while [ ! -d "$P" ]; do P=$(dirname "$P"); done
printf '@@df\t%s\n' "$(df -Pk "$P" 2>/dev/null | tail -n 1)"
if [ -f "$D/.macmesh-manifest.json" ]; then
  echo "@@marker"; cat "$D/.macmesh-manifest.json"; echo; echo "@@end"
fi
for f in "$@"; do
  if [ -f "$D/$f" ]; then printf 'have\t%s\t%s\n' "$(wc -c < "$D/$f" | tr -d ' ')" "$f"
    printf 'mtime\t%s\t%s\n' "$(mt "$D/$f")" "$f"
  elif [ -e "$D/$f" ]; then printf 'odd\t0\t%s\n' "$f"; fi
  if [ -f "$S/$f" ]; then printf 'part\t%s\t%s\n' "$(wc -c < "$S/$f" | tr -d ' ')" "$f"; fi
done
"""
)


def parse_df(line: str) -> int | None:
    """Free bytes from the data line of ``df -Pk`` (POSIX: name, 1024-blocks, used,
    available, capacity%, mount point; the name and the mount point may hold spaces),
    None when it is not one."""
    found = re.search(r"(?:^|\s)(\d+)\s+(\d+)\s+(\d+)\s+(\d+|-)%(?:\s|$)", line)
    return int(found.group(3)) * 1024 if found else None


def parse_state(output: str) -> RemoteState:
    lines = output.splitlines()
    marker_lines: list[str] | None = None
    have: dict[str, int] = {}
    partial: dict[str, int] = {}
    odd: list[str] = []
    mtimes: dict[str, str] = {}
    free: int | None = None
    exists = python = False
    inside = False
    for line in lines:
        if inside:
            if line == "@@end":
                inside = False
            elif marker_lines is not None:  # always, once inside
                marker_lines.append(line)
            continue
        if line == "@@dir":
            exists = True
        elif line == "@@python":
            python = True
        elif line == "@@marker":
            inside, marker_lines = True, []
        elif line.startswith("@@df\t"):
            free = parse_df(line[5:])
        elif line.count("\t") >= 2:
            kind, size, name = line.split("\t", 2)
            if kind == "have" and size.isdigit():
                have[name] = int(size)
            elif kind == "mtime" and size:
                mtimes[name] = size
            elif kind == "part" and size.isdigit():
                partial[name] = int(size)
            elif kind == "odd":
                odd.append(name)
    marker = "\n".join(marker_lines) if marker_lines is not None else None
    return RemoteState(exists, marker, have, partial, tuple(odd), python, mtimes, free)


def marker_stats(text: str, marker: Manifest) -> dict[str, tuple[int, str]]:
    """The marker's ``"stat"``: file → (size, mtime) as the node saw them when it was
    written (COMMIT_SCRIPT); {} for a marker without them or with malformed ones."""
    try:
        stats = json.loads(text).get("stat")
    except (ValueError, AttributeError):
        return {}
    found: dict[str, tuple[int, str]] = {}
    if not isinstance(stats, list) or len(stats) != len(marker.files):
        return found
    for entry, stat in zip(marker.files, stats, strict=True):
        match stat:
            case [int(size), str(mtime)] if mtime:
                found[entry.name] = (size, mtime)
    return found


@dataclass(frozen=True)
class Evaluation:
    """``ok``: files verified in the folder; ``to_hash``: present with the right size but
    not yet vouched for (no marker entry, its mtime changed since, or ``verify``);
    ``missing``; ``different``: name → why. ``recheck``: of ``to_hash``, the files the
    marker vouched for (MacMesh wrote them): a hash that no longer matches means damage,
    repaired by copying them again, not another model's file."""

    ok: tuple[str, ...]
    to_hash: tuple[str, ...]
    missing: tuple[str, ...]
    different: dict[str, str]
    recheck: tuple[str, ...] = ()


def evaluate(
    manifest: Manifest,
    state: RemoteState,
    verify: bool = False,
    damaged: Collection[str] = (),
) -> Evaluation:
    """Pure: which needed files are fine, to be hashed, missing or different. Cheap path:
    a marker entry with the same hash, the same size on disk and (when the marker has
    it) the same mtime vouches for a file (the marker is only written after the node
    hashed it). ``verify`` hashes every file. ``damaged``: files a check just found
    changed since MacMesh wrote them: missing again (copied again)."""
    different: dict[str, str] = {}
    recorded: dict[str, FileEntry] = {}
    stats: dict[str, tuple[int, str]] = {}
    if state.marker is not None:
        try:
            marker = Manifest.from_json(state.marker)
        except ManifestError:
            marker = None  # unreadable marker: trust nothing, hash everything
        if marker is not None and marker.model_id != manifest.model_id:
            reason = f"the folder holds another model (id {marker.model_id[:12]})"
            return Evaluation((), (), (), {"*": reason})
        recorded = {entry.name: entry for entry in marker.files} if marker else {}
        stats = marker_stats(state.marker, marker) if marker else {}
    ok, to_hash, missing, recheck = [], [], [], []
    for entry in manifest.files:
        if entry.name in state.odd:
            different[entry.name] = "it is not a regular file"
            continue
        size = state.have.get(entry.name)
        known = recorded.get(entry.name)
        if known is not None and known.sha256 != entry.sha256:
            different[entry.name] = "it is another version of that file (its hash differs)"
        elif size is None:
            missing.append(entry.name)
        elif size != entry.size:
            different[entry.name] = f"it has {size:,} bytes instead of {entry.size:,}"
        elif known is not None and entry.name in damaged:
            missing.append(entry.name)
        elif known is not None and not verify and not _touched(entry.name, state, stats):
            ok.append(entry.name)
        else:
            to_hash.append(entry.name)
            if known is not None:
                recheck.append(entry.name)
    return Evaluation(tuple(ok), tuple(to_hash), tuple(missing), different, tuple(recheck))


def _touched(name: str, state: RemoteState, stats: Mapping[str, tuple[int, str]]) -> bool:
    """Was ``name`` rewritten since the marker recorded it (another mtime now)?"""
    recorded, now = stats.get(name), state.mtimes.get(name)
    return recorded is not None and now is not None and recorded[1] != now


def check(
    target: Target,
    manifest: Manifest,
    *,
    verify: bool = False,
    connection: Connection | None = None,
) -> CheckResult:
    """Is ``manifest`` on ``target``? Cheap when the marker vouches for the files (sizes
    only); files without a marker entry (a model copied by hand) are hashed on the node.
    ``verify`` hashes everything. Raises ``SSHError`` when the node cannot be reached."""
    with _session(target, connection) as conn:
        folder = remote_model_dir(target, manifest, conn)
        state = _remote_state(conn, target, folder, manifest.names)
        result = evaluate(manifest, state, verify)
        hashed: dict[str, str] = {}
        if result.to_hash and not result.different:
            hashed = hash_on_node(conn, target, folder, manifest, result.to_hash)
    return _verdict(target.name, folder, manifest, result, hashed, state)


def _verdict(
    node: str,
    folder: str,
    manifest: Manifest,
    result: Evaluation,
    hashed: Mapping[str, str],
    state: RemoteState | None = None,
) -> CheckResult:
    """What ``result`` and the node's ``hashed`` files say, with what the copy would
    write against the free space ``state`` saw."""
    different = dict(result.different)
    damaged = []
    for name in result.to_hash:
        entry = manifest.entry(name)
        if name in hashed and entry is not None and hashed[name] != entry.sha256:
            if name in result.recheck:
                damaged.append(name)
            else:
                different[name] = "its content differs from this Mac's copy (SHA-256 mismatch)"
    if different:
        shown = "; ".join(
            f"{name}: {why}" if name != "*" else why for name, why in list(different.items())[:3]
        )
        more = f" (and {len(different) - 3} more)" if len(different) > 3 else ""
        reason = f"{folder} on {node} does not match this model: {shown}{more}."
        return CheckResult(node, "different", folder, reason=reason)
    free = state.free_bytes if state is not None else None
    missing = (*result.missing, *damaged)
    if missing:
        size = sum(e.size for e in manifest.files if e.name in missing)
        partial = state.partial if state is not None else {}
        write = sum(
            e.size - (partial.get(e.name, 0) if partial.get(e.name, 0) <= e.size else 0)
            for e in manifest.files
            if e.name in missing
        )
        reason = ""
        if damaged:
            more = f" (and {len(damaged) - 3} more)" if len(damaged) > 3 else ""
            shown = ", ".join(damaged[:3]) + more
            reason = (
                f"{shown} on {node} changed since MacMesh copied "
                f"{'them' if len(damaged) > 1 else 'it'} (SHA-256 mismatch): copied again."
            )
        return CheckResult(
            node, "missing", folder, missing, size, reason, False, tuple(damaged), write, free
        )
    hashed_all = len(hashed) == len(manifest.files) and set(hashed) == set(manifest.names)
    return CheckResult(node, "present", folder, verified=hashed_all, free_bytes=free)


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
    with _session(target, connection) as conn:
        folder = remote_model_dir(target, manifest, conn)
        staging = folder + ".partial"
        state = _remote_state(conn, target, folder, manifest.names)
        result = evaluate(manifest, state, damaged=damaged)
        hashed = {}
        if result.to_hash and not result.different:
            hashed = hash_on_node(conn, target, folder, manifest, result.to_hash)
        verdict = _verdict(target.name, folder, manifest, result, hashed, state)
        if verdict.status == "different":
            raise DifferentModel(
                f"{verdict.reason} MacMesh will not overwrite it. If you do not need those "
                f"files, remove the folder on {target.name} (`rm -rf {shlex.quote(folder)}`) "
                "and copy again."
            )
        if verdict.damaged:  # changed since MacMesh wrote them: sent again
            result = replace(result, missing=verdict.missing)
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


def _remote_state(
    conn: Connection, target: Target, folder: str, names: Sequence[str]
) -> RemoteState:
    staging = folder + ".partial"
    argv = ["/bin/sh", "-c", _STATE_SCRIPT, "sh", folder, staging, target.interpreter, *names]
    result = _run(conn, argv)
    return parse_state(result.stdout)


def _run(conn: Connection, argv: Sequence[str], stdin: str = "", timeout: float = 60.0) -> Result:
    result = conn.run(list(argv), timeout=timeout, stdin=stdin.encode())
    if result.rc != 0:
        raise ModelCopyError(
            f"On {conn.host}, `{shlex.join(argv[:3])[:80]}…` failed: "
            f"{result.stderr.strip() or f'exit status {result.rc}'}. Is the disk full or "
            "the cache folder not writable?"
        )
    return result


def _cancel_check(cancel: Cancel) -> Callable[[], bool]:
    if cancel is None:
        return lambda: False
    if isinstance(cancel, threading.Event):
        return cancel.is_set
    return cancel


@contextlib.contextmanager
def _session(target: Target, connection: Connection | None) -> Iterator[Connection]:
    """The caller's connection (left open), or a new one closed afterwards."""
    if connection is not None:
        yield connection.connect()
        return
    conn = target.connection()
    try:
        yield conn.connect()
    finally:
        conn.close()


def describe(result: CheckResult) -> str:
    """One line for people."""
    if result.status == "present":
        how = "verified now" if result.verified else "size checked"
        return f"The model is on {result.node} ({how})."
    if result.status == "missing":
        count = len(result.missing)
        return (
            f"{result.node} lacks {count} file{'s' if count != 1 else ''} of the model "
            f"({units.size(result.missing_bytes)}): MacMesh can copy them."
        )
    return result.reason
