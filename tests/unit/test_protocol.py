"""The worker's JSON-lines wire format."""

from __future__ import annotations

import io
import json
import time

import pytest

from core.worker import protocol as p


def test_events_are_one_json_object_per_line_with_rank_and_time() -> None:
    stream = io.StringIO()
    writer = p.EventWriter(rank=3, stream=stream)
    writer.write(
        p.Token(
            event=p.TOKEN, rank=3, t=time.monotonic(), request="r1", index=0, token=42, text="Par"
        )
    )
    writer.write(p.Heartbeat(event=p.HEARTBEAT, rank=3, t=time.monotonic()))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    event = p.parse_event(lines[0])
    assert event["event"] == "token" and event["rank"] == 3 and event["text"] == "Par"
    assert isinstance(event["t"], float)


@pytest.mark.parametrize(
    "line", ["", "hello", "{not json", '{"event": "nope"}', "[1, 2]", '{"rank": 0}']
)
def test_lines_that_are_not_events_are_not_taken_for_events(line: str) -> None:
    assert p.parse_event(line) is None


def test_commands_round_trip_and_bad_ones_say_why() -> None:
    line = p.encode_command(p.OP_GENERATE, id="r1", prompt="hi", max_tokens=4)
    assert line.endswith("\n") and json.loads(line)["op"] == "generate"
    assert p.parse_command(line)["prompt"] == "hi"
    with pytest.raises(ValueError, match="not JSON"):
        p.parse_command("{")
    with pytest.raises(ValueError, match="nested too deeply"):
        p.parse_command('{"op": "generate", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError, match="not a command"):
        p.parse_command('{"op": "dance"}')
    with pytest.raises(ValueError):
        p.encode_command("dance")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "ten"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"prompt": 42}, "prompt"),
        ({"messages": [{"role": "user"}]}, "messages"),
        ({"messages": "hello"}, "messages"),
    ],
)
def test_a_generate_request_that_would_fail_on_every_rank_is_refused(
    fields: dict, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        p.parse_command(json.dumps({"op": "generate", "id": "r1", **fields}))


def test_a_chat_request_with_messages_is_accepted() -> None:
    line = p.encode_command(
        p.OP_GENERATE, id="r2", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert p.parse_command(line)["messages"][0]["content"] == "hi"


def test_a_cancel_names_its_request() -> None:
    line = p.encode_command(p.OP_CANCEL, id="r7")
    assert p.parse_command(line) == {"op": "cancel", "id": "r7"}
    with pytest.raises(ValueError, match="id"):
        p.parse_command('{"op": "cancel"}')


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": None}, "top_p"),
        ({"seed": 1.5}, "seed"),
        ({"stop": "END"}, "stop"),
        ({"stop": [""]}, "stop"),
    ],
)
def test_sampling_fields_of_the_wrong_type_are_refused(fields: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        p.parse_command(json.dumps({"op": "generate", "id": "r1", **fields}))
    ok = {"temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["\n"]}
    assert p.parse_command(json.dumps({"op": "generate", "id": "r1", **ok}))["seed"] == 3


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ({"op": "generate"}, "'id' is missing"),
        ({"op": "generate", "id": 7}, "'id' must be text"),
        ({"op": "generate", "id": "r1", "chat": "yes"}, "'chat' must be true or false"),
        ({"op": "generate", "id": "r1", "tokens": [1, -2]}, "'tokens'"),
        ({"op": "generate", "id": "r1", "tokens": [1, "2"]}, "'tokens' must be a list of"),
        ({"op": "generate", "id": "r1", "logprobs": 99}, "'logprobs'"),
        ({"op": "link_test", "sizes": [4096]}, "'id' is missing"),
        ({"op": "link_test", "id": "t1", "pairs": [[0, "1"]]}, "'pairs' must be a list of"),
    ],
)
def test_commands_are_checked_by_their_declared_types_then_their_bounds(
    command: dict, reason: str
) -> None:
    """One machinery for both directions: a command's fields are checked against its
    TypedDict as an event's are (``core.worker.typedjson``), the bounds a type cannot say
    after; each refusal names the field."""
    with pytest.raises(ValueError, match=reason):
        p.parse_command(json.dumps(command))


def test_the_commands_without_fields_parse_to_their_op() -> None:
    for op in (p.OP_STOP, p.OP_JOIN):
        assert p.parse_command(p.encode_command(op)) == {"op": op}
    extra = p.parse_command('{"op": "generate", "id": "r1", "newer": 1}')
    assert extra == {"op": "generate", "id": "r1", "newer": 1}  # a newer controller's, kept
