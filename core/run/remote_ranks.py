"""Ranks on other Macs: MLX's contract per rank as data, and ``RemoteRank`` over SSH.

``cluster_launches`` says, for every rank of a job, which files it needs in its own
folder on its node (the ring hostfile, or the JACCL device matrix) and its
environment (``core.run.mlxenv``); ``rank_command`` is the shell line that writes those
files, runs the shipped worker and removes the folder when the worker ends.

``RemoteRank`` is the launcher's ``RankProcess`` for such a rank, over one
``core.remote.ssh.Connection``. How it ends, whatever happens:

- Stop or failure: ``kill_group`` signals the rank's remote process group over a
  second channel, so a rank whose own channel is stuck (a hung collective, a
  stopped process) still dies.
- The SSH session drops (sshd stopped, the Mac slept): sshd closes the rank's
  stdin and the worker exits on its own (it watches stdin); here ``poll()`` reports
  the rank gone at once instead of waiting forever, and ``kill()`` tries once more
  over a fresh connection, for a rank too hung to read its stdin.

Each rank's folder (``<cache>/jobs/<tag>-<attempt>-rank<N>``) goes with its worker, but
a signal that ends the rank's shell too (stop, a hang, Ctrl-C) leaves it: the launcher
removes the job's folders after the job (``remove_dirs_command``, one round trip per
node), and each start sweeps folders whose process group is gone (``sweep_command``),
for a job whose node could not be reached at its end.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.remote.ssh import Connection, SSHError
from core.run import mlxenv
from core.worker.vocab import Backend

HOSTFILE = "hostfile.json"
DEVICES = "devices.json"
PGID = "pgid"  # in a rank's folder: the process group that owns it
KILL_WAIT_S = 5.0
CLEAN_TIMEOUT_S = 5.0
# A folder without its pgid file is being made right now (or is an older MacMesh's):
# swept only when older than this many minutes.
UNOWNED_MINUTES = 2


@dataclass(frozen=True)
class RankLaunch:
    """One rank's launch on its node: files for its folder (name → text) and the
    environment it runs with (MLX's variables only: the node keeps its own)."""

    rank: int
    job_dir: str
    files: dict[str, str]
    env: dict[str, str]


def cluster_launches(
    backend: Backend | str,
    addresses: Sequence[str],
    ports: Sequence[int],
    job_dirs: Sequence[str],
    devices: list[list[str | list[str] | None]] | None = None,
    extra: dict[str, str] | None = None,
) -> list[RankLaunch]:
    """Every rank's files and environment.

    ring: a hostfile of ``addresses[i]:ports[i]`` (the address rank i listens on; its
    neighbours connect there). jaccl / jaccl-ring: the device matrix, and rank 0's
    ``addresses[0]:ports[0]`` as the coordinator (a network every node reaches: the
    LAN is fine); only ``ports[0]`` is used. ``job_dirs[i]``: rank i's folder on its node.
    """
    size = len(addresses)
    if not (len(ports) == len(job_dirs) == size):
        raise ValueError("one address, port and folder per rank")
    files: dict[str, str] = {}
    coordinator = None
    backend = Backend(backend)
    if backend is Backend.RING:
        files[HOSTFILE] = mlxenv.ring_hostfile(list(zip(addresses, ports, strict=True)))
    elif backend.is_jaccl:
        if devices is None or len(devices) != size:
            raise ValueError("jaccl needs the device matrix, one row per rank")
        files[DEVICES] = mlxenv.jaccl_devices_file(devices)
        coordinator = f"{addresses[0]}:{ports[0]}"
    launches = []
    for rank, job_dir in enumerate(job_dirs):
        env = mlxenv.rank_env(
            rank,
            backend if size > 1 else Backend.SINGLE,
            f"{job_dir}/{HOSTFILE}" if HOSTFILE in files else None,
            base={},
            extra=extra,
            devices=f"{job_dir}/{DEVICES}" if DEVICES in files else None,
            coordinator=coordinator,
        )
        launches.append(RankLaunch(rank, job_dir, dict(files), env))
    return launches


def rank_command(launch: RankLaunch, worker_dir: str, argv: Sequence[str]) -> str:
    """The shell line a remote rank runs: write its files, run ``argv`` (the worker) from
    ``worker_dir``, then remove its folder and exit with the worker's status (not
    ``exec``: the shell outlives the worker to report a signal as 128+n, which ssh
    would otherwise lose, and to clean up)."""
    q = shlex.quote
    steps = [
        f"umask 077 && mkdir -p {q(launch.job_dir)}",
        # Its process group (this shell's pid: sshd made it a session leader), so a later
        # job's sweep can tell a live job's folder from one left by a killed rank.
        f"echo $$ > {q(launch.job_dir + '/' + PGID)}",
    ]
    for name, text in launch.files.items():
        steps.append(f"printf '%s' {q(text)} > {q(launch.job_dir + '/' + name)}")
    steps.append(f"cd {q(worker_dir)}")
    run = " && ".join([*steps, shlex.join(argv)])
    return f"{run}; code=$?; rm -rf {q(launch.job_dir)}; exit $code"


def remove_dirs_command(job_dirs: Sequence[str]) -> str:
    """The shell line removing exactly ``job_dirs`` (a job's folders on one node)."""
    return shlex.join(["rm", "-rf", "--", *job_dirs])


def sweep_command(jobs_dir: str) -> str:
    """The shell line removing the rank folders in ``jobs_dir`` left by earlier jobs: those
    whose process group is gone (a live job's folder is never touched), and those without
    a pgid file once older than ``UNOWNED_MINUTES``."""
    return (
        f"cd {shlex.quote(jobs_dir)} 2>/dev/null || exit 0; "
        "for d in ./*-rank*; do "
        '[ -d "$d" ] || continue; '
        f'if [ -f "$d/{PGID}" ]; then '
        f'p=$(cat "$d/{PGID}"); '
        'case "$p" in ""|*[!0-9]*) ;; *) kill -0 -"$p" 2>/dev/null && continue ;; esac; '
        f'elif [ -z "$(find "$d" -prune -mmin +{UNOWNED_MINUTES})" ]; then continue; '
        "fi; "
        'rm -rf -- "$d"; '
        "done; true"
    )


def clean_job_dirs(connection: Connection, job_dirs: Sequence[str]) -> None:
    """Remove a finished job's folders on one node; a node that cannot be reached keeps
    them until the next start's sweep."""
    if job_dirs:
        with contextlib.suppress(SSHError):
            connection.run(remove_dirs_command(job_dirs), timeout=CLEAN_TIMEOUT_S)


def sweep_stale_jobs(connection: Connection, cache_root: str) -> None:
    """Before a job: remove what killed ranks of earlier jobs left on this node."""
    with contextlib.suppress(SSHError):
        connection.run(sweep_command(f"{cache_root}/jobs"), timeout=CLEAN_TIMEOUT_S)


class RemoteRank:
    """A rank running on a node over SSH (see the module docstring for how it ends).

    ``pid`` is the remote process group (the rank's shell and its worker).
    ``exit_reason`` says how it ended when its exit status cannot (a lost session)."""

    def __init__(
        self,
        rank: int,
        connection: Connection,
        command: str,
        env: dict[str, str],
        log_path: Path,
        reconnect: Callable[[], Connection] | None = None,
    ) -> None:
        self.rank = rank
        self.host = connection.host
        self.exit_reason: str | None = None
        self._connection = connection
        self._reconnect = reconnect
        self._proc = connection.start(command, env=env)
        self.pid = self._proc.pgid
        self._log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def send(self, line: str) -> None:
        self._proc.send(line)

    def stdout_lines(self) -> Iterator[str]:
        yield from self._proc.stdout_lines()

    def stderr_lines(self) -> Iterator[str]:
        for line in self._proc.stderr_lines():
            with contextlib.suppress(ValueError):
                self._log.write(line if line.endswith("\n") else line + "\n")
            yield line

    def poll(self) -> int | None:
        """As ``Popen.poll``: -n when killed by signal n. paramiko reports -1 for both a
        lost session and a signal it does not pass on; the session tells them apart."""
        code = self._proc.poll()
        if code is None:
            return None
        if code == -1:
            if not self._connection.is_connected:
                self.exit_reason = f"lost its SSH connection to {self.host}"
                return 255
            return -1
        if 128 < code <= 128 + 64:  # the shell's report of a signal
            return -(code - 128)
        return code

    def terminate(self) -> None:
        with contextlib.suppress(SSHError):
            self._connection.kill_group(self.pid, "TERM")

    def kill(self) -> None:
        try:
            self._connection.kill_group(self.pid, "KILL")
        except SSHError:
            self._kill_over_new_session()
        self._proc.wait(KILL_WAIT_S)

    def close(self) -> None:
        self._proc.close()
        with contextlib.suppress(ValueError):
            self._log.close()

    def _kill_over_new_session(self) -> None:
        """The session is gone: a rank too hung to see its stdin close is killed over a
        new one, when the node still answers."""
        if self._reconnect is None:
            return
        with contextlib.suppress(SSHError, OSError), self._reconnect() as connection:
            connection.kill_group(self.pid, "KILL")
