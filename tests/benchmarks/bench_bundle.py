"""The built app's size and start times, against the same program run from the venv.

``make package`` first, then ``python -m tests.benchmarks.bench_bundle`` (one JSON
document on stdout; MACMESH_BUNDLE names the bundle folder, MACMESH_BENCH_RUNS the
runs per figure, default 5). Figures:

- ``size_mb``: the bundle folder, and its largest parts;
- ``first_paint_s``: process start to the window's first frame, offscreen
  (``MACMESH_FIRST_PAINT``): the first run after the build (``first``), then the median;
- ``worker_version_s``: ``MacMesh -m core.worker --version``, what a peer's probe pays;
- ``demo_s``: ``demo --headless --json`` in a fresh home (``fresh``: converts the demo
  model first) and again with the model converted (``warm``).

Each figure is measured for the bundle and for ``python -m gui.cli`` from the venv.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = Path(os.environ.get("MACMESH_BUNDLE", ROOT / "build/package/dist/MacMesh"))
RUNS = int(os.environ.get("MACMESH_BENCH_RUNS", "5"))


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MACMESH_")}
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local/state"),
        QT_QPA_PLATFORM="offscreen",
        HF_HUB_OFFLINE="1",
        **extra,
    )
    return env


def _first_paint(argv: list[str], home: Path) -> float:
    started = time.time()
    out = subprocess.run(
        argv, env=_env(home, MACMESH_FIRST_PAINT="1"), capture_output=True, text=True, timeout=300
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("MACMESH_FIRST_PAINT "))
    return float(line.split()[1]) - started


def _timed(argv: list[str], home: Path) -> float:
    started = time.monotonic()
    subprocess.run(argv, env=_env(home), capture_output=True, check=True, timeout=900, cwd=home)
    return time.monotonic() - started


def _series(measure, runs: int) -> dict:
    values = [measure() for _ in range(runs)]
    return {"first": round(values[0], 3), "median": round(statistics.median(values), 3)}


def _size(root: Path) -> dict:
    def total(path: Path) -> int:  # symlinks (PyInstaller's shared libraries) count once
        if path.is_symlink():
            return 0
        if path.is_file():
            return path.stat().st_size
        return sum(total(p) for p in path.iterdir())

    internal = root / "_internal"
    parts = sorted(((total(p), p.name) for p in internal.iterdir()), reverse=True)[:6]
    return {
        "total": round(total(root) / 1e6, 1),
        "largest": {name: round(size / 1e6, 1) for size, name in parts},
    }


def bench_bundle() -> dict:
    binary = BUNDLE / "MacMesh"
    if not binary.is_file():
        raise SystemExit(f"no built app at {binary}: run `make package` first")
    python = [sys.executable]
    programs = {  # the app, and how its worker is started
        "bundle": ([str(binary)], [str(binary), "-m", "core.worker", "--version"]),
        "venv": ([*python, "-m", "gui.cli"], [*python, "-m", "core.worker", "--version"]),
    }
    results: dict = {"bundle": str(BUNDLE), "runs": RUNS, "size_mb": _size(BUNDLE)}
    for label, (app, worker) in programs.items():
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            demo = [*app, "demo", "--headless", "--json", "--max-tokens", "16"]
            sys.stderr.write(f"bench bundle: {label}…\n")
            results[label] = {
                "first_paint_s": _series(lambda a=app, h=home: _first_paint(a, h), RUNS),
                "worker_version_s": _series(lambda w=worker, h=home: _timed(w, h), RUNS),
                "demo_s": {
                    "fresh": round(_timed(demo, home), 2),
                    "warm": round(_timed(demo, home), 2),
                },
            }
    return results


if __name__ == "__main__":
    print(json.dumps(bench_bundle(), indent=2))
