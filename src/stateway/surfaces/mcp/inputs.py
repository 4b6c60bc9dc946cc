"""The MCP tools' inputs: one pydantic model per tool, whose JSON Schema is each tool's
``inputSchema`` and is checked into ``schemas/mcp-tools.json`` (``stateway.schemas``)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from stateway.core.coordination import MAX_COMMAND_ID

Order = Literal["asc", "desc"]


def _whole(value: Any) -> Any:
    """A number with no fractional part is a JSON Schema integer (``5.0`` is ``5``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def as_parsed(arguments: dict[str, Any]) -> Any:
    """``arguments`` as the HTTP routes read a body (orjson), since the tools pass them on
    as JSON: an integer beyond 64 bits becomes a float. Raises ``ValueError`` for what
    that parser refuses: a number beyond a float's range, NaN and the infinities."""
    return orjson.loads(json.dumps(arguments, allow_nan=False))


Limit = Annotated[int, Field(ge=1, le=100), BeforeValidator(_whole)]
"""A page's size: an integer as JSON Schema has it (strict mode alone refuses ``5.0``)."""


class ToolInput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    """Arguments are JSON: each must have its schema type (no `"yes"` for a boolean), and
    what the schema takes is taken (integers through :data:`Limit`)."""


class Changing(ToolInput):
    """A tool that changes something: a retry with the same ``command_id`` runs it once."""

    command_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_COMMAND_ID,
        description="Your id for this call: a retry with the same id and arguments gets the "
        "first call's result instead of running again (even while the first still runs).",
    )


class CreateResponseInput(Changing):
    model: str = Field(min_length=1, description="The model to answer with.")
    input: str | list[dict[str, Any]] = Field(
        description="A user message, or Responses API input items."
    )
    instructions: str | None = Field(default=None, description="A system message.")
    previous_response_id: str | None = Field(
        default=None, description="Continue from this stored response."
    )
    conversation: str | None = Field(
        default=None, description="A conversation this response is a turn of."
    )
    background: bool = Field(
        default=False,
        description="Return at once (status queued or in_progress) and run on; read or "
        "subscribe to the response's resource to follow it. Without it the tool returns "
        "when the response has ended.",
    )


class ResponseInput(ToolInput):
    response_id: str = Field(min_length=1)


class ChangeResponseInput(Changing):
    response_id: str = Field(min_length=1)


class ListInputItemsInput(ToolInput):
    response_id: str = Field(min_length=1)
    after: str | None = Field(default=None, description="List the items after this item id.")
    limit: Limit = 20
    order: Order = "desc"


class CreateConversationInput(Changing):
    items: list[dict[str, Any]] = Field(default_factory=list, description="Initial items.")
    metadata: dict[str, str] = Field(default_factory=dict)


class ConversationInput(ToolInput):
    conversation_id: str = Field(min_length=1)


class ChangeConversationInput(Changing):
    conversation_id: str = Field(min_length=1)


class UpdateConversationInput(Changing):
    conversation_id: str = Field(min_length=1)
    metadata: dict[str, str] = Field(description="Replaces the conversation's metadata.")


class AddConversationItemsInput(Changing):
    conversation_id: str = Field(min_length=1)
    items: list[dict[str, Any]] = Field(min_length=1)


class ListConversationItemsInput(ToolInput):
    conversation_id: str = Field(min_length=1)
    after: str | None = Field(default=None, description="List the items after this item id.")
    limit: Limit = 20
    order: Order = "desc"


class ConversationItemInput(ToolInput):
    conversation_id: str = Field(min_length=1)
    item_id: str = Field(min_length=1)


class ChangeConversationItemInput(Changing):
    conversation_id: str = Field(min_length=1)
    item_id: str = Field(min_length=1)
