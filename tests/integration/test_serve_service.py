"""The window's API service over a fake job: it serves while a job is up, only when on;
shared, it says its port to the announcer (Bonjour) and withdraws it; settings kept."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.service import ApiService, ApiSettings, examples, load_settings
from tests.gui.fakes import fake_factory
from tests.helpers.serving import free_port


@pytest.fixture
def session(demo_model: Path):
    started = Session(
        read_model_info(demo_model), simulated_hosts(demo_facts(2)), job_factory=fake_factory()
    )
    started.make_plan()
    started.launch()
    started.wait_ready(30)
    yield started
    started.stop()


def test_it_serves_while_on_and_attached_and_announces_when_shared(session: Session) -> None:
    said: list[int | None] = []
    service = ApiService(announce=said.append)
    service.attach(session, "demo", 8192)
    assert not service.running  # off by default
    port = free_port()
    service.apply(ApiSettings(enabled=True, share=True, port=port))
    try:
        assert service.running and said == [port]
        key = service.new_key("test")
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "demo", "messages": [{"role": "user", "content": "Hi"}]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert answer.status_code == 200 and "Paris" in answer.text
        assert service.served == 1
    finally:
        service.detach()
    assert not service.running and said == [port, None]
    assert load_settings() == ApiSettings(enabled=True, share=True, port=port)


def test_a_taken_port_is_said_not_raised(session: Session) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        service = ApiService(settings=ApiSettings(enabled=True, port=taken.getsockname()[1]))
        service.attach(session, "demo", 8192)
        assert not service.running and "choose another port" in service.error
        service.detach()


def test_the_examples_carry_the_address_model_and_key() -> None:
    lines = examples("http://127.0.0.1:8080/v1", "demo", "mm-key")
    assert "http://127.0.0.1:8080/v1/chat/completions" in lines["curl"]
    assert "Bearer mm-key" in lines["curl"] and 'model="demo"' in lines["python"]
    compile(lines["python"], "example", "exec")  # the Python example is valid Python


def test_metrics_without_a_key_opens_metrics_alone(session: Session) -> None:
    service = ApiService()
    service.attach(session, "demo", 8192)
    port = free_port()
    try:
        service.apply(ApiSettings(enabled=True, port=port))
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 401
        service.apply(ApiSettings(enabled=True, port=port, metrics_without_key=True))
        scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scraped.status_code == 200 and "macmesh_api_running 0.0" in scraped.text
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 401
    finally:
        service.detach()


def test_the_window_runs_as_many_at_once_as_the_jobs_batch(demo_model: Path) -> None:
    """The API's requests at once come from the job's spec (its batch), not a number of
    the window's own: a batch of 3 set in the settings reaches the ranks and the queue."""
    from core.run.planning import Serving

    started = Session(
        read_model_info(demo_model),
        simulated_hosts(demo_facts(2)),
        job_factory=fake_factory(),
        serving=Serving(batch=3),
    )
    started.make_plan()
    started.launch()
    started.wait_ready(30)
    service = ApiService(settings=ApiSettings(enabled=True, require_key=False, port=free_port()))
    try:
        service.attach(started, "demo", 8192)
        assert service.running and started.job is not None
        assert started.job.spec.batch == 3
        server = service._server
        assert server is not None and server.answers.max_running == 3
        assert server.options.max_running == 3
    finally:
        service.detach()
        started.stop()
