"""The edits of a Messages request's ``context_management``, validated at the edge as
:mod:`.request` says; :mod:`.context_edits` decodes them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag

from stateway.protocols.messages.wire import Wire


class InputTokens(Wire):
    """An amount of input tokens (an edit's ``trigger`` or ``clear_at_least``)."""

    type: Literal["input_tokens"]
    value: int = Field(ge=1)


class ToolUses(Wire):
    """A number of tool uses in the context (an edit's ``trigger``)."""

    type: Literal["tool_uses"]
    value: int = Field(ge=1)


class KeptToolUses(Wire):
    type: Literal["tool_uses"]
    value: int = Field(ge=0)


class LeastTokens(Wire):
    type: Literal["input_tokens"]
    value: int = Field(ge=0)


class ClearToolUsesEdit(Wire):
    """Anthropic's tool result clearing (:mod:`stateway.protocols.messages.context_edits`)."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: Annotated[InputTokens | ToolUses, Field(discriminator="type")] | None = None
    keep: KeptToolUses | None = None
    clear_at_least: LeastTokens | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | list[str] | None = None


class ThinkingTurns(Wire):
    type: Literal["thinking_turns"]
    value: int = Field(ge=1)


class AllThinkingTurns(Wire):
    type: Literal["all"]


class ClearThinkingEdit(Wire):
    """Anthropic's thinking block clearing."""

    type: Literal["clear_thinking_20251015"]
    keep: (
        Literal["all"]
        | Annotated[ThinkingTurns | AllThinkingTurns, Field(discriminator="type")]
        | None
    ) = None


class CompactEdit(Wire):
    """Anthropic's autocompact (:func:`stateway.protocols.messages.compaction.autocompact`),
    checked here as every edit is, so a count refuses what a message refuses."""

    type: Literal["compact_20260112"]
    trigger: InputTokens | None = None
    pause_after_compaction: bool | None = None
    instructions: str | None = None


class OtherEdit(Wire):
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


class ContextManagement(Wire):
    edits: list[Edit] | None = None
