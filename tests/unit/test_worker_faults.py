"""A request's own sampler raising inside a batch step (``core.worker.faults``): the step
gets the row's most likely token, the failure is noted against that request alone, and
rank 0's join/cancel vector carries the failed uids to every rank beside the cancelled."""

from __future__ import annotations

import mlx.core as mx
import pytest

from core.worker import protocol as p
from core.worker.batching import Control
from core.worker.faults import TEST_HOOK, Faults, hooked


def _raises(_logprobs: mx.array) -> mx.array:
    raise ValueError("top_p went wrong\nsecond line")


def test_a_raising_sampler_gives_the_rows_argmax_and_notes_its_request_alone() -> None:
    faults = Faults()
    logprobs = mx.array([[0.1, 0.7, 0.2]])
    token = faults.guard("r1", _raises)(logprobs)
    assert token.tolist() == [1]
    kept = faults.guard("r2", lambda lp: mx.array([2]))(logprobs)
    assert kept.tolist() == [2]
    assert faults.failed("r1") and not faults.failed("r2")
    message = faults.message("r1")
    assert message.endswith("ValueError: top_p went wrong")  # one line, its kind named
    assert not faults.failed("r1")  # said once, then forgotten


def test_a_raising_logits_processor_passes_the_logits_and_notes_its_request_alone() -> None:
    """A grammar's mask (or any processor) that raises: the step goes on with the logits
    as they were, and the request ends as its sampler's failure would."""
    faults = Faults()
    logits = mx.array([[0.1, 0.7, 0.2]])

    def broken(_tokens: mx.array, _logits: mx.array) -> mx.array:
        raise RuntimeError("the grammar lost its state")

    (guarded,) = faults.guard_processors("r1", [broken])
    assert guarded(mx.array([1]), logits).tolist() == logits.tolist()
    (fine,) = faults.guard_processors("r2", [lambda _t, lg: lg * 2])
    assert fine(mx.array([1]), logits).tolist() == (logits * 2).tolist()
    assert faults.failed("r1") and not faults.failed("r2")
    assert faults.message("r1").endswith("RuntimeError: the grammar lost its state")


def test_the_tests_hook_fails_only_its_seed_and_only_when_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampler = hooked({"seed": 5}, lambda lp: mx.array([0]))
    for _ in range(5):  # no hook set: never raises
        sampler(mx.array([[0.0]]))
    monkeypatch.setenv(TEST_HOOK, "5")
    other = hooked({"seed": 6}, lambda lp: mx.array([0]))
    failing = hooked({"seed": 5}, lambda lp: mx.array([0]))
    failing(mx.array([[0.0]]))
    failing(mx.array([[0.0]]))
    with pytest.raises(RuntimeError):
        failing(mx.array([[0.0]]))
    for _ in range(5):
        other(mx.array([[0.0]]))


def test_rank_0s_vector_carries_the_failed_beside_the_cancelled() -> None:
    control = Control(None, limit=4)
    assert control.agree(1, [3], 64, failed=[0, 7]) == (1, [3], 64)
    assert control.failed == [0, 7]
    assert control.agree(0, []) == (0, [], p.PREFILL_STEP) and control.failed == []
