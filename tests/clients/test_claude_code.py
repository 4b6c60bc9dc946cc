"""The real Claude Code CLI, offline, through the gateway's Messages frontend.

Over a Chat Completions upstream whose chat template takes a system message only first (as
many open models' do on vLLM) and over a Messages upstream: a plain turn, and a Bash tool
round trip — the fake model calls Claude Code's ``Bash`` tool, Claude Code runs the
command and sends its output back as a ``tool_result``, and the fake's final answer quotes
that output; and a WebSearch, whose search the gateway runs with its provider for the fake
model, answered as Anthropic answers its own. The recording hop shows what Claude Code
really sent, so an upgrade that changes its wire shows up here by name. Every request must
be answered 2xx: on a 400 Claude Code silently resends with fewer betas and tools, so a
wrong 400 would otherwise pass unnoticed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code import MESSAGES_PATH, TOKEN, VERSION, ClaudeRun, run_claude
from tests.clients.offline import GatewayPool, OfflineGateway

pytestmark = pytest.mark.clients

PROMPT = "Say hello to the gateway"
COMMAND = "echo stateway-$((6*7))"
"""Its output, ``stateway-42``, appears nowhere in the prompt: only running it gives it."""
OUTPUT = "stateway-42"


def _claude(
    claude_binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    tmp_path: Path,
    allowed_tools: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> ClaudeRun:
    run = run_claude(claude_binary, gateway, prompt, tmp_path, allowed_tools, extra_env)
    log = gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"
    assert run.requests, run.describe()
    for request in run.requests:
        assert (request["method"], request["path"]) == ("POST", MESSAGES_PATH), run.describe()
        assert 200 <= (request["status"] or 0) < 300, f"{run.describe()}\ngateway log:\n{log}"
    assert run.result is not None, run.describe()
    assert run.result["subtype"] == "success", run.describe()
    assert run.result["is_error"] is False, run.describe()
    return run


def test_a_plain_turn(claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path) -> None:
    run = _claude(claude_binary, claude_gateway, PROMPT, tmp_path)

    assert run.result is not None
    answer = run.result["result"]
    assert answer.startswith("Hello! You said: ")  # the fake's answer to a prompt
    assert PROMPT in answer
    assert run.result["num_turns"] == 1
    [request] = run.requests
    _check_headers(request["headers"])
    _check_body(request["body"], PROMPT)


def _check_headers(headers: dict[str, str]) -> None:
    """The headers Claude Code 2.1.337 sends (see shared/clients.md)."""
    assert headers["anthropic-version"] == "2023-06-01"
    betas = headers["anthropic-beta"].split(",")
    assert "claude-code-20250219" in betas
    assert "interleaved-thinking-2025-05-14" in betas
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in headers
    assert headers["user-agent"].startswith(f"claude-cli/{VERSION} ")


def _check_body(body: dict[str, Any], prompt_text: str) -> None:
    """The first request of a turn: what Claude Code 2.1.337 declares and how it lays out
    the prompt (a user message led by a ``<system-reminder>`` block, then a
    ``role: "system"`` message with the environment)."""
    assert body["model"] == "fake-model"
    assert body["stream"] is True
    assert body["max_tokens"] == 32000
    assert body["thinking"]["type"] == "adaptive"
    assert body["output_config"]["effort"] in ("low", "medium", "high", "xhigh", "max")
    edits = {edit["type"] for edit in body["context_management"]["edits"]}
    assert "clear_thinking_20251015" in edits
    assert isinstance(body["metadata"]["user_id"], str)
    assert all(block["type"] == "text" for block in body["system"])
    assert any("cache_control" in block for block in body["system"])
    tools = {tool["name"]: tool for tool in body["tools"]}
    assert tools["Bash"]["input_schema"]["required"] == ["command"]
    assert any(tool.get("defer_loading") for tool in body["tools"])
    prompt, environment = body["messages"]
    assert prompt["role"] == "user"
    assert prompt["content"][0]["text"].startswith("<system-reminder>")
    assert prompt["content"][-1]["text"] == prompt_text
    assert environment["role"] == "system"
    assert environment["content"][0]["text"].startswith("# Environment")


def test_a_bash_tool_round_trip(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    arguments = json.dumps({"command": COMMAND, "description": "Print a marker"})
    prompt = f"Run it [[tool:Bash:{arguments}]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("Bash",))

    assert run.result is not None
    answer = run.result["result"]
    assert answer.startswith("Tool said: ")  # the fake's answer to a tool output
    assert OUTPUT in answer
    assert run.result["num_turns"] == 2
    assert run.result["permission_denials"] == []

    first, second = run.bodies()
    _check_body(first, prompt)
    prompt_turn, environment, call, result = second["messages"]
    assert prompt_turn == first["messages"][0]
    # The environment is a plain string from the second request on.
    assert environment["role"] == "system"
    assert json.dumps(environment["content"]).startswith('"# Environment')
    assert call["role"] == "assistant"
    [tool_use] = [block for block in call["content"] if block["type"] == "tool_use"]
    assert tool_use["name"] == "Bash"
    assert tool_use["input"]["command"] == COMMAND
    assert result["role"] == "user"
    tool_result = result["content"][0]
    assert tool_result["type"] == "tool_result"
    assert tool_result["tool_use_id"] == tool_use["id"]
    assert OUTPUT in json.dumps(tool_result["content"])
    assert not tool_result.get("is_error")


def test_parallel_tool_results_reach_the_model_in_the_order_of_the_calls(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code runs two Bash calls side by side and sends their ``tool_result``
    blocks as they finish: the quick one first. Many open models' chat templates tie a
    result to its call by position only (Qwen's, Llama's), so the model is given them in
    the order of the calls (``[[echo]]`` shows its context)."""
    slow = json.dumps({"command": "sleep 0.5; echo first-$((1+1))", "description": "Slow"})
    quick = json.dumps({"command": "echo second-$((2+2))", "description": "Quick"})
    prompt = f"Run both [[tool:Bash:{slow}]] [[tool:Bash:{quick}]] [[echo]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("Bash",))

    _, second = run.bodies()
    results = [b for b in second["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert [r["content"] for r in results] == ["second-4", "first-2"]  # as they finished
    assert run.result is not None
    seen = [line for line in run.result["result"].splitlines() if line.startswith("tool[")]
    assert [line.split("]: ")[1] for line in seen] == ["first-2", "second-4"]


def test_a_web_search_is_run_by_the_gateway(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code's WebSearch asks the API for a search with Anthropic's server tool
    (``web_search_20250305``) in a request of its own; here the fake model, told to by the
    directive inside the query, calls it, the gateway searches (the fake SearXNG), and
    Claude Code reads the results from the ``web_search_tool_result`` block."""
    inner = '[[tool:web_search:{"query":"stateway gateway"}]]'
    arguments = json.dumps({"query": f"{inner} stateway gateway"})
    prompt = f"Look it up [[tool:WebSearch:{arguments}]]"
    # Not deferred behind ToolSearch: the fake model can call WebSearch at once.
    no_tool_search = {"ENABLE_TOOL_SEARCH": "false"}
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("WebSearch",), no_tool_search)

    assert run.result is not None
    assert run.result["num_turns"] == 2
    answer = run.result["result"]
    assert answer.startswith("Tool said: ")
    # Claude Code lists the hits of the web_search_tool_result block as its "Links".
    first_hit = {"title": "stateway gateway (1)", "url": "https://example.com/stateway-gateway/1"}
    assert "Links: [" + json.dumps(first_hit, separators=(",", ":")) in answer

    [search] = [body for body in run.bodies() if _declares_web_search(body)]
    [tool] = search["tools"]
    assert (tool["type"], tool["name"]) == ("web_search_20250305", "web_search")
    assert isinstance(tool.get("max_uses"), int)
    assert search["messages"][0]["content"][0]["text"].startswith("Perform a web search")


def _declares_web_search(body: dict[str, Any]) -> bool:
    return any(tool.get("type") == "web_search_20250305" for tool in body.get("tools") or ())


def test_a_deferred_tool_is_loaded_by_tool_search(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code declares WebSearch (and other tools) deferred behind its own ToolSearch;
    loading one answers with a ``tool_reference`` block in the ``tool_result``. Refused, it
    would make Claude Code resend three times and then give up tool search."""
    arguments = json.dumps({"query": "select:WebSearch", "max_results": 3})
    prompt = f"Load it [[tool:ToolSearch:{arguments}]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("ToolSearch",))

    assert run.result is not None
    assert run.result["num_turns"] == 2
    first, second = run.bodies()  # every request answered 2xx: none was resent
    assert "WebSearch" not in {tool["name"] for tool in first["tools"]}
    assert "WebSearch" in {tool["name"] for tool in second["tools"]}
    [result] = [
        block for block in second["messages"][-1]["content"] if block.get("type") == "tool_result"
    ]
    assert {"type": "tool_reference", "tool_name": "WebSearch"} in result["content"]
    assert run.result["result"].startswith("Tool said: Tool loaded: WebSearch")


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""


def test_reading_an_image_sends_it_to_the_model(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code's Read of an image answers with an ``image`` block in the
    ``tool_result``; a Chat Completions upstream takes images only in user messages, so the
    gateway sends it in one after the tool message (it was a 400, which Claude Code
    resent until it gave up)."""
    picture = tmp_path / "cwd" / "dot.png"
    picture.parent.mkdir()
    picture.write_bytes(PNG)
    prompt = f"Look [[tool:Read:{json.dumps({'file_path': str(picture)})}]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("Read",))

    assert run.result is not None
    assert run.result["num_turns"] == 2
    _, second = run.bodies()
    [result] = [b for b in second["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert [block["type"] for block in result["content"]] == ["image"]


def test_a_pdf_a_chat_upstream_cannot_take_is_left_out_and_the_turn_goes_on(
    claude_binary: Path, gateways: GatewayPool, tmp_path: Path
) -> None:
    """Claude Code's Read of a PDF answers with a ``document`` block in the
    ``tool_result``; a Chat Completions upstream takes no documents. The gateway refuses
    it as Anthropic refuses a PDF its model cannot read, naming the block, on which Claude
    Code leaves it out (telling the model) and sends the request again: one 400, and the
    turn goes on. Worded otherwise, Claude Code resent it unchanged until it gave up, and
    every later request of the session failed alike."""
    gateway = gateways.get("chat")
    pdf = tmp_path / "cwd" / "tiny.pdf"
    pdf.parent.mkdir()
    pdf.write_bytes(b"%PDF-1.4\n%%EOF\n")
    prompt = f"Read it [[tool:Read:{json.dumps({'file_path': str(pdf)})}]]"
    run = run_claude(claude_binary, gateway, prompt, tmp_path, ("Read",))
    answer = _left_out_once(run, ["text", "document"], ["text", "text"])  # then the note
    assert answer.startswith("Tool said: PDF file read:"), answer
    assert "[Document removed: this model does not accept whole PDF documents." in answer


def test_an_image_a_text_only_model_refuses_is_left_out_and_the_turn_goes_on(
    claude_binary: Path, text_only_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """The model takes no images (vLLM's ``... is not a multimodal model``): the gateway
    names the image block of Claude Code's Read as Anthropic names a block its model cannot
    read, on which Claude Code leaves it out (telling the model) and sends the request
    again. Passed on in the model server's words, it ended the turn, and every later
    request of the session failed alike."""
    picture = tmp_path / "cwd" / "dot.png"
    picture.parent.mkdir()
    picture.write_bytes(PNG)
    prompt = f"Look [[tool:Read:{json.dumps({'file_path': str(picture)})}]]"
    run = run_claude(claude_binary, text_only_gateway, prompt, tmp_path, ("Read",))
    answer = _left_out_once(run, ["image"], ["text"])  # the image, then Claude Code's note
    assert answer.startswith("Tool said: [Image removed:"), answer
    assert "does not support image input" in answer


def _left_out_once(run: ClaudeRun, refused: list[str], resent: list[str]) -> str:
    """The answer of a turn whose tool result held a block the gateway refused by its
    path: one 400, then the request sent again with the tool result's blocks of kinds
    ``resent`` in place of ``refused``, and the turn ended well."""
    assert run.returncode == 0, run.describe()
    assert [request["status"] for request in run.requests] == [200, 400, 200], run.describe()
    _, first, again = run.bodies()
    kinds = [
        [b["type"] for b in body["messages"][-1]["content"][0]["content"]]
        for body in (first, again)
    ]
    assert kinds == [refused, resent]
    assert run.result is not None
    assert run.result["is_error"] is False, run.describe()
    return str(run.result["result"])


def test_thinking_it_asked_without_text_still_reaches_the_model(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code asks for ``thinking: {type: "adaptive", display: "omitted"}``: the
    thinking block comes without its text and with a signature that carries it (the
    gateway's seal over a Chat upstream; Anthropic's own, asked with the same display, over
    a Messages upstream, sealed over by the gateway). Claude Code sends the block back with
    the tool's output, and the model's next context (``[[echo]]``) holds its reasoning."""
    arguments = json.dumps({"command": COMMAND, "description": "Print a marker"})
    prompt = f"Run it [[reason:plan-xyz]] [[echo]] [[tool:Bash:{arguments}]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("Bash",))

    first, second = run.bodies()
    assert first["thinking"] == {"type": "adaptive", "display": "omitted"}
    [thinking] = [b for b in second["messages"][2]["content"] if b["type"] == "thinking"]
    assert thinking["thinking"] == ""
    assert thinking["signature"].startswith("sw1.")  # an upstream's own is sealed over too
    assert run.result is not None
    seen = run.result["result"].splitlines()
    assert seen[seen.index("reasoning: plan-xyz") + 1].startswith("assistant->Bash(")
    assert OUTPUT in run.result["result"]


def test_a_sub_agent_sends_its_own_requests_through_the_gateway(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """The fake calls Claude Code's Agent tool: Claude Code starts a sub-agent (in the
    background) whose own requests (its own system prompt and tools) go through the
    gateway too; its answer reaches the main agent in a task notification, which the main
    agent answers before the run ends. Every request 2xx."""
    arguments = {"description": "Greet", "prompt": "Say hi from below"}
    arguments["subagent_type"] = "general-purpose"
    prompt = f"Delegate [[tool:Agent:{json.dumps(arguments)}]]"
    run = _claude(claude_binary, claude_gateway, prompt, tmp_path, ("Agent",))

    assert run.result is not None
    assert run.result["subagent_stats"]["completed"] == 1
    bodies = run.bodies()
    [sub] = [b for b in bodies if "Delegate [[tool:Agent" not in json.dumps(b["messages"][0])]
    assert "Say hi from below" in json.dumps(sub["messages"])
    notified = json.dumps(bodies[-1]["messages"][-1])
    assert "<task-notification>" in notified
    assert "Hello! You said:" in notified  # the sub-agent's answer, from the fake


def test_the_gateways_own_mcp_tools_are_usable_from_claude_code(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    """The gateway's MCP surface as Claude Code adds it (``--mcp-config``, streamable
    HTTP): it discovers the server, lists the tools and calls one that the fake model
    asks for; the call's result (a conversation the gateway created) reaches the model."""
    config = {"mcpServers": {"stateway": {"type": "http", "url": f"{claude_gateway.url}/mcp"}}}
    arguments = json.dumps({"metadata": {"topic": "from-claude-code"}})
    prompt = f"Open one [[tool:mcp__stateway__create_conversation:{arguments}]]"
    run = run_claude(
        claude_binary,
        claude_gateway,
        prompt,
        tmp_path,
        ("mcp__stateway__create_conversation",),
        extra_args=("--mcp-config", json.dumps(config), "--strict-mcp-config"),
    )
    log = claude_gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"
    for request in run.requests:
        assert 200 <= (request["status"] or 0) < 300, f"{run.describe()}\ngateway log:\n{log}"
    calls = [r["body"] for r in run.requests if r["path"] == "/mcp" and r["method"] == "POST"]
    methods = [call.get("method") for call in calls if isinstance(call, dict)]
    # Claude Code speaks the 2026-07-28 generation (``server/discover``, no session).
    assert methods[0] in ("server/discover", "initialize"), run.describe()
    assert "tools/list" in methods, run.describe()
    assert "tools/call" in methods, run.describe()

    assert all("origin" not in r["headers"] for r in run.requests)  # the Origin check's
    _, second = run.bodies()  # MCP tools are deferred: the model calls them by name
    tool_use = next(b for b in second["messages"][-2]["content"] if b["type"] == "tool_use")
    assert tool_use["name"] == "mcp__stateway__create_conversation"
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result", result
    assert not result.get("is_error"), result
    text = json.dumps(result["content"])
    assert "conv_" in text, text
    assert "from-claude-code" in text
    assert run.result is not None
    assert run.result["result"].startswith("Tool said: ")
