"""A custom call's input as its function's arguments stream: an incremental, lenient
reader of their ``input`` JSON string (:class:`StreamedInput`).

Once the arguments open as asked (``{"input": "``), each piece of that string is said
decoded as it comes, an escape split between two pieces held until it is whole, up to its
closing quote (what follows is not input). Arguments that open otherwise are not read: no
input streams, and the whole arguments say what it is (:func:`.custom_tools.custom_input`).

Hand-written, not ``pydantic_core.from_json(..., allow_partial="trailing-strings")``:
that re-parses the whole arguments for every piece, quadratic over a long patch, and
refuses what models write (a raw control character in the string), where this reader
reads each piece once and takes what it cannot decode as it was written.
"""

from __future__ import annotations

import re
from typing import Final

_OPENING: Final = re.compile(r'[ \t\n\r]*\{[ \t\n\r]*"input"[ \t\n\r]*:[ \t\n\r]*"')
"""Arguments opening as the function was asked for: the ``input`` string begins."""
_OPENING_SO_FAR: Final = re.compile(
    r'[ \t\n\r]*(?:\{[ \t\n\r]*(?:"(?:i(?:n(?:p(?:u(?:t(?:"[ \t\n\r]*:?[ \t\n\r]*)?)?)?)?)?)?)?)?'
)
"""What may still open so (matched whole)."""
_PLAIN: Final = re.compile(r'[^"\\]+')
_ESCAPES: Final = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_LOOKING, _READING, _READ, _OFF = range(4)


class StreamedInput:
    """One custom call's input, said as its arguments' pieces come (:meth:`feed`). Read
    leniently, as the model wrote it: a raw control character is taken as it is, an
    unknown escape or a lone surrogate kept as written."""

    __slots__ = ("_held", "_state", "said")

    def __init__(self) -> None:
        self._held = ""
        """The arguments not read yet: their opening so far, or an escape cut short."""
        self._state = _LOOKING
        self.said = 0
        """How much of the input was said."""

    @property
    def opened(self) -> bool:
        """Whether the arguments opened as asked: the input is their ``input`` string."""
        return self._state in (_READING, _READ)

    def feed(self, piece: str) -> str:
        """The input ``piece`` of the arguments adds (empty: none yet, or no more)."""
        state = self._state
        if state == _LOOKING:
            self._held += piece
            opening = _OPENING.match(self._held)
            if opening is None:
                if _OPENING_SO_FAR.fullmatch(self._held) is None:
                    self._state, self._held = _OFF, ""
                return ""
            self._state = _READING
            text, self._held = self._held[opening.end() :], ""
        elif state == _READING:
            text, self._held = self._held + piece, ""
        else:
            return ""
        said = self._read(text)
        self.said += len(said)
        return said

    def _read(self, text: str) -> str:
        out: list[str] = []
        at, end = 0, len(text)
        while at < end:
            plain = _PLAIN.match(text, at)
            if plain is not None:
                out.append(plain.group())
                at = plain.end()
                continue
            if text[at] == '"':  # the string's end: the rest is not input
                self._state = _READ
                break
            step = _escape(text, at, out)
            if step == 0:  # cut short: held for the next piece
                self._held = text[at:]
                break
            at += step
        return "".join(out)


def _escape(text: str, at: int, out: list[str]) -> int:
    """Read the escape at ``text[at]`` into ``out``: its length, or 0 when ``text`` ends
    before it does."""
    if at + 1 >= len(text):
        return 0
    kind = text[at + 1]
    if kind != "u":
        out.append(_ESCAPES.get(kind, text[at : at + 2]))
        return 2
    code = _code(text, at)
    if code is None:
        return 0
    if code < 0:  # not four hex digits: kept as written
        out.append(text[at : at + 2])
        return 2
    if 0xD800 <= code < 0xDC00:  # a high surrogate: its low one may follow
        rest = text[at + 6 : at + 8]
        if rest in ("", "\\"):
            return 0
        low = _code(text, at + 6) if rest == "\\u" else -1
        if low is None:
            return 0
        if 0xDC00 <= low < 0xE000:
            out.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
            return 12
    if 0xD800 <= code < 0xE000:  # a lone surrogate: kept as written
        out.append(text[at : at + 6])
        return 6
    out.append(chr(code))
    return 6


def _code(text: str, at: int) -> int | None:
    """The code of the ``\\uXXXX`` at ``text[at]``: None when ``text`` ends before its
    digits do, -1 when they are not four hex digits."""
    digits = text[at + 2 : at + 6]
    if not all(digit in _HEX for digit in digits):
        return -1
    return int(digits, 16) if len(digits) == 4 else None
