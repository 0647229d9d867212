"""Every task keeps the same run in the history whichever front end drives it (issue 23):
the chat, the link test, the comparison (and Compare with base), the fine-tune and the
API's answers, each once
from the command line and once from the window, on the demo cluster's real ranks. The
two records agree in everything but the measured values: the task builds them."""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from pytestqt.qtbot import QtBot

from core.cli.compare import run_compare
from core.cli.demo import add_arguments as add_demo_arguments
from core.cli.demo import run_headless
from core.cli.finetune import run_finetune
from core.cli.interrupt import Stage
from core.cli.linktest import run_linktest
from core.model.info import ModelInfo, read_model_info
from core.run.demo import demo_facts
from core.run.measure.history import History, RunKind, RunRecord
from core.run.planning import plan_on
from core.run.session import simulated_hosts
from core.run.states import RunState
from core.serve.service import ApiSettings
from core.tune.settings import TuneSettings
from gui.bridge import Bridge
from gui.run.compare_view import CompareRunner
from gui.run.controller import RunController
from gui.run.pane import RunPane
from gui.tune.actions import AdapterActions
from gui.tune.controller import TuneController
from tests.helpers.jobs import assert_no_ranks_left
from tests.helpers.serving import free_port, start_serving
from tests.helpers.tune_data import write_chat_data

pytestmark = pytest.mark.slow
WITHIN_MS = 240_000
QUESTION = "What is the capital of France?"
SETTINGS = replace(TuneSettings(), iters=2, batch_size=4)  # what the command line makes of it


def shape(record: RunRecord) -> dict[str, object]:
    """What a task decides of a record (the measured values aside)."""
    return {
        "kind": record.kind,
        "model": record.model,
        "nodes": record.nodes,
        "strategy": record.strategy,
        "backend": record.backend,
        "split": record.split,
        "figures": sorted(record.figures),
        "series": sorted(record.series),
        "versions": sorted(record.versions),
    }


def only_run(kind: RunKind) -> RunRecord:
    runs = [r for r in History().runs() if r.kind == kind]
    assert len(runs) == 1, runs
    record = History().get(runs[0].id or 0)
    assert record is not None
    return record


def cli(command: Callable[..., int], **fields: object) -> None:
    """A command run in this process, as ``macmesh`` runs it; exit 0."""
    out, err = io.StringIO(), io.StringIO()
    code = command(argparse.Namespace(**fields), out, err, Stage("reading the model"))
    assert code == 0, err.getvalue()


def compare_from_cli(llama: ModelInfo, adapter: Path | None) -> RunRecord:
    """``macmesh compare --demo --nodes 2 --strategy pipeline`` (``--adapter``: Compare
    with base), and the one record it kept."""
    cli(
        run_compare,
        model=str(llama.path),
        demo=True,
        hosts=None,
        nodes=2,
        strategy="pipeline",
        prompt=QUESTION,
        max_tokens=4,
        split=None,
        adapter=None if adapter is None else str(adapter),
        json=True,
    )
    return only_run(RunKind.COMPARE)


def fresh_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / name))


@pytest.fixture
def llama(tiny_models: dict[str, Path]) -> ModelInfo:
    return read_model_info(tiny_models["llama"])


@pytest.fixture
def bridge(qtbot: QtBot):
    bridge = Bridge()
    yield bridge
    bridge.close()


def test_the_chat_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, llama: ModelInfo, tmp_path: Path, monkeypatch
) -> None:
    fresh_history(tmp_path, monkeypatch, "cli")
    parser = argparse.ArgumentParser()
    add_demo_arguments(parser)  # the command's own options and defaults (KV bits, ...)
    argv = ["--headless", "--model", str(llama.path), "--nodes", "2", "--strategy", "pipeline"]
    argv += ["--prompt", QUESTION, "--max-tokens", "4", "--json"]
    cli(
        lambda args, out, err, _stage: run_headless(args, out, err),
        **vars(parser.parse_args(argv)),
    )
    from_cli = only_run(RunKind.CHAT)

    fresh_history(tmp_path, monkeypatch, "window")
    controller = RunController(bridge)
    controller.start(llama, plan_on(llama, demo_facts(2), "pipeline"))
    qtbot.waitUntil(lambda: controller.state == RunState.READY, timeout=WITHIN_MS)
    with qtbot.waitSignal(controller.recorded, timeout=WITHIN_MS) as kept:
        assert controller.ask(QUESTION, 4)
    job = controller.job
    controller.shutdown()
    assert_no_ranks_left(job)
    from_window = only_run(RunKind.CHAT)
    assert kept.args[0].id == from_window.id
    assert shape(from_window) == shape(from_cli)
    assert from_cli.nodes == ["Studio A", "Studio B"] and from_cli.backend == "ring"


def test_the_link_test_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, llama: ModelInfo, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr("core.cli.linktest.QUICK_SCALE", 0.02)  # few bytes: the test short
    fresh_history(tmp_path, monkeypatch, "cli")
    cli(run_linktest, demo=True, hosts=None, nodes=2, model=llama.path, quick=True, json=True)
    from_cli = only_run(RunKind.LINKTEST)

    fresh_history(tmp_path, monkeypatch, "window")
    controller = RunController(bridge)
    controller.link_scale = 0.02
    controller.start(llama, plan_on(llama, demo_facts(2), "pipeline"))
    qtbot.waitUntil(lambda: controller.state == RunState.READY, timeout=WITHIN_MS)
    with qtbot.waitSignal(controller.links_tested, timeout=WITHIN_MS) as tested:
        assert controller.test_links()
    assert tested.args[0].not_kept is None
    controller.shutdown()
    from_window = only_run(RunKind.LINKTEST)
    assert shape(from_window) == shape(from_cli)
    assert from_cli.figures["nodes"] == ["Studio A", "Studio B"]


def test_the_comparison_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, llama: ModelInfo, tmp_path: Path, monkeypatch
) -> None:
    fresh_history(tmp_path, monkeypatch, "cli")
    from_cli = compare_from_cli(llama, None)

    fresh_history(tmp_path, monkeypatch, "window")
    runner = CompareRunner(bridge)
    failed: list[str] = []
    finished: list[object] = []
    runner.failed.connect(failed.append)
    runner.finished.connect(finished.append)
    hosts = simulated_hosts(demo_facts(2))  # as the Cluster pane gives the demo's
    runner.start(llama, plan_on(llama, demo_facts(2), "pipeline"), hosts, QUESTION, 4)
    qtbot.waitUntil(lambda: bool(finished or failed), timeout=WITHIN_MS)
    assert not failed, failed
    assert getattr(finished[0], "not_kept", "?") is None
    from_window = only_run(RunKind.COMPARE)
    assert shape(from_window) == shape(from_cli)
    assert from_cli.backend == "ring" and from_cli.figures["single"] is not None


def test_compare_with_base_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, llama: ModelInfo, tiny_adapter: Path, tmp_path: Path, monkeypatch
) -> None:
    fresh_history(tmp_path, monkeypatch, "cli")
    from_cli = compare_from_cli(llama, tiny_adapter)

    fresh_history(tmp_path, monkeypatch, "window")
    actions = AdapterActions(bridge)  # the Fine-tune window's Compare with base
    failed: list[str] = []
    compared: list[object] = []
    actions.failed.connect(failed.append)
    actions.compared.connect(compared.append)
    assert actions.compare(llama, simulated_hosts(demo_facts(2)), tiny_adapter, QUESTION, 4)
    qtbot.waitUntil(lambda: bool(compared or failed), timeout=WITHIN_MS)
    assert not failed, failed
    assert getattr(compared[0], "not_kept", "?") is None
    from_window = only_run(RunKind.COMPARE)
    assert shape(from_window) == shape(from_cli)
    assert from_cli.figures["variant"] == from_window.figures["variant"] == "adapter"
    assert from_cli.figures["adapter"] == from_window.figures["adapter"] == "Mochi"


def test_the_fine_tune_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, llama: ModelInfo, tmp_path: Path, monkeypatch
) -> None:
    data = write_chat_data(tmp_path / "data-set")
    fresh_history(tmp_path, monkeypatch, "cli")
    cli(
        run_finetune,
        model=str(llama.path),
        data=data,
        demo=True,
        hosts=None,
        nodes=2,
        python=None,
        cache_root=None,
        iters=SETTINGS.iters,
        batch_size=SETTINGS.batch_size,
        learning_rate=None,
        lora_rank=None,
        name="from the command line",
        json=True,
    )
    from_cli = only_run(RunKind.FINETUNE)

    fresh_history(tmp_path, monkeypatch, "window")
    controller = TuneController(bridge)
    hosts = simulated_hosts(demo_facts(2))
    with qtbot.waitSignal(controller.finished, timeout=WITHIN_MS) as finished:
        assert controller.start(llama, hosts, data, SETTINGS, "from the window")
    assert finished.args[0] is not None
    qtbot.waitUntil(lambda: controller.state == RunState.STOPPED, timeout=WITHIN_MS)
    from_window = only_run(RunKind.FINETUNE)
    assert shape(from_window) == shape(from_cli)
    assert from_cli.figures["iterations"] == from_window.figures["iterations"] == 2


def test_the_api_keeps_the_same_record(
    qtbot: QtBot, bridge: Bridge, demo_model: Path, tmp_path: Path
) -> None:
    (tmp_path / "cli").mkdir()
    served = start_serving(demo_model, tmp_path / "cli")
    try:
        answer = _ask(served.base_url, served.key)
    finally:
        assert served.stop() == 0
    assert answer == "The capital of France is Paris."
    from_cli = _only_api_run(tmp_path / "cli" / "data" / "history.sqlite3")

    info = read_model_info(demo_model)
    pane = RunPane(bridge)
    qtbot.addWidget(pane, before_close_func=lambda _p: pane.shutdown())
    pane.api.apply(ApiSettings(enabled=True, require_key=False, port=free_port()))
    pane.set_plan(info, plan_on(info, demo_facts(2), "pipeline"))
    pane.start()
    qtbot.waitUntil(lambda: pane.api.running, timeout=WITHIN_MS)
    assert _ask(pane.api.address, None) == "The capital of France is Paris."
    qtbot.waitUntil(lambda: bool(History().runs()), timeout=10_000)
    pane.stop()
    qtbot.waitUntil(lambda: pane.controller.state == RunState.STOPPED, timeout=30_000)
    from_window = only_run(RunKind.API)
    assert shape(from_window) == shape(from_cli)
    assert from_cli.figures["client"] == "key file" and from_window.figures["client"]


def _ask(url: str, key: str | None) -> str:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {
        "model": "SmolLM2-135M-Instruct-mlx-q4",
        "messages": [{"role": "user", "content": QUESTION}],
    }
    reply = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=120)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _only_api_run(path: Path) -> RunRecord:
    (run,) = History(path).runs()
    record = History(path).get(run.id or 0)
    assert record is not None and record.kind == RunKind.API
    return record
