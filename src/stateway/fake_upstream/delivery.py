"""Getting bytes to the client: JSON replies, paced SSE streams and scripted disconnects.

The wires render a stream as :data:`Frame` tuples; :func:`send_stream` applies the
``[[slow]]``, ``[[late]]`` and ``[[pause]]`` pacing and the ``[[cut]]`` drop to them. A
drop closes the TCP transport under uvicorn (the client sees a truncated body, or no
response at all); under other ASGI servers it raises :class:`ConnectionDropped` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

STRUCT = 0
"""A frame that carries structure only (role chunk, item added, ...)."""
PAYLOAD = 1
"""A frame that carries one piece of text, reasoning or tool arguments."""
END = 2
"""A frame of the stream's ending (finish chunk, usage, ``[DONE]``, response.completed)."""
Frame = tuple[bytes, int]

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class ConnectionDropped(Exception):
    """Raised to abort a response when the server offers no transport to close."""


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    length = (b"content-length", str(len(body)).encode())
    all_headers = [*JSON_HEADERS, length, *headers] if headers else [*JSON_HEADERS, length]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def send_stream(
    send: Send,
    receive: Receive,
    frames: Iterable[Frame],
    *,
    delay: float,
    cut: int | None,
    late: float = 0.0,
    pause: float = 0.0,
) -> None:
    """Stream ``frames`` as SSE; sleep ``delay`` before the first and each payload frame,
    ``late`` more before the first payload frame, ``pause`` more before the second.

    With ``cut`` set, the connection is dropped instead of sending payload frame ``cut + 1``
    or the first ending frame, whichever comes first.
    """
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    first = True
    payloads = 0
    for data, kind in frames:
        if cut is not None and (kind == END or (kind == PAYLOAD and payloads >= cut)):
            await drop_connection(send, receive)
            return
        if delay and (first or kind == PAYLOAD):
            await asyncio.sleep(delay)
        if kind == PAYLOAD and (wait := (late, pause)[payloads] if payloads < 2 else 0.0):
            await asyncio.sleep(wait)
        first = False
        payloads += kind == PAYLOAD
        await send({"type": "http.response.body", "body": data, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def drop_connection(send: Send, receive: Receive) -> None:
    """Close the connection abruptly, whatever has been sent so far."""
    # uvicorn's `send` is a bound method of its request cycle, which holds the transport.
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    close = getattr(transport, "close", None)
    if not callable(close):
        raise ConnectionDropped("scripted [[cut]]")
    close()
    # Return once the server has noticed, so it does not report an unfinished response.
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(
    receive: Receive, work: Awaitable[None], on_gone: Callable[[], None] | None = None
) -> None:
    """Await ``work``, abandoning it quietly (and calling ``on_gone``) if the client
    disconnects meanwhile.

    Only used for ``[[slow]]`` requests: uvicorn does not cancel a request when its client
    goes away, and a long paced stream would otherwise keep running (and delay shutdown).
    """
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        if on_gone is not None:
            on_gone()
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        await work
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            return
        raise
    finally:
        watcher.cancel()
