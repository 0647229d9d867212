"""Float weights in the layout the CPU's BLAS multiplies fastest, one token at a time.

``nn.Linear`` computes ``x @ W.T`` with its weight stored (out, in). On MLX's CPU
backend that is an sgemm with one row and a transposed operand, and how fast the BLAS
runs it depends on the shape: on this project's 2-core machine with OpenBLAS, SmolLM2's
(1536, 576) MLP weights took 604 µs that way and 243 µs stored transposed (in, out),
while its (576, 1536) weight was faster as it is (206 against 269 µs). The layers'
products with the weights are most of a generated token's time on a CPU.

So a generating CPU rank times both layouts once per distinct weight shape, with its
own weights and BLAS, and stores the weights of the shapes where the transposed one
wins by a clear margin transposed (``TransposedLinear``: the same product, the same
memory). Measured, not assumed: the winner depends on the BLAS, its threads and the
machine. Only plain ``nn.Linear`` layers change; quantized, sharded and LoRA layers keep
their own kernels. Nothing here applies on Metal.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_unflatten

# Store transposed only when that is this much faster: a near tie is noise.
MARGIN = 0.85
REPEATS = 9


class TransposedLinear(nn.Module):
    """``nn.Linear``'s product with its weight stored (in, out): ``x @ weight_t``."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.weight_t = mx.contiguous(linear.weight.T)
        if "bias" in linear:
            self.bias = linear.bias

    def __call__(self, x: mx.array) -> mx.array:
        if "bias" in self:
            return mx.addmm(self["bias"], x, self["weight_t"])
        product: mx.array = x @ self["weight_t"]
        return product


def _seconds(product: Callable[[], mx.array]) -> float:
    """The median time of ``product`` once warm."""
    for _ in range(2):
        mx.eval(product())
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        mx.eval(product())
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def faster_transposed(weight: mx.array) -> tuple[bool, float, float]:
    """Whether one row times ``weight`` (out, in) is clearly faster with the weight
    stored transposed, and the two times in µs: (transposed wins, as is, transposed)."""
    row = mx.random.normal((1, weight.shape[1]), dtype=weight.dtype)
    stored = mx.contiguous(weight.T)
    mx.eval(row, stored)
    as_is = _seconds(lambda: row @ weight.T)
    transposed = _seconds(lambda: row @ stored)
    return transposed < MARGIN * as_is, as_is * 1e6, transposed * 1e6


def _plain_linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and module.weight.dtype == mx.float32 and name
    ]


def arrange_for_one_row(model: nn.Module) -> dict[str, str]:
    """Store each float32 ``nn.Linear`` of ``model`` the way its shape multiplies one
    row fastest here (evaluated weights); returns what was timed, per shape
    ("1536x576": "transposed: 243 vs 604 µs" or "as is: ...")."""
    linears = _plain_linears(model)
    timed: dict[tuple[int, ...], bool] = {}
    report: dict[str, str] = {}
    for _, module in linears:
        shape = tuple(module.weight.shape)
        if shape in timed:
            continue
        wins, as_is, transposed = faster_transposed(module.weight)
        timed[shape] = wins
        label = "transposed" if wins else "as is"
        report[f"{shape[0]}x{shape[1]}"] = f"{label}: {transposed:.0f} vs {as_is:.0f} µs"
    changed = [(name, TransposedLinear(m)) for name, m in linears if timed[tuple(m.weight.shape)]]
    if changed:
        model.update_modules(tree_unflatten(changed))
        mx.eval(model.parameters())
    return report
