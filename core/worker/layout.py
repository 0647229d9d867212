"""Float weights in the layout the CPU's BLAS multiplies fastest, one token at a time.

``nn.Linear`` computes ``x @ W.T`` with its weight stored (out, in). On MLX's CPU
backend that is an sgemm with one row, and OpenBLAS's speed for it depends on the shape
and the layout: on this project's 2-core machine SmolLM2's (1536, 576) MLP weights took
404 µs as they are, 219 µs stored transposed and about 150 µs split into blocks of 512
rows; its (49152, 576) vocabulary head took 60 ms whole in float32, 22 ms as the 8-bit
kernel, and 8 ms in blocks of 512 rows (past about a thousand rows the one-row sgemm
falls off a cliff). The weights' products with one token are most of its time on a CPU.

So a generating CPU rank times each layout once per distinct float32 weight shape, with
its own weights and BLAS, and keeps the fastest when it wins by a clear margin:
``TransposedLinear`` (stored (in, out)) or ``BlockedLinear`` (row blocks, the outputs
concatenated). The same product, the same memory. Measured, not assumed: the winner
depends on the BLAS, its threads and the machine. Only plain ``nn.Linear`` layers
change (quantized, sharded and LoRA layers keep their own kernels), plus the output
head of a tied model: its quantized embedding stays for the lookup, and the head gets a
float32 copy in blocks when that is faster and memory has room; an untied model's
quantized head is replaced by such blocks on the same terms. Not on Metal.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

# A layout replaces the one a weight has only when this much faster: a near tie is noise.
MARGIN = 0.85
REPEATS = 5
BLOCK_ROWS = (256, 512)
# Timing reads this many bytes of a weight's copies, more than a CPU's caches hold.
COLD_BYTES = 32 << 20
MAX_COPIES = 32
# Past this size a weight is timed in blocks only: transposed it falls off the same
# cliff (SmolLM2's head: 25 ms transposed, 8 ms in blocks of 512 rows).
BLOCKS_ONLY_BYTES = 16 << 20


class TransposedLinear(nn.Module):
    """``nn.Linear``'s product with its weight stored (in, out): ``x @ weight_t``."""

    def __init__(self, weight: mx.array, bias: mx.array | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.weight_t = mx.contiguous(weight.T)
        if bias is not None:
            self.bias = bias

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["weight_t"])
        product: mx.array = x @ self["weight_t"]
        return product


class BlockedLinear(nn.Module):
    """``nn.Linear``'s product with its weight in blocks of ``rows`` output rows: each
    block's product, concatenated."""

    def __init__(self, weight: mx.array, rows: int, bias: mx.array | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        cuts = list(range(rows, int(weight.shape[0]), rows))
        self.blocks = [mx.contiguous(block) for block in mx.split(weight, cuts, axis=0)]
        if bias is not None:
            self.bias = bias

    def __call__(self, x: mx.array) -> mx.array:
        out = mx.concatenate([x @ block.T for block in self["blocks"]], axis=-1)
        if "bias" in self:
            out = out + self["bias"]
        return out


def median_seconds(product: Callable[[], Any], repeats: int = REPEATS) -> float:
    """The median time of evaluating ``product()`` once warm."""
    mx.eval(product())  # warm
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        mx.eval(product())
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _layouts(weight: mx.array) -> list[str]:
    """The layouts worth timing for a float (out, in) weight besides the one it has."""
    rows = int(weight.shape[0])
    blocks = [f"rows of {n}" for n in BLOCK_ROWS if rows > n]
    return blocks if weight.nbytes > BLOCKS_ONLY_BYTES and blocks else ["transposed", *blocks]


def _products(modules: list[nn.Module], row: mx.array) -> list[mx.array]:
    return [module(row) for module in modules]


def fastest_layout(
    weight: mx.array, current: Callable[[mx.array], mx.array] | None = None
) -> tuple[str, dict[str, float]]:
    """The layout one row times ``weight`` (out, in) is clearly fastest in, and each
    layout's time in µs; "as is" is ``x @ weight.T``, or ``current`` when given (the
    product the model computes today: a quantized head's kernel).

    Timed as a token meets its weights, read from memory rather than from a cache one
    matrix would stay in: a small weight is timed as ``COLD_BYTES`` of distinct copies,
    one product each."""
    row = mx.random.normal((1, int(weight.shape[1])), dtype=weight.dtype)
    copies = 1 if current else max(1, min(MAX_COPIES, COLD_BYTES // max(1, weight.nbytes)))
    weights = [weight] + [mx.array(weight * 1) for _ in range(copies - 1)]
    mx.eval(row, weights)
    if current:
        times = {"as is": median_seconds(lambda: current(row))}
    else:
        times = {"as is": median_seconds(lambda: [row @ w.T for w in weights]) / copies}
    for name in _layouts(weight):
        modules = [_build(name, w, None) for w in weights]
        mx.eval([m.parameters() for m in modules])
        times[name] = median_seconds(functools.partial(_products, modules, row)) / copies
        del modules
        mx.clear_cache()  # the copies timed go back at once, not into MLX's cache
    best = min(times, key=lambda name: times[name])
    if times[best] >= MARGIN * times["as is"]:
        best = "as is"
    return best, {name: seconds * 1e6 for name, seconds in times.items()}


def _build(layout: str, weight: mx.array, bias: mx.array | None) -> nn.Module:
    if layout == "transposed":
        return TransposedLinear(weight, bias)
    return BlockedLinear(weight, int(layout.rsplit(" ", 1)[1]), bias)


def _describe(layout: str, times: dict[str, float]) -> str:
    return f"{layout}: {times[layout]:.0f} vs {times['as is']:.0f} µs"


def _plain_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module.weight.dtype == mx.float32 and name
    ]


def arrange_for_one_row(model: nn.Module, head_room: int | None = None) -> dict[str, str]:
    """Store each float32 ``nn.Linear`` of ``model`` (evaluated weights) in the layout
    its shape multiplies one row fastest here, and give a tied model's head float blocks
    when faster and under ``head_room`` bytes (None: no limit). Returns what was timed,
    per shape: {"1536x576": "rows of 512: 150 vs 404 µs", "head 49152x576": ...}."""
    linears = _plain_linears(model)
    chosen: dict[tuple[int, ...], str] = {}
    report: dict[str, str] = {}
    for _, module in linears:
        shape = tuple(module.weight.shape)
        if shape in chosen:
            continue
        chosen[shape], times = fastest_layout(module.weight)
        report[f"{shape[0]}x{shape[1]}"] = _describe(chosen[shape], times)
    while linears:  # popped, so no list keeps an old copy alive
        name, module = linears.pop(0)
        layout = chosen[tuple(module.weight.shape)]
        if layout != "as is":
            # One weight at a time, its old copy dropped before the next is made: never
            # every linear twice (issue 26).
            bias = module.bias if "bias" in module else None
            rebuilt = _build(layout, module.weight, bias)
            mx.eval(rebuilt.parameters())
            model.update_modules(tree_unflatten([(name, rebuilt)]))
            del module, rebuilt
            mx.clear_cache()
    head = _tied_head(model, head_room) or _own_head(model, head_room)
    if head:
        report.update(head)
    return report


def _tied_head(model: nn.Module, room: int | None) -> dict[str, str]:
    """A tied model's output head (``embed_tokens.as_linear``) in float32 blocks, when
    that beats the product it has and its bytes fit ``room``; the embedding itself stays
    as it is for the lookup. A rank whose head is skipped (its ``as_linear`` replaced
    already: ``sharding._skip_head``) or a model with its own ``lm_head`` is left alone."""
    inner: Any = getattr(model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    if embed is None or getattr(model, "lm_head", None) is not None:
        return {}
    if "as_linear" in vars(embed) or not hasattr(embed, "as_linear"):
        return {}
    if isinstance(embed, nn.QuantizedEmbedding):
        weight = _dequantized(embed)
    elif isinstance(embed, nn.Embedding) and embed.weight.dtype == mx.float32:
        weight = embed.weight
    else:
        return {}
    rows, columns = (int(n) for n in weight.shape)
    if room is not None and rows * columns * 4 > room:
        return {}
    mx.eval(weight)
    layout, times = fastest_layout(weight, current=embed.as_linear)
    label = f"head {rows}x{columns}"
    if layout == "as is" or (layout == "transposed" and isinstance(embed, nn.Embedding)):
        # A float embedding stored transposed would hold its bytes twice: keep it.
        return {label: _describe("as is", times)}
    head = _build(layout, weight, None)
    mx.eval(head.parameters())
    object.__setattr__(embed, "as_linear", head)
    return {label: _describe(layout, times)}


def _own_head(model: nn.Module, room: int | None) -> dict[str, str]:
    """An untied model's quantized ``lm_head`` (kept quantized at load with the
    embedding, ``sharding._vocab_modules``) replaced by float32 blocks when they beat its
    kernel and fit ``room``: no lookup reads it, so the quantized copy goes. A skipped or
    tensor-sharded head (another type) and a float one (timed with the other linears)
    are left alone."""
    head = getattr(model, "lm_head", None)
    if type(head) is not nn.QuantizedLinear:
        return {}
    weight = _dequantized(head)
    rows, columns = (int(n) for n in weight.shape)
    if room is not None and rows * columns * 4 > room:
        return {}
    mx.eval(weight)
    layout, times = fastest_layout(weight, current=head)
    label = f"head {rows}x{columns}"
    if layout == "as is":
        return {label: _describe(layout, times)}
    bias = head.bias.astype(mx.float32) if "bias" in head else None
    blocks = _build(layout, weight, bias)
    mx.eval(blocks.parameters())
    model.lm_head = blocks
    return {label: _describe(layout, times)}


def _dequantized(module: nn.Module) -> mx.array:
    """A quantized embedding's or linear's weight in float32."""
    return mx.dequantize(
        module.weight,
        module.scales,
        module.get("biases"),
        group_size=module.group_size,
        bits=module.bits,
        mode=getattr(module, "mode", "affine"),
    ).astype(mx.float32)
