"""Continuous batching over the sharded ranks: requests join and leave at token boundaries.

Built on mlx-lm's ``BatchGenerator`` (its batched KV caches, left padding, per-request
samplers, ``insert`` / ``remove`` / ``next``); this module is the layer that keeps every
rank's generator in step. Every rank runs the same model calls with the same shapes, so
the collectives inside a pipeline or tensor shard stay matched, as long as every rank
inserts and removes the same requests at the same step. That is the agreement here:

- The commands arrive on every rank's stdin in the same order but at different moments.
  Rank 0 alone decides, at each token boundary, how many of the ``generate`` commands at
  the head of its queue join and which running requests its cancels end; it puts that in
  a small vector (``Control``) that the other ranks receive through an ``all_sum`` where
  they add zeros. The boundary is where the step in flight has ended: the decision is
  taken then, on what rank 0 has seen by then, and applied before the next step, so a
  request that arrives while others stream is prefilled in the very next step (the
  vector's round trip and the next step's graph are the only pause: the decode steps no
  longer overlap). The other ranks then take the same number of commands off their own
  queue (they are there, or about to be: the controller wrote them to every rank).
- A prompt is read in chunks of ``PREFILL_STEP`` tokens, one chunk per step, after the
  running requests' decode (mlx-lm's ``BatchGenerator`` order): the running streams go
  on while a newcomer's long prompt is read, and a cancel (its client left, Stop) ends a
  request still being read at its next chunk, so it never holds the others for the rest
  of its prompt.
- What the tokens decide (an end-of-sequence, ``max_tokens``, a stop string) every rank
  sees alike, because every rank samples the same tokens: each request's sampler draws
  from its own key (its seed), on the same logits on every rank, or (a pipeline whose
  other ranks skip the head) rank 0's token is summed to them.

Each request keeps its own detokenizer, stop strings and events: the same ``token`` and
``done`` events, with the same fields, that one request at a time gives.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, cast

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, generation_stream
from mlx_lm.sample_utils import apply_top_p

from core.worker import kvbits
from core.worker import protocol as p
from core.worker.constrain import GrammarRefused, Grammars, Prepared, prepare
from core.worker.faults import Faults, hooked
from core.worker.joinmemory import JoinReserve, join_bytes
from core.worker.linktest import link_test
from core.worker.promptcache import DEFAULT_BYTES, PromptCache, kv_bytes_per_token
from core.worker.requests import (
    Commands,
    RequestRefused,
    context_length,
    from_rank0,
    request_tokens,
)
from core.worker.residency import METER
from core.worker.sharding import Shard
from core.worker.stops import StopScanner


@dataclass
class Running:
    """One request in the batch: what rank 0 reports for it, and how it ends."""

    request: str
    uid: int
    prompt_tokens: int
    started: float
    detokenizer: Any
    stops: StopScanner
    cached_tokens: int = 0  # the prompt's tokens whose KV came from the prompt cache
    tenant: str | None = None  # whose prompt cache entries it reads and keeps
    first_at: float | None = None
    generated: int = 0  # tokens sampled, the end-of-sequence one included
    read: bool = False  # its whole prompt read (it joined the generating rows)
    last_token: int | None = None
    pieces: list[str] = field(default_factory=list)
    sampling: Prepared | None = None  # its grammar and logprobs (core.worker.constrain)
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # per token, when asked
    refused: str | None = None  # rank 0 could not compile its grammar: ended with this error


def greedy(logprobs: mx.array) -> mx.array:
    """The most likely token of each row: one object shared by every greedy request, so
    mlx-lm samples a batch of them in one call."""
    return mx.argmax(logprobs, axis=-1)


def seeded_sampler(temperature: float, top_p: float, seed: int) -> Any:
    """A request's own sampler: it draws from its own key, so its tokens depend on its
    seed alone, never on which requests share the batch (nor on the global random state)."""
    if temperature <= 0:
        return greedy
    key = [mx.random.key(seed % (1 << 32))]

    def sample(logprobs: mx.array) -> mx.array:
        key[0], draw = mx.random.split(key[0])
        if 0 < top_p < 1:
            logprobs = apply_top_p(logprobs, top_p)
        token: mx.array = mx.random.categorical(logprobs * (1 / temperature), key=draw)
        return token

    return sample


class Control:
    """Rank 0's decision at one token boundary, on every rank: ``[joining, chunk,
    cancelled uid + 1, ..., -(failed uid + 1), ...]`` (padded with zeros)."""

    def __init__(self, group: mx.distributed.Group | None, limit: int) -> None:
        self.group = group if group is not None and group.size() > 1 else None
        self.rank = group.rank() if group is not None else 0
        self.limit = limit
        self.failed: list[int] = []  # the last agreement's failed uids (``core.worker.faults``)

    def agree(
        self,
        joining: int,
        cancelled: list[int],
        chunk: int = p.PREFILL_STEP,
        failed: list[int] | None = None,
    ) -> tuple[int, list[int], int]:
        """Rank 0's ``joining``, ``cancelled`` and prompt ``chunk`` on every rank (the
        others' arguments are ignored: they add zeros); its ``failed`` in ``self.failed``.
        Called with nothing in flight, it returns at once."""
        ids = [uid + 1 for uid in cancelled] + [-(uid + 1) for uid in failed or ()]
        values = [joining, chunk, *ids[: self.limit]]
        values += [0] * (self.limit + 2 - len(values))
        if self.group is not None:
            local = mx.array(values if self.rank == 0 else [0] * len(values), dtype=mx.int32)
            summed = mx.distributed.all_sum(local, group=self.group, stream=generation_stream)
            values = _ints(summed)
        self.failed = [-v - 1 for v in values[2:] if v < 0]
        return values[0], [v - 1 for v in values[2:] if v > 0], max(1, values[1])


class Chunks:
    """Rank 0's prompt chunk: ``PREFILL_STEP`` while no request generates; while others
    stream, sized so one step (their token and the chunk) takes about ``STEP_S``, from the
    last steps' times (a loaded machine reads fewer tokens a step), between ``MIN`` and
    ``PREFILL_STEP_BESIDE_STREAMS``. Rank 0 alone measures; every rank applies what it
    decided (``Control``), so their model calls keep the same shapes."""

    STEP_S = 0.4
    # As few as 4: on a loaded CPU demo 16 tokens beside a stream took 0.8 s a step (the
    # others' gap over 1 s, issue 33); a long prompt is then read more slowly, not them.
    MIN = 4

    def __init__(self) -> None:
        self.beside = p.PREFILL_STEP_BESIDE_STREAMS

    def chunk(self, streaming: bool) -> int:
        return self.beside if streaming else p.PREFILL_STEP

    def took(self, chunk: int, seconds: float) -> None:
        """A step that read ``chunk`` prompt tokens beside others' tokens took ``seconds``."""
        if seconds <= 0:
            return
        wanted = chunk * self.STEP_S / seconds
        settled = 0.5 * self.beside + 0.5 * wanted
        self.beside = int(max(self.MIN, min(p.PREFILL_STEP_BESIDE_STREAMS, settled)))


def _rank_token_bytes(shard: Shard, kv: tuple[int, int], ranks: int) -> int:
    """The KV bytes a token takes on this rank: its layers' (a pipeline), or its slice of
    every layer's heads (tensor: one of ``ranks``)."""
    held = None if shard.layers is None else shard.layers[1] - shard.layers[0]
    whole = kvbits.scaled(kv_bytes_per_token(shard.config, layers=held), *kv, dtype_bytes=4)
    return whole if held is not None else math.ceil(whole / ranks)


class Batcher:
    """The rank's command loop with up to ``limit`` requests generating at once."""

    def __init__(
        self,
        shard: Shard,
        group: mx.distributed.Group,
        events: p.EventWriter,
        commands: Commands,
        stream_tokens: bool,
        limit: int,
        cache_bytes: int = DEFAULT_BYTES,
        kv: tuple[int, int] = (16, 64),  # the KV cache's bits and group size (kvquant)
    ) -> None:
        self.shard, self.group, self.events = shard, group, events
        self.commands = commands
        self.rank = group.rank()
        self.stream_tokens = stream_tokens
        self.limit = limit
        self.control = Control(group, limit)
        self.faults = Faults()  # requests whose own sampler raised: ended alone
        self.chunks = Chunks()
        self._timed: tuple[float, int] | None = None  # (started, chunk) of a step to time
        self.running: dict[int, Running] = {}  # by the generator's uid
        per_token = kvbits.scaled(kv_bytes_per_token(shard.config), *kv, dtype_bytes=4)
        self.prompts = PromptCache(cache_bytes // per_token) if cache_bytes > 0 else None
        self._rank_token_bytes = _rank_token_bytes(shard, kv, group.size())
        self.reserve = JoinReserve.for_this_rank(generation_stream)
        tokenizer = shard.tokenizer
        self.generator = BatchGenerator(
            shard.model,
            stop_tokens=[[t] for t in sorted(tokenizer.eos_token_ids)],
            sampler=greedy,
            completion_batch_size=limit,
            prefill_batch_size=limit,
            prefill_step_size=p.PREFILL_STEP,
        )
        self._shared = shard.token_from_rank0 and group.size() > 1
        self._greedy = from_rank0(greedy, group) if self._shared else greedy
        self.grammars = Grammars(tokenizer, _vocab_size(shard.config))

    # -- the loop --------------------------------------------------------------------------

    def serve(self) -> None:
        """Run commands until ``stop``. Idle, every rank waits on its own stdin."""
        while True:
            if not self.running:
                mx.synchronize(generation_stream)  # nothing of a batch left on the wire
                command = self.commands.get()
                if command["op"] == p.OP_STOP:
                    return
                if command["op"] == p.OP_LINK_TEST:
                    link_test(self.group, command, self.events, self.commands.cancels)
                elif command["op"] == p.OP_GENERATE:
                    self._join(command)
                if not self.running:
                    continue
            self.step()

    def step(self) -> None:
        """At the token boundary (the step in flight ended), rank 0's decision agreed and
        applied: the cancelled out, the joining in; then one step: a token for every
        request generating, and the next chunk of every prompt being read."""
        mx.synchronize(generation_stream)
        now = time.monotonic()
        if self._timed is not None and self.rank == 0:  # the last step read beside streams
            self.chunks.took(self._timed[1], now - self._timed[0])
        self._timed = None
        chosen, cancelled = self._decide()
        streaming = any(r.generated > 0 for r in self.running.values())
        reading = any(r.generated == 0 for r in self.running.values()) or bool(chosen)
        joining, cancelled, chunk = self.control.agree(
            len(chosen), cancelled, self.chunks.chunk(streaming), self._failed()
        )
        ended = [uid for uid in cancelled if uid in self.running]
        for uid in ended:
            self._finish(self.running[uid], p.CANCELLED)
        self._remove(ended)
        self._drop_failed([uid for uid in self.control.failed if uid in self.running])
        for _ in range(joining):
            command = chosen.pop(0) if self.rank == 0 else self.commands.get()
            # Every rank's queue holds the same lines: rank 0 chose from its head, the
            # others' heads are the same generate commands.
            assert command["op"] == p.OP_GENERATE, command["op"]
            self._join(command)
        if not self.running:
            return
        # While others stream, a newcomer's prompt is read in smaller chunks (rank 0's
        # choice, agreed above), so their next token never waits long.
        self.generator.prefill_step_size = chunk
        if streaming and reading:  # timed from this boundary to the next
            self._timed = (now, chunk)
        if streaming and any(not r.read for r in self.running.values()):
            self.reserve.grow(self._join_bytes())
        else:
            self.reserve.release()
        read, responses = self.generator.next()
        joined = [self.running[r.uid] for r in read if r.end_of_prompt and r.uid in self.running]
        for running in joined:
            running.read = True
        if joined:  # the join is evaluated in the next step: it takes the memory held
            self.reserve.release()
        self._remove([r.uid for r in responses if self._token_or_fault(r)])

    def _join_bytes(self) -> int:
        """What joining the prompt being read will allocate on this rank (``joinmemory``)."""
        rows = sum(1 for r in self.running.values() if r.read)
        longest = max(r.prompt_tokens + r.generated for r in self.running.values())
        return join_bytes(rows, longest + 1, self._rank_token_bytes)

    # -- joining -------------------------------------------------------------------------

    def _decide(self) -> tuple[list[p.GenerateCommand], list[int]]:
        """Rank 0: the generate commands at the head of its queue that fit, and the running
        requests cancelled. Other ranks decide nothing (they add zeros)."""
        if self.rank != 0:
            return [], []
        chosen: list[p.GenerateCommand] = []
        free = self.limit - len(self.running)
        queue = self.commands
        while len(chosen) < free:
            with queue.mutex:
                head = queue.queue[0] if queue.queue else None
            if head is None or head["op"] != p.OP_GENERATE:
                break
            queue.get_nowait()  # the head, taken
            chosen.append(head)
        cancels = self.commands.cancels
        cancelled = [uid for uid, r in self.running.items() if r.request in cancels]
        return chosen, [uid for uid in cancelled if uid not in self._failed()]

    def _failed(self) -> list[int]:
        """Rank 0: the running requests whose own step raised (every rank ends them when
        rank 0 says, so they stay in step whatever raised where)."""
        if self.rank != 0:
            return []
        return [uid for uid, r in self.running.items() if self.faults.failed(r.request)]

    def _drop_failed(self, uids: list[int]) -> None:
        """Failed requests out (their error said by rank 0), their caches not kept."""
        if not uids:
            return
        for uid in uids:
            request = self.running.pop(uid).request
            message = self.faults.message(request)
            self.commands.cancels.discard(request)
            self._refuse(request, message)
        self.generator.remove(uids)

    def _join(self, command: p.GenerateCommand) -> None:
        """Insert one request into the generator (every rank alike), or refuse it: one
        whose prompt cannot be made (the chat template raised, a token outside the
        vocabulary) ends alone, with an error event; the batch goes on. Every rank runs the
        same code on the same command, so every rank refuses it alike."""

        request = command["id"]
        started = time.monotonic()
        try:
            ids = request_tokens(self.shard, command)
        except RequestRefused as refused:
            self._refuse(request, str(refused))
            return
        context = context_length(self.shard)
        max_tokens = int(command.get("max_tokens", p.DEFAULT_MAX_TOKENS))
        if not ids:
            self._refuse(request, "The prompt is empty: give the model some text to answer.")
            return
        if context is not None and len(ids) >= context:
            message = f"The prompt is {len(ids)} tokens; this model's context is {context}."
            self._refuse(request, message, code=p.CONTEXT_LENGTH_EXCEEDED)
            return
        if context is not None:
            max_tokens = min(max_tokens, context - len(ids))
        sampler = seeded_sampler(
            float(command.get("temperature", 0.0)),
            float(command.get("top_p", 1.0)),
            int(command.get("seed", 0)),
        )
        if sampler is greedy:
            sampler = self._greedy
        if sampler is not self._greedy:  # one call a row: its failure is its own
            sampler = self.faults.guard(request, hooked(command, sampler))
        if self._shared and sampler is not self._greedy:
            sampler = from_rank0(sampler, self.group)
        try:
            sampling, unmet = prepare(
                command,
                sampler,
                self.grammars,
                self.rank,
                self.group.size(),
                self._shared,
                lambda own: from_rank0(own, self.group),
                budget=max_tokens,
            )
        except GrammarRefused as why:  # one rank alone: refused before it joins
            self._refuse(request, str(why))
            return
        if unmet is not None:  # rank 0 of several: it joins, and every rank ends it
            self.commands.cancels.add(request)
        tenant = command.get("tenant")
        cached, caches = self.prompts.fetch(ids, tenant) if self.prompts is not None else (0, None)
        (uid,) = self.generator.insert(
            [ids[cached:]],
            max_tokens=[max_tokens],
            caches=[caches] if caches is not None else None,
            all_tokens=[ids[:cached]] if caches is not None else None,
            samplers=[sampling.sampler],
            logits_processors=[self.faults.guard_processors(request, sampling.processors)],
        )
        self.running[uid] = Running(
            request=request,
            uid=uid,
            prompt_tokens=len(ids),
            cached_tokens=cached,
            tenant=tenant,
            started=started,
            detokenizer=self.shard.tokenizer.detokenizer,
            stops=StopScanner(command.get("stop", ())),
            sampling=sampling,
            refused=unmet,
        )

    def _refuse(self, request: str, message: str, code: str | None = None) -> None:
        if self.rank != 0:
            return
        error = p.Error(
            event=p.ERROR,
            rank=self.events.rank,
            t=time.monotonic(),
            message=message,
            fatal=False,
            request=request,
        )
        if code is not None:
            error["code"] = code
        self.events.write(error)

    # -- tokens and ends -----------------------------------------------------------------

    def _token_or_fault(self, response: Any) -> bool:
        """``_token``; what it raises is that request's fault (ended at the next boundary)."""
        try:
            return self._token(response)
        except Exception as error:
            running = self.running.get(response.uid)
            if running is not None:
                self.faults.note(running.request, error)
            return False

    def _token(self, response: Any) -> bool:
        """A sampled token of one request: its text, its event; True when it ended."""
        running = self.running.get(response.uid)
        if running is None:  # cancelled or stopped a step ago: its last step is moot
            return False
        now = time.monotonic()
        index = running.generated
        running.generated += 1
        running.last_token = int(response.token)
        if running.first_at is None:
            running.first_at = now
        reason = response.finish_reason
        detokenizer = running.detokenizer
        if reason != "stop":  # the end-of-sequence token is not text
            detokenizer.add_token(response.token)
        if reason is not None:
            detokenizer.finalize()
            if self.prompts is not None and response.prompt_cache is not None:
                self.prompts.store(list(response.all_tokens), response.prompt_cache, running.tenant)
        text = running.stops.feed(detokenizer.last_segment)
        if reason is not None:
            text += running.stops.flush()
        if self.rank == 0:  # every generated token has its event, end-of-sequence too (empty):
            running.pieces.append(text)  # the token events count what ``done`` counts
            logprobs = self._logprobs(running, int(response.token), reason != "stop")
            if self.stream_tokens and running.refused is None:  # refused: only its error
                self._token_event(running.request, index, int(response.token), text, logprobs)
        if running.stops.stopped:
            self._finish(running, "stop")
            return True
        if reason is not None:
            self._finish(running, reason)
            return True
        return False

    def _logprobs(self, running: Running, token: int, text: bool) -> dict[str, Any] | None:
        """The step's logprobs (rank 0, when the request asked), kept for ``done`` too;
        none for the end-of-sequence token (``text`` False), which is no text (OpenAI's)."""
        if running.sampling is None or running.sampling.recorded is None:
            return None
        entry = running.sampling.logprobs(token, self.grammars)
        if not text:
            return None
        if entry is not None:
            running.logprobs.append(entry)
        return entry

    def _finish(self, running: Running, reason: str) -> None:
        """Rank 0 reports the request's end: the ``done`` event one request alone gives."""
        self.commands.cancels.discard(running.request)
        self.faults.take(running.request)  # a fault in its last step came too late to matter
        if self.rank != 0:
            return
        if running.refused is not None:
            self._refuse(running.request, running.refused)
            return
        now = time.monotonic()
        first = running.first_at
        prefill_s = (first - running.started) if first is not None else 0.0
        decode_s = now - first if first is not None else 0.0
        done = p.Done(
            event=p.DONE,
            rank=self.events.rank,
            t=time.monotonic(),
            request=running.request,
            prompt_tokens=running.prompt_tokens,
            prompt_tps=round(running.prompt_tokens / prefill_s, 3) if prefill_s > 0 else 0.0,
            generation_tokens=running.generated,
            generation_tps=round(running.generated / decode_s, 3) if decode_s > 0 else 0.0,
            ttft_s=round(prefill_s, 6) if first is not None else None,
            finish_reason=reason,
            peak_memory_bytes=int(mx.get_peak_memory()),
            text="".join(running.pieces),
            cached_tokens=running.cached_tokens,
        )
        peak = METER.peak()  # the process's, since loaded (residency)
        if peak is not None:
            done["peak_generation_bytes"] = peak
        if running.sampling and running.sampling.recorded:
            done["logprobs"] = running.logprobs
        self.events.write(done)

    def _token_event(
        self, request: str, index: int, token: int, text: str, logprobs: dict[str, Any] | None
    ) -> None:
        event = p.Token(
            event=p.TOKEN,
            rank=self.events.rank,
            t=time.monotonic(),
            request=request,
            index=index,
            token=token,
            text=text,
        )
        if logprobs is not None:
            event["logprobs"] = logprobs
        self.events.write(event)

    def _remove(self, uids: list[int]) -> None:
        """Out of the generator (every rank alike) and out of ``running``."""
        if not uids:
            return
        kept = self.generator.remove(uids, return_prompt_caches=self.prompts is not None)
        if self.prompts is not None:
            for uid, (caches, tokens) in kept.items():  # the same order on every rank
                running = self.running.get(uid)
                tenant = running.tenant if running is not None else None
                self.prompts.store(list(tokens), caches, tenant)
        for uid in uids:
            self.running.pop(uid, None)


def _vocab_size(config: dict[str, Any]) -> int | None:
    text = config.get("text_config")
    value = (text if isinstance(text, dict) else config).get("vocab_size")
    return value if isinstance(value, int) and value > 0 else None


def _ints(array: mx.array) -> list[int]:
    """A 1-D int32 array's values."""
    return [int(v) for v in cast(list[int], array.tolist())]
