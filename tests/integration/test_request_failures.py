"""A request's failure is that request's alone, on real ranks: a conversation the model's
chat template refuses (Mistral's alternation rule, Gemma's system rule) sent to the ranks as
text (the window's chat path: the API renders it on the controller first) ends with an
error event quoting the template, while a stream running beside it finishes its answer, the
job stays up and the next request is answered; on a pipeline, a tensor split and with
``--batch 1``. And the prompt cache's tenants on real ranks: one tenant's request reuses
none of another's 1,000-token prefix (``cached_tokens`` exactly 0), its own turn does."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobError, JobSpec
from tests.helpers.jobs import assert_no_ranks_left
from tests.helpers.templates import GEMMA, GEMMA_RULE, MISTRAL, MISTRAL_RULE, templated
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

CASES = [  # strategy, nodes, batch
    ("pipeline", 2, 8),
    ("tensor", 2, 8),
    ("pipeline", 2, 1),
]


@pytest.fixture(scope="module")
def models(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("templated")
    return {
        "mistral": templated(tiny_models["llama"], root / "mistral", MISTRAL),
        "gemma": templated(tiny_models["llama"], root / "gemma", GEMMA),
    }


def _user(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


@pytest.mark.parametrize(("strategy", "nodes", "batch"), CASES)
def test_a_refused_template_ends_its_request_alone_and_the_job_serves_on(
    models: dict, strategy: str, nodes: int, batch: int
) -> None:
    job = Job(JobSpec(model=models["mistral"], strategy=strategy, nodes=nodes, batch=batch))
    seen: list[dict] = []
    job.event.connect(seen.append)
    job.start()
    try:
        job.wait_ready(timeout=180)
        running = job.generate(messages=_user("tell me a story"), max_tokens=40)
        if batch > 1:  # refused while the other streams
            wait_until(
                lambda: any(e.get("request") == running for e in seen if e["event"] == "token"),
                60,
                "the running request's first token",
            )
        refused = job.generate(messages=_user("one", "two"), max_tokens=8)
        with pytest.raises(JobError, match="roles must alternate"):
            job.wait_done(refused, timeout=120)
        done = job.wait_done(running, timeout=120)
        after = job.wait_done(job.generate(messages=_user("next"), max_tokens=4), timeout=120)
        assert job.state.value in ("ready", "generating")
    finally:
        job.stop()
    assert_no_ranks_left(job)
    assert done["finish_reason"] == "length" and done["generation_tokens"] == 40
    assert after["generation_tokens"] == 4
    [error] = [e for e in seen if e["event"] == "error"]
    assert MISTRAL_RULE in error["message"] and not error["fatal"]
    assert error["request"] == refused and error["rank"] == 0  # said once, by rank 0


@pytest.mark.parametrize(("strategy", "nodes", "batch"), [*CASES, ("single", 1, 8)])
def test_gemmas_system_rule_refuses_one_request_alone(
    models: dict, strategy: str, nodes: int, batch: int
) -> None:
    job = Job(JobSpec(model=models["gemma"], strategy=strategy, nodes=nodes, batch=batch))
    job.start()
    try:
        job.wait_ready(timeout=180)
        system = [{"role": "system", "content": "be brief"}, *_user("hi")]
        with pytest.raises(JobError, match=GEMMA_RULE):
            job.wait_done(job.generate(messages=system, max_tokens=4), timeout=120)
        done = job.wait_done(job.generate(messages=_user("hi"), max_tokens=4), timeout=120)
    finally:
        job.stop()
    assert_no_ranks_left(job)
    assert done["generation_tokens"] == 4


def test_batch_1_renders_an_ordinary_system_and_user_request_on_the_rank(
    demo_model: Path,
) -> None:
    """Issue 33, "Why" 1: with ``--batch 1`` an ordinary ``[system, user]`` request ended
    the job. The window's path (the rank renders the template): answered, the job up."""
    job = Job(JobSpec(model=demo_model, strategy="pipeline", nodes=2, batch=1))
    seen: list[dict] = []
    job.event.connect(seen.append)
    job.start()
    try:
        job.wait_ready(timeout=180)
        system = [{"role": "system", "content": "Be brief."}, *_user("Hi")]
        done = job.wait_done(job.generate(messages=system, max_tokens=4), timeout=120)
        after = job.wait_done(job.generate(messages=_user("Again?"), max_tokens=4), timeout=120)
        assert job.state.value in ("ready", "generating")
    finally:
        job.stop()
    assert_no_ranks_left(job)
    assert done["generation_tokens"] >= 1 and after["generation_tokens"] >= 1
    assert not [e for e in seen if e["event"] == "error"]


def test_a_tenant_reuses_none_of_anothers_prefix_and_all_of_its_own(
    tiny_models: dict[str, Path],
) -> None:
    spec = JobSpec(model=tiny_models["llama"], strategy="pipeline", nodes=2, batch=8)
    job = Job(spec)
    job.start()
    prefix = list(range(3, 253)) * 4  # 1,000 tokens both tenants send first
    try:
        job.wait_ready(timeout=180)

        def cached(tokens: list[int], tenant: str | None) -> int:
            request = job.generate(
                "", messages=None, max_tokens=2, chat=False, tokens=tokens, tenant=tenant
            )
            return int(job.wait_done(request, timeout=180).get("cached_tokens", -1))

        assert cached([*prefix, 7, 8], "key_a") == 0
        assert cached([*prefix, 7, 8, 9], "key_a") >= 1000  # a's own turn: reused
        assert cached([*prefix, 9, 9], "key_b") == 0  # b, the same prefix: nothing
        assert cached([*prefix, 7, 8, 9, 10], None) == 0  # nor the window's (common)
        assert cached([*prefix, 7, 8, 9, 10], "key_a") >= 1000  # b did not evict a
        # The PIN: a sent "PIN 4 8 2 1"; b guesses the first digit ten ways. The
        # right digit gave one more cached token; now the right guess (4) gets what every
        # wrong one gets (b's own "PIN" from its first guess, nothing of a's).
        pin = [300, 304, 308, 302, 301]
        cached(pin, "key_a")
        guesses = [cached([300, 300 + digit, 399], "key_b") for digit in range(10)]
        assert guesses == [0] + [1] * 9
    finally:
        job.stop()
    assert_no_ranks_left(job)
