"""The requests waiting for the cluster, in order: bounded, with its depth and a fair
``Retry-After`` for the one refused when it is full. Pure (no threads, no event loop)."""

from __future__ import annotations

import math
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

RETRY_MAX_S = 120


class QueueFull(Exception):
    """No room: ``retry_after_s`` is when one more may fit, ``depth`` how many wait."""

    def __init__(self, retry_after_s: int, depth: int) -> None:
        super().__init__(f"{depth} requests waiting")
        self.retry_after_s, self.depth = retry_after_s, depth


class WaitingLine(Generic[T]):
    """First in, first out, at most ``limit`` waiting (the one being answered is not
    waiting). ``answer_s``: how long answers take lately, for ``Retry-After``."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a waiting line holds at least one request")
        self.limit = limit
        self.answer_s = 5.0
        self._items: deque[T] = deque()

    @property
    def depth(self) -> int:
        return len(self._items)

    def push(self, item: T) -> int:
        """Add at the end; its place (1: next). QueueFull when ``limit`` wait already."""
        if len(self._items) >= self.limit:
            raise QueueFull(self.retry_after(), len(self._items))
        self._items.append(item)
        return len(self._items)

    def pop(self) -> T | None:
        return self._items.popleft() if self._items else None

    def remove(self, item: T) -> bool:
        """Take out one that is still waiting (its client left); False if it is not."""
        try:
            self._items.remove(item)
        except ValueError:
            return False
        return True

    def drain(self) -> list[T]:
        items, self._items = list(self._items), deque()
        return items

    def answered_in(self, seconds: float) -> None:
        """An answer took ``seconds``: the estimate follows (a moving average)."""
        self.answer_s = 0.7 * self.answer_s + 0.3 * max(0.0, seconds)

    def retry_after(self) -> int:
        """Seconds until the first waiting request is likely being answered."""
        return max(1, min(RETRY_MAX_S, math.ceil(self.answer_s)))
