"""Model copy throughput against a plain ``scp -r`` of the same files, and resuming.

One loopback sshd (tests/helpers/sshd.py); a generated folder of random weights (~300 MB
by default: random bytes, so nothing compresses). Rounds alternate MacMesh and ``scp``
(and ``rsync`` when installed), each into an empty folder; MacMesh's time includes its
node-side SHA-256 check and the move into place, not the local manifest (built once
before, as preflight does). Then a copy is stopped at about half and resumed: the
re-sent fraction is what the resumed copy sent beyond what was still missing, over what
had arrived. ``bench_copy()`` returns JSON-able figures; run this file to print them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from core.model.manifest import HashCache, build_manifest
from core.remote import modelcheck, modelcopy
from core.remote.targets import Target
from tests.helpers.sshd import SSHServer, running_sshd

ADDRESS = "127.0.0.2"


def _make_model(folder: Path, megabytes: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    files = 3
    for i in range(files):
        with open(folder / f"model-{i + 1:05d}-of-{files:05d}.safetensors", "wb") as out:
            for _ in range(megabytes // files):
                out.write(os.urandom(1 << 20))
    return folder


def _scp(server: SSHServer, known: Path, source: Path, dest: Path) -> None:
    subprocess.run(
        [
            "scp", "-q", "-r", "-F", "/dev/null", "-P", str(server.port),
            "-i", str(server.client_key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
            str(source), f"{server.user}@{ADDRESS}:{dest}",
        ],
        check=True,
    )  # fmt: skip


def _rsync(server: SSHServer, known: Path, source: Path, dest: Path) -> None:
    ssh = (
        f"ssh -F /dev/null -p {server.port} -i {server.client_key} -o IdentitiesOnly=yes "
        f"-o BatchMode=yes -o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes"
    )
    subprocess.run(
        ["rsync", "-a", "-e", ssh, f"{source}/", f"{server.user}@{ADDRESS}:{dest}/"], check=True
    )


def bench_copy(megabytes: int = 300, rounds: int = 5) -> dict:
    work = Path(tempfile.mkdtemp(prefix="macmesh-bench-copy-"))
    try:
        model = _make_model(work / "bench-model", megabytes)
        manifest = build_manifest(model, HashCache(work / "hashes.json"))
        size = manifest.total_bytes
        with running_sshd(work / "sshd", addresses=(ADDRESS,)) as server:
            known = work / "known_hosts"
            known.write_text(server.known_hosts_lines())

            def target(root: Path) -> Target:
                return Target(
                    "bench", ADDRESS, server.port, known_hosts=known,
                    ssh_dir=server.client_dir, cache_root=str(root),
                )  # fmt: skip

            tools = {"scp": _scp}
            if shutil.which("rsync"):
                tools["rsync"] = _rsync
            seconds: dict[str, list[float]] = {"macmesh": [], **{name: [] for name in tools}}
            for round_ in range(rounds):
                order = ["macmesh", *tools] if round_ % 2 == 0 else [*tools, "macmesh"]
                for name in order:
                    dest = work / f"dest-{name}-{round_}"
                    dest.mkdir()
                    started = time.perf_counter()
                    if name == "macmesh":
                        modelcopy.copy_model(target(dest), manifest, model)
                    else:
                        tools[name](server, known, model, dest)
                    seconds[name].append(time.perf_counter() - started)
                    shutil.rmtree(dest)
                    sys.stderr.write(f"  copy {name}: {size / seconds[name][-1] / 1e6:.0f} MB/s\n")
            resume = _resume(target(work / "resume"), manifest, model)
        rates = {name: size / statistics.median(s) / 1e6 for name, s in seconds.items()}
        figures = {
            "bytes": size,
            "rounds": rounds,
            "mb_per_s": {name: round(rate, 1) for name, rate in rates.items()},
            "ratio_to_scp": round(rates["macmesh"] / rates["scp"], 3),
            "rsync": "rsync" in tools or "not installed",
            **resume,
            "targets": {"ratio_to_scp": ">= 0.70", "resent_fraction": "< 0.05"},
        }
        if "rsync" in rates:
            figures["ratio_to_rsync"] = round(rates["macmesh"] / rates["rsync"], 3)
        return figures
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _resume(target: Target, manifest, model: Path) -> dict:
    """Stop at about half, then resume: how much of what had arrived was sent again."""
    cancel = threading.Event()

    def halfway(event: modelcopy.CopyProgress) -> None:
        if event.bytes_done >= event.bytes_total // 2:
            cancel.set()

    with contextlib.suppress(modelcopy.CopyCancelled):
        modelcopy.copy_model(target, manifest, model, progress=halfway, cancel=cancel)
    staging = Path(modelcheck.remote_model_dir(target, manifest) + ".partial")
    arrived = sum(f.stat().st_size for f in staging.rglob("*") if f.is_file())
    result = modelcopy.copy_model(target, manifest, model)
    resent = result.sent_bytes - (manifest.total_bytes - arrived)
    return {
        "resume_arrived_before_bytes": arrived,
        "resume_sent_bytes": result.sent_bytes,
        "resent_fraction": round(max(0, resent) / arrived, 5) if arrived else None,
        "resume_seconds": round(result.seconds, 2),
    }


if __name__ == "__main__":
    print(json.dumps(bench_copy(), indent=2))
