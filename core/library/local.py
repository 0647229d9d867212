"""The models already on this Mac, found without being asked.

- the Hugging Face cache, read with ``huggingface_hub.scan_cache_dir`` (where mlx_lm,
  LM Studio's MLX engine and most tools put models), honouring ``HF_HUB_CACHE`` and
  ``HF_HOME`` at call time;
- LM Studio's models folders, ``~/.lmstudio/models`` and the older
  ``~/.cache/lm-studio/models`` (``publisher/model/`` inside);
- the folders the person added (``library_folders`` in MacMesh's settings);
- the models MacMesh made: adapters fused into their base (``core.tune.fuse``), in
  ``core.paths.models_dir()``.

A cache entry huggingface_hub reports as corrupt (a broken symlink, a ref to a missing
snapshot) or that holds an interrupted ``.incomplete`` blob is listed as broken, never
dropped and never raised: one bad folder does not hide the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from core import paths
from core.library.entries import (
    LibraryEntry,
    Source,
    State,
    complete_entry,
    entry_for_folder,
    weight_kinds,
)
from core.library.memo import Memo

REPO_PREFIX = "models--"


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache as huggingface_hub resolves it, read now (its own
    constants are read once at import)."""
    env = os.environ
    chosen = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if chosen:
        return Path(os.path.expandvars(chosen)).expanduser()
    home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def lm_studio_dirs() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def list_library(
    added: Sequence[str] = (),
    *,
    hub_cache: Path | None = None,
    lm_studio: Sequence[Path] | None = None,
    checked: bool = True,
) -> list[LibraryEntry]:
    """Every model found: Hugging Face cache first, then LM Studio, then added folders,
    then the models MacMesh made (fused adapters), each sorted by name. Never raises.
    Folders unchanged since the last listing are not validated again
    (``core.library.memo``). ``checked=False`` lists at once: a folder
    not validated before is a quick entry (``LibraryEntry.checked`` False) from its
    config and file names, for ``complete_library`` to validate next."""
    memo = Memo.load()
    entries = hf_cache_entries(hub_cache or hub_cache_dir(), memo, checked=checked)
    for root in lm_studio_dirs() if lm_studio is None else lm_studio:
        entries += lm_studio_entries(root, memo, checked=checked)
    entries += added_entries(added, memo, checked=checked)
    entries += own_entries(memo, checked=checked)
    memo.save()
    return entries


def complete_library(entries: Sequence[LibraryEntry]) -> list[LibraryEntry]:
    """The entries with every quick one validated (and remembered)."""
    if all(entry.checked for entry in entries):
        return list(entries)
    memo = Memo.load()
    done = [complete_entry(entry, memo) for entry in entries]
    memo.keep_others()
    memo.save()
    return done


def find_entry(name: str, entries: Iterable[LibraryEntry]) -> LibraryEntry | None:
    """The entry called ``name`` (as ``macmesh models`` lists it); a usable one first."""
    matches = [entry for entry in entries if entry.name == name]
    usable = [entry for entry in matches if entry.usable]
    chosen = usable or matches
    return chosen[0] if chosen else None


def hf_cache_entries(
    cache: Path, memo: Memo | None = None, *, checked: bool = True
) -> list[LibraryEntry]:
    """The model repos in a Hugging Face cache, one entry each (the revision ``main``
    points at, else the newest)."""
    if not cache.is_dir():
        return []
    repos, damaged, incomplete_files = _scan(cache)
    incomplete: dict[Path, int] = {}
    for partial in incomplete_files:
        repo_path = partial.file_path.parent.parent
        incomplete[repo_path] = incomplete.get(repo_path, 0) + 1
    entries = []
    listed = set()
    for repo in repos:
        if repo.repo_type != "model":
            continue
        try:
            entry = _repo_entry(repo, incomplete.get(repo.repo_path, 0), memo, checked)
        except OSError as error:  # a loop or a vanished file met while reading it
            damaged.append((repo.repo_path, str(error)))
            continue
        listed.add(repo.repo_path.name)
        if entry is not None:
            entries.append(entry)
    for repo_path, warning in damaged:  # repos huggingface_hub found corrupt
        if repo_path.name in listed:
            continue
        listed.add(repo_path.name)
        entries.append(
            LibraryEntry(
                name=_repo_id(repo_path.name),
                source=Source.HUGGING_FACE,
                path=repo_path,
                state=State.BROKEN,
                reason=f"the cache entry is damaged ({warning}). Download the model again",
            )
        )
    return sorted(entries, key=lambda e: e.name.lower())


def _scan(cache: Path) -> tuple[list[Any], list[tuple[Path, str]], list[Any]]:
    """(the cache's repos, the damaged ones with why, the unfinished blobs). huggingface_hub's
    ``scan_cache_dir`` stops at the first error it does not expect (a snapshot that is a
    symlink loop raises OSError); then each repo is scanned alone, so one bad entry is
    listed as damaged and the rest still show."""
    from huggingface_hub import scan_cache_dir

    try:
        scan = scan_cache_dir(cache)
    except (OSError, ValueError, RuntimeError):
        pass
    else:
        damaged = [
            (repo_path, str(warning))
            for warning in scan.warnings
            for repo_path in _repos_named_in(cache, str(warning))
        ]
        return list(scan.repos), damaged, list(scan.incomplete_files)
    from huggingface_hub import CacheNotFound, CorruptedCacheException
    from huggingface_hub.utils._cache_manager import _scan_cached_repo, _scan_incomplete_files

    repos, damaged = [], []
    try:
        folders = sorted(p for p in cache.iterdir() if p.name.startswith(REPO_PREFIX))
    except OSError:
        return [], [], []
    for folder in folders:
        try:
            repos.append(_scan_cached_repo(folder))
        except (CorruptedCacheException, CacheNotFound, OSError, RuntimeError) as error:
            damaged.append((folder, " ".join(str(error).split())[:200]))
    try:
        incomplete = list(_scan_incomplete_files(cache))
    except OSError:
        incomplete = []
    return repos, damaged, incomplete


def _repo_entry(
    repo: object, partial_blobs: int, memo: Memo | None, checked: bool = True
) -> LibraryEntry | None:
    from huggingface_hub import CachedRepoInfo

    assert isinstance(repo, CachedRepoInfo)
    revisions = sorted(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
    if not revisions:
        return None
    revision = revisions[-1]
    names = [file.file_name for file in revision.files]
    if not weight_kinds(names) and not partial_blobs:
        return None  # only a description was fetched (config.json to plan): not a download
    problem = None
    if partial_blobs:
        problem = (
            f"a download was interrupted ({partial_blobs} unfinished file"
            f"{'s' if partial_blobs > 1 else ''}): run `macmesh models download "
            f"{repo.repo_id}` to finish it"
        )
    entry = entry_for_folder(
        repo.repo_id,
        Source.HUGGING_FACE,
        revision.snapshot_path,
        size_bytes=revision.size_on_disk,
        revision=revision.commit_hash,
        problem=problem,
        memo=memo,
        checked=checked,
    )
    return entry


def _repos_named_in(cache: Path, message: str) -> list[Path]:
    try:
        repos = [p for p in cache.iterdir() if p.name.startswith(REPO_PREFIX)]
    except OSError:
        return []
    return [p for p in repos if str(p) + os.sep in message or message.endswith(str(p) + ").")]


def _repo_id(folder_name: str) -> str:
    return folder_name[len(REPO_PREFIX) :].replace("--", "/")


def lm_studio_entries(
    root: Path, memo: Memo | None = None, *, checked: bool = True
) -> list[LibraryEntry]:
    """``root/publisher/model/`` folders, named ``publisher/model``."""
    entries = []
    for publisher in _subfolders(root):
        for folder in _subfolders(publisher):
            name = f"{publisher.name}/{folder.name}"
            entries.append(
                entry_for_folder(name, Source.LM_STUDIO, folder, memo=memo, checked=checked)
            )
    return sorted(entries, key=lambda e: e.name.lower())


def added_entries(
    folders: Sequence[str], memo: Memo | None = None, *, checked: bool = True
) -> list[LibraryEntry]:
    """Each added folder is a model, or (no config.json) a folder of model folders."""
    entries = []
    for text in folders:
        folder = Path(text).expanduser()
        if not (folder / "config.json").exists() and folder.is_dir():
            inner = [f for f in _subfolders(folder) if (f / "config.json").exists()]
            if inner:
                entries += [
                    entry_for_folder(f.name, Source.FOLDER, f, memo=memo, checked=checked)
                    for f in inner
                ]
                continue
        name = folder.name or str(folder)
        entries.append(entry_for_folder(name, Source.FOLDER, folder, memo=memo, checked=checked))
    return entries


def own_entries(memo: Memo | None = None, *, checked: bool = True) -> list[LibraryEntry]:
    """The models MacMesh made (``paths.models_dir()``: adapters fused into their base)."""
    try:
        own = paths.models_dir()
    except paths.FolderError:
        return []
    inner = [f for f in _subfolders(own) if (f / "config.json").exists()]
    inner = [f for f in inner if not f.name.endswith(".partial")]
    return [entry_for_folder(f.name, Source.FOLDER, f, memo=memo, checked=checked) for f in inner]


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
