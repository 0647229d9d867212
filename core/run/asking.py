"""One request on a running session, measured: what ``macmesh run``, ``demo --headless``
and ``compare`` report of an answer (tokens/s, time to first token, bytes per link)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from core.run.telemetry import Telemetry
from core.worker import protocol as p

if TYPE_CHECKING:
    from core.run.session import Session


def ask_once(
    session: Session, telemetry: Telemetry, prompt: str, max_tokens: int
) -> dict[str, Any]:
    """One request and its figures: tokens/s, time to first token, bytes per link."""
    before = telemetry.link_totals()
    started = time.monotonic()
    request = session.ask(prompt, max_tokens=max_tokens)
    telemetry.request_started(request, started)
    done = session.wait_done(request)
    elapsed = max(time.monotonic() - started, 1e-9)
    time.sleep(p.TRAFFIC_S + 0.2)  # the ranks' last traffic reports of this request
    after = telemetry.link_totals()
    summary = next((r for r in telemetry.requests() if r.id == request), None)
    return {
        "prompt_tokens": done["prompt_tokens"],
        "prompt_tps": done["prompt_tps"],
        "generation_tokens": done["generation_tokens"],
        "generation_tps": done["generation_tps"],
        "avg_tps": summary.avg_tps if summary else None,
        "ttft_s": summary.ttft_s if summary and summary.ttft_s is not None else done["ttft_s"],
        "link_bytes_per_s": {
            link: round((after.get(link, 0) - before.get(link, 0)) / elapsed, 1) for link in after
        },
        "finish_reason": done["finish_reason"],
        "text": done["text"],
    }
