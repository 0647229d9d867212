"""A machine without a C compiler: the ring-wait library tests are skipped, named with
the install command, and failed where MACMESH_REQUIRE_CC=1 (CI), whatever else is
missing. They need only the compiler; the others are taken as present
(tests/helpers/skipruns.py), so this means the same on any machine (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.skipruns import CC_TESTS, ended_with_skips, pytest_run, summary


def test_without_a_compiler_the_ring_wait_tests_are_skipped_and_gcc_named(tmp_path: Path) -> None:
    run = pytest_run(tmp_path, CC_TESTS, absent=("cc",), assumed=("sshd", "netns"))
    assert ended_with_skips(run), run.stdout + run.stderr
    (said,) = summary(run)
    assert said.startswith("1 ring-wait library tests (C compiler) skipped: no C compiler")
    assert "no-cc" in said and "apt-get install -y gcc" in said


@pytest.mark.parametrize("also_absent", [(), ("sshd", "netns")])
def test_ci_never_skips_them(tmp_path: Path, also_absent: tuple[str, ...]) -> None:
    assumed = tuple(name for name in ("sshd", "netns") if name not in also_absent)
    run = pytest_run(
        tmp_path, CC_TESTS, absent=("cc", *also_absent), assumed=assumed, required=("cc",)
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "MACMESH_REQUIRE_CC=1" in run.stdout and "apt-get install -y gcc" in run.stdout
    assert " skipped: " not in run.stdout
