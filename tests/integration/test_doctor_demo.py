"""``macmesh doctor --demo``: the demo cluster's simulated Macs checked, as the window's
Check my Macs checks them on the demo (issue 35: no dead end for a presenter)."""

from __future__ import annotations

import json
import subprocess
import sys


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gui.cli", "doctor", "--demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_doctor_demo_exits_0_naming_the_simulated_macs() -> None:
    done = _doctor("--nodes", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("The demo cluster: 3 simulated Macs (Studio A, Studio B, Studio C)")
    assert "Every node can run a job (Studio A, Studio B, Studio C)." in done.stdout
    assert "Traceback" not in done.stderr
    as_json = _doctor("--nodes", "2", "--json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert report["demo"] is True and report["ok"] is True
    assert report["nodes"] == report["ready"] == ["Studio A", "Studio B"]


def test_doctor_demo_refuses_what_is_for_real_macs_in_one_line() -> None:
    for args, said in (
        (("--nodes", "9"), "--nodes: the demo cluster has 1 to 4 Macs, not 9"),
        (("--host", "studio.local"), "--demo checks the simulated Macs"),
    ):
        done = _doctor(*args)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def test_doctor_demo_without_rdma_points_at_no_offer_it_does_not_make() -> None:
    """The demo without RDMA: each cable's port has no IPv4, and its fix says how to get
    one on a Mac; the demo offers no network change (its Macs do not exist), so no fix
    points at an offer "below"."""
    done = _doctor("--nodes", "2", "--no-rdma")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "has no IPv4 address" in done.stdout
    assert "Configure IPv4: Using DHCP (a self-assigned 169.254 address follows)." in done.stdout
    assert "offers below" not in done.stdout and "A faster path needs" not in done.stdout
