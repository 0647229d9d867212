"""Apply (or undo) an offered network change on a Mac, only when the person asks
(issue 18).

The change's commands run over SSH under ``sudo -S``: the admin password the person
typed goes to sudo on stdin once, never on a command line, never stored, never logged.
A refused password or a user who may not use sudo comes back as one sentence.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from core.cluster.netchange import NetworkChange
from core.remote.ssh import Connection, SSHError
from core.remote.targets import Target

TIMEOUT_S = 30.0


class NetworkChangeFailed(Exception):
    """The change was not made; the message says why and what to do."""


def sudo_line(commands: tuple[str, ...]) -> str:
    """One shell line: ``sudo -S -p '' /bin/sh -c 'cmd && cmd'`` (no prompt text: the
    password arrives on stdin)."""
    return shlex.join(["sudo", "-S", "-p", "", "/bin/sh", "-c", " && ".join(commands)])


def apply_change(
    connection: Connection, change: NetworkChange, password: str, undo: bool = False
) -> None:
    """Run ``change`` (or its undo) on its Mac with ``password`` for sudo, once."""
    commands = change.undo if undo else change.commands
    what = "undo the change" if undo else "change the network"
    try:
        result = connection.run(
            sudo_line(commands), timeout=TIMEOUT_S, stdin=(password + "\n").encode()
        )
    except SSHError as error:
        raise NetworkChangeFailed(f"Could not {what} on {change.node}: {error}") from error
    if result.rc == 0:
        return
    said = result.stderr.strip()
    if "incorrect password" in said or "Sorry, try again" in said:
        why = "the admin password was not accepted"
        fix = "type the password of an administrator of that Mac"
    elif "not in the sudoers" in said or "may not run sudo" in said:
        why = "this user may not use sudo"
        fix = "connect as an administrator of that Mac, or run the commands there yourself"
    else:
        why = said.splitlines()[-1] if said else f"exit status {result.rc}"
        fix = "run the commands on that Mac yourself: " + change.shown()
    raise NetworkChangeFailed(f"Could not {what} on {change.node}: {why}. To fix: {fix}.")


def apply_changes(target: Target, changes: Sequence[NetworkChange], password: str) -> None:
    """Every change for one Mac over one SSH session, the same password for each (the
    person typed it once); stops at the first that fails."""
    try:
        with target.connection() as connection:
            for change in changes:
                apply_change(connection, change, password)
    except SSHError as error:
        raise NetworkChangeFailed(f"Could not reach {target.name}: {error}") from error
