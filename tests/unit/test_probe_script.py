"""The probe script: valid POSIX sh, every section reported, missing commands rc 127.

Runs the script locally with ``sh`` (Linux here: most macOS commands are missing).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.cluster.probe.script import (
    COMMANDS,
    MACMESH_APP,
    PYTHON,
    SECTIONS,
    ProbeCommand,
    build_probe_script,
)
from core.cluster.probe.sections import split_sections
from core.worker.blas import find_openblas

SHELLS = [
    ["/bin/sh"],
    *([[path]] if (path := shutil.which("dash")) else []),
    *([[path, "--posix"]] if (path := shutil.which("bash")) else []),
]


def _sleeping(seconds: str) -> bool:
    """Whether a ``sleep SECONDS`` process runs on this machine (Linux: /proc)."""
    wanted = f"sleep\0{seconds}\0".encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.read_bytes().endswith(wanted):
                return True
    return False


def run(script: str, shell: list[str] | None = None, env: dict | None = None, **kw):
    return subprocess.run(
        [*(shell or ["/bin/sh"]), "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        **kw,
    )


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: " ".join(s))
def test_the_script_passes_a_syntax_check(shell: list[str]) -> None:
    result = subprocess.run(
        [*shell, "-n"], input=build_probe_script(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: " ".join(s))
def test_every_section_is_reported_and_missing_commands_get_127(shell: list[str]) -> None:
    result = run(build_probe_script(sys.executable), shell)
    assert result.returncode == 0, result.stderr
    sections = split_sections(result.stdout)
    assert list(sections) == list(SECTIONS)
    for command in COMMANDS:
        section = sections[command.section]
        assert section.complete
        program = command.argv[0]
        if program not in (PYTHON, MACMESH_APP) and shutil.which(program) is None:
            assert section.rc == 127, section
            assert f"{program}: command not found" in section.stderr
    assert sections["uname"].rc == 0 and sections["uname"].stdout.split()[0] == os.uname().sysname


def test_the_python_section_reports_versions_as_json() -> None:
    sections = split_sections(run(build_probe_script(sys.executable)).stdout)
    data = json.loads(sections["python"].stdout)
    assert data == {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "mlx": importlib.metadata.version("mlx"),
        "mlx_lm": importlib.metadata.version("mlx-lm"),
        "cores": os.cpu_count(),
        # On Linux, the fast BLAS the worker itself would find (MLX on the CPU).
        "blas": (find_openblas() or {}).get("path"),
        "blas_source": (find_openblas() or {}).get("source"),
    }


def test_a_python_path_with_spaces_and_quotes_is_safe(tmp_path: Path) -> None:
    folder = tmp_path / 'it\'s a "folder" $HOME; rm -rf x'
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    sections = split_sections(run(build_probe_script(str(folder / "python"))).stdout)
    assert sections["python"].rc == 0
    assert json.loads(sections["python"].stdout)["python"] == sys.version.split()[0]


def test_a_missing_python_is_127_and_the_rest_still_runs() -> None:
    sections = split_sections(run(build_probe_script("/nonexistent/python3")).stdout)
    assert sections["python"].rc == 127
    assert "command not found" in sections["python"].stderr
    assert sections["uname"].rc == 0


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs /usr/bin/python3")
@pytest.mark.parametrize(("xcode_rc", "expected_rc"), [(2, 127), (0, 0)])
def test_apples_python_stub_is_not_run_without_command_line_tools(
    tmp_path: Path, xcode_rc: int, expected_rc: int
) -> None:
    """Running the stub would pop an install dialog on the Mac's screen."""
    fake = tmp_path / "xcode-select"
    fake.write_text(f"#!/bin/sh\nexit {xcode_rc}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    script = build_probe_script("/usr/bin/python3")
    sections = split_sections(run(script, env=env).stdout)
    assert sections["python"].rc == expected_rc
    if expected_rc:
        assert "installer stub" in sections["python"].stderr


def test_output_is_returned_byte_for_byte_with_or_without_a_final_newline() -> None:
    commands = (
        ProbeCommand("plain", ("printf", "a\\nb\\n")),
        ProbeCommand("no_newline", ("printf", "a\\nb")),
        ProbeCommand("blank_end", ("printf", "a\\n\\n")),
        ProbeCommand("empty", ("true",)),
        ProbeCommand("fails", ("sh", "-c", "echo out; echo err >&2; exit 3")),
    )
    sections = split_sections(run(build_probe_script(commands=commands)).stdout)
    assert [(s.stdout, s.stderr, s.rc) for s in sections.values()] == [
        ("a\nb\n", "", 0),
        ("a\nb", "", 0),
        ("a\n\n", "", 0),
        ("", "", 0),
        ("out\n", "err\n", 3),
    ]


def test_no_command_can_read_the_script_from_stdin() -> None:
    """Sent to ``sh -s`` over SSH, a command reading stdin would eat the rest of the script."""
    commands = (ProbeCommand("reader", ("cat",)), ProbeCommand("after", ("echo", "still here")))
    result = subprocess.run(
        ["/bin/sh", "-s"], input=build_probe_script(commands=commands), capture_output=True,
        text=True, timeout=30,
    )  # fmt: skip
    sections = split_sections(result.stdout)
    assert sections["reader"].stdout == ""
    assert sections["after"].stdout == "still here\n"


def test_a_hung_command_is_killed_at_its_time_limit_and_nothing_is_left(tmp_path: Path) -> None:
    """The sleeps outlast ``run``'s own 60 s limit: a script that waited for them fails
    there, one that left them running fails the last check (no clock in between)."""
    hang, deaf = f"{600 + os.getpid() % 1000 / 1000:.3f}", f"{700 + os.getpid() % 1000 / 1000:.3f}"
    commands = (
        ProbeCommand("hang", ("sleep", hang), timeout_s=1),
        ProbeCommand("deaf", ("sh", "-c", f"trap '' TERM; exec sleep {deaf}"), timeout_s=1),
        ProbeCommand("next", ("echo", "ok")),
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = run(build_probe_script(commands=commands), env=env)
    sections = split_sections(result.stdout)
    assert sections["hang"].rc == 124 and "timed out" in sections["hang"].stderr
    assert sections["deaf"].rc == 124  # ignores SIGTERM: killed with SIGKILL 2 s later
    assert sections["next"].stdout == "ok\n"
    assert list(tmp_path.iterdir()) == []  # the temporary folder is removed
    assert not _sleeping(hang) and not _sleeping(deaf)


def test_a_temporary_folder_that_cannot_be_made_is_a_fatal_line(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path / "does-not-exist")}
    result = run(build_probe_script(), env=env)
    assert result.returncode == 1
    assert result.stdout.startswith("@@macmesh-fatal cannot create a temporary folder")


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: " ".join(s))
def test_many_quick_commands_never_wait_for_their_watchdog(shell: list[str]) -> None:
    """Regression: a watchdog stopped by a signal that arrives before its trap is set must
    not sleep out its limit (dash), nor run the script's EXIT trap (bash). One watchdog
    slept out (600 s) would fail ``run``'s own 60 s limit."""
    commands = tuple(ProbeCommand(f"quick{i}", ("true",), timeout_s=600) for i in range(100))
    result = run(build_probe_script(commands=commands), shell)
    sections = split_sections(result.stdout)
    assert [s.rc for s in sections.values()] == [0] * 100, result.stderr[-500:]
    assert result.stderr == ""
