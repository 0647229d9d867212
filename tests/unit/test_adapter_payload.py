"""The adapter as a typed payload (``core.run.tasks.adapter_payload``): checked against
the model when made, shipped by the session to every node the plan uses in its copy
step (said once, with each node's progress; a failed copy one line naming the node),
and each rank's folder in the job's spec. The copy itself is faked here (its machinery
is ``core.remote.adaptercopy``'s, tested over a real sshd by the e2e adapter tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from core.model.adapter import AdapterError
from core.model.info import ModelInfo, read_model_info
from core.model.manifest import Manifest
from core.remote.modelcopy import CopyProgress
from core.remote.targets import Target
from core.remote.transport import ModelCopyError
from core.run import session as session_module
from core.run.checks.backend_choice import BackendChoice
from core.run.checks.report import PreflightReport
from core.run.demo import DEMO_MACS, demo_facts
from core.run.errors import ClusterError
from core.run.session import Host, Session, simulated_hosts
from core.run.states import RunState, Step
from core.run.tasks import adapter_payload
from core.run.tasks.adapter_payload import AdapterPayload, adapter_payloads
from core.run.tasks.training_payload import TrainingPayload
from core.worker.vocab import Strategy, Task
from tests.gui.fakes import fake_factory


@pytest.fixture
def llama(tiny_models: dict[str, Path]) -> ModelInfo:
    return read_model_info(tiny_models["llama"])


def node(name: str) -> Host:
    """A real Mac, probed just now (nothing asked over SSH), its cache root known."""
    facts = replace(DEMO_MACS[0], name=name, probed_at=time.monotonic())
    return Host(name, Target(name, "127.0.0.9", cache_root=f"/cache/{name}"), facts)


class FakeCopy:
    """Stands in for ``put_adapter``: records each node it was asked for, reports one
    progress, gives the folder there; raises for the nodes in ``failing``."""

    def __init__(self, failing: Sequence[str] = ()) -> None:
        self.calls: list[tuple[str, Path, tuple[str, ...]]] = []
        self.failing = set(failing)
        self._lock = threading.Lock()

    def __call__(
        self,
        target: Target,
        folder: Path,
        files: Sequence[str],
        progress: Callable[[CopyProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> str:
        assert progress is not None and cancel is not None  # the session's, for Stop
        with self._lock:
            self.calls.append((target.name, folder, tuple(files)))
        if target.name in self.failing:
            raise ModelCopyError("no space left on the device")
        progress(CopyProgress(target.name, "verified", 10, 10))
        return f"{target.cache_root}/models/adapter-on-{target.name}"


@pytest.fixture
def checks_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_preflight(targets, plan, *args, **kwargs):  # type: ignore[no-untyped-def]
        manifests = {t.name: Manifest("llama", ()) for t in targets}  # nothing to copy
        return PreflightReport((), BackendChoice("ring", "ring", "test"), (), manifests)

    monkeypatch.setattr(session_module, "run_preflight", fake_preflight)


def test_the_payload_is_made_from_the_model_and_the_folder_with_its_check(
    llama: ModelInfo, tiny_adapter: Path, tmp_path: Path
) -> None:
    payload = AdapterPayload(llama, tiny_adapter)
    assert (payload.name, payload.path, payload.task) == ("Mochi", tiny_adapter, Task.CHAT)
    assert payload.use.files == ("adapter_config.json", "adapters.safetensors", "macmesh.json")
    with pytest.raises(AdapterError, match="is not an adapter folder"):
        AdapterPayload(llama, tmp_path)
    assert adapter_payloads(llama, None) == [] and adapter_payloads(llama, "") == []
    assert [p.name for p in adapter_payloads(llama, str(tiny_adapter))] == ["Mochi"]


def test_the_spec_fields_give_each_rank_its_folder(
    llama: ModelInfo, tiny_adapter: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = AdapterPayload(llama, tiny_adapter)
    assert payload.spec_fields([]) == {"adapter": tiny_adapter}  # the demo reads it here
    here = Target("here", "127.0.0.1", local=True)
    there = Target("there", "127.0.0.9", cache_root="/cache/there")
    # Not shipped yet (the launch dialog): where it would be, named after its content.
    before = payload.spec_fields([there, here])
    assert before["adapter"] == tiny_adapter
    assert str(before["rank_adapters"][0]).startswith("/cache/there/models/adapter-mochi-")
    assert before["rank_adapters"][1] == tiny_adapter  # this Mac's own folder
    copy = FakeCopy()
    monkeypatch.setattr(adapter_payload, "put_adapter", copy)
    shipped = payload.ship(there, lambda _progress: None, threading.Event())
    assert copy.calls == [("there", tiny_adapter, payload.use.files)]
    payload.shipped({"there": shipped, "here": str(tiny_adapter)})
    assert payload.spec_fields([there, here])["rank_adapters"] == [
        Path("/cache/there/models/adapter-on-there"),
        tiny_adapter,
    ]


def test_the_session_ships_it_to_every_node_in_one_copy_step(
    llama: ModelInfo, tiny_adapter: Path, monkeypatch: pytest.MonkeyPatch, checks_pass: None
) -> None:
    copy = FakeCopy()
    monkeypatch.setattr(adapter_payload, "put_adapter", copy)
    payload = AdapterPayload(llama, tiny_adapter)
    session = Session(
        llama,
        [node("a"), node("b")],
        strategy=Strategy.PIPELINE,
        payloads=[payload],
        job_factory=fake_factory(),
    )
    assert session.payload_of(AdapterPayload) is payload
    assert session.payload_of(TrainingPayload) is None
    began: list[str] = []
    copies: list[CopyProgress] = []
    session.step_started.connect(began.append)
    session.copy_progress.connect(copies.append)
    assert session.start(Step.COPY) is True
    assert began.count("copy") == 1 and Step.COPY in session.completed
    assert sorted(name for name, _folder, _files in copy.calls) == ["a", "b"]
    assert sorted(p.node for p in copies) == ["a", "b"]
    spec = session.job_spec()
    assert spec.adapter == tiny_adapter and spec.task is Task.CHAT
    ranks = [t.name for t in spec.targets or []]
    assert spec.rank_adapters == [Path(f"/cache/{n}/models/adapter-on-{n}") for n in ranks]
    args = spec.worker_args(1)
    assert args[args.index("--adapter") + 1] == f"/cache/{ranks[1]}/models/adapter-on-{ranks[1]}"


def test_a_failed_copy_is_one_line_naming_the_node(
    llama: ModelInfo, tiny_adapter: Path, monkeypatch: pytest.MonkeyPatch, checks_pass: None
) -> None:
    monkeypatch.setattr(adapter_payload, "put_adapter", FakeCopy(failing=["b"]))
    session = Session(
        llama,
        [node("a"), node("b")],
        strategy=Strategy.PIPELINE,
        payloads=adapter_payloads(llama, tiny_adapter),
    )
    with pytest.raises(ClusterError) as failed:
        session.start(Step.COPY)
    line = "The adapter could not be copied to b: no space left on the device"
    assert str(failed.value) == line
    assert session.state == RunState.NOT_READY and session.error == line
    assert Step.COPY not in session.completed


def test_the_demo_ships_nothing_and_its_ranks_read_the_folder_here(
    llama: ModelInfo, tiny_adapter: Path
) -> None:
    payloads = adapter_payloads(llama, tiny_adapter)
    session = Session(llama, simulated_hosts(demo_facts(2)), payloads=payloads)
    assert session.start(Step.PLAN) is True and session.copy() == []
    spec = session.job_spec()
    assert spec.adapter == tiny_adapter and spec.rank_adapters is None
    assert "--adapter" in spec.worker_args(0)


def test_an_adapter_does_not_ride_a_fine_tune(llama: ModelInfo, tiny_adapter: Path) -> None:
    """The worker's training loop never reads ``--adapter``: refused, not ignored."""
    both = [AdapterPayload(llama, tiny_adapter), TrainingPayload()]
    with pytest.raises(ClusterError, match="One job runs one task"):
        Session(llama, simulated_hosts(demo_facts(2)), payloads=both)
    tune = Session(llama, simulated_hosts(demo_facts(2)), payloads=[TrainingPayload()])
    assert tune.task is Task.FINETUNE and tune.payload_of(AdapterPayload) is None
