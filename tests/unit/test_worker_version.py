"""What a worker says it is: the content hash the controller ships it under, and the
versions of the Python that runs it."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from core.remote.ship import SOURCE_ROOT, NodeSetup, _parse, version_skew, worker_bundle
from core.worker.version import tree_hash, worker_files


def test_version_prints_one_json_line_with_this_workers_hash() -> None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "core.worker", "--version"],
        capture_output=True, text=True, cwd=SOURCE_ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    [line] = run.stdout.splitlines()
    info = json.loads(line)
    assert info["worker_hash"] == worker_bundle()[0]
    assert info["mlx"] and info["mlx_lm"] and info["macmesh"]
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert "mlx_lm" not in run.stderr  # -X importtime lists every import: mlx-lm is slow


def test_the_bundle_holds_exactly_the_hashed_files_and_any_change_moves_the_hash(
    tmp_path: Path,
) -> None:
    digest, tarball = worker_bundle()
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        names = sorted(tar.getnames())
        tar.extractall(tmp_path, filter="data")
    assert names == sorted(worker_files(SOURCE_ROOT))
    assert "core/__init__.py" in names and "core/worker/main.py" in names
    assert tree_hash(tmp_path) == digest
    serve = tmp_path / "core" / "worker" / "serve.py"
    serve.write_text(serve.read_text() + "\n# changed\n")
    assert tree_hash(tmp_path) not in (None, digest)


def test_no_sources_means_no_hash(tmp_path: Path) -> None:
    shutil.copytree(SOURCE_ROOT / "core" / "worker", tmp_path / "core" / "worker")
    (tmp_path / "core" / "worker" / "main.py").unlink()
    assert tree_hash(tmp_path) is None


def test_the_node_answer_is_read_past_other_output() -> None:
    out = 'hello from a profile\nMACMESH-CACHE-ROOT /Users/me/x\n{"mlx": "0.32.4"}\n'
    assert _parse(out) == ("/Users/me/x", {"mlx": "0.32.4"})
    assert _parse("nothing") == (None, None)
    deep = "{" + '"a":{' * 100_000 + "}" * 100_001  # json's RecursionError: not an answer
    assert _parse(f"{deep}\n{out}") == ("/Users/me/x", {"mlx": "0.32.4"})


def test_version_skew_names_the_nodes_and_the_fix() -> None:
    def setup(host: str, mlx: str) -> NodeSetup:
        return NodeSetup(host, "python3", "/c", "/c/w", {"mlx": mlx, "mlx_lm": "0.32.2"})

    assert version_skew([setup("a", "0.32.4"), setup("b", "0.32.4")]) is None
    said = version_skew([setup("a", "0.32.4"), setup("b", "0.31.0"), setup("c", "0.32.4")])
    assert said.startswith("Every node must run the same mlx, but they differ:")
    assert "0.32.4 on a, c; 0.31.0 on b" in said and "pip install mlx==" in said
