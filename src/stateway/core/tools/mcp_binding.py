"""A declared ``mcp`` tool bound to a server: its ``server_url`` (checked to be an http(s)
URL the HTTP client can send, without credentials), the headers it sends (the request's
``headers`` and ``authorization``, checked, used for the run and never stored or echoed),
which of the server's tools it offers (``allowed_tools``, ``read_only``), and which of
them need the client's approval before they run (``require_approval``).

Which server a declaration reaches (a configured one, or an allow-listed ``server_url``)
is :meth:`~stateway.core.tools.toolset.GatewayTools.resolve`'s decision.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Final
from urllib.parse import urlsplit

import orjson

from stateway.core.errors import InvalidRequest
from stateway.core.headers import is_header_name, is_header_value
from stateway.core.items import Item
from stateway.core.tools.ports import McpServer, McpTool

SECRET_KEYS: Final = ("headers", "authorization")
"""Keys of a declared ``mcp`` tool that hold credentials: used, never stored or echoed."""


def without_secrets(tool: Item) -> Item:
    """A declared ``mcp`` tool as it may be stored and echoed: without :data:`SECRET_KEYS`."""
    return {k: v for k, v in tool.items() if k not in SECRET_KEYS}


RESERVED_HEADERS: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "te",
        "trailer",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)
"""Headers a request's ``mcp`` tool may not set: those routing or framing the HTTP request
(a ``Host`` of the client's choice would reach another virtual host behind an allowed
one, past the allow-list) and those the MCP transport owns."""


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """An MCP tool filter (``{"tool_names": [...], "read_only": bool}``): a tool matches
    when it is named (or no names are given) and, with ``read_only``, when the server marks
    it read-only (``readOnlyHint``). Each criterion given narrows it; none matches all."""

    names: frozenset[str] | None = None
    read_only: bool = False

    def matches(self, name: str, read_only: bool) -> bool:
        if self.names is not None and name not in self.names:
            return False
        return read_only or not self.read_only


def tool_filter_of(value: Any) -> ToolFilter:
    """A declared filter: a list of tool names, or a filter object (checked already)."""
    if isinstance(value, list):
        return ToolFilter(frozenset(value))
    names = value.get("tool_names")
    return ToolFilter(None if names is None else frozenset(names), bool(value.get("read_only")))


@dataclass(frozen=True, slots=True)
class Approval:
    """Which of a server's tools need the client's approval before they run: those
    ``always`` matches, else not those ``never`` matches, else ``default``."""

    default: bool
    always: ToolFilter | None = None
    never: ToolFilter | None = None

    def required(self, name: str, read_only: bool = False) -> bool:
        if self.always is not None and self.always.matches(name, read_only):
            return True
        if self.never is not None and self.never.matches(name, read_only):
            return False
        return self.default


@dataclass(frozen=True, slots=True)
class McpBinding:
    """One declared ``mcp`` tool, resolved to a server."""

    server: McpServer
    allowed_tools: frozenset[str] | None
    read_only: bool
    """Only tools the server marks read-only are offered."""
    approval: Approval
    description: str | None = None
    """What the server is for, told to the model with each of its tools: the request's
    ``server_description``, else the configured server's ``description``."""
    deferred: bool = False
    """Declared ``defer_loading: true``: with a ``tool_search`` tool declared, its tools
    are held back until a search loads them (:mod:`.discovery`)."""

    @property
    def label(self) -> str:
        return self.server.label

    @property
    def filtered(self) -> bool:
        """Whether ``allowed_tools`` may hold back some of the server's tools."""
        return self.allowed_tools is not None or self.read_only

    @property
    def filter_key(self) -> str | None:
        """The ``allowed_tools`` filter as a short digest (None: none), the same for the
        same filter however it was written: a listing made under it shows what a later
        turn under it offers."""
        if not self.filtered:
            return None
        names = None if self.allowed_tools is None else sorted(self.allowed_tools)
        canonical = orjson.dumps([names, self.read_only])
        return hashlib.sha256(canonical).hexdigest()[:16]

    def offers(self, name: str, read_only: bool) -> bool:
        return ToolFilter(self.allowed_tools, self.read_only).matches(name, read_only)

    def offered(self, tools: list[McpTool]) -> list[McpTool]:
        """The ones of the server's ``tools`` it offers."""
        return [tool for tool in tools if self.offers(tool.name, tool.read_only)]

    def server_for(self, tenant: str) -> McpServer:
        """The server as ``tenant``'s calls use it (its own MCP sessions:
        :attr:`McpServer.tenant`)."""
        return replace(self.server, tenant=tenant)


def server_url_of(tool: Item, path: str) -> str | None:
    """A request's ``server_url``, None when it names none. One that is not an absolute
    http(s) URL with a host and a valid port, or holds whitespace or control characters
    (which the URL parser would drop and the HTTP client refuse), is a 400 naming it: the
    allow-list is asked only about URLs the MCP client can reach as written. So is one
    carrying credentials (:func:`carries_credentials`), the URL never quoted."""
    url: str | None = tool.get("server_url")
    if url is None:
        return None
    if not http_url(url):
        raise InvalidRequest(
            "Invalid 'server_url': expected an http:// or https:// URL with a host (and a "
            "port from 0 to 65535), without whitespace.",
            param=f"{path}.server_url",
            code="invalid_value",
        )
    if carries_credentials(url):
        raise InvalidRequest(
            "Invalid 'server_url': it must not carry credentials (a user or password before "
            "'@'); send them in 'authorization' or 'headers', which are used for the request "
            "and never stored or echoed.",
            param=f"{path}.server_url",
            code="invalid_value",
        )
    return url


def http_url(url: str) -> bool:
    """Whether ``url`` is one an MCP server may be reached at (:func:`server_url_of`'s
    rule, which a protocol naming the field otherwise checks by it too)."""
    if any(char <= " " or char == "\x7f" for char in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its ValueError: a port out of range, or no number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def carries_credentials(url: str) -> bool:
    """Whether ``url`` (an :func:`http_url`) has a userinfo part (``user:password@``, even
    an empty one), which the HTTP client would send as Basic credentials. Refused wherever
    an MCP server's URL is given: the URL is stored and echoed with the response's tools,
    and a server's echo of the Basic header it makes is masked by nothing (it is not among
    the server's headers); credentials are given as headers."""
    return "@" in urlsplit(url).netloc


def headers_of(tool: Item, path: str) -> tuple[tuple[str, str], ...]:
    """The headers a request's ``mcp`` tool sends; a name that is not an HTTP token or is
    given twice (in two cases), a value that is not printable ASCII (a line break would
    end the header) or a reserved header (:data:`RESERVED_HEADERS`) is a 400 naming it,
    its value never quoted. ``authorization`` replaces an ``Authorization`` header."""
    headers: dict[str, str] = dict(tool.get("headers") or {})
    seen: set[str] = set()
    for name, value in headers.items():
        if name.lower() in seen:
            raise InvalidRequest(
                f"The MCP header {name!r} is given twice (header names are case-insensitive).",
                param=f"{path}.headers",
                code="invalid_value",
            )
        seen.add(name.lower())
        if not is_header_name(name) or name.lower() in RESERVED_HEADERS:
            raise InvalidRequest(
                f"The MCP header {name!r} cannot be set: give header names that are HTTP "
                "tokens, and none of Host, Content-Length, Transfer-Encoding, Connection "
                "or the MCP transport's own (Mcp-Session-Id, Mcp-Protocol-Version).",
                param=f"{path}.headers",
                code="invalid_value",
            )
        if not is_header_value(value):
            raise InvalidRequest(
                f"The value of the MCP header {name!r} must be printable ASCII, without "
                "line breaks.",
                param=f"{path}.headers",
                code="invalid_value",
            )
    token = tool.get("authorization")
    if token:
        if not is_header_value(token):
            raise InvalidRequest(
                "'authorization' must be printable ASCII, without line breaks.",
                param=f"{path}.authorization",
                code="invalid_value",
            )
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"  # one: servers differ on which of two counts
    return tuple(sorted(headers.items()))


def allowed_tools_of(value: Any) -> tuple[frozenset[str] | None, bool]:
    """A declared ``allowed_tools``: the names offered (None: all of them), and whether
    only the tools the server marks read-only are."""
    if value is None:
        return None, False
    found = tool_filter_of(value)
    return found.names, found.read_only


def approval_of(value: Any, default: bool) -> Approval:
    """``always`` / ``never`` / ``{"always": <filter>, "never": <filter>}`` (each a
    :class:`ToolFilter`); a tool neither filter matches needs approval (as hosted) unless
    the server's default (from the config) says otherwise."""
    if value is None:
        return Approval(default)
    if isinstance(value, str):
        return Approval(value == "always")
    always, never = value.get("always"), value.get("never")
    return Approval(
        default,
        None if always is None else tool_filter_of(always),
        None if never is None else tool_filter_of(never),
    )
