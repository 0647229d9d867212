"""The local library on real cache layouts: the Hugging Face cache (symlinks into blobs,
refs/main, an interrupted .incomplete blob, a missing blob), LM Studio's folders and an
added folder, with tiny models made by the tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.library.entries import Source, State
from core.library.local import complete_library, find_entry, hub_cache_dir, list_library
from core.settings import Settings, save_settings
from tests.helpers.hf_cache import put_in_hf_cache, repo_sha

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, tiny_models: dict[str, Path]) -> Path:
    """A home with a Hugging Face cache and both LM Studio folders, every kind of entry."""
    home = tmp_path / "home"
    cache = home / ".cache" / "huggingface" / "hub"
    put_in_hf_cache(cache, "mlx-community/tiny-llama", tiny_models["llama"])
    put_in_hf_cache(cache, "org/tiny-qwen3", tiny_models["qwen3"])
    put_in_hf_cache(
        cache, "org/half", tiny_models["llama"], interrupted=["model-00002-of-00002.safetensors"]
    )
    put_in_hf_cache(
        cache, "org/gone", tiny_models["llama"], blob_missing=["model-00001-of-00002.safetensors"]
    )
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "model-Q4_K_M.gguf").write_bytes(b"GGUF" + bytes(64))
    put_in_hf_cache(cache, "org/only-gguf", gguf)
    torch = tmp_path / "torch"
    torch.mkdir()
    shutil.copy(tiny_models["llama"] / "config.json", torch)
    (torch / "pytorch_model.bin").write_bytes(bytes(64))
    put_in_hf_cache(cache, "org/only-torch", torch)
    described = tmp_path / "described"  # what planning from the Hub leaves: config only
    described.mkdir()
    shutil.copy(tiny_models["llama"] / "config.json", described)
    put_in_hf_cache(cache, "org/planned-only", described)
    lms = home / ".lmstudio" / "models" / "lmstudio-community" / "tiny-qwen3-MLX"
    shutil.copytree(tiny_models["qwen3"], lms)
    old = home / ".cache" / "lm-studio" / "models" / "bartowski" / "tiny-GGUF"
    old.mkdir(parents=True)
    (old / "tiny-Q8_0.gguf").write_bytes(b"GGUF" + bytes(64))
    return home


@pytest.fixture
def env(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(home))
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return home


def _by_name(entries: list) -> dict:
    return {(e.source, e.name): e for e in entries}


def test_every_source_and_every_state_is_listed(env: Path, tiny_models: dict[str, Path]) -> None:
    added = env / "mine" / "tiny-copy"
    shutil.copytree(tiny_models["llama"], added)
    entries = _by_name(list_library([str(added)]))
    hf = Source.HUGGING_FACE
    good = entries[(hf, "mlx-community/tiny-llama")]
    assert good.state is State.OK and good.architecture == "llama"
    assert good.revision == repo_sha("mlx-community/tiny-llama")
    assert good.path == hub_cache_dir() / "models--mlx-community--tiny-llama" / "snapshots" / (
        good.revision
    )
    assert good.size_bytes == sum(f.stat().st_size for f in tiny_models["llama"].iterdir())
    assert good.parameters and good.parameters > 0 and good.quantization == "fp32"
    assert entries[(hf, "org/tiny-qwen3")].architecture == "qwen3"

    half = entries[(hf, "org/half")]
    assert half.state is State.BROKEN
    assert "interrupted" in (half.reason or "") and "macmesh models download org/half" in (
        half.reason or ""
    )
    gone = entries[(hf, "org/gone")]
    assert gone.state is State.BROKEN and "damaged" in (gone.reason or "")

    gguf = entries[(hf, "org/only-gguf")]
    assert gguf.state is State.NOT_MLX and "GGUF" in (gguf.reason or "")
    torch = entries[(hf, "org/only-torch")]
    assert torch.state is State.NOT_MLX and "PyTorch" in (torch.reason or "")
    assert (hf, "org/planned-only") not in entries  # a description, not a download

    lms = entries[(Source.LM_STUDIO, "lmstudio-community/tiny-qwen3-MLX")]
    assert lms.state is State.OK and lms.architecture == "qwen3"
    old = entries[(Source.LM_STUDIO, "bartowski/tiny-GGUF")]
    assert old.state is State.NOT_MLX
    mine = entries[(Source.FOLDER, "tiny-copy")]
    assert mine.state is State.OK and mine.path == added
    assert len(entries) == 9
    for entry in entries.values():
        assert "\n" not in entry.summary()


def test_hf_home_and_hf_hub_cache_move_the_cache(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_models: dict[str, Path]
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    put_in_hf_cache(tmp_path / "hf-home" / "hub", "a/one", tiny_models["llama"])
    names = {e.name for e in list_library() if e.source is Source.HUGGING_FACE}
    assert names == {"a/one"}
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    put_in_hf_cache(tmp_path / "elsewhere", "b/two", tiny_models["qwen3"])
    names = {e.name for e in list_library() if e.source is Source.HUGGING_FACE}
    assert names == {"b/two"}


def test_a_missing_or_unreadable_cache_is_an_empty_list(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "nowhere"))
    monkeypatch.setenv("HOME", str(tmp_path / "empty-home"))
    assert list_library(["/no/such/folder"])[0].state is State.BROKEN
    assert list_library() == []


def test_find_entry_prefers_a_usable_copy(env: Path) -> None:
    entries = list_library()
    assert find_entry("org/half", entries).state is State.BROKEN  # type: ignore[union-attr]
    assert find_entry("mlx-community/tiny-llama", entries).usable  # type: ignore[union-attr]
    assert find_entry("nobody/none", entries) is None


def test_macmesh_models_json_finds_the_cache_and_lm_studio(env: Path, tmp_path: Path) -> None:
    config = tmp_path / "config"
    added = env / "mine" / "tiny-copy"
    shutil.copytree(env / ".lmstudio" / "models" / "lmstudio-community" / "tiny-qwen3-MLX", added)
    save_settings(Settings(library_folders=(str(added),)), config / "settings.json")
    result = subprocess.run(
        [sys.executable, "-m", "gui.cli", "models", "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MACMESH_CONFIG_DIR": str(config)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    listed = {(e["source"], e["name"]): e for e in json.loads(result.stdout)}
    assert listed[("huggingface", "mlx-community/tiny-llama")]["mlx"] is True
    assert listed[("lmstudio", "lmstudio-community/tiny-qwen3-MLX")]["architecture"] == "qwen3"
    assert listed[("huggingface", "org/only-gguf")]["state"] == "not_mlx"
    assert listed[("huggingface", "org/half")]["state"] == "broken"
    assert listed[("folder", "tiny-copy")]["mlx"] is True

    text = subprocess.run(
        [sys.executable, "-m", "gui.cli", "models"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MACMESH_CONFIG_DIR": str(config)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0 and text.stderr == ""
    assert "mlx-community/tiny-llama · llama ·" in text.stdout
    assert "org/only-gguf · not an MLX model: GGUF" in text.stdout


def test_a_second_listing_reads_no_header_until_a_file_changes(
    env: Path, monkeypatch: pytest.MonkeyPatch, tiny_models: dict[str, Path]
) -> None:
    import core.library.entries as entries_module

    monkeypatch.setenv("MACMESH_CACHE_DIR", str(env / "macmesh-cache"))
    first = list_library()
    validated: list[Path] = []
    real = entries_module.read_model_info

    def counting(folder: Path, **kwargs: object) -> object:
        validated.append(Path(folder))
        return real(folder, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(entries_module, "read_model_info", counting)
    second = list_library()
    assert validated == []
    assert [(e.name, e.state, e.reason, e.size_bytes) for e in second] == [
        (e.name, e.state, e.reason, e.size_bytes) for e in first
    ]
    usable = {e.name: e.info for e in first if e.info is not None}
    assert {e.name: e.info for e in second if e.info is not None} == usable

    config = next(e for e in second if e.name == "org/tiny-qwen3").path / "config.json"
    text = config.read_text()
    config.unlink()  # a symlink into blobs: replace it by a changed file
    config.write_text(text.replace('"num_hidden_layers": 4', '"num_hidden_layers": 5'))
    third = {e.name: e for e in list_library()}
    assert validated == [config.parent]
    assert third["org/tiny-qwen3"].state is State.BROKEN
    assert "layer(s) 4" in (third["org/tiny-qwen3"].reason or "")


def test_a_quick_listing_reads_no_header_and_completing_it_equals_a_checked_one(
    env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.library.entries as entries_module

    monkeypatch.setenv("MACMESH_CACHE_DIR", str(env / "macmesh-cache"))
    validated: list[Path] = []
    real = entries_module.read_model_info

    def counting(folder: Path, **kwargs: object) -> object:
        validated.append(Path(folder))
        return real(folder, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(entries_module, "read_model_info", counting)
    quick = _by_name(list_library(checked=False))
    hf = Source.HUGGING_FACE
    assert validated == []  # not one header read
    llama = quick[(hf, "mlx-community/tiny-llama")]
    assert (llama.state, llama.checked, llama.architecture) == (State.OK, False, "llama")
    assert llama.info is None and "llama" in llama.summary()
    assert quick[(hf, "org/half")].state is State.BROKEN  # said at once, as are the next
    assert quick[(hf, "org/only-gguf")].state is State.NOT_MLX
    assert quick[(Source.LM_STUDIO, "bartowski/tiny-GGUF")].state is State.NOT_MLX

    done = complete_library(list(quick.values()))
    assert all(entry.checked for entry in done)
    checked = _by_name(list_library())  # from the memo complete_library filled
    to_check = [e.path for e in quick.values() if not e.checked and e.state is not State.NOT_MLX]
    assert sorted(validated) == sorted(to_check)  # each once: the listing after, none
    assert {k: (e.state, e.reason, e.info) for k, e in _by_name(done).items()} == {
        k: (e.state, e.reason, e.info) for k, e in checked.items()
    }
    gone = _by_name(done)[(hf, "org/gone")]
    assert gone.state is State.BROKEN and "damaged" in (gone.reason or "")
    again = _by_name(list_library(checked=False))  # known folders: full entries at once
    assert all(e.checked for e in again.values() if e.state is State.OK)


def test_a_snapshot_that_is_a_symlink_loop_hides_no_healthy_model(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """Issue 26 #15: huggingface_hub's scan stops at a symlink loop (OSError); the loop is
    one damaged entry and the healthy models are still listed, by ``macmesh models`` too."""
    cache = tmp_path / "hf-home" / "hub"
    put_in_hf_cache(cache, "mlx-community/tiny-llama", tiny_models["llama"])
    put_in_hf_cache(cache, "org/tiny-qwen3", tiny_models["qwen3"])
    snapshots = cache / "models--org--looped" / "snapshots"
    snapshots.mkdir(parents=True)
    (snapshots / "a").symlink_to("b")
    (snapshots / "b").symlink_to("a")
    entries = {e.name: e for e in list_library(hub_cache=cache, lm_studio=[])}
    assert entries["mlx-community/tiny-llama"].state is State.OK
    assert entries["org/tiny-qwen3"].state is State.OK
    assert entries["org/looped"].state is State.BROKEN
    assert "symbolic links" in (entries["org/looped"].reason or "")
    shown = subprocess.run(
        [sys.executable, "-m", "gui.cli", "models"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "HF_HOME": str(tmp_path / "hf-home"),
            "HOME": str(tmp_path),
            "MACMESH_CONFIG_DIR": str(tmp_path / "config"),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert "No models found" not in shown.stdout
    assert "mlx-community/tiny-llama · llama ·" in shown.stdout
    assert "org/looped" in shown.stdout and "damaged" in shown.stdout
