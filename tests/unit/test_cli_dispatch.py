"""gui.cli: which words start the window, which start a subcommand."""

from __future__ import annotations

import pytest

from gui import cli


@pytest.fixture
def window(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record what the window would have been started with, instead of starting it."""
    calls: list[list[str]] = []

    def fake_gui_main(argv: list[str]) -> int:
        calls.append(list(argv))
        return 0

    monkeypatch.setattr(cli, "_gui_main", lambda: fake_gui_main)
    return calls


@pytest.mark.parametrize(
    "argv",
    [[], ["--demo"], ["--theme", "dark"], ["--interfaces", "127.0.0.1"]],
)
def test_the_windows_options_reach_the_window(window: list[list[str]], argv: list[str]) -> None:
    assert cli.main(argv) == 0
    assert window == [argv]


def test_version_and_help_stay_with_the_command(
    window: list[list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("macmesh ")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "--interfaces" in capsys.readouterr().out
    assert window == []


def test_demo_without_headless_opens_the_window_in_demo_mode(window: list[list[str]]) -> None:
    assert cli.main(["demo"]) == 0
    assert window == [["--demo"]]
