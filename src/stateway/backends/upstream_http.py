"""The HTTP leg to a model server: one pooled aiohttp session per backend
(:mod:`stateway.backends.upstream_sessions`), called as its
:class:`~stateway.backends.upstream_target.UpstreamTarget` says, and the single boundary
where transport and HTTP failures become :mod:`stateway.core.errors`.

One call (:meth:`UpstreamClient.post`) runs in this order:

1. wait for a connection slot (:mod:`stateway.backends.admission`: the gateway's own queue,
   bounded by ``pool_timeout`` and ``[server] max_queued_requests``);
2. send on a pooled keep-alive connection. If that connection was *reused* and failed
   before any response arrived (the upstream closed it while it sat idle), send once more
   on a fresh connection: nothing was answered, so repeating is safe, and the other pooled
   connections may be just as stale;
3. wait for the response headers at most ``first_byte_timeout``. A redirect is not
   followed (it would send the conversation, and the backend's headers, where nobody
   configured): it is an upstream error;
4. hand the caller an :class:`UpstreamReply`, which reads the body within ``read_timeout``
   of silence and ``total_timeout`` for the whole call, and at most ``max_response_bytes``;
   with ``first_token_timeout``, its first output within that of the headers (an inference
   call's :class:`~stateway.core.deadline.FirstOutput`, met by the round that reads it; a
   relay's first body chunk). Until that output an attempt may fail over, so the wait
   for it is bounded apart from ``read_timeout``, which a server that sends its headers
   at once and then queues the request (vLLM with its KV cache full) keeps resetting or
   never reaches.

Errors are classified by status and structured code only. Messages passed on to clients
are the upstream's own, shortened, with the gateway's upstream credential scrubbed
(:mod:`stateway.redaction`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import aiohttp
import orjson

from stateway.backends.admission import WaitingRoom
from stateway.backends.upstream_relay import UpstreamRelay
from stateway.backends.upstream_reply import UpstreamReply, cut_short, no_output
from stateway.backends.upstream_sessions import UpstreamSessions, reused
from stateway.backends.upstream_status import classify_reply, classify_reported, reports_error
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.deadline import Deadline, FirstOutput
from stateway.core.errors import (
    GatewayError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from stateway.redaction import KeyScrubber

log = logging.getLogger(__name__)

_MAX_ERROR_BODY = 16 * 1024
DEFAULT_QUEUE = 1024
"""Waiting places of a client built without a shared :class:`WaitingRoom` (tests)."""


class UpstreamClient:
    def __init__(self, target: UpstreamTarget, waiting_room: WaitingRoom | None = None) -> None:
        self.target = target
        self.scrub = KeyScrubber(target.api_key)
        """Masks the upstream key in any upstream text; backends use it for mid-stream errors."""
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

    def full(self, pending: int = 0) -> bool:
        """Whether a call now would be refused at once (:meth:`ConnectionSlots.full`)."""
        return self._slots.full(pending)

    @property
    def root_url(self) -> str:
        """The server's root: ``base_url`` without its ``/v1`` (where vLLM and llama.cpp
        serve ``/tokenize``)."""
        base = self.target.base_url
        return base.removesuffix("/v1")

    @asynccontextmanager
    async def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        root: bool = False,
        headers: Mapping[str, str] | None = None,
        first_output: FirstOutput | None = None,
    ) -> AsyncIterator[UpstreamReply]:
        """POST ``body`` to ``path`` under ``base_url`` (or, with ``root``, under
        :attr:`root_url`), with ``headers`` besides the backend's own; yield the reply of a
        2xx response, or raise the classified error. Failures while the caller reads the
        reply are classified too. ``first_output``: the wait the caller ends at the reply's
        first output, bounded from the headers on by ``first_token_timeout`` if set."""
        data = orjson.dumps(body)
        url = (self.root_url if root else self.target.base_url) + path
        async with self._slots.hold():
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.target.total_timeout
            with self._failures():
                response = await self._send(url, data, deadline, headers)
                try:
                    if response.status >= 300:
                        raise await self._error(response)
                    reply = UpstreamReply(
                        response, self.target.name, self.target.max_response_bytes
                    )
                    within = self.target.first_token_timeout
                    if first_output is None or within is None:
                        yield reply
                    else:
                        waiting = first_output.within(within)
                        try:
                            with waiting:
                                yield reply
                        except TimeoutError as exc:
                            if waiting.expired:
                                raise no_output(self.target.name, within) from exc
                            raise
                except BaseException:
                    response.close()  # an unfinished body is not left on a pooled connection
                    raise
                response.release()

    async def relay(self, path: str, data: bytes) -> UpstreamRelay:
        """POST ``data`` as it is; the answer, whatever its status, to be relayed as bytes
        (:mod:`stateway.backends.upstream_relay`). It holds a connection slot until closed."""
        slots = self._slots
        await slots.acquire()
        try:
            deadline = asyncio.get_running_loop().time() + self.target.total_timeout
            with self._failures():
                response = await self._send(self.target.base_url + path, data, deadline)
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
            scrub=self.scrub if self.target.api_key else None,
            failures=self._failures,
            first_token_timeout=self.target.first_token_timeout,
        )

    async def _send(
        self, url: str, data: bytes, deadline: float, headers: Mapping[str, str] | None = None
    ) -> aiohttp.ClientResponse:
        """Send on a pooled connection; once more on a fresh one if a reused one was stale."""
        sessions = self._sessions
        try:
            return await self._attempt(sessions.pooled(), url, data, deadline, headers)
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
            if not reused():
                raise
            log.info(
                "model server %s closed a pooled connection (%s); retrying on a fresh one",
                self.target.name,
                type(exc).__name__,
            )
        return await self._attempt(sessions.fresh(), url, data, deadline, headers)

    async def _attempt(
        self,
        session: aiohttp.ClientSession,
        url: str,
        data: bytes,
        deadline: float,
        headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """One request, up to its response headers."""
        loop = asyncio.get_running_loop()
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError
        timeout = aiohttp.ClientTimeout(
            total=remaining, connect=self.target.connect_timeout, sock_read=None
        )
        first_byte = Deadline(min(self._first_byte_timeout, remaining))
        try:
            with first_byte:
                response = await session.post(
                    url, data=data, timeout=timeout, headers=headers, allow_redirects=False
                )
        except TimeoutError as exc:
            if first_byte.expired and self._first_byte_timeout < remaining:
                raise UpstreamTimeout(
                    f"The model server '{self.target.name}' did not start answering within "
                    f"{self._first_byte_timeout:g} s (first_byte_timeout)."
                ) from exc
            raise
        # From the headers on, silence between two reads is bounded by read_timeout.
        protocol = response.connection.protocol if response.connection is not None else None
        if protocol is not None:
            protocol.read_timeout = self.target.read_timeout
            protocol.start_timeout()
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

    @contextmanager
    def _failures(self, listing: float | None = None, asked: str = "/models") -> Iterator[None]:
        """Transport failures inside the block, as the core's upstream errors; ``listing``:
        the block is a ``GET`` of ``asked`` with that whole-call deadline of its own."""
        name = self.target.name
        try:
            yield
        except GatewayError:
            raise
        except aiohttp.ConnectionTimeoutError as exc:
            raise UpstreamTimeout(
                f"The model server '{name}' did not accept a connection within "
                f"{self.target.connect_timeout:g} s."
            ) from exc
        except aiohttp.SocketTimeoutError as exc:
            raise UpstreamTimeout(
                f"The model server '{name}' sent nothing for {self.target.read_timeout:g} s "
                "(read_timeout)."
            ) from exc
        except TimeoutError as exc:  # aiohttp's whole-call deadline
            if listing is not None:
                what = "list its models" if asked == "/models" else f"answer GET {asked}"
                raise UpstreamTimeout(
                    f"The model server '{name}' did not {what} within {listing:g} s."
                ) from exc
            raise UpstreamTimeout(
                f"The model server '{name}' did not finish within "
                f"{self.target.total_timeout:g} s (total_timeout)."
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise UpstreamUnavailable(f"The model server '{name}' is unreachable.") from exc
        except aiohttp.ClientPayloadError as exc:  # the body ended before it was complete
            raise cut_short(name) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise broken_connection(name, exc) from exc

    async def aclose(self) -> None:
        await self._sessions.aclose()

    async def _error(self, response: aiohttp.ClientResponse) -> GatewayError:
        reply = UpstreamReply(response, self.target.name, self.target.max_response_bytes)
        raw = await reply.prefix(_MAX_ERROR_BODY)
        return classify_reply(response.status, raw, self.target.name, self.scrub, response.headers)


def broken_connection(name: str, exc: aiohttp.ClientError | OSError) -> UpstreamError:
    """A connection failure told in words, not in the client library's class names; one
    the words do not cover is logged with its detail."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamError(f"The model server '{name}' closed the connection.")
    if isinstance(exc, OSError) and exc.errno == errno.ECONNRESET:
        return UpstreamError(f"The model server '{name}' reset the connection.")
    if isinstance(exc, aiohttp.ClientResponseError):  # its status line or headers unparsed
        return UpstreamError(f"The model server '{name}' sent an answer that is not HTTP.")
    log.warning("the connection to model server %s failed: %r", name, exc)
    return UpstreamError(f"The connection to model server '{name}' failed.")
