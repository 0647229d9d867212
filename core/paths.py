"""Where MacMesh keeps its files: the user's platform folders, never the app bundle.

Each folder can be moved with an environment variable (tests and the packaged
app's self-check use them to run in a temporary home).
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from core.envvars import ENV_CACHE_DIR, ENV_CONFIG_DIR, ENV_LOG_DIR

APP_NAME = "MacMesh"


def _dir(env: str, default: Path) -> Path:
    path = Path(os.environ[env]) if os.environ.get(env) else default
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    """Regenerable data: converted demo model, run logs."""
    return _dir(ENV_CACHE_DIR, platformdirs.user_cache_path(APP_NAME, appauthor=False))


def config_dir() -> Path:
    """Settings and known hosts, in files the core owns (DESIGN.md rule 6)."""
    return _dir(ENV_CONFIG_DIR, platformdirs.user_config_path(APP_NAME, appauthor=False))


def log_dir() -> Path:
    """Per-run folders with each rank's log."""
    return _dir(ENV_LOG_DIR, platformdirs.user_log_path(APP_NAME, appauthor=False))
