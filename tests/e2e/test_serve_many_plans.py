"""``macmesh serve --demo --nodes 3`` with each model on its own Macs (issue 37): tiny-a as
a pipeline on Macs 1 and 2 (the models file's ``strategy`` and ``nodes``), tiny-b alone
on Mac 3 (``--model PATH@single:3``). Both answer ``openai`` clients at once, their ranks
are as many as their plans say, and ``/api/ps`` and ``/v1/models`` say where each runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.helpers.ctrlc import gone
from tests.helpers.serving import QUESTION, Served, ranks_of, start_serving
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

TINY_A, TINY_B = "tiny-a", "tiny-b"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plans-models")
    return {
        TINY_A: make_tiny_model(root / TINY_A, seed=1),
        TINY_B: make_tiny_model(root / TINY_B, arch="qwen3", seed=2),
    }


@pytest.fixture(scope="module")
def served(
    demo_model: Path, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("serve-plans-home")
    config = home / "models.json"
    config.write_text(
        json.dumps(
            {"models": [{"model": str(models[TINY_A]), "strategy": "pipeline", "nodes": [1, 2]}]}
        )
    )
    server = start_serving(
        demo_model,
        home,
        "--nodes",
        "3",
        "--models-file",
        str(config),
        "--model",
        f"{models[TINY_B]}@single:3",
    )
    try:
        assert server.proc.poll() is None, "\n".join(server.err)
        yield server
    finally:
        ranks = ranks_of(server, "")
        assert server.stop() == 0, "\n".join(server.err)
        wait_until(lambda: gone(ranks), 15, "every model's ranks to end")


def test_each_model_answers_on_its_own_macs_with_its_own_strategy(
    served: Served, models: dict[str, Path]
) -> None:
    answers: dict[str, list[str]] = {TINY_A: [], TINY_B: []}

    def ask(model: str) -> None:
        client = openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0)
        answer = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=8
        )
        answers[model].append(answer.choices[0].message.content or "")

    threads = [threading.Thread(target=ask, args=(m,)) for m in (TINY_A, TINY_B) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert [len(answers[TINY_A]), len(answers[TINY_B])] == [2, 2], "\n".join(served.err)
    assert all(answers[TINY_A]) and all(answers[TINY_B])

    base, key = f"http://127.0.0.1:{served.port}", {"Authorization": f"Bearer {served.key}"}
    ps = httpx.get(f"{base}/api/ps", headers=key, timeout=30).json()
    where = {m["name"]: m["macmesh"] for m in ps["models"]}
    assert sorted(where[TINY_A]["nodes"]) == ["Studio A", "Studio B"]
    assert where[TINY_A]["strategy"] == "pipeline"
    assert where[TINY_B]["nodes"] == ["Studio C"] and where[TINY_B]["strategy"] == "single"
    listed = httpx.get(f"{base}/v1/models", headers=key, timeout=30).json()
    nodes = {m["id"]: m["macmesh"]["nodes"] for m in listed["data"]}
    assert nodes == {TINY_A: where[TINY_A]["nodes"], TINY_B: ["Studio C"]}

    # A pipeline of two ranks, and one rank alone: as many ranks as each plan says.
    assert _rank_count(served, models[TINY_A]) == 2
    assert _rank_count(served, models[TINY_B]) == 1


def _rank_count(served: Served, folder: Path) -> int:
    """The ranks of the model in ``folder``: its workers but their own children (each
    rank's lifeline watchdog is a fork of it, with its command line)."""
    workers = ranks_of(served, str(folder))
    pids = {w.pid for w in workers}
    return sum(1 for w in workers if w.ppid() not in pids)
