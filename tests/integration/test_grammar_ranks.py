"""A grammar rank 0 cannot compile, on two ranks (``core.worker.constrain.prepare``): the
controller checks every schema first, so this is a grammar sent to the job directly.
The request joins the batch on both ranks and is ended on both at the next token
boundary with an error (no token of it sent); a plain request beside it and the next
request are answered, and the job stops clean: no rank left its peers' step. A
``json_object`` request, masked by rank 0 alone, closes within its 10 tokens and parses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobError, JobSpec
from core.serve.structured import json_object_constraint
from tests.helpers.jobs import assert_no_ranks_left

pytestmark = pytest.mark.slow

BAD = '{"grammars": [{"json_schema": {"type": 5}}]}'
JSON_OBJECT = {
    "grammar": json_object_constraint().grammar,
    "json_object": True,
    "temperature": 1.0,
}


@pytest.mark.parametrize("strategy", ["tensor", "pipeline"])
def test_a_grammar_rank_0_refuses_ends_on_every_rank(
    tiny_models: dict[str, Path], strategy: str
) -> None:
    job = Job(JobSpec(model=tiny_models["llama"], strategy=strategy, nodes=2, batch=8))
    events: list[dict] = []
    job.event.connect(events.append)
    job.start()
    try:
        job.wait_ready(timeout=180)
        plain = job.generate("hello there", max_tokens=12)
        bad = job.generate("hi", max_tokens=12, sampling={"grammar": BAD})
        with pytest.raises(JobError, match="does not compile"):
            job.wait_done(bad, timeout=180)
        assert job.wait_done(plain, timeout=180)["generation_tokens"] == 12
        after = job.generate("and again", max_tokens=5)
        assert job.wait_done(after, timeout=180)["generation_tokens"] == 5
        objects = [  # the tiny model's random weights nest at will: closed in 10 tokens
            job.generate("{", max_tokens=10, sampling={**JSON_OBJECT, "seed": seed})
            for seed in range(4)
        ]
        for request in objects:
            done = job.wait_done(request, timeout=180)
            assert done["finish_reason"] == "stop" and done["generation_tokens"] <= 10
            assert isinstance(json.loads(done["text"]), dict), done["text"]
    finally:
        job.stop()
    assert_no_ranks_left(job)
    assert not [e for e in events if e["event"] == "token" and e["request"] == bad]
