"""The groups that need something of the machine (SSH, network namespaces, the C
compiler), run with sshd, `ip` and the compiler each absent in turn and all absent
together (their MACMESH_TEST_* pointed at nothing, every MACMESH_REQUIRE_* removed):
each run exits 0, and its last lines name every removed prerequisite with its install
command (issue 38). What is not removed is the machine's own, present or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.skipruns import (
    CC_TESTS,
    NETNS_TESTS,
    SSH_TESTS,
    ended_with_skips,
    pytest_run,
    summary,
)

NAMED = {  # what the summary says of each removed prerequisite, and its install command
    "sshd": ("no OpenSSH server", "apt-get install -y openssh-server openssh-client"),
    "netns": ("no `no-netns` command", "apt-get install -y iproute2"),
    "cc": ("no C compiler", "apt-get install -y gcc"),
}


@pytest.mark.slow
@pytest.mark.parametrize("absent", [("sshd",), ("netns",), ("cc",), ("sshd", "netns", "cc")])
def test_each_missing_prerequisite_is_a_named_skip(tmp_path: Path, absent: tuple[str, ...]) -> None:
    run = pytest_run(tmp_path, [*SSH_TESTS, *NETNS_TESTS, *CC_TESTS], absent=absent)
    assert ended_with_skips(run), run.stdout + run.stderr
    said = summary(run)
    install = run.stdout.splitlines()[-2]
    assert install.startswith("To run them: ") and install.endswith("then `make test`."), install
    for name in absent:
        why, command = NAMED[name]
        assert any(why in line and command in line for line in said), (name, said)
        assert command in install
    if "sshd" in absent:
        assert any(line.startswith("1 SSH tests skipped") for line in said), said
    if "cc" in absent:
        assert any(line.startswith("1 ring-wait library tests") for line in said), said
    if {"sshd", "netns"} & set(absent):
        assert any("network-namespace tests" in line for line in said), said
