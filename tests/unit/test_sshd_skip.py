"""A machine without OpenSSH: `make test` skips the SSH tests and says so in one line with
the command that enables them; with MACMESH_REQUIRE_SSHD=1 (CI) they fail instead,
whatever else is missing. The SSH tests need only sshd; the others are taken as present
(tests/helpers/skipruns.py), so this means the same on any machine (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.skipruns import SSH_TESTS, ended_with_skips, pytest_run, summary


def test_without_sshd_the_ssh_tests_are_skipped_and_the_fix_is_named(tmp_path: Path) -> None:
    run = pytest_run(tmp_path, SSH_TESTS, absent=("sshd",), assumed=("netns", "cc"))
    assert ended_with_skips(run), run.stdout + run.stderr
    (said,) = summary(run)
    assert said.startswith("1 SSH tests skipped: no OpenSSH server"), said
    assert "apt-get install -y openssh-server" in said
    last = run.stdout.splitlines()[-2]
    assert "apt-get install -y openssh-server" in last and "make test" in last


@pytest.mark.parametrize("also_absent", [(), ("netns", "cc")])
def test_ci_never_skips_them(tmp_path: Path, also_absent: tuple[str, ...]) -> None:
    assumed = tuple(name for name in ("netns", "cc") if name not in also_absent)
    run = pytest_run(
        tmp_path, SSH_TESTS, absent=("sshd", *also_absent), assumed=assumed, required=("sshd",)
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MACMESH_REQUIRE_SSHD=1" in run.stdout and "openssh-server" in run.stdout
    assert " skipped: " not in run.stdout
