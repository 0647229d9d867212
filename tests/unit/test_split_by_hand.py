"""A pipeline split set by hand (issue 15, item 3): checked by the planner, refused with
the Mac and the gigabytes missing when it does not fit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.model.info import ModelInfo
from core.plan.memory import Node, PlanOptions
from core.plan.planner import make_plan
from core.plan.split import parse_split
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


@pytest.fixture
def info() -> ModelInfo:
    return synthetic_model_info(layers=30, layer_bytes=GIB, shared_bytes=GIB)  # ~31 GB


NODES = [Node("big", 128 * GIB), Node("mid", 24 * GIB)]


def test_the_planners_split_then_one_by_hand_that_fits(info: ModelInfo) -> None:
    planned = make_plan(info, NODES, options=PlanOptions(strategy="pipeline"))
    assert planned.fits and [r.node for r in planned.ranks] == ["big", "mid"]
    by_hand = make_plan(info, NODES, options=PlanOptions(split=(20, 10)))
    assert by_hand.fits and by_hand.strategy == "pipeline" and by_hand.split == (20, 10)
    assert by_hand.split != planned.split
    assert [r.layers for r in by_hand.ranks] == [20, 10]
    # mlx-lm's convention: rank 0 runs the last layers.
    assert [(r.layer_start, r.layer_end) for r in by_hand.ranks] == [(10, 30), (0, 10)]
    assert "as set by hand (20 on big, 10 on mid)" in by_hand.reason


def test_a_split_that_overfills_a_mac_names_it_and_the_gigabytes(info: ModelInfo) -> None:
    plan = make_plan(info, NODES, options=PlanOptions(split=(1, 29)))
    assert not plan.fits and plan.verdict == "does_not_fit"
    mid = plan.ranks[1]
    assert mid.node == "mid" and mid.overflow_bytes > 0
    assert plan.missing_bytes == mid.overflow_bytes
    assert plan.reason.startswith("That split does not fit: mid lacks ")
    assert "for 29 layers" in plan.reason and "planner's split" in plan.reason
    assert "big" not in plan.reason.split(":")[1]


@pytest.mark.parametrize(
    ("split", "strategy", "why"),
    [
        ((10, 10, 10), "pipeline", "The split has 3 layer counts for 2 Macs: give one each."),
        (
            (30, 0),
            "pipeline",
            "Every Mac in a pipeline needs at least one layer: the split has a 0.",
        ),
        ((10, 19), "pipeline", "The split adds up to 29 layers; the model has 30."),
        ((15, 15), "tensor", "A split by hand is for a pipeline, not tensor."),
    ],
)
def test_a_split_that_cannot_be_is_invalid_with_the_reason(
    info: ModelInfo, split: tuple[int, ...], strategy: str, why: str
) -> None:
    plan = make_plan(info, NODES, options=PlanOptions(strategy=strategy, split=split))
    assert plan.verdict == "invalid" and plan.reason == why


@pytest.mark.parametrize("text", ["18", "18,x", "18;12", "-1,31", "1.5,28.5", "", "9" * 8 + ",1"])
def test_parse_split_refuses_what_is_not_layer_counts(text: str) -> None:
    with pytest.raises(ValueError, match="give whole layer counts"):
        parse_split(text)


def test_parse_split_reads_counts() -> None:
    assert parse_split("50, 30,20") == (50, 30, 20)


def test_macmesh_plan_takes_a_split(tiny_models: dict[str, Path]) -> None:
    model = tiny_models["llama"]
    layers = json.loads((model / "config.json").read_text())["num_hidden_layers"]

    def plan(*extra: str) -> subprocess.CompletedProcess:
        args = ["plan", str(model), "--node", "a:64", "--node", "b:32", "--json", *extra]
        return subprocess.run(
            [sys.executable, "-m", "gui.cli", *args], capture_output=True, text=True, timeout=60
        )

    done = plan("--split", f"1,{layers - 1}")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["split"] == [1, layers - 1]
    wrong = plan("--split", f"1,{layers}")
    assert wrong.returncode == 1
    assert f"adds up to {layers + 1} layers" in json.loads(wrong.stdout)["reason"]
    typo = plan("--split", "1;2")
    assert typo.returncode == 2 and "give whole layer counts" in typo.stderr


def test_an_invalid_split_says_what_is_invalid_not_that_it_does_not_fit(
    tiny_models: dict[str, Path],
) -> None:
    """Issue 33, "Why" 10: an invalid --split said "does not fit"."""
    model = tiny_models["llama"]
    args = ["plan", str(model), "--node", "a:64", "--node", "b:32", "--split", "1,2,3"]
    done = subprocess.run(
        [sys.executable, "-m", "gui.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("llama: pipeline (invalid)\n"), done.stdout
    assert "does not fit" not in done.stdout
    assert "No estimate: the split has 3 layer counts for 2 Macs: give one each" in done.stdout
