"""The window's models panel's view of the API (issue 37): the models the API serves now,
whichever server the API runs (it restarts with each job and setting). Light to import:
the server's modules load when it starts. Blocking: called off the GUI thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from core.serve.service import ApiService

NOT_SERVING = "The API is not serving: turn it on and Start a job first."


class ModelsControl(Protocol):
    """What the models panel calls (``core.serve.models_control.ServedModels``'s face)."""

    def models(self) -> list[dict[str, Any]]: ...

    def unload(self, name: str) -> bool: ...

    def fits(self, folder: Path) -> str: ...

    def add(self, folder: Path) -> str: ...


class ServiceModels:
    """``service``'s served models: none while it does not serve."""

    def __init__(self, service: ApiService) -> None:
        self.service = service

    def _now(self) -> ModelsControl:
        models = self.service.models
        if models is None:
            raise ValueError(NOT_SERVING)
        return models

    def models(self) -> list[dict[str, Any]]:
        models = self.service.models
        return models.models() if models is not None else []

    def unload(self, name: str) -> bool:
        return self._now().unload(name)

    def fits(self, folder: Path) -> str:
        return self._now().fits(folder)

    def add(self, folder: Path) -> str:
        return self._now().add(folder)
