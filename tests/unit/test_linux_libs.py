"""What `macmesh` tells a Linux user whose system lacks the libraries of Qt's xcb plugin."""

from __future__ import annotations

import pytest

from gui import linux_libs as ll

# ldd on PySide6 6.10's libqxcb.so on a Debian 12 box without libxcb-icccm4 and
# libxcb-keysyms1 (this project's machine, 2026-12-03), first lines.
LDD = """\tlinux-vdso.so.1 (0x00007fc6e89aa000)
\tlibQt6XcbQpa.so.6 => /v/PySide6/Qt/plugins/platforms/../../lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibGL.so.1 => /lib/x86_64-linux-gnu/libGL.so.1 (0x00007fc6e884c000)
\tlibxkbcommon-x11.so.0 => /lib/x86_64-linux-gnu/libxkbcommon-x11.so.0 (0x00007fc6e87f9000)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007fc6e87f2000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-util.so.1 => /lib/x86_64-linux-gnu/libxcb-util.so.1 (0x00007fc6e87ea000)
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
"""


def test_the_missing_libraries_are_read_from_ldd_once_each() -> None:
    assert ll.missing_libraries(LDD) == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]
    assert ll.missing_libraries(LDD.replace("not found", "/lib/x.so (0x1)")) == []


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("weird", "weird"),
    ],
)
def test_packages_follow_debians_naming(soname: str, package: str) -> None:
    assert ll.debian_package(soname).lower() == package


@pytest.mark.parametrize(
    ("env", "platform", "expected"),
    [
        ({"DISPLAY": ":0"}, "linux", True),
        ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", False),
        ({"QT_QPA_PLATFORM": "xcb"}, "linux", True),
        (
            {"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "w-0"},
            "linux",
            False,
        ),
        ({"DISPLAY": ":0"}, "darwin", False),
        ({}, "linux", False),
    ],
)
def test_only_an_xcb_session_is_checked(
    monkeypatch: pytest.MonkeyPatch, env: dict, platform: str, expected: bool
) -> None:
    monkeypatch.setattr(ll.sys, "platform", platform)
    assert ll.uses_xcb(env) is expected


def test_the_message_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    if ll.xcb_plugin() is None:
        pytest.skip("PySide6 without its xcb plugin")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("XDG_SESSION_TYPE", raising=False)
    monkeypatch.setattr(ll.sys, "platform", "linux")
    real_run = ll.subprocess.run

    def ldd(command, **kwargs):  # the real ldd, as on a machine lacking two libraries
        out = real_run(command, **kwargs)
        return ll.subprocess.CompletedProcess(command, 0, LDD, out.stderr)

    monkeypatch.setattr(ll.subprocess, "run", ldd)
    message = ll.xcb_problem()
    assert message is not None
    assert "libxcb-icccm.so.4" in message
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1" in message
