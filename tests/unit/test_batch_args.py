"""The batch limit travels from the job to the ranks (``--batch``), and the worker
refuses one it cannot run; rank 0's per-step decision survives its round trip."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from core.run.job.launcher import JobSpec
from core.worker import protocol as p
from core.worker.batching import Control, greedy, seeded_sampler
from core.worker.main import parse_args


def test_the_job_passes_its_batch_to_every_rank_and_the_default_is_the_workers() -> None:
    assert "--batch" not in JobSpec(model=Path("m")).worker_args(0)
    args = JobSpec(model=Path("m"), batch=3).worker_args(1)
    assert args[args.index("--batch") + 1] == "3"
    assert parse_args(["--model", "m"]).batch == p.DEFAULT_BATCH
    assert parse_args(["--model", "m", "--batch", "3"]).batch == 3


@pytest.mark.parametrize("value", ["0", "-1", str(p.MAX_BATCH + 1)])
def test_a_batch_the_worker_cannot_run_is_one_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--model", "m", "--batch", value])
    assert exit_.value.code == 2
    assert f"--batch must be 1 to {p.MAX_BATCH}" in capsys.readouterr().err


def test_rank_0s_decision_comes_back_as_sent_at_the_same_boundary() -> None:
    control = Control(None, limit=4)
    assert control.agree(0, []) == (0, [], p.PREFILL_STEP)
    assert control.agree(2, [0, 5, 9], 64) == (2, [0, 5, 9], 64)
    assert control.agree(0, [1, 2, 3, 4, 5]) == (0, [1, 2, 3, 4], p.PREFILL_STEP)  # the limit


def test_a_seeded_sampler_draws_from_its_own_key_not_the_global_state() -> None:
    logprobs = mx.log(mx.softmax(mx.random.normal((1, 64)), axis=-1))
    first = seeded_sampler(1.0, 1.0, 42)
    drawn = [int(first(logprobs).item()) for _ in range(8)]
    mx.random.seed(0)  # the global state moves: the request's draws do not
    again = seeded_sampler(1.0, 1.0, 42)
    assert [int(again(logprobs).item()) for _ in range(8)] == drawn
    assert len(set(drawn)) > 1
    assert seeded_sampler(0.0, 1.0, 42) is greedy


def test_the_chunk_beside_streams_follows_the_steps_time_within_its_bounds() -> None:
    from core.worker.batching import Chunks

    chunks = Chunks()
    assert chunks.chunk(streaming=False) == p.PREFILL_STEP
    assert chunks.chunk(streaming=True) == p.PREFILL_STEP_BESIDE_STREAMS
    for _ in range(20):  # a loaded machine: every step 4x too slow
        chunks.took(chunks.chunk(True), Chunks.STEP_S * 4)
    assert chunks.chunk(True) == Chunks.MIN
    for _ in range(20):  # quick steps again: back up to the bound, never above
        chunks.took(chunks.chunk(True), Chunks.STEP_S / 10)
    assert chunks.chunk(True) == p.PREFILL_STEP_BESIDE_STREAMS
    assert chunks.chunk(streaming=False) == p.PREFILL_STEP
