"""What some test groups need from the machine, one place for all of them (issue 38).

Three prerequisites, each with the variable that points the tests at another program
(the skip tests point it at nothing), the variable CI sets so a missing one fails
instead of skipping, and the command that installs it:

- ``sshd``: OpenSSH's server and client (``MACMESH_TEST_SSHD``, ``MACMESH_REQUIRE_SSHD``);
- ``netns``: network namespaces: root and iproute2 (``MACMESH_TEST_IP``,
  ``MACMESH_REQUIRE_NETNS``);
- ``cc``: a C compiler for the ring-wait library (``MACMESH_TEST_CC``,
  ``MACMESH_REQUIRE_CC``).

``require(group, *names)`` looks at every prerequisite the group needs before it skips:
a ``MACMESH_REQUIRE_*`` of any missing one fails the test whatever else is missing, and a
skip names each missing prerequisite. At the end of the run one line per skipped group
names what was missing and how to install it, then one line with every command.

``MACMESH_TEST_ASSUME`` (comma-separated names) makes a check report a prerequisite as
present without looking: only the skip tests set it, to remove one prerequisite on any
machine while the others are taken as there. Nothing that needs an assumed one runs,
because the group's removed prerequisite skips (or fails) the test first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ASSUME_ENV = "MACMESH_TEST_ASSUME"


@dataclass(frozen=True)
class Missing:
    why: str  # what is missing, e.g. "no OpenSSH server (/usr/sbin/sshd)"
    fix: str  # how to get it, e.g. "`sudo apt-get install -y iproute2`"


@dataclass(frozen=True)
class Prerequisite:
    name: str
    program_env: str  # names the program the tests use; the skip tests point it at nothing
    require_env: str  # "1" (CI): missing fails the tests that need it
    install: str  # the command that installs it on Debian/Ubuntu
    check: Callable[[], Missing | None]

    def missing(self) -> Missing | None:
        if self.name in os.environ.get(ASSUME_ENV, "").split(","):
            return None
        return self.check()

    def required(self) -> bool:
        return os.environ.get(self.require_env) == "1"


SSH_INSTALL = "apt-get install -y openssh-server openssh-client"
IP_INSTALL = "apt-get install -y iproute2"
CC_INSTALL = "apt-get install -y gcc"


def sshd_path() -> Path:
    return Path(os.environ.get("MACMESH_TEST_SSHD", "/usr/sbin/sshd"))


def ip_command() -> str:
    return os.environ.get("MACMESH_TEST_IP", "ip")


def cc_command() -> str | None:
    """The C compiler the tests build with: ``MACMESH_TEST_CC`` where set, else the one
    the app would find (``CC``, cc, gcc, clang)."""
    named = os.environ.get("MACMESH_TEST_CC")
    if named is not None:
        return named
    return next(
        (c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None
    )


def _sshd() -> Missing | None:
    fix = f"`sudo {SSH_INSTALL}`"
    if not sshd_path().is_file():
        return Missing(f"no OpenSSH server ({sshd_path()})", fix)
    for tool in ("ssh-keygen", "ssh"):
        if shutil.which(tool) is None:
            return Missing(f"no OpenSSH client (`{tool}`)", fix)
    return None


def _netns() -> Missing | None:
    fix = f"`sudo {IP_INSTALL}`"
    for tool in (ip_command(), "tc"):
        if shutil.which(tool) is None:
            return Missing(f"no `{os.path.basename(tool)}` command", fix)
    if os.geteuid() != 0:
        return Missing(
            "not root (network namespaces need CAP_NET_ADMIN)", "run `make test` as root"
        )
    name = f"mm-probe-{os.getpid()}"
    made = subprocess.run([ip_command(), "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        said = made.stderr.strip() or f"exit {made.returncode}"
        return Missing(
            f"`ip netns add` failed: {said}", "a machine (or container) with CAP_NET_ADMIN"
        )
    subprocess.run([ip_command(), "netns", "del", name], capture_output=True)
    return None


def _cc() -> Missing | None:
    compiler = cc_command()
    if not compiler or shutil.which(compiler) is None:
        return Missing(f"no C compiler ({compiler or 'cc'})", f"`sudo {CC_INSTALL}`")
    return None


PREREQUISITES = {
    p.name: p
    for p in (
        Prerequisite("sshd", "MACMESH_TEST_SSHD", "MACMESH_REQUIRE_SSHD", SSH_INSTALL, _sshd),
        Prerequisite("netns", "MACMESH_TEST_IP", "MACMESH_REQUIRE_NETNS", IP_INSTALL, _netns),
        Prerequisite("cc", "MACMESH_TEST_CC", "MACMESH_REQUIRE_CC", CC_INSTALL, _cc),
    )
}

GROUPS = {  # what each group of tests is called in the summary
    "ssh": "SSH tests",
    "netns": "network-namespace tests (two-network ring)",
    "cc": "ring-wait library tests (C compiler)",
}

# A skip's reason: "skipped for want of [sshd,netns] (GROUP): WHY -> FIX; WHY -> FIX"
_TAG = re.compile(r"skipped for want of \[([a-z,]+)\] \(([a-z]+)\): (.*)$")


def missing(*names: str) -> dict[str, Missing]:
    """The prerequisites among ``names`` this machine lacks, each with why and the fix."""
    found = {name: PREREQUISITES[name].missing() for name in names}
    return {name: m for name, m in found.items() if m is not None}


def require(group: str, *names: str) -> None:
    """Skip the calling test when any of ``names`` is missing, naming each; fail it when
    any missing one's ``MACMESH_REQUIRE_*`` is 1 (whatever else is missing)."""
    lacking = missing(*names)
    if lacking:
        skip_or_fail(group, lacking)


def skip_or_fail(group: str, lacking: dict[str, Missing]) -> None:
    """Fail where a missing prerequisite's ``MACMESH_REQUIRE_*`` is 1, else skip naming each."""
    demanded = [name for name in lacking if PREREQUISITES[name].required()]
    if demanded:
        said = "; ".join(
            f"{lacking[name].why}, and {PREREQUISITES[name].require_env}=1: {lacking[name].fix}"
            for name in demanded
        )
        pytest.fail(f"the {GROUPS[group]} cannot run: {said}", pytrace=False)
    listed = "; ".join(f"{m.why} -> {m.fix}" for m in lacking.values())
    pytest.skip(f"skipped for want of [{','.join(lacking)}] ({group}): {listed}")


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """After pytest's own summary (the outermost wrapper: these are the last lines before
    the counts), one line per skipped group naming each missing prerequisite and its fix,
    then one line with every install command."""
    try:
        return (yield)
    finally:
        _say_skips(terminalreporter)


def _say_skips(terminalreporter: pytest.TerminalReporter) -> None:
    groups: dict[str, tuple[int, dict[str, str]]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        found = _TAG.search(_reason(report))
        if found is None:
            continue
        group, listed = found.group(2), found.group(3)
        count, said = groups.get(group, (0, {}))
        for part in listed.split("; "):
            why, _, fix = part.partition(" -> ")
            said[why] = fix
        groups[group] = (count + 1, said)
    if not groups:
        return
    installs: list[str] = []
    for group, (count, said) in groups.items():
        listed = "; ".join(f"{why}: {fix}" for why, fix in said.items())
        terminalreporter.write_line(f"{count} {GROUPS.get(group, group)} skipped: {listed}.")
        installs += [fix for fix in said.values() if fix not in installs]
    terminalreporter.write_line(f"To run them: {'; '.join(installs)}; then `make test`.")
