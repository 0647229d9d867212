"""The worker sends one token event per generated token, the end-of-sequence one included
(issue 25, item 1): the count of token events is mlx-lm's ``generation_tokens``, so the
"tokens generated" card (which counts the events while an answer streams) and the chat line
(which reads the worker's count) can never be one apart. On the real demo model, whose
answer ends with end-of-sequence."""

from __future__ import annotations

import io
import json
from pathlib import Path

from core.run.job.launcher import JobSpec
from core.worker import protocol as p
from core.worker.serve import generate
from core.worker.sharding import load_whole
from tests.helpers.jobs import run_job


def test_the_end_of_sequence_token_has_its_token_event(demo_model: Path) -> None:
    shard = load_whole(demo_model)
    out = io.StringIO()
    command = {"id": "r1", "prompt": "What is the capital of France?", "max_tokens": 64}
    generate(shard, command, p.EventWriter(0, out), rank=0, stream_tokens=True)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    tokens = [e for e in events if e["event"] == p.TOKEN]
    (done,) = [e for e in events if e["event"] == p.DONE]
    assert done["finish_reason"] == "stop"  # it ended by itself
    assert len(tokens) == done["generation_tokens"]
    assert tokens[-1]["text"] == "" and [t["index"] for t in tokens] == list(range(len(tokens)))
    assert "".join(t["text"] for t in tokens) == done["text"] == "The capital of France is Paris."


def test_the_batching_ranks_send_the_end_of_sequence_token_event_too(demo_model: Path) -> None:
    """The same on the path jobs run by default (``core.worker.batching``, two ranks)."""
    result = run_job(JobSpec(model=demo_model, nodes=2), max_tokens=64)
    done = result.done
    assert done["finish_reason"] == "stop" and done["text"] == "The capital of France is Paris."
    assert len(result.tokens) == done["generation_tokens"]
