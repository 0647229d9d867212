"""``FineTune`` on the demo cluster (2 simulated Macs, a tiny random model): reports with
per-node memory and an ETA, validations and checkpoints as signals, the adapter kept in
the user data folder with its macmesh.json; stop keeps the adapter as it stands; a rank
killed mid-training fails the run naming it and keeps the last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.measure.history import History, RunKind
from core.run.session import simulated_hosts
from core.run.states import RunState
from core.run.tasks.finetune import FineTune, TrainReport
from core.tune.settings import SettingsError, TuneSettings
from tests.helpers.jobs import assert_no_ranks_left
from tests.helpers.tune_data import write_chat_data
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow

QUICK = TuneSettings(
    iters=6, batch_size=4, learning_rate=1e-3, steps_per_eval=3, steps_per_save=2, val_batches=2
)


@pytest.fixture
def data_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "home"))
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACMESH_LOG_DIR", str(tmp_path / "logs"))
    return tmp_path / "home"


def _tune(tiny_models, tmp_path: Path, settings: TuneSettings, nodes: int = 2) -> FineTune:
    data = write_chat_data(tmp_path / "data")
    info = read_model_info(tiny_models["llama"])
    return FineTune(info, simulated_hosts(demo_facts(nodes)), data, settings, name="Tiny Test")


def test_a_fine_tune_on_the_demo_cluster_keeps_an_adapter(
    tiny_models, tmp_path: Path, data_home: Path
) -> None:
    tune = _tune(tiny_models, tmp_path, QUICK)
    reports: list[TrainReport] = []
    states: list[str] = []
    finished: list[object] = []
    tune.report.connect(reports.append)
    tune.state_changed.connect(lambda state, _detail: states.append(state))
    returned = threading.Event()
    # Heard before wait() returns: a window that waited hears nothing from a job thread
    # afterwards (one did, while its Qt objects were being deleted, and crashed).
    tune.finished.connect(lambda adapter: finished.append((adapter, returned.is_set())))
    assert tune.start()
    adapter = tune.wait(300)
    returned.set()
    assert_no_ranks_left(tune.session.job)
    assert tune.state == RunState.STOPPED
    assert [r.iteration for r in reports] == [1, 2, 3, 4, 5, 6]
    assert set(reports[-1].peak_memory_bytes) == {"Studio A", "Studio B"}
    assert all(v > 0 for v in reports[-1].peak_memory_bytes.values())
    assert reports[0].eta_s is None and reports[-1].eta_s == 0.0
    assert reports[2].eta_s is not None and reports[2].eta_s > 0
    assert [it for it, _ in tune.validations] == [0, 2, 5]
    assert [it for it, _ in tune.checkpoints] == [2, 4, 6]
    assert finished == [(adapter, False)]
    folder = tune.out
    assert folder is not None and folder.parent == data_home / "adapters"
    meta = json.loads((folder / "macmesh.json").read_text())
    assert meta["name"] == "Tiny Test" and meta["base_model"] == "llama"
    assert meta["iterations"] == 6 and meta["stopped"] is False
    assert meta["train_loss"] == pytest.approx(reports[-1].train_loss)
    assert meta["val_loss"] == tune.validations[-1][1]
    assert meta["data_examples"] == 24 and len(meta["data_sha256"]) == 64
    assert meta["settings"] == QUICK.to_dict()
    assert (folder / "adapters.safetensors").is_file()
    assert tune.data_folder is not None and not tune.data_folder.exists()
    # The task kept the run (the command line and the window alike), with its curves.
    assert tune.not_kept is None
    (run,) = History().runs()
    kept = History().get(run.id or 0)
    assert kept is not None and kept.kind == RunKind.FINETUNE
    assert kept.nodes == ["Studio A", "Studio B"] and kept.figures["iterations"] == 6
    assert kept.figures["train_loss"] == pytest.approx(reports[-1].train_loss)
    assert [v for _, v in kept.series["train_loss"]] == [r.train_loss for r in reports]
    assert [v for _, v in kept.series["val_loss"]] == [v for _, v in tune.validations]


def test_stop_keeps_the_adapter_as_it_stands(tiny_models, tmp_path: Path, data_home: Path) -> None:
    settings = TuneSettings(iters=100_000, batch_size=4, steps_per_eval=1000, steps_per_save=1000)
    tune = _tune(tiny_models, tmp_path, settings)
    assert tune.start()
    wait_until(lambda: len(tune.reports) >= 2, 180, "two reports")
    tune.stop()
    tune.wait(120)
    assert_no_ranks_left(tune.session.job)
    assert tune.state == RunState.STOPPED
    assert tune.out is not None
    meta = json.loads((tune.out / "macmesh.json").read_text())
    assert meta["stopped"] is True and 2 <= meta["iterations"] < 100_000


def test_a_rank_killed_keeps_the_last_checkpoint(
    tiny_models, tmp_path: Path, data_home: Path
) -> None:
    settings = TuneSettings(iters=100_000, batch_size=4, steps_per_eval=1000, steps_per_save=2)
    tune = _tune(tiny_models, tmp_path, settings)
    assert tune.start()
    wait_until(lambda: len(tune.checkpoints) >= 2, 180, "two checkpoints")
    os.kill(tune.session.job.ranks[1].pid, signal.SIGKILL)
    tune.wait(60)
    assert_no_ranks_left(tune.session.job)
    assert tune.state == RunState.FAILED
    assert tune.error.startswith("Rank 1 on Studio B was killed (signal 9) while training")
    assert tune.out is not None
    meta = json.loads((tune.out / "macmesh.json").read_text())
    assert meta["stopped"] is True
    assert meta["iterations"] >= tune.checkpoints[1][0]
    assert (tune.out / "adapters.safetensors").is_file()


def test_settings_the_cluster_cannot_use_are_refused_before_anything_starts(
    tiny_models, tmp_path: Path, data_home: Path
) -> None:
    tune = _tune(tiny_models, tmp_path, TuneSettings(batch_size=3))
    with pytest.raises(SettingsError, match="multiple of the 2 Macs"):
        tune.start()
    assert tune.session.job is None
    assert not (data_home / "adapters").exists() or not any((data_home / "adapters").iterdir())
