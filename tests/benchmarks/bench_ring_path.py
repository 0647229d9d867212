"""The ring over the chosen path vs forced over the throttled LAN (issue 18).

Two simulated Macs in network namespaces (``tests/helpers/netns.py``): a LAN throttled
to 200 Mbit/s and an unthrottled veth "Thunderbolt cable" under bridge0. Per path:

- ``raw_tcp_mib_s``: one Python TCP stream, m1 → m2, ``RAW_MIB`` MiB: the link's own rate;
- ``all_sum_mib_s``: a 2-rank MLX ring ``all_sum`` of ``ALL_SUM_MIB`` MiB (ranks started
  in the namespaces with a hostfile on that path's addresses), median of ``ITERS`` (the
  worker's link test figure: bus bandwidth, which for 2 ranks is bytes / time), and its
  share of the raw rate (above 1 where one Python stream is slower than MLX's C++);
  ``all_sum_4_bytes_us``: a 4-byte all_sum, the latency a pipeline pays per token;
- ``tokens_s``: ``macmesh run`` of the model (2-rank pipeline), median generation
  tokens/s over alternating rounds: as MacMesh chooses (the cable) vs forced onto the
  LAN (the cable pulled: preflight falls back).

The choice must never be slower: ``ratio`` > 1 means the chosen path is faster. Run
alone: ``python -m tests.benchmarks.bench_ring_path [MODEL]`` (root, iproute2).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers.netns import TwoNetworks, lan_shaping, netns_missing, two_networks
from tests.helpers.sshd import sshd_missing

RAW_MIB = 32
ALL_SUM_MIB = 16
ITERS = 5

_RECEIVE = """\
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if t0 is None: t0 = time.perf_counter()
    if not b: break
    n += len(b)
print(n / (time.perf_counter() - t0) / (1 << 20), flush=True)
"""
_SEND = """\
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
block = b"x" * (1 << 20)
for _ in range(int(sys.argv[3])): c.sendall(block)
c.close()
"""
_ALL_SUM = """\
import json, time, mlx.core as mx
g = mx.distributed.init(strict=True, backend="ring")
x = mx.ones(({mib} << 20) // 4, dtype=mx.float32)
mx.eval(mx.distributed.all_sum(x))
times = []
for _ in range({iters}):
    t0 = time.perf_counter()
    mx.eval(mx.distributed.all_sum(x))
    times.append(time.perf_counter() - t0)
tiny = mx.ones((1,), dtype=mx.float32)
mx.eval(mx.distributed.all_sum(tiny))
t0 = time.perf_counter()
for _ in range(200):
    mx.eval(mx.distributed.all_sum(tiny))
latency = (time.perf_counter() - t0) / 200
if g.rank() == 0: print(json.dumps({{"times": times, "latency": latency}}), flush=True)
"""


def _raw_tcp(net: TwoNetworks, address: str) -> float:
    receiver = subprocess.Popen(
        net.exec_argv(net.macs[1].name, [sys.executable, "-c", _RECEIVE, address, "47001"]),
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert receiver.stdout is not None
    receiver.stdout.readline()
    net.run(net.macs[0].name, [sys.executable, "-c", _SEND, address, "47001", str(RAW_MIB)],
            check=True, timeout=120)  # fmt: skip
    rate = float(receiver.stdout.readline())
    receiver.wait(10)
    return round(rate, 1)


def _all_sum(net: TwoNetworks, addresses: list[str], root: Path) -> tuple[float, int]:
    """MiB/s of a large all_sum (the worker's link test: bus bandwidth, 2 ranks) and the
    µs of a 4-byte one (latency: what a pipeline's per-token messages pay)."""
    hostfile = root / f"hostfile-{addresses[0]}.json"
    hostfile.write_text(json.dumps([[f"{a}:{47100 + i}"] for i, a in enumerate(addresses)]))
    code = _ALL_SUM.format(mib=ALL_SUM_MIB, iters=ITERS)
    procs = []
    for rank, mac in enumerate(net.macs):
        env = dict(os.environ, MLX_RANK=str(rank), MLX_HOSTFILE=str(hostfile))
        argv = net.exec_argv(mac.name, [sys.executable, "-c", code])
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    out = [p.communicate(timeout=300)[0] for p in procs]
    got = json.loads(out[0].strip().splitlines()[-1])
    return round(ALL_SUM_MIB / statistics.median(got["times"]), 1), round(got["latency"] * 1e6)


def _tokens(net: TwoNetworks, model: Path, root: Path, cut: bool, max_tokens: int) -> dict:
    env = dict(
        os.environ,
        MACMESH_SSH_DIR=str(net.ssh_dir),
        MACMESH_REMOTE_CACHE=str(root / "nodes" / "{host}"),
        MACMESH_CACHE_DIR=str(root / "cache"),
        SSH_AUTH_SOCK="",
    )
    argv = [sys.executable, "-m", "gui.cli", "run", str(model), "--hosts", net.hosts(),
            "--strategy", "pipeline", "--max-tokens", str(max_tokens), "--json"]  # fmt: skip
    net.set_thunderbolt(up=not cut)
    try:
        run = net.run(net.ctl, argv, capture_output=True, text=True, timeout=900, env=env)
    finally:
        net.set_thunderbolt(up=True)
    if run.returncode != 0:
        raise RuntimeError(f"macmesh run failed:\n{run.stderr[-2000:]}")
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    check = next(c["message"] for c in summary["preflight"] if c["name"] == "backend")
    return {"tps": summary["generation_tps"], "backend": check}


def bench_ring_path(model: Path, rounds: int | None = None, max_tokens: int = 24) -> dict:
    missing = sshd_missing() or netns_missing()
    if missing:
        return {"skipped": missing}
    rounds = rounds or int(os.environ.get("MACMESH_BENCH_RING_ROUNDS", "2"))
    with tempfile.TemporaryDirectory(prefix="macmesh-bench-ring-") as tmp:
        root = Path(tmp)
        with two_networks(root / "net") as net:
            paths = {
                "thunderbolt": [mac.thunderbolt for mac in net.macs],
                "lan": [mac.lan for mac in net.macs],
            }
            result: dict = {"lan_shaping": lan_shaping()}
            for name, addresses in paths.items():
                raw = _raw_tcp(net, addresses[1])
                reduced, latency = _all_sum(net, addresses, root)
                result[name] = {
                    "raw_tcp_mib_s": raw,
                    "all_sum_mib_s": reduced,
                    "all_sum_4_bytes_us": latency,
                    "all_sum_share_of_raw": round(reduced / raw, 3),
                }
            _tokens(net, model, root, cut=False, max_tokens=4)  # ships worker and model once
            chosen, forced = [], []
            said = {}
            for round_ in range(rounds):
                for cut in (False, True) if round_ % 2 == 0 else (True, False):
                    got = _tokens(net, model, root, cut, max_tokens)
                    (forced if cut else chosen).append(got["tps"])
                    said["lan" if cut else "chosen"] = got["backend"]
            result["tokens_s"] = {
                "chosen": round(statistics.median(chosen), 2),
                "forced_lan": round(statistics.median(forced), 2),
                "ratio": round(statistics.median(chosen) / statistics.median(forced), 3),
                "chosen_runs": chosen,
                "forced_lan_runs": forced,
                "rounds": rounds,
                "max_tokens": max_tokens,
                "chosen_backend": said["chosen"],
                "lan_backend": said["lan"],
            }
            tb, lan = result["thunderbolt"], result["lan"]
            result["all_sum_ratio"] = round(tb["all_sum_mib_s"] / lan["all_sum_mib_s"], 2)
            result["choice_never_slower"] = (
                result["all_sum_ratio"] >= 1.0 and result["tokens_s"]["ratio"] >= 0.97
            )
            return result


if __name__ == "__main__":
    from core.model.demo_model import ensure_demo_model

    chosen_model = Path(sys.argv[1]) if len(sys.argv) > 1 else ensure_demo_model()
    print(json.dumps(bench_ring_path(chosen_model), indent=2))
