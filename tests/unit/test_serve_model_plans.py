"""Each model its own plan in ``macmesh serve`` (issue 37): ``--model PATH@STRATEGY:MACS``
and a models file's ``strategy``, ``nodes`` (the demo) and ``hosts`` (out of
``--hosts``); a hostile models file (deep, a FIFO, oversized, not JSON, an unknown key, a
bad strategy, a host not in ``--hosts``) is one line; the session each model gets runs
its own strategy on its own Macs; two models that fit only on separate Macs are
accepted, and refused, naming the one to leave out, when they share them."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

from core.cli import serve_many
from core.cli.interrupt import Stage
from core.cli.model_plans import OwnPlan, chosen_hosts, split_model
from core.cli.serve import add_arguments
from core.cli.serve_many import model_list, wants_many
from core.run.errors import ClusterError
from core.units import GIB
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def _file(tmp_path: Path, *models: dict[str, object]) -> str:
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": list(models)}))
    return str(path)


@pytest.mark.parametrize(
    ("text", "model", "own"),
    [
        ("a", "a", OwnPlan()),
        ("hf:org/name", "hf:org/name", OwnPlan()),
        ("a@tensor", "a", OwnPlan(Strategy.TENSOR)),
        ("a@single:3", "a", OwnPlan(Strategy.SINGLE, ("3",))),
        ("a@pipeline:1,2", "a", OwnPlan(Strategy.PIPELINE, ("1", "2"))),
        ("a@:2", "a", OwnPlan(None, ("2",))),
        ("/m/a@pipeline:me@h1:2222,h2", "/m/a", OwnPlan(Strategy.PIPELINE, ("me@h1:2222", "h2"))),
    ],
)
def test_a_models_own_plan_on_the_command_line(text: str, model: str, own: OwnPlan) -> None:
    assert split_model(text) == (model, own)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("a@tensr", "strategy 'tensr' is not one of auto, single, pipeline, tensor"),
        ("a@", "after @ comes a strategy"),
        ("a@1,2", "after @ comes a strategy"),
        ("a@pipeline:1,,2", "name the Macs after ':'"),
    ],
)
def test_a_wrong_plan_on_the_command_line_is_one_line(text: str, said: str) -> None:
    with pytest.raises(ClusterError) as refused:
        model_list(_args("--demo", "--model", text, "--model", "b"))
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_folder_whose_name_has_an_at_is_taken_whole(tmp_path: Path) -> None:
    folder = tmp_path / "model@tensor"
    folder.mkdir()
    assert split_model(str(folder)) == (str(folder), OwnPlan())
    assert not wants_many(_args("--demo", "--model", str(folder)))
    assert wants_many(_args("--demo", "--model", "a@tensor"))  # one model, its own plan


def test_the_models_file_gives_each_model_its_strategy_and_macs(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        {"model": "a", "strategy": "pipeline", "nodes": [1, 2]},
        {"model": "b", "strategy": "single", "nodes": [3]},
        {"model": "c", "load": "on-demand", "nodes": 2},
        {"model": "d"},
    )
    named = model_list(_args("--demo", "--nodes", "3", "--models-file", path))
    assert [(n.model, n.own) for n in named] == [
        ("a", OwnPlan(Strategy.PIPELINE, ("1", "2"))),
        ("b", OwnPlan(Strategy.SINGLE, ("3",))),
        ("c", OwnPlan(count=2)),
        ("d", OwnPlan()),
    ]


def test_hosts_are_chosen_out_of_hosts_as_written_or_by_host_alone() -> None:
    hosts = ["me@studio-a", "studio-b:2222", "10.0.0.3"]
    assert chosen_hosts(OwnPlan(macs=("studio-b", "studio-a")), hosts) == hosts[:2]
    assert chosen_hosts(OwnPlan(macs=("10.0.0.3",)), hosts) == ["10.0.0.3"]
    assert chosen_hosts(OwnPlan(), hosts) == hosts
    with pytest.raises(ValueError, match="matches several entries of --hosts"):
        chosen_hosts(OwnPlan(macs=("h",)), ["h:22", "h:2222"])


def _refusal(args: argparse.Namespace) -> str:
    with pytest.raises(ClusterError) as refused:
        model_list(args)
    said = str(refused.value)
    assert "\n" not in said and len(said) < 400, said
    return said


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ({"model": "a", "strategy": "fast"}, "strategy 'fast' is not one of"),
        ({"model": "a", "strategy": 3}, "strategy 3 is not one of"),
        ({"model": "a", "gpu": 1}, "unknown key 'gpu'"),
        ({"model": "a", "nodes": [5]}, "the demo's Macs are 1 to 2"),
        ({"model": "a", "nodes": 3}, "3 Macs asked for; the demo has 2"),
        ({"model": "a", "nodes": [1, 1]}, "Mac 1 is named twice"),
        ({"model": "a", "nodes": ["1"]}, '"nodes" must be a list'),
        ({"model": "a", "nodes": True}, '"nodes" must be a list'),
        ({"model": "a", "hosts": ["h1"]}, 'on the demo say "nodes"'),
    ],
)
def test_a_wrong_plan_in_the_models_file_is_one_line(
    tmp_path: Path, item: dict[str, object], said: str
) -> None:
    assert said in _refusal(_args("--demo", "--models-file", _file(tmp_path, item)))


def test_a_host_not_in_hosts_is_one_line(tmp_path: Path) -> None:
    path = _file(tmp_path, {"model": "a", "hosts": ["studio-z"]})
    said = _refusal(_args("--hosts", "studio-a,studio-b", "--models-file", path))
    assert said == "a: studio-z is not in --hosts (studio-a, studio-b): name it as written there"
    cli = _refusal(_args("--hosts", "studio-a", "--model", "a@tensor:studio-q", "--model", "b"))
    assert "studio-q is not in --hosts" in cli
    nodes = _file(tmp_path, {"model": "a", "nodes": [1]})
    assert '"nodes" is for the demo' in _refusal(_args("--hosts", "h", "--models-file", nodes))


def test_an_unknown_top_level_key_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text(json.dumps({"models": [{"model": "a"}], "strategy": "tensor"}))
    assert "unknown key 'strategy'" in _refusal(_args("--demo", "--models-file", str(path)))


def test_a_deeply_nested_models_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 30_000 + "]" * 30_000)
    said = _refusal(_args("--demo", "--models-file", str(path)))
    assert said.startswith(f"--models-file {path}: cannot be read (nested more deeply")


def test_a_fifo_as_the_models_file_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "fifo.json"
    os.mkfifo(path)  # nobody writes it: reading it would wait for ever
    said = _refusal(_args("--demo", "--models-file", str(path)))
    assert said == f"--models-file {path}: cannot be read (not a regular file (a FIFO))"


def test_an_oversized_models_file_is_refused_by_its_size_before_it_is_read(
    tmp_path: Path,
) -> None:
    """1 GB said by the file system (sparse: nothing written): refused from its size
    (``fstat``), the words of that check, not after reading it."""
    path = tmp_path / "big.json"
    with path.open("wb") as file:
        file.truncate(1 << 30)
    said = _refusal(_args("--demo", "--models-file", str(path)))
    assert said == (
        f"--models-file {path}: cannot be read "
        "(1,073,741,824 bytes, more than the 65,536 it may have)"
    )


def test_a_models_file_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    path.write_text('{"models": [{"model": "a",}]}')
    said = _refusal(_args("--demo", "--models-file", str(path)))
    assert said.startswith(f"--models-file {path}: cannot be read (not JSON")


# -- each model's session: its own strategy on its own Macs ------------------------------------


def _big(name: str, to_run: bool = True) -> object:
    """60 GB of weights: one fits a demo Studio of 96 GB alone, or two Studios' pipeline."""
    return synthetic_model_info(layers=8, layer_bytes=7 * GIB, shared_bytes=4 * GIB, name=name)


def test_each_models_session_has_its_own_strategy_and_macs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serve_many, "resolve_model", _big)
    args = _args(
        "--demo", "--nodes", "3", "--model", "coder@pipeline:1,2", "--model", "writer@single:3"
    )
    specs = serve_many.specs_of(args, io.StringIO(), Stage("reading"))
    coder, writer = (spec.make_session() for spec in specs)
    assert [h.name for h in coder.hosts] == ["Studio A", "Studio B"]
    assert [h.name for h in writer.hosts] == ["Studio C"]
    assert (coder.strategy, writer.strategy) == (Strategy.PIPELINE, Strategy.SINGLE)


def test_two_models_fit_on_separate_macs_and_not_on_the_same_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's Studio A (96 GB), B (64 GB), C (96 GB): two 60 GB models fit when each
    has its own Macs (A+B, C), not when both are on A+B; the later is left out."""
    monkeypatch.setattr(serve_many, "resolve_model", _big)
    apart = _args("--demo", "--nodes", "3", "--model", "coder@:1,2", "--model", "writer@:3")
    assert [s.name for s in serve_many.specs_of(apart, io.StringIO(), Stage("r"))] == [
        "coder",
        "writer",
    ]
    shared = _args("--demo", "--nodes", "3", "--model", "coder@:1,2", "--model", "writer@:1,2")
    with pytest.raises(ClusterError) as refused:
        serve_many.specs_of(shared, io.StringIO(), Stage("r"))
    assert "Leave out writer" in str(refused.value)


# -- the command itself: one line on stderr, exit 2, nothing served ---------------------------


@pytest.mark.parametrize("kind", ["deep", "fifo", "not json", "unknown key", "bad strategy"])
def test_serve_says_a_bad_models_file_in_one_line_and_exits_2(tmp_path: Path, kind: str) -> None:
    from core.cli.serve import serve

    path = tmp_path / "models.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_text(
            {
                "deep": "[" * 30_000 + "]" * 30_000,
                "not json": "{models: []}",
                "unknown key": json.dumps({"models": [{"model": "demo", "gpu": 2}]}),
                "bad strategy": json.dumps({"models": [{"model": "demo", "strategy": "fast"}]}),
            }[kind]
        )
    out, err = io.StringIO(), io.StringIO()
    args = _args("--demo", "--no-key", "--port", "0", "--models-file", str(path))
    assert serve(args, out, err) == 2
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"macmesh: --models-file {path}: "), lines
    assert "Traceback" not in err.getvalue() and out.getvalue() == ""


def test_on_real_macs_each_models_session_has_its_hosts_out_of_hosts() -> None:
    """No probe: the session is only made, on the hosts the model chose."""
    info = _big("coder")
    args = _args("--hosts", "me@studio-a,studio-b:2222,studio-c", "--model", "x", "--model", "y")
    tensor = serve_many.session_maker(
        args, info, OwnPlan(Strategy.TENSOR, ("studio-c", "studio-a"))
    )()
    assert [h.name for h in tensor.hosts] == ["me@studio-a", "studio-c"]
    assert tensor.strategy is Strategy.TENSOR
    every = serve_many.session_maker(args, info)()
    assert [h.name for h in every.hosts] == ["me@studio-a", "studio-b:2222", "studio-c"]
    assert every.strategy is Strategy.AUTO  # --strategy's
