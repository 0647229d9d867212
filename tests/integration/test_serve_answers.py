"""The API's line of answers over a session (a fake job: real Session, real threads):
in order, one at a time; a request whose client left while waiting is never sent; a
stopped cluster answers every waiting request with a 503."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import Session, simulated_hosts
from core.serve.answers import Answerer, failure
from core.serve.errors import APIError
from core.serve.requests import Ask
from tests.gui.fakes import FakeBehaviour, fake_factory


@pytest.fixture
def session(demo_model: Path):
    jobs: list = []
    started = Session(
        read_model_info(demo_model),
        simulated_hosts(demo_facts(2)),
        job_factory=fake_factory(FakeBehaviour(token_s=0.02), jobs),
    )
    started.make_plan()
    started.launch()
    started.wait_ready(30)
    started.jobs = jobs  # type: ignore[attr-defined]
    yield started
    started.stop()


def _ask(text: str) -> Ask:
    return Ask(model="m", max_tokens=8, messages=[{"role": "user", "content": text}])


async def _until_end(answer) -> dict:
    while True:
        event = await asyncio.wait_for(answer.events.get(), 30)
        if event["event"] in ("done", "error"):
            return event


def test_answers_go_in_order_and_one_that_left_while_waiting_is_never_sent(
    session: Session,
) -> None:
    async def scenario() -> list[dict]:
        answers = Answerer(session, max_waiting=4)
        await answers.start()
        try:
            first, second, third = (answers.submit(_ask(t), "c") for t in ("a", "b", "c"))
            assert answers.depth >= 2
            answers.cancel(second)  # its client left while it waited
            ends = [await _until_end(first), await _until_end(third)]
            assert second.ended.is_set() and second.request is None
            with pytest.raises(APIError) as full:
                for n in range(10):
                    answers.submit(_ask(str(n)), "c")
            assert full.value.status == 429 and int(full.value.headers["Retry-After"]) >= 1
            return ends
        finally:
            await answers.close()

    ends = asyncio.run(scenario())
    assert [e["event"] for e in ends] == ["done", "done"]
    sent = [s["messages"][0]["content"] for s in session.jobs[0].behaviour.sent]
    assert sent[:2] == ["a", "c"]  # in order, and "b" never reached the ranks


def test_a_stopped_cluster_answers_every_waiting_request_with_a_503(session: Session) -> None:
    async def scenario() -> list[dict]:
        answers = Answerer(session)
        await answers.start()
        try:
            waiting = [answers.submit(_ask(str(n)), "c") for n in range(3)]
            await asyncio.to_thread(session.stop)
            ends = [await _until_end(answer) for answer in waiting]
            with pytest.raises(APIError) as refused:
                answers.submit(_ask("late"), "c")
            assert refused.value.status == 503
            return ends
        finally:
            await answers.close()

    ends = asyncio.run(scenario())
    assert any(e["event"] == "error" for e in ends)
    for end in ends:
        if end["event"] == "error":
            assert failure(end).status == 503 and "stopped" in end["message"]
