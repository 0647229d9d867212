"""Screenshots of the window, as people see it: ``python -m tests.gui.screenshots [OUTDIR]``.

Runs the real app on the xcb platform (real fonts and styling) under Xvfb, which it starts
itself when ``DISPLAY`` is unset (``apt-get install xvfb``), with a real demo job on this
machine, and saves light and dark PNGs of three states to OUTDIR (default
``docs/screenshots``):

- ``idle``: the demo cluster, the demo model, pipeline chosen;
- ``running``: the second answer of a conversation streaming in, live plots;
- ``error``: a rank killed mid-job: the launcher's message and the per-rank log buttons.

Settings, logs and window geometry go to a temporary home; every rank is ended at exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZE = (1440, 900)
FIRST = "What is the capital of France?"
SECOND = "And Italy? Tell me about its capital in a few sentences."


@contextlib.contextmanager
def virtual_display() -> Iterator[None]:
    """An Xvfb display when there is none; nothing to do when there is one."""
    if os.environ.get("DISPLAY"):
        yield
        return
    number = next(n for n in range(99, 140) if not Path(f"/tmp/.X{n}-lock").exists())
    xvfb = subprocess.Popen(
        ["Xvfb", f":{number}", "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        socket = Path(f"/tmp/.X11-unix/X{number}")
        deadline = time.monotonic() + 10
        while not socket.exists():
            if xvfb.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Xvfb did not start (apt-get install xvfb)")
            time.sleep(0.05)
        os.environ["DISPLAY"] = f":{number}"
        yield
    finally:
        xvfb.terminate()
        try:
            xvfb.wait(5)
        except subprocess.TimeoutExpired:
            xvfb.kill()
            xvfb.wait()


def wait_for(app, condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        app.processEvents()
        time.sleep(0.02)


def settle(app, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.02)


def take(outdir: Path) -> list[Path]:
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from core.demo_model import ensure_demo_model
    from core.settings import Settings
    from gui import style
    from gui.app import configure
    from gui.main_window import MainWindow
    from gui.preferences import Preferences
    from gui.run.controller import RunState

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, os.environ["MACMESH_CONFIG_DIR"]
    )
    app = QApplication.instance() or QApplication(sys.argv[:1])
    configure(app, "light")
    model = ensure_demo_model()
    window = MainWindow(Preferences(Settings(max_tokens=64)), demo=True)
    window.resize(*SIZE)
    window.show()
    saved: list[Path] = []

    def shoot(name: str) -> None:
        for theme in (style.LIGHT, style.DARK):
            style.apply(app, theme)
            settle(app, 0.15)
            window.run.redraw()
            path = outdir / f"{name}-{theme.name}.png"
            window.grab().save(str(path))
            saved.append(path)
        style.apply(app, style.LIGHT)

    run = window.run
    try:
        window.model.load(model)
        wait_for(app, lambda: window.model.info is not None, 60, "the demo model")
        window.model.select_strategy("pipeline")
        settle(app, 0.5)
        shoot("idle")
        run.start()
        run.chat.prompt.setText(FIRST)
        run.chat.prompt.returnPressed.emit()
        wait_for(
            app,
            lambda: run.controller.state == RunState.READY and "Paris" in run.chat.text(),
            240,
            "the first answer",
        )
        run.chat.prompt.setText(SECOND)
        run.chat.prompt.returnPressed.emit()
        wait_for(
            app,
            lambda: (
                run.chat.text().count("MacMesh cluster") == 2
                and len(run.chat.text().split("MacMesh cluster")[-1]) > 60
            ),
            240,
            "the second answer to stream",
        )
        shoot("running")
        wait_for(app, lambda: run.controller.state == RunState.READY, 240, "the second answer")
        victim = run.controller.job.ranks[-1].pid
        os.kill(victim, signal.SIGKILL)
        wait_for(app, lambda: run.controller.state == RunState.FAILED, 60, "the failure")
        settle(app, 0.5)
        shoot("error")
    finally:
        if run.busy:
            run.stop()
            wait_for(app, lambda: not run.busy, 30, "the job to stop")
        window.close()
        app.processEvents()
    return saved


def main(argv: list[str]) -> int:
    outdir = Path(argv[0]) if argv else ROOT / "docs" / "screenshots"
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="macmesh-shots-") as home:
        os.environ["MACMESH_CONFIG_DIR"] = str(Path(home) / "config")
        os.environ["MACMESH_LOG_DIR"] = str(Path(home) / "logs")
        os.environ["QT_QPA_PLATFORM"] = "xcb"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        with virtual_display():
            for path in take(outdir.resolve()):
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
