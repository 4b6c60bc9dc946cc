"""The HTTP app over a gateway: every surface's routes (Responses, Conversations,
Messages, Chat Completions, WebSocket mode, MCP, admin, metrics, usage), authentication,
and the lifespan that starts and stops the gateway's parts."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from starlette.applications import Starlette

from stateway import __version__
from stateway.app.gateway import GatewayParts
from stateway.config import (
    Config,
    ConfigError,
    admin_key,
)
from stateway.identity.key_cache import KeyCache
from stateway.identity.keys import KeyStore
from stateway.surfaces.auth.authenticator import RECHECK_INTERVAL, Authenticator
from stateway.surfaces.http.admin import AdminRoutes, require_admin
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.metrics import MetricsRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.sse import KEEPALIVE_INTERVAL
from stateway.surfaces.http.usage import UsageRoutes
from stateway.surfaces.mcp.limits import MAX_TENANT_SESSIONS, McpLimits
from stateway.surfaces.mcp.mount import McpMount
from stateway.surfaces.websocket.endpoint import MAX_TENANT_CONNECTIONS, WebSocketResponses

TESTING_KEEPALIVE_ENV = "STATEWAY_TESTING_SSE_KEEPALIVE"
"""Testing only, not a setting: seconds between SSE keep-alive comments (default 15), so
end-to-end tests need not wait 15 s to see one."""


TESTING_RECHECK_ENV = "STATEWAY_TESTING_KEY_RECHECK"
"""Testing only, not a setting: seconds between checks of a streaming request's API key
(default 5), so end-to-end tests need not wait 5 s for a revoked key's stream to end."""

TESTING_JWKS_COOLDOWN_ENV = "STATEWAY_TESTING_JWKS_COOLDOWN"
"""Testing only, not a setting: seconds between the JWKS refetches an unknown ``kid``
triggers, below the least ``[auth.oidc] jwks_refetch_cooldown`` a configuration may set,
so end-to-end tests see a rotated key, or a provider back, without waiting that out."""


def build_app(parts: GatewayParts) -> Starlette:
    """The HTTP app. Its start-up marks the responses a dead process left in progress
    (before any request is served: :meth:`GatewayParts.recover`, unless done); its
    shutdown ends the runs still in flight, then closes every config generation. A
    start-up failing closes what it had started, as the shutdown does."""
    server = parts.config.server
    tenant_sessions = MAX_TENANT_SESSIONS if parts.config.auth.configured else None
    limits = McpLimits(
        server.max_body_bytes,
        server.request_body_timeout,
        tenant_sessions,
        max_input_items=server.max_input_items,
    )
    origins = frozenset(server.cors_origins)
    mcp = McpMount(parts.gateway, __version__, limits, origins)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:  # a step failing closes what the others started: each part's aclose is safe
            await parts.recover()  # on a part never started (and on one closed already)
            if parts.retention is not None:
                parts.retention.start()
            parts.reloader.start()
            if parts.signals is not None:
                await parts.signals.start(parts.gateway.cancel_signalled)
            if parts.fanout is not None:
                await parts.fanout.start(parts.gateway.position_asked)
            yield
        finally:
            await mcp.aclose()
            await parts.reloader.aclose()
            if parts.retention is not None:
                await parts.retention.aclose()
            await parts.end_runs()
            if parts.settler is not None:
                await parts.settler.aclose()
            if parts.leases is not None:
                await parts.leases.aclose()
            if parts.results is not None:
                await parts.results.aclose()
            if parts.gateway.deletes is not None:  # its re-sends publish through signals
                await parts.gateway.deletes.aclose()
            if parts.signals is not None:
                await parts.signals.aclose()
            await parts.gateway.signalled.aclose()
            if parts.fanout is not None:
                await parts.fanout.aclose()
            if parts.limits is not None:
                await parts.limits.aclose()
            await parts.gateway.generations.aclose()
            await parts.store.aclose()
            parts.telemetry.shutdown()

    config = parts.config
    key = admin_key(config)
    admin = None if key is None else AdminRoutes(parts.gateway, config.admin.reload_endpoint)
    telemetry = parts.telemetry
    authenticator = build_authenticator(config, parts.keys, key)
    keepalive = float(os.environ.get(TESTING_KEEPALIVE_ENV, KEEPALIVE_INTERVAL))
    parts.websockets = WebSocketResponses(
        parts.gateway,
        config.websocket,
        config.websocket.frame_limit(server.max_body_bytes),
        max_input_items=server.max_input_items,
        tenant_connections=MAX_TENANT_CONNECTIONS if config.auth.configured else None,
        origins=origins,
    )
    return build_http_app(
        ResponsesRoutes(
            parts.gateway,
            server.max_body_bytes,
            body_timeout=server.request_body_timeout,
            keepalive=keepalive,
            max_input_items=server.max_input_items,
        ),
        ServiceRoutes(parts.gateway),
        lifespan=lifespan,
        allowed_hosts=server.effective_allowed_hosts,
        conversations=ConversationsRoutes(
            parts.gateway, server.max_body_bytes, body_timeout=server.request_body_timeout
        ),
        messages=MessagesRoutes(
            parts.gateway,
            server.max_body_bytes,
            body_timeout=server.request_body_timeout,
            keepalive=keepalive,
            max_input_items=server.max_input_items,
        ),
        chat=ChatRoutes(
            parts.gateway,
            server.max_body_bytes,
            body_timeout=server.request_body_timeout,
            keepalive=keepalive,
            max_input_items=server.max_input_items,
        ),
        mcp=mcp,
        admin=admin,
        observer=telemetry,
        metrics=MetricsRoutes(
            telemetry.metrics.exposition, require_admin if authenticator.required else None
        ),
        usage=UsageRoutes(parts.gateway),
        authenticator=authenticator,
        websocket=parts.websockets,
        hop=parts.hop,
        cors_origins=origins,
    )


def build_authenticator(
    config: Config, keys: KeyStore | None, admin_credential: str | None = None
) -> Authenticator:
    """Who may call (``[auth]``): API keys through a cache over ``keys``, OIDC tokens
    through a verifier of the issuer's; ``admin_credential`` opens the admin routes."""
    auth = config.auth
    cache = None
    if auth.api_keys:
        if keys is None:
            raise ConfigError("[auth] api_keys = true needs the gateway's database")
        cache = KeyCache(keys, auth.key_cache_ttl)
    oidc = None
    if auth.oidc is not None:
        from stateway.identity.oidc import OidcVerifier  # PyJWT: only where OIDC is on

        settings = auth.oidc.settings
        cooldown = os.environ.get(TESTING_JWKS_COOLDOWN_ENV)
        if cooldown is not None:
            settings = replace(settings, refetch_cooldown=float(cooldown))
        oidc = OidcVerifier(settings)
    recheck_every = float(os.environ.get(TESTING_RECHECK_ENV, RECHECK_INTERVAL))
    return Authenticator(
        keys=cache, oidc=oidc, admin_key=admin_credential, recheck_every=recheck_every
    )
