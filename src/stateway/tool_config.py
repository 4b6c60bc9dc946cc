"""Configuration of gateway-owned tools: the tool executor, MCP servers, web search.

Example file::

    [loop]
    max_rounds = 8                     # STATEWAY_MAX_TOOL_ROUNDS

    [tools]
    timeout = 60.0                     # STATEWAY_TOOL_TIMEOUT_S, per call
    max_concurrent_calls = 5           # STATEWAY_MAX_CONCURRENT_TOOL_CALLS, per round
    max_output_bytes = 1048576         # one MCP call's output; a longer one fails the call

    [mcp]
    allowed_hosts = ["mcp.internal"]   # STATEWAY_MCP_ALLOWED_HOSTS: hosts a request may name

    [mcp_servers.docs]                 # requests use {"type": "mcp", "server_label": "docs"}
    url = "https://mcp.example.com/mcp"
    headers_env = { Authorization = "DOCS_MCP_AUTHORIZATION" }
    allowed_tools = ["search"]

    [web_search]
    provider = "searxng"               # STATEWAY_WEB_SEARCH_PROVIDER: searxng, brave, tavily
    searxng_url = "http://127.0.0.1:8888"   # STATEWAY_SEARXNG_URL
    # base_url = "https://proxy.internal"   # STATEWAY_WEB_SEARCH_BASE_URL (brave, tavily)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from stateway.config_section import Section, VariableName
from stateway.core.errors import InvalidRequest
from stateway.core.tools.mcp_binding import carries_credentials, http_url
from stateway.core.tools.tool_types import WEB_SEARCH_TYPES
from stateway.protocols.responses.tools.decode import decode_tools

_NOT_HTTP = "must be an http:// or https:// URL naming a host (and a port from 0 to 65535, if any)"


class ToolsConfig(Section):
    timeout: float = Field(default=60.0, gt=0)
    """Seconds one gateway tool call (or one MCP discovery) may take before it fails."""
    max_concurrent_calls: int = Field(default=5, ge=1, le=256)
    """Gateway tool calls of one round running at once."""
    max_mcp_servers: int = Field(default=16, ge=0, le=256)
    """MCP servers one request may declare."""
    max_discovered_tools: int = Field(default=256, ge=1, le=10_000)
    """Tools all of one request's MCP servers may list together."""
    max_output_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    """The most UTF-8 bytes of output one MCP tool call may give: a longer result fails
    the call (the model is told) rather than filling the context and the stored
    response."""


class McpConfig(Section):
    allowed_hosts: list[str] = Field(default_factory=list)
    """Hosts a request may name in ``server_url`` (deny by default: no SSRF into the
    gateway's network). ``host`` or ``host:port``; configured servers need no entry."""
    session_ttl: float = Field(default=300.0, gt=0)
    """Seconds an idle pooled MCP session is kept before it is closed."""
    max_sessions: int = Field(default=256, ge=1, le=100_000)
    """Pooled MCP sessions kept at once (one per tenant, server and headers); beyond, the
    least recently used idle ones are closed."""

    @field_validator("allowed_hosts")
    @classmethod
    def _lower(cls, hosts: list[str]) -> list[str]:
        return [host.strip().lower() for host in hosts if host.strip()]

    def allows(self, url: str) -> bool:
        """Whether a request may name ``url`` (its host, or its ``host:port``, is listed);
        False for anything that does not parse as a URL."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:  # an unclosed IPv6 bracket, a port out of range or no number
            return False
        host = (parts.hostname or "").lower()
        if not host or parts.scheme not in ("http", "https"):
            return False
        written = f"[{host}]" if ":" in host else host  # an IPv6 literal, as URLs write it
        with_port = f"{written}:{port}" if port else written
        return any(name in self.allowed_hosts for name in (host, written, with_port))


class McpServerConfig(Section):
    url: str
    transport: Literal["streamable_http", "sse"] = "streamable_http"
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, VariableName] = Field(default_factory=dict)
    """Header name → environment variable holding its value (secrets stay out of files)."""
    allowed_tools: list[str] | None = None
    """Only these of the server's tools are offered; None: all."""
    require_approval: Literal["always", "never"] = "never"
    description: str | None = None
    """What the server is for, told to the model with each of its tools (a request's own
    ``server_description`` replaces it)."""

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not http_url(url):
            raise ValueError(_NOT_HTTP)
        if carries_credentials(url):
            raise ValueError(
                "must not carry credentials (a user or password before '@'): give them as "
                "headers (headers_env keeps them out of the file)"
            )
        return url

    def resolved_headers(
        self, label: str, environ: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """``headers`` plus those read from the environment; a missing variable is an error."""
        env = os.environ if environ is None else environ
        out = dict(self.headers)
        for header, var in self.headers_env.items():
            value = env.get(var)
            if not value:
                raise ValueError(
                    f"mcp_servers.{label}: environment variable {var} (header {header}) is not set"
                )
            out[header] = value
        return out


WebSearchProviderName = Literal["searxng", "brave", "tavily"]

SEARCH_KEY_ENV: dict[str, str] = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
"""The environment variable holding each hosted provider's API key (by default)."""


class WebSearchConfig(Section):
    provider: WebSearchProviderName | None = None
    """None: no provider; a request's ``web_search`` tool is a 400 (unless sent as a hint)."""
    searxng_url: str | None = None
    api_key_env: VariableName | None = None
    """Overrides the provider's API-key variable (``BRAVE_API_KEY``, ``TAVILY_API_KEY``)."""
    base_url: str | None = None
    """Overrides the hosted provider's API address (a proxy, or a fake in tests)."""
    max_results: int = Field(default=5, ge=1, le=20)
    timeout: float = Field(default=15.0, gt=0)

    @field_validator("searxng_url", "base_url")
    @classmethod
    def _http(cls, url: str | None) -> str | None:
        if url is not None and not http_url(url):
            raise ValueError(_NOT_HTTP)
        return url

    @model_validator(mode="after")
    def _complete(self) -> WebSearchConfig:
        if self.provider == "searxng" and not self.searxng_url:
            raise ValueError("provider 'searxng' needs searxng_url (or STATEWAY_SEARXNG_URL)")
        return self

    @property
    def key_env(self) -> str | None:
        if self.provider is None or self.provider == "searxng":
            return None
        return self.api_key_env or SEARCH_KEY_ENV[self.provider]


GATEWAY_TOOL_TYPES = frozenset({"mcp"}) | WEB_SEARCH_TYPES
"""What a backend's ``gateway_tools`` may hold: the gateway's own tool kinds."""


def checked_gateway_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A backend's ``gateway_tools``: Responses-shaped ``mcp`` and ``web_search`` tools,
    checked as a request's tools are. An ``mcp`` tool runs without approval (a Chat or
    Messages client cannot give one): ``require_approval`` is ``"never"``, or left out.
    Whether the gateway can run each one (a configured server, a search provider) is
    checked once the tools are built (``app.backend_gateway_tools``)."""
    tools = [dict(tool) for tool in tools]
    for index, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in GATEWAY_TOOL_TYPES:
            raise ValueError(
                f"tools[{index}].type: {kind!r} is not a gateway tool; gateway_tools holds "
                f"{', '.join(sorted(GATEWAY_TOOL_TYPES))} tools (the client declares its own)"
            )
        if kind == "mcp":
            approval = tool.setdefault("require_approval", "never")
            if approval != "never":
                raise ValueError(
                    f'tools[{index}].require_approval: must be "never": Chat Completions '
                    "and Messages clients cannot approve a call"
                )
    try:
        return decode_tools(tools)
    except InvalidRequest as exc:
        raise ValueError(exc.message) from None


def _hosts(value: str) -> list[str]:
    return [host.strip() for host in value.split(",") if host.strip()]


TOOL_ENV: dict[str, tuple[str, str, Any]] = {
    "STATEWAY_MAX_TOOL_ROUNDS": ("loop", "max_rounds", int),
    "STATEWAY_TOOL_TIMEOUT_S": ("tools", "timeout", float),
    "STATEWAY_MAX_CONCURRENT_TOOL_CALLS": ("tools", "max_concurrent_calls", int),
    "STATEWAY_MCP_ALLOWED_HOSTS": ("mcp", "allowed_hosts", _hosts),
    "STATEWAY_WEB_SEARCH_PROVIDER": ("web_search", "provider", str),
    "STATEWAY_SEARXNG_URL": ("web_search", "searxng_url", str),
    "STATEWAY_WEB_SEARCH_BASE_URL": ("web_search", "base_url", str),
}
"""Environment variable → (section, key, parser) for the tool settings."""

_EXPECTED = {int: "an integer", float: "a number"}
"""What a variable whose parser refused it must be, by parser."""


def apply_tool_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Overlay the tool variables set in ``env`` onto the file's ``data`` (in place).
    A parse error is a ``ValueError`` naming the variable."""
    for var, (section, key, parse) in TOOL_ENV.items():
        raw = env.get(var)
        if not raw:
            continue
        try:
            value = parse(raw)
        except ValueError:
            raise ValueError(f"{var} must be {_EXPECTED[parse]}, got {raw!r}") from None
        data[section] = {**data.get(section, {}), key: value}
