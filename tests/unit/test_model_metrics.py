"""``core.serve.model_metrics.exposition``: several models' figures in one Prometheus
text, each series labelled with its model, each family once (a scraper refuses a family
named twice), and nothing when no model is loaded."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from core.run.measure.telemetry import AnswerFigures
from core.serve.answers import Answerer
from core.serve.metrics import ServeMetrics
from core.serve.model_metrics import exposition


def _metrics(running: int) -> ServeMetrics:
    session: Any = object()  # Answerer keeps its session until it starts; none starts here
    return ServeMetrics(Answerer(session, max_running=running), lambda: None)


def test_each_models_series_carry_its_name_in_one_family_per_name() -> None:
    coder, writer = _metrics(4), _metrics(8)
    coder.request_ended("/v1/chat/completions", 200)
    coder.request_ended("/v1/chat/completions", 200)
    writer.request_ended("/v1/completions", 503)
    writer.answered(AnswerFigures(30, 100.0, 20, 8, 12.0, 0.3, "stop", "Paris"))
    text = exposition([("coder", coder), ("writer", writer)]).decode()
    families = list(text_string_to_metric_families(text))
    names = [family.name for family in families]
    assert len(names) == len(set(names))  # each family once, both models in it
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples
    }
    assert samples[("macmesh_api_requests_total", (("model", "coder"), ("status", "200")))] == 2
    assert samples[("macmesh_api_requests_total", (("model", "writer"), ("status", "503")))] == 1
    assert samples[("macmesh_api_generation_tokens_total", (("model", "writer"),))] == 8
    assert samples[("macmesh_api_generation_tokens_total", (("model", "coder"),))] == 0
    assert samples[("macmesh_api_running_limit", (("model", "coder"),))] == 4
    assert samples[("macmesh_api_running_limit", (("model", "writer"),))] == 8
    assert all(s.labels.get("model") in ("coder", "writer") for f in families for s in f.samples)


def test_no_model_loaded_is_an_empty_exposition() -> None:
    assert exposition([]) == b""
