"""core.worker.layout: float weights stored the way one row multiplies them fastest,
with the same products and the same memory."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from core.worker import layout
from core.worker.layout import TransposedLinear, arrange_for_one_row


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(24, 64, bias=False)
        self.down = nn.Linear(64, 24, bias=True)
        self.layers = [nn.Linear(24, 24) for _ in range(3)]
        self.quantized = nn.QuantizedLinear(64, 24, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        h = self.down(nn.silu(self.up(x)))
        for layer in self.layers:
            h = layer(h)
        return h + self.quantized(mx.zeros((*x.shape[:-1], 64)))


@pytest.mark.parametrize("bias", [False, True])
def test_a_transposed_linear_computes_what_the_linear_did(bias: bool) -> None:
    linear = nn.Linear(48, 96, bias=bias)
    x = mx.random.normal((3, 5, 48))
    moved = TransposedLinear(linear)
    assert moved.weight_t.shape == (48, 96)
    assert ("bias" in moved) is bias
    assert mx.allclose(moved(x), linear(x), atol=1e-5).item()


def test_each_shape_is_timed_once_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    timed: list[tuple[int, ...]] = []

    def decide(weight: mx.array) -> tuple[bool, float, float]:
        timed.append(tuple(weight.shape))
        return weight.shape == (64, 24), 500.0, 200.0

    monkeypatch.setattr(layout, "faster_transposed", decide)
    model = _Block()
    report = arrange_for_one_row(model)
    assert sorted(timed) == [(24, 24), (24, 64), (64, 24)]  # not the quantized one
    assert report == {
        "64x24": "transposed: 200 vs 500 µs",
        "24x64": "as is: 200 vs 500 µs",
        "24x24": "as is: 200 vs 500 µs",
    }


def test_the_arranged_model_gives_the_same_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "faster_transposed", lambda w: (True, 2.0, 1.0))
    model = _Block()
    mx.eval(model.parameters())
    x = mx.random.normal((2, 24))
    before = model(x)
    arrange_for_one_row(model)
    assert isinstance(model.up, TransposedLinear)
    assert all(isinstance(layer, TransposedLinear) for layer in model.layers)
    assert isinstance(model.quantized, nn.QuantizedLinear)  # its own kernel: left alone
    assert mx.allclose(model(x), before, atol=1e-5).item()
    # The same memory: each weight is held once, in its new layout.
    weights = [v for k, v in nn.utils.tree_flatten(model.parameters()) if k.endswith("weight")]
    assert not any(w.shape == (64, 24) for w in weights)


def test_a_near_tie_keeps_the_layout_it_has() -> None:
    # The real timing, on a weight this small: whatever it says, the decision and the
    # two times are consistent with the margin.
    wins, as_is, transposed = layout.faster_transposed(mx.random.normal((256, 128)))
    assert as_is > 0 and transposed > 0
    assert wins == (transposed < layout.MARGIN * as_is)


def test_float16_and_quantized_layers_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "faster_transposed", lambda w: (True, 2.0, 1.0))
    model = _Block()
    model.set_dtype(mx.float16)
    assert arrange_for_one_row(model) == {}
    assert isinstance(model.up, nn.Linear)
