"""What a person types for a model → a ModelInfo: a folder, a library name, or ``hf:``.

- a folder path: read as ever; to plan only, a folder of header-only safetensors files
  (a model's layout without its weights) too, marked ``weights_absent``;
- ``demo`` (or the demo model's own name, ``SmolLM2-135M-Instruct-mlx-q4``): the demo
  model, converted into the cache folder first when it is not yet (a folder of that name
  wins);
- ``ORG/NAME`` as ``macmesh models`` lists it (a folder of that name wins);
- ``hf:ORG/NAME`` (or a huggingface.co link): the copy in the Hugging Face cache when
  there is one, else, to plan only, the Hub's headers (nothing downloaded). To run, a
  model must be on this Mac: the message says how to download it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from core.library.entries import LibraryEntry, Source, entry_for_folder
from core.library.hub import hub_model_info, repo_id_of, repo_of_header_copy
from core.library.local import find_entry, list_library
from core.model.demo_model import (
    FOLDER_NAME,
    DemoModelUnavailable,
    demo_model_dir,
    ensure_demo_model,
    is_complete,
)
from core.model.info import ModelError, ModelInfo, read_model_info
from core.settings import load_settings

DEMO_NAMES = ("demo", FOLDER_NAME.lower(), "smollm2-135m-instruct")


def demo_model() -> Path:
    """The demo model's folder, converted first if need be; ModelError (one line) when
    its package is missing."""
    try:
        return ensure_demo_model()
    except DemoModelUnavailable as error:
        raise ModelError(f"The demo model is not available: {error}") from None


DEMO_NOT_YET = (
    f"{FOLDER_NAME} · the demo model (`demo` names it): not converted yet; "
    "`macmesh plan demo` or `macmesh demo --headless` converts it"
)


def demo_entry() -> LibraryEntry | None:
    """The demo model as ``macmesh models`` lists it; None before it is converted."""
    folder = demo_model_dir()
    return entry_for_folder(FOLDER_NAME, Source.DEMO, folder) if is_complete(folder) else None


def library_with_demo(folders: Sequence[str], *, checked: bool = True) -> list[LibraryEntry]:
    """The models on this Mac as ``macmesh models`` and the window's library list them:
    ``list_library``'s, then the demo model once it is converted (``demo`` names it)."""
    entries = list_library(folders, checked=checked)
    demo = demo_entry()
    return [*entries, demo] if demo is not None else entries


def resolve_model(text: str, *, to_run: bool = False) -> ModelInfo:
    """The ModelInfo ``text`` names; ModelError (one line) when it names nothing usable."""
    text = str(text).strip()
    if not text:
        raise ModelError("No model given: a folder, a name from `macmesh models`, or hf:ORG/NAME.")
    folder = Path(text).expanduser()
    hub_ref = text.startswith("hf:") or "huggingface.co/" in text or "hf.co/" in text
    if not hub_ref and folder.exists():
        info = read_model_info(folder, header_only_ok=not to_run)
        repo = repo_of_header_copy(folder) if info.weights_absent else None
        return replace(info, name=repo) if repo else info  # not the commit's hash
    if text.lower() in DEMO_NAMES:
        return read_model_info(demo_model())
    repo_id = repo_id_of(text)
    if repo_id is None:
        return read_model_info(folder)  # says plainly that the folder is not there
    entries = list_library(load_settings().library_folders)
    if hub_ref:
        entries = [e for e in entries if e.source is Source.HUGGING_FACE]
    entry = find_entry(repo_id, entries)
    if entry is not None:
        if entry.info is None:
            raise ModelError(f"{entry.name} on this Mac cannot be used: {entry.reason}.")
        return entry.info
    if not hub_ref:
        raise ModelError(
            f"{text} is neither a folder nor a model on this Mac (`macmesh models` lists "
            f"them). For Hugging Face's {repo_id}, use hf:{repo_id}."
        )
    if to_run:
        raise ModelError(
            f"{repo_id} is not downloaded yet: run `macmesh models download {repo_id}` first "
            f"(`macmesh plan hf:{repo_id}` plans it without downloading)."
        )
    return hub_model_info(repo_id)
