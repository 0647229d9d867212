"""Loading makes a rank's weights real one tensor at a time: its peak is its float32
weights plus one tensor in flight, never the model as read beside the model converted."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest

from core.worker.residency import Meter
from core.worker.streaming import evaluate_each

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="measured as RssAnon")
MIB = 1 << 20
TENSORS, ROWS, COLUMNS = 12, 4096, 2048  # 16 MB each in float16, 32 MB in float32


class _Weights(nn.Module):
    def __init__(self, arrays: list[mx.array]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.layers = arrays


def test_a_float16_file_becomes_float32_one_tensor_at_a_time(tmp_path: Path) -> None:
    file = tmp_path / "weights.safetensors"
    parts = {f"w{i}": mx.full((ROWS, COLUMNS), i + 1, dtype=mx.float16) for i in range(TENSORS)}
    mx.save_safetensors(str(file), parts)
    del parts
    mx.clear_cache()
    meter = Meter()
    base = meter.next_phase()  # a fresh peak from here
    assert base is not None
    loaded = mx.load(str(file))  # lazy: nothing is read yet
    model = _Weights([loaded[f"w{i}"].astype(mx.float32) for i in range(TENSORS)])
    del loaded
    held = meter.sample() or 0
    evaluate_each(model)
    peak = (meter.peak() or 0) - held
    float32 = TENSORS * ROWS * COLUMNS * 4
    one_tensor = ROWS * COLUMNS * (2 + 4)
    assert all(float(w[0, 0]) == i + 1 for i, w in enumerate(model.layers))
    assert model.layers[0].dtype == mx.float32
    # All at once, MLX may hold every float16 tensor beside the float32 ones (1.5x).
    assert peak <= float32 + 2 * one_tensor + 16 * MIB, f"{peak / MIB:.0f} MB"
