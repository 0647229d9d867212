"""``core.serve.metrics`` without a server: an answer's figures as the history keeps them
become counters and histograms; figures a rank could not give (no first token, no speed)
are left out of the histograms rather than counted as zero; each server its own registry."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from core.run.measure.telemetry import AnswerFigures
from core.serve.answers import Answerer
from core.serve.metrics import ServeMetrics


class _NoSession:
    """Answerer only keeps its session until it starts; nothing here starts it."""


def _metrics() -> ServeMetrics:
    session: Any = _NoSession()
    return ServeMetrics(Answerer(session, max_running=4), lambda: None)


def _samples(metrics: ServeMetrics) -> dict[str, float]:
    text = metrics.exposition().decode()
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_answers_add_up_and_missing_figures_stay_out_of_the_histograms() -> None:
    metrics = _metrics()
    metrics.answered(AnswerFigures(30, 100.0, 20, 8, 12.0, 0.3, "stop", "Paris"))
    # Cancelled before its first token: no TTFT, no speed, nothing generated.
    metrics.answered(AnswerFigures(5, 50.0, 0, 0, 0.0, None, "cancelled", ""))
    # No prompt count (the worker gave none) and no rate: nothing of either counted.
    metrics.answered(AnswerFigures(None, None, 0, 0, None, None, None, ""))
    m = _samples(metrics)
    assert m["macmesh_api_prompt_tokens_total[]"] == 35
    assert m["macmesh_api_cached_tokens_total[]"] == 20
    assert m["macmesh_api_generation_tokens_total[]"] == 8
    assert m["macmesh_api_ttft_seconds_count[]"] == 1
    assert m["macmesh_api_ttft_seconds_bucket[('le', '0.25')]"] == 0
    assert m["macmesh_api_ttft_seconds_bucket[('le', '0.5')]"] == 1
    assert m["macmesh_api_generation_tokens_per_second_count[]"] == 1
    assert m["macmesh_api_generation_tokens_per_second_sum[]"] == 12.0


def test_requests_count_by_status_but_not_the_scrapes() -> None:
    metrics = _metrics()
    for status in (200, 200, 429, 499):
        metrics.request_ended("/v1/chat/completions", status)
    metrics.request_ended("/metrics", 200)
    m = _samples(metrics)
    assert m["macmesh_api_requests_total[('status', '200')]"] == 2
    assert m["macmesh_api_requests_total[('status', '429')]"] == 1
    assert m["macmesh_api_requests_total[('status', '499')]"] == 1
    # No cluster figures yet: the families are there, empty; the batch limit is said.
    assert m["macmesh_api_running_limit[]"] == 4 and m["macmesh_api_waiting[]"] == 0
    assert not any(k.startswith("macmesh_rank_memory_bytes") for k in m)


def test_two_servers_count_apart() -> None:
    first, second = _metrics(), _metrics()
    first.request_ended("/v1/models", 200)
    assert "macmesh_api_requests_total[('status', '200')]" not in _samples(second)
