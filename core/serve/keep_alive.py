"""Keep-alives (issue 37): how long an idle model stays loaded (default 30 min;
``FOREVER``: never unloaded for idleness), and Ollama's ``keep_alive`` as a request or
``--keep-alive`` gives it."""

from __future__ import annotations

import contextlib
from typing import Any

DEFAULT_KEEP_ALIVE_S = 30 * 60.0
FOREVER = float("inf")


def parse_keep_alive(value: Any) -> float | None:
    """Ollama's ``keep_alive``: seconds (a number), a duration ("30s", "5m", "1h"), a
    negative number (forever) or 0 (unload now); None when absent. ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("'keep_alive' must be seconds or a duration such as \"5m\".")
    if isinstance(value, (int, float)):
        return FOREVER if value < 0 else float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
        for unit in ("ms", "h", "m", "s"):
            if text.endswith(unit):
                number = text[: -len(unit)]
                try:
                    seconds = float(number) * units[unit]
                except ValueError:
                    break
                return FOREVER if seconds < 0 else seconds
        else:
            with contextlib.suppress(ValueError):
                seconds = float(text)
                return FOREVER if seconds < 0 else seconds
    raise ValueError("'keep_alive' must be seconds or a duration such as \"5m\".")
