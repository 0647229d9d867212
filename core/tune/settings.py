"""The settings of one fine-tune: what a person may set, with a default and a short
explanation each, and the checks that refuse a value before anything starts.

The values go to every rank as they are (``to_dict``) and map onto mlx-lm's
``TrainingArgs`` and LoRA parameters there (``core.worker.finetune``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


class SettingsError(ValueError):
    """A setting that cannot be used; the message names it and what to do."""


def _explained(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class TuneSettings:
    iters: int = _explained(
        200, "Training steps. More steps learn more of the data, and take longer."
    )
    batch_size: int = _explained(
        4,
        "Examples per step, over the whole cluster: each Mac takes its share. "
        "A multiple of the number of Macs.",
    )
    learning_rate: float = _explained(
        1e-4, "How far each step moves the adapter. Too high and the loss jumps around."
    )
    lora_rank: int = _explained(8, "The adapter's size. Larger learns more, and needs more memory.")
    lora_layers: int = _explained(
        16, "How many of the model's last layers get an adapter (all of them when fewer)."
    )
    steps_per_report: int = _explained(1, "Steps between two points of the loss plot.")
    steps_per_eval: int = _explained(50, "Steps between two validation losses.")
    steps_per_save: int = _explained(50, "Steps between two checkpoints of the adapter.")
    val_batches: int = _explained(
        25, "Validation batches per validation loss (-1: the whole validation set)."
    )
    max_seq_length: int = _explained(
        2048, "Longest example, in tokens; longer ones are cut to this."
    )
    seed: int = _explained(0, "Seeds the order of the examples, so a run can be repeated.")

    @classmethod
    def explanations(cls) -> dict[str, str]:
        """Each setting's short explanation, by field name."""
        return {f.name: str(f.metadata["help"]) for f in fields(cls)}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TuneSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise SettingsError(f"unknown fine-tune setting(s): {', '.join(unknown)}")
        return cls(**values)

    def check(self, ranks: int = 1) -> None:
        """Raise ``SettingsError`` for a value no run could use on ``ranks`` Macs."""
        for name in ("iters", "batch_size", "lora_rank", "lora_layers", "max_seq_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingsError(f"{_label(name)} must be a whole number of 1 or more")
        for name in ("steps_per_report", "steps_per_eval", "steps_per_save"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingsError(f"{_label(name)} must be a whole number of 1 or more")
        if not isinstance(self.val_batches, int) or self.val_batches < -1 or not self.val_batches:
            raise SettingsError("validation batches must be -1 (all) or 1 or more")
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, int | float) or not 0 < lr < 1:
            raise SettingsError("the learning rate must be above 0 and below 1, e.g. 1e-4")
        if ranks > 1 and self.batch_size % ranks:
            fits = max(ranks, self.batch_size // ranks * ranks)
            raise SettingsError(
                f"the batch size ({self.batch_size}) must be a multiple of the {ranks} Macs "
                f"training together, e.g. {fits}"
            )


def _label(name: str) -> str:
    return {"iters": "iterations", "lora_rank": "the LoRA rank", "lora_layers": "LoRA layers"}.get(
        name, name.replace("_", " ")
    )
