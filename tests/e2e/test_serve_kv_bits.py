"""``macmesh serve --kv-bits 8`` end to end on the demo cluster (issue 37, item 4): eight
``openai`` clients at once, the prompt cache on, on one rank, a 2-rank pipeline and a
2-rank tensor job:

- the demo model at 8 bits answers the eight prompts at once as each alone (``--batch
  1``), and a conversation's next turn reuses its quantized cache (``cached_tokens`` > 0)
  and answers what it answers without the prompt cache;
- a tensor job (a tiny model whose heads split over 2 ranks) batching eight quantized
  requests answers what one request at a time answers (``--batch 1``: mlx-lm's own
  generation on the same quantized cache).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.helpers.serving import MODEL, Served, serve_command, start_serving
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow

TOPICS = (
    "the sea",
    "a cat",
    "the moon",
    "a city",
    "a lighthouse",
    "a train",
    "a forest",
    "a baker",
)
PROMPTS = [f"Tell me a short story about {topic}." for topic in TOPICS]
TOKENS = 24


def _client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=served.key, max_retries=0, timeout=600)


def _answer(served: Served, model: str, messages: list[dict[str, str]]) -> tuple[str, int]:
    reply = _client(served).chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=TOKENS,
        temperature=0,  # type: ignore[arg-type]
    )
    usage = reply.usage
    cached = (
        usage.prompt_tokens_details.cached_tokens if usage and usage.prompt_tokens_details else 0
    )
    return reply.choices[0].message.content or "", int(cached or 0)


def _eight_at_once(served: Served, model: str) -> list[str]:
    with ThreadPoolExecutor(8) as pool:
        asked = [
            pool.submit(_answer, served, model, [{"role": "user", "content": p}]) for p in PROMPTS
        ]
        return [f.result()[0] for f in asked]


def _second_turn(served: Served, model: str, first: str) -> tuple[str, int]:
    messages = [
        {"role": "user", "content": PROMPTS[0]},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And then?"},
    ]
    return _answer(served, model, messages)


def _serve(demo_model: Path, home: Path, *args: str) -> Served:
    home.mkdir(parents=True, exist_ok=True)
    return start_serving(demo_model, home, "--nodes", "2", *args)


def test_kv8_serves_eight_clients_with_the_prompt_cache_as_each_alone(
    demo_model: Path, tmp_path: Path
) -> None:
    """Eight clients at once on the demo's 2-rank pipeline at 8 bits, the prompt cache on,
    answer what each gets alone at 8 bits (``--batch 1``: mlx-lm's generation on the same
    quantized cache, no prompt cache); the next turn reuses the quantized cache and
    answers what it answers read whole. (How far 8 bits moves the answers from 16 bits is
    a figure, not a bound: ``bench_kv_cache``, docs/kv-cache.md.)"""
    answers: dict[str, list[str]] = {}
    turns: dict[str, tuple[str, int]] = {}
    for batch, cache in (("8", "256"), ("1", "0")):
        served = _serve(
            demo_model,
            tmp_path / batch,
            "--kv-bits",
            "8",
            "--batch",
            batch,
            "--prompt-cache-mb",
            cache,
        )
        try:
            answers[batch] = _eight_at_once(served, MODEL)
            turns[batch] = _second_turn(served, MODEL, answers[batch][0])
            said = _rank_logs(tmp_path / batch)
            assert said.count("quantized at 8 bits") == 2, said[-2000:]  # on both ranks
        finally:
            assert served.stop() == 0, "\n".join(served.err[-20:])
    assert all(answers["8"]) and len(set(answers["8"])) == len(PROMPTS)
    assert answers["8"] == answers["1"]
    text, cached = turns["8"]
    assert cached > 20, "the second turn reused the first turn's quantized cache"
    assert turns["1"] == (text, 0)


def _rank_logs(home: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(home.rglob("*.log")))


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama with heads 64 wide that tensor parallelism splits over 2 ranks."""
    return make_tiny_model(
        tmp_path_factory.mktemp("wide") / "wide", hidden=256, heads=4, kv_heads=2, head_dim=64
    )


def _serve_folder(model: Path, home: Path, *args: str) -> Served:
    home.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        MACMESH_DATA_DIR=str(home / "data"),
        MACMESH_LOG_DIR=str(home / "logs"),
        MACMESH_CONFIG_DIR=str(home / "config"),
        MACMESH_CACHE_DIR=str(home / "cache"),
        HF_HUB_OFFLINE="1",
    )
    return serve_command(["--demo", str(model), *args], home, env)


@pytest.mark.parametrize("strategy", ["tensor", "pipeline", "single"])
def test_a_batch_of_quantized_requests_answers_what_each_alone_answers(
    wide: Path, tmp_path: Path, strategy: str
) -> None:
    texts: dict[str, list[str]] = {}
    for batch in ("8", "1"):
        placed = (
            ("--nodes", "1") if strategy == "single" else ("--nodes", "2", "--strategy", strategy)
        )
        served = _serve_folder(wide, tmp_path / batch, *placed, "--kv-bits", "8", "--batch", batch)
        try:
            texts[batch] = _eight_at_once(served, "wide")
            if batch == "8":
                _, cached = _second_turn(served, "wide", texts[batch][0])
                assert cached > 0
            said = _rank_logs(tmp_path / batch)
            ranks = 1 if strategy == "single" else 2
            assert said.count("quantized at 8 bits") == ranks, said[-2000:]  # on every rank
        finally:
            assert served.stop() == 0, "\n".join(served.err[-20:])
    assert texts["8"] == texts["1"]
    assert len(set(texts["8"])) > 1  # the prompts' answers differ: each row is its own
