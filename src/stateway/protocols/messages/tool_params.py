"""A Messages request's tool declarations (``tools``, ``mcp_servers``) and ``tool_choice``,
validated at the edge as :mod:`.request` says; :mod:`.tool_declarations` decodes them.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from stateway.protocols.messages.wire import Wire

TOOL_NAME = r"^[a-zA-Z0-9_-]{1,128}$"
"""A custom tool's name, as Anthropic checks it (and words a name outside it)."""


class ToolParam(Wire):
    type: Literal["custom"] | None = None
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    input_schema: dict[str, Any]
    """A JSON schema of ``type: "object"`` (:mod:`.tool_declarations` checks it)."""
    strict: bool | None = None
    defer_loading: bool | None = None
    cache_control: dict[str, Any] | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[str] | None = None


WEB_SEARCH_TOOL = re.compile(r"web_search_\d{8}")
"""The type of Anthropic's web search server tool, in any version (``web_search_20250305``)."""


class WebSearchToolParam(Wire):
    """Anthropic's web search server tool, run by the gateway's search provider."""

    type: str = Field(pattern=WEB_SEARCH_TOOL.pattern)
    name: Literal["web_search"]
    max_uses: int | None = Field(default=None, ge=1)
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None
    user_location: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    allowed_callers: list[str] | None = None


TOOL_SEARCH_TOOL = re.compile(r"(tool_search_tool_(?:regex|bm25))(?:_\d{8})?")
"""The type of Anthropic's tool search server tool, in either variant and any version
(``tool_search_tool_regex_20251119``, or undated); the name it requires is group 1."""


class ToolSearchToolParam(Wire):
    """Anthropic's tool search server tool, run by the gateway (:mod:`.tool_search`)."""

    type: str = Field(pattern=TOOL_SEARCH_TOOL.pattern)
    name: str
    """The variant's own: ``tool_search_tool_regex`` or ``tool_search_tool_bm25``."""
    defer_loading: bool | None = None
    strict: bool | None = None
    cache_control: dict[str, Any] | None = None
    allowed_callers: list[str] | None = None


class ClientToolParam(Wire):
    """An Anthropic-defined client tool (``bash``, the text editor, ``memory``), declared by
    type, without a schema (:mod:`stateway.protocols.messages.client_tools`)."""

    type: str
    name: str = Field(min_length=1)
    max_characters: int | None = Field(default=None, ge=1)
    defer_loading: bool | None = None
    cache_control: dict[str, Any] | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[str] | None = None


class McpToolConfiguration(Wire):
    enabled: bool | None = None
    allowed_tools: list[str] | None = None


class McpServerParam(Wire):
    """One server of the MCP connector (``mcp_servers``), run by the gateway's MCP client."""

    type: Literal["url"]
    url: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=128)
    authorization_token: str | None = None
    tool_configuration: McpToolConfiguration | None = None


class McpToolConfig(Wire):
    enabled: bool | None = None
    defer_loading: bool | None = None


class McpToolsetParam(Wire):
    """Which tools of an ``mcp_servers`` server are offered (a ``tools`` entry)."""

    type: Literal["mcp_toolset"]
    mcp_server_name: str = Field(min_length=1)
    default_config: McpToolConfig | None = None
    configs: dict[str, McpToolConfig] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, min_length=1)
    disable_parallel_tool_use: bool | None = None
