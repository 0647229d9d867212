"""The probe script's output, split back into one section per command.

Tolerant by design: text outside the markers (a login banner, a shell warning) is
ignored, and output that stops mid-section (a dropped SSH session, a probe killed by
its caller) still yields the sections before the cut, with the cut one marked
incomplete rather than lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.cluster.probe.script import BEGIN, END, FATAL, RC_NOT_FOUND, RC_TIMEOUT, STDERR

CUT_OFF = "output cut off"

_MARKER = re.compile(
    rf"^(?P<kind>{re.escape(BEGIN)}|{re.escape(STDERR)}|{re.escape(END)}) "
    r"(?P<name>[A-Za-z0-9_.-]+)(?: rc=(?P<rc>-?\d{1,9}))?@@$",
    re.MULTILINE,
)
_FATAL = re.compile(rf"^{re.escape(FATAL)} (?P<reason>.*)@@$", re.MULTILINE)


@dataclass(frozen=True)
class Unknown:
    """A value the probe could not establish, and why (shown to the user as is)."""

    reason: str

    def __bool__(self) -> bool:  # so `if value:` never mistakes an Unknown for a fact
        return False


@dataclass(frozen=True)
class Section:
    """One command's output. ``rc`` is None when the section was cut off."""

    name: str
    rc: int | None
    stdout: str
    stderr: str

    @property
    def complete(self) -> bool:
        return self.rc is not None


def _drop_added_newline(text: str) -> str:
    """The script prints one newline before each marker: remove exactly that one."""
    return text[:-1] if text.endswith("\n") else text


def split_sections(text: str) -> dict[str, Section]:
    """``{name: Section}`` for every section that began in ``text``.

    A section without its end marker is kept with ``rc=None`` and whatever output
    arrived. A name seen twice keeps its last complete copy.
    """
    sections: dict[str, Section] = {}
    name: str | None = None
    stdout: str | None = None
    start = 0  # where the current stream's text begins

    def close(rc: int | None, stderr: str) -> None:
        assert name is not None
        out = stdout if stdout is not None else ""
        if rc is None and stdout is None:
            out, stderr = stderr, ""  # cut off while still printing stdout
        earlier = sections.get(name)
        if rc is not None or earlier is None or not earlier.complete:
            sections[name] = Section(name, rc, out, stderr)

    for match in _MARKER.finditer(text):
        kind, marker_name = match["kind"], match["name"]
        if kind == BEGIN:
            if name is not None:
                close(None, text[start : match.start()])
            name, stdout, start = marker_name, None, match.end() + 1
        elif name != marker_name:
            continue  # a stray marker from another section: not ours to trust
        elif kind == STDERR and stdout is None:
            stdout, start = _drop_added_newline(text[start : match.start()]), match.end() + 1
        elif kind == END:
            rc = int(match["rc"]) if match["rc"] is not None else None
            stderr = _drop_added_newline(text[start : match.start()])
            if rc is not None and stdout is not None:
                close(rc, stderr)
            else:
                close(None, stderr)
            name, stdout = None, None
    if name is not None:
        close(None, text[start:])
    return sections


def probe_failure(text: str) -> str | None:
    """Why the whole probe failed before running any command (the script's fatal line)."""
    match = _FATAL.search(text)
    return match["reason"] if match else None


def section_problem(section: Section | None, name: str = "") -> str | None:
    """Why a section's output cannot be read at all, or None when a parser may try.

    Other non-zero exit codes are left to the parser: some commands say useful things
    when they fail (``ibv_devices`` with no RDMA stack, ``ifconfig`` with no bridge).
    """
    if section is None:
        return f"{name or 'the command'}: not in the probe output"
    label = section.name
    if not section.complete:
        return f"{label}: {CUT_OFF}"
    if section.rc == RC_NOT_FOUND:
        message = first_line(section.stderr).removeprefix("macmesh-probe: ")
        if not message or message.endswith("command not found"):
            return f"{label}: command not found"
        return f"{label}: {message}"
    if section.rc == RC_TIMEOUT:
        return f"{label}: timed out"
    longest = max(
        (len(m) for m in _DIGITS.findall(section.stdout + "\n" + section.stderr)), default=0
    )
    if longest > DIGITS_CAP:  # bounded before any parser converts one
        return f"{label}: printed a number of {longest:,} digits (at most {DIGITS_CAP} are read)"
    return None


DIGITS_CAP = 40  # a probe's numbers: bytes, counts, ids (a 128-bit value has 39 digits)
_DIGITS = re.compile(rf"\d{{{DIGITS_CAP + 1},}}")


def first_line(text: str, limit: int = 160) -> str:
    """The first non-blank line of a command's message, shortened for a reason string."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""
