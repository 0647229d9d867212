"""What the checks before a Start found: each ``Check`` with its fix, and the
``PreflightReport`` over them (JSON-able, and as lines for the terminal). Data only, so
the checks that make it (``preflight``, ``modelsource``) and the views that show it
import it without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from core.cluster.probe.facts import NodeFacts
from core.model.manifest import Manifest
from core.run.checks.backend_choice import BackendChoice
from core.worker.vocab import ModelSource

Status = Literal["ok", "warn", "fail"]
CLUSTER = "cluster"  # the node of checks about all nodes together
FIX_MARK = " Fix: "  # how core.cluster's verdicts (rdma, localnet) end with their fix


def said_and_fix(reason: str) -> tuple[str, str]:
    """A verdict's one sentence, "what is seen. Fix: what to do" (``core.cluster.rdma``,
    ``core.cluster.localnet``), as a check's message and fix, so a check shows the
    verdict's own words rather than a second wording of them. No fix: ``(reason, "")``."""
    said, mark, fix = reason.partition(FIX_MARK)
    return (said, fix[:1].upper() + fix[1:]) if mark else (reason, "")


@dataclass(frozen=True)
class Check:
    node: str
    name: str  # ssh, python, blas, versions, macos, model, memory, plan, backend
    status: Status
    message: str
    fix: str = ""

    @classmethod
    def ok(cls, node: str, name: str, message: str) -> Check:
        return cls(node, name, "ok", message)

    @classmethod
    def warn(cls, node: str, name: str, message: str, fix: str = "") -> Check:
        return cls(node, name, "warn", message, fix)

    @classmethod
    def fail(cls, node: str, name: str, message: str, fix: str) -> Check:
        """A failed check always says what to do about it."""
        return cls(node, name, "fail", message, fix)

    def to_dict(self) -> dict[str, str]:
        return {
            "node": self.node,
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]
    backend: BackendChoice
    copies_needed: tuple[str, ...]  # nodes that lack model files: copy_model fixes them
    manifests: Mapping[str, Manifest] = field(default_factory=dict)  # node → what it needs
    facts: Mapping[str, NodeFacts] = field(default_factory=dict)
    damaged: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node → files to redo
    sources: Mapping[str, ModelSource] = field(default_factory=dict)  # node → HUB | THIS_MAC

    @property
    def ok(self) -> bool:
        """Nothing fails (warnings and copies still to make allowed)."""
        return not any(c.status == "fail" for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def failed_detail(self) -> str:
        """Why a Start stops at the checks, in a line (the session's NOT_READY detail;
        each check's fix is in the report): "" when none failed."""
        failed = self.failures
        if not failed:
            return ""
        said = "; ".join(f"{c.node}: {c.message}" for c in failed)
        count = "A check" if len(failed) == 1 else f"{len(failed)} checks"
        return f"{count} failed ({said}): nothing was started."

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checks": [c.to_dict() for c in self.checks],
            "backend": self.backend.to_dict(),
            "copies_needed": list(self.copies_needed),
            "manifests": {node: m.id for node, m in self.manifests.items()},
            "damaged": {node: list(names) for node, names in self.damaged.items()},
            "sources": dict(self.sources),
        }


# -- for the terminal ----------------------------------------------------------------------

_MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}


def format_report(report: PreflightReport) -> str:
    """The checks, one per line with the fix under it, then the verdict."""
    lines = []
    for c in report.checks:
        lines.append(f"[{_MARK[c.status]}] {c.message}")
        if c.fix and c.status != "ok":
            lines.append(f"       → {c.fix}")
    lines.append(f"Backend: {report.backend.name}.")
    if report.copies_needed:
        lines.append(f"To copy first: the model to {', '.join(report.copies_needed)}.")
    failed = len(report.failures)
    lines.append(
        "Ready to start."
        if report.ok
        else f"Not ready: {failed} check{'s' if failed != 1 else ''} failed."
    )
    return "\n".join(lines) + "\n"
