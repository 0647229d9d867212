"""Compare: the same prompt and the same number of tokens on one Mac, then on the
cluster, side by side, with the speedup or the reason there is none.

The one Mac is the strongest that holds the model alone (``strongest_single``: the
planner's single-node verdict on each, the most GPU memory first). Each run is a whole
``Session`` (probe, plan, checks, copy, launch, ask, stop), one after the other, so the
two never share a core. When no Mac holds the model alone, the cluster runs by itself
and the headline says the model needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from core.cluster.probe.facts import NodeFacts
from core.model.info import ModelInfo
from core.plan.planner import Plan
from core.run.errors import ClusterError
from core.run.job.launcher import Job, JobSpec
from core.run.measure.history import RunKind, RunRecord, keep
from core.run.measure.telemetry import Telemetry
from core.run.planning import EstimateBeside, estimates_beside, plan_on, sharing
from core.run.session import Host, Session
from core.run.states import Step
from core.run.tasks.adapter_payload import AdapterPayload
from core.run.tasks.chat import answer_once
from core.run.tasks.records import job_record
from core.run.tasks.watch import Phase, Watch, watched
from core.units import rate, size
from core.worker.vocab import Strategy

# Below this ratio the cluster is "not faster" (run-to-run noise is a few percent).
FASTER = 1.05


@dataclass(frozen=True)
class RunFigures:
    """One of the two runs: where it ran and what it measured."""

    label: str  # "one Mac" or "cluster"
    nodes: list[str]
    strategy: str
    ranks: int  # ranks that reported loading: the proof of where it ran
    generation_tps: float
    prompt_tps: float
    ttft_s: float | None
    generation_tokens: int
    prompt_tokens: int
    memory_bytes: dict[str, int]  # per node: the most its rank held
    text: str
    run_s: float = 0.0  # from the launch to every rank stopped: the run's own time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    single: RunFigures | None
    cluster: RunFigures
    strategy: str
    no_single: str = ""  # why no one Mac ran it (the model needs the cluster)
    notes: list[str] = field(default_factory=list)
    not_kept: str | None = None  # why the history could not keep it
    # The estimate for the real Macs each run names, and whether the Macs were simulated.
    beside: EstimateBeside | None = None

    @property
    def ratio(self) -> float | None:
        """Cluster generation tokens/s over one Mac's."""
        if self.single is None or not self.single.generation_tps:
            return None
        return self.cluster.generation_tps / self.single.generation_tps

    @property
    def estimate_ratios(self) -> dict[str, float]:
        """Per run (on real Macs only): its measured generation tokens/s over the estimate
        for it, so every real run says how far the estimate was (docs/estimate.md). None
        on the demo, whose simulated Macs share this machine."""
        if self.beside is None or self.beside.simulated:
            return {}
        ratios = {}
        for run in (self.single, self.cluster):
            estimate = self.beside.estimates.get(run.label) if run is not None else None
            if run is not None and estimate is not None and estimate.tokens_per_s:
                ratios[run.label] = run.generation_tps / estimate.tokens_per_s
        return ratios

    def headline(self) -> str:
        """The measured result in a line: "2.7× faster on 4 Macs", or why it is not."""
        if self.single is None:
            return self.no_single
        ratio = self.ratio or 0.0
        said = ratio_words(ratio, len(self.cluster.nodes))
        return said if ratio >= FASTER else f"{said}: {not_faster(self.strategy)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the measured figures and ``headline``; ``lead`` and ``measured``,
        what every surface says first and second (``headlines``); with the estimates,
        ``simulated`` and ``estimate`` (``EstimateBeside.to_dict``)."""
        said = headlines(self, self.beside)
        return {
            "strategy": self.strategy,
            "single": self.single.to_dict() if self.single else None,
            "cluster": self.cluster.to_dict(),
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "headline": self.headline(),
            "lead": said.lead,
            "measured": said.measured,
            "notes": list(self.notes),
            **(self.beside.to_dict() if self.beside is not None else {}),
            # measured / estimated per run, on real Macs: what recalibrates the estimate
            "estimate_ratio": {what: round(r, 3) for what, r in self.estimate_ratios.items()},
        }


def ratio_words(ratio: float, macs: int) -> str:
    """A speedup as people read it: "2.7× faster on 4 Macs", or "0.85× on 4 Macs"."""
    return (
        f"{ratio:.1f}× faster on {macs} Macs" if ratio >= FASTER else f"{ratio:.2f}× on {macs} Macs"
    )


def not_faster(strategy: str) -> str:
    """Why a cluster does not answer faster than one Mac. (Whether tensor would be is the
    estimate's to say, per strategy, in the Model pane and ``macmesh plan``: it is not
    possible for every model, nor faster over the ring on TCP.)"""
    if strategy == Strategy.PIPELINE:
        return "pipeline splits memory, not time; one answer is not faster"
    return "not faster here (the links cost more than they save)"


ESTIMATE_LEAD = "Estimate for the real Macs: "
MEASURED_SIMULATED = "Measured on simulated Macs: "


@dataclass(frozen=True)
class Headlines:
    """What a comparison says first (``lead``, large), and on the demo second
    (``measured``); ``basis``: where the lead's figure comes from, when it is an estimate
    (a tooltip), else ""."""

    lead: str
    measured: str = ""
    basis: str = ""


def headlines(result: Comparison, beside: EstimateBeside | None = None) -> Headlines:
    """On real Macs the measured result leads (``Comparison.headline``). On the demo the
    simulated Macs share this machine's cores and loopback, so their ratio is noise: the
    estimate for the real Macs they name leads, labelled an estimate with its basis, and
    the measured figure follows, said plainly to be the simulated Macs'. Without a
    cluster estimate (a chip unknown) the measured result leads, said to be simulated."""
    beside = beside if beside is not None else result.beside
    if beside is None or not beside.simulated:
        return Headlines(result.headline())
    macs = len(result.cluster.nodes)
    cluster = beside.estimates.get("cluster")
    single = beside.estimates.get("one Mac")
    if result.single is None:
        measured = f"{rate(result.cluster.generation_tps)} tokens/s on {macs} Macs"
    else:
        measured = (
            f"{ratio_words(result.ratio or 0.0, macs)} ({rate(result.cluster.generation_tps)} "
            f"vs {rate(result.single.generation_tps)} tokens/s)"
        )
    measured = (
        f"{MEASURED_SIMULATED}{measured}; {sharing(macs, beside.cores)}, so it says nothing "
        "about real Macs."
    )
    if cluster is None or cluster.tokens_per_s is None:
        return Headlines(f"{MEASURED_SIMULATED}{result.headline()}", measured)
    if single is None or not single.tokens_per_s or result.single is None:
        lead = f"{rate(cluster.tokens_per_s)} tokens/s on {macs} Macs"
        if result.single is None:
            lead += f" ({result.no_single})" if result.no_single else ""
    else:
        ratio = cluster.tokens_per_s / single.tokens_per_s
        lead = ratio_words(ratio, macs)
        if ratio < FASTER:
            lead += f" — {not_faster(result.strategy)}"
    bases = [("On one Mac", single), ("On the cluster", cluster)]
    basis = "\n\n".join(f"{what}: {e.basis()}" for what, e in bases if e is not None)
    return Headlines(f"{ESTIMATE_LEAD}{lead}", measured, basis)


def strongest_single(info: ModelInfo, facts: Sequence[NodeFacts]) -> tuple[str | None, str]:
    """The node that holds the model alone with the most memory for it (the strongest
    Mac), or None and why none does ("needs the cluster: 512 GB on 4 Macs")."""
    fitting: list[tuple[int, str]] = []
    for node in facts:
        plan = plan_on(info, [node])
        if plan.fits:
            fitting.append((plan.ranks[0].usable_bytes, node.name))
    if fitting:
        return max(fitting)[1], ""
    total = sum(int(f.memory_bytes or 0) for f in facts)
    return None, (
        f"needs the cluster: no one Mac holds {info.name}; it runs on {size(total)} "
        f"across {len(facts)} Macs"
    )


def measured_run(
    session: Session, label: str, prompt: str, max_tokens: int, plan: Plan
) -> RunFigures:
    """The session launched, one answer, every rank stopped: the run's figures."""
    telemetry = Telemetry()
    began = time.monotonic()
    figures, _links = answer_once(session, prompt, max_tokens, telemetry)
    run_s = time.monotonic() - began
    nodes = [rank.node for rank in plan.ranks]
    memory = telemetry.memory()
    return RunFigures(
        label=label,
        nodes=nodes,
        strategy=str(plan.strategy),
        ranks=len(telemetry.rank_facts()),
        generation_tps=figures.generation_tps or 0.0,
        prompt_tps=figures.prompt_tps or 0.0,
        ttft_s=figures.ttft_s,
        generation_tokens=figures.generation_tokens,
        prompt_tokens=figures.prompt_tokens or 0,
        memory_bytes={nodes[r]: b for r, b in memory.items() if r < len(nodes)},
        text=figures.text,
        run_s=round(run_s, 3),
    )


def _begin(session: Session, phase: Phase, watch: Watch | None) -> Plan:
    """Say which run starts (``watch``), then its steps up to the launch; its plan.
    ClusterError when a check failed (its detail: which) or it was cancelled."""
    watched(watch, session, phase)
    if not session.start(Step.COPY):
        raise ClusterError(session.error or "The checks failed; nothing was started.")
    assert session.plan is not None  # planned by the start
    return session.plan


def compare(
    info: ModelInfo,
    hosts: Sequence[Host],
    strategy: Strategy | str,
    prompt: str,
    max_tokens: int,
    *,
    watch: Watch | None = None,
    split: Sequence[int] | None = None,
    job_factory: Callable[[JobSpec], Job] | None = None,
) -> Comparison:
    """The compare task: one Mac, then the cluster, each a whole session (its steps, one
    answer, every rank stopped); the comparison kept. ``watch(session, phase)`` hears of
    each session as it begins (``Phase.PROBE``, ``ONE_MAC``, ``CLUSTER``: to show its
    checks and copies, and to cancel it on Ctrl-C or Stop). ``split``: the cluster's pipeline split
    set by hand (rank order); ``job_factory``: what runs a job spec (the launcher's by
    default; the window's tests pass a fake)."""
    cluster_session = Session(info, hosts, strategy=strategy, split=split, job_factory=job_factory)
    watched(watch, cluster_session, Phase.PROBE)
    # Probed and planned first: a cluster that cannot run stops the comparison before
    # one Mac runs, and the facts are held (the runs below ask for none again).
    if not cluster_session.start(Step.PLAN):
        raise ClusterError(cluster_session.error or "The comparison was cancelled.")
    facts = [cluster_session.facts[h.name] for h in hosts if h.name in cluster_session.facts]
    best, no_single = strongest_single(info, facts)
    single = None
    runs: dict[str, tuple[Plan | None, list[NodeFacts]]] = {}  # each run's plan and Macs
    if best is not None:
        host = next(h for h in hosts if h.name == best)
        if host.facts is None and best in cluster_session.facts:
            host = Host(host.name, host.target, cluster_session.facts[best])
        one = Session(info, [host], strategy=Strategy.SINGLE, job_factory=job_factory)
        one_plan = _begin(one, Phase.ONE_MAC, watch)
        single = measured_run(one, "one Mac", prompt, max_tokens, one_plan)
        runs["one Mac"] = (one_plan, list(one.facts.values()))
    plan = _begin(cluster_session, Phase.CLUSTER, watch)
    cluster = measured_run(cluster_session, "cluster", prompt, max_tokens, plan)
    runs["cluster"] = (plan, list(cluster_session.facts.values()))
    notes = []
    if single is not None and single.generation_tokens != cluster.generation_tokens:
        notes.append(
            f"the runs made {single.generation_tokens} and {cluster.generation_tokens} tokens "
            "(the answer ended early in one): tokens/s still compares"
        )
    beside = estimates_beside(info, runs, simulated=cluster_session.demo)
    result = Comparison(single, cluster, str(plan.strategy), no_single, notes, beside=beside)
    return replace(result, not_kept=keep(compare_record(cluster_session, result.to_dict())))


def compare_record(session: Session, figures: dict[str, Any]) -> RunRecord:
    """A comparison as the history keeps it: the cluster's (or the adapter's) session,
    both runs in ``figures``."""
    return job_record(session, RunKind.COMPARE, figures)


# -- the adapter variant: base against base + adapter ------------------------------------


@dataclass(frozen=True)
class AdapterComparison:
    """The same question to the base model and to base + adapter, on the same nodes."""

    base: RunFigures
    adapted: RunFigures
    adapter: str  # the adapter's name
    strategy: str
    not_kept: str | None = None  # why the history could not keep it

    @property
    def differ(self) -> bool:
        return self.base.text.strip() != self.adapted.text.strip()

    def headline(self) -> str:
        if self.differ:
            return f"The answers differ: {self.adapter} changes what the model says."
        return f"The same answer with and without {self.adapter}."

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": "adapter",
            "adapter": self.adapter,
            "strategy": self.strategy,
            "base": self.base.to_dict(),
            "adapted": self.adapted.to_dict(),
            "differ": self.differ,
            "headline": self.headline(),
        }


def compare_adapter(
    info: ModelInfo,
    hosts: Sequence[Host],
    strategy: Strategy | str,
    prompt: str,
    max_tokens: int,
    adapter: Path | str,
    *,
    watch: Watch | None = None,
    split: Sequence[int] | None = None,
    job_factory: Callable[[JobSpec], Job] | None = None,
) -> AdapterComparison:
    """The base model, then base + ``adapter``, on the same ``hosts`` with the same plan
    (greedy, so the difference is the adapter's); kept as a comparison.
    ``watch(session, phase)`` hears ``Phase.BASE`` and ``ADAPTER`` as each begins; the rest as
    ``compare``. The adapter is checked against the model first (``AdapterError``, a
    ValueError, before anything runs)."""
    payload = AdapterPayload(info, adapter)
    adapted_session = Session(
        info, hosts, strategy=strategy, split=split, job_factory=job_factory, payloads=[payload]
    )
    base_session = Session(info, hosts, strategy=strategy, split=split, job_factory=job_factory)
    runs = []
    for session, phase in ((base_session, Phase.BASE), (adapted_session, Phase.ADAPTER)):
        plan = _begin(session, phase, watch)
        label = "base" if phase is Phase.BASE else f"base + {payload.name}"
        runs.append(measured_run(session, label, prompt, max_tokens, plan))
        if phase is Phase.BASE:  # the adapter's run asks for no facts again
            adapted_session.facts.update(base_session.facts)
    result = AdapterComparison(runs[0], runs[1], payload.name, str(plan.strategy))
    figures = result.to_dict()
    return replace(result, not_kept=keep(compare_record(adapted_session, figures)))
