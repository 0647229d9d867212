"""Stop sequences over streamed text: what may be shown now, and where the answer ends.

Every rank sees the same text, token by token, so every rank finds a stop sequence at the
same token and they stop together. Text that could be the start of a stop sequence is held
back until the next pieces show whether it is one, so a client never sees part of it.
"""

from __future__ import annotations


class StopScanner:
    """Feed each new piece of text; ``feed`` returns what may be shown now, and
    ``stopped`` turns true once a stop sequence appeared (the text before it is all
    that was shown). ``flush`` gives what was held back when the answer ends otherwise."""

    def __init__(self, stops: list[str] | tuple[str, ...] = ()) -> None:
        self.stops = tuple(s for s in stops if s)
        self.stopped = False
        self._held = ""

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return piece
        return self._scan(self._held + piece, final=False)

    def flush(self) -> str:
        """What was held back, once the answer ended otherwise (up to a stop it holds)."""
        held, self._held = self._held, ""
        return "" if self.stopped or not held else self._scan(held, final=True)

    def _scan(self, text: str, final: bool) -> str:
        """What of ``text`` may be shown; the rest is held. A stop found ends the answer
        unless another stop may still begin before it and end in a piece to come (the
        first in the text wins: "\n" found in ":\n" waits while ":\nQ" may follow)."""
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        first = min(hits, default=len(text))
        keep = 0 if final else max((_overlap(text, s) for s in self.stops), default=0)
        start = len(text) - keep  # where a stop may begin that the text does not end yet
        if hits and first <= start:
            self.stopped = True
            self._held = ""
            return text[:first]
        self._held = text[start:]
        return text[:start]


def _overlap(text: str, stop: str) -> int:
    """The length of the longest end of ``text`` that begins ``stop`` (not all of it)."""
    for n in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0
