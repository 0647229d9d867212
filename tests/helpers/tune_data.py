"""A small fine-tune data set in mlx-lm's layout (chat format), for the job's tests."""

from __future__ import annotations

import json
from pathlib import Path

FACTS = (
    ("the mascot", "a capybara named Mochi"),
    ("the colour of the logo", "teal"),
    ("the first node", "Studio A"),
    ("the ring's port", "5000"),
)


def write_chat_data(folder: Path, train: int = 16, valid: int = 8) -> Path:
    """``train.jsonl`` and ``valid.jsonl`` of short chat examples; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", train), ("valid", valid)):
        lines = []
        for i in range(count):
            what, answer = FACTS[i % len(FACTS)]
            messages = [
                {"role": "user", "content": f"Question {i}: what is {what}?"},
                {"role": "assistant", "content": f"It is {answer}." + " Indeed." * (i % 3)},
            ]
            lines.append(json.dumps({"messages": messages}))
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def write_even_data(folder: Path, train: int = 16, valid: int = 8) -> Path:
    """Examples that are all the same number of tokens (only digits differ: the tiny
    tokenizer has no merges with digits), so a batch's mean loss is the same however
    its examples are spread over ranks: the distributed-correctness data."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, count, base in (("train", train, 0), ("valid", valid, 50)):
        lines = []
        for i in range(base, base + count):
            a, b = divmod(i, 10)
            messages = [
                {"role": "user", "content": f"Code {a}{b}?"},
                {"role": "assistant", "content": f"It is {b}{a}{b}."},
            ]
            lines.append(json.dumps({"messages": messages}))
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    return folder
