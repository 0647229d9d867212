"""``FineTune`` on two simulated Thunderbolt 4 Mac minis through a real sshd: the model and
the data copied to each node's cache by the existing copy, every rank the whole model,
rank 0 (remote) writing the adapter beside the data on its node, the adapter fetched
into the user data folder, nothing left running on the nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.session import real_hosts
from core.run.states import RunState
from core.run.tasks.finetune import FineTune
from core.tune.settings import TuneSettings
from tests.fixtures.macos.make_bin import make_host_bins
from tests.helpers.remote import sshd_targets, wait_nothing_left
from tests.helpers.sshd import SSHServer
from tests.helpers.tiny_models import make_tiny_model
from tests.helpers.tune_data import write_chat_data

pytestmark = pytest.mark.slow
HOSTS = {"127.0.0.2": "mini-g", "127.0.0.3": "mini-h"}


@pytest.fixture(scope="module")
def sshd_addresses() -> tuple[str, ...]:
    return tuple(HOSTS)


@pytest.fixture(scope="module")
def sshd_host_bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_host_bins("mini-tb4", HOSTS, tmp_path_factory.mktemp("tb4-bins"))


def test_a_fine_tune_over_ssh_brings_the_adapter_home(
    sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    model = make_tiny_model(tmp_path / "model" / "tiny")
    data = write_chat_data(tmp_path / "set")
    targets = sshd_targets(sshd, tmp_path / "nodes", HOSTS)
    settings = TuneSettings(iters=4, batch_size=4, steps_per_eval=2, steps_per_save=2)
    tune = FineTune(read_model_info(model), real_hosts(targets), data, settings, name="Remote")
    assert tune.start(), tune.session.error or tune.session.report
    adapter = tune.wait(300)
    assert tune.state == RunState.STOPPED, tune.error
    assert adapter is not None and tune.out is not None
    assert tune.out.parent == tmp_path / "data" / "adapters"  # MACMESH_DATA_DIR (conftest)
    for name in ("adapters.safetensors", "adapter_config.json", "0000004_adapters.safetensors"):
        assert (tune.out / name).is_file(), name
    meta = json.loads((tune.out / "macmesh.json").read_text())
    assert meta["iterations"] == 4 and meta["stopped"] is False
    spec = tune.session.spec
    assert spec is not None and spec.rank_data is not None
    for folder, target in zip(spec.rank_data, spec.targets or [], strict=True):
        assert str(folder).startswith(str(target.cache_root))  # on its node, beside the model
        assert (folder / "train.jsonl").read_text() == (data / "train.jsonl").read_text()
    # the adapter's folder on rank 0's node went once fetched
    assert spec.out is not None and not Path(spec.out).exists()
    assert wait_nothing_left(sshd) == []
