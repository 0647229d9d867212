"""core.worker.layout: float weights stored the way one row multiplies them fastest,
with the same products and the same memory."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import pytest

from core.worker import layout
from core.worker.layout import BlockedLinear, TransposedLinear, arrange_for_one_row


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


class _Tied(nn.Module):
    """A tied model's shape: ``model.embed_tokens`` is also the head."""

    def __init__(self, quantized: bool) -> None:
        super().__init__()
        self.model = nn.Module()
        embed = nn.Embedding(600, 64)
        self.model.embed_tokens = (
            nn.QuantizedEmbedding.from_embedding(embed) if quantized else embed
        )

    def __call__(self, ids: mx.array) -> mx.array:
        embed = self.model.embed_tokens
        logits: mx.array = embed.as_linear(embed(ids))
        return logits


class _Untied(nn.Module):
    """An untied model's shape: its own ``lm_head``, kept quantized at load."""

    def __init__(self, bias: bool = False) -> None:
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.QuantizedEmbedding.from_embedding(nn.Embedding(600, 64))
        self.lm_head = nn.QuantizedLinear.from_linear(nn.Linear(64, 600, bias=bias))

    def __call__(self, ids: mx.array) -> mx.array:
        logits: mx.array = self.lm_head(self.model.embed_tokens(ids))
        return logits


def _blocks_win(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every timing says blocks of 256 rows win; the list hears each ``current`` product."""
    seen: list[object] = []

    def decide(weight: mx.array, current=None) -> tuple[str, dict[str, float]]:
        seen.append(current)
        return "rows of 256", {"as is": 900.0, "rows of 256": 300.0}

    monkeypatch.setattr(layout, "fastest_layout", decide)
    return seen


def _bytes(model: nn.Module) -> int:
    return sum(v.nbytes for _, v in nn.utils.tree_flatten(model.parameters()))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("make", [TransposedLinear, lambda w, b: BlockedLinear(w, 40, b)])
def test_each_layout_computes_what_the_linear_did(bias: bool, make) -> None:
    linear = nn.Linear(48, 96, bias=bias)
    x = mx.random.normal((3, 5, 48))
    moved = make(linear.weight, linear.bias if bias else None)
    assert ("bias" in moved) is bias
    assert mx.allclose(moved(x), linear(x), atol=1e-5).item()


def test_blocks_cover_every_row_once() -> None:
    blocked = BlockedLinear(mx.random.normal((1100, 8)), 512)
    assert [b.shape for b in blocked.blocks] == [(512, 8), (512, 8), (76, 8)]


def test_each_shape_is_timed_once_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    timed: list[tuple[int, ...]] = []

    def decide(weight: mx.array, current=None) -> tuple[str, dict[str, float]]:
        timed.append(tuple(weight.shape))
        best = {(64, 24): "transposed", (24, 64): "rows of 256"}.get(tuple(weight.shape), "as is")
        return best, {"as is": 500.0, "transposed": 200.0, "rows of 256": 100.0}

    monkeypatch.setattr(layout, "fastest_layout", decide)
    model = _Block()
    report = arrange_for_one_row(model)
    assert sorted(timed) == [(24, 24), (24, 64), (64, 24)]  # not the quantized one
    assert report == {
        "64x24": "transposed: 200 vs 500 µs",
        "24x64": "rows of 256: 100 vs 500 µs",
        "24x24": "as is: 500 vs 500 µs",
    }


def test_the_arranged_model_gives_the_same_output(monkeypatch: pytest.MonkeyPatch) -> None:
    choice = {(64, 24): "rows of 256", (24, 64): "transposed", (24, 24): "transposed"}
    monkeypatch.setattr(
        layout,
        "fastest_layout",
        lambda w, current=None: (
            choice[tuple(w.shape)],
            {"as is": 1.0, "transposed": 0.5, "rows of 256": 0.5},
        ),
    )
    model = _Block()
    mx.eval(model.parameters())
    x = mx.random.normal((2, 24))
    before = model(x)
    arrange_for_one_row(model)
    assert isinstance(model.up, BlockedLinear) and isinstance(model.down, TransposedLinear)
    assert all(isinstance(layer, TransposedLinear) for layer in model.layers)
    assert isinstance(model.quantized, nn.QuantizedLinear)  # its own kernel: left alone
    assert mx.allclose(model(x), before, atol=1e-5).item()
    # The same memory: each weight is held once, in its new layout.
    assert _bytes(model) == _bytes(_Block())


def test_the_real_timing_is_consistent_with_the_margin() -> None:
    best, times = layout.fastest_layout(mx.random.normal((600, 128)))
    assert set(times) == {"as is", "transposed", "rows of 256", "rows of 512"}
    assert all(t > 0 for t in times.values())
    if best != "as is":
        assert times[best] < layout.MARGIN * times["as is"]
        assert times[best] == min(times.values())


def test_float16_and_quantized_layers_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "fastest_layout", lambda w, current=None: ("transposed", {}))
    model = _Block()
    model.set_dtype(mx.float16)
    assert arrange_for_one_row(model) == {}
    assert isinstance(model.up, nn.Linear)


def test_a_tied_quantized_head_gets_float_blocks_and_keeps_its_lookup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _blocks_win(monkeypatch)
    model = _Tied(quantized=True)
    mx.eval(model.parameters())
    ids = mx.array([[3, 599, 42]])
    before = model(ids)
    assert arrange_for_one_row(model) == {"head 600x64": "rows of 256: 300 vs 900 µs"}
    assert seen[0] is not None  # the head was timed against the quantized kernel it had
    embed = model.model.embed_tokens
    assert isinstance(embed, nn.QuantizedEmbedding)  # the lookup stays quantized
    assert isinstance(embed.as_linear, BlockedLinear)
    # The float head is the quantized one's weights, dequantized: the same logits.
    assert mx.allclose(model(ids), before, atol=1e-4).item()


def test_a_head_that_would_not_fit_or_was_skipped_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(layout, "fastest_layout", lambda w, current=None: ("rows of 256", {}))
    model = _Tied(quantized=True)
    assert arrange_for_one_row(model, head_room=600 * 64 * 4 - 1) == {}
    skipped = _Tied(quantized=True)
    object.__setattr__(skipped.model.embed_tokens, "as_linear", lambda x: x)  # _skip_head
    assert arrange_for_one_row(skipped) == {}
    # A float embedding holds its bytes once: transposing it would hold them twice.
    monkeypatch.setattr(
        layout,
        "fastest_layout",
        lambda w, current=None: ("transposed", {"as is": 2.0, "transposed": 1.0}),
    )
    plain = _Tied(quantized=False)
    assert arrange_for_one_row(plain) == {"head 600x64": "as is: 2 vs 2 µs"}
    assert "as_linear" not in vars(plain.model.embed_tokens)


@pytest.mark.parametrize("bias", [False, True])
def test_an_untied_quantized_head_becomes_float_blocks_with_the_same_logits(
    monkeypatch: pytest.MonkeyPatch, bias: bool
) -> None:
    seen = _blocks_win(monkeypatch)
    model = _Untied(bias)
    mx.eval(model.parameters())
    quantized = model.lm_head
    ids = mx.array([[3, 599, 42]])
    before = model(ids)
    assert arrange_for_one_row(model) == {"head 600x64": "rows of 256: 300 vs 900 µs"}
    assert seen == [quantized]  # timed against the kernel it had
    assert isinstance(model.lm_head, BlockedLinear)
    assert isinstance(model.model.embed_tokens, nn.QuantizedEmbedding)  # the lookup
    assert mx.allclose(model(ids), before, atol=1e-4).item()


def test_an_untied_head_stays_quantized_when_its_kernel_wins_or_it_would_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(layout, "fastest_layout", lambda w, current=None: ("as is", {"as is": 5.0}))
    model = _Untied()
    assert arrange_for_one_row(model) == {"head 600x64": "as is: 5 vs 5 µs"}
    assert type(model.lm_head) is nn.QuantizedLinear
    monkeypatch.setattr(layout, "fastest_layout", lambda w, current=None: ("rows of 256", {}))
    assert arrange_for_one_row(model, head_room=600 * 64 * 4 - 1) == {}
    assert type(model.lm_head) is nn.QuantizedLinear


def test_the_real_timing_of_an_untied_head_keeps_its_logits() -> None:
    """No decision forced: whichever layout the machine picks, the logits stay."""
    model = _Untied(bias=True)
    mx.eval(model.parameters())
    ids = mx.array([[1, 2, 3]])
    before = model(ids)
    report = arrange_for_one_row(model)
    assert list(report) == ["head 600x64"]
    assert mx.allclose(model(ids), before, atol=1e-4).item()


def test_a_cpu_shard_of_an_untied_quantized_model_times_its_head(tmp_path) -> None:
    """Loaded as a CPU rank loads it: the embedding and head stay quantized through the
    dequantization, the head is then timed against float32 blocks, and the logits are
    the quantized model's."""
    from mlx_lm.utils import load_model

    from core.worker.sharding import load_shard
    from tests.helpers.tiny_models import make_tiny_model

    class _One:
        def size(self) -> int:
            return 1

        def rank(self) -> int:
            return 0

    path = make_tiny_model(tmp_path / "qwen3", "qwen3", quantize=True, tie_embeddings=False)
    shard = load_shard(path, _One(), "single")  # type: ignore[arg-type]
    assert shard.weights["precision"] == "float32"
    assert shard.weights["reason"] == (
        "embed_tokens 4-bit kept quantized: the lookup reads a row; "
        "lm_head 4-bit kept quantized until timed against float32 blocks"
    )
    assert "head 512x64" in shard.weights["layout"]
    reference, _ = load_model(path)
    ids = mx.array([[5, 17, 200, 3]])
    assert mx.allclose(shard.model(ids), reference(ids).astype(mx.float32), atol=2e-3).item()
