"""The link-test task: every link a session's job uses, measured through MLX (the ranks'
send/recv ping-pong and ``all_sum``, 4 KiB to 64 MiB), set against its cable's rate or,
on the demo's simulated Macs, loopback TCP (``core.run.measure.links``), and kept."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from core.cluster.topology import build_topology
from core.run.errors import ClusterError
from core.run.measure.history import RunKind, RunRecord, keep
from core.run.measure.links import (
    LinkResult,
    Nominal,
    all_sum_results,
    cable_nominals,
    link_results,
    loopback_nominal,
)
from core.run.states import Step
from core.run.tasks.records import job_record
from core.run.tasks.watch import Phase, Watch, watched

if TYPE_CHECKING:
    from core.run.session import Session


class LinkTestStopped(ClusterError):
    """The person stopped the link test: the ranks left it at the end of a size."""


@dataclass(frozen=True)
class LinkTest:
    """A link test on a running session, as the window shows it and the history keeps
    it (``not_kept``: why it could not be kept)."""

    nodes: list[str]
    results: list[LinkResult]
    all_sum: list[dict[str, float]]
    not_kept: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": list(self.nodes),
            "links": [result.to_dict() for result in self.results],
            "all_sum": list(self.all_sum),
        }


def measure_links(session: Session, scale: float = 1.0, watch: Watch | None = None) -> LinkTest:
    """The link-test task (blocking: off the GUI thread): ``session`` launched when it is
    not yet (its steps not run yet first; the caller stops it), every link of its job
    measured and set against its cable's rate (loopback TCP on the demo's simulated
    Macs), the run kept. ClusterError when the plan uses one Mac (no link) or the Start
    was cancelled; JobError when the job fails. ``watch`` hears of the session first."""
    watched(watch, session, Phase.RUN)
    if session.job is None:
        if not session.start(Step.PLAN):
            raise ClusterError(session.error or "the Start was cancelled")
        if len(session.rank_nodes()) < 2:
            raise ClusterError("the model's plan uses one Mac: there is no link to test")
        if not session.start():
            raise ClusterError(session.error or "the checks failed: nothing was started")
    session.wait_ready()
    nodes = session.rank_nodes()
    event = session.wait_link_test(session.test_links(scale=scale))
    if event.get("cancelled"):
        raise LinkTestStopped("Link test stopped: nothing measured was kept.")
    pairs = [(nodes[link["a"]], nodes[link["b"]]) for link in event["links"]]
    nominal: Nominal | dict[frozenset[str], Nominal]
    if session.demo:
        nominal = loopback_nominal(scale)
    else:
        nominal = cable_nominals(build_topology(list(session.facts.values())), pairs)
    tested = LinkTest(nodes, link_results(event, nodes, nominal), all_sum_results(event))
    return replace(tested, not_kept=keep(link_test_record(session, tested)))


def link_test_record(session: Session, tested: LinkTest) -> RunRecord:
    return job_record(session, RunKind.LINKTEST, tested.to_dict())
