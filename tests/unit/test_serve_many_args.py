"""Several models' arguments (issue 37): Ollama's keep_alive, ``--models-file`` (hostile
input: one line each), and when ``serve`` serves several models."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from core.cli.serve import add_arguments
from core.cli.serve_many import NamedModel, model_list, wants_many
from core.run.errors import ClusterError
from core.serve.keep_alive import DEFAULT_KEEP_ALIVE_S, FOREVER, parse_keep_alive


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def _plain(named: list[NamedModel]) -> list[tuple[str, bool, float]]:
    return [(n.model, n.at_start, n.keep_alive_s) for n in named]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        ("0", 0.0),
        (90, 90.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("250ms", 0.25),
        (-1, FOREVER),
        ("-1m", FOREVER),
    ],
)
def test_keep_alive_as_ollama_takes_it(value: object, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "m", True, [], {"a": 1}])
def test_a_keep_alive_that_is_not_a_duration_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="keep_alive"):
        parse_keep_alive(value)


def test_one_model_is_the_single_model_server_and_two_are_several() -> None:
    assert not wants_many(_args("--demo"))
    assert not wants_many(_args("--demo", "--model", "a"))
    assert wants_many(_args("--demo", "--model", "a", "--model", "b"))
    assert wants_many(_args("--demo", "--model", "a", "--loadable", "b"))


def test_the_models_with_their_load_and_keep_alive() -> None:
    args = _args("--demo", "--model", "a", "--model", "b", "--loadable", "c", "--keep-alive", "10m")
    assert _plain(model_list(args)) == [("a", True, 600.0), ("b", True, 600.0), ("c", False, 600.0)]
    first = model_list(_args("--demo", "--model", "a", "--model", "b"))[0]
    assert first.keep_alive_s == DEFAULT_KEEP_ALIVE_S


def test_a_models_file(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text(
        json.dumps(
            {"models": [{"model": "a"}, {"model": "b", "load": "on-demand", "keep_alive": 0}]}
        )
    )
    assert _plain(model_list(_args("--demo", "--models-file", str(path)))) == [
        ("a", True, DEFAULT_KEEP_ALIVE_S),
        ("b", False, 0.0),
    ]


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"models": []}),
        json.dumps({"models": [{"model": 3}]}),
        json.dumps({"models": [{"model": "a", "load": "later"}]}),
        json.dumps({"models": [{"model": "a", "keep_alive": "soon"}]}),
        "x" * (70 << 10),
    ],
)
def test_a_bad_models_file_is_one_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "models.json"
    path.write_text(content)
    with pytest.raises(ClusterError) as refused:
        model_list(_args("--demo", "--models-file", str(path)))
    assert str(refused.value).startswith("--models-file") and "\n" not in str(refused.value)


def test_a_missing_models_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="cannot be read"):
        model_list(_args("--demo", "--models-file", str(tmp_path / "none.json")))


def test_serve_refuses_models_that_do_not_fit_together_naming_the_one_to_leave_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the demo's Studio A (96 GB) and B (64 GB): 60 GB models fit one at a time, not
    two together; the later named is left out, before anything loads."""
    import io

    from core.cli import serve_many
    from core.cli.interrupt import Stage
    from core.units import GIB
    from tests.helpers.header_models import synthetic_model_info

    def big(name: str, to_run: bool = True) -> object:
        return synthetic_model_info(layers=8, layer_bytes=7 * GIB, shared_bytes=4 * GIB, name=name)

    monkeypatch.setattr(serve_many, "resolve_model", big)
    args = _args("--demo", "--model", "coder", "--model", "writer", "--loadable", "agent")
    with pytest.raises(ClusterError) as refused:
        serve_many.specs_of(args, io.StringIO(), Stage("reading"))
    assert "Leave out writer" in str(refused.value) and "coder" in str(refused.value)
    one = _args("--demo", "--model", "coder", "--loadable", "writer")
    specs = serve_many.specs_of(one, io.StringIO(), Stage("reading"))
    assert [(s.name, s.load_at_start) for s in specs] == [("coder", True), ("writer", False)]
