"""Base + adapter on our ranks answers exactly as mlx-lm's own ``load(adapter_path=...)``.

The adapter is fused into the whole model before sharding (core/worker/adapter.py); the
reference is mlx-lm's unfused LoRA layers on one process. Single, pipeline and tensor
ranks must give its greedy tokens, which must differ from the base's (else the adapter
was not applied and the test would prove nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.model.info import read_model_info
from core.run.job.launcher import JobError, JobSpec
from core.tune.fuse import fuse_adapter
from tests.helpers.adapters import make_adapter, mlx_lm_answer
from tests.helpers.jobs import PROMPT, run_job
from tests.helpers.tiny_models import make_tiny_model

pytestmark = pytest.mark.slow


def mlx_lm_tokens(model: Path, adapter: Path | None) -> list[int]:
    return mlx_lm_answer(model, adapter, PROMPT)[0]


@pytest.fixture(scope="module")
def expected(tiny_models: dict[str, Path], tiny_adapter: Path) -> list[int]:
    tokens = mlx_lm_tokens(tiny_models["llama"], tiny_adapter)
    assert len(tokens) == 12 and len(set(tokens)) > 1  # a weak reference proves nothing
    assert tokens != mlx_lm_tokens(tiny_models["llama"], None)  # the adapter changes it
    return tokens


@pytest.mark.parametrize(
    ("strategy", "nodes", "split"),
    [("single", 1, None), ("pipeline", 2, None), ("pipeline", 2, [3, 1]), ("tensor", 2, None)],
)
def test_ranks_with_an_adapter_answer_as_mlx_lm(
    tiny_models: dict[str, Path],
    tiny_adapter: Path,
    expected: list[int],
    strategy: str,
    nodes: int,
    split: list[int] | None,
) -> None:
    spec = JobSpec(
        model=tiny_models["llama"],
        strategy=strategy,
        nodes=nodes,
        split=split,
        adapter=tiny_adapter,
    )
    result = run_job(spec)
    assert result.tokens == expected
    loaded = [e for e in result.events if e["event"] == "loaded"]
    assert len(loaded) == nodes
    # 3 layers x 7 linears each, fused on every rank (before the pipeline drops layers)
    assert all(
        e["adapter"] == {"name": "Mochi", "type": "lora", "fused": 21, "precision": "float"}
        for e in loaded
    )


@pytest.fixture(scope="module")
def q4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 4-bit base and an adapter trained on it (QLoRA)."""
    root = tmp_path_factory.mktemp("q4")
    model = make_tiny_model(root / "q4", quantize=True, seed=3)
    return model, make_adapter(model, root / "q4-adapter", num_layers=4)


def test_a_quantized_base_with_its_adapter(q4: tuple[Path, Path]) -> None:
    """The CPU ranks fuse the adapter in float: mlx-lm's unfused answer exactly."""
    model, adapter = q4
    tokens = mlx_lm_tokens(model, adapter)
    assert tokens != mlx_lm_tokens(model, None)
    for strategy in ("pipeline", "tensor"):
        spec = JobSpec(model=model, strategy=strategy, nodes=2, adapter=adapter)
        assert run_job(spec).tokens == tokens


def test_ranks_keeping_4_bit_weights_answer_as_mlx_lm_s_fused_model(
    q4: tuple[Path, Path], tmp_path: Path
) -> None:
    """Kept quantized (Metal's way), the fused layers are quantized again: the answer of
    mlx-lm's own fused model (mlx_lm.fuse's default, which Fuse runs), on every strategy."""
    model, adapter = q4
    fused = fuse_adapter(model, adapter, dest=tmp_path / "fused").path
    assert read_model_info(fused).quantization_label == "4-bit"
    expected = run_job(JobSpec(model=fused, nodes=1, weights=["quantized"])).tokens
    assert expected != run_job(JobSpec(model=model, nodes=1, weights=["quantized"])).tokens
    for strategy in ("pipeline", "tensor"):
        spec = JobSpec(
            model=model, strategy=strategy, nodes=2, adapter=adapter, weights=["quantized"] * 2
        )
        result = run_job(spec)
        assert result.tokens == expected
        loaded = [e for e in result.events if e["event"] == "loaded"]
        assert {e["adapter"]["precision"] for e in loaded} == {"re-quantized"}


def test_a_folder_that_is_not_an_adapter_is_refused(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    folder = tmp_path / "holiday-photos"
    folder.mkdir()
    with pytest.raises(JobError) as failure:
        run_job(JobSpec(model=tiny_models["llama"], nodes=1, adapter=folder))
    first = str(failure.value).splitlines()[0]
    assert first == f"Rank 0: {folder} is not an adapter folder: it has no adapter_config.json"


def test_an_adapter_of_another_base_is_refused(tiny_adapter: Path, tmp_path: Path) -> None:
    """The adapter on a llama of other sizes (the same layer names, other shapes)."""
    other = make_tiny_model(tmp_path / "wider", hidden=96, intermediate=192)
    spec = JobSpec(model=other, strategy="pipeline", nodes=2, adapter=tiny_adapter)
    with pytest.raises(JobError) as failure:
        run_job(spec)
    first = str(failure.value).splitlines()[0]
    assert first.startswith("Rank ") and "was made for another base model: " in first, first


@pytest.mark.parametrize("kind", ["dora", "full"])
def test_the_other_fine_tune_types_mlx_lm_writes(
    tiny_models: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    """DoRA (fused by its own layer) and full fine-tuning (plain weights) on tensor ranks."""
    model = tiny_models["llama"]
    adapter = make_adapter(model, tmp_path / kind, num_layers=2, fine_tune_type=kind)
    tokens = mlx_lm_tokens(model, adapter)
    assert tokens != mlx_lm_tokens(model, None)
    result = run_job(JobSpec(model=model, strategy="tensor", nodes=2, adapter=adapter))
    assert result.tokens == tokens
    loaded = [e for e in result.events if e["event"] == "loaded"]
    assert {e["adapter"]["type"] for e in loaded} == {kind}
