"""The chat task: one answer on a session, measured, and kept in the history.

``chat`` is ``macmesh run`` and ``macmesh demo --headless``: the session's remaining steps
(up to the launch), the model loaded, one request, every rank stopped, the answer kept.
``answer_once`` is the same without keeping it (a comparison keeps its own run). The
window's chat asks on a running session and keeps each answer with ``keep_answer``, the
record ``chat`` keeps, so both front ends keep the same run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.run.errors import ClusterError
from core.run.measure.history import RunKind, RunRecord, keep, series_points, telemetry_series
from core.run.measure.telemetry import AnswerFigures, RequestSummary, Telemetry, answer_figures
from core.run.tasks.records import job_record
from core.worker import protocol as p

if TYPE_CHECKING:
    from core.plan.planner import Plan
    from core.run.session import Session

SETTLE_S = p.TRAFFIC_S + 0.2  # a rank reports its traffic every TRAFFIC_S


@dataclass(frozen=True)
class Answer:
    """One answer: its figures (tokens/s, time to first token, the text), the bytes each
    link moved per second while it was asked, what each rank ran on, and the run as kept
    (``not_kept``: why it could not be; the record holds the figures, as the window's)."""

    figures: AnswerFigures
    link_bytes_per_s: dict[str, float]
    ranks: list[dict[str, Any]]
    record: RunRecord
    not_kept: str | None


def chat(
    session: Session, prompt: str, max_tokens: int, telemetry: Telemetry | None = None
) -> Answer:
    """One answer to ``prompt`` (blocking): the session started (its steps not run yet,
    then the launch), the answer, every rank stopped, the run kept. Raises what the
    steps raise (ClusterError), JobError when the job fails, ClusterError when the
    session was cancelled before the answer."""
    telemetry = telemetry or Telemetry()
    began = time.monotonic()
    figures, links = answer_once(session, prompt, max_tokens, telemetry)
    finished = [r for r in telemetry.requests() if r.finished]
    answer = (finished[-1], finished[-1].last_at or time.monotonic()) if finished else None
    record = answer_record(session, figures.as_dict(), telemetry, began, answer=answer)
    return Answer(figures, links, ranks_with_memory(telemetry, session.plan), record, keep(record))


def ranks_with_memory(telemetry: Telemetry, plan: Plan | None) -> list[dict[str, Any]]:
    """What each rank ran on (``Telemetry.rank_facts``) with its memory planned and
    measured: ``planned_bytes`` (the plan's weights, KV cache and activations for it),
    ``base_bytes`` (what it held before reading a weight), its peaks while loading and
    while generating, and ``peak_over_plan``: the most it held above its base over what
    was planned (above 1.1: the plan was wrong)."""
    planned = {r.rank: r for r in plan.ranks} if plan is not None else {}
    peaks = telemetry.peaks()
    ranks = []
    for facts in telemetry.rank_facts():
        rank = facts["rank"]
        stage, peak = planned.get(rank), peaks.get(rank)
        memory: dict[str, Any] = {
            "node": stage.node if stage else None,
            "planned_bytes": stage.need_bytes if stage else None,
            "base_bytes": peak.base if peak else None,
            "peak_load_bytes": peak.load if peak else None,
            "peak_generation_bytes": peak.generation if peak else None,
            "peak_over_plan": None,
        }
        model_peak = peak.model_peak if peak else None
        if stage and stage.need_bytes and model_peak is not None:
            memory["peak_over_plan"] = round(model_peak / stage.need_bytes, 3)
        ranks.append({**facts, **memory})
    return ranks


def answer_once(
    session: Session, prompt: str, max_tokens: int, telemetry: Telemetry
) -> tuple[AnswerFigures, dict[str, float]]:
    """The session launched, one answer measured (``ask_once``: its figures and bytes per
    second per link), every rank stopped."""
    session.event.connect(telemetry.feed)
    try:
        if not session.start():
            raise ClusterError(session.error or "the Start was cancelled: nothing was asked")
        session.wait_ready()
        return ask_once(session, telemetry, prompt, max_tokens)
    finally:
        session.stop()
        session.event.disconnect(telemetry.feed)


def ask_once(
    session: Session, telemetry: Telemetry, prompt: str, max_tokens: int
) -> tuple[AnswerFigures, dict[str, float]]:
    """One request on a running session and its figures (``answer_figures``: tokens/s,
    time to first token, token counts, as every surface shows them), and bytes per link."""
    before = telemetry.link_totals()
    started = time.monotonic()
    request = session.ask(prompt, max_tokens=max_tokens)
    telemetry.request_started(request, started)
    done = session.wait_answer(request)
    elapsed = max(time.monotonic() - started, 1e-9)
    settle(time.monotonic())
    after = telemetry.link_totals()
    summary = next((r for r in telemetry.requests() if r.id == request), None)
    links = {link: round((after.get(link, 0) - before.get(link, 0)) / elapsed, 1) for link in after}
    return answer_figures(done, summary), links


def settle(done_at: float) -> None:
    """Wait until the ranks' last traffic reports of an answer that ended at ``done_at``
    (monotonic) are in: its figures and series then hold every byte it moved."""
    time.sleep(max(0.0, done_at + SETTLE_S - time.monotonic()))


def answer_record(
    session: Session,
    figures: dict[str, Any],
    telemetry: Telemetry,
    began: float,
    kind: RunKind = RunKind.CHAT,
    since: float | None = None,
    answer: tuple[RequestSummary, float] | None = None,
) -> RunRecord:
    """One answer as the history keeps it: the job as it ran (model, the ranks' nodes,
    strategy, split, backend), the figures, what each rank ran on, and the plotted series
    in seconds from ``began`` (monotonic): the session's whole, or only from ``since`` on
    (an API answer's own time: a server that lives for days keeps its answers' series,
    not the server's, in each)."""
    figures = {**figures, "ranks": ranks_with_memory(telemetry, session.plan)}
    if answer is not None:  # the answer's own span and series, in seconds from its send
        summary, done_at = answer
        began = since = answer_start(summary, since)
        figures["span_s"] = round(max(done_at - since, 0.0), 4)
    series = telemetry_series(telemetry, began, since)
    if answer is not None:
        own = [(t - began, v) for t, v in answer[0].rates if t >= began]
        series["tokens_per_s"] = [*own, (figures["span_s"], 0.0)] if own else []
        # up to its end; its links' last reports a moment after (each covers its interval)
        ends = {"tokens_per_s": figures["span_s"]}
        series = {
            k: [(t, v) for t, v in s if t <= ends.get(k, figures["span_s"] + SETTLE_S)]
            for k, s in series.items()
        }
    own_span = (answer[0].first_at, answer[0].last_at) if answer is not None else (None, None)
    batch = (
        telemetry.cluster_between(own_span[0], own_span[1])
        if own_span[0] is not None and own_span[1] is not None
        else None
    )
    if kind == RunKind.API and batch is not None and batch.most > 1:
        # An answer of a batch: the cluster's throughput over this answer's span (every
        # answer's tokens then: final when it ends, though others still stream), and the
        # tokens/s of all answers together, plotted.
        figures["batch"] = {
            "tokens_per_s": batch.tokens_per_s,
            "tokens": batch.tokens,
            "answers": batch.most,
            "span_s": round(batch.last_at - batch.first_at, 3),
        }
        cluster = series_points(*telemetry.aggregate_series(), began, since)
        end = figures.get("span_s")
        series["cluster tokens_per_s"] = (
            [(t, v) for t, v in cluster if t <= end + SETTLE_S] if end is not None else cluster
        )
    return job_record(session, kind, figures, series=series)


def keep_answer(
    session: Session,
    done: p.Done,
    telemetry: Telemetry,
    began: float,
    kind: RunKind = RunKind.CHAT,
    about: Mapping[str, Any] | None = None,
    done_at: float | None = None,
    since: float | None = None,
) -> tuple[RunRecord, str | None]:
    """An answer of a running session (the window's chat, or the API's) kept as ``chat``
    keeps one, with ``about`` among its figures (the API's client), once its traffic is
    in (``done_at``: when its ``done`` arrived, monotonic), its series from ``since`` on
    (``answer_record``): the record, and why it could not be kept (None: it was).
    Blocking (a wait, a write): off the GUI thread."""
    done_at = time.monotonic() if done_at is None else done_at
    settle(done_at)
    request = done["request"]
    summary = next((r for r in telemetry.requests() if r.id == request), None)
    figures = {**answer_figures(done, summary).as_dict(), **(about or {})}
    answer = (summary, done_at) if summary is not None else None
    record = answer_record(session, figures, telemetry, began, kind, since, answer)
    return record, keep(record)


def answer_start(summary: RequestSummary, since: float | None) -> float:
    """When an answer began on this process's clock: its send, else ``since``, else its
    first token."""
    for start in (summary.started_at, since, summary.first_at):
        if start is not None:
            return start
    return 0.0
