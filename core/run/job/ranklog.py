"""What a rank's log file says besides its stderr: a line per step of its life (started,
each loading stage, loaded, ready, each answer's figures, a link test, an error, stopped),
with the time, so a capture's rank logs tell what each rank did even when no library
printed anything (a clean run's stderr is empty: the logs were 0 bytes, issue 35).

Never an answer's text (what a prompt asked is the person's), never a token event or the
beats and traffic reports that come several times a second."""

from __future__ import annotations

import json
import time
from typing import Any

from core.worker import protocol as p

JOURNALED = frozenset(
    {p.HELLO, p.LOADING, p.LOADED, p.READY, p.DONE, p.LINK_TEST, p.ERROR, p.STOPPED}
    | {p.CHECKPOINT, p.TRAINED}
)
_LEFT_OUT = frozenset({"event", "rank", "t", "text"})
MAX_VALUE_CHARS = 400  # one field's part of the line: a rank's event is bounded, but still


def journal_line(event: p.Event, now: float | None = None) -> str | None:
    """The log line for ``event`` (no newline), None for the kinds not journaled:
    ``2026-12-06T21:16:39Z loaded: load_s=1.2 device=cpu ...``, in UTC."""
    kind = event["event"]
    if kind not in JOURNALED:
        return None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    fields = " ".join(
        f"{key}={_value(value)}" for key, value in event.items() if key not in _LEFT_OUT
    )
    return f"{stamp} {kind}: {fields}".rstrip(": ").rstrip()


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"
