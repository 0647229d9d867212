"""The two-network ring tests need sshd (each simulated Mac runs one) and network
namespaces (root and iproute2). Each test here removes one or both and takes the other
as present (tests/helpers/skipruns.py), so it means the same on any machine: skipped
with every missing prerequisite named, or failed where a missing one's
MACMESH_REQUIRE_* is 1, whatever else is missing (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.skipruns import NETNS_TESTS, ended_with_skips, pytest_run, summary

ALL = ("sshd", "netns", "cc")


def _run(tmp_path: Path, absent: tuple[str, ...], required: tuple[str, ...] = ()):
    assumed = tuple(name for name in ALL if name not in absent)
    return pytest_run(tmp_path, NETNS_TESTS, absent=absent, assumed=assumed, required=required)


def test_without_namespaces_the_tests_are_skipped_with_the_reason(tmp_path: Path) -> None:
    run = _run(tmp_path, absent=("netns",))
    assert ended_with_skips(run), run.stdout + run.stderr
    (said, install) = summary(run), run.stdout.splitlines()[-2]
    assert len(said) == 1 and "network-namespace tests" in said[0], said
    assert "no `no-netns` command" in said[0] and "apt-get install -y iproute2" in said[0]
    assert "OpenSSH" not in said[0]
    assert "apt-get install -y iproute2" in install and "make test" in install


def test_without_sshd_they_are_skipped_as_the_ssh_tests_are(tmp_path: Path) -> None:
    run = _run(tmp_path, absent=("sshd",))
    assert ended_with_skips(run), run.stdout + run.stderr
    (said,) = summary(run)
    assert "network-namespace tests" in said and "no OpenSSH server" in said
    assert "apt-get install -y openssh-server" in said and "iproute2" not in said


def test_without_either_one_line_names_both_and_their_install_commands(tmp_path: Path) -> None:
    run = _run(tmp_path, absent=("sshd", "netns"))
    assert ended_with_skips(run), run.stdout + run.stderr
    (said,) = summary(run)
    assert "no OpenSSH server" in said and "apt-get install -y openssh-server" in said
    assert "no `no-netns` command" in said and "apt-get install -y iproute2" in said
    last = run.stdout.splitlines()[-2]
    assert "openssh-server" in last and "iproute2" in last


@pytest.mark.parametrize(
    ("absent", "required", "named"),
    [
        (("netns",), ("netns",), "MACMESH_REQUIRE_NETNS=1"),
        (("sshd",), ("sshd",), "MACMESH_REQUIRE_SSHD=1"),
        # the case: sshd missing too, and the namespace requirement still fails it
        (("sshd", "netns"), ("netns",), "MACMESH_REQUIRE_NETNS=1"),
        (("sshd", "netns"), ("sshd",), "MACMESH_REQUIRE_SSHD=1"),
    ],
)
def test_ci_never_skips_them(
    tmp_path: Path, absent: tuple[str, ...], required: tuple[str, ...], named: str
) -> None:
    run = _run(tmp_path, absent=absent, required=required)
    assert run.returncode == 1, run.stdout + run.stderr
    assert named in run.stdout and " skipped: " not in run.stdout
    last = run.stdout.splitlines()[-1]  # the namespaces are made by a fixture: an error
    assert "1 failed" in last or "1 error" in last, last
