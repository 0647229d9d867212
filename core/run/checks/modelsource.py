"""Preflight's choice of where each node gets its missing part of the model (issue 13).

The Hub, when the model on this Mac is a Hugging Face snapshot and the node reaches the
Hub (a quick request from the node); else a copy from this Mac. ``model_source``
(settings, ``macmesh run --model-source``) forces either: ``hub`` fails preflight for a
node that cannot use it, saying why; ``this-mac`` never asks the Hub. Each node needing
files gets one "source" check saying which, and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from core.remote.hubfetch import hub_host, hub_origin, reach_hub
from core.remote.targets import Target
from core.run.checks.report import Check, PreflightReport
from core.worker.vocab import ModelSource


def with_model_sources(
    report: PreflightReport,
    targets: Sequence[Target],
    model_dir: Path | str,
    model_source: ModelSource | str = ModelSource.AUTO,
) -> PreflightReport:
    """``report`` with a source per node in ``copies_needed`` and a check saying it."""
    nodes = list(report.copies_needed)
    if not nodes:
        return report
    by_name = {t.name: t for t in targets}
    origin = hub_origin(model_dir)
    host = hub_host()
    checks: list[Check] = []
    sources: dict[str, ModelSource] = {}

    def count(node: str) -> str:
        manifest = report.manifests.get(node)
        files = len(manifest.files) if manifest else 0
        return f"{files} file{'s' * (files != 1)}"

    if model_source == ModelSource.THIS_MAC or origin is None:
        why = (
            "model_source is this-mac"
            if model_source == ModelSource.THIS_MAC
            else "the model on this Mac is not from the Hugging Face cache"
        )
        for node in nodes:
            if model_source == ModelSource.HUB:
                checks.append(
                    Check.fail(
                        node,
                        "source",
                        f"{node} cannot download the model from {host}: {why}.",
                        "Choose the model from the Hugging Face library, or set the model "
                        "source to auto or this-mac.",
                    )
                )
            else:
                checks.append(
                    Check.ok(
                        node, "source", f"Copying {count(node)} to {node} from this Mac ({why})."
                    )
                )
            sources[node] = ModelSource.THIS_MAC
        return _added(report, checks, sources)
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        reached = dict(
            zip(nodes, pool.map(lambda n: reach_hub(by_name[n], origin), nodes), strict=True)
        )
    for node in nodes:
        problem = reached[node]
        if problem is None:
            sources[node] = ModelSource.HUB
            checks.append(
                Check.ok(node, "source", f"{node} downloads its {count(node)} from {host} itself.")
            )
        elif model_source == ModelSource.HUB:
            sources[node] = ModelSource.HUB
            checks.append(
                Check.fail(
                    node,
                    "source",
                    f"{node} cannot reach {host} ({problem}).",
                    "Check that node's network, or set the model source to auto or this-mac.",
                )
            )
        else:
            sources[node] = ModelSource.THIS_MAC
            checks.append(
                Check.ok(
                    node,
                    "source",
                    f"Copying {count(node)} to {node} from this Mac: {node} cannot reach "
                    f"{host} ({problem}).",
                )
            )
    return _added(report, checks, sources)


def _added(
    report: PreflightReport, checks: list[Check], sources: dict[str, ModelSource]
) -> PreflightReport:
    return replace(report, checks=(*report.checks, *checks), sources=sources)
