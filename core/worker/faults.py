"""A request's own failure inside a generation step stays that request's.

mlx-lm's ``BatchGenerator`` (and ``stream_generate`` for ``--batch 1``) calls each
request's sampler inside a step that serves every request at once: an exception there
would unwind the step half done (the caches advanced, the next tokens unset) and end the
job. So every request's sampler is called through ``Faults.guard``: an exception is noted
against that request, and the step gets the row's most likely token instead, which is
never shown nor fed to the model, because the request is ended before the next step
(``core.worker.batching``: rank 0 notes it and sends it with its join/cancel vector, every
rank removes it alike; ``core.worker.serve``: the ranks agree on it as on a cancel). The
request ends with an error event; the others and the job go on.

``MACMESH_TEST_SAMPLER_FAILS`` (set by tests only, never from a request): a request whose
``seed`` is that number (sampled, temperature above 0) has a sampler that raises at its
third token, so the tests drive this path end to end on real ranks.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import mlx.core as mx

from core.worker.protocol import GenerateCommand

TEST_HOOK = "MACMESH_TEST_SAMPLER_FAILS"
FAIL_AT_CALL = 3  # the hook's sampler raises at this call (its request has streamed by then)


class Faults:
    """The requests whose sampler raised, and why (the first line of what it said)."""

    def __init__(self) -> None:
        self._said: dict[str, str] = {}
        self._lock = threading.Lock()

    def guard(self, request: str, sampler: Any) -> Any:
        """``sampler`` for ``request``: what it raises is noted, the row's argmax given."""

        def sample(logprobs: mx.array) -> mx.array:
            try:
                token: mx.array = sampler(logprobs)
                return token
            except Exception as error:
                self.note(request, error)
                return mx.argmax(logprobs, axis=-1)

        return sample

    def guard_processors(self, request: str, processors: list[Any]) -> list[Any]:
        """``processors`` (a grammar's mask, ...) for ``request``: what one raises is noted
        and the logits pass through it unchanged; the request ends as its sampler's would."""

        def guarded(processor: Any) -> Any:
            def process(tokens: mx.array, logits: mx.array) -> mx.array:
                try:
                    out: mx.array = processor(tokens, logits)
                    return out
                except Exception as error:
                    self.note(request, error)
                    return logits

            return process

        return [guarded(processor) for processor in processors]

    def note(self, request: str, error: BaseException) -> None:
        with self._lock:
            self._said.setdefault(request, _first_line(error))

    def failed(self, request: str) -> bool:
        with self._lock:
            return request in self._said

    def take(self, request: str) -> str | None:
        """Why ``request`` failed (forgotten then), or None."""
        with self._lock:
            return self._said.pop(request, None)

    def message(self, request: str) -> str:
        said = self.take(request) or "an error"
        return f"The request failed on the cluster while choosing its next token: {said}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0][:300] if text else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def hooked(command: GenerateCommand, sampler: Any) -> Any:
    """``sampler``, raising at its third call when the tests' hook names this seed."""
    wanted = os.environ.get(TEST_HOOK, "")
    if not wanted.isdigit() or command.get("seed") != int(wanted):
        return sampler
    calls = [0]

    def failing(logprobs: mx.array) -> mx.array:
        calls[0] += 1
        if calls[0] >= FAIL_AT_CALL:
            raise RuntimeError("the tests' sampler failure")
        token: mx.array = sampler(logprobs)
        return token

    return failing
