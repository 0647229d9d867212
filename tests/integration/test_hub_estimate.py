"""Issue 32's Done-when through the real `macmesh plan` and huggingface_hub against the
fake Hub on 127.0.0.1: header-only copies of real mixture-of-experts models (MLX's names,
shapes and dtypes; no weight byte served), planned and estimated as a person would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.fake_hub import FakeHub
from tests.helpers.header_models import qwen3_moe_config, qwen3_moe_tensors
from tests.helpers.hub_env import ROOT, hub, hub_subprocess_env

__all__ = ["hub"]  # the fixture

MACMESH = [sys.executable, "-m", "gui.cli"]
SMALL = "mlx-community/Qwen3-30B-A3B-4bit"
BIG = "mlx-community/Qwen3-235B-A22B-4bit"


def _plan(hub: FakeHub, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MACMESH, "plan", *args],
        cwd=ROOT,
        env=hub_subprocess_env(hub, tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_qwen3_30b_a3b_on_one_m3_max_from_the_hubs_headers(hub: FakeHub, tmp_path: Path):
    config = qwen3_moe_config()
    hub.add_virtual_model(SMALL, config, qwen3_moe_tensors(config), files=4)
    result = _plan(hub, tmp_path, f"hf:{SMALL}", "--node", "mac:64@M3-Max", "--json")
    assert result.returncode == 0, result.stderr
    estimate = json.loads(result.stdout)["estimate"]
    assert 50 <= estimate["tokens_per_s"] <= 85, estimate["tokens_per_s"]
    low, high = estimate["tokens_per_s_band"]
    assert low < estimate["tokens_per_s"] < high
    assert estimate["aggregate_tokens_per_s"] >= estimate["tokens_per_s"]
    assert estimate["batch"] >= 1
    assert hub.weight_bytes_served() == 0
    # The header-only copy the app keeps of it is a folder `macmesh plan` takes as well,
    # with the same figure and a note that the weights are absent.
    (copy,) = (tmp_path / "macmesh-cache" / "hub-headers").glob("*/*/config.json")
    again = _plan(hub, tmp_path, str(copy.parent), "--node", "mac:64@M3-Max", "--json")
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert data["estimate"]["tokens_per_s"] == estimate["tokens_per_s"]
    assert data["weights_absent"] is True and data["model"] == SMALL  # not the commit's hash
    text = _plan(hub, tmp_path, str(copy.parent), "--node", "mac:64@M3-Max")
    assert "the weights are not on this Mac (download the model to run it)" in text.stdout


def test_auto_picks_tensor_on_four_m3_ultras_over_rdma_and_says_why(hub: FakeHub, tmp_path: Path):
    config = qwen3_moe_config(layers=94, hidden=4096, heads=64, moe_inter=1536)
    hub.add_virtual_model(BIG, config, qwen3_moe_tensors(config), files=8)
    nodes = [arg for name in "abcd" for arg in ("--node", f"{name}:512@M3-Ultra")]
    one = _plan(hub, tmp_path, f"hf:{BIG}", "--node", "a:512@M3-Ultra", "--batch", "1")
    assert one.returncode == 0 and ": single (fits)" in one.stdout  # one Mac holds it
    result = _plan(hub, tmp_path, f"hf:{BIG}", *nodes, "--rdma", "--batch", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{BIG}: tensor (fits)"
    assert lines[1].startswith("tensor: ") and "× one Mac (estimate, at batch 1)." in lines[1]
    assert "Estimate per strategy:" in result.stdout
