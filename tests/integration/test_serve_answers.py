"""The API's line of answers over a session (a fake job: real Session, real threads):
in order, one at a time; a request whose client left while waiting is never sent; a
stopped cluster answers every waiting request with a 503; no more at once than the
job's batch (the 9th of 9 waits in line when the ranks batch 8)."""

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
from core.serve.server import ServerOptions
from core.worker import protocol as p
from tests.gui.fakes import FakeBehaviour, fake_factory


def _started(demo_model: Path, token_s: float) -> Session:
    jobs: list = []
    started = Session(
        read_model_info(demo_model),
        simulated_hosts(demo_facts(2)),
        job_factory=fake_factory(FakeBehaviour(token_s=token_s), jobs),
    )
    started.make_plan()
    started.launch()
    started.wait_ready(30)
    started.jobs = jobs  # type: ignore[attr-defined]
    return started


@pytest.fixture
def session(demo_model: Path):
    started = _started(demo_model, 0.02)
    yield started
    started.stop()


@pytest.fixture
def slow_session(demo_model: Path):
    """Answers of 8 tokens that take 2.4 s each: long enough to see who waits."""
    started = _started(demo_model, 0.3)
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


def test_a_9th_request_waits_in_line_while_the_ranks_batch_8(slow_session: Session) -> None:
    """The server runs what the job batches (``ServerOptions.for_job``): 8 with the ranks,
    the 9th in the queue until one of them ends, then sent."""
    assert slow_session.spec is not None and slow_session.spec.batch == p.DEFAULT_BATCH == 8
    options = ServerOptions.for_job(slow_session.spec)
    sent = slow_session.jobs[0].behaviour.sent  # type: ignore[attr-defined]

    async def until(condition, within_s: float = 30.0) -> None:
        deadline = asyncio.get_running_loop().time() + within_s
        while not condition():
            assert asyncio.get_running_loop().time() < deadline, "not in time"
            await asyncio.sleep(0.01)

    async def scenario() -> tuple[int, int, int, list[dict]]:
        answers = Answerer(slow_session, options.max_waiting, max_running=options.max_running)
        await answers.start()
        try:
            asked = [answers.submit(_ask(str(n)), "c") for n in range(9)]
            await until(lambda: len(sent) >= 8)
            await asyncio.sleep(0.5)  # a 9th, if let through, would be sent by now
            seen = (answers.serving, answers.depth, len(sent))
            ends = [await _until_end(answer) for answer in asked]
            return (*seen, ends)
        finally:
            await answers.close()

    serving, depth, sent_then, ends = asyncio.run(scenario())
    assert (serving, depth, sent_then) == (8, 1, 8)  # the 9th waited in line
    assert [e["event"] for e in ends] == ["done"] * 9  # and was answered after
    assert [s["messages"][0]["content"] for s in sent] == [str(n) for n in range(9)]


def test_a_freed_slot_goes_to_another_keys_request_before_a_key_holding_half(
    slow_session: Session,
) -> None:
    """Key a takes all 8 slots while alone (a0 a one-token answer, the rest eight tokens);
    then a's 2 more and b's 2 (one token each) wait: the slots a0 and b0 free go to b's
    (a still runs 7, more than half), a's after. Each request's key goes to the ranks as
    its prompt cache tenant, and its token ids when the controller made them."""
    sent = slow_session.jobs[0].behaviour.sent  # type: ignore[attr-defined]

    def ask(text: str, tokens: int) -> Ask:
        return Ask(model="m", max_tokens=tokens, messages=[{"role": "user", "content": text}])

    async def scenario() -> list[dict]:
        answers = Answerer(slow_session, max_waiting=8, max_running=8)
        a, b = {"owner": "key_a", "tenant": "key_a"}, {"owner": "key_b", "tenant": "key_b"}
        await answers.start()
        try:
            first = [answers.submit(ask(f"a{n}", 1 if n == 0 else 8), "A", **a) for n in range(8)]
            while len(sent) < 8:
                await asyncio.sleep(0.01)
            later = [answers.submit(ask(f"a{n}", 1), "A", **a) for n in (8, 9)]
            later += [answers.submit(ask(f"b{n}", 1), "B", **b, tokens=[5, 6]) for n in (0, 1)]
            return [await _until_end(answer) for answer in first + later]
        finally:
            await answers.close()

    ends = asyncio.run(scenario())
    assert [e["event"] for e in ends] == ["done"] * 12
    order = [s["messages"][0]["content"] for s in sent]
    assert order[8:10] == ["b0", "b1"] and sorted(order[10:]) == ["a8", "a9"]
    assert {s["tenant"] for s in sent} == {"key_a", "key_b"}
    assert [s["tokens"] for s in sent if s["tenant"] == "key_b"] == [[5, 6], [5, 6]]


def test_a_too_long_refusal_names_prompt_for_completions_and_messages_for_chats() -> None:
    event = {"event": "error", "message": "The prompt is 9000 tokens", "fatal": False}
    event["code"] = p.CONTEXT_LENGTH_EXCEEDED
    assert failure(event, chat=False).param == "prompt"  # type: ignore[arg-type]
    assert failure(event, chat=True).param == "messages"  # type: ignore[arg-type]
