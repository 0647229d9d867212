"""A loaded rank's life: take commands, generate in lockstep, report.

Every rank reads the same commands, in the same order, from its own stdin
(the controller writes each command to every rank): an idle rank then waits
on a pipe, which costs nothing, whereas waiting inside an MLX collective
spins a core (the ring backend busy-polls its sockets). Every rank samples
the same token because every rank ends a forward pass with the same logits;
only rank 0 reports tokens and answers.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generation_stream, stream_generate

from core.worker import protocol as p
from core.worker.linktest import link_test
from core.worker.sharding import Shard

DEFAULT_MAX_TOKENS = p.DEFAULT_MAX_TOKENS


def prompt_tokens(tokenizer: Any, command: dict[str, Any]) -> list[int]:
    """Token ids for a command: chat messages, a chat prompt, or raw text."""
    messages = command.get("messages")
    if messages is None and command.get("chat", True):
        messages = [{"role": "user", "content": command.get("prompt", "")}]
    if messages is not None and getattr(tokenizer, "chat_template", None):
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    text = command.get("prompt") or "".join(m.get("content", "") for m in messages or [])
    return list(tokenizer.encode(text))


def generate(
    shard: Shard, command: dict[str, Any], events: p.EventWriter, rank: int, stream_tokens: bool
) -> dict[str, Any]:
    """Run one request on this rank; rank 0 reports tokens and the summary."""
    request = command.get("id", "")
    started = time.monotonic()
    ids = prompt_tokens(shard.tokenizer, command)
    max_tokens = int(command.get("max_tokens", DEFAULT_MAX_TOKENS))
    first_at = None
    pieces: list[str] = []
    last = None
    for index, response in enumerate(
        stream_generate(shard.model, shard.tokenizer, ids, max_tokens=max_tokens)
    ):
        if first_at is None:
            first_at = time.monotonic()
        last = response
        if rank != 0 or (response.finish_reason == "stop" and not response.text):
            continue  # the end-of-sequence token is not text (but may flush some)
        pieces.append(response.text)
        if stream_tokens:
            events.emit(
                p.TOKEN, request=request, index=index, token=int(response.token), text=response.text
            )
    # stream_generate evaluates the next step ahead, asynchronously, and may leave it in
    # flight when it stops: wait for it, or its collectives would interleave on the wire
    # with the next command's broadcast.
    mx.synchronize(generation_stream)
    summary = {
        "request": request,
        "prompt_tokens": last.prompt_tokens if last else len(ids),
        "prompt_tps": round(last.prompt_tps, 3) if last else 0.0,
        "generation_tokens": last.generation_tokens if last else 0,
        "generation_tps": round(last.generation_tps, 3) if last else 0.0,
        "ttft_s": round(first_at - started, 6) if first_at else None,
        "finish_reason": last.finish_reason if last else "length",
        "peak_memory_bytes": int(mx.get_peak_memory()),
        "text": "".join(pieces),
    }
    if rank == 0:
        events.emit(p.DONE, **summary)
    return summary


def serve(
    shard: Shard,
    group: mx.distributed.Group,
    events: p.EventWriter,
    commands: queue.Queue[dict[str, Any]],
    stream_tokens: bool,
) -> None:
    """Run commands until ``stop``, or until the controller is gone."""
    rank = group.rank()
    while True:
        command = commands.get()
        op = command["op"]
        if op == p.OP_STOP:
            return
        if op == p.OP_GENERATE:
            generate(shard, command, events, rank, stream_tokens)
        elif op == p.OP_LINK_TEST:
            link_test(group, command, events)


def read_commands(events: p.EventWriter, rank: int) -> queue.Queue[dict[str, Any]]:
    """Start the stdin reader; the controller closing stdin ends this process.

    Every rank watches its stdin: when the controller dies (or its SSH session
    drops), the pipe closes and the rank exits at once instead of lingering.
    """
    commands: queue.Queue[dict[str, Any]] = queue.Queue()

    def reader() -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                commands.put(p.parse_command(line))
            except ValueError as exc:
                # Every rank refuses the same line; rank 0 says so, once.
                if rank == 0:
                    events.emit(
                        p.ERROR,
                        message=f"Rank 0 refused a request: {exc}",
                        fatal=False,
                        request=_request_id(line),
                    )
        _controller_gone()

    threading.Thread(target=reader, name="macmesh-stdin", daemon=True).start()
    return commands


def _request_id(line: str) -> str:
    """The id of a refused command, when it has one, so its caller is answered."""
    try:
        record = json.loads(line)
    except ValueError:
        return ""
    return str(record.get("id", "")) if isinstance(record, dict) else ""


def _controller_gone() -> None:
    sys.stderr.write("macmesh worker: the controller closed stdin; exiting\n")
    sys.stderr.flush()
    os._exit(3)
