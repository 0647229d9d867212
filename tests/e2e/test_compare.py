"""`macmesh compare --demo`: one simulated Mac, then the cluster, each really run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_compare_on_two_demo_macs_runs_one_rank_then_two_and_gives_the_ratio(
    demo_model: Path,
) -> None:
    env = dict(os.environ, MACMESH_CACHE_DIR=str(demo_model.parents[1]), HF_HUB_OFFLINE="1")
    args = ["compare", "--demo", "--nodes", "2", "--max-tokens", "12", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", *args],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    single, cluster = result["single"], result["cluster"]
    # Honest: the single run loaded one rank on one Mac, the cluster two ranks on two.
    assert single["ranks"] == 1 and len(single["nodes"]) == 1 and single["strategy"] == "single"
    assert cluster["ranks"] == 2 and len(set(cluster["nodes"])) == 2
    assert cluster["strategy"] == "pipeline" == result["strategy"]
    assert list(single["memory_bytes"]) == single["nodes"]
    assert sorted(cluster["memory_bytes"]) == sorted(cluster["nodes"])
    # The same question, greedy decoding: the same answer both times.
    assert "Paris" in single["text"] and single["text"] == cluster["text"]
    for figures in (single, cluster):
        assert figures["generation_tps"] > 0 and figures["prompt_tps"] > 0
    assert 0 < single["generation_tokens"] == cluster["generation_tokens"] <= 12
    assert result["ratio"] == pytest.approx(
        cluster["generation_tps"] / single["generation_tps"], abs=1e-3
    )
    assert result["headline"].endswith("on 2 Macs") or "on 2 Macs:" in result["headline"]
    # The demo says its Macs are simulated, and estimates the real Macs they name.
    assert result["simulated"] is True
    for run_label in ("one Mac", "cluster"):
        estimate = result["estimate"][run_label]
        assert estimate["label"] == "estimate" and estimate["tokens_per_s"] > 0
        assert estimate["nodes"][0]["chip"] in ("M3 Ultra", "M4 Max")
    # What the window shows large: the estimate first, the simulated Macs' measure second.
    assert result["lead"].startswith("Estimate for the real Macs: ")
    assert result["measured"].startswith("Measured on simulated Macs: ")
    assert "On one Mac (" in run.stderr and "On the cluster (" in run.stderr
    kept = subprocess.run(
        [sys.executable, "-m", "gui.cli", "history", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    [record] = json.loads(kept.stdout)["runs"]
    assert record["kind"] == "compare" and record["figures"]["ratio"] == result["ratio"]
    # `macmesh history` leads with the line the window leads with: the estimate.
    listed = subprocess.run(
        [sys.executable, "-m", "gui.cli", "history"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert listed.stdout.strip().endswith(result["lead"]), listed.stdout


def test_compare_needs_a_model_or_the_demo() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "compare", "--hosts", "a,b"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.strip() == "macmesh: name the model folder to compare (or use --demo)"
