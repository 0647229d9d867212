"""A fine-tune rank killed mid-training: the job fails naming it, the checkpoints already
written are kept, and no rank is left running."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobSpec, JobState
from core.worker.vocab import Task
from tests.helpers.jobs import assert_no_ranks_left, wait_finished
from tests.helpers.tune_data import write_chat_data
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow


def test_a_rank_killed_mid_training_fails_the_job_naming_it(tiny_models, tmp_path: Path) -> None:
    out = tmp_path / "adapter"
    settings = {"iters": 100_000, "batch_size": 4, "steps_per_save": 2, "steps_per_eval": 1000}
    spec = JobSpec(
        model=tiny_models["llama"],
        nodes=2,
        task=Task.FINETUNE,
        data=write_chat_data(tmp_path / "data"),
        tune_settings=settings,
        out=out,
    )
    job = Job(spec)
    checkpoints: list[dict] = []
    lock = threading.Lock()

    def on_event(event: dict) -> None:
        if event["event"] == "checkpoint":
            with lock:
                checkpoints.append(event)

    job.event.connect(on_event)
    job.start()
    try:
        wait_until(lambda: len(checkpoints) >= 2, 180, "two checkpoints")
        os.kill(job.ranks[1].pid, signal.SIGKILL)
        wait_finished(job, 30.0)
        assert job.state == JobState.FAILED
        assert job.message.startswith("Rank 1 was killed (signal 9) while training"), job.message
    finally:
        job.stop()
    assert_no_ranks_left(job)
    for checkpoint in checkpoints:
        assert Path(checkpoint["path"]).is_file()
    assert (out / "adapter_config.json").is_file()
