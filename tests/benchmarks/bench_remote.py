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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core import mlxenv
from core.launcher import Job, JobSpec
from core.worker import protocol as p
from core.worker_ship import SOURCE_ROOT
from tests.helpers.remote import loopback_targets, wait_nothing_left
from tests.helpers.sshd import SSHServer, running_sshd

PROMPT = "Write a short story about a lighthouse keeper."
HOSTS = ("127.0.0.2", "127.0.0.3")


def _macmesh_run(model: Path, targets, max_tokens: int) -> dict:
    first_token: list[float] = []
    started = time.monotonic()
    job = Job(JobSpec(model=model, strategy="pipeline", targets=targets))
    job.event.connect(
        lambda e: e["event"] == p.TOKEN and not first_token and first_token.append(time.monotonic())
    )
    job.start()
    try:
        job.wait_ready(timeout=300)
        done = job.wait_done(job.generate(PROMPT, max_tokens=max_tokens), timeout=600)
    finally:
        job.stop()
    return {
        "generation_tps": done["generation_tps"],
        "start_to_first_token_s": (first_token[0] if first_token else time.monotonic()) - started,
    }


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
    launcher = shutil.which("mlx.launch", path=str(Path(sys.executable).parent))
    if launcher is None:
        raise RuntimeError("mlx.launch is not installed next to this Python")
    port = mlxenv.free_ports(1, HOSTS[0])[0]
    argv = [
        launcher, "--hostfile", str(hostfile), "--starting-port", str(port),
        "--cwd", str(SOURCE_ROOT), "--",
        sys.executable, "-m", "core.worker", "--model", str(model), "--strategy", "pipeline",
        "--backend", "ring", "--prompt", PROMPT, "--max-tokens", str(max_tokens),
    ]  # fmt: skip
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        text=True, env=env,
    )  # fmt: skip
    first_token = None
    done = None
    for line in proc.stdout:
        event = p.parse_event(line)  # both ranks' output, interleaved: keep rank 0's
        if event is None or event["rank"] != 0:
            continue
        if event["event"] == p.TOKEN and first_token is None:
            first_token = time.monotonic()
        elif event["event"] == p.DONE:
            done = event
    proc.wait(timeout=60)
    if done is None:
        raise RuntimeError("the mlx.launch run produced no answer")
    return {
        "generation_tps": done["generation_tps"],
        "start_to_first_token_s": (first_token or time.monotonic()) - started,
    }


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
            _macmesh_run(model, targets, 2)  # ships the worker once, as any first job does
            for round_ in range(rounds):
                # Alternate which goes first, so neither gains from a warmer machine.
                order = ("theirs", "ours") if round_ % 2 == 0 else ("ours", "theirs")
                for side in order:
                    if side == "ours":
                        ours.append(_macmesh_run(model, targets, max_tokens))
                    else:
                        theirs.append(_mlx_launch_run(model, bin_dir, hostfile_path, max_tokens))
                    wait_nothing_left(server)
            left = len(wait_nothing_left(server))
    tps_ours = statistics.median(r["generation_tps"] for r in ours)
    tps_theirs = statistics.median(r["generation_tps"] for r in theirs)
    ttft_ours = statistics.median(r["start_to_first_token_s"] for r in ours)
    ttft_theirs = statistics.median(r["start_to_first_token_s"] for r in theirs)
    return {
        "rounds": rounds,
        "max_tokens": max_tokens,
        "hosts": list(HOSTS),
        "macmesh_generation_tps": round(tps_ours, 3),
        "mlx_launch_generation_tps": round(tps_theirs, 3),
        "generation_tps_ratio": round(tps_ours / tps_theirs, 3),
        "macmesh_start_to_first_token_s": round(ttft_ours, 3),
        "mlx_launch_start_to_first_token_s": round(ttft_theirs, 3),
        "start_to_first_token_delta_s": round(ttft_ours - ttft_theirs, 3),
        "session_processes_left": left,
        "targets": {"generation_tps_ratio": ">= 0.97", "start_to_first_token_delta_s": "<= 1.0"},
    }
