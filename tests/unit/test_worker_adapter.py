"""The worker's own adapter checks (core/worker/adapter.py): what mlx-lm cannot apply is
refused with the reason, in one line, before any weight is touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.worker.adapter import AdapterError, read_config


def _adapter(folder: Path, config: dict) -> Path:
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(config))
    (folder / "adapters.safetensors").write_bytes(b"")
    return folder


def test_a_lora_config_as_mlx_lm_writes_it_is_read(tmp_path: Path) -> None:
    lora = {"rank": 8, "scale": 20.0, "dropout": 0.0}
    config = {"fine_tune_type": "lora", "num_layers": 16, "lora_parameters": lora}
    assert read_config(_adapter(tmp_path / "a", config)) == config


def test_a_type_mlx_lm_cannot_apply_is_refused(tmp_path: Path) -> None:
    folder = _adapter(tmp_path / "a", {"fine_tune_type": "prefix", "num_layers": 4})
    with pytest.raises(AdapterError) as refused:
        read_config(folder)
    assert str(refused.value) == (
        f"the adapter in {folder} is of type 'prefix', which mlx-lm cannot apply "
        "(it knows lora, dora, full)"
    )


def test_a_lora_config_without_its_parameters_is_not_mlx_lm_s(tmp_path: Path) -> None:
    folder = _adapter(tmp_path / "a", {"num_layers": 4, "lora_parameters": {"rank": 8}})
    with pytest.raises(AdapterError, match=r"lacks lora_parameters.scale, lora_parameters.dropout"):
        read_config(folder)


def test_missing_files_and_bad_json(tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match=r"does not exist on this node$"):
        read_config(tmp_path / "nowhere")
    folder = _adapter(tmp_path / "a", {})
    (folder / "adapters.safetensors").unlink()
    with pytest.raises(AdapterError, match=r"is not an adapter folder: it has no adapters"):
        read_config(folder)
    (folder / "adapters.safetensors").write_bytes(b"")
    (folder / "adapter_config.json").write_text("{not json")
    with pytest.raises(AdapterError, match=r"adapter_config.json cannot be read: "):
        read_config(folder)
