"""Each ring link's path tried before the job, over the real sshd (issue 18): the
listener binds its candidate addresses with its own Python, the dialer connects; a path
that does not answer is dropped with the reason, and nothing is left running."""

from __future__ import annotations

import socket
from pathlib import Path

from core.cluster.ringpath import Path as RingPath
from core.cluster.ringpath import RingLink
from core.remote.targets import Target
from core.run.checks.ringcheck import check_links
from tests.helpers.remote import sshd_targets, wait_nothing_left
from tests.helpers.sshd import SSHServer

HOSTS = {"127.0.0.2": "mac-a", "127.0.0.3": "mac-b"}


def _targets(sshd: SSHServer, tmp_path: Path) -> dict[str, Target]:
    return {t.name: t for t in sshd_targets(sshd, tmp_path, HOSTS)}


def test_a_path_not_on_the_node_and_a_closed_one_fall_back_to_one_that_answers(
    sshd: SSHServer, tmp_path: Path
) -> None:
    link = RingLink(
        "mac-a",
        "mac-b",
        (
            RingPath("thunderbolt", "169.254.77.1", "bridge0", "bridge0"),  # not this node's
            RingPath("ethernet", "127.0.0.3", "en0", "en0"),
            RingPath("address", "127.0.0.3"),
        ),
    )
    errors: list[str] = []
    [checked] = check_links([link], _targets(sshd, tmp_path), lambda _, why: errors.append(why))
    assert errors == []
    assert checked.chosen == RingPath("ethernet", "127.0.0.3", "en0", "en0")
    assert checked.reason.startswith(
        "ring over Ethernet (en0): Thunderbolt (bridge0) 169.254.77.1 did not answer from "
        "mac-a (mac-b cannot listen there: "
    )
    assert wait_nothing_left(sshd) == []


def test_the_first_path_that_answers_is_kept_and_the_last_is_never_dropped(
    sshd: SSHServer, tmp_path: Path
) -> None:
    targets = _targets(sshd, tmp_path)
    answering = RingLink(
        "mac-b",
        "mac-a",
        (RingPath("thunderbolt", "127.0.0.2", "bridge0"), RingPath("address", "x")),
    )
    lonely = RingLink("mac-b", "mac-a", (RingPath("address", "192.0.2.7"),))
    first, second = check_links([answering, lonely], targets)
    assert first == answering and first.failed == ()
    assert second == lonely  # nothing to fall back to: left for the job to try


def test_a_node_that_cannot_be_reached_leaves_the_link_unchecked_and_says_why(
    sshd: SSHServer, tmp_path: Path
) -> None:
    targets = _targets(sshd, tmp_path)
    with socket.socket() as bound:  # bound, never listening: SSH connections are refused
        bound.bind(("127.0.0.1", 0))
        gone = Target("mac-c", "127.0.0.1", bound.getsockname()[1], timeout=3)
        link = RingLink(
            "mac-a", "mac-c", (RingPath("ethernet", "127.0.0.1", "en0"), RingPath("address", "y"))
        )
        errors: list[str] = []
        [checked] = check_links([link], {**targets, "mac-c": gone}, lambda _, w: errors.append(w))
    assert checked == link and len(errors) == 1 and "127.0.0.1" in errors[0]
