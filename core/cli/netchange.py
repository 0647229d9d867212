"""``macmesh run --change-network``: apply the network changes preflight offers, only
because the person asked, each Mac's admin password asked once and used once (issue 18).

Without the flag the changes are only shown (preflight's "network" warnings, with the
undo). With it, per Mac: what will run, the password prompt, the change, and the undo
to keep; a refused password or change is one line and the job goes on as it was.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from core.cluster.netchange import NetworkChange
from core.remote.ssh import SSHError
from core.remote.targets import Target
from core.run.checks.netapply import NetworkChangeFailed, apply_change

AskPassword = Callable[[str], str]


def change_network(
    offers: Sequence[NetworkChange],
    targets: Mapping[str, Target],
    err: TextIO,
    ask: AskPassword | None = None,
) -> list[NetworkChange]:
    """Apply ``offers`` Mac by Mac; the ones made (their undo printed)."""
    ask = ask or getpass.getpass
    by_node: dict[str, list[NetworkChange]] = {}
    for offer in offers:
        by_node.setdefault(offer.node, []).append(offer)
    made: list[NetworkChange] = []
    for node, changes in by_node.items():
        target = targets.get(node)
        if target is None:
            continue
        for change in changes:
            err.write(f"To change on {node}: {change.shown()}.\n")
        password = ask(f"Admin password for {node} (used once, not kept): ")
        try:
            with target.connection() as connection:
                for change in changes:
                    apply_change(connection, change, password)
                    made.append(change)
                    undo = "; ".join(f"sudo {c}" for c in change.undo)
                    err.write(f"Changed on {node}. To undo it: {undo}\n")
        except (NetworkChangeFailed, SSHError) as error:
            err.write(f"macmesh: {error} Nothing else is changed on {node}.\n")
        finally:
            password = ""
    return made
