"""A prompt still being read in can be cancelled (issue 26, item 18): a cancel (the client
left, a per-answer cancel, Stop) ends it at its next chunk of ``PREFILL_STEP`` tokens, on
every rank alike, so the next request is not held for the rest of the long prompt. Both
worker paths: batching (``BatchGenerator`` reads one chunk a step) and one request at a
time (``stream_generate``'s prefill, agreed between chunks).

Measured here (2 cores shared with other work, load average 7-8), the 2-rank pipeline
below, a ~5,600-token prompt read in whole in 6.4 s (batching) and 9.0 s (one at a time):
cancelled 1 s into it, it ended 0.2 s and 0.4 s after the cancel, and the next request's
first token came 0.18 s and 0.39 s after it was sent. (The test cancels once rank 0
reports the prompt's first chunks crossing the link, not after a fixed second.) Before
(chunks of 2,048, the batching ranks' cancel applied a step late, the one-at-a-time
path's only at the first token): read in whole in 11.2 s, the cancelled prompt ended
3.8 s after the cancel and the next request's first token came 3.85 s after it was sent
(batching); one at a time, the cancel never took effect (the prompt was read in whole and answered).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.run.job.launcher import Job, JobSpec
from core.worker import protocol as p
from tests.helpers.jobs import assert_no_ranks_left
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

# About 5,600 tokens with the tiny models' byte-level tokenizer: many chunks.
LONG = " ".join(f"line {n} of a long letter" for n in range(300))


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama wide enough that reading ``LONG`` takes seconds here, with room for it
    in its context."""
    path = make_tiny_model(
        tmp_path_factory.mktemp("wide") / "llama", hidden=256, intermediate=768, vocab=512
    )
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 16384
    (path / "config.json").write_text(json.dumps(config))
    return path


class _Arrivals:
    """When each request's first token and its ``done`` reached the controller, and when
    rank 0 reported its links' traffic (bytes moved in the interval: the pipeline carries
    a prompt's activations between the ranks chunk by chunk)."""

    def __init__(self, job: Job) -> None:
        self.first: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self.traffic: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        job.event.connect(self._on_event)

    def idle_after(self, since: float) -> bool:
        """Rank 0 reported its links still since ``since`` (the last answer's bytes told)."""
        with self._lock:
            return any(at > since and not moved for at, moved in self.traffic)

    def moving_after(self, since: float) -> bool:
        """Rank 0 reported bytes moving since ``since``."""
        with self._lock:
            return any(at > since and moved for at, moved in self.traffic)

    def _on_event(self, event: dict[str, Any]) -> None:
        if event.get("rank") != 0:
            return
        now, request = time.monotonic(), str(event.get("request", ""))
        with self._lock:
            if event["event"] == p.TOKEN:
                self.first.setdefault(request, now)
            elif event["event"] == p.DONE:
                self.done.setdefault(request, now)
            elif event["event"] == p.TRAFFIC:
                moved = sum(event["sent"].values()) + sum(event["received"].values())
                self.traffic.append((now, moved))


@pytest.mark.parametrize("batch", [8, 1])
def test_a_prompt_cancelled_while_read_in_ends_at_its_next_chunk_and_frees_the_next(
    wide_model: Path, batch: int
) -> None:
    job = Job(
        JobSpec(model=wide_model, strategy="pipeline", nodes=2, batch=batch, prompt_cache_mb=0)
    )
    arrivals = _Arrivals(job)
    job.start()
    try:
        job.wait_ready(timeout=180)
        job.wait_done(job.generate("hi", max_tokens=2), timeout=120)  # warm up
        started = time.monotonic()
        whole = job.wait_done(job.generate(LONG, max_tokens=1), timeout=600)
        read_in = time.monotonic() - started  # the whole prompt, read alone
        assert whole["prompt_tokens"] > 4 * p.PREFILL_STEP

        wait_until(lambda: arrivals.idle_after(started + read_in), 10, "the links still")
        asked = time.monotonic()
        long = job.generate(LONG, max_tokens=1)
        # Inside its prompt: its first chunks cross the link, and no token has come yet.
        wait_until(lambda: arrivals.moving_after(asked), 30, "the prompt's first chunks")
        assert long not in arrivals.first
        assert job.cancel(long)
        cancelled_at = time.monotonic()
        short = job.generate("hi", max_tokens=2)
        sent = time.monotonic()
        cancelled = job.wait_done(long, timeout=600)
        job.wait_done(short, timeout=600)
        wait_until(lambda: short in arrivals.first, 10, "the next request's first token")
    finally:
        job.stop()
    assert_no_ranks_left(job)
    assert cancelled["finish_reason"] == p.CANCELLED
    assert cancelled["generation_tokens"] == 0  # it ended inside its prompt
    ended_after = arrivals.done[long] - cancelled_at
    next_ttft = arrivals.first[short] - sent
    figures = f"read in whole {read_in:.1f} s, ended {ended_after:.1f} s after the cancel"
    assert ended_after < read_in / 3, figures
    assert next_ttft < read_in / 3, f"{figures}, next request's first token {next_ttft:.1f} s"
