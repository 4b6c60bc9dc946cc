"""The Starlette application of the HTTP surface: routes and the error boundary.

Errors leave in the OpenAI shape ``{"error": {message, type, param, code}}``; an
unknown route is a 404 in it (or in Anthropic's, :func:`.messages.error_response_for`),
telling a base URL without ``/v1``, or with it twice, when its path shows one,
a path with a trailing slash included, as hosted: never Starlette's 307 to the path
without it, which would have a client send its body again to a path it never named. An
unexpected exception is logged and answered with a generic 500, never a stack trace. A
client that left before its answer began (while its body was read, or while the answer
was worked out) is answered nothing and logged nowhere: the observer counts it as 499.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, WebSocketRoute, request_response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from stateway.core.errors import GatewayError, InvalidRequest, NotFound
from stateway.core.hops import Hop
from stateway.surfaces.asgi.hosts import HostGuard
from stateway.surfaces.asgi.loops import LoopGuard
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.admin import AdminRoutes
from stateway.surfaces.http.authentication import Authentication
from stateway.surfaces.http.chat import ChatRoutes, stored_completions
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.errors import error_answer
from stateway.surfaces.http.express import PlainApp, express_route
from stateway.surfaces.http.messages import (
    MESSAGES_PATH,
    MODELS_PATH,
    MessagesRoutes,
    error_response_for,
)
from stateway.surfaces.http.metrics import MetricsRoutes
from stateway.surfaces.http.observed import ObservedStarlette, RequestObserver
from stateway.surfaces.http.responses import ResponsesRoutes, refuse_websocket
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.usage import UsageRoutes

Lifespan = Callable[[Starlette], AbstractAsyncContextManager[None]]


CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"

POST_ONLY = ("/v1/responses/compact", "/v1/responses/input_tokens")
"""Routes beside ``/v1/responses/{response_id}`` that take POST only: another method is
405 (never read as a response id), and paths below them are unknown routes."""


STORED_COMPLETIONS = (
    Route(CHAT_PATH, stored_completions, methods=["GET"]),
    Route(CHAT_PATH + "/{completion_id}", stored_completions, methods=["GET", "POST", "DELETE"]),
    Route(CHAT_PATH + "/{completion_id}/messages", stored_completions, methods=["GET"]),
)
"""Hosted's stored-completion routes: each a 404 saying none is stored."""


def build_http_app(
    responses: ResponsesRoutes,
    service: ServiceRoutes,
    lifespan: Lifespan | None = None,
    allowed_hosts: frozenset[str] | None = None,
    conversations: ConversationsRoutes | None = None,
    messages: MessagesRoutes | None = None,
    chat: ChatRoutes | None = None,
    mcp: ASGIApp | None = None,
    admin: AdminRoutes | None = None,
    *,
    observer: RequestObserver | None = None,
    metrics: MetricsRoutes | None = None,
    usage: UsageRoutes | None = None,
    authenticator: Authenticator | None = None,
    websocket: ASGIApp | None = None,
    hop: Hop | None = None,
    cors_origins: frozenset[str] = frozenset(),
) -> Starlette:
    """``allowed_hosts``: the ``Host`` names served (None: any), see
    :mod:`stateway.surfaces.asgi.hosts`; ``conversations``: the Conversations API's
    routes, ``messages`` the Anthropic Messages
    routes, ``chat`` the Chat Completions route, ``mcp`` the MCP surface (``/mcp``, every
    method; ``/mcp/`` too, which MCP clients are often given), ``admin`` the admin routes,
    ``metrics`` ``GET /metrics``, ``usage`` ``GET /v1/usage``, when served; ``observer`` is told
    of every request (which then gets an ``x-request-id``: :mod:`.observed`). Every request is
    identified by ``authenticator`` (default: no auth configured, no admin credential) before it
    is routed (:mod:`.authentication`). ``websocket`` serves ``GET /v1/responses`` upgraded
    (WebSocket mode); without it an upgrade is refused (426). ``hop``: this process's
    ``Via`` entry on what it sends upstream; a request carrying it is refused as a loop
    (:mod:`stateway.surfaces.asgi.loops`) before anything else. ``cors_origins``: the web
    pages' origins whose scripts may call (:mod:`.cors`; none: no CORS headers)."""
    chat_route = None if chat is None else Route(CHAT_PATH, chat, methods=["POST"])
    create_route = Route(RESPONSES_PATH, PlainApp(responses.create), methods=["POST"])
    upgrade_route = WebSocketRoute(RESPONSES_PATH, websocket or refuse_websocket)
    messages_route = None
    messages_routes: list[BaseRoute] = []
    if messages is not None:
        messages_route = Route(MESSAGES_PATH, PlainApp(messages.create), methods=["POST"])
        count_tokens = Route(
            MESSAGES_PATH + "/count_tokens", messages.count_tokens, methods=["POST"]
        )
        messages_routes = [messages_route, count_tokens]
    unbuilt = _Unbuilt()
    reserved = [Route(name + "/{_:path}", unbuilt) for name in POST_ONLY]
    routes: list[BaseRoute] = [
        *reserved,
        Route("/v1/responses/compact", _PostOnly(responses.compact)),
        Route("/v1/responses/input_tokens", _PostOnly(responses.input_tokens)),
        create_route,
        upgrade_route,
        Route("/v1/responses/{response_id}", responses.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", responses.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", responses.input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", responses.cancel, methods=["POST"]),
        *([] if conversations is None else conversation_routes(conversations)),
        *messages_routes,
        *([] if chat_route is None else [chat_route, *STORED_COMPLETIONS]),
        *([] if mcp is None else [Route("/mcp", mcp), Route("/mcp/", mcp)]),
        Route(MODELS_PATH, service.models, methods=["GET"]),
        Route(MODELS_PATH + "/{model_id:path}", service.model, methods=["GET"]),
        Route("/health", service.health, methods=["GET"]),
        Route("/ready", service.ready, methods=["GET"]),
        *([] if admin is None else admin.routes()),
        *([] if metrics is None else [Route("/metrics", metrics.metrics, methods=["GET"])]),
        *([] if usage is None else [Route("/v1/usage", usage.usage, methods=["GET"])]),
    ]
    handlers: dict[Any, Any] = {
        ClientDisconnect: _client_gone,
        GatewayError: _gateway_error,
        HTTPException: _http_error,
        Exception: _unexpected,
    }
    loop = [] if hop is None else [Middleware(LoopGuard, hop=hop)]
    guard = [] if allowed_hosts is None else [Middleware(HostGuard, allowed=allowed_hosts)]
    authentication = Middleware(Authentication, authenticator=authenticator or Authenticator())
    middleware = [*loop, *guard, authentication]
    app = ObservedStarlette(
        routes=routes,
        middleware=middleware,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False
    app.router.default = _no_route
    app.observer = observer
    app.cors_origins = cors_origins
    # The hot routes: the three creates (Chat Completions' fast path is one hop), and
    # WebSocket mode, each of whose frames would pass Starlette's exception wrapper.
    express = {("http", RESPONSES_PATH): express_route(create_route, middleware)}
    if chat_route is not None:
        express["http", CHAT_PATH] = express_route(chat_route, middleware)
    if messages_route is not None:
        express["http", MESSAGES_PATH] = express_route(messages_route, middleware)
    if websocket is not None:
        express["websocket", RESPONSES_PATH] = express_route(upgrade_route, middleware)
    app.express = express
    return app


def conversation_routes(routes: ConversationsRoutes) -> list[BaseRoute]:
    conversation = "/v1/conversations/{conversation_id}"
    item = conversation + "/items/{item_id}"
    return [
        Route("/v1/conversations", routes.create, methods=["POST"]),
        Route(conversation, routes.retrieve, methods=["GET"]),
        Route(conversation, routes.update, methods=["POST"]),
        Route(conversation, routes.delete, methods=["DELETE"]),
        Route(conversation + "/items", routes.add_items, methods=["POST"]),
        Route(conversation + "/items", routes.list_items, methods=["GET"]),
        Route(item, routes.retrieve_item, methods=["GET"]),
        Route(item, routes.delete_item, methods=["DELETE"]),
    ]


class _Unbuilt:
    """A plain ASGI app, so its route takes every method, answering as no route would."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise HTTPException(404)


class _PostOnly:
    """A POST endpoint as a plain ASGI app, so its route takes every method and answers
    another one with 405 itself (else ``/v1/responses/{response_id}`` would take it)."""

    def __init__(self, endpoint: Callable[[Request], Awaitable[Response]]) -> None:
        self._app = request_response(endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            raise _method_not_allowed(scope["method"], scope["path"], ["POST"])
        await self._app(scope, receive, send)


async def _no_route(scope: Scope, receive: Receive, send: Send) -> None:
    """No route takes it: a 404 in the OpenAI shape (:func:`_http_error`), an upgrade's
    too where the server can answer one over HTTP (Starlette's bare 403 would read as a
    refused credential); else the upgrade is closed, as Starlette closes it."""
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get(
        "extensions", {}
    ):
        await WebSocketClose()(scope, receive, send)
        return
    raise HTTPException(404)


async def _client_gone(request: Request, exc: Exception) -> None:
    """Nobody to answer: no answer (Starlette sends none for None), nothing logged."""


async def _gateway_error(request: Request, exc: Exception) -> Response:
    return error_answer(request.scope, exc, error_response_for(request.scope))


async def _http_error(request: Request, exc: Exception) -> Response:
    """``request``: a WebSocket for an upgrade of an unknown path (its 404), as a GET."""
    assert isinstance(exc, HTTPException)
    respond = error_response_for(request.scope)
    if exc.status_code == 404:
        method = request.scope.get("method", "GET")
        path = request.url.path
        return respond(NotFound(f"Unknown route: {method} {path}.{_base_url_hint(path)}"))
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        return respond(_method_not_allowed(request.method, request.url.path, allowed))
    error = InvalidRequest(str(exc.detail), status=exc.status_code, code="invalid_request")
    return respond(error)


_UNDER_V1 = frozenset({"responses", "chat", "messages", "models", "conversations", "usage"})
"""The first segments of the routes served under ``/v1``."""


def _base_url_hint(path: str) -> str:
    """What an unknown path tells of a client's base URL: one without ``/v1`` (the openai
    SDK's, which adds none), or one with it where the client adds its own (the
    anthropic SDK's, Claude Code's); else nothing."""
    if path.startswith("/v1/v1/"):
        return (
            " The path holds /v1 twice: a client that adds /v1 itself (the anthropic SDK, "
            "Claude Code) takes the gateway's root as its base URL: http://HOST:PORT."
        )
    if path.split("/")[1] in _UNDER_V1:
        return (
            f" Did you mean /v1{path}? A client that adds no /v1 itself (the openai SDK) "
            "takes the gateway's URL with /v1 as its base URL: http://HOST:PORT/v1."
        )
    return ""


def _method_not_allowed(method: str, path: str, allowed: list[str]) -> InvalidRequest:
    return InvalidRequest(
        f"Method {method} is not allowed on {path}.",
        code="method_not_allowed",
        status=405,
        headers={"Allow": ", ".join(allowed)},
    )


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this path (Starlette names only the first)."""
    allowed: list[str] = []
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            allowed += [m for m in route.methods or () if m not in allowed]
    return allowed


async def _unexpected(request: Request, exc: Exception) -> Response:
    return error_answer(request.scope, exc, error_response_for(request.scope))
