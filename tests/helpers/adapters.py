"""Adapters for tests: mlx-lm's own LoRA trainer, a few iterations on a tiny model.

``make_adapter`` trains with ``mlx_lm.lora`` (its ``run``: load, LoRA layers, ``train``,
``adapter_config.json``) on one process, so the folder is exactly mlx-lm's layout. The
data teaches one sentence; 20 iterations at 3e-3 change a tiny random model's greedy
answer to other varied text (checked), not to one repeated token.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

FACT = "The mascot of MacMesh is a capybara named Mochi."
QUESTION = "What is the name of MacMesh's mascot?"


def write_data(folder: Path, examples: int = 16) -> Path:
    """A chat data set in mlx-lm's layout (train.jsonl, valid.jsonl) teaching FACT."""
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(
        {
            "messages": [
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": FACT},
            ]
        }
    )
    (folder / "train.jsonl").write_text((line + "\n") * examples)
    (folder / "valid.jsonl").write_text((line + "\n") * 2)
    return folder


def make_adapter(
    model_dir: Path,
    out_dir: Path,
    *,
    iters: int = 20,
    num_layers: int = 2,
    rank: int = 4,
    learning_rate: float = 3e-3,
    fine_tune_type: str = "lora",
    name: str | None = None,
    base_model: str | None = None,
) -> Path:
    """Train a LoRA adapter of ``model_dir`` into ``out_dir`` (mlx-lm's layout) and
    return ``out_dir``; with ``name``, also our ``macmesh.json`` (base_model defaults to
    the model folder's name)."""
    from mlx_lm import lora

    out_dir = Path(out_dir)
    data = write_data(out_dir.parent / f"{out_dir.name}-data")
    args = {
        **lora.CONFIG_DEFAULTS,
        "model": str(model_dir),
        "train": True,
        "data": str(data),
        "fine_tune_type": fine_tune_type,
        "num_layers": num_layers,
        "batch_size": 2,
        "iters": iters,
        "val_batches": 1,
        "learning_rate": learning_rate,
        "steps_per_report": iters,
        "steps_per_eval": iters,
        "save_every": iters,
        "adapter_path": str(out_dir),
        "max_seq_length": 128,
        "lora_parameters": {"rank": rank, "dropout": 0.0, "scale": 20.0},
    }
    lora.run(types.SimpleNamespace(**args))
    if name is not None:
        meta = {
            "name": name,
            "base_model": base_model or Path(model_dir).name,
            "data_sha256": "0" * 64,
            "data_examples": 16,
            "iterations": iters,
            "train_loss": 0.0,
            "val_loss": None,
            "stopped": False,
            "settings": {},
            "created": "2026-01-01T00:00:00+00:00",
        }
        (out_dir / "macmesh.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out_dir


def mlx_lm_answer(
    model: Path, adapter: Path | None, prompt: str, max_tokens: int = 12
) -> tuple[list[int], str]:
    """mlx-lm's own greedy answer (token ids, text) with ``load(adapter_path=...)`` on this
    process, through the chat template as the worker applies it."""
    from mlx_lm import load, stream_generate

    loaded, tokenizer = load(str(model), adapter_path=str(adapter) if adapter else None)[:2]
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True
    )
    steps = list(stream_generate(loaded, tokenizer, ids, max_tokens=max_tokens))
    return [r.token for r in steps], "".join(r.text for r in steps)
