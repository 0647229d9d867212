"""Small JSON files the core owns (settings, known hosts), written so a crash never
leaves half a file: a reader sees the old content or the new, never a mix; and the one
way MacMesh opens a file it reads (``open_regular``, ``read_json``): a regular file only,
of a bounded size, nesting and number length, or one line naming it and what is wrong."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to a temporary sibling, flush it to disk, then
    rename it over ``path`` (atomic on POSIX file systems)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# -- reading what arrives from a file: hostile until checked (issue 33, item 6) -------------

FILE_CAP = 16 << 20  # a settings, capture manifest or journal-sized file; callers pass more
DEPTH_CAP = 64  # nesting of a JSON document MacMesh reads
DIGITS_CAP = 40  # digits of a number in one (more than any count or size MacMesh keeps)


class FileProblem(ValueError):
    """A file MacMesh cannot read, in one line naming it and what is wrong."""

    def __init__(self, path: Path | str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = Path(path)
        self.what = what


def open_regular(path: Path, cap: int = FILE_CAP) -> BinaryIO:
    """``path`` opened for reading only if it is a regular file (a FIFO, a device or a
    folder is refused at once: opening never blocks) of at most ``cap`` bytes. A link
    to such a file is followed (a user's own training data may be one). FileProblem."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise FileProblem(path, error.strerror or str(error)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileProblem(path, f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > cap:
            raise FileProblem(path, f"{info.st_size:,} bytes, more than the {cap:,} it may have")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: Path, cap: int = FILE_CAP) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes (``open_regular``)."""
    with open_regular(path, cap) as file:
        data = file.read(cap + 1)
    if len(data) > cap:  # it grew after the check
        raise FileProblem(path, f"more than the {cap:,} bytes it may have")
    return data


def read_json(
    path: Path, cap: int = FILE_CAP, depth: int = DEPTH_CAP, digits: int = DIGITS_CAP
) -> Any:
    """A JSON document from a regular file of at most ``cap`` bytes, nested at most
    ``depth`` deep, with numbers of at most ``digits`` digits. FileProblem naming the
    file and what is wrong."""
    text = read_capped(path, cap)
    try:
        return loads_bounded(text, depth, digits)
    except ValueError as error:
        raise FileProblem(path, str(error)) from None


def loads_bounded(text: str | bytes, depth: int = DEPTH_CAP, digits: int = DIGITS_CAP) -> Any:
    """``json.loads`` with the nesting and the numbers' length bounded before anything is
    built from them; ValueError in words otherwise."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"not UTF-8 text (byte {error.start})") from None
    try:
        value = json.loads(
            text,
            parse_int=lambda s: int(_short(s, digits)),
            parse_float=lambda s: float(_short(s, digits)),
            parse_constant=_no_constant,
        )
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at line {error.lineno})") from None
    except RecursionError:
        raise ValueError(f"nested more deeply than the {depth} levels allowed") from None
    if _depth(value) > depth:
        raise ValueError(f"nested more deeply than the {depth} levels allowed")
    return value


def bounded_number(text: str, digits: int = DIGITS_CAP) -> int:
    """An integer written in ``text`` (a probe's ``sysctl`` value), refused before
    conversion when longer than ``digits`` digits; ValueError in words."""
    text = text.strip()
    return int(_short(text, digits))


def create_exclusive(path: Path, mode: int = 0o600) -> BinaryIO:
    """A new file at ``path`` with ``mode``, for writing: never an existing file, never
    through a link (a planted symlink's target is not touched). FileExistsError where
    something is there (the caller asks before it removes it)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    return os.fdopen(fd, "wb")


def _short(text: str, digits: int) -> str:
    if sum(c.isdigit() for c in text) > digits:
        raise ValueError(f"a number of {len(text):,} characters, more than {digits} digits")
    return text


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON has")


def _depth(value: Any) -> int:
    """How deeply ``value``'s lists and dicts nest (without recursion)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            level += 1
            deepest = max(deepest, level)
            stack.extend(
                (child, level) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def _kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a file"
