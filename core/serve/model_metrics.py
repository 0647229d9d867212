"""``GET /metrics`` with several models (issue 37): each loaded model keeps its own
figures as one model's server keeps them (``ServeMetrics``: its requests, tokens, time to
first token, tokens/s, line of answers, links and ranks' memory; ``ApiRecords``: each of
its answers kept in the run history), and the front's ``/metrics`` gives every loaded
model's series with a ``model`` label, in Prometheus's text format. A model's series go
with it when it unloads (a counter starts again from 0 when it loads again, which
Prometheus's ``rate`` reads as a reset). The window's server keeps its job's ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from core.run.session import Session
from core.serve.answers import Answerer
from core.serve.metrics import ServeMetrics
from core.serve.records import ApiRecords


class ModelFigures:
    """One loaded model's metrics and records: ``sent`` is its ``Answerer``'s callback;
    ``follow`` once its answers exist; ``close`` (blocking, up to the records' own bound)
    when it unloads."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.metrics: ServeMetrics | None = None
        self.records: ApiRecords | None = None

    def follow(self, answers: Answerer) -> ServeMetrics:
        self.metrics = ServeMetrics(
            answers, lambda: self.records.telemetry if self.records else None
        )
        self.records = ApiRecords(self.session, self.metrics.answered)
        return self.metrics

    def sent(self, request: str, started: float, client: str, _question: str) -> None:
        """On a pool thread: the request went to the ranks (kept once answered)."""
        if self.records is not None:
            self.records.sent(request, started, client)

    def close(self) -> None:
        records, self.records = self.records, None
        if records is not None:
            records.close()


def exposition(models: Sequence[tuple[str, ServeMetrics]]) -> bytes:
    """Every model's series, each labelled with its ``model``, one family per name."""
    registry = CollectorRegistry()
    registry.register(_Labelled(models))
    return generate_latest(registry)


class _Labelled(Collector):
    def __init__(self, models: Sequence[tuple[str, ServeMetrics]]) -> None:
        self.models = models

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for name, metrics in self.models:
            for family in metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                merged.samples += [
                    sample._replace(labels={"model": name, **sample.labels})
                    for sample in family.samples
                ]
        yield from families.values()
