"""Anthropic-defined client tools (``bash``, the text editor, ``memory``) end to end: the
``anthropic`` SDK declares them by type, the real gateway offers them to a model that does
not know them (the fake, over a Chat Completions and an Anthropic upstream) as function
tools, and the call comes back as a ``tool_use`` block the client runs and answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic import Anthropic

from stateway.launch import start_gateway

EDITOR: dict[str, Any] = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
VIEW = {"command": "view", "path": "/repo/README.md"}


@pytest.fixture(scope="module", params=["chat", "anthropic"])
def claude(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Anthropic]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", request.param, "--database", database]
    with start_gateway(args) as url, Anthropic(base_url=url, api_key="k", max_retries=0) as sdk:
        yield sdk


def test_a_text_editor_call_goes_to_the_client_and_its_result_back_to_the_model(
    claude: Anthropic,
) -> None:
    prompt = f"Read the readme [[tool:str_replace_based_edit_tool:{json.dumps(VIEW)}]]"
    first = claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": prompt}],
        tools=[EDITOR],
    )
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "str_replace_based_edit_tool"
    assert call.input == VIEW

    second = claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.id, "content": "1: # stateway"}
                ],
            },
        ],
        tools=[EDITOR],
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"
    assert second.content[0].text == "Tool said: 1: # stateway"


def test_bash_and_memory_are_offered_under_their_own_names(claude: Anthropic) -> None:
    tools: list[Any] = [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "memory_20250818", "name": "memory"},
    ]
    calls = '[[tool:bash:{"command":"ls"}]] [[tool:memory:{"command":"view","path":"/memories"}]]'
    message = claude.messages.create(
        model="m", max_tokens=1024, messages=[{"role": "user", "content": calls}], tools=tools
    )
    uses = [(block.name, block.input) for block in message.content if block.type == "tool_use"]
    assert uses == [
        ("bash", {"command": "ls"}),
        ("memory", {"command": "view", "path": "/memories"}),
    ]
