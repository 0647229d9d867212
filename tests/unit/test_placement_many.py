"""Several models on the same Macs (issue 37): the per-Mac sum with each model's KV and
prompt cache counted; a set that does not fit names the model to leave out; the server's
room for a model asked for: idle models unloaded least recently used first, never a busy
one."""

from __future__ import annotations

import pytest

from core.plan.memory import PlanOptions
from core.plan.placement_many import place_together, room_for
from core.plan.planner import Node, make_plan
from core.units import GIB, MIB
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info

NODES = [Node("a", 32 * GIB), Node("b", 32 * GIB)]


def _plan(weights_gib: float, *, context: int = 4096, cache_mb: int = 0, nodes=NODES):
    model = synthetic_model_info(
        layers=8, layer_bytes=int(weights_gib * GIB) // 8, shared_bytes=int(weights_gib * GIB) // 8
    )
    options = PlanOptions(
        strategy=Strategy.PIPELINE, context_length=context, prompt_cache_bytes=cache_mb * MIB
    )
    return make_plan(model, nodes, options=options)


def test_small_models_fit_together_and_each_macs_sum_is_the_sum_of_their_needs() -> None:
    a, b = _plan(4), _plan(6)
    placement = place_together([("A", a), ("B", b)])
    assert placement.fits and placement.leave_out == ()
    for use in placement.nodes:
        wanted = sum(r.need_bytes for plan in (a, b) for r in plan.ranks if r.node == use.node)
        assert use.used_bytes == wanted
    assert placement.reason.startswith("They fit together")


def test_the_kv_and_prompt_cache_count_in_the_sum() -> None:
    plain = place_together([("A", _plan(4)), ("B", _plan(4))])
    cached = place_together([("A", _plan(4, cache_mb=2048)), ("B", _plan(4, context=32768))])
    for before, after in zip(plain.nodes, cached.nodes, strict=True):
        assert after.used_bytes > before.used_bytes


def test_a_set_that_does_not_fit_names_the_model_to_leave_out() -> None:
    big = [("coder", _plan(20)), ("writer", _plan(20)), ("agent", _plan(2))]
    placement = place_together(big)
    assert not placement.fits
    assert placement.leave_out == ("writer",)  # the later of the two big ones
    assert "Leave out writer" in placement.reason and "usable" in placement.reason
    rest = place_together([m for m in big if m[0] not in placement.leave_out])
    assert rest.fits


def test_a_model_that_does_not_fit_alone_is_left_out_with_the_planners_reason() -> None:
    placement = place_together([("A", _plan(2)), ("huge", _plan(200))])
    assert placement.leave_out == ("huge",) and "does not fit alone" in placement.reason
    assert not placement.fits  # even though the rest (A) fits


def test_a_model_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        place_together([("A", _plan(2)), ("A", _plan(2))])


def test_room_for_unloads_idle_models_least_recently_used_first_never_a_busy_one() -> None:
    new = ("new", _plan(20))
    loaded = [("old", _plan(10), 100.0, False), ("older", _plan(10), 50.0, False)]
    assert room_for(("tiny", _plan(1)), loaded) == ([], "")
    assert room_for(new, loaded) == (["older"], "")
    busy = [("old", _plan(10), 100.0, True), ("older", _plan(10), 50.0, True)]
    unload, why = room_for(new, busy)
    assert unload == [] and "answering now" in why and "old" in why
    unload, why = room_for(("huge", _plan(200)), loaded)
    assert unload == [] and "does not fit" in why


FOUR = [Node("a", 32 * GIB), Node("b", 32 * GIB), Node("c", 32 * GIB), Node("d", 32 * GIB)]


def test_two_models_fit_on_separate_macs_where_they_do_not_on_the_same_ones() -> None:
    """Each model planned on its own Macs: the sum is per Mac, over the models there."""
    ab, cd = [n for n in FOUR if n.name in "ab"], [n for n in FOUR if n.name in "cd"]
    apart = place_together([("coder", _plan(24, nodes=ab)), ("writer", _plan(24, nodes=cd))])
    assert apart.fits, apart.reason
    assert {use.node: [m for m, _need in use.by_model] for use in apart.nodes} == {
        "a": ["coder"],
        "b": ["coder"],
        "c": ["writer"],
        "d": ["writer"],
    }
    shared = place_together([("coder", _plan(24, nodes=ab)), ("writer", _plan(24, nodes=ab))])
    assert not shared.fits and shared.leave_out == ("writer",)
    assert shared.reason.startswith("These models do not fit together")
    assert "Leave out writer" in shared.reason


def test_models_overlapping_on_one_mac_are_summed_there_only() -> None:
    ab, bc = [n for n in FOUR if n.name in "ab"], [n for n in FOUR if n.name in "bc"]
    first, second = _plan(20, nodes=ab), _plan(20, nodes=bc)
    placement = place_together([("first", first), ("second", second)])
    used = {use.node: use for use in placement.nodes}
    assert set(used) == {"a", "b", "c"}
    assert [m for m, _need in used["b"].by_model] == ["first", "second"]
    assert [m for m, _need in used["a"].by_model] == ["first"]
    wanted_b = sum(r.need_bytes for p in (first, second) for r in p.ranks if r.node == "b")
    assert used["b"].used_bytes == wanted_b
