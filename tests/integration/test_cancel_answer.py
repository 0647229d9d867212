"""One answer cancelled on a real 2-rank demo job: the ranks stop together at a token and
the job serves the next request; sampling, stop sequences and the context check ride the
same generate command."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.job.launcher import JobError
from core.run.session import Session, simulated_hosts
from core.run.states import RunState
from tests.helpers.jobs import PROMPT, assert_no_ranks_left
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def session(demo_model: Path) -> Iterator[Session]:
    started = Session(read_model_info(demo_model), simulated_hosts(demo_facts(2)))
    started.make_plan()
    started.launch()
    try:
        started.wait_ready(timeout=300)
        yield started
    finally:
        started.stop()
        assert_no_ranks_left(started.job)


def _tokens_of(session: Session) -> tuple[dict[str, list[dict]], threading.Lock]:
    seen: dict[str, list[dict]] = {}
    lock = threading.Lock()

    def on_event(event: dict) -> None:
        if event["event"] == "token":
            with lock:
                seen.setdefault(event["request"], []).append(event)

    session.event.connect(on_event)
    return seen, lock


def test_a_cancelled_answer_ends_at_a_token_and_the_job_serves_the_next(
    session: Session,
) -> None:
    seen, _ = _tokens_of(session)
    request = session.ask("Tell me a very long story about the sea.", max_tokens=100_000)
    wait_until(lambda: len(seen.get(request, [])) >= 3, 120, "three tokens")
    assert session.cancel_answer(request)
    done = session.wait_done(request, timeout=60)
    assert done["finish_reason"] == "cancelled"
    assert 3 <= done["generation_tokens"] < 100
    assert done["text"] == "".join(e["text"] for e in seen[request])
    wait_until(lambda: session.state == RunState.READY, 30, "the job ready again")
    assert not session.cancel_answer(request)  # it ended: nothing to cancel
    answer = session.wait_done(session.ask(PROMPT, max_tokens=16), timeout=120)
    assert "Paris" in answer["text"] and answer["finish_reason"] == "stop"
    assert all(s.exit_code is None for s in session.job.ranks)


def test_a_stop_sequence_ends_the_answer_before_it_on_every_rank(session: Session) -> None:
    seen, _ = _tokens_of(session)
    request = session.ask(PROMPT, max_tokens=32, sampling={"stop": ["Paris"]})
    done = session.wait_done(request, timeout=120)
    assert done["finish_reason"] == "stop"
    assert done["text"].startswith("The capital of France is") and "Paris" not in done["text"]
    assert "Paris" not in "".join(e["text"] for e in seen[request])
    answer = session.wait_done(session.ask(PROMPT, max_tokens=16), timeout=120)
    assert "Paris" in answer["text"]  # the ranks are still in step


def test_sampling_with_a_seed_is_repeatable_across_the_ranks(session: Session) -> None:
    sampling = {"temperature": 1.5, "top_p": 0.95, "seed": 1234}
    texts = [
        session.wait_done(
            session.ask("Write one sentence about cats.", max_tokens=24, sampling=sampling),
            timeout=120,
        )["text"]
        for _ in range(2)
    ]
    assert texts[0] == texts[1] and texts[0]
    other = session.wait_done(
        session.ask(
            "Write one sentence about cats.", max_tokens=24, sampling={**sampling, "seed": 99}
        ),
        timeout=120,
    )["text"]
    assert other != texts[0]  # the seed (not the greedy path) chose these tokens


def test_a_prompt_longer_than_the_context_is_refused_and_the_job_lives_on(
    session: Session,
) -> None:
    request = session.ask("Paris " * 9000, max_tokens=8, chat=False)
    with pytest.raises(JobError, match="context is 8192"):
        session.wait_done(request, timeout=120)
    answer = session.wait_done(session.ask(PROMPT, max_tokens=16), timeout=120)
    assert "Paris" in answer["text"]


def test_an_empty_prompt_is_refused_and_the_job_lives_on(session: Session) -> None:
    # Found by the API's fuzz test: an empty prompt made mlx-lm raise and the rank die.
    request = session.ask("", max_tokens=4, chat=False)
    with pytest.raises(JobError, match="The prompt is empty"):
        session.wait_done(request, timeout=120)
    answer = session.wait_done(session.ask(PROMPT, max_tokens=16), timeout=120)
    assert "Paris" in answer["text"]
