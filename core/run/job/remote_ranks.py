"""Ranks on other Macs: MLX's contract per rank as data, and ``RemoteRank`` over SSH.

``cluster_launches`` says, for every rank of a job, which files it needs in its own
folder on its node (the ring hostfile, or the JACCL device matrix) and its
environment (``core.run.job.mlxenv``); ``rank_command`` is the shell line that writes those
files, runs the shipped worker and removes the folder when the worker ends.

``RemoteRank`` is the launcher's ``RankProcess`` for such a rank, over one
``core.remote.ssh.Connection``. How it ends, whatever happens:

- Stop or failure: ``kill_group`` signals the rank's remote process group over a
  second channel, so a rank whose own channel is stuck (a hung collective, a
  stopped process) still dies. When the session itself does not answer within
  ``HEDGE_S`` (a frozen link, a stopped sshd), a fresh connection carries the same
  signal at the same time; either way a signal takes at most ``SIGNAL_WITHIN_S``.
- The SSH session drops (sshd stopped, the Mac slept): sshd closes the rank's
  stdin and the worker exits on its own (it watches stdin); here ``poll()`` reports
  the rank gone at once instead of waiting forever, and ``kill()`` goes over a fresh
  connection, for a rank too hung to read its stdin.

Each rank's folder (``<cache>/jobs/<tag>-<attempt>-rank<N>``) goes with its worker, but
a signal that ends the rank's shell too (stop, a hang, Ctrl-C) leaves it: the launcher
removes the job's folders after the job (``remove_dirs_command``, one round trip per
node), and each start sweeps folders whose process group is gone (``sweep_command``),
for a job whose node could not be reached at its end.
"""

from __future__ import annotations

import contextlib
import queue
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.remote.ssh import Connection, SSHError
from core.run.job import mlxenv
from core.worker.vocab import Backend

HOSTFILE = "hostfile.json"
DEVICES = "devices.json"
SIGNAL_TIMEOUT_S = 3.0  # one attempt to signal a rank's group over SSH (connecting included)
HEDGE_S = 1.0  # the rank's session answers a signal within this, or a fresh one helps
SIGNAL_WITHIN_S = HEDGE_S + SIGNAL_TIMEOUT_S  # a signal, however the link is
REAP_S = 1.0  # after SIGKILL, the wait for the rank's exit status
PGID = "pgid"  # in a rank's folder: the process group that owns it
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
    # A rank ended by a signal the shell can catch (Stop's TERM, a lost session's HUP,
    # Ctrl-C's INT) still removes its folder, right there on the node: the shell waits
    # for the worker (signalled with it), removes the folder and reports the signal as
    # 128+n. Only KILL leaves it, for the controller's clean-up and the next sweep.
    steps = [
        *(
            f"trap {q(f'rm -rf {q(launch.job_dir)}; exit {128 + number}')} {name}"
            for name, number in (("HUP", 1), ("INT", 2), ("TERM", 15))
        ),
        f"umask 077 && mkdir -p {q(launch.job_dir)}",
        # Its process group (this shell's pid: sshd made it a session leader), so a later
        # job's sweep can tell a live job's folder from one left by a killed rank.
        f"echo $$ > {q(launch.job_dir + '/' + PGID)}",
    ]
    for name, text in launch.files.items():
        steps.append(f"printf '%s' {q(text)} > {q(launch.job_dir + '/' + name)}")
    steps.append(f"cd {q(worker_dir)}")
    run = "; ".join(steps[:3]) + "; " + " && ".join([*steps[3:], shlex.join(argv)])
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
        self._session_answers = True  # the session carried the last signal sent
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
        if self.poll() is None:
            self.signal("TERM")

    def kill(self) -> None:
        # A session that did not carry the signal will not carry the exit status either.
        if self.poll() is None and self.signal("KILL") and self._session_answers:
            self._proc.wait(REAP_S)

    def signal(self, sig: str) -> bool:
        """Send ``sig`` to the rank's process group; True once a node confirmed it.

        Over the rank's own session first; when that has not confirmed within
        ``HEDGE_S`` (or failed), over a fresh connection too, in parallel (straight
        away once the session has failed to carry one). Returns within
        ``SIGNAL_WITHIN_S`` whatever the link does; a late attempt ends on its own
        thread, within its own timeouts."""
        results: queue.Queue[tuple[Callable[[], None], bool]] = queue.Queue()

        def attempt(send: Callable[[], None]) -> None:
            try:
                send()
            except Exception:  # any failure: the other attempt may carry it
                results.put((send, False))
            else:
                results.put((send, True))

        def over_session() -> None:
            self._connection.kill_group(self.pid, sig, timeout=SIGNAL_TIMEOUT_S)

        def over_new_session() -> None:
            assert self._reconnect is not None
            with self._reconnect() as connection:
                connection.kill_group(self.pid, sig, timeout=SIGNAL_TIMEOUT_S)

        deadline = time.monotonic() + SIGNAL_WITHIN_S
        attempts = [over_session] + ([over_new_session] if self._reconnect else [])
        running = 0
        hedge_at = time.monotonic() + (HEDGE_S if self._session_answers else 0.0)
        while True:
            now = time.monotonic()
            if attempts and (running == 0 or now >= hedge_at):
                send = attempts.pop(0)
                threading.Thread(
                    target=attempt, args=(send,), name=f"rank{self.rank}-{sig}", daemon=True
                ).start()
                running += 1
                continue
            if running == 0 or now >= deadline:
                self._session_answers = False
                return False
            wait_until = min(deadline, hedge_at) if attempts else deadline
            try:
                send, confirmed = results.get(timeout=max(0.0, wait_until - now))
            except queue.Empty:
                continue
            if confirmed:
                self._session_answers = send is over_session
                return True
            running -= 1

    def close(self) -> None:
        self._proc.close()
        with contextlib.suppress(ValueError):
            self._log.close()
