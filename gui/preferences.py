"""What the window remembers, in two places (docs/design.md, rule 6):

- the person's choices (last model, strategy, ...) in the core's settings file
  (``core.settings``), shared with the command line;
- window geometry and splitter positions in QSettings, which is what it is for.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QMainWindow, QSplitter

from core.settings import Settings, load_settings, save_settings

log = logging.getLogger(__name__)


class Preferences:
    """The core settings, saved whenever something changes (a small atomic write)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else load_settings()

    def update(self, **changes: object) -> None:
        try:
            updated = self.settings.updated(**changes)
        except ValueError as error:
            log.warning("not saving a bad setting: %s", error)
            return
        if updated == self.settings:
            return
        self.settings = updated
        try:
            save_settings(updated)
        except OSError as error:
            log.warning("could not save the settings: %s", error)


def restore_window(window: QMainWindow, splitters: dict[str, QSplitter]) -> bool:
    """Geometry and splitter positions of the last session; False when there were none."""
    store = QSettings()
    geometry = store.value("window/geometry")
    restored = isinstance(geometry, QByteArray) and window.restoreGeometry(geometry)
    for name, splitter in splitters.items():
        state = store.value(f"window/{name}")
        if isinstance(state, QByteArray):
            splitter.restoreState(state)
    return bool(restored)


def save_window(window: QMainWindow, splitters: dict[str, QSplitter]) -> None:
    store = QSettings()
    store.setValue("window/geometry", window.saveGeometry())
    for name, splitter in splitters.items():
        store.setValue(f"window/{name}", splitter.saveState())
    store.sync()
