"""Ports of the gateway-owned tool kinds: what the loop needs from MCP servers and search
providers, implemented by adapters outside the core (``stateway.mcp_client``,
``stateway.search``).

Adapters raise :class:`ToolFailure` for anything that should reach the model as a failed
tool output (unreachable server, protocol error, a tool that reported an error). Timeouts
are the executor's: adapters must survive being cancelled mid-call (a pooled MCP session
that a cancelled call leaves unusable is discarded, never handed out again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


class ToolFailure(Exception):
    """A tool call or discovery failed; ``message`` is what the model (and client) see."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


McpTransport = Literal["streamable_http", "sse"]


@dataclass(frozen=True, slots=True)
class McpServer:
    """One remote MCP server as a request (or the config) names it. Sessions are pooled by
    ``(url, transport, headers)``: the same server with other credentials is another pool."""

    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    transport: McpTransport = "streamable_http"

    @property
    def pool_key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        return (self.url, self.transport, self.headers)


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server lists (``tools/list``)."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None
    annotations: Mapping[str, Any] | None = None
    """MCP tool annotations (``readOnlyHint``, ``idempotentHint``, ...), as the server sent them."""

    @property
    def parallel_safe(self) -> bool:
        """Whether two calls may run at once: only tools the server marks read-only."""
        return bool(self.annotations and self.annotations.get("readOnlyHint"))


class McpClient(Protocol):
    async def list_tools(self, server: McpServer) -> list[McpTool]:
        """The server's tools (every page). Raises :class:`ToolFailure`."""
        ...

    async def call_tool(self, server: McpServer, name: str, arguments: Mapping[str, Any]) -> str:
        """The call's result as text (text contents joined; other contents as JSON). A
        result with ``isError`` raises :class:`ToolFailure` with its text."""
        ...

    async def aclose(self) -> None:
        """Close every pooled session."""
        ...


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str = ""


@dataclass(frozen=True, slots=True)
class SearchQuery:
    query: str
    max_results: int = 5
    allowed_domains: tuple[str, ...] = field(default=())
    """Results outside these domains (and their subdomains) are dropped; empty: any."""


class SearchProvider(Protocol):
    name: str
    """``searxng``, ``brave`` or ``tavily``."""

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """At most ``query.max_results`` hits, best first. Raises :class:`ToolFailure`."""
        ...

    async def aclose(self) -> None: ...
