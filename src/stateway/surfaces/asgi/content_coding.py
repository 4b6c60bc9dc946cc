"""A request body's content codings (``Content-Encoding``), undone as the body arrives.

Accepted: ``gzip`` (``x-gzip`` too, and several members one after another, as the gzip
format allows, zero bytes after one skipped, as GNU gzip and Python's ``GzipFile`` skip
that padding), ``deflate`` (zlib's format, as RFC 9110 has it, or the raw deflate some
clients send under that name, told apart by zlib's two-byte header) and ``identity``.
Several codings listed (``gzip, identity``) were applied in that order and are undone in
the other, at most :data:`MAX_CODINGS` of them (each holds its own inflater, and a window
of 32 KiB); names are case-insensitive. Any other is refused before the body is read: 415
``unsupported_content_encoding``, with the ``Accept-Encoding`` the gateway takes
(:data:`ACCEPTED`, as RFC 7694 section 3 has it). ``zstd`` and ``br`` are among those
refused: the standard library of the Pythons served undoes neither.

The body limit holds for the decoded body as for the one sent: each coding's output is
inflated at most a byte past what the limit leaves (``max_length``), so a small body that
would decode to gigabytes is refused with the same 413 as a large one, holding no more
than the limit. A body that does not decode (corrupt, cut short, bytes past its end) is a
400 :class:`~stateway.core.errors.UndecodableBody`.
"""

from __future__ import annotations

import zlib
from typing import Final

from starlette.types import Scope

from stateway.core.errors import RequestTooLarge, UndecodableBody, UnsupportedContentEncoding

ACCEPTED: Final = ("gzip", "deflate")
"""The codings undone (besides ``identity``, sent as it is), as ``Accept-Encoding`` names
them."""
MAX_CODINGS: Final = 3
"""The most codings one body may list (``identity`` aside): past them it is a 415."""
_GZIP: Final = 16 + zlib.MAX_WBITS
_ZLIB: Final = zlib.MAX_WBITS
_RAW: Final = -zlib.MAX_WBITS
_ALIASES: Final = {"x-gzip": "gzip"}


def body_decoder(scope: Scope, limit: int) -> BodyDecoder | None:
    """What undoes the codings the request's ``Content-Encoding`` names (every such
    header, in order), its output bounded by ``limit`` bytes; None when there are none
    but ``identity``: the body is what was sent. Raises
    :class:`~stateway.core.errors.UnsupportedContentEncoding` for a coding not undone."""
    codings: list[str] = []
    for key, value in scope["headers"]:
        if key == b"content-encoding":
            for name in value.decode("latin-1").split(","):
                coding = name.strip().lower()
                coding = _ALIASES.get(coding, coding)
                if coding in ACCEPTED:
                    codings.append(coding)
                    if len(codings) > MAX_CODINGS:
                        problem = f"lists more than {MAX_CODINGS} codings"
                        raise UnsupportedContentEncoding(", ".join(codings), ACCEPTED, problem)
                elif coding not in ("", "identity"):
                    raise UnsupportedContentEncoding(name.strip(), ACCEPTED)
    if not codings:
        return None
    return BodyDecoder([_Inflation(coding, limit) for coding in reversed(codings)])


class BodyDecoder:
    """A body's codings undone, the last applied first, one chunk at a time; blocking
    (:func:`~.bodies.receive_body` runs each chunk's in a worker thread: zlib lets the GIL
    go)."""

    __slots__ = ("_stages",)

    def __init__(self, stages: list[_Inflation]) -> None:
        self._stages = stages

    def decode(self, chunk: bytes) -> bytes:
        """What ``chunk`` decodes to: raises ``RequestTooLarge`` once a coding's output
        passes the limit, ``UndecodableBody`` when it does not decode."""
        for stage in self._stages:
            chunk = stage.inflate(chunk)
        return chunk

    def end(self) -> None:
        """The body ended: raises ``UndecodableBody`` when a coding's data was cut short."""
        for stage in self._stages:
            stage.end()


class _Inflation:
    """One coding undone (``gzip`` or ``deflate``), its output bounded by ``limit``."""

    __slots__ = ("_coding", "_head", "_inflater", "_limit", "_room")

    def __init__(self, coding: str, limit: int) -> None:
        self._coding = coding
        self._limit = limit
        self._room = limit
        """What the limit leaves of this coding's output."""
        self._head = b""
        """A deflate body's first byte, held until its second tells its format."""
        self._inflater = zlib.decompressobj(_GZIP) if coding == "gzip" else None

    def inflate(self, data: bytes) -> bytes:
        inflater = self._inflater
        if inflater is None:  # deflate: zlib's format or raw, told by its first two bytes
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return b""
            self._head = b""
            inflater = self._inflater = zlib.decompressobj(_ZLIB if _zlib_header(data) else _RAW)
        pieces: list[bytes] = []
        try:
            while data:
                if inflater.eof:  # a gzip member ended: padding (zeros), or the next one
                    if self._coding != "gzip":
                        raise UndecodableBody(self._coding, "data follows its end")
                    data = data.lstrip(b"\0")  # skipped, as GzipFile skips them
                    if not data:
                        break
                    inflater = self._inflater = zlib.decompressobj(_GZIP)
                piece = inflater.decompress(data, self._room + 1)
                self._room -= len(piece)
                if self._room < 0:  # else all of data was taken: no unconsumed tail
                    raise RequestTooLarge(
                        f"The request body, decoded, exceeds the limit of {self._limit} bytes."
                    )
                pieces.append(piece)
                data = inflater.unused_data if inflater.eof else b""
        except zlib.error as exc:  # "Error -3 while decompressing data: invalid ..."
            detail = str(exc).rpartition(": ")[2]
            raise UndecodableBody(self._coding, f"its data is corrupt ({detail})") from None
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def end(self) -> None:
        if self._inflater is None or not self._inflater.eof:
            raise UndecodableBody(self._coding, "its data ends before its end")


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` begins with a zlib header (RFC 1950: deflate, a window of at most
    32 KiB, the check bits), not a raw deflate block (whose first byte would be a stored
    block's with padding bits set, which no encoder writes)."""
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and cmf >> 4 <= 7 and (cmf << 8 | flg) % 31 == 0
