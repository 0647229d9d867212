"""What a node has of a model: where the model lives there, and whether it is complete.

Layout on the node, under its cache root (``Target.cache_root``, else the node user's
``~/Library/Caches/MacMesh`` on macOS, ``~/.cache/macmesh`` elsewhere)::

    models/<name>-<model id[:12]>/           complete, verified files only
    models/<name>-<model id[:12]>/.macmesh-manifest.json   written last: "complete"
    models/<name>-<model id[:12]>.partial/   files on their way (resumed from their size)

``check`` looks in one round trip (the folder, its marker, each file's size and mtime,
the ``.partial`` files, the free space) and judges what it saw (``evaluate``, pure): a
file is present when the marker vouches for it (the marker records each file's hash,
size and mtime as the node saw them when ``core.remote.modelcopy`` wrote it), hashed on
the node when nothing vouches for it or its mtime changed since, missing, or different.
A file MacMesh wrote whose hash no longer matches is damaged: missing again, so the copy
repairs it. ``verify`` hashes every file; without it a check says "present (size
checked)", not "verified".

Different models never share a folder (the folder's name carries the model id). A folder
of that name whose files differ from the manifest (edited, corrupted, or a hash prefix
collision) is "different": the copy refuses it, naming the folder to remove.

Threads: ``check`` blocks; run it in an executor (one per node).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core import units
from core.model.manifest import FileEntry, Manifest, ManifestError
from core.remote.ssh import Connection, Result
from core.remote.targets import Target
from core.remote.transport import MTIME_SH, ModelCopyError, hash_on_node

__all__ = [
    "CheckResult",
    "Evaluation",
    "RemoteState",
    "cache_root",
    "check",
    "describe",
    "evaluate",
    "folder_name",
    "remote_model_dir",
]

Status = Literal["present", "missing", "different"]


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
    with node_session(target, connection) as conn:
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
    except (ValueError, AttributeError, RecursionError):
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
    with node_session(target, connection) as conn:
        folder = remote_model_dir(target, manifest, conn)
        state = remote_state(conn, target, folder, manifest.names)
        result = evaluate(manifest, state, verify)
        hashed: dict[str, str] = {}
        if result.to_hash and not result.different:
            hashed = hash_on_node(conn, target, folder, manifest, result.to_hash)
    return verdict(target.name, folder, manifest, result, hashed, state)


def verdict(
    node: str,
    folder: str,
    manifest: Manifest,
    result: Evaluation,
    hashed: Mapping[str, str],
    state: RemoteState | None = None,
) -> CheckResult:
    """What ``result`` and the node's ``hashed`` files say, with what the copy would
    write against the free space ``state`` saw (``check``'s answer; the copy asks it too,
    on its own connection, just before it sends)."""
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


# -- talking to the node ----------------------------------------------------------------------


def remote_state(
    conn: Connection, target: Target, folder: str, names: Sequence[str]
) -> RemoteState:
    """What the node has at ``folder`` (and its ``.partial``) of ``names``: one round trip."""
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


@contextlib.contextmanager
def node_session(target: Target, connection: Connection | None) -> Iterator[Connection]:
    """The caller's connection (left open), or a new one closed afterwards (the copy
    opens its node's connection the same way)."""
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
