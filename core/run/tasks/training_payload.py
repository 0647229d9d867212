"""A fine-tune's part of the job (``core.run.payload.Payload``): the training data, in
mlx-lm's layout, sent to every node the plan uses, the settings, and the adapter's
output folder. Every rank holds the whole model (data parallel). When rank 0 is another
Mac it writes the adapter beside its data there (``remote_out``), and the fine-tune
fetches it here when the job ends."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.remote.folders import put_folder
from core.worker.vocab import Strategy, Task

if TYPE_CHECKING:
    from core.plan.planner import Plan
    from core.remote.modelcopy import CopyProgress
    from core.remote.targets import Target


@dataclass
class TrainingPayload:
    """The data folder the ranks read, the settings (``TuneSettings.to_dict``) and the
    adapter's folder here; ``ready`` fills them once the data is checked and written."""

    data: Path | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    out: Path | None = None
    folders: dict[str, str] = field(default_factory=dict)  # node → the data's folder there
    remote_out: str | None = None  # the adapter on rank 0's node, when it is another Mac
    ship_failed: str = "{node}: the data could not be copied: {error}"

    @property
    def task(self) -> Task:
        return Task.FINETUNE

    def ready(self, data: Path, settings: dict[str, Any], out: Path) -> None:
        self.data, self.settings, self.out = data, settings, out

    def planned(self, plan: Plan) -> Plan:
        """Every rank the whole model: data parallel."""
        return replace(plan, strategy=Strategy.SINGLE, split=None)

    def ship(
        self, target: Target, progress: Callable[[CopyProgress], None], cancel: threading.Event
    ) -> str:
        if self.data is None:
            raise OSError("the training data is not ready")
        return put_folder(target, self.data, progress, cancel)

    def shipped(self, folders: Mapping[str, str]) -> None:
        self.folders = dict(folders)

    def spec_fields(self, used: Sequence[Target]) -> dict[str, Any]:
        """The data, the settings and the output folder; where nodes hold the data
        elsewhere, each rank's data folder and, when rank 0 is another Mac, the adapter
        folder beside its data there."""
        fields: dict[str, Any] = {
            "data": self.data,
            "tune_settings": self.settings,
            "out": self.out,
        }
        if not self.folders or self.data is None or not used:
            return fields
        fields["rank_data"] = [Path(self.folders.get(t.name, str(self.data))) for t in used]
        if not used[0].local:
            if self.remote_out is None:
                self.remote_out = f"{self.folders[used[0].name]}.adapter-{secrets.token_hex(4)}"
            fields["out"] = Path(self.remote_out)
        return fields
