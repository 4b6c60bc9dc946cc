"""Every answer's ``x-request-id``, and what each request tells its observer.

:class:`ObservedApp` wraps the whole application, outside Starlette's error middleware,
so the 500 answering an unexpected exception is observed like any other answer. For
each HTTP request and WebSocket session it:

- makes a request id (``req_`` and 32 hex digits from the system's random source), sets
  it as :data:`~stateway.core.telemetry.REQUEST_ID` for everything the request runs
  (log lines, the runs it starts) and adds it as ``x-request-id`` to the response's
  headers (every answer: JSON, SSE, errors, a WebSocket's accept or refusal). An
  ``x-request-id`` the client sent is ignored: the id must be unique per request, and
  nothing a client sends is reflected into a header;
- opens the request's span (when tracing is on), the parent of the spans of the runs
  the request starts (itself the child of the span a client's ``traceparent`` names),
  and names it by its route once routed;
- reports the route template (``unmatched`` when no route matched), the status and the
  seconds to the end of the answer (a stream's last byte); an answer never started (the
  client left first) is reported as 499, the status servers log for it;
- counts open WebSocket connections (from the accept to the end of the session).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from os import urandom
from time import perf_counter
from typing import Any, Final, Protocol

from starlette.applications import Starlette
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stateway.core.telemetry import REQUEST_ID
from stateway.surfaces.http.cors import cross_origin
from stateway.surfaces.http.express import Express, ExpressKey, ExpressRoute

HEADER: Final = b"x-request-id"
UNMATCHED: Final = "unmatched"
CLIENT_GONE: Final = 499
"""The status reported for a request whose client left before its answer started."""


class RequestSpan(Protocol):
    def finish(self, route: str, status: int) -> None: ...


class RequestObserver(Protocol):
    def request_span(
        self, method: str, request_id: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> AbstractContextManager[RequestSpan] | None:
        """The span of one request, continuing the trace its ``headers`` name
        (``traceparent``); None when tracing is off (no span is opened, nor a no-op one
        entered and left, nor a header read)."""
        ...

    def request_ended(self, route: str, status: int, seconds: float) -> None: ...

    def websocket_opened(self) -> None: ...

    def websocket_closed(self) -> None: ...


def new_request_id() -> str:
    """``req_`` and 32 hex digits from the system's random source (``secrets.token_hex``'s
    source, read without its three Python calls)."""
    return "req_" + urandom(16).hex()


class ObservedApp:
    __slots__ = ("_app", "_observer")

    def __init__(self, app: ASGIApp, observer: RequestObserver) -> None:
        self._app = app
        self._observer = observer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):  # lifespan
            await self._app(scope, receive, send)
            return
        observer = self._observer
        request_id = new_request_id()
        header = (HEADER, request_id.encode())
        status = CLIENT_GONE
        accepted = False

        async def observed(message: Message) -> None:
            nonlocal status, accepted
            match message["type"]:
                case "http.response.start" | "websocket.http.response.start":
                    status = message["status"]
                    message = _with_header(message, header)
                case "websocket.accept":
                    status, accepted = 101, True
                    message = _with_header(message, header)
                    observer.websocket_opened()
            await send(message)

        token = REQUEST_ID.set(request_id)
        started = perf_counter()
        route: str | None = None
        try:
            method = scope.get("method", "WEBSOCKET")
            span = observer.request_span(method, request_id, scope.get("headers", ()))
            if span is None:  # tracing off
                await self._app(scope, receive, observed)
            else:
                with span as opened:
                    try:
                        await self._app(scope, receive, observed)
                    finally:
                        route = _route(scope)
                        opened.finish(route, status)
        finally:
            REQUEST_ID.reset(token)
            if accepted:
                observer.websocket_closed()
            if route is None:
                route = _route(scope)
            observer.request_ended(route, status, perf_counter() - started)


def _with_header(message: Message, header: tuple[bytes, bytes]) -> Message:
    return {**message, "headers": [*message.get("headers", ()), header]}


def _route(scope: Scope) -> str:
    """The path template of the route that served the request (set by Starlette's router);
    for a request answered before routing (a 401, a 421), the template of the route its
    path matches; ``unmatched`` when none does."""
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    for candidate in getattr(scope.get("app"), "routes", ()):
        match, _ = candidate.matches(scope)
        if match is not Match.NONE and isinstance(getattr(candidate, "path", None), str):
            template: str = candidate.path
            return template
    return UNMATCHED


class ObservedStarlette(Starlette):
    """A Starlette application whose whole middleware stack, error middleware included,
    and its express routes (:mod:`.express`) run inside the CORS middleware, when origins
    are listed, and that inside an :class:`ObservedApp`."""

    observer: RequestObserver | None = None
    express: Mapping[ExpressKey, ExpressRoute] | None = None
    """Paths served ahead of the middleware stack (their own middleware included)."""
    cors_origins: frozenset[str] = frozenset()
    """The web pages' origins answered with CORS headers (:mod:`.cors`), around all the
    rest; none: no CORS middleware."""

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if self.express:
            stack = Express(stack, self.express)
        if self.cors_origins:
            stack = cross_origin(stack, self.cors_origins)
        return stack if self.observer is None else ObservedApp(stack, self.observer)
