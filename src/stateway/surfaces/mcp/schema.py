"""The MCP tools as ``tools/list`` lists them (input schemas, annotations) in one JSON
document, checked into the repository as ``schemas/mcp-tools.json`` by
:mod:`stateway.schemas` (a test fails when it drifts from the models; regenerate with
``python -m stateway.schemas``)."""

from __future__ import annotations

from typing import Any

from stateway.surfaces.mcp.tools import TOOLS


def tool_schemas() -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.input.model_json_schema(),
                "annotations": tool.effect.annotations(),
            }
            for tool in TOOLS.values()
        ]
    }
