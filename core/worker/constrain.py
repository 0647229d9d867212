"""Constrained decoding and logprobs on the rank that samples (issue 34).

A ``generate`` command may carry ``grammar``: an llguidance grammar (the controller made
it from a JSON schema and checked that it compiles: ``core.serve.structured``). The rank
compiles it again against its own tokenizer (an ``LLMatcher``: native, bound to the
tokenizer, so the controller sends the source, not the compiled state; compiling takes
milliseconds). Each request has its own matcher, applied as an mlx-lm logits processor
of that request alone: requests with and without a grammar share the batch's step.

The processor is called once per step of its request, in order; its first call reads the
prompt's last token, each later one the token sampled the step before, which it feeds to
the matcher before masking. When the grammar is complete only the end-of-sequence token
is left, so the request ends there (mlx-lm's stop tokens), on every rank at the same
token. Only rank 0 runs a matcher; a pipeline's other ranks take rank 0's
token (``batching.from_rank0``) and need none; so do a tensor group's, for a request with
a grammar: rank 0 alone masks and samples it (``prepare``).

A command's ``json_object`` (its grammar is any JSON object) has the mask close the
object within the request's budget (``core.worker.closing``): such an answer always ends
with the end-of-sequence token within ``max_tokens``, and parses.

A command's ``logprobs`` (0 to ``MAX_TOP_LOGPROBS``) asks rank 0 for the sampled token's
log-probability and the most likely alternatives, from the distribution sampled: after
the grammar's mask, ``top_p`` and the temperature (at temperature 0, the model's
distribution after the mask). The sampler records them; the token event carries them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, cast

import mlx.core as mx
import numpy as np
from mlx_lm.sample_utils import apply_top_p

from core.worker.closing import Closing, VocabIndex
from core.worker.protocol import MAX_TOP_LOGPROBS, GenerateCommand


class GrammarRefused(Exception):
    """The rank could not compile a request's grammar (that request alone is refused)."""


class Grammars:
    """A shard's grammar compiler: its tokenizer as llguidance's, made once (about a
    second for a 50k vocabulary) on the first request that needs it."""

    def __init__(self, tokenizer: Any, vocab_size: int | None) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._ll: Any = None
        self._index: VocabIndex | None = None

    @property
    def ll(self) -> Any:
        if self._ll is None:
            # lazy: llguidance is needed (on rank 0 alone) only once a request has a grammar
            import llguidance.hf

            hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)
            eos = sorted(getattr(self._tokenizer, "eos_token_ids", None) or []) or None
            self._ll = llguidance.hf.from_tokenizer(hf, n_vocab=self._vocab_size, eos_token=eos)
        return self._ll

    @property
    def index(self) -> VocabIndex:
        """The tokens as ``json_object``'s closing reads them, made on first use."""
        if self._index is None:
            self._index = VocabIndex(self.ll.vocab_size, self.token_bytes)
        return self._index

    def processor(self, grammar: str, close_within: int | None = None) -> GrammarMask:
        """A request's mask, or GrammarRefused saying why. ``close_within``: the grammar
        is any JSON object, closed within that many tokens (``core.worker.closing``)."""
        try:  # lazy: a node without llguidance refuses the request, not the job
            from llguidance import LLMatcher
        except ImportError:
            raise GrammarRefused(
                "This node cannot enforce a response format: llguidance is not installed "
                "in its Python (pip install llguidance)."
            ) from None

        matcher = LLMatcher(self.ll, grammar, log_level=0)
        if matcher.is_error():
            said = matcher.get_error().strip().splitlines()
            raise GrammarRefused(f"The grammar does not compile: {said[0][:300] if said else ''}")
        eos = sorted(getattr(self._tokenizer, "eos_token_ids", None) or [])
        closing = None if close_within is None else Closing(self.index, close_within, eos)
        return GrammarMask(matcher, self.ll.vocab_size, eos, closing)

    def token_bytes(self, token: int) -> bytes:
        return bytes(self.ll.decode_bytes([token]))


class GrammarMask:
    """One request's logits processor: the matcher advanced on the sampled tokens, its
    mask applied to that request's row of logits; with a ``closing``, narrowed near the
    token budget so the JSON object closes within it."""

    def __init__(
        self, matcher: Any, vocab_size: int, eos: list[int], closing: Closing | None = None
    ) -> None:
        self.matcher, self.eos, self.closing = matcher, eos, closing
        self.words = (vocab_size + 31) // 32
        self._bits = np.full((self.words,), -1, dtype=np.int32)
        self._started = False

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        # The step's forward pass starts now: the mask below (which needs the last token,
        # so waits for the step before) is computed while it runs, not after.
        mx.async_eval(logits)
        if self._started:
            token = _ints(tokens[-1:])[0]
            self.matcher.consume_token(token)
            if self.closing is not None:
                self.closing.consumed(token)
        self._started = True
        width = logits.shape[-1]
        if self.matcher.is_error():  # cannot happen on a masked token: end the answer
            allowed = np.zeros((width,), dtype=np.uint8)
            allowed[[t for t in self.eos if t < width]] = 1
        else:
            self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[:width]
            if allowed.shape[0] < width:
                allowed = np.pad(allowed, (0, width - allowed.shape[0]))
            if self.closing is not None:
                allowed = self.closing.narrow(allowed)
        masked: mx.array = mx.where(mx.array(allowed.astype(np.bool_)), logits, -mx.inf)
        return masked


class Recorded:
    """One sampled step's figures (lazy until read): the token's log-probability and the
    top ``n`` (ids, log-probabilities)."""

    def __init__(self, chosen: mx.array, top_ids: mx.array | None, top: mx.array | None):
        self.chosen, self.top_ids, self.top = chosen, top_ids, top

    def read(self) -> tuple[float, list[tuple[int, float]]]:
        chosen = _floats(self.chosen.reshape(1))[0]
        if self.top_ids is None or self.top is None:
            return chosen, []
        ids = _ints(self.top_ids)
        values = _floats(self.top)
        pairs = sorted(zip(ids, values, strict=True), key=lambda pair: -pair[1])
        return chosen, pairs


def recording(
    sampler: Callable[[mx.array], mx.array], temperature: float, top_p: float, top_n: int
) -> tuple[Callable[[mx.array], mx.array], deque[Recorded]]:
    """``sampler`` (a request's own) and, per call, what it sampled from, in order: the
    log-softmax of the logprobs as the sampler transforms them (``top_p``, then
    1/``temperature``), at the token it drew."""
    queue: deque[Recorded] = deque()

    def sample(logprobs: mx.array) -> mx.array:
        token = sampler(logprobs)
        dist = logprobs
        if temperature > 0:
            if 0 < top_p < 1:
                dist = apply_top_p(dist, top_p)
            dist = dist * (1 / temperature)
        dist = dist - mx.logsumexp(dist, axis=-1, keepdims=True)
        row = dist[0]
        chosen = row[token.reshape(-1)[0]]
        if top_n > 0:
            ids = mx.argpartition(-row, top_n - 1)[:top_n]
            queue.append(Recorded(chosen, ids, row[ids]))
        else:
            queue.append(Recorded(chosen, None, None))
        return token

    return sample, queue


def logprob_entry(token: int, logprob: float, token_bytes: bytes) -> dict[str, Any]:
    """OpenAI's ``{token, logprob, bytes}`` for one token."""
    return {
        "token": token_bytes.decode("utf-8", errors="replace"),
        "logprob": logprob if logprob > -1e30 else -9999.0,
        "bytes": list(token_bytes),
    }


def token_logprobs(
    token: int, recorded: Recorded, token_bytes: Callable[[int], bytes]
) -> dict[str, Any]:
    """The token event's ``logprobs``: OpenAI's entry for the sampled token, with its
    ``top_logprobs`` (most likely first)."""
    chosen, top = recorded.read()
    entry = logprob_entry(token, chosen, token_bytes(token))
    # Tokens the grammar or top_p ruled out have no probability: not alternatives.
    entry["top_logprobs"] = [logprob_entry(t, v, token_bytes(t)) for t, v in top if v > -1e30]
    return entry


class Prepared:
    """A request's sampling on this rank: its sampler, its logits processors, and (rank
    0, when asked) the queue of what each step sampled from."""

    def __init__(
        self,
        sampler: Callable[[mx.array], mx.array],
        processors: list[Callable[[mx.array, mx.array], mx.array]],
        recorded: deque[Recorded] | None,
        top_n: int,
    ) -> None:
        self.sampler, self.processors, self.recorded, self.top_n = (
            sampler,
            processors,
            recorded,
            top_n,
        )

    def logprobs(self, token: int, grammars: Grammars) -> dict[str, Any] | None:
        """The token event's ``logprobs`` for the step that sampled ``token``."""
        if self.recorded is None or not self.recorded:
            return None
        return token_logprobs(token, self.recorded.popleft(), grammars.token_bytes)


def prepare(
    command: GenerateCommand,
    sampler: Callable[[mx.array], mx.array],
    grammars: Grammars,
    rank: int,
    size: int,
    shared: bool,
    to_rank0: Callable[[Callable[[mx.array], mx.array]], Callable[[mx.array], mx.array]],
    budget: int | None = None,
) -> tuple[Prepared, str | None]:
    """The command's grammar and logprobs around its ``sampler``, on this rank of
    ``size``; ``shared``: the sampler takes rank 0's token already (a pipeline).
    ``budget``: the tokens it may generate (``max_tokens`` within the context), which a
    ``json_object`` grammar closes its object within.

    With a grammar on several ranks, rank 0 alone masks and samples and the others take
    its token (``to_rank0``): one matcher, on the rank that samples, so the ranks cannot
    disagree, and only rank 0 needs the grammar library. When rank 0 cannot compile it
    (GrammarRefused on one rank: raised), the request still joins everywhere, unmasked,
    and the reason is returned: the caller ends it at once on every rank (a cancel) and
    reports the reason, so no rank leaves the others' step."""
    grammar = command.get("grammar")
    constrained = isinstance(grammar, str)
    takes_rank0 = shared or (constrained and size > 1)
    if takes_rank0 and not shared:
        sampler = to_rank0(sampler)
    processors: list[Callable[[mx.array, mx.array], mx.array]] = []
    refused = None
    if isinstance(grammar, str) and (rank == 0 or not takes_rank0):
        try:
            close_within = budget if command.get("json_object") else None
            processors.append(grammars.processor(grammar, close_within))
        except GrammarRefused as why:
            if size == 1:
                raise
            refused = str(why)
    top_n = command.get("logprobs")
    recorded = None
    if isinstance(top_n, int) and not isinstance(top_n, bool) and rank == 0:
        sampler, recorded = recording(
            sampler,
            float(command.get("temperature", 0.0)),
            float(command.get("top_p", 1.0)),
            min(max(top_n, 0), MAX_TOP_LOGPROBS),
        )
    top = top_n if isinstance(top_n, int) else 0
    return Prepared(sampler, processors, recorded, top), refused


def _ints(array: mx.array) -> list[int]:
    return [int(v) for v in cast(list[int], array.tolist())]


def _floats(array: mx.array) -> list[float]:
    return [float(v) for v in cast(list[float], array.astype(mx.float32).tolist())]
