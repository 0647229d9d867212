"""core.model.manifest: what a model folder is, byte for byte, and what each node needs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.model import manifest as m
from core.model.manifest import FileEntry, HashCache, Manifest, ManifestError, build_manifest


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    model = tmp_path / "My Model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(os.urandom(3000))
    (model / "sub" / "extra.txt").write_text("x")
    (model / ".DS_Store").write_text("finder")
    (model / ".cache").mkdir()
    (model / ".cache" / "junk").write_text("junk")
    return model


def test_lists_names_sizes_and_sha256_without_hidden_files(folder: Path, tmp_path: Path) -> None:
    manifest = build_manifest(folder, HashCache(tmp_path / "h.json"))
    assert manifest.name == "My Model"
    assert manifest.names == ("config.json", "model.safetensors", "sub/extra.txt")
    for entry in manifest.files:
        data = (folder / entry.name).read_bytes()
        assert entry.size == len(data)
        assert entry.sha256 == hashlib.sha256(data).hexdigest()
    assert manifest.total_bytes == sum(e.size for e in manifest.files)
    assert manifest.is_whole and manifest.model_id == manifest.id


def test_the_id_is_the_content_not_the_folder(folder: Path, tmp_path: Path) -> None:
    cache = HashCache(tmp_path / "h.json")
    first = build_manifest(folder, cache)
    moved = folder.rename(tmp_path / "elsewhere")
    assert build_manifest(moved, cache).id == first.id
    data = bytearray((moved / "model.safetensors").read_bytes())
    data[100] ^= 1
    (moved / "model.safetensors").write_bytes(bytes(data))
    assert build_manifest(moved, cache).id != first.id


def test_cached_hashes_are_reused_until_the_file_changes(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_file = tmp_path / "h.json"
    first = build_manifest(folder, HashCache(cache_file))
    assert str((folder / "config.json").resolve()) in json.loads(cache_file.read_text())
    hashed: list[Path] = []
    real = m.sha256_file
    monkeypatch.setattr(m, "sha256_file", lambda p, cb=None: hashed.append(p) or real(p, cb))
    assert build_manifest(folder, HashCache(cache_file)) == first
    assert hashed == []
    (folder / "config.json").write_text('{"model_type": "qwen3"}')  # new size and mtime
    again = build_manifest(folder, HashCache(cache_file))
    assert hashed == [folder / "config.json"] and again.id != first.id


def test_progress_counts_every_byte(folder: Path, tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    manifest = build_manifest(
        folder, HashCache(tmp_path / "h.json"), progress=lambda *a: seen.append(a)
    )
    assert seen[-1] == (manifest.total_bytes, manifest.total_bytes)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_bad_folders_say_why(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not a folder"):
        build_manifest(tmp_path / "nope", HashCache(tmp_path / "h.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match="empty"):
        build_manifest(tmp_path / "empty", HashCache(tmp_path / "h.json"))


@pytest.mark.parametrize("name", ["../x", "/abs", "a\nb", "a//b", "a\\b", ""])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(ManifestError):
        Manifest("x", (FileEntry(name, 1, "0" * 64),))


_names = st.text(alphabet="abcdefghij._-", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)
_entries = st.lists(
    st.builds(
        FileEntry,
        _names,
        st.integers(0, 1 << 40),
        st.text("0123456789abcdef", min_size=64, max_size=64),
    ),
    unique_by=lambda e: e.name,
    max_size=8,
)


@given(_entries, st.text(max_size=20))
def test_json_round_trip_keeps_everything(entries: list[FileEntry], name: str) -> None:
    manifest = Manifest(name, tuple(entries))
    back = Manifest.from_json(manifest.to_json())
    assert back == manifest and back.id == manifest.id
    assert Manifest(name, tuple(reversed(entries))).id == manifest.id  # order does not matter


def test_a_hand_edited_manifest_is_refused() -> None:
    manifest = Manifest("x", (FileEntry("a", 1, "0" * 64),))
    data = manifest.to_dict()
    data["files"][0]["size"] = 2
    with pytest.raises(ManifestError, match="does not match"):
        Manifest.from_dict(data)
    with pytest.raises(ManifestError):
        Manifest.from_json("[1, 2]")
    with pytest.raises(ManifestError):
        Manifest.from_json("{")
    with pytest.raises(ManifestError, match="nested too deeply"):  # json's RecursionError
        Manifest.from_json('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}")


def test_a_subset_keeps_the_models_id() -> None:
    whole = Manifest("x", (FileEntry("a", 1, "0" * 64), FileEntry("b", 2, "1" * 64)))
    part = whole.subset(["b"])
    assert part.names == ("b",) and part.model_id == whole.id != part.id
    assert Manifest.from_json(part.to_json()).model_id == whole.id
    with pytest.raises(ManifestError, match="not in the model"):
        whole.subset(["c"])


WEIGHT_MAP = {
    "model.embed_tokens.weight": "w1.safetensors",
    "model.layers.0.mlp.weight": "w1.safetensors",
    "model.layers.1.mlp.weight": "w2.safetensors",
    "model.layers.2.mlp.weight": "w3.safetensors",
    "model.norm.weight": "w3.safetensors",
}
NAMES = ["config.json", "tokenizer.json", "model.safetensors.index.json", "w1.safetensors",
         "w2.safetensors", "w3.safetensors"]  # fmt: skip


def test_a_stage_needs_its_layers_files_the_shared_ones_and_every_other_file() -> None:
    others = {"config.json", "tokenizer.json", "model.safetensors.index.json"}
    assert m.needed_files(NAMES, WEIGHT_MAP, (1, 2)) == others | {
        "w1.safetensors",
        "w2.safetensors",
        "w3.safetensors",
    }
    assert m.needed_files(NAMES, {**WEIGHT_MAP, "model.norm.weight": "w1.safetensors"}, (2, 3)) == (
        others | {"w1.safetensors", "w3.safetensors"}
    )
    assert m.needed_files(NAMES, WEIGHT_MAP, None) == set(NAMES)  # tensor / single
    assert m.needed_files(NAMES, None, (0, 1)) == set(NAMES)  # no index: one weight file
