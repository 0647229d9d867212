"""Bad input on the command line, as a user meets it: a malformed model folder, an absurd
argument, a MACMESH_*_DIR that cannot be used. Each is one line on stderr and exit 2,
never a traceback. (Argument errors keep argparse's usage line before theirs.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.malformed_models import CLI_CASES, case, valid_model


def _macmesh(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )


def _one_line(run: subprocess.CompletedProcess, *names: str) -> str:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


@pytest.mark.parametrize("name", CLI_CASES)
def test_plan_on_a_malformed_folder(tmp_path: Path, name: str) -> None:
    bad = case(name)
    folder = bad.build(tmp_path / "m")
    _one_line(_macmesh(["plan", str(folder), "--node", "a:64"]), bad.file, bad.field)


def test_demo_and_run_on_a_malformed_folder(tmp_path: Path) -> None:
    bad = case("weight_map_escapes")
    folder = str(bad.build(tmp_path / "m"))
    _one_line(_macmesh(["demo", "--headless", "--model", folder]), bad.file, bad.field)
    # The model is read before any host is probed: nothing is contacted.
    run = _macmesh(["run", folder, "--hosts", "127.0.0.1"])
    _one_line(run, bad.file, bad.field)


@pytest.mark.parametrize("memory", ["inf", "1e400", "-8"])
def test_plan_refuses_absurd_node_memory(tmp_path: Path, memory: str) -> None:
    folder = str(valid_model(tmp_path / "m"))
    run = _macmesh(["plan", folder, "--node", f"a:{memory}"])
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "--node" in run.stderr.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--max-tokens", "1000000000000"], "--max-tokens"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--nodes", "1000000000"], "not 1000000000"),
    ],
)
def test_demo_refuses_absurd_counts(tmp_path: Path, args: list[str], named: str) -> None:
    folder = str(valid_model(tmp_path / "m"))
    run = _macmesh(["demo", "--headless", "--model", folder, *args])
    _error_line(run, named)


def test_a_cache_variable_pointing_at_a_file(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    run = _macmesh(["demo", "--headless"], MACMESH_CACHE_DIR=str(file))
    _one_line(run, "MACMESH_CACHE_DIR", "is a file", "unset it")


def test_a_log_variable_pointing_at_a_file(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    folder = str(valid_model(tmp_path / "m"))
    run = _macmesh(["demo", "--headless", "--model", folder], MACMESH_LOG_DIR=str(file))
    _error_line(run, "MACMESH_LOG_DIR", "is a file", "unset it")


@pytest.mark.skipif(not Path("/proc/1").is_dir(), reason="Linux's /proc")
def test_an_unwritable_log_folder(tmp_path: Path) -> None:
    """/proc/1 is a folder nobody can write to, root included (the tests run as root)."""
    folder = str(valid_model(tmp_path / "m"))
    run = _macmesh(["demo", "--headless", "--model", folder], MACMESH_LOG_DIR="/proc/1")
    _error_line(run, "MACMESH_LOG_DIR", "not writable")


def _error_line(run: subprocess.CompletedProcess, *names: str) -> str:
    """After the demo's progress lines (the model, the plan), one error line, exit 2."""
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("macmesh")]
    assert len(errors) == 1 and run.stderr.splitlines()[-1] == errors[0], run.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def test_serve_demo_on_a_malformed_folder_and_model_without_demo(tmp_path: Path) -> None:
    bad = case("weight_map_escapes")
    folder = str(bad.build(tmp_path / "m"))
    env = {"MACMESH_DATA_DIR": str(tmp_path / "data"), "MACMESH_LOG_DIR": str(tmp_path / "l")}
    key = str(tmp_path / "key")
    run = _macmesh(["serve", "--demo", "--model", folder, "--api-key-file", key], **env)
    _one_line(run, bad.file, bad.field)
    run = _macmesh(["serve", folder, "--hosts", "127.0.0.1", "--model", folder], **env)
    assert "--model goes with --demo" in _one_line(run)
