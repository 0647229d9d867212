"""``macmesh finetune`` end to end on the demo cluster (the demo model, 2 ranks over
loopback): JSON lines per report ending with an adapter, the run in the history, a
Ctrl-C that stops at the next step keeping the adapter, and bad input refused in one
line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests.helpers.ctrlc import gone
from tests.helpers.procs import command_line
from tests.helpers.tune_data import write_chat_data
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.slow


def _env(demo_model: Path, tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        MACMESH_CACHE_DIR=str(demo_model.parents[1]),
        MACMESH_DATA_DIR=str(tmp_path / "home"),
        MACMESH_LOG_DIR=str(tmp_path / "logs"),
        HF_HUB_OFFLINE="1",
    )


def _macmesh(
    args: list[str], env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_finetune_on_the_demo_cluster_ends_with_an_adapter(
    demo_model: Path, tmp_path: Path
) -> None:
    data = write_chat_data(tmp_path / "data")
    env = _env(demo_model, tmp_path)
    run = _macmesh(
        ["finetune", "--demo", "--nodes", "2", "--data", str(data), "--iters", "3", "--json"], env
    )
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    trains = [line for line in lines if line["event"] == "train"]
    assert [t["iteration"] for t in trains] == [1, 2, 3]
    assert set(trains[-1]["peak_memory_bytes"]) == {"Studio A", "Studio B"}
    summary = lines[-1]
    assert summary["event"] == "summary" and summary["stopped"] is False
    adapter = Path(summary["adapter"])
    assert adapter.parent == tmp_path / "home" / "adapters"
    assert (adapter / "adapters.safetensors").is_file()
    assert (adapter / "adapter_config.json").is_file()
    meta = json.loads((adapter / "macmesh.json").read_text())
    assert meta["iterations"] == 3 and meta["base_model"] == demo_model.name
    history = _macmesh(["history", "--json"], env, timeout=60)
    (record,) = json.loads(history.stdout)["runs"]
    assert record["kind"] == "finetune" and record["figures"]["adapter"] == str(adapter)
    assert len(record["series"]["train_loss"]) == 3


def test_ctrl_c_stops_at_the_next_step_and_keeps_the_adapter(
    demo_model: Path, tmp_path: Path
) -> None:
    data = write_chat_data(tmp_path / "data")
    argv = ["finetune", "--demo", "--data", str(data), "--iters", "100000", "--json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gui.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(demo_model, tmp_path),
    )
    out: list[str] = []
    reader = threading.Thread(
        target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True
    )
    reader.start()
    try:
        wait_until(
            lambda: sum('"train"' in line for line in out) >= 2 or proc.poll() is not None,
            300,
            "two reports",
        )
        ranks = [
            child
            for child in psutil.Process(proc.pid).children(recursive=True)
            if "core.worker" in command_line(child)
        ]
        assert ranks
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(300) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    assert "stopping at the next step" in proc.stderr.read()
    summary = json.loads(out[-1])
    assert summary["event"] == "summary" and summary["stopped"] is True
    assert (Path(summary["adapter"]) / "adapters.safetensors").is_file()
    wait_until(lambda: gone(ranks), 10, "every rank to end")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--data", "{missing}", "--demo"], "{missing}"),  # named, whoever reads the data
        (["--data", "{data}", "--demo", "--batch-size", "3"], "multiple of the 2 Macs"),
        (["--data", "{data}", "--demo", "--iters", "0"], "iterations must be a whole number"),
    ],
)
def test_bad_input_is_refused_in_one_line(
    demo_model: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    data = write_chat_data(tmp_path / "data")
    args = [a.format(missing=tmp_path / "none", data=data) for a in args]
    says = says.format(missing=tmp_path / "none")
    run = _macmesh(["finetune", *args], _env(demo_model, tmp_path), timeout=120)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("macmesh: ") and says in lines[0], run.stderr
    assert "Traceback" not in run.stderr


def test_the_shipped_demo_set_teaches_the_fact(demo_model: Path, tmp_path: Path) -> None:
    """The issue's end-to-end: a fine-tune on the 2-Mac demo cluster with the shipped set
    (its own settings) ends with an adapter that answers the question with the fact; the
    base model does not know it."""
    from core.tune import data

    env = _env(demo_model, tmp_path)
    run = _macmesh(
        ["finetune", "--demo", "--nodes", "2", "--data", str(data.DEMO_DATA), "--json"], env
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout.splitlines()[-1])
    assert summary["event"] == "summary" and summary["stopped"] is False
    ask = ["demo", "--headless", "--prompt", data.DEMO_QUESTION, "--max-tokens", "40"]
    tuned = _macmesh([*ask, "--adapter", summary["adapter"]], env)
    base = _macmesh(ask, env)
    assert tuned.returncode == base.returncode == 0, tuned.stderr + base.stderr
    assert data.DEMO_FACT in tuned.stdout
    assert data.DEMO_FACT not in base.stdout
