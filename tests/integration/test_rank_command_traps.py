"""A remote rank's shell line removes its folder itself when signalled (not only on a
clean exit): the node's own shell, run here by each shell a node may have."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from core.run.job.remote_ranks import PGID, RankLaunch, rank_command
from tests.helpers.procs import name_of
from tests.helpers.wait import wait_until

SHELLS = [sh for sh in ("sh", "bash", "dash", "zsh") if shutil.which(sh)]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signalled_rank_removes_its_folder_and_reports_the_signal(
    tmp_path: Path, shell: str, sig: signal.Signals, code: int
) -> None:
    job_dir = tmp_path / "jobs" / "tag 1-1-rank0"  # a space: quoting matters
    launch = RankLaunch(0, str(job_dir), {"hostfile.json": "[]"}, {})
    line = rank_command(launch, str(tmp_path), ["sleep", "60"])
    proc = subprocess.Popen([shell, "-c", line], start_new_session=True)
    try:
        # Signalled once the worker runs (a signal between the shell's fork and the
        # worker's exec is caught by the child's copy of the traps and lost: the
        # launcher's KILL after SIGNAL_WITHIN_S covers that instant).
        shell = psutil.Process(proc.pid)
        wait_until(lambda: any(name_of(c) == "sleep" for c in shell.children()), 20, "the worker")
        assert (job_dir / "hostfile.json").read_text() == "[]"
        assert (job_dir / PGID).read_text().strip() == str(proc.pid)
        os.killpg(proc.pid, sig)  # as kill_group does: the shell and the worker
        assert proc.wait(timeout=20) == code
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not job_dir.exists()


def test_a_clean_exit_removes_the_folder_and_keeps_the_status(tmp_path: Path) -> None:
    job_dir = tmp_path / "jobs" / "t-1-rank1"
    line = rank_command(RankLaunch(1, str(job_dir), {}, {}), str(tmp_path), ["sh", "-c", "exit 3"])
    assert subprocess.run(["sh", "-c", line], timeout=20).returncode == 3
    assert not job_dir.exists()
