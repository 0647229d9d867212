"""A task's run as the history keeps it: what every task's record says of its job, built
in one place so every kind of run, from every front end, says it the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core.run.measure.history import RunKind, RunRecord, local_versions

if TYPE_CHECKING:
    from core.cluster.probe.facts import NodeFacts
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
    simulated = simulated_facts(session, record.nodes)
    if simulated:
        from core.run.demo import cabling  # the demo's hardware, as every view says it

        record.figures = {**figures, "simulated": cabling(simulated).to_dict()}
    if started is not None:
        record.started = started
    return record


def simulated_facts(session: Session, nodes: list[str]) -> list[NodeFacts]:
    """The simulated Macs ``nodes`` ran on, as the demo describes them (their hosts'
    facts, else the demo's own, ``core.run.demo``), when every one is simulated and has
    Thunderbolt ports; else none (real Macs, one Mac, a capture without ports)."""
    hosts = [h for h in session.hosts if h.name in set(nodes)]
    if len(hosts) < 2 or not all(h.simulated for h in hosts):
        return []
    from core.run.demo import demo_facts
    from core.settings import MAX_DEMO_NODES

    count = min(len(hosts), MAX_DEMO_NODES)
    described = {f.name: f for f in demo_facts(count)}
    facts = [h.facts or described.get(h.name) for h in hosts]
    known = [f for f in facts if f is not None and f.thunderbolt]
    return known if len(known) == len(hosts) else []
