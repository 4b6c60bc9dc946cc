"""The MCP tools' input schemas checked into ``schemas/mcp-tools.json`` are the models'."""

from __future__ import annotations

from pathlib import Path

from stateway.surfaces.mcp.schema import render
from stateway.surfaces.mcp.tools import TOOLS

CHECKED_IN = Path(__file__).parents[3] / "schemas" / "mcp-tools.json"


def test_the_checked_in_schema_is_what_the_models_generate() -> None:
    assert CHECKED_IN.read_bytes() == render(), (
        "schemas/mcp-tools.json drifted from the tool input models; regenerate it with "
        "`python -m stateway.surfaces.mcp.schema > schemas/mcp-tools.json`"
    )


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
