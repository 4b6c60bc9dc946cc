"""The real Codex CLI with an MCP server of its own (``mcp_servers.NAME.url``).

Codex runs the MCP server's tools itself and declares each server to the model as the
``namespace`` tool ``mcp__<server>``. A server name long enough that a flattened
``mcp__<server>__<tool>`` runs past the 64 characters strict model APIs take is respelled
by the gateway with a hash of the whole name; the model's call of that spelling must come
back to Codex as the right server's member, so Codex runs it and sends its output back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stateway.core.tools.model_names import FUNCTION_NAME_LENGTH, model_name
from stateway.launch import launch
from tests.clients.codex import run_codex
from tests.clients.offline import OfflineGateway, inside
from tests.support.mcp_server import ANNOUNCEMENT

pytestmark = pytest.mark.clients

STEM = "a_server_whose_name_is_long_enough_to_push_its_tools_past_the_limit"
SERVERS = {f"{STEM}_one": "Bearer key-one", f"{STEM}_two": "Bearer key-two"}
"""Two names alike but for their ends, each with its own key: cut to 64 characters, their
tools' names would meet; the key ``whoami`` answers with tells which server was called."""


@pytest.fixture(scope="module")
def mcp_url(namespace: str) -> Iterator[str]:
    """The test MCP server (the ``mcp`` SDK) inside the namespace, where Codex reaches it."""
    command = inside(namespace, [sys.executable, "-m", "tests.support.mcp_server"])
    with launch(command, ANNOUNCEMENT) as server:
        yield f"{server.url}/mcp"


def test_a_tool_of_a_long_named_mcp_server_is_called_by_its_respelled_name(
    codex_binary: Path, gateway: OfflineGateway, mcp_url: str, tmp_path: Path
) -> None:
    config = tuple(
        f'mcp_servers.{name}={{url="{mcp_url}",required=true,'
        f'http_headers={{Authorization="{key}"}}}}'
        for name, key in SERVERS.items()
    )
    server = f"{STEM}_two"
    called = model_name("whoami", f"mcp__{server}")
    # The context's last two lines (the call and its output) only: the whole transcript
    # (Codex's instructions) is thousands of deltas, and Codex 0.171's exec sometimes
    # reports the turn completed before it has relayed that many (no agent_message).
    prompt = f"Who am I [[tool:{called}:{{}}]] [[tail:2]]"
    run = run_codex(codex_binary, gateway, prompt, "fake-model", tmp_path, config=config)
    log = gateway.gateway_log.read_text()
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{log}"

    first, second = run.bodies()
    declared = {tool["name"] for tool in first["tools"] if tool["type"] == "namespace"}
    assert {f"mcp__{name}" for name in SERVERS} <= declared
    assert len(f"mcp__{server}__whoami") > FUNCTION_NAME_LENGTH
    call, output = second["input"][len(first["input"]) :]
    assert (call["type"], call["namespace"], call["name"]) == (
        "function_call",
        f"mcp__{server}",
        "whoami",
    ), run.describe()
    assert output["type"] == "function_call_output"
    assert output["call_id"] == call["call_id"]
    assert "Bearer key-two" in json.dumps(output["output"])
    # The model's context (the fake's [[tail]]) holds the call as it made it, and the output.
    [message] = run.items("agent_message")
    [seen] = [line for line in message["text"].splitlines() if line.startswith("assistant->")]
    assert seen.startswith(f"assistant->{called}(")
    assert len(called) <= FUNCTION_NAME_LENGTH
    assert "Bearer key-two" in message["text"]
