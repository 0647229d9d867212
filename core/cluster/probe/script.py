"""The probe script: every fact about a node in one SSH round trip (docs/design.md, Probing).

A pure builder of POSIX ``sh`` text. It must run on a Mac before Python is installed
there, under macOS's /bin/sh (bash in POSIX mode, or dash), so it uses no bashisms.
Each command's stdout and stderr are printed between markers with its exit code::

    @@macmesh-begin NAME@@
    <stdout>
    @@macmesh-stderr NAME@@
    <stderr>
    @@macmesh-end NAME rc=N@@

A newline is always printed before the ``stderr`` and ``end`` markers, so markers
start a line even when a command's output does not end with one; the reader removes
exactly that newline (``core.cluster.probe.sections``). A command that is not installed gets
rc 127 and a "command not found" line on stderr; one that outlives its time limit is
killed and gets rc 124. Outputs go to files in a private temporary folder first, so a
killed command's stray children never hold the SSH channel open.

Send the text to ``/bin/sh -s`` on stdin (every command reads /dev/null, never the
script), or run it with ``sh -c``.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from core.bundle import APP_BINARIES
from core.worker.blas import PIP_LIBRARY, PIP_OPENBLAS, SYSTEM_OPENBLAS

BEGIN = "@@macmesh-begin"
STDERR = "@@macmesh-stderr"
END = "@@macmesh-end"
FATAL = "@@macmesh-fatal"
PYTHON = "$_mm_py"  # stands for the node's Python in a command's argv
MACMESH_APP = "$_mm_app"  # stands for the node's MacMesh.app binary (core.bundle)
RC_TIMEOUT = 124
RC_NOT_FOUND = 127

# Asks the node's Python for its version and the mlx / mlx-lm versions, without
# importing mlx (an import can take seconds and fail for reasons of its own); on Linux
# (MLX on the CPU), its cores and the fast BLAS a rank there would preload
# (core.worker.blas.find_openblas, which the worker is not yet there to run).
PYTHON_CODE = f"""\
import json, os, sys
import importlib.metadata as m
def v(name):
    try:
        return m.version(name)
    except Exception:
        return None
def blas():
    if not sys.platform.startswith("linux"):
        return None, None
    try:
        files = m.distribution({PIP_OPENBLAS!r}).files or []
    except Exception:
        files = []
    for f in files:
        if f.name == {PIP_LIBRARY!r} and os.path.isfile(str(f.locate())):
            return os.path.realpath(str(f.locate())), "pip {PIP_OPENBLAS}"
    for path in {SYSTEM_OPENBLAS!r}:
        if os.path.exists(path):
            return os.path.realpath(path), "system"
    return None, None
path, source = blas()
print(json.dumps({{"python": sys.version.split()[0], "executable": sys.executable,
                  "mlx": v("mlx"), "mlx_lm": v("mlx-lm"), "cores": os.cpu_count(),
                  "blas": path, "blas_source": source}}))
"""


@dataclass(frozen=True)
class ProbeCommand:
    """One section of the probe: its name, the command, and how long it may run."""

    section: str
    argv: tuple[str, ...]
    timeout_s: int = 10


COMMANDS: tuple[ProbeCommand, ...] = (
    ProbeCommand("sw_vers", ("sw_vers",)),
    ProbeCommand(
        "sysctl_hw", ("sysctl", "-n", "hw.memsize", "hw.model", "machdep.cpu.brand_string")
    ),
    # system_profiler can take several seconds on a Mac with many devices.
    ProbeCommand(
        "system_profiler",
        ("system_profiler", "SPHardwareDataType", "SPThunderboltDataType", "-json"),
        timeout_s=90,
    ),
    ProbeCommand("networksetup", ("networksetup", "-listallhardwareports")),
    ProbeCommand("ifconfig_bridge0", ("ifconfig", "bridge0")),
    # Every interface's state and addresses: the ring's paths over the cables (issue 18).
    ProbeCommand("ifconfig", ("ifconfig", "-a")),
    ProbeCommand("rdma_ctl", ("rdma_ctl", "status")),
    ProbeCommand("ibv_devices", ("ibv_devices",)),
    ProbeCommand("ibv_devinfo", ("ibv_devinfo",)),
    ProbeCommand("iogpu", ("sysctl", "iogpu.wired_limit_mb")),
    ProbeCommand("vm_pressure", ("sysctl", "-n", "kern.memorystatus_vm_pressure_level")),
    ProbeCommand("vm_stat", ("vm_stat",)),
    ProbeCommand("uname", ("uname", "-sr")),
    # A Linux host (ring only) has none of the Mac's memory commands.
    ProbeCommand("meminfo", ("cat", "/proc/meminfo")),
    # Free space where MacMesh keeps its cache: the session starts in the home folder.
    ProbeCommand("df", ("df", "-Pk", ".")),
    ProbeCommand("python", (PYTHON, "-c", PYTHON_CODE), timeout_s=30),
    # MacMesh.app on the node runs the worker itself (packaging/entry.py): its worker's
    # versions, without importing mlx. A first launch can wait on Gatekeeper's check.
    ProbeCommand("macmesh_app", (MACMESH_APP, "-m", "core.worker", "--version"), timeout_s=60),
)
SECTIONS: tuple[str, ...] = tuple(command.section for command in COMMANDS)

# The runner: a watchdog per command, outputs via files. The watchdog is stopped with
# USR1, a signal the script itself does not trap: a trapped signal (TERM) that arrives
# between the watchdog's fork and its own trap is lost in dash, and the watchdog would
# then sleep out its whole time limit. The script sets no EXIT trap (it cleans up at its
# end and on HUP/INT/TERM): bash runs an inherited EXIT trap in a subshell killed by a
# signal before it has reset its traps, which would delete the folder mid-probe. The
# watchdog counts one-second sleeps it waits for (interruptibly), so a sleep orphaned by
# the stopping signal outlives it by less than a second, holding nothing open.
_PRELUDE = r"""
_mm_dir=$(mktemp -d "${TMPDIR:-/tmp}/macmesh-probe.XXXXXX" 2>/dev/null) || _mm_dir=
if [ -z "$_mm_dir" ]; then
  _mm_dir="${TMPDIR:-/tmp}/macmesh-probe.$$"
  if ! mkdir -m 700 "$_mm_dir" 2>/dev/null; then
    printf '%s cannot create a temporary folder in %s@@\n' '@@FATAL@@' "${TMPDIR:-/tmp}"
    exit 1
  fi
fi
trap 'rm -rf "$_mm_dir"; exit 130' HUP INT TERM

_mm_skip() {
  printf '@@BEGIN@@ %s@@\n\n@@STDERR@@ %s@@\n%s\n@@END@@ %s rc=%s@@\n' "$1" "$1" "$3" "$1" "$2"
}

_mm_run() {
  _mm_name=$1
  _mm_limit=$2
  shift 2
  if ! command -v "$1" >/dev/null 2>&1; then
    _mm_skip "$_mm_name" 127 "macmesh-probe: $1: command not found"
    return 0
  fi
  printf '@@BEGIN@@ %s@@\n' "$_mm_name"
  rm -f "$_mm_dir/timeout"
  "$@" >"$_mm_dir/out" 2>"$_mm_dir/err" </dev/null &
  _mm_pid=$!
  (
    trap - HUP INT TERM
    trap 'exit 0' USR1
    _mm_tick() {
      _mm_n=0
      while [ "$_mm_n" -lt "$1" ]; do
        sleep 1 &
        wait "$!"
        _mm_n=$((_mm_n + 1))
      done
    }
    _mm_tick "$_mm_limit"
    : >"$_mm_dir/timeout"
    kill -TERM "$_mm_pid" 2>/dev/null
    _mm_tick 2
    kill -KILL "$_mm_pid" 2>/dev/null
  ) </dev/null >/dev/null 2>&1 &
  _mm_dog=$!
  wait "$_mm_pid" 2>/dev/null
  _mm_rc=$?
  kill -USR1 "$_mm_dog" 2>/dev/null
  wait "$_mm_dog" 2>/dev/null
  if [ -f "$_mm_dir/timeout" ]; then
    _mm_rc=124
    printf 'macmesh-probe: %s: timed out after %s s\n' "$1" "$_mm_limit" >>"$_mm_dir/err"
  fi
  cat "$_mm_dir/out"
  printf '\n@@STDERR@@ %s@@\n' "$_mm_name"
  cat "$_mm_dir/err"
  printf '\n@@END@@ %s rc=%s@@\n' "$_mm_name" "$_mm_rc"
  rm -f "$_mm_dir/out" "$_mm_dir/err"
}

# Apple's /usr/bin/python3 is only an installer stub until the Command Line Tools
# are installed: running it would pop a dialog on that Mac's screen.
_mm_python_is_stub() {
  [ "$(command -v "$_mm_py" 2>/dev/null)" = /usr/bin/python3 ] || return 1
  command -v xcode-select >/dev/null 2>&1 || return 1
  ! xcode-select -p >/dev/null 2>&1
}
"""
_PRELUDE = (
    _PRELUDE.replace("@@FATAL@@", FATAL)
    .replace("@@BEGIN@@", BEGIN)
    .replace("@@STDERR@@", STDERR)
    .replace("@@END@@", END)
)

_NO_APP_MESSAGE = "macmesh-probe: MacMesh.app is not installed"
# The first installed app binary, or empty ("$HOME" expands to the node's home), and
# how its section runs it: its path on the first line, then the app (exec: the watchdog
# stops the app itself).
_FIND_APP = (
    "_mm_app=; for _mm_c in "
    + " ".join(f'"{path}"' for path in APP_BINARIES)
    + '; do if [ -x "$_mm_c" ]; then _mm_app=$_mm_c; break; fi; done\n'
    + """_mm_app_run() { printf '%s\\n' "$_mm_app"; exec "$_mm_app" "$@"; }"""
)

_STUB_MESSAGE = (
    "macmesh-probe: /usr/bin/python3 is Apple's installer stub "
    "(no Command Line Tools or Python installed)"
)


def _render_argv(argv: tuple[str, ...]) -> str:
    placeholders = {PYTHON: '"$_mm_py"', MACMESH_APP: "_mm_app_run"}
    return " ".join(placeholders.get(arg) or shlex.quote(arg) for arg in argv)


def build_probe_script(
    python: str | Sequence[str] = "python3", commands: tuple[ProbeCommand, ...] = COMMANDS
) -> str:
    """The probe script's text, ready for ``sh``.

    ``python`` is the interpreter to ask about mlx and mlx-lm on the node (a name looked
    up on PATH, or a path); it is quoted, so any path is safe to pass. A sequence is a
    list of candidates: the first the node has is asked (the last when it has none, so
    the section says which one is missing).
    """
    candidates = [python] if isinstance(python, str) else list(python)
    if not candidates:
        raise ValueError("build_probe_script needs at least one Python to ask")
    lines = [
        "# MacMesh probe (core/cluster/probe/script.py): one round trip, each command "
        "between markers.",
        f"_mm_py={shlex.quote(candidates[-1])}",
    ]
    if len(candidates) > 1:
        quoted = " ".join(shlex.quote(c) for c in candidates[:-1])
        lines.append(
            f"for _mm_c in {quoted}; do "
            'if command -v "$_mm_c" >/dev/null 2>&1; then _mm_py=$_mm_c; break; fi; done'
        )
    lines.append(_PRELUDE)
    lines.append(_FIND_APP)
    for command in commands:
        call = f"_mm_run {command.section} {command.timeout_s} {_render_argv(command.argv)}"
        if PYTHON in command.argv:
            skip = f"_mm_skip {command.section} 127 {shlex.quote(_STUB_MESSAGE)}"
            call = f"if _mm_python_is_stub; then {skip}; else {call}; fi"
        if MACMESH_APP in command.argv:
            skip = f"_mm_skip {command.section} 127 {shlex.quote(_NO_APP_MESSAGE)}"
            call = f'if [ -z "$_mm_app" ]; then {skip}; else {call}; fi'
        lines.append(call)
    lines.append('rm -rf "$_mm_dir"')
    lines.append("exit 0")
    return "\n".join(lines) + "\n"
