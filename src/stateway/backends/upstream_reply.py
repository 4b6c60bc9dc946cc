"""The body of one upstream reply, read incrementally and never past its byte budget.

Backends read a reply as events (:meth:`UpstreamReply.events`, for event streams), as
chunks (``async for chunk in reply``) or whole (:meth:`UpstreamReply.read`, for JSON;
:meth:`UpstreamReply.rest`: what is left of it). A reply whose type is JSON
(:attr:`UpstreamReply.whole`) is read whole even where a stream was asked for: some
servers and proxies answer a streamed request with a 200 whose body is an error alone.
Either way every byte is counted as it arrives, and the reply that outgrows
``max_response_bytes`` fails with :class:`~stateway.core.errors.UpstreamResponseTooLarge`
before more of it is buffered; a declared ``Content-Length`` over the budget fails before
the body is read at all. Deadlines are the client's
(:class:`~stateway.backends.upstream_http.UpstreamClient`: ``read_timeout`` on the socket,
``total_timeout`` on the body), and the wait for the first output's
(``first_token_timeout``: :func:`no_output`, what it fails with). A stream that ends
before its answer is :func:`cut_short`, or :func:`no_answer` when it ends as if answered
before any output.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import aiohttp

from stateway.backends.sse import ServerSentEvent, SSEDecoder
from stateway.core.errors import UpstreamError, UpstreamResponseTooLarge, UpstreamTimeout


class UpstreamReply:
    __slots__ = ("_backend", "_limit", "_response", "received")

    def __init__(self, response: aiohttp.ClientResponse, backend: str, limit: int) -> None:
        self._response = response
        self._backend = backend
        self._limit = limit
        self.received = 0
        """Body bytes read so far."""

    @property
    def status(self) -> int:
        return self._response.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._response.headers

    @property
    def whole(self) -> bool:
        """Whether the body is declared JSON (``application/json``, or a ``+json`` type):
        a whole answer, not an event stream, whatever the request asked for."""
        media = self._response.content_type
        return media == "application/json" or media.endswith("+json")

    def __aiter__(self) -> UpstreamReply:
        return self

    async def __anext__(self) -> bytes:
        """The next chunk of the body, as it arrived."""
        chunk = await self._response.content.readany()
        if not chunk:
            raise StopAsyncIteration
        self._count(len(chunk))
        return chunk

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The body as an event stream: each event once its blank line has arrived (one
        generator from the socket's chunks to events, the hot path of every stream)."""
        decoder = SSEDecoder()
        content = self._response.content
        while chunk := await content.readany():
            self._count(len(chunk))
            for event in decoder.feed(chunk):
                yield event
        for event in decoder.close():
            yield event

    def check_declared(self) -> None:
        """Fail now if the reply's declared ``Content-Length`` is over the budget."""
        declared = self._response.content_length
        if declared is not None and declared > self._limit:
            self._count(declared)

    async def read(self) -> bytes:
        """The whole body."""
        self.check_declared()
        chunks = await self.rest()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def rest(self) -> list[bytes]:
        """The chunks of the body not read yet, read to its end (in one loop: no call per
        chunk)."""
        chunks: list[bytes] = []
        content = self._response.content
        while chunk := await content.readany():
            self._count(len(chunk))
            chunks.append(chunk)
        return chunks

    async def prefix(self, size: int) -> bytes:
        """At most the first ``size`` bytes of the body (an error body, say)."""
        chunks: list[bytes] = []
        left = size
        while left > 0 and (chunk := await self._response.content.read(left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _count(self, size: int) -> None:
        self.received += size
        if self.received > self._limit:
            raise UpstreamResponseTooLarge(
                f"The model server '{self._backend}' sent a reply larger than "
                f"{self._limit} bytes (max_response_bytes)."
            )


def no_output(backend: str, seconds: float) -> UpstreamTimeout:
    """The error of a reply whose first output did not come within ``first_token_timeout``
    of its headers."""
    return UpstreamTimeout(
        f"The model server '{backend}' sent no output within {seconds:g} s of its "
        "response headers (first_token_timeout)."
    )


def cut_short(backend: str) -> UpstreamError:
    """The error of a stream that ended before its answer finished."""
    return UpstreamError(
        f"The model server '{backend}' closed the stream before finishing.",
        code="upstream_stream_cut",
    )


def malformed_chunk(backend: str) -> UpstreamError:
    """The error of a stream event whose data is no chunk: not JSON, or of no known shape;
    ``[DONE]`` followed by more data in its event too (no end, nor a cut: a protocol fault
    of the server's)."""
    return UpstreamError(f"The model server '{backend}' sent a malformed chunk.")


def no_answer(backend: str) -> UpstreamError:
    """The error of a stream that ended (with ``[DONE]``) before any output: vLLM's, when
    it drops an error that came before the first token."""
    return UpstreamError(f"The model server '{backend}' ended its stream without an answer.")
