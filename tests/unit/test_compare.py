"""Compare's pure parts: which one Mac, and what the headline says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core.model.info import ModelInfo
from core.run.demo import DEMO_MACS
from core.run.tasks.compare import Comparison, RunFigures, strongest_single
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


@pytest.fixture
def info() -> ModelInfo:
    return synthetic_model_info(layers=8, layer_bytes=4 * GIB, shared_bytes=GIB)  # ~33 GB


def run(label: str, nodes: list[str], tps: float, tokens: int = 32) -> RunFigures:
    return RunFigures(
        label=label,
        nodes=nodes,
        strategy="single" if len(nodes) == 1 else "pipeline",
        ranks=len(nodes),
        generation_tps=tps,
        prompt_tps=10 * tps,
        ttft_s=0.5,
        generation_tokens=tokens,
        prompt_tokens=12,
        memory_bytes=dict.fromkeys(nodes, GIB),
        text="Paris",
    )


def test_the_one_mac_is_the_one_with_the_most_memory_that_holds_the_model(
    info: ModelInfo,
) -> None:
    small = replace(DEMO_MACS[0], name="small", memory_bytes=16 * GIB)
    mid = replace(DEMO_MACS[0], name="mid", memory_bytes=64 * GIB)
    big = replace(DEMO_MACS[0], name="big", memory_bytes=128 * GIB)
    assert strongest_single(info, [small, mid, big]) == ("big", "")
    assert strongest_single(info, [mid, small]) == ("mid", "")


def test_when_no_mac_holds_it_alone_it_says_the_model_needs_the_cluster(info: ModelInfo) -> None:
    macs = [replace(DEMO_MACS[0], name=n, memory_bytes=24 * GIB) for n in ("a", "b")]
    best, why = strongest_single(info, macs)
    assert best is None
    assert why.startswith("needs the cluster: no one Mac holds") and "across 2 Macs" in why


def test_the_headline_is_the_speedup_or_why_there_is_none() -> None:
    one = run("one Mac", ["a"], 10.0)
    tensor = Comparison(one, run("cluster", ["a", "b", "c", "d"], 27.0), "tensor")
    assert tensor.ratio == pytest.approx(2.7)
    assert tensor.headline() == "2.7× faster on 4 Macs"
    pipeline = Comparison(one, run("cluster", ["a", "b"], 9.0), "pipeline")
    assert "pipeline splits memory, not time" in pipeline.headline()
    # No promise that tensor would be faster: for some models it cannot run, and over the
    # ring on TCP it is slower (the estimate per strategy says which, before Start).
    assert "tensor" not in pipeline.headline()
    assert pipeline.headline().startswith("0.90× on 2 Macs")
    slow_tensor = Comparison(one, run("cluster", ["a", "b"], 8.0), "tensor")
    assert "not faster here" in slow_tensor.headline()
    alone = Comparison(None, run("cluster", ["a", "b"], 8.0), "pipeline", "needs the cluster: x")
    assert alone.ratio is None and alone.headline() == "needs the cluster: x"
    data = tensor.to_dict()
    assert data["ratio"] == 2.7 and data["single"]["nodes"] == ["a"]
    assert data["cluster"]["ranks"] == 4 and data["headline"] == "2.7× faster on 4 Macs"
