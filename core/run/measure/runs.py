"""A run as the history keeps it (``RunRecord``) and the kinds of run there are."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core import units


class RunKind(StrEnum):
    """What a kept run was: the task that kept it (``core.run.tasks``)."""

    CHAT = "chat"  # one answer in the window's chat, ``macmesh run`` or ``demo``
    COMPARE = "compare"  # one Mac against the cluster, or base against base + adapter
    LINKTEST = "linktest"
    API = "api"  # one answer asked through the API
    FINETUNE = "finetune"


KINDS = tuple(RunKind)


def run_kind(value: str) -> RunKind:
    """``value`` as a ``RunKind``; ValueError naming the kinds there are."""
    if value not in KINDS:
        raise ValueError(f"a run is one of {', '.join(KINDS)}, not {value!r}")
    return RunKind(value)


@dataclass
class RunRecord:
    """One run as kept. ``series``: name → [(t, value)], seconds from the run's start."""

    kind: RunKind
    model: str
    nodes: list[str]
    strategy: str
    backend: str
    figures: dict[str, Any]
    split: list[int] | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    id: int | None = None

    def __post_init__(self) -> None:
        self.kind = run_kind(self.kind)

    def headline(self) -> str:
        """The run's one figure for a list: tokens/s of a chat, the speedup of a compare,
        the fastest link of a link test."""
        f = self.figures
        if self.kind == RunKind.COMPARE:  # what Compare said first (the demo: the estimate)
            return str(f.get("lead") or f.get("headline", ""))
        if self.kind == RunKind.LINKTEST:
            links = [link for link in f.get("links", []) if link.get("bytes_per_s")]
            if not links:
                return "no link measured"
            best = max(links, key=lambda link: link["bytes_per_s"])
            share = best.get("share")
            of = f" ({share:.0%} of {best.get('nominal')})".replace("%", " %") if share else ""
            return f"{units.bytes_per_s(best['bytes_per_s'])}{of}, {len(links)} link(s)"
        if self.kind == RunKind.FINETUNE:
            return _finetune_headline(f)
        tps = f.get("avg_tps") or f.get("generation_tps")
        return f"{units.rate(float(tps))} tokens/s" if tps else ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """A record as ``to_dict`` gave it (the journal's lines); ValueError otherwise."""
        try:
            series = {
                str(name): [(float(t), float(v)) for t, v in points]
                for name, points in dict(data.get("series") or {}).items()
            }
            return cls(
                kind=run_kind(str(data["kind"])),
                model=str(data["model"]),
                nodes=[str(n) for n in data["nodes"]],
                strategy=str(data["strategy"]),
                backend=str(data["backend"]),
                figures=dict(data["figures"]),
                split=None if data.get("split") is None else [int(n) for n in data["split"]],
                versions=dict(data.get("versions") or {}),
                series=series,
                started=float(data["started"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a kept run: {error}") from None

    def to_dict(self, with_series: bool = True) -> dict[str, Any]:
        data = {
            "id": self.id,
            "started": self.started,
            "kind": self.kind,
            "model": self.model,
            "nodes": self.nodes,
            "strategy": self.strategy,
            "split": self.split,
            "backend": self.backend,
            "versions": self.versions,
            "figures": self.figures,
        }
        if with_series:
            data["series"] = {k: [list(p) for p in v] for k, v in self.series.items()}
        return data


def _finetune_headline(f: Mapping[str, Any]) -> str:
    """A fine-tune's one line: its last loss after its steps, or its failure."""
    loss = f.get("train_loss")
    steps = f.get("iterations") or 0
    if loss is None:
        return "failed, nothing trained" if f.get("error") else "nothing trained"
    return f"loss {float(loss):.3f} after {steps} steps" + (
        " (stopped)" if f.get("stopped") else ""
    )
