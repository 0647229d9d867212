"""``macmesh serve``'s arguments refused in one line before anything loads: neither a model
nor --demo, --demo with --hosts, a model without --hosts; --shared-prompt-cache is off
unless given."""

from __future__ import annotations

import argparse
import io

import pytest

from core.cli.serve import add_arguments, serve


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ((), "name a model folder with --hosts, or --demo"),
        (("--demo", "--hosts", "a,b"), "--hosts is not for it"),
        (("some-model",), "--hosts is needed with a model"),
    ],
)
def test_arguments_that_cannot_serve_are_one_line_and_exit_2(
    argv: tuple[str, ...], said: str
) -> None:
    err = io.StringIO()
    assert serve(_args(*argv), io.StringIO(), err) == 2
    assert said in err.getvalue() and len(err.getvalue().splitlines()) == 1


def test_the_prompt_cache_is_one_per_key_unless_shared_is_asked_for() -> None:
    assert not _args("--demo").shared_prompt_cache
    assert _args("--demo", "--shared-prompt-cache").shared_prompt_cache
    assert _args("--demo", "tiny-model").model == "tiny-model"  # --demo MODEL
