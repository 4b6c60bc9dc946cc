"""A keyed Chat Completions request on the fast path: relayed as one without the key.

A request sent with an ``Idempotency-Key`` whose route forwards it untouched
(:mod:`stateway.core.forwarding`) goes upstream as the very bytes it came as, and its
answer comes back as it would without the key (:class:`~.relay.RelayResponse`): a header
must not change what the model is asked, nor what the first client gets. Only its sending
differs: each body message is kept as it went out, and the whole body is what a retry
gets (:mod:`.keyed_runs`) when the relay ended well: a 200 whose body went out to its end
(:attr:`RelayResponse.finished`: a whole answer read whole, or an event stream to its
upstream's own end, not to the relay's error line), of the kind a replay answers with (an
event stream for a streamed request, a JSON body for another). An upstream's error status,
a stream cut or failed part-way, a client that left (whose leaving closes the upstream
request, as without the key) leave nothing: the retry is relayed again. What an unkeyed
relay does is unchanged (no message of it is kept). A retry whose stream opened while it
waited for its key (:mod:`.keyed_waits`) has its relayed events follow in that stream, or
an error status's error as the error line a relay failing part-way ends with.
"""

from __future__ import annotations

import contextlib

from starlette.types import Message, Receive, Scope, Send

from stateway.core.backend import Relay, is_event_stream
from stateway.core.errors import GatewayError, UpstreamError
from stateway.protocols.chat.stream import encode_error_chunk
from stateway.surfaces.http.relay import RelayResponse
from stateway.surfaces.http.sse import send_ending

NO_STREAM = "The model server answered a streamed request with no event stream."
"""The error ending a stream already open whose relay came as a 200 of another kind."""


class _Recording:
    """``send``, keeping the status and each body chunk that went out; ``opened``: the
    status line went out already (the relay's is kept, not sent)."""

    __slots__ = ("_opened", "_send", "chunks", "status")

    def __init__(self, send: Send, opened: bool) -> None:
        self._send = send
        self._opened = opened
        self.status = 0
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            if self._opened:
                return
        await self._send(message)
        if body := message.get("body"):
            self.chunks.append(body)


async def relayed_once(
    relay: Relay, stream: bool, scope: Scope, receive: Receive, send: Send, opened: bool = False
) -> bytes | None:
    """Answer with ``relay`` as a request without the key is answered; its body to
    remember for a retry when the relay ended well (see the module), else None. Raises
    what failed before the answer began (:meth:`RelayResponse.held`), for the route to
    answer in its protocol's shape. ``opened``: in an event stream already open (a
    retry that waited for its key: :mod:`.keyed_waits`), where only an event stream's
    200 is relayed (its events), any other answer told by the error line ending a relay
    that failed."""
    if opened and (relay.status != 200 or not is_event_stream(relay.headers)):
        await _refused_in_stream(relay, send)
        return None
    answer = await RelayResponse(relay).held()
    recording = _Recording(send, opened)
    await answer(scope, receive, recording.send)
    if not answer.finished or recording.status != 200:
        return None
    if is_event_stream(relay.headers) != stream:  # not what a replay of it would answer
        return None
    return b"".join(recording.chunks)


async def _refused_in_stream(relay: Relay, send: Send) -> None:
    """End a stream already open with the error a relay's answer would have been (its
    body read for the error it tells, then its error line, a client slow to read it
    waited for a while only: :func:`~.sse.send_ending`)."""
    try:
        async for _ in relay.chunks():
            pass
        error = relay.failure() or UpstreamError(NO_STREAM)
    except GatewayError as failed:
        error = failed
    finally:
        await relay.aclose()
    with contextlib.suppress(OSError):  # its client left
        await send_ending(send, encode_error_chunk(error), error.code)
