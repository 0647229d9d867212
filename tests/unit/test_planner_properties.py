"""Properties of the planner over random models and clusters (its speed: ``make bench``)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model.info import ModelInfo
from core.plan.memory import activation_bytes, kv_bytes_per_layer, node_budget
from core.plan.planner import Node, Plan, PlanOptions, make_plan
from core.plan.split import fit_split, proportional_counts, segment_loads
from tests.helpers.header_models import synthetic_model_info, thousand_layer_case

GIB = 1 << 30
MIB = 1 << 20


@st.composite
def models(draw: st.DrawFn, max_layers: int = 48) -> ModelInfo:
    layers = draw(st.lists(st.integers(1, 4 * GIB), min_size=1, max_size=max_layers))
    return synthetic_model_info(
        layers=len(layers),
        layer_bytes=layers,
        shared_bytes=draw(st.integers(0, 2 * GIB)),
        heads=16,
        kv_heads=draw(st.sampled_from([1, 2, 4, 8])),
        head_dim=64,
        hidden=1024,
        intermediate=4096,
        vocab=32000,
    )


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 6) -> list[Node]:
    sizes = draw(
        st.lists(
            st.sampled_from([8, 16, 24, 32, 36, 48, 64, 96, 128, 192, 256, 512]),
            min_size=1,
            max_size=max_nodes,
        )
    )
    wired = draw(
        st.lists(
            st.one_of(st.none(), st.integers(1024, 512 * 1024)),
            min_size=len(sizes),
            max_size=len(sizes),
        )
    )
    return [
        Node(f"mac-{i}", gib * GIB, wired_limit_mb=w)
        for i, (gib, w) in enumerate(zip(sizes, wired, strict=True))
    ]


options = st.builds(
    PlanOptions,
    strategy=st.sampled_from(["auto", "single", "pipeline", "tensor"]),
    context_length=st.integers(1, 65536),
    batch=st.integers(1, 4),
)


def _check_split(plan: Plan, layers: int) -> None:
    split = plan.split
    assert split is not None and len(split) == len(plan.ranks)
    assert sum(split) == layers and all(count >= 1 for count in split)
    covered = []
    for r, rank in enumerate(plan.ranks):
        assert (rank.layer_start, rank.layer_end) == (sum(split[r + 1 :]), sum(split[r:]))
        covered += range(rank.layer_start, rank.layer_end)
    assert sorted(covered) == list(range(layers))  # every layer exactly once
    assert plan.ranks[0].layer_end == layers  # rank 0 runs the last layers


@settings(max_examples=300, deadline=None)
@given(models(), clusters(), options)
def test_plans_never_overfill_a_node_and_splits_cover_every_layer(model, nodes, opts):
    plan = make_plan(model, nodes, options=opts)
    if plan.verdict == "fits":
        for rank in plan.ranks:
            assert rank.need_bytes <= rank.usable_bytes, rank
        assert plan.missing_bytes == 0
    if plan.strategy == "pipeline" and plan.verdict != "invalid":
        _check_split(plan, model.layers)
    if plan.verdict == "does_not_fit":
        assert plan.missing_bytes > 0


@settings(max_examples=300, deadline=None)
@given(models(max_layers=10), clusters(max_nodes=4), st.integers(1, 32768))
def test_pipeline_fits_whenever_some_split_fits(model, nodes, context):
    """Brute force over every split: if any fits, the planner's must fit too."""
    opts = PlanOptions(strategy="pipeline", context_length=context)
    plan = make_plan(model, nodes, options=opts)
    if len(nodes) < 2 or model.layers < len(nodes):
        assert plan.verdict == "invalid"
        return
    ranked = sorted((node_budget(n, opts) for n in nodes), key=lambda b: (-b.usable_bytes, b.node))
    fixed = model.shared_bytes + activation_bytes(model, opts)
    costs = [b + kv_bytes_per_layer(model, opts) for b in model.layer_bytes]
    caps = [b.usable_bytes - fixed for b in reversed(ranked)]
    feasible = any(
        all(load <= cap for load, cap in zip(segment_loads(costs, counts), caps, strict=True))
        for counts in _compositions(model.layers, len(nodes))
    )
    assert plan.fits == (plan.verdict == "fits") == feasible
    _check_split(plan, model.layers)


@settings(max_examples=200, deadline=None)
@given(models(), clusters(), options, st.randoms(use_true_random=False))
def test_planning_is_deterministic_whatever_the_node_order(model, nodes, opts, rnd):
    first = make_plan(model, nodes, options=opts)
    assert make_plan(model, nodes, options=opts) == first
    shuffled = list(nodes)
    rnd.shuffle(shuffled)
    again = make_plan(model, shuffled, options=opts)
    assert (again.strategy, again.verdict, again.split, again.ranks) == (
        first.strategy,
        first.verdict,
        first.split,
        first.ranks,
    )


@given(st.lists(st.integers(-5, 10**12), min_size=1, max_size=10), st.integers(0, 2000))
def test_proportional_counts(weights, extra):
    total = len(weights) + extra
    counts = proportional_counts(total, weights)
    assert sum(counts) == total and all(c >= 1 for c in counts)
    positive = [max(0, w) for w in weights]
    if sum(positive) and all(total * w / sum(positive) >= 1 for w in positive):
        for count, w in zip(counts, positive, strict=True):
            assert abs(count - total * w / sum(positive)) < 1


@given(st.lists(st.integers(0, 100), min_size=1, max_size=30), st.data())
def test_fit_split_keeps_a_target_that_fits(costs, data):
    stages = data.draw(st.integers(1, len(costs)))
    target = proportional_counts(len(costs), [1] * stages)
    caps = [load + data.draw(st.integers(0, 5)) for load in segment_loads(costs, target)]
    assert fit_split(costs, caps, target) == target


def test_1000_layers_on_8_nodes_fit_as_a_pipeline():
    """Its planning time is a figure of ``make bench`` (planner, budget 50 ms)."""
    model, nodes = thousand_layer_case()
    plan = make_plan(model, nodes)
    assert (plan.strategy, plan.verdict, len(plan.ranks)) == ("pipeline", "fits", 8)
    assert sum(plan.split) == 1000 and make_plan(model, nodes) == plan


def _compositions(total: int, parts: int):
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield [b - a for a, b in itertools.pairwise(bounds)]
