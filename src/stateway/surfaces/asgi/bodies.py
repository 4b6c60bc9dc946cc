"""A request's body: declared JSON, read whole within its bounds (413 past its size
limit, 408 past its time limit), its content codings undone (:mod:`.content_coding`: the
limit bounds the decoded body too), as every route reading one does (the HTTP routes,
the ``/mcp`` requests read ahead of the SDK).
"""

from __future__ import annotations

import asyncio

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

from stateway.core.deadline import Deadline
from stateway.core.errors import BodyTimeout, InvalidRequest, RequestTooLarge
from stateway.surfaces.asgi.content_coding import body_decoder


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the request header ``name`` (lower-case, as ASGI servers give
    names), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def require_json(scope: Scope) -> None:
    """Refuse a body that is not declared ``application/json`` (parameters allowed): a
    web page can send ``text/plain`` or a form to a loopback gateway without a preflight."""
    declared = header(scope, b"content-type") or ""
    if declared.partition(";")[0].strip().lower() != "application/json":
        raise InvalidRequest(
            "The request body must be JSON, sent with 'Content-Type: application/json'.",
            code="unsupported_media_type",
            status=415,
        )


async def read_body(
    scope: Scope, receive: Receive, limit: int, within: float | None = None
) -> bytes:
    """The whole body, as :func:`receive_body` reads it; an empty one is refused (400)."""
    body = await receive_body(scope, receive, limit, within)
    if not body:
        raise InvalidRequest(
            "The request body is empty; expected a JSON object.", code="invalid_json"
        )
    return body


async def receive_body(
    scope: Scope, receive: Receive, limit: int, within: float | None = None
) -> bytes:
    """The whole body (empty when none was sent), decoded as its ``Content-Encoding``
    says (415 for a coding not undone, 400 for a body that does not decode), refused
    with 413 past ``limit`` bytes, as sent or decoded, and with 408 when it takes longer
    than ``within`` seconds to arrive (the connection is then closed). Raises
    ``ClientDisconnect`` when the client leaves first. A compressed body's chunks are
    inflated in a worker thread as they come: one of a few kilobytes may make megabytes."""
    decoder = body_decoder(scope, limit)
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        with Deadline(within):
            more = True
            while more:
                message = await receive()
                if message["type"] != "http.request":
                    raise ClientDisconnect()
                chunk: bytes = message.get("body", b"")
                more = message.get("more_body", False)
                if not chunk:
                    continue
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                if decoder is not None:
                    chunk = await asyncio.to_thread(decoder.decode, chunk)
                chunks.append(chunk)
    except TimeoutError:
        if within is None:  # not the deadline's
            raise
        raise BodyTimeout(within) from None
    if not chunks:
        return b""
    if decoder is not None:
        decoder.end()
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"The request body exceeds the limit of {limit} bytes.")
