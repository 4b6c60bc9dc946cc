"""A ``tools/call`` result as the model reads it, and as a failure when the tool reported an
error (``isError``): in memory, the SDK's result types built here."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest
from pydantic import ValidationError

from stateway.core.tools.ports import ToolError, ToolFailure
from stateway.mcp_client.results import checked_text, input_required, result_text

TALLY = {"count": 3}


def result(
    *texts: str, structured: dict[str, int] | None = None, error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text) for text in texts],
        structured_content=structured,
        is_error=error,
    )


def test_content_is_read_before_the_structured_copy_beside_it() -> None:
    """Tools returning structured content send its text in ``content`` too (the MCP
    specification asks it of them): the model reads the content."""
    assert result_text(result("3 items", structured=TALLY)) == "3 items"
    assert result_text(result(structured=TALLY)) == '{"count":3}'


@pytest.mark.parametrize(
    ("reported", "error"),
    [
        (
            result("the disk is full", structured=TALLY, error=True),
            ToolError.execution([{"type": "text", "text": "the disk is full"}], "the disk is full"),
        ),
        (result(structured=TALLY, error=True), ToolError.execution(TALLY, '{"count":3}')),
        (result(error=True), ToolError.execution([], "the tool reported an error")),
    ],
    ids=["content", "structured-only", "nothing"],
)
def test_an_error_result_fails_with_its_content_or_else_its_structured_content(
    reported: types.CallToolResult, error: ToolError
) -> None:
    with pytest.raises(ToolFailure) as failure:
        checked_text(reported)
    assert failure.value.error == error


def refused(answer: dict[str, Any]) -> ValidationError:
    """What the SDK raises for ``answer`` checked as a ``CallToolResult``."""
    with pytest.raises(ValidationError) as failure:
        types.CallToolResult.model_validate(answer)
    return failure.value


def test_only_a_result_itself_asking_for_input_is_told_apart_from_a_malformed_one() -> None:
    """The result's own ``resultType`` asks for input; an object inside it saying so (a
    malformed content block) leaves it a reply that is not MCP."""
    asking = {"resultType": "input_required", "inputRequests": {}}
    block = {"type": "text", "text": 1, "resultType": "input_required"}

    assert input_required(refused(asking))
    assert not input_required(refused({"content": [block]}))
    assert not input_required(refused({"content": {"resultType": "input_required"}}))
