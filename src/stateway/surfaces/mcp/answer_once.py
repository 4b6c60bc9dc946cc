"""An MCP request answered once, whatever the SDK sends after its whole answer.

The SDK's Streamable HTTP transport answers a notification (or a client's reply) 202
before it hands the message to its session. When that session has just ended (its
client's ``DELETE`` came meanwhile: a client giving up on a call sends
``notifications/cancelled`` and closes), the hand-off finds it closed; the SDK logs that,
answers the request again (a 500 after the 202, which uvicorn refuses) and raises
``ClosedResourceError`` once more. The second answer is dropped here, and that error,
after a whole answer, ends the request quietly: the client was answered, and its session
is gone with what it said.
"""

from __future__ import annotations

import logging

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


async def answer_once(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Serve the request with ``app``; what it sends once its answer is whole is dropped,
    and its session closed under it after that ends the request."""
    answer = _Answer(send)
    try:
        await app(scope, receive, answer.send)
    except anyio.ClosedResourceError:
        if not answer.whole:
            raise
        log.debug("mcp: a request's session ended as it was answered")


class _Answer:
    __slots__ = ("_send", "whole")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.whole = False

    async def send(self, message: Message) -> None:
        if self.whole:
            return
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.whole = True
        await self._send(message)
