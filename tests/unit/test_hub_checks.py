"""Issue 26 #1, #2, #17: what the Hub says is checked against its real format before it
names a path, and a URL's password is never shown (``core.worker.hubblob``)."""

from __future__ import annotations

import pytest

from core.worker.hubblob import (
    HubAnswerError,
    _range_length,
    capped,
    check_answer,
    check_commit,
    check_etag,
    check_file_name,
    check_revision,
    redact,
)

SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "0123456789abcdef" * 4


def test_a_commit_is_40_lowercase_hex() -> None:
    assert check_commit(SHA1) == SHA1
    for bad in ("../../tmp/x/victim.txt", SHA1.upper(), SHA1[:-1], SHA1 + "0", 12, None, ""):
        with pytest.raises(HubAnswerError, match="not a commit id"):
            check_commit(bad)


def test_an_etag_is_a_quoted_git_or_lfs_object_id() -> None:
    assert check_etag(f'"{SHA1}"') == SHA1
    assert check_etag(f'W/"{SHA256}"') == SHA256
    assert check_etag(SHA256) == SHA256
    for bad in ('"../../../tmp/x/evil"', f'"{SHA1}/.."', '"abc"', f'"{SHA256}0"', None, 5):
        with pytest.raises(HubAnswerError, match="not an object id"):
            check_etag(bad)


def test_a_typed_revision_never_leaves_refs() -> None:
    for good in ("main", "v1.0", "refs/pr/1", "feature/x-y_z", SHA1):
        assert check_revision(good) == good
    for bad in ("../x", "a/../../b", "/etc/passwd", "a//b", "-rf", ".hidden", "a/.b", "a\\b", ""):
        with pytest.raises(ValueError, match="not a branch, tag or commit"):
            check_revision(bad)


def test_a_file_name_stays_inside_the_repo() -> None:
    assert check_file_name("sub/model.safetensors") == "sub/model.safetensors"
    for bad in ("../x", "/abs", "a/../../b", "a\\b", "", "a//b", "./a", None):
        with pytest.raises(HubAnswerError, match="not a name inside the repo"):
            check_file_name(bad)


def test_an_answer_naming_a_path_is_refused_before_use() -> None:
    check_answer({"X-Repo-Commit": SHA1, "ETag": f'"{SHA1}"', "X-Linked-Etag": f'"{SHA256}"'})
    check_answer({"ETag": '"anything"'})  # not a file's answer: no path is made of it
    with pytest.raises(HubAnswerError, match="X-Repo-Commit"):
        check_answer({"X-Repo-Commit": "../../tmp/x"})
    with pytest.raises(HubAnswerError, match="ETag"):
        check_answer({"X-Repo-Commit": SHA1, "X-Linked-Etag": '"../../evil"'})
    with pytest.raises(HubAnswerError, match="not a size"):
        check_answer({"X-Repo-Commit": SHA1, "X-Linked-Size": "-1"})


def test_a_body_past_its_promised_size_is_refused_before_it_is_written() -> None:
    seen: list[int] = []

    class Inner:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def update(self, n: int = 1) -> None:
            seen.append(n)

    bar = capped(Inner, 10, "config.json")(total=None, initial=4)
    bar.update(6)
    with pytest.raises(HubAnswerError, match="more than the 10 bytes it promised"):
        bar.update(1)
    assert seen == [6]
    bare = capped(None, 3, "x")()  # no progress class of its own
    bare.set_postfix_str("ok")
    with pytest.raises(HubAnswerError):
        bare.update(4)


def test_a_range_bounds_its_answer() -> None:
    assert _range_length("bytes=0-100000") == 100_001
    assert _range_length("bytes=5-") is None and _range_length(None) is None


def test_a_password_in_a_url_is_never_shown() -> None:
    text = "GET http://someone:hunter2@127.0.0.1:8080/api/models failed; see https://a@b.c/x"
    assert redact(text) == "GET http://127.0.0.1:8080/api/models failed; see https://b.c/x"


def test_a_search_result_of_the_wrong_types_is_named() -> None:
    from types import SimpleNamespace

    from core.library.hub import _hub_model

    good = {"id": "org/name", "downloads": 3, "likes": None, "tags": ["mlx"], "gated": False}
    assert _hub_model(SimpleNamespace(**good)).repo_id == "org/name"
    for field, value, said in (
        ("id", "org/\x1b[31mred", "not a model name"),
        ("id", 42, "not a model name"),
        ("downloads", "many", "downloads as 'many'"),
        ("likes", -1, "likes as -1"),
        ("tags", 7, "tags as int"),
    ):
        with pytest.raises(HubAnswerError, match=said):
            _hub_model(SimpleNamespace(**{**good, field: value}))
