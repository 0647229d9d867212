"""Is macOS's Local Network permission what keeps Bonjour from finding the Macs? (issue 27)

What a Mac shows when the app browsing Bonjour was denied Local Network access
(System Settings > Privacy & Security > Local Network): every multicast send to mDNS
fails with ``EHOSTUNREACH`` ("[Errno 65] No route to host" on macOS) and nothing comes
back, so the browse looks like an empty network (pymobiledevice3 PR #1976; NVIDIA
Personal-AI-Router #3 on macOS 27: "sendto: no route to host"). Commands run over SSH
are not held back by the permission (a ``dns-sd`` subprocess runs with its own, exo
PR #1103), so the nodes' probe outputs look healthy: the evidence is on the Mac running
MacMesh. On macOS 27 the app may be missing from that list (exo #2259), and after a
restart a granted permission can stop working until it is switched off and on (exo #952,
#1035). Pure function: nothing is sent here.
"""

from __future__ import annotations

import errno
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

MACOS_EHOSTUNREACH = 65  # macOS's errno for "No route to host" (Linux: 113)
_BLOCKED = {MACOS_EHOSTUNREACH, errno.EHOSTUNREACH}
FIX = (
    "Fix: on this Mac open System Settings > Privacy & Security > Local Network, switch "
    "MacMesh off and on again, then restart MacMesh."
)

State = Literal["ok", "blocked", "suspect", "unknown"]


@dataclass(frozen=True)
class LocalNetworkVerdict:
    state: State
    reason: str  # one sentence: what was seen, then the fix when there is one

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def local_network_verdict(
    send_errors: Mapping[str, int | None],
    found: Collection[str],
    reached: Collection[str],
) -> LocalNetworkVerdict:
    """``send_errors``: per interface, the errno of this Mac's mDNS send there (None: it
    went out); ``found``: the Macs Bonjour listed; ``reached``: the named Macs that
    answered over SSH. Blocked when every send failed with EHOSTUNREACH; suspect when
    Bonjour found none of the Macs SSH reaches (the permission, or another network)."""
    failed = [name for name, code in send_errors.items() if code in _BLOCKED]
    if send_errors and len(failed) == len(send_errors):
        where = ", ".join(sorted(failed))
        code = send_errors[failed[0]]
        return LocalNetworkVerdict(
            "blocked",
            f"Bonjour cannot send on any interface ({where}: [Errno {code}] No route to host): "
            f"macOS's Local Network permission is denied for MacMesh. {FIX}",
        )
    missing = sorted(set(reached) - set(found))
    if reached and len(missing) == len(set(reached)):
        return LocalNetworkVerdict(
            "suspect",
            f"Bonjour found none of the Macs that answer over SSH ({', '.join(missing)}): "
            "macOS's Local Network permission may be denied for MacMesh, or they are on "
            f"another network. {FIX}",
        )
    if found:
        return LocalNetworkVerdict("ok", f"Bonjour finds {len(set(found))} Mac(s) here.")
    return LocalNetworkVerdict(
        "unknown", "Bonjour found no Mac yet, and no Mac was named to compare with."
    )
