"""Before a Start: a folder that is not an adapter, or an adapter of another base, is
refused in one line (core.model.adapter), before anything starts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.model.adapter import AdapterError, check_adapter
from core.model.info import read_model_info
from tests.helpers.tiny_models import make_tiny_model


@pytest.fixture(scope="module")
def wider(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("wider") / "wider", hidden=96, intermediate=192)


def test_the_adapter_of_this_model_is_accepted(tiny_models, tiny_adapter: Path) -> None:
    use = check_adapter(read_model_info(tiny_models["llama"]), tiny_adapter)
    assert (use.name, use.kind, use.base_model) == ("Mochi", "lora", "llama")
    # what nodes need: no checkpoints
    assert use.files == ("adapter_config.json", "adapters.safetensors", "macmesh.json")


def test_a_folder_without_the_adapter_files_is_not_an_adapter(tiny_models, tmp_path) -> None:
    info = read_model_info(tiny_models["llama"])
    with pytest.raises(AdapterError, match=r"is not an adapter folder: it has no adapter_config"):
        check_adapter(info, tmp_path)
    with pytest.raises(AdapterError, match=r"is not a folder"):
        check_adapter(info, tmp_path / "nowhere")
    # a model folder is not an adapter either
    with pytest.raises(AdapterError, match=r"is not an adapter folder"):
        check_adapter(info, tiny_models["qwen3"])


def test_an_adapter_named_for_another_base_is_refused(
    tiny_models, tiny_adapter: Path, tmp_path: Path
) -> None:
    """The qwen3 tiny model has the llama's shapes: only macmesh.json tells them apart."""
    with pytest.raises(AdapterError) as refused:
        check_adapter(read_model_info(tiny_models["qwen3"]), tiny_adapter)
    assert str(refused.value) == (
        "the adapter 'Mochi' was made for llama, not for qwen3: choose llama as the model, "
        "or an adapter trained on qwen3"
    )


def test_an_adapter_of_other_shapes_is_refused_even_without_our_metadata(
    tiny_adapter: Path, wider: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tiny_adapter, plain)
    (plain / "macmesh.json").unlink()  # as mlx_lm.lora writes it
    with pytest.raises(AdapterError) as refused:
        check_adapter(read_model_info(wider), plain)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("the adapter 'plain' was made for another base model than wider: ")
    assert "mlp.down_proj has 192 input features here, 128 in the adapter" in message


def test_an_adapter_for_more_layers_is_refused(tiny_adapter: Path, tmp_path: Path) -> None:
    shallow = make_tiny_model(tmp_path / "shallow", layers=2, shards=1)
    plain = tmp_path / "plain"
    shutil.copytree(tiny_adapter, plain)
    meta = json.loads((plain / "macmesh.json").read_text())
    (plain / "macmesh.json").write_text(json.dumps({**meta, "base_model": "shallow"}))
    with pytest.raises(
        AdapterError, match=r"lora_a adapts layer 2, and the model has 2 layers \(and 27 more\)$"
    ):
        check_adapter(read_model_info(shallow), plain)


def test_a_quantized_base_compares_unpacked_widths(tmp_path: Path) -> None:
    """A 4-bit base stores 8 inputs per uint32: the adapter's 64 inputs match its 8."""
    from tests.helpers.adapters import make_adapter

    model = make_tiny_model(tmp_path / "q4", quantize=True)
    adapter = make_adapter(model, tmp_path / "q4-adapter", iters=2, name="q", base_model="q4")
    assert check_adapter(read_model_info(model), adapter).name == "q"
