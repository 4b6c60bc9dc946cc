"""The composition root: the only place that wires concrete classes together.

A new backend API shape is one entry in ``BACKEND_APIS``; a new surface is one more
``build_*`` call here.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from starlette.applications import Starlette

from stateway import __version__
from stateway.backend_config import BackendConfig
from stateway.backends.admission import WaitingRoom
from stateway.backends.anthropic import AnthropicBackend
from stateway.backends.anthropic_request import AnthropicOptions
from stateway.backends.openai_chat import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient, UpstreamTarget
from stateway.config import (
    Config,
    ConfigError,
    Overrides,
    admin_key,
    backend_api_key,
    load_config,
)
from stateway.coordination.factory import build_coordination, build_fanout, build_limits
from stateway.core.accounting import UsageLedger
from stateway.core.conversations.ports import ConversationStore
from stateway.core.coordination import CancelSignals, CommandResults, EventFanout
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.generations import Generation
from stateway.core.leases import LeaseKeeper
from stateway.core.limits import RateLimits
from stateway.core.loop import Loop
from stateway.core.ownership import ProcessIdentity, fail_abandoned
from stateway.core.ports import Backend, ChatForwarder, OwnerLeases, ResponseStore, Sealer
from stateway.core.routing import BackendEntry, Candidate, Capabilities, Route, Router
from stateway.core.routing.health import HealthPolicy
from stateway.core.routing.probe import HealthProber
from stateway.core.runs import CancelReason, RunRegistry
from stateway.core.stages.chain import StageChain
from stateway.core.tools.ports import McpServer
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy, Toolset
from stateway.identity.key_cache import KeyCache
from stateway.identity.keys import KeyStore
from stateway.identity.oidc import OidcVerifier
from stateway.mcp_client import LazyMcpClient
from stateway.protocols.responses.encode import encode_event_json
from stateway.reload import Compiled, Reloader, keep_started, restart_required
from stateway.route_config import RouteConfig
from stateway.sealing import AesGcmSealer, load_sealing_key
from stateway.search import build_search_provider
from stateway.stage_loader import load_chain
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, open_store
from stateway.storage.sql.accounting import SqlUsageLedger
from stateway.storage.sql.api_keys import SqlKeyStore
from stateway.storage.sql.leases import SqlOwnerLeases
from stateway.storage.sql.secrets import SqlSecrets
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.admin import AdminRoutes, require_admin
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.chat import ChatRoutes
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.metrics import MetricsRoutes
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from stateway.surfaces.http.transport import KEEPALIVE_INTERVAL
from stateway.surfaces.http.usage import UsageRoutes
from stateway.surfaces.mcp.mount import McpMount
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.storage import TimedStore
from stateway.telemetry.tracing import open_tracing

TESTING_KEEPALIVE_ENV = "STATEWAY_TESTING_SSE_KEEPALIVE"
"""Testing only, not a setting: seconds between SSE keep-alive comments (default 15), so
end-to-end tests need not wait 15 s to see one."""

BACKEND_APIS: dict[str, Callable[[UpstreamClient, BackendConfig], Backend]] = {
    "chat": lambda client, config: OpenAIChatBackend(
        client, config.max_tokens_field, config.guided_decoding
    ),
    "responses": lambda client, config: OpenAIResponsesBackend(client),
    "anthropic": lambda client, config: AnthropicBackend(
        client, AnthropicOptions(config.default_max_tokens, config.thinking)
    ),
}


@dataclass(slots=True)
class GatewayParts:
    store: ResponseStore
    runs: RunRegistry
    gateway: Gateway
    owner: ProcessIdentity
    config: Config
    """As started with (the start-up tables stay so until a restart)."""
    reloader: Reloader
    results: CommandResults | None = None
    """Outcomes of command ids (in process, or Redis)."""
    signals: CancelSignals | None = None
    """Cancels between processes (Redis only)."""
    fanout: EventFanout | None = None
    """Background runs' events between processes (Redis only)."""
    leases: LeaseKeeper | None = None
    """This process's lease on its runs, and the judge of the others' (SQL stores)."""
    limits: RateLimits | None = None
    """``[rate_limits]``, when any is set."""
    telemetry: Observability = field(default_factory=lambda: Observability(PrometheusMetrics()))
    """Metrics (``/metrics``), and traces when ``[tracing] enabled``."""
    keys: KeyStore | None = None
    """The API keys (the database's), when the gateway runs over a database."""
    websockets: WebSocketResponses | None = None
    """WebSocket mode's sessions, set by :func:`build_app` (drained at shutdown)."""

    async def end_runs(self) -> None:
        """End every run as ``server_shutting_down``; later ones end as they start."""
        await self.runs.end_all(CancelReason.SHUTTING_DOWN)

    async def settle_runs(self) -> None:
        """Return once no run is in flight (background runs included)."""
        await self.runs.settle()


def build_backend(config: BackendConfig, waiting_room: WaitingRoom) -> Backend:
    """One backend; ``waiting_room`` is the process-wide queue all backends share."""
    target = UpstreamTarget(
        name=config.name,
        base_url=config.url,
        api_key=backend_api_key(config),
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        max_connections=config.max_connections,
        total_timeout=config.total_timeout,
        first_byte_timeout=config.effective_first_byte_timeout,
        max_response_bytes=config.max_response_bytes,
        pool_idle_timeout=config.pool_idle_timeout,
        pool_timeout=config.pool_timeout,
        **_wire_headers(config),
    )
    return BACKEND_APIS[config.api](UpstreamClient(target, waiting_room), config)


def _wire_headers(config: BackendConfig) -> dict[str, Any]:
    """How the upstream's API shape wants its key, and the headers it needs."""
    if config.api == "anthropic":
        return {
            "key_header": "x-api-key",
            "headers": (("anthropic-version", config.anthropic_version),),
        }
    return {}


def build_tools(config: Config, environ: Mapping[str, str] | None = None) -> GatewayTools:
    """The gateway's own tools: its MCP client and configured servers, its web search
    provider, and their limits. Raises :class:`ConfigError` for a missing secret."""
    try:
        search = build_search_provider(config.web_search, environ)
        servers = {
            label: ConfiguredServer(
                McpServer(
                    label,
                    server.url,
                    tuple(sorted(server.resolved_headers(label, environ).items())),
                    server.transport,
                ),
                frozenset(server.allowed_tools) if server.allowed_tools is not None else None,
                require_approval=server.require_approval == "always",
                description=server.description,
            )
            for label, server in config.mcp_servers.items()
        }
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    policy = ToolPolicy(
        timeout=config.tools.timeout,
        max_concurrent_calls=config.tools.max_concurrent_calls,
        max_mcp_servers=config.tools.max_mcp_servers,
        max_discovered_tools=config.tools.max_discovered_tools,
    )
    return GatewayTools(
        mcp=LazyMcpClient(session_ttl=config.mcp.session_ttl),
        search=search,
        servers=servers,
        url_allowed=config.mcp.allows,
        policy=policy,
    )


def backend_gateway_tools(config: BackendConfig, tools: GatewayTools) -> Toolset | None:
    """The backend's ``gateway_tools`` resolved against the gateway's tools (configured
    MCP servers, the search provider); None when it has none. Raises
    :class:`ConfigError` naming the backend and the tool the gateway cannot run."""
    if not config.gateway_tools:
        return None
    try:
        return tools.resolve(config.gateway_tools, trusted=True)
    except InvalidRequest as exc:
        raise ConfigError(
            f"backend '{config.name}': gateway_tools: {exc.param}: {exc.message}"
        ) from None


def build_router(config: Config, waiting_room: WaitingRoom, tools: GatewayTools) -> Router:
    """Every backend once, the routes over them, the aliases and the default route."""
    backends = {b.name: build_backend(b, waiting_room) for b in config.backends}
    offered = {b.name: backend_gateway_tools(b, tools) for b in config.backends}
    catch_alls = {b.name for b in config.catch_all_backends}
    global_stages = load_chain(config)
    entries = [
        BackendEntry(
            backends[b.name],
            b.model_map,
            catch_all=b.name in catch_alls,
            gateway_tools=offered[b.name],
            stages=global_stages or None,
            capabilities=Capabilities(context_window=b.context_window),
        )
        for b in config.backends
    ]
    windows = {b.name: b.context_window for b in config.backends}
    routes = [
        build_route(
            r, backends, offered, load_chain(config, r.stages, f"route '{r.name}'"), windows
        )
        for r in config.routes
    ]
    default = next(
        (route for route, r in zip(routes, config.routes, strict=True) if r.default), None
    )
    health = HealthPolicy(
        config.health.failure_threshold, config.health.cooldown, config.health.jitter
    )
    return Router(entries, routes=routes, aliases=config.aliases, default=default, health=health)


def build_route(
    config: RouteConfig,
    backends: Mapping[str, Backend],
    offered: Mapping[str, Toolset | None],
    stages: StageChain,
    windows: Mapping[str, int | None] | None = None,
) -> Route:
    """``windows``: each backend's ``context_window``, the default of its candidates'."""
    candidates = tuple(
        Candidate(
            backends[c.backend],
            c.model,
            weight=c.weight,
            priority=c.priority,
            capabilities=_capabilities(c.capabilities.model_dump(), (windows or {}).get(c.backend)),
        )
        for c in config.candidates
    )
    gateway_tools = offered[config.candidates[0].backend]  # the same for every candidate
    # Forwarded untouched only where nothing needs negotiating: one candidate, able to
    # do everything, without gateway tools.
    first = candidates[0]
    forwarder: ChatForwarder | None = None
    plain = len(candidates) == 1 and first.capabilities == Capabilities() and not stages
    if plain and gateway_tools is None and isinstance(first.backend, ChatForwarder):
        forwarder = first.backend
    return Route(
        config.name,
        candidates,
        gateway_tools,
        forwarder,
        affinity=config.affinity == "chain",
        affinity_tolerance=config.affinity_tolerance,
        max_attempts=config.max_attempts,
        stages=stages or None,
    )


def compile_generation(flags: Overrides, started: Compiled | None = None) -> Compiled:
    """The configuration (the file ``flags`` name, the environment, the flags) compiled
    into a generation, unpublished: what start-up, ``stateway check-config`` and every
    reload run. ``started``: the process's first generation, when reloading (its start-up
    tables stay; :mod:`stateway.reload`). Raises :class:`ConfigError`."""
    config = load_config(flags)
    changed: tuple[str, ...] = ()
    if started is not None:
        changed = restart_required(started.config, config)
        config = keep_started(started.config, config)
    admin_key(config)  # reload_endpoint without its credential is refused
    waiting_room = (
        started.waiting_room if started else WaitingRoom(config.server.max_queued_requests)
    )
    tools = build_tools(config)
    router = build_router(config, waiting_room, tools)
    prober = None
    if config.health.active_probe:
        prober = HealthProber(router, config.health.probe_interval)
    return Compiled(config, router, tools, waiting_room, prober, changed)


def _capabilities(declared: dict[str, Any], window: int | None) -> Capabilities:
    if declared.get("context_window") is None:
        declared = {**declared, "context_window": window}
    return Capabilities(**declared)


async def open_gateway(compiled: Compiled, flags: Overrides) -> GatewayParts:
    """The gateway as ``stateway serve`` runs it: over the configured database, with its
    sealing key loaded once (configured, else the database's, generated on first start;
    ``[security]`` is read at start-up only)."""
    store = open_store(compiled.config.database_url)
    try:
        sealer = await open_sealer(compiled.config, store)
    except BaseException:
        await store.aclose()
        raise
    parts = build_gateway(
        compiled,
        flags,
        store,
        SqlConversationStore(store),
        sealer=sealer,
        leases=SqlOwnerLeases(store.engine),
        usage=SqlUsageLedger(store.reader),
    )
    parts.keys = SqlKeyStore(store.engine)
    return parts


async def open_sealer(config: Config, store: SqlResponseStore) -> AesGcmSealer:
    """The sealer of ``encrypted_content``. Raises :class:`ConfigError` for a stored key
    that is unusable, ``StorageError`` when the database cannot be read."""
    try:
        key = await load_sealing_key(config.security.sealing_key, SqlSecrets(store.engine))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return AesGcmSealer(key)


def build_gateway(
    compiled: Compiled,
    flags: Overrides,
    store: ResponseStore | None = None,
    conversations: ConversationStore | None = None,
    *,
    sealer: Sealer | None = None,
    leases: OwnerLeases | None = None,
    usage: UsageLedger | None = None,
) -> GatewayParts:
    """``compiled`` as generation 1, reloaded from ``flags``; over the configured
    database, or over ``store`` (and ``conversations``: none, and no conversation exists;
    ``leases``: none, and no run is judged by its lease; ``usage``: none, and
    ``/v1/usage`` is a 404) when given. ``sealer`` None: sealing is off (``open_gateway``
    always gives one)."""
    config = compiled.config
    if store is None:
        sql_store = open_store(config.database_url)
        store, conversations = sql_store, SqlConversationStore(sql_store)
        leases = SqlOwnerLeases(sql_store.engine)
        usage = SqlUsageLedger(sql_store.reader)
    runs = RunRegistry()
    owner = ProcessIdentity.current()
    telemetry = Observability(PrometheusMetrics(), open_tracing(config.tracing, __version__))
    telemetry.metrics.sample(lambda: len(runs), lambda: compiled.waiting_room.waiting)
    served: ResponseStore = TimedStore(store, telemetry.metrics.storage_observed)

    def loop(generation: Compiled) -> Loop:
        return Loop(
            served,
            generation.config.loop.max_rounds,
            owner,
            generation.tools,
            sealer,
            telemetry=telemetry,
        )

    results, signals = build_coordination(config.coordination)
    fanout = build_fanout(config.coordination)
    limits = build_limits(config)
    keeper = None
    if leases is not None:
        timeout = config.coordination.lease_timeout
        keeper = LeaseKeeper(store, leases, str(owner), encode_event_json, timeout, fanout=fanout)
    gateway = Gateway(
        served,
        compiled.router,
        loop(compiled),
        runs,
        conversations=conversations,
        encoder=encode_event_json,
        results=results,
        signals=signals,
        sealer=sealer,
        fanout=fanout,
        limits=limits,
        telemetry=telemetry,
        usage=usage,
    )

    def publish(generation: Compiled) -> Generation:
        return gateway.generations.publish(generation.router, loop(generation))

    recompile = partial(compile_generation, flags, compiled)
    reloader = Reloader(compiled, recompile, publish, gateway.generations)
    gateway.reloads = reloader
    return GatewayParts(
        store,
        runs,
        gateway,
        owner,
        config,
        reloader,
        results,
        signals,
        fanout,
        keeper,
        limits,
        telemetry,
    )


def build_app(parts: GatewayParts) -> Starlette:
    """The HTTP app. Its start-up marks the responses a dead process left in progress
    (before any request is served); its shutdown ends the runs still in flight, then
    closes every config generation."""
    mcp = McpMount(parts.gateway, __version__)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await fail_abandoned(parts.store, parts.owner, encode_event_json)
        if parts.leases is not None:
            await parts.leases.start()
        parts.reloader.start()
        if parts.signals is not None:
            await parts.signals.start(parts.gateway.cancel_signalled)
        try:
            yield
        finally:
            await mcp.aclose()
            await parts.reloader.aclose()
            await parts.end_runs()
            if parts.leases is not None:
                await parts.leases.aclose()
            if parts.results is not None:
                await parts.results.aclose()
            if parts.signals is not None:
                await parts.signals.aclose()
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
    server = config.server
    keepalive = float(os.environ.get(TESTING_KEEPALIVE_ENV, KEEPALIVE_INTERVAL))
    parts.websockets = WebSocketResponses(
        parts.gateway,
        config.websocket,
        config.websocket.frame_limit(server.max_body_bytes),
        max_input_items=server.max_input_items,
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
    oidc = None if auth.oidc is None else OidcVerifier(auth.oidc.settings)
    return Authenticator(keys=cache, oidc=oidc, admin_key=admin_credential)
