"""The planner counts the prompt cache: each node holds its share of the bound (its layers
in a pipeline, its slice under tensor parallelism), in the breakdown ``macmesh plan``
prints, its JSON and the window's tooltip; a plan that does not fit because of it says so.

The worked example: 8 layers of 8 KV heads of 128 (bfloat16). The ranks count the bound
in tokens of the whole model's KV at float32 (``core.worker.promptcache``): 2 x 8 x 8 x 128
x 4 = 64 KiB a token, so 256 MiB keeps 4096 tokens; one layer's part in bfloat16 is 4096 x
(2 x 8 x 128 x 2) = 16 MiB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.cli.plan import plan_cli
from core.model.info import read_model_info
from core.plan.memory import PlanOptions, prompt_cache_bytes_per_layer, prompt_cache_tokens
from core.plan.planner import Node, make_plan
from core.plan.report import format_plan, plan_to_dict
from core.units import GIB, MIB, size
from core.worker.promptcache import kv_bytes_per_token
from core.worker.vocab import Strategy
from gui.model.memory_bars import bars_for
from tests.helpers.header_models import synthetic_model_info

MODEL = synthetic_model_info(layers=8, layer_bytes=GIB // 8, shared_bytes=GIB // 8)
BOUND = 256 * MIB
LAYER = 16 * MIB


def _plan(strategy: Strategy, *nodes: Node, bound: int = BOUND, **options: object):
    return make_plan(
        MODEL,
        list(nodes) or [Node("a", 64 * GIB), Node("b", 64 * GIB)],
        options=PlanOptions(strategy=strategy, prompt_cache_bytes=bound, **options),  # type: ignore[arg-type]
    )


def test_the_bound_in_tokens_and_a_layers_part() -> None:
    options = PlanOptions(prompt_cache_bytes=BOUND)
    assert prompt_cache_tokens(MODEL, options) == 4096
    assert prompt_cache_bytes_per_layer(MODEL, options) == LAYER
    assert prompt_cache_bytes_per_layer(MODEL, PlanOptions()) == 0  # no cache, no bytes


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_planner_counts_the_tokens_the_ranks_keep(
    arch: str, tiny_models: dict[str, Path]
) -> None:
    """The same token count as the worker's, from the same model's config."""
    folder = tiny_models[arch]
    config = json.loads((folder / "config.json").read_text())
    info = read_model_info(folder)
    options = PlanOptions(prompt_cache_bytes=3 * MIB)
    assert prompt_cache_tokens(info, options) == 3 * MIB // kv_bytes_per_token(config)


def test_a_pipeline_node_holds_its_layers_share() -> None:
    plan = _plan(Strategy.PIPELINE, split=(6, 2))
    assert plan.fits
    assert [r.layers for r in plan.ranks] == [6, 2]
    assert [r.prompt_cache_bytes for r in plan.ranks] == [6 * LAYER, 2 * LAYER]
    without = _plan(Strategy.PIPELINE, bound=0, split=(6, 2))
    for rank, bare in zip(plan.ranks, without.ranks, strict=True):
        assert rank.need_bytes - bare.need_bytes == rank.prompt_cache_bytes


def test_a_tensor_node_holds_its_slice_and_a_single_node_all() -> None:
    tensor = _plan(Strategy.TENSOR)
    assert [r.prompt_cache_bytes for r in tensor.ranks] == [4 * LAYER, 4 * LAYER]
    single = _plan(Strategy.SINGLE)
    assert [r.prompt_cache_bytes for r in single.ranks] == [8 * LAYER]


def test_a_cpu_node_holds_it_in_float32() -> None:
    """A CPU rank's caches are float32: the whole bound on one node, as the ranks count."""
    plan = _plan(Strategy.SINGLE, Node("linux", 64 * GIB, cpu=True))
    assert plan.ranks[0].prompt_cache_bytes == 16 * LAYER == BOUND


def test_a_plan_that_does_not_fit_because_of_the_prompt_cache_says_so() -> None:
    small = Node("mini", 16 * GIB)
    assert _plan(Strategy.SINGLE, small, bound=0).fits
    plan = _plan(Strategy.SINGLE, small, bound=40 * GIB)  # 20 GiB in bfloat16
    assert not plan.fits
    assert "The prompt cache is what does not fit" in plan.reason
    assert "prompt_cache_mb" in plan.reason and "without it, fits on mini alone" in plan.reason
    assert plan.ranks[0].prompt_cache_bytes == 20 * GIB


def test_a_plan_too_big_anyway_does_not_blame_the_prompt_cache() -> None:
    tiny = Node("tiny", 1 * GIB)
    plan = _plan(Strategy.SINGLE, tiny)
    assert not plan.fits and "prompt cache" not in plan.reason


def test_the_breakdown_shows_it_in_text_json_and_tooltip() -> None:
    plan = _plan(Strategy.PIPELINE, split=(6, 2))
    text = format_plan(plan)
    assert "prompt cache" in text.splitlines()[3]  # the table's header
    assert size(6 * LAYER) in text.splitlines()[4]  # rank 0's row
    assert "prompt cache at most 256" in text
    data = plan_to_dict(plan)
    assert [r["prompt_cache_bytes"] for r in data["ranks"]] == [6 * LAYER, 2 * LAYER]
    assert data["options"]["prompt_cache_bytes"] == BOUND
    details = [bar.detail for bar in bars_for(plan)]
    assert all("prompt cache" in detail for detail in details)


def test_macmesh_plan_takes_the_prompt_cache_and_the_batch(
    tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    out = io.StringIO()
    argv = [str(tiny_models["llama"]), "--node", "a:8", "--json"]
    assert plan_cli([*argv, "--prompt-cache-mb", "2", "--batch", "3"], out=out) == 0
    data = json.loads(out.getvalue())
    assert data["options"]["prompt_cache_bytes"] == 2 * MIB and data["options"]["batch"] == 3
    assert data["ranks"][0]["prompt_cache_bytes"] > 0
    out = io.StringIO()
    assert plan_cli(argv, out=out) == 0  # the defaults: the settings' (what a chat job runs)
    options = json.loads(out.getvalue())["options"]
    assert (options["batch"], options["prompt_cache_bytes"]) == (8, 256 * MIB)
    assert plan_cli([*argv, "--prompt-cache-mb", "-1"], out=io.StringIO()) == 2
    assert "--prompt-cache-mb" in capsys.readouterr().err


def test_the_librarys_badge_gives_the_verdict_a_start_plans_with(tmp_path: Path) -> None:
    """A Mac with room for the weights but not for a batch's KV caches and the prompt
    cache: the library's badge says "doesn't fit", as the Model pane's plan does."""
    from core.library.fit import NO_FIT, fit
    from core.run.planning import Serving, chat_options

    tight = [Node("a", 4 * GIB)]  # 2.17 GB usable; the weights and the rest: 1.74 GB
    bare, _ = fit(MODEL, tight)
    assert bare == "fits"
    serving = Serving(batch=8, prompt_cache_mb=64 * 1024)
    badge, plan = fit(MODEL, tight, options=chat_options(serving=serving))
    assert badge == NO_FIT and not plan.fits
    assert plan.fits == make_plan(MODEL, tight, options=chat_options(serving=serving)).fits


def test_a_batch_that_does_not_fit_names_the_largest_that_does() -> None:
    """8 requests' KV caches overfill the Mac; 4 fit: the reason says so, and how."""
    node = [Node("a", 8 * GIB)]
    plan = make_plan(MODEL, node, options=PlanOptions(batch=8, context_length=4096))
    assert not plan.fits
    assert "The batch is what does not fit (8 requests at once): with 4 requests at once" in (
        plan.reason
    )
    assert "--batch 4" in plan.reason
    assert make_plan(MODEL, node, options=PlanOptions(batch=4, context_length=4096)).fits
    alone = make_plan(MODEL, [Node("a", 1 * GIB)], options=PlanOptions(batch=8))
    assert not alone.fits and "batch" not in alone.reason  # no batch fits: nothing to say
