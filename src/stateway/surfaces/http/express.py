"""Routes served ahead of Starlette's router and exception middleware: the hot ones
(the ``POST`` creates of Responses, Messages and Chat Completions, and WebSocket mode's
upgrade of ``GET /v1/responses``, whose every frame would otherwise pass through
Starlette's exception wrapper).

A ``POST`` to an express route's path goes from the request observer (:mod:`.observed`)
through the same Host check and authentication as every other request (instances of
their own) straight to the route's plain ASGI app: no walk over the route table, no
exception middleware, no ``Request``. A request each of them passes at once (its Host
served, its identity known without reading a credential: no auth configured) is asked
so by a call each (:class:`Passing`) and goes to the route's app itself, not through
them as two more coroutines that each suspension of the request would resume; any other
goes through them (which answer a refusal, or look a credential up). The app answers
its own errors (in its protocol's shape) up to the start of its answer; an exception it
lets out after that closes the connection, as it would anywhere. Another method on the
path goes through Starlette, whose route of the same path answers it (405), and the
observer names the request by that route's path either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send


@runtime_checkable
class Passing(Protocol):
    """A middleware that tells, by a call, a request it would pass untouched."""

    def passes(self, scope: Scope) -> bool:
        """Whether the request passes untouched, this middleware's part done (nothing
        answered, nothing awaited); else only calling the middleware serves it."""
        ...


@dataclass(frozen=True, slots=True)
class ExpressRoute:
    route: Route | WebSocketRoute
    """Starlette's route of the same path: it serves the other methods, and names the
    request for the observer (``scope["route"]``)."""
    app: ASGIApp
    """The route's app, wrapped in the application's middleware."""
    checks: tuple[Callable[[Scope], bool], ...] | None = None
    """Each middleware's :meth:`Passing.passes`, outermost first: a request all of them
    pass goes to the route's own app; None when a middleware cannot tell."""


def express_route(route: Route | WebSocketRoute, middleware: Iterable[Middleware]) -> ExpressRoute:
    """``route``'s own ASGI app behind ``middleware`` (outermost first)."""
    app = route.app
    checks: list[Callable[[Scope], bool]] | None = []
    for cls, args, kwargs in reversed(list(middleware)):
        app = cls(app, *args, **kwargs)
        if checks is not None:
            checks = [app.passes, *checks] if isinstance(app, Passing) else None
    return ExpressRoute(route, app, None if checks is None else tuple(checks))


class PlainApp:
    """A bound method taking ``(scope, receive, send)`` as a plain ASGI app for a
    Starlette ``Route`` (which takes any function or method for a request -> response
    endpoint)."""

    __slots__ = ("_app",)

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


ExpressKey = tuple[str, str]
"""``("http", path)`` for a POST route, ``("websocket", path)`` for an upgrade."""


class Express:
    """Pure ASGI: POSTs to an express route's path and upgrades of an express WebSocket
    route go to its app, all else to ``app``."""

    __slots__ = ("_app", "_routes")

    def __init__(self, app: ASGIApp, routes: Mapping[ExpressKey, ExpressRoute]) -> None:
        self._app = app
        self._routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if (kind == "http" and scope["method"] == "POST") or kind == "websocket":
            express = self._routes.get((kind, scope["path"]))
            if express is not None:
                scope["route"] = express.route
                app = express.app
                checks = express.checks
                if checks is not None:
                    for passes in checks:
                        if not passes(scope):
                            break
                    else:  # each middleware passes it: straight to the route's own app
                        app = express.route.app
                await app(scope, receive, send)
                return
        await self._app(scope, receive, send)
