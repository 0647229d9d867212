"""core.tune.adapters: mlx-lm's adapter layout plus macmesh.json, read back and listed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.tune import adapters as a
from core.tune.adapters import AdapterError, read_adapter
from core.tune.settings import TuneSettings

# What mlx_lm.lora writes in adapter_config.json (its whole command line, sorted).
MLX_CONFIG: dict[str, Any] = {
    "adapter_path": "adapters",
    "batch_size": 4,
    "data": "data",
    "fine_tune_type": "lora",
    "iters": 30,
    "learning_rate": 0.001,
    "lora_parameters": {"dropout": 0.0, "rank": 8, "scale": 20.0},
    "max_seq_length": 2048,
    "model": "/models/SmolLM2-135M-Instruct-mlx-q4",
    "num_layers": 8,
    "save_every": 100,
    "seed": 0,
    "steps_per_eval": 200,
    "steps_per_report": 10,
    "train": True,
    "val_batches": 25,
}


def make_adapter(folder: Path, config: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / a.WEIGHTS_FILE).write_bytes(b"weights")
    (folder / a.CONFIG_FILE).write_text(json.dumps(MLX_CONFIG if config is None else config))
    return folder


def test_adapters_live_in_the_data_folder(tmp_path: Path) -> None:
    # tests/conftest.py points MACMESH_DATA_DIR at tmp_path / "data"
    assert a.adapters_dir() == tmp_path / "data" / "adapters"
    assert a.adapters_dir().is_dir()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Mascot", "mascot"),
        ("  Mochi the Capybara! ", "mochi-the-capybara"),
        ("Café über SQL", "cafe-uber-sql"),
        ("../../etc/passwd", "etc-passwd"),
        ("日本語", "adapter"),
        ("", "adapter"),
        ("x" * 100, "x" * 60),
    ],
)
def test_slug(name: str, expected: str) -> None:
    assert a.slug(name) == expected


def test_new_folders_are_unique(tmp_path: Path) -> None:
    first = a.new_adapter_folder("My Mascot")
    second = a.new_adapter_folder("my mascot")
    third = a.new_adapter_folder("my-mascot!")
    assert first == a.adapters_dir() / "my-mascot"
    assert (second.name, third.name) == ("my-mascot-2", "my-mascot-3")
    assert all(f.is_dir() for f in (first, second, third))
    assert a.new_adapter_folder("x", parent=tmp_path / "elsewhere").parent == tmp_path / "elsewhere"


def test_metadata_round_trip(tmp_path: Path) -> None:
    folder = make_adapter(a.new_adapter_folder("Mascot"))
    settings = TuneSettings(iters=30, batch_size=4, learning_rate=1e-3)
    a.write_metadata(
        folder,
        name="Mascot",
        base_model="SmolLM2-135M-Instruct-mlx-q4",
        data_sha256="ab" * 32,
        data_examples=56,
        iterations=30,
        train_loss=0.5,
        settings=settings,
    )
    a.write_metadata(folder, val_loss=0.75, stopped=True)  # the controller finishes it
    got = read_adapter(folder)
    assert got == a.Adapter(
        path=folder,
        name="Mascot",
        base_model="SmolLM2-135M-Instruct-mlx-q4",
        data_sha256="ab" * 32,
        iterations=30,
        train_loss=0.5,
        val_loss=0.75,
        stopped=True,
        settings=settings,
        created=got.created,
        data_examples=56,
    )
    assert got.created.startswith("20") and "T" in got.created
    written = json.loads((folder / a.METADATA_FILE).read_text())
    assert set(written) == set(a.METADATA_KEYS)
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_metadata_refuses_unknown_keys_and_wrong_types(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unknown adapter metadata: loss"):
        a.write_metadata(tmp_path, loss=1.0)
    with pytest.raises(TypeError, match="'iterations' must be a whole number"):
        a.write_metadata(tmp_path, iterations="30")
    assert not (tmp_path / a.METADATA_FILE).exists()


def test_metadata_overwrites_a_broken_file(tmp_path: Path) -> None:
    (tmp_path / a.METADATA_FILE).write_text("{broken")
    a.write_metadata(tmp_path, iterations=3)
    assert json.loads((tmp_path / a.METADATA_FILE).read_text())["iterations"] == 3


def test_an_adapter_made_outside_macmesh_is_accepted(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "from-mlx-lm")
    got = read_adapter(folder)
    assert (got.name, got.base_model, got.iterations, got.made_here) == (
        "from-mlx-lm",
        "SmolLM2-135M-Instruct-mlx-q4",
        30,
        False,
    )
    assert (got.train_loss, got.val_loss, got.data_sha256, got.stopped) == (None, None, None, False)
    assert got.settings is not None
    assert (got.settings.lora_rank, got.settings.lora_layers, got.settings.iters) == (8, 8, 30)
    assert got.created


def test_a_minimal_outside_adapter_has_an_unknown_base(tmp_path: Path) -> None:
    config = {"num_layers": 4, "lora_parameters": {"rank": 2, "scale": 1.0, "dropout": 0.0}}
    got = read_adapter(make_adapter(tmp_path / "bare", config))
    assert (got.name, got.base_model, got.iterations, got.settings) == ("bare", None, None, None)


def test_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="does not exist"):
        read_adapter(tmp_path / "none")
    (tmp_path / "file").write_text("x")
    with pytest.raises(AdapterError, match="is not a folder"):
        read_adapter(tmp_path / "file")


@pytest.mark.parametrize(
    ("remove", "expected"),
    [
        ([a.WEIGHTS_FILE], "has no adapters.safetensors ("),
        ([a.CONFIG_FILE], "has no adapter_config.json ("),
        ([a.WEIGHTS_FILE, a.CONFIG_FILE], "no adapters.safetensors and no adapter_config.json"),
    ],
)
def test_missing_files_are_named(tmp_path: Path, remove: list[str], expected: str) -> None:
    folder = make_adapter(tmp_path / "half")
    for name in remove:
        (folder / name).unlink()
    with pytest.raises(AdapterError) as caught:
        read_adapter(folder)
    assert str(caught.value).startswith("half is not an adapter: it has ")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("{", "adapter_config.json is broken: not valid JSON"),
        ("[]", "adapter_config.json is broken: not a JSON object"),
        ('{"lora_parameters": {"rank": 8}}', "no whole number num_layers"),
        ('{"num_layers": 8}', "no lora_parameters with a rank"),
        ('{"num_layers": 8, "fine_tune_type": "magic"}', "fine_tune_type 'magic' is not one of"),
    ],
)
def test_broken_configs(tmp_path: Path, config: str, expected: str) -> None:
    folder = make_adapter(tmp_path / "ad")
    (folder / a.CONFIG_FILE).write_text(config)
    with pytest.raises(AdapterError, match=expected):
        read_adapter(folder)


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ("{oops", "ad/macmesh.json is broken: not valid JSON"),
        ('"x"', "ad/macmesh.json is broken: not a JSON object"),
        (
            '{"iterations": "many"}',
            "ad/macmesh.json is broken: 'iterations' must be a whole number",
        ),
        ('{"stopped": 1}', "ad/macmesh.json is broken: 'stopped' must be true or false"),
        ('{"iterations": true}', "'iterations' must be a whole number, not True"),
        ('{"settings": {"colour": 1}}', "its settings: unknown fine-tune setting"),
    ],
)
def test_a_broken_macmesh_json_is_refused(tmp_path: Path, meta: str, expected: str) -> None:
    folder = make_adapter(tmp_path / "ad")
    (folder / a.METADATA_FILE).write_text(meta)
    with pytest.raises(AdapterError) as caught:
        read_adapter(folder)
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_list_adapters_newest_first_skipping_non_adapters(tmp_path: Path) -> None:
    old = make_adapter(a.new_adapter_folder("old"))
    a.write_metadata(old, created="2026-01-01T00:00:00+00:00")
    new = make_adapter(a.new_adapter_folder("new"))
    a.write_metadata(new, created="2026-06-01T00:00:00+00:00")
    a.new_adapter_folder("unfinished")  # a run that never wrote its weights
    (a.adapters_dir() / "stray.txt").write_text("x")
    assert [x.name for x in a.list_adapters()] == ["new", "old"]
    assert a.list_adapters(tmp_path / "missing") == []


def test_checkpoints_in_order(tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "ad")
    for name in ("0000100_adapters.safetensors", "0000050_adapters.safetensors", "x.safetensors"):
        (folder / name).write_bytes(b"")
    assert [it for it, _ in a.checkpoints(folder)] == [50, 100]


# --- with mlx-lm's own trainer ------------------------------------------------------------


@pytest.mark.slow
def test_an_adapter_from_mlx_lm_lora_round_trips(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """mlx_lm.lora trains a tiny model a few steps into a MacMesh adapter folder: both
    read_adapter and mlx-lm's own loader accept that folder, with or without macmesh.json."""
    import subprocess
    import sys

    from mlx_lm.tuner.lora import LoRALinear
    from mlx_lm.utils import load

    from core.tune.data import DEMO_DATA, read_data

    data = read_data(DEMO_DATA)
    train_dir = data.write_to(tmp_path / "data", batch_size=2)
    folder = a.new_adapter_folder("Tiny mascot")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlx_lm",
            "lora",
            "--model",
            str(tiny_models["llama"]),
            "--train",
            "--data",
            str(train_dir),
            "--iters",
            "4",
            "--batch-size",
            "2",
            "--num-layers",
            "2",
            "--steps-per-eval",
            "100",
            "--val-batches",
            "1",
            "--save-every",
            "2",
            "--max-seq-length",
            "128",
            "--adapter-path",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-2000:]

    outside = read_adapter(folder)  # as mlx-lm left it: no macmesh.json yet
    assert (outside.name, outside.made_here, outside.iterations) == ("tiny-mascot", False, 4)
    assert outside.base_model == tiny_models["llama"].name
    assert [it for it, _ in a.checkpoints(folder)] == [2, 4]

    a.write_metadata(
        folder,
        name="Tiny mascot",
        base_model=tiny_models["llama"].name,
        data_sha256=data.sha256,
        data_examples=data.examples,
        iterations=4,
        train_loss=1.5,
        val_loss=None,
        settings=TuneSettings(iters=4, batch_size=2, lora_layers=2, max_seq_length=128),
    )
    ours = read_adapter(folder)
    assert (ours.name, ours.made_here, ours.data_sha256) == ("Tiny mascot", True, data.sha256)
    assert a.list_adapters() == [ours]

    model, _ = load(str(tiny_models["llama"]), adapter_path=str(folder))
    adapted = [name for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    assert adapted and all(name.startswith(("model.layers.", "layers.")) for name in adapted)
