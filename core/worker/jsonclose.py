"""The shortest closing of a JSON text cut anywhere (issue 34): a ``json_object`` answer
near its token budget is steered into it (``core.worker.constrain``), so it ends as an
object that parses.

``JsonCloser`` reads the bytes of a valid JSON prefix as they come (whitespace anywhere
JSON allows it) and says at any point the shortest bytes that complete it (``suffix``):
a string closed (an escape finished first: ``\\`` takes ``n``, ``\\u`` its missing hex
digits as ``0``, a character's missing UTF-8 bytes the smallest valid ones), a number
finished (``-``, ``1.``, ``1e``, ``1e+`` take ``0``), a literal finished (``tr`` takes
``ue``), a key given a value (``:0``), a member after a comma (``"":0``: a comma cannot be
taken back), a value after a colon (``0``), then every open array and object closed.
Nothing written yet: ``{}``. Standard library only, pure.

``MAX_GROWTH[b]`` bounds how much one byte ``b`` can lengthen the suffix, whatever the
state (a comma in an object: ``}`` becomes ``"":0}``, 4 bytes more); a token can lengthen
it by at most the sum over its bytes.
"""

from __future__ import annotations

from typing import Final

WHITESPACE: Final = frozenset(b" \t\n\r")
DIGITS: Final = frozenset(b"0123456789")
HEX: Final = frozenset(b"0123456789abcdefABCDEF")
ESCAPES: Final = frozenset(b'"\\/bfnrt')

# The modes (where the text is cut).
START, DONE, VALUE, FIRST_ITEM, FIRST_KEY, KEY, COLON, AFTER = range(8)
STRING, ESCAPE, UNICODE, UTF8, LITERAL = range(8, 13)
MINUS, ZERO, INT, DOT, FRACTION, EXP, EXP_SIGN, EXP_DIGITS = range(13, 21)
# Numbers that may end here, and what each still needing a byte takes.
_ENDS: Final = frozenset({ZERO, INT, FRACTION, EXP_DIGITS})
_OWN: Final = {
    START: b"{}",
    VALUE: b"0",
    KEY: b'"":0',
    COLON: b":0",
    MINUS: b"0",
    DOT: b"0",
    EXP: b"0",
    EXP_SIGN: b"0",
}
_LITERALS: Final = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}


def _utf8_lead(byte: int) -> tuple[int, int, int] | None:
    """A UTF-8 lead byte's (continuation bytes, lowest and highest next byte), or None."""
    if 0xC2 <= byte <= 0xDF:
        return 1, 0x80, 0xBF
    if 0xE0 <= byte <= 0xEF:
        low, high = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F)}.get(byte, (0x80, 0xBF))
        return 2, low, high
    if 0xF0 <= byte <= 0xF4:
        low, high = {0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(byte, (0x80, 0xBF))
        return 3, low, high
    return None


def _growth() -> tuple[int, ...]:
    table = [0] * 256
    for chars, most in ((b",f", 4), (b'"tnu', 3), (b"{[\\-.eE", 1)):
        for byte in chars:
            table[byte] = most
    for byte in range(0xC2, 0xF5):
        lead = _utf8_lead(byte)
        table[byte] = lead[0] if lead is not None else 0
    return tuple(table)


MAX_GROWTH: Final = _growth()


def open_utf8(data: bytes) -> int:
    """How many continuation bytes the last character of ``data`` still needs (0 when
    it ends on a whole character)."""
    tail = 0
    for byte in reversed(data[-4:]):
        if 0x80 <= byte <= 0xBF:
            tail += 1
            continue
        lead = _utf8_lead(byte)
        return max(lead[0] - tail, 0) if lead is not None else 0
    return 0


class JsonCloser:
    """A JSON object's text read so far, and its shortest closing. ``feed`` returns
    False (and the closer stays broken) on bytes that no JSON object continues with."""

    __slots__ = ("broken", "high", "key", "low", "mode", "need", "rest", "stack")

    def __init__(self) -> None:
        self.stack: list[bool] = []  # True: an object, False: an array
        self.mode = START
        self.key = False  # the string being read is a key
        self.need = 0  # hex digits or UTF-8 continuation bytes still needed
        self.low, self.high = 0x80, 0xBF  # the next continuation byte's range
        self.rest = b""  # the rest of a literal
        self.broken = False

    def copy(self) -> JsonCloser:
        other = JsonCloser.__new__(JsonCloser)
        other.stack = list(self.stack)
        other.mode, other.key, other.need = self.mode, self.key, self.need
        other.low, other.high, other.rest = self.low, self.high, self.rest
        other.broken = self.broken
        return other

    @property
    def in_plain_string(self) -> bool:
        """Inside a string, between whole characters (no escape or character begun)."""
        return self.mode == STRING and not self.broken

    def feed(self, data: bytes) -> bool:
        if self.broken:
            return False
        for byte in data:
            if not self._byte(byte):
                self.broken = True
                return False
        return True

    def suffix(self) -> bytes:
        """The shortest bytes that make the text read so far a whole JSON text."""
        mode = self.mode
        if mode in (STRING, ESCAPE, UNICODE, UTF8):
            own = b'"' + (b":0" if self.key else b"")
            if mode == ESCAPE:
                own = b"n" + own
            elif mode == UNICODE:
                own = b"0" * self.need + own
            elif mode == UTF8:
                own = bytes([self.low]) + b"\x80" * (self.need - 1) + own
        elif mode == LITERAL:
            own = self.rest
        else:
            own = _OWN.get(mode, b"")
        return own + bytes(0x7D if is_object else 0x5D for is_object in reversed(self.stack))

    def _ended(self) -> None:
        """A value is complete."""
        self.mode = AFTER if self.stack else DONE

    def _byte(self, byte: int) -> bool:
        mode = self.mode
        if mode == STRING:
            return self._string(byte)
        if mode in (ESCAPE, UNICODE, UTF8, LITERAL):
            return self._inside(byte)
        if mode >= MINUS:
            if self._number(byte):
                return True
            if mode not in _ENDS:
                return False
            self._ended()  # the number ended just before this byte
        if byte in WHITESPACE:
            return True
        if self.mode == START:  # the text is an object
            return byte == ord("{") and self._value(byte)
        if self.mode in (VALUE, FIRST_ITEM):
            return self._value(byte)
        return self._between(byte)

    def _between(self, byte: int) -> bool:
        """After a complete value, a key, an opening brace or a comma in an object."""
        mode, stack = self.mode, self.stack
        if mode in (FIRST_KEY, KEY) and byte == ord('"'):
            self.mode, self.key = STRING, True
        elif mode == COLON and byte == ord(":"):
            self.mode = VALUE
        elif mode == AFTER and byte == ord(","):
            self.mode = KEY if stack[-1] else VALUE
        elif byte == (ord("}") if stack and stack[-1] else ord("]")) and (
            mode == AFTER or (mode == FIRST_KEY and byte == ord("}"))
        ):
            stack.pop()
            self._ended()
        else:
            return False
        return True

    def _value(self, byte: int) -> bool:
        """Where a value starts (or, after ``[``, the array may end)."""
        if byte == ord("]") and self.mode == FIRST_ITEM:
            self.stack.pop()
            self._ended()
        elif byte == ord("{"):
            self.stack.append(True)
            self.mode = FIRST_KEY
        elif byte == ord("["):
            self.stack.append(False)
            self.mode = FIRST_ITEM
        elif byte == ord('"'):
            self.mode, self.key = STRING, False
        elif byte == ord("-"):
            self.mode = MINUS
        elif byte in DIGITS:
            self.mode = ZERO if byte == ord("0") else INT
        elif byte in _LITERALS:
            self.mode, self.rest = LITERAL, _LITERALS[byte]
        else:
            return False
        return True

    def _string(self, byte: int) -> bool:
        if byte == ord('"'):
            if self.key:
                self.mode = COLON
            else:
                self._ended()
        elif byte == ord("\\"):
            self.mode = ESCAPE
        elif byte >= 0x80:
            lead = _utf8_lead(byte)
            if lead is None:
                return False
            self.need, self.low, self.high = lead
            self.mode = UTF8
        elif byte < 0x20:
            return False
        return True

    def _inside(self, byte: int) -> bool:
        """In an escape, a character's UTF-8 bytes or a literal."""
        mode = self.mode
        if mode == ESCAPE and byte in ESCAPES:
            self.mode = STRING
        elif mode == ESCAPE and byte == ord("u"):
            self.mode, self.need = UNICODE, 4
        elif (mode == UNICODE and byte in HEX) or (mode == UTF8 and self.low <= byte <= self.high):
            self.need -= 1
            self.low, self.high = 0x80, 0xBF
            if self.need == 0:
                self.mode = STRING
        elif mode == LITERAL and byte == self.rest[0]:
            self.rest = self.rest[1:]
            if not self.rest:
                self._ended()
        else:
            return False
        return True

    def _number(self, byte: int) -> bool:
        """The number goes on with this byte (False: it does not, maybe it ended)."""
        mode = self.mode
        digit = byte in DIGITS
        if mode == MINUS and digit:
            self.mode = ZERO if byte == ord("0") else INT
        elif mode in (INT, FRACTION, EXP_DIGITS) and digit:
            pass
        elif mode in (ZERO, INT) and byte == ord("."):
            self.mode = DOT
        elif mode == DOT and digit:
            self.mode = FRACTION
        elif mode in (ZERO, INT, FRACTION) and byte in b"eE":
            self.mode = EXP
        elif mode == EXP and byte in b"+-":
            self.mode = EXP_SIGN
        elif mode in (EXP, EXP_SIGN) and digit:
            self.mode = EXP_DIGITS
        else:
            return False
        return True
