"""The MCP surface at ``/mcp``: the official ``mcp`` SDK's low-level server behind its
Streamable HTTP session manager, mounted into the HTTP app.

Layers, as the SDK draws them: its transport and dispatcher speak the wire (both protocol
generations: the 2025-11-25 handshake, the 2026-07-28 per-request envelope); the handlers
here turn each request into commands for ``Gateway.execute`` (``tool_calls.py``: the
tools of ``tools.py`` run, their results shaped by ``tool_results.py``) or reads of
resources (``resources.py``), and follow responses for subscriptions (``updates.py``):

- ``resources/subscribe`` (2025-11-25): a task per subscription sends
  ``notifications/resources/updated`` on the session's standalone stream at each change,
  until it is unsubscribed, its response ends, or its session ends (the SDK's connection
  teardown cancels it: a dead session's notifications are dropped without an error);
- ``subscriptions/listen`` (2026-07-28): the SDK's ``ListenHandler`` serves the stream,
  over a bus of its own that tasks following the listed URIs (each once, a bounded number:
  ``listening.py``) publish ``ResourceUpdated`` events to.

Each HTTP request to ``/mcp`` is authenticated by the HTTP surface's middleware; its
principal (``principal_of``) is what the handlers act for, and the SDK binds each session
to the principal that opened it (another principal naming the session gets 404). One
from a web page of another site (its ``Origin`` not the gateway's own, nor one of
``[server] cors_origins``) is refused (403).
A request's body has been read within the bounds of every route's (``mount.py``); a
2025-03-26 batch is served a message at a time (``batches.py``). A request
outlasting its credential's revocation or expiry (a stream) is cut off (``cutoff.py``),
and its session's subscriptions end. A session idle for :data:`SESSION_IDLE_TIMEOUT` (no
request in flight, no stream open) is closed, and at most ``limits.MAX_SESSIONS`` are
open at once (beyond, opening one is refused with 503), and, with auth configured, one
tenant holds at most ``limits.MAX_TENANT_SESSIONS`` of them (``sessions.py``; beyond, 429),
so clients that never end theirs hold little for long, and no tenant holds them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ResourcesCapability,
    ServerCapabilities,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    TextResourceContents,
    ToolsCapability,
    UnsubscribeRequestParams,
)
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from stateway.core.errors import GatewayError, InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.mcp_session_logs import mask_session_ids
from stateway.surfaces.asgi.answers import error_response
from stateway.surfaces.asgi.hosts import cross_site
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.mcp import resources
from stateway.surfaces.mcp.answer_once import answer_once
from stateway.surfaces.mcp.batches import serve_batches
from stateway.surfaces.mcp.cutoff import serve_until_revoked
from stateway.surfaces.mcp.limits import MAX_SESSIONS, McpLimits
from stateway.surfaces.mcp.listening import ListenBus, listened
from stateway.surfaces.mcp.schema import tool_schemas
from stateway.surfaces.mcp.sessions import TenantSessionManager, TenantSessionsFull
from stateway.surfaces.mcp.tool_calls import ToolCalls
from stateway.surfaces.mcp.updates import ResponseUpdates

log = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
_Subscriber = tuple[str, str, str]
"""A session's ``mcp-session-id``, with the tenant and scope of the caller naming it."""
SESSION_IDLE_TIMEOUT: Final = 300.0
"""Seconds an idle MCP session is kept (the SDK's default is 30 minutes)."""


class McpSurface:
    """The ``/mcp`` ASGI app; enter :meth:`running` for as long as it serves."""

    def __init__(
        self,
        gateway: Gateway,
        version: str = "",
        limits: McpLimits | None = None,
        origins: frozenset[str] = frozenset(),
    ) -> None:
        """``origins``: the web pages' origins allowed besides the gateway's own (``"*"``:
        any)."""
        self._gateway = gateway
        self._limits = limits or McpLimits()
        self._origins = origins
        self._tools = ListToolsResult.model_validate(tool_schemas())  # as checked in
        self._input_schemas = {tool.name: tool.input_schema for tool in self._tools.tools}
        """Each tool's input schema, which the SDK checks a 2026-07-28 call's
        ``Mcp-Param-*`` headers against (without it, it would serve ``tools/list`` again
        for every call to find it)."""
        self._subscriptions: dict[_Subscriber, dict[str, asyncio.Task[None]]] = {}
        """Each session's subscriptions (by its ``mcp-session-id`` and the caller the SDK
        bound it to), by URI, until the session ends."""
        self._calls = ToolCalls(gateway, self._limits.max_input_items)
        server = _Server(
            "stateway",
            version=version,
            instructions="A stateful model gateway: create responses and conversations; "
            "read them as the stateway:// resources their results link to (a response's "
            "can be subscribed to).",
            get_tool_input_schema=self._input_schemas.get,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )
        mask_session_ids()  # the SDK's records name sessions
        self._manager = TenantSessionManager(
            app=server,
            tenant_sessions=self._limits.tenant_sessions,
            session_idle_timeout=SESSION_IDLE_TIMEOUT,
            max_sessions=MAX_SESSIONS,
            max_request_body_size=self._limits.max_body_bytes,  # read ahead: __call__
        )
        self._handle = partial(serve_batches, partial(answer_once, self._manager.handle_request))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if cross_site(scope, self._origins):
                raise InvalidRequest(
                    "MCP requests from a web page of another site are refused.",
                    code="origin_not_allowed",
                    status=403,
                )
            principal = principal_of(scope)
        except GatewayError as error:
            await error_response(error)(scope, receive, send)
            return
        # The SDK keeps a session for the user that opened it (it compares these).
        token = AccessToken(
            token="", client_id=principal.tenant_id, scopes=[], subject=principal.scope
        )
        scope["user"] = AuthenticatedUser(token)
        _without_resumption(scope)
        try:
            revoked = await serve_until_revoked(self._handle, scope, receive, send)
        except TenantSessionsFull as full:  # raised as a session would open: nothing sent
            await error_response(full)(scope, receive, send)
            return
        if revoked is not None:
            log.info("mcp: a request's credential stopped holding: %s", revoked.message)
            # Its own session's only: a 2026-07-28 request is served without a session,
            # whatever mcp-session-id it names (another tenant's it learned, say).
            session_id = Headers(scope=scope).get("mcp-session-id", "")
            self._end_subscriptions(_subscriber(session_id, principal))

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self._manager.run():
            try:
                yield
            finally:
                for subscriber in list(self._subscriptions):
                    self._end_subscriptions(subscriber)
                self._calls.cancel()

    async def _list_tools(
        self, ctx: Context, params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        _first_page(params)
        return self._tools

    async def _call_tool(self, ctx: Context, params: CallToolRequestParams) -> CallToolResult:
        return await self._calls.answer(params, _principal(ctx))

    async def _list_resources(
        self, ctx: Context, params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        """Stored responses and conversations are read by URI (see the templates), not
        listed: there is no listing of a tenant's objects to page through."""
        _first_page(params)
        return ListResourcesResult(resources=[])

    async def _list_templates(
        self, ctx: Context, params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        _first_page(params)
        return ListResourceTemplatesResult(resource_templates=resources.TEMPLATES)

    async def _read_resource(
        self, ctx: Context, params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        text = await resources.read(self._gateway, _principal(ctx), params.uri)
        content = TextResourceContents(uri=params.uri, mime_type=resources.MIME_TYPE, text=text)
        return ReadResourceResult(contents=[content])

    async def _subscribe(self, ctx: Context, params: SubscribeRequestParams) -> EmptyResult:
        uri = params.uri
        subscribed = self._session_subscriptions(ctx)
        if uri in subscribed:
            return EmptyResult()
        updates = await self._updates(_principal(ctx), uri)
        if uri in subscribed:  # subscribed meanwhile
            return EmptyResult()
        session = ctx.session

        async def notify() -> None:
            try:
                async for _ in updates.changes():
                    await session.send_resource_updated(uri)
            except (GatewayError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                log.info("mcp: updates of %s stopped: %s", uri, exc)
            finally:
                if subscribed.get(uri) is asyncio.current_task():  # not a later one's
                    del subscribed[uri]

        subscribed[uri] = asyncio.create_task(notify())
        return EmptyResult()

    def _session_subscriptions(self, ctx: Context) -> dict[str, asyncio.Task[None]]:
        """The subscriptions of the request's session; the first one has the session's
        teardown (DELETE, idle, lost) end them all: one callback per session, however
        many subscriptions it makes."""
        subscriber = _subscriber_of(ctx)
        subscribed = self._subscriptions.get(subscriber)
        if subscribed is None:
            subscribed = self._subscriptions[subscriber] = {}
            connection = getattr(ctx.session, "_connection", None)  # the session's own state
            if connection is not None:
                connection.exit_stack.callback(self._end_subscriptions, subscriber)
        return subscribed

    def _end_subscriptions(self, subscriber: _Subscriber) -> None:
        for task in self._subscriptions.pop(subscriber, {}).values():
            task.cancel()

    async def _unsubscribe(self, ctx: Context, params: UnsubscribeRequestParams) -> EmptyResult:
        task = self._subscriptions.get(_subscriber_of(ctx), {}).pop(params.uri, None)
        if task is not None:
            task.cancel()
        return EmptyResult()

    async def _listen(
        self, ctx: Context, params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """One listen stream: the SDK's handler over a bus that this stream's URIs publish
        their updates to (each followed from the moment the stream is acknowledged; each
        once, however often it is named, and a bounded number of them: ``listening.py``)."""
        params = listened(params)
        uris = list(params.notifications.resource_subscriptions or ())
        principal = _principal(ctx)
        followed = [await self._updates(principal, uri) for uri in uris]
        bus = ListenBus()

        async def publish(uri: str, updates: ResponseUpdates) -> None:
            await bus.listening.wait()
            try:
                async for _ in updates.changes():
                    await bus.publish(ResourceUpdated(uri))
            except GatewayError as exc:
                log.info("mcp: updates of %s stopped: %s", uri, exc)

        tasks = [asyncio.create_task(publish(u, f)) for u, f in zip(uris, followed, strict=True)]
        try:
            return await ListenHandler(bus)(ctx, params)
        finally:
            for task in tasks:
                task.cancel()

    async def _updates(self, principal: Principal, uri: str) -> ResponseUpdates:
        resource = resources.resource_of(principal, uri)
        if resource.kind != "responses":
            raise MCPError(INVALID_PARAMS, f"Updates are delivered for responses only: {uri}")
        try:
            return await ResponseUpdates.open(self._gateway, principal, resource.id)
        except GatewayError as exc:
            raise resources.protocol_error(uri, exc) from None


class _Server(Server[Any]):
    """The SDK's server, declaring no list changes: the tools and resource templates are
    fixed (no configuration reload changes them) and ``resources/list`` is empty, so
    there is none to notify (the SDK would declare them at 2026-07-28 for any server
    serving ``subscriptions/listen``)."""

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        resources = capabilities.resources
        subscribe = None if resources is None else resources.subscribe
        return capabilities.model_copy(
            update={
                "tools": ToolsCapability(list_changed=False),
                "resources": ResourcesCapability(subscribe=subscribe, list_changed=False),
            }
        )


def _without_resumption(scope: Scope) -> None:
    """A request's ``Last-Event-ID`` dropped: the surface keeps no events (no event store),
    so a standalone stream asked for again after one (the spec's resumption, which a
    server may ignore) is opened anew. The SDK, given one without a store, answered
    nothing (uvicorn's 500)."""
    scope["headers"] = [
        (name, value) for name, value in scope["headers"] if name != b"last-event-id"
    ]


def _first_page(params: PaginatedRequestParams | None) -> None:
    """Every listing is one page (none answers a ``nextCursor``), so a cursor is one the
    gateway never gave: refused, as the spec's pagination has an invalid cursor. An empty
    one is taken for none (a client's "no cursor yet")."""
    if params is not None and params.cursor:
        raise MCPError(INVALID_PARAMS, "Invalid cursor: every list here is one page.")


def _principal(ctx: Context) -> Principal:
    """Who the request carrying this message acts for."""
    request = ctx.request
    if not isinstance(request, Request):
        raise MCPError(INVALID_PARAMS, "The request carries no identity.")
    return principal_of(request.scope)


def _subscriber(session_id: str, principal: Principal) -> _Subscriber:
    return session_id, principal.tenant_id, principal.scope


def _subscriber_of(ctx: Context) -> _Subscriber:
    """The MCP session a request belongs to (its ``mcp-session-id``), with its caller."""
    request = ctx.request
    session_id = request.headers.get("mcp-session-id", "") if isinstance(request, Request) else ""
    return _subscriber(session_id, _principal(ctx))
