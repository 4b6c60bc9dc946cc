"""The content blocks of a Messages request's ``messages`` (and ``system``), validated at
the edge as :mod:`.request` says. Blocks are told apart by ``type``; a type outside
:data:`BLOCK_TYPES` is an error naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from stateway.protocols.messages.wire import Wire


class TextBlock(Wire):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None
    """An earlier answer's citations, sent back (kept for an Anthropic upstream)."""


class Base64Source(Wire):
    type: Literal["base64"]
    media_type: str = Field(min_length=1)
    data: str


class ImageBase64Source(Wire):
    """An image's bytes: of the four image types Anthropic takes (another is a 400 naming
    ``media_type``, as Anthropic's)."""

    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


def _web_url(url: str) -> str:
    """A URL to fetch, as Anthropic fetches it: http(s) only (a model server told a
    ``file://`` URL or a path may read its own disk; the Responses surface refuses such an
    image URL too)."""
    if not url.startswith(("http://", "https://")):
        raise PydanticCustomError("url_scheme", "expected an http:// or https:// URL")
    return url


class URLSource(Wire):
    type: Literal["url"]
    url: Annotated[str, AfterValidator(_web_url)]


class PlainTextSource(Wire):
    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


class ImageBlock(Wire):
    type: Literal["image"]
    source: Annotated[ImageBase64Source | URLSource, Field(discriminator="type")]
    cache_control: dict[str, Any] | None = None


class ContentSource(Wire):
    """A document of custom content: text blocks, among which images may stand."""

    type: Literal["content"]
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]


class DocumentBlock(Wire):
    type: Literal["document"]
    source: Annotated[
        Base64Source | URLSource | PlainTextSource | ContentSource, Field(discriminator="type")
    ]
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None
    """``{"enabled": true}``: an Anthropic upstream cites the document in its answer."""
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(Wire):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolReferenceBlock(Wire):
    """In a ``tool_result``: a deferred tool the client's own tool search loaded (Claude
    Code's ToolSearch answers with these)."""

    type: Literal["tool_reference"]
    tool_name: str = Field(min_length=1)
    cache_control: dict[str, Any] | None = None


class SearchResultBlock(Wire):
    """A search hit the client found itself (``source``, ``title``, text ``content``), in
    a user message or a tool result; ``citations`` (``{"enabled": true}``) lets an
    Anthropic upstream cite it."""

    type: Literal["search_result"]
    source: str
    title: str = ""
    content: list[TextBlock]
    citations: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


ResultPart = Annotated[
    TextBlock | ImageBlock | DocumentBlock | ToolReferenceBlock | SearchResultBlock,
    Field(discriminator="type"),
]


class ToolResultBlock(Wire):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ResultPart] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ServerToolUseBlock(Wire):
    """A server tool's call in an earlier assistant turn (the gateway's web search)."""

    type: Literal["server_tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class WebSearchResult(Wire):
    type: Literal["web_search_result"] = "web_search_result"
    url: str
    title: str = ""
    encrypted_content: str = ""
    page_age: str | None = None


class WebSearchToolResultError(Wire):
    type: Literal["web_search_tool_result_error"]
    error_code: str


class WebSearchToolResultBlock(Wire):
    type: Literal["web_search_tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: list[WebSearchResult] | WebSearchToolResultError


class McpToolUseBlock(Wire):
    """An MCP connector call in an earlier assistant turn (the gateway ran it)."""

    type: Literal["mcp_tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    server_name: str = Field(min_length=1)
    input: dict[str, Any]


class McpToolResultBlock(Wire):
    type: Literal["mcp_tool_result"]
    tool_use_id: str = Field(min_length=1)
    is_error: bool = False
    content: str | list[TextBlock]


class ToolSearchResult(Wire):
    """A tool search's hits: the deferred tools it loaded, by name."""

    type: Literal["tool_search_tool_search_result"]
    tool_references: list[ToolReferenceBlock]


class ToolSearchResultError(Wire):
    type: Literal["tool_search_tool_result_error"]
    error_code: str
    error_message: str | None = None


class ToolSearchToolResultBlock(Wire):
    """A tool search's result in an earlier assistant turn (the gateway ran it)."""

    type: Literal["tool_search_tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: ToolSearchResult | ToolSearchResultError = Field(discriminator="type")
    cache_control: dict[str, Any] | None = None


class ThinkingBlock(Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(Wire):
    type: Literal["redacted_thinking"]
    data: str


class CompactionBlock(Wire):
    """A compaction's summary sent back, first in ``messages``, in place of what it
    summarized (:mod:`stateway.protocols.messages.compaction`). ``content`` None: a failed
    compaction, a no-op. ``encrypted_content`` and ``tool_changes`` are taken and ignored:
    the gateway's blocks carry neither."""

    type: Literal["compaction"]
    content: str | None = Field(default=None, min_length=1)
    signature: str | None = None
    encrypted_content: str | None = None
    tool_changes: list[dict[str, Any]] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChangeReference(Wire):
    """A tool changed by the name the model calls it by: declared in ``tools``, or defined
    by an earlier ``tool_addition`` (:mod:`.tool_changes`)."""

    type: Literal["tool_reference"]
    name: str = Field(min_length=1)


class ToolChangeDefinition(Wire):
    """A tool added by value: ``definition`` is a ``tools`` entry, checked as one is."""

    type: Literal["tool_definition"]
    definition: dict[str, Any]


class McpToolChangeReference(Wire):
    """An MCP connector server's tool (refused: :mod:`.tool_changes`)."""

    type: Literal["mcp_tool_reference"]
    server_name: str = Field(min_length=1)
    name: str = Field(min_length=1)


class McpToolsetChangeReference(Wire):
    """Every tool of an MCP connector server (refused: :mod:`.tool_changes`)."""

    type: Literal["mcp_toolset_reference"]
    server_name: str = Field(min_length=1)


class ToolAdditionBlock(Wire):
    """In a ``role: "system"`` message: a tool offered from there on."""

    type: Literal["tool_addition"]
    tool: Annotated[
        ToolChangeReference
        | ToolChangeDefinition
        | McpToolChangeReference
        | McpToolsetChangeReference,
        Field(discriminator="type"),
    ]
    cache_control: dict[str, Any] | None = None


class ToolRemovalBlock(Wire):
    """In a ``role: "system"`` message: a tool withdrawn from there on."""

    type: Literal["tool_removal"]
    tool: Annotated[
        ToolChangeReference | McpToolChangeReference | McpToolsetChangeReference,
        Field(discriminator="type"),
    ]
    cache_control: dict[str, Any] | None = None


ToolChangeBlock = ToolAdditionBlock | ToolRemovalBlock
TOOL_CHANGE_TARGETS = frozenset(
    {"tool_reference", "tool_definition", "mcp_tool_reference", "mcp_toolset_reference"}
)
"""The ``type`` tags of a tool change's ``tool``."""


Block = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerToolUseBlock
    | WebSearchToolResultBlock
    | ToolSearchToolResultBlock
    | McpToolUseBlock
    | McpToolResultBlock
    | CompactionBlock
    | ToolAdditionBlock
    | ToolRemovalBlock,
    Field(discriminator="type"),
]
BLOCK_TYPES = frozenset(
    {
        "text",
        "image",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "web_search_tool_result",
        "tool_search_tool_result",
        "tool_reference",
        "search_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "compaction",
        "tool_addition",
        "tool_removal",
    }
)
