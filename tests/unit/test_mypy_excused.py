"""The list of GUI modules mypy excuses, and the script that regenerates it."""

from __future__ import annotations

import tomllib

from tests.tools.mypy_excused import (
    PYPROJECT,
    ROOT,
    excused,
    modules_with_errors,
    with_list,
    without_list,
)

REPORT = """\
gui/run/pane.py:180: error: Returning Any from function declared to return "LivePlots"  [x]
gui/run/pane.py:297: error: Missing type arguments for generic type "dict"  [type-arg]
gui/model/library_view.py:362: note: "list" is invariant
gui/cluster/__init__.py:3:5: error: Name "x" is not defined  [name-defined]
core/run/session.py:10: error: Missing return statement  [return]
Found 4 errors in 3 files (checked 197 source files)
"""


def test_the_modules_with_errors_are_read_from_mypy_s_report() -> None:
    # Notes are not errors; a package's __init__ is the package; core/ is never excused.
    assert modules_with_errors(REPORT) == ["gui.cluster", "gui.run.pane"]
    assert modules_with_errors(REPORT, "core") == ["core.run.session"]
    assert modules_with_errors("Success: no issues found in 197 source files\n") == []


def test_the_list_is_removed_and_replaced_in_place() -> None:
    text = PYPROJECT.read_text()
    bare = tomllib.loads(without_list(text))["tool"]["mypy"]
    assert all(not o.get("ignore_errors") for o in bare.get("overrides", []))
    assert bare["strict"] is True  # the rest of the configuration is kept

    rewritten = with_list(text, ["gui.a", "gui.b.c"])
    assert excused(rewritten) == ["gui.a", "gui.b.c"]
    overrides = tomllib.loads(rewritten)["tool"]["mypy"]["overrides"]
    assert {"module": ["gui.a", "gui.b.c"], "ignore_errors": True} in overrides
    assert excused(with_list(text, [])) == []


def test_the_excused_list_names_existing_gui_modules_in_order() -> None:
    # A renamed or typed module must leave the list: a stale name would excuse nothing.
    names = excused(PYPROJECT.read_text())
    assert names == sorted(set(names))
    for name in names:
        path = ROOT.joinpath(*name.split("."))
        assert name.startswith("gui."), name
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name
