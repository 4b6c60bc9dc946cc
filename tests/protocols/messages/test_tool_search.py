"""A gateway tool search as Anthropic's blocks, and back."""

from __future__ import annotations

import pytest

from stateway.protocols.messages import tool_search


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ("invalid_tool_input: The pattern is bad.", ("invalid_tool_input", "The pattern is bad.")),
        ("execution_time_exceeded: Too slow.", ("execution_time_exceeded", "Too slow.")),
        ("unavailable", ("unavailable", None)),
        (
            "A tool search needs a non-empty 'query'.",
            ("invalid_tool_input", "A tool search needs a non-empty 'query'."),
        ),
        (None, ("invalid_tool_input", None)),
    ],
)
def test_a_failed_search_shows_its_code_and_message(
    error: str | None, shown: tuple[str, str | None]
) -> None:
    item = {"id": "tso_1", "type": "tool_search_output", "status": "incomplete", "error": error}
    block = tool_search.block(item, "tool_search_tool_regex")
    assert block["tool_use_id"] == "srvtoolu_1"
    content = block["content"]
    assert content["type"] == "tool_search_tool_result_error"
    assert (content["error_code"], content["error_message"]) == shown
