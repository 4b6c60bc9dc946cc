"""Claude Code's late MCP tools as mid-conversation tool changes, through the gateway.

An MCP server whose tools arrive after the session's first request is surfaced by Claude
Code 2.1.337 (its ``mcp_late_tool_additions``) with a ``role: "system"`` message: a line
naming the tools, then a ``tool_addition`` block for each (beta
``mid-conversation-tool-changes-2026-07-01``), by reference to the tool it now declares
deferred in ``tools``, or, with ``CLAUDE_CODE_INLINE_TOOLS=1`` (beta
``inline-tools-2026-09-15``), by value. Refused (a 400 naming the block), it gives the
beta up until ``/clear`` and sends the tools inline instead: so every request must be
answered 2xx and keep the beta, and the model must be offered the late tool.

Made to happen: ``CLAUDE_CODE_MCP_STARTUP_WAIT_MS=0`` (the first request does not wait for
MCP servers), ToolSearch disallowed (with it, late tools are announced for ToolSearch
instead), and a server that serves only once the first answer's Bash call releases it
(``late_mcp_server.py``); the call ends once the server has listed its tool, and the fake
model's second round (``[[rounds:2]]``) leaves Claude Code a round trip to take it in.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code import MESSAGES_PATH, run_claude
from tests.clients.offline import GatewayPool

pytestmark = pytest.mark.clients

SERVER = Path(__file__).with_name("late_mcp_server.py")
LATE_TOOL = "mcp__late__late_echo"
TOOL_CHANGES = "mid-conversation-tool-changes-2026-07-01"
INLINE_TOOLS = "inline-tools-2026-09-15"


@pytest.mark.parametrize(("api", "by"), [("chat", "reference"), ("anthropic", "value")])
def test_late_mcp_tools_are_offered_through_tool_additions(
    claude_binary: Path, gateways: GatewayPool, tmp_path: Path, api: str, by: str
) -> None:
    gateway = gateways.get(api)
    go, listed = tmp_path / "go", tmp_path / "listed"
    os.mkfifo(go)
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(SERVER), str(go), str(listed)],
    }
    wait = f"until [ -e {shlex.quote(str(listed))} ]; do sleep 0.1; done"
    release = f"exec 3<>{shlex.quote(str(go))}; echo go >&3; timeout 30 sh -c {shlex.quote(wait)}"
    call = json.dumps({"command": release, "description": "Start the late MCP server"})
    env = {"CLAUDE_CODE_MCP_STARTUP_WAIT_MS": "0"}
    if by == "value":
        env["CLAUDE_CODE_INLINE_TOOLS"] = "1"
    gateway.take_upstream_requests()  # forget an earlier test's
    run = run_claude(
        claude_binary,
        gateway,
        f"Wait for the server [[rounds:2]] [[tool:Bash:{call}]]",
        tmp_path,
        ("Bash",),
        extra_env=env,
        extra_args=(
            "--mcp-config",
            json.dumps({"mcpServers": {"late": server}}),
            "--strict-mcp-config",
            "--disallowedTools",
            "ToolSearch",
        ),
    )
    log = gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"
    sent = [r for r in run.requests if (r["method"], r["path"]) == ("POST", MESSAGES_PATH)]
    for request in sent:
        assert 200 <= (request["status"] or 0) < 300, f"{run.describe()}\ngateway log:\n{log}"
        betas = request["headers"]["anthropic-beta"].split(",")
        assert TOOL_CHANGES in betas, run.describe()  # kept: never refused
        assert (INLINE_TOOLS in betas) is (by == "value"), run.describe()

    first, *_, last = run.bodies()
    assert LATE_TOOL not in _declared(first), "the server was not late"
    [addition] = [b for b in _changes(last) if _named(b["tool"]) == LATE_TOOL]
    assert addition["type"] == "tool_addition"
    if by == "reference":
        assert addition["tool"] == {"type": "tool_reference", "name": LATE_TOOL}
        assert _declared(last)[LATE_TOOL].get("defer_loading") is True
    else:
        assert addition["tool"]["type"] == "tool_definition"
        assert addition["tool"]["definition"]["input_schema"]["properties"]["text"]
        assert LATE_TOOL not in _declared(last)

    *_, upstream = gateway.take_upstream_requests()
    tools = upstream["body"].get("tools") or []
    names = [tool["function"]["name"] if api == "chat" else tool["name"] for tool in tools]
    assert LATE_TOOL in names, names
    assert "tool_addition" not in json.dumps(upstream["body"])


def _declared(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool for tool in body.get("tools") or []}


def _changes(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool change blocks of a request's system messages."""
    return [
        block
        for message in body["messages"]
        if message["role"] == "system" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] in ("tool_addition", "tool_removal")
    ]


def _named(tool: dict[str, Any]) -> str | None:
    if tool["type"] == "tool_definition":
        return str(tool["definition"]["name"])
    return tool.get("name")
