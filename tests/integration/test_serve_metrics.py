"""``GET /metrics`` over a fake job (a real Session and server, no MLX), read with
prometheus_client's own parser: requests by status, the queue and the running batch while
answers stream, tokens in, out and from the prompt cache, the TTFT and tokens/s
histograms, each link's bytes and each rank's memory; behind the key unless turned off;
and each answer kept in the history with its cached tokens."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.keys import Gate
from core.serve.server import APIServer, ServerOptions
from core.worker.vocab import Strategy
from tests.gui.fakes import FakeBehaviour, fake_factory
from tests.helpers.wait import wait_until

KEY = "mm-" + "m" * 40
# The fake's tokens per answer: its words, then the end-of-sequence token (as the worker).
ANSWER_TOKENS = len(FakeBehaviour().answer.split()) + 1
MEMORY = FakeBehaviour().memory_bytes


def _serve(
    demo_model: Path, behaviour: FakeBehaviour, options: ServerOptions
) -> Iterator[APIServer]:
    session = Session(
        read_model_info(demo_model),
        simulated_hosts(demo_facts(2)),
        strategy=Strategy.PIPELINE,  # two ranks, so one link between them
        job_factory=fake_factory(behaviour),
    )
    session.make_plan()
    session.launch()
    session.wait_ready(30)
    assert session.plan is not None and len(session.plan.ranks) == 2
    server = APIServer(session, "demo", 8192, Gate(key=KEY), options)
    server.start()  # after the ranks loaded: their memory must still be there
    try:
        yield server
    finally:
        server.stop()
        session.stop()


serving = contextlib.contextmanager(_serve)


@pytest.fixture
def server(demo_model: Path) -> Iterator[APIServer]:
    behaviour = FakeBehaviour(token_s=0.01, cached_tokens=5)
    yield from _serve(demo_model, behaviour, ServerOptions("127.0.0.1", 0, max_running=2))


def _url(server: APIServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def _ask(server: APIServer, text: str = "Hi", key: str | None = KEY) -> httpx.Response:
    return httpx.post(
        _url(server, "/v1/chat/completions"),
        json={"model": "demo", "messages": [{"role": "user", "content": text}]},
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=30,
    )


def _scrape(server: APIServer, key: str | None = KEY) -> dict[str, list[Sample]]:
    """Every sample by metric family name, as a Prometheus server would read them."""
    got = httpx.get(
        _url(server, "/metrics"),
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=10,
    )
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/plain; version=")  # the text format
    return {f.name: f.samples for f in text_string_to_metric_families(got.text)}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def test_metrics_after_a_few_requests_carry_every_figure(server: APIServer) -> None:
    assert _ask(server, key=None).status_code == 401
    for n in range(3):
        answer = _ask(server, f"question {n}")
        assert answer.status_code == 200, answer.text
    assert _ask(server, key="mm-wrong").status_code == 401

    def requests() -> dict[str, float]:
        samples = _scrape(server)["macmesh_api_requests"]
        return {s.labels["status"]: s.value for s in samples if s.name.endswith("_total")}

    # A request is counted once its response has ended, after its client has it.
    wait_until(lambda: requests() == {"200": 3.0, "401": 2.0}, 10, "3 answered, 2 refused")
    m = _scrape(server)
    assert _value(m["macmesh_api_prompt_tokens"], "macmesh_api_prompt_tokens_total") == 3 * 12
    generated = m["macmesh_api_generation_tokens"]
    assert _value(generated, "macmesh_api_generation_tokens_total") == 3 * ANSWER_TOKENS
    assert _value(m["macmesh_api_cached_tokens"], "macmesh_api_cached_tokens_total") == 3 * 5
    ttft = m["macmesh_api_ttft_seconds"]
    assert _value(ttft, "macmesh_api_ttft_seconds_count") == 3
    assert 0 < _value(ttft, "macmesh_api_ttft_seconds_sum") < 3 * 10
    assert _value(ttft, "macmesh_api_ttft_seconds_bucket", le="+Inf") == 3
    rates = m["macmesh_api_generation_tokens_per_second"]
    assert _value(rates, "macmesh_api_generation_tokens_per_second_count") == 3
    assert _value(rates, "macmesh_api_generation_tokens_per_second_sum") > 0
    assert _value(m["macmesh_api_waiting"], "macmesh_api_waiting") == 0
    assert _value(m["macmesh_api_running"], "macmesh_api_running") == 0
    assert _value(m["macmesh_api_running_limit"], "macmesh_api_running_limit") == 2
    # The fake's ranks each send 4096 bytes to the other per token: both directions count.
    link = _value(m["macmesh_link_bytes"], "macmesh_link_bytes_total", link="0↔1")
    assert link >= 3 * ANSWER_TOKENS * 4096 and link % 4096 == 0
    memory = m["macmesh_rank_memory_bytes"]
    assert _value(memory, "macmesh_rank_memory_bytes", rank="0") == MEMORY
    assert _value(memory, "macmesh_rank_memory_bytes", rank="1") == MEMORY


def test_the_queue_and_the_running_batch_are_seen_while_answers_stream(
    demo_model: Path,
) -> None:
    slow = FakeBehaviour(token_s=0.3)  # six tokens: each answer streams for about 2 s
    with serving(demo_model, slow, ServerOptions("127.0.0.1", 0, max_running=2)) as server:
        answers: list[httpx.Response] = []
        clients = [
            threading.Thread(target=_ask_into, args=(server, answers), daemon=True)
            for _ in range(3)
        ]
        for client in clients:
            client.start()
        wait_until(lambda: _at_once(server) == (2, 1), 10, "2 running and 1 waiting")
        for client in clients:
            client.join(30)
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert _at_once(server) == (0, 0)


def _ask_into(server: APIServer, answers: list[httpx.Response]) -> None:
    answers.append(_ask(server))


def _at_once(server: APIServer) -> tuple[float, float]:
    """(running, waiting) as scraped."""
    m = _scrape(server)
    running = _value(m["macmesh_api_running"], "macmesh_api_running")
    return running, _value(m["macmesh_api_waiting"], "macmesh_api_waiting")


def test_metrics_need_the_key_unless_turned_off_for_them_alone(demo_model: Path) -> None:
    behaviour = FakeBehaviour(token_s=0.01)
    with serving(demo_model, behaviour, ServerOptions("127.0.0.1", 0)) as server:
        refused = httpx.get(_url(server, "/metrics"), timeout=10)
        assert refused.status_code == 401 and "API key" in refused.json()["error"]["message"]
        wrong = httpx.get(_url(server, "/metrics"), headers={"x-api-key": "mm-no"}, timeout=10)
        assert wrong.status_code == 401
        assert "macmesh_api_waiting" in _scrape(server)
    options = ServerOptions("127.0.0.1", 0, metrics_without_key=True)
    with serving(demo_model, behaviour, options) as server:
        assert "macmesh_api_running" in _scrape(server, key=None)
        assert _ask(server, key=None).status_code == 401  # the API itself keeps its key
        assert _ask(server).status_code == 200


def test_every_answer_is_kept_with_its_client_tokens_ttft_speed_and_cached_tokens(
    server: APIServer,
) -> None:
    assert _ask(server, "kept?").status_code == 200
    records = server.records
    assert records is not None
    wait_until(lambda: bool(records.kept), 10, "the answer kept in the history")
    figures = records.kept[-1].figures
    assert figures["client"] == "key file" and figures["cached_tokens"] == 5
    assert figures["prompt_tokens"] == 12 and figures["generation_tokens"] == ANSWER_TOKENS
    assert figures["ttft_s"] > 0 and figures["generation_tps"] > 0


def test_each_answer_keeps_its_own_series_not_the_servers(server: APIServer) -> None:
    """A server that lives for days keeps each API answer's plotted series over that
    answer's own span (from its request to its end, issue 35): a later answer's record
    holds none of an earlier one's points (it held everything since the server began:
    the controller grew as it served)."""
    records = server.records
    assert records is not None
    kept = len(records.kept)
    assert _ask(server, "first").status_code == 200
    wait_until(lambda: len(records.kept) > kept, 10, "the first answer kept")
    first = records.kept[-1]
    time.sleep(1.0)
    assert _ask(server, "second").status_code == 200
    wait_until(lambda: len(records.kept) > kept + 1, 10, "the second answer kept")
    second = records.kept[-1]
    for record in (first, second):
        span = record.figures["span_s"]
        own = record.series["tokens_per_s"]
        assert own and all(0 <= t <= span for t, _ in own)  # its own span, no other's
        assert len(own) == record.figures["generation_tokens"]  # a point a token, then 0
    assert second.started >= first.started + 1.0


def test_each_server_has_its_own_registry(server: APIServer) -> None:
    """Two servers in one process (the window serving again) never share a counter."""
    from prometheus_client import REGISTRY

    assert server.metrics.registry is not REGISTRY
    assert REGISTRY.get_sample_value("macmesh_api_requests_total", {"status": "200"}) is None
