"""gui.app: names, icon, theme, the no-display fallback, and the first-paint probe."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from gui import app as gui_app
from gui import style
from gui.resources import ICON_PNG, ICON_SVG

ROOT = Path(__file__).resolve().parents[2]


def test_configure_names_icon_and_theme(qapp: QApplication) -> None:
    gui_app.configure(qapp, "dark")
    try:
        assert qapp.applicationName() == "MacMesh"
        assert qapp.organizationName() == "MacMesh"
        assert not qapp.windowIcon().isNull()
        assert style.current() is style.DARK
        assert qapp.palette().window().color().name() == style.DARK.window.lower()
    finally:
        gui_app.configure(qapp, "light")


def test_icon_files_exist() -> None:
    assert ICON_SVG.is_file() and ICON_PNG.is_file()
    assert ICON_PNG.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_system_scheme_is_followed_unless_overridden(
    monkeypatch: pytest.MonkeyPatch, qapp: QApplication
) -> None:
    monkeypatch.setenv(style.THEME_ENV, "dark")
    assert style.system_theme() is style.DARK
    monkeypatch.setenv(style.THEME_ENV, "light")
    assert style.system_theme() is style.LIGHT


@pytest.mark.parametrize(
    "env, platform, expected",
    [
        ({"DISPLAY": ":0"}, "linux", True),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
        ({}, "linux", False),
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux", True),
        ({}, "darwin", True),
    ],
)
def test_display_available(
    monkeypatch: pytest.MonkeyPatch, env: dict, platform: str, expected: bool
) -> None:
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "platform", platform)
    assert gui_app.display_available() is expected


def test_without_a_display_the_demo_runs_in_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import core.cli.demo

    monkeypatch.setattr(gui_app, "display_available", lambda: False)
    monkeypatch.setattr(core.cli.demo, "run_headless", lambda args: 7)
    assert gui_app.main([]) == 7


def test_the_window_paints_when_macmesh_starts(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        gui_app.FIRST_PAINT_ENV: "1",
        "MACMESH_CONFIG_DIR": str(tmp_path / "config"),
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    started = time.time()
    out = subprocess.run(
        [sys.executable, "-m", "gui.cli"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(gui_app.FIRST_PAINT_ENV))
    painted = float(line.split()[1])
    assert started < painted < time.time()  # this run painted; how soon: bench_gui (1.5 s)


def test_without_the_xcb_libraries_the_demo_runs_in_the_terminal_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import core.cli.demo

    monkeypatch.setattr(gui_app, "display_available", lambda: True)
    monkeypatch.setattr(
        gui_app, "xcb_problem", lambda: "install them with: sudo apt-get install libxcb-icccm4"
    )
    monkeypatch.setattr(core.cli.demo, "run_headless", lambda args: 7)
    assert gui_app.main([]) == 7
    err = capsys.readouterr().err
    assert "sudo apt-get install libxcb-icccm4" in err and "macmesh demo --headless" in err
