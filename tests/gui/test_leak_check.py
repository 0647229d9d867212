"""The leak check of tests/gui/conftest.py fails tests that leak, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_leaking_tests_fail_and_clean_ones_pass(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    # The leaks below are on purpose and never end by themselves: no need to wait long.
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "MACMESH_LEAK_WAIT_S": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(HERE / "leak_examples.py"),
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--timeout=120",
            f"--junitxml={report}",
        ],
        capture_output=True,
        text=True,
        cwd=HERE.parents[1],
        env=env,
        timeout=300,
    )
    problems: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("error")
        if failure is None:
            failure = case.find("failure")
        problems[case.get("name", "")] = "" if failure is None else failure.get("message", "")
    expected = {
        "test_leaks_a_running_timer": "QTimers still running",
        "test_leaks_a_visible_widget": "top-level widgets still alive",
        "test_leaks_a_dialog": "top-level widgets still alive",
        "test_leaks_a_job_thread": "job threads still alive",
        "test_leaks_background_work": "background tasks still running",
    }
    for test, message in expected.items():
        assert message in problems.get(test, ""), f"{test}: {problems.get(test)!r}"
    assert problems.get("test_clean") == "", problems
