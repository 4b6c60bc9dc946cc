"""The wire shape of ``POST /v1/messages`` (and ``/count_tokens``), validated at the edge.

Unknown fields are ignored at every level (Claude Code and the SDK send fields of betas
the gateway has no use for); known ones are typed strictly, so a string where a number
belongs is an error naming the field. Content blocks are told apart by ``type``; a type
outside the ones listed is an error naming it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextBlock(_Wire):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: list[dict[str, Any]] | None = None
    """An earlier answer's citations, sent back (kept for an Anthropic upstream)."""


class Base64Source(_Wire):
    type: Literal["base64"]
    media_type: str = Field(min_length=1)
    data: str


class ImageBase64Source(_Wire):
    """An image's bytes: of the four image types Anthropic takes (another is a 400 naming
    ``media_type``, as Anthropic's)."""

    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class URLSource(_Wire):
    type: Literal["url"]
    url: str = Field(min_length=1)


class PlainTextSource(_Wire):
    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


class ImageBlock(_Wire):
    type: Literal["image"]
    source: Annotated[ImageBase64Source | URLSource, Field(discriminator="type")]
    cache_control: dict[str, Any] | None = None


class ContentSource(_Wire):
    """A document of custom content: text blocks, among which images may stand."""

    type: Literal["content"]
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]


class DocumentBlock(_Wire):
    type: Literal["document"]
    source: Annotated[
        Base64Source | URLSource | PlainTextSource | ContentSource, Field(discriminator="type")
    ]
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None
    """``{"enabled": true}``: an Anthropic upstream cites the document in its answer."""
    cache_control: dict[str, Any] | None = None


class ToolUseBlock(_Wire):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolReferenceBlock(_Wire):
    """In a ``tool_result``: a deferred tool the client's own tool search loaded (Claude
    Code's ToolSearch answers with these)."""

    type: Literal["tool_reference"]
    tool_name: str = Field(min_length=1)
    cache_control: dict[str, Any] | None = None


class SearchResultBlock(_Wire):
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


class ToolResultBlock(_Wire):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ResultPart] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class ServerToolUseBlock(_Wire):
    """A server tool's call in an earlier assistant turn (the gateway's web search)."""

    type: Literal["server_tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class WebSearchResult(_Wire):
    type: Literal["web_search_result"] = "web_search_result"
    url: str
    title: str = ""
    encrypted_content: str = ""
    page_age: str | None = None


class WebSearchToolResultError(_Wire):
    type: Literal["web_search_tool_result_error"]
    error_code: str


class WebSearchToolResultBlock(_Wire):
    type: Literal["web_search_tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: list[WebSearchResult] | WebSearchToolResultError


class McpToolUseBlock(_Wire):
    """An MCP connector call in an earlier assistant turn (the gateway ran it)."""

    type: Literal["mcp_tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    server_name: str = Field(min_length=1)
    input: dict[str, Any]


class McpToolResultBlock(_Wire):
    type: Literal["mcp_tool_result"]
    tool_use_id: str = Field(min_length=1)
    is_error: bool = False
    content: str | list[TextBlock]


class ThinkingBlock(_Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(_Wire):
    type: Literal["redacted_thinking"]
    data: str


class CompactionBlock(_Wire):
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


class ToolChangeReference(_Wire):
    """A tool changed by the name the model calls it by: declared in ``tools``, or defined
    by an earlier ``tool_addition`` (:mod:`.tool_changes`)."""

    type: Literal["tool_reference"]
    name: str = Field(min_length=1)


class ToolChangeDefinition(_Wire):
    """A tool added by value: ``definition`` is a ``tools`` entry, checked as one is."""

    type: Literal["tool_definition"]
    definition: dict[str, Any]


class McpToolChangeReference(_Wire):
    """An MCP connector server's tool (refused: :mod:`.tool_changes`)."""

    type: Literal["mcp_tool_reference"]
    server_name: str = Field(min_length=1)
    name: str = Field(min_length=1)


class McpToolsetChangeReference(_Wire):
    """Every tool of an MCP connector server (refused: :mod:`.tool_changes`)."""

    type: Literal["mcp_toolset_reference"]
    server_name: str = Field(min_length=1)


class ToolAdditionBlock(_Wire):
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


class ToolRemovalBlock(_Wire):
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
        "tool_reference",
        "search_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "compaction",
        "tool_addition",
        "tool_removal",
    }
)


class OutputConfig(_Wire):
    effort: str | None = None
    """``low``, ``medium``, ``high``, ``xhigh``, ``max``; a newer level is taken as ``high``."""
    format: dict[str, Any] | None = None


class MessageParam(_Wire):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]
    output_config: OutputConfig | None = None
    """A ``system`` message's per-message effort (:mod:`.thinking`)."""
    clear_at: str | None = None
    """A ``system`` message's ``next_user_message``: shown for one turn (ignored, but for
    the tool changes it may not carry: :mod:`.tool_changes`)."""


TOOL_NAME = r"^[a-zA-Z0-9_-]{1,128}$"
"""A custom tool's name, as Anthropic checks it (and words a name outside it)."""


class ToolParam(_Wire):
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


class WebSearchToolParam(_Wire):
    """Anthropic's web search server tool, run by the gateway's search provider."""

    type: str = Field(pattern=WEB_SEARCH_TOOL.pattern)
    name: Literal["web_search"]
    max_uses: int | None = Field(default=None, ge=1)
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None
    user_location: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None


class ClientToolParam(_Wire):
    """An Anthropic-defined client tool (``bash``, the text editor, ``memory``), declared by
    type, without a schema (:mod:`stateway.protocols.messages.client_tools`)."""

    type: str
    name: str = Field(min_length=1)
    max_characters: int | None = Field(default=None, ge=1)
    defer_loading: bool | None = None
    cache_control: dict[str, Any] | None = None
    input_examples: list[dict[str, Any]] | None = None
    allowed_callers: list[str] | None = None


class McpToolConfiguration(_Wire):
    enabled: bool | None = None
    allowed_tools: list[str] | None = None


class McpServerParam(_Wire):
    """One server of the MCP connector (``mcp_servers``), run by the gateway's MCP client."""

    type: Literal["url"]
    url: str = Field(min_length=1)
    name: str = Field(min_length=1, max_length=128)
    authorization_token: str | None = None
    tool_configuration: McpToolConfiguration | None = None


class McpToolConfig(_Wire):
    enabled: bool | None = None
    defer_loading: bool | None = None


class McpToolsetParam(_Wire):
    """Which tools of an ``mcp_servers`` server are offered (a ``tools`` entry)."""

    type: Literal["mcp_toolset"]
    mcp_server_name: str = Field(min_length=1)
    default_config: McpToolConfig | None = None
    configs: dict[str, McpToolConfig] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, min_length=1)
    disable_parallel_tool_use: bool | None = None


class Thinking(_Wire):
    type: Literal["enabled", "adaptive", "disabled", "between_tools"] | None = None
    """None: only a ``block_binding``, the model's own thinking (:mod:`.thinking`)."""
    block_binding: dict[str, Any] | None = None
    budget_tokens: int | None = Field(default=None, ge=1024)
    display: str | None = None
    """``summarized`` or ``omitted``; a value Anthropic adds later is taken as
    ``summarized``."""


class InputTokens(_Wire):
    """An amount of input tokens (an edit's ``trigger`` or ``clear_at_least``)."""

    type: Literal["input_tokens"]
    value: int = Field(ge=1)


class ToolUses(_Wire):
    """A number of tool uses in the context (an edit's ``trigger``)."""

    type: Literal["tool_uses"]
    value: int = Field(ge=1)


class KeptToolUses(_Wire):
    type: Literal["tool_uses"]
    value: int = Field(ge=0)


class LeastTokens(_Wire):
    type: Literal["input_tokens"]
    value: int = Field(ge=0)


class ClearToolUsesEdit(_Wire):
    """Anthropic's tool result clearing (:mod:`stateway.protocols.messages.context_edits`)."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: Annotated[InputTokens | ToolUses, Field(discriminator="type")] | None = None
    keep: KeptToolUses | None = None
    clear_at_least: LeastTokens | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | list[str] | None = None


class ThinkingTurns(_Wire):
    type: Literal["thinking_turns"]
    value: int = Field(ge=1)


class AllThinkingTurns(_Wire):
    type: Literal["all"]


class ClearThinkingEdit(_Wire):
    """Anthropic's thinking block clearing."""

    type: Literal["clear_thinking_20251015"]
    keep: (
        Literal["all"]
        | Annotated[ThinkingTurns | AllThinkingTurns, Field(discriminator="type")]
        | None
    ) = None


class CompactEdit(_Wire):
    """Anthropic's autocompact (:func:`stateway.protocols.messages.compaction.autocompact`),
    checked here as every edit is, so a count refuses what a message refuses."""

    type: Literal["compact_20260112"]
    trigger: InputTokens | None = None
    pause_after_compaction: bool | None = None
    instructions: str | None = None


class OtherEdit(_Wire):
    """An edit of a type the gateway does not serve (a newer strategy): accepted without
    effect, as the gateway carries what it does not know rather than refuse it; the model
    is then sent the context that edit would have trimmed."""

    type: str


EDIT_TYPES = frozenset({"clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112"})
OTHER_EDIT = "other"
"""The tag of :class:`OtherEdit` in the edits' union (:func:`_edit_tag`)."""


def _edit_tag(edit: Any) -> str:
    """The edit's tag: its ``type`` when served, else :data:`OTHER_EDIT` (a ``type`` that
    is no string too, which :class:`OtherEdit` then refuses as one)."""
    kind = edit.get("type") if isinstance(edit, dict) else getattr(edit, "type", None)
    return kind if isinstance(kind, str) and kind in EDIT_TYPES else OTHER_EDIT


Edit = Annotated[
    Annotated[ClearToolUsesEdit, Tag("clear_tool_uses_20250919")]
    | Annotated[ClearThinkingEdit, Tag("clear_thinking_20251015")]
    | Annotated[CompactEdit, Tag("compact_20260112")]
    | Annotated[OtherEdit, Tag(OTHER_EDIT)],
    Discriminator(_edit_tag),
]


class ContextManagement(_Wire):
    edits: list[Edit] | None = None


class Metadata(_Wire):
    user_id: str | None = Field(default=None, max_length=512)
    """At most 512 characters, as Anthropic documents it."""


class CountTokensBody(_Wire):
    model: str = Field(min_length=1)
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None
    """Each a :class:`ToolParam`, a :class:`WebSearchToolParam`, a :class:`ClientToolParam`
    or an :class:`McpToolsetParam`, told apart by ``type`` and validated as the one it is
    (:mod:`stateway.protocols.messages.decode`)."""
    mcp_servers: list[McpServerParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    output_format: dict[str, Any] | None = None
    """``output_config.format`` under its former (deprecated) name, which the
    structured-outputs beta and older SDKs send."""
    context_management: ContextManagement | None = None


class MessagesBody(CountTokensBody):
    max_tokens: int = Field(ge=0)
    """0: a prewarm (:mod:`stateway.protocols.messages.decode`)."""
    cache_control: dict[str, Any] | None = None
    """Automatic prompt caching (the cache point moves with the conversation)."""
    stream: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stop_sequences: list[str] | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    compaction: dict[str, Any] | None = None
    thread: dict[str, Any] | None = None
    """Checked by :mod:`stateway.protocols.messages.threads`."""
    fallbacks: list[dict[str, Any]] | Literal["default"] | None = None
    billing_policy: dict[str, Any] | None = None
    """Fields of hosted features, checked by
    :mod:`stateway.protocols.messages.hosted_only`."""
