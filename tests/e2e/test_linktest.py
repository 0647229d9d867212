"""`macmesh linktest`: every link of the demo cluster measured through MLX, honestly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.run.job.launcher import Job, JobSpec
from core.worker import protocol as p
from core.worker.linktest import iterations

LOOPBACK_TX = Path("/sys/class/net/lo/statistics/tx_bytes")


@pytest.mark.slow
def test_linktest_on_three_demo_macs_prints_every_link_against_loopback(demo_model: Path) -> None:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    args = ["linktest", "--demo", "--nodes", "3", "--quick", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    nodes = report["nodes"]
    assert len(nodes) == 3 and len(set(nodes)) == 3
    # A ring of three: every rank's link to the next, each named by its Macs.
    assert [link["ranks"] for link in report["links"]] == [[0, 1], [1, 2], [2, 0]]
    for link in report["links"]:
        assert link["nodes"] == [nodes[link["ranks"][0]], nodes[link["ranks"][1]]]
        sizes = [point["bytes"] for point in link["points"]]
        assert sizes == [4096 * 4**k for k in range(8)]
        assert link["latency_us"] > 0 and link["bytes_per_s"] > 0
        assert link["nominal"] == "loopback TCP" and link["nominal_bytes_per_s"] > 0
        assert link["share"] == pytest.approx(
            link["bytes_per_s"] / link["nominal_bytes_per_s"], rel=1e-3
        )
    assert [point["bytes"] for point in report["all_sum"]] == sizes
    assert all(point["bytes_per_s"] > 0 for point in report["all_sum"])


def test_linktest_needs_two_macs(demo_model: Path) -> None:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]))
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "linktest", "--demo", "--nodes", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "macmesh: --nodes: a link needs 2 to 4 simulated Macs"
    ]


@pytest.mark.slow
@pytest.mark.skipif(not LOOPBACK_TX.exists(), reason="reads Linux's loopback counters")
def test_the_link_test_really_moves_the_bytes_it_times(demo_model: Path) -> None:
    """The kernel's count of bytes sent over loopback covers every message the ranks
    say they timed, both ways (the demo's ranks talk over 127.0.0.1 only)."""
    sizes, scale = [4096, 1 << 20], 0.25
    job = Job(JobSpec(model=demo_model, nodes=2, split=[18, 12]))
    job.start()
    try:
        job.wait_ready(timeout=240)
        before = int(LOOPBACK_TX.read_text())
        event = job.wait_done(job.link_test(sizes, scale=scale), timeout=240)
        after = int(LOOPBACK_TX.read_text())
    finally:
        job.stop()
    assert event["event"] == p.LINK_TEST
    [link] = event["links"]
    assert [point["bytes"] for point in link["points"]] == sizes
    # Each size: a warm-up trip and the timed ones, each the message there and back.
    claimed = sum((iterations(n, scale) + 1) * 2 * n for n in sizes)
    assert after - before >= claimed, (after - before, claimed)


@pytest.mark.slow
def test_the_ranks_report_each_step_of_a_link_test(demo_model: Path) -> None:
    """Issue 25 item 10: real ranks tell the controller each pair and size as they go
    (``link_progress``), before the table (``link_test``)."""
    sizes = [4096, 1 << 20]
    job = Job(JobSpec(model=demo_model, nodes=3, split=[10, 10, 10]))
    seen: list[dict] = []
    job.event.connect(
        lambda event: (
            seen.append(event) if event["event"] in (p.LINK_PROGRESS, p.LINK_TEST) else None
        )
    )
    job.start()
    try:
        job.wait_ready(timeout=240)
        request = job.link_test(sizes, scale=0.05)
        job.wait_done(request, timeout=240)
    finally:
        job.stop()
    *steps, table = seen
    assert table["event"] == p.LINK_TEST
    assert all(s["event"] == p.LINK_PROGRESS and s["request"] == request for s in steps)
    assert all(s["rank"] == 0 for s in steps)
    total = len(sizes) * (3 + 1)  # three ring pairs, then all_sum, at each size
    assert [s["done"] for s in steps] == list(range(1, total + 1))
    assert {s["total"] for s in steps} == {total}
    assert [s["bytes"] for s in steps] == [4096] * 3 + [1 << 20] * 3 + [4096, 1 << 20]
    assert [s["pair"] for s in steps[:3]] == [[0, 1], [1, 2], [2, 0]]
    assert steps[-1]["pair"] is None  # all_sum: every Mac at once
    elapsed = [s["elapsed_s"] for s in steps]
    assert elapsed == sorted(elapsed)


@pytest.mark.slow
def test_a_stopped_link_test_ends_at_a_size_and_the_job_stays_ready(demo_model: Path) -> None:
    """The link test's own Stop (issue 25 item 10): every rank agrees at the end of a size,
    rank 0 says "cancelled", and the job answers the next request."""
    job = Job(JobSpec(model=demo_model, nodes=3, split=[10, 10, 10]))
    steps: list[dict] = []
    job.event.connect(
        lambda event: steps.append(event) if event["event"] == p.LINK_PROGRESS else None
    )
    job.start()
    try:
        job.wait_ready(timeout=240)
        request = job.link_test([4096, 1 << 20, 4 << 20, 16 << 20], scale=0.2)
        assert job.cancel(request)  # at once: the first size ends, no other starts
        event = job.wait_done(request, timeout=240)
        assert event["cancelled"] is True and event["links"] == []
        assert {s["bytes"] for s in steps} == {4096}
        answer = job.wait_done(
            job.generate("What is the capital of France?", max_tokens=8), timeout=240
        )
    finally:
        job.stop()
    assert "Paris" in answer["text"]
