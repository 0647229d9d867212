"""`macmesh demo --headless`: the whole engine from the command line, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _macmesh(
    args: list[str], demo_model: Path, timeout: float = 300
) -> subprocess.CompletedProcess:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.slow
def test_headless_demo_streams_real_english_and_ends_with_a_json_summary(demo_model: Path) -> None:
    run = _macmesh(["demo", "--headless", "--json", "--max-tokens", "16"], demo_model)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert "Paris" in summary["text"]
    assert "Paris" in "\n".join(lines[:-1])  # streamed before the summary
    assert summary["strategy"] == "pipeline" and summary["nodes"] == 2
    assert sum(summary["split"]) == 30
    for key in ("prompt_tps", "generation_tps", "ttft_s"):
        assert summary[key] > 0
    assert summary["link_bytes_per_s"]["0↔1"] > 0


def test_tensor_on_two_nodes_is_refused_with_the_reason_before_anything_starts(
    demo_model: Path,
) -> None:
    run = _macmesh(["demo", "--headless", "--strategy", "tensor", "--nodes", "2"], demo_model)
    assert run.returncode == 2
    assert "9 attention heads" in run.stderr and "2 nodes" in run.stderr
    assert "Starting" not in run.stderr


def test_a_folder_that_is_not_a_model_is_refused_clearly(demo_model: Path, tmp_path: Path) -> None:
    run = _macmesh(["demo", "--headless", "--model", str(tmp_path)], demo_model)
    assert run.returncode == 2
    assert "config.json" in run.stderr
    assert "Traceback" not in run.stderr


def test_too_many_demo_nodes_is_refused(demo_model: Path) -> None:
    run = _macmesh(["demo", "--headless", "--nodes", "9"], demo_model)
    assert run.returncode == 2
    assert "1 to 4" in run.stderr
