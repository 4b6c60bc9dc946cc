"""A raw MCP server over Streamable HTTP that completes the handshake honestly and then
answers every other request with a JSON body: tool listings whose pages never end, or one
of a chosen size (what the ``mcp`` SDK's
server cannot be made to send): sent in 1 MiB chunks without a ``Content-Length``, so only
the bytes read tell the client how long it is; or gzip-compressed whatever the client
accepts (about 1 KiB on the wire for every MiB of text); or, for a ``tools/call``, log
notifications in a tight loop and never the result."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from starlette.types import Receive, Scope, Send

from tests.support.mcp_server import serve_app

CHUNK = b"a" * (1024 * 1024)


async def _body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def _answer(
    send: Send,
    status: int,
    parts: Iterator[bytes],
    *,
    gzip: bool = False,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    headers = [(b"content-type", b"application/json")] if status == 200 else []
    headers += extra or []
    if gzip:
        headers.append((b"content-encoding", b"gzip"))
        parts = _gzipped(parts)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    for part in parts:
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def _initialized(request: dict[str, Any]) -> Iterator[bytes]:
    result = {
        "protocolVersion": request["params"]["protocolVersion"],
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "hostile", "version": "1"},
    }
    yield orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})


def _huge_text(request: dict[str, Any], mebibytes: int) -> Iterator[bytes]:
    yield b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % (
        orjson.dumps(request["id"])
    )
    for _ in range(mebibytes):
        yield CHUNK
    yield b'"}]}}'


def _gzipped(parts: Iterator[bytes]) -> Iterator[bytes]:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip container
    for part in parts:
        if packed := compressor.compress(part):
            yield packed
    yield compressor.flush()


Compression = bool | Literal["accepted"]
"""Whether replies are gzip-compressed: always, never, or when the client accepts it."""

Answer = Callable[[dict[str, Any]], Iterator[bytes]]
"""The JSON body of the reply to a request after the handshake."""


@contextmanager
def _serve(answer: Answer, *, gzip: Compression = False) -> Iterator[str]:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _answer(send, 405, iter(()))
            return
        request = orjson.loads(await _body(receive))
        if "id" not in request:
            await _answer(send, 202, iter(()))
        elif request["method"] == "initialize":
            await _answer(send, 200, _initialized(request))
        else:
            accepted = b", ".join(  # every line of it, as a proxy reads them
                value for name, value in scope["headers"] if name == b"accept-encoding"
            )
            packed = gzip is True or (gzip == "accepted" and b"gzip" in accepted)
            await _answer(send, 200, answer(request), gzip=packed)

    with serve_app(app, lifespan=False) as base_url:
        yield f"{base_url}/mcp"


@contextmanager
def serve_huge_results(mebibytes: int, *, gzip: Compression = False) -> Iterator[str]:
    """A URL whose requests after the handshake answer ``mebibytes`` MiB of text as one
    JSON reply (``gzip``: compressed; ``"accepted"``: when the request accepts gzip, as a
    proxy compresses)."""
    with _serve(lambda request: _huge_text(request, mebibytes), gzip=gzip) as url:
        yield url


def _endless_page(request: dict[str, Any], size: int) -> Iterator[bytes]:
    page = int((request.get("params") or {}).get("cursor") or 0)
    tools = [{"name": f"t{page}_{i}", "inputSchema": {"type": "object"}} for i in range(size)]
    result = {"tools": tools, "nextCursor": str(page + 1)}
    yield orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})


@contextmanager
def serve_endless_listing(tools_per_page: int) -> Iterator[str]:
    """A URL whose ``tools/list`` pages never end, each naming ``tools_per_page`` tools."""
    with _serve(lambda request: _endless_page(request, tools_per_page)) as url:
        yield url


@dataclass
class Flood:
    """A server flooding notifications: its URL, and whether a client stopped a flood by
    leaving (closing its stream)."""

    url: str
    left: threading.Event = field(default_factory=threading.Event)


def _note(serial: int) -> bytes:
    params = {"level": "info", "data": f"working {serial}"}
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
    return b"event: message\ndata: " + orjson.dumps(note) + b"\n\n"


def _unasked_reply(serial: int) -> bytes:
    reply = {"jsonrpc": "2.0", "id": f"unasked-{serial}", "result": {}}
    return b"event: message\ndata: " + orjson.dumps(reply) + b"\n\n"


async def _flood(
    flood: Flood,
    request: dict[str, Any],
    receive: Receive,
    send: Send,
    notes: int | None,
    message: Callable[[int], bytes] = _note,
) -> None:
    """Notifications (``message``) in a tight loop until the client leaves, never the
    result; or ``notes`` of them, then the result."""
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    serial = 0
    try:
        while not gone.is_set() and (notes is None or serial < notes):
            chunk = b"".join(message(serial + i) for i in range(FLOOD_BATCH))
            serial += FLOOD_BATCH
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(0)
        if not gone.is_set():
            done = orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": FLOOD_RESULT})
            await send(
                {"type": "http.response.body", "body": b"event: message\ndata: " + done + b"\n\n"}
            )
    finally:
        if gone.is_set():
            flood.left.set()
        watcher.cancel()


FLOOD_BATCH = 50
"""Notifications sent per chunk of a flood."""

FLOOD_RESULT = {"content": [{"type": "text", "text": "done"}]}


@contextmanager
def serve_notification_flood(
    notes: int | None = None, *, idle: bool = False, replies: bool = False
) -> Iterator[Flood]:
    """A server whose ``tools/call`` answers an endless stream of log notifications and
    never the result, or (``notes``) that many of them (rounded up to a whole
    :data:`FLOOD_BATCH`), then the result (``ping`` and ``tools/list``, of one tool
    ``flood``, are answered). ``idle``: the stream a client opens for the server's own
    messages (a ``GET``, once the session has an id) floods them too. ``replies``: the
    flood is of replies to requests the client never sent, not of notifications."""
    message = _unasked_reply if replies else _note
    flood = Flood(url="")

    def reply(request: dict[str, Any], result: dict[str, Any]) -> Iterator[bytes]:
        yield orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and idle:
            await _flood(flood, {}, receive, send, None, message)
            return
        if scope["method"] != "POST":
            await _answer(send, 405, iter(()))
            return
        request = orjson.loads(await _body(receive))
        method = request.get("method")
        if "id" not in request:
            await _answer(send, 202, iter(()))
        elif method == "initialize":
            session = [(b"mcp-session-id", b"flooded")] if idle else []
            await _answer(send, 200, _initialized(request), extra=session)
        elif method == "tools/list":
            tools = [{"name": "flood", "inputSchema": {"type": "object"}}]
            await _answer(send, 200, reply(request, {"tools": tools}))
        elif method == "tools/call":
            await _flood(flood, request, receive, send, notes, message)
        else:
            await _answer(send, 200, reply(request, {}))

    with serve_app(app, lifespan=False) as base_url:
        flood.url = f"{base_url}/mcp"
        yield flood
