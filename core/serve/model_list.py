"""One served model as the API (``GET /v1/models``, ``/api/tags``, ``/api/ps``), the
CLI and the window's models panel list it: its state, Macs, memory, idle time, requests
running and waiting, and keep-alive (issue 37)."""

from __future__ import annotations

import time
from typing import Any

from core.serve.keep_alive import FOREVER
from core.serve.models import ModelEntry, ModelState


def describe(entry: ModelEntry) -> dict[str, Any]:
    """One model as the API and the window list it."""
    now = time.monotonic()
    answers = entry.served.answers if entry.served is not None else None
    left = entry.keep_alive_s - (now - entry.last_used) if entry.last_used else None
    return {
        "name": entry.name,
        "state": entry.state.value,
        "nodes": entry.nodes(),
        "memory_bytes": entry.memory_bytes(),
        "strategy": entry.plan.strategy.value if entry.plan is not None else None,
        "idle_s": round(entry.idle_s(now), 1) if entry.state is ModelState.LOADED else None,
        "running": answers.serving if answers is not None else 0,
        "waiting": answers.depth if answers is not None else 0,
        "keep_alive_s": None if entry.keep_alive_s == FOREVER else entry.keep_alive_s,
        "unloads_in_s": (
            None
            if entry.state is not ModelState.LOADED or left is None or left == FOREVER
            else round(max(0.0, left), 1)
        ),
        "error": entry.error,
        "pinned": entry.spec.pinned,
    }
