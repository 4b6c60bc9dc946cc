"""MCP wire results -> what the core's tool ports carry: ``tools/list`` entries become
:class:`McpTool`, a ``tools/call`` result becomes the text the model reads (one with
``isError`` an ``execution`` :class:`ToolError` carrying its content; one asking for input
first is told apart from a reply that is not MCP: :func:`input_required`)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import orjson
from pydantic import ValidationError

from stateway.core.tools.ports import McpTool, ToolError, ToolFailure

INPUT_REQUIRED = "input_required"
"""The ``resultType`` of an ``InputRequiredResult``."""


def from_wire_tool(tool: types.Tool) -> McpTool:
    annotations = (
        tool.annotations.model_dump(by_alias=True, mode="json", exclude_none=True)
        if tool.annotations is not None
        else None
    )
    return McpTool(
        name=tool.name,
        input_schema=tool.input_schema,
        description=tool.description,
        annotations=annotations,
    )


def result_text(result: types.CallToolResult) -> str:
    """Text contents joined with newlines, any other content as its compact JSON; the
    structured content when there is no content at all."""
    if not result.content and result.structured_content is not None:
        return _json(result.structured_content)
    return "\n".join(
        block.text if isinstance(block, types.TextContent) else _json(_block(block))
        for block in result.content
    )


def checked_text(result: types.CallToolResult) -> str:
    """:func:`result_text`, or :class:`ToolFailure` when the tool reported an error: an
    ``execution`` error whose content is the result's content blocks as JSON (its
    structured content when it has no blocks), its message that text."""
    text = result_text(result)
    if result.is_error:
        content: Any = [_block(block) for block in result.content]
        if not content and result.structured_content is not None:
            content = result.structured_content
        raise ToolFailure(ToolError.execution(content, text or "the tool reported an error"))
    return text


def input_required(refused: ValidationError) -> bool:
    """Whether a ``tools/call`` result the SDK ``refused`` (checked against the negotiated
    revision's ``CallToolResult`` before any caller sees it) is an ``InputRequiredResult``:
    MCP 2026-07-28's answer asking for input first (``resultType: "input_required"``),
    which a server written for that revision sends on any session. A well-formed answer,
    then, not a reply that is not MCP. Only the result's own ``resultType`` counts: the
    error of a field it lacks (its ``content``) is the one whose ``input`` is the result
    itself; an object inside it saying so (a malformed content block) does not."""
    return any(
        error["type"] == "missing"
        and len(error["loc"]) == 1
        and isinstance(found := error.get("input"), dict)
        and found.get("resultType") == INPUT_REQUIRED
        for error in refused.errors()
    )


def _block(block: types.ContentBlock) -> dict[str, Any]:
    return block.model_dump(by_alias=True, mode="json", exclude_none=True)


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
