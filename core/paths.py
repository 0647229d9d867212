"""Where MacMesh keeps its files: the user's platform folders, never the app bundle.

Each folder can be moved with an environment variable (tests and the packaged
app's self-check use them to run in a temporary home). A folder that cannot be made or
written to is a ``FolderError`` naming the variable and what to do: every command prints
it as one line and exits 2.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from core.envvars import ENV_CACHE_DIR, ENV_CONFIG_DIR, ENV_DATA_DIR, ENV_LOG_DIR

APP_NAME = "MacMesh"


class FolderError(Exception):
    """One of MacMesh's folders cannot be used; the message says which and what to do."""


def _dir(env: str, default: Path, writable: bool = True) -> Path:
    """The folder, made and checked writable; ``writable=False`` (to read what is kept
    there) neither makes nor checks it, only that it is not a file."""
    chosen = os.environ.get(env)
    path = Path(chosen).expanduser() if chosen else default
    fix = (
        f"Point {env} at a folder MacMesh can write to, or unset it."
        if chosen
        else f"Make it writable, or set {env} to a folder MacMesh can write to."
    )
    where = f"{env}={chosen}" if chosen else f"MacMesh's folder {path}"
    if not writable:
        if path.exists() and not path.is_dir():
            raise FolderError(f"{where} is a file, not a folder. {fix}")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FolderError(f"{where} is a file, not a folder. {fix}") from None
    except OSError as error:
        raise FolderError(
            f"{where} cannot be created ({error.strerror or type(error).__name__}). {fix}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise FolderError(f"{where} is not writable. {fix}")
    return path


def cache_dir() -> Path:
    """Regenerable data: converted demo model, run logs."""
    return _dir(ENV_CACHE_DIR, platformdirs.user_cache_path(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """Settings and known hosts, in files the core owns (docs/design.md, rule 6)."""
    return _dir(ENV_CONFIG_DIR, platformdirs.user_config_path(APP_NAME, appauthor=False))


def log_dir() -> Path:
    """Per-run folders with each rank's log."""
    return _dir(ENV_LOG_DIR, platformdirs.user_log_path(APP_NAME, appauthor=False))


def data_dir(writable: bool = True) -> Path:
    """What the person made and would miss: the run history, the API's keys (0600).
    ``writable=False``: only to read it (a read-only folder, or one not made yet)."""
    default = platformdirs.user_data_path(APP_NAME, appauthor=False)
    return _dir(ENV_DATA_DIR, default, writable)


def models_dir() -> Path:
    """Models MacMesh made (an adapter fused into its base): the library lists them."""
    folder = data_dir() / "models"
    folder.mkdir(exist_ok=True)
    return folder
