"""The window's API with several models (issue 37) over a (fake) Run-pane job: the job is
the first model, loaded and pinned: listed by ``/v1/models``, answered through the front,
never unloaded by the API (a 409 in one line) nor by ``keep_alive: 0``; every other path
(``/metrics``) is the job's own; stopping the server ends its answers but not the job,
which the Run pane's Stop ends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.run.states import RunState
from core.serve.service import ApiService, ApiSettings
from core.serve.window_models import ServiceModels
from tests.gui.fakes import fake_factory
from tests.helpers.serving import free_port
from tests.helpers.tiny_models import make_tiny_model


@pytest.fixture
def serving(demo_model: Path) -> Iterator[tuple[ApiService, Session, str]]:
    job = Session(
        read_model_info(demo_model), simulated_hosts(demo_facts(2)), job_factory=fake_factory()
    )
    job.make_plan()
    job.launch()
    job.wait_ready(30)
    settings = ApiSettings(
        enabled=True, require_key=False, port=free_port(), metrics_without_key=True
    )
    service = ApiService(settings=settings)
    try:
        service.attach(job, "demo", 8192)
        assert service.running
        yield service, job, service.address
    finally:
        service.close()
        job.stop()


def test_the_job_is_the_first_model_loaded_and_pinned(serving) -> None:
    service, job, url = serving
    listed = httpx.get(f"{url}/models", timeout=10).json()["data"]
    assert [(m["id"], m["macmesh"]["state"], m["macmesh"]["pinned"]) for m in listed] == [
        ("demo", "loaded", True)
    ]
    assert listed[0]["macmesh"]["nodes"] == list(dict.fromkeys(job.plan.nodes_used))
    body = {"model": "demo", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    answered = httpx.post(f"{url}/chat/completions", json=body, timeout=30)
    assert answered.status_code == 200, answered.text
    assert service.served == 1  # the job's own line of answers, as the window counts it
    base = url.removesuffix("/v1")
    refused = httpx.post(f"{base}/models/unload", json={"model": "demo"}, timeout=10)
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    assert "Stop in the Run pane" in message and "\n" not in message
    ollama = httpx.post(f"{base}/api/chat", json={"model": "demo", "keep_alive": 0}, timeout=10)
    assert ollama.status_code == 409
    metrics = httpx.get(f"{base}/metrics", timeout=10)  # the job's own routes
    assert metrics.status_code == 200 and "macmesh" in metrics.text
    assert service.models is not None and service.models.models()[0]["pinned"]


def test_stopping_the_api_leaves_the_job_to_the_run_pane(serving) -> None:
    service, job, url = serving
    service.detach()
    assert not service.running and service.models is None
    assert job.state == RunState.READY  # still running: the Run pane's Stop ends it
    assert job.wait_answer(job.ask("Hi", max_tokens=3), 30)["event"] == "done"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models", timeout=5)


def test_a_model_that_does_not_fit_beside_the_job_is_one_line_and_loads_nothing(
    tmp_path: Path,
) -> None:
    """Simulated Macs with a 900 MB GPU limit hold one tiny model, not two: the job's
    memory counts (it is never unloaded to make room), so a second is refused."""
    small = [replace(f, wired_limit_mb=900) for f in demo_facts(2)]
    first = make_tiny_model(tmp_path / "tiny-a", seed=0)
    job = Session(
        read_model_info(first),
        simulated_hosts(small),
        strategy="pipeline",
        job_factory=fake_factory(),
    )
    job.make_plan()
    job.launch()
    job.wait_ready(30)
    settings = ApiSettings(enabled=True, require_key=False, port=free_port())
    service = ApiService(settings=settings)
    try:
        service.attach(job, "tiny-a", 2048)
        models = ServiceModels(service)
        why = models.fits(make_tiny_model(tmp_path / "tiny-b", seed=1))
        assert why and "\n" not in why and "tiny-b" in why, why
        assert [m["name"] for m in models.models()] == ["tiny-a"]
    finally:
        service.close()
        job.stop()
    assert ServiceModels(service).models() == []  # not serving: nothing listed
    with pytest.raises(ValueError, match="not serving"):
        ServiceModels(service).fits(first)
