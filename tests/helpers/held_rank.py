"""A rank held inside a long native call, for the test that kills its controller.

``python -m tests.helpers.held_rank HOLD -m core.worker ARGS`` runs the worker exactly
as ``python -m core.worker ARGS`` would (its ``__main__``, its first line included),
except that a ``generate`` command puts the rank inside a native call that does not
return, after it says ``test: holding`` on stderr (the rank's log):

- ``mlx``: a loop of big MLX matmuls (MLX releases the GIL while it computes: measured
  here, a thread of the rank still runs every 50-250 ms);
- ``gil``: a native call that keeps the GIL (libc's ``sleep`` through ``ctypes.PyDLL``),
  as native code holding it would: no other thread of the rank runs, the stdin reader
  included.

``held_python(tmp, hold)`` writes the executable to give ``JobSpec.python``.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.machinery
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

HOLDING = "test: holding"
SERVE = "core.worker.serve"


def held_python(folder: Path, hold: str) -> str:
    """An executable that runs a rank held by ``hold`` (``mlx`` or ``gil``)."""
    script = folder / f"python-held-{hold}"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m tests.helpers.held_rank {hold} "$@"\n')
    script.chmod(0o755)
    return str(script)


def _say_holding() -> None:
    sys.stderr.write(HOLDING + "\n")
    sys.stderr.flush()


def _hold_in_mlx(*_args: Any, **_kwargs: Any) -> None:
    import mlx.core as mx

    _say_holding()
    a = mx.random.normal((1024, 1024))
    while True:
        x = a
        for _ in range(8):
            x = (x @ a) * 1e-3
        mx.eval(x)


def _hold_the_gil(*_args: Any, **_kwargs: Any) -> None:
    _say_holding()
    ctypes.PyDLL(None).sleep(3600)


HOLDS: dict[str, Callable[..., None]] = {"mlx": _hold_in_mlx, "gil": _hold_the_gil}


class _PatchServe(importlib.abc.MetaPathFinder):
    """Replaces ``generate`` in the worker's serve module as it is first imported, so
    nothing of the worker is imported before its ``__main__`` runs."""

    def __init__(self, generate: Callable[..., None]) -> None:
        self.generate = generate

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != SERVE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        assert spec is not None and spec.loader is not None
        loader, generate = spec.loader, self.generate
        real_exec = loader.exec_module  # type: ignore[union-attr]

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            module.generate = generate  # type: ignore[attr-defined]

        loader.exec_module = exec_module  # type: ignore[method-assign,union-attr]
        return spec


def main() -> None:
    hold, dash_m, module, *args = sys.argv[1:]
    assert (dash_m, module) == ("-m", "core.worker"), sys.argv
    sys.meta_path.insert(0, _PatchServe(HOLDS[hold]))
    sys.argv = [sys.argv[0], *args]
    runpy.run_module("core.worker", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
