"""An adapter fused into the model on every rank, as a payload (``core.run.payload``).

Made from the model and the adapter's folder, checked at once against the model
(``core.model.adapter.check_adapter``: ``AdapterError``, one line, before anything
starts). During the copy step the session ships it to every node the plan uses (its
few files, by the model copy's machinery: ``core.remote.adaptercopy``), and the job's
spec gets ``adapter`` and, on real Macs, each rank's folder on its node
(``rank_adapters``). Front ends read its ``name`` and ``path`` from the session
(``session.payload_of(AdapterPayload)``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.model.adapter import AdapterUse, check_adapter
from core.remote.adaptercopy import adapter_folder, put_adapter
from core.worker.vocab import Task

if TYPE_CHECKING:
    from core.model.info import ModelInfo
    from core.plan.planner import Plan
    from core.remote.modelcopy import CopyProgress
    from core.remote.targets import Target


class AdapterPayload:
    """The adapter ``folder`` of ``info``'s model (``AdapterError`` when it does not fit)."""

    ship_failed = "The adapter could not be copied to {node}: {error}"

    def __init__(self, info: ModelInfo, folder: Path | str) -> None:
        self.use: AdapterUse = check_adapter(info, folder)
        self.folders: dict[str, str] = {}  # node → the adapter's folder there, once shipped

    @property
    def name(self) -> str:
        """The adapter's name (its ``macmesh.json``'s, else its folder's)."""
        return self.use.name

    @property
    def path(self) -> Path:
        """Its folder on this Mac."""
        return self.use.path

    @property
    def task(self) -> Task:
        """An adapter rides a chat job (a fine-tune trains its own)."""
        return Task.CHAT

    def planned(self, plan: Plan) -> Plan:
        """Any strategy: the worker fuses it before sharding."""
        return plan

    def ship(
        self, target: Target, progress: Callable[[CopyProgress], None], cancel: threading.Event
    ) -> str:
        return put_adapter(target, self.use.path, self.use.files, progress, cancel)

    def shipped(self, folders: Mapping[str, str]) -> None:
        self.folders = dict(folders)

    def spec_fields(self, used: Sequence[Target]) -> dict[str, Any]:
        """The adapter, and each rank's folder on its node (where it was shipped, else
        where it would be); the demo's ranks (no targets) read it here."""
        if not used:
            return {"adapter": self.use.path}
        folders = [
            self.folders.get(t.name) or adapter_folder(t, self.use.path, self.use.files)
            for t in used
        ]
        return {"adapter": self.use.path, "rank_adapters": [Path(f) for f in folders]}


def adapter_payloads(info: ModelInfo, folder: Path | str | None) -> list[AdapterPayload]:
    """The payloads of a Start with ``--adapter folder``: none without one."""
    return [] if folder is None or folder == "" else [AdapterPayload(info, folder)]
