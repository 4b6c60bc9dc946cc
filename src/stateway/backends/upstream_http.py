"""The HTTP leg to a model server: one pooled aiohttp session per backend
(:mod:`stateway.backends.upstream_sessions`), called as its
:class:`~stateway.backends.upstream_target.UpstreamTarget` says, and the single boundary
where transport and HTTP failures become :mod:`stateway.core.errors` (a transport failure
as :mod:`stateway.backends.transport_failures` tells it, an error status as
:mod:`stateway.backends.upstream_status` classifies it).

One call (:meth:`UpstreamClient.post`) runs in this order:

1. wait for a connection slot (:mod:`stateway.backends.admission`: the gateway's own queue,
   bounded by ``pool_timeout`` and ``[server] max_queued_requests``), then tell the call's
   :class:`~stateway.core.deadline.FirstOutput` it is seated (a queued background run
   starts working);
2. send on a pooled keep-alive connection. If that connection was *reused* and failed
   before any response arrived (the upstream closed it while it sat idle), send once more
   on a fresh connection: nothing was answered, so repeating is safe, and the other pooled
   connections may be just as stale;
3. wait for the response headers at most ``first_byte_timeout``. A redirect is not
   followed (it would send the conversation, and the backend's headers, where nobody
   configured): it is an upstream error;
4. hand the caller an :class:`UpstreamReply`, which reads the body within ``read_timeout``
   of silence and ``total_timeout`` for the whole call (one loop timer of the client's,
   armed at the headers, ended with the connection: see :func:`_overdue`), and at most
   ``max_response_bytes``;
   with ``first_token_timeout``, its first output within that of the headers (an inference
   call's :class:`~stateway.core.deadline.FirstOutput`, met by the round that reads it; a
   relay's first body chunk). Until that output an attempt may fail over, so the wait
   for it is bounded apart from ``read_timeout``, which a server that sends its headers
   at once and then queues the request (vLLM with its KV cache full) keeps resetting or
   never reaches.

With tracing on, each call sends the W3C trace context of the span it is made under
(:data:`~stateway.core.telemetry.TRACE_HEADERS`: an attempt's, or a relayed request's),
so a model server that traces (vLLM) parents its spans under the gateway's.

Errors are classified by status and structured code only. Messages passed on to clients
are the upstream's own, shortened, with the gateway's upstream credential scrubbed
(:mod:`stateway.redaction`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from stateway.backends.admission import WaitingRoom
from stateway.backends.transport_failures import TransportFailures
from stateway.backends.upstream_relay import UpstreamRelay
from stateway.backends.upstream_reply import UpstreamReply, no_output
from stateway.backends.upstream_sessions import UpstreamSessions, reused
from stateway.backends.upstream_status import classify_reply, classify_reported, reports_error
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.deadline import Deadline, FirstOutput
from stateway.core.errors import GatewayError, UpstreamError, UpstreamTimeout
from stateway.core.telemetry import TRACE_HEADERS
from stateway.redaction import KeyScrubber, header_credentials, url_credentials

log = logging.getLogger(__name__)

_MAX_ERROR_BODY = 16 * 1024
DEFAULT_QUEUE = 1024
"""Waiting places of a client built without a shared :class:`WaitingRoom` (tests)."""


class UpstreamClient:
    def __init__(self, target: UpstreamTarget, waiting_room: WaitingRoom | None = None) -> None:
        self.target = target
        self.scrub = KeyScrubber(
            target.api_key,
            *header_credentials(target.headers),
            *url_credentials(target.base_url),
        )
        """Masks the upstream key, the credentials of the configured headers and of the
        URL's user information, in any upstream text; backends use it for mid-stream
        errors."""
        room = waiting_room or WaitingRoom(DEFAULT_QUEUE)
        # Shared with this backend's client of any other generation (a reload's).
        self._slots = room.slots(
            target.name, target.max_connections, target.pool_timeout, target.base_url
        )
        headers = {"Content-Type": "application/json", **dict(target.headers)}
        if target.api_key and target.key_header.lower() == "authorization":
            headers["Authorization"] = f"Bearer {target.api_key}"
        elif target.api_key:
            headers[target.key_header] = target.api_key
        self._sessions = UpstreamSessions(headers, target.pool_idle_timeout)
        self._first_byte_timeout = (
            target.read_timeout if target.first_byte_timeout is None else target.first_byte_timeout
        )
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=target.connect_timeout, sock_read=None
        )
        """aiohttp's deadlines for every call: only ``connect_timeout`` for a connection.
        The client bounds the rest itself, with timers it keeps anyway: up to the headers
        the first byte's :class:`Deadline`, after them ``read_timeout`` on the socket and
        the body's :func:`_overdue`. aiohttp's own ``total`` would arm a timer, a timer
        context and a callback list of its own a call, and enter that context on every
        wait for the body (~2% of a relayed request's instructions). Made once: a frozen
        attrs object of five fields cost ~8,600 CPU instructions a call."""
        self._call_failures = TransportFailures(target, None, "/models")

    def full(self, pending: int = 0) -> bool:
        """Whether a call now would be refused at once (:meth:`ConnectionSlots.full`)."""
        return self._slots.full(pending)

    @property
    def root_url(self) -> str:
        """The server's root: ``base_url`` without its ``/v1`` (where vLLM and llama.cpp
        serve ``/tokenize``)."""
        base = self.target.base_url
        return base.removesuffix("/v1")

    def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        root: bool = False,
        headers: Mapping[str, str] | None = None,
        first_output: FirstOutput | None = None,
    ) -> UpstreamCall:
        """POST ``body`` to ``path`` under ``base_url`` (or, with ``root``, under
        :attr:`root_url`), with ``headers`` besides the backend's own, as ``async with
        client.post(...) as reply``: the reply of a 2xx response, or the classified error.
        Failures while the caller reads the reply are classified too. ``first_output``: the
        wait the caller ends at the reply's first output, bounded from the headers on by
        ``first_token_timeout`` if set."""
        url = (self.root_url if root else self.target.base_url) + path
        return UpstreamCall(self, url, body, headers, first_output)

    async def relay(self, path: str, data: bytes) -> UpstreamRelay:
        """POST ``data`` as it is; the answer, whatever its status, to be relayed as bytes
        (:mod:`stateway.backends.upstream_relay`). It holds a connection slot until closed."""
        slots = self._slots
        await slots.acquire()
        try:
            with self._failures():
                response = await self._send(self.target.base_url + path, data)
                if 300 <= response.status < 400:  # never relayed: an upstream error
                    try:
                        raise await self._error(response)
                    finally:
                        response.close()
        except BaseException:
            slots.release()
            raise
        return UpstreamRelay(
            response,
            slots.release,
            backend=self.target.name,
            limit=self.target.max_response_bytes,
            scrub=self.scrub if self.scrub.active else None,
            failures=self._failures,
            first_token_timeout=self.target.first_token_timeout,
        )

    async def _send(
        self, url: str, data: bytes, headers: Mapping[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        """Send on a pooled connection, the call's whole ``total_timeout`` from now; once
        more on a fresh one, within what is left of it, if a reused one was stale."""
        sessions = self._sessions
        total = self.target.total_timeout
        started = asyncio.get_running_loop().time()
        trace = TRACE_HEADERS.get()
        if trace is not None:  # tracing on: the span this call is made under
            headers = {**headers, **trace} if headers else trace
        try:
            return await self._attempt(sessions.pooled(), url, data, total, headers)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
            if not reused():
                raise
            log.info(
                "model server %s closed a pooled connection (%s); retrying on a fresh one",
                self.target.name,
                type(exc).__name__,
            )
        remaining = total - (asyncio.get_running_loop().time() - started)
        return await self._attempt(sessions.fresh(), url, data, remaining, headers)

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        url: str,
        data: bytes,
        remaining: float,
        headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """One request, up to its response headers, within ``remaining`` seconds of the
        call's ``total_timeout``; its body, once its headers are in, within what is left
        of them (:func:`_overdue`)."""
        if remaining <= 0:
            raise TimeoutError
        loop = asyncio.get_running_loop()
        until = loop.time() + remaining
        first_byte = Deadline(min(self._first_byte_timeout, remaining))
        try:
            with first_byte:
                response = await session.post(
                    url, data=data, timeout=self._timeout, headers=headers, allow_redirects=False
                )
        except TimeoutError as exc:
            if first_byte.expired and self._first_byte_timeout < remaining:
                raise UpstreamTimeout(
                    f"The model server '{self.target.name}' did not start answering within "
                    f"{self._first_byte_timeout:g} s (first_byte_timeout)."
                ) from exc
            raise
        connection = response.connection
        if connection is not None:  # else the body is in already, whole
            protocol = connection.protocol
            if protocol is not None:  # from here on, read_timeout bounds every silence
                protocol.read_timeout = self.target.read_timeout
                protocol.start_timeout()
            overdue = loop.call_at(until, _overdue, response.content)
            connection.add_callback(overdue.cancel)  # the connection given back or closed
        return response

    async def list_models(self, within: float = 5.0) -> list[str]:
        """The model ids of the upstream's ``GET /models``."""
        ids, _ = await self.model_page(within=within)
        return ids

    async def model_page(
        self, params: Mapping[str, str] | None = None, within: float = 5.0
    ) -> tuple[list[str], dict[str, Any]]:
        """The model ids of one ``GET /models`` (with query ``params``), and the whole
        answer (for a paged listing's ``has_more`` and ``last_id``), within ``within``
        seconds (its own deadline, not an inference call's ``total_timeout``)."""
        body = await self.get_json("/models", params=params, within=within)
        if isinstance(body, dict) and reports_error(body, "data"):  # LM Studio's, unserved
            raise classify_reported(body["error"], self.target.name, self.scrub, mid_stream=False)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(data, list):
            raise UpstreamError(
                f"The model server '{self.target.name}' sent a malformed model list."
            )
        ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return ids, body

    async def get_json(
        self,
        path: str,
        *,
        root: bool = False,
        params: Mapping[str, str] | None = None,
        within: float = 5.0,
    ) -> Any:
        """The JSON body (None when it is not JSON) of ``GET path`` under ``base_url`` (or,
        with ``root``, :attr:`root_url`): a listing of the server's, within ``within``
        seconds and at most 1 MiB, beside the calls' connection slots."""
        timeout = aiohttp.ClientTimeout(total=within)
        url = (self.root_url if root else self.target.base_url) + path
        with self._failures(listing=within, asked=path):
            async with self._sessions.pooled().get(
                url, params=params, timeout=timeout, allow_redirects=False
            ) as response:
                if response.status >= 300:
                    raise await self._error(response)
                raw = await UpstreamReply(response, self.target.name, _MAX_ERROR_BODY * 64).read()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None

    def _failures(self, listing: float | None = None, asked: str = "/models") -> TransportFailures:
        """Transport failures inside the block, as the core's upstream errors; ``listing``:
        the block is a ``GET`` of ``asked`` with that whole-call deadline of its own."""
        if listing is None:
            return self._call_failures
        return TransportFailures(self.target, listing, asked)

    async def aclose(self) -> None:
        await self._sessions.aclose()

    async def _error(self, response: aiohttp.ClientResponse) -> GatewayError:
        reply = UpstreamReply(response, self.target.name, self.target.max_response_bytes)
        raw = await reply.prefix(_MAX_ERROR_BODY)
        return classify_reply(response.status, raw, self.target.name, self.scrub, response.headers)


class UpstreamCall:
    """One :meth:`UpstreamClient.post`, in the order of the module's list. Entered, it
    holds a connection slot, sends, and gives the reply of a 2xx response (or raises the
    classified error). Left, it ends the wait for the first output (one its deadline cut
    short is :func:`no_output`), gives the connection back to the pool (closed when the
    block failed: an unfinished body is not left on a pooled connection), classifies the
    block's failure and gives the slot back.

    A class rather than an ``asynccontextmanager``, whose generator, the event loop's hook
    for it and contextlib's wrapper cost about 16,000 more CPU instructions a call (1% of a
    plain request)."""

    __slots__ = (
        "_body",
        "_client",
        "_first_output",
        "_headers",
        "_response",
        "_url",
        "_waiting",
        "_within",
    )

    def __init__(
        self,
        client: UpstreamClient,
        url: str,
        body: dict[str, Any],
        headers: Mapping[str, str] | None,
        first_output: FirstOutput | None,
    ) -> None:
        self._client = client
        self._url = url
        self._body = body
        self._headers = headers
        self._first_output = first_output
        self._response: aiohttp.ClientResponse | None = None
        self._waiting: Deadline | None = None
        self._within = 0.0

    async def __aenter__(self) -> UpstreamReply:
        client = self._client
        target = client.target
        data = orjson.dumps(self._body)
        slots = client._slots
        await slots.acquire()
        try:
            waiting = self._first_output
            if waiting is not None and waiting.seated is not None:
                waiting.seated()  # past the waiting room: a queued run starts working
            with client._failures():
                response = await client._send(self._url, data, self._headers)
                if response.status >= 300:
                    try:
                        raise await client._error(response)
                    finally:
                        response.close()
        except BaseException:
            slots.release()
            raise
        self._response = response
        within = target.first_token_timeout
        if self._first_output is not None and within is not None:
            self._within = within
            self._waiting = self._first_output.within(within).__enter__()
        return UpstreamReply(response, target.name, target.max_response_bytes)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        client, response = self._client, self._response
        assert response is not None  # entered
        try:
            if exc is None:
                self._end_waiting(None, None, None)
                response.release()
            else:
                response.close()  # an unfinished body is not left on a pooled connection
                self._end_waiting(exc_type, exc, traceback)
                client._failures().raise_from(exc)
        finally:
            client._slots.release()

    def _end_waiting(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """End the wait for the first output; a failure its deadline caused (its own
        cancellation, or a timeout once it expired) is :func:`no_output`."""
        waiting = self._waiting
        if waiting is None:
            return
        try:
            waiting.__exit__(exc_type, exc, traceback)
        except TimeoutError as timeout:  # its cancellation, raised as a timeout
            raise no_output(self._client.target.name, self._within) from timeout
        if waiting.expired and isinstance(exc, TimeoutError):
            raise no_output(self._client.target.name, self._within) from exc


def _overdue(body: aiohttp.StreamReader) -> None:
    """The call's ``total_timeout`` is up while its body is still read: the read waiting
    for it, and any after, fail with ``TimeoutError`` (:class:`TransportFailures` tells
    it as ``total_timeout``), in whatever task reads it (a relay's is the client's
    answer's). The timer is cancelled when the connection is given back or closed, so
    it never reaches the pooled connection's next request."""
    body.set_exception(TimeoutError())
