"""Relaying an upstream's answer as it came: status, headers and body bytes, parsed by no one.

The Chat Completions fast path answers with a :class:`RelayResponse`: an event stream's
status line and the headers a client needs go out at once (with those telling a proxy
before it not to hold its events, as a translated stream's:
:data:`~stateway.surfaces.http.sse.UNBUFFERED`), then each body chunk as it arrives. The
relay is closed however the answer ends, which closes an unfinished upstream request; an
answer that ends with a last message has it closed before that message goes out, so that
what it held (its request's concurrent slot, given back in Redis) is free on every replica
before its client learns that it ended. The route cancels the answer when its client
leaves (its ``DisconnectWatch`` notices even while the upstream is silent). Any other
body's status line waits for its first chunk, and a whole answer's (a 200 that is no event
stream: :attr:`~stateway.core.backend.Relay.whole`) for all of it, which then follows in
one message (:meth:`RelayResponse.held`): an upstream failing before that (silent past its
read timeout, its connection reset after the headers) is answered as an error, not as a
status whose body never comes. When the upstream fails part-way, an event stream ends with
one OpenAI-shaped ``data: {"error": ...}`` line (what the ``openai`` SDK raises), on a
line of its own after what was relayed; any other body (an upstream's error body: a 200
one is read whole before it is relayed, :mod:`stateway.backends.upstream_relay`) is cut
short, closing the connection. An event stream whose credential is revoked (an API key) or
expires while it is relayed ends the same way, with the 401
(:class:`~stateway.surfaces.auth.revocation.RevocationWatch`), its upstream request closed
as when the client leaves. A relay ended so, or by the server shutting down, is logged at
info (expected endings); one its upstream fails part-way, as a warning naming the server.
A body left unfinished on purpose is not reported by uvicorn as the app's error
(:func:`~stateway.surfaces.http.unfinished.leave_unfinished`). Whether the body went out to
its end as it came is told after (:attr:`RelayResponse.finished`): a keyed request's answer
is remembered for its retry only then (:mod:`.keyed_relay`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from starlette.types import Receive, Scope, Send

from stateway.core.backend import Relay, is_event_stream
from stateway.core.errors import CredentialRevoked, GatewayError, ServerShuttingDown
from stateway.protocols.chat.stream import encode_error_chunk
from stateway.surfaces.auth.revocation import RevocationWatch
from stateway.surfaces.http.sse import UNBUFFERED
from stateway.surfaces.http.unfinished import leave_unfinished

log = logging.getLogger(__name__)


class RelayResponse:
    """A plain ASGI app answering with ``relay``."""

    __slots__ = ("_body", "_chunks", "_first", "_last", "_relay", "_streams", "finished")

    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._streams = is_event_stream(relay.headers)
        self._chunks: AsyncIterator[bytes] | None = None
        """The body's chunks, once asked for (a whole answer's are never asked for)."""
        self._body: bytes | None = None
        """A whole answer's body (:attr:`Relay.whole`), read by :meth:`held`: it goes out
        in one message after the status line."""
        self._first: bytes | None = None
        """Any other body's first chunk, read by :meth:`held` before the status line."""
        self._last = b"\n\n"
        """The last chunk relayed: whether an error line needs a line break before it."""
        self.finished = False
        """Whether the body went out to its end as it came: a whole answer, or each chunk
        to the upstream's own end (not ended by an error line, nor cut short), its last
        message sent."""

    async def held(self) -> RelayResponse:
        """This answer, its body read first (a whole answer's all of it, any other's its
        first chunk) unless it is an event stream (whose status line goes out at once: its
        first event may be long in coming). Raises the upstream's :class:`GatewayError`
        if it fails before that (the relay closed), for the route to answer in its own
        shape."""
        if self._streams:
            return self
        relay = self._relay
        try:
            if relay.whole:
                self._body = await relay.body()
            else:
                self._first = await anext(self._chunked(), None)
        except BaseException:
            await relay.aclose()
            raise
        return self

    def _chunked(self) -> AsyncIterator[bytes]:
        chunks = self._chunks
        if chunks is None:
            chunks = self._chunks = self._relay.chunks()
        return chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._relay_all(scope, send)
        except OSError:
            pass  # the client went away while a chunk was being written
        finally:
            await self._relay.aclose()

    async def _relay_all(self, scope: Scope, send: Send) -> None:
        relay = self._relay
        headers = [(name.encode(), value.encode()) for name, value in relay.headers.items()]
        if self._streams:  # what a translated stream says: relayed events are not held
            headers += UNBUFFERED
        await send({"type": "http.response.start", "status": relay.status, "headers": headers})
        if self._body is not None:
            await self._end(send, self._body)
            self.finished = True
            return
        if self._first is not None:
            await send({"type": "http.response.body", "body": self._first, "more_body": True})
        try:
            if self._streams and RevocationWatch.applies(scope):  # a key's or token's
                revoked = await self._relay_revocable(scope, send)
                if revoked is not None:
                    raise revoked
            else:
                async for chunk in self._chunked():
                    self._last = chunk
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except GatewayError as error:
            expected = isinstance(error, ServerShuttingDown | CredentialRevoked)
            level = logging.INFO if expected else logging.WARNING
            log.log(level, "relayed answer failed part-way: %s", error.message)
            if not self._streams:
                leave_unfinished()
                return  # left unfinished: the server closes the connection
            frame = encode_error_chunk(error)
            if not self._last.endswith(b"\n\n"):  # cut within an event: the error goes apart
                frame = b"\n\n" + frame
            await self._end(send, frame)
            return
        await self._end(send, b"")
        self.finished = True

    async def _end(self, send: Send, body: bytes) -> None:
        """Send the body's last message, the relay closed first: what it holds (its
        request's concurrent slot) is given back before its client learns that it ended."""
        await self._relay.aclose()
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _relay_revocable(self, scope: Scope, send: Send) -> CredentialRevoked | None:
        """Relay an event stream's chunks, cut off if its credential is revoked or expires
        meanwhile: that error if it was."""
        revoked: list[CredentialRevoked] = []
        guard = asyncio.timeout(None)

        def revoke(error: CredentialRevoked) -> None:
            if not guard.expired():
                revoked.append(error)
                guard.reschedule(asyncio.get_running_loop().time() - 1)

        try:
            async with guard:
                watch = RevocationWatch.start(scope, revoke)
                try:
                    async for chunk in self._chunked():
                        self._last = chunk
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                finally:
                    if watch is not None:
                        watch.stop()
        except TimeoutError:
            if not revoked:
                raise
            return revoked[0]
        return None
