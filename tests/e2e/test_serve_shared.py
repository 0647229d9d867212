"""``macmesh serve`` shared by people who do not trust each other (issue 33), end to end
on the demo cluster with a tiny model whose chat template is Mistral's:

- ``[user, user]`` answers 400 quoting the template, while a stream running at the same
  time finishes, and the next request is answered: pipeline, tensor and ``--batch 1``.
- With ``--batch 1`` an ordinary ``[system, user]`` request on the demo model is a 200,
  the ranks live on and the next request is answered.
- Two keys made with ``macmesh keys new``: a request of one reuses nothing the other sent
  (``cached_tokens`` exactly 0 over a 1,000-token shared prefix), its own next turn does.
- A 7.9 MB prompt to ``/v1/completions`` is refused (400 naming ``prompt``) while another
  key's stream goes on; one key cannot take every waiting place (429) while another waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers.serving import MODEL, Served, serve_command
from tests.helpers.templates import MISTRAL, MISTRAL_RULE, templated
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

NAME = "mistral"


@pytest.fixture(scope="module")
def model(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return templated(tiny_models["llama"], tmp_path_factory.mktemp("m") / NAME, MISTRAL)


def _env(home: Path) -> dict[str, str]:
    return dict(
        os.environ,
        MACMESH_DATA_DIR=str(home / "data"),
        MACMESH_LOG_DIR=str(home / "logs"),
        MACMESH_CONFIG_DIR=str(home / "config"),
        MACMESH_CACHE_DIR=str(home / "cache"),
        HF_HUB_OFFLINE="1",
    )


@contextlib.contextmanager
def _serving(model: Path, home: Path, *args: str) -> Iterator[Served]:
    served = serve_command(["--demo", str(model), "--nodes", "2", *args], home, _env(home))
    try:
        yield served
    finally:
        assert served.stop() == 0, "\n".join(served.err)


def _new_key(home: Path, label: str) -> str:
    made = subprocess.run(
        [sys.executable, "-m", "gui.cli", "keys", "new", label],
        env=_env(home),
        capture_output=True,
        text=True,
        check=True,
    )
    return made.stdout.strip()


def _chat(served: Served, messages: list, key: str | None = None, **extra) -> httpx.Response:
    return httpx.post(
        f"{served.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {key or served.key}"},
        json={"model": NAME, "messages": messages, **extra},
        timeout=120,
    )


def _stream(
    served: Served, key: str, max_tokens: int, into: list[str], pieces: list[str] | None = None
) -> threading.Thread:
    """A streamed chat in a thread: its finish reason goes to ``into`` at the end, each
    token's text to ``pieces`` as it comes."""

    def run() -> None:
        body = {"model": NAME, "stream": True, "max_tokens": max_tokens}
        body["messages"] = [{"role": "user", "content": "tell me a story"}]
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.stream(
            "POST", f"{served.base_url}/chat/completions", json=body, headers=headers, timeout=300
        ) as response:
            if response.status_code != 200:
                into.append(str(response.status_code))
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    for choice in chunk["choices"]:
                        if pieces is not None and choice["delta"].get("content"):
                            pieces.append(choice["delta"]["content"])
                    reason = chunk["choices"][0]["finish_reason"] if chunk["choices"] else None
                    if reason:
                        into.append(reason)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _waiting(served: Served) -> float:
    got = httpx.get(
        f"http://127.0.0.1:{served.port}/metrics",
        headers={"Authorization": f"Bearer {served.key}"},
        timeout=10,
    )
    for line in got.text.splitlines():
        if line.startswith("macmesh_api_waiting "):
            return float(line.split()[1])
    return -1


@pytest.mark.parametrize(
    "args",
    [
        ("--strategy", "pipeline"),
        ("--strategy", "tensor"),
        ("--strategy", "pipeline", "--batch", "1"),
    ],
    ids=["pipeline", "tensor", "batch-1"],
)
def test_a_refused_template_is_a_400_quoting_it_and_nothing_else_ends(
    model: Path, tmp_path: Path, args: tuple[str, ...]
) -> None:
    with _serving(model, tmp_path, *args) as served:
        ends: list[str] = []
        pieces: list[str] = []
        running = _stream(served, served.key, 60, ends, pieces)
        # Refused while the other answer streams (not before it began), so "streams
        # running at the same time finish" is what is tested.
        wait_until(lambda: pieces, 120, "the running stream's first token")
        refused = _chat(
            served, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert MISTRAL_RULE in error["message"] and error["param"] == "messages"
        assert not ends, "the stream beside it ended before the refusal: nothing ran beside it"
        running.join(120)
        assert ends == ["length"]  # the stream beside it finished its answer
        after = _chat(served, [{"role": "user", "content": "next"}], max_tokens=4)
        assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 4
        assert served.ranks_alive()


def test_batch_1_answers_an_ordinary_system_and_user_request_and_serves_on(
    demo_model: Path, tmp_path: Path
) -> None:
    """Issue 33, "Why" 1: with ``--batch 1`` an ordinary ``[system, user]`` request ended
    the job. On the demo model (whose template takes a system turn): a 200, the ranks
    alive, and the next request answered."""
    with _serving(demo_model, tmp_path, "--strategy", "pipeline", "--batch", "1") as served:
        asked = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        body = {"model": MODEL, "messages": asked, "max_tokens": 6, "temperature": 0}
        answer = httpx.post(
            f"{served.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {served.key}"},
            json=body,
            timeout=180,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1
        assert served.ranks_alive() and served.proc.poll() is None
        body["messages"] = [{"role": "user", "content": "And again?"}]
        body["max_tokens"] = 4
        after = httpx.post(
            f"{served.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {served.key}"},
            json=body,
            timeout=180,
        )
        assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] >= 1
        assert served.ranks_alive()


def test_two_keys_share_no_prompt_cache_and_one_cannot_hold_every_place(
    model: Path, tmp_path: Path
) -> None:
    ana, bo = _new_key(tmp_path, "Ana"), _new_key(tmp_path, "Bo")
    with _serving(model, tmp_path, "--prompt-cache-mb", "64", "--max-waiting", "4") as served:
        prefix = "the cat sat on the mat " * 100  # about 1,000 tokens, both keys' prefix
        turn = [{"role": "user", "content": prefix + "What sat?"}]
        more = [{"role": "assistant", "content": "x"}, {"role": "user", "content": "And?"}]

        def cached(key: str, messages: list) -> int:
            got = _chat(served, messages, key, max_tokens=2)
            assert got.status_code == 200, got.text
            usage = got.json()["usage"]
            assert usage["prompt_tokens"] > 1000
            return int(usage["prompt_tokens_details"]["cached_tokens"])

        assert cached(ana, turn) == 0
        assert cached(ana, [*turn, *more]) > 1000
        assert cached(bo, turn) == 0  # the very prompt Ana sent: nothing reused
        assert cached(bo, turn) > 1000  # Bo's own, once Bo sent it
        assert cached(ana, [*turn, *more]) > 1000  # Bo evicted nothing of Ana's

        huge = httpx.post(
            f"{served.base_url}/completions",
            headers={"Authorization": f"Bearer {bo}"},
            json={"model": NAME, "prompt": "x" * 7_900_000, "max_tokens": 4},
            timeout=120,
        )
        assert huge.status_code == 400 and huge.json()["error"]["param"] == "prompt"


def test_a_key_cannot_take_every_waiting_place_while_another_waits(
    model: Path, tmp_path: Path
) -> None:
    ana, bo = _new_key(tmp_path, "Ana"), _new_key(tmp_path, "Bo")
    with _serving(model, tmp_path, "--batch", "1", "--max-waiting", "4") as served:
        ends: list[str] = []
        streams = [_stream(served, ana, 1500, ends) for _ in range(5)]  # 1 runs, 4 wait
        wait_until(lambda: _waiting(served) == 4, 60, "Ana's 4 requests waiting")
        assert _chat(served, [{"role": "user", "content": "hi"}], ana).status_code == 429
        bos = _chat(served, [{"role": "user", "content": "hi"}], bo, max_tokens=2)
        for stream in streams:
            stream.join(300)
        assert bos.status_code == 200  # one of Ana's made room: refused with a 429
        assert ends.count("length") == 4 and "429" in ends
