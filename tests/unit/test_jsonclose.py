"""The shortest closing of a cut JSON text (core/worker/jsonclose.py, issue 34)."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.worker.jsonclose import MAX_GROWTH, JsonCloser, open_utf8

CASES = [
    (b"", b"{}"),
    (b"{", b"}"),
    (b' { "a', b'":0}'),
    (b'{"a"', b":0}"),
    (b'{"a" :', b"0}"),
    (b'{"a":1', b"}"),
    (b'{"a":0', b"}"),
    (b'{"a":1.', b"0}"),
    (b'{"a":-', b"0}"),
    (b'{"a":1e', b"0}"),
    (b'{"a":2.5E+', b"0}"),
    (b'{"a":tr', b"ue}"),
    (b'{"a":n', b"ull}"),
    (b'{"a":f', b"alse}"),
    (b'{"a":1,', b'"":0}'),
    (b'{"a":1 , ', b'"":0}'),
    (b'{"a":[', b"]}"),
    (b'{"a":[1,', b"0]}"),
    (b'{"a":[[true', b"]]}"),
    (b'{"a":"x\\', b'n"}'),
    (b'{"a\\', b'n":0}'),
    (b'{"a":"\\u12', b'00"}'),
    (b'{"a":"\xc3', b'\x80"}'),
    (b'{"a":"\xe4', b'\x80\x80"}'),
    (b'{"a":"\xe0', b'\xa0\x80"}'),
    (b'{"a":"\xed', b'\x80\x80"}'),
    (b'{"a":"\xf0', b'\x90\x80\x80"}'),
    (b'{"a":"\xf4\x8f', b'\x80\x80"}'),
    (b'{"a":{"b":[{', b"}]}}"),
    (b'{"a":1}', b""),
    (b'{"a":1}\n', b""),
]


@pytest.mark.parametrize(("prefix", "suffix"), CASES)
def test_each_kind_of_cut_gets_its_shortest_closing(prefix: bytes, suffix: bytes) -> None:
    closer = JsonCloser()
    assert closer.feed(prefix)
    assert closer.suffix() == suffix
    assert isinstance(json.loads(prefix + suffix), dict)


@pytest.mark.parametrize(("prefix", "suffix"), [c for c in CASES if max(c[0], default=0) < 0x80])
def test_no_shorter_closing_parses(prefix: bytes, suffix: bytes) -> None:
    """Every shorter text over the bytes a closing could use leaves it no object."""
    for size in range(len(suffix)):
        for tail in itertools.product(b'0":}],nrue\\ {', repeat=size):
            try:
                parsed = json.loads(prefix + bytes(tail))
            except ValueError:
                continue
            assert not isinstance(parsed, dict), prefix + bytes(tail)


@pytest.mark.parametrize(
    "text",
    [
        b"{,",
        b'{"a":01',
        b'{"a":"\x01',
        b'{"a":tx',
        b"{}}",
        b'{"a" 1',
        b'{"a":"\xc0',
        b"[1]",
        b'"a"',
        b'{"a":[1,]',
    ],
)
def test_bytes_no_json_continues_with_are_refused(text: bytes) -> None:
    closer = JsonCloser()
    assert not closer.feed(text)
    assert not closer.feed(b"}")  # stays refused


def test_a_copy_goes_on_alone() -> None:
    closer = JsonCloser()
    closer.feed(b'{"a":[')
    other = closer.copy()
    assert other.feed(b'1,{"b":')
    assert closer.suffix() == b"]}" and other.suffix() == b"0}]}"


def test_open_utf8_counts_the_missing_continuation_bytes() -> None:
    assert open_utf8(b"abc") == 0
    assert open_utf8("é".encode()[:1]) == 1
    assert open_utf8("中".encode()[:1]) == 2
    assert open_utf8("中".encode()[:2]) == 1
    assert open_utf8("x中".encode()) == 0
    assert open_utf8("😀".encode()[:3]) == 1


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
OBJECTS = st.dictionaries(st.text(max_size=4), JSON, max_size=4)


def _dump(value: Any, rng: random.Random) -> str:
    """JSON with random whitespace, separators' spacing, escapes and number forms."""

    def ws() -> str:
        return rng.choice(["", "", "", " ", "\n  ", "\t", "\r\n"])

    if isinstance(value, dict):
        items = [ws() + _dump(k, rng) + ws() + ":" + ws() + _dump(v, rng) for k, v in value.items()]
        return "{" + ",".join(i + ws() for i in items) + ws() + "}"
    if isinstance(value, list):
        return "[" + ws() + ",".join(ws() + _dump(v, rng) + ws() for v in value) + "]"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
        return text.replace("/", "\\/") if rng.random() < 0.3 else text
    if isinstance(value, float):
        return rng.choice([repr(value), f"{value:E}", f"{value:.3e}", json.dumps(value)])
    return json.dumps(value)


def _closes_every_prefix(data: bytes) -> None:
    closer = JsonCloser()
    before = closer.suffix()
    for cut in range(len(data) + 1):
        suffix = closer.suffix()
        assert isinstance(json.loads(data[:cut] + suffix), dict), (data[:cut], suffix)
        if cut:
            assert len(suffix) - len(before) <= MAX_GROWTH[data[cut - 1]], data[:cut]
        before = suffix
        if cut < len(data):
            assert closer.feed(data[cut : cut + 1]), data[: cut + 1]
    assert closer.suffix() == b""


@settings(max_examples=150, deadline=None)
@given(OBJECTS, st.integers(0, 2**32))
def test_every_prefix_of_an_object_closes_into_an_object(value: Any, seed: int) -> None:
    data = _dump(value, random.Random(seed)).encode()
    _closes_every_prefix(data)
    whole = JsonCloser()  # fed in uneven pieces: the same closing
    rng, at = random.Random(seed), 0
    while at < len(data):
        step = rng.randint(1, 7)
        assert whole.feed(data[at : at + step])
        at += step
    assert whole.suffix() == b""


@settings(max_examples=20, deadline=None)
@given(OBJECTS, st.integers(0, 2**32))
def test_any_byte_that_continues_a_prefix_grows_its_closing_by_at_most_its_bound(
    value: Any, seed: int
) -> None:
    """Not only the next byte of the text: every byte the closer accepts there."""
    data = _dump(value, random.Random(seed)).encode()
    closer = JsonCloser()
    for cut in range(len(data) + 1):
        length = len(closer.suffix())
        for byte in range(256):
            other = closer.copy()
            if other.feed(bytes([byte])):
                assert len(other.suffix()) - length <= MAX_GROWTH[byte], (data[:cut], byte)
                if cut % 5 == 0:
                    parsed = json.loads(data[:cut] + bytes([byte]) + other.suffix())
                    assert isinstance(parsed, dict)
        if cut < len(data):
            closer.feed(data[cut : cut + 1])
