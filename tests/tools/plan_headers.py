"""``macmesh plan`` on a header-only copy of a real model (MLX's own names, shapes and
dtypes, no weights), as the Hub's headers would give it: for the estimate's figures in
docs/estimate.md and the report of issue 32, without a download.

    .venv/bin/python -m tests.tools.plan_headers qwen3-30b-a3b-4bit --node mac:64@M3-Max
    .venv/bin/python -m tests.tools.plan_headers qwen3-235b-a22b-4bit --rdma \\
        --node a:512@M3-Ultra --node b:512@M3-Ultra --node c:512@M3-Ultra --node d:512@M3-Ultra

The copy is written to a temporary folder and read as ``hf:`` reads the Hub's headers
(``core.library.hub.read_header_copy``); every other argument is ``macmesh plan``'s.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import core.cli.plan as plan_module
from core.library.hub import read_header_copy
from tests.helpers.header_models import (
    kimi_k2_config,
    moe_mla_tensors,
    qwen3_moe_config,
    qwen3_moe_tensors,
    write_header_only_model,
)

MODELS: dict[str, tuple[str, Callable[[], dict], Callable[[dict], dict]]] = {
    "qwen3-30b-a3b-4bit": ("mlx-community/Qwen3-30B-A3B-4bit", qwen3_moe_config, qwen3_moe_tensors),
    "qwen3-235b-a22b-4bit": (
        "mlx-community/Qwen3-235B-A22B-4bit",
        lambda: qwen3_moe_config(layers=94, hidden=4096, heads=64, moe_inter=1536),
        qwen3_moe_tensors,
    ),
    "kimi-k2-8bit": ("mlx-community/Kimi-K2-Instruct-8bit", kimi_k2_config, moe_mla_tensors),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in MODELS:
        print(f"usage: plan_headers {{{','.join(MODELS)}}} [macmesh plan options]")
        return 2
    repo, config_of, tensors_of = MODELS[argv[0]]
    with tempfile.TemporaryDirectory() as tmp:
        config = config_of()
        folder = write_header_only_model(Path(tmp) / repo.split("/")[1], config, tensors_of(config))
        info = read_header_copy(repo, folder, 0)
        plan_module.resolve_model = lambda _text: info  # type: ignore[assignment]
        return plan_module.plan_cli([f"hf:{repo}", *argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
