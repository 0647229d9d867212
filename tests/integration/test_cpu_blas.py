"""CPU ranks run on a fast BLAS when one is installed, and say so (issue 17).

mlx[cpu] links netlib's reference BLAS (~5 GFLOP/s); the launcher preloads an OpenBLAS
for every CPU rank. A rank that silently runs on the reference one is a bug: these tests
start the worker's own check with the launcher's environment and fail if it does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.run.job import cpu
from core.run.job.launcher import Job, JobSpec
from core.run.measure.telemetry import rank_facts
from core.worker import protocol as p
from core.worker.blas import REFERENCE_GFLOPS, find_openblas

ROOT = Path(__file__).resolve().parents[2]
CHECK = "import json; from core.worker.blas import blas_report; print(json.dumps(blas_report()))"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="MLX runs on Metal on a Mac: no CPU BLAS"
)


def _check(env: dict[str, str]) -> dict:
    env = {**env, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fast_blas() -> dict:
    found = find_openblas()
    if found is None:
        pytest.fail(
            "no fast BLAS: `pip install cmeel-openblas` (a Linux dependency) or libopenblas0"
        )
    return found


def test_the_launchers_environment_puts_a_cpu_rank_on_the_fast_blas(fast_blas: dict) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(cpu.local_cpu_env(2, env))
    report = _check(env)
    assert report["fast"], report
    assert report["path"] == fast_blas["path"]
    # Each of two ranks: its half of the cores no other work holds (at least one).
    assert report["threads"] == int(env["OPENBLAS_NUM_THREADS"])
    assert 1 <= report["threads"] <= max(1, cpu.local_cores() // 2)
    assert report["gflops"] > 3 * REFERENCE_GFLOPS, report


def test_the_check_tells_the_reference_blas(fast_blas: dict) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    report = _check(env)
    assert not report["fast"], report
    assert "reference" in report["name"]


@pytest.mark.slow
def test_demo_ranks_report_the_fast_blas_and_answer_with_float_weights(
    demo_model: Path, fast_blas: dict
) -> None:
    loaded: list[dict] = []
    job = Job(JobSpec(model=demo_model, nodes=2, split=[18, 12]))
    job.event.connect(lambda e: e["event"] == p.LOADED and loaded.append(rank_facts(e)))
    job.start()
    try:
        job.wait_ready(timeout=240)
        done = job.wait_done(job.generate("What is the capital of France?", max_tokens=24), 240)
    finally:
        job.stop()
    assert "Paris" in done["text"], done["text"]  # tied embeddings, dequantized, still right
    assert sorted(r["rank"] for r in loaded) == [0, 1]
    for rank in loaded:
        assert rank["device"] == "cpu"
        assert rank["blas_fast"] and rank["blas_path"] == fast_blas["path"], rank
        assert rank["blas_gflops"] > 3 * REFERENCE_GFLOPS, rank
        assert rank["weights"] == "float32" and rank["dequantized"], rank
        # The tied embedding stays 8-bit for the lookup (its head may get float blocks).
        assert rank["weights_note"].startswith("embed_tokens 8-bit kept quantized"), rank
        # Each float weight shape was timed in each layout; the summary names those
        # stored in another (which depends on this machine's BLAS: core.worker.layout).
        for relaid in rank["weights_layout"]:
            assert re.fullmatch(r"(head )?\d+x\d+ (transposed|rows of (256|512))", relaid), rank
        # Only rank 0 computes logits: only its head can have been re-laid.
        assert rank["rank"] == 0 or not any(x.startswith("head") for x in rank["weights_layout"])
        # Its ring waits sleep where the ring-wait library could be built (CI: gcc).
        assert rank["ring_wait_sleeps"] is ("path" in cpu.local_ring_wait()), rank
