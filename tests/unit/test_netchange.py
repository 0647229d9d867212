"""Network changes offered, never imposed (issue 18): which, on which Mac, why, with the
undo; shown in preflight as a warning; applied only with the admin password on stdin."""

from __future__ import annotations

import ipaddress

import pytest

from core.cluster.netchange import (
    CABLE_NETWORKS,
    NetworkChange,
    bridge_off_changes,
    cable_address_changes,
)
from core.cluster.ringpath import ring_links
from core.remote.ssh import Result
from core.run.checks.backend_choice import choose_backend
from core.run.checks.netapply import NetworkChangeFailed, apply_change, sudo_line
from tests.fixtures.macos.hosts import load_facts


def test_a_cable_with_only_ipv6_gets_a_slash_30_offered_one_address_per_end() -> None:
    facts = load_facts("tb-off")
    changes = cable_address_changes(ring_links(facts), facts)
    assert [(c.node, c.commands, c.undo) for c in changes] == [
        (
            "studio-p",
            ("ifconfig en2 inet 192.168.200.1 netmask 255.255.255.252 alias",),
            ("ifconfig en2 inet 192.168.200.1 -alias",),
        ),
        (
            "studio-q",
            ("ifconfig en2 inet 192.168.200.2 netmask 255.255.255.252 alias",),
            ("ifconfig en2 inet 192.168.200.2 -alias",),
        ),
    ]
    assert "MLX's ring takes IPv4 only" in changes[0].why
    assert changes[0].shown() == (
        "On studio-p: `sudo ifconfig en2 inet 192.168.200.1 netmask 255.255.255.252 alias` "
        "(undo: `sudo ifconfig en2 inet 192.168.200.1 -alias`; it lasts until the Mac restarts)"
    )


def test_nothing_is_offered_where_the_cable_already_carries_the_ring_or_there_is_none() -> None:
    for fixture_set in ("tb-mixed", "tb-bridge"):
        facts = load_facts(fixture_set)
        assert cable_address_changes(ring_links(facts), facts) == [], fixture_set


def test_a_bridged_end_gets_its_address_on_the_bridge_and_the_range_avoids_the_lans() -> None:
    facts = load_facts("mini-tb4")  # mini-g: bridge on; mini-h: the bridge down, IPv6 only
    g, h = cable_address_changes(ring_links(facts), facts)
    assert g.node == "mini-g" and g.commands[0].startswith("ifconfig bridge0 inet ")
    assert h.node == "mini-h" and h.commands[0].startswith("ifconfig en2 inet ")
    for change in (g, h):
        ip = ipaddress.ip_address(change.commands[0].split()[3])
        assert ip in CABLE_NETWORKS
        assert ip not in ipaddress.ip_network("10.0.0.0/24")  # the LAN the Macs are on


def test_the_bridge_off_is_offered_only_where_it_alone_keeps_rdma_off() -> None:
    (change,) = bridge_off_changes(load_facts("bridge"))
    assert change.node == "studio-j" and change.commands == ("ifconfig bridge0 down",)
    assert change.undo == ("ifconfig bridge0 up",) and "errno 22" in change.why
    assert bridge_off_changes(load_facts("tb-bridge")) == []  # RDMA is impossible anyway
    choice = choose_backend(load_facts("bridge"))
    assert [o.commands for o in choice.offers][-1] == ("ifconfig bridge0 down",)
    assert choice.to_dict()["offers"][-1]["undo"] == ["ifconfig bridge0 up"]


def test_preflight_shows_each_offer_as_a_warning_with_its_undo() -> None:
    from core.run.checks.preflight import evaluate
    from tests.unit.test_preflight import _cluster

    plan, gathered = _cluster("tb-off")
    report = evaluate(plan, gathered)
    offers = [c for c in report.checks if c.name == "network"]
    assert [c.node for c in offers] == ["studio-p", "studio-q"]
    assert all(c.status == "warn" for c in offers) and report.ok
    assert offers[0].message.startswith(
        "A faster path needs a network setting changed on studio-p: it gives the cable"
    )
    assert "undo: `sudo ifconfig en2 inet 192.168.200.1 -alias`" in offers[0].fix
    assert "MacMesh changes nothing unless you ask" in offers[0].fix


class FakeConnection:
    """Records what would run over SSH, answers as sudo would."""

    def __init__(self, result: Result) -> None:
        self.result = result
        self.calls: list[tuple[str, bytes]] = []

    def run(self, command: str, timeout: float = 60.0, stdin: bytes = b"") -> Result:
        self.calls.append((command, stdin))
        return self.result


CHANGE = NetworkChange("studio-p", "why", ("ifconfig en2 inet 1.2.3.4 alias",), ("undo it",))


def test_the_password_goes_to_sudo_on_stdin_once_and_never_on_the_command_line() -> None:
    connection = FakeConnection(Result(0, "", ""))
    apply_change(connection, CHANGE, "s3cret pass")  # type: ignore[arg-type]
    ((command, stdin),) = connection.calls
    assert command == sudo_line(CHANGE.commands)
    assert command == "sudo -S -p '' /bin/sh -c 'ifconfig en2 inet 1.2.3.4 alias'"
    assert stdin == b"s3cret pass\n" and "s3cret" not in command
    apply_change(connection, CHANGE, "s3cret pass", undo=True)  # type: ignore[arg-type]
    assert connection.calls[-1][0] == "sudo -S -p '' /bin/sh -c 'undo it'"


@pytest.mark.parametrize(
    ("stderr", "words"),
    [
        ("Sorry, try again.\nsudo: 1 incorrect password attempt\n", "password was not accepted"),
        ("admin is not in the sudoers file.\n", "this user may not use sudo"),
        ("ifconfig: ioctl (SIOCAIFADDR): File exists\n", "File exists"),
    ],
)
def test_a_refused_change_is_one_sentence_with_what_to_do(stderr: str, words: str) -> None:
    connection = FakeConnection(Result(1, "", stderr))
    with pytest.raises(NetworkChangeFailed) as caught:
        apply_change(connection, CHANGE, "pw")  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith("Could not change the network on studio-p: ")
    assert words in message and "To fix: " in message and "\n" not in message
