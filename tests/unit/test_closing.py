"""``json_object``'s closing mask on a small vocabulary (core/worker/closing.py)."""

from __future__ import annotations

import numpy as np

from core.worker.closing import Closing, VocabIndex

VOCAB = [b"<eos>", b"{", b"}", b'"', b"a", b":", b"0", b",", b'{"a":', b'":0}', b"}}", b',"']
EOS = 0


def _closing(budget: int, written: list[bytes]) -> Closing:
    closing = Closing(VocabIndex(len(VOCAB), VOCAB.__getitem__), budget, [EOS])
    for data in written:
        closing.consumed(VOCAB.index(data))
        closing.left -= 1  # each token written took a step
    return closing


def _allowed(closing: Closing, grammar: list[bytes] | None = None) -> set[bytes]:
    allowed = np.array([grammar is None or t in grammar for t in VOCAB], dtype=np.uint8)
    return {VOCAB[t] for t in np.flatnonzero(closing.narrow(allowed))}


def test_far_from_the_budget_the_grammar_alone_decides() -> None:
    assert _allowed(_closing(200, [b"{"])) == set(VOCAB)


def test_with_no_room_left_only_the_closing_s_own_bytes_and_the_end() -> None:
    # '{"a' closes with '":0}' (4 bytes): 5 tokens left is just enough
    closing = _closing(8, [b"{", b'"', b"a"])
    assert closing.left == 5
    assert _allowed(closing) == {b"<eos>", b'"', b'":0}'}


def test_a_token_that_would_leave_no_room_to_close_is_not_allowed() -> None:
    # '{"a":0' closes with '}'; 3 tokens left: none may lengthen it, as ',' or ',"' would
    closing = _closing(9, [b"{", b'"', b"a", b'"', b":", b"0"])
    assert closing.left == 3 and closing.closer.suffix() == b"}"
    grammar = [b"}", b",", b',"', b"0", b"<eos>"]
    assert _allowed(closing, grammar) == {b"}", b"0", b"<eos>"}


def test_when_the_grammar_and_the_closing_share_nothing_the_grammar_decides() -> None:
    closing = _closing(3, [b"{"])
    assert _allowed(closing, [b"a"]) == {b"a"}
