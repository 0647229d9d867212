"""A task's run as the history keeps it: what every task's record says of its job, built
in one place so every kind of run, from every front end, says it the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.run.measure.history import RunKind, RunRecord, local_versions

if TYPE_CHECKING:
    from core.run.session import Session


def job_record(
    session: Session,
    kind: RunKind,
    figures: dict[str, Any],
    *,
    series: dict[str, list[tuple[float, float]]] | None = None,
    strategy: str | None = None,
    started: float | None = None,
) -> RunRecord:
    """``session``'s job as it ran (its model, each rank's node, the strategy, split and
    backend the ranks ran, the versions here) with the task's ``figures`` and ``series``;
    ``strategy`` for a task that names its own (a fine-tune: data parallel)."""
    spec, plan = session.spec, session.plan
    ran = spec.rank_strategy if spec is not None else plan.strategy if plan else ""
    split = spec.split if spec is not None else plan.split if plan else None
    record = RunRecord(
        kind=kind,
        model=session.info.name,
        nodes=session.rank_nodes(),
        strategy=strategy or str(ran),
        backend=str(spec.rank_backend) if spec is not None else "",
        split=list(split) if split and strategy is None else None,
        versions=local_versions(),
        figures=figures,
        series=dict(series or {}),
    )
    ran_on = set(record.nodes)
    hosts = [h for h in session.hosts if h.name in ran_on]
    simulated = [h.facts for h in hosts if h.simulated and h.facts is not None]
    if len(simulated) > 1 and len(simulated) == len(hosts) and simulated[0].thunderbolt:
        from core.run.demo import cabling  # the demo's hardware, as every view says it

        record.figures = {**figures, "simulated": cabling(simulated).to_dict()}
    if started is not None:
        record.started = started
    return record
