"""Compiling a configuration into a generation: the backends, the routes over them, and
the gateway's own tools (what start-up, ``stateway check-config`` and every reload build).
A new backend API shape is one entry in ``BACKEND_APIS``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stateway.backend_config import BackendConfig
from stateway.backends.admission import WaitingRoom
from stateway.backends.anthropic import AnthropicBackend
from stateway.backends.anthropic_request import AnthropicOptions
from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.openai_chat import ChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.config import (
    Config,
    ConfigError,
    Overrides,
    admin_key,
    backend_api_key,
    load_config,
)
from stateway.core.backend import Backend, ChatForwarder, WindowAdvertiser
from stateway.core.errors import InvalidRequest
from stateway.core.hops import VIA_HEADER, Hop
from stateway.core.routing import BackendEntry, Candidate, Capabilities, Route, Router
from stateway.core.routing.health import HealthPolicy
from stateway.core.routing.probe import HealthProber
from stateway.core.routing.windows import LearnedWindows, ServerWindows, WindowDiscovery
from stateway.core.stages.chain import StageChain
from stateway.core.tools.ports import McpServer
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy, Toolset
from stateway.mcp_client import LazyMcpClient
from stateway.reload import Compiled, keep_started, restart_required
from stateway.route_config import RouteConfig
from stateway.search import build_search_provider
from stateway.stage_loader import load_chain

BACKEND_APIS: dict[str, Callable[[UpstreamClient, BackendConfig], Backend]] = {
    "chat": lambda client, config: (ChatBackend if config.think_tags else OpenAIChatBackend)(
        client,
        config.max_tokens_field,
        config.guided_decoding,
        alternate_roles=config.alternate_roles,
        reasoning_efforts=tuple(config.reasoning_efforts or ()),
        reasoning_fields=tuple(config.reasoning_fields),
        tool_call_content=config.tool_call_content,
        cache_salted=config.cache_salt is not None,
        think_tags=config.think_tags,
        thinking_switch=config.thinking_switch,
    ),
    "responses": lambda client, config: OpenAIResponsesBackend(
        client,
        cache_salted=config.cache_salt is not None,
        min_output_tokens=config.least_output_tokens(),
    ),
    "anthropic": lambda client, config: AnthropicBackend(
        client,
        AnthropicOptions(
            config.default_max_tokens,
            config.thinking,
            config.prompt_cache_mode,
            safeguards=config.runs_safeguards(),
            sampling=config.sent_sampling(),
        ),
    ),
}


def build_backend(
    config: BackendConfig, waiting_room: WaitingRoom, hop: Hop | None = None
) -> Backend:
    """One backend; ``waiting_room`` is the process-wide queue all backends share, ``hop``
    the process's ``Via`` entry its requests carry (:mod:`stateway.core.hops`)."""
    target = UpstreamTarget(
        name=config.name,
        base_url=config.url,
        api_key=backend_api_key(config),
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        max_connections=config.max_connections,
        total_timeout=config.total_timeout,
        first_byte_timeout=config.effective_first_byte_timeout,
        first_token_timeout=config.first_token_timeout,
        max_response_bytes=config.max_response_bytes,
        pool_idle_timeout=config.pool_idle_timeout,
        pool_timeout=config.pool_timeout,
        extra_body=config.extra_body,
        **_wire_headers(config, hop),
    )
    return BACKEND_APIS[config.api](UpstreamClient(target, waiting_room), config)


def _wire_headers(config: BackendConfig, hop: Hop | None) -> dict[str, Any]:
    """How the upstream's API shape wants its key, and the headers it needs (then the
    configured ``headers``, after the process's ``Via``)."""
    via = () if hop is None else ((VIA_HEADER, hop.via),)
    configured = (*via, *config.headers.items())
    if config.api == "anthropic":
        return {
            "key_header": "x-api-key",
            "headers": (("anthropic-version", config.anthropic_version), *configured),
        }
    return {"headers": configured}


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
        max_output_bytes=config.tools.max_output_bytes,
    )
    return GatewayTools(
        mcp=LazyMcpClient(
            session_ttl=config.mcp.session_ttl,
            max_sessions=config.mcp.max_sessions,
            max_output_bytes=config.tools.max_output_bytes,
        ),
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


def build_router(
    config: Config,
    waiting_room: WaitingRoom,
    tools: GatewayTools,
    windows: LearnedWindows | None = None,
    hop: Hop | None = None,
) -> Router:
    """Every backend once, the routes over them, the aliases and the default route;
    ``windows``: what model servers advertised, read by the candidates whose window is
    not configured (None: none is learned); ``hop``: the ``Via`` entry the backends send."""
    backends = {b.name: build_backend(b, waiting_room, hop) for b in config.backends}
    learned = {b.name: _learned(b, windows) for b in config.backends}
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
            learned=learned[b.name],
        )
        for b in config.backends
    ]
    configured = {b.name: b.context_window for b in config.backends}
    routes = [
        build_route(
            r,
            backends,
            offered,
            load_chain(config, r.stages, f"route '{r.name}'"),
            configured,
            learned,
        )
        for r in config.routes
    ]
    default = next(
        (route for route, r in zip(routes, config.routes, strict=True) if r.default), None
    )
    settings = config.health
    health = HealthPolicy(
        settings.failure_threshold, settings.cooldown, settings.jitter, settings.max_retry_after
    )
    upstreams = {b.name: b for b in config.backends}
    return Router(
        entries,
        routes=routes,
        aliases=config.aliases,
        default=default,
        health=health,
        upstreams=upstreams,
    )


def build_route(
    config: RouteConfig,
    backends: Mapping[str, Backend],
    offered: Mapping[str, Toolset | None],
    stages: StageChain,
    windows: Mapping[str, int | None] | None = None,
    learned: Mapping[str, ServerWindows | None] | None = None,
) -> Route:
    """``windows``: each backend's ``context_window``, the default of its candidates';
    ``learned``: what each backend's model server advertised, for a candidate with
    neither."""
    candidates = tuple(
        Candidate(
            backends[c.backend],
            c.model,
            weight=c.weight,
            priority=c.priority,
            capabilities=_capabilities(c.capabilities.model_dump(), (windows or {}).get(c.backend)),
            learned=(learned or {}).get(c.backend),
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
    config = load_config(flags, reloading=started is not None)
    changed: tuple[str, ...] = ()
    if started is not None:
        changed = restart_required(started.config, config)
        config = keep_started(started.config, config)
    admin_key(config)  # reload_endpoint without its credential is refused
    waiting_room = (
        started.waiting_room if started else WaitingRoom(config.server.max_queued_requests)
    )
    tools = build_tools(config)
    windows = started.windows if started else LearnedWindows()
    hop = started.hop if started else Hop()
    router = build_router(config, waiting_room, tools, windows, hop)
    prober = None
    if config.health.active_probe:
        prober = HealthProber(router, config.health.probe_interval)
    discovery = window_discovery(config, router, windows)
    return Compiled(
        config,
        router,
        tools,
        waiting_room,
        prober,
        changed,
        windows=windows,
        discovery=discovery,
        hop=hop,
    )


def window_discovery(
    config: Config, router: Router, windows: LearnedWindows
) -> WindowDiscovery | None:
    """The asking of each model server whose windows ``router``'s candidates read (through
    one of its backends), retried at most ``[health] probe_interval`` apart; None when
    none reads any."""
    configured = {b.name: b for b in config.backends}
    servers: dict[str, tuple[WindowAdvertiser, ServerWindows]] = {}
    for backend in router.backends:
        b = configured[backend.name]
        record = _learned(b, windows)
        if record is not None and isinstance(backend, WindowAdvertiser):
            leader, _ = servers.setdefault(b.url, (backend, record))
            if isinstance(backend, AnthropicBackend):  # one listing read for the server's
                backend.follow(leader)
    if not servers:
        return None
    return WindowDiscovery(list(servers.values()), config.health.probe_interval)


def _learned(config: BackendConfig, windows: LearnedWindows | None) -> ServerWindows | None:
    """The record of what the backend's server advertises, when its window is to be
    learned (discovered, and not configured)."""
    if windows is None or not config.discover_context_window or config.context_window:
        return None
    return windows.server(config.url)


def _capabilities(declared: dict[str, Any], window: int | None) -> Capabilities:
    if declared.get("context_window") is None:
        declared = {**declared, "context_window": window}
    return Capabilities(**declared)
