"""The wire shape of ``POST /v1/messages`` (and ``/count_tokens``), validated at the edge.

Unknown fields are ignored at every level (Claude Code and the SDK send fields of betas
the gateway has no use for); known ones are typed strictly, so a string where a number
belongs is an error naming the field. The bodies are here; their parts are modules of
their own: content blocks (:mod:`.blocks`), tool declarations and ``tool_choice``
(:mod:`.tool_params`), ``context_management``'s edits (:mod:`.edit_params`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from stateway.protocols.messages.blocks import Block, TextBlock
from stateway.protocols.messages.edit_params import ContextManagement
from stateway.protocols.messages.tool_params import McpServerParam, ToolChoice
from stateway.protocols.messages.wire import Wire


class OutputConfig(Wire):
    effort: str | None = None
    """``low``, ``medium``, ``high``, ``xhigh``, ``max``; a newer level is taken as ``high``."""
    format: dict[str, Any] | None = None


class MessageParam(Wire):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]
    output_config: OutputConfig | None = None
    """A ``system`` message's per-message effort (:mod:`.thinking`)."""
    clear_at: str | None = None
    """A ``system`` message's ``next_user_message``: shown for one turn (ignored, but for
    the tool changes it may not carry: :mod:`.tool_changes`)."""


class Thinking(Wire):
    type: Literal["enabled", "adaptive", "disabled", "between_tools"] | None = None
    """None: only a ``block_binding``, the model's own thinking (:mod:`.thinking`)."""
    block_binding: dict[str, Any] | None = None
    budget_tokens: int | None = Field(default=None, ge=1024)
    display: str | None = None
    """``summarized`` or ``omitted``; a value Anthropic adds later is taken as
    ``summarized``."""


class Metadata(Wire):
    user_id: str | None = Field(default=None, max_length=512)
    """At most 512 characters, as Anthropic documents it."""


class CountTokensBody(Wire):
    model: str = Field(min_length=1)
    messages: list[MessageParam]
    system: str | list[TextBlock] | None = None
    tools: list[dict[str, Any]] | None = None
    """Each a :class:`~.tool_params.ToolParam`, a :class:`~.tool_params.WebSearchToolParam`,
    a :class:`~.tool_params.ClientToolParam` or an :class:`~.tool_params.McpToolsetParam`,
    told apart by ``type`` and validated as the one it is
    (:mod:`stateway.protocols.messages.decode`)."""
    mcp_servers: list[McpServerParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    thread: dict[str, Any] | None = None
    """Checked by :mod:`stateway.protocols.messages.threads`."""
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
    safeguards: list[Any] | None = None
    """Claude Code's auto mode asking for Anthropic's check of risky tool calls."""
    fallbacks: list[dict[str, Any]] | Literal["default"] | None = None
    billing_policy: dict[str, Any] | None = None
    """Fields of hosted features, checked by
    :mod:`stateway.protocols.messages.hosted_only`."""
