"""Every command watches its sessions one way (``core.cli.steps.follow``): run, demo,
serve, linktest, compare and finetune each hand their task's session to ``follow``, so a
failed check is printed with its fix and a copy with its progress, whichever command it
is. The session is a fake at the task/session boundary (``tests.helpers.watched``):
``Session.start`` emits what a real session emits on its signals (its steps beginning,
``checked`` with a report whose check on one Mac failed, ``copy_progress`` for the other
Mac's copy) and ends NOT_READY with the failed check as its detail, as a real failed
check does. Only ``follow`` turns those signals into lines: a command that stopped
passing it prints none of them."""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from core.cli import compare as cli_compare
from core.cli import demo as cli_demo
from core.cli import finetune as cli_finetune
from core.cli import linktest as cli_linktest
from core.cli import run as cli_run
from core.cli import serve as cli_serve
from core.cli.interrupt import Stage
from core.run.session import Session
from tests.helpers import watched
from tests.helpers.tune_data import write_chat_data

HOSTS = ("127.0.0.2:2222", "127.0.0.3:2222")  # never reached: the session is a fake


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Session]:
    """``Session.start`` a fake (``tests.helpers.watched``); MacMesh's folders in tmp."""
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MACMESH_DATA_DIR", str(tmp_path / "home"))
    monkeypatch.setenv("MACMESH_LOG_DIR", str(tmp_path / "logs"))
    return watched.failing_start(monkeypatch)


def _args(module: ModuleType, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def _hosts() -> list[str]:
    return ["--hosts", ",".join(HOSTS), "--python", "mm-py"]


Command = Callable[[Path, Path, io.StringIO, io.StringIO], int]


def _run(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    return cli_run.run(_args(cli_run, [str(model), *_hosts(), "--max-tokens", "2"]), out, err)


def _demo(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    args = _args(cli_demo, ["--headless", "--model", str(model), "--max-tokens", "2"])
    return cli_demo.run_headless(args, out, err)


def _serve(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    argv = [str(model), *_hosts(), "--port", "0", "--no-key"]
    return cli_serve.serve(_args(cli_serve, argv), out, err)


def _linktest(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    args = _args(cli_linktest, ["--model", str(model), *_hosts()])
    return cli_linktest.run_linktest(args, out, err, Stage("reading the model"))


def _compare(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    args = _args(cli_compare, [str(model), *_hosts(), "--max-tokens", "2"])
    return cli_compare.run_compare(args, out, err, Stage("reading the model"))


def _finetune(model: Path, tmp: Path, out: io.StringIO, err: io.StringIO) -> int:
    data = write_chat_data(tmp / "data")
    argv = [str(model), "--data", str(data), *_hosts(), "--iters", "2"]
    return cli_finetune.run_finetune(_args(cli_finetune, argv), out, err, Stage("reading"))


COMMANDS: dict[str, tuple[Command, int]] = {  # each command, and its exit on a failed check
    "run": (_run, 2),
    "demo": (_demo, 2),
    "serve": (_serve, 2),
    "linktest": (_linktest, 2),
    "compare": (_compare, 2),
    "finetune": (_finetune, 1),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_prints_a_failed_check_with_its_fix_and_a_copys_progress(
    name: str, started: list[Session], demo_model: Path, tmp_path: Path
) -> None:
    command, code = COMMANDS[name]
    out, err = io.StringIO(), io.StringIO()
    assert command(demo_model, tmp_path, out, err) == code, err.getvalue()
    said = err.getvalue()
    assert len(started) == 1, said  # the command stopped at its first start
    [session] = started
    copying = watched.copying(session)
    assert "Traceback" not in said
    # The failed check, its fix under it, and the verdict: format_report's lines.
    assert f"[FAIL] {watched.problem(session)}\n" in said, said
    assert f"       → {watched.fix(session)}\n" in said, said
    assert f"[ok  ] {copying}'s Python has mlx and mlx-lm\n" in said
    assert "Not ready: 1 check failed." in said
    # The copy's progress: a line at each tenth (0 %, 40 %, done), with rate and time left.
    copies = [line for line in said.splitlines() if line.startswith("Copying the model to")]
    assert copies == [
        f"Copying the model to {copying}: copying {done} of 100 MB, 20 MB/s, about 3 s left"
        for done in ("0 B", "40 MB", "100 MB")
    ], said
    if not session.demo:  # on real Macs each step is said as it begins
        assert f"Probing {len(session.hosts)} host(s)…\nChecking the nodes…\n" in said
    assert "Starting" not in said  # nothing was started
    assert out.getvalue() == ""


@pytest.mark.parametrize("name", ["run", "serve", "linktest", "compare", "finetune"])
def test_every_command_on_real_macs_ends_with_the_failed_check_in_one_line(
    name: str, started: list[Session], demo_model: Path, tmp_path: Path
) -> None:
    """After the report, one line says why nothing was started (run and serve: the checks
    above; the others: the session's detail, naming the Mac and its check)."""
    command, _code = COMMANDS[name]
    err = io.StringIO()
    command(demo_model, tmp_path, io.StringIO(), err)
    last = err.getvalue().splitlines()[-1]
    session = started[0]
    if name in ("run", "serve"):
        assert last == "macmesh: the checks above failed; nothing was started", last
    else:
        detail = f"A check failed ({watched.failing(session)}: {watched.problem(session)})"
        assert last.startswith(f"macmesh: {detail}"), last
