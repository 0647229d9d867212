"""One Start on real Macs, step by step: preflight → copy what is missing → the JobSpec.

The app's Start and ``macmesh run`` take the same path (``core.run.cluster_run``'s pieces);
this object holds one Start's state between the steps so a GUI can show each step's
result, run each step off its own thread, and cancel a copy with Stop. Each step blocks;
the caller runs them in order on one worker thread:

- ``preflight()`` → ``PreflightReport`` (every check with its fix, the backend);
- ``copy()`` copies each node's part of the model where preflight found it missing, all
  nodes at once, with ``progress`` per node; ``cancel()`` stops it between chunks and
  what arrived is kept (the next copy resumes);
- ``job_spec()`` → the plan as a ``JobSpec`` on the targets, each rank's model on its node.

``planned_launch`` / ``demo_launch`` give the equivalent ``mlx.launch`` command and
hostfile, for the dialog and for people who run jobs by hand.

Threads: ``progress`` fires on the copying threads (one per node).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from psygnal import Signal

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.remote.modelcopy import CopyResult, copy_model
from core.remote.ssh import SSHError
from core.remote.targets import Target
from core.remote.transport import CopyCancelled, ModelCopyError
from core.run.cluster_run import (
    ClusterError,
    cluster_spec,
    in_rank_order,
    model_folders,
    show_launch,
)
from core.run.launcher import JobSpec
from core.run.preflight import BackendChoice, PreflightReport, choose_backend, run_preflight

__all__ = ["ClusterError", "ClusterSession", "CopyCancelled", "demo_launch", "planned_launch"]


class ClusterSession:
    """One Start of ``plan`` (of the model ``info``) on ``targets``."""

    progress = Signal(object)  # CopyProgress, on a copying thread

    def __init__(
        self, info: ModelInfo, plan: Plan, targets: Sequence[Target], backend: str = "auto"
    ) -> None:
        if plan.verdict != "fits":
            raise ClusterError(plan.reason)
        missing = [name for name in plan.nodes_used if name not in {t.name for t in targets}]
        if missing:
            raise ClusterError(f"The plan uses {', '.join(missing)}, which is not ready here.")
        self.info, self.plan, self.targets, self.backend = info, plan, list(targets), backend
        self.report: PreflightReport | None = None
        self.copies: list[CopyResult] = []
        self._cancel = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop a copy between chunks (what arrived stays, for the next copy to resume)."""
        self._cancel.set()

    def preflight(self) -> PreflightReport:
        used = in_rank_order(self.plan, self.targets)
        self.report = run_preflight(used, self.plan, self.info.path, self.backend)
        return self.report

    def copy(self) -> list[CopyResult]:
        """Copy each node's missing part, every node at once. ``CopyCancelled`` after
        ``cancel()``; ``ClusterError`` naming each node whose copy failed."""
        report = self._checked()
        by_name = {t.name: t for t in self.targets}
        todo = [(by_name[name], report.manifests[name]) for name in report.copies_needed]
        if not todo:
            return []
        with ThreadPoolExecutor(max_workers=len(todo), thread_name_prefix="model-copy") as pool:
            source, report_progress = self.info.path, self.progress.emit
            futures = [
                pool.submit(copy_model, target, part, source, report_progress, self._cancel)
                for target, part in todo
            ]
        results, problems = [], []
        for future in futures:
            try:
                results.append(future.result())
            except CopyCancelled:
                continue
            except (ModelCopyError, SSHError, OSError) as exc:
                problems.append(str(exc))
        if problems:
            raise ClusterError("\n".join(problems) + "\nStart again: the copy resumes.")
        if self.cancelled:
            raise CopyCancelled(
                "The copy stopped; what arrived is kept and the next Start continues from there."
            )
        self.copies = results
        return results

    def job_spec(self, **fields: Any) -> JobSpec:
        report = self._checked()
        folders = model_folders(report, self.plan, self.targets, self.info.path)
        return cluster_spec(self.info, self.plan, self.targets, report.backend, folders, **fields)

    def _checked(self) -> PreflightReport:
        if self.report is None:
            raise ClusterError("Run the checks first.")
        if not self.report.ok:
            raise ClusterError("The checks failed; nothing was started.")
        return self.report


# -- the equivalent mlx.launch ------------------------------------------------------------


def demo_launch(spec: JobSpec) -> dict:
    """``mlx.launch`` for the demo's local ranks: ``-n N --backend ring`` on this
    machine (mlx.launch writes the loopback hostfile itself, so there is none to show)."""
    command = [
        "mlx.launch", "-n", str(spec.nodes), "--backend", "ring", "--python", spec.python,
        "--", "-m", "core.worker", *spec.worker_args(0),
    ]  # fmt: skip
    return {"command": command, "hostfile": None, "local": True}


def planned_launch(
    info: ModelInfo,
    plan: Plan,
    targets: Sequence[Target],
    facts: Sequence[NodeFacts],
    report: PreflightReport | None = None,
) -> dict:
    """``mlx.launch`` and its hostfile for ``plan`` on real nodes. The backend is the
    last preflight's when there is one, else chosen from the probed ``facts`` (rank
    order) as preflight would; the model path is each node's copy once preflight knows
    it, else this Mac's folder."""
    ordered = in_rank_order(plan, targets)
    if report is not None and report.ok:
        backend, folders = report.backend, model_folders(report, plan, targets, info.path)
    else:
        by_name = {f.name: f for f in facts}
        known = [by_name[t.name] for t in ordered if t.name in by_name]
        backend = (
            choose_backend(known)
            if len(known) == len(ordered)
            else BackendChoice("ring", "Ring over each node's network address.")
        )
        folders = None
    spec = cluster_spec(info, plan, ordered, backend, folders)
    launch = show_launch(spec)
    return {**launch, "backend": backend.name, "reason": backend.reason, "local": False}
