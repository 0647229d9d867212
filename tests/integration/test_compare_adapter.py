"""Compare with base: the same question to the base model and to base + adapter, on the
same (demo) nodes, side by side; each answer as mlx-lm's own gives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli.compare import answers_side_by_side
from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.session import simulated_hosts
from core.run.tasks.compare import compare_adapter
from tests.helpers.adapters import QUESTION, mlx_lm_answer

pytestmark = pytest.mark.slow


def test_base_and_adapter_answer_side_by_side(tiny_models, tiny_adapter: Path) -> None:
    model = tiny_models["llama"]
    hosts = simulated_hosts(demo_facts(2))
    result = compare_adapter(read_model_info(model), hosts, "pipeline", QUESTION, 12, tiny_adapter)
    assert result.base.text == mlx_lm_answer(model, None, QUESTION)[1]
    assert result.adapted.text == mlx_lm_answer(model, tiny_adapter, QUESTION)[1]
    assert result.differ and result.adapter == "Mochi"
    assert (result.base.label, result.adapted.label) == ("base", "base + Mochi")
    assert result.base.ranks == result.adapted.ranks == 2  # both ran on the two nodes
    assert result.base.nodes == result.adapted.nodes
    shown = answers_side_by_side(result)
    assert shown.endswith("The answers differ: Mochi changes what the model says.\n")
    assert "\nbase + Mochi:\n  " in shown and "\nbase:\n  " in shown


def _compare(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(tmp_path / "cache"), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "compare", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_the_command_line_compares_with_an_adapter(
    tiny_models, tiny_adapter: Path, tmp_path: Path
) -> None:
    model = tiny_models["llama"]
    args = [str(model), "--demo", "--adapter", str(tiny_adapter), "--prompt", QUESTION]
    run = _compare([*args, "--max-tokens", "12", "--json"], tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["variant"] == "adapter" and result["differ"] is True
    assert result["adapted"]["text"] == mlx_lm_answer(model, tiny_adapter, QUESTION)[1]
    assert "Base + Mochi on " in run.stderr


def test_a_wrong_adapter_is_refused_before_anything_runs(tiny_models, tmp_path: Path) -> None:
    run = _compare([str(tiny_models["qwen3"]), "--demo", "--adapter", str(tmp_path)], tmp_path)
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"macmesh: {tmp_path} is not an adapter folder: it has no adapter_config.json"
    )
