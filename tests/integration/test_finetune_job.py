"""The fine-tune job on real ranks (a tiny random model, loopback ring): mlx-lm's trainer
behind the worker's events, the agreed stop, the adapter in mlx-lm's layout, and the
distributed correctness of data parallel training."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobSpec
from core.worker.vocab import Backend, JobState, Strategy, Task
from tests.helpers.jobs import assert_no_ranks_left, wait_finished
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.tune_data import write_chat_data, write_even_data
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

SETTINGS = {
    "iters": 6,
    "batch_size": 4,
    "learning_rate": 1e-3,
    "lora_rank": 4,
    "steps_per_eval": 3,
    "steps_per_save": 2,
    "val_batches": 2,
}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tune") / "model")


def run_finetune(
    model: Path, data: Path, out: Path, nodes: int, settings: dict, stop_after: int | None = None
) -> tuple[Job, list[dict]]:
    spec = JobSpec(
        model=model,
        strategy=Strategy.PIPELINE,
        nodes=nodes,
        backend=Backend.RING,
        task=Task.FINETUNE,
        data=data,
        tune_settings=settings,
        out=out,
    )
    job = Job(spec)
    events: list[dict] = []
    lock = threading.Lock()

    def on_event(event: dict) -> None:
        with lock:
            events.append(event)

    job.event.connect(on_event)
    job.start()
    try:
        if stop_after is not None:
            wait_until(
                lambda: sum(e["event"] == "train" and e["rank"] == 0 for e in events) >= stop_after,
                180,
                f"{stop_after} train reports",
            )
            assert job.send_stop()
        wait_finished(job, 300)
    finally:
        job.stop()
    assert_no_ranks_left(job)
    return job, events


def of(events: list[dict], kind: str, rank: int | None = 0) -> list[dict]:
    return [e for e in events if e["event"] == kind and (rank is None or e["rank"] == rank)]


@pytest.mark.parametrize("nodes", [1, 2])
def test_training_ends_with_an_adapter_mlx_lm_loads(
    model: Path, tmp_path: Path, nodes: int
) -> None:
    data = write_chat_data(tmp_path / "data")
    out = tmp_path / "adapter"
    job, events = run_finetune(model, data, out, nodes, SETTINGS)
    assert job.state == JobState.STOPPED, job.message
    assert job.message == "finished"
    trains = of(events, "train")
    assert [e["iteration"] for e in trains] == [1, 2, 3, 4, 5, 6]
    assert all(e["iters"] == 6 and e["tokens_per_s"] > 0 for e in trains)
    # every rank reports its own peak memory
    for rank in range(nodes):
        assert all(e["peak_memory_bytes"] > 0 for e in of(events, "train", rank))
        assert len(of(events, "train", rank)) == 6
    assert trains[-1]["train_loss"] < trains[0]["train_loss"]
    assert [e["iteration"] for e in of(events, "validation")] == [0, 2, 5]
    assert not of(events, "validation", 1)
    assert [e["iteration"] for e in of(events, "checkpoint")] == [2, 4, 6]
    for e in of(events, "checkpoint"):
        assert Path(e["path"]).is_file()
    (trained,) = of(events, "trained", None)
    assert trained["rank"] == 0 and trained["stopped"] is False
    assert trained["iterations"] == 6 and trained["adapter"] == str(out)
    assert trained["train_loss"] == pytest.approx(trains[-1]["train_loss"])
    assert trained["val_loss"] == of(events, "validation")[-1]["val_loss"]
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora"
    assert config["lora_parameters"] == {"rank": 4, "dropout": 0.0, "scale": 20.0}
    assert config["num_layers"] == 4  # 16 asked, the tiny model has 4
    # mlx-lm itself reads the folder: base + adapter
    from mlx_lm.utils import load

    loaded, _ = load(str(model), adapter_path=str(out))
    assert any("lora_a" in name for name, _ in _flat(loaded.trainable_parameters()))


def _flat(tree: dict) -> list[tuple[str, object]]:
    from mlx.utils import tree_flatten

    return list(tree_flatten(tree))


def test_a_stop_ends_every_rank_at_the_same_iteration_and_keeps_the_adapter(
    model: Path, tmp_path: Path
) -> None:
    data = write_chat_data(tmp_path / "data")
    out = tmp_path / "adapter"
    settings = {**SETTINGS, "iters": 100_000, "steps_per_eval": 1000, "steps_per_save": 2}
    job, events = run_finetune(model, data, out, 2, settings, stop_after=3)
    assert job.state == JobState.STOPPED, job.message
    (trained,) = of(events, "trained", None)
    assert trained["stopped"] is True
    last = [of(events, "train", rank)[-1]["iteration"] for rank in (0, 1)]
    assert last[0] == last[1] == trained["iterations"]
    assert 3 <= trained["iterations"] < 100_000
    assert (out / "adapters.safetensors").is_file()
    assert of(events, "checkpoint")  # the last checkpoint is kept beside it


def test_a_batch_larger_than_the_set_fails_with_one_line(model: Path, tmp_path: Path) -> None:
    data = write_chat_data(tmp_path / "data", train=6, valid=8)
    job, _ = run_finetune(model, data, tmp_path / "adapter", 1, {**SETTINGS, "batch_size": 8})
    assert job.state == JobState.FAILED
    assert "train.jsonl has 6 example(s), fewer than the batch size (8)" in job.message
    assert not (tmp_path / "adapter" / "adapters.safetensors").exists()


def test_two_ranks_train_as_one_on_the_same_global_batch(model: Path, tmp_path: Path) -> None:
    """Data parallel: 2 ranks, each half of every batch, averaging gradients, follow the
    loss curve of 1 rank taking the whole batch. Every example has the same number of
    tokens, so the mean of the ranks' mean losses (and gradients) is the batch's mean;
    what differs is float32 summation order: the gradient is a sum of two halves then
    halved instead of one sum, and matmuls run on 2 rows instead of 4. Each is a relative
    error of a few float32 ulps (1.2e-7) per reduction; over 8 Adam steps at lr 1e-3
    (Adam's step is bounded by lr whatever the gradient's size) the losses agree to a few
    ulps (measured: 2.7e-7 relative at most); 1e-5 leaves a margin of 40x without hiding a
    real difference: a wrong slice or an unaveraged gradient moves the loss by far more
    (the curve itself moves by more than 1e-2 in these steps, asserted below)."""
    data = write_even_data(tmp_path / "data")
    settings = {**SETTINGS, "iters": 8, "steps_per_eval": 4, "steps_per_save": 100}
    curves = {}
    for nodes in (1, 2):
        job, events = run_finetune(model, data, tmp_path / f"adapter{nodes}", nodes, settings)
        assert job.state == JobState.STOPPED, job.message
        curves[nodes] = [e["train_loss"] for e in of(events, "train")]
    assert len(curves[1]) == len(curves[2]) == 8
    assert curves[2] == pytest.approx(curves[1], rel=1e-5)
    assert abs(curves[1][-1] - curves[1][0]) > 1e-2  # it did learn: the check has teeth


def test_an_example_mlx_lm_cannot_use_is_named_by_its_line(model: Path, tmp_path: Path) -> None:
    data = write_chat_data(tmp_path / "data")
    lines = (data / "train.jsonl").read_text().splitlines()
    lines[4] = json.dumps({"text": "no messages here"})
    (data / "train.jsonl").write_text("\n".join(lines) + "\n")
    job, _ = run_finetune(model, data, tmp_path / "adapter", 1, SETTINGS)
    assert job.state == JobState.FAILED
    assert "train.jsonl line 5: mlx-lm cannot use it" in job.message
    assert "\n" not in job.message.split("Last log lines")[0].strip()


def test_a_stop_while_the_ranks_load_ends_them_cleanly(model: Path, tmp_path: Path) -> None:
    """Told to stop before training (before joining, or before the first step): every
    rank ends by itself, which is no failure, and nothing is left running."""
    data = write_chat_data(tmp_path / "data")
    spec = JobSpec(
        model=model,
        nodes=2,
        task=Task.FINETUNE,
        data=data,
        tune_settings={**SETTINGS, "iters": 100_000},
        out=tmp_path / "adapter",
    )
    job = Job(spec).start()
    try:
        wait_until(lambda: job.state == JobState.LOADING, 60, "the ranks starting")
        assert job.send_stop()
        wait_finished(job, 120)
        assert job.state == JobState.STOPPED and job.message == "finished", job.message
    finally:
        job.stop()
    assert_no_ranks_left(job)
