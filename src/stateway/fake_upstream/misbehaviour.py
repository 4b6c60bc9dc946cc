"""The fake model server misbehaving on purpose, as real ones do under load or by accident:
pacing the body (``[[stall]]``, ``[[trickle]]``), answering hugely (``[[huge]]``),
echoing the caller's key in an error (``[[leak]]``) and failing a stream part-way
(``[[fail]]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from stateway.fake_upstream.delivery import END, JSON_HEADERS, PAYLOAD, Frame, Message, Send
from stateway.fake_upstream.errors import UpstreamError
from stateway.fake_upstream.plan import Plan

HUGE_PIECE = 16 * 1024
"""Characters per streamed piece of a ``[[huge]]`` reply."""
_MARKER = "HUGE0REPLY0GOES0HERE"


class PacedSend:
    """An ASGI ``send`` that waits ``stall`` seconds before the first body byte and sends
    each body one byte every ``trickle`` seconds. ``transport`` stays reachable, so a
    scripted ``[[cut]]`` can still drop the connection."""

    def __init__(self, send: Send, *, stall: float, trickle: float) -> None:
        self._send = send
        self._stall = stall
        self._trickle = trickle
        self._started = False

    @property
    def transport(self) -> Any:
        return getattr(getattr(self._send, "__self__", None), "transport", None)

    async def send(self, message: Message) -> None:
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        if not self._started:
            self._started = True
            await asyncio.sleep(self._stall)
        body: bytes = message.get("body", b"")
        if not self._trickle:
            await self._send(message)
            return
        for position in range(len(body)):
            await self._send(
                {
                    "type": "http.response.body",
                    "body": body[position : position + 1],
                    "more_body": True,
                }
            )
            await asyncio.sleep(self._trickle)
        if not message.get("more_body", False):
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})


def huge_plan(plan: Plan, size: int, stream: bool) -> Plan:
    """``plan`` answering ``size`` bytes of text: pieces to stream, or a marker that
    :func:`send_huge_json` replaces while sending (the text is never built whole)."""
    if not stream:
        return replace(plan, text=[_MARKER])
    whole, rest = divmod(size, HUGE_PIECE)
    pieces = [HUGE_PIECE * "x"] * whole + (["x" * rest] if rest else [])
    return replace(plan, text=pieces)


async def send_huge_json(send: Send, body: bytes, size: int) -> None:
    """Send ``body`` with every marker replaced by ``size`` bytes of ``x``, piece by piece."""
    parts = body.split(_MARKER.encode())
    length = sum(map(len, parts)) + size * (len(parts) - 1)
    headers = [*JSON_HEADERS, (b"content-length", str(length).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for index, part in enumerate(parts):
        pieces: Iterable[bytes] = [part] if index == 0 else [*_filler(size), part]
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _filler(size: int) -> Iterator[bytes]:
    piece = b"x" * HUGE_PIECE
    whole, rest = divmod(size, HUGE_PIECE)
    yield from [piece] * whole
    if rest:
        yield piece[:rest]


def leaked_key_message(key: str | None) -> str:
    """An error message that gives the caller's key away, lower-cased and as a prefix."""
    shown = key or "(none)"
    return f"Invalid key {shown.lower()} for this deployment (key starts with {shown[:12]})."


def leak_error(key: str | None, status: int) -> UpstreamError:
    return UpstreamError(status, leaked_key_message(key), code="invalid_deployment_key")


def ending_in_error(
    frames: Iterable[Frame], error_frame: Callable[[int], bytes]
) -> Iterator[Frame]:
    """The stream's frames up to its ending, then ``error_frame(frames sent)`` instead."""
    sent = 0
    for frame in frames:
        if frame[1] == END:
            break
        sent += 1
        yield frame
    yield error_frame(sent), END


def failing(
    frames: Iterable[Frame], payloads: int, ending: Callable[[int], Iterable[Frame]]
) -> Iterator[Frame]:
    """The stream's frames up to its ``payloads``-th payload (with none, the frames before
    the first), then ``ending(frames sent)`` (a mid-stream error) instead of the rest."""
    sent = shown = 0
    for frame in frames:
        if frame[1] == END or (frame[1] == PAYLOAD and shown == payloads):
            break
        shown += frame[1] == PAYLOAD
        sent += 1
        yield frame
    yield from ending(sent)


async def send_text(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
