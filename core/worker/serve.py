"""A loaded rank's life: take commands, generate in lockstep, report.

Every rank reads the same commands, in the same order, from its own stdin
(the controller writes each command to every rank): an idle rank then waits
on a pipe, which costs nothing, whereas waiting inside an MLX collective
spins a core (the ring backend busy-polls its sockets). Every rank samples
the same token because every rank ends a forward pass with the same logits;
only rank 0 reports tokens and answers.

Cancelling one answer: the stdin reader notes a ``cancel`` command at once (it does not
wait in the command queue), but each rank reads it at its own moment, and ranks must stop
at the same token or their collectives fall out of step. So after each token every rank
adds its "cancelled?" flag into a one-number ``all_sum`` queued behind the next step, and
reads the sum one token later (by then it is computed: no stall); a sum above zero ends
the answer on every rank at that same token, with a ``done`` whose finish_reason is
"cancelled". The job stays ready for the next request. A prompt is read in chunks of
``PREFILL_STEP`` tokens, and between chunks (nothing is in flight then) the ranks agree on
the flag at once: a cancel ends a long prompt at its next chunk, not after all of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generation_stream, stream_generate
from mlx_lm.sample_utils import make_sampler

from core.worker import protocol as p
from core.worker.batching import Batcher
from core.worker.constrain import GrammarRefused, Grammars, prepare
from core.worker.faults import Faults, hooked
from core.worker.linktest import link_test
from core.worker.requests import (
    Cancels,
    Commands,
    RequestRefused,
    context_length,
    from_rank0,
    request_tokens,
)
from core.worker.residency import METER
from core.worker.sharding import Shard
from core.worker.stops import StopScanner

DEFAULT_MAX_TOKENS = p.DEFAULT_MAX_TOKENS


class _PromptCancelled(Exception):
    """Every rank agreed, between two chunks of the prompt, that its request is cancelled."""


class _Agreement:
    """Whether every rank has seen a cancel, agreed one token late (see the module doc)."""

    def __init__(self, group: mx.distributed.Group | None) -> None:
        self.group = group if group is not None and group.size() > 1 else None
        self._pending: mx.array | None = None

    def cancelled_now(self, local: bool) -> bool:
        """Agreed at once: for the boundaries between a prompt's chunks (nothing is in
        flight there, so waiting for the sum costs one round trip)."""
        if self.group is None:
            return local
        flag = mx.array([1 if local else 0], dtype=mx.int32)
        total = mx.distributed.all_sum(flag, group=self.group, stream=generation_stream)
        return bool((total > 0).item())

    def cancelled(self, local: bool) -> bool:
        if self.group is None:
            return local
        agreed = self._pending is not None and bool((self._pending > 0).item())
        flag = mx.array([1 if local else 0], dtype=mx.int32)
        self._pending = mx.distributed.all_sum(flag, group=self.group, stream=generation_stream)
        mx.async_eval(self._pending)
        return agreed


def generate(
    shard: Shard,
    command: p.GenerateCommand,
    events: p.EventWriter,
    rank: int,
    stream_tokens: bool,
    group: mx.distributed.Group | None = None,
    cancels: Cancels | None = None,
) -> None:
    """Run one request on this rank; rank 0 reports tokens and the summary (``done``). A
    prompt that is empty or does not fit the context is refused (an error event) on every
    rank alike."""
    request = command["id"]
    started = time.monotonic()
    try:
        ids = request_tokens(shard, command)
    except RequestRefused as refused:  # refused on every rank alike; the rank lives on
        if rank == 0:
            events.write(
                p.Error(
                    event=p.ERROR,
                    rank=events.rank,
                    t=time.monotonic(),
                    message=str(refused),
                    fatal=False,
                    request=request,
                )
            )
        return
    max_tokens = int(command.get("max_tokens", DEFAULT_MAX_TOKENS))
    context = context_length(shard)
    if not ids:  # mlx-lm cannot start from nothing: refused, the rank lives on
        if rank == 0:
            events.write(
                p.Error(
                    event=p.ERROR,
                    rank=events.rank,
                    t=time.monotonic(),
                    message="The prompt is empty: give the model some text to answer.",
                    fatal=False,
                    request=request,
                )
            )
        return
    if context is not None and len(ids) >= context:
        if rank == 0:
            events.write(
                p.Error(
                    event=p.ERROR,
                    rank=events.rank,
                    t=time.monotonic(),
                    message=f"The prompt is {len(ids)} tokens; this model's context is {context}.",
                    fatal=False,
                    request=request,
                    code=p.CONTEXT_LENGTH_EXCEEDED,
                )
            )
        return
    if context is not None:
        max_tokens = min(max_tokens, context - len(ids))
    if "seed" in command:  # every rank the same seed: they sample the same tokens
        mx.random.seed(int(command["seed"]) % (1 << 32))
    sampler = make_sampler(float(command.get("temperature", 0.0)), float(command.get("top_p", 1.0)))
    faults = Faults()  # the sampler raising ends this request alone, on every rank alike
    sampler = faults.guard(request, hooked(command, sampler))
    shared = bool(shard.token_from_rank0 and group is not None and group.size() > 1)
    if shared and group is not None:
        sampler = from_rank0(sampler, group)
    grammars = _grammars(shard)
    size = group.size() if group is not None else 1
    try:
        sampling, unmet = prepare(
            command,
            sampler,
            grammars,
            rank,
            size,
            shared,
            lambda own: from_rank0(own, group) if group is not None else own,
            budget=max_tokens,
        )
    except GrammarRefused as why:  # one rank alone: refused before it starts
        events.write(
            p.Error(
                event=p.ERROR,
                rank=events.rank,
                t=time.monotonic(),
                message=str(why),
                fatal=False,
                request=request,
            )
        )
        return
    if unmet is not None and cancels is not None:  # rank 0 of several: ended by all
        cancels.add(request)
    stops = StopScanner(command.get("stop", ()))
    agreement = _Agreement(group)

    def between_chunks(done: int, total: int) -> None:
        # mlx-lm calls this once more after the first token, with the second step in
        # flight: agreeing there would hold the first token back (the token cancel takes
        # over from then on).
        if done < total and agreement.cancelled_now(cancels is not None and request in cancels):
            raise _PromptCancelled

    cancelled = False
    first_at = None
    pieces: list[str] = []
    last = None
    logprobs: list[dict[str, Any]] = []
    tokens = stream_generate(
        shard.model,
        shard.tokenizer,
        ids,
        max_tokens=max_tokens,
        sampler=sampling.sampler,
        logits_processors=faults.guard_processors(request, sampling.processors),
        prefill_step_size=p.PREFILL_STEP,
        prompt_progress_callback=between_chunks,
    )
    for index, response in enumerate(_until_prompt_cancelled(tokens)):
        if response is None:
            cancelled = True
            break
        if first_at is None:
            first_at = time.monotonic()
        if agreement.cancelled(
            (cancels is not None and request in cancels) or faults.failed(request)
        ):
            cancelled = True
            break
        last = response
        text = stops.feed(response.text)
        if response.finish_reason is not None:
            text += stops.flush()
        # One token event per generated token, the end-of-sequence one included (its text
        # is empty unless it flushes some): mlx-lm counts it in generation_tokens, so the
        # events' count and timestamps give the same figures (core.run.measure.telemetry).
        if rank == 0:
            pieces.append(text)
            entry = sampling.logprobs(int(response.token), grammars)
            if response.finish_reason == "stop":  # the end-of-sequence token: no text
                entry = None
            if entry is not None:
                logprobs.append(entry)
            if stream_tokens and unmet is None:  # refused: only its error
                token = p.Token(
                    event=p.TOKEN,
                    rank=events.rank,
                    t=time.monotonic(),
                    request=request,
                    index=index,
                    token=int(response.token),
                    text=text,
                )
                if entry is not None:
                    token["logprobs"] = entry
                events.write(token)
        if stops.stopped:
            break
    # stream_generate evaluates the next step ahead, asynchronously, and may leave it in
    # flight when it stops: wait for it, or its collectives would interleave on the wire
    # with the next command's broadcast.
    mx.synchronize(generation_stream)
    if cancels is not None:
        cancels.discard(request)
    finish_reason = last.finish_reason if last else "length"
    if cancelled:
        finish_reason = p.CANCELLED
    elif stops.stopped:
        finish_reason = "stop"
    if rank == 0 and cancelled and faults.failed(request):  # ended for its own fault
        message = faults.message(request)
        events.write(
            p.Error(
                event=p.ERROR,
                rank=events.rank,
                t=time.monotonic(),
                message=message,
                fatal=False,
                request=request,
            )
        )
    elif rank == 0 and unmet is not None:
        events.write(
            p.Error(
                event=p.ERROR,
                rank=events.rank,
                t=time.monotonic(),
                message=unmet,
                fatal=False,
                request=request,
            )
        )
    elif rank == 0:
        done = p.Done(
            event=p.DONE,
            rank=events.rank,
            t=time.monotonic(),
            request=request,
            prompt_tokens=last.prompt_tokens if last else len(ids),
            prompt_tps=round(last.prompt_tps, 3) if last else 0.0,
            generation_tokens=last.generation_tokens if last else 0,
            generation_tps=round(last.generation_tps, 3) if last else 0.0,
            ttft_s=round(first_at - started, 6) if first_at else None,
            finish_reason=finish_reason,
            peak_memory_bytes=int(mx.get_peak_memory()),
            text="".join(pieces),
        )
        peak = METER.peak()  # the process's, since loaded (residency)
        if peak is not None:
            done["peak_generation_bytes"] = peak
        if sampling.recorded is not None:
            done["logprobs"] = logprobs
        events.write(done)


_GRAMMARS: dict[int, Grammars] = {}


def _grammars(shard: Shard) -> Grammars:
    """The shard's grammar compiler, made once (its llguidance tokenizer is built on the
    first request that needs it)."""
    key = id(shard.tokenizer)
    if key not in _GRAMMARS:
        text = shard.config.get("text_config")
        vocab = (text if isinstance(text, dict) else shard.config).get("vocab_size")
        _GRAMMARS[key] = Grammars(shard.tokenizer, vocab if isinstance(vocab, int) else None)
    return _GRAMMARS[key]


def _until_prompt_cancelled(tokens: Iterator[Any]) -> Iterator[Any]:
    """The responses, then None when the ranks agreed to cancel while reading the prompt."""
    try:
        yield from tokens
    except _PromptCancelled:
        yield None


def serve(
    shard: Shard,
    group: mx.distributed.Group,
    events: p.EventWriter,
    commands: Commands,
    stream_tokens: bool,
    batch: int = 1,
    cache_bytes: int = 0,
    kv: tuple[int, int] = (16, 64),
) -> None:
    """Run commands until ``stop``, or until the controller is gone. With ``batch`` above
    1, up to that many requests generate at once (``core.worker.batching``); with 1, one
    request at a time, each in full, as ``generate`` runs it. ``cache_bytes``: the bound of
    the batching ranks' prompt cache (``core.worker.promptcache``; 0: none); ``kv``: the
    KV cache's bits and group size (``core.worker.kvquant``), which it counts in tokens."""
    if batch > 1:
        Batcher(shard, group, events, commands, stream_tokens, batch, cache_bytes, kv).serve()
        return
    rank = group.rank()
    while True:
        command = commands.get()
        if command["op"] == p.OP_STOP:
            return
        if command["op"] == p.OP_GENERATE:
            generate(shard, command, events, rank, stream_tokens, group, commands.cancels)
        elif command["op"] == p.OP_LINK_TEST:
            link_test(group, command, events, commands.cancels)


def read_commands(events: p.EventWriter, rank: int) -> Commands:
    """Start the stdin reader; the controller closing stdin ends this process.

    Every rank watches its stdin: when the controller dies (or its SSH session
    drops), the pipe closes and the rank exits at once instead of lingering.
    """
    commands = Commands()

    def reader() -> None:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                command = p.parse_command(line)
                if command["op"] == p.OP_CANCEL:
                    commands.cancels.add(command["id"])
                else:
                    commands.put(command)
            except ValueError as exc:
                # Every rank refuses the same line; rank 0 says so, once.
                if rank == 0:
                    events.write(
                        p.Error(
                            event=p.ERROR,
                            rank=events.rank,
                            t=time.monotonic(),
                            message=f"Rank 0 refused a request: {exc}",
                            fatal=False,
                            request=_request_id(line),
                        )
                    )
        _controller_gone()

    threading.Thread(target=reader, name="macmesh-stdin", daemon=True).start()
    return commands


def _request_id(line: str) -> str:
    """The id of a refused command, when it has one, so its caller is answered."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return ""
    return str(record.get("id", "")) if isinstance(record, dict) else ""


def _controller_gone() -> None:
    # The log goes to the controller too: when it died, writing raises BrokenPipeError,
    # which must not end this thread before the exit (the rank would live on).
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write("macmesh worker: the controller closed stdin; exiting\n")
        sys.stderr.flush()
    os._exit(3)
