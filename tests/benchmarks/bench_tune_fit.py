"""core.tune.fit's activation estimate against MLX's own peak memory.

One forward and backward pass and an Adam update of mlx-lm's LoRA (rank 8) on the demo
model, dequantized to float32 as CPU ranks hold it, for a few sequence lengths, batch
sizes and LoRA layer counts; each case in its own process (peak memory is per process).
Prints one JSON document: measured (peak minus weights) and estimated MiB per case.

    python -m tests.benchmarks.bench_tune_fit
"""

from __future__ import annotations

import json
import subprocess
import sys

CASES = ((256, 2, 8), (512, 2, 8), (512, 2, 16), (1024, 1, 8))
_MODULE = "tests.benchmarks.bench_tune_fit"


def _measure(length: int, batch: int, layers: int) -> float:
    """Peak memory above the weights, in MiB, of one training step (run in a child)."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx_lm.tuner.trainer import default_loss
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import dequantize_model, load

    from core.model.demo_model import ensure_demo_model

    model, _ = load(str(ensure_demo_model()))
    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    model.freeze()
    linear_to_lora_layers(model, layers, {"rank": 8, "scale": 20.0, "dropout": 0.0})
    mx.eval(model.parameters())
    base = mx.get_active_memory()
    optimizer = optim.Adam(learning_rate=1e-4)
    step = nn.value_and_grad(model, default_loss)
    tokens = mx.random.randint(0, 49000, (batch, length + 1))
    lengths = mx.array([[0, length]] * batch)
    mx.reset_peak_memory()
    (loss, _), grads = step(model, tokens, lengths)
    optimizer.update(model, grads)
    mx.eval(loss, model.parameters(), optimizer.state)
    return (mx.get_peak_memory() - base) / 2**20


def bench_tune_fit() -> dict[str, object]:
    from core.model.demo_model import ensure_demo_model
    from core.model.info import read_model_info
    from core.tune.fit import activation_bytes, lora_bytes
    from core.tune.settings import TuneSettings

    info = read_model_info(ensure_demo_model())
    rows = []
    for length, batch, layers in CASES:
        out = subprocess.run(
            [sys.executable, "-m", _MODULE, str(length), str(batch), str(layers)],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        )
        measured = float(out.stdout.strip().splitlines()[-1])
        settings = TuneSettings(batch_size=batch, max_seq_length=length, lora_layers=layers)
        estimate = (activation_bytes(info, settings, 1, 4) + lora_bytes(info, settings)) / 2**20
        rows.append(
            {
                "tokens": length,
                "sequences": batch,
                "lora_layers": layers,
                "measured_mib": round(measured),
                "estimated_mib": round(estimate),
                "ratio": round(estimate / measured, 3),
            }
        )
    return {"tune_fit": rows}


if __name__ == "__main__":
    if len(sys.argv) == 4:
        print(_measure(*(int(a) for a in sys.argv[1:])))
    else:
        print(json.dumps(bench_tune_fit(), indent=2))
