"""The MCP tools' input schemas as one JSON document, checked into the repository as
``schemas/mcp-tools.json`` (a test fails when it drifts from the models). Regenerate it
with ``python -m stateway.surfaces.mcp.schema > schemas/mcp-tools.json``."""

from __future__ import annotations

import sys
from typing import Any

import orjson

from stateway.surfaces.mcp.tools import TOOLS


def tool_schemas() -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.input.model_json_schema(),
            }
            for tool in TOOLS.values()
        ]
    }


def render() -> bytes:
    return orjson.dumps(tool_schemas(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


if __name__ == "__main__":
    sys.stdout.buffer.write(render())
