"""``macmesh serve --demo`` used by real clients: the official ``openai`` package, streamed
and not, and curl; the errors in OpenAI's shape; keys; SIGTERM stops every rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.serving import MODEL, QUESTION, Served, start_serving
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(demo_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = start_serving(demo_model, tmp_path_factory.mktemp("serve-home"))
    try:
        yield server
    finally:
        assert server.stop() == 0, "\n".join(server.err)
        assert any("stopped (SIGTERM)" in line for line in server.err)


def _client(served: Served, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=key or served.key, max_retries=0)


def test_the_key_file_is_made_0600_before_serving_and_the_address_is_printed(
    served: Served,
) -> None:
    assert oct(served.key_file.stat().st_mode & 0o777) == "0o600"
    [ready] = [line for line in served.out if line.startswith("Serving")]
    assert served.base_url in ready and str(served.key_file) in ready


def test_the_openai_client_gets_paris(served: Served) -> None:
    client = _client(served)
    [model] = client.models.list().data
    assert model.id == MODEL
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}]
    )
    assert "Paris" in answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.prompt_tokens > 5 and answer.usage.completion_tokens > 3


def test_the_openai_client_streams_paris_with_usage(served: Served) -> None:
    stream = _client(served).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 3


def test_a_5_turn_chat_reuses_its_history_from_the_prompt_cache(served: Served) -> None:
    client = _client(served)
    history: list[dict[str, str]] = []
    turns = []
    for question in (QUESTION, "And of Spain?", "Which is bigger?", "Why?", "Thanks!"):
        history.append({"role": "user", "content": question})
        answer = client.chat.completions.create(model=MODEL, messages=history, max_tokens=10)
        history.append({"role": "assistant", "content": answer.choices[0].message.content})
        turns.append(answer)
    assert turns[0].choices[0].message.content == "The capital of France is Paris."
    assert turns[1].choices[0].message.content == "The capital of Spain is Madrid."
    cached = [t.usage.prompt_tokens_details.cached_tokens for t in turns]
    prompts = [t.usage.prompt_tokens for t in turns]
    assert cached[0] < prompts[0]  # the question may have been asked before: not all of it
    for n in range(1, 5):
        # Every later turn reuses the history up to the last answer at least.
        assert prompts[n - 1] <= cached[n] < prompts[n], (cached, prompts)


def test_metrics_are_read_by_prometheus_clients_own_parser(served: Served) -> None:
    """After two turns of a chat, ``/metrics`` (behind the key) carries the answers, their
    tokens (the second turn's prompt from the prompt cache), TTFT, each rank's memory and
    the link between the demo's two ranks."""
    client = _client(served)
    turn = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=10)
    turn += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "And of Spain?"},
    ]
    second = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=10)
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    assert cached and cached > 0
    url = f"http://127.0.0.1:{served.port}/metrics"
    assert httpx.get(url, timeout=10).status_code == 401

    def scrape() -> dict[str, float]:
        got = httpx.get(url, headers={"Authorization": f"Bearer {served.key}"}, timeout=10)
        assert got.status_code == 200
        return {
            f"{s.name}{sorted(s.labels.items())}": s.value
            for family in text_string_to_metric_families(got.text)
            for s in family.samples
        }

    ok = "macmesh_api_requests_total[('status', '200')]"
    wait_until(lambda: scrape().get(ok, 0) >= 2, 10, "two answers counted")
    m = scrape()
    generated = first.usage.completion_tokens + second.usage.completion_tokens
    assert m["macmesh_api_generation_tokens_total[]"] >= generated
    assert m["macmesh_api_prompt_tokens_total[]"] >= first.usage.prompt_tokens
    assert m["macmesh_api_cached_tokens_total[]"] >= cached
    assert m["macmesh_api_ttft_seconds_count[]"] >= 2 and m["macmesh_api_ttft_seconds_sum[]"] > 0
    assert m["macmesh_api_generation_tokens_per_second_count[]"] >= 2
    assert m["macmesh_api_running[]"] == 0 and m["macmesh_api_waiting[]"] == 0
    memory = [v for k, v in m.items() if k.startswith("macmesh_rank_memory_bytes[")]
    assert len(memory) == len(served.ranks) == 2 and min(memory) > 50 << 20
    assert m["macmesh_link_bytes_total[('link', '0↔1')]"] > 0


def test_metrics_without_key_opens_metrics_alone(tmp_path: Path, demo_model: Path) -> None:
    server = start_serving(demo_model, tmp_path, "--metrics-without-key")
    try:
        scraped = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
        assert scraped.status_code == 200
        names = {f.name for f in text_string_to_metric_families(scraped.text)}
        assert {"macmesh_api_requests", "macmesh_rank_memory_bytes"} <= names
        assert httpx.get(f"{server.base_url}/models", timeout=10).status_code == 401
    finally:
        assert server.stop() == 0, "\n".join(server.err)


def test_without_the_key_the_answer_is_401(served: Served) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        _client(served, key="mm-not-the-key-at-all").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": QUESTION}]
        )
    assert caught.value.status_code == 401
    bare = httpx.get(f"{served.base_url}/models")
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "invalid_api_key"


def test_the_api_gives_the_same_text_as_the_headless_demo(served: Served, demo_model: Path) -> None:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "demo", "--headless", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    headless = json.loads(run.stdout.strip().splitlines()[-1])["text"]
    api = _client(served).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=64
    )
    assert api.choices[0].message.content == headless and "Paris" in headless


def test_curl_streams_and_is_refused_without_a_key(served: Served) -> None:
    body = json.dumps(
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    )
    url = f"{served.base_url}/chat/completions"
    auth = f"Authorization: Bearer {served.key}"
    run = subprocess.run(
        ["curl", "-sN", "-H", auth, "-H", "Content-Type: application/json", "-d", body, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    events = [line[6:] for line in run.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(
        choice["delta"].get("content", "")
        for event in events[:-1]
        for choice in json.loads(event)["choices"]
    )
    assert "Paris" in text
    refused = subprocess.run(
        ["curl", "-s", "-w", "\n%{http_code}", "-d", body, url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.stdout.splitlines()[-1] == "401"


def test_completions_take_raw_text(served: Served) -> None:
    answer = _client(served).completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=4
    )
    assert "Paris" in answer.choices[0].text and answer.usage.completion_tokens == 4


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "gpt-4o"),
        ({"model": MODEL, "messages": "hi"}, 400, "messages"),
        (
            {"model": MODEL, "max_tokens": 10**9, "messages": [{"role": "user", "content": "hi"}]},
            400,
            "context is 8192",
        ),
        (
            {"model": MODEL, "temperature": "hot", "messages": [{"role": "user", "content": "x"}]},
            400,
            "temperature",
        ),
        (
            {"model": MODEL, "messages": [{"role": "user", "content": "Paris " * 9000}]},
            400,
            "context is 8192",
        ),
    ],
)
def test_bad_requests_get_openais_error_shape_and_the_job_serves_on(
    served: Served, body: object, status: int, words: str
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    answer = httpx.post(
        f"{served.base_url}/chat/completions",
        content=raw,
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=120,
    )
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert words in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert served.ranks_alive()


def test_one_log_line_per_request(served: Served) -> None:
    # A line is printed after its answer is sent: the earlier tests' last lines may still
    # be on their way. A marker request's line comes after all of them.
    marker = f"/v1/settled-{uuid.uuid4().hex[:8]}"
    httpx.get(f"http://127.0.0.1:{served.port}{marker}")
    wait_until(lambda: any(marker in line for line in served.request_lines()), 30, "the marker")
    before = len(served.request_lines())
    httpx.get(f"{served.base_url}/models", headers={"Authorization": f"Bearer {served.key}"})
    httpx.get(f"{served.base_url}/nothing-here")
    lines = served.wait_for_request_lines(before + 2)[before:]
    assert len(lines) == 2
    assert "GET /v1/models 200" in lines[0] and "GET /v1/nothing-here 40" in lines[1]


# -- Anthropic's Messages API and Ollama's chat, over the same path ----------------------


def test_the_anthropic_client_gets_paris_streamed_and_not(served: Served) -> None:
    import anthropic

    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{served.port}", api_key=served.key, max_retries=0
    )
    ask = {"model": MODEL, "max_tokens": 32, "messages": [{"role": "user", "content": QUESTION}]}
    message = client.messages.create(**ask)
    assert "Paris" in message.content[0].text and message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 5 and message.usage.output_tokens > 3
    with client.messages.stream(**ask) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "Paris" in text and final.usage.output_tokens > 3
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{served.port}", api_key="mm-wrong-key-here", max_retries=0
        ).messages.create(**ask)
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.messages.create(model=MODEL, max_tokens=0, messages=ask["messages"])


def test_the_ollama_client_lists_the_model_and_gets_paris(served: Served) -> None:
    import ollama

    client = ollama.Client(
        host=f"http://127.0.0.1:{served.port}", headers={"Authorization": f"Bearer {served.key}"}
    )
    assert [m.model for m in client.list().models] == [MODEL]
    question = [{"role": "user", "content": QUESTION}]
    answer = client.chat(model=MODEL, messages=question, options={"num_predict": 32})
    assert "Paris" in answer.message.content and answer.done and answer.eval_count > 3
    pieces = list(client.chat(model=MODEL, messages=question, stream=True))
    assert "Paris" in "".join(p.message.content for p in pieces) and pieces[-1].done
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="llama3", messages=question)
    assert caught.value.status_code == 404 and "llama3" in caught.value.error
    refused = httpx.get(f"http://127.0.0.1:{served.port}/api/tags")
    assert refused.status_code == 401 and "error" in refused.json()


# -- bad input: one clear line, exit 2, nothing started ------------------------------------


def _serve_cli(args: list[str], home: Path, demo_model: Path) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        MACMESH_CACHE_DIR=str(demo_model.parents[1]),
        MACMESH_DATA_DIR=str(home / "data"),
        HF_HUB_OFFLINE="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], "--demo"),
        (["--demo", "--no-key", "--host", "0.0.0.0"], "always needs a key"),
        (["--demo", "--port", "70000"], "--port"),
        (["/nowhere"], "--hosts"),
        (["--demo", "--batch", "0"], "--batch"),
        (["--demo", "--prompt-cache-mb", "-1"], "--prompt-cache-mb"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    args: list[str], words: str, tmp_path: Path, demo_model: Path
) -> None:
    run = _serve_cli(args, tmp_path, demo_model)
    assert run.returncode == 2, run.stderr
    [line] = [line for line in run.stderr.splitlines() if line.startswith("macmesh:")]
    assert words in line and "Traceback" not in run.stderr and "Starting" not in run.stderr


def test_a_taken_port_is_said_before_loading(tmp_path: Path, demo_model: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        run = _serve_cli(["--demo", "--port", port], tmp_path, demo_model)
    assert run.returncode == 2 and "choose another port" in run.stderr
    assert "Starting" not in run.stderr and "Traceback" not in run.stderr


def test_a_key_file_others_can_read_is_refused(tmp_path: Path, demo_model: Path) -> None:
    key = tmp_path / "key"
    key.write_text("mm-" + "x" * 40 + "\n")
    key.chmod(0o644)
    run = _serve_cli(["--demo", "--api-key-file", str(key)], tmp_path, demo_model)
    assert run.returncode == 2 and "chmod 600" in run.stderr and "Starting" not in run.stderr


def test_ctrl_c_while_serving_stops_every_rank_and_exits_130(
    tmp_path: Path, demo_model: Path
) -> None:
    import signal

    from tests.helpers.ctrlc import gone
    from tests.helpers.wait import wait_until

    server = start_serving(demo_model, tmp_path)
    os.kill(server.proc.pid, signal.SIGINT)
    assert server.proc.wait(60) == 130
    wait_until(lambda: gone(server.ranks), 15, "every rank to end")
    assert any("interrupted while serving; every rank stopped" in line for line in server.err)


@pytest.mark.parametrize(("sent", "code"), [("SIGTERM", 0), ("SIGINT", 130)])
def test_a_stream_open_when_serve_is_stopped_gets_a_final_event_and_no_traceback(
    tmp_path: Path, demo_model: Path, sent: str, code: int
) -> None:
    """Issue 26, item 10: SIGTERM or Ctrl-C while a stream is open: the stream ends with
    OpenAI's error event (not cut), no CancelledError traceback, every rank ends."""
    import signal

    server = start_serving(demo_model, tmp_path)
    lines: list[str] = []
    try:
        body = {
            "model": MODEL,
            "max_tokens": 2000,
            "stream": True,
            "messages": [{"role": "user", "content": "Write a very long story about a cat."}],
        }
        with httpx.stream(
            "POST",
            f"{server.base_url}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {server.key}"},
            timeout=120,
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if not line:
                    continue
                lines.append(line)
                if len(lines) == 3:  # the role chunk, then two pieces of the story
                    os.kill(server.proc.pid, getattr(signal, sent))
        assert server.proc.wait(60) == code, "\n".join(server.err)
    finally:
        server.stop()
    last = json.loads(lines[-1].removeprefix("data: "))
    assert last["error"]["message"] == "The server is stopping.", lines[-3:]
    assert not any("Traceback" in line or "CancelledError" in line for line in server.err), (
        "\n".join(server.err)
    )
