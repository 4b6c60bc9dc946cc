"""The real Codex CLI, offline, with its default tool settings, through the gateway.

For three model names — a custom one, a catalog one and Codex's built-in default, each of
which makes Codex declare its tools differently — a plain turn and a shell tool round trip:
the fake model calls Codex's shell tool, Codex runs the command and sends its output back,
and the fake's final answer quotes that output; and a web search the gateway runs. The
recording hop shows what Codex really sent, so a Codex upgrade that changes its wire shows
up here by name.
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.clients.codex import DEFAULT_MODEL, CodexRun, run_codex
from tests.clients.offline import GatewayPool, OfflineGateway, inside

pytestmark = pytest.mark.clients

COMMAND = "echo stateway-$((6*7))"
"""Its output, ``stateway-42``, appears nowhere in the prompt: only running it gives it."""
OUTPUT = "stateway-42"


@dataclass(frozen=True)
class Model:
    name: str | None
    """``-c model=NAME``; None: Codex's built-in default."""
    sent_as: str
    """The model name Codex puts in its requests."""
    shell_call: str
    """The model-visible function the fake calls to run :data:`COMMAND`."""
    shell_arguments: str


_EXEC_SCRIPT = f'const r = await tools.exec_command({{cmd: "{COMMAND}"}});\ntext(r.output);'
MODELS = {
    # Custom name: function tools at the top level (exec_command takes {cmd}).
    "custom": Model("fake-model", "fake-model", "exec_command", json.dumps({"cmd": COMMAND})),
    # Catalog name: the same shell function, plus a custom apply_patch and tool_search.
    "catalog": Model("gpt-5.5", "gpt-5.5", "exec_command", json.dumps({"cmd": COMMAND})),
    # Built-in default: no top-level tools; an additional_tools item whose namespace
    # "functions" holds a custom "exec" tool taking JavaScript, which reaches the model as
    # the function functions__exec({"input": ...}) and calls the shell tool itself.
    "default": Model(None, DEFAULT_MODEL, "functions__exec", json.dumps({"input": _EXEC_SCRIPT})),
}


def _codex(
    codex_binary: Path, gateway: OfflineGateway, model: Model, prompt: str, tmp_path: Path
) -> CodexRun:
    run = run_codex(codex_binary, gateway, prompt, model.name, tmp_path)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"
    failures = [e for e in run.events if e.get("type") in ("error", "turn.failed")]
    assert not failures, run.describe()
    assert run.events[-1]["type"] == "turn.completed", run.describe()
    return run


def test_the_namespace_has_no_interface_but_loopback(namespace: str) -> None:
    links = subprocess.run(
        inside(namespace, ["ip", "-o", "link"]), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line.split(":")[1].strip() for line in links] == ["lo"]


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
def test_a_plain_turn(
    codex_binary: Path, gateway: OfflineGateway, model: Model, tmp_path: Path
) -> None:
    run = _codex(codex_binary, gateway, model, "Say hi", tmp_path)

    assert [item["text"] for item in run.items("agent_message")] == ["Hello! You said: Say hi"]
    [body] = run.bodies()
    assert body["model"] == model.sent_as
    assert body["stream"] is True
    assert body["store"] is False
    _check_declared_tools(model, body)


def _check_declared_tools(model: Model, body: dict[str, Any]) -> None:
    """The tool shapes Codex 0.171.0 declares with default settings (see clients.md)."""
    tools = {(tool["type"], tool.get("name")) for tool in body.get("tools") or []}
    extra = [item for item in body["input"] if item.get("type") == "additional_tools"]
    if model.name is None:
        assert tools == set()
        [item] = extra
        namespaces = {tool["name"]: tool for tool in item["tools"]}
        members = {(t["type"], t["name"]) for t in namespaces["functions"]["tools"]}
        assert ("custom", "exec") in members
        return
    assert extra == []
    assert ("function", "exec_command") in tools
    # With its sandbox bypassed Codex asks for live search, which needs a provider.
    [search] = [tool for tool in body["tools"] if tool["type"] == "web_search"]
    assert search["external_web_access"] is True
    if model.name == "gpt-5.5":
        assert ("custom", "apply_patch") in tools
        [tool_search] = [tool for tool in body["tools"] if tool["type"] == "tool_search"]
        assert tool_search["execution"] == "client"


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
def test_a_shell_tool_round_trip(
    codex_binary: Path, gateway: OfflineGateway, model: Model, tmp_path: Path
) -> None:
    prompt = f"Run it [[tool:{model.shell_call}:{model.shell_arguments}]]"
    run = _codex(codex_binary, gateway, model, prompt, tmp_path)

    [command] = run.items("command_execution")
    assert COMMAND in command["command"]
    assert command["exit_code"] == 0
    assert command["aggregated_output"] == OUTPUT + "\n"
    [message] = run.items("agent_message")
    assert message["text"].startswith("Tool said: ")  # the fake's answer to a tool output
    assert OUTPUT in message["text"]

    first, second = run.bodies()
    assert second["input"][: len(first["input"])] == first["input"]  # full history resent
    call, output = second["input"][len(first["input"]) :]
    assert output["call_id"] == call["call_id"]
    assert OUTPUT in json.dumps(output["output"])
    if model.name is None:
        assert call["type"] == "custom_tool_call"
        assert (call["namespace"], call["name"]) == ("functions", "exec")
        assert call["input"] == _EXEC_SCRIPT
        assert output["type"] == "custom_tool_call_output"
    else:
        assert call["type"] == "function_call"
        assert call["name"] == "exec_command"
        assert json.loads(call["arguments"]) == {"cmd": COMMAND}
        assert output["type"] == "function_call_output"


def test_with_its_sandbox_bypassed_codex_works_without_a_web_search_provider(
    codex_binary: Path, gateway_without_search: OfflineGateway, tmp_path: Path
) -> None:
    """Codex declares ``web_search`` with ``external_web_access`` (``true`` when its sandbox
    is bypassed): on a gateway without a provider that is an optional hint, neither offered
    to the model nor echoed, and the turn succeeds."""
    run = run_codex(codex_binary, gateway_without_search, "Say hi", "fake-model", tmp_path)

    assert run.returncode == 0, run.describe()
    [message] = run.items("agent_message")
    assert message["text"]
    [body] = run.bodies()
    [search] = [tool for tool in body["tools"] if tool["type"] == "web_search"]
    assert search["external_web_access"] is True


def test_a_web_search_runs_in_the_gateway_and_codex_shows_it(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Codex declares live ``web_search``; the fake model calls it, the gateway searches
    with its provider (the fake SearXNG in the namespace) inside the same response, and
    Codex shows the ``web_search_call`` as its ``web_search`` item, then the answer built
    on the results: one request."""
    prompt = 'Find it [[tool:web_search:{"query":"stateway gateway"}]]'
    run = _codex(codex_binary, gateway, MODELS["custom"], prompt, tmp_path)

    [search] = run.items("web_search")
    assert search["query"] == "stateway gateway"
    assert search["id"].startswith("ws_")
    [message] = run.items("agent_message")
    assert "https://example.com/stateway-gateway/1" in message["text"]
    assert len(run.bodies()) == 1


def test_an_apply_patch_round_trip_edits_the_workspace(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """With a catalog model Codex declares ``apply_patch`` as a custom tool (a grammar):
    the fake model calls it (through the function the gateway offers in its place), Codex
    gets a ``custom_tool_call`` with the raw patch, applies it, and answers with a
    ``custom_tool_call_output``."""
    patch = f"*** Begin Patch\n*** Add File: hello.txt\n+{OUTPUT}\n*** End Patch\n"
    prompt = "Patch it [[tool:apply_patch:" + json.dumps({"input": patch}) + "]]"
    run = _codex(codex_binary, gateway, MODELS["catalog"], prompt, tmp_path)

    [change] = run.items("file_change")
    assert change["status"] == "completed"
    assert [c["kind"] for c in change["changes"]] == ["add"]
    assert (tmp_path / "hello.txt").read_text() == OUTPUT + "\n"
    first, second = run.bodies()
    call, output = second["input"][len(first["input"]) :]
    assert (call["type"], call["name"], call["input"]) == ("custom_tool_call", "apply_patch", patch)
    assert output["type"] == "custom_tool_call_output"
    assert output["call_id"] == call["call_id"]


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""


def test_view_image_sends_the_image_to_the_model(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Codex's ``view_image`` answers with an ``input_image`` in its
    ``function_call_output``: a Chat Completions upstream gets it in a user message after
    the tool message (it was a 400); a Responses upstream as it is."""
    (tmp_path / "dot.png").write_bytes(PNG)
    prompt = "Look [[tool:view_image:" + json.dumps({"path": str(tmp_path / "dot.png")}) + "]]"
    run = _codex(codex_binary, gateway, MODELS["catalog"], prompt, tmp_path)

    [message] = run.items("agent_message")
    assert "<image>" in message["text"]  # the fake saw an image part
    first, second = run.bodies()
    call, output = second["input"][len(first["input"]) :]
    assert call["name"] == "view_image"
    [image] = output["output"]
    assert image["type"] == "input_image"
    assert image["image_url"].startswith("data:image/png;base64,")


def test_the_gateways_own_mcp_tools_are_usable_from_codex(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """The gateway's MCP surface as a streamable HTTP MCP server of Codex's
    (``mcp_servers.NAME.url``): Codex opens a session (2025-11-25: ``initialize``, its
    notification stream, ``DELETE`` at the end), declares the server's tools to the model
    as the namespace ``mcp__stateway``, and calls the one the fake model asks for; the
    conversation the gateway created comes back to the model. ``required``: Codex waits
    for the server before its first request (without it, on a busy machine, that request
    could go out before the server's tools were listed, and the call was unknown)."""
    server = f'mcp_servers.stateway={{url="{gateway.url}/mcp",required=true}}'
    arguments = json.dumps({"metadata": {"topic": "from-codex"}})
    prompt = f"Open one [[tool:mcp__stateway__create_conversation:{arguments}]]"
    run = run_codex(codex_binary, gateway, prompt, "fake-model", tmp_path, config=(server,))
    log = gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"
    for request in run.requests:
        assert 200 <= (request["status"] or 0) < 300, f"{run.describe()}\ngateway log:\n{log}"
    calls = [r["body"] for r in run.requests if r["path"] == "/mcp" and r["method"] == "POST"]
    methods = [call.get("method") for call in calls if isinstance(call, dict)]
    assert methods[0] == "initialize", run.describe()
    assert "tools/call" in methods, run.describe()
    assert all("origin" not in r["headers"] for r in run.requests)  # the Origin check's

    [call] = [
        e["item"]
        for e in run.events
        if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"
    ]
    assert call["tool"] == "create_conversation", run.describe()
    assert call["status"] == "completed", run.describe()
    assert call["result"]["structured_content"]["object"] == "conversation"
    assert call["result"]["structured_content"]["metadata"] == {"topic": "from-codex"}
    first = next(r["body"] for r in run.requests if r["path"] == "/v1/responses")
    assert "mcp__stateway" in {tool.get("name") for tool in first["tools"]}
    answer = run.events[-2]["item"]
    assert answer["type"] == "agent_message", run.describe()
    assert answer["text"].startswith("Tool said: ")
    assert '"object":"conversation"' in answer["text"]


def test_an_anthropic_upstream_caches_codexs_turns(
    codex_binary: Path, gateways: GatewayPool, tmp_path: Path
) -> None:
    """Codex marks nothing (hosted OpenAI caches unasked): each request of its agent loop
    reaches an Anthropic upstream with Anthropic's automatic caching, which the fake (as
    strict as Anthropic about marks) takes."""
    gateway = gateways.get("anthropic")
    gateway.take_upstream_requests()  # forget an earlier test's
    model = MODELS["custom"]
    prompt = f"Run it [[tool:{model.shell_call}:{model.shell_arguments}]]"
    run = _codex(codex_binary, gateway, model, prompt, tmp_path)
    assert OUTPUT in run.items("agent_message")[0]["text"]
    sent = gateway.take_upstream_requests()
    assert [(r["path"], r["body"]["cache_control"]) for r in sent] == [
        ("/v1/messages", {"type": "ephemeral"})
    ] * 2
