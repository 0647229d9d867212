"""Continuous batching across real ranks (``core.worker.batching``): a batch of mixed
requests gives each the greedy answer it gets alone, for pipeline and tensor sharding;
one request cancelled mid-batch leaves the others' text unchanged; a rank killed
mid-batch ends every running request with an error, never a hang."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobError, JobSpec
from tests.helpers.jobs import assert_no_ranks_left, wait_finished
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

# Mixed lengths (so the batch is left-padded) and mixed max_tokens (so requests leave the
# batch at different steps while the others go on).
PROMPTS = [
    ("What is the capital of France?", 6),
    ("hi", 4),
    ("Tell me about the sea, the sky and the long road home.", 7),
    ("a b c d e f g", 5),
    ("Why?", 6),
    ("The quick brown fox jumps over the lazy dog.", 3),
    ("1 2 3", 7),
    ("Name a colour.", 5),
]


@contextmanager
def _running(spec: JobSpec) -> Iterator[tuple[Job, list[dict]]]:
    """A job started and ready, with the events it sends; stopped after, no rank left."""
    job = Job(spec)
    seen: list[dict] = []
    job.event.connect(seen.append)
    job.start()
    try:
        job.wait_ready(timeout=180)
        yield job, seen
    finally:
        job.stop()
    assert_no_ranks_left(job)


def _answers(spec: JobSpec, together: bool, prompts=PROMPTS) -> tuple[list[str], list[dict]]:
    """Each prompt's text, asked all at once (``together``) or one after another; and
    the token events in the order rank 0 sent them."""
    with _running(spec) as (job, events):
        if together:
            ids = [job.generate(text, max_tokens=n) for text, n in prompts]
            dones = [job.wait_done(r, timeout=180) for r in ids]
        else:
            dones = []
            for text, n in prompts:
                dones.append(job.wait_done(job.generate(text, max_tokens=n), timeout=180))
    tokens = [e for e in events if e["event"] == "token"]
    return [d["text"] for d in dones], tokens


def _overlapped(tokens: list[dict]) -> int:
    """How many requests were generating at once at the busiest token (from the order of
    their token events): the batch really held them together."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for n, event in enumerate(tokens):
        first.setdefault(event["request"], n)
        last[event["request"]] = n
    return max(sum(first[r] <= n <= last[r] for r in first) for n in range(len(tokens)))


@pytest.fixture(scope="module")
def alone(tiny_models: dict[str, Path]) -> dict[str, list[str]]:
    """Each prompt asked alone of one whole-model process, one request at a time (the
    path without batching: mlx-lm's ``stream_generate``)."""
    return {
        arch: _answers(JobSpec(model=path, nodes=1, batch=1), together=False)[0]
        for arch, path in tiny_models.items()
    }


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("strategy", ["pipeline", "tensor"])
def test_a_batch_of_8_gives_each_prompt_its_lone_greedy_answer(
    tiny_models: dict[str, Path], alone: dict[str, list[str]], arch: str, strategy: str
) -> None:
    spec = JobSpec(model=tiny_models[arch], strategy=strategy, nodes=2, batch=8)
    texts, tokens = _answers(spec, together=True)
    assert texts == alone[arch]
    assert len(set(texts)) == len(texts)  # eight different answers: a mix-up would show
    assert _overlapped(tokens) >= 4


@pytest.fixture(scope="module")
def demo_alone(demo_model: Path) -> list[str]:
    return _answers(JobSpec(model=demo_model, nodes=1, batch=1), together=False)[0]


# The demo model's 9 heads / 3 KV heads tensor-shard over 3 ranks, not 2.
@pytest.mark.parametrize(("strategy", "nodes"), [("pipeline", 2), ("tensor", 3)])
def test_the_demo_models_batch_of_8_matches_each_prompt_alone(
    demo_model: Path, demo_alone: list[str], strategy: str, nodes: int
) -> None:
    spec = JobSpec(model=demo_model, strategy=strategy, nodes=nodes, batch=8)
    texts, tokens = _answers(spec, together=True)
    assert texts == demo_alone
    assert texts[0].startswith("The capital of France is")
    assert _overlapped(tokens) >= 4


def test_one_request_cancelled_mid_batch_leaves_the_others_text_unchanged(
    tiny_models: dict[str, Path],
) -> None:
    prompts = [("What is the capital of France?", 16), ("hi", 16), ("Why?", 16)]
    spec = JobSpec(model=tiny_models["llama"], strategy="pipeline", nodes=2, batch=8)
    expected, _ = _answers(spec, together=True, prompts=prompts)
    with _running(spec) as (job, seen):
        long = job.generate("tell me a long story", max_tokens=100_000)
        ids = [job.generate(text, max_tokens=n) for text, n in prompts]
        # Cancelled once every request has joined and given a token: mid-batch.
        wait_until(
            lambda: {e.get("request") for e in seen if e["event"] == "token"} >= {long, *ids},
            60,
            "every request's first token",
        )
        assert job.cancel(long)
        dones = [job.wait_done(r, timeout=120) for r in ids]
        cancelled = job.wait_done(long, timeout=120)
    assert cancelled["finish_reason"] == "cancelled"
    assert [d["text"] for d in dones] == expected
    assert [d["finish_reason"] for d in dones] == ["length"] * 3


def test_a_long_prompt_read_beside_a_stream_joins_it_without_changing_either_answer(
    tiny_models: dict[str, Path],
) -> None:
    """A long prompt read in chunks while another request streams, then joined to it (the
    rank makes the join's memory ready meanwhile, ``core.worker.joinmemory``): both
    answers are the ones each gets alone, and the stream went on while it was read."""
    stream = ("tell me a long story", 64)
    long = (" ".join(f"word{n % 97} of the sea and sky" for n in range(90)), 8)
    spec = JobSpec(model=tiny_models["llama"], strategy="pipeline", nodes=2, batch=8)
    with _running(spec) as (job, seen):
        first = job.generate(stream[0], max_tokens=stream[1])
        wait_until(
            lambda: sum(e.get("request") == first for e in seen) >= 2, 60, "the stream going"
        )
        asked = len(seen)
        second = job.generate(long[0], max_tokens=long[1])
        together = [job.wait_done(r, timeout=120) for r in (first, second)]
        alone = [
            job.wait_done(job.generate(text, max_tokens=n), timeout=120)
            for text, n in (stream, long)
        ]
    assert together[1]["prompt_tokens"] > 4 * 128  # read in several chunks beside it
    assert [d["text"] for d in together] == [d["text"] for d in alone]
    after = [e for e in seen[asked:] if e["event"] == "token"]
    joined = next(n for n, e in enumerate(after) if e["request"] == second)
    assert sum(e["request"] == first for e in after[:joined]) >= 3  # it streamed meanwhile


def test_a_rank_killed_mid_batch_ends_every_request_with_an_error(
    tiny_models: dict[str, Path],
) -> None:
    spec = JobSpec(model=tiny_models["qwen3"], strategy="pipeline", nodes=2, batch=8)
    with _running(spec) as (job, seen):
        ids = [job.generate(f"story number {n}", max_tokens=100_000) for n in range(4)]
        wait_until(
            lambda: {e.get("request") for e in seen if e["event"] == "token"} >= set(ids),
            60,
            "every request generating",
        )
        os.kill(job.ranks[1].pid, signal.SIGKILL)
        started = time.monotonic()
        for request in ids:
            with pytest.raises(JobError, match="Rank 1 was killed"):
                job.wait_done(request, timeout=30)
        assert time.monotonic() - started < 30
        wait_finished(job, 30)


def test_a_seeded_request_samples_the_same_text_in_a_batch_as_alone(
    tiny_models: dict[str, Path],
) -> None:
    """Each request draws from its own seed's key: its neighbours in the batch (greedy or
    sampling) never change what it samples. A pipeline whose rank 0 alone samples."""
    asks = [
        ("Tell me about the sea.", {"temperature": 0.9, "top_p": 0.9, "seed": 7}),
        ("hi", {}),
        ("Why?", {"temperature": 1.2, "seed": 11}),
    ]
    spec = JobSpec(model=tiny_models["llama"], strategy="pipeline", nodes=2, batch=8)
    with _running(spec) as (job, _):
        ids = [job.generate(text, max_tokens=8, sampling=s) for text, s in asks]
        together = [job.wait_done(r, timeout=120)["text"] for r in ids]
        alone = [
            job.wait_done(job.generate(text, max_tokens=8, sampling=s), timeout=120)["text"]
            for text, s in asks
        ]
        greedy = job.wait_done(job.generate(asks[0][0], max_tokens=8), timeout=120)["text"]
    assert together == alone
    assert greedy != together[0]  # the seeded one really sampled


TURNS = ["What is the capital of France?", "And of Spain?", "Which is bigger?", "Why?", "Thanks!"]


def _chat(spec: JobSpec) -> list[tuple[str, int, int]]:
    """A 5-turn chat, each turn the whole history: (text, prompt tokens, cached tokens)."""
    history: list[dict[str, str]] = []
    turns = []
    with _running(spec) as (job, _):
        for question in TURNS:
            history.append({"role": "user", "content": question})
            done = job.wait_done(job.generate(messages=list(history), max_tokens=8), 120)
            history.append({"role": "assistant", "content": done["text"]})
            turns.append((done["text"], done["prompt_tokens"], done["cached_tokens"]))
    return turns


@pytest.mark.parametrize(("arch", "strategy"), [("llama", "pipeline"), ("qwen3", "tensor")])
def test_the_prompt_cache_prefills_only_each_new_turn_and_changes_no_answer(
    tiny_models: dict[str, Path], arch: str, strategy: str
) -> None:
    spec = JobSpec(model=tiny_models[arch], strategy=strategy, nodes=2)
    cached = _chat(spec)
    fresh = _chat(replace(spec, prompt_cache_mb=0))
    assert [t[0] for t in cached] == [t[0] for t in fresh]
    assert [t[2] for t in fresh] == [0] * 5
    assert cached[0][2] == 0
    for before, turn in itertools.pairwise(cached):
        # The history up to the last answer's start is reused at least (the answer's
        # own tokens may come back tokenized otherwise); the new turn is not.
        assert before[1] <= turn[2] < turn[1]
