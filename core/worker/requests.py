"""One request as every rank reads it, whichever loop serves it (``core.worker.serve``:
one at a time; ``core.worker.batching``: continuous batching): the commands read from
stdin and the cancels that skip their queue, the prompt's token ids (the controller's,
or made here from its text or messages), the model's context length, and rank 0's
sampled token on every rank (``from_rank0``). Both loops import it; it imports neither.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from core.worker import protocol as p

if TYPE_CHECKING:
    from core.worker.sharding import Shard

CANCELS_KEPT = 64  # cancels of requests already ended are forgotten after this many


class Cancels:
    """The requests the controller cancelled: the stdin reader adds, ``generate`` asks."""

    def __init__(self) -> None:
        self._ids: deque[str] = deque(maxlen=CANCELS_KEPT)
        self._lock = threading.Lock()

    def add(self, request: str) -> None:
        with self._lock:
            self._ids.append(request)

    def __contains__(self, request: object) -> bool:
        with self._lock:
            return request in self._ids

    def discard(self, request: str) -> None:
        with self._lock:
            while request in self._ids:
                self._ids.remove(request)


class Commands(queue.Queue[p.Command]):
    """The commands read from stdin, in order, and the cancels (which skip the queue)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancels = Cancels()


def from_rank0(sampler: Any, group: mx.distributed.Group) -> Any:
    """Rank 0's sampled tokens on every rank (a pipeline whose other ranks compute no
    logits): the others add zeros that wait on their own step."""
    rank0 = group.rank() == 0

    def sample(logprobs: mx.array) -> mx.array:
        token: mx.array = sampler(logprobs)
        if not rank0:
            token = token * 0
        return mx.distributed.all_sum(token, group=group)

    return sample


class RequestRefused(Exception):
    """One request's prompt cannot be made (its chat template raised, a token id outside
    the vocabulary): that request alone is refused, the rank serves on."""


def request_tokens(shard: Shard, command: p.GenerateCommand) -> list[int]:
    """The request's token ids: the controller's (``tokens``: it rendered the template and
    tokenized, off the ranks' steps), or made here from its text. RequestRefused, saying
    why, for anything that request alone makes fail."""
    given = command.get("tokens")
    if given is not None:
        text = shard.config.get("text_config")
        vocab = (text if isinstance(text, dict) else shard.config).get("vocab_size")
        if isinstance(vocab, int) and any(t >= vocab for t in given):
            raise RequestRefused(f"The request holds a token id outside the vocabulary ({vocab}).")
        return list(given)
    try:
        return prompt_tokens(shard.tokenizer, command)
    except Exception as error:  # the template's own words (jinja2's TemplateError, ...)
        kind = (
            "chat template" if command.get("messages") or command.get("chat", True) else "tokenizer"
        )
        said = (
            str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        )
        raise RequestRefused(f"The model's {kind} refused the request: {said}") from None


def prompt_tokens(tokenizer: Any, command: p.GenerateCommand) -> list[int]:
    """Token ids for a command: chat messages, a chat prompt, or raw text."""
    messages = command.get("messages")
    if messages is None and command.get("chat", True):
        messages = [{"role": "user", "content": command.get("prompt", "")}]
    if messages is not None and getattr(tokenizer, "chat_template", None):
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    text = command.get("prompt") or "".join(m.get("content", "") for m in messages or [])
    return list(tokenizer.encode(text))


def context_length(shard: Shard) -> int | None:
    """The model's context, in tokens, when its config says."""
    value = shard.config.get("max_position_embeddings")
    return value if isinstance(value, int) and value > 0 else None
