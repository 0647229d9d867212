"""The link test against a raw TCP socket pair on the same loopback address (issue 15):
the 2-rank demo job's link measured through MLX (send/recv ping-pong, 4 KiB to 64 MiB),
then the same ping-pong over a plain socket pair on 127.0.0.1, alternating, 3 rounds;
medians. Large messages: MLX's bytes/s as a share of the socket's (target ≥ 0.90); small
messages: both latencies, reported."""

from __future__ import annotations

import statistics
from pathlib import Path

from core.run.job.launcher import Job, JobSpec
from core.run.measure import links as linktest

ROUNDS = 3


def bench_linktest(model: Path) -> dict:
    job = Job(JobSpec(model=model, nodes=2, split=[18, 12]))
    job.start()
    mlx_large, mlx_small, tcp_large, tcp_small = [], [], [], []
    try:
        job.wait_ready(timeout=300)
        for _ in range(ROUNDS):
            event = job.wait_done(job.link_test(), timeout=600)
            [link] = linktest.link_results(event, ["a", "b"], linktest.Nominal("none", None))
            mlx_large.append(link.bytes_per_s)
            mlx_small.append(link.latency_s)
            points = linktest.tcp_ping_pong("127.0.0.1")
            tcp_large.append(points[-1]["bytes_per_s"])
            tcp_small.append(points[0]["seconds"])
    finally:
        job.stop()
    large = statistics.median(mlx_large) / statistics.median(tcp_large)
    return {
        "rounds": ROUNDS,
        "mlx_64mib_bytes_per_s": round(statistics.median(mlx_large)),
        "tcp_64mib_bytes_per_s": round(statistics.median(tcp_large)),
        "large_ratio": round(large, 3),
        "mlx_4kib_latency_us": round(statistics.median(mlx_small) * 1e6, 1),
        "tcp_4kib_latency_us": round(statistics.median(tcp_small) * 1e6, 1),
        "targets": {"large_ratio": 0.9},
    }
