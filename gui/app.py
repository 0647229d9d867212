"""``macmesh`` with no command: the application and its window.

``main(argv)`` is what ``gui.cli`` calls. Flags: ``--demo`` shows the demo cluster at
once (and looks for no Mac), ``--replay FILE.zip`` a capture's Macs in its place
(``core.run.demo.replay_nodes``), ``--theme light|dark`` overrides the system's colour
scheme, ``--interfaces en0,en5`` says where to look for Macs (default: the saved setting, else
``core.cluster.discovery.default_interfaces()``). Environment:
``MACMESH_FIRST_PAINT=1`` prints ``MACMESH_FIRST_PAINT <time.time()>`` when the window has
first painted and quits (the startup benchmark reads it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QSocketNotifier, QTimer
from PySide6.QtWidgets import QApplication, QWidget

from core.settings import load_settings
from gui import style
from gui.linux_libs import xcb_problem
from gui.resources import app_icon

if TYPE_CHECKING:
    from gui.main_window import MainWindow

FIRST_PAINT_ENV = "MACMESH_FIRST_PAINT"
APP_NAME = ORG_NAME = "MacMesh"


def configure(app: QApplication, theme: str | None = None) -> None:
    """Names (QSettings and macOS menus use them), icon, style and theme."""
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setOrganizationName(ORG_NAME)
    app.setOrganizationDomain("macmesh.app")
    app.setWindowIcon(app_icon())
    themes = {"light": style.LIGHT, "dark": style.DARK}
    style.install(app, themes.get(theme or ""))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="macmesh", description="The MacMesh window.")
    parser.add_argument("--demo", action="store_true", help="start with the demo cluster")
    parser.add_argument("--theme", choices=("light", "dark"), help="override the system's")
    parser.add_argument(
        "--interfaces", metavar="IF,...", help="where to look for Macs: en0,en5 or all"
    )
    parser.add_argument(
        "--replay", metavar="FILE.zip", help="show a capture's Macs (macmesh doctor --capture)"
    )
    args, qt_args = parser.parse_known_args(argv)
    replay = None
    if args.replay is not None:
        from core.cluster.capture import CaptureError
        from core.run.demo import replay_nodes

        try:
            replay = replay_nodes(Path(args.replay))
        except CaptureError as error:
            sys.stderr.write(f"macmesh: --replay: {error}\n")
            return 2
    if not display_available():
        return _headless("no display here")
    missing = xcb_problem()
    if missing is not None:
        return _headless(missing)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from gui.help_menu import log_to_file

    log_to_file()
    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0], *qt_args])
    configure(app, args.theme)
    from gui.main_window import MainWindow  # after the QApplication: widgets need it

    demo = args.demo or replay is not None
    window = MainWindow(demo=demo, replay=replay)
    if os.environ.get(FIRST_PAINT_ENV):
        _report_first_paint(window)
    _close_on_signals(window)
    app.aboutToQuit.connect(window.run.shutdown)
    if not demo and not os.environ.get(FIRST_PAINT_ENV):
        _AfterFirstPaint(window, lambda: _start_scanner(window, args.interfaces))
    window.show()
    return app.exec()


def _start_scanner(window: MainWindow, interfaces: str | None) -> None:
    """Look for Macs: the live node service on the interfaces asked for or saved, feeding
    the Cluster pane. Made after the first paint (importing it takes about a second),
    started off the GUI thread (it blocks while zeroconf claims our name), closed at exit
    (ending every probe)."""
    from core.cluster.discovery import choose_interfaces
    from core.cluster.scanner import Scanner

    try:
        chosen = choose_interfaces(interfaces, load_settings().interfaces)
        scanner = Scanner(window.cluster.registry, interfaces=chosen)
    except ValueError as error:
        window.statusBar().showMessage(f"MacMesh cannot look for Macs: {error}")
        return
    window.cluster.set_scanner(scanner)
    window.run.api.set_announcer(scanner.discovery.set_api_port)  # shared: in our TXT
    app = QApplication.instance()
    if app is not None:  # always: the window lives in it
        app.aboutToQuit.connect(scanner.close)

    def failed(error: BaseException) -> None:
        window.statusBar().showMessage(f"MacMesh cannot look for Macs: {error}")

    window.bridge.run_in_background(scanner.start, None, failed)


class _AfterFirstPaint(QObject):
    """Runs ``then`` once the window has painted its first frame."""

    def __init__(self, window: QWidget, then: Callable[[], None]) -> None:
        super().__init__(window)
        self._then = then
        window.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            watched.removeEventFilter(self)
            QTimer.singleShot(0, self._then)
        return False


def display_available() -> bool:
    """Whether Qt can open a window here (it aborts the process when it cannot)."""
    if sys.platform == "darwin" or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _headless(why: str) -> int:
    from core.cli.demo import demo_cli

    sys.stderr.write(
        f"macmesh: {why}; running the demo in the terminal instead (macmesh demo --headless).\n"
    )
    return demo_cli([])


class _FirstPaint(QObject):
    """Prints the wall-clock time once the window's first frame is painted, then quits."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            watched.removeEventFilter(self)
            QTimer.singleShot(0, self._report)  # after the children of this frame painted
        return False

    def _report(self) -> None:
        print(f"{FIRST_PAINT_ENV} {time.time():.6f}", flush=True)
        QApplication.quit()  # static: quits the running application


def _report_first_paint(window: QWidget) -> None:
    watcher = _FirstPaint(window)
    window.installEventFilter(watcher)


def _close_on_signals(window: QWidget) -> None:
    """Ctrl+C or SIGTERM close the window, which stops every rank first.

    Python runs signal handlers only between bytecodes, and Qt's loop runs in C++: the
    handler's wake-up byte on a socket lets Qt notice at once, without polling.
    """
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno())
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, window)

    def wake() -> None:
        with contextlib.suppress(OSError):
            reader.recv(64)

    notifier.activated.connect(wake)
    window._signal_sockets = (reader, writer, notifier)  # type: ignore[attr-defined]
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: window.close())
