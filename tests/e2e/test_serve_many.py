"""``macmesh serve --demo`` with several models (issue 37), used by real ``openai``
clients: two models loaded at start answer at once; a third, loadable, loads on its
first request and unloads after its keep-alive (its ranks gone); an unload through the
API ends that model's ranks while the other model's streams go on; Ollama's keep_alive 0
unloads; a load that fails is one line and the others serve on."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.helpers.ctrlc import gone
from tests.helpers.serving import MODEL, QUESTION, Served, start_serving
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

TINY_A, TINY_B, BROKEN = "tiny-a", "tiny-b", "broken"
# A stall of the other model's stream while one model unloads: the bound is 1 s.
# On this 2-core machine shared by other test runs a token can wait over a second for a
# core with nothing unloading at all, so the test holds the streams to a wide bound (they
# go on, none ends early) and the benchmark (bench_serve_many) reports the real gap.
STALL_BOUND_S = 8.0


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("many-models")
    made = {
        TINY_A: make_tiny_model(root / TINY_A, seed=1),
        TINY_B: make_tiny_model(root / TINY_B, arch="qwen3", seed=2),
    }
    made[BROKEN] = shutil.copytree(made[TINY_A], root / BROKEN)  # spoilt once serving
    return made


@pytest.fixture(scope="module")
def served(
    demo_model: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("serve-many-home")
    config = home / "models.json"
    config.write_text(
        json.dumps(
            {
                "models": [
                    {"model": "demo"},
                    {"model": str(models[TINY_A])},
                    {"model": str(models[TINY_B]), "load": "on-demand", "keep_alive": "6s"},
                    {"model": str(models[BROKEN]), "load": "on-demand"},
                ]
            }
        )
    )
    server = start_serving(demo_model, home, "--models-file", str(config), "--keep-alive", "-1")
    try:
        yield server
    finally:
        ranks = _ranks_of(server, "")
        assert server.stop() == 0, "\n".join(server.err)
        wait_until(lambda: gone(ranks), 15, "every model's ranks to end")


def _client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0)


def _ranks_of(served: Served, folder: str) -> list[psutil.Process]:
    """The live worker processes under the server whose command line names ``folder``."""
    found = []
    for child in psutil.Process(served.proc.pid).children(recursive=True):
        try:
            line = " ".join(child.cmdline())
            if "core.worker" in line and folder in line and child.status() != "zombie":
                found.append(child)
        except psutil.Error:
            continue
    return found


def _states(served: Served) -> dict[str, str]:
    listed = httpx.get(
        f"{served.base_url}/models", headers={"Authorization": f"Bearer {served.key}"}
    ).json()
    return {m["id"]: m["status"]["value"] for m in listed["data"]}


def _post(served: Served, path: str, body: dict) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{served.port}{path}",
        json=body,
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=300,
    )


def test_two_models_answer_openai_clients_at_once_and_the_list_says_what_is_loaded(
    served: Served,
) -> None:
    assert _states(served) == {
        MODEL: "loaded",
        TINY_A: "loaded",
        TINY_B: "unloaded",
        BROKEN: "unloaded",
    }
    answers: dict[str, list[str]] = {MODEL: [], TINY_A: []}

    def ask(model: str) -> None:
        answer = _client(served).chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=12
        )
        answers[model].append(answer.choices[0].message.content or "")

    threads = [threading.Thread(target=ask, args=(m,)) for m in (MODEL, TINY_A) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert len(answers[MODEL]) == 2 and "Paris" in answers[MODEL][0]
    assert len(answers[TINY_A]) == 2 and all(answers[TINY_A])
    ps = httpx.get(
        f"http://127.0.0.1:{served.port}/api/ps",
        headers={"Authorization": f"Bearer {served.key}"},
    ).json()
    running = {m["name"]: m["macmesh"]["nodes"] for m in ps["models"]}
    assert set(running) == {MODEL, TINY_A} and all(running.values())


def test_a_loadable_model_loads_on_its_first_request_then_unloads_after_its_keep_alive(
    served: Served, models: dict[str, Path]
) -> None:
    assert not _ranks_of(served, str(models[TINY_B]))
    stream = _client(served).chat.completions.create(
        model=TINY_B, messages=[{"role": "user", "content": QUESTION}], max_tokens=8, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    assert any(f"model {TINY_B}: loaded in" in line for line in served.out)
    assert _ranks_of(served, str(models[TINY_B]))
    wait_until(lambda: _states(served)[TINY_B] == "unloaded", 90, "its keep-alive to unload it")
    wait_until(lambda: not _ranks_of(served, str(models[TINY_B])), 30, "its ranks to end")
    assert _states(served)[MODEL] == "loaded"  # the others have no keep-alive (-1)


def test_an_unload_through_the_api_ends_its_ranks_while_the_other_models_streams_go_on(
    served: Served, demo_model: Path
) -> None:
    """Three streams of tiny-a (a tiny model always runs to max_tokens) while the demo
    model is unloaded through the API, then loaded again."""
    assert _ranks_of(served, str(demo_model))
    gaps: list[list[float]] = [[] for _ in range(3)]
    ends: list[str | None] = [None] * 3
    started = threading.Barrier(4)

    def stream(i: int) -> None:
        chunks = _client(served).completions.create(
            model=TINY_A, prompt=f"Count from {i}", max_tokens=150, stream=True
        )
        last, first = time.monotonic(), True
        for chunk in chunks:
            now = time.monotonic()
            if chunk.choices and chunk.choices[0].text:
                if first:
                    started.wait(120)
                    first = False
                else:
                    gaps[i].append(now - last)
                last = now
            if chunk.choices and chunk.choices[0].finish_reason:
                ends[i] = chunk.choices[0].finish_reason

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    started.wait(120)
    unloaded = _post(served, "/models/unload", {"model": MODEL})
    assert unloaded.status_code == 200 and unloaded.json()["unloaded"] is True
    assert not _ranks_of(served, str(demo_model))  # ended before the unload answered
    for thread in threads:
        thread.join(300)
    assert ends == ["length"] * 3, ends  # every stream of the other model ran to its end
    assert all(len(g) >= 50 for g in gaps), [len(g) for g in gaps]
    assert max(max(g) for g in gaps) < STALL_BOUND_S
    assert _states(served)[MODEL] == "unloaded"
    loaded = _post(served, "/models/load", {"model": MODEL})
    assert loaded.status_code == 200 and _states(served)[MODEL] == "loaded"


def test_ollamas_keep_alive_0_unloads_and_an_empty_chat_loads(
    served: Served, models: dict[str, Path]
) -> None:
    _post(served, "/models/load", {"model": TINY_A})
    gone = _post(
        served, "/api/chat", {"model": f"{TINY_A}:latest", "messages": [], "keep_alive": 0}
    )
    assert gone.status_code == 200 and gone.json()["done_reason"] == "unload"
    assert _states(served)[TINY_A] == "unloaded" and not _ranks_of(served, str(models[TINY_A]))
    back = _post(served, "/api/chat", {"model": TINY_A, "messages": []})
    assert back.json()["done_reason"] == "load" and _states(served)[TINY_A] == "loaded"
    bad = _post(served, "/api/chat", {"model": TINY_A, "messages": [], "keep_alive": "soon"})
    assert bad.status_code == 400 and "keep_alive" in bad.json()["error"]
    chat = {"model": TINY_A, "messages": [{"role": "user", "content": QUESTION}]}
    answered = _post(served, "/api/chat", {**chat, "stream": False, "keep_alive": 0})
    assert answered.status_code == 200 and answered.json()["done"] is True
    wait_until(lambda: _states(served)[TINY_A] == "unloaded", 30, "keep_alive 0 to unload")


def test_a_streamed_request_for_a_model_not_loaded_gets_keep_alives_then_its_answer(
    served: Served,
) -> None:
    assert _states(served)[TINY_A] == "unloaded"
    body = {"model": TINY_A, "prompt": "Once", "max_tokens": 4, "stream": True}
    lines = []
    with httpx.stream(
        "POST",
        f"{served.base_url}/completions",
        json=body,
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=300,
    ) as got:
        assert got.status_code == 200
        lines = [line for line in got.iter_lines() if line]
    assert lines[0] == f": loading {TINY_A}"  # at once, then every 2 s while it loads
    assert any(line.startswith("data: {") for line in lines) and lines[-1] == "data: [DONE]"
    assert _states(served)[TINY_A] == "loaded"


def test_a_load_that_fails_is_one_line_and_the_others_serve_on(
    served: Served, models: dict[str, Path]
) -> None:
    for weights in models[BROKEN].glob("*.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])  # truncated: its load fails
    with pytest.raises(openai.APIStatusError) as refused:
        _client(served).chat.completions.create(
            model=BROKEN, messages=[{"role": "user", "content": QUESTION}], max_tokens=4
        )
    assert refused.value.status_code == 503
    message = refused.value.body["message"]  # type: ignore[index]
    assert message.startswith(f"{BROKEN} could not be loaded") and "\n" not in message
    assert _states(served)[BROKEN] == "unloaded"
    answer = _client(served).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=12
    )
    assert "Paris" in (answer.choices[0].message.content or "")


def test_an_unknown_model_is_a_404_naming_the_models_served(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        _client(served).chat.completions.create(
            model="nope", messages=[{"role": "user", "content": QUESTION}]
        )
    assert MODEL in str(refused.value) and TINY_B in str(refused.value)
