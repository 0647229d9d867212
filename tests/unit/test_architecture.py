"""The wall between core and GUI (docs/design.md, rule 1), checked two ways."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QT = ("PySide6", "PyQt5", "PyQt6", "qtpy", "shiboken6", "pyqtgraph", "superqt", "gui")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_in_core_imports_qt_or_the_gui() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & set(QT))
        for path in (ROOT / "core").rglob("*.py")
        if _imports(path) & set(QT)
    }
    assert offenders == {}


def test_import_linter_contracts_are_kept() -> None:
    # The venv's scripts sit next to its python, which need not be on PATH (make runs it directly).
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency: pip install -e '.[dev]'"
    result = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
