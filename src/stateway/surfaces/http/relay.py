"""Relaying an upstream's answer as it came: status, headers and body bytes, parsed by no one.

The Chat Completions fast path answers with a :class:`RelayResponse`: the upstream's
status line and the headers a client needs go out at once, then each body chunk as it
arrives. The relay is closed however the answer ends, which closes an unfinished upstream
request: the route cancels the answer when its client leaves (its ``DisconnectWatch``
notices even while the upstream is silent). When the upstream fails part-way, an event
stream ends with one OpenAI-shaped ``data: {"error": ...}`` line (what the ``openai`` SDK
raises), on a line of its own after what was relayed; any other body is cut short,
closing the connection.
"""

from __future__ import annotations

import logging

import orjson
from starlette.types import Receive, Scope, Send

from stateway.core.errors import GatewayError
from stateway.core.ports import Relay

log = logging.getLogger(__name__)

_EVENT_STREAM = "text/event-stream"


class RelayResponse:
    """A plain ASGI app answering with ``relay``."""

    __slots__ = ("_relay",)

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._relay_all(send)
        except OSError:
            pass  # the client went away while a chunk was being written
        finally:
            await self._relay.aclose()

    async def _relay_all(self, send: Send) -> None:
        relay = self._relay
        headers = [(name.encode(), value.encode()) for name, value in relay.headers.items()]
        await send({"type": "http.response.start", "status": relay.status, "headers": headers})
        chunk = b"\n\n"
        try:
            async for chunk in relay.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except GatewayError as error:
            log.warning("relayed answer failed part-way: %s", error.message)
            if not relay.headers.get("content-type", "").lower().startswith(_EVENT_STREAM):
                return  # left unfinished: the server closes the connection
            frame = b"data: " + orjson.dumps({"error": error.to_dict()}) + b"\n\n"
            if not chunk.endswith(b"\n\n"):  # cut within an event: the error goes apart
                frame = b"\n\n" + frame
            await send({"type": "http.response.body", "body": frame, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
