"""A request's declared tools, resolved: who owns each, and what the gateway needs to run
its own.

The decoder checks shapes; this module checks them against what the gateway is
configured with, before a run starts, so a request naming a tool the gateway cannot run
is a 400 that says what to configure:

- ``mcp``: a ``server_label`` of a configured server (``[mcp_servers.<label>]``), or a
  ``server_url`` whose host is on the allow-list (deny by default: a request must not
  make the gateway reach into its own network). Request ``headers`` (and
  ``authorization``) are used for the run and never stored or echoed; a ``server_url``
  carrying credentials (``user:password@``) is a 400 saying to send them so. The server's
  description (``server_description``, else the configured ``description``) reaches the
  model with each of its tools. What the binding holds (headers checked, tools offered,
  approvals): :mod:`.mcp_binding`.
- ``web_search`` / ``web_search_preview``: needs a configured provider. Without one, a tool
  declared the way Codex declares it (with ``external_web_access``, ``false`` when
  sandboxed, ``true`` when not) is an optional hint: not offered and not echoed, so Codex
  works against a gateway without a provider. A bare ``web_search`` is a 400.
- ``tool_search``: needs nothing configured; kept apart from the client's tools (the
  catalog offers it as a function, and defers ``defer_loading`` tools because of it).
- Tool types the gateway does not model (``image_generation``, ``code_interpreter``, a
  future type, ...) are kept as declared. Once the request is routed,
  :meth:`Toolset.route` sends them untouched to a backend whose upstream speaks Responses
  natively, and the ``shell`` and ``apply_patch`` tools too (any other backend offers
  those as functions); any other backend's model is not offered them (its upstream API
  has no place for them), as the ``web_search`` hint is not, but the response echoes and
  stores them as declared. An ``allowed_tools`` entry naming one allows nothing the model
  is offered; a ``tool_choice`` forcing a call of them alone is no such backend's to
  serve (:class:`~stateway.core.routing.needs.Needs`: ``forced_native``), so a choice
  naming one reaches :meth:`Toolset.native_choice` for a backend sent them only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from stateway.core.backend import Backend
from stateway.core.errors import InvalidRequest, McpServerNotAllowed, NoSearchProvider
from stateway.core.items import Item
from stateway.core.tools import client_hosted
from stateway.core.tools.mcp_binding import (
    McpBinding,
    allowed_tools_of,
    approval_of,
    headers_of,
    server_url_of,
    without_secrets,
)
from stateway.core.tools.ports import McpClient, McpServer, SearchProvider
from stateway.core.tools.tool_types import CLIENT_TYPES, TOOL_SEARCH, WEB_SEARCH_TYPES

MCP: Final = "mcp"


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """Limits of the gateway's own tool calls (``[tools]`` in the config)."""

    timeout: float = 60.0
    max_concurrent_calls: int = 5
    max_mcp_servers: int = 16
    max_discovered_tools: int = 256
    max_output_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ConfiguredServer:
    """An MCP server from the config, which requests reference by its label."""

    server: McpServer
    allowed_tools: frozenset[str] | None = None
    require_approval: bool = False
    description: str | None = None


@dataclass(frozen=True, slots=True)
class WebSearchBinding:
    declared: Item
    allowed_domains: tuple[str, ...] = ()
    blocked_domains: tuple[str, ...] = ()
    max_uses: int | None = None
    """The most searches one response may run (Anthropic's ``max_uses``); None: no cap."""


@dataclass(slots=True)
class Toolset:
    public: list[Item]
    """The tools as the response echoes (and stores) them: hints dropped, secrets removed."""
    client: list[Item]
    """Client-owned tools (``function``, ``custom``, ``namespace``)."""
    mcp: list[McpBinding] = field(default_factory=list)
    web_search: WebSearchBinding | None = None
    native: list[Item] = field(default_factory=list)
    """Tools sent upstream as declared: types the gateway does not model, then (once
    :meth:`route` chose an upstream that speaks Responses natively) the shell and
    apply_patch tools."""
    tool_search: Item | None = None
    """The declared ``tool_search`` tool (client- or gateway-executed)."""
    withheld: frozenset[str] = frozenset()
    """The model-visible names of the client's tools the feature stages withheld: a call
    of one is answered here, never the client's (:mod:`.withheld`)."""

    @property
    def gateway_owned(self) -> bool:
        return bool(self.mcp) or self.web_search is not None

    def joined(self, offered: Toolset) -> Toolset:
        """These tools and the gateway tools of ``offered`` (a route's ``gateway_tools``,
        for a client that cannot declare them): not echoed in ``public``."""
        return Toolset(
            self.public,
            self.client,
            [*self.mcp, *offered.mcp],
            self.web_search or offered.web_search,
            self.native,
            self.tool_search,
            self.withheld,
        )

    def native_choice(self, choice: str | dict[str, Any]) -> dict[str, Any] | None:
        """``choice`` as sent when it names a tool sent as declared (by its type), else
        None (the catalog maps it to model-visible names). An ``allowed_tools`` choice
        keeps only the tools sent as declared whose type it names."""
        if not isinstance(choice, dict) or "name" in choice:
            return None
        if choice.get("type") == "allowed_tools":
            listed = choice.get("tools")
            kinds = (
                {t.get("type") for t in listed if isinstance(t, dict)}
                if isinstance(listed, list)
                else set()
            )
            self.native = [tool for tool in self.native if tool.get("type") in kinds]
            return None
        named = any(tool.get("type") == choice.get("type") for tool in self.native)
        return dict(choice) if named else None

    def route(self, backend: Backend) -> list[Item]:
        """Decide the unmodelled, shell and apply_patch tools against the chosen backend
        (see the module docstring); the tools its model is not offered."""
        if backend.carries_unknown_types:
            hosted = client_hosted.TOOL_TYPES
            moved = [t for t in self.client if t.get("type") in hosted]
            self.client = [t for t in self.client if t.get("type") not in hosted]
            self.native = [*self.native, *moved]
            return []
        unoffered, self.native = self.native, []
        return unoffered


class GatewayTools:
    """The gateway's tool capabilities: its MCP client and servers, its search provider,
    and the limits their calls run under. Built once, in the composition root."""

    def __init__(
        self,
        *,
        mcp: McpClient | None = None,
        search: SearchProvider | None = None,
        servers: Mapping[str, ConfiguredServer] | None = None,
        url_allowed: Callable[[str], bool] = lambda url: False,
        policy: ToolPolicy | None = None,
    ) -> None:
        self.mcp = mcp
        self.search = search
        self._servers = dict(servers or {})
        self._url_allowed = url_allowed
        self.policy = policy or ToolPolicy()

    def mcp_client(self) -> McpClient:
        """The MCP client, which a request's ``mcp`` tools run on (:meth:`resolve` refuses
        them when there is none)."""
        if self.mcp is None:
            raise RuntimeError("no MCP client")
        return self.mcp

    async def aclose(self) -> None:
        """Close the MCP sessions and the search provider's connections."""
        if self.mcp is not None:
            await self.mcp.aclose()
        if self.search is not None:
            await self.search.aclose()

    def resolve(self, tools: list[Item], *, trusted: bool = False) -> Toolset:
        """The declared tools resolved; raises :class:`InvalidRequest` naming the tool.
        ``trusted``: declared by the configuration (``gateway_tools``), not a request, so
        an MCP ``server_url`` needs no allow-list entry."""
        public: list[Item] = []
        client: list[Item] = []
        bindings: list[McpBinding] = []
        web_search: WebSearchBinding | None = None
        native: list[Item] = []
        tool_search: Item | None = None
        for index, tool in enumerate(tools):
            kind = tool.get("type")
            if kind == TOOL_SEARCH:
                tool_search = tool
                public.append(tool)
            elif kind == MCP:
                bindings.append(self._mcp(tool, f"tools[{index}]", bindings, trusted))
                public.append(without_secrets(tool))
            elif kind in WEB_SEARCH_TYPES:
                if self.search is None:
                    if isinstance(tool.get("external_web_access"), bool):
                        continue  # Codex's declaration, an optional hint: not offered or echoed
                    raise NoSearchProvider(kind, param=f"tools[{index}].type")
                web_search = _web_search_binding(tool)
                public.append(tool)
            elif kind in CLIENT_TYPES:
                client.append(tool)
                public.append(tool)
            else:  # not modelled: kept as declared, for an upstream that speaks Responses
                native.append(tool)
                public.append(tool)
        if len(bindings) > self.policy.max_mcp_servers:
            raise InvalidRequest(
                f"A request may declare at most {self.policy.max_mcp_servers} MCP servers; "
                f"this one declares {len(bindings)}.",
                param="tools",
                code="too_many_tools",
            )
        return Toolset(public, client, bindings, web_search, native, tool_search)

    def _mcp(self, tool: Item, path: str, earlier: list[McpBinding], trusted: bool) -> McpBinding:
        label: str = tool["server_label"]
        if any(b.label == label for b in earlier):
            raise InvalidRequest(
                f"Duplicate MCP server_label '{label}'.",
                param=f"{path}.server_label",
                code="duplicate_tool_name",
            )
        if self.mcp is None:
            raise InvalidRequest(
                "Tool type 'mcp' is not available: this gateway runs no MCP client.",
                param=f"{path}.type",
                code="unsupported_tool_type",
            )
        configured = self._servers.get(label)
        url = server_url_of(tool, path)
        headers = headers_of(tool, path)
        description = tool.get("server_description")
        if url is None:
            if configured is None:
                raise InvalidRequest(
                    f"No MCP server is configured with label '{label}': configure "
                    f"[mcp_servers.{label}] or give 'server_url'.",
                    param=f"{path}.server_label",
                    code="invalid_value",
                )
            server = configured.server
            if headers:  # the client's credentials replace the configured ones
                server = McpServer(label, server.url, headers, server.transport)
            description = description or configured.description
        elif configured is not None and url == configured.server.url:
            server = McpServer(
                label, url, headers or configured.server.headers, configured.server.transport
            )
            description = description or configured.description
        elif trusted or self._url_allowed(url):
            server = McpServer(label, url, headers)
            configured = None  # another server under the label: none of its settings apply
        else:
            raise McpServerNotAllowed(url, param=f"{path}.server_url")
        allowed, read_only = allowed_tools_of(tool.get("allowed_tools"))
        if configured is not None and configured.allowed_tools is not None:
            allowed = (
                configured.allowed_tools if allowed is None else allowed & configured.allowed_tools
            )
        default = configured.require_approval if configured is not None else True
        approval = approval_of(tool.get("require_approval"), default)
        deferred = tool.get("defer_loading") is True
        return McpBinding(server, allowed, read_only, approval, description, deferred)


def _web_search_binding(tool: Item) -> WebSearchBinding:
    """A declared web search tool's limits: ``filters`` (``allowed_domains``, and
    ``blocked_domains``, which Messages clients send) and ``max_uses``."""
    filters = tool.get("filters") or {}
    max_uses = tool.get("max_uses")
    return WebSearchBinding(
        tool,
        tuple(filters.get("allowed_domains") or ()),
        tuple(filters.get("blocked_domains") or ()),
        max_uses if isinstance(max_uses, int) else None,
    )
