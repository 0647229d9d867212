"""`macmesh demo --headless`: the whole engine from the command line, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.ctrlc import gone, interrupt_at
from tests.helpers.wait import wait_until


def _macmesh(
    args: list[str], demo_model: Path, timeout: float = 300, logs: Path | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    if logs is not None:
        env["MACMESH_LOG_DIR"] = str(logs)
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


@pytest.mark.slow
@pytest.mark.parametrize(("bits", "group"), [("8", None), ("4", "32")])
def test_headless_demo_stores_the_kv_cache_quantized_at_the_bits_asked(
    demo_model: Path, tmp_path: Path, bits: str, group: str | None
) -> None:
    """``--kv-bits`` (and ``--kv-group-size``, default 64) as ``run`` and ``serve`` take
    them: the summary says them and every rank's log says its caches were quantized so."""
    args = ["demo", "--headless", "--json", "--max-tokens", "16", "--kv-bits", bits]
    args += ["--kv-group-size", group] if group else []
    run = _macmesh(args, demo_model, logs=tmp_path)
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert (summary["kv_bits"], summary["kv_group_size"]) == (int(bits), int(group or 64))
    assert summary["text"].strip() and ("Paris" in summary["text"] or bits == "4")
    logs = sorted((tmp_path / "runs").glob("*/rank*.log"))
    assert len(logs) == 2, logs
    said = f"quantized at {bits} bits, groups of {group or 64}"
    assert all(said in log.read_text() for log in logs)


def test_headless_demo_refuses_kv_bits_it_cannot_run_in_one_line(demo_model: Path) -> None:
    run = _macmesh(["demo", "--headless", "--kv-bits", "6"], demo_model)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip() == (
        "macmesh: the KV cache bits (--kv-bits) must be 16 (not quantized), 8 or 4, not 6"
    )
    run = _macmesh(["demo", "--headless", "--kv-bits", "8", "--kv-group-size", "48"], demo_model)
    assert run.returncode == 2 and "--kv-group-size" in run.stderr and "Starting" not in run.stderr


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


# -- Ctrl-C ----------------------------------------------------------------------------------

DEMO_STAGES = {
    "plan": "planning",
    "loading": "loading the model",
    "generation": "generating the answer",
}


@pytest.mark.slow
@pytest.mark.parametrize("hold", list(DEMO_STAGES))
def test_ctrl_c_at_every_stage_of_the_demo_stops_every_rank_and_exits_130(
    demo_model: Path, hold: str
) -> None:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    args = ["demo", "--headless", "--max-tokens", "100000"]
    run = interrupt_at(hold, args, env)
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr
    [line] = run.macmesh_lines
    assert line.startswith(f"macmesh: interrupted while {DEMO_STAGES[hold]}; "), run.stderr
    assert ("every rank stopped" if hold != "plan" else "nothing was started") in line
    assert len(run.ranks) == (0 if hold == "plan" else 2)
    wait_until(lambda: gone(run.ranks), 10, "every rank to end")


@pytest.mark.slow
def test_ctrl_c_during_the_demo_model_conversion_leaves_no_folder(tmp_path: Path) -> None:
    from core.model.demo_model import gguf_path

    gguf_path()  # the demo model's source is installed (the demo_model fixture needs it too)
    env = dict(os.environ, MACMESH_CACHE_DIR=str(tmp_path), HF_HUB_OFFLINE="1")
    run = interrupt_at("conversion", ["demo", "--headless"], env)
    assert run.returncode == 130, run.stderr
    assert "Traceback" not in run.stderr
    [line] = run.macmesh_lines
    assert line.startswith("macmesh: interrupted while preparing the demo model; "), run.stderr
    models = tmp_path / "models"
    assert [p.name for p in models.iterdir() if not p.name.endswith(".lock")] == []
    again = interrupt_at("generation", ["demo", "--headless", "--max-tokens", "100000"], env)
    assert again.returncode == 130, again.stderr  # the next run converts afresh, then runs
    assert "Preparing the demo model (once)" in again.stderr
