"""What a task ships with its job, as the session sees it: a typed ``Payload``. The
session (``core.run.session``) takes a task's payloads and knows none of their files: it
asks each how the plan runs (a fine-tune: every rank the whole model), sends what it
ships to every node the plan uses during the copy step (each node at once, progress and
cancel as a model copy's), and adds its fields to the job's spec. The payloads of one
job agree on its task. A fine-tune's (its training data and the adapter's output folder)
is ``core.run.tasks.training_payload.TrainingPayload``; an adapter fused into the model
is ``core.run.tasks.adapter_payload.AdapterPayload``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from core.plan.planner import Plan
    from core.remote.modelcopy import CopyProgress
    from core.remote.targets import Target
    from core.worker.vocab import Task


class Payload(Protocol):
    """A task's part of the job."""

    @property
    def task(self) -> Task:
        """What the ranks run (every payload of a job says the same)."""
        ...

    #: A node whose copy failed, as one line: ``{node}`` and ``{error}``.
    ship_failed: str

    def planned(self, plan: Plan) -> Plan:
        """The plan as the task runs it (the planner's, changed if the task needs it)."""
        ...

    def ship(
        self,
        target: Target,
        progress: Callable[[CopyProgress], None],
        cancel: threading.Event,
    ) -> str:
        """What the task ships, on ``target`` (blocking; a thread per node): its folder
        there. Raises what a copy raises (``ModelCopyError``, ``SSHError``, ``OSError``)."""
        ...

    def shipped(self, folders: Mapping[str, str]) -> None:
        """Every node has it: node → its folder there."""
        ...

    def spec_fields(self, used: Sequence[Target]) -> dict[str, Any]:
        """The ``JobSpec`` fields the task adds, for the plan's targets in rank order
        (none for the demo's simulated Macs)."""
        ...
