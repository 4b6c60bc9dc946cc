"""The connections one backend's client sends on: a pooled keep-alive session, whose
connector tells the sending task whether the connection it got served a request before,
and a session of fresh connections, each closed after its request, for sending once more
what a stale pooled one lost (when: :mod:`stateway.backends.upstream_http`)."""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from typing import Any

import aiohttp
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import Connection
from aiohttp.tracing import Trace


class UpstreamSessions:
    """A backend's two aiohttp sessions, made when first asked for (and again once
    closed), sending ``headers`` on every request."""

    __slots__ = ("_fresh", "_headers", "_idle_timeout", "_pooled")

    def __init__(self, headers: dict[str, str], idle_timeout: float) -> None:
        self._headers = headers
        self._idle_timeout = idle_timeout
        """How long an idle connection stays pooled (``pool_idle_timeout``)."""
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    def pooled(self) -> aiohttp.ClientSession:
        """The pooled session, the current task's :func:`reused` reset for the request it
        is about to send on it."""
        _REUSED.set(False)
        if self._pooled is None or self._pooled.closed:
            # No connector limit: ConnectionSlots bounds concurrent calls, fairly.
            connector = _PoolConnector(limit=0, keepalive_timeout=self._idle_timeout)
            self._pooled = self._session(connector)
        return self._pooled

    def fresh(self) -> aiohttp.ClientSession:
        """A session whose every request opens a new connection, closed after it."""
        if self._fresh is None or self._fresh.closed:
            self._fresh = self._session(aiohttp.TCPConnector(limit=0, force_close=True))
        return self._fresh

    def _session(self, connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector, headers=self._headers, skip_auto_headers=("User-Agent",)
        )

    async def aclose(self) -> None:
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()


def reused() -> bool:
    """Whether the pooled connection the current task's request went out on (since it
    last asked for :meth:`UpstreamSessions.pooled`) had served a request before."""
    return _REUSED.get()


_REUSED: ContextVar[bool] = ContextVar("stateway_upstream_connection_reused", default=False)
"""Whether the pooled connection the current task's request went out on was used before
(set by :class:`_PoolConnector`, read when the request failed)."""


class _PoolConnector(aiohttp.TCPConnector):
    """The pool's connector: tells the task asking for a connection (:data:`_REUSED`, in
    its context: aiohttp asks from the requesting task itself) whether the one it hands
    out served a request before. Cheaper than aiohttp's request tracing, which runs
    several coroutines per request to report the same."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._used: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(
        self,
        req: ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 - aiohttp's signature
    ) -> Connection:
        connection = await super().connect(req, traces, timeout)
        protocol = connection.protocol
        if protocol in self._used:
            _REUSED.set(True)
        elif protocol is not None:
            self._used.add(protocol)
        return connection
