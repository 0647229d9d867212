"""Pipeline and tensor ranks produce exactly the single-process greedy tokens."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.demo import demo_facts
from core.run.job.launcher import JobError, JobSpec
from core.run.placement import job_spec
from core.run.planning import plan_on
from core.worker.shardfiles import files_for_layers, layer_ranges, read_weight_map
from tests.helpers.arch_models import make_arch_model
from tests.helpers.jobs import run_job

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tiny_models: dict[str, Path]) -> dict[str, list[int]]:
    return {
        arch: run_job(JobSpec(model=path, nodes=1)).tokens for arch, path in tiny_models.items()
    }


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize(
    ("strategy", "split"),
    [("pipeline", None), ("pipeline", [3, 1]), ("pipeline", [1, 3]), ("tensor", None)],
)
def test_two_ranks_match_one_process(
    tiny_models: dict[str, Path], reference: dict, arch: str, strategy: str, split: list | None
) -> None:
    expected = reference[arch]
    assert len(expected) == 12 and len(set(expected)) > 1  # a weak reference proves nothing
    result = run_job(JobSpec(model=tiny_models[arch], strategy=strategy, nodes=2, split=split))
    assert result.tokens == expected
    loaded = {e["rank"]: e for e in result.events if e["event"] == "loaded"}
    if strategy == "pipeline":
        ranges = layer_ranges(split or [2, 2])
        assert [loaded[r]["layers"] for r in (0, 1)] == [list(ranges[0]), list(ranges[1])]
        assert loaded[0]["layers"][1] == 4  # rank 0 holds the last layers


@pytest.mark.parametrize("arch", ["gemma3_text", "nemotron_h"])
def test_macmeshs_own_tensor_sharding_matches_one_process(
    arch: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """mlx-lm has no tensor sharding for these: MacMesh's own splits their attention and
    MLPs and keeps the rest (Gemma 3's norms, Nemotron-H's Mamba mixers) whole."""
    model = make_arch_model(tmp_path_factory.mktemp(arch) / arch, arch)
    assert read_model_info(model).own_tensor_sharding
    expected = run_job(JobSpec(model=model, nodes=1)).tokens
    assert len(expected) == 12 and len(set(expected)) > 1
    assert run_job(JobSpec(model=model, strategy="tensor", nodes=2)).tokens == expected


def _copy_with_only(model: Path, dest: Path, files: set[str]) -> Path:
    dest.mkdir()
    for item in model.iterdir():
        if item.suffix != ".safetensors" or item.name in files:
            shutil.copy2(item, dest / item.name)
    return dest


def test_each_pipeline_rank_needs_only_its_layers_files(
    tiny_models: dict[str, Path], reference: dict, tmp_path: Path
) -> None:
    model = tiny_models["llama"]
    weight_map = read_weight_map(model)
    assert weight_map is not None and len(set(weight_map.values())) == 2
    split = [2, 2]
    folders = []
    for rank, (start, end) in enumerate(layer_ranges(split)):
        needed = files_for_layers(weight_map, start, end)
        folders.append(_copy_with_only(model, tmp_path / f"rank{rank}", needed))
    # Rank 1 (the first layers) does without the second file altogether.
    assert len(list(folders[1].glob("*.safetensors"))) == 1
    spec = JobSpec(model=model, strategy="pipeline", nodes=2, split=split, rank_models=folders)
    assert run_job(spec).tokens == reference["llama"]


def test_a_missing_weight_file_fails_clearly(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    model = tiny_models["llama"]
    first_file_only = {sorted(set(read_weight_map(model).values()))[0]}
    broken = _copy_with_only(model, tmp_path / "broken", first_file_only)
    spec = JobSpec(model=model, strategy="pipeline", nodes=2, rank_models=[broken, model])
    with pytest.raises(JobError) as failure:
        run_job(spec)
    message = str(failure.value)
    assert message.startswith("Rank 0")
    assert "model-00002-of-00002.safetensors" in message and "copy the model again" in message


def test_demo_model_pipeline_and_tensor_match_one_process(demo_model: Path) -> None:
    expected = run_job(JobSpec(model=demo_model, nodes=1), max_tokens=8)
    assert "Paris" in expected.text
    # The planner's memory-proportional split on the demo Macs (96 GB + 64 GB) is uneven,
    # and it is exactly what the launcher runs.
    info = read_model_info(demo_model)
    plan = plan_on(info, demo_facts(2), "pipeline")
    spec = job_spec(info, plan)
    assert spec.split == list(plan.split) == [18, 12]
    uneven = run_job(spec, max_tokens=8)
    assert uneven.tokens == expected.tokens
    loaded = {e["rank"]: e["layers"] for e in uneven.events if e["event"] == "loaded"}
    assert loaded == {rank.rank: [rank.layer_start, rank.layer_end] for rank in plan.ranks}
    # 9 heads and 3 KV heads divide by 3 nodes (not by 2).
    tensor = run_job(JobSpec(model=demo_model, strategy="tensor", nodes=3), max_tokens=8)
    assert tensor.tokens == expected.tokens
