"""Fuse: an adapter and its base model written as one new model folder the library lists.

The work is mlx-lm's (``core.worker.fuse``: ``load(adapter_path=...)``, each layer's
``fuse``, ``save``), run as a subprocess so the process asking (the window) never
imports mlx. The folder is ``<base>-<adapter>`` in ``core.paths.models_dir()``, which
the model library lists with the folders people added; it has the base's format (a
quantized base stays quantized) unless ``dequantize``.

``fuse_adapter`` blocks (run it off the GUI thread); ``cancel`` (set from any thread)
ends the subprocess, leaving no half-written folder.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from core import paths
from core.model.adapter import AdapterError, check_adapter
from core.model.info import ModelError, read_model_info


class FuseError(Exception):
    """The fuse cannot be done; the message says why, in one line."""


@dataclass(frozen=True)
class Fused:
    path: Path  # the new model folder
    base: str  # the base model's name
    adapter: str  # the adapter's name


def fused_name(base: str, adapter: str) -> str:
    """``<base>-<adapter>`` as a folder name (unsafe characters as ``_``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{base}-{adapter}").strip("._-")
    return name or "fused-model"


def free_folder(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... the first that does not exist."""
    candidate, n = parent / name, 1
    while candidate.exists() or candidate.with_name(candidate.name + ".partial").exists():
        n += 1
        candidate = parent / f"{name}-{n}"
    return candidate


def fuse_adapter(
    model: Path | str,
    adapter: Path | str,
    *,
    dest: Path | None = None,
    dequantize: bool = False,
    python: str = sys.executable,
    cancel: threading.Event | None = None,
) -> Fused:
    """Write ``model`` + ``adapter`` fused as a new model folder (``dest``, else a free
    ``<base>-<adapter>`` in ``models_dir()``). FuseError (one line) when the adapter does
    not fit the model, the subprocess fails, or ``cancel`` was set."""
    try:
        info = read_model_info(Path(model))
        use = check_adapter(info, adapter)
    except (ModelError, AdapterError) as exc:
        raise FuseError(str(exc)) from None
    out = dest or free_folder(paths.models_dir(), fused_name(info.name, use.name))
    argv = [python, "-m", "core.worker.fuse", "--model", str(info.path)]
    argv += ["--adapter", str(use.path), "--out", str(out)]
    if dequantize:
        argv.append("--dequantize")
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    stopper = _stopper(proc, cancel)
    try:
        stdout, stderr = proc.communicate()
    finally:
        stopper.set()
        # however it ended, no half-written folder stays (the worker removes it too)
        shutil.rmtree(out.with_name(out.name + ".partial"), ignore_errors=True)
    if cancel is not None and cancel.is_set():
        raise FuseError(f"the fuse of {use.name} into {info.name} was stopped; nothing was kept")
    result = _last_json(stdout)
    if proc.returncode != 0 or "path" not in result:
        why = result.get("error") or _last_line(stderr) or f"exit code {proc.returncode}"
        raise FuseError(f"could not fuse {use.name} into {info.name}: {why}")
    return Fused(Path(result["path"]), info.name, use.name)


def _stopper(proc: subprocess.Popen[str], cancel: threading.Event | None) -> threading.Event:
    """A thread ending ``proc`` when ``cancel`` is set; set the returned event to end it."""
    done = threading.Event()
    if cancel is None:
        return done

    def watch() -> None:
        while not done.is_set():
            if cancel.wait(0.1):
                proc.terminate()  # the worker removes its .partial folder as it exits
                return

    threading.Thread(target=watch, name="macmesh-fuse-cancel", daemon=True).start()
    return done


def _last_json(text: str) -> dict[str, str]:
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
    return {}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
