"""The MCP tools' inputs: every tool that changes something takes a command id (their
checked-in schema is compared by ``tests/test_schemas.py``)."""

from __future__ import annotations

from stateway.surfaces.mcp.tools import TOOLS


def test_every_tool_that_changes_something_takes_a_command_id() -> None:
    changing = {
        "create_response",
        "cancel_response",
        "delete_response",
        "create_conversation",
        "update_conversation",
        "delete_conversation",
        "add_conversation_items",
        "delete_conversation_item",
    }
    takes_id = {n for n, t in TOOLS.items() if "command_id" in t.input.model_fields}
    assert takes_id == changing
