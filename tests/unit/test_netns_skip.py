"""Where network namespaces (or sshd) cannot be had, `make test` skips the two-network
ring tests and says why in one line; with MACMESH_REQUIRE_NETNS=1 (or
MACMESH_REQUIRE_SSHD=1) in CI they fail instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NETNS_TEST = "tests/e2e/test_ring_two_networks.py"


def _pytest_without_ip(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MACMESH_TEST_IP": str(tmp_path / "no-ip-here")}
    env.pop("MACMESH_REQUIRE_NETNS", None)
    if require is not None:
        env["MACMESH_REQUIRE_NETNS"] = require
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", NETNS_TEST]
    command += ["-k", "show_launch", "--basetemp", str(tmp_path / "t")]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_without_namespaces_the_tests_are_skipped_with_the_reason(tmp_path: Path) -> None:
    run = _pytest_without_ip(tmp_path, require=None)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    (said,) = [line for line in lines if "network-namespace tests skipped" in line]
    assert "iproute2" in said
    assert " skipped" in lines[-1] and "failed" not in lines[-1] and "error" not in lines[-1]


def test_ci_never_skips_them(tmp_path: Path) -> None:
    run = _pytest_without_ip(tmp_path, require="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MACMESH_REQUIRE_NETNS=1" in run.stdout and "no `no-ip-here` command" in run.stdout
    assert "network-namespace tests skipped" not in run.stdout


def _pytest_without_sshd(tmp_path: Path, require: str | None) -> subprocess.CompletedProcess:
    """Issue 26: a root machine with iproute2 and no sshd (a container) errored here."""
    env = {**os.environ, "MACMESH_TEST_SSHD": str(tmp_path / "nonexistent" / "sshd")}
    env.pop("MACMESH_REQUIRE_SSHD", None)
    if require is not None:
        env["MACMESH_REQUIRE_SSHD"] = require
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", NETNS_TEST]
    command += ["--basetemp", str(tmp_path / "t")]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_without_sshd_they_are_skipped_as_the_ssh_tests_are(tmp_path: Path) -> None:
    run = _pytest_without_sshd(tmp_path, require=None)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    (said,) = [line for line in lines if "SSH tests skipped" in line]
    assert "openssh-server" in said
    assert " skipped" in lines[-1] and "failed" not in lines[-1] and "error" not in lines[-1]


def test_ci_never_skips_them_for_want_of_sshd(tmp_path: Path) -> None:
    run = _pytest_without_sshd(tmp_path, require="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MACMESH_REQUIRE_SSHD=1" in run.stdout and "openssh-server" in run.stdout
    assert "SSH tests skipped" not in run.stdout
