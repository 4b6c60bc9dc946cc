"""An upstream answer relayed as bytes (the Chat Completions fast path).

:meth:`UpstreamClient.relay <stateway.backends.upstream_http.UpstreamClient.relay>` sends
a request the way every other call goes (a connection slot, the stale-connection retry,
the deadlines) and hands back an :class:`UpstreamRelay` as soon as the status line and
headers arrive, whatever the status: an upstream error's body is the client's answer too.
Nothing is parsed but the usage at its end, once it has been relayed
(:mod:`~stateway.backends.chat_usage`), and a 200 body that is no event stream, read whole
before it is relayed: one that is only ``{"error": ...}`` (some servers answer a failure
so, even to a streamed request) is the error it reports, not an answer, and one whose
``finish_reason`` says the server gave up on it is that failure; so is an event of a 200
stream that reports an error, raised after the events before it, and the end of one that
is no whole answer (cut short, done before any output, given up on), told once, at its
end, from the last two reads kept for the usage (:mod:`~stateway.backends.relayed_tail`;
a read that ends inside an event relayed to what it holds whole, that event's start held
until a read ends it; one that ends no event otherwise kept with the one before it:
:mod:`~stateway.backends.relayed_stream`).
An error status is relayed as it came; :meth:`UpstreamRelay.failure` says what it means
(how it counts on the backend's circuit), from the status and the body relayed. The body is
counted against ``max_response_bytes`` as it is read (a declared ``Content-Length`` over
it fails before the first chunk) and, when the backend has a key (or a credential among
its configured headers), passed through the key scrubber chunk by chunk (a chunk is
decoded as Latin-1, which maps bytes one to one, so bytes without the key come out
unchanged). With ``first_token_timeout`` the first body
chunk must come within it of the headers (a relay's first output: it is relayed as it
came, so its first bytes are all that can be told), else the relay fails with
:class:`~stateway.core.errors.UpstreamTimeout` before a byte of its body went out.
Closing the relay closes an unfinished upstream request and frees the slot; a read that
fails because of it is the gateway's doing, not the server's: it raises an
:class:`~stateway.core.errors.UpstreamError` but is logged at debug only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import Final

import aiohttp

from stateway.backends.relayed_answer import judged_answer
from stateway.backends.relayed_done import DONE, DONE_ENDS
from stateway.backends.relayed_stream import (
    LF,
    LINE_ENDS,
    OBJECT_ENDS,
    ORDINARY,
    alone,
    ends_inside,
    straddling,
    telling,
    whole_end,
)
from stateway.backends.relayed_tail import RelayedTail
from stateway.backends.upstream_reply import UpstreamReply, no_output
from stateway.backends.upstream_status import classify_reply
from stateway.core.backend import is_event_stream
from stateway.core.deadline import Deadline
from stateway.core.errors import GatewayError, UpstreamError
from stateway.core.usage import Usage
from stateway.redaction import KeyScrubber

log = logging.getLogger(__name__)

PASSED_HEADERS: Final = ("content-type", "retry-after", "retry-after-ms", "x-should-retry")
"""Upstream headers a relayed answer keeps: its type, and what the SDKs read of an error
to retry it or not, and when (and ``content-length`` when unscrubbed, not compressed and
not an event stream: the body is relayed decompressed, and a stream's length means
nothing to a relay sent chunk by chunk)."""

Failures = Callable[[], AbstractContextManager[None]]
"""The client's translation of transport failures into the core's upstream errors."""


class UpstreamRelay:
    __slots__ = (
        "_backend",
        "_closed",
        "_failures",
        "_first_token_timeout",
        "_headers_at",
        "_release",
        "_reply",
        "_response",
        "_scrub",
        "_streams",
        "_tail",
        "headers",
        "status",
        "whole",
    )

    def __init__(
        self,
        response: aiohttp.ClientResponse,
        release: Callable[[], None],
        *,
        backend: str,
        limit: int,
        scrub: KeyScrubber | None,
        failures: Failures,
        first_token_timeout: float | None = None,
    ) -> None:
        """``first_token_timeout``: the backend's, counted from now (the headers)."""
        self.status = response.status
        upstream = response.headers
        headers = {name: upstream[name] for name in PASSED_HEADERS if name in upstream}
        self._streams = streams = is_event_stream(headers)
        if (
            scrub is None
            and "content-length" in upstream
            and "content-encoding" not in upstream
            and not streams
        ):
            headers["content-length"] = upstream["content-length"]
        self.headers = headers
        """Lower-case names."""
        self.whole = response.status == 200 and not streams
        """A whole answer (:mod:`.relayed_answer`): read to its end before it is relayed
        (:meth:`body`)."""
        self._response = response
        self._release: Callable[[], None] | None = release
        """Gives the connection slot back (once)."""
        self._reply = UpstreamReply(response, backend, limit)
        self._scrub = scrub
        self._failures = failures
        self._tail = RelayedTail(backend, scrub)
        """What is kept of the answer: where its usage is, and its end."""
        self._backend = backend
        self._closed = False
        """Closed by :meth:`aclose`: a read failing since is not the server's fault."""
        self._first_token_timeout = first_token_timeout
        self._headers_at = 0.0 if first_token_timeout is None else asyncio.get_running_loop().time()
        """When the headers came (the loop's clock), with ``first_token_timeout``."""

    async def body(self) -> bytes:
        """A whole answer (:attr:`whole`), read to its end in one piece: one call where
        :meth:`chunks` would be a generator's, and the connection back in the pool before
        a byte of it is relayed."""
        with self._failures():
            try:
                self._reply.check_declared()  # before a byte of it is relayed
                first = b"" if self._first_token_timeout is None else await self._first()
                chunks = await self._reply.rest()
            except (aiohttp.ClientError, OSError) as exc:
                if not self._closed:
                    raise  # the server's failure, told by the client's translation
                raise self._closed_read(exc) from exc
            if first:
                chunks.insert(0, first)
            body = (
                self._scrubbed(judged_answer(chunks, self._backend, self._scrub)) if chunks else b""
            )
        self._response.release()  # read to the end: the connection goes back to the pool
        self._tail.last = body  # where its usage is (its output is estimated by bytes, not events)
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.whole:
            body = await self.body()
            if body:
                yield body
            return
        tail = self._tail
        with self._failures():
            try:
                self._reply.check_declared()  # before a byte of it is relayed
                first = b"" if self._first_token_timeout is None else await self._first()
                judged = self.status == 200  # an answer's stream (:mod:`.relayed_stream`)
                head = self._scrubbed(first)
                carry = b""  # the start of an event a held read left for the next
                unended = b""  # an event the body's end cut: relayed once no cut is told
                if judged and ends_inside(head):  # its event's end held for (below)
                    head, carry = await self._completed(head)
                if head:  # read apart (first_token_timeout): judged as any other
                    erring, events = head.find(b"error") >= 0, head.count(b"data:")
                    if judged and telling(head) and (ending := tail.ending(head, events, erring)):
                        if ending[0]:
                            yield tail.noted(ending[0])
                        raise ending[1]
                    noted = tail.noted(head)
                    if carry or not judged or not ends_inside(noted):
                        yield noted
                    else:
                        unended = noted
                reads: AsyncIterator[bytes] = self._reply
                while True:
                    async for chunk in reads:
                        if carry:  # begun by the read before: judged with this one
                            chunk = carry + chunk
                        if self._scrub is not None:
                            chunk = _scrubbed(self._scrub, chunk)
                        events = chunk.count(b"data:")
                        if carry or (
                            judged
                            and (
                                events != 1
                                or not chunk.startswith(ORDINARY)
                                or (chunk[-2] != LF and not chunk.endswith(OBJECT_ENDS))
                            )
                        ):
                            carry = b""
                            cut = False  # the body's end inside the event it begins
                            if ends_inside(chunk):
                                chunk, carry = await self._completed(chunk)
                                events = chunk.count(b"data:")
                                cut = not carry and ends_inside(chunk)
                            erring = chunk.find(b"error") >= 0
                            going_on = False  # with a line the read before began
                            if chunk[:1] != b"d":  # may go on with a line the read before began
                                before = tail.previous[-4:] + tail.last[-4:]
                                events += straddling(before, chunk)  # a data: line split
                                erring = erring or (before[-4:] + chunk[:4]).find(b"error") >= 0
                                going_on = tail.last[-1:] not in LINE_ENDS
                            whole = chunk == DONE or chunk.endswith(OBJECT_ENDS)  # ends an event
                            if (
                                chunk == DONE
                                or chunk.endswith(DONE_ENDS)
                                or erring
                                or (not whole and chunk.rfind(b"[DONE]") >= 0)
                            ) and (ending := tail.ending(chunk, events, erring)):
                                if ending[0]:
                                    yield tail.noted(ending[0])
                                raise ending[1]
                            if not whole or not events or going_on:  # kept with the last
                                tail.joined(chunk, events)
                                if cut:
                                    unended = chunk
                                else:
                                    yield chunk
                                continue
                        tail.previous, tail.last = tail.last, chunk
                        tail.events += events
                        yield chunk
                    if not carry:
                        break
                    reads, carry = alone(carry), b""  # the body ended after it
                if judged and not tail.done:  # no [DONE] told: finished, else cut
                    failed = tail.unended()
                    if failed is not None:
                        raise failed
                if unended:  # a stream answered all the same: relayed as it came
                    yield unended
            except (aiohttp.ClientError, OSError) as exc:
                if not self._closed:
                    raise  # the server's failure, told by the client's translation
                raise self._closed_read(exc) from exc
        self._response.release()  # read to the end: the connection goes back to the pool

    async def _completed(self, chunk: bytes) -> tuple[bytes, bytes]:
        """``chunk`` (relayed, scrubbed) that ends inside an event, to what it holds whole
        (:func:`~.relayed_stream.whole_end`: its events, its comment lines, a blank line
        that begins it ending the event relayed before it), and the rest
        apart (unscrubbed: it goes before the next read); when it holds nothing whole, with
        the reads that end a line of it until they hold something whole (or the body's
        end), joined once a read ends a line (scrubbed again: a key split between reads is
        masked too). An event is relayed whole, or not at all when it reports an error (an
        error event split between reads is left out as one read whole is), and a
        ``[DONE]`` split between reads is told as one read whole; a client's event-stream
        reader waits for an event's end anyway. Nothing whole waits for the upstream's
        next read: a stream no read ends as an event does is relayed an event at a time,
        and a keepalive comment as soon as its line ends."""
        before = self._tail.last[-1:]  # relayed just before it
        if at := whole_end(chunk, before):
            return chunk[:at], chunk[at:]
        parts = [chunk]
        async for more in self._reply:
            parts.append(more)
            if more.find(b"\n") < 0 and more.find(b"\r") < 0:  # no line ended: still inside
                continue
            joined = b"".join(parts)
            if at := whole_end(joined, before):
                return self._scrubbed(joined[:at]), joined[at:]
            parts = [joined]
        return self._scrubbed(b"".join(parts)), b""

    def _closed_read(self, exc: aiohttp.ClientError | OSError) -> UpstreamError:
        """A read that failed because the gateway closed the relay (:meth:`aclose`): not
        the server's failure, logged at debug only."""
        log.debug("a read of model server %s's closed relay failed: %r", self._backend, exc)
        return UpstreamError(
            f"The relay of model server '{self._backend}' was closed by the gateway."
        )

    async def _first(self) -> bytes:
        """The body's first chunk (empty: there is none), within ``first_token_timeout``
        of the headers. Read apart from the rest, which is then not slowed by a deadline."""
        within = self._first_token_timeout
        assert within is not None
        waiting = Deadline(max(self._headers_at + within - asyncio.get_running_loop().time(), 0))
        try:
            with waiting:
                return await anext(self._reply, b"")
        except TimeoutError as exc:
            if waiting.expired:
                raise no_output(self._backend, within) from exc
            raise

    def _scrubbed(self, chunk: bytes) -> bytes:
        return chunk if self._scrub is None else _scrubbed(self._scrub, chunk)

    def usage(self) -> Usage | None:
        return self._tail.usage()

    def output_estimate(self) -> int:
        return self._tail.events if self._streams else self._reply.received // 4

    def failure(self) -> GatewayError | None:
        """As a translated request's (:func:`~.upstream_status.classify_reply`), from the
        status and the error body's last two chunks, kept anyway (an error's body is
        rarely more): a server's error named only in its body, llama-server's 500
        refusing an image, counts as it does for a translated request. Read once, when
        the relay ends."""
        if self.status < 400:
            return None
        retry = self.headers.get("retry-after")
        asked = {"Retry-After": retry} if retry else None
        body = self._tail.previous + self._tail.last
        return classify_reply(self.status, body, self._backend, self._scrub or str, asked)

    async def aclose(self) -> None:
        self._closed = True
        self._response.close()  # a no-op once released
        release, self._release = self._release, None
        if release is not None:
            release()


def _scrubbed(scrub: KeyScrubber, chunk: bytes) -> bytes:
    text = chunk.decode("latin-1")
    cleaned = scrub(text)
    return chunk if cleaned is text else cleaned.encode("latin-1")
