"""The real Codex CLI running its own tool search through the gateway: with a catalog model
Codex declares ``tool_search`` (``execution: "client"``); the fake model calls it, Codex
searches its deferred tools and answers with a ``tool_search_output``, and the model is
told which tools it loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.codex import run_codex
from tests.clients.offline import OfflineGateway

pytestmark = pytest.mark.clients


def test_codex_answers_a_tool_search_with_the_tools_it_loads(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    prompt = 'Find tools [[tool:tool_search:{"query":"spawn sub-agents","limit":3}]]'
    run = run_codex(codex_binary, gateway, prompt, "gpt-5.5", tmp_path)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"

    first, second = run.bodies()
    [declared] = [tool for tool in first["tools"] if tool["type"] == "tool_search"]
    assert declared["execution"] == "client"
    call, output = second["input"][len(first["input"]) :]
    assert call["type"] == "tool_search_call"
    assert (call["execution"], call["status"]) == ("client", "completed")
    assert call["arguments"] == {"query": "spawn sub-agents", "limit": 3}
    assert output["type"] == "tool_search_output"
    assert output["call_id"] == call["call_id"]
    [namespace] = output["tools"]
    assert namespace["name"] == "multi_agent_v1"
    loaded = [f"multi_agent_v1__{tool['name']}" for tool in namespace["tools"]]
    [message] = run.items("agent_message")
    assert (
        message["text"] == f"Tool said: Loaded tools: {', '.join(loaded)}. They can be called now."
    )
