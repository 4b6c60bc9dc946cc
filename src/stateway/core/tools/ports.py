"""Ports of the gateway-owned tool kinds: what the loop needs from MCP servers and search
providers, implemented by adapters outside the core (``stateway.mcp_client``,
``stateway.search``).

Adapters raise :class:`ToolFailure` for anything that should reach the model as a failed
tool output (unreachable server, protocol error, a tool that reported an error), with a
:class:`ToolError` saying which kind of failure it was: what a failed ``mcp_call`` item's
``error`` is made of. Timeouts are the executor's: adapters must survive being cancelled
mid-call (a pooled MCP session that a cancelled call leaves unusable is discarded, never
handed out again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

REQUEST_TIMEOUT: Final = -32001
"""A request got no answer in time (the JSON-RPC code MCP SDKs use for their timeouts)."""
GATEWAY_REFUSED: Final = -32010
"""stateway's own, in JSON-RPC's implementation-defined band (MCP keeps -32000..-32019 for
implementations): the gateway did not send the call, for a limit of the request
(``max_tool_calls``)."""
INVALID_PARAMS: Final = -32602
"""Unknown tool or bad arguments (MCP answers an unknown tool with this code)."""
INTERNAL_ERROR: Final = -32603
"""Anything else."""

ToolErrorKind = Literal["protocol", "http", "execution"]


@dataclass(frozen=True, slots=True)
class ToolError:
    """Why a gateway tool call failed, as MCP tells it:

    - ``protocol``: a JSON-RPC error (``code``, ``message``), the server's own or one the
      client side stands in with (a timeout, a closed connection, a refusal);
    - ``http``: the server's HTTP layer answered an error status (``code``) or could not be
      reached at all (502, as a proxy says it);
    - ``execution``: the tool ran and reported an error (``isError``); ``content`` is its
      result's content as JSON (its content blocks), ``message`` their text.

    ``message`` is what the model reads (the text of ``content`` for an execution error),
    and what a failed listing or search shows."""

    message: str
    kind: ToolErrorKind = "protocol"
    code: int = INTERNAL_ERROR
    """A JSON-RPC error code (``protocol``) or an HTTP status (``http``); 0 otherwise."""
    content: Any = None
    """``execution``: the tool's result content as JSON."""
    cause: str | None = None
    """A failed web search's cause as Anthropic codes it (``max_uses_exceeded``), for a
    failure whose kind and code do not name it (:func:`.web_search.cause`); a failed tool
    search's of another syntax (``invalid_tool_input``, ``execution_time_exceeded``:
    :mod:`.search_syntax`)."""

    @classmethod
    def protocol(cls, code: int, message: str) -> ToolError:
        return cls(message, "protocol", code)

    @classmethod
    def http(cls, status: int, message: str) -> ToolError:
        return cls(message, "http", status)

    @classmethod
    def execution(cls, content: Any, message: str) -> ToolError:
        return cls(message, "execution", 0, content)


class ToolFailure(Exception):
    """A tool call or discovery failed; ``error`` says how, and its ``message`` is what the
    model (and client) see. A bare message is an internal error (``INTERNAL_ERROR``)."""

    def __init__(self, error: ToolError | str) -> None:
        self.error = ToolError(error) if isinstance(error, str) else error
        super().__init__(self.error.message)

    @property
    def message(self) -> str:
        return self.error.message


McpTransport = Literal["streamable_http", "sse"]


@dataclass(frozen=True, slots=True)
class McpServer:
    """One remote MCP server as a request (or the config) names it. Sessions are pooled by
    ``(tenant, url, transport, headers)``: the same server with other credentials is another
    pool, and no tenant shares a session (and whatever state the server keeps in it) with
    another."""

    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    transport: McpTransport = "streamable_http"
    tenant: str = ""
    """The tenant whose request uses it (set when the request runs)."""

    @property
    def pool_key(self) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
        return (self.tenant, self.url, self.transport, self.headers)


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool a server lists (``tools/list``)."""

    name: str
    input_schema: Mapping[str, Any]
    description: str | None = None
    annotations: Mapping[str, Any] | None = None
    """MCP tool annotations (``readOnlyHint``, ``idempotentHint``, ...), as the server sent them."""

    @property
    def read_only(self) -> bool:
        """Whether the server marks the tool read-only (``readOnlyHint``)."""
        return bool(self.annotations and self.annotations.get("readOnlyHint"))

    @property
    def parallel_safe(self) -> bool:
        """Whether two calls may run at once: only tools the server marks read-only."""
        return self.read_only


class McpClient(Protocol):
    async def list_tools(self, server: McpServer) -> list[McpTool]:
        """The server's tools (every page). Raises :class:`ToolFailure`."""
        ...

    async def call_tool(self, server: McpServer, name: str, arguments: Mapping[str, Any]) -> str:
        """The call's result as text (text contents joined; other contents as JSON). A
        result with ``isError`` raises :class:`ToolFailure` with an ``execution`` error (its
        content, and that text); a JSON-RPC error one with its ``protocol`` code; an HTTP
        error status one with its ``http`` status."""
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
    blocked_domains: tuple[str, ...] = field(default=())
    """Results inside these domains (and their subdomains) are dropped."""


class SearchProvider(Protocol):
    name: str
    """``searxng``, ``brave`` or ``tavily``."""

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        """At most ``query.max_results`` hits, best first. Raises :class:`ToolFailure`."""
        ...

    async def aclose(self) -> None: ...
