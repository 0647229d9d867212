"""Fuse an adapter into its base model and write the result as a new model folder.

Run as its own process (``python -m core.worker.fuse --model M --adapter A --out DIR``),
so the app that asks for it never imports mlx: ``core.tune.fuse`` starts it. It is
``mlx_lm.fuse`` (mlx-lm's own ``load(adapter_path=...)``, each layer's ``fuse``, and its
``save``), with MacMesh's checks and one clear line on failure: the folder is written
under ``DIR.partial`` and renamed to ``DIR`` only once complete, so a failed or stopped
fuse leaves no half model behind. The fused model has the base's format (a quantized
base stays quantized, as ``mlx_lm.fuse`` does) unless ``--dequantize``.

Its last stdout line is JSON: ``{"path": DIR}``; on failure ``{"error": "..."}``, exit 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
from pathlib import Path
from typing import Any


def fuse(model: Path, adapter: Path, out: Path, dequantize: bool = False) -> Path:
    """Write base ``model`` + ``adapter`` fused at ``out`` (which must not exist yet)."""
    from mlx.utils import tree_unflatten
    from mlx_lm.utils import dequantize_model, load, save

    # lazy (start-up order): the adapter module pulls mlx-lm, imported only to fuse
    from core.worker.adapter import AdapterError, read_config

    if out.exists():
        raise AdapterError(f"{out} exists already: choose another name")
    read_config(adapter)  # not an adapter: one line, before loading anything
    try:
        loaded: tuple[Any, ...] = load(str(model), adapter_path=str(adapter), return_config=True)
    except ValueError as exc:
        first = str(exc).splitlines()
        detail = first[1].strip() if len(first) > 1 else first[0]
        raise AdapterError(
            f"the adapter in {adapter} does not fit {model.name}: {detail}"
        ) from None
    network, tokenizer, config = loaded[0], loaded[1], loaded[2]
    fused = [
        (n, m.fuse(dequantize=dequantize)) for n, m in network.named_modules() if hasattr(m, "fuse")
    ]
    if fused:
        network.update_modules(tree_unflatten(fused))
    if dequantize:
        network = dequantize_model(network)
        config.pop("quantization", None)
        config.pop("quantization_config", None)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        save(partial, str(model), network, tokenizer, config, donate_model=False)
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.worker.fuse", description=__doc__)
    parser.add_argument("--model", required=True, help="the base model folder")
    parser.add_argument("--adapter", required=True, help="the adapter folder (mlx-lm's layout)")
    parser.add_argument("--out", required=True, help="the new model folder (must not exist)")
    parser.add_argument("--dequantize", action="store_true", help="write float weights")
    args = parser.parse_args(argv)
    # Stopped (SIGTERM): unwind, so the .partial folder is removed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    events = sys.stdout
    sys.stdout = sys.stderr  # what mlx-lm prints goes to the log; stdout says the result
    # lazy (start-up order): mlx-lm, imported only when a fuse runs
    from core.worker.adapter import AdapterError

    try:
        path = fuse(Path(args.model), Path(args.adapter), Path(args.out), args.dequantize)
    except (AdapterError, OSError) as exc:
        events.write(json.dumps({"error": str(exc)}) + "\n")
        return 1
    except Exception as exc:
        events.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        return 1
    events.write(json.dumps({"path": str(path)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
