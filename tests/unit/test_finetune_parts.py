"""The fine-tune's pure parts: the worker's settings and adapter_config, the job's worker
arguments, and the controller's checkpoint, node and data helpers."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from core.run.job.launcher import JobSpec
from core.run.tasks.finetune import last_checkpoint, name_node, prepare_data
from core.tune.data import DataError
from core.tune.settings import TuneSettings
from core.worker.finetune import DEFAULTS, TrainingError, lora_config, read_settings
from core.worker.main import parse_args
from core.worker.vocab import Strategy, Task


def test_the_worker_reads_settings_as_json_or_a_file(tmp_path: Path) -> None:
    assert read_settings('{"iters": 3}')["iters"] == 3
    assert read_settings("{}") == DEFAULTS
    path = tmp_path / "s.json"
    path.write_text('{"batch_size": 8}')
    assert read_settings(str(path))["batch_size"] == 8
    with pytest.raises(TrainingError, match="unknown fine-tune setting"):
        read_settings('{"iterz": 3}')
    with pytest.raises(TrainingError, match="cannot read the settings file"):
        read_settings(str(tmp_path / "missing.json"))


def test_the_workers_defaults_are_tune_settings_defaults() -> None:
    """The worker does not import core.tune; its defaults must not drift from it."""
    assert TuneSettings().to_dict() == DEFAULTS


def test_adapter_config_has_the_keys_mlx_lm_reads(tmp_path: Path) -> None:
    config = lora_config({**DEFAULTS, "lora_rank": 4}, "/m", "/d", tmp_path, layers=2)
    assert config["fine_tune_type"] == "lora" and config["num_layers"] == 2
    assert config["lora_parameters"] == {"rank": 4, "dropout": 0.0, "scale": 20.0}
    assert config["adapter_path"] == str(tmp_path) and config["save_every"] == 50


def test_a_fine_tune_job_runs_the_whole_model_on_every_rank(tmp_path: Path) -> None:
    settings = TuneSettings(iters=7).to_dict()
    spec = JobSpec(
        model=tmp_path / "m",
        strategy=Strategy.SINGLE,  # every rank the whole model: not refused for 2 nodes
        nodes=2,
        task=Task.FINETUNE,
        data=tmp_path / "d",
        tune_settings=settings,
        out=tmp_path / "a",
    )
    args = parse_args(spec.worker_args(1))
    assert args.task is Task.FINETUNE
    assert (args.data, args.out) == (str(tmp_path / "d"), str(tmp_path / "a"))
    assert json.loads(args.settings) == settings
    # the settings survive the shell a remote rank's command goes through
    assert shlex.split(shlex.join(spec.worker_args(0)))[-3] == args.settings
    with pytest.raises(ValueError, match="single strategy runs on one node"):
        JobSpec(model=tmp_path, strategy=Strategy.SINGLE, nodes=2)
    with pytest.raises(ValueError, match="needs its data folder"):
        JobSpec(model=tmp_path, nodes=2, task=Task.FINETUNE)


def test_a_chat_jobs_worker_arguments_are_unchanged(tmp_path: Path) -> None:
    assert "--task" not in JobSpec(model=tmp_path, nodes=2).worker_args(0)


def test_the_worker_refuses_a_fine_tune_without_its_folders() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--task", "finetune", "--data", "d"])


def test_the_last_checkpoint_is_the_highest_iteration(tmp_path: Path) -> None:
    assert last_checkpoint(tmp_path) is None
    for name in (
        "0000002_adapters.safetensors",
        "0000010_adapters.safetensors",
        "adapters.safetensors",
    ):
        (tmp_path / name).write_bytes(b"")
    assert last_checkpoint(tmp_path) == (10, tmp_path / "0000010_adapters.safetensors")


def test_a_failure_names_the_ranks_node() -> None:
    nodes = ["Studio A", "Studio B"]
    assert name_node("Rank 1 was killed (signal 9) while training", nodes) == (
        "Rank 1 on Studio B was killed (signal 9) while training"
    )
    already = "Rank 1 on mini-2 exited with code 1 while training"
    assert name_node(already, nodes) == already
    assert name_node("Rank 7 was killed", nodes) == "Rank 7 was killed"


def test_data_in_mlx_lms_layout_is_copied_with_its_hash(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.jsonl").write_text("".join(f'{{"text": "{c}"}}\n' for c in "abcd"))
    (source / "valid.jsonl").write_text('{"text": "c"}\n')
    folder = tmp_path / "to"
    folder.mkdir()
    digest, examples = prepare_data(source, folder)
    assert examples == 5 and len(digest) == 64
    assert (folder / "train.jsonl").read_text() == (source / "train.jsonl").read_text()
    with pytest.raises(DataError, match="does not exist"):
        prepare_data(tmp_path / "nothing", folder)


class _Group:
    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def test_each_rank_reads_its_own_slice_of_every_batch() -> None:
    """mlx-lm's iterate_batches, as its trainer calls it with the group: the ranks' rows
    of each step are disjoint and together are the one-rank run's batch."""
    import numpy as np
    from mlx_lm.tuner.trainer import iterate_batches

    dataset = [([i + 1] * (3 + i % 5), 0) for i in range(16)]  # (tokens, offset), as mlx-lm's

    def first_values(group: _Group | None) -> list[set[int]]:
        np.random.seed(0)
        batches = iterate_batches(dataset, 4, 64, loop=False, comm_group=group)
        return [{int(row[0]) for row in np.array(batch)} for batch, _ in batches]

    whole = first_values(None)
    halves = [first_values(_Group(rank, 2)) for rank in (0, 1)]
    assert len(whole) == 4
    for step, batch in enumerate(whole):
        assert halves[0][step] | halves[1][step] == batch
        assert not halves[0][step] & halves[1][step]
        assert len(halves[0][step]) == len(halves[1][step]) == 2


def test_a_report_reads_as_one_line_in_words_or_json() -> None:
    import io

    from core.cli.finetune import _Printer
    from core.run.tasks.finetune import TrainReport

    class _Tune:  # the three signals the printer listens to
        from psygnal import Signal

        report = Signal(object)
        validated = Signal(int, float)
        checkpoint = Signal(int, str)

    report = TrainReport(3, 10, 1.2345, 1e-4, 812.5, 2400, {"Studio A": 3 << 30}, 14.0)
    for as_json in (False, True):
        out = io.StringIO()
        tune = _Tune()
        printer = _Printer(out, as_json, tune)  # type: ignore[arg-type]
        tune.report.emit(report)
        tune.validated.emit(3, 1.5)
        lines = out.getvalue().splitlines()
        assert len(lines) == 2 and printer.out is out  # (curves: test_finetune_controller)
        if as_json:
            assert json.loads(lines[0])["peak_memory_bytes"] == {"Studio A": 3 << 30}
            assert json.loads(lines[1]) == {"event": "validation", "iteration": 3, "val_loss": 1.5}
        else:
            assert lines[0].startswith("step 3/10: loss 1.234") or lines[0].startswith(
                "step 3/10: loss 1.235"
            )
            assert "Studio A 3" in lines[0] and "left" in lines[0]
            assert lines[1] == "step 3: validation loss 1.500"


def test_a_fine_tunes_history_headline() -> None:
    from core.run.measure.history import RunRecord

    def record(**figures: object) -> RunRecord:
        return RunRecord("finetune", "m", ["a"], "data parallel", "ring", dict(figures))

    assert record(train_loss=0.5, iterations=40).headline() == "loss 0.500 after 40 steps"
    assert record(train_loss=0.5, iterations=4, stopped=True).headline().endswith("(stopped)")
    assert record(train_loss=None, error="Rank 1 was killed").headline() == (
        "failed, nothing trained"
    )
