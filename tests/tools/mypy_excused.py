"""The GUI modules mypy still excuses: print, or rewrite, their list in pyproject.toml.

`make lint` type-checks `core/` and `gui/` strictly, but for a list of GUI modules written
before the window was typed (an override with `ignore_errors = true`, the way napari keeps
its own). The list must only shrink, and by hand it would drift: this runs mypy with the
project's configuration *without* the list and keeps the GUI modules that still have errors.

    python -m tests.tools.mypy_excused          # print the list, in pyproject's format
    python -m tests.tools.mypy_excused --write  # replace the list in pyproject.toml
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"

# The excused block: an override whose module list is followed by `ignore_errors = true`.
_BLOCK = re.compile(
    r"^\[\[tool\.mypy\.overrides\]\]\nmodule = \[\n(?P<modules>(?:    \"[\w.]+\",\n)*)\]\n"
    r"ignore_errors = true\n",
    re.MULTILINE,
)
# One mypy error line: `gui/run/pane.py:180: error: ...` (notes and the summary are not).
_ERROR = re.compile(r"^(?P<path>[\w/]+\.py):\d+(?::\d+)?: error: ", re.MULTILINE)


def _block(pyproject: str) -> re.Match[str]:
    match = _BLOCK.search(pyproject)
    if match is None:
        raise SystemExit(
            "pyproject.toml has no excused-modules block ([[tool.mypy.overrides]], "
            "module = [...], ignore_errors = true): restore it, even empty."
        )
    return match


def excused(pyproject: str) -> list[str]:
    """The modules the block excuses now."""
    return re.findall(r"\"([\w.]+)\"", _block(pyproject)["modules"])


def without_list(pyproject: str) -> str:
    """The configuration with the block removed: every module checked."""
    match = _block(pyproject)
    return pyproject[: match.start()] + pyproject[match.end() :]


def with_list(pyproject: str, modules: list[str]) -> str:
    """The configuration with the block's list replaced by `modules`."""
    match = _block(pyproject)
    lines = "".join(f'    "{name}",\n' for name in modules)
    start, end = match.span("modules")
    return pyproject[:start] + lines + pyproject[end:]


def modules_with_errors(mypy_output: str, package: str = "gui") -> list[str]:
    """The dotted names of the modules of `package` that mypy reports an error in, sorted."""
    names = set()
    for path in _ERROR.findall(mypy_output):
        parts = path.removesuffix(".py").split("/")
        if parts[0] != package:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names.add(".".join(parts))
    return sorted(names)


def run_mypy_without_list(pyproject: str) -> str:
    """mypy's report on the whole project with no module excused."""
    with tempfile.TemporaryDirectory(prefix="macmesh-mypy-") as tmp:
        config = Path(tmp) / "pyproject.toml"
        config.write_text(without_list(pyproject))
        # cwd=ROOT: the configuration's `files` are relative to the repository.
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(config)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode not in (0, 1):  # 2: mypy itself failed (bad configuration, crash)
        raise SystemExit(f"mypy failed (exit {out.returncode}): {out.stderr.strip()}")
    return out.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.mypy_excused",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--write", action="store_true", help="replace the list in pyproject.toml")
    args = parser.parse_args(argv)
    pyproject = PYPROJECT.read_text()
    report = run_mypy_without_list(pyproject)
    modules = modules_with_errors(report)
    before = excused(pyproject)
    if modules_with_errors(report, "core"):
        print(
            "core/ has mypy errors too: `mypy` shows them (core is never excused)", file=sys.stderr
        )
    if args.write:
        PYPROJECT.write_text(with_list(pyproject, modules))
        print(f"pyproject.toml: {len(before)} excused modules -> {len(modules)}", file=sys.stderr)
    else:
        print("module = [")
        print("".join(f'    "{name}",\n' for name in modules), end="")
        print("]")
        print(f"{len(modules)} modules with errors ({len(before)} excused now)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
