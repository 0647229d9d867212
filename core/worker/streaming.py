"""A rank's weights made real one tensor at a time, so loading never holds the model twice.

``load_model(lazy=True)`` gives arrays that read their bytes from the file only when
evaluated, and what the rank does to them (a tensor slice, a pipeline stage's layers,
dequantizing to float32, float16 to float32 on the CPU) is lazy too. Evaluated all at once
(``mx.eval(model.parameters())``) MLX may read every tensor before it converts any, and its
buffer cache keeps what was freed: issue 26 measured a pipeline rank of a 1.9 GB float16
llama at 5.15 GB while loading, its share in float32 being under 2.5 GB. Evaluated one
tensor at a time, with the freed buffers handed back each time, the most a rank holds
beyond its share is one tensor as read and as converted (``transient_bytes``).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten


def evaluate_each(model: nn.Module) -> None:
    """Evaluate ``model``'s parameters one by one, freeing MLX's cache after each: the
    peak is the weights kept plus one tensor's read and converted copies."""
    # A dict of references: nothing is read until its own eval below.
    parameters: dict[str, mx.array] = dict(tree_flatten(model.parameters()))
    for value in parameters.values():
        mx.eval(value)
        mx.clear_cache()


def release() -> None:
    """Hand MLX's cached buffers back (after a step that made and dropped copies)."""
    mx.clear_cache()
