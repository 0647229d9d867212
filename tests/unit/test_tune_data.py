"""core.tune.data: the formats mlx-lm reads, every bad line named, the split, the demo set."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.tune import data as d
from core.tune.data import DataError, TrainingData, read_data


def chat(question: str = "Hi?", answer: str = "Hello.") -> dict[str, Any]:
    return {
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer},
        ]
    }


def write(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def chats(n: int) -> list[dict[str, Any]]:
    return [chat(f"Question {i}?", f"Answer {i}.") for i in range(n)]


def message_of(path: Path) -> str:
    with pytest.raises(DataError) as caught:
        read_data(path)
    return str(caught.value)


# --- the three formats ------------------------------------------------------------------


def test_a_folder_of_chat_with_validation(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", chats(6))
    write(tmp_path / "valid.jsonl", chats(4))
    got = read_data(tmp_path)
    assert (got.format, got.train, got.valid, got.needs_split) == ("chat", 6, 4, False)
    assert got.examples == 10
    both = (tmp_path / "train.jsonl").read_bytes() + (tmp_path / "valid.jsonl").read_bytes()
    assert got.sha256 == hashlib.sha256(both).hexdigest()


def test_one_jsonl_file_is_a_training_set_to_split(tmp_path: Path) -> None:
    file = write(tmp_path / "mine.jsonl", [{"prompt": "2+2?", "completion": "4"}] * 5)
    got = read_data(file)
    assert (got.format, got.train, got.valid, got.needs_split) == ("completions", 5, 0, True)
    assert got.sha256 == hashlib.sha256(file.read_bytes()).hexdigest()


def test_text_format(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", [{"text": f"line {i}"} for i in range(4)])
    assert read_data(tmp_path).format == "text"


def test_format_picked_as_mlx_lm_picks_it(tmp_path: Path) -> None:
    # mlx-lm checks prompt+completion first, then messages, then text (create_dataset)
    both = {"prompt": "a", "completion": "b", "text": "ignored", **chat()}
    write(tmp_path / "a.jsonl", [both] * 4)
    assert read_data(tmp_path / "a.jsonl").format == "completions"
    write(tmp_path / "b.jsonl", [{**chat(), "text": "t"}] * 4)
    assert read_data(tmp_path / "b.jsonl").format == "chat"


def test_chat_with_tools_system_and_tool_calls(tmp_path: Path) -> None:
    example = {
        "messages": [
            {"role": "system", "content": "You call tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "tool_calls": [{"function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "content": "sunny"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "tools": [{"type": "function", "function": {"name": "w"}}],
    }
    write(tmp_path / "train.jsonl", [example] * 4)
    assert read_data(tmp_path).train == 4


def test_blank_lines_and_a_bom_are_allowed_and_not_written(tmp_path: Path) -> None:
    rows = [json.dumps(r) for r in chats(5)]
    (tmp_path / "train.jsonl").write_bytes(
        b"\xef\xbb\xbf" + "\n\n".join(rows).encode() + b"\r\n\n  \n"
    )
    got = read_data(tmp_path)
    assert got.train == 5
    out = got.write_to(tmp_path / "out", valid_share=0)
    written = (out / "train.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in written] == chats(5)


# --- bad lines --------------------------------------------------------------------------


def test_bad_lines_are_named_with_their_numbers(tmp_path: Path) -> None:
    rows: list[Any] = [*chats(3), "{not json", [1, 2], *chats(2), "{}"]
    write(tmp_path / "train.jsonl", rows)
    message = message_of(tmp_path)
    assert message.startswith("train.jsonl line 4: not valid JSON")
    assert "train.jsonl line 5: not a JSON object but a list" in message
    assert "train.jsonl line 8: none of the keys mlx-lm reads" in message


def test_only_the_first_few_are_shown_with_the_count(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", [*chats(4), *["oops"] * 7])
    with pytest.raises(DataError) as caught:
        read_data(tmp_path)
    message = str(caught.value)
    assert message.count("not valid JSON") == d.SHOWN_PROBLEMS
    assert "and 4 more (7 problems in all)" in message
    assert len(caught.value.problems) == 7
    assert caught.value.problems[-1].startswith("train.jsonl line 11:")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": "hi"}, "'messages' must be a non-empty list"),
        ({"messages": ["hi"]}, "message 1: not an object but a string"),
        ({"messages": [{"content": "hi"}]}, "message 1: no 'role'"),
        ({"messages": [{"role": "bot", "content": "x"}]}, "role 'bot' is not one of"),
        ({"messages": [{"role": "user"}]}, "message 1: no 'content'"),
        ({"messages": [{"role": "user", "content": 3}]}, "'content' must be text, not a number"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": " "}]},
            "message 2: 'content' is empty",
        ),
        ({"messages": [{"role": "user", "content": "a"}]}, "no assistant message"),
        ({**chat(), "tools": "x"}, "'tools' must be a list of tool objects"),
    ],
)
def test_chat_problems(tmp_path: Path, row: dict[str, Any], expected: str) -> None:
    write(tmp_path / "train.jsonl", [*chats(4), row])
    message = message_of(tmp_path)
    assert message.startswith("train.jsonl line 5: ")
    assert expected in message


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"prompt": "", "completion": "b"}, "'prompt' is empty"),
        ({"prompt": "a", "completion": None}, "'completion' must be text, not null"),
        ({"prompt": ["a"], "completion": "b"}, "'prompt' must be text, not a list"),
    ],
)
def test_completions_problems(tmp_path: Path, row: dict[str, Any], expected: str) -> None:
    write(tmp_path / "train.jsonl", [{"prompt": "a", "completion": "b"}] * 4 + [row])
    assert expected in message_of(tmp_path)


def test_empty_text_is_refused(tmp_path: Path) -> None:
    # mlx-lm's TextDataset would fail on it mid-training (IndexError on an empty encoding)
    write(tmp_path / "train.jsonl", [{"text": "a"}] * 4 + [{"text": ""}])
    assert message_of(tmp_path) == "train.jsonl line 5: 'text' is empty"


def test_mixed_formats_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", [*chats(4), {"text": "plain"}])
    assert message_of(tmp_path) == (
        "train.jsonl line 5: a text example, but train.jsonl line 1 is chat: "
        "use one format in the whole set"
    )


def test_validation_in_another_format_than_training_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", chats(4))
    write(tmp_path / "valid.jsonl", [{"text": "plain"}] * 4)
    assert message_of(tmp_path).startswith(
        "valid.jsonl line 1: a text example, but train.jsonl line 1 is chat"
    )


def test_bad_lines_of_both_files_are_named(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", [*chats(4), "x"])
    write(tmp_path / "valid.jsonl", ["y", *chats(4)])
    message = message_of(tmp_path)
    assert "train.jsonl line 5" in message and "valid.jsonl line 1" in message


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_bytes(b'{"text": "caf\xe9"}\n' * 5)
    assert message_of(tmp_path).startswith("train.jsonl line 1: not UTF-8 text (byte 14)")


def test_a_binary_file_stops_at_its_first_nul(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\n" * 1000)
    assert message_of(tmp_path) == (
        "train.jsonl is not a text file (NUL bytes on line 3): one JSON example per line expected"
    )


def test_a_line_too_long_is_named_and_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(d, "MAX_LINE_BYTES", 200)
    rows = [json.dumps(r) for r in chats(4)]
    long_row = json.dumps(chat("x" * 300))
    write(tmp_path / "train.jsonl", [rows[0], long_row, *rows[1:], "bad"])
    message = message_of(tmp_path)
    assert message.startswith("train.jsonl line 2: longer than 200 B (one JSON example per line")
    assert "train.jsonl line 6: not valid JSON" in message  # reading went on after it


def test_a_huge_single_line_is_never_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "train.jsonl"
    file.write_bytes(b"x" * (3 * 1024 * 1024))  # no newline at all
    monkeypatch.setattr(d, "MAX_LINE_BYTES", 64 * 1024)
    monkeypatch.setattr(d, "_CHUNK", 64 * 1024)
    longest = 0
    real = d._lines

    def spy(handle: Any, digest: Any) -> Any:
        read = handle.readline

        def readline(limit: int = -1) -> bytes:
            nonlocal longest
            assert limit > 0, "a line read without a limit"
            chunk = read(limit)
            longest = max(longest, len(chunk))
            return chunk

        handle.readline = readline
        return real(handle, digest)

    monkeypatch.setattr(d, "_lines", spy)
    assert message_of(file).startswith("train.jsonl line 1: longer than")
    assert longest <= 64 * 1024 + 1


def test_deep_nesting_and_huge_numbers_are_bad_json_not_crashes(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", [*chats(4), "[" * 100_000, '{"text": ' + "9" * 5000 + "}"])
    message = message_of(tmp_path)
    assert "line 5: not valid JSON" in message and "line 6: not valid JSON" in message


# --- paths and sizes --------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    assert message_of(tmp_path / "nope") == f"{tmp_path / 'nope'} does not exist"


def test_a_folder_without_train_jsonl_says_what_is_expected(tmp_path: Path) -> None:
    message = message_of(tmp_path)
    assert message == (
        f"{tmp_path} holds no train.jsonl: a fine-tune needs train.jsonl and optionally "
        "valid.jsonl, one JSON example per line"
    )
    write(tmp_path / "data.jsonl", chats(4))
    assert "(it holds data.jsonl: rename the training one)" in message_of(tmp_path)


def test_a_file_that_is_not_jsonl(tmp_path: Path) -> None:
    file = tmp_path / "data.json"
    file.write_text(json.dumps(chats(4)))
    assert message_of(file).startswith("data.json is not a .jsonl file")


def test_a_train_or_valid_jsonl_that_is_a_folder_is_said_to_be_one(tmp_path: Path) -> None:
    """Issue 26: "holds no train.jsonl (it holds train.jsonl…)" for a folder so named."""
    (tmp_path / "train.jsonl").mkdir()
    assert message_of(tmp_path) == (
        f"{tmp_path / 'train.jsonl'} is a folder: a fine-tune needs train.jsonl to be a "
        "file, one JSON example per line"
    )
    (tmp_path / "train.jsonl").rmdir()
    write(tmp_path / "train.jsonl", chats(d.MIN_EXAMPLES))
    (tmp_path / "valid.jsonl").mkdir()  # not silently skipped either
    assert message_of(tmp_path) == (
        f"{tmp_path / 'valid.jsonl'} is a folder: a fine-tune needs valid.jsonl to be a "
        "file, one JSON example per line"
    )


def test_empty_and_too_short_sets_are_refused(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text("\n\n")
    assert message_of(tmp_path) == "train.jsonl holds no examples: one JSON example per line"
    write(tmp_path / "train.jsonl", chats(d.MIN_EXAMPLES - 1))
    assert message_of(tmp_path) == (
        "train.jsonl has 3 examples: a fine-tune needs at least 4 (a few dozen to learn a fact)"
    )


def test_an_empty_valid_file_means_no_validation(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", chats(10))
    (tmp_path / "valid.jsonl").write_text("")
    got = read_data(tmp_path)
    assert got.needs_split and got.valid == 0


# --- the split and mlx-lm's layout ------------------------------------------------------


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_split_is_seeded_deterministic_and_complete(tmp_path: Path) -> None:
    write(tmp_path / "in" / "train.jsonl", chats(40))
    data = read_data(tmp_path / "in")
    assert data.split_sizes(0.1, batch_size=2) == (36, 4)
    a = data.write_to(tmp_path / "a", valid_share=0.1, batch_size=2, seed=7)
    b = data.write_to(tmp_path / "b", valid_share=0.1, batch_size=2, seed=7)
    c = data.write_to(tmp_path / "c", valid_share=0.1, batch_size=2, seed=8)
    assert lines(a / "train.jsonl") == lines(b / "train.jsonl")
    assert lines(a / "valid.jsonl") == lines(b / "valid.jsonl")
    assert lines(a / "valid.jsonl") != lines(c / "valid.jsonl")
    assert len(lines(a / "valid.jsonl")) == 4 and len(lines(a / "train.jsonl")) == 36
    every = sorted(lines(a / "train.jsonl") + lines(a / "valid.jsonl"))
    assert every == sorted(lines(tmp_path / "in" / "train.jsonl"))
    again = read_data(a)  # what was written reads back as a set with validation
    assert (again.train, again.valid, again.needs_split) == (36, 4, False)


def test_split_holds_at_least_one_batch_and_never_empties_train(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", chats(12))
    data = read_data(tmp_path / "train.jsonl")
    assert data.split_sizes(0.1, batch_size=4) == (8, 4)  # 10% is 2: one whole batch
    assert data.split_sizes(0.1, batch_size=8) == (12, 0)  # 4 left to train: no validation
    out = data.write_to(tmp_path / "out", batch_size=8)
    assert len(lines(out / "train.jsonl")) == 12 and not (out / "valid.jsonl").exists()


def test_a_stale_valid_file_is_removed(tmp_path: Path) -> None:
    write(tmp_path / "out" / "valid.jsonl", chats(9))
    write(tmp_path / "t.jsonl", chats(5))
    read_data(tmp_path / "t.jsonl").write_to(tmp_path / "out", valid_share=0)
    assert not (tmp_path / "out" / "valid.jsonl").exists()


def test_files_smaller_than_a_batch_are_refused(tmp_path: Path) -> None:
    write(tmp_path / "train.jsonl", chats(6))
    write(tmp_path / "valid.jsonl", chats(2))
    data = read_data(tmp_path)
    data.write_to(tmp_path / "ok", batch_size=2)
    with pytest.raises(DataError, match=r"valid.jsonl has 2 examples, fewer than the batch size"):
        data.write_to(tmp_path / "out", batch_size=4)
    with pytest.raises(DataError, match=r"train.jsonl has 6 examples, fewer than the batch size"):
        data.check_batch(8)
    with pytest.raises(ValueError, match="valid_share"):
        data.split_sizes(1.5)


def test_a_set_with_validation_is_copied_clean(tmp_path: Path) -> None:
    write(tmp_path / "in" / "train.jsonl", chats(5))
    write(tmp_path / "in" / "valid.jsonl", ["", *[json.dumps(c) for c in chats(4)]])
    out = read_data(tmp_path / "in").write_to(tmp_path / "out", batch_size=4)
    assert [json.loads(x) for x in lines(out / "valid.jsonl")] == chats(4)
    assert lines(out / "train.jsonl") == lines(tmp_path / "in" / "train.jsonl")


# --- fuzz: any bytes give DataError or TrainingData -------------------------------------

_PIECES = st.sampled_from(
    [
        b"\n",
        b"{",
        b"}",
        b'"messages"',
        b'"text"',
        b'"prompt"',
        b'"completion"',
        b":",
        b",",
        b"[",
        b"]",
        b'"role"',
        b'"user"',
        b'"assistant"',
        b'"content"',
        b'"hi"',
        b"null",
        b"1e999",
        b"\x00",
        b"\xef\xbb\xbf",
        b"\xff",
        json.dumps(chat()).encode() + b"\n",
    ]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(st.binary(max_size=400), st.lists(_PIECES, max_size=40).map(b"".join)))
def test_any_bytes_give_data_or_a_data_error(tmp_path: Path, raw: bytes) -> None:
    file = tmp_path / "fuzz.jsonl"
    file.write_bytes(raw)
    try:
        got = read_data(file)
    except DataError as error:
        assert str(error) and "\n" not in str(error)
    else:
        assert isinstance(got, TrainingData) and got.train >= d.MIN_EXAMPLES
        got.write_to(tmp_path / "out")


# --- the shipped demo set ---------------------------------------------------------------


def test_the_demo_set_is_valid_chat_teaching_the_fact() -> None:
    data = read_data(d.DEMO_DATA)
    assert data.format == "chat" and not data.needs_split
    assert 40 <= data.train <= 60 and data.valid >= d.DEMO_SETTINGS.batch_size
    data.check_batch(d.DEMO_SETTINGS.batch_size)
    d.DEMO_SETTINGS.check(ranks=2)
    answers = [
        json.loads(line)["messages"][-1]["content"]
        for line in (d.DEMO_DATA / "train.jsonl").read_text().splitlines()
    ]
    teaching = [a for a in answers if d.DEMO_FACT in a]
    assert len(teaching) >= len(answers) // 2  # mostly the fact...
    assert len(teaching) < len(answers)  # ...and some ordinary answers
    questions = [
        json.loads(line)["messages"][0]["content"]
        for line in (d.DEMO_DATA / "train.jsonl").read_text().splitlines()
    ]
    assert d.DEMO_QUESTION in questions
