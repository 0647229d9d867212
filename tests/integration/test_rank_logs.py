"""Every rank's log says what the rank did, and a capture carries it (issue 35: a clean
run's rank logs were 0 bytes, its stderr being empty)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.cluster.capture import newest_logs


def test_a_demo_run_writes_each_rank_log_and_the_capture_reads_them(
    demo_model: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    env = {**os.environ, "MACMESH_LOG_DIR": str(logs)}
    run = subprocess.run(
        [sys.executable, "-m", "gui.cli", "demo", "--headless", "--model", str(demo_model),
         "--max-tokens", "6", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout.strip().splitlines()[-1])["text"].strip()
    assert len(answer) > 5
    folder, captured = newest_logs(logs)
    assert folder and sorted(captured) == ["rank0.log", "rank1.log"]
    for name, text in captured.items():
        lines = text.splitlines()
        kinds = [line.split(" ", 2)[1] for line in lines]
        assert "hello:" in kinds and "loaded:" in kinds, (name, text)
        assert kinds[-1] == "stopped:", (name, text)
        assert answer not in text  # never the answer's text
    assert any(line.split(" ", 2)[1] == "done:" for line in captured["rank0.log"].splitlines())
