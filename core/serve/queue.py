"""The requests waiting for the cluster, in order: bounded, with its depth and a fair
``Retry-After`` for the one refused when it is full. Pure (no threads, no event loop).

Fair shares between keys (``owner``): while others wait, one key holds at most half the
waiting places (``share``) and takes a free running slot only while it runs fewer than
half of them; alone, a key may use them all. When the line is full and a key that holds
less than its share comes, the newest request of a key holding more than its share makes
room (``on_bumped``: it is refused as a full line's would be). So no key can take every
slot and every place, and none is refused while another holds more than half."""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
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
    waiting), shared fairly between ``owner``s (the module's doc). ``answer_s``: how long
    answers take lately, for ``Retry-After``."""

    def __init__(
        self,
        limit: int,
        owner: Callable[[T], str] = lambda item: "",
        on_bumped: Callable[[T], None] = lambda item: None,
    ) -> None:
        if limit < 1:
            raise ValueError("a waiting line holds at least one request")
        self.limit = limit
        self.answer_s = 5.0
        self._items: deque[T] = deque()
        self._owner, self._on_bumped = owner, on_bumped

    @property
    def depth(self) -> int:
        return len(self._items)

    @staticmethod
    def half(places: int) -> int:
        """A key's share of ``places`` while others wait: half of them (at least one)."""
        return max(1, places // 2)

    def held(self) -> Counter[str]:
        return Counter(self._owner(item) for item in self._items)

    def push(self, item: T) -> int:
        """Add at the end; its place (1: next). QueueFull when the line is full (and no
        key holds more than its share), or when ``item``'s key holds its share already
        while others wait."""
        held, mine = self.held(), self._owner(item)
        share = self.half(self.limit)
        others = len(self._items) - held[mine]
        if held[mine] >= share and others > 0:
            raise QueueFull(self.retry_after(), len(self._items))
        if len(self._items) >= self.limit:
            greedy = [o for o, n in held.items() if n > share and o != mine]
            if held[mine] >= share or not greedy:
                raise QueueFull(self.retry_after(), len(self._items))
            bumped = next(i for i in reversed(self._items) if self._owner(i) == greedy[0])
            self._items.remove(bumped)
            self._on_bumped(bumped)
        self._items.append(item)
        return len(self._items)

    def pop(self, running: Mapping[str, int] | None = None, slots: int = 0) -> T | None:
        """The next to run: the first whose key runs fewer than half of ``slots`` (given
        ``running``, each key's count), else the first (no other key waits for it)."""
        if not self._items:
            return None
        if running is not None and slots > 0:
            share = self.half(slots)
            for item in self._items:
                if running.get(self._owner(item), 0) < share:
                    self._items.remove(item)
                    return item
        return self._items.popleft()

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
