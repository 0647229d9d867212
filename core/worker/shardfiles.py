"""Which weight files a pipeline stage needs (standard library only).

Shared by the worker (to check what it has) and the controller (to copy only
what a node needs).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

INDEX_NAME = "model.safetensors.index.json"
# A decoder layer's tensors: "model.layers.12.mlp..." (sanitize may rename the prefix).
LAYER_PATTERN = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def layer_of(tensor_name: str) -> int | None:
    """The decoder layer a tensor belongs to, or None for shared tensors."""
    match = LAYER_PATTERN.search(tensor_name)
    return int(match.group(1)) if match else None


def files_for_layers(weight_map: dict[str, str], start: int, end: int) -> set[str]:
    """Files holding layers [start, end) plus every shared tensor's file.

    Every stage keeps the embeddings, the final norm and the head, so their
    files are always needed.
    """
    files = set()
    for tensor, file in weight_map.items():
        layer = layer_of(tensor)
        if layer is None or start <= layer < end:
            files.add(file)
    return files


def read_weight_map(model: Path) -> dict[str, str] | None:
    index = model / INDEX_NAME
    if not index.is_file():
        return None
    weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
    return weight_map


def layer_ranges(split: list[int]) -> list[tuple[int, int]]:
    """Per-rank [start, end) for a split of layer counts per rank.

    mlx-lm's convention: rank 0 holds the LAST layers, so rank r runs the
    layers after those of ranks r+1 .. N-1.
    """
    ranges = []
    for rank, count in enumerate(split):
        start = sum(split[rank + 1 :])
        ranges.append((start, start + count))
    return ranges


def even_split(layers: int, ranks: int) -> list[int]:
    """mlx-lm's default split: as even as possible, low ranks get the extra layers."""
    base, extra = divmod(layers, ranks)
    return [base + (1 if rank < extra else 0) for rank in range(ranks)]


def validate_split(split: list[int], layers: int, ranks: int) -> None:
    if len(split) != ranks:
        raise ValueError(f"the split has {len(split)} entries for {ranks} ranks")
    if any(count < 1 for count in split) or sum(split) != layers:
        raise ValueError(
            f"the split {split} must give every rank at least one layer and cover "
            f"all {layers} layers exactly once"
        )
