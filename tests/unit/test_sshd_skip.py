"""A machine without OpenSSH: `make test` skips the SSH tests and says so in one line with
the command that enables them; with MACMESH_REQUIRE_SSHD=1 (CI) they fail instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SSH_TEST = "tests/integration/test_ssh.py"


def _pytest_without_sshd(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MACMESH_TEST_SSHD": str(tmp_path / "no-sshd-here")}
    env.pop("MACMESH_REQUIRE_SSHD", None)
    if require is not None:
        env["MACMESH_REQUIRE_SSHD"] = require
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SSH_TEST]
    command += ["-k", "unknown_host_key_then_accept or changed_host_key"]
    command += ["--basetemp", str(tmp_path / "t")]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_without_sshd_the_ssh_tests_are_skipped_and_the_fix_is_named(tmp_path: Path) -> None:
    run = _pytest_without_sshd(tmp_path, require=None)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    (said,) = [line for line in lines if "SSH tests skipped" in line]
    assert "apt-get install -y openssh-server" in said and "make test" in said
    assert " skipped" in lines[-1] and "failed" not in lines[-1] and "error" not in lines[-1]


def test_ci_never_skips_them(tmp_path: Path) -> None:
    run = _pytest_without_sshd(tmp_path, require="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MACMESH_REQUIRE_SSHD=1" in run.stdout and "openssh-server" in run.stdout
    assert "SSH tests skipped" not in run.stdout
