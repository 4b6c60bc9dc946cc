"""JSON-RPC batches: a POST whose body is an array of messages, which MCP 2025-03-26 has a
server take and 2025-06-18 removed.

The SDK takes one message a POST, so a batch on a 2025-03-26 session (its requests carry
no ``mcp-protocol-version``, or that one) is served here one message at a time through
the SDK, every message at once (a batch's requests may be answered in any order), and
answered with the replies of its requests as one JSON array (202 when it holds none).
What the SDK refuses every message with (404: no such session; 406: an ``Accept`` that
is not MCP's) is the request's answer; a message it cannot read is answered, in the
array, with its error. A batch anywhere else, an empty one, one of more
than :data:`MAX_BATCH` messages, one opening a session (``initialize`` must not be part
of a batch), or one naming a request id twice is refused: 400 with a JSON-RPC error
(-32600), as the SDK refuses what it cannot read.
"""

from __future__ import annotations

import re
from typing import Any, Final

import anyio
import orjson
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BATCH_VERSION: Final = "2025-03-26"
"""The one MCP version with batches."""
MAX_BATCH: Final = 100
"""Messages one batch may hold: each is served at once, as a request of its own."""
_INVALID_REQUEST: Final = -32600
_MESSAGE_FAILURES: Final = frozenset({400, 500})
"""The statuses the SDK answers one message with, its JSON-RPC error the body: a message
it cannot read, one whose session ended under it. A batch holds them as replies."""
_BATCH: Final = re.compile(rb"[ \t\r\n]*\[")
"""A JSON array's start (matched in place: a body may be megabytes)."""


async def serve_batches(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve the request with ``app``, a batch a message at a time (its body has been read
    whole ahead: ``mount.py``)."""
    if scope["method"] != "POST":
        await app(scope, receive, send)
        return
    first = await receive()
    body: bytes = first.get("body", b"")
    if _BATCH.match(body) is None:
        await app(scope, _replaying(first, receive), send)
        return
    try:
        batch = orjson.loads(body)
    except orjson.JSONDecodeError:  # the SDK's parse error
        await app(scope, _replaying(first, receive), send)
        return
    if (refusal := _refusal(Headers(scope=scope), batch)) is not None:
        await _error(refusal)(scope, receive, send)
        return
    answers: list[_Answer] = [_Answer() for _ in batch]

    async def serve(message: dict[str, Any], answer: _Answer) -> None:
        await app(dict(scope), _one(message), answer.send)  # a request of its own

    async with anyio.create_task_group() as messages:
        for message, answer in zip(batch, answers, strict=True):
            messages.start_soon(serve, message, answer)
    await _answer(answers)(scope, receive, send)


def _refusal(headers: Headers, batch: Any) -> str | None:
    """Why ``batch`` is not served, if it is not."""
    version = headers.get("mcp-protocol-version", BATCH_VERSION)
    if version != BATCH_VERSION:
        return f"JSON-RPC batches are MCP {BATCH_VERSION}'s; this session's version has none."
    if not isinstance(batch, list) or not batch:
        return "Invalid Request: an empty batch."
    if len(batch) > MAX_BATCH:
        return f"A batch holds at most {MAX_BATCH} messages; this one holds {len(batch)}."
    if not all(isinstance(message, dict) for message in batch):
        return "Invalid Request: each message of a batch must be a JSON object."
    if "mcp-session-id" not in headers or any(m.get("method") == "initialize" for m in batch):
        return "Invalid Request: a batch cannot open a session (initialize it alone first)."
    ids = [str(m["id"]) for m in batch if "method" in m and m.get("id") is not None]
    if len(ids) != len(set(ids)):
        return "Invalid Request: a batch names a request id twice."
    return None


def _one(message: dict[str, Any]) -> Receive:
    """The ``receive`` of one message served as a request of its own: its body, then
    nothing (a batch's messages do not end when its client leaves)."""
    body = orjson.dumps(message)
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return receive


def _replaying(first: Message, receive: Receive) -> Receive:
    pending = [first]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


class _Answer:
    """What the SDK answered one message of a batch with."""

    __slots__ = ("body", "headers", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    def replies(self) -> list[Any]:
        """The JSON-RPC replies it holds: an SSE stream's, or one JSON body's."""
        if self.status == 202 or not self.body:
            return []
        if self.body.lstrip().startswith(b"{"):
            return [orjson.loads(self.body)]
        lines = self.body.decode().splitlines()
        messages = [orjson.loads(line[5:]) for line in lines if line.startswith("data:")]
        return [m for m in messages if "result" in m or "error" in m]


def _answer(answers: list[_Answer]) -> Response:
    first = answers[0]
    failed = first.status >= 400 and first.status not in _MESSAGE_FAILURES
    if failed and all(a.status == first.status for a in answers):
        # The request's, not a message's (no such session, a header it lacks): answered so.
        # A 400 refuses one message (one the SDK cannot read): a batch of such messages is
        # answered with their errors, as JSON-RPC answers a batch of invalid requests.
        return Response(first.body, first.status, media_type="application/json")
    replies = [reply for answer in answers for reply in answer.replies()]
    if not replies:
        return Response(status_code=202)
    headers = {
        name.decode("latin-1"): value.decode("latin-1")
        for answer in answers
        for name, value in answer.headers
        if name == b"mcp-session-id"
    }
    return Response(orjson.dumps(replies), 200, headers, media_type="application/json")


def _error(message: str) -> Response:
    error = {"code": _INVALID_REQUEST, "message": message}
    body = orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})
    return Response(body, 400, media_type="application/json")
