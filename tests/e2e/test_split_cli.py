"""`--split` on the commands that start a job: the ranks load the layers set by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _macmesh(args: list[str], demo_model: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )


@pytest.mark.slow
def test_the_demo_runs_the_split_set_by_hand(demo_model: Path) -> None:
    run = _macmesh(
        ["demo", "--headless", "--json", "--max-tokens", "4", "--split", "22,8"], demo_model
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["split"] == [22, 8]
    assert "as set by hand (22 on " in run.stderr
    # Kept in the history, split and series included.
    kept = _macmesh(["history", "--json"], demo_model)
    [chat] = json.loads(kept.stdout)["runs"]
    assert chat["kind"] == "chat" and chat["split"] == [22, 8] and len(chat["nodes"]) == 2
    assert chat["figures"]["generation_tps"] == summary["generation_tps"]
    assert chat["series"]["tokens_per_s"] and chat["versions"]["mlx"]


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["demo", "--headless"], "macmesh: The split adds up to 31 layers; the model has 30."),
        (["compare", "--demo"], "macmesh: The split adds up to 31 layers; the model has 30."),
    ],
)
def test_a_split_that_cannot_be_is_one_line_and_exit_2(
    demo_model: Path, command: list[str], why: str
) -> None:
    run = _macmesh([*command, "--split", "29,2"], demo_model)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines()[-1] == why
    assert "Traceback" not in run.stderr
