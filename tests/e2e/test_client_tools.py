"""Client-owned tool types through the real gateway, the ``openai`` SDK and the fake model."""

from __future__ import annotations

from typing import Any

from openai import OpenAI

MODEL = "fake-model"
EXEC_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
WEB_SEARCH_HINT: dict[str, Any] = {"type": "web_search", "external_web_access": False}


def test_a_web_search_hint_is_left_out(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="hi",
        tools=[EXEC_TOOL, WEB_SEARCH_HINT],  # type: ignore[list-item]
    )
    assert response.status == "completed"
    assert [tool.type for tool in response.tools] == ["function"]
