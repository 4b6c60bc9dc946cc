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
relay does is unchanged (no message of it is kept).
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from stateway.core.backend import Relay, is_event_stream
from stateway.surfaces.http.relay import RelayResponse


class _Recording:
    """``send``, keeping the status and each body chunk that went out."""

    __slots__ = ("_send", "chunks", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status = 0
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        await self._send(message)
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif body := message.get("body"):
            self.chunks.append(body)


async def relayed_once(
    relay: Relay, stream: bool, scope: Scope, receive: Receive, send: Send
) -> bytes | None:
    """Answer with ``relay`` as a request without the key is answered; its body to
    remember for a retry when the relay ended well (see the module), else None. Raises
    what failed before the answer began (:meth:`RelayResponse.held`), for the route to
    answer in its protocol's shape."""
    answer = await RelayResponse(relay).held()
    recording = _Recording(send)
    await answer(scope, receive, recording.send)
    if not answer.finished or recording.status != 200:
        return None
    if is_event_stream(relay.headers) != stream:  # not what a replay of it would answer
        return None
    return b"".join(recording.chunks)
