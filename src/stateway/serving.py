"""Serving an ASGI app with uvicorn on a socket we bind, announcing its URL once it
accepts connections.

The gateway, the fake upstream and the benchmark's pass-through hop all start this way:
binding the socket ourselves lets ``--port 0`` pick a free port, and the one announcement
line on stdout (``... listening on URL``) is what :mod:`stateway.launch` waits for.

Shutting down (SIGTERM, SIGINT) with a :class:`Drain`: the server stops accepting at once,
lets requests in flight (and the work of ``Drain.settled``: background runs) finish for
``Drain.timeout`` seconds, then calls ``Drain.end`` so that the application answers what
remains itself (the gateway ends its runs as ``server_shutting_down``). A second SIGINT
(uvicorn's force quit) calls ``Drain.end`` at once instead. uvicorn's own
graceful timeout, which cancels request tasks (plain-text 500s and tracebacks), must be set
a few seconds longer than the drain, as a last resort only.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import sys
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.types import ASGIApp
from uvicorn.config import LOGGING_CONFIG
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

from stateway.header_guard import (
    DEFAULT_HEADER_LIMITS,
    HeaderLimits,
    RefusedRequests,
    guarded_http,
)
from stateway.send_guard import SendGuarded
from stateway.surfaces.http.unfinished import UNFINISHED_ON_PURPOSE

log = logging.getLogger(__name__)

DRAIN_GRACE = 5
"""Seconds uvicorn waits after the drain window before cancelling request tasks."""
FORCED_GRACE = 2.0
"""Seconds requests get to answer their ending after a forced quit (a second SIGINT)."""


def server_config(
    app: ASGIApp,
    *,
    lifespan: bool,
    graceful_shutdown: int,
    own_logging: bool = False,
    ws_max_size: int = 16 * 1024 * 1024,
    ws_compression: bool = False,
    headers: HeaderLimits = DEFAULT_HEADER_LIMITS,
    keep_alive: int = 5,
    send_timeout: float | None = None,
    refused: RefusedRequests | None = None,
    log_level: int = logging.WARNING,
) -> uvicorn.Config:
    """uvicorn as our servers run it: httptools (and uvloop when the caller's loop is one),
    WebSocket upgrades handed to the app (which may deny them with an HTTP response), no
    access log, its records from ``log_level`` up (warnings, unless given); with
    ``own_logging`` uvicorn installs no handlers of its own, so its records go through the
    root logger's (JSON lines). A WebSocket message
    larger than ``ws_max_size`` closes its connection (1009); the app answers smaller
    ones past its own limit with an error frame. ``ws_compression``: accept
    permessage-deflate (``[websocket] compression``). A request's header block is bounded
    by ``headers`` (:mod:`stateway.header_guard`); a connection idle between requests is
    closed after ``keep_alive`` seconds (uvicorn's default, 5 s, unless given); given
    ``send_timeout``, one whose client took none of the output waiting for it for that
    long is dropped, upgraded or not (:mod:`stateway.send_guard`). No ``Server`` header
    is sent. ``refused`` counts the
    answers written before any app runs (a 431, a 400: the app's observer sees none). An answer
    left unfinished on purpose (:mod:`stateway.surfaces.http.unfinished`) is not logged
    as the app's error."""
    logging.getLogger("uvicorn.error").addFilter(UNFINISHED_ON_PURPOSE)  # once: the same
    return uvicorn.Config(
        app,
        http=guarded_http(headers, send_timeout, refused),
        ws=DenyingWebSocketProtocol,
        ws_max_size=ws_max_size,
        ws_per_message_deflate=ws_compression,
        lifespan="on" if lifespan else "off",
        access_log=False,
        server_header=False,  # names no server software; one header less on every answer
        log_level=log_level,
        timeout_graceful_shutdown=graceful_shutdown,
        timeout_keep_alive=keep_alive,
        log_config=None if own_logging else LOGGING_CONFIG,
    )


class DenyingWebSocketProtocol(SendGuarded, WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, with two changes (and its sends guarded:
    :class:`SendGuarded`, the server's sweep dropping a client that stopped reading).

    - It marks the handshake done once the app has denied it with an HTTP response (the
      ASGI ``websocket.http.response`` extension), so a denied upgrade is not logged as
      "ASGI callable returned without completing handshake" (Kludex/uvicorn#3138, open as
      of uvicorn 0.54).
    - Text frames sent while the transport is writable are framed at once but written
      together, once per turn of the event loop: a run's events are many small frames,
      and one write of them all saves a system call each (the SSE stream writes a batch
      at once too). Order is kept (anything else sent first writes what waits), and so
      is backpressure: once the transport pauses, a send waits as uvicorn's does.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._held: list[bytes] = []
        self._flush: asyncio.Handle | None = None

    async def send(self, message: Any) -> None:  # uvicorn's event union is private
        if (
            message["type"] == "websocket.send"
            and message.get("text") is not None
            and self.handshake_complete
            and self.initial_response is None
            and not (self.close_sent or self.disconnected)
            and self.writable.is_set()
        ):
            try:
                self.conn.send_text(message["text"].encode())
            except InvalidState:
                raise ClientDisconnected() from None
            self._held.extend(self.conn.data_to_send())
            if self._flush is None:
                self._flush = self.loop.call_soon(self._write_held)
            return
        self._write_held()
        if message["type"] == "websocket.close" and self.handshake_complete:
            # A close is never held back by a client that stopped reading (a full
            # transport): it is queued behind what the client has not read (4429).
            self.writable.set()
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body"):
            self.handshake_complete = True

    def _write_held(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        if self._held:
            data = b"".join(self._held)
            self._held.clear()
            if not self.transport.is_closing():
                self.transport.write(data)


@dataclass(frozen=True, slots=True)
class Drain:
    timeout: float
    """Seconds requests in flight may take to finish once shutdown begins."""
    end: Callable[[], Awaitable[int]]
    """Ends what is still in flight after ``timeout``; returns, once it has ended, how
    many it ended."""
    settled: Callable[[], Awaitable[None]] | None = None
    """Returns once work no request waits for (background runs, the logs kept for a
    resume as their runs ended) is done: it gets the drain window too, after the requests
    in flight."""
    sessions: Callable[[], Awaitable[None]] | None = None
    """Drains the WebSocket sessions (their requests end, then they are closed): first,
    with no new connection accepted, since the server would close them at once (1012)."""
    in_flight: Callable[[], int] | None = None
    """How many runs are in flight (background ones included), for the log line saying
    that shutdown begins."""


class AnnouncingServer(uvicorn.Server):
    """A uvicorn server that prints ``announcement`` once it accepts connections and, given
    a :class:`Drain`, ends what is in flight itself when the drain window is over."""

    def __init__(
        self, config: uvicorn.Config, announcement: str, *, drain: Drain | None = None
    ) -> None:
        super().__init__(config)
        self.announcement = announcement
        self._drain = drain
        self._ended = 0
        """How many :attr:`Drain.end` ended (none while everything finishes in time)."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._drain is None:
            await super().shutdown(sockets=sockets)
            return
        self._log_start(self._drain)
        ender = asyncio.create_task(self._end_after(self._drain))
        try:
            if self._drain.sessions is not None:
                for server in self.servers:
                    server.close()
                await self._drain.sessions()
            await super().shutdown(sockets=sockets)
            if self.force_exit:
                window_over = ender.done()  # what was in flight is ended already
                ender.cancel()
                await self._end_now(self._drain, ending=not window_over)
        finally:
            ender.cancel()
        log.info("shut down: %d ended as server_shutting_down", self._ended)

    def _log_start(self, drain: Drain) -> None:
        in_flight = [_counted(len(self.server_state.tasks), "request")]
        if drain.in_flight is not None:
            in_flight.append(_counted(drain.in_flight(), "run"))
        window = f"{drain.timeout:g}s"
        log.info("shutting down (drain window %s): %s in flight", window, " and ".join(in_flight))

    async def _end_now(self, drain: Drain, *, ending: bool) -> None:
        """A second SIGINT (uvicorn's force quit) skips the rest of the drain window: what
        is in flight is ended at once (``ending``; past the window, it was ended already),
        as at the window's end, and its requests get :data:`FORCED_GRACE` seconds to answer
        it, and the application to shut down, before the loop is stopped under them."""
        log.warning("forced to quit: ending requests still in flight now")
        with suppress(TimeoutError):
            async with asyncio.timeout(FORCED_GRACE):
                if ending:
                    self._ended = await drain.end()
                tasks = set(self.server_state.tasks)
                if tasks:
                    await asyncio.wait(tasks)
                await self.lifespan.shutdown()  # skipped by uvicorn on a forced quit

    async def _wait_tasks_to_complete(self) -> None:
        """uvicorn waits here for the connections in flight, within its graceful timeout
        and before the application's shutdown; work that no connection waits for (the
        gateway's background runs) is waited for here too, so it gets the drain window."""
        await super()._wait_tasks_to_complete()
        if self._drain is not None and self._drain.settled is not None and not self.force_exit:
            await self._drain.settled()

    async def _end_after(self, drain: Drain) -> None:
        await asyncio.sleep(drain.timeout)  # a timer: the drain window itself
        log.warning("drain window of %gs is over: ending requests still in flight", drain.timeout)
        self._ended = await drain.end()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            sys.stdout.write(self.announcement + "\n")
            sys.stdout.flush()


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


class ListenFailed(Exception):
    """The socket could not be bound: what failed, and what to do (:func:`listen_failure`)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 for an ephemeral one). Made for TCP
    (``IPPROTO_TCP``, not the default 0), as its accepted connections then are: asyncio
    sets ``TCP_NODELAY`` only on those, and without it an answer written in two parts
    (uvicorn's headers, then its body) waits for the client's delayed ACK (~40 ms).
    Raises :class:`ListenFailed` when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenFailed(listen_failure(host, port, exc)) from None
    except BaseException:
        sock.close()
        raise
    return sock


_ANY_ADDRESS = "127.0.0.1 for this machine only, 0.0.0.0 for all its addresses"


def listen_failure(host: str, port: int, exc: OSError) -> str:
    """Why ``host:port`` could not be bound, with what to do about the usual causes."""
    said = f"cannot listen on {host}:{port}: {exc.strerror}"
    if isinstance(exc, socket.gaierror):
        hint = f"{host} is not a name this machine resolves: give an address ({_ANY_ADDRESS})"
    elif exc.errno == errno.EADDRINUSE:
        hint = "another process listens there: stop it, or choose another port; 0 picks a free one"
    elif exc.errno == errno.EADDRNOTAVAIL:
        hint = f"{host} is not an address of this machine: give one of its own ({_ANY_ADDRESS})"
    elif exc.errno == errno.EACCES and 0 < port < 1024:
        hint = (
            "a port below 1024 needs root or CAP_NET_BIND_SERVICE: choose one of 1024 or "
            "above, such as 8080"
        )
    else:
        return said
    return f"{said} ({hint})"


def socket_url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
