"""Ask a started session once, stream the answer, summarise: the end of ``macmesh run``
and ``macmesh demo --headless``.

Front-end code: it prints. The session (``core.run.session.Session``) does the work.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

from core.cli.interrupt import Stage, interrupted
from core.run.errors import ClusterError
from core.run.job.launcher import JobError
from core.run.tasks.adapter_payload import AdapterPayload
from core.run.tasks.chat import chat
from core.units import bytes_per_s, rate, seconds
from core.worker import protocol as p

if TYPE_CHECKING:
    from core.run.session import Session

DEFAULT_PROMPT = "What is the capital of France?"
# One answer's length: far above any context a Mac holds, and a bound on what a typo asks.
MAX_TOKENS = 1_000_000


def with_adapter(session: Session) -> str:
    """A line saying which adapter the Start applies ("" without one)."""
    use = session.payload_of(AdapterPayload)
    return f"With the adapter {use.name} ({use.path}).\n" if use is not None else ""


def adapter_about(session: Session) -> dict[str, Any]:
    """The summary's adapter fields (none without one)."""
    use = session.payload_of(AdapterPayload)
    return {} if use is None else {"adapter": use.name, "adapter_path": str(use.path)}


def check_max_tokens(max_tokens: int) -> None:
    if not 1 <= max_tokens <= MAX_TOKENS:
        raise ClusterError(f"--max-tokens must be 1 to {MAX_TOKENS:,}")


def launch_and_ask(
    session: Session,
    prompt: str,
    max_tokens: int,
    about: dict[str, Any],
    what: str,
    out: TextIO,
    err: TextIO,
    as_json: bool = False,
    stage: Stage | None = None,
) -> int:
    """The chat task on ``session`` (``core.run.tasks.chat``): launched, ``prompt`` asked
    once with the answer streamed to ``out``, every rank stopped; then ``about`` and the
    figures (one JSON line with ``as_json``). The exit code: 0, 1 when ``what`` (the
    cluster) failed, 2 when it could not be launched, 130 when interrupted (``stage``
    follows what it is doing)."""
    stage = stage or Stage("loading the model")
    stage.session = session

    def show(event: p.Event) -> None:
        if event["event"] == p.READY:
            stage("generating the answer")
        stage.streamed = print_token(event, out) or stage.streamed

    session.event.connect(show)
    try:
        stage("loading the model")
        answer = chat(session, prompt, max_tokens)
    except ClusterError as exc:
        err.write(f"macmesh: {exc}\n")
        return 2
    except JobError as exc:
        logs = session.job.run_dir if session.job is not None else "none"
        after = " after the answer" if stage.streamed else ""
        advice = session.failure_advice()
        err.write(f"\nmacmesh: {what} failed{after}: {exc}\n")
        err.write(f"{advice}\nLogs: {logs}\n" if advice else f"Logs: {logs}\n")
        return 1
    except KeyboardInterrupt:
        return interrupted(stage, err)
    finally:
        session.stop()
    summary = {
        **about,
        **answer.figures.as_dict(),
        "link_bytes_per_s": answer.link_bytes_per_s,
        "ranks": answer.ranks,
    }
    if answer.not_kept:
        err.write(f"macmesh: {answer.not_kept}\n")
    out.write("\n")
    out.write(json.dumps(summary) + "\n" if as_json else human_summary(summary))
    out.flush()
    return 0


def print_token(event: p.Event, out: TextIO) -> bool:
    """Write a token event's text to ``out``; whether it was one."""
    if event["event"] != p.TOKEN:
        return False
    out.write(event["text"])
    out.flush()
    return True


def human_summary(summary: dict[str, Any]) -> str:
    links = ", ".join(f"{k} {bytes_per_s(v)}" for k, v in summary["link_bytes_per_s"].items())
    return (
        f"{summary['strategy']} on {summary['nodes']} node(s): "
        f"{rate(summary['generation_tps'])} tokens/s, first token after "
        f"{seconds(summary['ttft_s'])}, prompt {rate(summary['prompt_tps'])} tokens/s"
        + (f"; links: {links}" if links else "")
        + "\n"
    )
