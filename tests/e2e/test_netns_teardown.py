"""The two-network harness leaves nothing behind, even when the test inside it fails:
its namespaces are deleted and every process in them (sshd, a session, a rank) is
killed (issue 18)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers.netns import namespaces_left, two_networks


def test_a_failing_test_still_removes_the_namespaces_and_their_processes(tmp_path: Path) -> None:
    started: list[int] = []
    with pytest.raises(RuntimeError, match="the test failed"), two_networks(tmp_path) as net:
        assert len(namespaces_left()) == 3
        mac = net.macs[0].name
        # A stray process in a Mac's namespace, in its own session, as a rank would be.
        proc = subprocess.Popen(
            net.exec_argv(mac, [sys.executable, "-c", "import time; time.sleep(600)"]),
            start_new_session=True,
        )
        started.append(proc.pid)
        shown = net.run(
            mac, ["ip", "-4", "addr", "show", "bridge0"], capture_output=True, text=True
        )
        assert f"inet {net.macs[0].thunderbolt}/16" in shown.stdout
        raise RuntimeError("the test failed")
    assert namespaces_left() == []
    proc.wait(10)
    assert not psutil.pid_exists(started[0]) or psutil.Process(started[0]).status() == "zombie"
