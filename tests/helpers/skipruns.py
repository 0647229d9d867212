"""Run a few tests in a child pytest with chosen prerequisites removed (issue 38).

Every prerequisite is set explicitly: each ``absent`` one is pointed at nothing (its
``MACMESH_TEST_*`` names a program that does not exist), each ``assumed`` one is taken as
present without looking (``MACMESH_TEST_ASSUME``), each in ``required`` has its
``MACMESH_REQUIRE_*=1``, and every other ``MACMESH_REQUIRE_*`` is removed. A
prerequisite in none of these is the machine's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.helpers.prereqs import ASSUME_ENV, PREREQUISITES

ROOT = Path(__file__).resolve().parents[2]

# One quick test of each group, and the group's own name in the summary.
SSH_TESTS = ["tests/integration/test_ssh.py::test_unknown_host_key_then_accept"]
NETNS_TESTS = [
    "tests/e2e/test_ring_two_networks.py::test_show_launch_prints_the_thunderbolt_hostfile"
]
CC_TESTS = ["tests/unit/test_ringwait.py::test_it_is_built_once_and_found_again"]


def nowhere(tmp_path: Path, name: str) -> str:
    """A program path for prerequisite ``name`` that does not exist."""
    return str(tmp_path / "nothing" / f"no-{name}")


def pytest_run(
    tmp_path: Path,
    tests: Sequence[str],
    *,
    absent: Sequence[str],
    assumed: Sequence[str] = (),
    required: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(ASSUME_ENV, None)
    for prerequisite in PREREQUISITES.values():
        env.pop(prerequisite.require_env, None)
        env.pop(prerequisite.program_env, None)
    for name in absent:
        env[PREREQUISITES[name].program_env] = nowhere(tmp_path, name)
    if assumed:
        env[ASSUME_ENV] = ",".join(assumed)
    for name in required:
        env[PREREQUISITES[name].require_env] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    command += ["--basetemp", str(tmp_path / "t")]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)


def summary(run: subprocess.CompletedProcess) -> list[str]:
    """The lines of the run's end that name skipped groups."""
    return [line for line in run.stdout.splitlines() if " skipped: " in line]


def ended_with_skips(run: subprocess.CompletedProcess) -> bool:
    """Exit 0, and the last line counts skips and no failure or error."""
    last = run.stdout.splitlines()[-1] if run.stdout else ""
    return (
        run.returncode == 0 and " skipped" in last and "failed" not in last and "error" not in last
    )
