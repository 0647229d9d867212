"""The served models as a front end drives them, from any thread but the server's: list
them (``models``), unload one (``unload``), and add a model folder where the plan shows it
fits beside the loaded ones (``fits``, then ``add``: it loads). Blocking: the window calls
these off its GUI thread (``gui/run/models_panel.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.model.info import read_model_info
from core.run.session import Session
from core.serve.keep_alive import DEFAULT_KEEP_ALIVE_S
from core.serve.model_list import describe
from core.serve.models import ModelSpec
from core.serve.serve_many import ManyServer

LOAD_WITHIN_S = 900.0


class ServedModels:
    """``server``'s models; ``session_for(folder)`` makes a new model's session."""

    def __init__(
        self, server: ManyServer, session_for: Callable[[Path], Callable[[], Session]]
    ) -> None:
        self.server, self._session_for = server, session_for

    def models(self) -> list[dict[str, Any]]:
        """Every model as ``model_list.describe`` says it."""

        async def listed() -> list[dict[str, Any]]:
            registry = self.server.registry
            return [describe(e) for e in registry.entries.values()]

        return self.server.call(listed(), 30)

    def unload(self, name: str) -> bool:
        return self.server.call(self.server.registry.unload(name, "unloaded in the window"))

    def spec(self, folder: Path) -> ModelSpec:
        """The model in ``folder`` as a loadable model (ModelError when it is none)."""
        info = read_model_info(folder)
        return ModelSpec(info.name, self._session_for(folder), False, DEFAULT_KEEP_ALIVE_S)

    def fits(self, folder: Path) -> str:
        """ "" when the model in ``folder`` fits beside the loaded models; else why not."""
        spec = self.spec(folder)
        if spec.name in self.server.registry.entries:
            return f"{spec.name} is served already"
        return self.server.call(self.server.registry.fits_beside(spec), LOAD_WITHIN_S)

    def add(self, folder: Path) -> str:
        """Add the model in ``folder`` and load it; its name. APIError when it cannot."""
        spec = self.spec(folder)

        async def added() -> str:
            registry = self.server.registry
            registry.add(spec)
            await registry.ensure(spec.name)
            return spec.name

        return self.server.call(added(), LOAD_WITHIN_S)
