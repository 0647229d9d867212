"""After a job fails, the words say which architecture failed on which strategy and what
else the planner accepts for it on these Macs (issue 39)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run import demo
from core.run.planning import failure_advice, runnable_strategies
from core.worker.vocab import Strategy
from tests.helpers.arch_models import make_arch_model
from tests.helpers.wait import wait_until


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archs")
    return {a: make_arch_model(root / a, a) for a in ("gpt_oss", "nemotron_h")}


def test_a_model_every_strategy_runs_names_one_node_and_tensor(folders: dict[str, Path]) -> None:
    info = read_model_info(folders["gpt_oss"])
    runnable = runnable_strategies(info, demo.demo_facts(2))
    assert runnable == [Strategy.SINGLE, Strategy.PIPELINE, Strategy.TENSOR]
    said = failure_advice(info.architecture, Strategy.PIPELINE, 2, runnable)
    assert said == (
        "The gpt_oss model failed on a 2-node pipeline. "
        "One node or tensor can run it on these Macs: try that."
    )


def test_a_model_tensor_cannot_split_offers_one_node_only(folders: dict[str, Path]) -> None:
    # nemotron_h runs on tensor through MacMesh's own sharding; with 3 heads, 2 nodes
    # cannot split them.
    info = replace(read_model_info(folders["nemotron_h"]), heads=3, kv_heads=3)
    assert Strategy.TENSOR in runnable_strategies(
        read_model_info(folders["nemotron_h"]), demo.demo_facts(2)
    )
    runnable = runnable_strategies(info, demo.demo_facts(2))
    assert Strategy.TENSOR not in runnable
    said = failure_advice(info.architecture, Strategy.PIPELINE, 2, runnable)
    assert said == (
        "The nemotron_h model failed on a 2-node pipeline. One node can run it on these Macs: "
        "try that."
    )


def test_nothing_else_runs_says_only_what_failed() -> None:
    said = failure_advice("llama", Strategy.SINGLE, 1, [Strategy.SINGLE])
    assert said == "The llama model failed on one node."


def test_a_failed_job_s_words_name_the_architecture_and_what_else_runs(
    folders: dict[str, Path],
) -> None:
    from core.run.session import Session, simulated_hosts
    from core.run.states import RunState
    from tests.gui.fakes import FakeBehaviour, fake_factory

    info = read_model_info(folders["gpt_oss"])
    behaviour = FakeBehaviour(fail_after_load="Rank 1 failed: TypeError: boom")
    session = Session(
        info,
        simulated_hosts(demo.demo_facts(2)),
        strategy=Strategy.PIPELINE,
        job_factory=fake_factory(behaviour),
    )
    details: list[tuple[str, str]] = []
    session.state_changed.connect(lambda state, detail: details.append((state, detail)))
    try:
        session.start()
        wait_until(lambda: session.state == RunState.FAILED, 30, "the job to fail")
    finally:
        session.stop()
    assert details[-1][0] == "failed"
    assert details[-1][1] == (
        "Rank 1 failed: TypeError: boom\nThe gpt_oss model failed on a 2-node pipeline. "
        "One node or tensor can run it on these Macs: try that."
    )
