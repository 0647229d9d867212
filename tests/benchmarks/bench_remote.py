"""Remote launch overhead: a 2-host ring job over SSH through MacMesh against the same
worker started by hand with ``mlx.launch --hostfile``, on the same loopback hosts
(127.0.0.2, 127.0.0.3 behind one real sshd), alternating, medians reported.

mlx.launch runs ``ssh -tt HOST ...`` with the system client and passes the hostfile's
``ssh`` name through ``shlex.quote``, so options cannot ride in it: a wrapper named
``ssh`` first on its PATH adds ``-F <config>``, and the config names the two hosts
(port, key, known_hosts of the test sshd). MacMesh's side ships its worker to each
node's cache folder (the shipping counts in its start-to-first-token); mlx.launch's
runs the same worker sources from this checkout (``--cwd``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from core.remote.ship import SOURCE_ROOT
from core.run.job import mlxenv
from core.run.job.launcher import JobSpec
from tests.benchmarks.launch_compare import compare, macmesh_run, mlx_launch_run
from tests.helpers.remote import loopback_targets, wait_nothing_left
from tests.helpers.sshd import SSHServer, running_sshd

HOSTS = ("127.0.0.2", "127.0.0.3")


def _ssh_setup(server: SSHServer, root: Path) -> tuple[Path, dict]:
    """An ``ssh`` wrapper dir for PATH, and the mlx.launch hostfile for the two hosts."""
    known_hosts = root / "known_hosts"
    known_hosts.write_text(server.known_hosts_lines())
    config = root / "ssh_config"
    lines = []
    for i, address in enumerate(HOSTS):
        lines += [f"Host node{i}", f"  HostName {address}"]
    lines += [
        "Host *", f"  Port {server.port}", f"  User {server.user}",
        f"  IdentityFile {server.client_key}", "  IdentitiesOnly yes", "  BatchMode yes",
        f"  UserKnownHostsFile {known_hosts}", "  StrictHostKeyChecking yes",
    ]  # fmt: skip
    config.write_text("\n".join(lines) + "\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    hostfile = {
        "backend": "ring",
        "envs": [],
        "hosts": [{"ssh": f"node{i}", "ips": [a]} for i, a in enumerate(HOSTS)],
    }
    return bin_dir, hostfile


def _mlx_launch_run(model: Path, bin_dir: Path, hostfile: Path, max_tokens: int) -> dict:
    port = mlxenv.free_ports(1, HOSTS[0])[0]
    launch_args = [
        "--hostfile", str(hostfile), "--starting-port", str(port), "--cwd", str(SOURCE_ROOT),
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return mlx_launch_run(launch_args, model, max_tokens, env)


def bench_remote(model: Path, rounds: int | None = None, max_tokens: int = 32) -> dict:
    rounds = rounds or int(os.environ.get("MACMESH_BENCH_REMOTE_ROUNDS", "3"))
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="macmesh-bench-remote-") as tmp:
        root = Path(tmp)
        with running_sshd(root / "sshd", addresses=HOSTS) as server:
            targets = loopback_targets(server, root / "macmesh", len(HOSTS))
            bin_dir, hostfile = _ssh_setup(server, root)
            hostfile_path = root / "hostfile.json"
            hostfile_path.write_text(json.dumps(hostfile))
            spec = JobSpec(model=model, strategy="pipeline", targets=targets)
            macmesh_run(spec, 2)  # ships the worker once, as any first job does
            for round_ in range(rounds):
                # Alternate which goes first, so neither gains from a warmer machine.
                order = ("theirs", "ours") if round_ % 2 == 0 else ("ours", "theirs")
                for side in order:
                    if side == "ours":
                        ours.append(macmesh_run(spec, max_tokens))
                    else:
                        theirs.append(_mlx_launch_run(model, bin_dir, hostfile_path, max_tokens))
                    wait_nothing_left(server)
            left = len(wait_nothing_left(server))
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        "hosts": list(HOSTS),
        **compare(ours, theirs),
        "session_processes_left": left,
        "targets": {"generation_tps_ratio": ">= 0.97", "start_to_first_token_delta_s": "<= 1.0"},
    }


def bench_timeouts(runs: int = 5) -> dict:
    """How soon MacMesh's SSH gives up: ``connect`` to a server that never answers (1 s
    timeout) and ``run`` of a command past its 0.5 s timeout, ended with its group. The
    integration tests check that both give up; these figures say how soon (budget: the
    timeout plus 1.5 s for the connect, plus 4.5 s for the command)."""
    import logging
    import socket
    import statistics
    import time

    from core.remote import ssh

    # paramiko's transport thread logs the mute server's EOF at exit: not a finding here.
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    connect, command = [], []
    with tempfile.TemporaryDirectory(prefix="macmesh-bench-timeouts-") as tmp:
        root = Path(tmp)
        with socket.socket() as mute:
            mute.bind(("127.0.0.1", 0))
            mute.listen(runs)
            for _ in range(runs):
                conn = ssh.Connection("127.0.0.1", mute.getsockname()[1], timeout=1.0,
                                      known_hosts=root / "kh", use_agent=False)  # fmt: skip
                started = time.perf_counter()
                try:
                    conn.connect()
                except ssh.SSHTimeout:
                    connect.append(time.perf_counter() - started)
                conn.close()
        with running_sshd(root / "sshd", addresses=HOSTS[:1]) as server:
            known_hosts = root / "known_hosts"
            known_hosts.write_text(server.known_hosts_lines())
            with ssh.Connection(HOSTS[0], server.port, known_hosts=known_hosts,
                                ssh_dir=server.client_dir, use_agent=False) as conn:  # fmt: skip
                for _ in range(runs):
                    started = time.perf_counter()
                    try:
                        conn.run("sleep 600 & sleep 601", timeout=0.5)
                    except ssh.CommandTimeout:
                        command.append(time.perf_counter() - started)
            left = wait_nothing_left(server)

    def figure(times: list[float], budget: float) -> dict:
        median = statistics.median(times) if times else float("inf")
        return {
            "median_s": round(median, 3),
            "max_s": round(max(times, default=float("inf")), 3),
            "timed_out": f"{len(times)}/{runs}",
            "budget_s": budget,
            "within_budget": len(times) == runs and median < budget,
        }

    return {
        "connect_silent_1s": figure(connect, 2.5),
        "command_past_0_5s": figure(command, 5.0),
        "processes_left": len(left),
    }
