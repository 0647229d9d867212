"""A ``json_object`` answer closed within its token budget (issue 34): the grammar's mask
narrowed, near the end, so the object the model writes always closes within
``max_tokens`` and the answer parses.

The request's ``Closing`` reads the tokens sampled (their bytes, into a
``core.worker.jsonclose.JsonCloser``) and knows the tokens left. A token may be sampled
only if the closing can still be written after it: with ``left`` tokens left (this one
included) and a closing of ``L`` bytes, a token whose bytes lengthen the closing by at
most ``left - 2 - L`` keeps room for the closing (at least one byte a token) and the
end-of-sequence token. How much a token can lengthen it is bounded ahead, per token
(``VocabIndex``: the sum of ``jsonclose.MAX_GROWTH`` over its bytes; inside a string, a
token without a quote or a backslash lengthens it by the UTF-8 bytes it leaves open, at
most). A token that is a prefix of the closing itself always keeps room, so when no room
is left (``left == L + 1``) only those are allowed: the closing is written, then the
end-of-sequence token. Waiting for ``left == L + 1`` alone would not do: one token
taken the step before may lengthen the closing by several bytes (``{"a":0`` closes with
``}``, ``{"a":0,"`` with ``":0}``), past the tokens left. The grammar's own mask still
applies; were the two to leave nothing, the grammar's alone does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from core.worker.jsonclose import MAX_GROWTH, JsonCloser, open_utf8

_PLAIN_REFUSED = frozenset(b'"\\') | frozenset(range(0x20))


class VocabIndex:
    """A tokenizer's tokens for closing JSON: each one's bytes, how much it can lengthen
    a closing (anywhere, and inside a string), and the tokens by their first byte.
    Made once per tokenizer (a few tens of milliseconds for 50k tokens)."""

    def __init__(self, size: int, token_bytes: Callable[[int], bytes]) -> None:
        self.tokens = [token_bytes(t) for t in range(size)]
        lengths = np.fromiter(map(len, self.tokens), np.int64, size)
        flat = np.frombuffer(b"".join(self.tokens), np.uint8)
        ends = np.cumsum(lengths)
        starts = ends - lengths

        def per_token(values: np.ndarray) -> np.ndarray:  # each token's sum of its bytes'
            summed = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
            sums: np.ndarray = (summed[ends] - summed[starts]).astype(np.int32)
            return sums

        self.anywhere = per_token(np.asarray(MAX_GROWTH, np.int32)[flat])
        refused = per_token(np.isin(flat, list(_PLAIN_REFUSED)).astype(np.int32))
        first = np.where(lengths > 0, flat[np.minimum(starts, max(len(flat) - 1, 0))], 0)
        plain = (lengths > 0) & (refused == 0) & ((first < 0x80) | (first > 0xBF))
        self.in_string = self.anywhere.copy()
        for token in np.flatnonzero(plain):
            self.in_string[token] = open_utf8(self.tokens[token])
        self.most = int(self.anywhere.max(initial=0))
        self._by_first: dict[int, list[tuple[int, bytes]]] = {}
        self._prefixes: dict[bytes, np.ndarray] = {}

    def prefixes(self, suffix: bytes) -> np.ndarray:
        """The tokens whose bytes begin ``suffix`` (non-empty ones), as ids."""
        found = self._prefixes.get(suffix)
        if found is None:
            candidates = self._first(suffix[0]) if suffix else []
            found = np.array([t for t, data in candidates if suffix.startswith(data)], np.int64)
            if len(self._prefixes) > 4096:  # closings repeat; bound the memory all the same
                self._prefixes.clear()
            self._prefixes[suffix] = found
        return found

    def _first(self, byte: int) -> list[tuple[int, bytes]]:
        """The tokens that begin with ``byte`` (found on first use: closings begin with
        a few bytes only)."""
        found = self._by_first.get(byte)
        if found is None:
            lead = bytes([byte])
            found = [(t, data) for t, data in enumerate(self.tokens) if data[:1] == lead]
            self._by_first[byte] = found
        return found


class Closing:
    """One ``json_object`` request's closing within ``budget`` tokens."""

    def __init__(self, index: VocabIndex, budget: int, eos: list[int]) -> None:
        self.index, self.left, self.eos = index, budget, eos
        self.closer = JsonCloser()

    def consumed(self, token: int) -> None:
        """The token sampled the step before (its bytes read into the closer)."""
        tokens = self.index.tokens
        self.closer.feed(tokens[token] if 0 <= token < len(tokens) else b"\x00")

    def narrow(self, allowed: np.ndarray) -> np.ndarray:
        """This step's ``allowed`` (the grammar's, one flag a token) narrowed to the tokens
        that leave room to close: called once a step, in order."""
        left, self.left = self.left, self.left - 1
        if self.closer.broken:  # the grammar let through what no JSON object reads
            return allowed
        suffix = self.closer.suffix()
        room = left - 2 - len(suffix)
        index = self.index
        if room >= index.most:
            return allowed
        width = allowed.shape[0]
        bound = index.in_string if self.closer.in_plain_string else index.anywhere
        keep = np.zeros((width,), dtype=np.bool_)
        size = min(width, bound.shape[0])
        keep[:size] = bound[:size] <= room
        prefixes = index.prefixes(suffix)
        keep[prefixes[prefixes < width]] = True
        keep[[t for t in self.eos if t < width]] = True
        narrowed = allowed & keep
        return narrowed if narrowed.any() else allowed
